//! The `secretbox` provider's cipher (upstream `storage/value/encrypt/secretbox`): NaCl's secretbox,
//! XSalsa20 with Poly1305, in upstream's layout: 24-byte random nonce ‖ 16-byte tag ‖ ciphertext
//! (the nonce followed by what Go's `secretbox.Seal` returns). No authenticated data, as upstream.

use crypto_secretbox::aead::generic_array::GenericArray;
use crypto_secretbox::aead::{AeadInPlace, KeyInit};
use crypto_secretbox::XSalsa20Poly1305;

use super::random;

const NONCE: usize = 24;
const TAG: usize = 16;

pub struct Secretbox(Box<XSalsa20Poly1305>);

impl Secretbox {
    pub fn new(key: &[u8]) -> Result<Secretbox, String> {
        XSalsa20Poly1305::new_from_slice(key)
            .map(|c| Secretbox(Box::new(c)))
            .map_err(|_| {
                format!(
                    "expected key size 32 for secretbox provider, got {}",
                    key.len()
                )
            })
    }

    pub fn encrypt(&self, plain: &[u8]) -> Result<Vec<u8>, String> {
        let mut nonce = [0u8; NONCE];
        random::fill(&mut nonce)?;
        let mut body = plain.to_vec();
        let tag = self
            .0
            .encrypt_in_place_detached(GenericArray::from_slice(&nonce), b"", &mut body)
            .map_err(|_| "secretbox: cannot seal the value".to_string())?;
        let mut out = Vec::with_capacity(NONCE + TAG + body.len());
        out.extend_from_slice(&nonce);
        out.extend_from_slice(&tag);
        out.extend_from_slice(&body);
        Ok(out)
    }

    pub fn decrypt(&self, data: &[u8]) -> Result<Vec<u8>, String> {
        if data.len() < NONCE + TAG {
            return Err("the stored data was shorter than the required size".into());
        }
        let (nonce, sealed) = data.split_at(NONCE);
        let (tag, ciphertext) = sealed.split_at(TAG);
        let mut body = ciphertext.to_vec();
        self.0
            .decrypt_in_place_detached(
                GenericArray::from_slice(nonce),
                b"",
                &mut body,
                GenericArray::from_slice(tag),
            )
            // Upstream's text for a box that does not open (misleading, but what its logs say).
            .map_err(|_| "output array was not large enough for encryption".to_string())?;
        Ok(body)
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
    fn round_trips_and_refuses_other_keys() {
        let sb = Secretbox::new(&[9u8; 32]).unwrap();
        let sealed = sb.encrypt(b"{\"a\":1}").unwrap();
        assert_eq!(sealed.len(), NONCE + TAG + 7);
        assert_eq!(sb.decrypt(&sealed).unwrap(), b"{\"a\":1}");
        let other = Secretbox::new(&[8u8; 32]).unwrap();
        assert!(other.decrypt(&sealed).is_err());
        assert!(sb.decrypt(&sealed[..30]).is_err());
        assert!(Secretbox::new(&[0u8; 16]).is_err());
    }

    #[test]
    fn reads_a_known_value() {
        // Made with PyNaCl's SecretBox (libsodium, the layout of Go's nacl/secretbox): key 32 x 0x01,
        // nonce 0x00..0x17, plaintext "hello".
        let sealed = unhex(SEALED_HELLO);
        let sb = Secretbox::new(&[1u8; 32]).unwrap();
        assert_eq!(sb.decrypt(&sealed).unwrap(), b"hello");
    }

    const SEALED_HELLO: &str = concat!(
        "000102030405060708090a0b0c0d0e0f1011121314151617",
        "258d621aaa067d3ba68dc17d514baeaa",
        "e672f8107b"
    );
}
