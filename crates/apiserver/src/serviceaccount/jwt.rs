//! Service account tokens as JWTs (upstream `pkg/serviceaccount/jwt.go` and `claims.go`): ES256
//! (ECDSA P-256) signatures, the key id as upstream derives it (base64url of the SHA-256 of the
//! public key's DER form), and the `kubernetes.io` private claims. Upstream signs with RSA (RS256)
//! unless given an EC key; rkube generates an EC key, which upstream supports equally.

use std::path::Path;

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair};
use serde_json::{json, Value};

/// The signing key and what verifiers need of it.
pub struct SigningKey {
    pair: EcdsaKeyPair,
    /// Uncompressed SEC1 point (0x04 || X || Y).
    public: Vec<u8>,
    pub key_id: String,
    rng: SystemRandom,
}

/// DER prefix of a SubjectPublicKeyInfo for an uncompressed P-256 point (id-ecPublicKey, prime256v1).
const P256_SPKI_PREFIX: [u8; 26] = [
    0x30, 0x59, 0x30, 0x13, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x3d, 0x02, 0x01, 0x06, 0x08, 0x2a,
    0x86, 0x48, 0xce, 0x3d, 0x03, 0x01, 0x07, 0x03, 0x42, 0x00,
];

impl SigningKey {
    /// Reads the PKCS#8 PEM key at `path`, generating and writing one on first start.
    pub fn load_or_generate(path: &Path) -> Result<SigningKey, String> {
        let pem = match std::fs::read_to_string(path) {
            Ok(pem) => pem,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let rng = SystemRandom::new();
                let doc =
                    EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                        .map_err(|_| "cannot generate the service account key".to_string())?;
                let pem = format!(
                    "-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n",
                    base64::engine::general_purpose::STANDARD
                        .encode(doc.as_ref())
                        .as_bytes()
                        .chunks(64)
                        .map(|c| String::from_utf8_lossy(c).into_owned())
                        .collect::<Vec<_>>()
                        .join("\n")
                );
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)
                        .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
                }
                crate::certs::write_private(path, &pem)?;
                pem
            }
            Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
        };
        SigningKey::from_pem(&pem).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// A key from PKCS#8 PEM text (an EC P-256 private key).
    pub fn from_pem(pem: &str) -> Result<SigningKey, String> {
        let body: String = pem
            .lines()
            .filter(|l| !l.starts_with("-----"))
            .collect::<Vec<_>>()
            .concat();
        let der = base64::engine::general_purpose::STANDARD
            .decode(body.trim())
            .map_err(|e| format!("not PEM: {e}"))?;
        let rng = SystemRandom::new();
        let pair =
            EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &der, &rng)
                .map_err(|e| format!("not a PKCS#8 EC P-256 private key: {e}"))?;
        let public = pair.public_key().as_ref().to_vec();
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(&public);
        let key_id = URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, &spki));
        Ok(SigningKey {
            pair,
            public,
            key_id,
            rng,
        })
    }

    /// A signed compact JWT of `claims`.
    pub fn sign(&self, claims: &Value) -> Result<String, String> {
        let header = json!({"alg": "ES256", "kid": self.key_id});
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let sig = self
            .pair
            .sign(&self.rng, signing_input.as_bytes())
            .map_err(|_| "cannot sign the token".to_string())?;
        Ok(format!(
            "{signing_input}.{}",
            URL_SAFE_NO_PAD.encode(sig.as_ref())
        ))
    }

    /// The claims of a token this key signed, or why not (signature only: the caller checks time,
    /// issuer and audience).
    pub fn verify(&self, token: &str) -> Result<Value, &'static str> {
        let mut parts = token.split('.');
        let (Some(header), Some(payload), Some(sig), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err("not a JWT");
        };
        let header: Value = URL_SAFE_NO_PAD
            .decode(header)
            .ok()
            .and_then(|h| serde_json::from_slice(&h).ok())
            .ok_or("malformed JWT header")?;
        if header["alg"] != "ES256" {
            return Err("unsupported signing algorithm");
        }
        let sig = URL_SAFE_NO_PAD
            .decode(sig)
            .map_err(|_| "malformed signature")?;
        let signing_input = &token[..header_len(token)];
        signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, &self.public)
            .verify(signing_input.as_bytes(), &sig)
            .map_err(|_| "invalid signature")?;
        URL_SAFE_NO_PAD
            .decode(payload)
            .ok()
            .and_then(|p| serde_json::from_slice(&p).ok())
            .ok_or("malformed JWT claims")
    }

    /// The public key as a JSON Web Key (for `/openid/v1/jwks`).
    pub fn jwk(&self) -> Value {
        let (x, y) = self.public[1..].split_at(32);
        json!({
            "use": "sig",
            "kty": "EC",
            "kid": self.key_id,
            "crv": "P-256",
            "alg": "ES256",
            "x": URL_SAFE_NO_PAD.encode(x),
            "y": URL_SAFE_NO_PAD.encode(y),
        })
    }
}

/// The length of `header.payload` (what the signature covers).
fn header_len(token: &str) -> usize {
    token.rfind('.').unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_verify_and_reject_tampering() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sa.key");
        let key = SigningKey::load_or_generate(&path).unwrap();
        let again = SigningKey::load_or_generate(&path).unwrap();
        assert_eq!(key.key_id, again.key_id, "the key is kept");
        let token = key.sign(&json!({"sub": "me", "n": 1})).unwrap();
        assert_eq!(again.verify(&token).unwrap()["sub"], "me");
        let mut parts: Vec<&str> = token.split('.').collect();
        let forged = URL_SAFE_NO_PAD.encode(json!({"sub": "root", "n": 1}).to_string());
        parts[1] = &forged;
        assert_eq!(key.verify(&parts.join(".")), Err("invalid signature"));
        assert_eq!(key.verify("a.b"), Err("not a JWT"));
        let other = SigningKey::load_or_generate(&dir.path().join("other.key")).unwrap();
        assert_eq!(other.verify(&token), Err("invalid signature"));
        let jwk = key.jwk();
        assert_eq!(jwk["kid"], key.key_id.as_str());
        assert_eq!(
            URL_SAFE_NO_PAD
                .decode(jwk["x"].as_str().unwrap())
                .unwrap()
                .len(),
            32
        );
    }
}
