//! Pod status writes and mirror pods (upstream `pkg/kubelet/status/status_manager.go` and
//! `pkg/kubelet/pod/mirror_client.go`): a pod's status is patched into `pods/status` when it differs
//! from what was written last; a static pod's status goes to its mirror pod, which is created (owned
//! by the Node, annotated `kubernetes.io/config.mirror: <hash>`) when missing or stale and deleted
//! when the static pod goes. Terminated pods being deleted are finally deleted with grace period 0
//! and a UID precondition, as upstream's `canBeDeleted` path does.
//!
//! Difference: writes happen from the pod's worker right after each sync (upstream batches them on a
//! separate loop); the order per pod is the same.

use std::collections::HashMap;
use std::sync::Mutex;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::Api;
use serde_json::{json, Value};

use crate::podconfig::{
    CONFIG_HASH_ANNOTATION, CONFIG_MIRROR_ANNOTATION, CONFIG_SEEN_ANNOTATION,
    CONFIG_SOURCE_ANNOTATION,
};

pub struct StatusManager {
    client: Option<kube::Client>,
    node_name: String,
    /// Pod UID -> the status last written.
    last: Mutex<HashMap<String, Value>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn is_static(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(CONFIG_SOURCE_ANNOTATION))
        .is_some_and(|s| s != crate::podconfig::API_SOURCE)
}

pub fn is_mirror(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(CONFIG_MIRROR_ANNOTATION))
}

impl StatusManager {
    pub fn new(client: Option<kube::Client>, node_name: &str) -> StatusManager {
        StatusManager {
            client,
            node_name: node_name.to_string(),
            last: Mutex::default(),
        }
    }

    /// The status last written for a pod, to compute the next one against.
    pub fn last(&self, uid: &str) -> Option<Value> {
        lock(&self.last).get(uid).cloned()
    }

    pub fn forget(&self, uid: &str) {
        lock(&self.last).remove(uid);
    }

    /// Writes `status` for `pod` unless it was already written.
    pub async fn set(&self, pod: &Pod, status: Value) -> Result<(), String> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if lock(&self.last).get(&uid) == Some(&status) {
            return Ok(());
        }
        let Some(client) = &self.client else {
            lock(&self.last).insert(uid, status);
            return Ok(());
        };
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or("");
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let target_uid = if is_static(pod) {
            match self.ensure_mirror(pod).await? {
                Some(u) => u,
                None => return Ok(()),
            }
        } else {
            uid.clone()
        };
        let patch = json!({"metadata": {"uid": target_uid}, "status": status});
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => {
                lock(&self.last).insert(uid, status);
                Ok(())
            }
            // Gone or replaced by another pod of the same name: nothing to report to.
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
            Err(e) => Err(format!("pod {ns}/{name} status: {e}")),
        }
    }

    /// Deletes a terminated pod for good (grace period 0, UID precondition).
    pub async fn delete_terminated(&self, pod: &Pod) -> Result<(), String> {
        let Some(client) = &self.client else {
            return Ok(());
        };
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or("");
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: pod.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
            Err(e) => Err(format!("delete pod {ns}/{name}: {e}")),
        }
    }

    /// Makes sure a static pod has an up-to-date mirror pod; returns the mirror's UID.
    pub async fn ensure_mirror(&self, pod: &Pod) -> Result<Option<String>, String> {
        let Some(client) = &self.client else {
            return Ok(None);
        };
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or("");
        let hash = pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(CONFIG_HASH_ANNOTATION))
            .cloned()
            .unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        if let Some(existing) = api
            .get_opt(name)
            .await
            .map_err(|e| format!("mirror pod {ns}/{name}: {e}"))?
        {
            let current = existing
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(CONFIG_MIRROR_ANNOTATION));
            if current == Some(&hash) && existing.metadata.deletion_timestamp.is_none() {
                return Ok(existing.metadata.uid);
            }
            // A stale mirror (another manifest, or an ordinary pod of that name): replace it.
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: existing.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            let _ = api.delete(name, &params).await;
            return Ok(None);
        }
        let node_uid = Api::<Node>::all(client.clone())
            .get(&self.node_name)
            .await
            .ok()
            .and_then(|n| n.metadata.uid);
        let mut annotations = pod.metadata.annotations.clone().unwrap_or_default();
        annotations.remove(CONFIG_SEEN_ANNOTATION);
        annotations.insert(CONFIG_MIRROR_ANNOTATION.into(), hash);
        let mut mirror = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": ns, "labels": pod.metadata.labels, "annotations": annotations},
            "spec": pod.spec,
        });
        if let Some(uid) = node_uid {
            mirror["metadata"]["ownerReferences"] = json!([{
                "apiVersion": "v1", "kind": "Node", "name": self.node_name, "uid": uid, "controller": true
            }]);
        }
        let mirror: Pod = serde_json::from_value(mirror).map_err(|e| e.to_string())?;
        match api.create(&PostParams::default(), &mirror).await {
            Ok(p) => Ok(p.metadata.uid),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
            Err(e) => Err(format!("create mirror pod {ns}/{name}: {e}")),
        }
    }

    /// Deletes the mirror pod of a static pod that is gone.
    pub async fn delete_mirror(&self, pod: &Pod) -> Result<(), String> {
        let Some(client) = &self.client else {
            return Ok(());
        };
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let name = pod.metadata.name.as_deref().unwrap_or("");
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let Some(existing) = api.get_opt(name).await.map_err(|e| e.to_string())? else {
            return Ok(());
        };
        if !is_mirror(&existing) {
            return Ok(());
        }
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: existing.metadata.uid.clone(),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(name, &params).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
            Err(e) => Err(format!("delete mirror pod {ns}/{name}: {e}")),
        }
    }
}
