//! The message table of upstream's `generated.proto` files (every built-in kind and the meta types),
//! loaded once from `schema.txt`, which `scripts/gen-protobuf-schema.py` writes from the k8s-pb crate
//! (tags, wire types) and k8s-openapi (JSON names).

use std::collections::HashMap;
use std::sync::LazyLock;

/// Index of a message in [`Schema::messages`].
pub type MessageId = usize;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scalar {
    String,
    Bool,
    Int32,
    Int64,
    Uint32,
    Uint64,
    Double,
    Float,
    Bytes,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldType {
    Scalar(Scalar),
    Message(MessageId),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Label {
    Optional,
    Repeated,
    /// A Go struct embedded with `json:",inline"`: a nested message on the wire, flattened in JSON.
    Inline,
    /// `map<key, value>`: `ty` is the value type.
    Map(Scalar),
}

#[derive(Debug)]
pub struct Field {
    pub tag: u32,
    pub json: String,
    pub label: Label,
    pub ty: FieldType,
    /// A Go pointer (`*int32`, `*bool`, ...): its zero value is meaningful and kept when decoding.
    pub pointer: bool,
}

/// Messages whose JSON form is not an object of their fields (custom `MarshalJSON` upstream).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Special {
    /// `metav1.Time`: an RFC 3339 string with seconds precision.
    Time,
    /// `metav1.MicroTime`: an RFC 3339 string with microseconds.
    MicroTime,
    /// `metav1.Duration`: a Go duration string ("1h2m3s").
    Duration,
    /// `resource.Quantity`: its string.
    Quantity,
    /// `intstr.IntOrString`: a number or a string.
    IntOrString,
    /// `runtime.RawExtension`, `metav1.FieldsV1`, `apiextensions.JSON`: embedded JSON bytes.
    RawJson,
    /// A named Go slice (`metav1.Verbs`, `ExtraValue`): a message of one repeated `items` field.
    Items,
    /// `JSONSchemaPropsOrArray`: a schema object or an array of schemas.
    SchemaOrArray,
    /// `JSONSchemaPropsOrBool`: a boolean or a schema object.
    SchemaOrBool,
    /// `JSONSchemaPropsOrStringArray`: a schema object or an array of strings.
    SchemaOrStringArray,
}

#[derive(Debug)]
pub struct Message {
    pub name: String,
    /// In declaration order: the order of the Go struct, which upstream's JSON follows.
    pub fields: Vec<Field>,
    /// Indexes into `fields` in ascending tag order, the order upstream writes them on the wire.
    pub tag_order: Vec<usize>,
    pub special: Option<Special>,
}

impl Message {
    /// The index (in `fields`) of the field with this tag.
    pub fn field_by_tag(&self, tag: u32) -> Option<usize> {
        self.tag_order
            .binary_search_by_key(&tag, |&i| self.fields[i].tag)
            .ok()
            .map(|i| self.tag_order[i])
    }

    pub fn field_by_json(&self, json: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.json == json)
    }
}

#[derive(Debug)]
pub struct Schema {
    pub messages: Vec<Message>,
    by_name: HashMap<String, MessageId>,
    kinds: HashMap<(String, String), MessageId>,
    /// Meta kinds every group version serves (`metav1.AddToGroupVersion`): Status, DeleteOptions, ...
    meta_kinds: HashMap<String, MessageId>,
}

const SCHEMA_TEXT: &str = include_str!("schema.txt");
/// `<message> <jsonName>` of every Go pointer scalar field, read from upstream's types.go files.
const POINTERS_TEXT: &str = include_str!("pointers.txt");

/// The meta kinds upstream registers in every group version, and the message of each.
const META_KINDS: &[(&str, &str)] = &[
    ("Status", "apimachinery.pkg.apis.meta.v1.Status"),
    (
        "DeleteOptions",
        "apimachinery.pkg.apis.meta.v1.DeleteOptions",
    ),
    (
        "CreateOptions",
        "apimachinery.pkg.apis.meta.v1.CreateOptions",
    ),
    (
        "UpdateOptions",
        "apimachinery.pkg.apis.meta.v1.UpdateOptions",
    ),
    ("PatchOptions", "apimachinery.pkg.apis.meta.v1.PatchOptions"),
    ("GetOptions", "apimachinery.pkg.apis.meta.v1.GetOptions"),
    ("ListOptions", "apimachinery.pkg.apis.meta.v1.ListOptions"),
    ("WatchEvent", "apimachinery.pkg.apis.meta.v1.WatchEvent"),
    ("APIVersions", "apimachinery.pkg.apis.meta.v1.APIVersions"),
    ("APIGroupList", "apimachinery.pkg.apis.meta.v1.APIGroupList"),
    ("APIGroup", "apimachinery.pkg.apis.meta.v1.APIGroup"),
    (
        "APIResourceList",
        "apimachinery.pkg.apis.meta.v1.APIResourceList",
    ),
    (
        "PartialObjectMetadata",
        "apimachinery.pkg.apis.meta.v1.PartialObjectMetadata",
    ),
    (
        "PartialObjectMetadataList",
        "apimachinery.pkg.apis.meta.v1.PartialObjectMetadataList",
    ),
];

/// Kinds with a message but no `Resource` impl in k8s-pb (served documents rather than resources).
const EXTRA_KINDS: &[(&str, &str, &str)] = &[
    (
        "apidiscovery.k8s.io/v2",
        "APIGroupDiscoveryList",
        "api.apidiscovery.v2.APIGroupDiscoveryList",
    ),
    (
        "apidiscovery.k8s.io/v2beta1",
        "APIGroupDiscoveryList",
        "api.apidiscovery.v2beta1.APIGroupDiscoveryList",
    ),
    // Kinds of subresources (not resources of their own, so not in k8s-pb's resource list), which
    // client-go sends in protobuf: `kubectl create token`, evictions (`kubectl drain`), scale.
    (
        "authentication.k8s.io/v1",
        "TokenRequest",
        "api.authentication.v1.TokenRequest",
    ),
    ("policy/v1", "Eviction", "api.policy.v1.Eviction"),
    ("policy/v1beta1", "Eviction", "api.policy.v1beta1.Eviction"),
    ("autoscaling/v1", "Scale", "api.autoscaling.v1.Scale"),
];

const SPECIALS: &[(&str, Special)] = &[
    ("apimachinery.pkg.apis.meta.v1.Time", Special::Time),
    (
        "apimachinery.pkg.apis.meta.v1.MicroTime",
        Special::MicroTime,
    ),
    ("apimachinery.pkg.apis.meta.v1.Duration", Special::Duration),
    ("apimachinery.pkg.api.resource.Quantity", Special::Quantity),
    (
        "apimachinery.pkg.api.resource.QuantityValue",
        Special::Quantity,
    ),
    (
        "apimachinery.pkg.util.intstr.IntOrString",
        Special::IntOrString,
    ),
    ("apimachinery.pkg.runtime.RawExtension", Special::RawJson),
    ("apimachinery.pkg.apis.meta.v1.FieldsV1", Special::RawJson),
];

fn special_of(name: &str, fields: &[Field]) -> Option<Special> {
    if let Some((_, s)) = SPECIALS.iter().find(|(n, _)| *n == name) {
        return Some(*s);
    }
    let short = name.rsplit('.').next().unwrap_or(name);
    if name.starts_with("apiextensions_apiserver.") {
        match short {
            "Json" | "JSON" => return Some(Special::RawJson),
            "JsonSchemaPropsOrArray" => return Some(Special::SchemaOrArray),
            "JsonSchemaPropsOrBool" => return Some(Special::SchemaOrBool),
            "JsonSchemaPropsOrStringArray" => return Some(Special::SchemaOrStringArray),
            _ => {}
        }
    }
    // A Go named slice type becomes a message of one repeated field called `items` (which a struct
    // with one `items` field, like `DownwardAPIProjection`, also is: hence the names).
    if matches!(short, "Verbs" | "ExtraValue")
        && fields.len() == 1
        && fields[0].label == Label::Repeated
    {
        return Some(Special::Items);
    }
    None
}

fn scalar(name: &str) -> Option<Scalar> {
    Some(match name {
        "string" => Scalar::String,
        "bool" => Scalar::Bool,
        "int32" => Scalar::Int32,
        "int64" => Scalar::Int64,
        "uint32" => Scalar::Uint32,
        "uint64" => Scalar::Uint64,
        "double" => Scalar::Double,
        "float" => Scalar::Float,
        "bytes" => Scalar::Bytes,
        _ => return None,
    })
}

impl Schema {
    /// Parses the table; panics only on a malformed generated file (a build defect, caught by tests).
    fn parse(text: &str, pointers: &str) -> Schema {
        let pointers: std::collections::HashSet<(&str, &str)> = pointers
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| l.trim().split_once(' '))
            .collect();
        struct RawField<'a> {
            tag: u32,
            json: &'a str,
            label: &'a str,
            ty: &'a str,
            map_value: Option<&'a str>,
        }
        let mut raw: Vec<(&str, Vec<RawField>)> = Vec::new();
        let mut kinds_raw = Vec::new();
        for line in text.lines() {
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            let parts: Vec<&str> = line.split(' ').collect();
            match parts[0] {
                "message" => raw.push((parts[1], Vec::new())),
                "kind" => kinds_raw.push((parts[1], parts[2], parts[3])),
                tag => {
                    let (_, fields) = raw.last_mut().expect("field before message");
                    let map = parts[2] == "m";
                    fields.push(RawField {
                        tag: tag.parse().expect("field tag"),
                        json: parts[1],
                        label: parts[2],
                        ty: parts[3],
                        map_value: map.then(|| parts[4]),
                    });
                }
            }
        }
        let by_name: HashMap<String, MessageId> = raw
            .iter()
            .enumerate()
            .map(|(i, (name, _))| (name.to_string(), i))
            .collect();
        let resolve = |ty: &str| -> FieldType {
            match scalar(ty) {
                Some(s) => FieldType::Scalar(s),
                None => FieldType::Message(
                    *by_name
                        .get(ty)
                        .unwrap_or_else(|| panic!("unknown message {ty}")),
                ),
            }
        };
        let messages = raw
            .iter()
            .map(|(name, raw_fields)| {
                let fields: Vec<Field> = raw_fields
                    .iter()
                    .map(|f| {
                        let (label, ty) = match f.map_value {
                            Some(value) => (
                                Label::Map(scalar(f.ty).expect("map key type")),
                                resolve(value),
                            ),
                            None => (
                                match f.label {
                                    "r" => Label::Repeated,
                                    "i" => Label::Inline,
                                    _ => Label::Optional,
                                },
                                resolve(f.ty),
                            ),
                        };
                        Field {
                            tag: f.tag,
                            json: f.json.to_string(),
                            label,
                            ty,
                            pointer: pointers.contains(&(*name, f.json)),
                        }
                    })
                    .collect();
                let mut tag_order: Vec<usize> = (0..fields.len()).collect();
                tag_order.sort_by_key(|&i| fields[i].tag);
                let special = special_of(name, &fields);
                Message {
                    name: name.to_string(),
                    fields,
                    tag_order,
                    special,
                }
            })
            .collect();
        let kinds = kinds_raw
            .iter()
            .chain(EXTRA_KINDS)
            .map(|(api_version, kind, message)| {
                (
                    (api_version.to_string(), kind.to_string()),
                    by_name[*message],
                )
            })
            .collect();
        let meta_kinds = META_KINDS
            .iter()
            .map(|(kind, message)| (kind.to_string(), by_name[*message]))
            .collect();
        Schema {
            messages,
            by_name,
            kinds,
            meta_kinds,
        }
    }

    pub fn message(&self, id: MessageId) -> &Message {
        &self.messages[id]
    }

    pub fn by_name(&self, name: &str) -> Option<MessageId> {
        self.by_name.get(name).copied()
    }

    /// The message of a kind: a built-in kind of that group version, or a meta kind (which every group
    /// version serves).
    pub fn kind(&self, api_version: &str, kind: &str) -> Option<MessageId> {
        self.kinds
            .get(&(api_version.to_string(), kind.to_string()))
            .or_else(|| self.meta_kinds.get(kind))
            .copied()
    }

    /// Every (apiVersion, kind) with a message, for tests and discovery.
    pub fn kinds(&self) -> impl Iterator<Item = (&str, &str, MessageId)> {
        self.kinds
            .iter()
            .map(|((v, k), id)| (v.as_str(), k.as_str(), *id))
    }
}

pub static SCHEMA: LazyLock<Schema> = LazyLock::new(|| Schema::parse(SCHEMA_TEXT, POINTERS_TEXT));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_loads_and_knows_the_core_kinds() {
        let s = &*SCHEMA;
        let pod = s.message(s.kind("v1", "Pod").unwrap());
        assert_eq!(pod.name, "api.core.v1.Pod");
        let names: Vec<&str> = pod.fields.iter().map(|f| f.json.as_str()).collect();
        assert_eq!(names, ["metadata", "spec", "status"]);
        let status = s.message(s.by_name("api.core.v1.PodStatus").unwrap());
        assert!(status.fields.iter().any(|f| f.json == "podIPs"));
        assert!(status.fields.iter().any(|f| f.json == "hostIP"));
        let selector = s.message(s.by_name("api.core.v1.ConfigMapKeySelector").unwrap());
        assert_eq!(selector.fields[0].label, Label::Inline);
        let container = s.message(s.by_name("api.core.v1.Container").unwrap());
        let env_from = container.field_by_tag(19).unwrap();
        assert_eq!(container.fields[env_from].json, "envFrom");
        assert!(container.field_by_tag(1000).is_none());
        assert_eq!(
            s.message(s.kind("apps/v1", "DeleteOptions").unwrap()).name,
            "apimachinery.pkg.apis.meta.v1.DeleteOptions"
        );
        assert_eq!(
            s.message(s.by_name("apimachinery.pkg.apis.meta.v1.Verbs").unwrap())
                .special,
            Some(Special::Items)
        );
        assert!(s.kind("coordination.k8s.io/v1", "LeaseList").is_some());
        assert!(s.kind("example.com/v1", "Widget").is_none());
    }
}
