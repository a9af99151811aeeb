//! `/openapi/v2` in protobuf: the Swagger 2.0 document (JSON) as gnostic's `openapi.v2.Document`
//! message (`github.com/google/gnostic-models/openapiv2/OpenAPIv2.proto`), which upstream's
//! kube-openapi `handler.ToProtoBinary` produces with `openapi_v2.ParseDocument` + `proto.Marshal`
//! and client-go's `OpenAPISchema()` (kubectl's query-parameter verifier, `explain
//! --output=plaintext-openapiv2`, Helm) reads.
//!
//! The messages are described by tables (field name, number, kind), so one walker encodes them all.
//! As gnostic's parser does: keys starting with `x-` become `NamedAny` vendor extensions whose
//! `Any.yaml` is the value as YAML; a key a message does not have is an error (upstream then answers
//! 503); `oneof`s are chosen by the same rules (`$ref` makes a `JsonReference`, `in` picks the
//! parameter kind, a boolean `additionalProperties` the boolean arm); maps keep the JSON's order.
//! Scalars are written as proto3 does: zero values of plain fields are omitted, `oneof` members and
//! present messages are always written.
//!
//! Differences: YAML comes from `serde_yaml_ng`, so its layout (indentation, quoting) may differ from
//! Go's yaml.v3 output while parsing to the same values; `Any.value` (filled only by gnostic's
//! extension plugins, which the API server does not use) is never written.

use apimachinery::serializer::protobuf::wire::{put_bytes, put_key, put_nested, put_varint};
use serde_json::{Map, Value};

/// Why a document cannot be encoded, with the JSON path of the offending value.
#[derive(Debug, thiserror::Error)]
#[error("openapi v2 protobuf: {path}: {message}")]
pub struct EncodeError {
    path: String,
    message: String,
}

impl EncodeError {
    fn new(message: impl Into<String>) -> EncodeError {
        EncodeError {
            path: String::new(),
            message: message.into(),
        }
    }

    /// Prefixes the path with the key or index the failing value was under (built while unwinding,
    /// so a successful encoding pays nothing for it).
    fn within(mut self, key: &str) -> EncodeError {
        self.path = if self.path.is_empty() {
            key.to_string()
        } else {
            format!("{key}.{}", self.path)
        };
        self
    }
}

type Result<T> = std::result::Result<T, EncodeError>;

/// Encodes a Swagger 2.0 document as an `openapi.v2.Document` message.
/// `size_hint`: the expected size (the JSON's is a fair bound), to allocate once.
pub fn encode_document(doc: &Value, size_hint: usize) -> Result<Vec<u8>> {
    let mut out = Vec::with_capacity(size_hint);
    encode_message(&mut out, &DOCUMENT, doc)?;
    Ok(out)
}

/// How a JSON value maps to a field.
enum Kind {
    Str,
    Bool,
    Double,
    Int,
    /// `repeated string`.
    Strings,
    /// An `Any` message holding the value as YAML.
    Any,
    Msg(&'static Msg),
    /// A repeated field from a JSON array, each element of the given kind.
    List(&'static Kind),
    /// A message whose only field is `repeated Named<value> additional_properties = 1`, from a JSON
    /// object: `Definitions`, `Properties`, `Headers`, `Oauth2Scopes`, ...
    Map(&'static Kind),
    /// `StringArray { repeated string value = 1; }` from a JSON array.
    StringArray,
    /// `TypeItem { repeated string value = 1; }` from a string or an array of strings.
    TypeItem,
    /// `ItemsItem { repeated Schema schema = 1; }` from one schema (gnostic accepts no array).
    ItemsItem,
    /// A message made of one `oneof`: the function picks the member (its number and kind).
    OneOf(fn(&Value) -> Result<(u32, &'static Kind)>),
}

/// Which keys are a patterned field, its number, and the kind of its `Named<X>` values.
type Patterned = (fn(&str) -> bool, u32, &'static Kind);

/// A message: its JSON fields in field-number order, the number of its vendor extensions, and the
/// number and value kind of its patterned fields (`Paths`' `/...`, `Responses`' status codes).
struct Msg {
    name: &'static str,
    fields: &'static [(&'static str, u32, Kind)],
    extensions: Option<u32>,
    patterned: Option<Patterned>,
    /// Whether keys outside the above are an error (gnostic checks every message but
    /// `JsonReference`).
    strict: bool,
}

fn encode_message(out: &mut Vec<u8>, msg: &Msg, v: &Value) -> Result<()> {
    let obj = v
        .as_object()
        .ok_or_else(|| EncodeError::new(format!("{} must be an object, not {v}", msg.name)))?;
    if msg.strict {
        for key in obj.keys() {
            let known = msg.fields.iter().any(|(k, _, _)| k == key)
                || (msg.extensions.is_some() && key.starts_with("x-"))
                || msg.patterned.is_some_and(|(matches, _, _)| matches(key));
            if !known {
                return Err(EncodeError::new(format!(
                    "{} has invalid property {key:?}",
                    msg.name
                )));
            }
        }
    }
    // Upstream's Go structs write fields in number order; the extensions and patterned fields are
    // slotted in by their number too.
    let mut extras: Vec<u32> = msg
        .extensions
        .into_iter()
        .chain(msg.patterned.map(|(_, tag, _)| tag))
        .collect();
    extras.sort_unstable();
    let mut extras = extras.into_iter().peekable();
    for (key, tag, kind) in msg.fields {
        while let Some(extra) = extras.next_if(|e| e < tag) {
            encode_extra(out, msg, obj, extra)?;
        }
        if let Some(value) = obj.get(*key) {
            encode_field(out, *tag, kind, value, false).map_err(|e| e.within(key))?;
        }
    }
    for extra in extras {
        encode_extra(out, msg, obj, extra)?;
    }
    Ok(())
}

/// Writes the vendor extensions (`x-...` as `NamedAny`) or the patterned fields numbered `tag`.
fn encode_extra(out: &mut Vec<u8>, msg: &Msg, obj: &Map<String, Value>, tag: u32) -> Result<()> {
    if msg.extensions == Some(tag) {
        for (key, value) in obj.iter().filter(|(k, _)| k.starts_with("x-")) {
            encode_named(out, tag, key, &Kind::Any, value).map_err(|e| e.within(key))?;
        }
    }
    if let Some((matches, ptag, kind)) = msg.patterned.filter(|(_, t, _)| *t == tag) {
        for (key, value) in obj.iter().filter(|(k, _)| matches(k)) {
            encode_named(out, ptag, key, kind, value).map_err(|e| e.within(key))?;
        }
    }
    Ok(())
}

/// A `Named<X> { string name = 1; X value = 2; }` entry.
fn encode_named(out: &mut Vec<u8>, tag: u32, name: &str, kind: &Kind, v: &Value) -> Result<()> {
    put_nested(out, tag, |out| {
        if !name.is_empty() {
            put_bytes(out, 1, name.as_bytes());
        }
        encode_field(out, 2, kind, v, false)
    })
}

/// Writes `v` as field `tag` of kind `kind`. `always` writes zero scalars too (`oneof` members).
fn encode_field(out: &mut Vec<u8>, tag: u32, kind: &Kind, v: &Value, always: bool) -> Result<()> {
    match kind {
        Kind::Str => {
            let s = string(v)?;
            if always || !s.is_empty() {
                put_bytes(out, tag, s.as_bytes());
            }
        }
        Kind::Bool => {
            let b = v
                .as_bool()
                .ok_or_else(|| EncodeError::new(format!("expected a boolean, not {v}")))?;
            if always || b {
                put_key(out, tag, 0);
                put_varint(out, u64::from(b));
            }
        }
        Kind::Double => {
            let f = v
                .as_f64()
                .ok_or_else(|| EncodeError::new(format!("expected a number, not {v}")))?;
            // proto3 omits exactly +0.0 (a negative zero has bits set).
            if always || f.to_bits() != 0 {
                put_key(out, tag, 1);
                out.extend_from_slice(&f.to_bits().to_le_bytes());
            }
        }
        Kind::Int => {
            let i = v
                .as_i64()
                .ok_or_else(|| EncodeError::new(format!("expected an integer, not {v}")))?;
            if always || i != 0 {
                put_key(out, tag, 0);
                // int64: two's complement, negative values take ten bytes.
                put_varint(out, i as u64);
            }
        }
        Kind::Strings => {
            for s in array(v)? {
                put_bytes(out, tag, string(s)?.as_bytes());
            }
        }
        Kind::Any => put_nested(out, tag, |out| {
            let yaml = serde_yaml_ng::to_string(v)
                .map_err(|e| EncodeError::new(format!("cannot write {v} as YAML: {e}")))?;
            put_bytes(out, 2, yaml.as_bytes());
            Ok(())
        })?,
        Kind::Msg(msg) => put_nested(out, tag, |out| encode_message(out, msg, v))?,
        Kind::List(kind) => {
            // Elements are written even when empty, as Go writes every element of a repeated field.
            for (i, item) in array(v)?.iter().enumerate() {
                encode_field(out, tag, kind, item, true).map_err(|e| e.within(&i.to_string()))?;
            }
        }
        Kind::Map(value) => {
            let obj = v
                .as_object()
                .ok_or_else(|| EncodeError::new(format!("expected an object, not {v}")))?;
            put_nested(out, tag, |out| {
                for (key, item) in obj {
                    encode_named(out, 1, key, value, item).map_err(|e| e.within(key))?;
                }
                Ok(())
            })?
        }
        Kind::StringArray => put_nested(out, tag, |out| {
            encode_field(out, 1, &Kind::Strings, v, false)
        })?,
        Kind::TypeItem => put_nested(out, tag, |out| match v {
            Value::Array(_) => encode_field(out, 1, &Kind::Strings, v, false),
            // A single type is one element, written even when empty.
            _ => encode_field(out, 1, &Kind::Str, v, true),
        })?,
        Kind::ItemsItem => put_nested(out, tag, |out| encode_field(out, 1, &SCHEMA_K, v, false))?,
        Kind::OneOf(pick) => put_nested(out, tag, |out| {
            let (member, kind) = pick(v)?;
            encode_field(out, member, kind, v, true)
        })?,
    }
    Ok(())
}

/// A string as gnostic's `StringForScalarNode` reads it: strings, integers as written, null as "".
fn string(v: &Value) -> Result<std::borrow::Cow<'_, str>> {
    match v {
        Value::String(s) => Ok(s.as_str().into()),
        Value::Number(n) if n.is_i64() || n.is_u64() => Ok(n.to_string().into()),
        Value::Null => Ok("".into()),
        other => Err(EncodeError::new(format!("expected a string, not {other}"))),
    }
}

fn array(v: &Value) -> Result<&Vec<Value>> {
    v.as_array()
        .ok_or_else(|| EncodeError::new(format!("expected an array, not {v}")))
}

fn str_field<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

// The oneofs, chosen as gnostic's parser chooses: it tries each member in order and keeps the last
// that parses. `JsonReference` parses whenever `$ref` is present, so it wins then.

fn pick_parameters_item(v: &Value) -> Result<(u32, &'static Kind)> {
    if v.get("$ref").is_some() {
        return Ok((2, &JSON_REFERENCE_K));
    }
    Ok((1, &PARAMETER_K))
}

fn pick_parameter(v: &Value) -> Result<(u32, &'static Kind)> {
    match str_field(v, "in") {
        "body" => Ok((1, &BODY_PARAMETER_K)),
        _ => Ok((2, &NON_BODY_PARAMETER_K)),
    }
}

fn pick_non_body_parameter(v: &Value) -> Result<(u32, &'static Kind)> {
    match str_field(v, "in") {
        "header" => Ok((1, &HEADER_PARAMETER_K)),
        "formData" => Ok((2, &FORM_DATA_PARAMETER_K)),
        "query" => Ok((3, &QUERY_PARAMETER_K)),
        "path" => Ok((4, &PATH_PARAMETER_K)),
        other => Err(EncodeError::new(format!(
            "parameter location {other:?} is none of body, header, formData, query, path"
        ))),
    }
}

fn pick_response_value(v: &Value) -> Result<(u32, &'static Kind)> {
    if v.get("$ref").is_some() {
        return Ok((2, &JSON_REFERENCE_K));
    }
    Ok((1, &RESPONSE_K))
}

fn pick_schema_item(v: &Value) -> Result<(u32, &'static Kind)> {
    let file_keys = |m: &Map<String, Value>| {
        m.keys()
            .all(|k| k.starts_with("x-") || FILE_SCHEMA.fields.iter().any(|(name, _, _)| name == k))
    };
    match v {
        Value::Object(m) if str_field(v, "type") == "file" && file_keys(m) => {
            Ok((2, &FILE_SCHEMA_K))
        }
        _ => Ok((1, &SCHEMA_K)),
    }
}

fn pick_additional_properties(v: &Value) -> Result<(u32, &'static Kind)> {
    match v {
        Value::Bool(_) => Ok((2, &BOOL_K)),
        _ => Ok((1, &SCHEMA_K)),
    }
}

fn pick_security_definition(v: &Value) -> Result<(u32, &'static Kind)> {
    match (str_field(v, "type"), str_field(v, "flow")) {
        ("basic", _) => Ok((1, &BASIC_SECURITY_K)),
        ("apiKey", _) => Ok((2, &API_KEY_SECURITY_K)),
        ("oauth2", "implicit") => Ok((3, &OAUTH2_IMPLICIT_K)),
        ("oauth2", "password") => Ok((4, &OAUTH2_PASSWORD_K)),
        ("oauth2", "application") => Ok((5, &OAUTH2_APPLICATION_K)),
        ("oauth2", "accessCode") => Ok((6, &OAUTH2_ACCESS_CODE_K)),
        (t, f) => Err(EncodeError::new(format!(
            "security definition of type {t:?} (flow {f:?}) is none of basic, apiKey, oauth2"
        ))),
    }
}

fn is_path(key: &str) -> bool {
    key.starts_with('/')
}

fn is_response_code(key: &str) -> bool {
    key == "default" || (key.len() == 3 && key.bytes().all(|b| b.is_ascii_digit()))
}

// The kinds the tables and oneofs refer to, as statics (a reference to a static cannot be promoted).
static STR_K: Kind = Kind::Str;
static BOOL_K: Kind = Kind::Bool;
static ANY_K: Kind = Kind::Any;
static STRING_ARRAY_K: Kind = Kind::StringArray;
const ANYS: Kind = Kind::List(&ANY_K);
static SCHEMA_K: Kind = Kind::Msg(&SCHEMA);
static FILE_SCHEMA_K: Kind = Kind::Msg(&FILE_SCHEMA);
static PATH_ITEM_K: Kind = Kind::Msg(&PATH_ITEM);
static TAG_K: Kind = Kind::Msg(&TAG);
static RESPONSE_K: Kind = Kind::Msg(&RESPONSE);
static HEADER_K: Kind = Kind::Msg(&HEADER);
static JSON_REFERENCE_K: Kind = Kind::Msg(&JSON_REFERENCE);
static BODY_PARAMETER_K: Kind = Kind::Msg(&BODY_PARAMETER);
static HEADER_PARAMETER_K: Kind = Kind::Msg(&HEADER_PARAMETER);
static FORM_DATA_PARAMETER_K: Kind = Kind::Msg(&FORM_DATA_PARAMETER);
static QUERY_PARAMETER_K: Kind = Kind::Msg(&QUERY_PARAMETER);
static PATH_PARAMETER_K: Kind = Kind::Msg(&PATH_PARAMETER);
static SECURITY_REQUIREMENT_K: Kind = Kind::Msg(&SECURITY_REQUIREMENT);
static BASIC_SECURITY_K: Kind = Kind::Msg(&BASIC_SECURITY);
static API_KEY_SECURITY_K: Kind = Kind::Msg(&API_KEY_SECURITY);
static OAUTH2_IMPLICIT_K: Kind = Kind::Msg(&OAUTH2_IMPLICIT);
static OAUTH2_PASSWORD_K: Kind = Kind::Msg(&OAUTH2_PASSWORD);
static OAUTH2_APPLICATION_K: Kind = Kind::Msg(&OAUTH2_APPLICATION);
static OAUTH2_ACCESS_CODE_K: Kind = Kind::Msg(&OAUTH2_ACCESS_CODE);
static PARAMETERS_ITEM_K: Kind = Kind::OneOf(pick_parameters_item);
static PARAMETER_K: Kind = Kind::OneOf(pick_parameter);
static NON_BODY_PARAMETER_K: Kind = Kind::OneOf(pick_non_body_parameter);
static RESPONSE_VALUE_K: Kind = Kind::OneOf(pick_response_value);
static SECURITY_DEFINITION_K: Kind = Kind::OneOf(pick_security_definition);

const fn msg(name: &'static str, fields: &'static [(&'static str, u32, Kind)], ext: u32) -> Msg {
    Msg {
        name,
        fields,
        extensions: Some(ext),
        patterned: None,
        strict: true,
    }
}

static DOCUMENT: Msg = msg(
    "Document",
    &[
        ("swagger", 1, Kind::Str),
        ("info", 2, Kind::Msg(&INFO)),
        ("host", 3, Kind::Str),
        ("basePath", 4, Kind::Str),
        ("schemes", 5, Kind::Strings),
        ("consumes", 6, Kind::Strings),
        ("produces", 7, Kind::Strings),
        ("paths", 8, Kind::Msg(&PATHS)),
        ("definitions", 9, Kind::Map(&SCHEMA_K)),
        ("parameters", 10, Kind::Map(&PARAMETER_K)),
        ("responses", 11, Kind::Map(&RESPONSE_K)),
        ("security", 12, Kind::List(&SECURITY_REQUIREMENT_K)),
        ("securityDefinitions", 13, Kind::Map(&SECURITY_DEFINITION_K)),
        ("tags", 14, Kind::List(&TAG_K)),
        ("externalDocs", 15, Kind::Msg(&EXTERNAL_DOCS)),
    ],
    16,
);

static INFO: Msg = msg(
    "Info",
    &[
        ("title", 1, Kind::Str),
        ("version", 2, Kind::Str),
        ("description", 3, Kind::Str),
        ("termsOfService", 4, Kind::Str),
        ("contact", 5, Kind::Msg(&CONTACT)),
        ("license", 6, Kind::Msg(&LICENSE)),
    ],
    7,
);

static CONTACT: Msg = msg(
    "Contact",
    &[
        ("name", 1, Kind::Str),
        ("url", 2, Kind::Str),
        ("email", 3, Kind::Str),
    ],
    4,
);

static LICENSE: Msg = msg(
    "License",
    &[("name", 1, Kind::Str), ("url", 2, Kind::Str)],
    3,
);

static EXTERNAL_DOCS: Msg = msg(
    "ExternalDocs",
    &[("description", 1, Kind::Str), ("url", 2, Kind::Str)],
    3,
);

static TAG: Msg = msg(
    "Tag",
    &[
        ("name", 1, Kind::Str),
        ("description", 2, Kind::Str),
        ("externalDocs", 3, Kind::Msg(&EXTERNAL_DOCS)),
    ],
    4,
);

static PATHS: Msg = Msg {
    name: "Paths",
    fields: &[],
    extensions: Some(1),
    patterned: Some((is_path, 2, &PATH_ITEM_K)),
    strict: true,
};

static PATH_ITEM: Msg = msg(
    "PathItem",
    &[
        ("$ref", 1, Kind::Str),
        ("get", 2, Kind::Msg(&OPERATION)),
        ("put", 3, Kind::Msg(&OPERATION)),
        ("post", 4, Kind::Msg(&OPERATION)),
        ("delete", 5, Kind::Msg(&OPERATION)),
        ("options", 6, Kind::Msg(&OPERATION)),
        ("head", 7, Kind::Msg(&OPERATION)),
        ("patch", 8, Kind::Msg(&OPERATION)),
        ("parameters", 9, Kind::List(&PARAMETERS_ITEM_K)),
    ],
    10,
);

static OPERATION: Msg = msg(
    "Operation",
    &[
        ("tags", 1, Kind::Strings),
        ("summary", 2, Kind::Str),
        ("description", 3, Kind::Str),
        ("externalDocs", 4, Kind::Msg(&EXTERNAL_DOCS)),
        ("operationId", 5, Kind::Str),
        ("produces", 6, Kind::Strings),
        ("consumes", 7, Kind::Strings),
        ("parameters", 8, Kind::List(&PARAMETERS_ITEM_K)),
        ("responses", 9, Kind::Msg(&RESPONSES)),
        ("schemes", 10, Kind::Strings),
        ("deprecated", 11, Kind::Bool),
        ("security", 12, Kind::List(&SECURITY_REQUIREMENT_K)),
    ],
    13,
);

static JSON_REFERENCE: Msg = Msg {
    name: "JsonReference",
    fields: &[("$ref", 1, Kind::Str), ("description", 2, Kind::Str)],
    extensions: None,
    patterned: None,
    strict: false,
};

static BODY_PARAMETER: Msg = msg(
    "BodyParameter",
    &[
        ("description", 1, Kind::Str),
        ("name", 2, Kind::Str),
        ("in", 3, Kind::Str),
        ("required", 4, Kind::Bool),
        ("schema", 5, Kind::Msg(&SCHEMA)),
    ],
    6,
);

/// The fields shared by header and path parameters (their numbers are the same).
static HEADER_PARAMETER: Msg = msg("HeaderParameterSubSchema", HEADER_OR_PATH_FIELDS, 22);
static PATH_PARAMETER: Msg = msg("PathParameterSubSchema", HEADER_OR_PATH_FIELDS, 22);
static HEADER_OR_PATH_FIELDS: &[(&str, u32, Kind)] = &[
    ("required", 1, Kind::Bool),
    ("in", 2, Kind::Str),
    ("description", 3, Kind::Str),
    ("name", 4, Kind::Str),
    ("type", 5, Kind::Str),
    ("format", 6, Kind::Str),
    ("items", 7, Kind::Msg(&PRIMITIVES_ITEMS)),
    ("collectionFormat", 8, Kind::Str),
    ("default", 9, Kind::Any),
    ("maximum", 10, Kind::Double),
    ("exclusiveMaximum", 11, Kind::Bool),
    ("minimum", 12, Kind::Double),
    ("exclusiveMinimum", 13, Kind::Bool),
    ("maxLength", 14, Kind::Int),
    ("minLength", 15, Kind::Int),
    ("pattern", 16, Kind::Str),
    ("maxItems", 17, Kind::Int),
    ("minItems", 18, Kind::Int),
    ("uniqueItems", 19, Kind::Bool),
    ("enum", 20, ANYS),
    ("multipleOf", 21, Kind::Double),
];

/// Query and form parameters also have `allowEmptyValue` (5), which shifts the later numbers.
static QUERY_PARAMETER: Msg = msg("QueryParameterSubSchema", QUERY_OR_FORM_FIELDS, 23);
static FORM_DATA_PARAMETER: Msg = msg("FormDataParameterSubSchema", QUERY_OR_FORM_FIELDS, 23);
static QUERY_OR_FORM_FIELDS: &[(&str, u32, Kind)] = &[
    ("required", 1, Kind::Bool),
    ("in", 2, Kind::Str),
    ("description", 3, Kind::Str),
    ("name", 4, Kind::Str),
    ("allowEmptyValue", 5, Kind::Bool),
    ("type", 6, Kind::Str),
    ("format", 7, Kind::Str),
    ("items", 8, Kind::Msg(&PRIMITIVES_ITEMS)),
    ("collectionFormat", 9, Kind::Str),
    ("default", 10, Kind::Any),
    ("maximum", 11, Kind::Double),
    ("exclusiveMaximum", 12, Kind::Bool),
    ("minimum", 13, Kind::Double),
    ("exclusiveMinimum", 14, Kind::Bool),
    ("maxLength", 15, Kind::Int),
    ("minLength", 16, Kind::Int),
    ("pattern", 17, Kind::Str),
    ("maxItems", 18, Kind::Int),
    ("minItems", 19, Kind::Int),
    ("uniqueItems", 20, Kind::Bool),
    ("enum", 21, ANYS),
    ("multipleOf", 22, Kind::Double),
];

/// `PrimitivesItems`; `Header` has the same fields and numbers plus `description` (18).
static PRIMITIVES_ITEMS: Msg = msg("PrimitivesItems", PRIMITIVE_FIELDS, 18);
static HEADER: Msg = msg("Header", HEADER_FIELDS, 19);
static PRIMITIVE_FIELDS: &[(&str, u32, Kind)] = &[
    ("type", 1, Kind::Str),
    ("format", 2, Kind::Str),
    ("items", 3, Kind::Msg(&PRIMITIVES_ITEMS)),
    ("collectionFormat", 4, Kind::Str),
    ("default", 5, Kind::Any),
    ("maximum", 6, Kind::Double),
    ("exclusiveMaximum", 7, Kind::Bool),
    ("minimum", 8, Kind::Double),
    ("exclusiveMinimum", 9, Kind::Bool),
    ("maxLength", 10, Kind::Int),
    ("minLength", 11, Kind::Int),
    ("pattern", 12, Kind::Str),
    ("maxItems", 13, Kind::Int),
    ("minItems", 14, Kind::Int),
    ("uniqueItems", 15, Kind::Bool),
    ("enum", 16, ANYS),
    ("multipleOf", 17, Kind::Double),
];
static HEADER_FIELDS: &[(&str, u32, Kind)] = &[
    ("type", 1, Kind::Str),
    ("format", 2, Kind::Str),
    ("items", 3, Kind::Msg(&PRIMITIVES_ITEMS)),
    ("collectionFormat", 4, Kind::Str),
    ("default", 5, Kind::Any),
    ("maximum", 6, Kind::Double),
    ("exclusiveMaximum", 7, Kind::Bool),
    ("minimum", 8, Kind::Double),
    ("exclusiveMinimum", 9, Kind::Bool),
    ("maxLength", 10, Kind::Int),
    ("minLength", 11, Kind::Int),
    ("pattern", 12, Kind::Str),
    ("maxItems", 13, Kind::Int),
    ("minItems", 14, Kind::Int),
    ("uniqueItems", 15, Kind::Bool),
    ("enum", 16, ANYS),
    ("multipleOf", 17, Kind::Double),
    ("description", 18, Kind::Str),
];

static RESPONSES: Msg = Msg {
    name: "Responses",
    fields: &[],
    extensions: Some(2),
    patterned: Some((is_response_code, 1, &RESPONSE_VALUE_K)),
    strict: true,
};

static RESPONSE: Msg = msg(
    "Response",
    &[
        ("description", 1, Kind::Str),
        ("schema", 2, Kind::OneOf(pick_schema_item)),
        ("headers", 3, Kind::Map(&HEADER_K)),
        ("examples", 4, Kind::Map(&ANY_K)),
    ],
    5,
);

static FILE_SCHEMA: Msg = msg(
    "FileSchema",
    &[
        ("format", 1, Kind::Str),
        ("title", 2, Kind::Str),
        ("description", 3, Kind::Str),
        ("default", 4, Kind::Any),
        ("required", 5, Kind::Strings),
        ("type", 6, Kind::Str),
        ("readOnly", 7, Kind::Bool),
        ("externalDocs", 8, Kind::Msg(&EXTERNAL_DOCS)),
        ("example", 9, Kind::Any),
    ],
    10,
);

static SCHEMA: Msg = msg(
    "Schema",
    &[
        ("$ref", 1, Kind::Str),
        ("format", 2, Kind::Str),
        ("title", 3, Kind::Str),
        ("description", 4, Kind::Str),
        ("default", 5, Kind::Any),
        ("multipleOf", 6, Kind::Double),
        ("maximum", 7, Kind::Double),
        ("exclusiveMaximum", 8, Kind::Bool),
        ("minimum", 9, Kind::Double),
        ("exclusiveMinimum", 10, Kind::Bool),
        ("maxLength", 11, Kind::Int),
        ("minLength", 12, Kind::Int),
        ("pattern", 13, Kind::Str),
        ("maxItems", 14, Kind::Int),
        ("minItems", 15, Kind::Int),
        ("uniqueItems", 16, Kind::Bool),
        ("maxProperties", 17, Kind::Int),
        ("minProperties", 18, Kind::Int),
        ("required", 19, Kind::Strings),
        ("enum", 20, ANYS),
        (
            "additionalProperties",
            21,
            Kind::OneOf(pick_additional_properties),
        ),
        ("type", 22, Kind::TypeItem),
        ("items", 23, Kind::ItemsItem),
        ("allOf", 24, Kind::List(&SCHEMA_K)),
        ("properties", 25, Kind::Map(&SCHEMA_K)),
        ("discriminator", 26, Kind::Str),
        ("readOnly", 27, Kind::Bool),
        ("xml", 28, Kind::Msg(&XML)),
        ("externalDocs", 29, Kind::Msg(&EXTERNAL_DOCS)),
        ("example", 30, Kind::Any),
    ],
    31,
);

static XML: Msg = msg(
    "Xml",
    &[
        ("name", 1, Kind::Str),
        ("namespace", 2, Kind::Str),
        ("prefix", 3, Kind::Str),
        ("attribute", 4, Kind::Bool),
        ("wrapped", 5, Kind::Bool),
    ],
    6,
);

/// `SecurityRequirement { repeated NamedStringArray additional_properties = 1; }`.
static SECURITY_REQUIREMENT: Msg = Msg {
    name: "SecurityRequirement",
    fields: &[],
    extensions: None,
    patterned: Some((|_| true, 1, &STRING_ARRAY_K)),
    strict: true,
};

static BASIC_SECURITY: Msg = msg(
    "BasicAuthenticationSecurity",
    &[("type", 1, Kind::Str), ("description", 2, Kind::Str)],
    3,
);

static API_KEY_SECURITY: Msg = msg(
    "ApiKeySecurity",
    &[
        ("type", 1, Kind::Str),
        ("name", 2, Kind::Str),
        ("in", 3, Kind::Str),
        ("description", 4, Kind::Str),
    ],
    5,
);

const SCOPES: Kind = Kind::Map(&STR_K);

static OAUTH2_IMPLICIT: Msg = msg(
    "Oauth2ImplicitSecurity",
    &[
        ("type", 1, Kind::Str),
        ("flow", 2, Kind::Str),
        ("scopes", 3, SCOPES),
        ("authorizationUrl", 4, Kind::Str),
        ("description", 5, Kind::Str),
    ],
    6,
);

static OAUTH2_PASSWORD: Msg = msg(
    "Oauth2PasswordSecurity",
    &[
        ("type", 1, Kind::Str),
        ("flow", 2, Kind::Str),
        ("scopes", 3, SCOPES),
        ("tokenUrl", 4, Kind::Str),
        ("description", 5, Kind::Str),
    ],
    6,
);

static OAUTH2_APPLICATION: Msg = msg(
    "Oauth2ApplicationSecurity",
    &[
        ("type", 1, Kind::Str),
        ("flow", 2, Kind::Str),
        ("scopes", 3, SCOPES),
        ("tokenUrl", 4, Kind::Str),
        ("description", 5, Kind::Str),
    ],
    6,
);

static OAUTH2_ACCESS_CODE: Msg = msg(
    "Oauth2AccessCodeSecurity",
    &[
        ("type", 1, Kind::Str),
        ("flow", 2, Kind::Str),
        ("scopes", 3, SCOPES),
        ("authorizationUrl", 4, Kind::Str),
        ("tokenUrl", 5, Kind::Str),
        ("description", 6, Kind::Str),
    ],
    7,
);

#[cfg(test)]
mod tests {
    use super::*;

    /// Every message's numbers are distinct and its fields listed in number order (the order Go
    /// writes them in), extensions and patterned fields included.
    #[test]
    fn tables_list_distinct_numbers_in_order() {
        let all: &[&Msg] = &[
            &DOCUMENT,
            &INFO,
            &CONTACT,
            &LICENSE,
            &EXTERNAL_DOCS,
            &TAG,
            &PATHS,
            &PATH_ITEM,
            &OPERATION,
            &JSON_REFERENCE,
            &BODY_PARAMETER,
            &HEADER_PARAMETER,
            &PATH_PARAMETER,
            &QUERY_PARAMETER,
            &FORM_DATA_PARAMETER,
            &PRIMITIVES_ITEMS,
            &HEADER,
            &RESPONSES,
            &RESPONSE,
            &FILE_SCHEMA,
            &SCHEMA,
            &XML,
            &SECURITY_REQUIREMENT,
            &BASIC_SECURITY,
            &API_KEY_SECURITY,
            &OAUTH2_IMPLICIT,
            &OAUTH2_PASSWORD,
            &OAUTH2_APPLICATION,
            &OAUTH2_ACCESS_CODE,
        ];
        for msg in all {
            let tags: Vec<u32> = msg.fields.iter().map(|(_, t, _)| *t).collect();
            assert!(
                tags.windows(2).all(|w| w[0] < w[1]),
                "{}: {tags:?}",
                msg.name
            );
            for extra in msg
                .extensions
                .iter()
                .chain(msg.patterned.as_ref().map(|p| &p.1))
            {
                assert!(!tags.contains(extra), "{}: {extra}", msg.name);
            }
            // Fields are numbered from 1 without gaps in gnostic's messages.
            let mut every: Vec<u32> = tags.clone();
            every.extend(msg.extensions);
            every.extend(msg.patterned.map(|p| p.1));
            every.sort_unstable();
            assert!(
                every.iter().enumerate().all(|(i, t)| *t == i as u32 + 1),
                "{}: {every:?}",
                msg.name
            );
        }
    }

    #[test]
    fn a_small_document_is_encoded_byte_for_byte() {
        let doc = serde_json::json!({
            "swagger": "2.0",
            "info": {"title": "K", "version": "1"},
            "x-a": "b",
        });
        let want: &[u8] = &[
            0x0a, 3, b'2', b'.', b'0', // swagger (1)
            0x12, 6, 0x0a, 1, b'K', 0x12, 1, b'1', // info (2) { title, version }
            0x82, 0x01, 11, // vendor_extension (16): NamedAny {
            0x0a, 3, b'x', b'-', b'a', //   name
            0x12, 4, 0x12, 2, b'b',
            b'\n', //   value: Any { yaml (2) } }, YAML ending in a newline as Go's
        ];
        let got = encode_document(&doc, 0).unwrap();
        assert_eq!(got, want);
    }
}
