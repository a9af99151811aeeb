//! The pod as `rkube bench schedule` watches it: the name, the node it is bound to and its phase.
//!
//! The bench runs in the process it measures (its CPU per pod is the whole process's), and every
//! measured pod reaches its informer at least twice (created, bound). Decoding those events into
//! k8s-openapi's `Pod` builds every container, volume and managed-fields entry only to read three
//! strings, so the informer decodes this instead; unknown fields are skipped unbuilt.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use serde::{Deserialize, Deserializer};

#[derive(Clone, Debug, Deserialize)]
pub(super) struct WatchedPod {
    #[serde(deserialize_with = "slim_metadata")]
    pub metadata: ObjectMeta,
    #[serde(default)]
    pub spec: Option<WatchedSpec>,
    #[serde(default)]
    pub status: Option<WatchedStatus>,
}

#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct WatchedSpec {
    #[serde(default)]
    pub node_name: Option<String>,
}

#[derive(Clone, Debug, Default, Deserialize)]
pub(super) struct WatchedStatus {
    #[serde(default)]
    pub phase: Option<String>,
}

/// What the informer's store keys and resumes by (`managedFields` and the rest are skipped).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    namespace: Option<String>,
    #[serde(default)]
    uid: Option<String>,
    #[serde(default)]
    resource_version: Option<String>,
}

fn slim_metadata<'de, D: Deserializer<'de>>(d: D) -> Result<ObjectMeta, D::Error> {
    let m = SlimMeta::deserialize(d)?;
    Ok(ObjectMeta {
        name: m.name,
        namespace: m.namespace,
        uid: m.uid,
        resource_version: m.resource_version,
        ..Default::default()
    })
}

impl WatchedPod {
    pub fn name(&self) -> &str {
        self.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn bound(&self) -> bool {
        self.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
    }

    pub fn running(&self) -> bool {
        self.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
    }
}

impl k8s_openapi::Resource for WatchedPod {
    const API_VERSION: &'static str =
        <k8s_openapi::api::core::v1::Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <k8s_openapi::api::core::v1::Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <k8s_openapi::api::core::v1::Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str =
        <k8s_openapi::api::core::v1::Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str =
        <k8s_openapi::api::core::v1::Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::Metadata for WatchedPod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_name_node_and_phase_and_skips_the_rest() {
        let pod: WatchedPod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "resourceVersion": "7", "uid": "u",
                         "managedFields": [{"manager": "m", "fieldsV1": {"f:spec": {}}}]},
            "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "i"}]},
            "status": {"phase": "Running", "conditions": [{"type": "Ready"}]}
        }))
        .unwrap();
        assert_eq!(pod.name(), "p");
        assert_eq!(pod.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(pod.metadata.resource_version.as_deref(), Some("7"));
        assert!(pod.metadata.managed_fields.is_none());
        assert!(pod.bound() && pod.running());

        let pending: WatchedPod = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "q"}, "spec": {"nodeName": ""}}),
        )
        .unwrap();
        assert!(!pending.bound() && !pending.running());
    }
}
