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
        verify_p256(&self.public, token)
    }

    /// What verifies this key's tokens.
    pub fn verifying_key(&self) -> VerifyingKey {
        VerifyingKey {
            public: self.public.clone(),
            key_id: self.key_id.clone(),
        }
    }

    /// The public key as a JSON Web Key (for `/openid/v1/jwks`).
    pub fn jwk(&self) -> Value {
        jwk(&self.public, &self.key_id)
    }
}

/// A public key that tokens are also accepted from (upstream's `--service-account-key-file`: the
/// keys of other API servers or of a rotated-out signing key).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyingKey {
    /// Uncompressed SEC1 point (0x04 || X || Y).
    public: Vec<u8>,
    pub key_id: String,
}

impl VerifyingKey {
    /// From the DER of a SubjectPublicKeyInfo: only EC P-256 (what rkube signs with).
    fn from_spki(der: &[u8]) -> Result<VerifyingKey, String> {
        match der.strip_prefix(&P256_SPKI_PREFIX[..]) {
            Some(point) if point.len() == 65 && point[0] == 0x04 => Ok(VerifyingKey {
                public: point.to_vec(),
                key_id: URL_SAFE_NO_PAD.encode(ring::digest::digest(&ring::digest::SHA256, der)),
            }),
            _ => Err("only EC P-256 public keys are supported (tokens are ES256)".into()),
        }
    }

    pub fn verify(&self, token: &str) -> Result<Value, &'static str> {
        verify_p256(&self.public, token)
    }

    pub fn jwk(&self) -> Value {
        jwk(&self.public, &self.key_id)
    }
}

/// The keys in a PEM file given to `--service-account-key-file`: `PUBLIC KEY` blocks (EC P-256
/// SubjectPublicKeyInfo) and `PRIVATE KEY` blocks (PKCS#8 EC P-256, whose public half is used), as
/// upstream reads public and private keys from the same flag. At least one is needed.
pub fn load_verifying_keys(path: &Path) -> Result<Vec<VerifyingKey>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let err = |e: String| format!("{}: {e}", path.display());
    let mut keys = Vec::new();
    let mut block: Option<(String, String)> = None;
    for line in text.lines().map(str::trim) {
        if let Some(label) = line
            .strip_prefix("-----BEGIN ")
            .and_then(|l| l.strip_suffix("-----"))
        {
            block = Some((label.to_string(), String::new()));
        } else if line.starts_with("-----END ") {
            let (label, body) = block
                .take()
                .ok_or_else(|| err("END without BEGIN".into()))?;
            let der = base64::engine::general_purpose::STANDARD
                .decode(&body)
                .map_err(|e| err(format!("not PEM: {e}")))?;
            keys.push(match label.as_str() {
                "PUBLIC KEY" => VerifyingKey::from_spki(&der).map_err(err)?,
                "PRIVATE KEY" => SigningKey::from_pem(&format!(
                    "-----BEGIN PRIVATE KEY-----\n{body}\n-----END PRIVATE KEY-----\n"
                ))
                .map_err(err)?
                .verifying_key(),
                other => {
                    return Err(err(format!(
                        "{other} blocks are not supported (PUBLIC KEY or PRIVATE KEY, EC P-256)"
                    )))
                }
            });
        } else if let Some((_, body)) = block.as_mut() {
            body.push_str(line);
        }
    }
    if keys.is_empty() {
        return Err(err("no PEM key in the file".into()));
    }
    Ok(keys)
}

/// The claims of an ES256 token signed by `public`'s key, or why not.
fn verify_p256(public: &[u8], token: &str) -> Result<Value, &'static str> {
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
    signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, public)
        .verify(signing_input.as_bytes(), &sig)
        .map_err(|_| "invalid signature")?;
    URL_SAFE_NO_PAD
        .decode(payload)
        .ok()
        .and_then(|p| serde_json::from_slice(&p).ok())
        .ok_or("malformed JWT claims")
}

/// A P-256 public key as a JSON Web Key.
fn jwk(public: &[u8], key_id: &str) -> Value {
    let (x, y) = public[1..].split_at(32);
    json!({
        "use": "sig",
        "kty": "EC",
        "kid": key_id,
        "crv": "P-256",
        "alg": "ES256",
        "x": URL_SAFE_NO_PAD.encode(x),
        "y": URL_SAFE_NO_PAD.encode(y),
    })
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

    fn pem(label: &str, der: &[u8]) -> String {
        let b64 = base64::engine::general_purpose::STANDARD.encode(der);
        format!("-----BEGIN {label}-----\n{b64}\n-----END {label}-----\n")
    }

    #[test]
    fn verifying_keys_from_public_and_private_pem() {
        let dir = tempfile::tempdir().unwrap();
        let key = SigningKey::load_or_generate(&dir.path().join("sa.key")).unwrap();
        let other = SigningKey::load_or_generate(&dir.path().join("other.key")).unwrap();
        let token = key.sign(&json!({"sub": "me"})).unwrap();
        let mut spki = P256_SPKI_PREFIX.to_vec();
        spki.extend_from_slice(&key.public);
        let public = dir.path().join("sa.pub");
        std::fs::write(&public, pem("PUBLIC KEY", &spki)).unwrap();
        let keys = load_verifying_keys(&public).unwrap();
        assert_eq!(
            keys,
            vec![key.verifying_key()],
            "same key id as the signer's"
        );
        assert_eq!(keys[0].verify(&token).unwrap()["sub"], "me");
        assert_eq!(keys[0].jwk(), key.jwk());
        // A private key file gives its public half; several blocks give several keys.
        let both = dir.path().join("both.pem");
        let private = std::fs::read_to_string(dir.path().join("other.key")).unwrap();
        std::fs::write(&both, format!("{}{private}", pem("PUBLIC KEY", &spki))).unwrap();
        let keys = load_verifying_keys(&both).unwrap();
        assert_eq!(keys.len(), 2);
        assert_eq!(keys[1], other.verifying_key());
        assert_eq!(keys[1].verify(&token), Err("invalid signature"));
        // Other algorithms and empty files are refused at start.
        let mut rsa_like = spki.clone();
        rsa_like[10] ^= 0xff;
        std::fs::write(&public, pem("PUBLIC KEY", &rsa_like)).unwrap();
        assert!(load_verifying_keys(&public)
            .unwrap_err()
            .contains("only EC P-256"));
        std::fs::write(&public, pem("RSA PUBLIC KEY", &spki)).unwrap();
        assert!(load_verifying_keys(&public).is_err());
        std::fs::write(&public, "nothing").unwrap();
        assert!(load_verifying_keys(&public)
            .unwrap_err()
            .contains("no PEM key"));
    }
}
