//! Webhook conversion of custom resources (upstream apiextensions-apiserver's `webhookConverter`):
//! a CRD with `conversion.strategy: Webhook` has every object that must change version sent to its
//! webhook in a `ConversionReview` (v1 or v1beta1: the first of `conversionReviewVersions` rkube
//! knows). The answer is checked as upstream checks it (review kind and uid, `result.status`, as
//! many objects as were sent, each in the desired version, of the same kind, name, namespace and
//! uid), and each object keeps its original metadata except the labels and annotations the webhook
//! changed (validated when they changed).
//!
//! The HTTP side (TLS with the `caBundle`, `service` references, pooled connections, bounded
//! responses) is admission's webhook client. Upstream's CRD `webhook` has no timeout field; its REST
//! client uses 30 s, which shows in its errors as `?timeout=30s`.
//!
//! Differences: upstream's per-version watch caches decode (and so convert) each object on its own;
//! rkube keeps one cache in the storage version and converts on the way out, so a LIST sends its
//! objects in batches of at most [`MAX_BATCH_OBJECTS`] objects or [`MAX_BATCH_BYTES`] bytes, one
//! review per batch, and a watch one review per event.

use std::collections::HashSet;
use std::time::Duration;

use apimachinery::status::ApiError;
use apimachinery::validation::field::{FieldError, FieldPath};
use apimachinery::validation::meta;
use base64::Engine as _;
use bytes::Bytes;
use serde_json::{json, Map, Value};

use crate::admission::webhook::client::{self, Client, Endpoint, TlsCache};
use crate::admission::webhook::review::http_error;
use crate::ApiServer;

/// How long one review may take (client-go's timeout in upstream's webhook REST client).
pub const TIMEOUT: Duration = Duration::from_secs(30);
/// The most objects and bytes of objects sent in one review; a larger LIST sends several.
pub const MAX_BATCH_OBJECTS: usize = 500;
pub const MAX_BATCH_BYTES: usize = 3 << 20;

/// The `ConversionReview` versions rkube speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReviewVersion {
    V1,
    V1beta1,
}

impl ReviewVersion {
    fn api_version(self) -> &'static str {
        match self {
            ReviewVersion::V1 => "apiextensions.k8s.io/v1",
            ReviewVersion::V1beta1 => "apiextensions.k8s.io/v1beta1",
        }
    }
}

/// A CRD's conversion webhook.
#[derive(Debug)]
pub struct Webhook {
    /// The reason no client could be made (upstream fails every conversion with it).
    pub endpoint: Result<Endpoint, String>,
    /// `None` when `conversionReviewVersions` names none rkube speaks.
    pub review_version: Option<ReviewVersion>,
    /// The decoded `caBundle`, so the shared TLS settings of bundles no CRD names can go.
    pub ca_bundle: Vec<u8>,
    /// Objects this webhook converted, so that the watchers and LISTs of a version other than the
    /// storage one do not each send the same objects again (upstream converts each object once,
    /// into its per-version watch cache). A new webhook (any CRD change) starts empty.
    converted: Converted,
}

/// The most bytes of original objects a webhook's [`Converted`] remembers (then it starts over),
/// and the largest object kept.
const CACHE_BYTES: usize = 4 << 20;
const CACHE_MAX_OBJECT: usize = 256 << 10;

/// Converted objects by desired apiVersion and the original's exact JSON: the same bytes always
/// convert the same way, whatever request they come from (a dry run's object included).
#[derive(Default)]
struct Converted {
    /// The converted objects, and the bytes of their originals.
    inner: std::sync::Mutex<(ConvertedMap, usize)>,
}

/// Converted objects by (desired apiVersion, original JSON).
type ConvertedMap = std::collections::HashMap<(String, Vec<u8>), Value>;

impl std::fmt::Debug for Converted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Converted")
    }
}

impl Converted {
    fn get(&self, desired: &str, raw: &[u8]) -> Option<Value> {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.0.get(&(desired.to_string(), raw.to_vec())).cloned()
    }

    fn put(&self, desired: &str, raw: &[u8], converted: &Value) {
        if raw.len() > CACHE_MAX_OBJECT {
            return;
        }
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if inner.1 + raw.len() > CACHE_BYTES {
            inner.0.clear();
            inner.1 = 0;
        }
        inner.1 += raw.len();
        inner
            .0
            .insert((desired.to_string(), raw.to_vec()), converted.clone());
    }
}

/// The HTTP client and TLS settings the conversion webhooks of all CRDs share.
#[derive(Default)]
pub struct Clients {
    pub client: Client,
    pub tls: TlsCache,
}

impl Webhook {
    /// The webhook of a CRD whose `spec.conversion.strategy` is `Webhook`, else `None`.
    pub fn of(crd: &Value, tls: &TlsCache) -> Option<Webhook> {
        let conversion = crd.pointer("/spec/conversion")?;
        if conversion.get("strategy").and_then(Value::as_str) != Some("Webhook") {
            return None;
        }
        let hook = conversion.get("webhook").unwrap_or(&Value::Null);
        let client_config = hook.get("clientConfig");
        let review_version = hook
            .get("conversionReviewVersions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find_map(|v| match v.as_str() {
                Some("v1") => Some(ReviewVersion::V1),
                Some("v1beta1") => Some(ReviewVersion::V1beta1),
                _ => None,
            });
        let ca_bundle = client_config
            .and_then(|c| c.get("caBundle"))
            .and_then(Value::as_str)
            .and_then(|b| base64::engine::general_purpose::STANDARD.decode(b).ok())
            .unwrap_or_default();
        let mut in_use = HashSet::new();
        Some(Webhook {
            endpoint: client::endpoint(client_config, tls, &mut in_use),
            review_version,
            ca_bundle,
            converted: Converted::default(),
        })
    }
}

/// `<group>/<version>, Kind=<kind>` as Go prints a GroupVersionKind.
fn gvk(obj: &Value) -> String {
    let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    let kind = obj.get("kind").and_then(Value::as_str).unwrap_or("");
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    format!("{group}/{version}, Kind={kind}")
}

/// Go's `%T` of a decoded JSON value (unstructured integers are int64).
fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_i64() => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
        Value::Null => "<nil>",
    }
}

/// The 500 a failed conversion is (upstream returns a plain error, which the handler reports with
/// reason Unknown and the error's text).
fn failure(message: String) -> ApiError {
    ApiError {
        code: 500,
        reason: "",
        message,
        details: None,
    }
}

/// Converts the objects of `objs` whose `apiVersion` is not `desired` (`<group>/<version>`)
/// through the webhook, in place. Objects already in `desired` are not sent.
pub async fn convert(
    api: &ApiServer,
    clients: &Clients,
    hook: &Webhook,
    objs: &mut [Value],
    desired: &str,
) -> Result<(), ApiError> {
    let mut misses: Vec<(usize, Vec<u8>)> = Vec::new();
    for (i, obj) in objs.iter_mut().enumerate() {
        if obj.get("apiVersion").and_then(Value::as_str) == Some(desired) {
            continue;
        }
        let raw = serde_json::to_vec(obj).map_err(ApiError::internal)?;
        match hook.converted.get(desired, &raw) {
            Some(done) => *obj = done,
            None => misses.push((i, raw)),
        }
    }
    let mut start = 0;
    while start < misses.len() {
        let mut end = start;
        let mut bytes = 0;
        while end < misses.len() && end - start < MAX_BATCH_OBJECTS {
            let len = misses[end].1.len();
            if end > start && bytes + len > MAX_BATCH_BYTES {
                break;
            }
            bytes += len;
            end += 1;
        }
        let batch = &misses[start..end];
        let originals: Vec<&Value> = batch.iter().map(|(i, _)| &objs[*i]).collect();
        let raw: Vec<&[u8]> = batch.iter().map(|(_, r)| r.as_slice()).collect();
        let converted = review(api, clients, hook, &originals, &raw, desired)
            .await
            .map_err(failure)?;
        for ((i, raw), c) in batch.iter().zip(converted) {
            hook.converted.put(desired, raw, &c);
            objs[*i] = c;
        }
        start = end;
    }
    Ok(())
}

/// One review of `originals` (their JSON in `raw`); the converted objects, checked, in order.
async fn review(
    api: &ApiServer,
    clients: &Clients,
    hook: &Webhook,
    originals: &[&Value],
    raw: &[&[u8]],
    desired: &str,
) -> Result<Vec<Value>, String> {
    let source = gvk(originals[0]);
    let failed = |why: String| format!("conversion webhook for {source} failed: {why}");
    let endpoint = hook.endpoint.as_ref().map_err(|e| e.clone())?;
    let version = hook
        .review_version
        .ok_or_else(|| "no supported conversion review versions".to_string())?;
    let uid = uuid::Uuid::new_v4().to_string();
    let body = request_body(version, &uid, desired, raw);
    let (status, answer) = client::send(api, &clients.client, endpoint, TIMEOUT, body)
        .await
        .map_err(failed)?;
    if !status.is_success() {
        return Err(failed(http_error(status, &answer)));
    }
    let decoded: Value = serde_json::from_slice(&answer)
        .map_err(|e| failed(format!("couldn't decode the response: {e}")))?;
    let converted = converted_objects(version, &uid, decoded).map_err(failed)?;
    check(originals, converted, desired, &source)
}

/// The review sent: upstream's request, with its empty `response` too.
fn request_body(
    version: ReviewVersion,
    uid: &str,
    desired: &str,
    raw: &[impl AsRef<[u8]>],
) -> Bytes {
    let head = json!({
        "kind": "ConversionReview",
        "apiVersion": version.api_version(),
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": []},
        "response": {"uid": "", "convertedObjects": null, "result": {"metadata": {}}},
    });
    // The objects are spliced in as already-encoded JSON rather than re-serialized.
    let text = head.to_string();
    let marker = "\"objects\":[]";
    let at = text.find(marker).map(|i| i + marker.len() - 1);
    let Some(at) = at else {
        return Bytes::from(text);
    };
    let mut out =
        Vec::with_capacity(text.len() + raw.iter().map(|r| r.as_ref().len() + 1).sum::<usize>());
    out.extend_from_slice(&text.as_bytes()[..at]);
    for (i, r) in raw.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(r.as_ref());
    }
    out.extend_from_slice(&text.as_bytes()[at..]);
    Bytes::from(out)
}

/// Upstream `getConvertedObjectsFromResponse`.
fn converted_objects(
    version: ReviewVersion,
    uid: &str,
    mut review: Value,
) -> Result<Vec<Value>, String> {
    if version == ReviewVersion::V1 {
        let (av, kind) = (
            review
                .get("apiVersion")
                .and_then(Value::as_str)
                .unwrap_or(""),
            review.get("kind").and_then(Value::as_str).unwrap_or(""),
        );
        if av != "apiextensions.k8s.io/v1" || kind != "ConversionReview" {
            return Err(format!(
                "expected webhook response of apiextensions.k8s.io/v1, Kind=ConversionReview, got {}",
                gvk(&review)
            ));
        }
    }
    let response = match review.get_mut("response") {
        Some(r) if r.is_object() => r.take(),
        _ => return Err("no response provided".into()),
    };
    if version == ReviewVersion::V1 {
        let got = response.get("uid").and_then(Value::as_str).unwrap_or("");
        if got != uid {
            return Err(format!("expected response.uid={uid:?}, got {got:?}"));
        }
    }
    let result = response.get("result").unwrap_or(&Value::Null);
    let status = result.get("status").and_then(Value::as_str).unwrap_or("");
    if status != "Success" {
        return match result.get("message").and_then(Value::as_str) {
            Some(m) if !m.is_empty() => Err(m.to_string()),
            _ => Err(format!(
                "response.result.status was '{status}', not 'Success'"
            )),
        };
    }
    match response.get("convertedObjects") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => Ok(a.clone()),
        Some(other) => Err(format!(
            "couldn't decode the response: convertedObjects is a {}",
            go_type(other)
        )),
    }
}

/// The checks of upstream's `Convert` on the converted objects (its messages, including the
/// index a list's messages give: one past the object's for all but the first check).
fn check(
    originals: &[&Value],
    converted: Vec<Value>,
    desired: &str,
    source: &str,
) -> Result<Vec<Value>, String> {
    if converted.len() != originals.len() {
        return Err(format!(
            "conversion webhook for {source} returned {} objects, expected {}",
            converted.len(),
            originals.len()
        ));
    }
    let single = originals.len() == 1;
    let mut out = Vec::with_capacity(converted.len());
    for (i, (original, mut c)) in originals.iter().zip(converted).enumerate() {
        let invalid = |why: String| {
            if single {
                format!("conversion webhook for {source} returned invalid object: {why}")
            } else {
                format!(
                    "conversion webhook for {source} returned invalid converted object at index {}: {why}",
                    i + 1
                )
            }
        };
        let kind = c.get("kind").and_then(Value::as_str).unwrap_or("");
        if !c.is_object() || kind.is_empty() {
            let why = format!("Object 'Kind' is missing in '{c}'");
            return Err(if single {
                why
            } else {
                format!("conversion webhook for {source} returned invalid converted object at index {i}: {why}")
            });
        }
        let got = c.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        if got != desired {
            let why = format!("invalid groupVersion (expected {desired}, received {got})");
            return Err(if single {
                format!("conversion webhook for {source} returned invalid object at index 0: {why}")
            } else {
                invalid(why)
            });
        }
        let want_kind = original.get("kind").and_then(Value::as_str).unwrap_or("");
        if kind != want_kind {
            let why = format!("invalid kind (expected {want_kind}, received {kind})");
            return Err(if single {
                format!("conversion webhook for {source} returned invalid object at index 0: {why}")
            } else {
                invalid(why)
            });
        }
        same_identity(original, &c).map_err(invalid)?;
        restore_meta(original, &mut c).map_err(|why| {
            if single {
                format!("conversion webhook for {source} returned invalid metadata: {why}")
            } else {
                format!(
                    "conversion webhook for {source} returned invalid metadata in object at index {}: {why}",
                    i + 1
                )
            }
        })?;
        out.push(c);
    }
    Ok(out)
}

/// Upstream `validateConvertedObject`: kind, name, namespace and uid unchanged.
fn same_identity(original: &Value, converted: &Value) -> Result<(), String> {
    let at = |v: &Value, p: &str| {
        v.pointer(p)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string()
    };
    for (what, pointer) in [
        ("kind", "/kind"),
        ("name", "/metadata/name"),
        ("namespace", "/metadata/namespace"),
        ("UID", "/metadata/uid"),
    ] {
        let (e, a) = (at(original, pointer), at(converted, pointer));
        if e != a {
            return Err(format!("must have the same {what}: {e} != {a}"));
        }
    }
    Ok(())
}

/// Upstream `restoreObjectMeta`: the original metadata, with the converted object's labels and
/// annotations (validated when they differ from the original's).
fn restore_meta(original: &Value, converted: &mut Value) -> Result<(), String> {
    let response_meta = match converted.get("metadata") {
        None => return Err("missing metadata in converted object".into()),
        Some(Value::Object(m)) => m.clone(),
        Some(other) => {
            return Err(format!(
                "invalid metadata of type {} in converted object",
                go_type(other)
            ))
        }
    };
    let mut meta: Map<String, Value> = match original.get("metadata") {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    for field in ["labels", "annotations"] {
        let response_field = match response_meta.get(field) {
            None | Some(Value::Null) => {
                meta.remove(field);
                continue;
            }
            Some(Value::Object(m)) => m,
            Some(other) => {
                return Err(format!(
                    "invalid metadata.{field} of type {} in converted object",
                    go_type(other)
                ))
            }
        };
        let empty = Map::new();
        let original_field = match meta.get(field) {
            None | Some(Value::Null) => &empty,
            Some(Value::Object(m)) => m,
            Some(other) => {
                return Err(format!(
                    "invalid metadata.{field} of type {} in original object",
                    go_type(other)
                ))
            }
        };
        let mut changed = original_field.len() != response_field.len();
        for (k, v) in response_field {
            if !v.is_string() {
                return Err(format!(
                    "metadata.{field}[{k}] must be a string, but is {} in converted object",
                    go_type(v)
                ));
            }
            changed |= original_field.get(k) != Some(v);
        }
        if changed {
            let value = Value::Object(response_field.clone());
            let errs = if field == "labels" {
                meta::validate_labels(Some(&value), &FieldPath::root("metadata.labels"))
            } else {
                meta::validate_annotations(Some(&value), &FieldPath::root("metadata.annotation"))
            };
            if !errs.is_empty() {
                return Err(aggregate(&errs));
            }
        }
        meta.insert(field.to_string(), Value::Object(response_field.clone()));
    }
    converted["metadata"] = Value::Object(meta);
    Ok(())
}

/// Go's `ErrorList.ToAggregate().Error()`.
fn aggregate(errs: &[FieldError]) -> String {
    match errs {
        [one] => one.to_string(),
        many => format!(
            "[{}]",
            many.iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
#[path = "conversion_tests.rs"]
mod tests;
