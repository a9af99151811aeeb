//! The review resources (upstream `registry/authentication/{selfsubjectreview,tokenreview}` and
//! `registry/authorization/*subjectaccessreview*`): a POST is answered with the object and its `status`,
//! and nothing is stored.
//!
//! Authorization is not implemented yet: every authenticated user may do everything, so access reviews
//! answer "allowed", saying why. When RBAC lands, these answers come from the same authorizer.

use apimachinery::status::ApiError;
use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::{decode, Ctx};
use crate::authn::UserInfo;
use crate::response::{self, Body};

const ALLOW_REASON: &str = "rkube has no authorization yet: every authenticated user is allowed";

/// Whether a resource is answered here rather than stored.
pub fn is_review(group: &str, plural: &str) -> bool {
    matches!(
        (group, plural),
        (
            "authentication.k8s.io",
            "selfsubjectreviews" | "tokenreviews"
        ) | (
            "authorization.k8s.io",
            "localsubjectaccessreviews"
                | "selfsubjectaccessreviews"
                | "selfsubjectrulesreviews"
                | "subjectaccessreviews"
        )
    )
}

fn user_info(user: &UserInfo) -> Value {
    let mut info = json!({"username": user.name, "groups": user.groups});
    if !user.uid.is_empty() {
        info["uid"] = user.uid.clone().into();
    }
    info
}

pub fn create(
    ctx: &Ctx<'_>,
    user: Option<&UserInfo>,
    body: Bytes,
) -> Result<Response<Body>, ApiError> {
    let mut obj = decode::parse_body(ctx.headers, &body)?;
    decode::check_type(
        &ctx.resource,
        &ctx.resource.api_version(),
        &ctx.resource.kind,
        &mut obj,
    )?;
    let status = match ctx.resource.plural.as_str() {
        "selfsubjectreviews" => {
            let user = user.ok_or_else(ApiError::unauthorized)?;
            json!({"userInfo": user_info(user)})
        }
        "tokenreviews" => {
            let token = obj
                .pointer("/spec/token")
                .and_then(Value::as_str)
                .unwrap_or("");
            let mut headers = http::HeaderMap::new();
            if let Ok(v) = http::HeaderValue::from_str(&format!("Bearer {token}")) {
                headers.insert(http::header::AUTHORIZATION, v);
            }
            match ctx.api.tokens.authenticate(&headers) {
                Some(u) => json!({"authenticated": true, "user": user_info(&u)}),
                None => json!({"authenticated": false, "error": "invalid bearer token"}),
            }
        }
        "selfsubjectrulesreviews" => json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        }),
        _ => json!({"allowed": true, "reason": ALLOW_REASON}),
    };
    obj["status"] = status;
    if obj.get("metadata").is_none_or(Value::is_null) {
        obj["metadata"] = json!({"creationTimestamp": null});
    }
    Ok(response::json_response(StatusCode::CREATED, &obj))
}
