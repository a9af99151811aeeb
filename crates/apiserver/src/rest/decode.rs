//! Request bodies (upstream `handlers.createHandler`/`UpdateResource` decoding): JSON, YAML, protobuf
//! (built-in kinds) or CBOR, at most
//! 3 MiB, an object whose `apiVersion` and `kind` (when given) match the resource the URL names.

use apimachinery::resources::Resource;
use apimachinery::serializer::{cbor, protobuf};
use apimachinery::status::ApiError;
use bytes::Bytes;
use http::HeaderMap;
use serde_json::Value;

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
