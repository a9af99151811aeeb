//! Client certificate rotation (upstream client-go `util/certificate/certificate_manager.go`): at a
//! random point between 70% and 90% of the current certificate's lifetime the kubelet asks for a new
//! one with its current credentials (the `selfnodeclient` approval path), stores it and switches its
//! client to it.
//!
//! The kubelet's tasks all hold clones of one `kube::Client`; a client built with
//! [`RotatingClient::client`] sends each request through whichever inner client is current, so a swap
//! reaches them all without rebuilding anything.

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::task::{Context, Poll};
use std::time::Duration;

use futures::future::BoxFuture;
use http::{Request, Response};
use kube::client::Body;

use super::csr;
use super::store::{CertStore, Validity};

/// When to ask for the next certificate: `jitter` (in [0, 1]) picks the point between 70% and 90%
/// of the lifetime, as upstream's `nextRotationDeadline`.
pub fn rotation_deadline(validity: Validity, jitter: f64) -> i64 {
    let total = (validity.not_after - validity.not_before).max(0) as f64;
    let fraction = 0.7 + 0.2 * jitter.clamp(0.0, 1.0);
    validity.not_before + (total * fraction).round() as i64
}

/// The current inner client, shared by every clone of the outer one.
#[derive(Clone)]
pub struct RotatingClient {
    current: Arc<RwLock<kube::Client>>,
}

impl RotatingClient {
    pub fn new(client: kube::Client) -> RotatingClient {
        RotatingClient {
            current: Arc::new(RwLock::new(client)),
        }
    }

    /// A client that follows the rotations.
    pub fn client(&self) -> kube::Client {
        let namespace = self.inner().default_namespace().to_string();
        kube::Client::new(self.clone(), namespace)
    }

    fn inner(&self) -> kube::Client {
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn swap(&self, client: kube::Client) {
        *self.current.write().unwrap_or_else(|e| e.into_inner()) = client;
    }
}

impl tower::Service<Request<Body>> for RotatingClient {
    type Response = Response<Body>;
    type Error = kube::Error;
    type Future = BoxFuture<'static, Result<Response<Body>, kube::Error>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let client = self.inner();
        Box::pin(async move { client.send(request).await })
    }
}

/// What rotation needs: the kubeconfig that names the current certificate, the store, the node.
pub struct Rotation {
    pub kubeconfig: PathBuf,
    pub store: CertStore,
    pub node_name: String,
    pub client: RotatingClient,
}

impl Rotation {
    /// Asks for a new certificate with the current one, stores it and switches the client to it.
    pub async fn rotate(&self) -> Result<Validity, String> {
        let pair = csr::request_certificate(
            &self.client.inner(),
            &self.node_name,
            "csr-",
            None,
            csr::DEFAULT_WAIT,
        )
        .await
        .map_err(|e| e.to_string())?;
        self.store.update(&pair).map_err(|e| e.to_string())?;
        let client = client::kubeconfig::client_from_file(&self.kubeconfig).await?;
        self.client.swap(client);
        super::store::validity(&pair.cert_pem)
            .ok_or_else(|| "the new certificate does not parse".into())
    }

    /// Rotates at each deadline until the task is dropped. A failed attempt is retried after 30 s
    /// (upstream backs off up to 5 minutes; the deadline is far ahead of expiry either way).
    pub async fn run(self) {
        loop {
            let Some((_, validity)) = self.store.current() else {
                tracing::warn!("no current client certificate: rotation stops");
                return;
            };
            let deadline = rotation_deadline(validity, rand::random::<f64>());
            let now = jiff::Timestamp::now().as_second();
            if deadline > now {
                tokio::time::sleep(Duration::from_secs((deadline - now) as u64)).await;
            }
            match self.rotate().await {
                Ok(v) => tracing::info!(not_after = v.not_after, "rotated the client certificate"),
                Err(e) => {
                    tracing::warn!("client certificate rotation failed: {e}");
                    tokio::time::sleep(Duration::from_secs(30)).await;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deadlines_fall_between_70_and_90_percent() {
        let v = Validity {
            not_before: 1_000,
            not_after: 11_000,
        };
        assert_eq!(rotation_deadline(v, 0.0), 8_000);
        assert_eq!(rotation_deadline(v, 1.0), 10_000);
        assert_eq!(rotation_deadline(v, 0.5), 9_000);
        assert_eq!(rotation_deadline(v, 7.0), 10_000, "clamped");
    }
}
