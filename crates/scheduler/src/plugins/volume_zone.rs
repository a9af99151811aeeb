//! VolumeZone (upstream `volumezone`): the zone and region labels of the PVs bound to the pod's
//! `persistentVolumeClaim`s (`topology.kubernetes.io/zone`/`region` and the deprecated
//! `failure-domain.beta.kubernetes.io/zone`/`region`; a value may list several zones joined by
//! `__`) must match the node's: UnschedulableAndUnresolvable, "node(s) had no available volume
//! zone". A node without any of these labels fits (a single-zone cluster); a PV's beta label is
//! matched against the node's GA label when the node lacks the beta one.
//!
//! PreFilter, as upstream, is UnschedulableAndUnresolvable for a claim without a name
//! ("PersistentVolumeClaim had no name"), a missing claim (`persistentvolumeclaim "<name>" not
//! found`), an unbound claim without a class ("PersistentVolumeClaim had no pv name and
//! storageClass name"), with a missing class (`storageclass.storage.k8s.io "<name>" not found`),
//! with a class without a binding mode (`VolumeBindingMode not set for StorageClass "<name>"`) or
//! of an `Immediate` class ("PersistentVolume had no name"), and for a bound claim whose PV is
//! missing (`persistentvolume "<name>" not found`). Unbound `WaitForFirstConsumer` claims are
//! skipped (VolumeBinding places them); so are generic ephemeral volumes, and a pod whose volumes
//! carry no zone labels skips Filter.
//!
//! Upstream 1.36 has no Score for this plugin, nor does this one. Differs from upstream: queueing
//! hints are by event type only (upstream also asks whether the added class is
//! WaitForFirstConsumer, the claim is the pod's, the PV's zone labels changed).

use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, Pod};

use crate::framework::{
    action, ClusterEvent, CycleState, EventResource, FilterPlugin, Handle, NodeInfo, Plugin,
    PreFilterPlugin, PreFilterResult, Status,
};

pub const ERR_REASON_CONFLICT: &str = "node(s) had no available volume zone";

const STATE_KEY: &str = "PreFilterVolumeZone";

const LABEL_BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
const LABEL_BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";
const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
const LABEL_REGION: &str = "topology.kubernetes.io/region";

/// Upstream `topologyLabels`, in its order.
const TOPOLOGY_LABELS: [&str; 4] = [LABEL_BETA_ZONE, LABEL_BETA_REGION, LABEL_ZONE, LABEL_REGION];

/// Upstream `LabelMultiZoneDelimiter`.
const MULTI_ZONE_DELIMITER: &str = "__";

pub struct VolumeZone {
    handle: Handle,
}

/// One topology label of a PV (upstream `pvTopology`).
#[derive(Clone, Debug, PartialEq)]
struct PvTopology {
    pv: String,
    key: &'static str,
    values: Vec<String>,
}

#[derive(Clone)]
struct State(Arc<Vec<PvTopology>>);

/// Upstream `LabelZonesToSet`: the `__`-separated values, trimmed; `None` when one is empty.
fn zones(value: &str) -> Option<Vec<String>> {
    value
        .split(MULTI_ZONE_DELIMITER)
        .map(|z| Some(z.trim()).filter(|z| !z.is_empty()).map(String::from))
        .collect()
}

/// Upstream `getPVTopologies`: the PV's topology labels that parse (others are ignored).
fn pv_topologies(pv: &PersistentVolume) -> Vec<PvTopology> {
    let Some(labels) = pv.metadata.labels.as_ref() else {
        return Vec::new();
    };
    TOPOLOGY_LABELS
        .iter()
        .copied()
        .filter_map(|key| {
            Some(PvTopology {
                pv: pv.metadata.name.clone().unwrap_or_default(),
                key,
                values: zones(labels.get(key)?)?,
            })
        })
        .collect()
}

/// Upstream `translateToGALabel`.
fn ga_label(key: &str) -> &str {
    match key {
        LABEL_BETA_REGION => LABEL_REGION,
        LABEL_BETA_ZONE => LABEL_ZONE,
        other => other,
    }
}

fn unresolvable(msg: impl Into<String>) -> Status {
    Status::UnschedulableAndUnresolvable(msg.into())
}

impl VolumeZone {
    pub fn new(handle: Handle) -> VolumeZone {
        VolumeZone { handle }
    }

    /// Upstream `getPVbyPod`: the topologies of the PVs bound to the pod's claims.
    fn pod_topologies(&self, pod: &Pod) -> Result<Vec<PvTopology>, Status> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        let listers = &self.handle.listers;
        let mut out = Vec::new();
        let claims = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .filter_map(|v| v.persistent_volume_claim.as_ref());
        for claim in claims {
            let name = &claim.claim_name;
            if name.is_empty() {
                return Err(unresolvable("PersistentVolumeClaim had no name"));
            }
            let Some(pvc) = listers.pvcs.get(&format!("{ns}/{name}")) else {
                return Err(unresolvable(format!(
                    "persistentvolumeclaim \"{name}\" not found"
                )));
            };
            let volume = pvc
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .unwrap_or("");
            if volume.is_empty() {
                let class = apimachinery::quota::evaluator::pvc_class(&pvc);
                if class.is_empty() {
                    return Err(unresolvable(
                        "PersistentVolumeClaim had no pv name and storageClass name",
                    ));
                }
                let Some(sc) = listers.storage_classes.get(&class) else {
                    return Err(unresolvable(format!(
                        "storageclass.storage.k8s.io \"{class}\" not found"
                    )));
                };
                match sc.volume_binding_mode.as_deref() {
                    None => {
                        return Err(unresolvable(format!(
                            "VolumeBindingMode not set for StorageClass \"{class}\""
                        )))
                    }
                    Some("WaitForFirstConsumer") => continue,
                    Some(_) => return Err(unresolvable("PersistentVolume had no name")),
                }
            }
            let Some(pv) = listers.pvs.get(volume) else {
                return Err(unresolvable(format!(
                    "persistentvolume \"{volume}\" not found"
                )));
            };
            out.extend(pv_topologies(&pv));
        }
        Ok(out)
    }
}

impl Plugin for VolumeZone {
    fn name(&self) -> &'static str {
        "VolumeZone"
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            // A new WaitForFirstConsumer class (binding modes are immutable).
            ClusterEvent::new(EventResource::StorageClass, action::ADD),
            ClusterEvent::new(EventResource::Node, action::ADD | action::UPDATE_NODE_LABEL),
            ClusterEvent::new(
                EventResource::PersistentVolumeClaim,
                action::ADD | action::UPDATE,
            ),
            ClusterEvent::new(
                EventResource::PersistentVolume,
                action::ADD | action::UPDATE,
            ),
        ]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for VolumeZone {
    fn pre_filter(&self, state: &mut CycleState, pod: &Pod) -> (Option<PreFilterResult>, Status) {
        match self.pod_topologies(pod) {
            Err(s) => (None, s),
            Ok(t) if t.is_empty() => (None, Status::Skip),
            Ok(t) => {
                state.write(STATE_KEY, State(Arc::new(t)));
                (None, Status::Success)
            }
        }
    }
}

impl FilterPlugin for VolumeZone {
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        if pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .is_none_or(|v| v.is_empty())
        {
            return Status::Success;
        }
        let computed;
        let topologies = match state.read::<State>(STATE_KEY) {
            Some(s) => s.0.as_slice(),
            None => match self.pod_topologies(pod) {
                Ok(t) => {
                    computed = t;
                    computed.as_slice()
                }
                Err(s) => return s,
            },
        };
        let Some(labels) = node.labels() else {
            return Status::Success;
        };
        if !TOPOLOGY_LABELS.iter().any(|l| labels.contains_key(*l)) {
            // No zone constraints on the node (a single-zone cluster).
            return Status::Success;
        }
        for t in topologies {
            let value = labels.get(t.key).or_else(|| labels.get(ga_label(t.key)));
            if !value.is_some_and(|v| t.values.contains(v)) {
                return unresolvable(ERR_REASON_CONFLICT);
            }
        }
        Status::Success
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{handle_with, labeled_node, pod, st_of};
    use serde_json::{json, Value};

    fn pvc(name: &str, volume: Option<&str>, class: Option<&str>) -> Value {
        json!({"kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "default"},
            "spec": {"volumeName": volume, "storageClassName": class}})
    }

    fn pv(name: &str, labels: Value) -> Value {
        json!({"kind": "PersistentVolume", "metadata": {"name": name, "labels": labels}, "spec": {}})
    }

    fn class(name: &str, mode: Option<&str>) -> Value {
        json!({"kind": "StorageClass", "metadata": {"name": name}, "provisioner": "p",
            "volumeBindingMode": mode})
    }

    fn pod_with_claims(claims: &[&str]) -> Pod {
        let vols: Vec<Value> = claims
            .iter()
            .enumerate()
            .map(|(i, c)| json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        pod("p", json!({ "volumes": vols }))
    }

    fn objects() -> Vec<Value> {
        vec![
            pv("pv-a", json!({LABEL_ZONE: "us-a"})),
            pv("pv-ab", json!({LABEL_ZONE: "us-a__us-b"})),
            pv(
                "pv-beta",
                json!({LABEL_BETA_ZONE: "us-b", LABEL_BETA_REGION: "us"}),
            ),
            pv("pv-region", json!({LABEL_REGION: "eu"})),
            pv("pv-plain", json!({"other": "x"})),
            pv("pv-bad", json!({LABEL_ZONE: "us-a__"})),
            pvc("a", Some("pv-a"), None),
            pvc("ab", Some("pv-ab"), None),
            pvc("beta", Some("pv-beta"), None),
            pvc("region", Some("pv-region"), None),
            pvc("plain", Some("pv-plain"), None),
            pvc("bad", Some("pv-bad"), None),
            pvc("lost", Some("gone"), None),
            pvc("wffc", None, Some("wffc")),
            pvc("immediate", None, Some("immediate")),
            pvc("unset", None, Some("unset")),
            pvc("no-class", None, None),
            pvc("missing-class", None, Some("nope")),
            class("wffc", Some("WaitForFirstConsumer")),
            class("immediate", Some("Immediate")),
            class("unset", None),
        ]
    }

    #[test]
    fn pre_filter_and_filter() {
        let conflict = unresolvable(ERR_REASON_CONFLICT);
        let nodes = [
            labeled_node("zone-a", json!({LABEL_ZONE: "us-a", LABEL_REGION: "us"})),
            labeled_node("zone-b", json!({LABEL_ZONE: "us-b", LABEL_REGION: "us"})),
            labeled_node(
                "beta-b",
                json!({LABEL_BETA_ZONE: "us-b", LABEL_BETA_REGION: "us"}),
            ),
            labeled_node("unlabeled", json!({"kubernetes.io/hostname": "x"})),
        ];
        let ok = Status::Success;
        // (name, claims, prefilter, filter on zone-a, zone-b, beta-b, unlabeled)
        type Case<'a> = (&'a str, Vec<&'a str>, Status, [Status; 4]);
        let cases: Vec<Case> = vec![
            (
                "no claims",
                vec![],
                Status::Skip,
                [ok.clone(), ok.clone(), ok.clone(), ok.clone()],
            ),
            (
                "zone a",
                vec!["a"],
                ok.clone(),
                [ok.clone(), conflict.clone(), conflict.clone(), ok.clone()],
            ),
            (
                "zones a or b",
                vec!["ab"],
                ok.clone(),
                [ok.clone(), ok.clone(), conflict.clone(), ok.clone()],
            ),
            // The PV's beta labels match a node's GA labels too.
            (
                "beta labels",
                vec!["beta"],
                ok.clone(),
                [conflict.clone(), ok.clone(), ok.clone(), ok.clone()],
            ),
            (
                "region",
                vec!["region"],
                ok.clone(),
                [
                    conflict.clone(),
                    conflict.clone(),
                    conflict.clone(),
                    ok.clone(),
                ],
            ),
            (
                "two claims, both must match",
                vec!["a", "ab"],
                ok.clone(),
                [ok.clone(), conflict.clone(), conflict.clone(), ok.clone()],
            ),
            (
                "no zone labels",
                vec!["plain"],
                Status::Skip,
                [ok.clone(), ok.clone(), ok.clone(), ok.clone()],
            ),
            (
                "unparsable label is ignored",
                vec!["bad"],
                Status::Skip,
                [ok.clone(), ok.clone(), ok.clone(), ok.clone()],
            ),
            (
                "unbound WaitForFirstConsumer",
                vec!["wffc", "a"],
                ok.clone(),
                [ok.clone(), conflict.clone(), conflict.clone(), ok.clone()],
            ),
        ];
        for (name, claims, want_pre, want) in cases {
            let vz = VolumeZone::new(handle_with(&objects()));
            let p = pod_with_claims(&claims);
            let mut st = st_of(&nodes);
            let (_, pre) = vz.pre_filter(&mut st, &p);
            assert_eq!(pre, want_pre, "{name}: prefilter");
            for (n, w) in nodes.iter().zip(want) {
                if pre.is_success() {
                    assert_eq!(vz.filter(&st, &p, n), w, "{name}: {}", n.name());
                }
                // Without PreFilter's state Filter finds the volumes itself.
                assert_eq!(
                    vz.filter(&st_of(&[]), &p, n),
                    w,
                    "{name}: {} (no state)",
                    n.name()
                );
            }
        }
    }

    #[test]
    fn unresolvable_claims() {
        let cases = [
            ("missing", "persistentvolumeclaim \"missing\" not found"),
            ("lost", "persistentvolume \"gone\" not found"),
            ("immediate", "PersistentVolume had no name"),
            (
                "unset",
                "VolumeBindingMode not set for StorageClass \"unset\"",
            ),
            (
                "no-class",
                "PersistentVolumeClaim had no pv name and storageClass name",
            ),
            (
                "missing-class",
                "storageclass.storage.k8s.io \"nope\" not found",
            ),
            ("", "PersistentVolumeClaim had no name"),
        ];
        let node = labeled_node("zone-a", json!({LABEL_ZONE: "us-a"}));
        for (claim, want) in cases {
            let vz = VolumeZone::new(handle_with(&objects()));
            let p = pod_with_claims(&["a", claim]);
            let (_, pre) = vz.pre_filter(&mut st_of(&[]), &p);
            assert_eq!(pre, unresolvable(want), "{claim}");
            assert_eq!(
                vz.filter(&st_of(&[]), &p, &node),
                unresolvable(want),
                "{claim}: filter"
            );
        }
    }

    #[test]
    fn beta_storage_class_annotation() {
        let mut claim = pvc("annotated", None, None);
        claim["metadata"]["annotations"] =
            json!({"volume.beta.kubernetes.io/storage-class": "wffc"});
        let vz = VolumeZone::new(handle_with(&[
            claim,
            class("wffc", Some("WaitForFirstConsumer")),
        ]));
        let (_, pre) = vz.pre_filter(&mut st_of(&[]), &pod_with_claims(&["annotated"]));
        assert_eq!(pre, Status::Skip);
    }

    #[test]
    fn label_zones() {
        assert_eq!(zones("a"), Some(vec!["a".to_string()]));
        assert_eq!(
            zones(" a __b "),
            Some(vec!["a".to_string(), "b".to_string()])
        );
        assert_eq!(zones("a____b"), None);
        assert_eq!(zones(""), None);
    }
}
