//! The local-path storage of `rkube server` (k3s's `local-storage` addon): the in-tree
//! `rkube.io/local-path` provisioner makes one directory per claim under `<data-dir>/local-path`,
//! and the cluster gets the default StorageClass `local-path` (WaitForFirstConsumer, reclaim
//! Delete, expandable) so a claim without a class binds once its pod is scheduled. The provisioner
//! writes on the machine its controller manager runs on, so only `rkube server`, whose node is the
//! same machine, turns it on by default; a standalone `rkube controller-manager` needs
//! `--local-path-dir` and a node on that machine.

use std::path::{Path, PathBuf};
use std::time::Duration;

use clap::Args;
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, PostParams};

/// The default class's name (k3s's and kind's).
pub const CLASS_NAME: &str = "local-path";
/// How long the API may take to accept the class at start.
const SETUP_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Args, Debug, Clone)]
pub struct LocalPathFlags {
    /// Do not run the local-path provisioner nor create the default `local-path` StorageClass.
    #[arg(long)]
    pub disable_local_path: bool,
}

impl LocalPathFlags {
    /// The provisioner's directory in `rkube server`, unless turned off.
    pub fn dir(&self, data_dir: &Path) -> Option<PathBuf> {
        (!self.disable_local_path).then(|| data_dir.join("local-path"))
    }
}

/// The default StorageClass, as k3s's local-storage manifest declares it (with our provisioner).
pub fn default_class() -> StorageClass {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": CLASS_NAME,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true"},
        },
        "provisioner": controllers::volume::localpath::PROVISIONER_NAME,
        "reclaimPolicy": "Delete",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": true,
    }))
    .expect("a valid StorageClass literal")
}

/// Creates the default class unless a class of that name exists (a user's edits win, as k3s
/// leaves a modified addon alone only when told to; we never overwrite).
pub async fn ensure_default_class(client: kube::Client) -> Result<(), String> {
    let api: Api<StorageClass> = Api::all(client);
    let deadline = tokio::time::Instant::now() + SETUP_TIMEOUT;
    loop {
        match api.create(&PostParams::default(), &default_class()).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => return Ok(()),
            Err(e) if tokio::time::Instant::now() >= deadline => {
                return Err(format!("creating StorageClass {CLASS_NAME}: {e}"));
            }
            Err(e) => {
                tracing::debug!(error = %e, "local-path StorageClass not created yet; retrying");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_and_directory() {
        let class = default_class();
        assert_eq!(class.metadata.name.as_deref(), Some(CLASS_NAME));
        assert_eq!(class.provisioner, "rkube.io/local-path");
        assert_eq!(
            class.volume_binding_mode.as_deref(),
            Some("WaitForFirstConsumer")
        );
        assert_eq!(class.allow_volume_expansion, Some(true));
        let on = LocalPathFlags {
            disable_local_path: false,
        };
        assert_eq!(
            on.dir(Path::new("/var/lib/rkube")),
            Some(PathBuf::from("/var/lib/rkube/local-path"))
        );
        let off = LocalPathFlags {
            disable_local_path: true,
        };
        assert_eq!(off.dir(Path::new("/x")), None);
    }
}
