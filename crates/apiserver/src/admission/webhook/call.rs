//! One call of one webhook, shared by the mutating and validating dispatchers (upstream's
//! `callAttrMutatingHook` / `callHook` up to the verdict): the dry-run check against
//! `sideEffects`, the AdmissionReview, the POST within `timeoutSeconds`, the answer's checks,
//! its audit annotations and warnings, and a denial as upstream's status error.

use std::borrow::Cow;

use bytes::Bytes;
use serde_json::Value;

use super::client::Client;
use super::matching::Invocation;
use super::review::{self, ReviewRequest, Verdict};
use super::source::Hook;
use super::HookError;
use crate::admission::Attributes;
use crate::ApiServer;

/// What one call is about: the invocation (and the objects in its version) and the request.
pub struct Subject<'a> {
    pub invocation: &'a Invocation,
    pub request: &'a Invocation,
    /// `None` for DELETE.
    pub object: Option<&'a Value>,
    pub old: Option<&'a Value>,
}

/// Calls `hook`; `Ok` carries an allowing verdict (a denial is [`HookError::Refused`]).
pub async fn call(
    api: &ApiServer,
    client: &Client,
    hook: &Hook,
    attrs: &Attributes<'_>,
    subject: Subject<'_>,
    mutating: bool,
) -> Result<Verdict, HookError> {
    if attrs.dry_run {
        match hook.side_effects.as_deref() {
            None => return Err(HookError::calling(&hook.name, "Webhook SideEffects is nil")),
            Some("None" | "NoneOnDryRun") => {}
            Some(_) => return Err(HookError::Refused(review::dry_run_unsupported(&hook.name))),
        }
    }
    let Some(version) = hook.review_version else {
        return Err(HookError::calling(
            &hook.name,
            "could not create admission objects: webhook does not accept known AdmissionReview versions (v1, v1beta1)",
        ));
    };
    let endpoint = hook
        .endpoint
        .as_ref()
        .map_err(|e| HookError::calling(&hook.name, format!("could not get REST client: {e}")))?;
    let uid = uuid::Uuid::new_v4().to_string();
    let body = review::encode(
        version,
        &ReviewRequest {
            uid: &uid,
            invocation: subject.invocation,
            request: subject.request,
            attrs,
            object: subject.object,
            old_object: subject.old,
        },
    )
    .map_err(|e| {
        HookError::calling(
            &hook.name,
            format!("could not create admission objects: {e}"),
        )
    })?;
    let failed =
        |why: String| HookError::calling(&hook.name, format!("failed to call webhook: {why}"));
    let (status, body) =
        super::client::send(api, client, endpoint, hook.timeout, Bytes::from(body))
            .await
            .map_err(failed)?;
    if !status.is_success() {
        return Err(failed(review::http_error(status, &body)));
    }
    let decoded = review::decode(&body).map_err(failed)?;
    let verdict = review::verify(version, &uid, mutating, decoded).map_err(|e| {
        HookError::calling(
            &hook.name,
            format!("received invalid webhook response: {e}"),
        )
    })?;
    for (key, value) in &verdict.audit_annotations {
        attrs
            .outcome
            .annotate(format!("{}/{key}", hook.name), value.clone());
    }
    for w in &verdict.warnings {
        attrs.outcome.warn(w.clone());
    }
    if !verdict.allowed {
        return Err(HookError::Refused(review::denial(
            &hook.name,
            verdict.status.as_ref(),
        )));
    }
    Ok(verdict)
}

/// Converts an object between versions of its resource (the one conversion rkube has between
/// differently shaped versions is core/events.k8s.io Events; the others differ in `apiVersion`
/// only). Objects of another kind (a subresource's) are left alone.
pub fn convert(obj: &mut Value, kind: &str, api_version: &str) {
    if obj.get("kind").and_then(Value::as_str) != Some(kind) {
        return;
    }
    apimachinery::conversion::to_served(obj, api_version);
    apimachinery::conversion::to_stored(obj, api_version);
    if obj.get("apiVersion").and_then(Value::as_str) != Some(api_version) {
        obj["apiVersion"] = Value::String(api_version.to_string());
    }
}

/// Whether an invocation sees the objects in another version than the request's.
pub fn needs_conversion(invocation: &Invocation, request: &Invocation) -> bool {
    invocation.kind != request.kind
}

/// An object of the request as `invocation` sees it: borrowed when the versions agree.
pub fn in_version<'v>(
    v: &'v Value,
    invocation: &Invocation,
    request: &Invocation,
) -> Cow<'v, Value> {
    if !needs_conversion(invocation, request) {
        return Cow::Borrowed(v);
    }
    let mut v = v.clone();
    convert(
        &mut v,
        &invocation.kind.kind,
        &invocation.kind.api_version(),
    );
    Cow::Owned(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn events_convert_between_their_groups() {
        let mut ev = json!({"apiVersion": "v1", "kind": "Event", "message": "m",
                            "involvedObject": {"kind": "Pod"}});
        convert(&mut ev, "Event", "events.k8s.io/v1");
        assert_eq!(ev["apiVersion"], "events.k8s.io/v1");
        assert_eq!(ev["note"], "m");
        assert_eq!(ev["regarding"]["kind"], "Pod");
        convert(&mut ev, "Event", "v1");
        assert_eq!(ev["apiVersion"], "v1");
        assert_eq!(ev["message"], "m");
    }

    #[test]
    fn other_versions_change_api_version_only_and_other_kinds_not_at_all() {
        let mut hpa = json!({"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler"});
        convert(&mut hpa, "HorizontalPodAutoscaler", "autoscaling/v1");
        assert_eq!(hpa["apiVersion"], "autoscaling/v1");
        let mut scale = json!({"apiVersion": "autoscaling/v1", "kind": "Scale"});
        convert(&mut scale, "Deployment", "apps/v1");
        assert_eq!(scale["apiVersion"], "autoscaling/v1");
    }
}
