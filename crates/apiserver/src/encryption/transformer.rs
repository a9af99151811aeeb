//! One resource's providers in order (upstream `storage/value` `prefixTransformers`): values are
//! written by the first provider under its prefix, `k8s:enc:<provider>:v1:<key name>:`, and read by
//! the provider whose prefix they carry. `identity` has no prefix: it reads anything that does not
//! start with `k8s:enc:` and writes plaintext.
//!
//! As upstream, a matching prefix that fails to decrypt does not end the search (two `aescbc`
//! entries share a prefix while one key is rotated out), and a value read by any provider or key but
//! the first is *stale*: an update rewrites it even when the object did not change, which is how
//! `kubectl replace` of every object moves them to a new key.

use std::sync::Arc;

use bytes::Bytes;

use super::aes::{AesCbc, AesGcm};
use super::config::{aggregate, ProviderConfiguration, ProviderKind};
use super::secretbox::Secretbox;

/// What every encrypted value starts with; `identity` refuses to read it.
pub const ENCRYPTED_PREFIX: &[u8] = b"k8s:enc:";

enum Cipher {
    Gcm(AesGcm),
    Cbc(AesCbc),
    Secretbox(Secretbox),
}

impl Cipher {
    fn encrypt(&self, plain: &[u8], aad: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            Cipher::Gcm(c) => c.encrypt(plain, aad),
            Cipher::Cbc(c) => c.encrypt(plain),
            Cipher::Secretbox(c) => c.encrypt(plain),
        }
    }

    fn decrypt(&self, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, String> {
        match self {
            Cipher::Gcm(c) => c.decrypt(data, aad),
            Cipher::Cbc(c) => c.decrypt(data),
            Cipher::Secretbox(c) => c.decrypt(data),
        }
    }
}

struct NamedKey {
    /// `<name>:`, what follows the provider's prefix.
    prefix: Vec<u8>,
    cipher: Cipher,
}

/// One entry of a resource's `providers`.
pub struct Provider {
    /// `k8s:enc:aescbc:v1:` and the like; `None` for identity.
    prefix: Option<&'static str>,
    /// Upstream's text when no key's prefix matches.
    no_key: &'static str,
    keys: Vec<NamedKey>,
}

impl Provider {
    pub fn new(config: &ProviderConfiguration) -> Result<Provider, String> {
        let (kind, keys) = match config {
            ProviderConfiguration::Identity => {
                return Ok(Provider {
                    prefix: None,
                    no_key: "",
                    keys: Vec::new(),
                })
            }
            ProviderConfiguration::Keyed { kind, keys } => (kind, keys),
        };
        let (prefix, no_key) = match kind {
            ProviderKind::AesGcm => (
                "k8s:enc:aesgcm:v1:",
                "no matching key was found for the provided AES transformer",
            ),
            ProviderKind::AesCbc => (
                "k8s:enc:aescbc:v1:",
                "no matching key was found for the provided AES transformer",
            ),
            ProviderKind::Secretbox => (
                "k8s:enc:secretbox:v1:",
                "no matching key was found for the provided Secretbox transformer",
            ),
        };
        let keys = keys
            .iter()
            .map(|(name, secret)| {
                let cipher = match kind {
                    ProviderKind::AesGcm => AesGcm::new(secret).map(Cipher::Gcm),
                    ProviderKind::AesCbc => AesCbc::new(secret).map(Cipher::Cbc),
                    ProviderKind::Secretbox => Secretbox::new(secret).map(Cipher::Secretbox),
                }
                .map_err(|e| format!("error while creating cipher for named key {name}: {e}"))?;
                Ok(NamedKey {
                    prefix: format!("{name}:").into_bytes(),
                    cipher,
                })
            })
            .collect::<Result<Vec<_>, String>>()?;
        if keys.is_empty() {
            return Err(format!("{prefix} provider has no valid keys"));
        }
        Ok(Provider {
            prefix: Some(prefix),
            no_key,
            keys,
        })
    }

    /// Reads a value that carries this provider's prefix (already stripped): by the first key whose
    /// name prefixes it and opens it. Returns the plaintext and whether a non-first key was used.
    fn decrypt(&self, data: &[u8], aad: &[u8]) -> Result<(Vec<u8>, bool), String> {
        let mut errors = Vec::new();
        for (i, key) in self.keys.iter().enumerate() {
            let Some(rest) = data.strip_prefix(key.prefix.as_slice()) else {
                continue;
            };
            match key.cipher.decrypt(rest, aad) {
                Ok(plain) => return Ok((plain, i != 0)),
                Err(e) => errors.push(e),
            }
        }
        Err(if errors.is_empty() {
            self.no_key.to_string()
        } else {
            aggregate(errors)
        })
    }
}

/// The providers of one resource, in order.
#[derive(Clone)]
pub struct Chain {
    providers: Vec<Arc<Provider>>,
}

impl Chain {
    /// At least one provider (the configuration's validation guarantees it).
    pub fn new(providers: Vec<Arc<Provider>>) -> Result<Chain, String> {
        if providers.is_empty() {
            return Err("at least one provider is required".into());
        }
        Ok(Chain { providers })
    }

    /// The stored form of `plain`: the first provider's prefix and first key's name, then the
    /// ciphertext; or `plain` itself when the first provider is identity.
    pub fn encrypt(&self, plain: &Bytes, aad: &[u8]) -> Result<Bytes, String> {
        let first = &self.providers[0];
        let (Some(prefix), Some(key)) = (first.prefix, first.keys.first()) else {
            return Ok(plain.clone());
        };
        let sealed = key.cipher.encrypt(plain, aad)?;
        let mut out = Vec::with_capacity(prefix.len() + key.prefix.len() + sealed.len());
        out.extend_from_slice(prefix.as_bytes());
        out.extend_from_slice(&key.prefix);
        out.extend_from_slice(&sealed);
        Ok(out.into())
    }

    /// The plaintext of a stored value and whether it is stale (not in the first provider's and
    /// key's form), or upstream's error when no provider reads it.
    pub fn decrypt(&self, stored: &Bytes, aad: &[u8]) -> Result<(Bytes, bool), String> {
        let mut errors = Vec::new();
        for (i, provider) in self.providers.iter().enumerate() {
            let Some(prefix) = provider.prefix else {
                // Identity: its refusal of encrypted data lets a later provider try instead.
                if stored.starts_with(ENCRYPTED_PREFIX) {
                    continue;
                }
                return Ok((stored.clone(), i != 0));
            };
            let Some(rest) = stored.strip_prefix(prefix.as_bytes()) else {
                continue;
            };
            match provider.decrypt(rest, aad) {
                Ok((plain, stale)) => return Ok((plain.into(), stale || i != 0)),
                Err(e) => errors.push(e),
            }
        }
        Err(if errors.is_empty() {
            "no matching prefix found".to_string()
        } else {
            aggregate(errors)
        })
    }
}

/// What resources without a configured provider get: plaintext, and an error for a value that is
/// encrypted (upstream's `identity.NewEncryptCheckTransformer`).
pub fn identity_check(stored: &[u8]) -> Result<(), String> {
    if stored.starts_with(ENCRYPTED_PREFIX) {
        Err("identity transformer tried to read encrypted data".into())
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn provider(kind: ProviderKind, keys: &[(&str, u8, usize)]) -> Arc<Provider> {
        let keys = keys
            .iter()
            .map(|(name, byte, len)| (name.to_string(), vec![*byte; *len]))
            .collect();
        Arc::new(Provider::new(&ProviderConfiguration::Keyed { kind, keys }).unwrap())
    }

    fn identity() -> Arc<Provider> {
        Arc::new(Provider::new(&ProviderConfiguration::Identity).unwrap())
    }

    fn chain(providers: Vec<Arc<Provider>>) -> Chain {
        Chain::new(providers).unwrap()
    }

    const AAD: &[u8] = b"/registry/secrets/default/s";

    #[test]
    fn each_provider_round_trips_under_its_prefix() {
        let plain = Bytes::from_static(b"{\"kind\":\"Secret\"}");
        for (kind, prefix, len) in [
            (ProviderKind::AesCbc, "k8s:enc:aescbc:v1:key1:", 32),
            (ProviderKind::AesGcm, "k8s:enc:aesgcm:v1:key1:", 16),
            (ProviderKind::Secretbox, "k8s:enc:secretbox:v1:key1:", 32),
        ] {
            let c = chain(vec![provider(kind.clone(), &[("key1", 1, len)])]);
            let stored = c.encrypt(&plain, AAD).unwrap();
            assert!(stored.starts_with(prefix.as_bytes()), "{kind:?}");
            assert!(!stored.windows(6).any(|w| w == b"Secret"));
            assert_eq!(c.decrypt(&stored, AAD).unwrap(), (plain.clone(), false));
        }
    }

    #[test]
    fn rotated_keys_still_read_and_are_stale() {
        let old = chain(vec![provider(ProviderKind::AesCbc, &[("key1", 1, 32)])]);
        let stored = old.encrypt(&Bytes::from_static(b"v"), AAD).unwrap();
        // key2 now writes; key1 reads what it wrote.
        let rotated = chain(vec![provider(
            ProviderKind::AesCbc,
            &[("key2", 2, 32), ("key1", 1, 32)],
        )]);
        assert_eq!(
            rotated.decrypt(&stored, AAD).unwrap(),
            (Bytes::from_static(b"v"), true)
        );
        assert!(rotated
            .encrypt(&Bytes::from_static(b"v"), AAD)
            .unwrap()
            .starts_with(b"k8s:enc:aescbc:v1:key2:"));
        // The same as two aescbc entries sharing the prefix: the first one's failure is not final.
        let split = chain(vec![
            provider(ProviderKind::AesCbc, &[("key1", 9, 32)]),
            provider(ProviderKind::AesCbc, &[("key1", 1, 32)]),
        ]);
        assert!(split.decrypt(&stored, AAD).unwrap().1);
    }

    #[test]
    fn wrong_or_missing_keys_fail() {
        let writer = chain(vec![provider(ProviderKind::AesGcm, &[("key1", 1, 32)])]);
        let stored = writer.encrypt(&Bytes::from_static(b"v"), AAD).unwrap();
        let wrong = chain(vec![provider(ProviderKind::AesGcm, &[("key1", 2, 32)])]);
        assert_eq!(
            wrong.decrypt(&stored, AAD).unwrap_err(),
            "cipher: message authentication failed"
        );
        let unnamed = chain(vec![provider(ProviderKind::AesGcm, &[("other", 1, 32)])]);
        assert_eq!(
            unnamed.decrypt(&stored, AAD).unwrap_err(),
            "no matching key was found for the provided AES transformer"
        );
        let other = chain(vec![provider(ProviderKind::Secretbox, &[("key1", 1, 32)])]);
        assert_eq!(
            other.decrypt(&stored, AAD).unwrap_err(),
            "no matching prefix found"
        );
        // Plaintext without identity in the list is not read.
        assert_eq!(
            writer.decrypt(&Bytes::from_static(b"{}"), AAD).unwrap_err(),
            "no matching prefix found"
        );
    }

    #[test]
    fn identity_reads_plaintext_only() {
        let enc = provider(ProviderKind::AesCbc, &[("key1", 1, 32)]);
        let stored = chain(vec![enc.clone()])
            .encrypt(&Bytes::from_static(b"v"), AAD)
            .unwrap();
        // Encrypting after identity: plaintext reads (stale), encrypted data still reads.
        let migrating = chain(vec![enc.clone(), identity()]);
        assert_eq!(
            migrating.decrypt(&Bytes::from_static(b"{}"), AAD).unwrap(),
            (Bytes::from_static(b"{}"), true)
        );
        // Decrypting away: identity writes, encrypted values are read by the later provider.
        let leaving = chain(vec![identity(), enc]);
        assert_eq!(
            leaving.encrypt(&Bytes::from_static(b"v"), AAD).unwrap(),
            Bytes::from_static(b"v")
        );
        assert_eq!(
            leaving.decrypt(&stored, AAD).unwrap(),
            (Bytes::from_static(b"v"), true)
        );
        assert_eq!(
            chain(vec![identity()]).decrypt(&stored, AAD).unwrap_err(),
            "no matching prefix found"
        );
        assert!(identity_check(&stored).is_err());
        assert!(identity_check(b"{}").is_ok());
    }
}
