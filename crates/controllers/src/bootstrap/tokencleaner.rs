//! The token cleaner (upstream `pkg/controller/bootstrap/tokencleaner.go`,
//! kube-controller-manager's `token-cleaner-controller`, off by default there as here): watches the
//! `bootstrap.kubernetes.io/token` Secrets of `kube-system` and deletes each once the time in its
//! `expiration` key has passed (an expiration that does not parse counts as passed, as upstream),
//! requeuing the others for their expiry. The delete carries a UID precondition, so a Secret made
//! again under the same name is not taken with it.

use std::sync::Arc;
use std::time::Duration;

use client::controller::Controller;
use client::informer::{split_key, EventHandlerFuncs, InformerConfig, SharedInformer};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{DeleteParams, Preconditions};
use kube::Api;

/// The namespace bootstrap tokens live in.
pub const NAMESPACE: &str = "kube-system";
/// The type of bootstrap token Secrets.
pub const SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";

/// What a token's `expiration` says at `now` (upstream `GetExpiration`).
#[derive(Debug, PartialEq, Eq)]
pub enum Expiry {
    /// No expiration: kept for ever.
    Never,
    /// Expires after this long.
    In(Duration),
    Expired,
}

pub fn expiry(secret: &Secret, now: Timestamp) -> Expiry {
    let Some(raw) = secret.data.as_ref().and_then(|d| d.get("expiration")) else {
        return Expiry::Never;
    };
    let text = String::from_utf8_lossy(&raw.0);
    if text.is_empty() {
        return Expiry::Never;
    }
    let Ok(at) = text.parse::<Timestamp>() else {
        return Expiry::Expired;
    };
    match Duration::try_from(at.duration_since(now)) {
        Ok(left) if !left.is_zero() => Expiry::In(left),
        _ => Expiry::Expired,
    }
}

struct Ctx {
    client: kube::Client,
    secrets: Arc<client::informer::Store<Secret>>,
    queue: RateLimitingQueue<String>,
}

pub async fn run(client: kube::Client, workers: usize) {
    // An informer of its own: only kube-system's token Secrets, not every Secret of the cluster.
    let informer = SharedInformer::from_api(
        Api::<Secret>::namespaced(client.clone(), NAMESPACE),
        InformerConfig::new().fields(format!("type={SECRET_TYPE}")),
    );
    let ctx = Arc::new(Ctx {
        client,
        secrets: informer.store(),
        queue: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("token_cleaner"),
        ),
    });
    let (c1, c2) = (ctx.clone(), ctx.clone());
    informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |s: &Arc<Secret>, _| c1.queue.add(client::informer::object_key(&**s)))
            .on_update(move |_, s: &Arc<Secret>| c2.queue.add(client::informer::object_key(&**s))),
    );
    informer.start();
    while !informer.has_synced() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let controller = Controller::new("token_cleaner", ctx.queue.clone());
    controller
        .run(workers, move |key: String| {
            let ctx = ctx.clone();
            async move { process(&ctx, &key).await }
        })
        .await;
}

async fn process(ctx: &Ctx, key: &str) -> Result<(), String> {
    let Some(secret) = ctx.secrets.get(key) else {
        return Ok(());
    };
    if secret.type_.as_deref() != Some(SECRET_TYPE) || secret.metadata.deletion_timestamp.is_some()
    {
        return Ok(());
    }
    match expiry(&secret, Timestamp::now()) {
        Expiry::Never => return Ok(()),
        Expiry::In(left) => {
            ctx.queue.add_after(key.to_string(), left);
            return Ok(());
        }
        Expiry::Expired => {}
    }
    let (ns, name) = split_key(key);
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), ns.unwrap_or(NAMESPACE));
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: secret.metadata.uid.clone(),
            resource_version: None,
        }),
        ..Default::default()
    };
    tracing::info!(secret = key, "deleting expired bootstrap token");
    match api.delete(name, &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(format!("deleting {key}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn token(expiration: Option<&str>) -> Secret {
        let mut s = json!({
            "metadata": {"namespace": NAMESPACE, "name": "bootstrap-token-abcdef"},
            "type": SECRET_TYPE,
            "stringData": {},
            "data": {"token-id": "YWJjZGVm"}
        });
        if let Some(e) = expiration {
            use base64::Engine;
            s["data"]["expiration"] = json!(base64::engine::general_purpose::STANDARD.encode(e));
        }
        serde_json::from_value(s).unwrap()
    }

    #[test]
    fn expiry_of_a_token() {
        let now: Timestamp = "2026-11-29T12:00:00Z".parse().unwrap();
        assert_eq!(expiry(&token(None), now), Expiry::Never);
        assert_eq!(expiry(&token(Some("")), now), Expiry::Never);
        assert_eq!(
            expiry(&token(Some("2026-11-29T12:00:30Z")), now),
            Expiry::In(Duration::from_secs(30))
        );
        assert_eq!(
            expiry(&token(Some("2026-11-29T13:00:30+01:00")), now),
            Expiry::In(Duration::from_secs(30))
        );
        assert_eq!(
            expiry(&token(Some("2026-11-29T12:00:00Z")), now),
            Expiry::Expired
        );
        assert_eq!(
            expiry(&token(Some("2026-11-29T11:00:00Z")), now),
            Expiry::Expired
        );
        assert_eq!(expiry(&token(Some("next week")), now), Expiry::Expired);
    }
}
