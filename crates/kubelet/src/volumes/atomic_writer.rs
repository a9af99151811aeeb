//! Upstream's atomic writer (`pkg/volume/util/atomic_writer.go`), which projects configMap, secret,
//! downward API and projected payloads into a volume directory so that a reader never sees half
//! an update:
//!
//! ```text
//! <dir>/..2026_11_29_12_00_00.123456789/   the payload (mode 0755 directory, files with their modes)
//! <dir>/..data -> ..2026_11_29_12_00_00.123456789
//! <dir>/key    -> ..data/key                 one symlink per top-level path of the payload
//! ```
//!
//! An update writes a new timestamped directory, points a `..data_tmp` symlink at it and renames
//! that over `..data` (rename is atomic), then removes user-visible links that left the payload and
//! the old directory. A payload equal to what `..data` holds is not rewritten. Paths starting with
//! `..` are reserved for the writer. Like upstream's, the writer is not safe for concurrent use on
//! one directory: the kubelet syncs a pod from one worker at a time.

use std::collections::{BTreeMap, BTreeSet};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const MAX_FILE_NAME_LENGTH: usize = 255;
const MAX_PATH_LENGTH: usize = 4096;
const DATA_DIR_NAME: &str = "..data";
const NEW_DATA_DIR_NAME: &str = "..data_tmp";

/// One file of a payload (upstream `FileProjection`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileProjection {
    pub data: Vec<u8>,
    pub mode: u32,
    /// Owner to give the file (projected service account tokens when every container runs as
    /// one user).
    pub fs_user: Option<u32>,
}

impl FileProjection {
    pub fn new(data: Vec<u8>, mode: u32) -> FileProjection {
        FileProjection {
            data,
            mode,
            fs_user: None,
        }
    }
}

/// Relative path -> file.
pub type Payload = BTreeMap<String, FileProjection>;

/// Called with the new timestamped directory's name before it is published.
pub type SetPerms<'a> = &'a dyn Fn(&str) -> Result<(), String>;

fn io_err(path: &Path, e: std::io::Error) -> String {
    format!("{}: {e}", path.display())
}

/// Upstream `validatePath` (with its error texts): not empty, relative, no `..` element, not
/// starting with `..`, names of at most 255 and paths of at most 4096 characters.
pub fn validate_path(target: &str) -> Result<(), String> {
    if target.is_empty() {
        return Err(format!("invalid path: must not be empty: {target:?}"));
    }
    if target.starts_with('/') {
        return Err(format!("invalid path: must be relative path: {target}"));
    }
    if target.len() > MAX_PATH_LENGTH {
        return Err(format!(
            "invalid path: must be less than or equal to {MAX_PATH_LENGTH} characters"
        ));
    }
    let items: Vec<&str> = target.split('/').collect();
    for item in &items {
        if *item == ".." {
            return Err(format!("invalid path: must not contain '..': {target}"));
        }
        if item.len() > MAX_FILE_NAME_LENGTH {
            return Err(format!(
                "invalid path: filenames must be less than or equal to {MAX_FILE_NAME_LENGTH} characters"
            ));
        }
    }
    if items[0].starts_with("..") && items[0].len() > 2 {
        return Err(format!("invalid path: must not start with '..': {target}"));
    }
    Ok(())
}

/// Go's `filepath.Clean` for a relative path without `..` elements: no empty or `.` elements.
fn clean(path: &str) -> String {
    let parts: Vec<&str> = path
        .split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect();
    if parts.is_empty() {
        ".".into()
    } else {
        parts.join("/")
    }
}

fn validate_payload(payload: &Payload) -> Result<Payload, String> {
    let mut out = Payload::new();
    for (k, v) in payload {
        validate_path(k)?;
        out.insert(clean(k), v.clone());
    }
    Ok(out)
}

/// Upstream `shouldWritePayload`: some file is missing or has other content.
fn should_write_payload(payload: &Payload, old_ts: &Path) -> Result<bool, String> {
    for (rel, f) in payload {
        let path = old_ts.join(rel);
        match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(true),
            _ => {}
        }
        let on_disk = std::fs::read(&path).map_err(|e| io_err(&path, e))?;
        if on_disk != f.data {
            return Ok(true);
        }
    }
    Ok(false)
}

fn walk_relative(root: &Path, dir: &Path, out: &mut BTreeSet<String>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        if let Ok(rel) = path.strip_prefix(root) {
            out.insert(rel.to_string_lossy().into_owned());
        }
        if entry.file_type()?.is_dir() {
            walk_relative(root, &path, out)?;
        }
    }
    Ok(())
}

/// Upstream `pathsToRemove`: what the old version holds that neither the payload nor a parent
/// directory of one of its files is.
fn paths_to_remove(payload: &Payload, old_ts: &Path) -> Result<BTreeSet<String>, String> {
    let mut current = BTreeSet::new();
    match walk_relative(old_ts, old_ts, &mut current) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeSet::new()),
        Err(e) => return Err(io_err(old_ts, e)),
    }
    let mut wanted = BTreeSet::new();
    for file in payload.keys() {
        let mut sub = file.as_str();
        loop {
            wanted.insert(sub.to_string());
            match sub.rfind('/') {
                Some(i) => sub = &sub[..i],
                None => break,
            }
        }
    }
    Ok(current.difference(&wanted).cloned().collect())
}

/// Upstream `newTimestampDir`: `..<UTC time>.<random>`, mode 0755 whatever the umask.
fn new_timestamp_dir(target: &Path) -> Result<std::path::PathBuf, String> {
    let stamp = jiff::Timestamp::now().strftime("..%Y_%m_%d_%H_%M_%S.");
    for _ in 0..100 {
        let dir = target.join(format!("{stamp}{}", rand::random::<u32>()));
        match std::fs::create_dir(&dir) {
            Ok(()) => {
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755))
                    .map_err(|e| io_err(&dir, e))?;
                return Ok(dir);
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(io_err(&dir, e)),
        }
    }
    Err(format!(
        "{}: unable to create a new data directory",
        target.display()
    ))
}

/// Upstream `writePayloadToDir`: parents made as needed, each file's mode set exactly (not
/// masked by the umask), owners given where asked.
fn write_payload_to_dir(payload: &Payload, dir: &Path) -> Result<(), String> {
    for (rel, f) in payload {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io_err(parent, e))?;
        }
        std::fs::write(&path, &f.data).map_err(|e| io_err(&path, e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(f.mode & 0o7777))
            .map_err(|e| io_err(&path, e))?;
        if let Some(uid) = f.fs_user {
            std::os::unix::fs::chown(&path, Some(uid), None).map_err(|e| io_err(&path, e))?;
        }
    }
    Ok(())
}

/// Upstream `createUserVisibleFiles`: `<first element> -> ..data/<first element>` where missing.
fn create_user_visible_files(payload: &Payload, target: &Path) -> Result<(), String> {
    for rel in payload.keys() {
        let first = rel.split('/').next().unwrap_or(rel);
        let visible = target.join(first);
        if std::fs::symlink_metadata(&visible).is_err() {
            std::os::unix::fs::symlink(Path::new(DATA_DIR_NAME).join(first), &visible)
                .map_err(|e| io_err(&visible, e))?;
        }
    }
    Ok(())
}

/// Upstream `removeUserVisiblePaths`: only top-level links go (deeper paths went with the old
/// timestamped directory).
fn remove_user_visible_paths(paths: &BTreeSet<String>, target: &Path) -> Result<(), String> {
    let mut last = Ok(());
    for p in paths.iter().filter(|p| !p.contains('/')) {
        let path = target.join(p);
        if let Err(e) = std::fs::remove_file(&path) {
            tracing::warn!(path = %path.display(), error = %e, "cannot prune an old volume path");
            last = Err(io_err(&path, e));
        }
    }
    last
}

/// Atomically projects `payload` into `target` (which must exist). `set_perms` is called with the
/// new timestamped directory's name once the files are written and before they are published
/// (fsGroup ownership). Returns whether anything was written.
pub fn write(
    target: &Path,
    payload: &Payload,
    set_perms: Option<SetPerms<'_>>,
) -> Result<bool, String> {
    std::fs::metadata(target).map_err(|e| io_err(target, e))?;
    let payload = validate_payload(payload)?;
    let data_dir = target.join(DATA_DIR_NAME);
    let old_ts = match std::fs::read_link(&data_dir) {
        Ok(p) => Some(p.to_string_lossy().into_owned()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(io_err(&data_dir, e)),
    };
    let mut remove = BTreeSet::new();
    let mut old_to_delete = old_ts.clone();
    let mut should_write = true;
    if let Some(old) = &old_ts {
        let old_path = target.join(old);
        remove = paths_to_remove(&payload, &old_path)?;
        if !should_write_payload(&payload, &old_path)? && remove.is_empty() {
            // Up to date; the user-visible links are still checked (upstream issue 121472).
            should_write = false;
            old_to_delete = None;
        }
    }
    if should_write {
        let ts_dir = new_timestamp_dir(target)?;
        let ts_name = ts_dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let publish = || -> Result<(), String> {
            write_payload_to_dir(&payload, &ts_dir)?;
            if let Some(set_perms) = set_perms {
                set_perms(&ts_name)?;
            }
            let tmp = target.join(NEW_DATA_DIR_NAME);
            // A leftover from a crash between symlink and rename would make symlink fail forever.
            let _ = std::fs::remove_file(&tmp);
            std::os::unix::fs::symlink(&ts_name, &tmp).map_err(|e| io_err(&tmp, e))?;
            if let Err(e) = std::fs::rename(&tmp, &data_dir) {
                let _ = std::fs::remove_file(&tmp);
                return Err(io_err(&data_dir, e));
            }
            Ok(())
        };
        if let Err(e) = publish() {
            let _ = std::fs::remove_dir_all(&ts_dir);
            return Err(e);
        }
    }
    create_user_visible_files(&payload, target)?;
    remove_user_visible_paths(&remove, target)?;
    if let Some(old) = old_to_delete {
        let old_path = target.join(&old);
        std::fs::remove_dir_all(&old_path).map_err(|e| io_err(&old_path, e))?;
    }
    Ok(should_write)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payload(files: &[(&str, &str, u32)]) -> Payload {
        files
            .iter()
            .map(|(p, d, m)| {
                (
                    p.to_string(),
                    FileProjection::new(d.as_bytes().to_vec(), *m),
                )
            })
            .collect()
    }

    fn data_target(dir: &Path) -> String {
        std::fs::read_link(dir.join(DATA_DIR_NAME))
            .unwrap()
            .to_string_lossy()
            .into_owned()
    }

    #[test]
    fn paths_are_validated_as_upstream() {
        assert!(validate_path("a/b").is_ok());
        assert!(validate_path("..").is_err());
        assert_eq!(
            validate_path("").unwrap_err(),
            "invalid path: must not be empty: \"\""
        );
        assert_eq!(
            validate_path("/a").unwrap_err(),
            "invalid path: must be relative path: /a"
        );
        assert_eq!(
            validate_path("a/../b").unwrap_err(),
            "invalid path: must not contain '..': a/../b"
        );
        assert_eq!(
            validate_path("..data").unwrap_err(),
            "invalid path: must not start with '..': ..data"
        );
        assert!(validate_path(&"x".repeat(256)).is_err());
        assert_eq!(clean("./a//b/"), "a/b");
    }

    #[test]
    fn layout_update_and_removal() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path();
        let p = payload(&[
            ("a", "1", 0o644),
            ("sub/b", "2", 0o400),
            ("sub/c/d", "3", 0o600),
        ]);
        assert!(write(t, &p, None).unwrap());
        let first = data_target(t);
        assert!(first.starts_with("..20"), "{first}");
        let ts_mode = std::fs::metadata(t.join(&first))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(ts_mode & 0o7777, 0o755);
        assert_eq!(
            std::fs::read_link(t.join("a")).unwrap(),
            Path::new("..data/a")
        );
        assert_eq!(
            std::fs::read_link(t.join("sub")).unwrap(),
            Path::new("..data/sub")
        );
        assert_eq!(std::fs::read(t.join("sub/c/d")).unwrap(), b"3");
        let mode = std::fs::metadata(t.join("sub/b"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o7777, 0o400);

        // Unchanged: nothing is written, the same directory stays.
        assert!(!write(t, &p, None).unwrap());
        assert_eq!(data_target(t), first);

        // Changed content and a removed top-level file: a new directory, the old one gone.
        let p2 = payload(&[("sub/b", "2'", 0o400), ("sub/c/d", "3", 0o600)]);
        assert!(write(t, &p2, None).unwrap());
        let second = data_target(t);
        assert_ne!(second, first);
        assert!(!t.join(&first).exists());
        assert!(std::fs::symlink_metadata(t.join("a")).is_err());
        assert_eq!(std::fs::read(t.join("sub/b")).unwrap(), b"2'");
        assert!(std::fs::symlink_metadata(t.join(NEW_DATA_DIR_NAME)).is_err());

        // A removed nested file alone also makes a new version.
        let p3 = payload(&[("sub/b", "2'", 0o400)]);
        assert!(write(t, &p3, None).unwrap());
        assert!(!t.join("sub/c").exists());

        // A lost user-visible link is made again even when the data is current.
        std::fs::remove_file(t.join("sub")).unwrap();
        assert!(!write(t, &p3, None).unwrap());
        assert_eq!(std::fs::read(t.join("sub/b")).unwrap(), b"2'");

        // An empty payload empties the volume.
        assert!(write(t, &Payload::new(), None).unwrap());
        let names: Vec<String> = std::fs::read_dir(t)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(names.contains(&"..data".to_string()));
    }

    #[test]
    fn bad_payloads_and_failing_set_perms_publish_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path();
        assert!(write(t, &payload(&[("../x", "", 0o644)]), None).is_err());
        let fail = |_: &str| -> Result<(), String> { Err("no".into()) };
        assert_eq!(
            write(t, &payload(&[("a", "1", 0o644)]), Some(&fail)).unwrap_err(),
            "no"
        );
        assert_eq!(std::fs::read_dir(t).unwrap().count(), 0);
        let seen = std::sync::Mutex::new(String::new());
        let record = |name: &str| -> Result<(), String> {
            *seen.lock().unwrap() = name.to_string();
            Ok(())
        };
        write(t, &payload(&[("a", "1", 0o644)]), Some(&record)).unwrap();
        assert_eq!(*seen.lock().unwrap(), data_target(t));
    }
}
