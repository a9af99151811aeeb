//! The review resources (upstream `registry/authentication/{selfsubjectreview,tokenreview}` and
//! `registry/authorization/*subjectaccessreview*`): a POST is answered with the object and its `status`,
//! and nothing is stored. Access reviews ask the server's authorizer ([`crate::authz`]).

use apimachinery::status::ApiError;
use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::{decode, Ctx};
use crate::authn::UserInfo;
use crate::authz::Attributes;
use crate::response::{self, Body};

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
            let wanted: Vec<String> = obj
                .pointer("/spec/audiences")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|v| v.as_str().map(str::to_string))
                        .collect()
                })
                .unwrap_or_default();
            let api_audiences = &ctx.api.service_accounts.api_audiences;
            let audiences = if wanted.is_empty() {
                api_audiences
            } else {
                &wanted
            };
            match ctx.api.tokens.lookup(token) {
                // Static tokens are for the API server itself.
                Some(u)
                    if wanted.is_empty() || wanted.iter().any(|a| api_audiences.contains(a)) =>
                {
                    json!({"authenticated": true, "user": user_info(&u), "audiences": audiences})
                }
                _ => match crate::serviceaccount::authenticate(ctx.api, token, audiences) {
                    Ok((u, matched)) => {
                        json!({"authenticated": true, "user": user_info(&u), "audiences": matched})
                    }
                    Err(e) => json!({"authenticated": false, "error": e}),
                },
            }
        }
        "selfsubjectrulesreviews" => {
            let user = user.ok_or_else(ApiError::unauthorized)?;
            let namespace = obj
                .pointer("/spec/namespace")
                .and_then(Value::as_str)
                .unwrap_or("");
            rules_review(ctx, user, namespace)
        }
        "selfsubjectaccessreviews" => {
            let user = user.ok_or_else(ApiError::unauthorized)?;
            access_review(ctx, user, &obj["spec"])?
        }
        "localsubjectaccessreviews" => {
            let ns = ctx.req.namespace.as_deref().unwrap_or("");
            let spec_ns = obj
                .pointer("/spec/resourceAttributes/namespace")
                .and_then(Value::as_str)
                .unwrap_or("");
            if spec_ns != ns {
                return Err(ApiError::bad_request(format!(
                    "spec.resourceAttributes.namespace must match namespace: {ns}"
                )));
            }
            access_review(ctx, &subject(&obj["spec"])?, &obj["spec"])?
        }
        _ => access_review(ctx, &subject(&obj["spec"])?, &obj["spec"])?,
    };
    obj["status"] = status;
    if obj.get("metadata").is_none_or(Value::is_null) {
        obj["metadata"] = json!({"creationTimestamp": null});
    }
    Ok(response::json_response(StatusCode::CREATED, &obj))
}

/// The user a (Local)SubjectAccessReview asks about.
fn subject(spec: &Value) -> Result<UserInfo, ApiError> {
    let name = spec["user"].as_str().unwrap_or("").to_string();
    let groups: Vec<String> = spec["groups"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|g| g.as_str().map(str::to_string))
        .collect();
    if name.is_empty() && groups.is_empty() {
        return Err(ApiError::bad_request(
            "at least one of user or group must be specified",
        ));
    }
    Ok(UserInfo {
        name,
        uid: spec["uid"].as_str().unwrap_or("").to_string(),
        groups,
    })
}

/// The status of an access review: whether `user` may do what `spec` describes.
fn access_review(ctx: &Ctx<'_>, user: &UserInfo, spec: &Value) -> Result<Value, ApiError> {
    let s = |v: &Value, f: &str| v[f].as_str().unwrap_or("").to_string();
    let (resource, path) = (&spec["resourceAttributes"], &spec["nonResourceAttributes"]);
    let decision = if resource.is_object() {
        let (verb, group, version) = (
            s(resource, "verb"),
            s(resource, "group"),
            s(resource, "version"),
        );
        let (plural, sub) = (s(resource, "resource"), s(resource, "subresource"));
        let (namespace, name) = (s(resource, "namespace"), s(resource, "name"));
        // Only the raw form of `fieldSelector` is read; `requirements` are not.
        let field_selector = s(&resource["fieldSelector"], "rawSelector");
        ctx.api.authorizer.authorize(&Attributes {
            user,
            verb: &verb,
            resource_request: true,
            group: &group,
            version: &version,
            resource: &plural,
            subresource: &sub,
            namespace: &namespace,
            name: &name,
            path: "",
            field_selector: &field_selector,
        })
    } else if path.is_object() {
        let (verb, p) = (s(path, "verb"), s(path, "path"));
        ctx.api
            .authorizer
            .authorize(&Attributes::path(user, &verb, &p))
    } else {
        return Err(ApiError::bad_request(
            "exactly one of nonResourceAttributes or resourceAttributes must be specified",
        ));
    };
    Ok(match decision {
        Ok(reason) if reason.is_empty() => json!({"allowed": true}),
        Ok(reason) => json!({"allowed": true, "reason": reason}),
        Err(reason) if reason.is_empty() => json!({"allowed": false}),
        Err(reason) => json!({"allowed": false, "reason": reason}),
    })
}

/// The status of a SelfSubjectRulesReview.
fn rules_review(ctx: &Ctx<'_>, user: &UserInfo, namespace: &str) -> Value {
    let Some(rules) = ctx.api.authorizer.rules_for(user, namespace) else {
        return json!({
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
            "incomplete": false,
        });
    };
    let (mut resource_rules, mut non_resource_rules) = (Vec::new(), Vec::new());
    for rule in rules {
        if rule.non_resource_urls.is_empty() {
            resource_rules.push(rule.to_json());
        } else {
            non_resource_rules
                .push(json!({"verbs": rule.verbs, "nonResourceURLs": rule.non_resource_urls}));
        }
    }
    json!({"resourceRules": resource_rules, "nonResourceRules": non_resource_rules, "incomplete": false})
}
