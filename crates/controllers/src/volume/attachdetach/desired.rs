//! The desired state of the world (upstream `attachdetach/cache/desired_state_of_world.go`): the
//! managed nodes, the volumes each should have attached, and the pods (by UID) on that node that
//! use each volume. A volume stays wanted while any of its pods is recorded, even if its claim
//! can no longer be resolved: only a pod's deletion, termination or replacement (or its driver no
//! longer needing attachment) takes it out.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use super::volumes::VolumeSpec;

/// One volume wanted on one node.
#[derive(Clone, Debug)]
pub struct DesiredVolume {
    pub spec: VolumeSpec,
    /// The pods using it, by UID (upstream's unique pod name).
    pub pods: BTreeMap<String, Arc<Pod>>,
    /// A Multi-Attach error was already reported for it (upstream reports it once).
    pub multi_attach_reported: bool,
}

/// Upstream `VolumeToAttach` as the reconciler reads it.
#[derive(Clone, Debug)]
pub struct VolumeToAttach {
    pub volume: String,
    pub node: String,
    pub spec: VolumeSpec,
    pub pods: Vec<Arc<Pod>>,
    pub multi_attach_reported: bool,
}

/// One (pod, volume, node) entry (upstream `PodToAdd`).
#[derive(Clone, Debug)]
pub struct PodEntry {
    pub uid: String,
    pub pod: Arc<Pod>,
    pub volume: String,
    pub node: String,
}

#[derive(Debug, Default)]
pub struct DesiredState {
    nodes: BTreeMap<String, BTreeMap<String, DesiredVolume>>,
}

impl DesiredState {
    /// Manages `node` from now on; returns whether it was new.
    pub fn add_node(&mut self, node: &str) -> bool {
        if self.nodes.contains_key(node) {
            return false;
        }
        self.nodes.insert(node.to_string(), BTreeMap::new());
        true
    }

    /// Stops managing `node`; refused while it still has volumes to attach.
    pub fn delete_node(&mut self, node: &str) -> Result<(), String> {
        match self.nodes.get(node) {
            Some(volumes) if !volumes.is_empty() => Err(format!(
                "failed to delete node {node:?} from list of nodes managed by attach/detach controller--the node still contains {} volumes in its list of volumes to attach",
                volumes.len()
            )),
            _ => {
                self.nodes.remove(node);
                Ok(())
            }
        }
    }

    pub fn node_exists(&self, node: &str) -> bool {
        self.nodes.contains_key(node)
    }

    /// Records that pod `uid` on `node` uses the volume; returns its unique name. A volume already
    /// wanted keeps its first spec, as upstream.
    pub fn add_pod(
        &mut self,
        uid: &str,
        pod: Arc<Pod>,
        spec: &VolumeSpec,
        node: &str,
    ) -> Result<String, String> {
        let Some(volumes) = self.nodes.get_mut(node) else {
            return Err(format!(
                "no node with the name {node:?} exists in the list of managed nodes"
            ));
        };
        let name = spec.unique_name();
        let entry = volumes
            .entry(name.clone())
            .or_insert_with(|| DesiredVolume {
                spec: spec.clone(),
                pods: BTreeMap::new(),
                multi_attach_reported: false,
            });
        // Keep the newest copy of the pod: events name it.
        entry.pods.insert(uid.to_string(), pod);
        Ok(name)
    }

    /// Forgets that pod `uid` uses the volume on `node`; the volume goes once no pod uses it.
    pub fn delete_pod(&mut self, uid: &str, volume: &str, node: &str) {
        let Some(volumes) = self.nodes.get_mut(node) else {
            return;
        };
        let Some(entry) = volumes.get_mut(volume) else {
            return;
        };
        entry.pods.remove(uid);
        if entry.pods.is_empty() {
            volumes.remove(volume);
        }
    }

    pub fn volume_exists(&self, volume: &str, node: &str) -> bool {
        self.nodes
            .get(node)
            .is_some_and(|volumes| volumes.contains_key(volume))
    }

    /// Every (volume, node) wanted, in node then volume order.
    pub fn volumes_to_attach(&self) -> Vec<VolumeToAttach> {
        let mut out = Vec::new();
        for (node, volumes) in &self.nodes {
            for (volume, entry) in volumes {
                out.push(VolumeToAttach {
                    volume: volume.clone(),
                    node: node.clone(),
                    spec: entry.spec.clone(),
                    pods: entry.pods.values().cloned().collect(),
                    multi_attach_reported: entry.multi_attach_reported,
                });
            }
        }
        out
    }

    pub fn set_multi_attach_reported(&mut self, volume: &str, node: &str) {
        if let Some(entry) = self.nodes.get_mut(node).and_then(|v| v.get_mut(volume)) {
            entry.multi_attach_reported = true;
        }
    }

    /// Every (pod, volume, node) recorded. Upstream's `GetPodToAdd` keeps one entry per pod, so
    /// its populator drops one volume of a pod per pass; all are listed here.
    pub fn pods(&self) -> Vec<PodEntry> {
        let mut out = Vec::new();
        for (node, volumes) in &self.nodes {
            for (volume, entry) in volumes {
                for (uid, pod) in &entry.pods {
                    out.push(PodEntry {
                        uid: uid.clone(),
                        pod: pod.clone(),
                        volume: volume.clone(),
                        node: node.clone(),
                    });
                }
            }
        }
        out
    }

    /// The pods on `nodes` that use `volume` (upstream `GetVolumePodsOnNodes`).
    pub fn pods_on_nodes(&self, nodes: &[String], volume: &str) -> Vec<Arc<Pod>> {
        let mut seen = BTreeSet::new();
        let mut out = Vec::new();
        for node in nodes {
            let Some(entry) = self.nodes.get(node).and_then(|v| v.get(volume)) else {
                continue;
            };
            for (uid, pod) in &entry.pods {
                if seen.insert(uid.clone()) {
                    out.push(pod.clone());
                }
            }
        }
        out
    }

    /// The unique names of the volumes wanted on `node`.
    pub fn volumes_on_node(&self, node: &str) -> Vec<String> {
        self.nodes
            .get(node)
            .map(|v| v.keys().cloned().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(handle: &str) -> VolumeSpec {
        VolumeSpec {
            name: format!("pv-{handle}"),
            driver: "d".into(),
            handle: handle.into(),
            multi_attach_allowed: false,
        }
    }

    fn pod(name: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns"}})).unwrap(),
        )
    }

    #[test]
    fn pods_hold_volumes_on_managed_nodes() {
        let mut dsw = DesiredState::default();
        assert!(
            dsw.add_pod("u1", pod("a"), &spec("h1"), "n1").is_err(),
            "unmanaged node"
        );
        assert!(dsw.add_node("n1"));
        assert!(!dsw.add_node("n1"));
        let v = dsw.add_pod("u1", pod("a"), &spec("h1"), "n1").unwrap();
        assert_eq!(v, "kubernetes.io/csi/d^h1");
        dsw.add_pod("u2", pod("b"), &spec("h1"), "n1").unwrap();
        assert!(dsw.volume_exists(&v, "n1"));
        assert_eq!(dsw.volumes_to_attach()[0].pods.len(), 2);
        assert!(
            dsw.delete_node("n1").is_err(),
            "refused while volumes are wanted"
        );

        dsw.delete_pod("u1", &v, "n1");
        assert!(dsw.volume_exists(&v, "n1"), "u2 still uses it");
        dsw.delete_pod("u2", &v, "n1");
        assert!(!dsw.volume_exists(&v, "n1"));
        assert!(dsw.delete_node("n1").is_ok());
        assert!(!dsw.node_exists("n1"));
    }

    #[test]
    fn listings_for_the_populator_and_multi_attach() {
        let mut dsw = DesiredState::default();
        dsw.add_node("n1");
        dsw.add_node("n2");
        let v1 = dsw.add_pod("u1", pod("a"), &spec("h1"), "n1").unwrap();
        let v2 = dsw.add_pod("u1", pod("a"), &spec("h2"), "n1").unwrap();
        dsw.add_pod("u3", pod("c"), &spec("h1"), "n2").unwrap();
        let entries = dsw.pods();
        assert_eq!(entries.len(), 3, "one entry per pod and volume");
        assert_eq!(
            dsw.pods_on_nodes(&["n2".into()], &v1)
                .iter()
                .map(|p| p.metadata.name.clone().unwrap())
                .collect::<Vec<_>>(),
            vec!["c"]
        );
        assert!(dsw.pods_on_nodes(&["n2".into()], &v2).is_empty());
        dsw.set_multi_attach_reported(&v1, "n2");
        let reported: Vec<_> = dsw
            .volumes_to_attach()
            .into_iter()
            .map(|v| (v.node, v.multi_attach_reported))
            .collect();
        assert_eq!(
            reported,
            vec![
                ("n1".into(), false),
                ("n1".into(), false),
                ("n2".into(), true)
            ]
        );
        assert_eq!(dsw.volumes_on_node("n1"), vec![v1, v2]);
    }
}
