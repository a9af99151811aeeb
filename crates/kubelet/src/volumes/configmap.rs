//! ConfigMap and Secret payloads (upstream `pkg/volume/configmap` and `pkg/volume/secret`
//! `MakePayload`, and their `SetUpAt`'s handling of a missing object): all keys with the default
//! mode, or the `items` with their paths and modes. A missing object is an error (the API's
//! `configmap "x" not found`) unless the source is optional, when it counts as empty; a missing
//! item key is an error (upstream's text) unless optional, when the item is skipped.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{ConfigMap, KeyToPath, Secret};
use kube::Api;

use super::atomic_writer::{FileProjection, Payload};

/// Upstream's default mode of configMap, secret, downward API and projected volumes (0644).
pub const DEFAULT_MODE: u32 = 0o644;

/// Which kind of object a payload is made from (the error texts differ).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    ConfigMap,
    Secret,
}

/// A volume's mode from the API's int32 (validation keeps it within 0..=0777).
pub fn mode_of(mode: Option<i32>, default: u32) -> u32 {
    mode.map_or(default, |m| (m as u32) & 0o777)
}

/// Upstream `MakePayload` of both plugins.
pub fn make_payload(
    kind: Kind,
    items: Option<&[KeyToPath]>,
    data: &BTreeMap<String, Vec<u8>>,
    default_mode: u32,
    optional: bool,
) -> Result<Payload, String> {
    let mut payload = Payload::new();
    match items.filter(|i| !i.is_empty()) {
        None => {
            for (k, v) in data {
                payload.insert(k.clone(), FileProjection::new(v.clone(), default_mode));
            }
        }
        Some(items) => {
            for ktp in items {
                let Some(content) = data.get(&ktp.key) else {
                    if optional {
                        continue;
                    }
                    return Err(match kind {
                        Kind::ConfigMap => {
                            format!("configmap references non-existent config key: {}", ktp.key)
                        }
                        Kind::Secret => {
                            format!("references non-existent secret key: {}", ktp.key)
                        }
                    });
                };
                payload.insert(
                    ktp.path.clone(),
                    FileProjection::new(content.clone(), mode_of(ktp.mode, default_mode)),
                );
            }
        }
    }
    Ok(payload)
}

fn config_map_data(cm: ConfigMap) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = cm
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.into_bytes()))
        .collect();
    for (k, v) in cm.binary_data.unwrap_or_default() {
        data.entry(k).or_insert(v.0);
    }
    data
}

fn secret_data(s: Secret) -> BTreeMap<String, Vec<u8>> {
    let mut data: BTreeMap<String, Vec<u8>> = s
        .data
        .unwrap_or_default()
        .into_iter()
        .map(|(k, v)| (k, v.0))
        .collect();
    for (k, v) in s.string_data.unwrap_or_default() {
        data.insert(k, v.into_bytes());
    }
    data
}

/// The object's data: `None` when it does not exist and the source is optional.
pub async fn fetch(
    client: &kube::Client,
    kind: Kind,
    ns: &str,
    name: &str,
    optional: bool,
) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
    let (found, what) = match kind {
        Kind::ConfigMap => (
            Api::<ConfigMap>::namespaced(client.clone(), ns)
                .get_opt(name)
                .await
                .map(|o| o.map(config_map_data)),
            "configmap",
        ),
        Kind::Secret => (
            Api::<Secret>::namespaced(client.clone(), ns)
                .get_opt(name)
                .await
                .map(|o| o.map(secret_data)),
            "secret",
        ),
    };
    match found {
        Ok(Some(data)) => Ok(Some(data)),
        Ok(None) if optional => Ok(None),
        Ok(None) => Err(format!("{what} \"{name}\" not found")),
        Err(e) => Err(format!("{what} \"{name}\": {e}")),
    }
}

/// Fetches the object and makes its payload, as one plugin's `SetUpAt` does.
pub async fn payload(
    client: &kube::Client,
    kind: Kind,
    ns: &str,
    name: &str,
    items: Option<&[KeyToPath]>,
    default_mode: u32,
    optional: bool,
) -> Result<Payload, String> {
    let data = fetch(client, kind, ns, name, optional)
        .await?
        .unwrap_or_default();
    make_payload(kind, items, &data, default_mode, optional)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data() -> BTreeMap<String, Vec<u8>> {
        [
            ("k".to_string(), b"v".to_vec()),
            ("j".to_string(), b"w".to_vec()),
        ]
        .into()
    }

    fn ktp(key: &str, path: &str, mode: Option<i32>) -> KeyToPath {
        KeyToPath {
            key: key.into(),
            path: path.into(),
            mode,
        }
    }

    #[test]
    fn all_keys_or_items() {
        let all = make_payload(Kind::ConfigMap, None, &data(), 0o400, false).unwrap();
        assert_eq!(all.len(), 2);
        assert_eq!(all["k"], FileProjection::new(b"v".to_vec(), 0o400));
        let items = [ktp("k", "dir/file", Some(0o600)), ktp("j", "other", None)];
        let some = make_payload(Kind::Secret, Some(&items), &data(), 0o644, false).unwrap();
        assert_eq!(some["dir/file"], FileProjection::new(b"v".to_vec(), 0o600));
        assert_eq!(some["other"].mode, 0o644);
        assert_eq!(some.len(), 2);
    }

    #[test]
    fn missing_keys() {
        let items = [ktp("x", "p", None), ktp("k", "q", None)];
        assert_eq!(
            make_payload(Kind::ConfigMap, Some(&items), &data(), 0o644, false).unwrap_err(),
            "configmap references non-existent config key: x"
        );
        assert_eq!(
            make_payload(Kind::Secret, Some(&items), &data(), 0o644, false).unwrap_err(),
            "references non-existent secret key: x"
        );
        let optional = make_payload(Kind::Secret, Some(&items), &data(), 0o644, true).unwrap();
        assert_eq!(optional.keys().collect::<Vec<_>>(), ["q"]);
        // An optional missing object is empty: its items are all skipped.
        let empty =
            make_payload(Kind::ConfigMap, Some(&items), &BTreeMap::new(), 0o644, true).unwrap();
        assert!(empty.is_empty());
    }
}
