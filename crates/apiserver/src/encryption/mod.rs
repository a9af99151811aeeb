//! Encryption of data at rest (upstream `--encryption-provider-config`,
//! `k8s.io/apiserver/pkg/server/options/encryptionconfig` and `storage/value/encrypt/...`).
//!
//! The file ([`config`]) names resources and, for each, providers in order: the first encrypts
//! what is written, all of them read what carries their prefix ([`transformer`]). Providers:
//! `identity`, `aescbc`, `aesgcm`, `secretbox` ([`aes`], [`secretbox`]), with upstream's on-disk
//! format, so an etcd written by upstream with the same file is readable here and the other way
//! round. [`store::EncryptingStore`] applies them under the store, by key ([`resources`]).
//!
//! With `--encryption-provider-config-automatic-reload` the file is polled and a valid change
//! replaces the providers while running ([`reload`]).
//!
//! Not built: `kms` providers (refused at start), the transformation metrics.

pub mod aes;
pub mod config;
pub mod reload;
pub mod resources;
pub mod secretbox;
pub mod store;
pub mod transformer;

use std::path::Path;
use std::sync::Arc;

use storage::Store;

pub use store::EncryptingStore;

use crate::{ApiServer, Config, StorageConfig};

/// Reads and validates the file and builds its providers.
pub fn load(path: &Path) -> Result<resources::Transformers, String> {
    let data = std::fs::read(path).map_err(|e| {
        format!(
            "error reading encryption provider configuration file {:?}: {e}",
            path.display().to_string()
        )
    })?;
    config::parse(&data)
        .and_then(|c| resources::Transformers::new(&c))
        .map_err(|e| {
            format!(
                "error while parsing encryption provider configuration file {:?}: {e}",
                path.display().to_string()
            )
        })
}

/// The store to serve from, and its encryption wrapper when there is one.
pub type Wrapped = (Arc<dyn Store>, Option<Arc<EncryptingStore>>);

/// `store` behind an [`EncryptingStore`] when `--encryption-provider-config` is given; the wrapper
/// is returned too for [`stale_at_rest`].
pub fn wrap(store: Arc<dyn Store>, config: &Config) -> Result<Wrapped, String> {
    let Some(path) = &config.encryption_provider_config else {
        return Ok((store, None));
    };
    // What was loaded is what the reload compares with (read once: a change between the two
    // reads would otherwise be missed).
    let content = std::fs::read(path).unwrap_or_default();
    let transformers = load(path)?;
    let aad_prefix = match &config.storage {
        StorageConfig::Sqlite => store::DEFAULT_AAD_PREFIX,
        StorageConfig::Etcd { prefix, .. } => prefix.as_str(),
    };
    let mut wrapped = EncryptingStore::new(store, transformers, aad_prefix);
    if !config.encryption_provider_config_automatic_reload {
        let wrapped = Arc::new(wrapped);
        return Ok((wrapped.clone(), Some(wrapped)));
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let metrics = reload::metrics(&format!("rkube-apiserver-{}", host.trim()));
    wrapped.reload = Some(metrics.clone());
    let wrapped = Arc::new(wrapped);
    reload::spawn(
        &wrapped,
        metrics,
        path.clone(),
        content,
        config.encryption_reload_interval,
    );
    Ok((wrapped.clone(), Some(wrapped)))
}

/// Whether an update that changes nothing must still be written because the stored bytes are not in
/// the current first provider's form (so `kubectl replace` of unchanged objects re-encrypts them
/// after a key rotation, as upstream).
pub async fn stale_at_rest(api: &ApiServer, key: &str, mod_revision: i64) -> bool {
    match &api.encryption {
        Some(store) => store.is_stale(key, mod_revision).await,
        None => false,
    }
}

/// Nonces and IVs from the operating system's generator (upstream: crypto/rand).
mod random {
    use ring::rand::{SecureRandom, SystemRandom};

    pub fn fill(buf: &mut [u8]) -> Result<(), String> {
        SystemRandom::new()
            .fill(buf)
            .map_err(|_| "unable to read sufficient random bytes".to_string())
    }
}
