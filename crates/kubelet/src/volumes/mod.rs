//! Pod volumes (upstream `pkg/volume/{emptydir,hostpath,configmap,secret,downwardapi,projected}`,
//! the kubelet's volume manager and `makeMounts`, much reduced): each volume becomes a host
//! directory (or file) under `<root-dir>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>` that
//! containers bind-mount ([`subpath`]: subPath and subPathExpr bound under `volume-subpaths` as
//! upstream's, readOnly).
//!
//! - configMap, secret, downward API and projected volumes are written by upstream's atomic writer
//!   ([`atomic_writer`]: a `..data` symlink to a timestamped directory, swapped by rename) on every
//!   pod sync, so updates (and label/annotation changes) reach running pods within the sync period
//!   as upstream's periodic remount does; unchanged payloads are not rewritten. They are mounted
//!   read-only, secret/downward API/projected ones on a tmpfs as upstream's, and with a pod
//!   `fsGroup` handed to that group as `SetVolumeOwnership` does ([`ownership`]).
//! - emptyDir ([`emptydir`]): a 0777 directory, or a tmpfs for `medium: Memory` (sized as
//!   upstream), set up once and given to the fsGroup; hostPath types ([`hostpath`]);
//!   PersistentVolumeClaim and generic ephemeral volumes mount their bound PV when it is a
//!   directory on the node ([`persistent`]).
//! - Mounts under a pod's directory are unmounted when the pod's directory is removed.
//!
//! Differences from upstream: other volume types (NFS, CSI, iSCSI, image, gitRepo, ...) and
//! `volumeDevices` (raw block) fail with a clear event; hugepages emptyDirs are refused;
//! `clusterTrustBundle` and `podCertificate` projections are refused; a projected
//! `serviceAccountToken` needs the API server's TokenRequest API (without it the mount fails, as
//! upstream's would); `mountPropagation`, `recursiveReadOnly`, SELinux relabelling, emptyDir
//! quotas and size eviction, and the `volumesInUse` report are not done (volume stats: see
//! [`crate::stats::volume`], which reads what [`VolumeManager::setup`] records); ConfigMaps
//! and Secrets are read from the API server on each sync rather than from a watch cache.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod, Volume};
use kube::Api;

pub mod atomic_writer;
pub mod configmap;
pub mod downwardapi;
pub mod emptydir;
pub mod hostpath;
pub mod ownership;
pub mod persistent;
pub mod projected;
pub mod subpath;

use crate::stats::volume::{Method, Source};
use atomic_writer::Payload;
use configmap::Kind;

/// A volume ready to mount.
#[derive(Clone, Debug)]
pub struct MountedVolume {
    pub host_path: PathBuf,
    /// API data volumes are always mounted read-only.
    pub read_only: bool,
}

pub struct VolumeManager {
    client: Option<kube::Client>,
    root_dir: PathBuf,
    /// What a container without a limit has for downward API `resourceFieldRef`s.
    node_allocatable: BTreeMap<String, String>,
    tokens: projected::TokenManager,
    /// Each pod's mounted volumes as the volume stats see them, by pod UID (upstream's
    /// `GetMountedVolumesForPod`); set by [`VolumeManager::setup`], dropped by `teardown`.
    mounted: Mutex<HashMap<String, Arc<Vec<Source>>>>,
}

/// How the volume stats measure a pod volume (see [`crate::stats::volume`]); `None`: not at all.
fn stat_method(v: &Volume, local_pv: bool) -> Option<Method> {
    if v.persistent_volume_claim.is_some() || v.ephemeral.is_some() {
        return Some(if local_pv { Method::StatFs } else { Method::Du });
    }
    let du = v.empty_dir.is_some()
        || v.config_map.is_some()
        || v.secret.is_some()
        || v.downward_api.is_some()
        || v.projected.is_some();
    du.then_some(Method::Du)
}

fn plugin_dir(pod_dir: &Path, plugin: &str, name: &str) -> PathBuf {
    pod_dir
        .join("volumes")
        .join(format!("kubernetes.io~{plugin}"))
        .join(name)
}

/// Writes an API data volume's payload through the atomic writer into its emptyDir-like
/// directory (a tmpfs of `memory_size` bytes when given, as upstream wraps secret, downward API
/// and projected volumes); with an fsGroup, the whole volume is handed to it before the new data
/// is published (upstream passes no fsGroupChangePolicy here: the walk always runs).
pub fn write_volume(
    dir: &Path,
    payload: &Payload,
    fs_group: Option<u32>,
    memory_size: Option<Option<i64>>,
) -> Result<(), String> {
    emptydir::setup_medium(dir, memory_size.is_some(), memory_size.flatten())?;
    let set_perms = |_: &str| -> Result<(), String> {
        match fs_group {
            Some(group) => ownership::set_volume_ownership(dir, group, false, true),
            None => Ok(()),
        }
    };
    atomic_writer::write(dir, payload, Some(&set_perms)).map(|_| ())
}

/// Upstream refuses block volumes it cannot map; rkube maps none.
fn refuse_volume_devices(pod: &Pod) -> Result<(), String> {
    let spec = pod.spec.as_ref();
    let containers = spec.into_iter().flat_map(|s| {
        s.init_containers
            .iter()
            .flatten()
            .chain(s.containers.iter())
    });
    for c in containers {
        if let Some(d) = c.volume_devices.iter().flatten().next() {
            return Err(format!(
                "MapVolume.MapPodDevice failed for volume \"{}\" : volumeDevices (raw block volumes) are not supported by the rkube kubelet: container \"{}\" asks for {} as a block device",
                d.name, c.name, d.device_path
            ));
        }
    }
    Ok(())
}

impl VolumeManager {
    pub fn new(
        client: Option<kube::Client>,
        root_dir: PathBuf,
        node_allocatable: BTreeMap<String, String>,
    ) -> VolumeManager {
        VolumeManager {
            client,
            root_dir,
            node_allocatable,
            tokens: projected::TokenManager::default(),
            mounted: Mutex::default(),
        }
    }

    /// Every pod's mounted volumes, for the volume stats.
    pub fn stat_sources(&self) -> Vec<(String, Arc<Vec<Source>>)> {
        self.mounted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(uid, v)| (uid.clone(), v.clone()))
            .collect()
    }

    fn client(&self) -> Result<&kube::Client, String> {
        self.client
            .as_ref()
            .ok_or_else(|| "no API server: this volume type needs one".to_string())
    }

    /// Prepares every volume of `pod`; errors name the volume (for the FailedMount event).
    pub async fn setup(&self, pod: &Pod) -> Result<HashMap<String, MountedVolume>, String> {
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let pod_dir = self.root_dir.join("pods").join(uid);
        refuse_volume_devices(pod)?;
        let mut out = HashMap::new();
        let mut sources = Vec::new();
        for v in pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
        {
            let (mounted, local_pv) = self
                .setup_one(pod, ns, &pod_dir, v)
                .await
                .map_err(|e| format!("MountVolume.SetUp failed for volume \"{}\" : {e}", v.name))?;
            if let Some(method) = stat_method(v, local_pv) {
                sources.push(Source {
                    name: v.name.clone(),
                    path: mounted.host_path.clone(),
                    method,
                    pvc: persistent::claim_of(pod, v).map(|(claim, _, _)| (ns.to_string(), claim)),
                });
            }
            out.insert(v.name.clone(), mounted);
        }
        if !uid.is_empty() {
            self.mounted
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(uid.to_string(), Arc::new(sources));
        }
        Ok(out)
    }

    /// One volume, and whether it is a `local` persistent volume (measured by `statfs`).
    async fn setup_one(
        &self,
        pod: &Pod,
        ns: &str,
        pod_dir: &Path,
        v: &Volume,
    ) -> Result<(MountedVolume, bool), String> {
        let api_data = |host_path: PathBuf| MountedVolume {
            host_path,
            read_only: true,
        };
        let fs_group = ownership::fs_group(pod).map(|(g, _)| g);
        // The tmpfs of secret, downward API and projected volumes (no sizeLimit of their own).
        let in_memory = Some(emptydir::memory_size(&self.node_allocatable, pod, None));
        if let Some(e) = &v.empty_dir {
            let dir = emptydir::setup(pod_dir, &v.name, e, pod, &self.node_allocatable)?;
            let mounted = MountedVolume {
                host_path: dir,
                read_only: false,
            };
            return Ok((mounted, false));
        }
        if let Some(h) = &v.host_path {
            hostpath::check(Path::new(&h.path), h.type_.as_deref().unwrap_or(""))?;
            let mounted = MountedVolume {
                host_path: PathBuf::from(&h.path),
                read_only: false,
            };
            return Ok((mounted, false));
        }
        if let Some(c) = &v.config_map {
            let payload = configmap::payload(
                self.client()?,
                Kind::ConfigMap,
                ns,
                &c.name,
                c.items.as_deref(),
                configmap::mode_of(c.default_mode, configmap::DEFAULT_MODE),
                c.optional == Some(true),
            )
            .await?;
            let dir = plugin_dir(pod_dir, "configmap", &v.name);
            write_volume(&dir, &payload, fs_group, None)?;
            return Ok((api_data(dir), false));
        }
        if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let payload = configmap::payload(
                self.client()?,
                Kind::Secret,
                ns,
                &name,
                s.items.as_deref(),
                configmap::mode_of(s.default_mode, configmap::DEFAULT_MODE),
                s.optional == Some(true),
            )
            .await?;
            let dir = plugin_dir(pod_dir, "secret", &v.name);
            write_volume(&dir, &payload, fs_group, in_memory)?;
            return Ok((api_data(dir), false));
        }
        if let Some(d) = &v.downward_api {
            let payload = downwardapi::collect_data(
                d.items.as_deref().unwrap_or(&[]),
                pod,
                &self.node_allocatable,
                configmap::mode_of(d.default_mode, configmap::DEFAULT_MODE),
            )?;
            let dir = plugin_dir(pod_dir, "downward-api", &v.name);
            write_volume(&dir, &payload, fs_group, in_memory)?;
            return Ok((api_data(dir), false));
        }
        if let Some(p) = &v.projected {
            let ctx = projected::Context {
                client: self.client.as_ref(),
                tokens: &self.tokens,
                pod,
                allocatable: &self.node_allocatable,
                fs_user: ownership::fs_user_from(pod),
                has_fs_group: fs_group.is_some(),
            };
            let payload = projected::collect(&ctx, &v.name, p).await?;
            let dir = plugin_dir(pod_dir, "projected", &v.name);
            write_volume(&dir, &payload, fs_group, in_memory)?;
            return Ok((api_data(dir), false));
        }
        if let Some((claim_name, must_own, read_only)) = persistent::claim_of(pod, v) {
            return self
                .persistent(pod, ns, &claim_name, must_own, read_only)
                .await;
        }
        Err("this volume type is not supported by the rkube kubelet".into())
    }

    /// A claim's bound volume, mounted by its source (see [`persistent`]), and whether the volume
    /// is a `local` one.
    async fn persistent(
        &self,
        pod: &Pod,
        ns: &str,
        claim_name: &str,
        must_own: bool,
        read_only: bool,
    ) -> Result<(MountedVolume, bool), String> {
        let client = self.client()?.clone();
        let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
        let claim = claims
            .get_opt(claim_name)
            .await
            .map_err(|e| format!("error processing PVC {ns}/{claim_name}: {e}"))?
            .ok_or_else(|| {
                format!(
                    "error processing PVC {ns}/{claim_name}: persistentvolumeclaim \"{claim_name}\" not found"
                )
            })?;
        let pv_name = persistent::check_claim(pod, &claim, must_own)?;
        let volumes: Api<PersistentVolume> = Api::all(client);
        let volume = volumes
            .get_opt(&pv_name)
            .await
            .map_err(|e| format!("failed to fetch PV {pv_name:?} from API server: {e}"))?
            .ok_or_else(|| format!("failed to fetch PV {pv_name:?} from API server: not found"))?;
        // Local volumes are handed to the pod's fsGroup as upstream's local plugin does (hostPath
        // volumes are not: upstream leaves their ownership alone).
        let local = volume.spec.as_ref().is_some_and(|s| s.local.is_some());
        let fs_group = ownership::fs_group(pod).filter(|_| local && !read_only);
        tokio::task::spawn_blocking(move || {
            let mounted = persistent::mount_volume(&claim, &volume, read_only)?;
            if let Some((group, on_root_mismatch)) = fs_group {
                ownership::set_volume_ownership(
                    &mounted.host_path,
                    group,
                    on_root_mismatch,
                    false,
                )?;
            }
            Ok((mounted, local))
        })
        .await
        .map_err(|e| e.to_string())?
    }

    /// Removes a pod's volumes and directory (after its containers are gone).
    pub fn teardown(&self, uid: &str) {
        if uid.is_empty() {
            return;
        }
        self.tokens.forget_pod(uid);
        self.mounted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        let dir = self.root_dir.join("pods").join(uid);
        emptydir::unmount_under(&dir);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot remove the pod directory");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn api_volumes_are_given_to_the_fs_group() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("vol");
        let payload = Payload::from([
            (
                "key".to_string(),
                atomic_writer::FileProjection::new(b"secret".to_vec(), 0o400),
            ),
            (
                "sub/other".to_string(),
                atomic_writer::FileProjection::new(b"x".to_vec(), 0o600),
            ),
        ]);
        write_volume(&vol, &payload, Some(4321), None).unwrap();
        // Upstream: mode | 0440 for files of read-only volumes, | 02550 for directories.
        let file = std::fs::metadata(vol.join("key")).unwrap();
        assert_eq!((file.mode() & 0o7777, file.gid()), (0o440, 4321));
        assert_eq!(
            std::fs::metadata(vol.join("sub/other")).unwrap().mode() & 0o7777,
            0o640
        );
        let ts = std::fs::metadata(vol.join("..data")).unwrap();
        assert_eq!((ts.mode() & 0o7777, ts.gid()), (0o2755, 4321));
        let root = std::fs::metadata(&vol).unwrap();
        assert_eq!((root.mode() & 0o7777, root.gid()), (0o2777, 4321));
        assert_eq!(
            std::fs::symlink_metadata(vol.join("..data")).unwrap().gid(),
            4321
        );
        // Without an fsGroup the modes are the payload's.
        let plain = dir.path().join("plain");
        write_volume(&plain, &payload, None, None).unwrap();
        let file = std::fs::metadata(plain.join("key")).unwrap();
        assert_eq!(file.mode() & 0o7777, 0o400);
        assert_eq!(std::fs::metadata(&plain).unwrap().mode() & 0o7777, 0o777);
    }

    #[test]
    fn volumes_measured_as_upstream_plugins_report() {
        let v = |json: serde_json::Value| -> Volume { serde_json::from_value(json).unwrap() };
        let du = Some(Method::Du);
        assert_eq!(
            stat_method(&v(serde_json::json!({"name": "a", "emptyDir": {}})), false),
            du
        );
        assert_eq!(
            stat_method(
                &v(serde_json::json!({"name": "a", "secret": {"secretName": "s"}})),
                false
            ),
            du
        );
        let claim =
            v(serde_json::json!({"name": "a", "persistentVolumeClaim": {"claimName": "c"}}));
        assert_eq!(
            stat_method(&claim, false),
            du,
            "hostPath-backed (local-path) volume"
        );
        assert_eq!(
            stat_method(&claim, true),
            Some(Method::StatFs),
            "local volume"
        );
        let host = v(serde_json::json!({"name": "a", "hostPath": {"path": "/tmp"}}));
        assert_eq!(
            stat_method(&host, false),
            None,
            "upstream's hostPath has no metrics"
        );
    }
}
