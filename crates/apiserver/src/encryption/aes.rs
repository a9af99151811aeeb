//! The `aesgcm` and `aescbc` providers' ciphers (upstream `storage/value/encrypt/aes`), byte for
//! byte in upstream's layout so that either server reads what the other wrote:
//! - AES-GCM: 12-byte random nonce ‖ ciphertext ‖ 16-byte tag, the storage key as authenticated data;
//! - AES-CBC: 16-byte random IV ‖ ciphertext of the PKCS#7-padded value (no authentication, and no
//!   authenticated data: upstream's CBC transformer ignores it).
//!
//! Keys of 16, 24 or 32 bytes select AES-128, -192 or -256.

use aes_gcm::aead::consts::{U12, U16};
use aes_gcm::aead::generic_array::GenericArray;
use aes_gcm::aead::{AeadInPlace, KeyInit};
use aes_gcm::{Aes128Gcm, Aes256Gcm};
use cbc::cipher::{BlockDecryptMut, BlockEncryptMut, KeyIvInit};

use super::random;

type Aes192Gcm = aes_gcm::AesGcm<aes::Aes192, U12>;

const GCM_NONCE: usize = 12;
const GCM_TAG: usize = 16;
const BLOCK: usize = 16;

// Upstream's error texts, so that logs read the same.
const SHORT: &str = "the stored data was shorter than the required size";
const AUTH_FAILED: &str = "cipher: message authentication failed";
const NOT_BLOCKS: &str = "the stored data is not a multiple of the block size";
const BAD_PKCS7_DATA: &str = "invalid PKCS7 data (empty or not padded)";
const BAD_PKCS7_PADDING: &str = "invalid padding on input";

fn invalid_key_size(n: usize) -> String {
    format!("crypto/aes: invalid key size {n}")
}

/// AES-GCM with one key.
pub struct AesGcm(Gcm);

enum Gcm {
    A128(Box<Aes128Gcm>),
    A192(Box<Aes192Gcm>),
    A256(Box<Aes256Gcm>),
}

impl AesGcm {
    pub fn new(key: &[u8]) -> Result<AesGcm, String> {
        let bad = |_| invalid_key_size(key.len());
        Ok(AesGcm(match key.len() {
            16 => Gcm::A128(Box::new(Aes128Gcm::new_from_slice(key).map_err(bad)?)),
            24 => Gcm::A192(Box::new(Aes192Gcm::new_from_slice(key).map_err(bad)?)),
            32 => Gcm::A256(Box::new(Aes256Gcm::new_from_slice(key).map_err(bad)?)),
            n => return Err(invalid_key_size(n)),
        }))
    }

    pub fn encrypt(&self, plain: &[u8], aad: &[u8]) -> Result<Vec<u8>, String> {
        match &self.0 {
            Gcm::A128(c) => gcm_seal(c.as_ref(), plain, aad),
            Gcm::A192(c) => gcm_seal(c.as_ref(), plain, aad),
            Gcm::A256(c) => gcm_seal(c.as_ref(), plain, aad),
        }
    }

    pub fn decrypt(&self, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, String> {
        match &self.0 {
            Gcm::A128(c) => gcm_open(c.as_ref(), data, aad),
            Gcm::A192(c) => gcm_open(c.as_ref(), data, aad),
            Gcm::A256(c) => gcm_open(c.as_ref(), data, aad),
        }
    }
}

fn gcm_seal<C>(cipher: &C, plain: &[u8], aad: &[u8]) -> Result<Vec<u8>, String>
where
    C: AeadInPlace<NonceSize = U12, TagSize = U16>,
{
    let mut out = Vec::with_capacity(GCM_NONCE + plain.len() + GCM_TAG);
    out.resize(GCM_NONCE, 0);
    random::fill(&mut out)?;
    out.extend_from_slice(plain);
    let (nonce, body) = out.split_at_mut(GCM_NONCE);
    let tag = cipher
        .encrypt_in_place_detached(GenericArray::from_slice(nonce), aad, body)
        .map_err(|_| "cipher: message too large for GCM".to_string())?;
    out.extend_from_slice(&tag);
    Ok(out)
}

fn gcm_open<C>(cipher: &C, data: &[u8], aad: &[u8]) -> Result<Vec<u8>, String>
where
    C: AeadInPlace<NonceSize = U12, TagSize = U16>,
{
    if data.len() < GCM_NONCE {
        return Err(SHORT.into());
    }
    let (nonce, sealed) = data.split_at(GCM_NONCE);
    if sealed.len() < GCM_TAG {
        return Err(AUTH_FAILED.into());
    }
    let (ciphertext, tag) = sealed.split_at(sealed.len() - GCM_TAG);
    let mut buf = ciphertext.to_vec();
    cipher
        .decrypt_in_place_detached(
            GenericArray::from_slice(nonce),
            aad,
            &mut buf,
            GenericArray::from_slice(tag),
        )
        .map_err(|_| AUTH_FAILED.to_string())?;
    Ok(buf)
}

/// AES-CBC with one key. The key is kept rather than a cipher because CBC's state is per message.
pub struct AesCbc {
    key: Vec<u8>,
}

/// Runs `$body` with `$t` bound to the AES variant for `$key`'s length.
macro_rules! with_aes {
    ($key:expr, $t:ident => $body:expr) => {
        match $key.len() {
            16 => {
                type $t = aes::Aes128;
                $body
            }
            24 => {
                type $t = aes::Aes192;
                $body
            }
            32 => {
                type $t = aes::Aes256;
                $body
            }
            n => Err(invalid_key_size(n)),
        }
    };
}

impl AesCbc {
    pub fn new(key: &[u8]) -> Result<AesCbc, String> {
        if ![16, 24, 32].contains(&key.len()) {
            return Err(invalid_key_size(key.len()));
        }
        Ok(AesCbc { key: key.to_vec() })
    }

    pub fn encrypt(&self, plain: &[u8]) -> Result<Vec<u8>, String> {
        // PKCS#7: always 1..=16 bytes of padding, each holding the padding's length.
        let padding = BLOCK - plain.len() % BLOCK;
        let mut out = Vec::with_capacity(BLOCK + plain.len() + padding);
        out.resize(BLOCK, 0);
        random::fill(&mut out)?;
        out.extend_from_slice(plain);
        out.resize(BLOCK + plain.len() + padding, padding as u8);
        let (iv, body) = out.split_at_mut(BLOCK);
        with_aes!(self.key, A => {
            let mut enc = cbc::Encryptor::<A>::new_from_slices(&self.key, iv)
                .map_err(|_| invalid_key_size(self.key.len()))?;
            for block in body.chunks_exact_mut(BLOCK) {
                enc.encrypt_block_mut(GenericArray::from_mut_slice(block));
            }
            Ok::<(), String>(())
        })?;
        Ok(out)
    }

    pub fn decrypt(&self, data: &[u8]) -> Result<Vec<u8>, String> {
        if data.len() < BLOCK {
            return Err(SHORT.into());
        }
        let (iv, body) = data.split_at(BLOCK);
        if body.len() % BLOCK != 0 {
            return Err(NOT_BLOCKS.into());
        }
        let mut buf = body.to_vec();
        with_aes!(self.key, A => {
            let mut dec = cbc::Decryptor::<A>::new_from_slices(&self.key, iv)
                .map_err(|_| invalid_key_size(self.key.len()))?;
            for block in buf.chunks_exact_mut(BLOCK) {
                dec.decrypt_block_mut(GenericArray::from_mut_slice(block));
            }
            Ok::<(), String>(())
        })?;
        let padding = buf.last().copied().unwrap_or(0) as usize;
        if padding == 0 || padding > buf.len() {
            return Err(BAD_PKCS7_DATA.into());
        }
        let size = buf.len() - padding;
        if buf[size..].iter().any(|b| *b as usize != padding) {
            return Err(BAD_PKCS7_PADDING.into());
        }
        buf.truncate(size);
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    #[test]
    fn gcm_round_trips_with_every_key_size_and_binds_the_key() {
        for size in [16, 24, 32] {
            let gcm = AesGcm::new(&vec![7u8; size]).unwrap();
            let sealed = gcm
                .encrypt(b"{\"data\":1}", b"/registry/secrets/a/b")
                .unwrap();
            assert_eq!(sealed.len(), GCM_NONCE + 10 + GCM_TAG);
            assert_eq!(
                gcm.decrypt(&sealed, b"/registry/secrets/a/b").unwrap(),
                b"{\"data\":1}"
            );
            // Moved to another key, the value does not open (upstream's reason for the key as AAD).
            assert_eq!(
                gcm.decrypt(&sealed, b"/registry/secrets/a/c").unwrap_err(),
                AUTH_FAILED
            );
        }
        assert!(AesGcm::new(&[0; 15]).is_err());
    }

    #[test]
    fn gcm_reads_a_known_value() {
        // Made with Python's `cryptography` AESGCM (the layout Go's crypto/cipher Seal produces):
        // key 0x00..0x0f, nonce 0xa0..0xab, aad "/registry/secrets/ns/s", plaintext "hello".
        let key: Vec<u8> = (0u8..16).collect();
        let sealed = unhex(concat!(
            "a0a1a2a3a4a5a6a7a8a9aaab",
            "c2e354d711",
            "6d85fd541f19cc7f17c087e8e3769acf"
        ));
        let gcm = AesGcm::new(&key).unwrap();
        assert_eq!(
            gcm.decrypt(&sealed, b"/registry/secrets/ns/s").unwrap(),
            b"hello"
        );
    }

    #[test]
    fn cbc_round_trips_and_pads_as_pkcs7() {
        for size in [16, 24, 32] {
            let cbc = AesCbc::new(&vec![3u8; size]).unwrap();
            for len in [0, 1, 15, 16, 17, 100] {
                let plain = vec![b'x'; len];
                let sealed = cbc.encrypt(&plain).unwrap();
                assert_eq!(sealed.len(), BLOCK + (len / BLOCK + 1) * BLOCK);
                assert_eq!(cbc.decrypt(&sealed).unwrap(), plain);
            }
        }
        let cbc = AesCbc::new(&[3u8; 16]).unwrap();
        assert_eq!(cbc.decrypt(&[0; 10]).unwrap_err(), SHORT);
        assert_eq!(cbc.decrypt(&[0; 20]).unwrap_err(), NOT_BLOCKS);
        assert_eq!(cbc.decrypt(&[0; 16]).unwrap_err(), BAD_PKCS7_DATA);
    }

    #[test]
    fn cbc_reads_a_known_value() {
        // Made with Python's `cryptography` (AES-CBC, PKCS7 padding): key 0x00..0x0f,
        // IV 0x10..0x1f, plaintext "hello".
        let key: Vec<u8> = (0u8..16).collect();
        let sealed = unhex(concat!(
            "101112131415161718191a1b1c1d1e1f",
            "32f6d6ea1ec8872debccea8596d9c3c3"
        ));
        let cbc = AesCbc::new(&key).unwrap();
        assert_eq!(cbc.decrypt(&sealed).unwrap(), b"hello");
    }

    #[test]
    fn cbc_with_the_wrong_key_fails() {
        let sealed = AesCbc::new(&[1u8; 32]).unwrap().encrypt(b"hello").unwrap();
        // A wrong key almost always leaves bad padding; when it happens not to, the bytes differ.
        match AesCbc::new(&[2u8; 32]).unwrap().decrypt(&sealed) {
            Ok(v) => assert_ne!(v, b"hello"),
            Err(e) => assert!(e == BAD_PKCS7_DATA || e == BAD_PKCS7_PADDING, "{e}"),
        }
    }
}
