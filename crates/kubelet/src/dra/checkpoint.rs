//! The DRA manager's checkpoint (upstream `pkg/kubelet/cm/dra/state` and `.../dra/checkpoint`): the
//! claims prepared on this node, with the pods using them and the devices their drivers returned,
//! kept in `<root-dir>/dra_manager_state` so a restarted kubelet neither prepares them again nor
//! forgets to unprepare the claims of pods deleted while it was down.
//!
//! The file is upstream's format: `{"Data": "<JSON text>", "Checksum": <CRC-32 (IEEE) of Data>}`,
//! where Data is `{"kind": "DRACheckpoint", "apiVersion": "checkpoint.dra.kubelet.k8s.io/v1",
//! "Entries": [...]}` with Go's field names, so a checkpoint written by an upstream kubelet reads
//! here and the other way round. rkube adds one field per entry, `Prepared` (upstream keeps that flag
//! in memory only and calls NodePrepareResources again after a restart; Go ignores the field).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Deserializer, Serialize};

/// The file name under the kubelet's root dir (upstream `draManagerStateFileName`).
pub const FILE_NAME: &str = "dra_manager_state";
pub const KIND: &str = "DRACheckpoint";
pub const API_VERSION: &str = "checkpoint.dra.kubelet.k8s.io/v1";
/// A checkpoint larger than this is not read: a node prepares a few claims per pod, each entry a
/// few hundred bytes.
const MAX_BYTES: u64 = 16 << 20;

#[derive(Debug, thiserror::Error)]
pub enum CheckpointError {
    #[error("checkpoint {path}: {source}")]
    Io {
        path: String,
        source: std::io::Error,
    },
    #[error("checkpoint {path} is larger than {MAX_BYTES} bytes")]
    TooLarge { path: String },
    #[error(
        "checkpoint {path} is corrupt: checksum {actual} does not match its data's {expected}"
    )]
    Corrupt {
        path: String,
        actual: u32,
        expected: u32,
    },
    #[error("checkpoint {path} cannot be read: {message}")]
    Invalid { path: String, message: String },
}

/// One claim (upstream `state.ClaimInfoState`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ClaimInfoState {
    #[serde(rename = "ClaimUID", default)]
    pub claim_uid: String,
    #[serde(rename = "ClaimName", default)]
    pub claim_name: String,
    #[serde(rename = "Namespace", default)]
    pub namespace: String,
    /// Go's `sets.Set[string]`: a JSON object whose values are `{}`.
    #[serde(
        rename = "PodUIDs",
        default,
        serialize_with = "ser_set",
        deserialize_with = "de_set"
    )]
    pub pod_uids: BTreeSet<String>,
    /// Every driver with results in the claim's allocation, with the devices it prepared.
    #[serde(rename = "DriverState", default, deserialize_with = "de_null")]
    pub driver_state: BTreeMap<String, DriverState>,
    /// rkube's: every driver's NodePrepareResources succeeded.
    #[serde(rename = "Prepared", default)]
    pub prepared: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DriverState {
    #[serde(rename = "Devices", default, deserialize_with = "de_null")]
    pub devices: Vec<Device>,
}

/// A device as its driver described it (upstream `state.Device`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Device {
    #[serde(rename = "PoolName", default)]
    pub pool_name: String,
    #[serde(rename = "DeviceName", default)]
    pub device_name: String,
    #[serde(rename = "ShareID", default)]
    pub share_id: Option<String>,
    #[serde(rename = "RequestNames", default, deserialize_with = "de_null")]
    pub request_names: Vec<String>,
    #[serde(rename = "CDIDeviceIDs", default, deserialize_with = "de_null")]
    pub cdi_device_ids: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct File {
    #[serde(rename = "Data")]
    data: String,
    #[serde(rename = "Checksum")]
    checksum: u32,
}

#[derive(Serialize, Deserialize)]
struct Data {
    #[serde(default)]
    kind: String,
    #[serde(rename = "apiVersion", default)]
    api_version: String,
    #[serde(rename = "Entries", default, deserialize_with = "de_null")]
    entries: Vec<ClaimInfoState>,
}

/// Go writes nil maps and slices as `null`.
fn de_null<'de, D: Deserializer<'de>, T: Default + Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn ser_set<S: serde::Serializer>(set: &BTreeSet<String>, s: S) -> Result<S::Ok, S::Error> {
    use serde::ser::SerializeMap;
    let mut m = s.serialize_map(Some(set.len()))?;
    for k in set {
        m.serialize_entry(k, &serde_json::Map::new())?;
    }
    m.end()
}

fn de_set<'de, D: Deserializer<'de>>(d: D) -> Result<BTreeSet<String>, D::Error> {
    let m: Option<BTreeMap<String, serde::de::IgnoredAny>> = Option::deserialize(d)?;
    Ok(m.unwrap_or_default().into_keys().collect())
}

/// CRC-32 with the IEEE polynomial (Go's `crc32.ChecksumIEEE`, upstream's checksum of Data).
pub fn crc32_ieee(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

/// The file's bytes for `entries`.
pub fn encode(entries: &[ClaimInfoState]) -> Vec<u8> {
    let data = Data {
        kind: KIND.into(),
        api_version: API_VERSION.into(),
        entries: entries.to_vec(),
    };
    // Serializing these plain structs cannot fail.
    let data = serde_json::to_string(&data).unwrap_or_default();
    let file = File {
        checksum: crc32_ieee(data.as_bytes()),
        data,
    };
    serde_json::to_vec(&file).unwrap_or_default()
}

/// The entries of a file's bytes; the checksum must match.
pub fn decode(bytes: &[u8], path: &str) -> Result<Vec<ClaimInfoState>, CheckpointError> {
    let invalid = |message: String| CheckpointError::Invalid {
        path: path.to_string(),
        message,
    };
    let file: File = serde_json::from_slice(bytes).map_err(|e| invalid(e.to_string()))?;
    let expected = crc32_ieee(file.data.as_bytes());
    if expected != file.checksum {
        return Err(CheckpointError::Corrupt {
            path: path.to_string(),
            actual: file.checksum,
            expected,
        });
    }
    let data: Data = serde_json::from_str(&file.data).map_err(|e| invalid(e.to_string()))?;
    if data.kind != KIND || data.api_version != API_VERSION {
        return Err(invalid(format!(
            "unsupported kind {:?} apiVersion {:?}",
            data.kind, data.api_version
        )));
    }
    Ok(data.entries)
}

/// Reads the checkpoint at `path`; a missing file is an empty one.
pub fn load(path: &Path) -> Result<Vec<ClaimInfoState>, CheckpointError> {
    let shown = path.display().to_string();
    let io = |source| CheckpointError::Io {
        path: shown.clone(),
        source,
    };
    let len = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io(e)),
    };
    if len > MAX_BYTES {
        return Err(CheckpointError::TooLarge { path: shown });
    }
    let bytes = std::fs::read(path).map_err(io)?;
    decode(&bytes, &shown)
}

/// Writes the checkpoint at `path` durably: a temporary file beside it, synced, then renamed over
/// it (a crash leaves the old or the new file, never half of one).
pub fn store(path: &Path, entries: &[ClaimInfoState]) -> Result<(), CheckpointError> {
    let io = |source| CheckpointError::Io {
        path: path.display().to_string(),
        source,
    };
    let tmp = path.with_extension("tmp");
    let mut f = std::fs::File::create(&tmp).map_err(io)?;
    f.write_all(&encode(entries)).map_err(io)?;
    f.sync_all().map_err(io)?;
    std::fs::rename(&tmp, path).map_err(io)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> ClaimInfoState {
        ClaimInfoState {
            claim_uid: "claim-1".into(),
            claim_name: "gpu".into(),
            namespace: "ns".into(),
            pod_uids: BTreeSet::from(["pod-1".into(), "pod-2".into()]),
            driver_state: BTreeMap::from([(
                "gpu.example.com".into(),
                DriverState {
                    devices: vec![Device {
                        pool_name: "node-a".into(),
                        device_name: "gpu-0".into(),
                        share_id: None,
                        request_names: vec!["gpu".into()],
                        cdi_device_ids: vec!["example.com/gpu=gpu-0".into()],
                    }],
                },
            )]),
            prepared: true,
        }
    }

    #[test]
    fn crc32_matches_go() {
        // Go: crc32.ChecksumIEEE([]byte("123456789")) == 0xcbf43926 (the CRC-32 check value).
        assert_eq!(crc32_ieee(b"123456789"), 0xCBF4_3926);
        assert_eq!(crc32_ieee(b""), 0);
    }

    #[test]
    fn round_trip_through_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FILE_NAME);
        assert_eq!(load(&path).unwrap(), []);
        store(&path, &[entry()]).unwrap();
        assert_eq!(load(&path).unwrap(), [entry()]);
        assert!(!path.with_extension("tmp").exists());
        // The shape upstream reads: Data is a string, PodUIDs a set as an object.
        let raw: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let data: serde_json::Value = serde_json::from_str(raw["Data"].as_str().unwrap()).unwrap();
        assert_eq!(data["kind"], KIND);
        assert_eq!(
            data["Entries"][0]["PodUIDs"]["pod-1"],
            serde_json::json!({})
        );
        store(&path, &[]).unwrap();
        assert_eq!(load(&path).unwrap(), []);
    }

    #[test]
    fn reads_what_upstream_writes() {
        // Go's encoding: nil slices and maps as null, ShareID null, no Prepared field.
        let data = r#"{"kind":"DRACheckpoint","apiVersion":"checkpoint.dra.kubelet.k8s.io/v1","Entries":[{"ClaimUID":"u1","ClaimName":"c","Namespace":"ns","PodUIDs":{"p1":{}},"DriverState":{"d":{"Devices":[{"PoolName":"p","DeviceName":"x","ShareID":null,"RequestNames":null,"CDIDeviceIDs":null}]},"e":{"Devices":null}}}]}"#;
        let file = serde_json::json!({"Data": data, "Checksum": crc32_ieee(data.as_bytes())});
        let entries = decode(file.to_string().as_bytes(), "f").unwrap();
        assert_eq!(entries.len(), 1);
        let e = &entries[0];
        assert_eq!(e.pod_uids, BTreeSet::from(["p1".to_string()]));
        assert_eq!(e.driver_state["d"].devices[0].device_name, "x");
        assert!(e.driver_state["e"].devices.is_empty());
        assert!(!e.prepared);
    }

    #[test]
    fn corrupt_files_are_errors() {
        let good = encode(&[entry()]);
        let mut file: serde_json::Value = serde_json::from_slice(&good).unwrap();
        file["Checksum"] = serde_json::json!(file["Checksum"].as_u64().unwrap() ^ 1);
        assert!(matches!(
            decode(file.to_string().as_bytes(), "f"),
            Err(CheckpointError::Corrupt { .. })
        ));
        // Data changed behind the checksum's back.
        let mut file: serde_json::Value = serde_json::from_slice(&good).unwrap();
        file["Data"] = serde_json::json!(file["Data"].as_str().unwrap().replace("gpu-0", "gpu-1"));
        assert!(matches!(
            decode(file.to_string().as_bytes(), "f"),
            Err(CheckpointError::Corrupt { .. })
        ));
        for bad in [&b"{"[..], b"", b"[]", b"{\"Data\": 1}"] {
            assert!(matches!(
                decode(bad, "f"),
                Err(CheckpointError::Invalid { .. })
            ));
        }
        let data = r#"{"kind":"Other","apiVersion":"v1"}"#;
        let file = serde_json::json!({"Data": data, "Checksum": crc32_ieee(data.as_bytes())});
        assert!(decode(file.to_string().as_bytes(), "f").is_err());
    }
}
