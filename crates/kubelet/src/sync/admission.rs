//! The kubelet's admission of a pod before its first sandbox (upstream `canAdmitPod` in
//! `HandlePodAdditions`): the node-support checks of `kuberuntime::admit` (sysctls, AppArmor,
//! `supplementalGroupsPolicy`), then the predicate admission of `kuberuntime::admit_fit`
//! (resources beside the pods already admitted, selector/affinity, node name, host ports, NoExecute
//! taints). A refused pod fails with the reason and an event, as upstream's `rejectPod`.
//!
//! Upstream admits additions one at a time, in creation order, each against the pods admitted
//! before it. Here each pod's worker admits its own pod; the admitted set's lock makes the
//! decisions sequential, so two pods that only fit one at a time are never both admitted (the
//! first to arrive wins, not the older one).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::events::EventType;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use serde_json::json;

use super::pod_ref;
use super::resize::terminal;
use crate::kubelet::{lock, Kubelet};
use crate::kuberuntime::admit_fit;
use crate::kuberuntime::resize::apply_allocation;
use crate::kuberuntime::status::PodRecord;
use crate::kuberuntime::{self as kr};
use crate::status_manager::is_static;

/// The UIDs of the pods this kubelet admitted (upstream: the pod manager's non-terminal pods,
/// which all went through admission).
#[derive(Debug, Default)]
pub struct Admitted(Mutex<HashSet<String>>);

/// How long admission waits for the Node object before using the kubelet's own view of it.
const NODE_GET_TIMEOUT: Duration = Duration::from_secs(5);

/// A pod that went through admission: it was admitted by this kubelet, or, before a restart,
/// it ran (the kubelet that reported it Running admitted it).
fn was_admitted(uid: &str, pod: &Pod, admitted: &HashSet<String>) -> bool {
    admitted.contains(uid)
        || pod.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

impl Kubelet {
    /// The Node as the API server has it; else (standalone, API down) the kubelet's own view:
    /// its name, labels and allocatable (upstream `getNodeAnyWay`'s initial node).
    async fn node_for_admission(&self) -> Arc<Node> {
        if let Some(client) = &self.client {
            let api: Api<Node> = Api::all(client.clone());
            match tokio::time::timeout(NODE_GET_TIMEOUT, api.get(&self.config.node_name)).await {
                Ok(Ok(n)) => return Arc::new(n),
                Ok(Err(e)) => tracing::debug!(error = %e, "node for admission"),
                Err(_) => tracing::debug!("node for admission: timed out"),
            }
        }
        let node = json!({
            "metadata": {"name": self.config.node_name, "labels": crate::node::labels(&self.config)},
            "status": {"allocatable": self.node_allocatable},
        });
        Arc::new(serde_json::from_value(node).unwrap_or_default())
    }

    /// The node's admission of a pod that has not started yet; false when it was refused (its
    /// status is then Failed with the reason, and an event says why).
    pub(super) async fn admit(&self, pod: &Pod, record: &PodRecord) -> Result<bool, String> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let pending = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            None | Some("Pending") | Some("")
        );
        if record.sandbox_id.is_some() || !pending {
            // Running before (this kubelet or a previous one admitted it).
            lock(&self.admitted.0).insert(uid);
            return Ok(true);
        }
        if lock(&self.admitted.0).contains(&uid) {
            // Admitted earlier; its sandbox is not made yet (a failed attempt is retried).
            return Ok(true);
        }
        let node = kr::admit::NodeSupport {
            sysctls: &self.sysctls,
            apparmor: self.apparmor,
            strict_supplemental_groups: false,
        };
        let mut verdict = kr::admit::admit(pod, &node);
        if verdict.is_ok() {
            let node = self.node_for_admission().await;
            // The admitted set's lock is held from reading the other pods until this pod is
            // recorded, so concurrent admissions see each other. Lock order: admitted, then pods.
            let mut admitted = lock(&self.admitted.0);
            let others: Vec<Arc<Pod>> = {
                let pods = lock(&self.pods);
                admitted.retain(|u| pods.contains_key(u));
                pods.iter()
                    .filter(|(u, e)| {
                        u.as_str() != uid
                            && !e.removed
                            && !terminal(&e.pod)
                            && was_admitted(u, &e.pod, &admitted)
                    })
                    .map(|(u, e)| match self.allocations.get(u) {
                        Some(a) => Arc::new(apply_allocation(&e.pod, &a.containers)),
                        None => e.pod.clone(),
                    })
                    .collect()
            };
            let info = admit_fit::node_info(node, others);
            verdict = admit_fit::admit(pod, &info, is_static(pod));
            if verdict.is_ok() {
                admitted.insert(uid);
            }
        }
        let Err(r) = verdict else {
            return Ok(true);
        };
        tracing::info!(pod = %super::pod_desc(pod), reason = %r.reason, message = %r.message, "pod rejected");
        self.event(&pod_ref(pod), EventType::Warning, &r.reason, &r.message);
        let mut status = json!({
            "phase": "Failed",
            "reason": r.reason,
            "message": r.status_message(),
        });
        status["qosClass"] = json!(kr::config::qos_class(pod));
        // Not written: the sync fails and is retried, so the rejection is not lost.
        self.status.set(pod, status).await?;
        Ok(false)
    }
}
