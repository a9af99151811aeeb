//! `--encryption-provider-config`: Secrets written through the API are stored as upstream's
//! `k8s:enc:aescbc:v1:key1:` ciphertext (checked in the store itself, SQLite file and etcd), read
//! back as plaintext through the API; ConfigMaps, not in the file, stay plaintext. After a key
//! rotation (key2 first, key1 second) old Secrets still read, and `kubectl replace` of unchanged
//! Secrets rewrites them with key2, as upstream's documented rotation. A bad file stops the start.
//! With `--encryption-provider-config-automatic-reload` the same rotation needs no restart: the
//! edited file is picked up while running (an invalid edit is refused and counted), and after
//! key1 is dropped the rewritten Secret still reads and is stored with key2.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use bytes::Bytes;
use storage::etcd_process::EtcdProcess;
use storage::Store;
use support::{Backend, Cluster};

const KEY1: &str = "MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTI=";
const KEY2: &str = "YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXoxMjM0NTY=";
/// The Secret's value; base64 in the object, so both forms must be absent from storage.
const CANARY: &str = "s3cr3t-at-rest-canary";
const CANARY_B64: &str = "czNjcjN0LWF0LXJlc3QtY2FuYXJ5";

fn write_config(path: &Path, keys: &[(&str, &str)]) {
    let keys: Vec<String> = keys
        .iter()
        .map(|(name, secret)| format!("        - name: {name}\n          secret: {secret}\n"))
        .collect();
    let text = format!(
        "apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
    - aescbc:
        keys:
{}    - identity: {{}}
",
        keys.concat()
    );
    std::fs::write(path, text).expect("write encryption config");
}

/// Where the raw (undecrypted) values are read from.
enum Raw {
    /// The SQLite file of the data dir, opened after the server stopped.
    Sqlite,
    /// The etcd the server uses, read while it runs.
    Etcd(EtcdProcess),
}

impl Raw {
    /// The stored value of each key, as bytes. Stops the server first on SQLite (one writer).
    fn values(&self, c: &mut Cluster, keys: &[&str]) -> Vec<Bytes> {
        let rt = support::runtime();
        rt.block_on(async {
            let store: Box<dyn Store> = match self {
                Raw::Sqlite => {
                    c.stop();
                    Box::new(
                        storage::sqlite::SqliteStore::open(
                            c.data_dir().join("state.db"),
                            Default::default(),
                        )
                        .expect("open state.db"),
                    )
                }
                Raw::Etcd(etcd) => Box::new(
                    storage::etcd::EtcdStore::connect(
                        std::slice::from_ref(&etcd.endpoint),
                        "/registry",
                    )
                    .await
                    .expect("connect to etcd"),
                ),
            };
            let mut out = Vec::new();
            for key in keys {
                let kv = store.get(key).await.expect("raw get").expect(key);
                out.push(kv.value);
            }
            store.close().await;
            out
        })
    }
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|w| w == needle.as_bytes())
}

fn secret_value(c: &Cluster) -> String {
    c.kubectl(&["get", "secret", "s", "-o", "jsonpath={.data.password}"])
}

fn resource_version(c: &Cluster) -> String {
    c.kubectl(&[
        "get",
        "secret",
        "s",
        "-o",
        "jsonpath={.metadata.resourceVersion}",
    ])
}

/// Upstream's documented way to rewrite every Secret after a key change.
fn replace_secret(c: &Cluster) {
    let all_secrets = c.kubectl(&["get", "secrets", "-o", "json"]);
    c.kubectl_in(&["replace", "-f", "-"], Some(&all_secrets));
}

fn encrypts_secrets(backend: Backend) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("encryption.yaml");
    write_config(&config, &[("key1", KEY1)]);
    let config_arg = config.to_str().expect("utf-8 path").to_string();
    let etcd =
        (backend == Backend::Etcd).then(|| EtcdProcess::start().unwrap_or_else(|e| panic!("{e}")));
    let endpoint = etcd
        .as_ref()
        .map(|e| e.endpoint.clone())
        .unwrap_or_default();
    let mut args = vec!["--encryption-provider-config", config_arg.as_str()];
    if etcd.is_some() {
        args.extend(["--storage", "etcd", "--etcd-servers", endpoint.as_str()]);
    }
    let raw = match etcd {
        Some(etcd) => Raw::Etcd(etcd),
        None => Raw::Sqlite,
    };
    let mut all = support::API_ONLY.to_vec();
    all.extend(args);
    let mut c = Cluster::start_in(dir, Backend::Sqlite, &all);

    c.kubectl(&[
        "create",
        "secret",
        "generic",
        "s",
        &format!("--from-literal=password={CANARY}"),
    ]);
    c.kubectl(&["create", "configmap", "c", "--from-literal=k=plain-canary"]);
    assert_eq!(secret_value(&c), CANARY_B64, "read back as plaintext");
    // kubectl-replace now manages the Secret, so a later identical replace changes nothing.
    replace_secret(&c);
    let rv = resource_version(&c);
    replace_secret(&c);
    assert_eq!(
        resource_version(&c),
        rv,
        "an identical replace is not written"
    );

    let values = raw.values(&mut c, &["/secrets/default/s", "/configmaps/default/c"]);
    assert!(
        values[0].starts_with(b"k8s:enc:aescbc:v1:key1:"),
        "stored secret: {:?}",
        String::from_utf8_lossy(&values[0])
    );
    assert!(!contains(&values[0], CANARY) && !contains(&values[0], CANARY_B64));
    assert!(
        contains(&values[1], "plain-canary"),
        "configmaps stay plaintext"
    );
    if let Raw::Sqlite = raw {
        // Nowhere in the files either (history rows, WAL).
        for name in ["state.db", "state.db-wal"] {
            if let Ok(bytes) = std::fs::read(c.data_dir().join(name)) {
                assert!(
                    !contains(&bytes, CANARY) && !contains(&bytes, CANARY_B64),
                    "{name}"
                );
            }
        }
    }

    // Rotation: key2 writes, key1 still reads; replacing unchanged Secrets moves them to key2.
    write_config(&config, &[("key2", KEY2), ("key1", KEY1)]);
    c.restart();
    assert_eq!(
        secret_value(&c),
        CANARY_B64,
        "key1's value reads after rotation"
    );
    // Unchanged, but stored with key1: written again (upstream's stale values), with key2.
    replace_secret(&c);
    assert_ne!(resource_version(&c), rv, "a stale value is rewritten");
    let values = raw.values(&mut c, &["/secrets/default/s"]);
    assert!(
        values[0].starts_with(b"k8s:enc:aescbc:v1:key2:"),
        "replaced secret: {:?}",
        String::from_utf8_lossy(&values[0])
    );
    if let Raw::Sqlite = raw {
        c.restart();
    }
    assert_eq!(secret_value(&c), CANARY_B64);
}

#[test]
fn bad_config_stops_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("encryption.yaml");
    std::fs::write(
        &config,
        "apiVersion: apiserver.config.k8s.io/v1
kind: EncryptionConfiguration
resources:
  - resources: [secrets]
    providers:
    - aesgcm:
        keys:
        - name: key1
          secret: c2hvcnQ=
",
    )
    .expect("write config");
    let mut child = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .arg("apiserver")
        .arg("--data-dir")
        .arg(dir.path())
        .arg("--secure-port")
        .arg("0")
        .arg("--encryption-provider-config")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start rkube");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("rkube started with a bad encryption config");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("encryption provider configuration file")
            && stderr.contains("secret is not of the expected length, got 5"),
        "{stderr}"
    );
}

on_both_backends!(encrypts_secrets);

/// The reload counter of `status` in `/metrics`.
fn reloads(c: &Cluster, status: &str) -> u64 {
    let metrics = c.kubectl(&["get", "--raw", "/metrics"]);
    metrics
        .lines()
        .find(|l| {
            l.starts_with("apiserver_encryption_config_controller_automatic_reloads_total{")
                && l.contains(&format!("status=\"{status}\""))
        })
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}

fn wait_for_reloads(c: &Cluster, status: &str, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while reloads(c, status) < n {
        assert!(
            Instant::now() < deadline,
            "the encryption config was never reloaded ({status} {n})"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn keys_rotate_without_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = dir.path().join("encryption.yaml");
    write_config(&config, &[("key1", KEY1)]);
    let mut args = support::API_ONLY.to_vec();
    args.extend([
        "--encryption-provider-config",
        config.to_str().expect("utf-8 path"),
        "--encryption-provider-config-automatic-reload",
        "--encryption-provider-config-automatic-reload-interval",
        "200ms",
    ]);
    let mut c = Cluster::start_in(dir, Backend::Sqlite, &args);
    c.kubectl(&[
        "create",
        "secret",
        "generic",
        "s",
        &format!("--from-literal=password={CANARY}"),
    ]);

    // key2 first: picked up while running, key1's value still reads.
    write_config(&config, &[("key2", KEY2), ("key1", KEY1)]);
    wait_for_reloads(&c, "success", 1);
    assert_eq!(secret_value(&c), CANARY_B64);
    let rv = resource_version(&c);
    replace_secret(&c);
    assert_ne!(resource_version(&c), rv, "the key1 value is rewritten");

    // An invalid edit is refused; the running providers stay.
    std::fs::write(
        &config,
        "apiVersion: apiserver.config.k8s.io/v1\nkind: Nope\n",
    )
    .unwrap();
    wait_for_reloads(&c, "failure", 1);
    assert_eq!(secret_value(&c), CANARY_B64);

    // key1 dropped: the Secret reads only if the replace stored it with key2.
    write_config(&config, &[("key2", KEY2)]);
    wait_for_reloads(&c, "success", 2);
    assert_eq!(secret_value(&c), CANARY_B64, "read with key2 alone");

    let values = Raw::Sqlite.values(&mut c, &["/secrets/default/s"]);
    assert!(
        values[0].starts_with(b"k8s:enc:aescbc:v1:key2:"),
        "stored secret: {:?}",
        String::from_utf8_lossy(&values[0])
    );
}
