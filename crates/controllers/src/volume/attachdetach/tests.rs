//! The controller's handlers, populator, startup and attachment check on caches filled by hand
//! (no server: nothing here writes).

use std::sync::Arc;

use client::events::EventBroadcaster;
use client::informer::{index_func, Store};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};
use serde_json::{json, Value};

use super::actual::AttachState;
use super::*;

const V: &str = "kubernetes.io/csi/csi.example.com^h1";

fn object<K: serde::de::DeserializeOwned>(v: Value) -> Arc<K> {
    Arc::new(serde_json::from_value(v).unwrap())
}

fn ctx() -> Ctx {
    // Never used to connect: the tests only exercise what reads the caches.
    let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
    let pods = Store::new();
    pods.add_indexer(
        POD_PVC_INDEX,
        index_func(|p: &Pod| {
            let ns = p.metadata.namespace.clone().unwrap_or_default();
            crate::volume::pod_claims(p)
                .into_iter()
                .map(|(c, _)| format!("{ns}/{c}"))
                .collect()
        }),
    )
    .unwrap();
    pods.add_indexer(
        crate::POD_NODE_INDEX,
        index_func(|p: &Pod| vec![pod_node(p).to_string()]),
    )
    .unwrap();
    Ctx {
        client: kube::Client::try_from(config).unwrap(),
        pods: Arc::new(pods),
        nodes: Arc::new(Store::new()),
        claims: Arc::new(Store::new()),
        volumes: Arc::new(Store::new()),
        drivers: Arc::new(Store::new()),
        attachments: Arc::new(Store::new()),
        state: Mutex::new(State::default()),
        recorder: EventBroadcaster::new().new_recorder(CONTROLLER_NAME, ""),
        options: Options::default(),
        attachments_changed: Notify::new(),
        populate_now: Notify::new(),
    }
}

fn node(name: &str, managed: bool, status: Value) -> Arc<Node> {
    let annotations = if managed {
        json!({volumes::ANN_CONTROLLER_MANAGED_ATTACH_DETACH: "true"})
    } else {
        json!({})
    };
    object(json!({"metadata": {"name": name, "annotations": annotations}, "status": status}))
}

fn pod(name: &str, uid: &str, node: &str) -> Arc<Pod> {
    object(
        json!({"metadata": {"name": name, "namespace": "ns", "uid": uid},
        "spec": {"nodeName": node, "containers": [],
                 "volumes": [{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]}}),
    )
}

fn claim(bound: bool) -> Arc<PersistentVolumeClaim> {
    let status = if bound { "Bound" } else { "Pending" };
    object(
        json!({"metadata": {"name": "data", "namespace": "ns", "uid": "c1"},
        "spec": {"volumeName": "pv1"}, "status": {"phase": status}}),
    )
}

fn volume() -> Arc<PersistentVolume> {
    object(json!({"metadata": {"name": "pv1"},
        "spec": {"csi": {"driver": "csi.example.com", "volumeHandle": "h1"},
                 "accessModes": ["ReadWriteOnce"],
                 "claimRef": {"name": "data", "namespace": "ns", "uid": "c1"}}}))
}

fn wanted(ctx: &Ctx, node: &str) -> Vec<String> {
    ctx.lock().desired.volumes_on_node(node)
}

#[tokio::test]
async fn pods_claims_and_nodes_fill_the_desired_state() {
    let ctx = ctx();
    let p = pod("web", "u1", "n1");
    ctx.pods.upsert(p.clone());
    ctx.claims.upsert(claim(false));
    ctx.volumes.upsert(volume());

    // The node is not managed yet: the pod is ignored.
    ctx.pod_changed(&p);
    assert!(!ctx.lock().desired.node_exists("n1"));
    ctx.node_changed(&node("n1", false, json!({})), true);
    assert!(
        !ctx.lock().desired.node_exists("n1"),
        "no opt-in annotation"
    );
    // Opting in takes the pods already there; the claim is not bound yet.
    ctx.node_changed(&node("n1", true, json!({})), false);
    assert!(wanted(&ctx, "n1").is_empty());
    // Binding the claim completes the pod's volume.
    ctx.claims.upsert(claim(true));
    ctx.claim_changed(&claim(true));
    assert_eq!(wanted(&ctx, "n1"), vec![V]);

    // A terminated pod gives it up.
    let mut done = (*p).clone();
    done.status = Some(serde_json::from_value(json!({"phase": "Succeeded"})).unwrap());
    let done = Arc::new(done);
    ctx.pods.upsert(done.clone());
    ctx.pod_changed(&done);
    assert!(wanted(&ctx, "n1").is_empty());
    // A running one again, then its deletion.
    ctx.pods.upsert(p.clone());
    ctx.pod_changed(&p);
    assert_eq!(wanted(&ctx, "n1"), vec![V]);
    ctx.pod_deleted(&p);
    assert!(wanted(&ctx, "n1").is_empty());
}

#[tokio::test]
async fn the_populator_drops_what_handlers_could_not() {
    let ctx = ctx();
    ctx.node_changed(&node("n1", true, json!({})), true);
    ctx.claims.upsert(claim(true));
    ctx.volumes.upsert(volume());
    let p = pod("web", "u1", "n1");
    ctx.pods.upsert(p.clone());
    ctx.pod_changed(&p);
    assert_eq!(wanted(&ctx, "n1"), vec![V]);

    // The claim goes first: the pod's deletion alone cannot name the volume any more...
    ctx.claims.delete("ns/data");
    ctx.pods.delete("ns/web");
    ctx.pod_deleted(&p);
    assert_eq!(wanted(&ctx, "n1"), vec![V]);
    // ...the populator finds the pod gone.
    ctx.find_and_remove_deleted_pods();
    assert!(wanted(&ctx, "n1").is_empty());

    // A pod replaced under the same name (another UID) is dropped, the new one added.
    ctx.claims.upsert(claim(true));
    ctx.pod_changed(&p);
    let replacement = pod("web", "u2", "n1");
    ctx.pods.upsert(replacement);
    ctx.find_and_remove_deleted_pods();
    assert!(wanted(&ctx, "n1").is_empty());
    ctx.find_and_add_active_pods();
    let pods = ctx.lock().desired.pods();
    assert_eq!(
        pods.iter().map(|e| e.uid.as_str()).collect::<Vec<_>>(),
        vec!["u2"]
    );

    // The driver stops needing attachment: the volume is no longer wanted.
    ctx.drivers.upsert(object::<CSIDriver>(
        json!({"metadata": {"name": "csi.example.com"},
        "spec": {"attachRequired": false}}),
    ));
    ctx.find_and_remove_deleted_pods();
    assert!(wanted(&ctx, "n1").is_empty());
    ctx.find_and_add_active_pods();
    assert!(wanted(&ctx, "n1").is_empty(), "and not added back");
}

#[tokio::test]
async fn startup_reads_back_attachments() {
    let ctx = ctx();
    ctx.nodes.upsert(node(
        "n1",
        true,
        json!({"volumesAttached": [{"name": V, "devicePath": ""},
                                   {"name": "kubernetes.io/csi/csi.example.com^gone", "devicePath": ""}],
               "volumesInUse": [V]}),
    ));
    ctx.nodes.upsert(node("n2", true, json!({})));
    ctx.claims.upsert(claim(true));
    ctx.volumes.upsert(volume());
    ctx.pods.upsert(pod("web", "u1", "n1"));
    // A VolumeAttachment to n2 that no node status lists: uncertain.
    ctx.attachments.upsert(object::<VolumeAttachment>(json!({
        "metadata": {"name": volumes::attachment_name("h1", "csi.example.com", "n2")},
        "spec": {"attacher": "csi.example.com", "nodeName": "n2",
                 "source": {"persistentVolumeName": "pv1"}}})));

    ctx.populate_actual_state();
    ctx.populate_desired_state();
    let state = ctx.lock();
    assert_eq!(state.actual.attach_state(V, "n1"), AttachState::Attached);
    assert_eq!(state.actual.attach_state(V, "n2"), AttachState::Uncertain);
    assert!(state.desired.node_exists("n2"));
    assert_eq!(state.desired.volumes_on_node("n1"), vec![V]);
    let attachments = state.actual.attachments();
    let n1 = attachments
        .iter()
        .find(|a| a.volume == V && a.node == "n1")
        .unwrap();
    assert!(n1.mounted_by_node);
    assert_eq!(
        n1.spec.as_ref().map(|s| s.name.as_str()),
        Some("pv1"),
        "the pod named the volume's spec"
    );
    let gone = attachments
        .iter()
        .find(|a| a.volume.ends_with("^gone"))
        .unwrap();
    assert_eq!(gone.spec, None);
}

#[tokio::test]
async fn attachments_without_an_attached_volume_attachment_are_forgotten() {
    let ctx = ctx();
    let spec = VolumeSpec::from_persistent_volume(&volume()).unwrap();
    {
        let mut state = ctx.lock();
        state.actual.mark_attached(V, Some(spec.clone()), "n1", "");
        state.actual.mark_attached(V, Some(spec.clone()), "n2", "");
        state
            .actual
            .mark_attached("kubernetes.io/csi/x^y", None, "n1", "");
    }
    ctx.attachments.upsert(object::<VolumeAttachment>(json!({
        "metadata": {"name": spec.attachment_name("n1")},
        "spec": {"attacher": "csi.example.com", "nodeName": "n1", "source": {}},
        "status": {"attached": true}})));
    ctx.sync_states();
    let state = ctx.lock();
    assert_eq!(state.actual.attach_state(V, "n1"), AttachState::Attached);
    assert_eq!(state.actual.attach_state(V, "n2"), AttachState::Detached);
    assert_eq!(
        state.actual.attach_state("kubernetes.io/csi/x^y", "n1"),
        AttachState::Attached,
        "no spec: not checked (as upstream)"
    );
}

#[tokio::test]
async fn node_updates_set_what_is_mounted_and_deletions_keep_wanted_nodes() {
    let ctx = ctx();
    ctx.node_changed(&node("n1", true, json!({})), true);
    ctx.lock().actual.mark_attached(V, None, "n1", "");
    ctx.lock().actual.take_report("n1");
    ctx.node_changed(&node("n1", true, json!({"volumesInUse": [V]})), false);
    assert!(ctx.lock().actual.attachments()[0].mounted_by_node);
    ctx.node_changed(&node("n1", true, json!({})), false);
    assert!(!ctx.lock().actual.attachments()[0].mounted_by_node);
    // A re-created Node object gets its volumesAttached written again.
    ctx.node_changed(&node("n1", true, json!({})), true);
    assert_eq!(ctx.lock().actual.nodes_needing_status_update(), vec!["n1"]);

    // Deleting a node whose pods still want volumes keeps it managed (upstream refuses).
    ctx.claims.upsert(claim(true));
    ctx.volumes.upsert(volume());
    ctx.pod_changed(&pod("web", "u1", "n1"));
    ctx.node_deleted(&node("n1", true, json!({})));
    assert!(ctx.lock().desired.node_exists("n1"));
    ctx.pod_deleted(&pod("web", "u1", "n1"));
    ctx.node_deleted(&node("n1", true, json!({})));
    assert!(!ctx.lock().desired.node_exists("n1"));
}

/// The controller manager boxes `run` as a `BoxFuture`, which must be `Send` (checked when this
/// compiles; never called).
#[allow(dead_code)]
fn run_is_send(client: kube::Client, factory: Arc<client::informer::SharedInformerFactory>) {
    fn send<T: Send>(_: &T) {}
    let future = run(client, &factory, Options::default());
    send(&future);
}
