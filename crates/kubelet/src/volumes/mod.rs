//! Pod volumes (upstream `pkg/volume/{emptydir,hostpath,configmap,secret,downwardapi,projected}` and
//! the kubelet's volume manager, much reduced): each volume becomes a host directory (or file) under
//! `<root-dir>/pods/<uid>/volumes/kubernetes.io~<plugin>/<name>` that containers bind-mount.
//! ConfigMap, Secret, downward API and projected volumes are written afresh on every pod sync (so
//! updates reach running pods within the sync period, as upstream's periodic remount does) and are
//! mounted read-only.
//!
//! Differences: files are replaced one by one (tmp + rename) rather than through upstream's atomic
//! `..data` symlink swap; `emptyDir.medium: Memory` is a plain directory (no tmpfs); a projected
//! `serviceAccountToken` needs the API server's TokenRequest API, and without it the mount fails with
//! a clear event, as upstream's would. PersistentVolumeClaim and generic ephemeral volumes mount
//! their bound PV when it is a directory on the node ([`persistent`]); other volume types (NFS,
//! CSI, ...) fail the mount. emptyDir and local volumes are given to the pod's `fsGroup`
//! ([`ownership`]).

use std::collections::{BTreeMap, HashMap};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    ConfigMap, DownwardAPIVolumeFile, KeyToPath, PersistentVolume, PersistentVolumeClaim, Pod,
    Secret, Volume,
};
use kube::Api;

use crate::envvars;

pub mod ownership;
pub mod persistent;

/// A volume ready to mount.
#[derive(Clone, Debug)]
pub struct MountedVolume {
    pub host_path: PathBuf,
    /// API data volumes are always mounted read-only.
    pub read_only: bool,
}

pub struct VolumeManager {
    pub client: Option<kube::Client>,
    pub root_dir: PathBuf,
}

fn plugin_dir(pod_dir: &Path, plugin: &str, name: &str) -> PathBuf {
    pod_dir
        .join("volumes")
        .join(format!("kubernetes.io~{plugin}"))
        .join(name)
}

/// Writes `files` (relative path -> content, mode) into `dir`, removing files no longer wanted.
pub fn write_files(dir: &Path, files: &BTreeMap<String, (Vec<u8>, u32)>) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (rel, (content, mode)) in files {
        if rel.split('/').any(|c| c == ".." || c.is_empty()) || rel.starts_with('/') {
            return Err(format!("invalid volume file path {rel:?}"));
        }
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
        }
        if std::fs::read(&path).ok().as_deref() == Some(content.as_slice()) {
            continue;
        }
        let tmp = path.with_file_name(format!(
            ".{}.tmp",
            path.file_name()
                .map(|n| n.to_string_lossy())
                .unwrap_or_default()
        ));
        std::fs::write(&tmp, content).map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(*mode))
            .map_err(|e| format!("{}: {e}", tmp.display()))?;
        std::fs::rename(&tmp, &path).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    // Top-level files that are no longer part of the volume go (upstream's atomic writer does too).
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            let wanted = files
                .keys()
                .any(|k| k == &name || k.starts_with(&format!("{name}/")));
            if !wanted {
                let p = e.path();
                let _ = if p.is_dir() {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                };
            }
        }
    }
    Ok(())
}

/// Selects the keys of `data` for a volume: all keys, or `items` (a missing key is an error unless
/// the source is optional).
pub fn select_items(
    data: &BTreeMap<String, Vec<u8>>,
    items: Option<&Vec<KeyToPath>>,
    default_mode: u32,
    what: &str,
) -> Result<BTreeMap<String, (Vec<u8>, u32)>, String> {
    let mut out = BTreeMap::new();
    match items {
        Some(items) if !items.is_empty() => {
            for item in items {
                let content = data.get(&item.key).ok_or_else(|| {
                    format!(
                        "configmap references non-existent config key: {} ({what})",
                        item.key
                    )
                })?;
                let mode = item.mode.map_or(default_mode, |m| m as u32);
                out.insert(item.path.clone(), (content.clone(), mode));
            }
        }
        _ => {
            for (k, v) in data {
                out.insert(k.clone(), (v.clone(), default_mode));
            }
        }
    }
    Ok(out)
}

impl VolumeManager {
    fn client(&self) -> Result<&kube::Client, String> {
        self.client
            .as_ref()
            .ok_or_else(|| "no API server: this volume type needs one".to_string())
    }

    async fn config_map(
        &self,
        ns: &str,
        name: &str,
        optional: bool,
    ) -> Result<BTreeMap<String, Vec<u8>>, String> {
        let api: Api<ConfigMap> = Api::namespaced(self.client()?.clone(), ns);
        match api.get_opt(name).await {
            Ok(Some(cm)) => {
                let mut data: BTreeMap<String, Vec<u8>> = cm
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.into_bytes()))
                    .collect();
                for (k, v) in cm.binary_data.unwrap_or_default() {
                    data.insert(k, v.0);
                }
                Ok(data)
            }
            Ok(None) if optional => Ok(BTreeMap::new()),
            Ok(None) => Err(format!("configmap \"{name}\" not found")),
            Err(e) => Err(format!("configmap \"{name}\": {e}")),
        }
    }

    async fn secret(
        &self,
        ns: &str,
        name: &str,
        optional: bool,
    ) -> Result<BTreeMap<String, Vec<u8>>, String> {
        let api: Api<Secret> = Api::namespaced(self.client()?.clone(), ns);
        match api.get_opt(name).await {
            Ok(Some(s)) => {
                let mut data: BTreeMap<String, Vec<u8>> = s
                    .data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect();
                for (k, v) in s.string_data.unwrap_or_default() {
                    data.insert(k, v.into_bytes());
                }
                Ok(data)
            }
            Ok(None) if optional => Ok(BTreeMap::new()),
            Ok(None) => Err(format!("secret \"{name}\" not found")),
            Err(e) => Err(format!("secret \"{name}\": {e}")),
        }
    }

    /// A service account token from the TokenRequest API (`serviceaccounts/<sa>/token`), bound to the pod.
    async fn token(
        &self,
        pod: &Pod,
        audience: Option<&str>,
        expiration: Option<i64>,
    ) -> Result<Vec<u8>, String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let sa = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.as_deref())
            .unwrap_or("default");
        let mut spec = serde_json::json!({
            "expirationSeconds": expiration.unwrap_or(3607),
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                               "name": pod.metadata.name, "uid": pod.metadata.uid},
        });
        if let Some(a) = audience.filter(|a| !a.is_empty()) {
            spec["audiences"] = serde_json::json!([a]);
        }
        let body = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
        let req = http::Request::post(format!(
            "/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token"
        ))
        .header("content-type", "application/json")
        .body(serde_json::to_vec(&body).unwrap_or_default())
        .map_err(|e| e.to_string())?;
        let resp: serde_json::Value = match self.client()?.request(req).await {
            Ok(v) => v,
            Err(kube::Error::Api(e)) if e.code == 404 => {
                return Err(format!(
                    "failed to fetch token for service account {ns}/{sa}: the API server does not serve the TokenRequest API (serviceaccounts/token): {}",
                    e.message
                ))
            }
            Err(e) => return Err(format!("failed to fetch token for service account {ns}/{sa}: {e}")),
        };
        resp["status"]["token"]
            .as_str()
            .map(|t| t.as_bytes().to_vec())
            .ok_or_else(|| "TokenRequest answer has no status.token".into())
    }

    fn downward_files(
        pod: &Pod,
        items: &[DownwardAPIVolumeFile],
        default_mode: u32,
        host_ip: &str,
        pod_ips: &[String],
    ) -> Result<BTreeMap<String, (Vec<u8>, u32)>, String> {
        let mut out = BTreeMap::new();
        for item in items {
            let value = if let Some(f) = &item.field_ref {
                envvars::field_ref(pod, &f.field_path, host_ip, pod_ips)?
            } else if let Some(r) = &item.resource_field_ref {
                let container = pod
                    .spec
                    .as_ref()
                    .and_then(|s| {
                        s.containers
                            .iter()
                            .find(|c| Some(&c.name) == r.container_name.as_ref())
                    })
                    .ok_or_else(|| {
                        format!("resourceFieldRef: no container {:?}", r.container_name)
                    })?;
                envvars::resource_field_ref(
                    container,
                    &r.resource,
                    r.divisor.as_ref().map(|d| d.0.as_str()),
                    &BTreeMap::new(),
                )?
            } else {
                return Err(format!("downwardAPI item {} has no source", item.path));
            };
            out.insert(
                item.path.clone(),
                (
                    value.into_bytes(),
                    item.mode.map_or(default_mode, |m| m as u32),
                ),
            );
        }
        Ok(out)
    }

    /// Prepares every volume of `pod`; errors name the volume (for the FailedMount event).
    pub async fn setup(
        &self,
        pod: &Pod,
        host_ip: &str,
        pod_ips: &[String],
    ) -> Result<HashMap<String, MountedVolume>, String> {
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let pod_dir = self.root_dir.join("pods").join(uid);
        let mut out = HashMap::new();
        for v in pod
            .spec
            .as_ref()
            .and_then(|s| s.volumes.as_ref())
            .into_iter()
            .flatten()
        {
            let mounted = self
                .setup_one(pod, ns, &pod_dir, v, host_ip, pod_ips)
                .await
                .map_err(|e| format!("MountVolume.SetUp failed for volume \"{}\" : {e}", v.name))?;
            out.insert(v.name.clone(), mounted);
        }
        Ok(out)
    }

    async fn setup_one(
        &self,
        pod: &Pod,
        ns: &str,
        pod_dir: &Path,
        v: &Volume,
        host_ip: &str,
        pod_ips: &[String],
    ) -> Result<MountedVolume, String> {
        let api_data = |host_path: PathBuf| MountedVolume {
            host_path,
            read_only: true,
        };
        if v.empty_dir.is_some() {
            let dir = plugin_dir(pod_dir, "empty-dir", &v.name);
            std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777))
                .map_err(|e| format!("{}: {e}", dir.display()))?;
            if let Some((group, on_root_mismatch)) = ownership::fs_group(pod) {
                ownership::set_volume_ownership(&dir, group, on_root_mismatch, false)?;
            }
            return Ok(MountedVolume {
                host_path: dir,
                read_only: false,
            });
        }
        if let Some(h) = &v.host_path {
            host_path_check(Path::new(&h.path), h.type_.as_deref().unwrap_or(""))?;
            return Ok(MountedVolume {
                host_path: PathBuf::from(&h.path),
                read_only: false,
            });
        }
        if let Some(c) = &v.config_map {
            let data = self
                .config_map(ns, &c.name, c.optional == Some(true))
                .await?;
            let files = select_items(
                &data,
                c.items.as_ref(),
                c.default_mode.map_or(0o644, |m| m as u32),
                &c.name,
            )?;
            let dir = plugin_dir(pod_dir, "configmap", &v.name);
            write_files(&dir, &files)?;
            return Ok(api_data(dir));
        }
        if let Some(s) = &v.secret {
            let name = s.secret_name.clone().unwrap_or_default();
            let data = self.secret(ns, &name, s.optional == Some(true)).await?;
            let files = select_items(
                &data,
                s.items.as_ref(),
                s.default_mode.map_or(0o644, |m| m as u32),
                &name,
            )?;
            let dir = plugin_dir(pod_dir, "secret", &v.name);
            write_files(&dir, &files)?;
            return Ok(api_data(dir));
        }
        if let Some(d) = &v.downward_api {
            let files = Self::downward_files(
                pod,
                d.items.as_deref().unwrap_or(&[]),
                d.default_mode.map_or(0o644, |m| m as u32),
                host_ip,
                pod_ips,
            )?;
            let dir = plugin_dir(pod_dir, "downward-api", &v.name);
            write_files(&dir, &files)?;
            return Ok(api_data(dir));
        }
        if let Some(p) = &v.projected {
            let mode = p.default_mode.map_or(0o644, |m| m as u32);
            let mut files = BTreeMap::new();
            for source in p.sources.iter().flatten() {
                if let Some(c) = &source.config_map {
                    let data = self
                        .config_map(ns, &c.name, c.optional == Some(true))
                        .await?;
                    files.extend(select_items(&data, c.items.as_ref(), mode, &c.name)?);
                }
                if let Some(s) = &source.secret {
                    let data = self.secret(ns, &s.name, s.optional == Some(true)).await?;
                    files.extend(select_items(&data, s.items.as_ref(), mode, &s.name)?);
                }
                if let Some(d) = &source.downward_api {
                    files.extend(Self::downward_files(
                        pod,
                        d.items.as_deref().unwrap_or(&[]),
                        mode,
                        host_ip,
                        pod_ips,
                    )?);
                }
                if let Some(t) = &source.service_account_token {
                    let token = self
                        .token(pod, t.audience.as_deref(), t.expiration_seconds)
                        .await?;
                    // Tokens are private to the pod's user (upstream: 0600 unless fsGroup says otherwise).
                    files.insert(t.path.clone(), (token, 0o600));
                }
            }
            let dir = plugin_dir(pod_dir, "projected", &v.name);
            write_files(&dir, &files)?;
            return Ok(api_data(dir));
        }
        if let Some((claim_name, must_own, read_only)) = persistent::claim_of(pod, v) {
            return self
                .persistent(pod, ns, &claim_name, must_own, read_only)
                .await;
        }
        Err("this volume type is not supported by the rkube kubelet".into())
    }

    /// A claim's bound volume, mounted by its source (see [`persistent`]).
    async fn persistent(
        &self,
        pod: &Pod,
        ns: &str,
        claim_name: &str,
        must_own: bool,
        read_only: bool,
    ) -> Result<MountedVolume, String> {
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
        let fs_group = ownership::fs_group(pod)
            .filter(|_| volume.spec.as_ref().is_some_and(|s| s.local.is_some()) && !read_only);
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
            Ok(mounted)
        })
        .await
        .map_err(|e| e.to_string())?
    }

    /// Removes a pod's volumes and directory (after its containers are gone).
    pub fn teardown(&self, uid: &str) {
        if uid.is_empty() {
            return;
        }
        let dir = self.root_dir.join("pods").join(uid);
        if let Err(e) = std::fs::remove_dir_all(&dir) {
            if e.kind() != std::io::ErrorKind::NotFound {
                tracing::warn!(dir = %dir.display(), error = %e, "cannot remove the pod directory");
            }
        }
    }
}

/// Upstream's hostPath type checks (`DirectoryOrCreate` and `FileOrCreate` create what is missing).
pub fn host_path_check(path: &Path, type_: &str) -> Result<(), String> {
    use std::os::unix::fs::FileTypeExt;
    let meta = std::fs::metadata(path);
    let show = path.display();
    match type_ {
        "" => Ok(()),
        "DirectoryOrCreate" => {
            if meta.is_err() {
                std::fs::create_dir_all(path).map_err(|e| format!("{show}: {e}"))?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755))
                    .map_err(|e| format!("{show}: {e}"))?;
            } else if !path.is_dir() {
                return Err(format!(
                    "hostPath type check failed: {show} is not a directory"
                ));
            }
            Ok(())
        }
        "FileOrCreate" => {
            if meta.is_err() {
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(|e| format!("{show}: {e}"))?;
                }
                std::fs::File::create(path).map_err(|e| format!("{show}: {e}"))?;
                std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o644))
                    .map_err(|e| format!("{show}: {e}"))?;
            } else if !path.is_file() {
                return Err(format!("hostPath type check failed: {show} is not a file"));
            }
            Ok(())
        }
        other => {
            let m =
                meta.map_err(|_| format!("hostPath type check failed: {show} does not exist"))?;
            let t = m.file_type();
            let ok = match other {
                "Directory" => t.is_dir(),
                "File" => t.is_file(),
                "Socket" => t.is_socket(),
                "CharDevice" => t.is_char_device(),
                "BlockDevice" => t.is_block_device(),
                _ => return Err(format!("unknown hostPath type {other:?}")),
            };
            if ok {
                Ok(())
            } else {
                Err(format!(
                    "hostPath type check failed: {show} is not a {other}"
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_are_written_and_stale_ones_removed() {
        let dir = tempfile::tempdir().unwrap();
        let mut files = BTreeMap::new();
        files.insert("a".to_string(), (b"1".to_vec(), 0o644));
        files.insert("sub/b".to_string(), (b"2".to_vec(), 0o600));
        write_files(dir.path(), &files).unwrap();
        assert_eq!(std::fs::read(dir.path().join("sub/b")).unwrap(), b"2");
        let mode = std::fs::metadata(dir.path().join("sub/b"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
        files.remove("a");
        write_files(dir.path(), &files).unwrap();
        assert!(!dir.path().join("a").exists());
        let mut bad = BTreeMap::new();
        bad.insert("../x".to_string(), (Vec::new(), 0o644));
        assert!(write_files(dir.path(), &bad).is_err());
    }

    #[test]
    fn items_select_keys() {
        let data: BTreeMap<String, Vec<u8>> = [
            ("k".to_string(), b"v".to_vec()),
            ("j".to_string(), b"w".to_vec()),
        ]
        .into();
        let all = select_items(&data, None, 0o644, "cm").unwrap();
        assert_eq!(all.len(), 2);
        let items = vec![KeyToPath {
            key: "k".into(),
            path: "dir/file".into(),
            mode: Some(0o400),
        }];
        let some = select_items(&data, Some(&items), 0o644, "cm").unwrap();
        assert_eq!(some.get("dir/file"), Some(&(b"v".to_vec(), 0o400)));
        let missing = vec![KeyToPath {
            key: "x".into(),
            path: "p".into(),
            mode: None,
        }];
        assert!(select_items(&data, Some(&missing), 0o644, "cm").is_err());
    }

    #[test]
    fn host_path_types() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("made");
        host_path_check(&d, "DirectoryOrCreate").unwrap();
        assert!(d.is_dir());
        let f = dir.path().join("f");
        host_path_check(&f, "FileOrCreate").unwrap();
        assert!(f.is_file());
        assert!(host_path_check(&f, "Directory").is_err());
        assert!(host_path_check(&dir.path().join("none"), "File").is_err());
        host_path_check(&dir.path().join("none"), "").unwrap();
        assert!(host_path_check(&f, "Bogus").is_err());
    }
}
