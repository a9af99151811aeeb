//! Service account credentials (upstream `pkg/serviceaccount`, `pkg/registry/core/serviceaccount/
//! storage/token.go`, `plugin/pkg/admission/serviceaccount` and the service account issuer discovery
//! endpoints):
//!
//! - [`jwt`]: signing and verifying tokens.
//! - [`token_request`]: `POST .../serviceaccounts/<name>/token` (TokenRequest), bound to a pod, secret
//!   or node when asked.
//! - [`admission`]: pods get their service account (`default`) and the `kube-api-access-*` projected
//!   volume.
//! - [`oidc`]: `/.well-known/openid-configuration` and `/openid/v1/jwks`.
//!
//! Bearer tokens signed by the server's key authenticate as `system:serviceaccount:<ns>:<name>` while
//! the service account (and the bound object) still exist with the UIDs the token names. Legacy
//! secret-based tokens (issuer `kubernetes/serviceaccount`) are not issued or accepted.

pub mod admission;
pub mod jwt;
pub mod oidc;
pub mod token_request;

use serde_json::{json, Value};

use crate::authn::UserInfo;
use crate::ApiServer;

/// Upstream's default issuer and API audience for a cluster whose domain is `cluster.local`.
pub const DEFAULT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

/// How far token times may be off (upstream's default leeway).
const LEEWAY_SECONDS: i64 = 60;

/// The issuer's settings and key.
pub struct Issuer {
    pub key: jwt::SigningKey,
    /// `--service-account-key-file`: more keys whose tokens are accepted (other servers', rotated
    /// ones).
    pub extra_keys: Vec<jwt::VerifyingKey>,
    /// `--service-account-issuer`.
    pub issuer: String,
    /// `--api-audiences`: tokens for the API server carry one of these.
    pub api_audiences: Vec<String>,
    /// `--service-account-max-token-expiration` in seconds (0: none).
    pub max_expiration: i64,
}

/// What a token is bound to, besides its service account.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundObject {
    /// `Pod`, `Secret` or `Node`.
    pub kind: String,
    pub name: String,
    pub uid: String,
}

/// The service account a token is for.
pub struct Subject<'a> {
    pub namespace: &'a str,
    pub name: &'a str,
    pub uid: &'a str,
}

fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

impl Issuer {
    /// The claims of a token signed by the signing key or one of the extra keys, or why not (the
    /// signing key's reason when none verifies it).
    pub fn verify_signature(&self, token: &str) -> Result<Value, &'static str> {
        self.key.verify(token).or_else(|reason| {
            self.extra_keys
                .iter()
                .find_map(|k| k.verify(token).ok())
                .ok_or(reason)
        })
    }

    /// Every key tokens are accepted from, the signing key first, each once.
    pub fn verifying_keys(&self) -> Vec<jwt::VerifyingKey> {
        let mut keys = vec![self.key.verifying_key()];
        for k in &self.extra_keys {
            if !keys.iter().any(|have| have.key_id == k.key_id) {
                keys.push(k.clone());
            }
        }
        keys
    }

    /// A token for `subject`, valid for `expiration` seconds for `audiences`. Returns the token and
    /// its expiry (Unix seconds).
    pub fn issue(
        &self,
        subject: &Subject<'_>,
        audiences: &[String],
        expiration: i64,
        bound: &[BoundObject],
    ) -> Result<(String, i64), String> {
        let iat = now();
        let exp = iat + expiration;
        let mut private = json!({
            "namespace": subject.namespace,
            "serviceaccount": {"name": subject.name, "uid": subject.uid},
        });
        for b in bound {
            let key = match b.kind.as_str() {
                "Pod" => "pod",
                "Secret" => "secret",
                "Node" => "node",
                _ => continue,
            };
            private[key] = json!({"name": b.name, "uid": b.uid});
        }
        let claims = json!({
            "aud": audiences,
            "exp": exp,
            "iat": iat,
            "iss": self.issuer,
            "jti": uuid::Uuid::new_v4().to_string(),
            "kubernetes.io": private,
            "nbf": iat,
            "sub": format!("system:serviceaccount:{}:{}", subject.namespace, subject.name),
        });
        Ok((self.key.sign(&claims)?, exp))
    }
}

/// The user of a service account token, with the audiences it was accepted for; `audiences` are the
/// acceptable ones (the API audiences for a request, a TokenReview's own list otherwise).
pub fn authenticate(
    api: &ApiServer,
    token: &str,
    audiences: &[String],
) -> Result<(UserInfo, Vec<String>), String> {
    let issuer = &api.service_accounts;
    let claims = issuer.verify_signature(token).map_err(str::to_string)?;
    if claims["iss"].as_str() != Some(issuer.issuer.as_str()) {
        return Err("token issued by another issuer".into());
    }
    let now = now();
    let exp = claims["exp"].as_i64().ok_or("token has no expiry")?;
    if exp + LEEWAY_SECONDS < now {
        return Err("token has expired".into());
    }
    if claims["nbf"]
        .as_i64()
        .is_some_and(|nbf| nbf - LEEWAY_SECONDS > now)
    {
        return Err("token is not valid yet".into());
    }
    let token_audiences: Vec<String> = match &claims["aud"] {
        Value::String(a) => vec![a.clone()],
        Value::Array(a) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_string))
            .collect(),
        _ => Vec::new(),
    };
    let matched: Vec<String> = audiences
        .iter()
        .filter(|a| token_audiences.contains(a))
        .cloned()
        .collect();
    if matched.is_empty() {
        return Err("token audiences do not match".into());
    }
    let private = &claims["kubernetes.io"];
    let namespace = private["namespace"].as_str().unwrap_or("");
    let sa_name = private
        .pointer("/serviceaccount/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let sa_uid = private
        .pointer("/serviceaccount/uid")
        .and_then(Value::as_str)
        .unwrap_or("");
    // The service account and any bound object must still be the ones the token was made for.
    let alive = |storage: &str, key: String, uid: &str| -> Result<(), String> {
        let obj = cached(api, storage, &key).ok_or_else(|| format!("{key} not found"))?;
        if obj.pointer("/metadata/uid").and_then(Value::as_str) != Some(uid) {
            return Err(format!("{key} has another UID"));
        }
        let deleted = obj
            .pointer("/metadata/deletionTimestamp")
            .and_then(Value::as_str)
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .is_some_and(|t| t.timestamp() + LEEWAY_SECONDS < now);
        if deleted {
            return Err(format!("{key} is being deleted"));
        }
        Ok(())
    };
    alive(
        "serviceaccounts",
        format!("/serviceaccounts/{namespace}/{sa_name}"),
        sa_uid,
    )?;
    // Upstream also reports the bound pod and node as the user's "extra" values; rkube's UserInfo has
    // no extra values yet.
    for (claim, storage) in [("pod", "pods"), ("secret", "secrets")] {
        if let (Some(name), Some(uid)) = (
            private
                .pointer(&format!("/{claim}/name"))
                .and_then(Value::as_str),
            private
                .pointer(&format!("/{claim}/uid"))
                .and_then(Value::as_str),
        ) {
            alive(storage, format!("/{storage}/{namespace}/{name}"), uid)?;
        }
    }
    Ok((
        UserInfo {
            name: format!("system:serviceaccount:{namespace}:{sa_name}"),
            uid: sa_uid.to_string(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                "system:authenticated".into(),
            ],
        },
        matched,
    ))
}

/// An object from the watch cache, decoded.
pub(crate) fn cached(api: &ApiServer, storage: &str, key: &str) -> Option<Value> {
    let obj = api.caches.get(storage)?.get(key)?;
    serde_json::from_slice(&obj.json).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_of_extra_keys_are_accepted_and_published() {
        let dir = tempfile::tempdir().unwrap();
        let load = |name: &str| jwt::SigningKey::load_or_generate(&dir.path().join(name)).unwrap();
        let (ours, theirs, stranger) = (load("a.key"), load("b.key"), load("c.key"));
        let issuer = Issuer {
            extra_keys: vec![theirs.verifying_key(), ours.verifying_key()],
            key: ours,
            issuer: DEFAULT_ISSUER.into(),
            api_audiences: vec![DEFAULT_ISSUER.into()],
            max_expiration: 0,
        };
        let claims = json!({"sub": "system:serviceaccount:default:x"});
        let from_other_server = theirs.sign(&claims).unwrap();
        assert_eq!(
            issuer.verify_signature(&from_other_server).unwrap()["sub"],
            "system:serviceaccount:default:x"
        );
        let forged = stranger.sign(&claims).unwrap();
        assert_eq!(issuer.verify_signature(&forged), Err("invalid signature"));
        let keys = issuer.verifying_keys();
        assert_eq!(keys.len(), 2, "the signing key listed once");
        assert_eq!(keys[0].key_id, issuer.key.key_id);
        assert_eq!(oidc::jwks(&issuer)["keys"].as_array().unwrap().len(), 2);
    }
}
