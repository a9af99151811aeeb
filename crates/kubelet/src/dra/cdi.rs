//! Container Device Interface specs, as far as this node uses them: containerd 1.6 cannot inject
//! CDI devices itself (its CRI learnt `CDIDevices` in 1.7), so the kubelet reads the spec files
//! drivers write (JSON or YAML, in the runtime's CDI spec directories, containerd's
//! `cdi_spec_dirs`: `/etc/cdi` and `/var/run/cdi` by default, the latter winning) and applies
//! their environment edits to the container config. Device nodes, mounts and hooks are not applied
//! (see the notes); the device IDs also go to the runtime in the CRI's `CDIDevices`, as upstream
//! passes them, for a containerd that does apply them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

/// The spec directories of CDI and containerd by default, in their order: a spec in a later one
/// overrides one of the same device in an earlier one.
pub const SPEC_DIRS: &[&str] = &["/etc/cdi", "/var/run/cdi"];
/// A spec file larger than this is refused (a driver-written file; the bound keeps a broken one
/// from filling memory).
const MAX_SPEC_BYTES: u64 = 4 << 20;

#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ContainerEdits {
    #[serde(default)]
    pub env: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SpecDevice {
    pub name: String,
    #[serde(default)]
    pub container_edits: ContainerEdits,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Spec {
    #[serde(default)]
    pub cdi_version: String,
    /// `vendor/class`.
    pub kind: String,
    #[serde(default)]
    pub devices: Vec<SpecDevice>,
    #[serde(default)]
    pub container_edits: ContainerEdits,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CdiError {
    #[error("invalid CDI device ID {0:?}: want vendor/class=name")]
    InvalidId(String),
    #[error("unresolvable CDI devices {0}")]
    Unresolved(String),
    #[error("CDI spec {path}: {message}")]
    BadSpec { path: String, message: String },
}

/// Splits `vendor/class=name`.
pub fn parse_id(id: &str) -> Result<(&str, &str), CdiError> {
    let (kind, name) = id
        .split_once('=')
        .ok_or_else(|| CdiError::InvalidId(id.to_string()))?;
    let valid = kind
        .split_once('/')
        .is_some_and(|(v, c)| !v.is_empty() && !c.is_empty() && !c.contains('/'))
        && !name.is_empty();
    if !valid {
        return Err(CdiError::InvalidId(id.to_string()));
    }
    Ok((kind, name))
}

/// Parses a spec file's text (JSON is YAML too).
pub fn parse_spec(text: &str, path: &str) -> Result<Spec, CdiError> {
    serde_yaml_ng::from_str(text).map_err(|e| CdiError::BadSpec {
        path: path.to_string(),
        message: e.to_string(),
    })
}

/// The environment the devices add, in order, a later value of a name replacing an earlier one
/// (CDI's edits replace variables of the same name): each spec's own edits, then the device's.
/// `specs` are in priority order (as [`load_specs`] returns them); the first spec of a kind that
/// has the device wins.
pub fn device_env(specs: &[Spec], ids: &[String]) -> Result<Vec<(String, String)>, CdiError> {
    let mut env: Vec<(String, String)> = Vec::new();
    let mut missing = Vec::new();
    let mut set = |entry: &str| {
        let (k, v) = entry.split_once('=').unwrap_or((entry, ""));
        match env.iter_mut().find(|(name, _)| name == k) {
            Some(e) => e.1 = v.to_string(),
            None => env.push((k.to_string(), v.to_string())),
        }
    };
    for id in ids {
        let (kind, name) = parse_id(id)?;
        let found = specs
            .iter()
            .filter(|s| s.kind == kind)
            .find_map(|s| s.devices.iter().find(|d| d.name == name).map(|d| (s, d)));
        match found {
            Some((spec, dev)) => {
                spec.container_edits.env.iter().for_each(|e| set(e));
                dev.container_edits.env.iter().for_each(|e| set(e));
            }
            None => missing.push(id.clone()),
        }
    }
    if !missing.is_empty() {
        return Err(CdiError::Unresolved(missing.join(", ")));
    }
    Ok(env)
}

/// Reads every `*.json`/`*.yaml`/`*.yml` spec of `dirs` (in CDI's order, later directories
/// overriding earlier ones; missing directories are empty) and returns them highest priority
/// first. Unreadable or invalid files are skipped with a warning, as CDI's registry does.
pub fn load_specs(dirs: &[PathBuf]) -> Vec<Spec> {
    let mut out = Vec::new();
    for dir in dirs.iter().rev() {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        // Sorted, so equal kinds resolve the same way every time.
        let mut files: BTreeMap<PathBuf, ()> = BTreeMap::new();
        for e in entries.flatten() {
            let path = e.path();
            let ext = path.extension().and_then(|x| x.to_str()).unwrap_or("");
            if matches!(ext, "json" | "yaml" | "yml") {
                files.insert(path, ());
            }
        }
        for path in files.into_keys() {
            match read_spec(&path) {
                Ok(spec) => out.push(spec),
                Err(e) => tracing::warn!(error = %e, "skipping CDI spec"),
            }
        }
    }
    out
}

fn read_spec(path: &Path) -> Result<Spec, CdiError> {
    let bad = |message: String| CdiError::BadSpec {
        path: path.display().to_string(),
        message,
    };
    let len = std::fs::metadata(path)
        .map_err(|e| bad(e.to_string()))?
        .len();
    if len > MAX_SPEC_BYTES {
        return Err(bad(format!("larger than {MAX_SPEC_BYTES} bytes")));
    }
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    parse_spec(&text, &path.display().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    const GPU: &str = r#"{"cdiVersion": "0.6.0", "kind": "example.com/gpu",
        "containerEdits": {"env": ["VENDOR=example", "SHARED=spec"]},
        "devices": [{"name": "gpu-0", "containerEdits": {"env": ["GPU=0", "SHARED=dev0"]}},
                    {"name": "gpu-1", "containerEdits": {"env": ["GPU=1"]}}]}"#;

    #[test]
    fn ids() {
        assert_eq!(
            parse_id("example.com/gpu=gpu-0"),
            Ok(("example.com/gpu", "gpu-0"))
        );
        for bad in ["gpu-0", "example.com=gpu-0", "a/b/c=x", "a/b=", "/b=x"] {
            assert!(parse_id(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn environment_of_devices() {
        let gpu = parse_spec(GPU, "gpu.json").unwrap();
        let yaml = parse_spec(
            "cdiVersion: 0.6.0\nkind: example.com/nic\ndevices:\n- name: eth\n  containerEdits:\n    env: [NIC=eth]\n",
            "nic.yaml",
        )
        .unwrap();
        let specs = [gpu, yaml];
        let env = device_env(
            &specs,
            &[
                "example.com/gpu=gpu-0".into(),
                "example.com/nic=eth".into(),
                "example.com/gpu=gpu-1".into(),
            ],
        )
        .unwrap();
        let pairs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        // gpu-1's spec edits set SHARED back to the spec's value, then GPU=1 replaces GPU=0.
        assert_eq!(
            pairs,
            [
                ("VENDOR", "example"),
                ("SHARED", "spec"),
                ("GPU", "1"),
                ("NIC", "eth")
            ]
        );
        assert_eq!(
            device_env(&specs, &["example.com/gpu=gpu-9".into()]),
            Err(CdiError::Unresolved("example.com/gpu=gpu-9".into()))
        );
        assert!(parse_spec("kind: [", "x.yaml").is_err());
    }

    #[test]
    fn specs_from_directories_by_priority() {
        let high = tempfile::tempdir().unwrap();
        let low = tempfile::tempdir().unwrap();
        std::fs::write(low.path().join("gpu.json"), GPU).unwrap();
        std::fs::write(
            high.path().join("gpu.yaml"),
            "kind: example.com/gpu\ndevices: [{name: gpu-0, containerEdits: {env: [GPU=new]}}]\n",
        )
        .unwrap();
        std::fs::write(high.path().join("broken.json"), "{").unwrap();
        std::fs::write(high.path().join("notes.txt"), "ignored").unwrap();
        let specs = load_specs(&[
            PathBuf::from("/nonexistent/cdi"),
            low.path().to_path_buf(),
            high.path().to_path_buf(),
        ]);
        assert_eq!(specs.len(), 2);
        let env = device_env(&specs, &["example.com/gpu=gpu-0".into()]).unwrap();
        assert_eq!(env, [("GPU".to_string(), "new".to_string())]);
        let env = device_env(&specs, &["example.com/gpu=gpu-1".into()]).unwrap();
        assert_eq!(env.last().unwrap(), &("GPU".to_string(), "1".to_string()));
    }
}
