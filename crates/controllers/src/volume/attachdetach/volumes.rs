//! Which volumes of a pod need attaching, and upstream's names for them: `util.CreateVolumeSpec`
//! (claims to their bound volume) with the CSI plugin's `CanAttach` / `skipAttach` /
//! `GetVolumeName`, `getAttachmentName`, `util.IsMultiAttachAllowed`, and the node facts the
//! controller reads (the opt-in annotation, readiness, the out-of-service taint).
//!
//! Only CSI persistent volumes are attachable here: an inline `csi` pod volume is ephemeral (the
//! CSI plugin's `CanAttach` answers false for it), and the in-tree attachable plugins (iSCSI, FC)
//! and CSI migration of in-tree volumes are not built.

use std::fmt::Write as _;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod, Volume};
use k8s_openapi::api::storage::v1::CSIDriver;

use crate::volume::is_pod_terminated;

/// The CSI volume plugin's name, the prefix of every unique volume name it makes.
pub const CSI_PLUGIN_NAME: &str = "kubernetes.io/csi";
/// Separates the driver from the volume handle in the plugin's volume name.
pub const VOLUME_NAME_SEPARATOR: char = '^';
/// On nodes: the kubelet leaves attach and detach to this controller. Upstream checks only that
/// the key exists, whatever its value.
pub const ANN_CONTROLLER_MANAGED_ATTACH_DETACH: &str =
    "volumes.kubernetes.io/controller-managed-attach-detach";
/// The taint that lets volumes go from a node without waiting for the kubelet to unmount them.
pub const TAINT_NODE_OUT_OF_SERVICE: &str = "node.kubernetes.io/out-of-service";

/// What upstream's `volume.Spec` carries that attaching a CSI persistent volume needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VolumeSpec {
    /// The PersistentVolume's name (upstream `Spec.Name()`, the name in event messages and the
    /// VolumeAttachment's `source.persistentVolumeName`).
    pub name: String,
    pub driver: String,
    pub handle: String,
    /// Upstream `IsMultiAttachAllowed`: more than one node may have it at once.
    pub multi_attach_allowed: bool,
}

impl VolumeSpec {
    /// The spec of a PersistentVolume with a `csi` source; None for every other kind.
    pub fn from_persistent_volume(pv: &PersistentVolume) -> Option<VolumeSpec> {
        let spec = pv.spec.as_ref()?;
        let csi = spec.csi.as_ref()?;
        Some(VolumeSpec {
            name: pv.metadata.name.clone().unwrap_or_default(),
            driver: csi.driver.clone(),
            handle: csi.volume_handle.clone(),
            multi_attach_allowed: multi_attach_allowed(spec.access_modes.as_deref()),
        })
    }

    /// Upstream `GetUniqueVolumeNameFromSpec` for the CSI plugin.
    pub fn unique_name(&self) -> String {
        unique_volume_name(&self.driver, &self.handle)
    }

    /// The VolumeAttachment that attaches this volume to `node`.
    pub fn attachment_name(&self, node: &str) -> String {
        attachment_name(&self.handle, &self.driver, node)
    }
}

/// `kubernetes.io/csi/<driver>^<volumeHandle>`: what nodes list in `volumesAttached` and
/// `volumesInUse`.
pub fn unique_volume_name(driver: &str, handle: &str) -> String {
    format!("{CSI_PLUGIN_NAME}/{driver}{VOLUME_NAME_SEPARATOR}{handle}")
}

/// The driver and handle in a unique volume name (upstream `SplitUniqueName` then the CSI
/// detacher's split on `^`), for volumes known only by name (read back from a node's status).
pub fn split_unique_name(name: &str) -> Result<(String, String), String> {
    let mut parts = name.splitn(3, '/');
    let (Some(domain), Some(plugin), Some(volume)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(format!(
            "cannot split volume name {name:?}: not of the form <plugin>/<volume>"
        ));
    };
    if format!("{domain}/{plugin}") != CSI_PLUGIN_NAME {
        return Err(format!(
            "no attachable volume plugin {domain}/{plugin} for volume {name:?}"
        ));
    }
    let pieces: Vec<&str> = volume.split(VOLUME_NAME_SEPARATOR).collect();
    match pieces[..] {
        [driver, handle] => Ok((driver.to_string(), handle.to_string())),
        _ => Err("volumeName missing expected data".to_string()),
    }
}

/// Upstream `getAttachmentName`: `csi-` and the hex SHA-256 of handle, driver and node name
/// concatenated (in that order, no separators).
pub fn attachment_name(handle: &str, driver: &str, node: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{handle}{driver}{node}").as_bytes(),
    );
    digest
        .as_ref()
        .iter()
        .fold(String::from("csi-"), |mut name, byte| {
            let _ = write!(name, "{byte:02x}");
            name
        })
}

/// Upstream `IsMultiAttachAllowed` for a persistent volume: unknown (no access modes) counts as
/// allowed, else only ReadWriteMany or ReadOnlyMany allow it.
pub fn multi_attach_allowed(access_modes: Option<&[String]>) -> bool {
    match access_modes {
        None | Some([]) => true,
        Some(modes) => modes
            .iter()
            .any(|m| m == "ReadWriteMany" || m == "ReadOnlyMany"),
    }
}

/// Upstream `skipAttach`, negated: without a CSIDriver object attaching is required; with one,
/// only `attachRequired: false` skips it (the API defaults the field to true).
pub fn attach_required(driver: Option<&CSIDriver>) -> bool {
    driver.is_none_or(|d| d.spec.attach_required != Some(false))
}

/// Where the resolution reads claims, volumes and drivers (the informer caches, or a test's maps).
pub trait Objects {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>>;
    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>>;
    fn driver(&self, name: &str) -> Option<Arc<CSIDriver>>;
}

/// What a pod volume resolves to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Resolution {
    /// A CSI persistent volume whose driver needs attaching.
    Attachable(VolumeSpec),
    /// Resolved, but nothing to attach (another volume type, an inline CSI volume, or a driver
    /// with `attachRequired: false`).
    NotAttachable,
    /// Not resolvable now (claim missing or unbound, volume missing or bound elsewhere); upstream
    /// logs these and leaves whatever the desired state already holds.
    Unresolved(String),
}

/// Upstream `CreateVolumeSpec` followed by `FindAttachablePluginBySpec`.
pub fn resolve(pod: &Pod, volume: &Volume, objects: &impl Objects) -> Resolution {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    let (claim_name, ephemeral) = if let Some(source) = &volume.persistent_volume_claim {
        (source.claim_name.clone(), false)
    } else if volume.ephemeral.is_some() {
        let name = apimachinery::volumes::ephemeral_claim_name(pod_name, &volume.name);
        (name, true)
    } else {
        // Inline volumes: only a CSI plugin volume could be attachable, and an inline `csi`
        // volume is ephemeral, which the CSI plugin never attaches.
        return Resolution::NotAttachable;
    };
    let fail = |why: String| {
        Resolution::Unresolved(format!("error processing PVC {ns}/{claim_name}: {why}"))
    };
    let Some(claim) = objects.claim(ns, &claim_name) else {
        return fail(format!(
            "failed to find PVC {ns}/{claim_name} in PVCInformer cache"
        ));
    };
    let phase = claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("");
    let pv_name = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("");
    if phase != "Bound" || pv_name.is_empty() {
        return fail(format!(
            "PVC {ns}/{claim_name} has non-bound phase ({phase:?}) or empty pvc.Spec.VolumeName ({pv_name:?})"
        ));
    }
    if ephemeral && !is_controlled_by(&claim, pod) {
        return Resolution::Unresolved(format!(
            "PVC {ns}/{claim_name} was not created for pod {ns}/{pod_name} (pod is not owner)"
        ));
    }
    let Some(pv) = objects.volume(pv_name) else {
        return fail(format!("failed to find PV {pv_name:?} in PVInformer cache"));
    };
    let Some(claim_ref) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return fail(format!(
            "found PV object {pv_name:?} but it has a nil pv.Spec.ClaimRef indicating it is not yet bound to the claim"
        ));
    };
    let claim_uid = claim.metadata.uid.as_deref().unwrap_or("");
    let ref_uid = claim_ref.uid.as_deref().unwrap_or("");
    if ref_uid != claim_uid {
        return fail(format!(
            "found PV object {pv_name:?} but its pv.Spec.ClaimRef.UID ({ref_uid:?}) does not point to claim.UID ({claim_uid:?})"
        ));
    }
    match VolumeSpec::from_persistent_volume(&pv) {
        Some(spec) if is_attachable(&spec, objects) => Resolution::Attachable(spec),
        _ => Resolution::NotAttachable,
    }
}

/// Upstream `IsAttachableVolume` for a CSI spec: whether its driver needs attaching now.
pub fn is_attachable(spec: &VolumeSpec, objects: &impl Objects) -> bool {
    attach_required(objects.driver(&spec.driver).as_deref())
}

/// Upstream `ephemeral.VolumeIsForPod`: the claim is controlled by the pod.
fn is_controlled_by(claim: &PersistentVolumeClaim, pod: &Pod) -> bool {
    claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.controller == Some(true) && Some(&o.uid) == pod.metadata.uid.as_ref())
}

/// Upstream `DetermineVolumeAction` (with `KeepTerminatedPodVolumes` gone): a terminated pod's
/// volumes leave the desired state; any other pod's are added.
pub fn keeps_volumes(pod: &Pod) -> bool {
    let has_volumes = pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .is_some_and(|v| !v.is_empty());
    !has_volumes || !is_pod_terminated(pod)
}

/// The pod's `spec.nodeName`, "" when unscheduled.
pub fn pod_node(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// The pod's volumes.
pub fn pod_volumes(pod: &Pod) -> &[Volume] {
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_deref())
        .unwrap_or(&[])
}

/// Whether the node asks this controller to attach and detach its volumes.
pub fn is_managed(node: &Node) -> bool {
    node.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(ANN_CONTROLLER_MANAGED_ATTACH_DETACH))
}

/// Upstream `nodeutil.IsNodeReady`: the Ready condition is True.
pub fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Upstream `taints.TaintKeyExists(node.Spec.Taints, TaintNodeOutOfService)`: any effect counts.
pub fn has_out_of_service_taint(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .any(|t| t.key == TAINT_NODE_OUT_OF_SERVICE)
}

/// The node's `status.volumesInUse` (what the kubelet still has mounted).
pub fn volumes_in_use(node: &Node) -> Vec<String> {
    node.status
        .as_ref()
        .and_then(|s| s.volumes_in_use.clone())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[derive(Default)]
    struct Fixture {
        claims: BTreeMap<String, Arc<PersistentVolumeClaim>>,
        volumes: BTreeMap<String, Arc<PersistentVolume>>,
        drivers: BTreeMap<String, Arc<CSIDriver>>,
    }

    impl Objects for Fixture {
        fn claim(&self, ns: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
            self.claims.get(&format!("{ns}/{name}")).cloned()
        }
        fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
            self.volumes.get(name).cloned()
        }
        fn driver(&self, name: &str) -> Option<Arc<CSIDriver>> {
            self.drivers.get(name).cloned()
        }
    }

    fn fixture(claim_uid: &str, ref_uid: &str, modes: serde_json::Value) -> Fixture {
        let mut f = Fixture::default();
        for (name, owner) in [("data", None), ("web-scratch", Some("pod-uid"))] {
            let owners = owner.map(|uid| {
                json!([{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": uid,
                        "controller": true}])
            });
            let claim: PersistentVolumeClaim = serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns", "uid": claim_uid,
                             "ownerReferences": owners},
                "spec": {"volumeName": "pv1"}, "status": {"phase": "Bound"}}))
            .unwrap();
            f.claims.insert(format!("ns/{name}"), Arc::new(claim));
        }
        let pv: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv1"},
            "spec": {"csi": {"driver": "csi.example.com", "volumeHandle": "h1"},
                     "accessModes": modes, "claimRef": {"name": "data", "namespace": "ns",
                     "uid": ref_uid}}}))
        .unwrap();
        f.volumes.insert("pv1".into(), Arc::new(pv));
        f
    }

    fn pod(volumes: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "pod-uid"},
            "spec": {"nodeName": "n1", "containers": [], "volumes": volumes}}))
        .unwrap()
    }

    #[test]
    fn names_follow_upstream() {
        assert_eq!(
            unique_volume_name("csi.example.com", "h1"),
            "kubernetes.io/csi/csi.example.com^h1"
        );
        // sha256("h1" + "csi.example.com" + "n1"), as `printf 'h1csi.example.comn1' | sha256sum`.
        assert_eq!(
            attachment_name("h1", "csi.example.com", "n1"),
            "csi-8157d03abc5a2bde671ba3121addefb9168531d96b38761bc92ae350c651387b"
        );
        assert_eq!(
            split_unique_name("kubernetes.io/csi/csi.example.com^h1").unwrap(),
            ("csi.example.com".to_string(), "h1".to_string())
        );
        assert!(split_unique_name("kubernetes.io/iscsi/x").is_err());
        assert!(split_unique_name("kubernetes.io/csi/no-separator").is_err());
        assert!(split_unique_name("kubernetes.io/csi/a^b^c").is_err());
    }

    #[test]
    fn claims_resolve_to_their_bound_csi_volume() {
        let f = fixture("c1", "c1", json!(["ReadWriteOnce"]));
        let p = pod(json!([{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]));
        let expected = VolumeSpec {
            name: "pv1".into(),
            driver: "csi.example.com".into(),
            handle: "h1".into(),
            multi_attach_allowed: false,
        };
        assert_eq!(
            resolve(&p, &pod_volumes(&p)[0], &f),
            Resolution::Attachable(expected.clone())
        );
        // A generic ephemeral volume goes through its claim, which must be the pod's.
        let p =
            pod(json!([{"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]));
        assert_eq!(
            resolve(&p, &pod_volumes(&p)[0], &f),
            Resolution::Attachable(expected)
        );
        let mut stranger = p.clone();
        stranger.metadata.uid = Some("other".into());
        assert!(matches!(
            resolve(&stranger, &pod_volumes(&stranger)[0], &f),
            Resolution::Unresolved(m) if m.contains("pod is not owner")
        ));
    }

    #[test]
    fn what_is_not_attachable_or_not_resolvable() {
        let p = pod(json!([
            {"name": "inline", "csi": {"driver": "csi.example.com"}},
            {"name": "tmp", "emptyDir": {}},
            {"name": "d", "persistentVolumeClaim": {"claimName": "data"}},
            {"name": "missing", "persistentVolumeClaim": {"claimName": "nope"}}]));
        let vols = pod_volumes(&p);
        // The volume was rebound to another claim (a different UID).
        let f = fixture("c1", "c2", json!([]));
        assert_eq!(resolve(&p, &vols[0], &f), Resolution::NotAttachable);
        assert_eq!(resolve(&p, &vols[1], &f), Resolution::NotAttachable);
        assert!(matches!(resolve(&p, &vols[2], &f),
            Resolution::Unresolved(m) if m.contains("does not point to claim.UID")));
        assert!(matches!(resolve(&p, &vols[3], &f),
            Resolution::Unresolved(m) if m.contains("failed to find PVC ns/nope")));

        // attachRequired: false makes the same volume not attachable; true or absent keeps it.
        let mut f = fixture("c1", "c1", json!(["ReadWriteMany"]));
        let driver = |required: serde_json::Value| -> Arc<CSIDriver> {
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": "csi.example.com"},
                "spec": {"attachRequired": required}}))
                .unwrap(),
            )
        };
        assert!(matches!(resolve(&p, &vols[2], &f),
            Resolution::Attachable(s) if s.multi_attach_allowed));
        f.drivers
            .insert("csi.example.com".into(), driver(json!(true)));
        assert!(matches!(
            resolve(&p, &vols[2], &f),
            Resolution::Attachable(_)
        ));
        f.drivers
            .insert("csi.example.com".into(), driver(json!(false)));
        assert_eq!(resolve(&p, &vols[2], &f), Resolution::NotAttachable);
        f.drivers
            .insert("csi.example.com".into(), driver(serde_json::Value::Null));
        assert!(matches!(
            resolve(&p, &vols[2], &f),
            Resolution::Attachable(_)
        ));
    }

    #[test]
    fn access_modes_and_node_facts() {
        let modes = |m: &[&str]| m.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(multi_attach_allowed(None));
        assert!(multi_attach_allowed(Some(&[])));
        assert!(!multi_attach_allowed(Some(&modes(&["ReadWriteOnce"]))));
        assert!(!multi_attach_allowed(Some(&modes(&["ReadWriteOncePod"]))));
        assert!(multi_attach_allowed(Some(&modes(&[
            "ReadWriteOnce",
            "ReadOnlyMany"
        ]))));

        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1",
                "annotations": {ANN_CONTROLLER_MANAGED_ATTACH_DETACH: "false"}},
            "spec": {"taints": [{"key": TAINT_NODE_OUT_OF_SERVICE, "effect": "NoSchedule"}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}],
                       "volumesInUse": ["kubernetes.io/csi/d^h"]}}))
        .unwrap();
        // Upstream looks only at the annotation's presence.
        assert!(is_managed(&node));
        assert!(is_ready(&node));
        assert!(has_out_of_service_taint(&node));
        assert_eq!(volumes_in_use(&node), vec!["kubernetes.io/csi/d^h"]);
        let bare: Node = serde_json::from_value(json!({"metadata": {"name": "n2"}})).unwrap();
        assert!(!is_managed(&bare) && !is_ready(&bare) && !has_out_of_service_taint(&bare));
    }

    #[test]
    fn terminated_pods_give_up_their_volumes() {
        let mut p = pod(json!([{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]));
        assert!(keeps_volumes(&p));
        p.status = Some(serde_json::from_value(json!({"phase": "Succeeded"})).unwrap());
        assert!(!keeps_volumes(&p));
        let mut empty = pod(json!([]));
        empty.status = p.status.clone();
        assert!(keeps_volumes(&empty), "no volumes: the default action");
    }
}
