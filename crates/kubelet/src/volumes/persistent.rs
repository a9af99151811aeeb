//! Volumes backed by PersistentVolumes: `persistentVolumeClaim` and generic `ephemeral` pod
//! volumes, resolved to their bound PV as upstream's volume manager does
//! (`desired_state_of_world_populator.go`'s `getPVCExtractPV` and `getPVSpec`), then mounted by the
//! PV's source. rkube's kubelet mounts only sources that are a directory on this node: `hostPath`
//! (what the `rkube.io/local-path` provisioner makes) and `local`; a PV of any other source
//! (csi, nfs, iscsi, ...) is refused with a clear error, so the pod stays ContainerCreating with a
//! FailedMount event rather than starting without its data.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Volume};

use super::hostpath::check as host_path_check;
use super::MountedVolume;

/// Which claim a pod volume names, and whether the pod must own it (generic ephemeral volumes).
pub fn claim_of(pod: &Pod, v: &Volume) -> Option<(String, bool, bool)> {
    if let Some(c) = &v.persistent_volume_claim {
        return Some((c.claim_name.clone(), false, c.read_only == Some(true)));
    }
    if v.ephemeral.is_some() {
        let pod_name = pod.metadata.name.as_deref().unwrap_or("");
        return Some((
            apimachinery::volumes::ephemeral_claim_name(pod_name, &v.name),
            true,
            false,
        ));
    }
    None
}

/// Upstream's checks that a claim may be used by `pod` (texts as upstream's populator).
pub fn check_claim(
    pod: &Pod,
    claim: &PersistentVolumeClaim,
    must_own: bool,
) -> Result<String, String> {
    let ns = claim.metadata.namespace.as_deref().unwrap_or("");
    let name = claim.metadata.name.as_deref().unwrap_or("");
    if claim.metadata.deletion_timestamp.is_some() {
        return Err(format!(
            "can't start pod because PVC {ns}/{name} is being deleted"
        ));
    }
    if must_own {
        let pod_uid = pod.metadata.uid.as_deref().unwrap_or("");
        let owned = claim
            .metadata
            .owner_references
            .iter()
            .flatten()
            .any(|r| r.uid == pod_uid && r.controller == Some(true));
        if !owned {
            return Err(format!(
                "PVC {ns}/{name} was not created for pod {}/{} (pod is not owner)",
                pod.metadata.namespace.as_deref().unwrap_or(""),
                pod.metadata.name.as_deref().unwrap_or("")
            ));
        }
    }
    let phase = claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("");
    let volume = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or("");
    if phase != "Bound" || volume.is_empty() {
        return Err(format!(
            "PVC {ns}/{name} has non-bound phase ({phase:?}) or empty pvc.Spec.VolumeName ({volume:?})"
        ));
    }
    Ok(volume.to_string())
}

/// Upstream `getPVSpec`'s check that the volume is bound to this claim, then the directory to
/// mount (pure apart from the hostPath type check, which may create a `DirectoryOrCreate` path).
pub fn mount_volume(
    claim: &PersistentVolumeClaim,
    volume: &PersistentVolume,
    read_only: bool,
) -> Result<MountedVolume, String> {
    let pv_name = volume.metadata.name.as_deref().unwrap_or("");
    let spec = volume.spec.as_ref();
    let claim_uid = claim.metadata.uid.as_deref().unwrap_or("");
    let bound_uid = spec
        .and_then(|s| s.claim_ref.as_ref())
        .and_then(|r| r.uid.as_deref())
        .unwrap_or("");
    if bound_uid != claim_uid {
        return Err(format!(
            "expected PV {pv_name:?} to be bound to PVC {:?} with UID {claim_uid:?}, but it is bound to one with UID {bound_uid:?}",
            claim.metadata.name.as_deref().unwrap_or("")
        ));
    }
    if spec.and_then(|s| s.volume_mode.as_deref()) == Some("Block") {
        return Err(format!(
            "PV {pv_name:?} has volumeMode Block, which the rkube kubelet cannot map"
        ));
    }
    let path = if let Some(h) = spec.and_then(|s| s.host_path.as_ref()) {
        host_path_check(Path::new(&h.path), h.type_.as_deref().unwrap_or(""))?;
        PathBuf::from(&h.path)
    } else if let Some(l) = spec.and_then(|s| s.local.as_ref()) {
        // Upstream's local plugin needs the path to exist on the node (it never creates it).
        let p = PathBuf::from(&l.path);
        if !p.exists() {
            return Err(format!(
                "path \"{}\" does not exist on the node",
                p.display()
            ));
        }
        p
    } else {
        return Err(format!(
            "PV {pv_name:?}: its volume source is not supported by the rkube kubelet (hostPath and local are)"
        ));
    };
    // hostPath and local sources have no readOnly of their own: the pod volume's decides.
    Ok(MountedVolume {
        host_path: path,
        read_only,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": "web", "namespace": "ns", "uid": "p1"},
            "spec": {"containers": [], "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data", "readOnly": true}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}}]}}),
        )
        .unwrap()
    }

    fn claim(
        name: &str,
        phase: &str,
        volume: Option<&str>,
        owner: Option<&str>,
    ) -> PersistentVolumeClaim {
        let owners = owner.map_or(json!([]), |uid| {
            json!([{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": uid, "controller": true}])
        });
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "ns", "uid": "c1",
            "ownerReferences": owners},
            "spec": {"volumeName": volume}, "status": {"phase": phase}}),
        )
        .unwrap()
    }

    #[test]
    fn claims_of_volumes() {
        let p = pod();
        let vols = p.spec.as_ref().unwrap().volumes.as_ref().unwrap();
        assert_eq!(claim_of(&p, &vols[0]), Some(("data".into(), false, true)));
        assert_eq!(
            claim_of(&p, &vols[1]),
            Some(("web-scratch".into(), true, false))
        );
    }

    #[test]
    fn claim_checks() {
        let p = pod();
        assert_eq!(
            check_claim(&p, &claim("data", "Bound", Some("pv1"), None), false).unwrap(),
            "pv1"
        );
        let pending = check_claim(&p, &claim("data", "Pending", None, None), false).unwrap_err();
        assert_eq!(
            pending,
            "PVC ns/data has non-bound phase (\"Pending\") or empty pvc.Spec.VolumeName (\"\")"
        );
        let foreign = check_claim(
            &p,
            &claim("web-scratch", "Bound", Some("pv1"), Some("other")),
            true,
        )
        .unwrap_err();
        assert!(foreign.contains("(pod is not owner)"), "{foreign}");
        check_claim(
            &p,
            &claim("web-scratch", "Bound", Some("pv1"), Some("p1")),
            true,
        )
        .unwrap();
        let mut deleting = claim("data", "Bound", Some("pv1"), None);
        deleting.metadata.deletion_timestamp =
            serde_json::from_value(json!("2024-01-01T00:00:00Z")).unwrap();
        assert!(check_claim(&p, &deleting, false)
            .unwrap_err()
            .contains("is being deleted"));
    }

    #[test]
    fn volumes_by_source() {
        let dir = tempfile::tempdir().unwrap();
        let c = claim("data", "Bound", Some("pv1"), None);
        let pv = |source: serde_json::Value, uid: &str| -> PersistentVolume {
            let mut spec = json!({"claimRef": {"name": "data", "namespace": "ns", "uid": uid}});
            for (k, v) in source.as_object().unwrap() {
                spec[k] = v.clone();
            }
            serde_json::from_value(json!({"metadata": {"name": "pv1"}, "spec": spec})).unwrap()
        };
        let made = dir.path().join("made");
        let host = pv(
            json!({"hostPath": {"path": made.display().to_string(), "type": "DirectoryOrCreate"}}),
            "c1",
        );
        let m = mount_volume(&c, &host, true).unwrap();
        assert_eq!(m.host_path, made);
        assert!(m.read_only);
        assert!(made.is_dir());
        let local = pv(
            json!({"local": {"path": dir.path().join("none").display().to_string()}}),
            "c1",
        );
        assert!(mount_volume(&c, &local, false)
            .unwrap_err()
            .contains("does not exist on the node"));
        let nfs = pv(json!({"nfs": {"server": "s", "path": "/x"}}), "c1");
        assert!(mount_volume(&c, &nfs, false)
            .unwrap_err()
            .contains("not supported"));
        let other = pv(json!({"hostPath": {"path": "/tmp"}}), "c2");
        assert!(mount_volume(&c, &other, false)
            .unwrap_err()
            .contains("but it is bound to one with UID \"c2\""));
    }
}
