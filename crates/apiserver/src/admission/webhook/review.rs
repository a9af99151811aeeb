//! The AdmissionReview a webhook receives and the checks on its answer (upstream
//! `webhook/request/admissionreview.go` and `webhook/errors`): the request names the invocation's
//! resource and kind and the request's own, the user, the objects, `dryRun` and the operation's
//! options; the response must echo the request's uid (v1), carry a patch only with a patch type
//! and only from mutating webhooks; a denial becomes `admission webhook "<name>" denied the
//! request: <message>` with the webhook's code (at least 400).

use std::collections::BTreeMap;

use apimachinery::status::{ApiError, Cause, Details};
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::matching::Invocation;
use super::{MAX_PATCH_BYTES, MAX_RESPONSE_ANNOTATIONS, MAX_RESPONSE_WARNINGS};
use crate::admission::{Attributes, Operation};

/// The AdmissionReview versions we send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReviewVersion {
    V1,
    V1beta1,
}

impl ReviewVersion {
    pub fn parse(s: &str) -> Option<ReviewVersion> {
        match s {
            "v1" => Some(ReviewVersion::V1),
            "v1beta1" => Some(ReviewVersion::V1beta1),
            _ => None,
        }
    }

    pub fn api_version(self) -> &'static str {
        match self {
            ReviewVersion::V1 => "admission.k8s.io/v1",
            ReviewVersion::V1beta1 => "admission.k8s.io/v1beta1",
        }
    }
}

/// What one AdmissionReview request is built from.
pub struct ReviewRequest<'a> {
    pub uid: &'a str,
    /// The resource whose rule matched, and its kind (the objects are in this version).
    pub invocation: &'a Invocation,
    /// The request's own resource and kind.
    pub request: &'a Invocation,
    pub attrs: &'a Attributes<'a>,
    /// `None` for DELETE.
    pub object: Option<&'a Value>,
    pub old_object: Option<&'a Value>,
}

#[derive(Serialize)]
struct GvkOut<'a> {
    group: &'a str,
    version: &'a str,
    kind: &'a str,
}

#[derive(Serialize)]
struct GvrOut<'a> {
    group: &'a str,
    version: &'a str,
    resource: &'a str,
}

#[derive(Serialize)]
struct UserOut<'a> {
    username: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    uid: &'a str,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    groups: &'a [String],
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct RequestOut<'a> {
    uid: &'a str,
    kind: GvkOut<'a>,
    resource: GvrOut<'a>,
    #[serde(skip_serializing_if = "str::is_empty")]
    sub_resource: &'a str,
    request_kind: GvkOut<'a>,
    request_resource: GvrOut<'a>,
    #[serde(skip_serializing_if = "str::is_empty")]
    request_sub_resource: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    name: &'a str,
    #[serde(skip_serializing_if = "str::is_empty")]
    namespace: &'a str,
    operation: &'a str,
    user_info: UserOut<'a>,
    object: Option<&'a Value>,
    old_object: Option<&'a Value>,
    dry_run: bool,
    options: Value,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReviewOut<'a> {
    kind: &'static str,
    api_version: &'static str,
    request: RequestOut<'a>,
}

/// The operation's options as upstream passes them (`CreateOptions`, ...), with what rkube knows
/// of them: the dry run.
fn options(attrs: &Attributes<'_>) -> Value {
    let kind = match attrs.operation {
        Operation::Create => "CreateOptions",
        Operation::Update => "UpdateOptions",
        Operation::Delete => "DeleteOptions",
        Operation::Connect => return Value::Null,
    };
    let mut o = serde_json::json!({"kind": kind, "apiVersion": "meta.k8s.io/v1"});
    if attrs.dry_run {
        o["dryRun"] = serde_json::json!(["All"]);
    }
    o
}

/// The JSON body of the request.
pub fn encode(version: ReviewVersion, r: &ReviewRequest<'_>) -> Result<Vec<u8>, serde_json::Error> {
    let inv = r.invocation;
    let req = r.request;
    let namespace = match (r.attrs.group, r.attrs.resource) {
        // Upstream names a namespace write's namespace as the namespace itself.
        ("", "namespaces") => r.attrs.name,
        _ => r.attrs.namespace,
    };
    serde_json::to_vec(&ReviewOut {
        kind: "AdmissionReview",
        api_version: version.api_version(),
        request: RequestOut {
            uid: r.uid,
            kind: GvkOut {
                group: &inv.kind.group,
                version: &inv.kind.version,
                kind: &inv.kind.kind,
            },
            resource: GvrOut {
                group: &inv.group,
                version: &inv.version,
                resource: &inv.resource,
            },
            sub_resource: &inv.subresource,
            request_kind: GvkOut {
                group: &req.kind.group,
                version: &req.kind.version,
                kind: &req.kind.kind,
            },
            request_resource: GvrOut {
                group: &req.group,
                version: &req.version,
                resource: &req.resource,
            },
            request_sub_resource: &req.subresource,
            name: r.attrs.name,
            namespace,
            operation: r.attrs.operation.as_str(),
            user_info: UserOut {
                username: &r.attrs.user.name,
                uid: &r.attrs.user.uid,
                groups: &r.attrs.user.groups,
            },
            object: r.object,
            old_object: r.old_object,
            dry_run: r.attrs.dry_run,
            options: options(r.attrs),
        },
    })
}

/// The `request` variable of `matchConditions` (upstream `CreateAdmissionRequest`): the
/// AdmissionReview request of this invocation without uid and objects.
pub fn request_value(
    attrs: &Attributes<'_>,
    invocation: &Invocation,
    request: &Invocation,
) -> Value {
    let body = encode(
        ReviewVersion::V1,
        &ReviewRequest {
            uid: "",
            invocation,
            request,
            attrs,
            object: None,
            old_object: None,
        },
    );
    body.ok()
        .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        .and_then(|mut v| v.get_mut("request").map(Value::take))
        .unwrap_or(Value::Null)
}

#[derive(Deserialize)]
struct ReviewIn {
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(default)]
    kind: String,
    response: Option<ResponseIn>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ResponseIn {
    #[serde(default)]
    uid: String,
    #[serde(default)]
    allowed: bool,
    status: Option<Value>,
    patch: Option<String>,
    patch_type: Option<String>,
    audit_annotations: Option<BTreeMap<String, String>>,
    warnings: Option<Vec<String>>,
}

/// A decoded answer.
pub struct Decoded(ReviewIn);

/// A usable answer.
#[derive(Debug, Default, PartialEq)]
pub struct Verdict {
    pub allowed: bool,
    pub status: Option<Value>,
    /// The decoded JSONPatch; `None` when there is none (or it is empty).
    pub patch: Option<Vec<u8>>,
    pub patch_type: String,
    pub audit_annotations: Vec<(String, String)>,
    pub warnings: Vec<String>,
}

/// Decodes a 2xx body (errors are the decoder's: a failed call, as upstream's `Into` fails).
pub fn decode(body: &[u8]) -> Result<Decoded, String> {
    serde_json::from_slice(body)
        .map(Decoded)
        .map_err(|e| format!("couldn't decode the response: {e}"))
}

/// `<group>/<version>, Kind=<kind>` as Go prints a GroupVersionKind.
fn gvk_string(api_version: &str, kind: &str) -> String {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    format!("{group}/{version}, Kind={kind}")
}

/// Upstream `VerifyAdmissionResponse`: the errors are the reasons of "received invalid webhook
/// response".
pub fn verify(
    version: ReviewVersion,
    uid: &str,
    mutating: bool,
    decoded: Decoded,
) -> Result<Verdict, String> {
    let review = decoded.0;
    let r = review.response.ok_or("webhook response was absent")?;
    let mut patch = r.patch.filter(|p| !p.is_empty());
    let mut patch_type = r.patch_type;
    match version {
        ReviewVersion::V1 => {
            if r.uid != uid {
                return Err(format!("expected response.uid={uid:?}, got {:?}", r.uid));
            }
            if review.api_version != "admission.k8s.io/v1" || review.kind != "AdmissionReview" {
                return Err(format!(
                    "expected webhook response of admission.k8s.io/v1, Kind=AdmissionReview, got {}",
                    gvk_string(&review.api_version, &review.kind)
                ));
            }
            if mutating {
                match (&patch, &patch_type) {
                    (Some(_), None) => {
                        return Err(
                            "webhook returned response.patch but not response.patchType".into()
                        )
                    }
                    (None, Some(_)) => {
                        return Err(
                            "webhook returned response.patchType but not response.patch".into()
                        )
                    }
                    (_, Some(t)) if t.is_empty() => {
                        return Err(format!(
                            "webhook returned invalid response.patchType of {t:?}"
                        ))
                    }
                    _ => {}
                }
            } else if patch.is_some() {
                return Err("validating webhook may not return response.patch".into());
            } else if patch_type.is_some() {
                return Err("validating webhook may not return response.patchType".into());
            }
        }
        // v1beta1 answers were never checked for uid, kind or patch type; a patch is JSONPatch.
        ReviewVersion::V1beta1 => {
            if !mutating {
                patch = None;
            }
            patch_type = patch.as_ref().map(|_| "JSONPatch".to_string());
        }
    }
    let patch = match patch {
        Some(b64) => {
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(b64.as_bytes())
                .map_err(|e| format!("illegal base64 data in response.patch: {e}"))?;
            if bytes.len() > MAX_PATCH_BYTES {
                return Err(format!("response.patch exceeds {MAX_PATCH_BYTES} bytes"));
            }
            Some(bytes)
        }
        None => None,
    };
    let mut warnings = r.warnings.unwrap_or_default();
    warnings.truncate(MAX_RESPONSE_WARNINGS);
    Ok(Verdict {
        allowed: r.allowed,
        status: r.status,
        patch,
        patch_type: patch_type.unwrap_or_default(),
        audit_annotations: r
            .audit_annotations
            .unwrap_or_default()
            .into_iter()
            .take(MAX_RESPONSE_ANNOTATIONS)
            .collect(),
        warnings,
    })
}

/// Upstream's `metav1.StatusReason` values; a reason outside them cannot be carried by
/// [`ApiError`] and is sent back empty.
fn known_reason(reason: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "Unauthorized",
        "Forbidden",
        "NotFound",
        "AlreadyExists",
        "Conflict",
        "Gone",
        "Invalid",
        "ServerTimeout",
        "StoreReadError",
        "Timeout",
        "TooManyRequests",
        "BadRequest",
        "MethodNotAllowed",
        "NotAcceptable",
        "RequestEntityTooLarge",
        "UnsupportedMediaType",
        "InternalError",
        "Expired",
        "ServiceUnavailable",
    ];
    KNOWN.iter().copied().find(|k| *k == reason).unwrap_or("")
}

/// Upstream `webhookerrors.ToStatusErr`: the webhook's status, its code at least 400, its message
/// prefixed with who denied the request.
pub fn denial(webhook: &str, status: Option<&Value>) -> ApiError {
    let field = |f: &str| status.and_then(|s| s.get(f));
    let text = |f: &str| field(f).and_then(Value::as_str).unwrap_or("");
    let code = field("code")
        .and_then(Value::as_i64)
        .filter(|c| (400..=599).contains(c))
        .unwrap_or(400) as u16;
    let denied_by = format!("admission webhook {webhook:?} denied the request");
    let message = match (text("message"), text("reason")) {
        ("", "") => format!("{denied_by} without explanation"),
        ("", reason) => format!("{denied_by}: {reason}"),
        (message, _) => format!("{denied_by}: {message}"),
    };
    let details = field("details").filter(|d| d.is_object()).map(|d| {
        let s = |f: &str| d.get(f).and_then(Value::as_str).unwrap_or("").to_string();
        Box::new(Details {
            name: s("name"),
            group: s("group"),
            kind: s("kind"),
            causes: d
                .get("causes")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .take(super::super::MAX_WARNINGS)
                .map(|c| {
                    let s = |f: &str| c.get(f).and_then(Value::as_str).unwrap_or("").to_string();
                    Cause {
                        reason: s("reason"),
                        message: s("message"),
                        field: s("field"),
                    }
                })
                .collect(),
            retry_after_seconds: d
                .get("retryAfterSeconds")
                .and_then(Value::as_u64)
                .and_then(|n| u32::try_from(n).ok()),
        })
    });
    ApiError {
        code,
        reason: known_reason(text("reason")),
        message,
        details,
    }
}

/// Upstream `NewDryRunUnsupportedErr`.
pub fn dry_run_unsupported(webhook: &str) -> ApiError {
    ApiError::bad_request(format!(
        "admission webhook {webhook:?} does not support dry run"
    ))
}

/// The message client-go gives a non-2xx answer whose body is not a `Status`
/// (`apierrors.NewGenericServerResponse`).
pub fn http_error(status: http::StatusCode, body: &[u8]) -> String {
    // A webhook may answer with a Status of its own; its message is the error then.
    if let Ok(s) = serde_json::from_slice::<Value>(body) {
        if s.get("kind").and_then(Value::as_str) == Some("Status") {
            if let Some(m) = s
                .get("message")
                .and_then(Value::as_str)
                .filter(|m| !m.is_empty())
            {
                return m.to_string();
            }
        }
    }
    let text = String::from_utf8_lossy(&body[..body.len().min(1024)])
        .trim()
        .to_string();
    match status.as_u16() {
        400 => "the server rejected our request for an unknown reason".into(),
        401 => "the server has asked for the client to provide credentials".into(),
        403 => "the server does not allow access to the requested resource".into(),
        404 => "the server could not find the requested resource".into(),
        405 => "the server does not allow this method on the requested resource".into(),
        409 => "the server reported a conflict".into(),
        422 => "the server rejected our request due to an error in our request".into(),
        429 => "the server has received too many requests and has asked us to try again later"
            .into(),
        503 => "the server is currently unable to handle the request".into(),
        504 => "the server was unable to return a response in the time allotted, but may still be processing the request".into(),
        code if code >= 500 => {
            format!("an error on the server ({text:?}) has prevented the request from succeeding")
        }
        code => format!(
            "the server responded with the status code {code} but did not return more information"
        ),
    }
}

#[cfg(test)]
#[path = "review_tests.rs"]
mod tests;
