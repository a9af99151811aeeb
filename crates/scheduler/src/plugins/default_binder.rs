//! DefaultBinder (upstream `defaultbinder`): binds the pod with a `pods/binding` POST.

use futures::future::BoxFuture;
use futures::FutureExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::Api;
use serde_json::json;

use crate::framework::{BindPlugin, CycleState, Plugin, Status};

pub struct DefaultBinder {
    pub client: Option<kube::Client>,
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
