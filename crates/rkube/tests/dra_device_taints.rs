//! The device taint eviction controller (`device-taint-eviction-controller`, DRA device taints,
//! on by default in Kubernetes 1.36) in `rkube server`: three pods bound to a node (no kubelet
//! runs; the pods only need to exist), each with a claim allocated (by the test, as the scheduler
//! would) one device of a ResourceSlice. When the driver's slice gives the devices a NoExecute
//! taint, the pod whose allocation carries no toleration is evicted at once (DisruptionTarget
//! condition `DeletionByDeviceTaintManager`, a `DeviceTaintManagerEviction` event, then deleted),
//! the one tolerating it for 8 s is evicted 8 s after the taint's `timeAdded`, and the one
//! tolerating it forever stays.

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{Backend, Cluster};

const DRIVER: &str = "gpu.example.com";
const LATER_SECS: i64 = 8;

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn pod(c: &Cluster, name: &str) -> Option<Value> {
    let out = c.kubectl_output(&["get", "pod", name, "-o", "json"], None);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

/// The pod once it is being evicted (deletion asked; no kubelet finishes it) or gone.
fn evicted(c: &Cluster, name: &str) -> Option<Option<Value>> {
    match pod(c, name) {
        None => Some(None),
        Some(p) if !p["metadata"]["deletionTimestamp"].is_null() => Some(Some(p)),
        Some(_) => None,
    }
}

fn disruption_condition(p: &Value) -> Value {
    p["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "DisruptionTarget"))
        .cloned()
        .unwrap_or(Value::Null)
}

fn timestamp(v: &Value) -> jiff::Timestamp {
    v.as_str()
        .unwrap_or_else(|| panic!("not a time: {v}"))
        .parse()
        .unwrap()
}

#[test]
fn pods_of_claims_with_untolerated_noexecute_device_taints_are_evicted() {
    let c = Cluster::start_all(
        Backend::Sqlite,
        &[
            "--disable-scheduler",
            "--controllers=serviceaccount-controller,device-taint-eviction-controller",
        ],
    );
    let devices = |taints: Value| -> Value {
        json!(["gpu-0", "gpu-1", "gpu-2"]
            .iter()
            .map(|d| json!({"name": d, "taints": taints}))
            .collect::<Vec<_>>())
    };
    let slice = |taints: Value| {
        json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"name": "n1-gpus"},
            "spec": {"driver": DRIVER, "nodeName": "n1",
                     "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                     "devices": devices(taints)}})
        .to_string()
    };
    c.kubectl_in(&["apply", "-f", "-"], Some(&slice(json!([]))));
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            &json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
                "metadata": {"name": DRIVER},
                "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{DRIVER}\"")}}]}})
            .to_string(),
        ),
    );
    // name, device, the allocation's tolerations.
    let cases = [
        ("now", "gpu-0", json!([])),
        (
            "later",
            "gpu-1",
            json!([{"key": "broken", "operator": "Exists", "effect": "NoExecute",
                    "tolerationSeconds": LATER_SECS}]),
        ),
        (
            "forever",
            "gpu-2",
            json!([{"operator": "Exists", "effect": "NoExecute"}]),
        ),
    ];
    for (name, device, tolerations) in &cases {
        c.kubectl_in(
            &["apply", "-f", "-"],
            Some(
                &json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                    "metadata": {"name": name},
                    "spec": {"devices": {"requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}}})
                .to_string(),
            ),
        );
        c.kubectl_in(
            &["apply", "-f", "-"],
            Some(
                &json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
                    "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 30,
                        "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
                        "containers": [{"name": "c", "image": "busybox",
                                        "resources": {"claims": [{"name": "gpu"}]}}]}})
                .to_string(),
            ),
        );
        let uid = wait_for("the pod", || pod(&c, name))["metadata"]["uid"].clone();
        c.kubectl(&[
            "patch",
            "resourceclaim",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &json!({"status": {
                "allocation": {"devices": {"results": [{"request": "gpu", "driver": DRIVER,
                    "pool": "n1", "device": device, "tolerations": tolerations}]}},
                "reservedFor": [{"resource": "pods", "name": name, "uid": uid}]}})
            .to_string(),
        ]);
    }

    // The driver taints its devices.
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(&slice(
            json!([{"key": "broken", "value": "true", "effect": "NoExecute"}]),
        )),
    );
    let added = {
        let s: Value =
            serde_json::from_str(&c.kubectl(&["get", "resourceslice", "n1-gpus", "-o", "json"]))
                .unwrap();
        timestamp(&s["spec"]["devices"][0]["taints"][0]["timeAdded"])
    };

    let now = wait_for("pod now to be evicted", || evicted(&c, "now"));
    if let Some(p) = &now {
        let cond = disruption_condition(p);
        assert_eq!(cond["status"], "True", "{p}");
        assert_eq!(cond["reason"], "DeletionByDeviceTaintManager");
        assert_eq!(
            cond["message"],
            "Device Taint manager: deleting due to NoExecute taint"
        );
    }
    let events = c.kubectl(&[
        "get",
        "events",
        "--field-selector=involvedObject.name=now",
        "-o",
        "custom-columns=REASON:.reason,MESSAGE:.message",
    ]);
    assert!(
        events.contains("DeviceTaintManagerEviction") && events.contains("Marking for deletion"),
        "{events}"
    );

    let later = wait_for("pod later to be evicted", || evicted(&c, "later"))
        .expect("no kubelet: the pod waits for its grace period");
    let cond = disruption_condition(&later);
    assert_eq!(cond["reason"], "DeletionByDeviceTaintManager");
    // Evicted no sooner than tolerationSeconds after the taint was added (second precision).
    let at = timestamp(&cond["lastTransitionTime"]);
    assert!(
        at >= added + jiff::SignedDuration::from_secs(LATER_SECS - 1),
        "evicted at {at}, taint added at {added}"
    );

    // Everything the taint causes has happened by now: the tolerating pod stays.
    let forever = pod(&c, "forever").expect("pod forever");
    assert!(
        forever["metadata"]["deletionTimestamp"].is_null(),
        "{forever}"
    );
    assert!(disruption_condition(&forever).is_null(), "{forever}");
}
