//! OpenAPI (upstream `k8s.io/kube-openapi/pkg/handler3` and `handler`): `/openapi/v3`, the root listing
//! one document per group version with its hash, `/openapi/v3/<api/v1 | apis/<group>/<version>>`, and
//! `/openapi/v2`, one Swagger 2.0 document for every group version.
//!
//! Each document has the paths of every served resource with their operations
//! (`x-kubernetes-group-version-kind`, `x-kubernetes-action`, query parameters, bodies and responses
//! referring to the kinds) and the definitions reachable from them: for built-in kinds generated from
//! the `k8s-openapi` types with upstream's names (`io.k8s.api.core.v1.Pod`), the GVK extension on each
//! kind and the strategic merge patch tags on list fields; for custom resources the CRD's
//! `openAPIV3Schema` of the served version (or an object preserving unknown fields). kubectl reads them
//! for `explain`, for client-side validation, and to learn that the server validates fields itself
//! (`fieldValidation` on PATCH).
//!
//! Documents are built on first request and kept, keyed by a hash of what they describe, until that
//! changes: one per group version and one for v2.
//!
//! `/openapi/v2` is served in JSON or, for client-go's `OpenAPISchema()`, in gnostic's protobuf form
//! ([`protobuf`]); its schemas are in their Swagger 2.0 form ([`v2`]), custom resources' converted as
//! upstream converts them.
//!
//! Differences: the `x-kubernetes-list-type` / `-map-type` / `-list-map-keys` extensions and
//! `default: {}` markers are not published (the `k8s-openapi` schemas do not carry them); custom
//! resources' schemas are published in v3 as written in the CRD (upstream also adds the fields of
//! embedded resources there).

pub mod handler;
mod kinds;
mod paths;
pub mod protobuf;
#[cfg(test)]
mod protobuf_tests;
#[cfg(test)]
mod tests;
mod v2;

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::SystemTime;

use apimachinery::resources::{Resource, Snapshot};
use bytes::Bytes;
use serde_json::{json, Map, Value};

use kinds::{Base, DEFS, OBJECT_META};
use paths::{Format, Names};

/// The `openAPIV3Schema` of the served versions of custom resources, read from their CRDs.
#[derive(Clone, Debug, Default)]
pub struct CustomSchemas(BTreeMap<(String, String, String), Value>);

impl CustomSchemas {
    /// From the CRDs (JSON), e.g. those of the watch cache.
    pub fn from_crds<'a>(crds: impl IntoIterator<Item = &'a [u8]>) -> CustomSchemas {
        let mut out = BTreeMap::new();
        for raw in crds {
            let Ok(crd) = serde_json::from_slice::<Value>(raw) else {
                continue;
            };
            let spec = &crd["spec"];
            let (Some(group), Some(kind)) = (
                spec["group"].as_str(),
                spec.pointer("/names/kind").and_then(Value::as_str),
            ) else {
                continue;
            };
            for v in spec["versions"].as_array().into_iter().flatten() {
                let schema = v
                    .pointer("/schema/openAPIV3Schema")
                    .filter(|s| s.is_object());
                if let (Some(version), Some(schema)) = (v["name"].as_str(), schema) {
                    let key = (group.to_string(), version.to_string(), kind.to_string());
                    out.insert(key, schema.clone());
                }
            }
        }
        CustomSchemas(out)
    }

    fn get(&self, r: &Resource) -> Option<&Value> {
        if !r.custom {
            return None;
        }
        self.0
            .get(&(r.group.clone(), r.version.clone(), r.kind.clone()))
    }
}

/// A built document: its JSON, the hash it was built for, its entity tag and build time, and its
/// other encodings, made on first request and kept with it.
#[derive(Clone, Debug)]
pub struct Document {
    pub body: Bytes,
    pub hash: String,
    /// The `ETag` (unquoted): for v2, as upstream, the SHA-512 of the JSON in upper-case hex.
    pub etag: String,
    /// When it was built (`Last-Modified`).
    pub built: SystemTime,
    encodings: Arc<Encodings>,
}

#[derive(Debug, Default)]
struct Encodings {
    protobuf: OnceLock<Result<Bytes, String>>,
    gzip_json: OnceLock<Bytes>,
    gzip_protobuf: OnceLock<Bytes>,
}

impl Document {
    fn new(body: Bytes, hash: String, etag: String) -> Document {
        Document {
            body,
            hash,
            etag,
            built: SystemTime::now(),
            encodings: Arc::default(),
        }
    }

    /// The v2 document as gnostic's `openapi_v2.Document` message, or why it cannot be (upstream
    /// answers 503 then). Made from the JSON, as upstream's `ToProtoBinary`.
    pub fn protobuf(&self) -> Result<Bytes, String> {
        self.encodings
            .protobuf
            .get_or_init(|| {
                let doc: Value = serde_json::from_slice(&self.body).map_err(|e| e.to_string())?;
                protobuf::encode_document(&doc, self.body.len())
                    .map(Bytes::from)
                    .map_err(|e| e.to_string())
            })
            .clone()
    }

    /// `bytes` (the JSON or the protobuf form of this document) gzip-compressed, kept after the first
    /// time.
    pub fn gzipped(&self, protobuf: bool, bytes: &Bytes) -> Bytes {
        let cell = if protobuf {
            &self.encodings.gzip_protobuf
        } else {
            &self.encodings.gzip_json
        };
        cell.get_or_init(|| handler::gzip(bytes)).clone()
    }
}

/// Upstream's v2 entity tag: the SHA-512 of the JSON, in upper-case hex.
fn sha512_etag(body: &[u8]) -> String {
    use std::fmt::Write;
    let digest = ring::digest::digest(&ring::digest::SHA512, body);
    digest
        .as_ref()
        .iter()
        .fold(String::with_capacity(128), |mut s, b| {
            let _ = write!(s, "{b:02X}");
            s
        })
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

fn parse_gv_path(path: &str) -> Option<(String, String)> {
    match path
        .trim_matches('/')
        .split('/')
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["api", v] => Some((String::new(), v.to_string())),
        ["apis", g, v] => Some((g.to_string(), v.to_string())),
        _ => None,
    }
}

/// A fingerprint of the built-in definitions, so that documents of another build differ in hash.
fn base_fingerprint() -> u64 {
    static FINGERPRINT: OnceLock<u64> = OnceLock::new();
    *FINGERPRINT.get_or_init(|| {
        let mut h = DefaultHasher::new();
        serde_json::to_string(&kinds::base().defs)
            .unwrap_or_default()
            .hash(&mut h);
        h.finish()
    })
}

/// A stable hash of a group version's resources and schemas, used as the documents' cache key.
fn gv_hash(snap: &Snapshot, custom: &CustomSchemas, group: &str, version: &str) -> String {
    let mut h = DefaultHasher::new();
    base_fingerprint().hash(&mut h);
    for r in snap.group_version(group, version) {
        (
            &r.plural,
            &r.kind,
            r.namespaced,
            &r.verbs,
            &r.subresources,
            r.custom,
        )
            .hash(&mut h);
        if let Some(schema) = custom.get(&r) {
            schema.to_string().hash(&mut h);
        }
    }
    format!("{:016X}", h.finish())
}

/// The built documents, by `v2` or `v3/<gv path>`.
static CACHE: Mutex<BTreeMap<String, Document>> = Mutex::new(BTreeMap::new());

fn cached(
    key: &str,
    hash: String,
    etag: fn(&[u8], &str) -> String,
    build: impl FnOnce() -> Value,
) -> Document {
    if let Some(doc) = CACHE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(key)
        .filter(|d| d.hash == hash)
    {
        return doc.clone();
    }
    let body = Bytes::from(serde_json::to_vec(&build()).unwrap_or_default());
    let etag = etag(&body, &hash);
    let doc = Document::new(body, hash, etag);
    CACHE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key.to_string(), doc.clone());
    doc
}

/// `GET /openapi/v3`.
pub fn root(snap: &Snapshot, custom: &CustomSchemas) -> Value {
    let mut paths = Map::new();
    for (group, versions) in &snap.groups {
        for version in versions {
            let p = gv_path(group, version);
            let url = format!(
                "/openapi/v3/{p}?hash={}",
                gv_hash(snap, custom, group, version)
            );
            paths.insert(p, json!({"serverRelativeURL": url}));
        }
    }
    // Forget the documents of group versions no longer served.
    CACHE
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .retain(|k, _| k == "v2" || paths.contains_key(k.trim_start_matches("v3/")));
    json!({"paths": paths})
}

/// `GET /openapi/v3/<api/v1 | apis/<group>/<version>>`; None for an unknown group version.
pub fn group_version(snap: &Snapshot, custom: &CustomSchemas, path: &str) -> Option<Document> {
    let (group, version) = parse_gv_path(path)?;
    let resources = snap.group_version(&group, &version);
    if resources.is_empty() {
        return None;
    }
    let hash = gv_hash(snap, custom, &group, &version);
    let key = format!("v3/{}", gv_path(&group, &version));
    Some(cached(
        &key,
        hash,
        |_, hash| hash.to_string(),
        || {
            let (paths, defs) = build(&[(group, version, resources)], custom, Format::V3);
            let mut doc = json!({
                "openapi": "3.0.0",
                "info": {"title": "Kubernetes", "version": "v1.36.0"},
                "paths": paths,
                "components": {"schemas": defs},
            });
            to_v3(&mut doc);
            doc
        },
    ))
}

/// `GET /openapi/v2`: every group version in one Swagger 2.0 document.
pub fn v2(snap: &Snapshot, custom: &CustomSchemas) -> Document {
    let mut h = DefaultHasher::new();
    let mut gvs = Vec::new();
    for (group, versions) in &snap.groups {
        for version in versions {
            gv_hash(snap, custom, group, version).hash(&mut h);
            gvs.push((
                group.clone(),
                version.clone(),
                snap.group_version(group, version),
            ));
        }
    }
    let etag = |body: &[u8], _: &str| sha512_etag(body);
    cached("v2", format!("{:016X}", h.finish()), etag, || {
        let (paths, mut defs) = build(&gvs, custom, Format::V2);
        defs.values_mut().for_each(v2::swagger_schema);
        json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": "v1.36.0"},
            "paths": paths,
            "definitions": defs,
            // As upstream: bearer tokens in the Authorization header.
            "securityDefinitions": {"BearerToken": {
                "description": "Bearer Token authentication",
                "type": "apiKey",
                "name": "authorization",
                "in": "header",
            }},
            "security": [{"BearerToken": []}],
        })
    })
}

type GroupVersion = (String, String, Vec<std::sync::Arc<Resource>>);

/// The definition names of kinds without a built-in definition: custom resources and built-in kinds
/// missing from the table, named as upstream names custom resources (`com.example.stable.v1.CronTab`).
struct Namer<'a> {
    base: &'a Base,
}

fn custom_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    if group.is_empty() {
        format!("{version}.{kind}")
    } else {
        format!("{}.{version}.{kind}", reversed.join("."))
    }
}

impl Names for Namer<'_> {
    fn name(&self, group: &str, version: &str, kind: &str) -> String {
        match self.base.name(group, version, kind) {
            Some(name) => name.to_string(),
            None => custom_name(group, version, kind),
        }
    }
}

/// The definition of a kind without a built-in one: the CRD's schema, or an object preserving unknown
/// fields; with the common fields and the GVK extension.
fn custom_definition(r: &Resource, schema: Option<&Value>) -> Value {
    let mut def = match schema {
        Some(Value::Object(s)) => s.clone(),
        _ => {
            let mut d = Map::new();
            d.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
            d
        }
    };
    def.entry("type").or_insert_with(|| json!("object"));
    let props = def.entry("properties").or_insert_with(|| json!({}));
    if let Value::Object(props) = props {
        for (k, v) in kinds::type_meta_properties() {
            props.entry(k).or_insert(v);
        }
        props.insert(
            "metadata".into(),
            json!({
                "$ref": format!("{DEFS}{OBJECT_META}"),
                "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
            }),
        );
    }
    def.insert(
        "x-kubernetes-group-version-kind".into(),
        json!([{"group": r.group, "version": r.version, "kind": r.kind}]),
    );
    Value::Object(def)
}

/// The paths of the group versions and the definitions they reach (refs to `#/definitions/`).
fn build(
    gvs: &[GroupVersion],
    custom: &CustomSchemas,
    format: Format,
) -> (Map<String, Value>, Map<String, Value>) {
    let base = kinds::base();
    let namer = Namer { base };
    let list_meta = json!({"$ref": format!("{DEFS}io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta")});
    let mut paths = Map::new();
    let mut extra = Map::new();
    for (group, version, resources) in gvs {
        let prefix = format!("/{}", gv_path(group, version));
        for r in resources {
            if base.name(&r.group, &r.version, &r.kind).is_none() {
                let name = custom_name(&r.group, &r.version, &r.kind);
                let def = match format {
                    Format::V3 => custom_definition(r, custom.get(r)),
                    Format::V2 => v2::crd_definition(r, custom.get(r)),
                };
                extra.insert(name.clone(), def);
                let mut list = kinds::list_schema(&name, &r.kind, &list_meta);
                list["x-kubernetes-group-version-kind"] = json!([{
                    "group": r.group, "version": r.version, "kind": format!("{}List", r.kind),
                }]);
                extra.insert(format!("{name}List"), list);
            }
            paths::resource_paths(&mut paths, &prefix, r, &namer, format);
        }
    }
    let defs = reachable(&paths, &base.defs, &extra);
    (paths, defs)
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("$ref", Value::String(r)) => {
                        if let Some(name) = r.strip_prefix(DEFS) {
                            out.push(name.to_string());
                        }
                    }
                    _ => collect_refs(v, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

/// The definitions `paths` refers to, directly or not; `extra` before `base`.
fn reachable(
    paths: &Map<String, Value>,
    base: &Map<String, Value>,
    extra: &Map<String, Value>,
) -> Map<String, Value> {
    let mut stack = Vec::new();
    paths.values().for_each(|p| collect_refs(p, &mut stack));
    let mut out = Map::new();
    while let Some(name) = stack.pop() {
        if out.contains_key(&name) {
            continue;
        }
        let Some(def) = extra.get(&name).or_else(|| base.get(&name)) else {
            continue;
        };
        collect_refs(def, &mut stack);
        out.insert(name, def.clone());
    }
    out
}

/// Rewrites a generated (Swagger 2.0) document part into OpenAPI v3's form: refs to
/// `#/components/schemas/`, and a ref with siblings (a description) as `allOf: [{$ref}]`, as upstream.
fn to_v3(v: &mut Value) {
    match v {
        Value::Object(m) => {
            if let Some(Value::String(r)) = m.get("$ref") {
                let r = match r.strip_prefix(DEFS) {
                    Some(name) => format!("#/components/schemas/{name}"),
                    None => r.clone(),
                };
                if m.len() > 1 {
                    m.remove("$ref");
                    m.insert("allOf".into(), json!([{"$ref": r}]));
                } else {
                    m.insert("$ref".into(), json!(r));
                }
            }
            m.values_mut().for_each(to_v3);
        }
        Value::Array(a) => a.iter_mut().for_each(to_v3),
        _ => {}
    }
}
