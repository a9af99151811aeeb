//! API errors as `metav1.Status` (upstream `k8s.io/apimachinery/pkg/api/errors`): every failure the API
//! server returns is one of these, with upstream's HTTP code, `reason`, message wording and details, so
//! that kubectl and client libraries react to it as they do against upstream.

use std::fmt;

use serde_json::{json, Map, Value};

use crate::validation::field::FieldError;

/// Which resource an error is about: group and plural resource (for NotFound and friends) or kind (for
/// Invalid), as upstream's `schema.GroupResource` / `GroupKind`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Qualified {
    pub group: String,
    pub name: String,
}

impl Qualified {
    pub fn new(group: &str, name: &str) -> Qualified {
        Qualified {
            group: group.to_string(),
            name: name.to_string(),
        }
    }
}

impl fmt::Display for Qualified {
    /// `pods`, `deployments.apps`: upstream's `GroupResource.String()`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.name)
        } else {
            write!(f, "{}.{}", self.name, self.group)
        }
    }
}

/// One `StatusCause`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    pub reason: String,
    pub message: String,
    pub field: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    /// Boxed to keep `Result<_, ApiError>` small.
    pub details: Option<Box<Details>>,
}

/// `StatusDetails`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Details {
    pub name: String,
    pub group: String,
    /// Upstream puts the resource (plural) here for NotFound/AlreadyExists/Conflict, the kind for Invalid.
    pub kind: String,
    pub causes: Vec<Cause>,
    pub retry_after_seconds: Option<u32>,
}

impl ApiError {
    fn plain(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    fn about(
        code: u16,
        reason: &'static str,
        what: &Qualified,
        name: &str,
        message: String,
    ) -> ApiError {
        ApiError {
            code,
            reason,
            message,
            details: Some(Box::new(Details {
                name: name.to_string(),
                group: what.group.clone(),
                kind: what.name.clone(),
                ..Default::default()
            })),
        }
    }

    pub fn not_found(resource: &Qualified, name: &str) -> ApiError {
        Self::about(
            404,
            "NotFound",
            resource,
            name,
            format!("{resource} {name:?} not found"),
        )
    }

    pub fn already_exists(resource: &Qualified, name: &str) -> ApiError {
        Self::about(
            409,
            "AlreadyExists",
            resource,
            name,
            format!("{resource} {name:?} already exists"),
        )
    }

    /// A failed optimistic-concurrency check (resourceVersion or uid precondition).
    pub fn conflict(resource: &Qualified, name: &str, why: &str) -> ApiError {
        Self::about(
            409,
            "Conflict",
            resource,
            name,
            format!("Operation cannot be fulfilled on {resource} {name:?}: {why}"),
        )
    }

    /// The standard Conflict for a stale resourceVersion.
    pub fn conflict_modified(resource: &Qualified, name: &str) -> ApiError {
        Self::conflict(
            resource,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    /// 422 Invalid with one cause per field error. `kind` is the group and kind, e.g. ("apps", "Deployment").
    pub fn invalid(kind: &Qualified, name: &str, errors: &[FieldError]) -> ApiError {
        let qualified_kind = if kind.group.is_empty() {
            kind.name.clone()
        } else {
            format!("{}.{}", kind.name, kind.group)
        };
        let message = match errors {
            [] => format!("{qualified_kind} {name:?} is invalid"),
            [one] => format!("{qualified_kind} {name:?} is invalid: {one}"),
            many => {
                let all: Vec<String> = many.iter().map(|e| e.to_string()).collect();
                format!("{qualified_kind} {name:?} is invalid: [{}]", all.join(", "))
            }
        };
        ApiError {
            code: 422,
            reason: "Invalid",
            message,
            details: Some(Box::new(Details {
                name: name.to_string(),
                group: kind.group.clone(),
                kind: kind.name.clone(),
                causes: errors
                    .iter()
                    .map(|e| Cause {
                        reason: e.kind.cause_reason().to_string(),
                        message: e.body(),
                        field: e.field.to_string(),
                    })
                    .collect(),
                retry_after_seconds: None,
            })),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        Self::plain(400, "BadRequest", message)
    }

    pub fn unauthorized() -> ApiError {
        Self::plain(401, "Unauthorized", "Unauthorized")
    }

    pub fn forbidden(message: impl Into<String>) -> ApiError {
        Self::plain(403, "Forbidden", message)
    }

    /// An admission plugin's refusal (upstream `admission.NewForbidden` / `errors.NewForbidden`):
    /// `<resource> "<name>" is forbidden: <why>`, with the resource and name in the details.
    pub fn forbidden_about(resource: &Qualified, name: &str, why: &str) -> ApiError {
        let message = if name.is_empty() {
            format!("{resource} is forbidden: {why}")
        } else {
            format!("{resource} {name:?} is forbidden: {why}")
        };
        Self::about(403, "Forbidden", resource, name, message)
    }

    /// A resource exists but the verb is not supported on it.
    pub fn method_not_supported(resource: &Qualified, verb: &str) -> ApiError {
        Self::plain(
            405,
            "MethodNotAllowed",
            format!("{verb} is not supported on resources of kind {resource:?}"),
        )
    }

    pub fn not_acceptable(message: impl Into<String>) -> ApiError {
        Self::plain(406, "NotAcceptable", message)
    }

    /// A watch or list continuation from a revision no longer kept (410, reason Expired).
    pub fn gone(message: impl Into<String>) -> ApiError {
        Self::plain(410, "Expired", message)
    }

    pub fn resource_version_too_old(requested: i64, oldest: i64) -> ApiError {
        Self::gone(format!("too old resource version: {requested} ({oldest})"))
    }

    pub fn request_entity_too_large(message: impl Into<String>) -> ApiError {
        Self::plain(413, "RequestEntityTooLarge", message)
    }

    pub fn unsupported_media_type(content_type: &str) -> ApiError {
        Self::plain(415, "UnsupportedMediaType", format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/cbor (got {content_type:?})"))
    }

    pub fn internal(message: impl fmt::Display) -> ApiError {
        Self::plain(
            500,
            "InternalError",
            format!("Internal error occurred: {message}"),
        )
    }

    /// Upstream's "Too large resource version" (504 Timeout with a retry hint).
    pub fn too_large_resource_version(requested: i64, current: i64) -> ApiError {
        let mut e = Self::plain(
            504,
            "Timeout",
            format!("Too large resource version: {requested}, current: {current}"),
        );
        e.details = Some(Box::new(Details {
            causes: vec![Cause {
                reason: "ResourceVersionTooLarge".into(),
                message: "Too large resource version".into(),
                field: String::new(),
            }],
            retry_after_seconds: Some(1),
            ..Default::default()
        }));
        e
    }

    /// Upstream's `NewTooManyRequests`: 429 with a retry hint (also sent as `Retry-After`).
    pub fn too_many_requests(message: impl Into<String>, retry_after_seconds: u32) -> ApiError {
        let mut e = Self::plain(429, "TooManyRequests", message);
        e.details = Some(Box::new(Details {
            retry_after_seconds: Some(retry_after_seconds),
            ..Default::default()
        }));
        e
    }

    /// Upstream's `NewTimeoutError(message, 0)`: 504, reason Timeout, empty details.
    pub fn timeout(message: &str) -> ApiError {
        let mut e = Self::plain(504, "Timeout", format!("Timeout: {message}"));
        e.details = Some(Box::default());
        e
    }

    pub fn service_unavailable(message: impl Into<String>) -> ApiError {
        Self::plain(503, "ServiceUnavailable", message)
    }

    /// The `metav1.Status` object for the response body.
    pub fn to_status(&self) -> Value {
        let mut status = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
        });
        if let Some(d) = &self.details {
            let mut details = Map::new();
            if !d.name.is_empty() {
                details.insert("name".into(), d.name.clone().into());
            }
            if !d.group.is_empty() {
                details.insert("group".into(), d.group.clone().into());
            }
            if !d.kind.is_empty() {
                details.insert("kind".into(), d.kind.clone().into());
            }
            if !d.causes.is_empty() {
                let causes: Vec<Value> = d
                    .causes
                    .iter()
                    .map(|c| {
                        let mut cause = Map::new();
                        cause.insert("reason".into(), c.reason.clone().into());
                        cause.insert("message".into(), c.message.clone().into());
                        if !c.field.is_empty() {
                            cause.insert("field".into(), c.field.clone().into());
                        }
                        Value::Object(cause)
                    })
                    .collect();
                details.insert("causes".into(), causes.into());
            }
            if let Some(s) = d.retry_after_seconds {
                details.insert("retryAfterSeconds".into(), s.into());
            }
            status["details"] = Value::Object(details);
        }
        status["code"] = self.code.into();
        status
    }
}

impl fmt::Display for ApiError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for ApiError {}

/// The `Status` a successful delete returns when the object is gone at once (upstream returns the object
/// itself for most resources; this is for deletecollection-like paths).
pub fn success_status(details: Option<(&Qualified, &str, &str)>) -> Value {
    let mut status =
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"});
    if let Some((resource, name, uid)) = details {
        status["details"] =
            json!({"name": name, "group": resource.group, "kind": resource.name, "uid": uid});
    }
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::validation::field::FieldPath;

    #[test]
    fn not_found_matches_upstream() {
        let e = ApiError::not_found(&Qualified::new("apps", "deployments"), "web");
        assert_eq!(e.code, 404);
        assert_eq!(e.message, "deployments.apps \"web\" not found");
        let s = e.to_status();
        assert_eq!(s["reason"], "NotFound");
        assert_eq!(s["details"]["kind"], "deployments");
        assert_eq!(s["details"]["group"], "apps");
        assert_eq!(s["code"], 404);
    }

    #[test]
    fn invalid_aggregates_causes() {
        let errs = vec![
            FieldError::required(&FieldPath::root("spec").child("containers"), ""),
            FieldError::invalid(
                &FieldPath::root("metadata").child("name"),
                "A_b",
                "bad name",
            ),
        ];
        let e = ApiError::invalid(&Qualified::new("", "Pod"), "A_b", &errs);
        assert_eq!(
            e.message,
            "Pod \"A_b\" is invalid: [spec.containers: Required value, metadata.name: Invalid value: \"A_b\": bad name]"
        );
        let s = e.to_status();
        assert_eq!(s["details"]["causes"][0]["reason"], "FieldValueRequired");
        assert_eq!(s["details"]["causes"][1]["field"], "metadata.name");
        assert_eq!(s["code"], 422);
    }
}
