//! Projected volumes (upstream `pkg/volume/projected` `collectData`) and the kubelet's service
//! account token manager (`pkg/kubelet/token/token_manager.go`).
//!
//! Sources are collected in order into one payload, each with the volume's `defaultMode` unless an
//! item says otherwise; the errors of all sources are reported together. A service account token
//! gets mode 0600 when the pod has an fsGroup or all its containers run as one user (the group
//! bits then come from the fsGroup walk, the owner from that user), the default mode otherwise.
//! Tokens come from the TokenRequest API, bound to the pod, and are cached per pod and request
//! until 80% of their lifetime (or 24 hours) has passed, as upstream refreshes them; so a
//! projected volume is rewritten only when a token is refreshed or a source changes.
//! `clusterTrustBundle` and `podCertificate` sources are refused.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::{Pod, ProjectedVolumeSource};

use super::atomic_writer::{FileProjection, Payload};
use super::configmap::{self, Kind};
use super::downwardapi;

/// Upstream `maxTTL` and `maxJitter` of the token manager.
const MAX_TTL: Duration = Duration::from_secs(24 * 3600);
const MAX_JITTER: Duration = Duration::from_secs(10);
/// Tokens cached at most (a pod has a handful; entries go with their pod).
const MAX_CACHED_TOKENS: usize = 10_000;
/// The API's default `expirationSeconds` of a projected token as the admission plugin sets it.
const DEFAULT_EXPIRATION: i64 = 3607;

#[derive(Clone, Debug)]
struct CachedToken {
    token: Vec<u8>,
    pod_uid: String,
    /// When it expires and the lifetime that was asked for.
    expires: SystemTime,
    requested: Duration,
}

impl CachedToken {
    /// Upstream `requiresRefresh`: older than 24 hours, or within 20% of its lifetime of expiry
    /// (each less a random jitter of up to 10 s).
    fn requires_refresh(&self, now: SystemTime) -> bool {
        let jitter = MAX_JITTER.mul_f64(rand::random::<f64>());
        let issued = self
            .expires
            .checked_sub(self.requested)
            .unwrap_or(SystemTime::UNIX_EPOCH);
        if now > issued + MAX_TTL.saturating_sub(jitter) {
            return true;
        }
        let margin = self.requested / 5 + jitter;
        now > self
            .expires
            .checked_sub(margin)
            .unwrap_or(SystemTime::UNIX_EPOCH)
    }
}

/// The kubelet's token cache.
#[derive(Default)]
pub struct TokenManager {
    tokens: Mutex<HashMap<String, CachedToken>>,
}

impl TokenManager {
    /// A token for the pod's service account (cached while fresh).
    pub async fn token(
        &self,
        client: &kube::Client,
        pod: &Pod,
        audience: Option<&str>,
        expiration: Option<i64>,
    ) -> Result<Vec<u8>, String> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
        let sa = pod
            .spec
            .as_ref()
            .and_then(|s| s.service_account_name.as_deref())
            .unwrap_or("default");
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        let seconds = expiration.unwrap_or(DEFAULT_EXPIRATION);
        let audience = audience.filter(|a| !a.is_empty());
        let key = format!(
            "{sa:?}/{ns:?}/{audience:?}/{seconds}/{:?}/{uid}",
            pod.metadata.name
        );
        let now = SystemTime::now();
        if let Some(t) = crate::kubelet::lock(&self.tokens).get(&key) {
            if !t.requires_refresh(now) {
                return Ok(t.token.clone());
            }
        }
        let (token, expires) = request_token(client, pod, ns, sa, audience, seconds).await?;
        let mut tokens = crate::kubelet::lock(&self.tokens);
        if tokens.len() >= MAX_CACHED_TOKENS {
            tokens.retain(|_, t| t.expires > now);
        }
        if tokens.len() < MAX_CACHED_TOKENS || tokens.contains_key(&key) {
            tokens.insert(
                key,
                CachedToken {
                    token: token.clone(),
                    pod_uid: uid.to_string(),
                    expires: expires.unwrap_or(now + Duration::from_secs(seconds.max(0) as u64)),
                    requested: Duration::from_secs(seconds.max(0) as u64),
                },
            );
        }
        Ok(token)
    }

    /// Drops a pod's tokens (upstream `DeleteServiceAccountToken`).
    pub fn forget_pod(&self, uid: &str) {
        crate::kubelet::lock(&self.tokens).retain(|_, t| t.pod_uid != uid);
    }
}

/// `serviceaccounts/<sa>/token`, bound to the pod: the token and its expiry.
async fn request_token(
    client: &kube::Client,
    pod: &Pod,
    ns: &str,
    sa: &str,
    audience: Option<&str>,
    seconds: i64,
) -> Result<(Vec<u8>, Option<SystemTime>), String> {
    let mut spec = serde_json::json!({
        "expirationSeconds": seconds,
        "boundObjectRef": {"apiVersion": "v1", "kind": "Pod",
                           "name": pod.metadata.name, "uid": pod.metadata.uid},
    });
    if let Some(a) = audience {
        spec["audiences"] = serde_json::json!([a]);
    }
    let body = serde_json::json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec});
    let req = http::Request::post(format!(
        "/api/v1/namespaces/{ns}/serviceaccounts/{sa}/token"
    ))
    .header("content-type", "application/json")
    .body(serde_json::to_vec(&body).unwrap_or_default())
    .map_err(|e| e.to_string())?;
    let resp: serde_json::Value = match client.request(req).await {
        Ok(v) => v,
        Err(kube::Error::Api(e)) if e.code == 404 => {
            return Err(format!(
                "failed to fetch token for service account {ns}/{sa}: the API server does not serve the TokenRequest API (serviceaccounts/token): {}",
                e.message
            ))
        }
        Err(e) => {
            return Err(format!(
                "failed to fetch token for service account {ns}/{sa}: {e}"
            ))
        }
    };
    let token = resp["status"]["token"]
        .as_str()
        .map(|t| t.as_bytes().to_vec())
        .ok_or("TokenRequest answer has no status.token")?;
    let expires = resp["status"]["expirationTimestamp"]
        .as_str()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(SystemTime::from);
    Ok((token, expires))
}

/// Everything a projected volume's sources need besides the API.
pub struct Context<'a> {
    pub client: Option<&'a kube::Client>,
    pub tokens: &'a TokenManager,
    pub pod: &'a Pod,
    pub allocatable: &'a BTreeMap<String, String>,
    pub fs_user: Option<u32>,
    pub has_fs_group: bool,
}

/// Upstream `collectData`.
pub async fn collect(
    ctx: &Context<'_>,
    volume: &str,
    source: &ProjectedVolumeSource,
) -> Result<Payload, String> {
    let Some(client) = ctx.client else {
        return Err(format!(
            "cannot setup projected volume {volume} because kube client is not configured"
        ));
    };
    let ns = ctx.pod.metadata.namespace.as_deref().unwrap_or("default");
    let default_mode = configmap::mode_of(source.default_mode, configmap::DEFAULT_MODE);
    let mut errors = Vec::new();
    let mut payload = Payload::new();
    for s in source.sources.iter().flatten() {
        let part = if let Some(c) = &s.config_map {
            configmap::payload(
                client,
                Kind::ConfigMap,
                ns,
                &c.name,
                c.items.as_deref(),
                default_mode,
                c.optional == Some(true),
            )
            .await
        } else if let Some(c) = &s.secret {
            configmap::payload(
                client,
                Kind::Secret,
                ns,
                &c.name,
                c.items.as_deref(),
                default_mode,
                c.optional == Some(true),
            )
            .await
        } else if let Some(d) = &s.downward_api {
            downwardapi::collect_data(
                d.items.as_deref().unwrap_or(&[]),
                ctx.pod,
                ctx.allocatable,
                default_mode,
            )
        } else if let Some(t) = &s.service_account_token {
            let mode = if ctx.fs_user.is_some() || ctx.has_fs_group {
                0o600
            } else {
                default_mode
            };
            ctx.tokens
                .token(client, ctx.pod, t.audience.as_deref(), t.expiration_seconds)
                .await
                .map(|token| {
                    let mut f = FileProjection::new(token, mode);
                    f.fs_user = ctx.fs_user;
                    Payload::from([(t.path.clone(), f)])
                })
        } else if s.cluster_trust_bundle.is_some() {
            Err("clusterTrustBundle projections are not supported by the rkube kubelet".into())
        } else if s.pod_certificate.is_some() {
            Err("podCertificate projections are not supported by the rkube kubelet".into())
        } else {
            Ok(Payload::new())
        };
        match part {
            Ok(p) => payload.extend(p),
            Err(e) => errors.push(e),
        }
    }
    downwardapi::aggregate(errors)?;
    Ok(payload)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_refresh_at_80_percent_or_a_day() {
        let now = SystemTime::now();
        let hour = Duration::from_secs(3600);
        let fresh = CachedToken {
            token: Vec::new(),
            pod_uid: String::new(),
            expires: now + hour,
            requested: hour,
        };
        assert!(!fresh.requires_refresh(now));
        assert!(!fresh.requires_refresh(now + hour * 3 / 4));
        assert!(fresh.requires_refresh(now + hour * 81 / 100));
        // A year-long token (the API server's extension) is refreshed after a day.
        let long = CachedToken {
            expires: now + hour * 24 * 365,
            requested: hour * 24 * 365,
            ..fresh
        };
        assert!(!long.requires_refresh(now + hour));
        assert!(long.requires_refresh(now + hour * 24));
    }

    #[test]
    fn forgetting_a_pod_drops_its_tokens() {
        let m = TokenManager::default();
        let t = CachedToken {
            token: b"t".to_vec(),
            pod_uid: "u1".into(),
            expires: SystemTime::now(),
            requested: Duration::from_secs(1),
        };
        crate::kubelet::lock(&m.tokens).insert("a".into(), t.clone());
        crate::kubelet::lock(&m.tokens).insert(
            "b".into(),
            CachedToken {
                pod_uid: "u2".into(),
                ..t
            },
        );
        m.forget_pod("u1");
        assert_eq!(crate::kubelet::lock(&m.tokens).len(), 1);
    }
}
