//! Request bodies (upstream `handlers.createHandler`/`UpdateResource` decoding): JSON, YAML, protobuf
//! (built-in kinds) or CBOR, at most
//! 3 MiB, an object whose `apiVersion` and `kind` (when given) match the resource the URL names.

use apimachinery::resources::Resource;
use apimachinery::serializer::{cbor, protobuf};
use apimachinery::status::ApiError;
use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;

use super::strict;

/// Upstream's limit on request bodies (`--max-request-body-bytes`, 3 MiB).
pub const MAX_BODY: usize = 3 * 1024 * 1024;

fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("application/json")
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

/// Parses a body into its JSON form.
pub fn parse_body(headers: &HeaderMap, body: &Bytes) -> Result<Value, ApiError> {
    if body.len() > MAX_BODY {
        return Err(ApiError::request_entity_too_large(format!(
            "the request body is {} bytes, over the limit of {MAX_BODY}",
            body.len()
        )));
    }
    let ct = content_type(headers);
    let value: Value = match ct.as_str() {
        "" | "application/json" | "*/*" => serde_json::from_slice(body).map_err(|e| {
            ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
        })?,
        "application/yaml" | "application/x-yaml" | "text/yaml" => serde_yaml_ng::from_slice(body)
            .map_err(|e| ApiError::bad_request(format!("error converting YAML to JSON: {e}")))?,
        protobuf::MEDIA_TYPE => protobuf::decode(body).map_err(|e| match e {
            // Custom resources (and kinds we do not know) have no protobuf form, as upstream.
            protobuf::ProtobufError::UnknownKind { .. } => ApiError::unsupported_media_type(&ct),
            other => ApiError::bad_request(format!("failed to decode protobuf body: {other}")),
        })?,
        cbor::MEDIA_TYPE => cbor::decode(body)
            .map_err(|e| ApiError::bad_request(format!("failed to decode CBOR body: {e}")))?,
        other => return Err(ApiError::unsupported_media_type(other)),
    };
    if !value.is_object() {
        return Err(ApiError::bad_request(
            "couldn't get version/kind; json parse error: the body is not a JSON object",
        ));
    }
    Ok(value)
}

/// `fieldValidation` (upstream `metav1.FieldValidation*`): Strict, Warn (the default) or Ignore;
/// anything else is left to the field checks to reject.
pub fn detects(field_validation: Option<&str>) -> bool {
    matches!(field_validation.unwrap_or("Warn"), "Strict" | "Warn")
}

/// What a strict decoding found besides the value: repeated keys, and how to order and word what
/// the field checks add (upstream's strict JSON/YAML serializer, `strictDecodingError`).
#[derive(Clone, Debug, Default)]
pub struct Strict {
    /// go-yaml's one error for all repeated YAML keys (`yaml: unmarshal errors:\n  line 3: ...`);
    /// reported first, and as one warning per line.
    pub yaml: Option<String>,
    /// Repeated JSON keys, in document order.
    pub dups: Vec<strict::Dup>,
    /// The JSON body, to place unknown fields among the duplicates in document order.
    pub json: Option<Bytes>,
    /// Unknown fields come in sorted key order: upstream decodes YAML bodies and patched objects
    /// from JSON re-encoded from Go maps.
    pub sorted: bool,
    /// A patch (JSON, merge or strategic merge): errors of the patch itself, reported first, and
    /// Strict failures are upstream's 422 on the field `patch`.
    pub patch: Option<PatchStrict>,
}

/// A patch's own strict errors, and for a strategic merge patch the rendering of the patch map
/// upstream's 422 shows (JSON and merge patches show the patched object).
#[derive(Clone, Debug, Default)]
pub struct PatchStrict {
    pub errors: Vec<String>,
    pub shown: Option<String>,
}

/// [`parse_body`] for create and update bodies, finding repeated keys when `fieldValidation` asks
/// for it; `merge` when the object is typed (a repeated object merges into the first, as Go decodes
/// it into the same struct).
pub fn parse_request(
    headers: &HeaderMap,
    body: &Bytes,
    field_validation: Option<&str>,
    merge: bool,
) -> Result<(Value, Strict), ApiError> {
    if !detects(field_validation) || body.len() > MAX_BODY {
        return Ok((parse_body(headers, body)?, Strict::default()));
    }
    match content_type(headers).as_str() {
        "" | "application/json" | "*/*" => {
            let (value, dups) = strict::parse_json(body, merge).map_err(|e| {
                ApiError::bad_request(format!("couldn't get version/kind; json parse error: {e}"))
            })?;
            if !value.is_object() {
                return Err(ApiError::bad_request(
                    "couldn't get version/kind; json parse error: the body is not a JSON object",
                ));
            }
            let json = (!dups.is_empty()).then(|| body.clone());
            Ok((
                value,
                Strict {
                    dups,
                    json,
                    ..Strict::default()
                },
            ))
        }
        "application/yaml" | "application/x-yaml" | "text/yaml" => {
            let value = parse_body(headers, body)?;
            let lines = strict::yaml_duplicates(body);
            Ok((
                value,
                Strict {
                    yaml: yaml_error(&lines),
                    sorted: true,
                    ..Strict::default()
                },
            ))
        }
        _ => Ok((parse_body(headers, body)?, Strict::default())),
    }
}

fn yaml_error(lines: &[String]) -> Option<String> {
    (!lines.is_empty()).then(|| format!("yaml: unmarshal errors:\n  {}", lines.join("\n  ")))
}

/// The patch's own strict errors (upstream decodes merge and strategic merge patches strictly into
/// a map, JSON patches into its operations), when `fieldValidation` asks for them.
pub fn patch_strict(patch_type: &str, body: &[u8], field_validation: Option<&str>) -> Strict {
    if !detects(field_validation) {
        return Strict::default();
    }
    let (errors, shown) = match patch_type {
        "application/json-patch+json" => (
            strict::json_patch_errors(body)
                .into_iter()
                .map(|e| format!("json patch {e}"))
                .collect(),
            None,
        ),
        _ => {
            let (errors, value) = match strict::parse_json(body, false) {
                Ok((value, dups)) => (
                    dups.into_iter()
                        .map(|d| format!("duplicate field {:?}", d.path))
                        .collect(),
                    Some(value),
                ),
                Err(_) => (Vec::new(), None),
            };
            let shown = (patch_type == "application/strategic-merge-patch+json")
                .then(|| value.as_ref().map(go_plus_v))
                .flatten();
            (errors, shown)
        }
    };
    Strict {
        sorted: true,
        patch: Some(PatchStrict { errors, shown }),
        ..Strict::default()
    }
}

/// Repeated keys of a server-side apply configuration (upstream `yaml.UnmarshalStrict` of the
/// body after the apply): Strict is a 400 `error strict decoding YAML: ...`, Warn one warning per
/// repeated key.
pub fn apply_duplicates(
    body: &[u8],
    field_validation: Option<&str>,
) -> Result<Vec<String>, ApiError> {
    if !detects(field_validation) {
        return Ok(Vec::new());
    }
    let Some(err) = yaml_error(&strict::yaml_duplicates(body)) else {
        return Ok(Vec::new());
    };
    let err = format!("error converting YAML to JSON: {err}");
    if field_validation == Some("Strict") {
        return Err(ApiError::bad_request(format!(
            "error strict decoding YAML: {err}"
        )));
    }
    Ok(warnings_of(&err))
}

/// Upstream `parseYAMLWarnings`: a go-yaml strict error becomes one warning per line.
fn warnings_of(err: &str) -> Vec<String> {
    const SHORT: &str = "yaml: unmarshal errors:\n";
    const LONG: &str = "error converting YAML to JSON: yaml: unmarshal errors:\n";
    match err.strip_prefix(SHORT).or_else(|| err.strip_prefix(LONG)) {
        Some(rest) => rest.split('\n').map(|l| l.trim().to_string()).collect(),
        None => vec![err.to_string()],
    }
}

/// Applies `fieldValidation` to what a decoding found: `errors` are the field checks' messages
/// (`unknown field "spec.foo"`, duplicates already placed among them), after the YAML error and
/// the patch's own. Strict: a 400 naming the kind (create, update) or upstream's 422 on `patch`;
/// Warn: the warnings to send; Ignore: nothing.
pub fn finish(
    errors: Vec<String>,
    field_validation: Option<&str>,
    strict: &Strict,
    kind: &str,
    version: &str,
    patched: &Value,
) -> Result<Vec<String>, ApiError> {
    if !detects(field_validation) {
        return Ok(Vec::new());
    }
    let mut all: Vec<String> = strict.yaml.iter().cloned().collect();
    if let Some(p) = &strict.patch {
        all.extend(p.errors.iter().cloned());
    }
    all.extend(errors);
    if all.is_empty() {
        return Ok(Vec::new());
    }
    if field_validation == Some("Strict") {
        let message = format!("strict decoding error: {}", all.join(", "));
        return Err(match &strict.patch {
            Some(p) => {
                let shown = p
                    .shown
                    .clone()
                    .unwrap_or_else(|| serde_json::to_string(patched).unwrap_or_default());
                ApiError::invalid(
                    &apimachinery::status::Qualified::default(),
                    "",
                    &[apimachinery::validation::field::FieldError::invalid(
                        &apimachinery::validation::field::FieldPath::root("patch"),
                        Value::String(shown),
                        message,
                    )],
                )
            }
            None => ApiError::bad_request(format!(
                "{kind} in version {version:?} cannot be handled as a {kind}: {message}"
            )),
        });
    }
    Ok(all.iter().flat_map(|e| warnings_of(e)).collect())
}

/// Go's `%+v` of a decoded JSON value (`map[spec:map[paused:true]]`), as upstream shows a strategic
/// merge patch in its 422.
fn go_plus_v(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => s.clone(),
        Value::Array(items) => format!(
            "[{}]",
            items.iter().map(go_plus_v).collect::<Vec<_>>().join(" ")
        ),
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            format!(
                "map[{}]",
                keys.iter()
                    .map(|k| format!("{k}:{}", go_plus_v(&m[k.as_str()])))
                    .collect::<Vec<_>>()
                    .join(" ")
            )
        }
    }
}

/// Checks (and fills in) `apiVersion` and `kind` against the resource, `expected_kind` being the kind
/// the body must have (the resource's, or e.g. `Scale` for a scale subresource).
pub fn check_type(
    resource: &Resource,
    expected_api_version: &str,
    expected_kind: &str,
    obj: &mut Value,
) -> Result<(), ApiError> {
    let kind = obj
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let api_version = obj
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if !kind.is_empty() && kind != expected_kind {
        return Err(ApiError::bad_request(format!(
            "{kind} in version {:?} cannot be handled as a {expected_kind}: the kind in the request body ({kind}) does not match the kind of the resource ({expected_kind})",
            if api_version.is_empty() { resource.version.as_str() } else { api_version.as_str() }
        )));
    }
    if !api_version.is_empty() && api_version != expected_api_version {
        return Err(ApiError::bad_request(format!(
            "the API version in the data ({api_version}) does not match the expected API version ({expected_api_version})"
        )));
    }
    if let Value::Object(map) = obj {
        map.insert("apiVersion".into(), expected_api_version.into());
        map.insert("kind".into(), expected_kind.into());
    }
    Ok(())
}

/// Whether the body is protobuf.
pub fn is_protobuf(headers: &HeaderMap) -> bool {
    content_type(headers) == protobuf::MEDIA_TYPE
}

/// `content-type` of a PATCH.
pub fn patch_type(headers: &HeaderMap) -> String {
    content_type(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_parsed_and_checked() {
        let mut h = HeaderMap::new();
        assert_eq!(
            parse_body(&h, &Bytes::from_static(b"{nope"))
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(
            parse_body(&h, &Bytes::from_static(b"[1]"))
                .unwrap_err()
                .code,
            400
        );
        assert_eq!(
            parse_body(&h, &Bytes::from(vec![b' '; MAX_BODY + 1]))
                .unwrap_err()
                .code,
            413
        );
        h.insert(
            http::header::CONTENT_TYPE,
            "application/yaml".parse().unwrap(),
        );
        let v = parse_body(&h, &Bytes::from_static(b"kind: ConfigMap\ndata:\n  a: b\n")).unwrap();
        assert_eq!(v["data"]["a"], "b");
        h.insert(http::header::CONTENT_TYPE, "text/plain".parse().unwrap());
        assert_eq!(
            parse_body(&h, &Bytes::from_static(b"{}")).unwrap_err().code,
            415
        );
        let r = apimachinery::resources::Registry::with_builtin()
            .get("", "v1", "configmaps")
            .unwrap();
        let mut pod = serde_json::json!({"kind": "Pod"});
        assert_eq!(
            check_type(&r, "v1", "ConfigMap", &mut pod)
                .unwrap_err()
                .code,
            400
        );
        let mut bare = serde_json::json!({});
        check_type(&r, "v1", "ConfigMap", &mut bare).unwrap();
        assert_eq!(bare["kind"], "ConfigMap");
        let mut wrong = serde_json::json!({"kind": "ConfigMap", "apiVersion": "apps/v1"});
        assert_eq!(
            check_type(&r, "v1", "ConfigMap", &mut wrong)
                .unwrap_err()
                .code,
            400
        );
    }
}
