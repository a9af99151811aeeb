//! hostPath type checks (upstream `pkg/volume/hostpath` `checkTypeInternal`, `makeDir`,
//! `makeFile`, with its error texts). Types follow symbolic links, as upstream's `GetFileType`
//! (a stat) does. Upstream leaves a hostPath's ownership alone, and so does this.

use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What the path is, as upstream's `GetFileType` names it.
fn file_type(path: &Path) -> Option<&'static str> {
    let t = std::fs::metadata(path).ok()?.file_type();
    Some(if t.is_dir() {
        "Directory"
    } else if t.is_file() {
        "File"
    } else if t.is_socket() {
        "Socket"
    } else if t.is_char_device() {
        "CharDevice"
    } else if t.is_block_device() {
        "BlockDevice"
    } else {
        "Unknown"
    })
}

fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}

/// Checks (and for the `...OrCreate` types makes) `path` as `type_` says; "" checks nothing.
pub fn check(path: &Path, type_: &str) -> Result<(), String> {
    let show = path.display();
    let is = |want: &str| file_type(path) == Some(want);
    match type_ {
        "" => Ok(()),
        "DirectoryOrCreate" if !exists(path) => {
            // Upstream's MkdirAll(path, 0755): parents too, the umask applies.
            std::fs::create_dir_all(path).map_err(|e| format!("mkdir {show}: {e}"))
        }
        "DirectoryOrCreate" | "Directory" => is("Directory")
            .then_some(())
            .ok_or_else(|| format!("hostPath type check failed: {show} is not a directory")),
        "FileOrCreate" if !exists(path) => {
            // Upstream's OpenFile(path, O_CREATE, 0644): no parents are made.
            std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(false)
                .mode(0o644)
                .open(path)
                .map(|_| ())
                .map_err(|e| format!("open {show}: {e}"))
        }
        "FileOrCreate" | "File" => is("File")
            .then_some(())
            .ok_or_else(|| format!("hostPath type check failed: {show} is not a file")),
        "Socket" => is("Socket")
            .then_some(())
            .ok_or_else(|| format!("hostPath type check failed: {show} is not a socket file")),
        "CharDevice" => is("CharDevice")
            .then_some(())
            .ok_or_else(|| format!("hostPath type check failed: {show} is not a character device")),
        "BlockDevice" => is("BlockDevice")
            .then_some(())
            .ok_or_else(|| format!("hostPath type check failed: {show} is not a block device")),
        other => Err(format!("{other} is an invalid volume type")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn types_and_texts() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path().join("made/deep");
        check(&d, "DirectoryOrCreate").unwrap();
        assert!(d.is_dir());
        check(&d, "Directory").unwrap();
        let f = dir.path().join("f");
        check(&f, "FileOrCreate").unwrap();
        assert!(f.is_file());
        check(&f, "File").unwrap();
        // FileOrCreate makes no parents.
        assert!(check(&dir.path().join("no/f"), "FileOrCreate").is_err());
        assert_eq!(
            check(&f, "Directory").unwrap_err(),
            format!(
                "hostPath type check failed: {} is not a directory",
                f.display()
            )
        );
        assert_eq!(
            check(&f, "DirectoryOrCreate").unwrap_err(),
            format!(
                "hostPath type check failed: {} is not a directory",
                f.display()
            )
        );
        assert_eq!(
            check(&d, "FileOrCreate").unwrap_err(),
            format!("hostPath type check failed: {} is not a file", d.display())
        );
        let none = dir.path().join("none");
        assert!(check(&none, "File").unwrap_err().ends_with("is not a file"));
        check(&none, "").unwrap();
        assert!(check(&f, "Socket")
            .unwrap_err()
            .ends_with("is not a socket file"));
        assert!(check(&f, "BlockDevice")
            .unwrap_err()
            .ends_with("is not a block device"));
        check(Path::new("/dev/null"), "CharDevice").unwrap();
        assert!(check(&f, "CharDevice")
            .unwrap_err()
            .ends_with("is not a character device"));
        let sock = dir.path().join("s");
        let _l = std::os::unix::net::UnixListener::bind(&sock).unwrap();
        check(&sock, "Socket").unwrap();
        assert_eq!(
            check(&f, "Bogus").unwrap_err(),
            "Bogus is an invalid volume type"
        );
    }
}
