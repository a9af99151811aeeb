//! DefaultBinder (upstream `defaultbinder`): binds the pod with a `pods/binding` POST. At most
//! [`MAX_IN_FLIGHT`] bindings are in flight: the kube client speaks HTTP/1.1, so every concurrent
//! request holds a connection of its own, and a scheduler starting with thousands of pending pods
//! would otherwise open (and TLS-handshake) thousands of connections at once. Upstream's client-go
//! multiplexes HTTP/2 streams and is rate-limited by its QPS instead.

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::Api;
use serde_json::json;

use std::sync::Arc;

use tokio::sync::Semaphore;

use crate::framework::{BindPlugin, CycleState, Plugin, Status};

/// Binding requests in flight at once.
pub const MAX_IN_FLIGHT: usize = 32;

pub struct DefaultBinder {
    client: Option<kube::Client>,
    in_flight: Arc<Semaphore>,
}

impl DefaultBinder {
    pub fn new(client: Option<kube::Client>) -> DefaultBinder {
        DefaultBinder {
            client,
            in_flight: Arc::new(Semaphore::new(MAX_IN_FLIGHT)),
        }
    }
}

impl Plugin for DefaultBinder {
    fn name(&self) -> &'static str {
        "DefaultBinder"
    }
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        Some(self)
    }
}

/// The Binding object upstream posts: the pod's name, namespace and uid, and the node.
pub fn binding(pod: &Pod, node: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": pod.metadata.name, "namespace": pod.metadata.namespace, "uid": pod.metadata.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    })
}

impl BindPlugin for DefaultBinder {
    fn bind<'a>(
        &'a self,
        _state: &'a CycleState,
        pod: &'a Pod,
        node: &'a str,
    ) -> BoxFuture<'a, Status> {
        async move {
            let Some(client) = self.client.clone() else {
                return Status::Error("no API client to bind with".into());
            };
            let ns = pod.metadata.namespace.as_deref().unwrap_or("");
            let name = pod.metadata.name.as_deref().unwrap_or("");
            let Ok(_slot) = self.in_flight.acquire().await else {
                return Status::Error("binder closed".into());
            };
            match Api::<Pod>::namespaced(client, ns)
                .create_subresource::<_, serde_json::Value>(
                    "binding",
                    name,
                    &PostParams::default(),
                    &binding(pod, node),
                )
                .await
            {
                Ok(_) => Status::Success,
                Err(e) => Status::Error(e.to_string()),
            }
        }
        .boxed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::pod;

    #[test]
    fn binding_names_pod_and_node() {
        let mut p = pod("web", json!({}));
        p.metadata.uid = Some("u1".into());
        let b = binding(&p, "n1");
        assert_eq!(
            b["metadata"],
            json!({"name": "web", "namespace": "default", "uid": "u1"})
        );
        assert_eq!(b["target"]["name"], "n1");
        assert_eq!(b["kind"], "Binding");
    }
}
