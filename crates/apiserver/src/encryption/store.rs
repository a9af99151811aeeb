//! [`EncryptingStore`]: a [`Store`] that encrypts the values of the configured resources on the way
//! in and decrypts them on the way out (upstream: the `value.Transformer` the etcd3 store calls on
//! every value it writes and reads).
//!
//! The authenticated data of AES-GCM is the full storage key as upstream's etcd3 store passes it,
//! `/registry/secrets/<ns>/<name>`: the etcd prefix followed by the key, and `/registry` on SQLite,
//! so that values copied between an upstream etcd, rkube's etcd and rkube's SQLite stay readable.
//!
//! A value that cannot be decrypted fails a `get` with an internal error, as upstream. In lists,
//! watch events and a delete's previous value it is passed on as stored (and logged) instead:
//! the watch cache loads every resource with one list, and one unreadable Secret must not keep the
//! whole server from starting. Those bytes are not JSON, so readers skip the object.

use std::sync::{Arc, RwLock};

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use storage::{
    Deleted, Error, Event, EventKind, KeyValue, ListOptions, ListResult, Result, Revision, Store,
    WatchStream,
};

use super::resources::Transformers;
use super::transformer::identity_check;

/// The key prefix upstream's store puts before every key (`--etcd-prefix`'s default).
pub const DEFAULT_AAD_PREFIX: &str = "/registry";

pub struct EncryptingStore {
    inner: Arc<dyn Store>,
    codec: Arc<Codec>,
    /// The automatic reload's counters, when it runs.
    pub(super) reload: Option<Arc<super::reload::Metrics>>,
}

/// What encrypting and decrypting need, shared with watch streams.
struct Codec {
    /// Replaced whole by the automatic reload; each value is transformed by one snapshot.
    transformers: RwLock<Arc<Transformers>>,
    /// Put before a key to make its authenticated data.
    aad_prefix: String,
}

impl Codec {
    fn aad(&self, key: &str) -> Vec<u8> {
        let mut aad = Vec::with_capacity(self.aad_prefix.len() + key.len());
        aad.extend_from_slice(self.aad_prefix.as_bytes());
        aad.extend_from_slice(key.as_bytes());
        aad
    }

    fn error(&self, key: &str, e: String) -> Error {
        Error::Backend(format!(
            "unable to transform key \"{}{key}\": {e}",
            self.aad_prefix
        ))
    }

    fn transformers(&self) -> Arc<Transformers> {
        self.transformers
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn encrypt(&self, key: &str, value: &Bytes) -> Result<Bytes> {
        match self.transformers().for_key(key) {
            Some(chain) => chain
                .encrypt(value, &self.aad(key))
                .map_err(|e| self.error(key, e)),
            None => Ok(value.clone()),
        }
    }

    /// The plaintext of a stored value and whether it is stale.
    fn decrypt(&self, key: &str, stored: &Bytes) -> Result<(Bytes, bool)> {
        // A delete event's value is empty: nothing was written, nothing to read.
        if stored.is_empty() {
            return Ok((stored.clone(), false));
        }
        match self.transformers().for_key(key) {
            Some(chain) => chain
                .decrypt(stored, &self.aad(key))
                .map_err(|e| self.error(key, e)),
            None => identity_check(stored)
                .map(|()| (stored.clone(), false))
                .map_err(|e| self.error(key, e)),
        }
    }

    fn decrypt_kv(&self, mut kv: KeyValue) -> Result<KeyValue> {
        kv.value = self.decrypt(&kv.key, &kv.value)?.0;
        Ok(kv)
    }

    /// As [`Codec::decrypt_kv`], but an unreadable value is kept as stored (see the module doc).
    fn decrypt_lenient(&self, mut kv: KeyValue) -> KeyValue {
        match self.decrypt(&kv.key, &kv.value) {
            Ok((plain, _)) => kv.value = plain,
            Err(e) => tracing::error!(error = %e, "cannot decrypt a stored value; skipping it"),
        }
        kv
    }
}

impl EncryptingStore {
    /// Wraps `inner`; `aad_prefix` is what the backend puts before keys (the etcd prefix, or
    /// [`DEFAULT_AAD_PREFIX`] for SQLite).
    pub fn new(inner: Arc<dyn Store>, transformers: Transformers, aad_prefix: &str) -> Self {
        EncryptingStore {
            inner,
            codec: Arc::new(Codec {
                transformers: RwLock::new(Arc::new(transformers)),
                aad_prefix: aad_prefix.trim_end_matches('/').to_string(),
            }),
            reload: None,
        }
    }

    /// Puts `transformers` in place for every value written or read from now on (the automatic
    /// reload). Values already stored keep their form until rewritten.
    pub fn replace(&self, transformers: Transformers) {
        *self
            .codec
            .transformers
            .write()
            .unwrap_or_else(|e| e.into_inner()) = Arc::new(transformers);
    }

    /// The automatic reload's metrics for `/metrics` (empty when it is off).
    pub fn metrics_text(&self) -> String {
        self.reload
            .as_ref()
            .map_or_else(String::new, |m| m.render())
    }

    /// Whether the value stored at `key` at `mod_revision` is not in the form the first provider
    /// writes (plaintext where a provider encrypts, another provider, a rotated-out key): upstream's
    /// `stale`, which makes an update write even when the object is unchanged.
    pub async fn is_stale(&self, key: &str, mod_revision: Revision) -> bool {
        if self.codec.transformers().for_key(key).is_none() {
            return false;
        }
        match self.inner.get(key).await {
            Ok(Some(kv)) if kv.mod_revision == mod_revision => self
                .codec
                .decrypt(key, &kv.value)
                .is_ok_and(|(_, stale)| stale),
            _ => false,
        }
    }
}

#[async_trait]
impl Store for EncryptingStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        match self.inner.get(key).await? {
            Some(kv) => self.codec.decrypt_kv(kv).map(Some),
            None => Ok(None),
        }
    }

    async fn list(&self, opts: ListOptions<'_>) -> Result<ListResult> {
        let mut result = self.inner.list(opts).await?;
        result.items = std::mem::take(&mut result.items)
            .into_iter()
            .map(|kv| self.codec.decrypt_lenient(kv))
            .collect();
        Ok(result)
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let stored = self.codec.encrypt(key, &value)?;
        let mut kv = self.inner.create(key, stored).await?;
        // Callers answer with what was written: the plaintext.
        kv.value = value;
        Ok(kv)
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected_mod_revision: Option<Revision>,
    ) -> Result<KeyValue> {
        let stored = self.codec.encrypt(key, &value)?;
        let mut kv = self
            .inner
            .update(key, stored, expected_mod_revision)
            .await?;
        kv.value = value;
        Ok(kv)
    }

    async fn delete(&self, key: &str, expected_mod_revision: Option<Revision>) -> Result<Deleted> {
        let mut deleted = self.inner.delete(key, expected_mod_revision).await?;
        deleted.prev = self.codec.decrypt_lenient(deleted.prev);
        Ok(deleted)
    }

    async fn watch(&self, prefix: &str, from_revision: Revision) -> Result<WatchStream> {
        let stream = self.inner.watch(prefix, from_revision).await?;
        let codec = self.codec.clone();
        Ok(Box::pin(stream.map(move |item| {
            item.map(|event| Event {
                kv: match event.kind {
                    EventKind::Delete => event.kv,
                    EventKind::Put => codec.decrypt_lenient(event.kv),
                },
                prev: event.prev.map(|kv| codec.decrypt_lenient(kv)),
                kind: event.kind,
            })
        })))
    }

    async fn watch_progress(
        &self,
        prefix: &str,
        from_revision: Revision,
    ) -> Result<storage::ProgressWatch> {
        let watch = self.inner.watch_progress(prefix, from_revision).await?;
        let codec = self.codec.clone();
        Ok(storage::ProgressWatch {
            stream: Box::pin(watch.stream.map(move |item| {
                item.map(|item| match item {
                    storage::WatchItem::Event(event) => storage::WatchItem::Event(Event {
                        kv: match event.kind {
                            EventKind::Delete => event.kv,
                            EventKind::Put => codec.decrypt_lenient(event.kv),
                        },
                        prev: event.prev.map(|kv| codec.decrypt_lenient(kv)),
                        kind: event.kind,
                    }),
                    progress => progress,
                })
            })),
            requester: watch.requester,
        })
    }

    async fn current_revision(&self) -> Result<Revision> {
        self.inner.current_revision().await
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.inner.compact(revision).await
    }

    async fn compacted_to(&self) -> Result<storage::Revision> {
        self.inner.compacted_to().await
    }

    // The backend's own rounds: on etcd they are coordinated with the other servers.
    async fn compact_round(
        &self,
        state: storage::CompactionState,
    ) -> Result<storage::CompactionRound> {
        self.inner.compact_round(state).await
    }

    async fn count(&self, prefix: &str) -> Result<i64> {
        self.inner.count(prefix).await
    }

    async fn close(&self) {
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encryption::config;

    const KEY1: &str = "MTIzNDU2Nzg5MDEyMzQ1Njc4OTAxMjM0NTY3ODkwMTI=";
    const KEY2: &str = "YWJjZGVmZ2hpamtsbW5vcHFyc3R1dnd4eXoxMjM0NTY=";

    fn transformers(providers: &str) -> Transformers {
        let file = format!(
            "apiVersion: {}\nkind: {}\nresources: [{{resources: [secrets], providers: {providers}}}]",
            config::API_VERSION,
            config::KIND
        );
        Transformers::new(&config::parse(file.as_bytes()).unwrap()).unwrap()
    }

    fn cbc(name: &str, secret: &str) -> String {
        format!("{{aescbc: {{keys: [{{name: {name}, secret: {secret}}}]}}}}")
    }

    fn open(dir: &tempfile::TempDir) -> Arc<dyn Store> {
        Arc::new(
            storage::sqlite::SqliteStore::open(dir.path().join("state.db"), Default::default())
                .unwrap(),
        )
    }

    fn wrap(raw: &Arc<dyn Store>, providers: &str) -> EncryptingStore {
        EncryptingStore::new(raw.clone(), transformers(providers), DEFAULT_AAD_PREFIX)
    }

    const SECRET: &[u8] = br#"{"kind":"Secret","data":{"password":"aHVudGVyMg=="}}"#;

    #[tokio::test]
    async fn configured_values_are_encrypted_everywhere_else_plain() {
        let dir = tempfile::tempdir().unwrap();
        let raw = open(&dir);
        let store = wrap(&raw, &format!("[{}]", cbc("key1", KEY1)));
        let mut watch = store.watch("/", 0).await.unwrap();

        let created = store
            .create("/secrets/ns/s", Bytes::from_static(SECRET))
            .await
            .unwrap();
        assert_eq!(created.value, SECRET, "callers get the plaintext back");
        store
            .create(
                "/configmaps/ns/c",
                Bytes::from_static(b"{\"kind\":\"ConfigMap\"}"),
            )
            .await
            .unwrap();

        let stored = raw.get("/secrets/ns/s").await.unwrap().unwrap().value;
        assert!(stored.starts_with(b"k8s:enc:aescbc:v1:key1:"));
        assert!(!stored.windows(8).any(|w| w == b"aHVudGVy"));
        let plain = raw.get("/configmaps/ns/c").await.unwrap().unwrap().value;
        assert_eq!(plain, b"{\"kind\":\"ConfigMap\"}".as_slice());

        assert_eq!(
            store.get("/secrets/ns/s").await.unwrap().unwrap().value,
            SECRET
        );
        let list = store.list(ListOptions::prefix("/secrets/")).await.unwrap();
        assert_eq!(list.items[0].value, SECRET);

        let updated = store
            .update("/secrets/ns/s", Bytes::from_static(b"{\"v\":2}"), None)
            .await
            .unwrap();
        assert_eq!(updated.value, b"{\"v\":2}".as_slice());
        let deleted = store.delete("/secrets/ns/s", None).await.unwrap();
        assert_eq!(deleted.prev.value, b"{\"v\":2}".as_slice());

        let mut events = Vec::new();
        for _ in 0..4 {
            events.push(watch.next().await.unwrap().unwrap());
        }
        assert_eq!(events[0].kv.value, SECRET);
        assert_eq!(events[2].kv.value, b"{\"v\":2}".as_slice());
        assert_eq!(events[2].prev.as_ref().unwrap().value, SECRET);
        assert_eq!(events[3].kind, EventKind::Delete);
        assert_eq!(
            events[3].prev.as_ref().unwrap().value,
            b"{\"v\":2}".as_slice()
        );
    }

    #[tokio::test]
    async fn rotation_reads_old_values_and_marks_them_stale() {
        let dir = tempfile::tempdir().unwrap();
        let raw = open(&dir);
        let old = wrap(&raw, &format!("[{}]", cbc("key1", KEY1)));
        let kv = old
            .create("/secrets/ns/s", Bytes::from_static(SECRET))
            .await
            .unwrap();
        assert!(!old.is_stale("/secrets/ns/s", kv.mod_revision).await);

        // key2 first, key1 second: old values read and are stale; a rewrite uses key2.
        let rotated = wrap(
            &raw,
            &format!("[{}, {}]", cbc("key2", KEY2), cbc("key1", KEY1)),
        );
        assert_eq!(
            rotated.get("/secrets/ns/s").await.unwrap().unwrap().value,
            SECRET
        );
        assert!(rotated.is_stale("/secrets/ns/s", kv.mod_revision).await);
        let kv = rotated
            .update("/secrets/ns/s", Bytes::from_static(SECRET), None)
            .await
            .unwrap();
        assert!(!rotated.is_stale("/secrets/ns/s", kv.mod_revision).await);
        let stored = raw.get("/secrets/ns/s").await.unwrap().unwrap().value;
        assert!(stored.starts_with(b"k8s:enc:aescbc:v1:key2:"));

        // Without key2, the value is unreadable: get fails, list passes it on as stored.
        let lost = wrap(&raw, &format!("[{}]", cbc("key1", KEY1)));
        let err = lost.get("/secrets/ns/s").await.unwrap_err().to_string();
        assert!(
            err.contains("unable to transform key \"/registry/secrets/ns/s\""),
            "{err}"
        );
        let list = lost.list(ListOptions::prefix("/")).await.unwrap();
        assert_eq!(list.items.len(), 1);
        assert!(list.items[0].value.starts_with(b"k8s:enc:"));
    }

    #[tokio::test]
    async fn plaintext_needs_identity_and_encrypted_data_needs_a_provider() {
        let dir = tempfile::tempdir().unwrap();
        let raw = open(&dir);
        raw.create("/secrets/ns/old", Bytes::from_static(SECRET))
            .await
            .unwrap();
        let strict = wrap(&raw, &format!("[{}]", cbc("key1", KEY1)));
        let err = strict.get("/secrets/ns/old").await.unwrap_err().to_string();
        assert!(err.contains("no matching prefix found"), "{err}");

        let migrating = wrap(
            &raw,
            &format!("[{}, {{identity: {{}}}}]", cbc("key1", KEY1)),
        );
        let kv = migrating.get("/secrets/ns/old").await.unwrap().unwrap();
        assert_eq!(kv.value, SECRET);
        assert!(migrating.is_stale("/secrets/ns/old", kv.mod_revision).await);
        // A revision that is no longer current is not judged.
        assert!(
            !migrating
                .is_stale("/secrets/ns/old", kv.mod_revision + 1)
                .await
        );

        // A resource no longer configured refuses encrypted data instead of serving ciphertext.
        migrating
            .create("/secrets/ns/new", Bytes::from_static(SECRET))
            .await
            .unwrap();
        let plain_only = EncryptingStore::new(
            raw.clone(),
            {
                let file = format!(
                    "apiVersion: {}\nkind: {}\nresources: [{{resources: [configmaps], providers: [{{identity: {{}}}}]}}]",
                    config::API_VERSION,
                    config::KIND
                );
                Transformers::new(&config::parse(file.as_bytes()).unwrap()).unwrap()
            },
            DEFAULT_AAD_PREFIX,
        );
        let err = plain_only
            .get("/secrets/ns/new")
            .await
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("identity transformer tried to read encrypted data"),
            "{err}"
        );
    }

    #[tokio::test]
    async fn gcm_binds_values_to_their_keys() {
        let dir = tempfile::tempdir().unwrap();
        let raw = open(&dir);
        let gcm = format!("[{{aesgcm: {{keys: [{{name: g, secret: {KEY1}}}]}}}}]");
        let store = wrap(&raw, &gcm);
        store
            .create("/secrets/ns/a", Bytes::from_static(SECRET))
            .await
            .unwrap();
        // Someone with write access to the database copies a's ciphertext to b.
        let stolen = raw.get("/secrets/ns/a").await.unwrap().unwrap().value;
        raw.create("/secrets/ns/b", stolen).await.unwrap();
        assert!(store.get("/secrets/ns/b").await.is_err());
        assert!(store.get("/secrets/ns/a").await.is_ok());
    }
}
