//! Upstream's `SetVolumeOwnership` (`pkg/volume/volume_linux.go`): the volumes that support
//! ownership management (emptyDir, local PVs, and upstream's block and CSI volumes) are handed to
//! the pod's `fsGroup`: every file and directory gets that group, group read/write (read only for
//! read-only volumes), directories also group execute and the setgid bit so new files inherit the
//! group. Symbolic links get the group but no mode change. With `fsGroupChangePolicy: OnRootMismatch` nothing is
//! walked when the volume's root already has the group and the bits.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

use k8s_openapi::api::core::v1::Pod;

const RW_MASK: u32 = 0o660;
const RO_MASK: u32 = 0o440;
const EXEC_MASK: u32 = 0o110;
const SETGID: u32 = 0o2000;

/// The pod's `fsGroup` and whether only a mismatching root triggers the walk.
pub fn fs_group(pod: &Pod) -> Option<(u32, bool)> {
    let sc = pod.spec.as_ref()?.security_context.as_ref()?;
    let group = u32::try_from(sc.fs_group?).ok()?;
    let on_root_mismatch = sc.fs_group_change_policy.as_deref() == Some("OnRootMismatch");
    Some((group, on_root_mismatch))
}

fn wanted_mask(is_dir: bool, read_only: bool) -> u32 {
    let mut mask = if read_only { RO_MASK } else { RW_MASK };
    if is_dir {
        mask |= SETGID | EXEC_MASK;
    }
    mask
}

/// Upstream `skipPermissionChange`: the root has the group and its bits already.
fn root_matches(dir: &Path, group: u32, read_only: bool) -> bool {
    let Ok(meta) = std::fs::metadata(dir) else {
        return false;
    };
    let mask = wanted_mask(true, read_only);
    meta.gid() == group && meta.mode() & mask == mask
}

/// Upstream `changeFilePermission`: the group of everything, links included (lchown); the mode
/// bits of everything but links (a link's chmod would reach its target). Failures are logged and
/// the walk goes on, as upstream's.
fn change(path: &Path, meta: &std::fs::Metadata, group: u32, read_only: bool) {
    if let Err(e) = std::os::unix::fs::lchown(path, None, Some(group)) {
        tracing::warn!(path = %path.display(), error = %e, "lchown failed");
    }
    if meta.file_type().is_symlink() {
        return;
    }
    let mode = meta.mode() | wanted_mask(meta.is_dir(), read_only);
    if let Err(e) = std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode & 0o7777)) {
        tracing::warn!(path = %path.display(), error = %e, "chmod failed");
    }
}

fn walk(path: &Path, group: u32, read_only: bool) -> std::io::Result<()> {
    let meta = std::fs::symlink_metadata(path)?;
    change(path, &meta, group, read_only);
    if meta.is_dir() {
        for entry in std::fs::read_dir(path)? {
            walk(&entry?.path(), group, read_only)?;
        }
    }
    Ok(())
}

/// Upstream `FsUserFrom`: the one user every init and app container runs as (its own
/// `runAsUser`, else the pod's), if there is one.
pub fn fs_user_from(pod: &Pod) -> Option<u32> {
    let spec = pod.spec.as_ref()?;
    let pod_user = spec.security_context.as_ref().and_then(|s| s.run_as_user);
    let mut user = None;
    for c in spec
        .init_containers
        .iter()
        .flatten()
        .chain(spec.containers.iter())
    {
        let u = c
            .security_context
            .as_ref()
            .and_then(|s| s.run_as_user)
            .or(pod_user)?;
        match user {
            Some(seen) if seen != u => return None,
            _ => user = Some(u),
        }
    }
    user.and_then(|u| u32::try_from(u).ok())
}

/// Gives `dir` (a volume's root) to `group` as upstream does.
pub fn set_volume_ownership(
    dir: &Path,
    group: u32,
    on_root_mismatch: bool,
    read_only: bool,
) -> Result<(), String> {
    if on_root_mismatch && root_matches(dir, group, read_only) {
        return Ok(());
    }
    walk(dir, group, read_only)
        .map_err(|e| format!("applying fsGroup {group} to {}: {e}", dir.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_get_the_group_and_its_bits() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("vol");
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/file"), b"x").unwrap();
        std::fs::set_permissions(
            root.join("sub/file"),
            std::fs::Permissions::from_mode(0o600),
        )
        .unwrap();
        std::os::unix::fs::symlink("/etc/hostname", root.join("link")).unwrap();
        set_volume_ownership(&root, 4321, false, false).unwrap();
        let file = std::fs::metadata(root.join("sub/file")).unwrap();
        assert_eq!(file.gid(), 4321);
        assert_eq!(file.mode() & 0o7777, 0o660);
        let sub = std::fs::metadata(root.join("sub")).unwrap();
        assert_eq!(sub.gid(), 4321);
        assert_eq!(sub.mode() & 0o2070, 0o2070);
        // The link's target is not touched.
        assert_ne!(std::fs::metadata("/etc/hostname").unwrap().gid(), 4321);

        // OnRootMismatch: a matching root means no walk (a new file keeps its group).
        std::fs::write(root.join("later"), b"y").unwrap();
        std::os::unix::fs::chown(root.join("later"), None, Some(0)).unwrap();
        set_volume_ownership(&root, 4321, true, false).unwrap();
        assert_eq!(std::fs::metadata(root.join("later")).unwrap().gid(), 0);
        set_volume_ownership(&root, 4321, false, false).unwrap();
        assert_eq!(std::fs::metadata(root.join("later")).unwrap().gid(), 4321);
    }

    #[test]
    fn pod_fs_group() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [], "securityContext": {"fsGroup": 2000,
                "fsGroupChangePolicy": "OnRootMismatch"}}}))
        .unwrap();
        assert_eq!(fs_group(&pod), Some((2000, true)));
        let none: Pod = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "p"}, "spec": {"containers": []}}),
        )
        .unwrap();
        assert_eq!(fs_group(&none), None);
    }

    #[test]
    fn one_user_for_all_containers() {
        let pod = |spec: serde_json::Value| -> Pod {
            serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}, "spec": spec}))
                .unwrap()
        };
        let same = pod(serde_json::json!({"securityContext": {"runAsUser": 1000},
            "initContainers": [{"name": "i"}],
            "containers": [{"name": "a"}, {"name": "b", "securityContext": {"runAsUser": 1000}}]}));
        assert_eq!(fs_user_from(&same), Some(1000));
        let differ = pod(serde_json::json!({"securityContext": {"runAsUser": 1000},
            "containers": [{"name": "a"}, {"name": "b", "securityContext": {"runAsUser": 1001}}]}));
        assert_eq!(fs_user_from(&differ), None);
        let unset = pod(serde_json::json!({"containers": [{"name": "a",
            "securityContext": {"runAsUser": 5}}, {"name": "b"}]}));
        assert_eq!(fs_user_from(&unset), None);
    }
}
