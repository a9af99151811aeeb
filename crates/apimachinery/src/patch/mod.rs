//! Patches, as the API server applies them for `PATCH` requests (upstream: `evanphx/json-patch` for
//! `application/json-patch+json` and `application/merge-patch+json`, and
//! `k8s.io/apimachinery/pkg/util/strategicpatch` for `application/strategic-merge-patch+json`).
//!
//! - [`apply_json_patch`]: RFC 6902 operations (`add`, `remove`, `replace`, `move`, `copy`, `test`).
//! - [`apply_merge_patch`]: RFC 7386; `null` deletes a field, lists are replaced.
//! - [`apply_strategic_merge_patch`]: Kubernetes' strategic merge patch, driven by the patch metadata of
//!   built-in kinds ([`schema_for`]); see [`strategic`] for the directives and deliberate differences.
//!
//! Failures are [`PatchError`]s that say which HTTP answer upstream gives ([`PatchError::code`],
//! [`PatchError::to_api_error`]).

pub mod schema;
pub mod strategic;

mod list;

use serde_json::Value;

use crate::status::{ApiError, Cause, Details};

pub use schema::{builtin_schema_for, schema_for, PatchSchema};
pub use strategic::apply_strategic_merge_patch;

/// Why a patch could not be applied.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch document itself is malformed (upstream answers 400 BadRequest).
    #[error("{0}")]
    BadRequest(String),
    /// The patch is well formed but cannot be applied to this object (upstream answers 422 with reason
    /// Invalid, as for a failed JSON patch `test`).
    #[error("{0}")]
    Invalid(String),
    /// The patch would make the request too large: too many operations, or copies adding more than
    /// [`JSON_PATCH_MAX_COPY_BYTES`] (upstream answers 413 RequestEntityTooLarge).
    #[error("{0}")]
    TooLarge(String),
}

/// Upstream's `maxJSONPatchOperations`: the most operations one JSON patch may hold.
pub const MAX_JSON_PATCH_OPERATIONS: usize = 10_000;
/// Upstream's `JSONPatchMaxCopyBytes` (3 MiB, its default request body limit): how much all `copy`
/// operations of one patch may add together, so a few hundred bytes of copies cannot double an
/// object until the server runs out of memory.
pub const JSON_PATCH_MAX_COPY_BYTES: usize = 3 * 1024 * 1024;

impl PatchError {
    /// The HTTP status code of the error: 400, 422 or 413.
    pub fn code(&self) -> u16 {
        match self {
            PatchError::BadRequest(_) => 400,
            PatchError::Invalid(_) => 422,
            PatchError::TooLarge(_) => 413,
        }
    }

    pub fn message(&self) -> &str {
        match self {
            PatchError::BadRequest(m) | PatchError::Invalid(m) | PatchError::TooLarge(m) => m,
        }
    }

    /// The `Status` upstream returns: 400 BadRequest with the message, or (upstream's
    /// `NewGenericServerResponse(422, ...)`) 422 Invalid with a generic message and the error as the
    /// cause, which kubectl prints as `The request is invalid: ...`.
    pub fn to_api_error(&self) -> ApiError {
        match self {
            PatchError::BadRequest(m) => ApiError::bad_request(m.clone()),
            PatchError::TooLarge(m) => ApiError::request_entity_too_large(m.clone()),
            PatchError::Invalid(m) => ApiError {
                code: 422,
                reason: "Invalid",
                message: "the server rejected our request due to an error in our request"
                    .to_string(),
                details: Some(Box::new(Details {
                    causes: vec![Cause {
                        reason: "UnexpectedServerResponse".to_string(),
                        message: m.clone(),
                        field: String::new(),
                    }],
                    ..Details::default()
                })),
            },
        }
    }
}

pub(crate) fn bad_request(msg: impl Into<String>) -> PatchError {
    PatchError::BadRequest(msg.into())
}

pub(crate) fn invalid(msg: impl Into<String>) -> PatchError {
    PatchError::Invalid(msg.into())
}

/// Applies an RFC 6902 JSON patch (a JSON array of operations). A patch that is not an array is a 400;
/// an operation that does not apply (missing path, failed `test`) is a 422 with evanphx/json-patch's
/// wording. The document is untouched on failure (a new value is returned).
pub fn apply_json_patch(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    if !patch.is_array() {
        return Err(bad_request(format!(
            "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
            json_kind(patch)
        )));
    }
    let ops: json_patch::Patch =
        serde_json::from_value(patch.clone()).map_err(|e| invalid(e.to_string()))?;
    if ops.0.len() > MAX_JSON_PATCH_OPERATIONS {
        return Err(PatchError::TooLarge(format!(
            "The allowed maximum operations in a JSON patch is {MAX_JSON_PATCH_OPERATIONS}, got {}",
            ops.0.len()
        )));
    }
    let mut out = doc.clone();
    let mut copied = 0usize;
    // One operation at a time, so each copy's size is known before it is made.
    for op in &ops.0 {
        if let json_patch::PatchOperation::Copy(c) = op {
            if let Some(from) = out.pointer(c.from.as_str()) {
                copied = copied.saturating_add(encoded_len(from));
                if copied > JSON_PATCH_MAX_COPY_BYTES {
                    return Err(PatchError::TooLarge(format!(
                        "Unable to complete the copy, the accumulated size increase of copy is {copied}, exceeding the limit {JSON_PATCH_MAX_COPY_BYTES}"
                    )));
                }
            }
        }
        if let json_patch::PatchOperation::Test(t) = op {
            if t.value.is_null() && missing_member(&out, t.path.as_str()) {
                continue;
            }
        }
        json_patch::patch_unsafe(&mut out, std::slice::from_ref(op))
            .map_err(|e| json_patch_error(&e, op))?;
    }
    Ok(out)
}

/// Is `path` a member its object does not have? Upstream's JSON patch (evanphx/json-patch)
/// passes a `test` for `null` on such a member, and clients rely on it: kube-rs's finalizer helper
/// tests `/metadata/finalizers` for `null` before adding the first finalizer. The parent must exist.
fn missing_member(doc: &Value, path: &str) -> bool {
    let Some((parent, key)) = path.rsplit_once('/') else {
        return false;
    };
    let key = key.replace("~1", "/").replace("~0", "~");
    match doc.pointer(parent) {
        Some(Value::Object(m)) => !m.contains_key(&key),
        _ => false,
    }
}

/// evanphx/json-patch's wording for an operation that does not apply.
fn json_patch_error(e: &json_patch::PatchError, op: &json_patch::PatchOperation) -> PatchError {
    let path = e.path.to_string();
    let msg = match (&e.kind, op) {
        (json_patch::PatchErrorKind::TestFailed, _) | (_, json_patch::PatchOperation::Test(_)) => {
            format!("testing value {path} failed: test failed")
        }
        (json_patch::PatchErrorKind::InvalidFromPointer, json_patch::PatchOperation::Move(m)) => {
            format!(
                "move operation does not apply: doc is missing from path: {}: missing value",
                m.from
            )
        }
        (json_patch::PatchErrorKind::InvalidFromPointer, json_patch::PatchOperation::Copy(c)) => {
            format!(
                "copy operation does not apply: doc is missing from path: {}: missing value",
                c.from
            )
        }
        (json_patch::PatchErrorKind::InvalidPointer, json_patch::PatchOperation::Add(_)) => {
            format!("add operation does not apply: doc is missing path: \"{path}\": missing value")
        }
        (json_patch::PatchErrorKind::InvalidPointer, json_patch::PatchOperation::Remove(_)) => {
            format!(
                "remove operation does not apply: doc is missing path: \"{path}\": missing value"
            )
        }
        (json_patch::PatchErrorKind::InvalidPointer, json_patch::PatchOperation::Replace(_)) => {
            format!("replace operation does not apply: doc is missing key: {path}: missing value")
        }
        _ => e.to_string(),
    };
    invalid(msg)
}

/// The length of a value's compact JSON encoding, without building it.
fn encoded_len(v: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut n = Count(0);
    let _ = serde_json::to_writer(&mut n, v);
    n.0
}

/// Applies an RFC 7386 JSON merge patch: objects merge recursively, `null` deletes, anything else
/// (lists included) replaces. The patch must be a JSON object (upstream: `Invalid JSON Patch`, 400).
pub fn apply_merge_patch(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    if !patch.is_object() {
        return Err(bad_request("Invalid JSON Patch"));
    }
    let mut out = doc.clone();
    json_patch::merge(&mut out, patch);
    Ok(out)
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// A value as Go's `%v` prints the decoded `interface{}` (used in upstream's error messages).
pub(crate) fn go_fmt(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".to_string(),
        Value::String(s) => s.clone(),
        Value::Bool(_) | Value::Number(_) => v.to_string(),
        Value::Array(a) => format!("[{}]", a.iter().map(go_fmt).collect::<Vec<_>>().join(" ")),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .iter()
                .map(|k| format!("{k}:{}", go_fmt(&m[k.as_str()])))
                .collect();
            format!("map[{}]", items.join(" "))
        }
    }
}

/// The Go type name of a decoded JSON value (upstream `reflect.TypeOf`).
pub(crate) fn go_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

#[cfg(test)]
mod tests;
