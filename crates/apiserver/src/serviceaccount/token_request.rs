//! `POST /api/v1/namespaces/<ns>/serviceaccounts/<name>/token` (upstream
//! `pkg/registry/core/serviceaccount/storage/token.go`): a TokenRequest answered with a signed token
//! for the service account, optionally bound to a Pod, Secret or Node that must exist (and carry the
//! given UID), for the requested audiences (default: the API's) and lifetime (default one hour, at
//! least ten minutes, capped by `--service-account-max-token-expiration`). Nothing is stored.
//!
//! Upstream extends the 3607 s tokens the kubelet asks for to a year (warning after an hour) for
//! old clients; rkube issues what was asked.

use apimachinery::status::{ApiError, Qualified};
use apimachinery::validation::field::{FieldError, FieldPath};
use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::{BoundObject, Subject};
use crate::objects;
use crate::response::{self, Body};
use crate::rest::{decode, Ctx};

const DEFAULT_EXPIRATION: i64 = 3600;
const MIN_EXPIRATION: i64 = 600;
const MAX_EXPIRATION: i64 = 1 << 32;

fn kind() -> Qualified {
    Qualified::new("authentication.k8s.io", "TokenRequest")
}

/// Upstream's `ValidateTokenRequest`.
fn validate(req: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec = FieldPath::root("spec");
    if let Some(exp) = req
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
    {
        if exp < MIN_EXPIRATION {
            errors.push(FieldError::invalid(
                &spec.child("expirationSeconds"),
                exp,
                "may not specify a duration less than 10 minutes",
            ));
        }
        if exp > MAX_EXPIRATION {
            errors.push(FieldError::invalid(
                &spec.child("expirationSeconds"),
                exp,
                "may not specify a duration larger than 2^32 seconds",
            ));
        }
    }
    if let Some(kind) = req
        .pointer("/spec/boundObjectRef/kind")
        .and_then(Value::as_str)
    {
        if !matches!(kind, "Pod" | "Secret" | "Node") {
            errors.push(FieldError::not_supported(
                &spec.child("boundObjectRef").child("kind"),
                kind,
                &["Pod", "Secret", "Node"],
            ));
        }
    }
    errors
}

pub async fn create(ctx: &Ctx<'_>, body: Bytes) -> Result<Response<Body>, ApiError> {
    let mut req = decode::parse_body(ctx.headers, &body)?;
    let (namespace, name) = (ctx.namespace().to_string(), ctx.name().to_string());
    let mut errors = validate(&req);
    for (field, want) in [("name", &name), ("namespace", &namespace)] {
        if let Some(given) = objects::meta_str(&req, field).filter(|v| !v.is_empty()) {
            if given != want {
                errors.push(FieldError::invalid(
                    &FieldPath::root("metadata").child(field),
                    given,
                    format!("must match the service account {field} if specified"),
                ));
            }
        }
    }
    if !errors.is_empty() {
        return Err(ApiError::invalid(&kind(), &name, &errors));
    }
    let sa = super::cached(
        ctx.api,
        "serviceaccounts",
        &format!("/serviceaccounts/{namespace}/{name}"),
    )
    .ok_or_else(|| ApiError::not_found(&Qualified::new("", "serviceaccounts"), &name))?;
    let sa_uid = objects::meta_str(&sa, "uid").unwrap_or("").to_string();

    let issuer = &ctx.api.service_accounts;
    let mut bound = Vec::new();
    if let Some(reference) = req.pointer("/spec/boundObjectRef").cloned() {
        let ref_kind = reference["kind"].as_str().unwrap_or("");
        let ref_name = reference["name"].as_str().unwrap_or("");
        let (storage, key) = match ref_kind {
            "Pod" => ("pods", format!("/pods/{namespace}/{ref_name}")),
            "Secret" => ("secrets", format!("/secrets/{namespace}/{ref_name}")),
            _ => ("nodes", format!("/nodes/{ref_name}")),
        };
        let obj = super::cached(ctx.api, storage, &key)
            .ok_or_else(|| ApiError::not_found(&Qualified::new("", storage), ref_name))?;
        if ref_kind == "Pod"
            && obj
                .pointer("/spec/serviceAccountName")
                .and_then(Value::as_str)
                != Some(&name)
        {
            return Err(ApiError::bad_request(format!(
                "cannot bind token for serviceaccount \"{name}\" to pod running with different serviceaccount name."
            )));
        }
        let uid = objects::meta_str(&obj, "uid").unwrap_or("").to_string();
        if let Some(want) = reference["uid"].as_str().filter(|u| !u.is_empty()) {
            if want != uid {
                return Err(ApiError::conflict(
                    &Qualified::new("", ref_kind),
                    ref_name,
                    &format!("the UID in the bound object reference ({want}) does not match the UID in record. The object might have been deleted and then recreated"),
                ));
            }
        }
        bound.push(BoundObject {
            kind: ref_kind.to_string(),
            name: ref_name.to_string(),
            uid: uid.clone(),
        });
        // A token bound to a pod also names the pod's node, as upstream.
        if let Some(node) = obj.pointer("/spec/nodeName").and_then(Value::as_str) {
            if let Some(n) = super::cached(ctx.api, "nodes", &format!("/nodes/{node}")) {
                bound.push(BoundObject {
                    kind: "Node".into(),
                    name: node.to_string(),
                    uid: objects::meta_str(&n, "uid").unwrap_or("").to_string(),
                });
            }
        }
        req["spec"]["boundObjectRef"]["uid"] = uid.into();
        if req["spec"]["boundObjectRef"]["apiVersion"].is_null() {
            req["spec"]["boundObjectRef"]["apiVersion"] = "v1".into();
        }
    }
    let audiences: Vec<String> = match req.pointer("/spec/audiences").and_then(Value::as_array) {
        Some(a) if !a.is_empty() => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => issuer.api_audiences.clone(),
    };
    let mut expiration = req
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_EXPIRATION);
    if issuer.max_expiration > 0 {
        expiration = expiration.min(issuer.max_expiration);
    }
    let subject = Subject {
        namespace: &namespace,
        name: &name,
        uid: &sa_uid,
    };
    let (token, exp) = issuer
        .issue(&subject, &audiences, expiration, &bound)
        .map_err(ApiError::internal)?;
    req["apiVersion"] = "authentication.k8s.io/v1".into();
    req["kind"] = "TokenRequest".into();
    let meta = objects::meta_mut(&mut req);
    meta.insert("name".into(), name.into());
    meta.insert("namespace".into(), namespace.into());
    meta.insert("creationTimestamp".into(), objects::now_rfc3339().into());
    req["spec"]["audiences"] = json!(audiences);
    req["spec"]["expirationSeconds"] = expiration.into();
    let expires = chrono::DateTime::from_timestamp(exp, 0)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default();
    req["status"] = json!({"token": token, "expirationTimestamp": expires});
    Ok(response::json_response(StatusCode::CREATED, &req))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation_as_upstream() {
        let errs = validate(&json!({"spec": {"expirationSeconds": 60}}));
        assert_eq!(errs.len(), 1);
        assert_eq!(
            errs[0].to_string(),
            "spec.expirationSeconds: Invalid value: 60: may not specify a duration less than 10 minutes"
        );
        let errs =
            validate(&json!({"spec": {"boundObjectRef": {"kind": "ConfigMap", "name": "x"}}}));
        assert_eq!(
            errs[0].to_string(),
            "spec.boundObjectRef.kind: Unsupported value: \"ConfigMap\": supported values: \"Pod\", \"Secret\", \"Node\""
        );
        assert!(validate(&json!({"spec": {"expirationSeconds": 600}})).is_empty());
    }
}
