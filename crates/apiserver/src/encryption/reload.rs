//! `--encryption-provider-config-automatic-reload` (upstream's `DynamicEncryptionConfigContent`
//! controller): the file is read again every interval (upstream: one minute); when its content
//! changed and it is valid, its providers replace the running ones, with no restart. A file that
//! does not read or parse is logged and counted, and the providers in place stay.
//!
//! Key rotation without restart is then: add the new key first in the file, wait for the reload,
//! rewrite every Secret (`kubectl get secrets -A -o json | kubectl replace -f -`), then drop the
//! old key from the file.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use super::store::EncryptingStore;

/// Upstream's reload interval.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(60);

/// Upstream's `apiserver_encryption_config_controller_*` counters.
pub struct Metrics {
    /// `sha256:<hex>` of the server's identity, upstream's `apiserver_id_hash` label.
    id_hash: String,
    successes: AtomicU64,
    failures: AtomicU64,
    last_success: AtomicI64,
    last_failure: AtomicI64,
}

impl Metrics {
    fn new(id: &str) -> Metrics {
        let digest = ring::digest::digest(&ring::digest::SHA256, id.as_bytes());
        let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
        Metrics {
            id_hash: format!("sha256:{hex}"),
            successes: AtomicU64::new(0),
            failures: AtomicU64::new(0),
            last_success: AtomicI64::new(0),
            last_failure: AtomicI64::new(0),
        }
    }

    fn record(&self, ok: bool) {
        let now = chrono::Utc::now().timestamp();
        if ok {
            self.successes.fetch_add(1, Ordering::Relaxed);
            self.last_success.store(now, Ordering::Relaxed);
        } else {
            self.failures.fetch_add(1, Ordering::Relaxed);
            self.last_failure.store(now, Ordering::Relaxed);
        }
    }

    pub fn render(&self) -> String {
        let id = &self.id_hash;
        let mut out = String::from(
            "# HELP apiserver_encryption_config_controller_automatic_reloads_total [ALPHA] Total number of reload successes and failures of encryption configuration split by apiserver identity.\n\
             # TYPE apiserver_encryption_config_controller_automatic_reloads_total counter\n",
        );
        for (status, n) in [("failure", &self.failures), ("success", &self.successes)] {
            out.push_str(&format!(
                "apiserver_encryption_config_controller_automatic_reloads_total{{apiserver_id_hash=\"{id}\",status=\"{status}\"}} {}\n",
                n.load(Ordering::Relaxed)
            ));
        }
        out.push_str(
            "# HELP apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds [ALPHA] Timestamp of the last successful or failed automatic reload of encryption configuration split by apiserver identity.\n\
             # TYPE apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds gauge\n",
        );
        for (status, t) in [
            ("failure", &self.last_failure),
            ("success", &self.last_success),
        ] {
            let t = t.load(Ordering::Relaxed);
            if t > 0 {
                out.push_str(&format!(
                    "apiserver_encryption_config_controller_automatic_reload_last_timestamp_seconds{{apiserver_id_hash=\"{id}\",status=\"{status}\"}} {t}\n"
                ));
            }
        }
        out
    }
}

/// The file's content as last applied (or refused), to tell a change.
struct Watched {
    path: PathBuf,
    last: Vec<u8>,
}

impl Watched {
    /// One poll: `None` when the file did not change, else whether the new content was applied.
    fn poll(&mut self, store: &EncryptingStore) -> Option<bool> {
        let content = match std::fs::read(&self.path) {
            Ok(c) => c,
            Err(e) => {
                // A file being replaced may be missing for a moment; counted as upstream does.
                tracing::error!(
                    path = %self.path.display(),
                    error = %e,
                    "cannot read the encryption provider configuration; keeping the current one"
                );
                return Some(false);
            }
        };
        if content == self.last {
            return None;
        }
        // Remembered whether or not it applies: a bad file is reported once, not every poll.
        self.last = content;
        match super::config::parse(&self.last).and_then(|c| super::resources::Transformers::new(&c))
        {
            Ok(transformers) => {
                store.replace(transformers);
                tracing::info!(
                    path = %self.path.display(),
                    "loaded a new encryption provider configuration"
                );
                Some(true)
            }
            Err(e) => {
                tracing::error!(
                    path = %self.path.display(),
                    error = %e,
                    "the encryption provider configuration is invalid; keeping the current one"
                );
                Some(false)
            }
        }
    }
}

/// Starts polling `path` every `interval`; `loaded` is the content the store was built from.
/// The task ends when the store is dropped.
pub fn spawn(
    store: &Arc<EncryptingStore>,
    metrics: Arc<Metrics>,
    path: PathBuf,
    loaded: Vec<u8>,
    interval: Duration,
) {
    let weak = Arc::downgrade(store);
    let mut watched = Watched { path, last: loaded };
    tokio::spawn(async move {
        // A zero interval would make tokio panic; nothing needs polls closer than this.
        let mut tick = tokio::time::interval(interval.max(Duration::from_millis(100)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        tick.tick().await;
        loop {
            tick.tick().await;
            let Some(store) = weak.upgrade() else { return };
            if let Some(ok) = watched.poll(&store) {
                metrics.record(ok);
            }
        }
    });
}

/// The metrics of a reload for the server named `id`.
pub fn metrics(id: &str) -> Arc<Metrics> {
    Arc::new(Metrics::new(id))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encryption::config;
    use bytes::Bytes;
    use storage::Store;

    const KEY1: &str = "MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTI=";
    const KEY2: &str = "YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXoxMjM0NTY=";

    fn file(keys: &[(&str, &str)]) -> String {
        let keys: Vec<String> = keys
            .iter()
            .map(|(n, s)| format!("{{name: {n}, secret: {s}}}"))
            .collect();
        format!(
            "apiVersion: {}\nkind: {}\nresources: [{{resources: [secrets], providers: [{{aescbc: {{keys: [{}]}}}}]}}]\n",
            config::API_VERSION,
            config::KIND,
            keys.join(", ")
        )
    }

    #[tokio::test]
    async fn a_changed_valid_file_replaces_the_providers_and_a_bad_one_is_kept_out() {
        let dir = tempfile::tempdir().unwrap();
        let raw: Arc<dyn Store> = Arc::new(
            storage::sqlite::SqliteStore::open(dir.path().join("state.db"), Default::default())
                .unwrap(),
        );
        let path = dir.path().join("enc.yaml");
        let first = file(&[("key1", KEY1)]);
        std::fs::write(&path, &first).unwrap();
        let store = EncryptingStore::new(
            raw.clone(),
            super::super::load(&path).unwrap(),
            super::super::store::DEFAULT_AAD_PREFIX,
        );
        let mut watched = Watched {
            path: path.clone(),
            last: first.into_bytes(),
        };
        let metrics = Metrics::new("test");
        let stored = |key: &'static str| {
            let raw = raw.clone();
            async move { raw.get(key).await.unwrap().unwrap().value }
        };
        let secret = Bytes::from_static(br#"{"kind":"Secret"}"#);

        assert_eq!(watched.poll(&store), None, "unchanged: nothing to do");
        store.create("/secrets/ns/a", secret.clone()).await.unwrap();
        assert!(stored("/secrets/ns/a")
            .await
            .starts_with(b"k8s:enc:aescbc:v1:key1:"));

        // key2 first, key1 still readable.
        std::fs::write(&path, file(&[("key2", KEY2), ("key1", KEY1)])).unwrap();
        assert_eq!(watched.poll(&store), Some(true));
        metrics.record(true);
        store.create("/secrets/ns/b", secret.clone()).await.unwrap();
        assert!(stored("/secrets/ns/b")
            .await
            .starts_with(b"k8s:enc:aescbc:v1:key2:"));
        assert_eq!(
            store.get("/secrets/ns/a").await.unwrap().unwrap().value,
            secret
        );
        assert!(
            store
                .is_stale(
                    "/secrets/ns/a",
                    raw.get("/secrets/ns/a")
                        .await
                        .unwrap()
                        .unwrap()
                        .mod_revision
                )
                .await
        );

        // An invalid file changes nothing.
        std::fs::write(&path, "apiVersion: nope\n").unwrap();
        assert_eq!(watched.poll(&store), Some(false));
        metrics.record(false);
        assert_eq!(watched.poll(&store), None, "reported once");
        store.create("/secrets/ns/c", secret.clone()).await.unwrap();
        assert!(stored("/secrets/ns/c")
            .await
            .starts_with(b"k8s:enc:aescbc:v1:key2:"));

        let text = metrics.render();
        assert!(text.contains("automatic_reloads_total{apiserver_id_hash=\"sha256:"));
        assert!(text.contains("status=\"success\"} 1\n"), "{text}");
        assert!(text.contains("status=\"failure\"} 1\n"), "{text}");
        assert!(text.contains("automatic_reload_last_timestamp_seconds{"));
    }
}
