//! The API side of preemption (upstream `preemption.Evaluator.prepareCandidate`): each victim gets
//! the `DisruptionTarget` condition (reason PreemptionByScheduler) and a `Preempted` event and is
//! deleted; lower-priority pods nominated to the same node lose their nomination.

use std::sync::Arc;

use client::events::EventType;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, Resource};
use serde_json::json;

use crate::framework::{Framework, PostFilterResult};
use crate::scheduler::Shared;

pub(crate) fn spawn_prepare_candidate(
    shared: &Arc<Shared>,
    fw: &Arc<Framework>,
    pod: &Arc<Pod>,
    result: PostFilterResult,
) {
    let (shared, fw, pod) = (shared.clone(), fw.clone(), pod.clone());
    tokio::spawn(async move {
        let node = result.nominated_node.clone().unwrap_or_default();
        let scheduler = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.clone())
            .unwrap_or_else(|| fw.profile_name.clone());
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        for victim in &result.victims {
            let ns = victim.metadata.namespace.clone().unwrap_or_default();
            let name = victim.metadata.name.clone().unwrap_or_default();
            // A victim waiting at Permit is rejected rather than deleted.
            if let Some(vuid) = victim.metadata.uid.as_deref() {
                if fw.waiting_pods().iter().any(|w| w == vuid) {
                    fw.reject(vuid, "DefaultPreemption", "preempted");
                    continue;
                }
            }
            let api: Api<Pod> = Api::namespaced(shared.client.clone(), &ns);
            let now = jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string();
            let patch = json!({"status": {"conditions": [{"type": "DisruptionTarget", "status": "True",
                "reason": "PreemptionByScheduler",
                "message": format!("{scheduler}: preempting to accommodate a higher priority pod"),
                "lastTransitionTime": now}]}});
            if let Err(e) = api
                .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await
            {
                tracing::warn!(pod = %name, error = %e, "cannot mark the victim");
            }
            let dp = DeleteParams {
                preconditions: victim.metadata.uid.clone().map(|u| Preconditions {
                    uid: Some(u),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match api.delete(&name, &dp).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => {
                    tracing::warn!(pod = %name, error = %e, "cannot delete the victim");
                    continue;
                }
            }
            shared.recorder.event(
                &victim.object_ref(&()),
                EventType::Normal,
                "Preempted",
                &format!("Preempted by pod {uid} on node {node}"),
            );
        }
        for p in &result.clear_nominated {
            let api: Api<Pod> = Api::namespaced(
                shared.client.clone(),
                p.metadata.namespace.as_deref().unwrap_or(""),
            );
            let patch = json!({"status": {"nominatedNodeName": null}});
            let name = p.metadata.name.clone().unwrap_or_default();
            if let Err(e) = api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::debug!(pod = %name, error = %e, "cannot clear the nomination");
            }
        }
    });
}
