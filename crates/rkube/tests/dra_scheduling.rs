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
//!
//! And, on a second server with two simulated nodes and slices the test publishes, the 1.36
//! features on by default:
//! - consumable capacity: two pods each asking 4Gi of a device with 8Gi of shareable memory land
//!   on it with distinct shareIDs, a third stays Pending with upstream's message;
//! - partitionable devices: a partition consuming a shared counter blocks an overlapping one
//!   until its pod is deleted and its claim deallocated;
//! - device taints: a tainted device is skipped unless the claim tolerates the taint.

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

/// A DeviceClass for `driver`.
fn class_for(driver: &str) -> DeviceClass {
    serde_json::from_value(json!({"metadata": {"name": driver},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == '{driver}'")}}]}}))
    .unwrap()
}

/// A ResourceSlice of `driver` on `node` (pool = node) with `spec` merged in.
fn node_slice(
    name: &str,
    driver: &str,
    node: &str,
    count: i64,
    spec: serde_json::Value,
) -> ResourceSlice {
    let mut s = json!({"metadata": {"name": name}, "spec": {"driver": driver, "nodeName": node,
        "pool": {"name": node, "generation": 1, "resourceSliceCount": count}}});
    for (k, v) in spec.as_object().unwrap() {
        s["spec"][k] = v.clone();
    }
    serde_json::from_value(s).unwrap()
}

/// A claim with one request of the class `driver`, `exactly` merged in.
fn claim_of(name: &str, driver: &str, exactly: serde_json::Value) -> ResourceClaim {
    let mut e = json!({"deviceClassName": driver});
    for (k, v) in exactly.as_object().unwrap() {
        e[k] = v.clone();
    }
    serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": e}]}}}))
    .unwrap()
}

fn results_of(
    c: &ResourceClaim,
) -> Vec<k8s_openapi::api::resource::v1::DeviceRequestAllocationResult> {
    c.status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.clone())
        .unwrap_or_default()
}

async fn pending_message(pods: &Api<Pod>, name: &str) -> String {
    eventually(
        &format!("{name}'s PodScheduled=False"),
        Duration::from_secs(30),
        || async {
            let p = pods.get(name).await.map_err(|e| e.to_string())?;
            assert!(node_of(&p).is_none(), "{name} was scheduled");
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| {
                    c.iter()
                        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                })
                .and_then(|c| c.message.clone())
                .ok_or_else(|| "no condition".to_string())
        },
    )
    .await
}

#[test]
fn shared_partitioned_and_tainted_devices() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "2"]);
    support::runtime().block_on(async {
        let client = c.client().await;
        let slices: Api<ResourceSlice> = Api::all(client.clone());
        let classes: Api<DeviceClass> = Api::all(client.clone());
        let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), "default");
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let pp = PostParams::default();
        let nodes: Api<Node> = Api::all(client.clone());
        let names = eventually("two nodes", Duration::from_secs(30), || async {
            let mut n: Vec<String> = nodes.list(&ListParams::default()).await.map_err(|e| e.to_string())?
                .items.into_iter().filter_map(|n| n.metadata.name).collect();
            n.sort();
            (n.len() == 2).then_some(n).ok_or("nodes".to_string())
        })
        .await;
        let a = names[0].clone();
        let (shared, part, taint) = ("shared.example.com", "part.example.com", "taint.example.com");
        for d in [shared, part, taint] {
            classes.create(&pp, &class_for(d)).await.unwrap();
        }
        slices.create(&pp, &node_slice("a-shared", shared, &a, 1, json!({"devices": [
            {"name": "gpu-0", "allowMultipleAllocations": true,
                "capacity": {"memory": {"value": "8Gi"}}}]}))).await.unwrap();
        slices.create(&pp, &node_slice("a-part-counters", part, &a, 2, json!({"sharedCounters": [
            {"name": "gpu-0", "counters": {"memory": {"value": "8Gi"}}}]}))).await.unwrap();
        let partition = |name: &str, mem: &str| {
            json!({"name": name, "attributes": {"part": {"string": name}},
            "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": mem}}}]})
        };
        slices.create(&pp, &node_slice("a-part-devices", part, &a, 2, json!({"devices": [
            partition("half-0", "4Gi"), partition("whole", "8Gi")]}))).await.unwrap();
        slices.create(&pp, &node_slice("a-taint", taint, &a, 1, json!({"devices": [
            {"name": "gpu-0", "taints": [{"key": "broken", "value": "yes", "effect": "NoSchedule"}]}]})))
            .await.unwrap();

        // Consumable capacity: 4Gi + 4Gi of 8Gi, then nothing left.
        let four = json!({"capacity": {"requests": {"memory": "4Gi"}}});
        for i in 1..=3 {
            claims.create(&pp, &claim_of(&format!("mem-{i}"), shared, four.clone())).await.unwrap();
        }
        pods.create(&pp, &pod("mem-1", "mem-1")).await.unwrap();
        pods.create(&pp, &pod("mem-2", "mem-2")).await.unwrap();
        assert_eq!(bound(&pods, "mem-1").await, a);
        assert_eq!(bound(&pods, "mem-2").await, a);
        let mut share_ids = Vec::new();
        for name in ["mem-1", "mem-2"] {
            let r = results_of(&claims.get(name).await.unwrap());
            assert_eq!((r.len(), r[0].device.as_str(), r[0].pool.as_str()), (1, "gpu-0", a.as_str()));
            let consumed = r[0].consumed_capacity.as_ref().expect("consumedCapacity");
            assert_eq!(consumed.get("memory").map(|q| q.0.as_str()), Some("4Gi"));
            share_ids.push(r[0].share_id.clone().expect("shareID"));
        }
        assert_ne!(share_ids[0], share_ids[1]);
        pods.create(&pp, &pod("mem-3", "mem-3")).await.unwrap();
        let message = pending_message(&pods, "mem-3").await;
        assert!(message.starts_with("0/2 nodes are available: 2 cannot allocate all claims."), "{message}");

        // Partitions: half-0 (4Gi of the counter) blocks whole (8Gi) until it is released.
        let kind = |d: &str| json!({"selectors": [{"cel": {"expression": format!("device.attributes['{part}'].part == '{d}'")}}]});
        claims.create(&pp, &claim_of("half", part, kind("half-0"))).await.unwrap();
        claims.create(&pp, &claim_of("whole", part, kind("whole"))).await.unwrap();
        pods.create(&pp, &pod("half", "half")).await.unwrap();
        assert_eq!(bound(&pods, "half").await, a);
        pods.create(&pp, &pod("whole", "whole")).await.unwrap();
        let message = pending_message(&pods, "whole").await;
        assert!(message.starts_with("0/2 nodes are available: 2 cannot allocate all claims."), "{message}");
        pods.delete("half", &kube::api::DeleteParams::default().grace_period(0)).await.unwrap();
        assert_eq!(bound(&pods, "whole").await, a);
        assert_eq!(results_of(&claims.get("whole").await.unwrap())[0].device, "whole");

        // Taints: the NoSchedule device only for the claim that tolerates it.
        claims.create(&pp, &claim_of("untainted", taint, json!({}))).await.unwrap();
        claims.create(&pp, &claim_of("tolerant", taint, json!({"tolerations": [
            {"key": "broken", "operator": "Exists", "effect": "NoSchedule"}]}))).await.unwrap();
        pods.create(&pp, &pod("untainted", "untainted")).await.unwrap();
        pods.create(&pp, &pod("tolerant", "tolerant")).await.unwrap();
        assert_eq!(bound(&pods, "tolerant").await, a);
        let r = results_of(&claims.get("tolerant").await.unwrap());
        assert_eq!(r[0].tolerations.as_ref().map(Vec::len), Some(1), "the tolerations are copied");
        let message = pending_message(&pods, "untainted").await;
        assert!(message.starts_with("0/2 nodes are available: 2 cannot allocate all claims."), "{message}");
    });
}
