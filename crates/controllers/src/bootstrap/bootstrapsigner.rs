//! The bootstrap signer (upstream `pkg/controller/bootstrap/bootstrapsigner.go`,
//! kube-controller-manager's `bootstrap-signer-controller`, off by default there as here): keeps the
//! `jws-kubeconfig-<token-id>` entries of the `kube-public/cluster-info` ConfigMap, one detached JWS
//! of its `kubeconfig` entry per bootstrap token that may sign, so `kubeadm join` (or anyone holding
//! a token) can trust the cluster's CA and address it reads anonymously. Signatures of tokens gone,
//! expired or no longer marked for signing are removed.
//!
//! A token may sign when its Secret (type `bootstrap.kubernetes.io/token`, in `kube-system`) is named
//! `bootstrap-token-<id>` with that `token-id`, has a `token-secret`, has not expired and says
//! `usage-bootstrap-signing: "true"` (upstream `validateSecretForSigning`). The signature is
//! `k8s.io/cluster-bootstrap`'s `ComputeDetachedSignature`: HS256 keyed with the token's secret,
//! protected header `{"alg":"HS256","kid":"<id>"}`, the payload left out (RFC 7515 appendix F).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use client::controller::Controller;
use client::informer::{EventHandlerFuncs, InformerConfig, SharedInformer};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::PostParams;
use kube::Api;

use super::tokencleaner::{expiry, Expiry, NAMESPACE as TOKEN_NAMESPACE, SECRET_TYPE};

/// Where the signed ConfigMap lives.
pub const CONFIG_MAP_NAMESPACE: &str = "kube-public";
pub const CONFIG_MAP_NAME: &str = "cluster-info";
/// The signed entry.
pub const KUBECONFIG_KEY: &str = "kubeconfig";
/// Prefix of the signature entries (then the token id).
pub const JWS_PREFIX: &str = "jws-kubeconfig-";
const SECRET_PREFIX: &str = "bootstrap-token-";

/// A detached JWS of `content`: `<header>..<signature>`.
pub fn compute_detached_signature(content: &str, token_id: &str, token_secret: &str) -> String {
    let b64 = |b: &[u8]| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(b);
    let header = serde_json::json!({"alg": "HS256", "kid": token_id}).to_string();
    let signing_input = format!("{}.{}", b64(header.as_bytes()), b64(content.as_bytes()));
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, token_secret.as_bytes());
    let tag = ring::hmac::sign(&key, signing_input.as_bytes());
    format!("{}..{}", b64(header.as_bytes()), b64(tag.as_ref()))
}

fn data(secret: &Secret, key: &str) -> Option<String> {
    let raw = secret.data.as_ref()?.get(key)?;
    String::from_utf8(raw.0.clone()).ok()
}

/// The token id and secret of a bootstrap token Secret that may sign at `now`.
pub fn token_for_signing(secret: &Secret, now: Timestamp) -> Option<(String, String)> {
    if secret.type_.as_deref() != Some(SECRET_TYPE) {
        return None;
    }
    let name_id = secret
        .metadata
        .name
        .as_deref()?
        .strip_prefix(SECRET_PREFIX)?;
    let id = data(secret, "token-id").filter(|id| !id.is_empty())?;
    if id != name_id {
        return None;
    }
    let token_secret = data(secret, "token-secret").filter(|s| !s.is_empty())?;
    if expiry(secret, now) == Expiry::Expired {
        return None;
    }
    if data(secret, "usage-bootstrap-signing").as_deref() != Some("true") {
        return None;
    }
    Some((id, token_secret))
}

/// The ConfigMap's data with a signature per token (id -> secret) and no others; `None` when it
/// needs no change, or has no `kubeconfig` to sign (upstream `signConfigMap`).
pub fn signed_data(
    current: &BTreeMap<String, String>,
    tokens: &BTreeMap<String, String>,
) -> Option<BTreeMap<String, String>> {
    let content = current.get(KUBECONFIG_KEY)?;
    let mut out: BTreeMap<String, String> = current
        .iter()
        .filter(|(k, _)| !k.starts_with(JWS_PREFIX))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for (id, secret) in tokens {
        out.insert(
            format!("{JWS_PREFIX}{id}"),
            compute_detached_signature(content, id, secret),
        );
    }
    (out != *current).then_some(out)
}

struct Ctx {
    client: kube::Client,
    config_maps: Arc<client::informer::Store<ConfigMap>>,
    secrets: Arc<client::informer::Store<Secret>>,
    queue: RateLimitingQueue<String>,
}

const KEY: &str = "kube-public/cluster-info";

pub async fn run(client: kube::Client, workers: usize) {
    let config_maps = SharedInformer::from_api(
        Api::<ConfigMap>::namespaced(client.clone(), CONFIG_MAP_NAMESPACE),
        InformerConfig::new().fields(format!("metadata.name={CONFIG_MAP_NAME}")),
    );
    let secrets = SharedInformer::from_api(
        Api::<Secret>::namespaced(client.clone(), TOKEN_NAMESPACE),
        InformerConfig::new().fields(format!("type={SECRET_TYPE}")),
    );
    let ctx = Arc::new(Ctx {
        client,
        config_maps: config_maps.store(),
        secrets: secrets.store(),
        queue: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("bootstrap_signer_queue"),
        ),
    });
    // Whatever changes, the one ConfigMap is signed again.
    let handlers = |ctx: &Arc<Ctx>| {
        let (a, u, d) = (ctx.clone(), ctx.clone(), ctx.clone());
        (
            move |_: bool| a.queue.add(KEY.to_string()),
            move || u.queue.add(KEY.to_string()),
            move || d.queue.add(KEY.to_string()),
        )
    };
    let (add, update, delete) = handlers(&ctx);
    config_maps.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |_: &Arc<ConfigMap>, initial| add(initial))
            .on_update(move |_, _: &Arc<ConfigMap>| update())
            .on_delete(move |_| delete()),
    );
    let (add, update, delete) = handlers(&ctx);
    secrets.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |_: &Arc<Secret>, initial| add(initial))
            .on_update(move |_, _: &Arc<Secret>| update())
            .on_delete(move |_| delete()),
    );
    config_maps.start();
    secrets.start();
    while !(config_maps.has_synced() && secrets.has_synced()) {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ctx.queue.add(KEY.to_string());
    // Tokens expire without an event: look again now and then, as upstream's resync does.
    let resync = ctx.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(60)).await;
            resync.queue.add(KEY.to_string());
        }
    });
    let controller = Controller::new("bootstrap_signer", ctx.queue.clone());
    controller
        .run(workers, move |_key: String| {
            let ctx = ctx.clone();
            async move { sign(&ctx).await }
        })
        .await;
}

async fn sign(ctx: &Ctx) -> Result<(), String> {
    let Some(cm) = ctx.config_maps.get(KEY) else {
        return Ok(());
    };
    let now = Timestamp::now();
    let tokens: BTreeMap<String, String> = ctx
        .secrets
        .list()
        .iter()
        .filter_map(|s| token_for_signing(s, now))
        .collect();
    let current = cm.data.clone().unwrap_or_default();
    let Some(data) = signed_data(&current, &tokens) else {
        return Ok(());
    };
    let mut updated = (*cm).clone();
    updated.data = Some(data);
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), CONFIG_MAP_NAMESPACE);
    tracing::info!(tokens = tokens.len(), "signing kube-public/cluster-info");
    match api
        .replace(CONFIG_MAP_NAME, &PostParams::default(), &updated)
        .await
    {
        Ok(_) => Ok(()),
        // A newer copy is on its way through the informer, which queues the key again.
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(format!("updating {KEY}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Vectors computed independently with Python's `hmac`/`base64` (header
    /// `{"alg":"HS256","kid":"<id>"}` without spaces, base64url without padding); the first is also
    /// `k8s.io/cluster-bootstrap`'s own test vector.
    #[test]
    fn detached_signatures_match_known_vectors() {
        assert_eq!(
            compute_detached_signature(
                "Hello from the other side. I must have called a thousand times.",
                "joshua",
                "my voice is my passcode"
            ),
            "eyJhbGciOiJIUzI1NiIsImtpZCI6Impvc2h1YSJ9..VShe2taLd-YTrmWuRkcL_8QTNDHYxQIEBsAYYiIj1_8"
        );
        let kubeconfig = "apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: Q0E=
    server: https://127.0.0.1:6443
  name: \"\"
contexts: null
current-context: \"\"
kind: Config
preferences: {}
users: null
";
        assert_eq!(
            compute_detached_signature(kubeconfig, "abcdef", "0123456789abcdef"),
            "eyJhbGciOiJIUzI1NiIsImtpZCI6ImFiY2RlZiJ9..DflwoSGteBaC-hOJA0EOB3CsabNSTjoXa2PJym0n9Dk"
        );
    }

    fn token(name: &str, fields: &[(&str, &str)]) -> Secret {
        let mut data = serde_json::Map::new();
        for (k, v) in fields {
            data.insert(
                k.to_string(),
                base64::engine::general_purpose::STANDARD.encode(v).into(),
            );
        }
        serde_json::from_value(json!({
            "metadata": {"namespace": "kube-system", "name": name},
            "type": SECRET_TYPE,
            "data": data,
        }))
        .unwrap()
    }

    #[test]
    fn which_tokens_sign() {
        let now: Timestamp = "2026-11-29T12:00:00Z".parse().unwrap();
        let good = [
            ("token-id", "abcdef"),
            ("token-secret", "0123456789abcdef"),
            ("usage-bootstrap-signing", "true"),
        ];
        assert_eq!(
            token_for_signing(&token("bootstrap-token-abcdef", &good), now),
            Some(("abcdef".into(), "0123456789abcdef".into()))
        );
        let with = |extra: (&str, &str)| {
            let mut f: Vec<(&str, &str)> = good.to_vec();
            f.retain(|(k, _)| *k != extra.0);
            f.push(extra);
            token_for_signing(&token("bootstrap-token-abcdef", &f), now)
        };
        assert!(with(("expiration", "2026-11-29T13:00:00Z")).is_some());
        assert!(with(("expiration", "2026-11-29T11:00:00Z")).is_none());
        assert!(with(("usage-bootstrap-signing", "false")).is_none());
        assert!(
            with(("token-id", "other0")).is_none(),
            "id differs from name"
        );
        assert!(with(("token-secret", "")).is_none());
        assert!(token_for_signing(&token("abcdef", &good), now).is_none());
        let mut opaque = token("bootstrap-token-abcdef", &good);
        opaque.type_ = Some("Opaque".into());
        assert!(token_for_signing(&opaque, now).is_none());
    }

    #[test]
    fn signatures_are_added_replaced_and_removed() {
        let mut cm = BTreeMap::from([
            (KUBECONFIG_KEY.to_string(), "config".to_string()),
            ("jws-kubeconfig-old000".to_string(), "stale".to_string()),
            ("other".to_string(), "kept".to_string()),
        ]);
        let tokens = BTreeMap::from([("abcdef".to_string(), "0123456789abcdef".to_string())]);
        let signed = signed_data(&cm, &tokens).expect("a change");
        assert_eq!(
            signed.keys().collect::<Vec<_>>(),
            ["jws-kubeconfig-abcdef", "kubeconfig", "other"]
        );
        assert_eq!(
            signed["jws-kubeconfig-abcdef"],
            compute_detached_signature("config", "abcdef", "0123456789abcdef")
        );
        // Signed already: nothing to do.
        assert_eq!(signed_data(&signed, &tokens), None);
        // The kubeconfig changed: signed again.
        let mut changed = signed.clone();
        changed.insert(KUBECONFIG_KEY.into(), "config 2".into());
        assert!(signed_data(&changed, &tokens).is_some());
        // No tokens: signatures go.
        assert_eq!(
            signed_data(&signed, &BTreeMap::new())
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            ["kubeconfig", "other"]
        );
        // Nothing to sign.
        cm.remove(KUBECONFIG_KEY);
        assert_eq!(signed_data(&cm, &tokens), None);
    }
}
