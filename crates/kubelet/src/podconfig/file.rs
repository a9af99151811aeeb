//! The static pod manifest source (upstream `config/file.go` and `config/common.go`): every
//! non-hidden file of `--pod-manifest-path` (or that file itself) is a pod, YAML or JSON. Pods get
//! upstream's static-pod defaults: name `<name>-<node>`, namespace `default`, `spec.nodeName`, a UID
//! hashed from the node, the file and the manifest (also in `kubernetes.io/config.hash`).
//!
//! Differences: upstream reacts to inotify events and re-reads everything every `fileCheckFrequency`;
//! here the directory listing (names, sizes, mtimes) is polled every second and everything is re-read
//! when it changed or every `fileCheckFrequency`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::Pod;

use super::SourceSet;

/// A static pod from a manifest `text` (from `source`: a file path or URL).
pub fn static_pod(text: &str, node_name: &str, source: &str, is_file: bool) -> Result<Pod, String> {
    let value: serde_json::Value =
        serde_yaml_ng::from_str(text).map_err(|e| format!("{source}: not YAML or JSON: {e}"))?;
    static_pod_from_value(value, node_name, source, is_file)
}

pub fn static_pod_from_value(
    mut value: serde_json::Value,
    node_name: &str,
    source: &str,
    is_file: bool,
) -> Result<Pod, String> {
    let kind = value["kind"].as_str().unwrap_or("");
    if kind != "Pod" || value["apiVersion"].as_str().unwrap_or("v1") != "v1" {
        return Err(format!("{source}: expected a v1 Pod, found kind {kind:?}"));
    }
    let name = value["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("{source}: the pod has no metadata.name"))?
        .to_string();
    let Some(obj) = value.as_object_mut() else {
        return Err(format!("{source}: not an object"));
    };
    // Upstream hashes the pod as read (before defaults) together with where it came from.
    let mut hasher = crate::hash::Fnv128::new();
    if is_file {
        hasher.write(format!("host:{node_name}").as_bytes());
        hasher.write(format!("file:{source}").as_bytes());
    } else {
        hasher.write(format!("url:{source}").as_bytes());
    }
    hasher.write(serde_json::to_string(&obj).unwrap_or_default().as_bytes());
    let hash = hasher.hex();
    let mut defaulted = serde_json::Value::Object(std::mem::take(obj));
    apimachinery::defaults::apply_defaults("", "Pod", &mut defaulted);
    let serde_json::Value::Object(defaulted) = defaulted else {
        return Err(format!("{source}: not an object"));
    };
    *obj = defaulted;
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| serde_json::json!({}));
    if meta["uid"].as_str().is_none_or(str::is_empty) {
        meta["uid"] = hash.clone().into();
    }
    let uid = meta["uid"].clone();
    meta["name"] = format!("{name}-{}", node_name.to_lowercase()).into();
    if meta["namespace"].as_str().is_none_or(str::is_empty) {
        meta["namespace"] = "default".into();
    }
    if !meta["annotations"].is_object() {
        meta["annotations"] = serde_json::json!({});
    }
    meta["annotations"][super::CONFIG_HASH_ANNOTATION] = uid;
    if is_file {
        obj.entry("spec").or_insert_with(|| serde_json::json!({}))["nodeName"] = node_name.into();
    }
    serde_json::from_value(serde_json::Value::Object(obj.clone()))
        .map_err(|e| format!("{source}: invalid pod: {e}"))
}

/// The manifest files of `path`: the file itself, or the non-hidden files of the directory, sorted.
fn manifest_files(path: &Path) -> std::io::Result<Vec<(PathBuf, u64, Option<SystemTime>)>> {
    let meta = std::fs::metadata(path)?;
    let entry = |p: PathBuf| {
        let m = std::fs::metadata(&p).ok()?;
        m.is_file().then(|| (p, m.len(), m.modified().ok()))
    };
    if meta.is_file() {
        return Ok(entry(path.to_path_buf()).into_iter().collect());
    }
    let mut files: Vec<_> = std::fs::read_dir(path)?
        .filter_map(Result::ok)
        .filter(|e| !e.file_name().to_string_lossy().starts_with('.'))
        .filter_map(|e| entry(e.path()))
        .collect();
    files.sort();
    Ok(files)
}

/// Reads every manifest; a bad file is logged and skipped, as upstream.
pub fn read_all(path: &Path, node_name: &str) -> Vec<Pod> {
    let files = match manifest_files(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => {
            tracing::warn!(path = %path.display(), error = %e, "cannot read the pod manifest path");
            Vec::new()
        }
    };
    files
        .into_iter()
        .filter_map(|(file, _, _)| {
            let text = std::fs::read_to_string(&file).ok()?;
            match static_pod(&text, node_name, &file.display().to_string(), true) {
                Ok(p) => Some(p),
                Err(e) => {
                    tracing::warn!(error = %e, "ignoring a static pod manifest");
                    None
                }
            }
        })
        .collect()
}

pub async fn run(
    path: PathBuf,
    node_name: String,
    check_frequency: Duration,
    updates: tokio::sync::mpsc::Sender<SourceSet>,
) {
    let mut last_listing = None;
    let mut last_read = Instant::now();
    loop {
        let listing = manifest_files(&path).ok();
        if last_listing.as_ref() != Some(&listing) || last_read.elapsed() >= check_frequency {
            let pods = read_all(&path, &node_name);
            if updates.send(SourceSet(pods)).await.is_err() {
                return;
            }
            last_listing = Some(listing);
            last_read = Instant::now();
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST: &str = "apiVersion: v1\nkind: Pod\nmetadata:\n  name: web\nspec:\n  containers:\n  - name: c\n    image: busybox\n";

    #[test]
    fn static_pods_get_upstream_defaults() {
        let p = static_pod(MANIFEST, "Node-1", "/etc/manifests/web.yaml", true).unwrap();
        assert_eq!(p.metadata.name.as_deref(), Some("web-node-1"));
        assert_eq!(p.metadata.namespace.as_deref(), Some("default"));
        let uid = p.metadata.uid.clone().unwrap();
        assert_eq!(uid.len(), 32);
        let ann = p.metadata.annotations.clone().unwrap();
        assert_eq!(ann.get(super::super::CONFIG_HASH_ANNOTATION), Some(&uid));
        let spec = p.spec.unwrap();
        assert_eq!(spec.node_name.as_deref(), Some("Node-1"));
        assert_eq!(spec.restart_policy.as_deref(), Some("Always"));
        // The same manifest elsewhere is another pod; the same place gives the same UID.
        let again = static_pod(MANIFEST, "Node-1", "/etc/manifests/web.yaml", true).unwrap();
        assert_eq!(again.metadata.uid.as_deref(), Some(uid.as_str()));
        let other = static_pod(MANIFEST, "Node-1", "/etc/manifests/web2.yaml", true).unwrap();
        assert_ne!(other.metadata.uid.as_deref(), Some(uid.as_str()));
    }

    #[test]
    fn bad_manifests_are_errors() {
        for (text, want) in [
            (
                "kind: Service\napiVersion: v1\nmetadata: {name: x}",
                "expected a v1 Pod",
            ),
            (
                "kind: Pod\napiVersion: v1\nmetadata: {}",
                "no metadata.name",
            ),
            ("{{{", "not YAML or JSON"),
        ] {
            let err = static_pod(text, "n", "f", true).unwrap_err();
            assert!(err.contains(want), "{err}");
        }
    }

    #[test]
    fn directory_listing_skips_hidden_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a.yaml"), MANIFEST).unwrap();
        std::fs::write(dir.path().join(".hidden.yaml"), MANIFEST).unwrap();
        std::fs::write(dir.path().join("bad.yaml"), "kind: Nope").unwrap();
        let pods = read_all(dir.path(), "n");
        assert_eq!(pods.len(), 1);
        assert!(read_all(&dir.path().join("missing"), "n").is_empty());
    }
}
