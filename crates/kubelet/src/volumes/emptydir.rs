//! emptyDir volumes (upstream `pkg/volume/emptydir`): a directory of mode 0777 in the pod's
//! volume directory, or with `medium: Memory` a tmpfs mounted there, sized as upstream's
//! `calculateEmptyDirMemorySize` (the node's allocatable memory, narrowed to the pod's memory
//! limit when every container has one, narrowed to `sizeLimit`). Secret, downward API and
//! projected volumes live on such a tmpfs too (upstream wraps them in a Memory emptyDir); configMap
//! volumes on disk. A volume is set up once (upstream's `ready` marker under
//! `<pod>/plugins/kubernetes.io~empty-dir/<name>`), then handed to the pod's fsGroup; later syncs
//! leave it alone. Mounts under a pod's directory are unmounted before it is removed.

use std::collections::BTreeMap;
use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{EmptyDirVolumeSource, Pod};
use scheduler::framework::resources::parse_quantity;

use super::ownership;

/// Mount points (with their file system types) from /proc/self/mountinfo, octal escapes undone.
fn mounts() -> Vec<(PathBuf, String)> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    text.lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split(' ').collect();
            let point = fields.get(4)?;
            let sep = fields.iter().position(|f| *f == "-")?;
            let fstype = fields.get(sep + 1)?;
            Some((PathBuf::from(unescape(point)), fstype.to_string()))
        })
        .collect()
}

fn unescape(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\'
            && i + 3 < b.len()
            && b[i + 1..i + 4].iter().all(|c| (b'0'..=b'7').contains(c))
        {
            let v = (b[i + 1] - b'0') as u32 * 64
                + (b[i + 2] - b'0') as u32 * 8
                + (b[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `path` is a mount point.
pub fn is_mount_point(path: &Path) -> bool {
    mounts().iter().any(|(p, _)| p == path)
}

/// Whether `dir` is a tmpfs mount point.
pub fn is_tmpfs(dir: &Path) -> bool {
    mounts().iter().any(|(p, t)| p == dir && t == "tmpfs")
}

fn c_path(p: &Path) -> Result<CString, String> {
    CString::new(p.as_os_str().as_bytes()).map_err(|_| format!("{}: NUL in path", p.display()))
}

/// Mounts a tmpfs of `size` bytes (when given) on `dir`.
fn mount_tmpfs(dir: &Path, size: Option<i64>) -> Result<(), String> {
    let target = c_path(dir)?;
    let source = c_path(Path::new("tmpfs"))?;
    let options = size
        .filter(|s| *s > 0)
        .map(|s| format!("size={s}"))
        .unwrap_or_default();
    let data = CString::new(options).map_err(|e| e.to_string())?;
    // SAFETY: every pointer is a NUL-terminated string that outlives the call.
    let rc = unsafe {
        libc::mount(
            source.as_ptr(),
            target.as_ptr(),
            source.as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            data.as_ptr().cast(),
        )
    };
    if rc != 0 {
        return Err(format!(
            "mount failed: tmpfs on {}: {}",
            dir.display(),
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Unmounts everything mounted at or under `dir`, deepest first (lazily, so a container still
/// holding a file does not block the pod's cleanup).
pub fn unmount_under(dir: &Path) {
    let mut under: Vec<PathBuf> = mounts()
        .into_iter()
        .map(|(p, _)| p)
        .filter(|p| p.starts_with(dir))
        .collect();
    under.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
    under.dedup();
    for p in under {
        let Ok(target) = c_path(&p) else { continue };
        // SAFETY: a NUL-terminated path that outlives the call.
        if unsafe { libc::umount2(target.as_ptr(), libc::MNT_DETACH) } != 0 {
            tracing::warn!(path = %p.display(), error = %std::io::Error::last_os_error(), "cannot unmount a volume");
        }
    }
}

fn quantity(q: Option<&k8s_openapi::apimachinery::pkg::api::resource::Quantity>) -> Option<i64> {
    q.and_then(|q| parse_quantity(&q.0).ok())
}

/// The pod's memory limit as its cgroup gets it (upstream `ResourceConfigForPod`): the sum of the
/// app containers' limits (and restartable init containers'), at least each init container's,
/// plus the overhead; none unless every container declares one.
pub fn pod_memory_limit(pod: &Pod) -> Option<i64> {
    let spec = pod.spec.as_ref()?;
    let limit = |c: &k8s_openapi::api::core::v1::Container| {
        quantity(
            c.resources
                .as_ref()
                .and_then(|r| r.limits.as_ref())
                .and_then(|l| l.get("memory")),
        )
    };
    let mut sum = 0i64;
    let mut init_max = 0i64;
    let mut sidecars = 0i64;
    for c in spec.init_containers.iter().flatten() {
        let l = limit(c)?;
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars = sidecars.saturating_add(l);
        } else {
            init_max = init_max.max(sidecars.saturating_add(l));
        }
    }
    for c in &spec.containers {
        sum = sum.saturating_add(limit(c)?);
    }
    let overhead = quantity(spec.overhead.as_ref().and_then(|o| o.get("memory"))).unwrap_or(0);
    Some(
        sum.saturating_add(sidecars)
            .max(init_max)
            .saturating_add(overhead),
    )
}

/// Upstream `calculateEmptyDirMemorySize`.
pub fn memory_size(
    allocatable: &BTreeMap<String, String>,
    pod: &Pod,
    size_limit: Option<i64>,
) -> Option<i64> {
    let mut size = allocatable
        .get("memory")
        .and_then(|m| parse_quantity(m).ok())?;
    if let Some(l) = pod_memory_limit(pod).filter(|l| *l > 0 && *l <= size) {
        size = l;
    }
    if let Some(l) = size_limit.filter(|l| *l > 0 && *l <= size) {
        size = l;
    }
    Some(size)
}

/// Upstream `setupDir`: the directory exists with mode 0777 (set only when the permission bits
/// differ, so an fsGroup's setgid bit stays).
pub fn setup_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let err = |e: std::io::Error| format!("{}: {e}", dir.display());
    std::fs::create_dir_all(dir).map_err(err)?;
    let mode = std::fs::metadata(dir).map_err(err)?.permissions().mode();
    if mode & 0o777 != 0o777 {
        std::fs::set_permissions(
            dir,
            std::fs::Permissions::from_mode((mode & 0o7000) | 0o777),
        )
        .map_err(err)?;
    }
    Ok(())
}

/// A directory (or, in memory, a tmpfs) at `dir`, mounted once; `true` when it was set up now.
pub fn setup_medium(dir: &Path, memory: bool, size: Option<i64>) -> Result<bool, String> {
    setup_dir(dir)?;
    if memory && !is_tmpfs(dir) {
        mount_tmpfs(dir, size)?;
        return Ok(true);
    }
    Ok(false)
}

/// An emptyDir volume: set up, given to the pod's fsGroup (always walked, as upstream passes no
/// policy) and marked ready, once.
pub fn setup(
    pod_dir: &Path,
    name: &str,
    source: &EmptyDirVolumeSource,
    pod: &Pod,
    allocatable: &BTreeMap<String, String>,
) -> Result<PathBuf, String> {
    let dir = super::plugin_dir(pod_dir, "empty-dir", name);
    let meta = pod_dir
        .join("plugins")
        .join("kubernetes.io~empty-dir")
        .join(name);
    let ready = meta.join("ready");
    let medium = source.medium.as_deref().unwrap_or("");
    let memory = match medium {
        "" => false,
        "Memory" => true,
        m if m.starts_with("HugePages") => {
            return Err(format!(
                "hugepages medium {m:?} is not supported by the rkube kubelet"
            ))
        }
        m => return Err(format!("unknown storage medium {m:?}")),
    };
    if ready.exists() && (!memory || is_tmpfs(&dir)) {
        return Ok(dir);
    }
    let size = if memory {
        memory_size(allocatable, pod, quantity(source.size_limit.as_ref()))
    } else {
        None
    };
    setup_medium(&dir, memory, size)?;
    if let Some((group, _)) = ownership::fs_group(pod) {
        ownership::set_volume_ownership(&dir, group, false, false)?;
    }
    std::fs::create_dir_all(&meta).map_err(|e| format!("{}: {e}", meta.display()))?;
    std::fs::write(&ready, b"").map_err(|e| format!("{}: {e}", ready.display()))?;
    Ok(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(spec: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": spec}))
            .unwrap()
    }

    #[test]
    fn memory_sizes_as_upstream() {
        let alloc: BTreeMap<String, String> = [("memory".to_string(), "1Gi".to_string())].into();
        let unlimited = pod(serde_json::json!({"containers": [{"name": "a"}]}));
        assert_eq!(memory_size(&alloc, &unlimited, None), Some(1 << 30));
        assert_eq!(
            memory_size(&alloc, &unlimited, Some(64 << 20)),
            Some(64 << 20)
        );
        // A sizeLimit above what the pod may use does not widen it.
        assert_eq!(
            memory_size(&alloc, &unlimited, Some(2 << 30)),
            Some(1 << 30)
        );
        let limited = pod(serde_json::json!({
            "initContainers": [{"name": "i", "resources": {"limits": {"memory": "300Mi"}}}],
            "containers": [{"name": "a", "resources": {"limits": {"memory": "100Mi"}}},
                           {"name": "b", "resources": {"limits": {"memory": "100Mi"}}}]}));
        assert_eq!(pod_memory_limit(&limited), Some(300 << 20));
        assert_eq!(memory_size(&alloc, &limited, None), Some(300 << 20));
        assert_eq!(
            memory_size(&alloc, &limited, Some(16 << 20)),
            Some(16 << 20)
        );
        let partly = pod(serde_json::json!({
            "containers": [{"name": "a", "resources": {"limits": {"memory": "100Mi"}}}, {"name": "b"}]}));
        assert_eq!(pod_memory_limit(&partly), None);
        assert_eq!(memory_size(&BTreeMap::new(), &partly, Some(1)), None);
    }

    #[test]
    fn mountinfo_escapes() {
        assert_eq!(unescape("/a\\040b"), "/a b");
        assert_eq!(unescape("/plain"), "/plain");
        assert_eq!(unescape("/end\\04"), "/end\\04");
    }

    #[test]
    fn memory_medium_is_a_tmpfs_until_unmounted() {
        let dir = tempfile::tempdir().unwrap();
        let pod_dir = dir.path().join("pod");
        let p = pod(serde_json::json!({"containers": [{"name": "a"}],
            "securityContext": {"fsGroup": 4321}}));
        let alloc: BTreeMap<String, String> = [("memory".to_string(), "1Gi".to_string())].into();
        let source = EmptyDirVolumeSource {
            medium: Some("Memory".into()),
            size_limit: Some(k8s_openapi::apimachinery::pkg::api::resource::Quantity(
                "8Mi".into(),
            )),
        };
        let vol = setup(&pod_dir, "cache", &source, &p, &alloc).unwrap();
        assert!(is_tmpfs(&vol));
        let line = std::fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .lines()
            .find(|l| l.contains(&*vol.to_string_lossy()))
            .unwrap()
            .to_string();
        assert!(line.contains("size=8192k"), "{line}");
        {
            use std::os::unix::fs::MetadataExt;
            let m = std::fs::metadata(&vol).unwrap();
            assert_eq!((m.mode() & 0o7777, m.gid()), (0o3777, 4321));
        }
        // Set up once: a second call changes nothing.
        std::fs::write(vol.join("f"), b"x").unwrap();
        setup(&pod_dir, "cache", &source, &p, &alloc).unwrap();
        assert!(vol.join("f").exists());
        unmount_under(&pod_dir);
        assert!(!is_tmpfs(&vol));
        assert!(!vol.join("f").exists());
        let disk = setup(&pod_dir, "d", &EmptyDirVolumeSource::default(), &p, &alloc).unwrap();
        assert!(!is_tmpfs(&disk));
        let bad = EmptyDirVolumeSource {
            medium: Some("Floppy".into()),
            size_limit: None,
        };
        assert_eq!(
            setup(&pod_dir, "x", &bad, &p, &alloc).unwrap_err(),
            "unknown storage medium \"Floppy\""
        );
    }
}
