//! VolumeRestrictions (upstream `volumerestrictions`): two volume conflicts.
//!
//! - In-tree disks (upstream's old NoDiskConflict): a node is unfit when one of its pods already
//!   uses the same GCE PD (unless both mount it read-only), AWS EBS volume (always), RBD image
//!   (a shared monitor, same pool and image, unless both read-only) or iSCSI IQN (unless both
//!   read-only): Unschedulable, "node(s) had no available disk".
//! - ReadWriteOncePod claims: PreFilter counts the scheduled or assumed pods (the snapshot's)
//!   that use one of the pod's `persistentVolumeClaim`s whose access modes include
//!   ReadWriteOncePod; while that count is not zero every node is Unschedulable (not
//!   unresolvable, so preemption may evict the holder: `remove_pod` takes its uses off the count,
//!   `add_pod` puts them back). A claim that does not exist is UnschedulableAndUnresolvable
//!   (`persistentvolumeclaim "<name>" not found`). PreFilter skips the plugin when the pod has
//!   neither in-tree disks nor a held ReadWriteOncePod claim.
//!
//! Differs from upstream: upstream keeps the set of claims in use in the snapshot
//! (`StorageInfos().IsPVCUsedByPods`); here PreFilter walks the snapshot's pods, and only for a
//! pod that has a ReadWriteOncePod claim. Upstream's AddPod/RemovePod match the other pod's
//! claims by name alone; here by namespace and name (a same-named claim of another namespace is
//! another claim). The reason is upstream's current text: "node has pod using
//! PersistentVolumeClaim with the same name and ReadWriteOncePod access mode" was replaced by the
//! text of [`ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT`]. Queueing hints are by event type only.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Volume};

use crate::framework::{
    action, ClusterEvent, CycleState, EventResource, FilterPlugin, Handle, NodeInfo, Plugin,
    PodInfo, PreFilterPlugin, PreFilterResult, Status,
};

pub const ERR_REASON_DISK_CONFLICT: &str = "node(s) had no available disk";
pub const ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT: &str =
    "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod";

const STATE_KEY: &str = "PreFilterVolumeRestrictions";
const READ_WRITE_ONCE_POD: &str = "ReadWriteOncePod";

pub struct VolumeRestrictions {
    handle: Handle,
}

#[derive(Clone, Debug, Default)]
struct State {
    /// The pod's namespace: its claims are `namespace/name`.
    namespace: String,
    /// Names of the pod's claims with the ReadWriteOncePod access mode.
    read_write_once_pod: Arc<Vec<String>>,
    /// Uses of those claims by scheduled or assumed pods.
    conflicts: i64,
}

impl State {
    /// How many of `pod`'s volumes name one of the ReadWriteOncePod claims.
    fn uses_by(&self, pod: &Pod) -> i64 {
        if self.read_write_once_pod.is_empty()
            || pod.metadata.namespace.as_deref().unwrap_or("") != self.namespace
        {
            return 0;
        }
        volumes(pod)
            .iter()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
            .filter(|c| self.read_write_once_pod.contains(&c.claim_name))
            .count() as i64
    }
}

impl VolumeRestrictions {
    pub fn new(handle: Handle) -> VolumeRestrictions {
        VolumeRestrictions { handle }
    }

    /// The pod's `persistentVolumeClaim`s with the ReadWriteOncePod access mode; a missing claim
    /// is unresolvable.
    fn read_write_once_pod_claims(&self, pod: &Pod) -> Result<Vec<String>, Status> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        let mut out: Vec<String> = Vec::new();
        for claim in volumes(pod)
            .iter()
            .filter_map(|v| v.persistent_volume_claim.as_ref())
        {
            let name = &claim.claim_name;
            let Some(pvc) = self.handle.listers.pvcs.get(&format!("{ns}/{name}")) else {
                return Err(Status::UnschedulableAndUnresolvable(format!(
                    "persistentvolumeclaim \"{name}\" not found"
                )));
            };
            let rwop = pvc
                .spec
                .as_ref()
                .and_then(|s| s.access_modes.as_ref())
                .is_some_and(|m| m.iter().any(|m| m == READ_WRITE_ONCE_POD));
            if rwop && !out.contains(name) {
                out.push(name.clone());
            }
        }
        Ok(out)
    }
}

fn volumes(pod: &Pod) -> &[Volume] {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or(&[])
}

/// Upstream `needsRestrictionsCheck`: an in-tree disk whose use other pods may conflict with.
fn needs_restrictions_check(v: &Volume) -> bool {
    v.gce_persistent_disk.is_some()
        || v.aws_elastic_block_store.is_some()
        || v.rbd.is_some()
        || v.iscsi.is_some()
}

/// Upstream `isVolumeConflict`: does `v` (of the pod to schedule) conflict with a volume of
/// `existing`?
fn is_volume_conflict(v: &Volume, existing: &Pod) -> bool {
    let ro = |r: Option<bool>| r.unwrap_or(false);
    volumes(existing).iter().any(|ev| {
        if let (Some(d), Some(e)) = (&v.gce_persistent_disk, &ev.gce_persistent_disk) {
            if d.pd_name == e.pd_name && !(ro(d.read_only) && ro(e.read_only)) {
                return true;
            }
        }
        if let (Some(d), Some(e)) = (&v.aws_elastic_block_store, &ev.aws_elastic_block_store) {
            if d.volume_id == e.volume_id {
                return true;
            }
        }
        if let (Some(d), Some(e)) = (&v.iscsi, &ev.iscsi) {
            if d.iqn == e.iqn && !(ro(d.read_only) && ro(e.read_only)) {
                return true;
            }
        }
        if let (Some(d), Some(e)) = (&v.rbd, &ev.rbd) {
            // The API defaults an empty pool to "rbd".
            let pool = |p: &Option<String>| p.clone().unwrap_or_else(|| "rbd".into());
            if d.monitors.iter().any(|m| e.monitors.contains(m))
                && pool(&d.pool) == pool(&e.pool)
                && d.image == e.image
                && !(ro(d.read_only) && ro(e.read_only))
            {
                return true;
            }
        }
        false
    })
}

/// Upstream `satisfyVolumeConflicts`.
fn satisfies_volume_conflicts(pod: &Pod, node: &NodeInfo) -> bool {
    volumes(pod)
        .iter()
        .filter(|v| needs_restrictions_check(v))
        .all(|v| !node.pods.iter().any(|p| is_volume_conflict(v, &p.pod)))
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        "VolumeRestrictions"
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            // Volumes are released when the pods using them go (spec.volumes is immutable).
            ClusterEvent::new(EventResource::Pod, action::DELETE),
            ClusterEvent::new(EventResource::Node, action::ADD),
            // A missing claim may be created.
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

impl PreFilterPlugin for VolumeRestrictions {
    fn pre_filter(&self, state: &mut CycleState, pod: &Pod) -> (Option<PreFilterResult>, Status) {
        let needs_check = volumes(pod).iter().any(needs_restrictions_check);
        let claims = match self.read_write_once_pod_claims(pod) {
            Ok(c) => c,
            Err(s) => return (None, s),
        };
        let mut s = State {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            read_write_once_pod: Arc::new(claims),
            conflicts: 0,
        };
        if !s.read_write_once_pod.is_empty() {
            // Upstream counts each claim in use once (at most one pod can hold it).
            let ns = s.namespace.as_str();
            let in_use = |claim: &String| {
                state.snapshot.nodes.iter().any(|n| {
                    n.pods.iter().any(|p| {
                        p.namespace() == ns
                            && volumes(&p.pod).iter().any(|v| {
                                v.persistent_volume_claim
                                    .as_ref()
                                    .is_some_and(|c| &c.claim_name == claim)
                            })
                    })
                })
            };
            s.conflicts = s.read_write_once_pod.iter().filter(|c| in_use(c)).count() as i64;
        }
        if !needs_check && s.conflicts == 0 {
            return (None, Status::Skip);
        }
        state.write(STATE_KEY, s);
        (None, Status::Success)
    }

    fn add_pod(
        &self,
        state: &mut CycleState,
        _pod: &Pod,
        to_add: &Arc<PodInfo>,
        _node: &NodeInfo,
    ) -> Status {
        let Some(s) = state.read_mut::<State>(STATE_KEY) else {
            return missing_state();
        };
        s.conflicts += s.uses_by(&to_add.pod);
        Status::Success
    }

    fn remove_pod(
        &self,
        state: &mut CycleState,
        _pod: &Pod,
        to_remove: &Arc<PodInfo>,
        _node: &NodeInfo,
    ) -> Status {
        let Some(s) = state.read_mut::<State>(STATE_KEY) else {
            return missing_state();
        };
        s.conflicts -= s.uses_by(&to_remove.pod);
        Status::Success
    }
}

fn missing_state() -> Status {
    Status::Error(format!("cannot read {STATE_KEY:?} from cycleState"))
}

impl FilterPlugin for VolumeRestrictions {
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        if !satisfies_volume_conflicts(pod, node) {
            return Status::Unschedulable(ERR_REASON_DISK_CONFLICT.into());
        }
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return missing_state();
        };
        if s.conflicts > 0 {
            return Status::Unschedulable(ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT.into());
        }
        Status::Success
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{node, node_info, pod, st_of};
    use serde_json::{json, Value};

    fn pod_with(name: &str, volumes: Value) -> Pod {
        pod(name, json!({ "volumes": volumes }))
    }

    fn claim_volume(claim: &str) -> Value {
        json!({"name": claim, "persistentVolumeClaim": {"claimName": claim}})
    }

    fn handle(claims: &[(&str, &str)]) -> Handle {
        let h = Handle::default();
        for (name, mode) in claims {
            let pvc = json!({"metadata": {"name": name, "namespace": "default"},
                "spec": {"accessModes": [mode]}});
            h.listers
                .pvcs
                .upsert(Arc::new(serde_json::from_value(pvc).unwrap()));
        }
        h
    }

    fn node_with(name: &str, pods: Vec<Pod>) -> NodeInfo {
        node_info(node(name, json!({}), json!({}), json!({})), pods)
    }

    #[test]
    fn disk_conflicts() {
        let gce = |pd: &str, ro: bool| json!([{"name": "v", "gcePersistentDisk": {"pdName": pd, "readOnly": ro}}]);
        let ebs = |id: &str, ro: bool| json!([{"name": "v", "awsElasticBlockStore": {"volumeID": id, "readOnly": ro}}]);
        let iscsi = |iqn: &str, ro: bool| json!([{"name": "v", "iscsi": {"iqn": iqn, "targetPortal": "127.0.0.1:3260", "lun": 0, "readOnly": ro}}]);
        let rbd = |mons: &[&str], image: &str, ro: bool| json!([{"name": "v", "rbd": {"monitors": mons, "pool": "rbd", "image": image, "readOnly": ro}}]);
        let conflict = Status::Unschedulable(ERR_REASON_DISK_CONFLICT.into());
        // (name, existing pod's volumes, new pod's volumes, filter)
        let cases: Vec<(&str, Value, Value, Status)> = vec![
            ("nothing", json!([]), json!([]), Status::Success),
            (
                "gce other disk",
                gce("a", false),
                gce("b", false),
                Status::Success,
            ),
            (
                "gce same disk",
                gce("a", false),
                gce("a", false),
                conflict.clone(),
            ),
            (
                "gce same disk, one read-only",
                gce("a", true),
                gce("a", false),
                conflict.clone(),
            ),
            (
                "gce same disk, both read-only",
                gce("a", true),
                gce("a", true),
                Status::Success,
            ),
            (
                "ebs other volume",
                ebs("a", false),
                ebs("b", false),
                Status::Success,
            ),
            (
                "ebs same volume, even read-only",
                ebs("a", true),
                ebs("a", true),
                conflict.clone(),
            ),
            (
                "iscsi other iqn",
                iscsi("a", false),
                iscsi("b", false),
                Status::Success,
            ),
            (
                "iscsi same iqn",
                iscsi("a", false),
                iscsi("a", true),
                conflict.clone(),
            ),
            (
                "iscsi same iqn, both read-only",
                iscsi("a", true),
                iscsi("a", true),
                Status::Success,
            ),
            (
                "rbd shared monitor, same image",
                rbd(&["m1", "m2"], "i", false),
                rbd(&["m2", "m3"], "i", false),
                conflict.clone(),
            ),
            (
                "rbd no shared monitor",
                rbd(&["m1"], "i", false),
                rbd(&["m2"], "i", false),
                Status::Success,
            ),
            (
                "rbd other image",
                rbd(&["m1"], "i", false),
                rbd(&["m1"], "j", false),
                Status::Success,
            ),
            (
                "rbd both read-only",
                rbd(&["m1"], "i", true),
                rbd(&["m1"], "i", true),
                Status::Success,
            ),
            (
                "different kinds",
                gce("a", false),
                ebs("a", false),
                Status::Success,
            ),
        ];
        for (name, existing, new, want) in cases {
            let vr = VolumeRestrictions::new(Handle::default());
            let n = node_with("n1", vec![pod_with("old", existing)]);
            let p = pod_with("new", new.clone());
            let mut st = st_of(std::slice::from_ref(&n));
            let (_, pre) = vr.pre_filter(&mut st, &p);
            let has_disk = new.as_array().is_some_and(|a| !a.is_empty());
            if !has_disk {
                assert_eq!(pre, Status::Skip, "{name}: prefilter");
                continue;
            }
            assert_eq!(pre, Status::Success, "{name}: prefilter");
            assert_eq!(vr.filter(&st, &p, &n), want, "{name}");
            // The conflict is per node: an empty node fits.
            assert_eq!(
                vr.filter(&st, &p, &node_with("n2", vec![])),
                Status::Success,
                "{name}: n2"
            );
        }
    }

    #[test]
    fn read_write_once_pod() {
        let conflict = Status::Unschedulable(ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT.into());
        let claims = [
            ("rwop", "ReadWriteOncePod"),
            ("rwop2", "ReadWriteOncePod"),
            ("rwx", "ReadWriteMany"),
        ];
        let holder = pod_with("holder", json!([claim_volume("rwop")]));
        let mut elsewhere = holder.clone();
        elsewhere.metadata.namespace = Some("other".into());
        // (name, pods on n1, new pod's claims, prefilter, filter on n1 and n2)
        type Case<'a> = (&'a str, Vec<Pod>, Vec<&'a str>, Status, Status);
        let cases: Vec<Case> = vec![
            (
                "no claims",
                vec![holder.clone()],
                vec![],
                Status::Skip,
                Status::Success,
            ),
            (
                "claim not in use",
                vec![],
                vec!["rwop"],
                Status::Skip,
                Status::Success,
            ),
            (
                "claim in use on n1",
                vec![holder.clone()],
                vec!["rwop"],
                Status::Success,
                conflict.clone(),
            ),
            (
                "other rwop claim in use",
                vec![holder.clone()],
                vec!["rwop2"],
                Status::Skip,
                Status::Success,
            ),
            (
                "same name, other namespace",
                vec![elsewhere],
                vec!["rwop"],
                Status::Skip,
                Status::Success,
            ),
            (
                "read-write-many claim in use",
                vec![pod_with("h", json!([claim_volume("rwx")]))],
                vec!["rwx"],
                Status::Skip,
                Status::Success,
            ),
            (
                "missing claim",
                vec![],
                vec!["gone"],
                Status::UnschedulableAndUnresolvable(
                    "persistentvolumeclaim \"gone\" not found".into(),
                ),
                Status::Success,
            ),
        ];
        for (name, pods, new_claims, want_pre, want) in cases {
            let vr = VolumeRestrictions::new(handle(&claims));
            let n1 = node_with("n1", pods);
            let n2 = node_with("n2", vec![]);
            let p = pod_with(
                "new",
                Value::Array(new_claims.iter().map(|c| claim_volume(c)).collect()),
            );
            let mut st = st_of(&[n1.clone(), n2.clone()]);
            let (_, pre) = vr.pre_filter(&mut st, &p);
            assert_eq!(pre, want_pre, "{name}: prefilter");
            if pre != Status::Success {
                continue;
            }
            // The claim is held cluster-wide: every node fails, not only the holder's.
            assert_eq!(vr.filter(&st, &p, &n1), want, "{name}: n1");
            assert_eq!(vr.filter(&st, &p, &n2), want, "{name}: n2");
        }
    }

    #[test]
    fn preemption_releases_the_claim() {
        let vr = VolumeRestrictions::new(handle(&[("rwop", "ReadWriteOncePod")]));
        let holder = Arc::new(PodInfo::new(Arc::new(pod_with(
            "holder",
            json!([claim_volume("rwop")]),
        ))));
        let bystander = Arc::new(PodInfo::new(Arc::new(pod_with("b", json!([])))));
        let n1 = node_with("n1", vec![(*holder.pod).clone(), (*bystander.pod).clone()]);
        let p = pod_with("new", json!([claim_volume("rwop")]));
        let mut st = st_of(std::slice::from_ref(&n1));
        assert_eq!(vr.pre_filter(&mut st, &p).1, Status::Success);
        let conflict = Status::Unschedulable(ERR_REASON_READ_WRITE_ONCE_POD_CONFLICT.into());
        assert_eq!(vr.filter(&st, &p, &n1), conflict);
        let mut what_if = st.clone();
        assert_eq!(
            vr.remove_pod(&mut what_if, &p, &bystander, &n1),
            Status::Success
        );
        assert_eq!(
            vr.filter(&what_if, &p, &n1),
            conflict,
            "the bystander does not hold it"
        );
        assert_eq!(
            vr.remove_pod(&mut what_if, &p, &holder, &n1),
            Status::Success
        );
        assert_eq!(
            vr.filter(&what_if, &p, &n1),
            Status::Success,
            "holder evicted"
        );
        assert_eq!(vr.add_pod(&mut what_if, &p, &holder, &n1), Status::Success);
        assert_eq!(vr.filter(&what_if, &p, &n1), conflict, "holder back");
        // The original state is untouched by the what-if.
        assert_eq!(vr.filter(&st, &p, &n1), conflict);
    }

    #[test]
    fn filter_without_pre_filter_is_an_error() {
        let vr = VolumeRestrictions::new(Handle::default());
        let n = node_with("n1", vec![]);
        let s = vr.filter(&st_of(&[]), &pod_with("p", json!([])), &n);
        assert!(
            matches!(s, Status::Error(ref m) if m.contains("PreFilterVolumeRestrictions")),
            "{s:?}"
        );
    }
}
