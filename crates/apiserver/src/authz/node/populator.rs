//! Feeds the node graph from the watch caches (upstream `graph_populator.go`, which uses informers):
//! pods, persistent volumes, VolumeAttachments and ResourceSlices. Each source is loaded before
//! [`start`] returns, so a node is never refused for an object the server already holds.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::{json, Value};

use super::graph;
use crate::watch_cache::{CacheEvent, EventType};
use crate::ApiServer;

#[derive(Clone, Copy, Debug)]
enum Source {
    Pods,
    Volumes,
    Attachments,
    Slices,
}

const SOURCES: [(Source, &str, &str); 4] = [
    (Source::Pods, "", "pods"),
    (Source::Volumes, "", "persistentvolumes"),
    (Source::Attachments, "storage.k8s.io", "volumeattachments"),
    (Source::Slices, "resource.k8s.io", "resourceslices"),
];

/// Starts following the sources, when the server runs the Node authorizer.
pub fn start(api: &Arc<ApiServer>) {
    if !api.authorizer.node_enabled() {
        return;
    }
    let snapshot = api.registry.snapshot();
    for (source, group, plural) in SOURCES {
        // The storage prefix of any served version (they share one).
        let Some(storage) = snapshot
            .resources
            .values()
            .find(|r| r.group == group && r.plural == plural)
            .map(|r| r.storage.clone())
        else {
            continue;
        };
        let cache = api.caches.ensure(&storage, group, plural);
        let (reset_api, apply_api) = (api.clone(), api.clone());
        crate::watch_cache::follow(
            &api.caches,
            cache,
            move || {
                reset_api
                    .authorizer
                    .update_node_graph(|graph| match source {
                        Source::Pods => graph.clear_pods(),
                        Source::Volumes => graph.clear_volumes(),
                        Source::Attachments => graph.clear_attachments(),
                        Source::Slices => graph.clear_slices(),
                    })
            },
            move |event, event_type| apply(&apply_api, source, event, event_type),
        );
    }
}

fn apply(api: &ApiServer, source: Source, event: &CacheEvent, event_type: EventType) {
    let json = &event.object.json;
    if let Source::Pods = source {
        // Most pod writes are status updates of bound pods, which change nothing here: decide that
        // from the node name and claim statuses alone, without building the spec.
        let Ok(header) = serde_json::from_slice::<PodHeader>(json) else {
            return;
        };
        let (namespace, name) = (&header.metadata.namespace, &header.metadata.name);
        if event_type == EventType::Deleted {
            api.authorizer
                .update_node_graph(|graph| graph.set_pod(namespace, name, None));
            return;
        }
        let claims = graph::claim_statuses(
            &header.status.resource_claim_statuses,
            &header.status.extended_resource_claim_status,
        );
        let unchanged = api.authorizer.read_node_graph(|graph| {
            graph.pod_unchanged(namespace, name, &header.spec.node_name, &claims)
        });
        if unchanged {
            return;
        }
    }
    let Ok(mut view) = serde_json::from_slice::<ObjectView>(json) else {
        return;
    };
    let metadata = std::mem::take(&mut view.metadata);
    let (namespace, name) = (metadata.namespace.as_str(), metadata.name.as_str());
    let deleted = event_type == EventType::Deleted;
    // Built before taking the graph's lock, moving the spec (a pod's largest part) rather than copying it.
    let pod = (matches!(source, Source::Pods) && !deleted).then(|| view.take_pod());
    api.authorizer.update_node_graph(|graph| match source {
        Source::Pods => graph.set_pod(namespace, name, pod.as_ref()),
        Source::Volumes => {
            let pv = (!deleted).then(|| json!({"spec": view.spec}));
            graph.set_volume(name, pv.as_ref())
        }
        Source::Attachments => {
            graph.set_attachment(name, (!deleted).then_some(()).and(view.node_name()))
        }
        Source::Slices => graph.set_slice(name, (!deleted).then_some(()).and(view.node_name())),
    });
}

/// The parts of an object the graph reads. Deserializing only these skips the rest (pods' status
/// and managed fields are most of their bytes) without building it: this runs for every pod write.
#[derive(Deserialize)]
struct ObjectView {
    #[serde(default)]
    metadata: MetaView,
    #[serde(default)]
    spec: Value,
    #[serde(default)]
    status: StatusView,
}

/// A pod's name, node and claim statuses; everything else is skipped unbuilt.
#[derive(Deserialize)]
struct PodHeader {
    #[serde(default)]
    metadata: MetaView,
    #[serde(default)]
    spec: NodeNameView,
    #[serde(default)]
    status: StatusView,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct NodeNameView {
    #[serde(default)]
    node_name: String,
}

#[derive(Default, Deserialize)]
struct MetaView {
    #[serde(default)]
    namespace: String,
    #[serde(default)]
    name: String,
}

#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusView {
    #[serde(default)]
    resource_claim_statuses: Value,
    #[serde(default)]
    extended_resource_claim_status: Value,
}

impl ObjectView {
    /// The pod as the graph reads it; `json!` would serialize a copy of each part it names.
    fn take_pod(&mut self) -> Value {
        let status = serde_json::Map::from_iter([
            (
                "resourceClaimStatuses".to_string(),
                self.status.resource_claim_statuses.take(),
            ),
            (
                "extendedResourceClaimStatus".to_string(),
                self.status.extended_resource_claim_status.take(),
            ),
        ]);
        let pod = serde_json::Map::from_iter([
            ("spec".to_string(), self.spec.take()),
            ("status".to_string(), Value::Object(status)),
        ]);
        Value::Object(pod)
    }

    fn node_name(&self) -> Option<&str> {
        self.spec["nodeName"].as_str()
    }
}
