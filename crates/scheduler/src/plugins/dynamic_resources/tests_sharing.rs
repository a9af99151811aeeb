//! Consumable capacity, shared counters and device taints in the allocator (upstream's
//! `allocator_test.go` cases for DRAConsumableCapacity, DRAPartitionableDevices and
//! DRADeviceTaints, all on by default in 1.36).

use serde_json::{json, Value};

use super::tests::{claim, class, handle, pod, run, DRIVER};
use super::*;

/// A slice on `node` with the given devices.
fn slice_with(node: &str, devices: Value) -> Value {
    json!({"kind": "ResourceSlice", "metadata": {"name": format!("{node}-{DRIVER}")},
        "spec": {"driver": DRIVER, "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}})
}

fn gpu_class() -> Value {
    class("gpu", Some(&format!("device.driver == '{DRIVER}'")))
}

/// One request of the class for `count` devices, asking `mem` of memory.
fn mem_request(mem: &str, count: i64) -> Value {
    json!([{"name": "req", "exactly": {"deviceClassName": "gpu", "count": count,
        "capacity": {"requests": {"memory": mem}}}}])
}

fn ok(out: &[(String, Status)]) -> Vec<bool> {
    out.iter().map(|(_, s)| s.is_success()).collect()
}

/// Reserve on `node` and what it allocated: (device, shareID, consumed memory).
fn reserve(
    pl: &DynamicResources,
    name: &str,
    claim: &str,
    node: &str,
) -> Vec<(String, Option<String>, Option<String>)> {
    let p = pod(name, claim);
    let (_, out, mut state) = run(pl, &p);
    assert!(
        out.iter().any(|(n, s)| n == node && s.is_success()),
        "{out:?}"
    );
    assert!(pl.reserve(&mut state, &p, node).is_success());
    let s = state.read::<State>(STATE_KEY).unwrap();
    let results = s.allocations[0].as_ref().unwrap().devices.as_ref().unwrap();
    results
        .results
        .iter()
        .flatten()
        .map(|r| {
            let mem = r
                .consumed_capacity
                .as_ref()
                .and_then(|c| c.get("memory"))
                .map(|q| q.0.clone());
            (r.device.clone(), r.share_id.clone(), mem)
        })
        .collect()
}

#[test]
fn shareable_devices_take_claims_while_capacity_lasts() {
    let shared = json!([{"name": "gpu-0", "allowMultipleAllocations": true,
        "capacity": {"memory": {"value": "8Gi"}}}]);
    let mut objs = vec![
        gpu_class(),
        slice_with("n1", shared),
        slice_with(
            "n2",
            json!([{"name": "gpu-0", "capacity": {"memory": {"value": "16Gi"}}}]),
        ),
    ];
    for c in ["c1", "c2", "c3"] {
        objs.push(claim(c, mem_request("4Gi", 1)));
    }
    objs.push(claim("big", mem_request("20Gi", 1)));
    objs.push(claim(
        "whole",
        json!([{"name": "req", "exactly": {"deviceClassName": "gpu"}}]),
    ));
    let pl = DynamicResources::new(handle(&objs));

    // More than any device has: nowhere, whether shareable or not.
    let (_, out, _) = run(&pl, &pod("p", "big"));
    assert_eq!(ok(&out), [false, false]);

    let a = reserve(&pl, "p1", "c1", "n1");
    let b = reserve(&pl, "p2", "c2", "n1");
    assert_eq!(a.len(), 1);
    assert_eq!((a[0].0.as_str(), a[0].2.as_deref()), ("gpu-0", Some("4Gi")));
    assert_eq!((b[0].0.as_str(), b[0].2.as_deref()), ("gpu-0", Some("4Gi")));
    let (sa, sb) = (a[0].1.clone().unwrap(), b[0].1.clone().unwrap());
    assert_ne!(sa, sb, "each share has its own id");
    // n1's device is full: c3 fits only n2's ordinary device (whole, so no share).
    let (_, out, _) = run(&pl, &pod("p3", "c3"));
    assert_eq!(ok(&out), [false, true]);
    let c = reserve(&pl, "p3", "c3", "n2");
    assert_eq!(c, [("gpu-0".to_string(), None, None)]);
    // A request without capacity.requests takes all of a shareable device: not while shares are
    // held.
    let (_, out, _) = run(&pl, &pod("pw", "whole"));
    assert_eq!(ok(&out), [false, false]);

    // Releasing one share (the informer shows the claim deallocated) frees its capacity.
    let store = &pl.handle.listers.resource_claims;
    pl.handle.listers.dra.forget("default/c1", store);
    let (_, out, _) = run(&pl, &pod("p4", "c1"));
    assert_eq!(ok(&out), [true, false]);
}

#[test]
fn allocated_shares_count_across_cycles() {
    let shared = json!([{"name": "gpu-0", "allowMultipleAllocations": true,
        "capacity": {"memory": {"value": "8Gi",
            "requestPolicy": {"default": "1Gi", "validValues": ["1Gi", "2Gi", "6Gi"]}}}}]);
    let mut held = claim("held", mem_request("3Gi", 1));
    held["status"] = json!({"allocation": {"devices": {"results": [{"request": "req",
        "driver": DRIVER, "pool": "n1", "device": "gpu-0",
        "shareID": "0b7e1b5c-8f7e-4a3b-9d4e-2f1a6c3b5d7e",
        "consumedCapacity": {"memory": "6Gi"}}]}}});
    let objs = vec![
        gpu_class(),
        slice_with("n1", shared),
        held,
        claim("two", mem_request("2Gi", 1)),
        claim("one", mem_request("1500Mi", 1)),
        claim(
            "dflt",
            json!([{"name": "req", "exactly": {"deviceClassName": "gpu"}}]),
        ),
        claim("seven", mem_request("7Gi", 1)),
    ];
    let pl = DynamicResources::new(handle(&objs));
    // 6Gi held: 2Gi fits, 1500Mi rounds up to 2Gi and fits, the default 1Gi fits; 7Gi is over
    // every valid value.
    for (c, want) in [
        ("two", true),
        ("one", true),
        ("dflt", true),
        ("seven", false),
    ] {
        let (_, out, _) = run(&pl, &pod("p", c));
        assert_eq!(out[0].1.is_success(), want, "{c}: {out:?}");
    }
    let r = reserve(&pl, "p", "one", "n1");
    assert_eq!(
        r[0].2.as_deref(),
        Some("2Gi"),
        "rounded up to a valid value"
    );
    // 8Gi of 8Gi now: nothing else fits.
    let (_, out, _) = run(&pl, &pod("q", "dflt"));
    assert!(!out[0].1.is_success());
}

#[test]
fn one_claim_shares_a_device_unless_distinct() {
    let shared = json!([
        {"name": "nic-0", "allowMultipleAllocations": true,
            "attributes": {"port": {"int": 0}}, "capacity": {"bw": {"value": "10"}}},
        {"name": "nic-1", "allowMultipleAllocations": true,
            "attributes": {"port": {"int": 1}}, "capacity": {"bw": {"value": "10"}}}]);
    let two = json!([
        {"name": "a", "exactly": {"deviceClassName": "gpu", "capacity": {"requests": {"bw": "5"}}}},
        {"name": "b", "exactly": {"deviceClassName": "gpu", "capacity": {"requests": {"bw": "5"}}}}]);
    let mut distinct = claim("distinct", two.clone());
    distinct["spec"]["devices"]["constraints"] =
        json!([{"distinctAttribute": format!("{DRIVER}/port")}]);
    let objs = vec![
        gpu_class(),
        slice_with("n1", shared),
        claim("same", two),
        distinct,
    ];
    let pl = DynamicResources::new(handle(&objs));
    let r = reserve(&pl, "p", "same", "n1");
    assert_eq!(r.len(), 2);
    assert_eq!(
        (r[0].0.as_str(), r[1].0.as_str()),
        ("nic-0", "nic-0"),
        "both halves of nic-0"
    );
    pl.handle
        .listers
        .dra
        .forget("default/same", &pl.handle.listers.resource_claims);
    let r = reserve(&pl, "q", "distinct", "n1");
    assert_eq!((r[0].0.as_str(), r[1].0.as_str()), ("nic-0", "nic-1"));
}

/// Slices of a partitionable GPU: the counter set in a slice of its own, and partitions that
/// consume it (upstream's MIG example, simplified).
fn partitioned(node: &str) -> Vec<Value> {
    let counters = json!({"kind": "ResourceSlice", "metadata": {"name": format!("{node}-counters")},
        "spec": {"driver": DRIVER, "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 2},
            "sharedCounters": [{"name": "gpu-0-counters", "counters": {"memory": {"value": "8Gi"}}}]}});
    let part = |name: &str, mem: &str, kind: &str| {
        json!({"name": name, "attributes": {"kind": {"string": kind}},
            "consumesCounters": [{"counterSet": "gpu-0-counters",
                "counters": {"memory": {"value": mem}}}]})
    };
    let mut devices = slice_with(
        node,
        json!([
            part("whole", "8Gi", "whole"),
            part("half-0", "4Gi", "half"),
            part("half-1", "4Gi", "half")
        ]),
    );
    devices["spec"]["pool"]["resourceSliceCount"] = json!(2);
    vec![counters, devices]
}

fn kind_request(kind: &str) -> Value {
    json!([{"name": "req", "exactly": {"deviceClassName": "gpu", "selectors": [
        {"cel": {"expression": format!("device.attributes['{DRIVER}'].kind == '{kind}'")}}]}}])
}

#[test]
fn partitions_share_counters() {
    let mut objs = vec![gpu_class()];
    objs.extend(partitioned("n1"));
    objs.push(claim("whole", kind_request("whole")));
    objs.push(claim("half", kind_request("half")));
    objs.push(claim("half2", kind_request("half")));
    objs.push(claim(
        "halves",
        json!([{"name": "req", "exactly": {"deviceClassName": "gpu",
        "count": 3}}]),
    ));
    let pl = DynamicResources::new(handle(&objs));
    // Three partitions need 16Gi of the 8Gi counter.
    let (_, out, _) = run(&pl, &pod("p", "halves"));
    assert!(!out[0].1.is_success());
    // A half takes 4Gi: the whole GPU no longer fits, the other half does.
    let r = reserve(&pl, "p1", "half", "n1");
    assert_eq!(r[0].0, "half-0");
    let (_, out, _) = run(&pl, &pod("pw", "whole"));
    assert!(!out[0].1.is_success(), "the whole overlaps the half");
    let r = reserve(&pl, "p2", "half2", "n1");
    assert_eq!(r[0].0, "half-1");
    // Released: the whole fits again.
    let store = &pl.handle.listers.resource_claims;
    pl.handle.listers.dra.forget("default/half", store);
    pl.handle.listers.dra.forget("default/half2", store);
    let (_, out, _) = run(&pl, &pod("pw", "whole"));
    assert!(out[0].1.is_success());
}

#[test]
fn taints_keep_devices_from_claims_that_do_not_tolerate_them() {
    let devices = json!([
        {"name": "gpu-0", "taints": [{"key": "k", "value": "v", "effect": "NoExecute"}]},
        {"name": "gpu-1", "taints": [{"key": "k", "effect": "None"}]},
        {"name": "gpu-2", "taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]}]);
    let tolerating = |t: Value| json!([{"name": "req", "exactly": {"deviceClassName": "gpu", "count": 2, "tolerations": [t]}}]);
    let objs = vec![
        gpu_class(),
        slice_with("n1", devices),
        claim(
            "plain",
            json!([{"name": "req", "exactly": {"deviceClassName": "gpu", "count": 2}}]),
        ),
        claim(
            "noexec",
            tolerating(
                json!({"key": "k", "operator": "Equal", "value": "v", "effect": "NoExecute"}),
            ),
        ),
        claim("any", tolerating(json!({"key": "k", "operator": "Exists"}))),
    ];
    let pl = DynamicResources::new(handle(&objs));
    // Only gpu-1 (effect None) is usable without tolerations.
    let (_, out, _) = run(&pl, &pod("p", "plain"));
    assert!(!out[0].1.is_success());
    let r = reserve(&pl, "p", "noexec", "n1");
    let got: Vec<&str> = r.iter().map(|d| d.0.as_str()).collect();
    assert_eq!(got, ["gpu-0", "gpu-1"]);
    pl.handle
        .listers
        .dra
        .forget("default/noexec", &pl.handle.listers.resource_claims);
    let r = reserve(&pl, "q", "any", "n1");
    assert_eq!(r.len(), 2);
}
