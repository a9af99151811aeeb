//! VolumeBinding cases after upstream `volume_binding_test.go` and `binder_test.go`.

use super::*;
use crate::plugins::testutil::{handle_with, labeled_node, pod, st_of};
use serde_json::{json, Value};

fn pvc(name: &str, volume: Option<&str>, class: Option<&str>) -> Value {
    json!({"kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": "default"},
        "spec": {"volumeName": volume, "storageClassName": class, "accessModes": ["ReadWriteOnce"],
                 "resources": {"requests": {"storage": "1Gi"}}}})
}

fn pv(name: &str, zone: Option<&str>, class: &str, claimed: bool) -> Value {
    let mut v = json!({"kind": "PersistentVolume", "metadata": {"name": name},
        "spec": {"storageClassName": class, "accessModes": ["ReadWriteOnce"], "capacity": {"storage": "2Gi"}}});
    if let Some(z) = zone {
        v["spec"]["nodeAffinity"] = json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [
            {"key": "zone", "operator": "In", "values": [z]}]}]}});
    }
    if claimed {
        v["spec"]["claimRef"] = json!({"name": "other", "namespace": "default"});
    }
    v
}

fn wffc(name: &str) -> Value {
    json!({"kind": "StorageClass", "metadata": {"name": name}, "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer"})
}

fn pod_with_claims(claims: &[&str]) -> Pod {
    let vols: Vec<Value> = claims
        .iter()
        .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    pod("p", json!({ "volumes": vols }))
}

#[test]
fn filter() {
    let z1 = labeled_node("n1", json!({"zone": "z1"}));
    let z2 = labeled_node("n2", json!({"zone": "z2"}));
    let nodes = vec![z1.clone(), z2.clone()];
    let unresolvable = |m: &str| Status::UnschedulableAndUnresolvable(m.to_string());
    // (name, objects, claims, pre-filter status, filter on n1, filter on n2)
    type Case<'a> = (&'a str, Vec<Value>, Vec<&'a str>, Status, Status, Status);
    let cases: Vec<Case> = vec![
        (
            "no volumes",
            vec![],
            vec![],
            Status::Skip,
            Status::Success,
            Status::Success,
        ),
        (
            "claim not found",
            vec![],
            vec!["c"],
            unresolvable("persistentvolumeclaim \"c\" not found"),
            Status::Success,
            Status::Success,
        ),
        (
            "bound claim, PV without affinity",
            vec![pvc("c", Some("v"), None), pv("v", None, "", true)],
            vec!["c"],
            Status::Success,
            Status::Success,
            Status::Success,
        ),
        (
            "bound claim, node-affine PV",
            vec![pvc("c", Some("v"), None), pv("v", Some("z1"), "", true)],
            vec!["c"],
            Status::Success,
            Status::Success,
            unresolvable(ERR_REASON_NODE_CONFLICT),
        ),
        (
            "bound to a missing PV",
            vec![pvc("c", Some("gone"), None)],
            vec!["c"],
            Status::Success,
            unresolvable(ERR_REASON_PV_NOT_EXIST),
            unresolvable(ERR_REASON_PV_NOT_EXIST),
        ),
        (
            "unbound immediate claim",
            vec![pvc("c", None, Some("fast"))],
            vec!["c"],
            unresolvable(ERR_UNBOUND_IMMEDIATE),
            Status::Success,
            Status::Success,
        ),
        (
            "unbound WaitForFirstConsumer claim with a local PV in z2",
            vec![
                pvc("c", None, Some("local")),
                wffc("local"),
                pv("v", Some("z2"), "local", false),
            ],
            vec!["c"],
            Status::Success,
            unresolvable(ERR_REASON_BIND_CONFLICT),
            Status::Success,
        ),
        (
            "the only PV is claimed",
            vec![
                pvc("c", None, Some("local")),
                wffc("local"),
                pv("v", None, "local", true),
            ],
            vec!["c"],
            Status::Success,
            unresolvable(ERR_REASON_BIND_CONFLICT),
            unresolvable(ERR_REASON_BIND_CONFLICT),
        ),
        (
            "two claims need two PVs",
            vec![
                pvc("a", None, Some("local")),
                pvc("b", None, Some("local")),
                wffc("local"),
                pv("v1", None, "local", false),
            ],
            vec!["a", "b"],
            Status::Success,
            unresolvable(ERR_REASON_BIND_CONFLICT),
            unresolvable(ERR_REASON_BIND_CONFLICT),
        ),
    ];
    for (name, objects, claims, want_pre, want1, want2) in cases {
        let vb = VolumeBinding::new(handle_with(&objects));
        let p = pod_with_claims(&claims);
        let mut st = st_of(&nodes);
        let (_, pre) = vb.pre_filter(&mut st, &p);
        assert_eq!(pre, want_pre, "{name}: prefilter");
        if !pre.is_success() {
            continue;
        }
        assert_eq!(vb.filter(&st, &p, &z1), want1, "{name}: n1");
        assert_eq!(vb.filter(&st, &p, &z2), want2, "{name}: n2");
    }
}

#[test]
fn claims_to_provision() {
    let z1 = labeled_node("n1", json!({"zone": "z1"}));
    let z2 = labeled_node("n2", json!({"zone": "z2"}));
    let nodes = vec![z1.clone(), z2.clone()];
    let conflict = Status::UnschedulableAndUnresolvable(ERR_REASON_BIND_CONFLICT.into());
    let class = |topology: Option<&str>| {
        let mut c = json!({"kind": "StorageClass", "metadata": {"name": "dyn"},
            "provisioner": "rkube.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"});
        if let Some(z) = topology {
            c["allowedTopologies"] =
                json!([{"matchLabelExpressions": [{"key": "zone", "values": [z]}]}]);
        }
        c
    };
    let mut selected = pvc("c", None, Some("dyn"));
    selected["metadata"]["annotations"] = json!({"volume.kubernetes.io/selected-node": "n2"});
    // (objects, filter on n1, filter on n2)
    let cases: Vec<(Vec<Value>, Status, Status)> = vec![
        (
            vec![pvc("c", None, Some("dyn")), class(None)],
            Status::Success,
            Status::Success,
        ),
        (
            vec![pvc("c", None, Some("dyn")), class(Some("z1"))],
            Status::Success,
            conflict.clone(),
        ),
        (
            vec![selected, class(None)],
            conflict.clone(),
            Status::Success,
        ),
        // no-provisioner classes are only for pre-created volumes.
        (
            vec![pvc("c", None, Some("local")), wffc("local")],
            conflict.clone(),
            conflict.clone(),
        ),
    ];
    for (i, (objects, want1, want2)) in cases.into_iter().enumerate() {
        let vb = VolumeBinding::new(handle_with(&objects));
        let p = pod_with_claims(&["c"]);
        let mut st = st_of(&nodes);
        let (_, pre) = vb.pre_filter(&mut st, &p);
        assert_eq!(pre, Status::Success, "case {i}");
        assert_eq!(vb.filter(&st, &p, &z1), want1, "case {i}: n1");
        assert_eq!(vb.filter(&st, &p, &z2), want2, "case {i}: n2");
    }
}

#[test]
fn queueing_hints_look_at_the_pod_claims() {
    let p = pod_with_claims(&["a", "b"]);
    let claim = |name: &str, ns: &str| -> PersistentVolumeClaim {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}})).unwrap()
    };
    assert!(pod_uses_claim(&p, &claim("a", "default")));
    assert!(pod_uses_claim(&p, &claim("b", "default")));
    assert!(!pod_uses_claim(&p, &claim("c", "default")));
    assert!(!pod_uses_claim(&p, &claim("a", "other")));
    // A volume change helps only once every claim of the pod exists.
    assert!(volume_change_may_help(&p, |k| k == "default/a" || k == "default/b"));
    assert!(!volume_change_may_help(&p, |k| k == "default/a"));
    assert!(volume_change_may_help(&pod_with_claims(&[]), |_| false));
}

#[test]
fn deleting_claim() {
    let mut c = pvc("c", Some("v"), None);
    c["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:00:00Z");
    let vb = VolumeBinding::new(handle_with(&[c]));
    let (_, s) = vb.pre_filter(&mut st_of(&[]), &pod_with_claims(&["c"]));
    assert_eq!(
        s,
        Status::UnschedulableAndUnresolvable("persistentvolumeclaim \"c\" is being deleted".into())
    );
}

/// Upstream's assume cache: a pod reserved on a node holds the volume it chose, so a second pod
/// scheduled before the first one's PreBind has written the claimRef does not choose it too.
#[test]
fn reserve_assumes_the_chosen_volume() {
    let z1 = labeled_node("n1", json!({"zone": "z1"}));
    let nodes = vec![z1.clone()];
    let conflict = Status::UnschedulableAndUnresolvable(ERR_REASON_BIND_CONFLICT.into());
    let mut v = pv("v", None, "local", false);
    v["metadata"]["resourceVersion"] = json!("7");
    let objects = vec![
        pvc("a", None, Some("local")),
        pvc("b", None, Some("local")),
        wffc("local"),
        v,
    ];
    let vb = VolumeBinding::new(handle_with(&objects));
    let (pa, pb) = (pod_with_claims(&["a"]), pod_with_claims(&["b"]));
    let mut sa = st_of(&nodes);
    assert_eq!(vb.pre_filter(&mut sa, &pa).1, Status::Success);
    assert_eq!(vb.filter(&sa, &pa, &z1), Status::Success);
    assert_eq!(vb.reserve(&mut sa, &pa, "n1"), Status::Success);
    let plan = sa.read::<Plan>(PLAN_KEY).unwrap();
    assert_eq!(plan.bind.len(), 1);
    let claim_ref = plan.bind[0].1.spec.as_ref().unwrap().claim_ref.as_ref();
    assert_eq!(claim_ref.and_then(|c| c.name.as_deref()), Some("a"));
    // The volume keeps the version it was chosen from: PreBind's write is conditional on it.
    assert_eq!(
        plan.bind[0].1.metadata.resource_version.as_deref(),
        Some("7")
    );
    // The second pod finds no volume (its class provisions none) while the first holds it.
    let mut sb = st_of(&nodes);
    assert_eq!(vb.pre_filter(&mut sb, &pb).1, Status::Success);
    assert_eq!(vb.filter(&sb, &pb, &z1), conflict);
    // The first pod's binding failed: the volume is free again.
    vb.unreserve(&mut sa, &pa, "n1");
    let mut sb = st_of(&nodes);
    assert_eq!(vb.pre_filter(&mut sb, &pb).1, Status::Success);
    assert_eq!(vb.filter(&sb, &pb, &z1), Status::Success);
}

/// With a provisioner, the second pod provisions instead; a claim whose node Reserve assumed
/// fits only that node for any other pod using it.
#[test]
fn reserve_assumes_the_selected_node() {
    let z1 = labeled_node("n1", json!({"zone": "z1"}));
    let z2 = labeled_node("n2", json!({"zone": "z2"}));
    let nodes = vec![z1.clone(), z2.clone()];
    let class = json!({"kind": "StorageClass", "metadata": {"name": "dyn"},
        "provisioner": "rkube.io/local-path", "volumeBindingMode": "WaitForFirstConsumer"});
    let mut v = pv("v", Some("z1"), "dyn", false);
    v["metadata"]["resourceVersion"] = json!("7");
    let objects = vec![
        pvc("a", None, Some("dyn")),
        pvc("b", None, Some("dyn")),
        class,
        v,
    ];
    let vb = VolumeBinding::new(handle_with(&objects));
    let mut sa = st_of(&nodes);
    let pa = pod_with_claims(&["a"]);
    vb.pre_filter(&mut sa, &pa);
    assert_eq!(vb.reserve(&mut sa, &pa, "n1"), Status::Success);
    let mut sb = st_of(&nodes);
    let pb = pod_with_claims(&["b"]);
    vb.pre_filter(&mut sb, &pb);
    assert_eq!(vb.reserve(&mut sb, &pb, "n1"), Status::Success);
    let plan = sb.read::<Plan>(PLAN_KEY).unwrap();
    assert!(plan.bind.is_empty());
    assert_eq!(plan.provision.len(), 1);
    // Another pod using claim b now fits only n1, where b is to be provisioned.
    let mut sc = st_of(&nodes);
    vb.pre_filter(&mut sc, &pb);
    assert_eq!(vb.filter(&sc, &pb, &z1), Status::Success);
    assert_eq!(
        vb.filter(&sc, &pb, &z2),
        Status::UnschedulableAndUnresolvable(ERR_REASON_BIND_CONFLICT.into())
    );
}
