//! The scheduler's DynamicResources plugin in `rkube server --disable-kubelet` with three
//! simulated nodes publishing two devices each (`--sim-devices gpu.example.com=2`), one server for
//! all cases:
//! - a pod with a pre-created claim for one device (a CEL request selector on an attribute) is
//!   scheduled; the claim shows the allocation (that device, in the node's pool, a node selector for
//!   the node), the pod in `reservedFor` and the delete-protection finalizer;
//! - a pod whose claim asks for more devices than any node has stays Pending with upstream's
//!   message in its PodScheduled condition;
//! - two pods sharing one claim land on the claim's node, both in `reservedFor`;
//! - a pod whose claim does not exist yet waits, and is scheduled once the claim is created;
//! - PostFilter: a claim allocated on one node and reserved for nobody, used by a pod that may
//!   only run on another node, is deallocated (the pod's FailedScheduling event says so) and then
//!   allocated again where the pod goes.

mod support;

use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use kube::api::{ListParams, PostParams};
use kube::Api;
use serde_json::json;
use support::{Backend, Cluster};

const DRIVER: &str = "gpu.example.com";

async fn eventually<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + limit;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(e) if Instant::now() >= deadline => panic!("{what} not within {limit:?}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    }
}

fn claim(name: &str, count: i64, selector: Option<&str>) -> ResourceClaim {
    let mut exactly = json!({"deviceClassName": DRIVER, "count": count});
    if let Some(s) = selector {
        exactly["selectors"] = json!([{"cel": {"expression": s}}]);
    }
    serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}))
    .unwrap()
}

fn pod(name: &str, claim: &str) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": {
        "containers": [{"name": "c", "image": "pause", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}]}}))
    .unwrap()
}

fn node_of(p: &Pod) -> Option<String> {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty())
}

async fn bound(pods: &Api<Pod>, name: &str) -> String {
    eventually(
        &format!("pod {name} bound"),
        Duration::from_secs(30),
        || async {
            let p = pods.get(name).await.map_err(|e| e.to_string())?;
            node_of(&p).ok_or_else(|| format!("{:?}", p.status))
        },
    )
    .await
}

fn reserved_uids(c: &ResourceClaim) -> Vec<String> {
    c.status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .map(|r| r.iter().map(|r| r.uid.clone()).collect())
        .unwrap_or_default()
}

#[test]
fn dynamic_resources_schedule_claims() {
    let c = Cluster::start_all(
        Backend::Sqlite,
        &["--sim-nodes", "3", "--sim-devices", &format!("{DRIVER}=2")],
    );
    support::runtime().block_on(async {
        let client = c.client().await;
        let slices: Api<ResourceSlice> = Api::all(client.clone());
        let classes: Api<DeviceClass> = Api::all(client.clone());
        let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), "default");
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let pp = PostParams::default();

        eventually("three slices", Duration::from_secs(30), || async {
            let n = slices.list(&ListParams::default()).await.map_err(|e| e.to_string())?.items.len();
            (n == 3).then_some(()).ok_or(format!("{n} slices"))
        })
        .await;
        let class: DeviceClass = serde_json::from_value(json!({"metadata": {"name": DRIVER},
            "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{DRIVER}'")}}]}}))
        .unwrap();
        classes.create(&pp, &class).await.unwrap();

        // PostFilter: "stale" holds a device of node a, reserved for nobody; its pod may only
        // run on node b.
        let nodes: Api<Node> = Api::all(client.clone());
        let mut names: Vec<String> = nodes.list(&ListParams::default()).await.unwrap().items
            .into_iter().filter_map(|n| n.metadata.name).collect();
        names.sort();
        let (a, b) = (names[0].clone(), names[1].clone());
        let mut stale = claim("stale", 1, None);
        stale.metadata.finalizers = Some(vec!["resource.kubernetes.io/delete-protection".into()]);
        let mut stale = claims.create(&pp, &stale).await.unwrap();
        stale.status = Some(serde_json::from_value(json!({"allocation": {
            "devices": {"results": [{"request": "gpu", "driver": DRIVER, "pool": a, "device": "gpu-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": [a]}]}]}}}))
        .unwrap());
        claims.replace_status("stale", &pp, &stale).await.unwrap();
        let mut moved = pod("moved", "stale");
        moved.spec.as_mut().unwrap().node_selector =
            Some([("kubernetes.io/hostname".to_string(), b.clone())].into());
        pods.create(&pp, &moved).await.unwrap();

        // One device chosen by attribute.
        claims
            .create(&pp, &claim("one", 1, Some(&format!("device.attributes['{DRIVER}'].index == 1"))))
            .await
            .unwrap();
        let p1 = pods.create(&pp, &pod("p1", "one")).await.unwrap();
        // More devices than any node has.
        claims.create(&pp, &claim("many", 3, None)).await.unwrap();
        pods.create(&pp, &pod("big", "many")).await.unwrap();
        // Two pods of one claim.
        claims.create(&pp, &claim("shared", 1, None)).await.unwrap();
        let s1 = pods.create(&pp, &pod("s1", "shared")).await.unwrap();
        let s2 = pods.create(&pp, &pod("s2", "shared")).await.unwrap();
        // A claim created after its pod.
        pods.create(&pp, &pod("late", "later")).await.unwrap();

        let node = bound(&pods, "p1").await;
        let one = claims.get("one").await.unwrap();
        let alloc = one.status.as_ref().unwrap().allocation.as_ref().expect("allocated");
        let results = alloc.devices.as_ref().unwrap().results.as_ref().unwrap();
        assert_eq!(results.len(), 1);
        assert_eq!(
            (results[0].request.as_str(), results[0].driver.as_str(), results[0].pool.as_str(), results[0].device.as_str()),
            ("gpu", DRIVER, node.as_str(), "gpu-1")
        );
        let term = &alloc.node_selector.as_ref().unwrap().node_selector_terms[0];
        assert_eq!(term.match_fields.as_ref().unwrap()[0].values, Some(vec![node.clone()]));
        assert_eq!(reserved_uids(&one), vec![p1.metadata.uid.clone().unwrap()]);
        assert!(one
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "resource.kubernetes.io/delete-protection"));

        let n1 = bound(&pods, "s1").await;
        let n2 = bound(&pods, "s2").await;
        assert_eq!(n1, n2, "pods of one claim share its node");
        let shared = claims.get("shared").await.unwrap();
        let mut uids = reserved_uids(&shared);
        uids.sort();
        let mut want = vec![s1.metadata.uid.clone().unwrap(), s2.metadata.uid.clone().unwrap()];
        want.sort();
        assert_eq!(uids, want);
        let results = shared.status.as_ref().unwrap().allocation.as_ref().unwrap()
            .devices.as_ref().unwrap().results.as_ref().unwrap().clone();
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].pool, n1);

        // The claim appears: the waiting pod is scheduled.
        claims.create(&pp, &claim("later", 1, None)).await.unwrap();
        bound(&pods, "late").await;

        // PostFilter deallocated "stale"; the next attempt allocated it on b.
        assert_eq!(bound(&pods, "moved").await, b);
        let stale = claims.get("stale").await.unwrap();
        let results = stale.status.as_ref().unwrap().allocation.as_ref().expect("allocated again")
            .devices.as_ref().unwrap().results.as_ref().unwrap().clone();
        assert_eq!(results.len(), 1);
        assert_eq!(results[0].pool, b, "allocated on the pod's node");
        let events: Api<Event> = Api::namespaced(client.clone(), "default");
        eventually("moved's FailedScheduling event naming the deallocation", Duration::from_secs(30), || async {
            let list = events.list(&ListParams::default()).await.map_err(|e| e.to_string())?;
            let msgs: Vec<String> = list.items.iter()
                .filter(|e| e.involved_object.name.as_deref() == Some("moved")
                    && e.reason.as_deref() == Some("FailedScheduling"))
                .filter_map(|e| e.message.clone())
                .collect();
            msgs.iter()
                .any(|m| m.contains("deallocation of ResourceClaim completed"))
                .then_some(())
                .ok_or_else(|| format!("{msgs:?}"))
        })
        .await;

        let message = eventually("big's PodScheduled=False", Duration::from_secs(30), || async {
            let p = pods.get("big").await.map_err(|e| e.to_string())?;
            assert!(node_of(&p).is_none(), "big was scheduled");
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled" && c.status == "False"))
                .and_then(|c| c.message.clone())
                .ok_or_else(|| "no condition".to_string())
        })
        .await;
        assert!(
            message.starts_with("0/3 nodes are available: 3 cannot allocate all claims."),
            "{message}"
        );
        assert!(claims.get("many").await.unwrap().status.and_then(|s| s.allocation).is_none());
    });
}
