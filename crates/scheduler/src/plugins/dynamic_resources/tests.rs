//! Cases after upstream's `dynamicresources_test.go` and `allocator_test.go`.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use serde_json::{json, Value};

use super::*;
use crate::framework::{CycleState, Handle};
use crate::plugins::testutil::{labeled_node, st_of};

pub(super) const DRIVER: &str = "gpu.example.com";

pub(super) fn class(name: &str, selector: Option<&str>) -> Value {
    let sels: Vec<Value> = selector
        .into_iter()
        .map(|e| json!({"cel": {"expression": e}}))
        .collect();
    json!({"kind": "DeviceClass", "metadata": {"name": name}, "spec": {"selectors": sels}})
}

/// A slice on `node` with devices `gpu-0..n` (model `a100` for even indices, `h100` for odd).
fn slice(node: &str, n: usize) -> Value {
    let devices: Vec<Value> = (0..n)
        .map(|i| {
            json!({"name": format!("gpu-{i}"),
                "attributes": {"index": {"int": i}, "model": {"string": if i % 2 == 0 {"a100"} else {"h100"}}},
                "capacity": {"memory": {"value": "16Gi"}}})
        })
        .collect();
    json!({"kind": "ResourceSlice", "metadata": {"name": format!("{node}-{DRIVER}")},
        "spec": {"driver": DRIVER, "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}})
}

pub(super) fn claim(name: &str, requests: Value) -> Value {
    json!({"kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}"), "resourceVersion": "1"},
        "spec": {"devices": {"requests": requests}}})
}

fn exactly(class: &str, count: i64) -> Value {
    json!([{"name": "req", "exactly": {"deviceClassName": class, "count": count}}])
}

pub(super) fn handle(objects: &[Value]) -> Handle {
    fn parse<T: serde::de::DeserializeOwned>(o: &Value) -> Arc<T> {
        let mut o = o.clone();
        o.as_object_mut().unwrap().remove("kind");
        Arc::new(serde_json::from_value(o).unwrap())
    }
    let h = Handle::default();
    for o in objects {
        match o["kind"].as_str() {
            Some("DeviceClass") => {
                h.listers.device_classes.upsert(parse::<DeviceClass>(o));
            }
            Some("ResourceSlice") => {
                h.listers.resource_slices.upsert(parse::<ResourceSlice>(o));
                h.listers.dra.slices_changed();
            }
            Some("ResourceClaim") => {
                let c = parse::<ResourceClaim>(o);
                h.listers.resource_claims.upsert(c.clone());
                h.listers.dra.on_claim(&tracker::claim_key(&c), Some(&c));
            }
            _ => panic!("unexpected {o}"),
        }
    }
    h
}

fn pod_with(name: &str, claims: Value, statuses: Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
        "spec": {"containers": [{"name": "c"}], "resourceClaims": claims},
        "status": {"resourceClaimStatuses": statuses}
    }))
    .unwrap()
}

pub(super) fn pod(name: &str, claim: &str) -> Pod {
    pod_with(
        name,
        json!([{"name": "gpu", "resourceClaimName": claim}]),
        json!([]),
    )
}

pub(super) fn nodes() -> Vec<crate::framework::NodeInfo> {
    vec![labeled_node("n1", json!({})), labeled_node("n2", json!({}))]
}

/// PreFilter then Filter on every node: the statuses by node name.
pub(super) fn run(pl: &DynamicResources, p: &Pod) -> (Status, Vec<(String, Status)>, CycleState) {
    let ns = nodes();
    let mut state = st_of(&ns);
    let (_, pre) = pl.pre_filter(&mut state, p);
    let mut out = Vec::new();
    if pre.is_success() {
        for n in &ns {
            out.push((n.name().to_string(), pl.filter(&state, p, n)));
        }
    }
    (pre, out, state)
}

fn base() -> Vec<Value> {
    vec![
        class("gpu", Some(&format!("device.driver == '{DRIVER}'"))),
        slice("n1", 2),
        slice("n2", 4),
    ]
}

#[test]
fn missing_claims_keep_the_pod_out() {
    let pl = DynamicResources::new(handle(&base()));
    let p = pod("p", "nope");
    assert_eq!(
        pl.pre_enqueue(&p),
        Status::UnschedulableAndUnresolvable(
            "resourceclaim.resource.k8s.io \"nope\" not found".into()
        )
    );
    let (pre, _, _) = run(&pl, &p);
    assert!(matches!(pre, Status::UnschedulableAndUnresolvable(_)));
    let templated = pod_with(
        "t",
        json!([{"name": "gpu", "resourceClaimTemplateName": "tmpl"}]),
        json!([]),
    );
    assert_eq!(
        pl.pre_enqueue(&templated),
        Status::UnschedulableAndUnresolvable("pod \"t/gpu\": ResourceClaim not created yet".into())
    );
    // A status naming no claim: nothing to allocate for that entry.
    let none = pod_with(
        "t",
        json!([{"name": "gpu", "resourceClaimTemplateName": "tmpl"}]),
        json!([{"name": "gpu"}]),
    );
    assert_eq!(pl.pre_enqueue(&none), Status::Success);
    let (pre, _, _) = run(&pl, &none);
    assert_eq!(pre, Status::Skip);
    // A generated claim the pod does not own is refused.
    let mut objs = base();
    objs.push(claim("t-gpu", exactly("gpu", 1)));
    let pl = DynamicResources::new(handle(&objs));
    let owned = pod_with(
        "t",
        json!([{"name": "gpu", "resourceClaimTemplateName": "tmpl"}]),
        json!([{"name": "gpu", "resourceClaimName": "t-gpu"}]),
    );
    assert_eq!(
        pl.pre_enqueue(&owned),
        Status::UnschedulableAndUnresolvable(
            "ResourceClaim default/t-gpu was not created for pod default/t (pod is not owner)"
                .into()
        )
    );
}

#[test]
fn pods_without_claims_skip() {
    let pl = DynamicResources::new(handle(&base()));
    let p = pod_with("p", json!([]), json!([]));
    assert_eq!(run(&pl, &p).0, Status::Skip);
}

#[test]
fn a_claim_is_allocated_on_nodes_with_enough_devices() {
    let mut objs = base();
    objs.push(claim("one", exactly("gpu", 1)));
    objs.push(claim("three", exactly("gpu", 3)));
    objs.push(claim("nine", exactly("gpu", 9)));
    let pl = DynamicResources::new(handle(&objs));
    let (_, out, _) = run(&pl, &pod("p", "one"));
    assert!(out.iter().all(|(_, s)| s.is_success()), "{out:?}");
    let (_, out, _) = run(&pl, &pod("p", "three"));
    assert_eq!(
        out[0].1,
        Status::UnschedulableAndUnresolvable(ERR_CANNOT_ALLOCATE.into())
    );
    assert!(out[1].1.is_success());
    let (_, out, _) = run(&pl, &pod("p", "nine"));
    assert!(out.iter().all(|(_, s)| !s.is_success()));
}

#[test]
fn missing_class_and_bad_selectors() {
    let mut objs = base();
    objs.push(claim("c", exactly("nope", 1)));
    objs.push(claim(
        "bad",
        json!([{"name": "req", "exactly": {"deviceClassName": "gpu",
            "selectors": [{"cel": {"expression": "device.driver =="}}]}}]),
    ));
    objs.push(claim("huge", exactly("gpu", 33)));
    let pl = DynamicResources::new(handle(&objs));
    assert_eq!(
        run(&pl, &pod("p", "c")).0,
        Status::UnschedulableAndUnresolvable(
            "request req: device class nope does not exist".into()
        )
    );
    assert!(
        matches!(run(&pl, &pod("p", "bad")).0, Status::Error(e) if e.contains("CEL compile error"))
    );
    assert!(
        matches!(run(&pl, &pod("p", "huge")).0, Status::Error(e) if e.contains("exceeds the claim limit of 32"))
    );
}

#[test]
fn selectors_of_class_and_request() {
    let mut objs = base();
    objs.push(class(
        "h100",
        Some("device.attributes['gpu.example.com'].model == 'h100'"),
    ));
    objs.push(claim(
        "big",
        json!([{"name": "req", "exactly": {"deviceClassName": "h100", "count": 2,
            "selectors": [{"cel": {"expression":
                "device.capacity['gpu.example.com'].memory.compareTo(quantity('8Gi')) >= 0"}}]}}]),
    ));
    objs.push(claim(
        "err",
        json!([{"name": "req", "exactly": {"deviceClassName": "gpu",
            "selectors": [{"cel": {"expression": "device.attributes['gpu.example.com'].nope"}}]}}]),
    ));
    let pl = DynamicResources::new(handle(&objs));
    let (_, out, _) = run(&pl, &pod("p", "big"));
    // n1 has one h100 (gpu-1), n2 two (gpu-1, gpu-3).
    assert!(!out[0].1.is_success());
    assert!(out[1].1.is_success());
    let (_, out, _) = run(&pl, &pod("p", "err"));
    assert!(
        matches!(&out[0].1, Status::Error(e) if e.contains("CEL runtime error")),
        "{out:?}"
    );
}

#[test]
fn all_mode_first_available_and_constraints() {
    let mut objs = base();
    objs.push(claim(
        "all",
        json!([{"name": "req", "exactly": {"deviceClassName": "gpu", "allocationMode": "All"}}]),
    ));
    objs.push(claim(
        "fa",
        json!([{"name": "req", "firstAvailable": [
            {"name": "four", "deviceClassName": "gpu", "count": 4},
            {"name": "two", "deviceClassName": "gpu", "count": 2}]}]),
    ));
    let pl = DynamicResources::new(handle(&objs));
    let (_, out, mut state) = run(&pl, &pod("p", "all"));
    assert!(out.iter().all(|(_, s)| s.is_success()));
    let r = pl.reserve(&mut state, &pod("p", "all"), "n2");
    assert!(r.is_success(), "{r:?}");
    let s = state.read::<State>(STATE_KEY).unwrap();
    let results = s.allocations[0]
        .as_ref()
        .unwrap()
        .devices
        .as_ref()
        .unwrap()
        .results
        .as_ref()
        .unwrap();
    assert_eq!(results.len(), 4);
    pl.unreserve(&mut state, &pod("p", "all"), "n2");

    let (_, out, mut state) = run(&pl, &pod("q", "fa"));
    assert!(out[0].1.is_success() && out[1].1.is_success());
    assert!(pl.reserve(&mut state, &pod("q", "fa"), "n1").is_success());
    let s = state.read::<State>(STATE_KEY).unwrap();
    let a = s.allocations[0].as_ref().unwrap();
    let r = &a.devices.as_ref().unwrap().results.as_ref().unwrap()[0];
    assert_eq!(r.request, "req/two");
    assert_eq!(
        a.node_selector.as_ref().unwrap().node_selector_terms[0]
            .match_fields
            .as_ref()
            .unwrap()[0]
            .values,
        Some(vec!["n1".to_string()])
    );

    // matchAttribute: two devices of one model; distinctAttribute: two models.
    let mut objs = base();
    let reqs = json!([{"name": "a", "exactly": {"deviceClassName": "gpu"}},
        {"name": "b", "exactly": {"deviceClassName": "gpu"}}]);
    let mut same = claim("same", reqs.clone());
    same["spec"]["devices"]["constraints"] = json!([{"matchAttribute": "gpu.example.com/model"}]);
    let mut distinct = claim("distinct", reqs);
    distinct["spec"]["devices"]["constraints"] = json!([{"distinctAttribute": "model"}]);
    objs.push(same);
    objs.push(distinct);
    let pl = DynamicResources::new(handle(&objs));
    for name in ["same", "distinct"] {
        let p = pod("p", name);
        let (_, out, mut state) = run(&pl, &p);
        // n1 has gpu-0 (a100) and gpu-1 (h100): no two of one model.
        assert_eq!(out[0].1.is_success(), name == "distinct", "{name}");
        assert!(out[1].1.is_success(), "{name}");
        assert!(pl.reserve(&mut state, &p, "n2").is_success());
        let s = state.read::<State>(STATE_KEY).unwrap();
        let res = s.allocations[0]
            .as_ref()
            .unwrap()
            .devices
            .as_ref()
            .unwrap()
            .results
            .clone()
            .unwrap();
        let devs: Vec<&str> = res.iter().map(|r| r.device.as_str()).collect();
        let want = if name == "same" {
            ["gpu-0", "gpu-2"]
        } else {
            ["gpu-0", "gpu-1"]
        };
        assert_eq!(devs, want, "{name}");
        pl.unreserve(&mut state, &p, "n2");
    }
}

#[test]
fn reserved_devices_are_not_handed_out_again() {
    let mut objs = base();
    objs.push(claim("a", exactly("gpu", 2)));
    objs.push(claim("b", exactly("gpu", 1)));
    let pl = DynamicResources::new(handle(&objs));
    let pa = pod("pa", "a");
    let (_, _, mut state) = run(&pl, &pa);
    assert!(pl.reserve(&mut state, &pa, "n1").is_success());
    // n1's two devices are taken by the pending allocation of claim a.
    let (_, out, _) = run(&pl, &pod("pb", "b"));
    assert!(!out[0].1.is_success());
    assert!(out[1].1.is_success());
    // Another pod of claim a waits for the allocation to be written.
    let (pre, _, _) = run(&pl, &pod("pa2", "a"));
    assert_eq!(
        pre,
        Status::UnschedulableAndUnresolvable(
            "resource claim default/a is in the process of being allocated".into()
        )
    );
    pl.unreserve(&mut state, &pa, "n1");
    let (_, out, _) = run(&pl, &pod("pb", "b"));
    assert!(out[0].1.is_success());
}

#[test]
fn allocated_claims_are_used_where_they_are() {
    let mut objs = base();
    let mut c = claim("done", exactly("gpu", 1));
    c["status"] = json!({"allocation": {
        "devices": {"results": [{"request": "req", "driver": DRIVER, "pool": "n2", "device": "gpu-0"}]},
        "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
            {"key": "metadata.name", "operator": "In", "values": ["n2"]}]}]}},
        "reservedFor": [{"resource": "pods", "name": "other", "uid": "uid-other"}]});
    objs.push(c);
    objs.push(claim("new", exactly("gpu", 4)));
    let pl = DynamicResources::new(handle(&objs));
    let (pre, out, _) = run(&pl, &pod("p", "done"));
    assert!(pre.is_success());
    assert_eq!(
        out[0].1,
        Status::UnschedulableAndUnresolvable(ERR_NOT_AVAILABLE.into())
    );
    assert!(out[1].1.is_success());
    // n2's gpu-0 is taken, so four devices fit nowhere.
    let (_, out, _) = run(&pl, &pod("q", "new"));
    assert!(out.iter().all(|(_, s)| !s.is_success()), "{out:?}");
}

#[test]
fn admin_access_and_taints() {
    let mut objs = base();
    let mut s = slice("n1", 1);
    s["spec"]["devices"][0]["taints"] =
        json!([{"key": "broken", "value": "yes", "effect": "NoSchedule"}]);
    objs[1] = s;
    let mut taken = claim("taken", exactly("gpu", 1));
    taken["status"] = json!({"allocation": {"devices": {"results": [
        {"request": "req", "driver": DRIVER, "pool": "n2", "device": "gpu-0"},
        {"request": "req", "driver": DRIVER, "pool": "n2", "device": "gpu-1"},
        {"request": "req", "driver": DRIVER, "pool": "n2", "device": "gpu-2"},
        {"request": "req", "driver": DRIVER, "pool": "n2", "device": "gpu-3"}]}}});
    objs.push(taken);
    objs.push(claim("plain", exactly("gpu", 1)));
    objs.push(claim(
        "admin",
        json!([{"name": "req", "exactly": {"deviceClassName": "gpu", "adminAccess": true}}]),
    ));
    objs.push(claim(
        "tolerant",
        json!([{"name": "req", "exactly": {"deviceClassName": "gpu",
            "tolerations": [{"key": "broken", "operator": "Exists", "effect": "NoSchedule"}]}}]),
    ));
    let pl = DynamicResources::new(handle(&objs));
    let (_, out, _) = run(&pl, &pod("p", "plain"));
    assert!(out.iter().all(|(_, s)| !s.is_success()), "{out:?}");
    let (_, out, _) = run(&pl, &pod("p", "admin"));
    assert!(!out[0].1.is_success() && out[1].1.is_success(), "{out:?}");
    let (_, out, _) = run(&pl, &pod("p", "tolerant"));
    assert!(out[0].1.is_success() && !out[1].1.is_success(), "{out:?}");
}

#[test]
fn toleration_matching() {
    use k8s_openapi::api::resource::v1::{DeviceTaint, DeviceToleration};
    let taint = DeviceTaint {
        key: "k".into(),
        value: Some("v".into()),
        effect: "NoExecute".into(),
        ..Default::default()
    };
    let t = |key: Option<&str>, op: Option<&str>, value: Option<&str>, effect: Option<&str>| {
        DeviceToleration {
            key: key.map(Into::into),
            operator: op.map(Into::into),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            toleration_seconds: None,
        }
    };
    assert!(allocator::tolerates(
        &t(Some("k"), None, Some("v"), None),
        &taint
    ));
    assert!(!allocator::tolerates(
        &t(Some("k"), None, Some("w"), None),
        &taint
    ));
    assert!(allocator::tolerates(
        &t(None, Some("Exists"), None, None),
        &taint
    ));
    assert!(!allocator::tolerates(
        &t(Some("k"), Some("Exists"), None, Some("NoSchedule")),
        &taint
    ));
}

#[test]
fn incomplete_pools_and_generations() {
    let mut old = slice("n1", 2);
    old["spec"]["pool"]["generation"] = json!(0);
    old["metadata"]["name"] = json!("old");
    let mut part = slice("n2", 1);
    part["spec"]["pool"]["resourceSliceCount"] = json!(2);
    let idx = SliceIndex::build(
        [old, slice("n1", 1), part]
            .iter()
            .map(|o| {
                let mut o = o.clone();
                o.as_object_mut().unwrap().remove("kind");
                Arc::new(serde_json::from_value::<ResourceSlice>(o).unwrap())
            })
            .collect(),
        &tracker::Tracker::default(),
    );
    let n1 = labeled_node("n1", json!({}));
    assert_eq!(idx.devices(&n1).len(), 1, "only generation 1 counts");
    assert!(idx
        .incomplete
        .contains(&(DRIVER.to_string(), "n2".to_string())));
}

#[test]
fn post_filter_deallocates_a_claim_reserved_for_nobody() {
    let mut objs = base();
    let allocated = |name: &str, reserved: Value| {
        let mut c = claim(name, exactly("gpu", 1));
        c["status"] = json!({"allocation": {
            "devices": {"results": [{"request": "req", "driver": DRIVER, "pool": "n9", "device": "gpu-0"}]},
            "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [
                {"key": "metadata.name", "operator": "In", "values": ["n9"]}]}]}},
            "reservedFor": reserved});
        c
    };
    objs.push(allocated("free", json!([])));
    objs.push(allocated(
        "held",
        json!([{"resource": "pods", "name": "o", "uid": "uid-o"}]),
    ));
    let pl = DynamicResources::new(handle(&objs));
    let fw = Framework::new(
        "test",
        Handle::default(),
        Arc::new(crate::queue::Nominator::default()),
    );
    let statuses = NodeToStatus::new();
    for (claim_name, want) in [
        ("free", MSG_DEALLOCATED),
        ("held", MSG_STILL_NOT_SCHEDULABLE),
    ] {
        let p = pod("p", claim_name);
        let (_, out, state) = run(&pl, &p);
        assert!(out.iter().all(|(_, s)| !s.is_success()), "{out:?}");
        let (_, st) = pl.post_filter(&state, &p, &statuses, &fw);
        assert_eq!(st, Status::Unschedulable(want.into()), "{claim_name}");
    }
    // A pod without claims (PreFilter skipped), as upstream words it in every FailedScheduling.
    let p: Pod = serde_json::from_value(json!({"metadata": {"name": "x", "namespace": "default"},
        "spec": {"containers": [{"name": "c"}]}}))
    .unwrap();
    let (_, _, state) = run(&pl, &p);
    let (_, st) = pl.post_filter(&state, &p, &statuses, &fw);
    assert_eq!(st, Status::Unschedulable(MSG_NO_CLAIMS.into()));
    // What the deallocation writes: no allocation, no reservations, no device status.
    let c: ResourceClaim = {
        let mut v = allocated("free", json!([]));
        v.as_object_mut().unwrap().remove("kind");
        serde_json::from_value(v).unwrap()
    };
    assert!(deallocatable(&c, "uid-p"));
    let d = deallocated(&c);
    let st = d.status.unwrap();
    assert!(st.allocation.is_none() && st.reserved_for.is_none() && st.devices.is_none());
}

#[test]
fn score_prefers_earlier_subrequests_and_reserve_takes_filters_allocation() {
    let mut objs = base();
    // n1 has 2 devices, n2 has 4: "four" fits n2 only, "two" fits both.
    objs.push(claim(
        "fa",
        json!([{"name": "req", "firstAvailable": [
            {"name": "four", "deviceClassName": "gpu", "count": 4},
            {"name": "two", "deviceClassName": "gpu", "count": 2}]}]),
    ));
    objs.push(claim("plain", exactly("gpu", 1)));
    let pl = DynamicResources::new(handle(&objs));
    let p = pod("p", "fa");
    let (_, out, mut state) = run(&pl, &p);
    assert!(out.iter().all(|(_, s)| s.is_success()));
    let ns: Vec<Arc<crate::framework::NodeInfo>> = nodes().into_iter().map(Arc::new).collect();
    assert!(pl.pre_score(&mut state, &p, &ns).is_success());
    let mut scores: Vec<i64> = ns.iter().map(|n| pl.score(&state, &p, n)).collect();
    assert_eq!(scores, [7, 8]);
    pl.normalize(&state, &p, &mut scores);
    assert_eq!(scores, [87, 100]);
    assert!(pl.reserve(&mut state, &p, "n2").is_success());
    let s = state.read::<State>(STATE_KEY).unwrap();
    let results = s.allocations[0].as_ref().unwrap().devices.as_ref().unwrap();
    assert_eq!(results.results.as_ref().unwrap().len(), 4);
    pl.unreserve(&mut state, &p, "n2");
    // Nothing to rank without firstAvailable.
    let p = pod("q", "plain");
    let (_, _, mut state) = run(&pl, &p);
    assert_eq!(pl.pre_score(&mut state, &p, &ns), Status::Skip);
}

#[test]
fn reserve_searches_the_chosen_node_again_when_filter_kept_no_picks() {
    let mut objs = base();
    objs.push(claim("one", exactly("gpu", 1)));
    objs.push(claim("other", exactly("gpu", 1)));
    let pl = DynamicResources::new(handle(&objs));
    let p = pod("p", "one");
    let (_, out, mut state) = run(&pl, &p);
    assert!(out.iter().all(|(_, s)| s.is_success()));
    // Nothing ranks the picks: Filter kept none.
    let s = state.read::<State>(STATE_KEY).unwrap();
    assert!(!s.ranked);
    assert!(s.node_allocations.lock().unwrap().is_empty());
    // n1's first device got taken after Filter (another pod's claim, allocated meanwhile):
    // Reserve's search sees it and picks the other one.
    let mut taken: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": "other", "namespace": "default", "uid": "uid-other", "resourceVersion": "2"},
        "spec": {"devices": {"requests": [{"name": "req", "exactly": {"deviceClassName": "gpu"}}]}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "req", "driver": DRIVER, "pool": "n1", "device": "gpu-0"}]}}}
    }))
    .unwrap();
    taken.metadata.uid = Some("uid-other".into());
    let taken = Arc::new(taken);
    pl.handle.listers.resource_claims.upsert(taken.clone());
    pl.handle
        .listers
        .dra
        .on_claim("default/other", Some(&taken));
    assert!(pl.reserve(&mut state, &p, "n1").is_success());
    let s = state.read::<State>(STATE_KEY).unwrap();
    let results = s.allocations[0].as_ref().unwrap().devices.as_ref().unwrap();
    let got: Vec<&str> = results
        .results
        .iter()
        .flatten()
        .map(|r| r.device.as_str())
        .collect();
    assert_eq!(got, ["gpu-1"]);
    // With n1 full, Reserve there fails instead of handing out a taken device.
    pl.unreserve(&mut state, &p, "n1");
    let (_, _, mut state) = run(&pl, &p);
    let mut both = (*taken).clone();
    both.status
        .as_mut()
        .unwrap()
        .allocation
        .as_mut()
        .unwrap()
        .devices
        .as_mut()
        .unwrap()
        .results = Some(
        ["gpu-0", "gpu-1"]
            .iter()
            .map(|d| {
                serde_json::from_value(json!(
                        {"request": "req", "driver": DRIVER, "pool": "n1", "device": d}))
                .unwrap()
            })
            .collect(),
    );
    both.metadata.resource_version = Some("3".into());
    let both = Arc::new(both);
    pl.handle.listers.resource_claims.upsert(both.clone());
    pl.handle.listers.dra.on_claim("default/other", Some(&both));
    assert_eq!(
        pl.reserve(&mut state, &p, "n1"),
        Status::Unschedulable(ERR_CANNOT_ALLOCATE.into())
    );
}

/// A kube client whose API server answers every claim write with the claim it was sent, after
/// a pause, counting the requests in flight.
fn counting_client(
    in_flight: Arc<std::sync::atomic::AtomicUsize>,
    peak: Arc<std::sync::atomic::AtomicUsize>,
) -> kube::Client {
    use std::sync::atomic::Ordering;
    let svc = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let (in_flight, peak) = (in_flight.clone(), peak.clone());
        async move {
            let now = in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            peak.fetch_max(now, Ordering::SeqCst);
            let body = http_body_util_collect(req.into_body()).await;
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            in_flight.fetch_sub(1, Ordering::SeqCst);
            Ok::<_, std::convert::Infallible>(
                http::Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(body))
                    .unwrap(),
            )
        }
    });
    kube::Client::new(svc, "default")
}

async fn http_body_util_collect(body: kube::client::Body) -> Vec<u8> {
    use http_body_util::BodyExt;
    body.collect()
        .await
        .map(|c| c.to_bytes().to_vec())
        .unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pre_bind_writes_of_a_bounded_number_of_pods_at_once() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let pods = MAX_IN_FLIGHT * 3;
    let mut objs = vec![class("gpu", None), slice("n1", pods)];
    for i in 0..pods {
        let mut c = claim(&format!("c{i}"), exactly("gpu", 1));
        // With the finalizer already there, each pod's PreBind is one status write.
        c["metadata"]["finalizers"] = json!([FINALIZER]);
        objs.push(c);
    }
    let (in_flight, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut h = handle(&objs);
    h.client = Some(counting_client(in_flight.clone(), peak.clone()));
    let pl = Arc::new(DynamicResources::new(h));
    let ns = vec![labeled_node("n1", json!({}))];
    let mut states = Vec::new();
    for i in 0..pods {
        let p = pod(&format!("p{i}"), &format!("c{i}"));
        let mut state = st_of(&ns);
        assert!(pl.pre_filter(&mut state, &p).1.is_success());
        assert!(pl.filter(&state, &p, &ns[0]).is_success());
        assert!(pl.reserve(&mut state, &p, "n1").is_success(), "{i}");
        states.push((p, state));
    }
    let tasks: Vec<_> = states
        .into_iter()
        .map(|(p, state)| {
            let pl = pl.clone();
            tokio::spawn(async move { pl.pre_bind(&state, &p, "n1").await })
        })
        .collect();
    for t in tasks {
        let st = t.await.unwrap();
        assert!(st.is_success(), "{st:?}");
    }
    let peak = peak.load(Ordering::SeqCst);
    assert!(peak <= MAX_IN_FLIGHT, "{peak} writes in flight");
    assert!(peak > 1, "the writes of several pods overlap");
}
