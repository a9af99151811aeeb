//! Deleting a pod for a NoExecute taint, as upstream's taint managers do
//! (`tainteviction.addConditionAndDeletePod`, and the device taint manager's copy of it): first the
//! `DisruptionTarget` condition, so the pod's owner (a Job's pod failure policy, for one) can tell
//! why it went, then the delete.

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::Api;
use serde_json::json;

/// Why a pod is being deleted: the `DisruptionTarget` condition's reason and message.
pub(crate) struct DisruptionTarget<'a> {
    pub reason: &'a str,
    pub message: &'a str,
}

/// Marks the pod `DisruptionTarget=True` and deletes it. A pod already gone is not an error. With
/// `uid`, the delete is conditional on it, and a 409 (another pod now has the name) counts as
/// done: the pod that was meant is gone.
pub(crate) async fn mark_disruption_target_and_delete(
    api: &Api<Pod>,
    name: &str,
    why: DisruptionTarget<'_>,
    uid: Option<String>,
) -> Result<(), String> {
    let condition = json!({"status": {"conditions": [{
        "type": "DisruptionTarget", "status": "True", "reason": why.reason, "message": why.message,
        "lastTransitionTime": jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    }]}});
    match api
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(&condition))
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
        Err(e) => return Err(format!("DisruptionTarget condition: {e}")),
    }
    let conditional = uid.is_some();
    let params = DeleteParams {
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || (conditional && e.code == 409) => Ok(()),
        Err(e) => Err(format!("delete: {e}")),
    }
}
