//! The resource claim controller of `rkube server` (DRA, `resource.k8s.io/v1`) with one simulated
//! node with two devices, one server for all cases:
//! - a pod whose claim comes from a ResourceClaimTemplate gets a claim `<pod>-<claim>-xxxxx`
//!   controlled by the pod, annotated with the pod's claim name, carrying the template's labels and
//!   spec, recorded in `pod.status.resourceClaimStatuses`; the scheduler allocates it from the node's
//!   simulated devices (`--sim-devices`) and binds the pod; deleting the pod deletes the claim (the
//!   controller drops the reservation and the finalizer);
//! - the generated claim of a pod that finished goes while the pod object stays;
//! - a claim allocated (here by the test, playing the scheduler) for a pod bound straight to a node
//!   is reserved for it by the controller; when the pod goes, the reservation is removed, the
//!   allocation cleared and the `resource.kubernetes.io/delete-protection` finalizer dropped.

mod support;

use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Backend, Cluster};

fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// [`wait_for`] that shows what `f` last saw when it times out.
fn wait_for_or<T>(what: &str, last: &mut Value, mut f: impl FnMut(&mut Value) -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(40);
    loop {
        if let Some(v) = f(last) {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; last seen: {last:#}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn json(c: &Cluster, what: &[&str]) -> Value {
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    args.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&c.kubectl(&args)).expect("kubectl -o json")
}

/// The ResourceClaims of the default namespace.
fn claims(c: &Cluster) -> Vec<Value> {
    json(c, &["resourceclaims"])["items"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// The claims controlled by the pod of `uid`.
fn claims_of(c: &Cluster, uid: &str) -> Vec<Value> {
    claims(c)
        .into_iter()
        .filter(|cl| {
            cl["metadata"]["ownerReferences"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|o| o["uid"] == uid && o["controller"] == true)
        })
        .collect()
}

fn exists(c: &Cluster, what: &[&str]) -> bool {
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    args.push("--ignore-not-found");
    !c.kubectl(&args).trim().is_empty()
}

const CLASS_AND_TEMPLATE: &str = "\
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: gpu.example.com}
spec:
  selectors: [{cel: {expression: 'device.driver == \"gpu.example.com\"'}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu}
spec:
  metadata: {labels: {app: trainer}}
  spec:
    devices:
      requests: [{name: gpu, exactly: {deviceClassName: gpu.example.com}}]
";

fn template_pod(name: &str, scheduler: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  schedulerName: {scheduler}\n  \
         terminationGracePeriodSeconds: 0\n  resourceClaims: [{{name: gpu, resourceClaimTemplateName: one-gpu}}]\n  \
         containers: [{{name: c, image: registry.k8s.io/pause:3.10, resources: {{claims: [{{name: gpu}}]}}}}]\n"
    )
}

/// Waits for the pod's one generated claim and the status entry naming it; returns the claim.
fn generated_claim(c: &Cluster, pod: &str) -> Value {
    let uid = json(c, &["pod", pod])["metadata"]["uid"]
        .as_str()
        .unwrap()
        .to_string();
    let claim = wait_for(&format!("the claim of {pod}"), || {
        claims_of(c, &uid).into_iter().next()
    });
    let name = claim["metadata"]["name"].as_str().unwrap().to_string();
    wait_for(&format!("{pod}'s resourceClaimStatuses"), || {
        let statuses = json(c, &["pod", pod])["status"]["resourceClaimStatuses"].clone();
        (statuses == serde_json::json!([{"name": "gpu", "resourceClaimName": name}])).then_some(())
    });
    // Recorded once, made once.
    assert_eq!(claims_of(c, &uid).len(), 1);
    claim
}

#[test]
fn claims_from_templates_reservations_and_deallocation() {
    let c = Cluster::start_all(
        Backend::Sqlite,
        &["--sim-nodes", "1", "--sim-devices", "gpu.example.com=2"],
    );
    wait_for("the simulated node", || {
        exists(&c, &["node", "sim-0"]).then_some(())
    });
    c.kubectl_in(&["apply", "-f", "-"], Some(CLASS_AND_TEMPLATE));

    // A claim from the template, controlled by the pod; it goes with the pod.
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(&template_pod("trainer", "default-scheduler")),
    );
    let claim = generated_claim(&c, "trainer");
    let meta = &claim["metadata"];
    let name = meta["name"].as_str().unwrap().to_string();
    assert!(name.starts_with("trainer-gpu-"), "{name}");
    assert_eq!(meta["generateName"], "trainer-gpu-");
    assert_eq!(
        meta["annotations"]["resource.kubernetes.io/pod-claim-name"],
        "gpu"
    );
    assert_eq!(meta["labels"]["app"], "trainer");
    let owner = &meta["ownerReferences"][0];
    assert_eq!(
        (&owner["apiVersion"], &owner["kind"], &owner["name"]),
        (&"v1".into(), &"Pod".into(), &"trainer".into())
    );
    assert_eq!(owner["blockOwnerDeletion"], true);
    assert_eq!(
        claim["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"],
        "gpu.example.com"
    );
    // The scheduler allocates it on the node's slice and reserves it for the pod.
    let uid = owner["uid"].clone();
    let allocated = wait_for("the trainer's claim allocated and the pod bound", || {
        let claim = json(&c, &["resourceclaim", &name]);
        let bound = json(&c, &["pod", "trainer"])["spec"]["nodeName"] == "sim-0";
        let reserved = claim["status"]["reservedFor"]
            == serde_json::json!([{"resource": "pods", "name": "trainer", "uid": uid}]);
        (bound && reserved).then_some(claim)
    });
    let result = &allocated["status"]["allocation"]["devices"]["results"][0];
    assert_eq!(
        (&result["driver"], &result["pool"], &result["request"]),
        (&"gpu.example.com".into(), &"sim-0".into(), &"gpu".into())
    );
    assert_eq!(
        allocated["metadata"]["finalizers"],
        serde_json::json!(["resource.kubernetes.io/delete-protection"])
    );
    c.kubectl(&["delete", "pod", "trainer", "--wait=false"]);
    wait_for("the trainer's claim to go", || {
        (!exists(&c, &["resourceclaim", &name])).then_some(())
    });

    // A finished pod's claim goes while the pod object stays. No scheduler takes this pod, so
    // only the test writes its status.
    c.kubectl_in(&["apply", "-f", "-"], Some(&template_pod("batch", "none")));
    let claim = generated_claim(&c, "batch");
    let name = claim["metadata"]["name"].as_str().unwrap().to_string();
    c.kubectl(&[
        "patch",
        "pod",
        "batch",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"phase":"Succeeded"}}"#,
    ]);
    wait_for("the finished pod's claim to go", || {
        (!exists(&c, &["resourceclaim", &name])).then_some(())
    });
    assert!(exists(&c, &["pod", "batch"]));

    // A user's claim, allocated by the test as the scheduler would (with its finalizer), for a pod
    // bound straight to the node: reserved by the controller, deallocated when the pod goes.
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata:\n  name: shared\n  \
             finalizers: [resource.kubernetes.io/delete-protection]\nspec:\n  devices:\n    \
             requests: [{name: gpu, exactly: {deviceClassName: gpu.example.com}}]\n",
        ),
    );
    c.kubectl(&[
        "patch",
        "resourceclaim",
        "shared",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"allocation":{"devices":{"results":[
            {"request":"gpu","driver":"gpu.example.com","pool":"sim-0","device":"gpu-0"}]}}}}"#,
    ]);
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            "apiVersion: v1\nkind: Pod\nmetadata: {name: direct}\nspec:\n  nodeName: sim-0\n  \
             terminationGracePeriodSeconds: 0\n  resourceClaims: [{name: gpu, resourceClaimName: shared}]\n  \
             containers: [{name: c, image: registry.k8s.io/pause:3.10, resources: {claims: [{name: gpu}]}}]\n",
        ),
    );
    let uid = json(&c, &["pod", "direct"])["metadata"]["uid"].clone();
    wait_for("the reservation for the directly bound pod", || {
        let reserved = json(&c, &["resourceclaim", "shared"])["status"]["reservedFor"].clone();
        (reserved == serde_json::json!([{"resource": "pods", "name": "direct", "uid": uid}]))
            .then_some(())
    });
    c.kubectl(&["delete", "pod", "direct", "--wait=false"]);
    let mut last = Value::Null;
    let claim = wait_for_or("the claim's deallocation", &mut last, |last| {
        let claim = json(&c, &["resourceclaim", "shared"]);
        *last = serde_json::json!({"claim": claim.clone(), "pods": c.kubectl(&["get", "pods", "-o", "wide"])});
        let status = &claim["status"];
        (status["reservedFor"].is_null()
            && status["allocation"].is_null()
            && claim["metadata"]["finalizers"]
                .as_array()
                .is_none_or(Vec::is_empty))
        .then_some(claim)
    });
    // The user's claim itself stays.
    assert_eq!(claim["metadata"]["name"], "shared");
}
