//! A local-path provisioner (the `rkube.io/local-path` provisioner of issue 21 item 2, after
//! Rancher's `local-path-provisioner` that k3s ships): each claim gets a directory
//! `<base>/<pv-name>_<namespace>_<claim>` on the node the scheduler selected, as a hostPath volume
//! (`DirectoryOrCreate`) with node affinity to that node; deleting a released volume removes the
//! directory.
//!
//! The directories are made and removed by the process running the PV controller, so this only
//! fits a controller manager on the node's own machine: `rkube server` registers it (with the
//! default `local-path` StorageClass) unless `--disable-local-path`; a standalone controller
//! manager only with `--local-path-dir`. The kubelet mounts the volume as the PV's hostPath.
//! Differs from Rancher's: no helper pods (so no multi-node use), no per-node path configuration,
//! no capacity accounting (a directory may outgrow its claim, as Rancher's may).

use std::path::{Path, PathBuf};

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::{
    HostPathVolumeSource, Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolume, PersistentVolumeSpec, VolumeNodeAffinity,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::persistentvolume::provisioner::{
    DeleteError, ProvisionError, ProvisionRequest, Provisioner,
};

/// The provisioner name a StorageClass names.
pub const PROVISIONER_NAME: &str = "rkube.io/local-path";

const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

/// Provisions directories under `base`.
pub struct LocalPath {
    base: PathBuf,
}

impl LocalPath {
    pub fn new(base: impl Into<PathBuf>) -> LocalPath {
        LocalPath { base: base.into() }
    }

    /// The volume for a request, and the directory to create: pure, checked before any I/O.
    pub fn plan(
        &self,
        r: &ProvisionRequest<'_>,
    ) -> Result<(PersistentVolume, PathBuf), ProvisionError> {
        let Some(node) = r.selected_node else {
            return Err(ProvisionError::Failed(
                "configuration error, no node was specified".into(),
            ));
        };
        let spec = r.claim.spec.clone().unwrap_or_default();
        if spec
            .volume_mode
            .as_deref()
            .is_some_and(|m| m != "Filesystem")
        {
            return Err(ProvisionError::Failed(
                "only the Filesystem volume mode is supported".into(),
            ));
        }
        let modes = spec.access_modes.clone().unwrap_or_default();
        if let Some(m) = modes
            .iter()
            .find(|m| *m != "ReadWriteOnce" && *m != "ReadWriteOncePod")
        {
            return Err(ProvisionError::Failed(format!(
                "access mode {m} is not supported: NodePath only supports ReadWriteOnce and ReadWriteOncePod access modes"
            )));
        }
        let Some(size) = spec
            .resources
            .as_ref()
            .and_then(|res| res.requests.as_ref())
            .and_then(|req| req.get("storage"))
            .cloned()
        else {
            return Err(ProvisionError::Failed(
                "the claim requests no storage".into(),
            ));
        };
        let safe = |s: &str| {
            s.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.')
        };
        let ns = r.claim.metadata.namespace.as_deref().unwrap_or("");
        let claim = r.claim.metadata.name.as_deref().unwrap_or("");
        // Names are DNS labels/subdomains by validation; refuse anything that could leave `base`.
        if [r.pv_name, ns, claim]
            .iter()
            .any(|s| s.is_empty() || !safe(s) || s.starts_with('.'))
        {
            return Err(ProvisionError::Failed(format!(
                "invalid volume or claim name {:?}",
                format!("{}/{ns}/{claim}", r.pv_name)
            )));
        }
        let dir = self.base.join(format!("{}_{ns}_{claim}", r.pv_name));
        let hostname = node
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(HOSTNAME_LABEL))
            .or(node.metadata.name.as_ref())
            .cloned()
            .unwrap_or_default();
        let volume = PersistentVolume {
            metadata: ObjectMeta {
                name: Some(r.pv_name.to_string()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                capacity: Some([("storage".to_string(), Quantity(size.0))].into()),
                access_modes: Some(modes),
                persistent_volume_reclaim_policy: Some(r.reclaim_policy.to_string()),
                volume_mode: Some("Filesystem".into()),
                host_path: Some(HostPathVolumeSource {
                    path: dir.to_string_lossy().into_owned(),
                    type_: Some("DirectoryOrCreate".into()),
                }),
                node_affinity: Some(VolumeNodeAffinity {
                    required: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: HOSTNAME_LABEL.into(),
                                operator: "In".into(),
                                values: Some(vec![hostname]),
                            }]),
                            match_fields: None,
                        }],
                    }),
                }),
                ..Default::default()
            }),
            status: None,
        };
        Ok((volume, dir))
    }

    /// The directory of a volume this provisioner made, if it lies directly under `base`.
    pub fn directory_of(&self, volume: &PersistentVolume) -> Result<PathBuf, DeleteError> {
        let path = volume
            .spec
            .as_ref()
            .and_then(|s| s.host_path.as_ref())
            .map(|h| PathBuf::from(&h.path))
            .ok_or_else(|| DeleteError::Failed("the volume has no hostPath".into()))?;
        if path.parent() != Some(self.base.as_path()) || path.file_name().is_none() {
            return Err(DeleteError::Failed(format!(
                "refusing to delete {}: not a directory of {}",
                path.display(),
                self.base.display()
            )));
        }
        Ok(path)
    }
}

fn create_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(dir)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        // Any container user may write it, as Rancher's provisioner makes them.
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777))?;
    }
    Ok(())
}

impl Provisioner for LocalPath {
    /// A directory has no size to change: growing a claim is bookkeeping only.
    fn can_expand(&self) -> bool {
        true
    }

    fn provision<'a>(
        &'a self,
        request: ProvisionRequest<'a>,
    ) -> BoxFuture<'a, Result<PersistentVolume, ProvisionError>> {
        async move {
            let (volume, dir) = self.plan(&request)?;
            let shown = dir.display().to_string();
            tokio::task::spawn_blocking(move || create_dir(&dir))
                .await
                .map_err(|e| ProvisionError::Failed(e.to_string()))?
                .map_err(|e| ProvisionError::Failed(format!("creating {shown}: {e}")))?;
            Ok(volume)
        }
        .boxed()
    }

    fn delete<'a>(
        &'a self,
        volume: &'a PersistentVolume,
    ) -> BoxFuture<'a, Result<(), DeleteError>> {
        async move {
            let dir = self.directory_of(volume)?;
            let shown = dir.display().to_string();
            let removed =
                tokio::task::spawn_blocking(move || match std::fs::remove_dir_all(&dir) {
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                    other => other,
                })
                .await
                .map_err(|e| DeleteError::Failed(e.to_string()))?;
            removed.map_err(|e| DeleteError::Failed(format!("removing {shown}: {e}")))
        }
        .boxed()
    }
}

/// A node for [`ProvisionRequest::selected_node`] in tests and callers that only know its name.
pub fn node_named(name: &str) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolumeClaim;
    use k8s_openapi::api::storage::v1::StorageClass;
    use serde_json::json;

    fn claim(modes: &[&str]) -> PersistentVolumeClaim {
        serde_json::from_value(
            json!({"metadata": {"name": "data", "namespace": "ns", "uid": "u1"},
            "spec": {"accessModes": modes, "resources": {"requests": {"storage": "1Gi"}}}}),
        )
        .unwrap()
    }

    #[tokio::test]
    async fn directories_come_and_go() {
        let base = std::env::temp_dir().join(format!("rkube-local-path-{}", std::process::id()));
        let lp = LocalPath::new(&base);
        let class: StorageClass = serde_json::from_value(
            json!({"metadata": {"name": "local-path"}, "provisioner": PROVISIONER_NAME}),
        )
        .unwrap();
        let c = claim(&["ReadWriteOnce"]);
        let node = node_named("n1");
        let request = |node: Option<&'static Node>| ProvisionRequest {
            pv_name: "pvc-u1",
            claim: &c,
            class: &class,
            reclaim_policy: "Delete",
            selected_node: node,
        };
        let err = lp.provision(request(None)).await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "configuration error, no node was specified"
        );
        let pv = lp
            .provision(ProvisionRequest {
                selected_node: Some(&node),
                ..request(None)
            })
            .await
            .unwrap();
        let dir = base.join("pvc-u1_ns_data");
        assert!(dir.is_dir());
        let spec = pv.spec.as_ref().unwrap();
        assert_eq!(spec.host_path.as_ref().unwrap().path, dir.to_string_lossy());
        assert_eq!(spec.capacity.as_ref().unwrap()["storage"].0, "1Gi");
        assert_eq!(
            spec.persistent_volume_reclaim_policy.as_deref(),
            Some("Delete")
        );
        let term = &spec
            .node_affinity
            .as_ref()
            .unwrap()
            .required
            .as_ref()
            .unwrap()
            .node_selector_terms[0];
        assert_eq!(
            term.match_expressions.as_ref().unwrap()[0].values,
            Some(vec!["n1".to_string()])
        );
        lp.delete(&pv).await.unwrap();
        assert!(!dir.exists());
        // Deleting again is fine; a path outside the base is refused.
        lp.delete(&pv).await.unwrap();
        let mut outside = pv.clone();
        outside
            .spec
            .as_mut()
            .unwrap()
            .host_path
            .as_mut()
            .unwrap()
            .path = "/etc".into();
        assert!(lp.delete(&outside).await.is_err());
        let _ = std::fs::remove_dir_all(&base);
    }

    #[test]
    fn refused_claims() {
        let lp = LocalPath::new("/var/lib/rkube/local-path");
        let class: StorageClass = serde_json::from_value(
            json!({"metadata": {"name": "local-path"}, "provisioner": PROVISIONER_NAME}),
        )
        .unwrap();
        let node = node_named("n1");
        let rwx = claim(&["ReadWriteMany"]);
        let r = ProvisionRequest {
            pv_name: "pvc-u1",
            claim: &rwx,
            class: &class,
            reclaim_policy: "Delete",
            selected_node: Some(&node),
        };
        assert!(lp
            .plan(&r)
            .unwrap_err()
            .to_string()
            .contains("ReadWriteMany is not supported"));
        let ok = claim(&["ReadWriteOnce"]);
        let bad_name = ProvisionRequest {
            pv_name: "../x",
            claim: &ok,
            class: &class,
            reclaim_policy: "Delete",
            selected_node: Some(&node),
        };
        assert!(lp.plan(&bad_name).is_err());
    }
}
