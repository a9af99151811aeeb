use super::*;
use serde_json::{json, Value};

const CTRL: &str = "endpointslice-controller.k8s.io";

fn svc(extra: Value) -> Service {
    let mut v = json!({"metadata": {"name": "web", "namespace": "d", "uid": "svc-uid", "labels": {"tier": "fe"}},
        "spec": {"selector": {"app": "a"}, "clusterIP": "10.96.0.10", "ipFamilies": ["IPv4"],
            "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]}});
    if let (Some(spec), Some(extra)) = (v["spec"].as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(v).unwrap()
}

fn pod(i: usize, ready: bool) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": format!("p{i}"), "namespace": "d", "uid": format!("uid-{i}"), "labels": {"app": "a"}},
        "spec": {"nodeName": "n1", "containers": [{"name": "c", "ports": [{"name": "http", "containerPort": 8080}]}]},
        "status": {"phase": "Running", "podIP": format!("10.0.{}.{}", i / 200, i % 200 + 1),
            "podIPs": [{"ip": format!("10.0.{}.{}", i / 200, i % 200 + 1)}],
            "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
    }))
    .unwrap()
}

fn zone(node: &str) -> Option<Option<String>> {
    (node == "n1").then(|| Some("zone-a".to_string()))
}

/// Applies a plan as the API would: creates get names and uids.
fn apply(existing: &[EndpointSlice], plan: Plan, counter: &mut usize) -> Vec<EndpointSlice> {
    let mut out: Vec<EndpointSlice> = existing
        .iter()
        .filter(|s| {
            !plan
                .delete
                .iter()
                .chain(plan.update.iter())
                .any(|d| d.metadata.name == s.metadata.name)
        })
        .cloned()
        .collect();
    out.extend(plan.update);
    for mut s in plan.create {
        *counter += 1;
        s.metadata.name = Some(format!("web-{counter}"));
        s.metadata.uid = Some(format!("slice-{counter}"));
        out.push(s);
    }
    out
}

fn run(s: &Service, pods: &[Pod], existing: &[EndpointSlice]) -> Plan {
    let refs: Vec<&Pod> = pods.iter().collect();
    reconcile(s, &refs, &zone, existing, 100, CTRL)
}

#[test]
fn three_ready_pods_make_one_slice() {
    let s = svc(json!({}));
    let pods: Vec<Pod> = (0..3).map(|i| pod(i, true)).collect();
    let plan = run(&s, &pods, &[]);
    assert_eq!(
        (plan.create.len(), plan.update.len(), plan.delete.len()),
        (1, 0, 0)
    );
    let slice = &plan.create[0];
    assert_eq!(slice.address_type, "IPv4");
    assert_eq!(slice.metadata.generate_name.as_deref(), Some("web-"));
    let labels = slice.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[LABEL_SERVICE_NAME], "web");
    assert_eq!(labels[LABEL_MANAGED_BY], CTRL);
    assert_eq!(labels["tier"], "fe");
    assert_eq!(slice.endpoints.as_ref().map_or(0, Vec::len), 3);
    let ep = &slice.endpoints.as_ref().unwrap()[0];
    assert_eq!(ep.zone.as_deref(), Some("zone-a"));
    assert_eq!(ep.node_name.as_deref(), Some("n1"));
    assert_eq!(ep.conditions.as_ref().unwrap().ready, Some(true));
    assert_eq!(slice.ports.as_ref().unwrap()[0].port, Some(8080));
    let owner = &slice.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Service", "svc-uid")
    );
}

#[test]
fn steady_state_writes_nothing_and_changes_are_updates() {
    let s = svc(json!({}));
    let mut pods: Vec<Pod> = (0..3).map(|i| pod(i, true)).collect();
    let mut n = 0;
    let slices = apply(&[], run(&s, &pods, &[]), &mut n);
    let plan = run(&s, &pods, &slices);
    assert!(plan.create.is_empty() && plan.update.is_empty() && plan.delete.is_empty());
    // A label added to the Service reaches the slice.
    let mut relabelled = s.clone();
    relabelled
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .insert("new".into(), "x".into());
    let plan = run(&relabelled, &pods, &slices);
    assert_eq!(plan.update.len(), 1);
    assert_eq!(plan.update[0].metadata.labels.as_ref().unwrap()["new"], "x");
    pods[1] = pod(1, false);
    let plan = run(&s, &pods, &slices);
    assert_eq!((plan.create.len(), plan.update.len()), (0, 1));
    let ep = plan.update[0]
        .endpoints
        .iter()
        .flatten()
        .find(|e| e.target_ref.as_ref().unwrap().name.as_deref() == Some("p1"))
        .unwrap();
    let c = ep.conditions.as_ref().unwrap();
    assert_eq!(
        (c.ready, c.serving, c.terminating),
        (Some(false), Some(false), Some(false))
    );
}

#[test]
fn no_pods_keeps_one_placeholder() {
    let s = svc(json!({}));
    let pods: Vec<Pod> = (0..3).map(|i| pod(i, true)).collect();
    let mut n = 0;
    let slices = apply(&[], run(&s, &pods, &[]), &mut n);
    // Scaling to zero: the slice is reused as the empty placeholder, not deleted and re-created.
    let plan = run(&s, &[], &slices);
    assert_eq!(
        (plan.create.len(), plan.update.len(), plan.delete.len()),
        (0, 1, 0)
    );
    assert!(plan.update[0].endpoints.as_ref().is_none_or(Vec::is_empty));
    assert_eq!(plan.update[0].metadata.name.as_deref(), Some("web-1"));
    let slices = apply(&slices, plan, &mut n);
    let plan = run(&s, &[], &slices);
    assert!(plan.create.is_empty() && plan.update.is_empty() && plan.delete.is_empty());
}

#[test]
fn two_hundred_fifty_endpoints_make_three_slices() {
    let s = svc(json!({}));
    let pods: Vec<Pod> = (0..250).map(|i| pod(i, true)).collect();
    let plan = run(&s, &pods, &[]);
    let mut sizes: Vec<usize> = plan
        .create
        .iter()
        .map(|s| s.endpoints.as_ref().map_or(0, Vec::len))
        .collect();
    sizes.sort();
    assert_eq!(sizes, [50, 100, 100]);
    // Adding 30 more pods fills an existing slice that has room rather than making a new one.
    let mut n = 0;
    let slices = apply(&[], plan, &mut n);
    let pods: Vec<Pod> = (0..280).map(|i| pod(i, true)).collect();
    let plan = run(&s, &pods, &slices);
    assert_eq!((plan.create.len(), plan.update.len()), (0, 1));
    assert_eq!(plan.update[0].endpoints.as_ref().map_or(0, Vec::len), 80);
}

#[test]
fn port_change_replaces_slices_reusing_names() {
    let s = svc(json!({}));
    let pods: Vec<Pod> = (0..3).map(|i| pod(i, true)).collect();
    let mut n = 0;
    let slices = apply(&[], run(&s, &pods, &[]), &mut n);
    let s2 = svc(
        json!({"ports": [{"name": "http", "port": 80, "targetPort": 9090, "protocol": "TCP"}]}),
    );
    let plan = run(&s2, &pods, &slices);
    assert_eq!(
        (plan.create.len(), plan.update.len(), plan.delete.len()),
        (0, 1, 0)
    );
    assert_eq!(plan.update[0].ports.as_ref().unwrap()[0].port, Some(9090));
    assert_eq!(plan.update[0].metadata.name.as_deref(), Some("web-1"));
}

#[test]
fn terminating_pods_are_serving_but_not_ready() {
    let s = svc(json!({}));
    let mut p = pod(0, true);
    p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        "2024-01-01T00:00:00Z".parse().unwrap(),
    ));
    let plan = run(&s, &[p], &[]);
    let c = plan.create[0].endpoints.as_ref().unwrap()[0]
        .conditions
        .clone()
        .unwrap();
    assert_eq!(
        (c.ready, c.serving, c.terminating),
        (Some(false), Some(true), Some(true))
    );
}

#[test]
fn unknown_node_skips_the_pod() {
    let s = svc(json!({}));
    let mut p = pod(0, true);
    p.spec.as_mut().unwrap().node_name = Some("gone".into());
    let plan = run(&s, &[p, pod(1, true)], &[]);
    assert_eq!(plan.skipped_pods, ["p0"]);
    assert_eq!(plan.create[0].endpoints.as_ref().map_or(0, Vec::len), 1);
}

#[test]
fn headless_dual_stack_and_hints() {
    let s =
        svc(json!({"clusterIP": "None", "ipFamilies": null, "trafficDistribution": "PreferClose"}));
    let plan = run(&s, &[pod(0, true)], &[]);
    // No families on a headless Service: both address types; the IPv6 one is a placeholder.
    let types: Vec<&str> = plan
        .create
        .iter()
        .map(|s| s.address_type.as_str())
        .collect();
    assert_eq!(types, ["IPv4", "IPv6"]);
    assert_eq!(
        plan.create[0].metadata.labels.as_ref().unwrap()[LABEL_HEADLESS],
        ""
    );
    let hints = plan.create[0].endpoints.as_ref().unwrap()[0]
        .hints
        .as_ref()
        .unwrap();
    assert_eq!(hints.for_zones.as_ref().unwrap()[0].name, "zone-a");
    assert!(plan.create[1].endpoints.as_ref().is_none_or(Vec::is_empty));
}

#[test]
fn slices_of_another_service_with_the_same_name_are_deleted() {
    let s = svc(json!({}));
    let mut old = new_slice(&s, Vec::new(), "IPv4", CTRL);
    old.metadata.name = Some("web-old".into());
    old.metadata.owner_references.as_mut().unwrap()[0].uid = "old-uid".into();
    let plan = run(&s, &[pod(0, true)], &[old]);
    assert_eq!((plan.create.len(), plan.delete.len()), (1, 1));
}
