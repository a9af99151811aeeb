//! NodeVolumeLimits (upstream `nodevolumelimits`, the CSI plugin `CSILimits` of `csi.go`): the
//! number of distinct CSI volumes per driver on a node may not exceed the driver's
//! `spec.drivers[].allocatable.count` in the node's CSINode: Unschedulable, "node(s) exceed max
//! volume count".
//!
//! A volume is `<driver>/<volume handle>`, found through the pod's `persistentVolumeClaim`s and
//! generic ephemeral volumes' claims: a bound claim's PV gives its CSI driver and handle (a non-CSI
//! PV is not counted); an unbound claim, or one whose PV is not known, counts as one volume of its
//! StorageClass's provisioner (upstream's random-prefixed handle per claim). A volume several pods
//! on the node use counts once. Inline CSI ephemeral volumes (`csi:`) are not counted, as upstream
//! (they are not attached). Nothing is checked on a node without CSINode, or whose drivers
//! declare no count, or for a pod without claims (PreFilter skips it). For the pod to schedule, a
//! missing claim is UnschedulableAndUnresolvable (`looking up PVC <ns>/<name>: persistentvolumeclaim
//! "<name>" not found`) and an ephemeral volume's claim the pod does not own is an error; the
//! claims of the node's pods that cannot be found are not counted.
//!
//! Differs from upstream 1.36: no CSI migration of in-tree volumes (upstream counts in-tree EBS,
//! GCE PD, Azure Disk, Cinder, vSphere and Portworx volumes under their CSI driver when the
//! CSINode marks the plugin migrated), no counting of the node's VolumeAttachments of volumes no
//! pod there uses, and no `VolumeLimitScaling` (alpha) "CSI driver is not installed" check. The
//! pod's own volumes are resolved once in PreFilter (they do not depend on the node without
//! migration); their errors are still reported by Filter, per node, as upstream.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use rand::distr::{Alphanumeric, SampleString};

use crate::framework::{
    action, ClusterEvent, CycleState, EventResource, FilterPlugin, Handle, NodeInfo, Plugin,
    PreFilterPlugin, PreFilterResult, Status,
};

pub const ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED: &str = "node(s) exceed max volume count";

const STATE_KEY: &str = "PreFilterNodeVolumeLimits";

pub struct NodeVolumeLimits {
    handle: Handle,
    /// Makes the handles of unbound claims unlike any real volume handle (upstream
    /// `randomVolumeIDPrefix`).
    random_prefix: String,
}

/// Volume unique name (`<driver>/<handle>`) -> driver.
type Volumes = HashMap<String, String>;

/// The pod's own volumes, or the status Filter reports for every node.
#[derive(Clone)]
struct State(Arc<Result<Volumes, Status>>);

impl NodeVolumeLimits {
    pub fn new(handle: Handle) -> NodeVolumeLimits {
        NodeVolumeLimits {
            handle,
            random_prefix: Alphanumeric.sample_string(&mut rand::rng(), 32),
        }
    }

    /// Upstream `filterAttachableVolumes`: adds the CSI volumes of `pod`'s claims to `out`. For the
    /// pod to schedule (`new_pod`) a claim that cannot be found fails; other pods' are skipped.
    fn attachable_volumes(
        &self,
        pod: &Pod,
        new_pod: bool,
        out: &mut Volumes,
    ) -> Result<(), Status> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        for (name, ephemeral) in apimachinery::volumes::pod_claims(pod) {
            if name.is_empty() {
                return Err(Status::Error("PersistentVolumeClaim had no name".into()));
            }
            let Some(pvc) = self.handle.listers.pvcs.get(&format!("{ns}/{name}")) else {
                if new_pod {
                    return Err(Status::UnschedulableAndUnresolvable(format!(
                        "looking up PVC {ns}/{name}: persistentvolumeclaim \"{name}\" not found"
                    )));
                }
                continue;
            };
            if ephemeral && !controlled_by(&pvc, pod) {
                return Err(Status::Error(format!(
                    "PVC {ns}/{name} was not created for pod {ns}/{} (pod is not owner)",
                    pod.metadata.name.as_deref().unwrap_or("")
                )));
            }
            if let Some((driver, handle)) = self.csi_driver_info(&pvc) {
                out.insert(format!("{driver}/{handle}"), driver);
            }
        }
        Ok(())
    }

    /// Upstream `getCSIDriverInfo`: the CSI driver and volume handle of a claim's PV; through the
    /// class when the claim is unbound or its PV unknown; none for a PV that is not CSI.
    fn csi_driver_info(&self, pvc: &PersistentVolumeClaim) -> Option<(String, String)> {
        let volume = pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .filter(|v| !v.is_empty());
        let Some(pv) = volume.and_then(|v| self.handle.listers.pvs.get(v)) else {
            return self.csi_driver_info_from_class(pvc);
        };
        let csi = pv.spec.as_ref().and_then(|s| s.csi.as_ref())?;
        Some((csi.driver.clone(), csi.volume_handle.clone()))
    }

    /// Upstream `getCSIDriverInfoFromSC`: the class's provisioner and a handle of the claim's own.
    /// A claim without a (known) class must be bound before it is scheduled: not counted.
    fn csi_driver_info_from_class(&self, pvc: &PersistentVolumeClaim) -> Option<(String, String)> {
        let class = apimachinery::quota::evaluator::pvc_class(pvc);
        if class.is_empty() {
            return None;
        }
        let sc = self.handle.listers.storage_classes.get(&class)?;
        let handle = format!(
            "{}-{}/{}",
            self.random_prefix,
            pvc.metadata.namespace.as_deref().unwrap_or(""),
            pvc.metadata.name.as_deref().unwrap_or("")
        );
        Some((sc.provisioner.clone(), handle))
    }

    /// The node's CSINode's per-driver volume limits (upstream `getVolumeLimits`).
    fn limits(&self, node: &NodeInfo) -> HashMap<String, i64> {
        let Some(csi_node) = self.handle.listers.csi_nodes.get(node.name()) else {
            return HashMap::new();
        };
        csi_node
            .spec
            .drivers
            .iter()
            .filter_map(|d| {
                let count = d.allocatable.as_ref()?.count?;
                Some((d.name.clone(), i64::from(count)))
            })
            .collect()
    }
}

/// Upstream `metav1.IsControlledBy(pvc, pod)`.
fn controlled_by(pvc: &PersistentVolumeClaim, pod: &Pod) -> bool {
    pvc.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == pod.metadata.uid.as_ref())
}

impl Plugin for NodeVolumeLimits {
    fn name(&self) -> &'static str {
        "NodeVolumeLimits"
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            // A new CSINode, or a driver's count going up.
            ClusterEvent::new(EventResource::CSINode, action::ADD | action::UPDATE),
            ClusterEvent::new(EventResource::Pod, action::DELETE),
            ClusterEvent::new(EventResource::PersistentVolumeClaim, action::ADD),
        ]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for NodeVolumeLimits {
    fn pre_filter(&self, state: &mut CycleState, pod: &Pod) -> (Option<PreFilterResult>, Status) {
        let has_claims = pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
            .any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some());
        if !has_claims {
            return (None, Status::Skip);
        }
        let mut volumes = Volumes::new();
        let r = self.attachable_volumes(pod, true, &mut volumes);
        state.write(STATE_KEY, State(Arc::new(r.map(|()| volumes))));
        (None, Status::Success)
    }
}

impl FilterPlugin for NodeVolumeLimits {
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let computed;
        let new_volumes = match state.read::<State>(STATE_KEY) {
            Some(s) => s.0.as_ref(),
            None => {
                let mut v = Volumes::new();
                computed = self.attachable_volumes(pod, true, &mut v).map(|()| v);
                &computed
            }
        };
        let new_volumes = match new_volumes {
            Ok(v) if v.is_empty() => return Status::Success,
            Ok(v) => v,
            Err(s) => return s.clone(),
        };
        let limits = self.limits(node);
        if limits.is_empty() {
            return Status::Success;
        }
        let mut new_volumes = new_volumes.clone();
        let mut attached = Volumes::new();
        for p in &node.pods {
            if let Err(s) = self.attachable_volumes(&p.pod, false, &mut attached) {
                return Status::Error(s.reason().unwrap_or_default().to_string());
            }
        }
        let mut attached_count: HashMap<&str, i64> = HashMap::new();
        for (volume, driver) in &attached {
            // A volume the node's pods already use is not attached again.
            new_volumes.remove(volume);
            *attached_count.entry(driver).or_default() += 1;
        }
        let mut new_count: HashMap<&str, i64> = HashMap::new();
        for driver in new_volumes.values() {
            *new_count.entry(driver).or_default() += 1;
        }
        for (driver, count) in new_count {
            if let Some(max) = limits.get(driver) {
                if attached_count.get(driver).copied().unwrap_or(0) + count > *max {
                    return Status::Unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED.into());
                }
            }
        }
        Status::Success
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{handle_with, node, node_info, pod, st_of};
    use serde_json::{json, Value};

    const DRIVER: &str = "ebs.csi.aws.com";
    const OTHER: &str = "pd.csi.storage.gke.io";

    /// A claim bound to `volume` (or unbound with `class`).
    fn pvc(name: &str, volume: Option<&str>, class: Option<&str>) -> Value {
        json!({"kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "default"},
            "spec": {"volumeName": volume, "storageClassName": class}})
    }

    fn csi_pv(name: &str, driver: &str) -> Value {
        json!({"kind": "PersistentVolume", "metadata": {"name": name},
            "spec": {"csi": {"driver": driver, "volumeHandle": format!("h-{name}")}}})
    }

    fn csi_node(name: &str, limits: &[(&str, Option<i32>)]) -> Value {
        let drivers: Vec<Value> = limits
            .iter()
            .map(|(d, c)| {
                let mut v = json!({"name": d, "nodeID": name});
                if let Some(c) = c {
                    v["allocatable"] = json!({"count": c});
                }
                v
            })
            .collect();
        json!({"kind": "CSINode", "metadata": {"name": name}, "spec": {"drivers": drivers}})
    }

    fn pod_with_claims(name: &str, claims: &[&str]) -> Pod {
        let vols: Vec<Value> = claims
            .iter()
            .enumerate()
            .map(|(i, c)| json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": c}}))
            .collect();
        pod(name, json!({ "volumes": vols }))
    }

    fn standard_objects() -> Vec<Value> {
        let mut o = vec![
            json!({"kind": "StorageClass", "metadata": {"name": "csi"}, "provisioner": DRIVER}),
            json!({"kind": "StorageClass", "metadata": {"name": "other"}, "provisioner": OTHER}),
            json!({"kind": "PersistentVolume", "metadata": {"name": "host"},
                "spec": {"hostPath": {"path": "/x"}}}),
            pvc("host", Some("host"), None),
            pvc("unbound-a", None, Some("csi")),
            pvc("unbound-b", None, Some("csi")),
            pvc("unbound-other", None, Some("other")),
            pvc("unbound-no-class", None, None),
            pvc("unbound-unknown-class", None, Some("nope")),
            pvc("lost-pv", Some("gone"), Some("csi")),
            csi_node("n1", &[(DRIVER, Some(2)), (OTHER, None)]),
        ];
        for v in ["a", "b", "c"] {
            o.push(csi_pv(v, DRIVER));
            o.push(pvc(v, Some(v), None));
        }
        o.push(csi_pv("o", OTHER));
        o.push(pvc("o", Some("o"), None));
        o
    }

    #[test]
    fn limits() {
        let exceeded = Status::Unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED.into());
        // (name, claims of pods on n1, claims of the new pod, filter on n1 (limit 2 for DRIVER))
        type Case<'a> = (&'a str, Vec<Vec<&'a str>>, Vec<&'a str>, Status);
        let cases: Vec<Case> = vec![
            ("two volumes fit", vec![], vec!["a", "b"], Status::Success),
            (
                "three do not",
                vec![],
                vec!["a", "b", "c"],
                exceeded.clone(),
            ),
            (
                "one plus two on the node",
                vec![vec!["a"], vec!["b"]],
                vec!["c"],
                exceeded.clone(),
            ),
            (
                "a volume in use on the node counts once",
                vec![vec!["a"], vec!["a", "b"]],
                vec!["a"],
                Status::Success,
            ),
            (
                "the same claim twice in the pod",
                vec![vec!["a"]],
                vec!["b", "b"],
                Status::Success,
            ),
            (
                "other driver has no limit",
                vec![vec!["a", "b"]],
                vec!["o", "unbound-other"],
                Status::Success,
            ),
            (
                "non-CSI volume is not counted",
                vec![vec!["a", "b"]],
                vec!["host"],
                Status::Success,
            ),
            (
                "unbound claims count by their class's provisioner",
                vec![vec!["a"]],
                vec!["unbound-a", "unbound-b"],
                exceeded.clone(),
            ),
            (
                "one unbound claim fits",
                vec![vec!["a"]],
                vec!["unbound-a"],
                Status::Success,
            ),
            (
                "a claim of no class is not counted",
                vec![vec!["a", "b"]],
                vec!["unbound-no-class"],
                Status::Success,
            ),
            (
                "a claim of an unknown class is not counted",
                vec![vec!["a", "b"]],
                vec!["unbound-unknown-class"],
                Status::Success,
            ),
            (
                "a claim whose PV is gone counts through its class",
                vec![vec!["a", "b"]],
                vec!["lost-pv"],
                exceeded.clone(),
            ),
            (
                "the node's pods' missing claims are skipped",
                vec![vec!["missing", "a"]],
                vec!["b"],
                Status::Success,
            ),
        ];
        for (name, existing, new, want) in cases {
            let nvl = NodeVolumeLimits::new(handle_with(&standard_objects()));
            let pods = existing
                .iter()
                .enumerate()
                .map(|(i, c)| pod_with_claims(&format!("old{i}"), c))
                .collect();
            let n1 = node_info(node("n1", json!({}), json!({}), json!({})), pods);
            let p = pod_with_claims("new", &new);
            let mut st = st_of(std::slice::from_ref(&n1));
            assert_eq!(
                nvl.pre_filter(&mut st, &p).1,
                Status::Success,
                "{name}: prefilter"
            );
            assert_eq!(nvl.filter(&st, &p, &n1), want, "{name}");
            // Without PreFilter's state Filter computes the pod's volumes itself.
            assert_eq!(nvl.filter(&st_of(&[]), &p, &n1), want, "{name}: no state");
        }
    }

    #[test]
    fn nodes_without_limits_and_errors() {
        let objects = [
            standard_objects(),
            vec![
                csi_node("no-count", &[(DRIVER, None)]),
                csi_node("zero", &[(DRIVER, Some(0))]),
            ],
        ]
        .concat();
        let nvl = NodeVolumeLimits::new(handle_with(&objects));
        let plain = |name: &str| node_info(node(name, json!({}), json!({}), json!({})), vec![]);
        let p = pod_with_claims("new", &["a", "b", "c"]);
        let mut st = st_of(&[]);
        assert_eq!(nvl.pre_filter(&mut st, &p).1, Status::Success);
        assert_eq!(nvl.filter(&st, &p, &plain("no-csinode")), Status::Success);
        assert_eq!(nvl.filter(&st, &p, &plain("no-count")), Status::Success);
        assert_eq!(
            nvl.filter(&st, &p, &plain("zero")),
            Status::Unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED.into())
        );
        // No claims: skipped.
        let none = pod(
            "p",
            json!({"volumes": [{"name": "c", "csi": {"driver": DRIVER}}]}),
        );
        assert_eq!(nvl.pre_filter(&mut st_of(&[]), &none).1, Status::Skip);
        // A missing claim of the pod to schedule fails every node, even those without limits.
        let missing = pod_with_claims("p", &["missing"]);
        let mut st = st_of(&[]);
        assert_eq!(nvl.pre_filter(&mut st, &missing).1, Status::Success);
        assert_eq!(
            nvl.filter(&st, &missing, &plain("no-csinode")),
            Status::UnschedulableAndUnresolvable(
                "looking up PVC default/missing: persistentvolumeclaim \"missing\" not found"
                    .into()
            )
        );
    }

    #[test]
    fn generic_ephemeral_volumes() {
        let eph = |name: &str, uid: &str| {
            let mut p = pod(
                name,
                json!({"volumes": [{"name": "scratch",
                "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]}),
            );
            p.metadata.uid = Some(uid.into());
            p
        };
        let claim = |name: &str, owner: &str| {
            let mut c = pvc(name, None, Some("csi"));
            c["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod",
                "name": "x", "uid": owner, "controller": true}]);
            c
        };
        let objects = [
            standard_objects(),
            vec![
                claim("e1-scratch", "u1"),
                claim("e2-scratch", "u2"),
                claim("e3-scratch", "someone-else"),
            ],
        ]
        .concat();
        let nvl = NodeVolumeLimits::new(handle_with(&objects));
        let n1 = node_info(
            node("n1", json!({}), json!({}), json!({})),
            vec![pod_with_claims("old", &["a"]), eph("e1", "u1")],
        );
        let check = |p: &Pod| {
            let mut st = st_of(std::slice::from_ref(&n1));
            assert_eq!(nvl.pre_filter(&mut st, p).1, Status::Success);
            nvl.filter(&st, p, &n1)
        };
        assert_eq!(
            check(&eph("e2", "u2")),
            Status::Unschedulable(ERR_REASON_MAX_VOLUME_COUNT_EXCEEDED.into()),
            "a + e1's claim on the node, e2's claim is the third"
        );
        assert_eq!(
            check(&eph("e3", "u3")),
            Status::Error(
                "PVC default/e3-scratch was not created for pod default/e3 (pod is not owner)"
                    .into()
            )
        );
        assert_eq!(
            check(&eph("e4", "u4")),
            Status::UnschedulableAndUnresolvable(
                "looking up PVC default/e4-scratch: persistentvolumeclaim \"e4-scratch\" not found"
                    .into()
            )
        );
    }
}
