//! A container's volume mounts (upstream `kubelet_pods.go` `makeMounts` for `volumeMounts`, with
//! `subPath`, `subPathExpr` and read-only handling, and `pkg/volume/util/subpath`): a `subPath`
//! (or a `subPathExpr` expanded from the container's environment, every `$(VAR)` defined and
//! non-empty) must be relative without `..`; a missing one is made as a directory with the volume
//! root's mode; the path is resolved (symbolic links followed) and must stay inside the volume.
//! Mounts are read-only when asked or when the volume must be (API data volumes).
//!
//! As upstream's `doBindSubPath`, the resolved path is opened (`O_PATH|O_NOFOLLOW`), the opened
//! object's own path (`/proc/self/fd/N`) is checked to be inside the volume, and that fd is
//! bind-mounted on `<pod>/volume-subpaths/<volume>/<container>/<index>`, which the container gets:
//! a container sharing the volume cannot swap a path component between the check and the mount.
//! A target already mounted (a restarted container) is reused; the pod's teardown unmounts them.

use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Container, VolumeMount};

use super::MountedVolume;

/// One bind mount of a container.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerMount {
    pub container_path: String,
    pub host_path: PathBuf,
    pub read_only: bool,
}

/// Upstream `ExpandContainerVolumeMounts`: every referenced variable must be set and non-empty.
pub fn expand_sub_path_expr(expr: &str, env: &HashMap<String, String>) -> Result<String, String> {
    let missing = RefCell::new(BTreeSet::new());
    let expanded = crate::envvars::expand(expr, &|name| match env.get(name) {
        Some(v) if !v.is_empty() => Some(v.clone()),
        _ => {
            missing.borrow_mut().insert(name.to_string());
            Some(String::new())
        }
    });
    let missing = missing.into_inner();
    if !missing.is_empty() {
        return Err(format!(
            "missing value for {}",
            missing.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    Ok(expanded)
}

/// Upstream `SafeMakeDir` (without its fd-walk): the missing components of `sub` inside `volume`,
/// each with mode `perm`.
fn make_sub_dirs(volume: &Path, sub: &str, perm: u32) -> std::io::Result<()> {
    let mut path = volume.to_path_buf();
    for part in sub.split('/').filter(|p| !p.is_empty() && *p != ".") {
        path.push(part);
        match std::fs::create_dir(&path) {
            Ok(()) => std::fs::set_permissions(&path, std::fs::Permissions::from_mode(perm))?,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Upstream `doBindSubPath` after the checks: `real` (inside `root`) bound on `target`.
fn bind_sub_path(real: &Path, root: &Path, target: &Path) -> std::io::Result<()> {
    if super::emptydir::is_mount_point(target) {
        return Ok(());
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(real)?;
    let source = format!("/proc/self/fd/{}", file.as_raw_fd());
    let opened = std::fs::read_link(&source)?;
    if !opened.starts_with(root) {
        return Err(std::io::Error::other(format!(
            "{} resolves to {}, outside the volume",
            real.display(),
            opened.display()
        )));
    }
    let is_dir = file.metadata()?.is_dir();
    if let Some(parent) = target.parent() {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o750)
            .create(parent)?;
    }
    if std::fs::symlink_metadata(target).is_err() {
        if is_dir {
            std::fs::DirBuilder::new().mode(0o750).create(target)?;
        } else {
            std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o640)
                .open(target)?;
        }
    }
    let c = |p: &[u8]| std::ffi::CString::new(p).map_err(std::io::Error::other);
    let source_c = c(source.as_bytes())?;
    let target_c = c(target.as_os_str().as_bytes())?;
    // SAFETY: NUL-terminated strings that outlive the call; no data argument for a bind mount.
    let rc = unsafe {
        libc::mount(
            source_c.as_ptr(),
            target_c.as_ptr(),
            std::ptr::null(),
            libc::MS_BIND,
            std::ptr::null(),
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

fn sub_path_mount(
    container: &Container,
    m: &VolumeMount,
    volume: &Path,
    sub: &str,
    target: &Path,
) -> Result<PathBuf, String> {
    if sub.starts_with('/') {
        return Err(format!(
            "error SubPath `{sub}` must not be an absolute path"
        ));
    }
    if sub.split('/').any(|c| c == "..") {
        return Err(format!(
            "unable to provision SubPath `{sub}`: must not contain '..'"
        ));
    }
    let path = volume.join(sub);
    if std::fs::symlink_metadata(&path).is_err() {
        let perm = std::fs::metadata(volume)
            .map(|m| m.permissions().mode() & 0o7777)
            .map_err(|e| format!("{}: {e}", volume.display()))?;
        if let Err(e) = make_sub_dirs(volume, sub, perm) {
            // The details stay in the log: they describe the host's file system.
            tracing::warn!(path = %path.display(), error = %e, "cannot create a subPath directory");
            return Err(format!(
                "failed to create subPath directory for volumeMount \"{}\" of container \"{}\"",
                m.name, container.name
            ));
        }
    }
    let prepare_failed = || {
        format!(
            "failed to prepare subPath for volumeMount \"{}\" of container \"{}\"",
            m.name, container.name
        )
    };
    let real = std::fs::canonicalize(&path).map_err(|_| prepare_failed())?;
    let root = std::fs::canonicalize(volume).map_err(|_| prepare_failed())?;
    if !real.starts_with(&root) {
        tracing::warn!(path = %path.display(), resolved = %real.display(), "subPath leaves its volume");
        return Err(prepare_failed());
    }
    if let Err(e) = bind_sub_path(&real, &root, target) {
        tracing::warn!(path = %real.display(), target = %target.display(), error = %e, "cannot bind a subPath");
        return Err(prepare_failed());
    }
    Ok(target.to_path_buf())
}

/// The container's volume mounts; `env` is its environment (for `subPathExpr`), `pod_dir` the
/// pod's directory (subPaths are bound under it).
pub fn container_mounts(
    container: &Container,
    volumes: &HashMap<String, MountedVolume>,
    env: &HashMap<String, String>,
    pod_dir: &Path,
) -> Result<Vec<ContainerMount>, String> {
    let mut out = Vec::new();
    for (index, m) in container.volume_mounts.iter().flatten().enumerate() {
        let v = volumes.get(&m.name).ok_or_else(|| {
            format!(
                "cannot find volume \"{}\" to mount into container \"{}\"",
                m.name, container.name
            )
        })?;
        let mut sub = m.sub_path.clone().unwrap_or_default();
        if let Some(expr) = m.sub_path_expr.as_deref().filter(|e| !e.is_empty()) {
            sub = expand_sub_path_expr(expr, env)?;
        }
        let host_path = if sub.is_empty() {
            v.host_path.clone()
        } else {
            let target = pod_dir
                .join("volume-subpaths")
                .join(&m.name)
                .join(&container.name)
                .join(index.to_string());
            sub_path_mount(container, m, &v.host_path, &sub, &target)?
        };
        out.push(ContainerMount {
            container_path: m.mount_path.clone(),
            host_path,
            read_only: m.read_only == Some(true) || v.read_only,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(mounts: serde_json::Value) -> Container {
        serde_json::from_value(serde_json::json!({"name": "c", "volumeMounts": mounts})).unwrap()
    }

    #[test]
    fn expressions_need_every_variable() {
        let env: HashMap<String, String> = [
            ("POD".to_string(), "web-0".to_string()),
            ("EMPTY".to_string(), String::new()),
        ]
        .into();
        assert_eq!(
            expand_sub_path_expr("logs/$(POD)", &env).unwrap(),
            "logs/web-0"
        );
        assert_eq!(
            expand_sub_path_expr("$(B)/$(EMPTY)/$(A)", &env).unwrap_err(),
            "missing value for A, B, EMPTY"
        );
        assert_eq!(expand_sub_path_expr("$$(POD)", &env).unwrap(), "$(POD)");
    }

    #[test]
    fn sub_paths_are_made_resolved_and_confined() {
        let dir = tempfile::tempdir().unwrap();
        let vol = dir.path().join("vol");
        std::fs::create_dir(&vol).unwrap();
        std::fs::set_permissions(&vol, std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::write(vol.join("file"), b"x").unwrap();
        std::os::unix::fs::symlink("/etc", vol.join("escape")).unwrap();
        std::os::unix::fs::symlink("file", vol.join("inside")).unwrap();
        let volumes: HashMap<String, MountedVolume> = [(
            "v".to_string(),
            MountedVolume {
                host_path: vol.clone(),
                read_only: false,
            },
        )]
        .into();
        let env: HashMap<String, String> = [("POD".to_string(), "p1".to_string())].into();
        let c = container(serde_json::json!([
            {"name": "v", "mountPath": "/all"},
            {"name": "v", "mountPath": "/ro", "readOnly": true},
            {"name": "v", "mountPath": "/new", "subPath": "a/b"},
            {"name": "v", "mountPath": "/expr", "subPathExpr": "pods/$(POD)"},
            {"name": "v", "mountPath": "/f", "subPath": "inside"},
        ]));
        let pod_dir = dir.path().join("pod");
        let m = container_mounts(&c, &volumes, &env, &pod_dir).unwrap();
        assert_eq!(m[0].host_path, vol);
        assert!(!m[0].read_only && m[1].read_only);
        let bound = |i: usize| pod_dir.join("volume-subpaths/v/c").join(i.to_string());
        assert_eq!(m[2].host_path, bound(2));
        let mode = std::fs::metadata(vol.join("a/b"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o777);
        assert!(vol.join("pods/p1").is_dir());
        std::fs::write(vol.join("pods/p1/seen"), b"y").unwrap();
        assert_eq!(std::fs::read(bound(3).join("seen")).unwrap(), b"y");
        // A file subPath (through a link inside the volume) is bound on a file.
        assert_eq!(m[4].host_path, bound(4));
        assert_eq!(std::fs::read(bound(4)).unwrap(), b"x");
        // Again (a restarted container): the bound targets are reused.
        let again = container_mounts(&c, &volumes, &env, &pod_dir).unwrap();
        assert_eq!(again, m);

        let bad = |mounts: serde_json::Value| {
            container_mounts(&container(mounts), &volumes, &env, &pod_dir).unwrap_err()
        };
        assert_eq!(
            bad(serde_json::json!([{"name": "v", "mountPath": "/x", "subPath": "escape"}])),
            "failed to prepare subPath for volumeMount \"v\" of container \"c\""
        );
        assert_eq!(
            bad(serde_json::json!([{"name": "v", "mountPath": "/x", "subPath": "/abs"}])),
            "error SubPath `/abs` must not be an absolute path"
        );
        assert_eq!(
            bad(serde_json::json!([{"name": "v", "mountPath": "/x", "subPath": "a/../.."}])),
            "unable to provision SubPath `a/../..`: must not contain '..'"
        );
        assert_eq!(
            bad(serde_json::json!([{"name": "w", "mountPath": "/x"}])),
            "cannot find volume \"w\" to mount into container \"c\""
        );
        assert_eq!(
            bad(serde_json::json!([{"name": "v", "mountPath": "/x", "subPathExpr": "$(NOPE)"}])),
            "missing value for NOPE"
        );
        super::super::emptydir::unmount_under(&pod_dir);
        assert!(!super::super::emptydir::is_mount_point(&bound(4)));
    }
}
