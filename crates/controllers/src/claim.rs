//! Claiming pods for a controller (upstream `ControllerRefManager.ClaimPods`), for the StatefulSet and
//! DaemonSet controllers: pods it controls that still match are kept, matching orphans are adopted,
//! controlled pods that no longer match are released.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::{json, Value};

#[derive(Debug, Default)]
pub struct Claim {
    /// Pods the owner controls after this claim (adopted ones included).
    pub owned: Vec<Arc<Pod>>,
    pub adopt: Vec<Arc<Pod>>,
    pub release: Vec<Arc<Pod>>,
}

fn terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// `matches` is the selector plus any controller-specific filter. Orphans are adopted only while the
/// owner is not being deleted, and never when they are terminating or finished.
pub fn claim_pods(owner: &ObjectMeta, pods: &[Arc<Pod>], matches: impl Fn(&Pod) -> bool) -> Claim {
    let uid = owner.uid.as_deref().unwrap_or("");
    let deleting = owner.deletion_timestamp.is_some();
    let mut c = Claim::default();
    for pod in pods {
        let controller = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true));
        // `matches` (a selector over the pod's labels) runs only for the pods this owner may keep
        // or adopt: the namespace's pods are mostly other owners' (100 StatefulSets' syncs
        // matched every one of 1,000 pods each time).
        match controller {
            Some(r) if r.uid == uid => {
                if matches(pod) {
                    c.owned.push(pod.clone());
                } else if pod.metadata.deletion_timestamp.is_none() {
                    c.release.push(pod.clone());
                }
            }
            Some(_) => {}
            None if !deleting
                && pod.metadata.deletion_timestamp.is_none()
                && !terminal(pod)
                && matches(pod) =>
            {
                c.adopt.push(pod.clone());
                c.owned.push(pod.clone());
            }
            None => {}
        }
    }
    c
}

/// A pod's labels in the form the label selector matcher takes.
pub fn pod_labels(pod: &Pod) -> serde_json::Map<String, Value> {
    pod.metadata
        .labels
        .iter()
        .flatten()
        .map(|(k, v)| (k.clone(), json!(v)))
        .collect()
}

/// The `namespace/name` keys of the owners whose selector matches an orphan pod, to let them adopt it
/// (upstream `getPodsForStatefulSet`/`getDaemonSetsForPod` on pod events). Empty for controlled pods.
pub fn orphan_owners<K>(owners: &[Arc<K>], pod: &Pod, selector: impl Fn(&K) -> Value) -> Vec<String>
where
    K: k8s_openapi::Metadata<Ty = ObjectMeta>,
{
    let controlled = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true));
    if controlled {
        return Vec::new();
    }
    let labels = pod_labels(pod);
    owners
        .iter()
        .filter(|o| {
            apimachinery::labels::selector_from_label_selector(&selector(o))
                .is_ok_and(|s| !s.is_empty() && s.matches(&labels))
        })
        .map(|o| {
            let m = o.metadata();
            format!(
                "{}/{}",
                m.namespace.as_deref().unwrap_or(""),
                m.name.as_deref().unwrap_or("")
            )
        })
        .collect()
}

/// Writes the adoptions and releases (uid preconditions, so a pod replaced meanwhile is left alone).
pub async fn apply(
    api: &Api<Pod>,
    owner: &ObjectMeta,
    kind: &str,
    claim: &Claim,
) -> Result<(), String> {
    let owner_ref = crate::history::controller_ref(owner, kind);
    for pod in &claim.adopt {
        let patch = json!({"metadata": {"ownerReferences": [owner_ref], "uid": pod.metadata.uid}});
        let name = pod.metadata.name.as_deref().unwrap_or("");
        api.patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .map_err(|e| format!("adopt {name}: {e}"))?;
    }
    for pod in &claim.release {
        let patch = json!({"metadata": {"ownerReferences": [{"$patch": "delete", "uid": owner.uid}],
                                        "uid": pod.metadata.uid}});
        let name = pod.metadata.name.as_deref().unwrap_or("");
        match api
            .patch(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(format!("release {name}: {e}")),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, owner: Option<&str>, app: &str, extra: Value) -> Arc<Pod> {
        let mut v = json!({"metadata": {"name": name, "labels": {"app": app}}, "status": {"phase": "Running"}});
        if let Some(uid) = owner {
            v["metadata"]["ownerReferences"] = json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "o", "uid": uid, "controller": true}]);
        }
        if let Some(obj) = extra.as_object() {
            for (k, x) in obj {
                v["metadata"][k] = x.clone();
            }
        }
        Arc::new(serde_json::from_value(v).unwrap())
    }

    #[test]
    fn keeps_adopts_and_releases() {
        let owner: ObjectMeta = serde_json::from_value(json!({"name": "o", "uid": "u"})).unwrap();
        let pods = vec![
            pod("mine", Some("u"), "web", json!({})),
            pod("orphan", None, "web", json!({})),
            pod(
                "orphan-going",
                None,
                "web",
                json!({"deletionTimestamp": "2026-01-01T00:00:00Z"}),
            ),
            pod("stray", Some("u"), "db", json!({})),
            pod("theirs", Some("v"), "web", json!({})),
        ];
        let c = claim_pods(&owner, &pods, |p| pod_labels(p)["app"] == "web");
        let names = |v: &[Arc<Pod>]| {
            v.iter()
                .map(|p| p.metadata.name.clone().unwrap())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&c.owned), ["mine", "orphan"]);
        assert_eq!(names(&c.adopt), ["orphan"]);
        assert_eq!(names(&c.release), ["stray"]);
    }
}
