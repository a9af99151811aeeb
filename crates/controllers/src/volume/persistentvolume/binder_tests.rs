//! Tests of the PV controller's decisions (upstream `binder_test.go`, `delete_test.go`,
//! `provision_test.go` in spirit: a claim or volume state in, the action out).

use super::*;
use serde_json::{json, Value};

fn merge(base: &mut Value, extra: Value) {
    if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
        for (k, v) in e {
            match b.get_mut(&k) {
                Some(bv) if bv.is_object() && v.is_object() => merge(bv, v),
                _ => {
                    b.insert(k, v);
                }
            }
        }
    }
}

fn pv(name: &str, size: &str, extra: Value) -> Arc<PersistentVolume> {
    let mut v = json!({"metadata": {"name": name},
        "spec": {"capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": "/data"}},
        "status": {"phase": "Available"}});
    merge(&mut v, extra);
    Arc::new(serde_json::from_value(v).unwrap())
}

fn pvc(extra: Value) -> PersistentVolumeClaim {
    let mut c = json!({"metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
        "status": {"phase": "Pending"}});
    merge(&mut c, extra);
    serde_json::from_value(c).unwrap()
}

fn class(name: &str, provisioner: &str, mode: &str, default: bool) -> Arc<StorageClass> {
    let ann = if default {
        json!({"storageclass.kubernetes.io/is-default-class": "true"})
    } else {
        json!({})
    };
    Arc::new(
        serde_json::from_value(json!({"metadata": {"name": name, "annotations": ann},
            "provisioner": provisioner, "volumeBindingMode": mode}))
        .unwrap(),
    )
}

fn decide(
    claim: &PersistentVolumeClaim,
    volumes: &[Arc<PersistentVolume>],
    classes: &[Arc<StorageClass>],
) -> ClaimAction {
    sync_claim(
        claim,
        &View {
            volumes,
            classes,
            unscheduled_pods: &[],
        },
    )
    .unwrap()
}

fn bound_name(a: &ClaimAction) -> Option<&str> {
    match a {
        ClaimAction::Bind(v) => v.metadata.name.as_deref(),
        _ => None,
    }
}

fn pending_event(a: &ClaimAction) -> Option<(bool, &'static str, String)> {
    match a {
        ClaimAction::Pending { event: Some(e) } => Some((e.warning, e.reason, e.message.clone())),
        _ => None,
    }
}

#[test]
fn unbound_claims() {
    let vols = vec![
        pv("small", "512Mi", json!({})),
        pv("fits", "2Gi", json!({})),
    ];
    // A fitting volume is bound.
    assert_eq!(
        bound_name(&decide(&pvc(json!({})), &vols, &[])),
        Some("fits")
    );
    // None fits, no class: upstream's FailedBinding event and Pending.
    let a = decide(
        &pvc(json!({"spec": {"resources": {"requests": {"storage": "5Gi"}}}})),
        &vols,
        &[],
    );
    assert_eq!(
        pending_event(&a),
        Some((
            false,
            "FailedBinding",
            "no persistent volumes available for this claim and no storage class is set".into()
        ))
    );
    // None fits, a class: provision.
    let classy = pvc(json!({"spec": {"storageClassName": "fast"}}));
    let fast = class("fast", "example.com/nfs", "Immediate", false);
    assert!(matches!(
        decide(&classy, &vols, std::slice::from_ref(&fast)),
        ClaimAction::Provision
    ));
    // A classless claim gets the default class first.
    let a = decide(
        &pvc(json!({"spec": {"resources": {"requests": {"storage": "5Gi"}}}})),
        &vols,
        &[class("std", "x.io/p", "Immediate", true)],
    );
    assert!(
        matches!(a, ClaimAction::AssignDefaultClass(ref n) if n == "std"),
        "{a:?}"
    );
}

#[test]
fn delayed_binding_waits_for_the_scheduler() {
    let local = class(
        "local",
        "kubernetes.io/no-provisioner",
        "WaitForFirstConsumer",
        false,
    );
    let claim = pvc(json!({"spec": {"storageClassName": "local"}}));
    let vols = vec![pv(
        "free",
        "1Gi",
        json!({"spec": {"storageClassName": "local"}}),
    )];
    let a = decide(&claim, &vols, std::slice::from_ref(&local));
    assert_eq!(
        pending_event(&a),
        Some((
            false,
            "WaitForFirstConsumer",
            "waiting for first consumer to be created before binding".into()
        ))
    );
    let pods = vec!["web-0".to_string()];
    let a = sync_claim(
        &claim,
        &View {
            volumes: &vols,
            classes: std::slice::from_ref(&local),
            unscheduled_pods: &pods,
        },
    )
    .unwrap();
    assert_eq!(
        pending_event(&a),
        Some((
            false,
            "WaitForPodScheduled",
            "waiting for pod web-0 to be scheduled".into()
        ))
    );
    // The scheduler reserved a volume (claimRef): the controller completes the binding.
    let reserved = vec![pv(
        "free",
        "1Gi",
        json!({"spec": {"storageClassName": "local",
        "claimRef": {"name": "c", "namespace": "ns", "uid": "u1"}}, "status": {"phase": "Available"}}),
    )];
    let a = sync_claim(
        &claim,
        &View {
            volumes: &reserved,
            classes: std::slice::from_ref(&local),
            unscheduled_pods: &[],
        },
    )
    .unwrap();
    assert_eq!(bound_name(&a), Some("free"));
    // The scheduler chose a node for provisioning: provision (which fails for no-provisioner).
    let selected = pvc(
        json!({"metadata": {"annotations": {ANN_SELECTED_NODE: "n1"}}, "spec": {"storageClassName": "local"}}),
    );
    assert!(matches!(
        decide(&selected, &[], std::slice::from_ref(&local)),
        ClaimAction::Provision
    ));
    match find_provisioning(&selected, std::slice::from_ref(&local), |_| false) {
        Provisioning::Failed(m) => assert_eq!(
            m,
            "no volume plugin matched name: kubernetes.io/no-provisioner"
        ),
        other => panic!("{other:?}"),
    }
}

#[test]
fn claims_naming_a_volume() {
    let named = |v: &str| pvc(json!({"spec": {"volumeName": v}}));
    let vols = vec![
        pv("free", "1Gi", json!({})),
        pv("tiny", "1Mi", json!({})),
        pv(
            "mine",
            "1Gi",
            json!({"spec": {"claimRef": {"name": "c", "namespace": "ns"}}}),
        ),
        pv(
            "taken",
            "1Gi",
            json!({"spec": {"claimRef": {"name": "d", "namespace": "ns", "uid": "u2"}}}),
        ),
    ];
    assert_eq!(pending_event(&decide(&named("missing"), &vols, &[])), None);
    assert!(matches!(
        decide(&named("missing"), &vols, &[]),
        ClaimAction::Pending { event: None }
    ));
    assert_eq!(
        bound_name(&decide(&named("free"), &vols, &[])),
        Some("free")
    );
    assert_eq!(
        bound_name(&decide(&named("mine"), &vols, &[])),
        Some("mine")
    );
    assert_eq!(
        pending_event(&decide(&named("tiny"), &vols, &[])),
        Some((
            true,
            "VolumeMismatch",
            "Cannot bind to requested volume \"tiny\": requested PV is too small".into()
        ))
    );
    assert_eq!(
        pending_event(&decide(&named("taken"), &vols, &[])),
        Some((
            true,
            "FailedBinding",
            "volume \"taken\" already bound to a different claim.".into()
        ))
    );
    let by_controller = pvc(
        json!({"metadata": {"annotations": {ANN_BOUND_BY_CONTROLLER: "yes"}}, "spec": {"volumeName": "taken"}}),
    );
    assert!(matches!(
        decide(&by_controller, &vols, &[]),
        ClaimAction::Fail { .. }
    ));
}

#[test]
fn bound_claims() {
    let bound = |v: Option<&str>| {
        pvc(
            json!({"metadata": {"annotations": {ANN_BIND_COMPLETED: "yes"}}, "spec": {"volumeName": v}}),
        )
    };
    let lost = |a: ClaimAction| match a {
        ClaimAction::Lost { event } => (event.reason, event.message),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        lost(decide(&bound(None), &[], &[])).1,
        "Bound claim has lost reference to PersistentVolume. Data on the volume is lost!"
    );
    assert_eq!(
        lost(decide(&bound(Some("gone")), &[], &[])).1,
        "Bound claim has lost its PersistentVolume. Data on the volume is lost!"
    );
    let vols = vec![
        pv(
            "ok",
            "1Gi",
            json!({"spec": {"claimRef": {"name": "c", "namespace": "ns", "uid": "u1"}}}),
        ),
        pv(
            "other",
            "1Gi",
            json!({"spec": {"claimRef": {"name": "c", "namespace": "ns", "uid": "u9"}}}),
        ),
        pv("loose", "1Gi", json!({})),
    ];
    assert_eq!(
        bound_name(&decide(&bound(Some("ok")), &vols, &[])),
        Some("ok")
    );
    assert_eq!(
        bound_name(&decide(&bound(Some("loose")), &vols, &[])),
        Some("loose")
    );
    assert_eq!(
        lost(decide(&bound(Some("other")), &vols, &[])).0,
        "ClaimMisbound"
    );
}

#[test]
fn volumes() {
    let claim_ref = json!({"spec": {"claimRef": {"name": "c", "namespace": "ns", "uid": "u1"}}});
    assert_eq!(
        sync_volume(&pv("v", "1Gi", json!({})), None),
        VolumeAction::Phase("Available")
    );
    let prebound = pv(
        "v",
        "1Gi",
        json!({"spec": {"claimRef": {"name": "c", "namespace": "ns"}}}),
    );
    assert_eq!(
        sync_volume(&prebound, None),
        VolumeAction::Phase("Available")
    );
    let bound = pv("v", "1Gi", claim_ref.clone());
    assert_eq!(sync_volume(&bound, None), VolumeAction::Release);
    let claim = pvc(json!({"spec": {"volumeName": "v"}}));
    assert_eq!(
        sync_volume(&bound, Some(&claim)),
        VolumeAction::Phase("Bound")
    );
    assert_eq!(
        sync_volume(&bound, Some(&pvc(json!({})))),
        VolumeAction::SyncClaim("ns/c".into())
    );
    let block = pvc(json!({"spec": {"volumeMode": "Block"}}));
    assert!(matches!(
        sync_volume(&bound, Some(&block)),
        VolumeAction::Mismatch { .. }
    ));
    let elsewhere = pvc(json!({"spec": {"volumeName": "w"}}));
    assert_eq!(sync_volume(&bound, Some(&elsewhere)), VolumeAction::Unbind);
    let mut provisioned = claim_ref.clone();
    merge(
        &mut provisioned,
        json!({"metadata": {"annotations": {ANN_DYNAMICALLY_PROVISIONED: "x"}},
        "spec": {"persistentVolumeReclaimPolicy": "Delete"}}),
    );
    assert_eq!(
        sync_volume(&pv("v", "1Gi", provisioned), Some(&elsewhere)),
        VolumeAction::Release
    );
}

#[test]
fn reclaiming() {
    let policy = |p: &str| {
        pv(
            "v",
            "1Gi",
            json!({"spec": {"persistentVolumeReclaimPolicy": p}}),
        )
    };
    assert_eq!(reclaim(&policy("Retain")), Reclaim::Nothing);
    assert_eq!(reclaim(&policy("Delete")), Reclaim::Delete);
    assert_eq!(reclaim(&policy("Recycle")), Reclaim::Recycle);
    assert!(
        matches!(reclaim(&policy("Shred")), Reclaim::Unknown(e) if e.reason == "VolumeUnknownReclaimPolicy")
    );
    // Who deletes.
    assert_eq!(
        find_deleter(&policy("Delete"), |_| false),
        Deleter::Missing("error getting deleter volume plugin for volume \"v\": no deletable volume plugin matched".into())
    );
    let by = |p: &str| {
        pv(
            "v",
            "1Gi",
            json!({"metadata": {"annotations": {ANN_DYNAMICALLY_PROVISIONED: p}}}),
        )
    };
    assert_eq!(
        find_deleter(&by("rkube.io/local-path"), |n| n == "rkube.io/local-path"),
        Deleter::InTree("rkube.io/local-path".into())
    );
    assert_eq!(
        find_deleter(&by("ebs.csi.aws.com"), |_| false),
        Deleter::External
    );
    assert_eq!(
        find_deleter(&by("kubernetes.io/gce-pd"), |_| false),
        Deleter::Missing("no volume plugin matched name: kubernetes.io/gce-pd".into())
    );
    let csi = pv(
        "v",
        "1Gi",
        json!({"spec": {"hostPath": null, "csi": {"driver": "d", "volumeHandle": "h"}}}),
    );
    assert_eq!(find_deleter(&csi, |_| false), Deleter::External);
    // Released: the claim is gone, replaced, or bound elsewhere.
    let bound = pv(
        "v",
        "1Gi",
        json!({"spec": {"claimRef": {"name": "c", "namespace": "ns", "uid": "u1"}}}),
    );
    assert!(is_volume_released(&bound, None));
    assert!(!is_volume_released(
        &bound,
        Some(&pvc(json!({"spec": {"volumeName": "v"}})))
    ));
    assert!(is_volume_released(
        &bound,
        Some(&pvc(json!({"spec": {"volumeName": "w"}})))
    ));
    assert!(is_volume_released(
        &bound,
        Some(&pvc(json!({"metadata": {"uid": "u2"}})))
    ));
    assert!(!is_volume_released(&pv("v", "1Gi", json!({})), None));
}

#[test]
fn finalizers_of_provisioned_volumes() {
    let vol = |policy: &str, finalizers: Value| {
        pv(
            "v",
            "1Gi",
            json!({"metadata": {"annotations": {ANN_DYNAMICALLY_PROVISIONED: "rkube.io/local-path"},
            "finalizers": finalizers}, "spec": {"persistentVolumeReclaimPolicy": policy}}),
        )
    };
    let ours = |n: &str| n == "rkube.io/local-path";
    assert_eq!(
        deletion_finalizers(&vol("Delete", json!(["kubernetes.io/pv-protection"])), ours),
        Some(vec![
            "kubernetes.io/pv-protection".to_string(),
            PV_DELETION_IN_TREE_FINALIZER.to_string()
        ])
    );
    assert_eq!(
        deletion_finalizers(&vol("Retain", json!([PV_DELETION_IN_TREE_FINALIZER])), ours),
        Some(vec![])
    );
    assert_eq!(
        deletion_finalizers(&vol("Delete", json!([PV_DELETION_IN_TREE_FINALIZER])), ours),
        None
    );
    assert_eq!(
        deletion_finalizers(&vol("Delete", json!([])), |_| false),
        None
    );
}

#[test]
fn binding_writes() {
    let claim = pvc(json!({"metadata": {"resourceVersion": "7"}}));
    let free = pv("v", "2Gi", json!({}));
    let bound = bind_volume_to_claim(&free, &claim).unwrap();
    let r = bound.spec.as_ref().unwrap().claim_ref.as_ref().unwrap();
    assert_eq!(
        (r.kind.as_deref(), r.name.as_deref(), r.uid.as_deref()),
        (Some("PersistentVolumeClaim"), Some("c"), Some("u1"))
    );
    assert!(has_annotation(&bound.metadata, ANN_BOUND_BY_CONTROLLER));
    assert!(bind_volume_to_claim(&bound, &claim).is_none());
    // A user's pre-binding gains the UID but not the controller's annotation.
    let prebound = pv(
        "v",
        "2Gi",
        json!({"spec": {"claimRef": {"name": "c", "namespace": "ns"}}}),
    );
    let done = bind_volume_to_claim(&prebound, &claim).unwrap();
    assert!(!has_annotation(&done.metadata, ANN_BOUND_BY_CONTROLLER));

    let phased = with_volume_phase(&bound, "Bound", "").unwrap();
    assert!(with_volume_phase(&phased, "Bound", "").is_none());

    let c2 = bind_claim_to_volume(&claim, &phased).unwrap();
    assert_eq!(c2.spec.as_ref().unwrap().volume_name.as_deref(), Some("v"));
    assert!(
        has_annotation(&c2.metadata, ANN_BIND_COMPLETED)
            && has_annotation(&c2.metadata, ANN_BOUND_BY_CONTROLLER)
    );
    assert!(bind_claim_to_volume(&c2, &phased).is_none());

    let c3 = claim_with_status(&c2, "Bound", Some(&phased))
        .unwrap()
        .unwrap();
    let st = c3.status.as_ref().unwrap();
    assert_eq!(st.capacity.as_ref().unwrap()["storage"].0, "2Gi");
    assert_eq!(
        st.access_modes.as_deref(),
        Some(&["ReadWriteOnce".to_string()][..])
    );
    assert!(claim_with_status(&c3, "Bound", Some(&phased))
        .unwrap()
        .is_none());
    let lost = claim_with_status(&c3, "Lost", None).unwrap().unwrap();
    assert_eq!(lost.status.as_ref().unwrap().capacity, None);

    let unbound = unbind_volume(&bound);
    assert!(unbound.spec.as_ref().unwrap().claim_ref.is_none());
    assert!(unbound.metadata.annotations.is_none());
    let user = unbind_volume(&done);
    assert_eq!(
        user.spec.as_ref().unwrap().claim_ref.as_ref().unwrap().uid,
        None
    );
}

#[test]
fn provisioning() {
    let claim = pvc(json!({"spec": {"storageClassName": "fast"}}));
    let ext = class("fast", "example.com/nfs", "Immediate", false);
    assert!(matches!(
        find_provisioning(&claim, std::slice::from_ref(&ext), |_| false),
        Provisioning::External(_)
    ));
    assert!(matches!(
        find_provisioning(&claim, std::slice::from_ref(&ext), |n| n
            == "example.com/nfs"),
        Provisioning::InTree(_)
    ));
    match find_provisioning(&claim, &[], |_| false) {
        Provisioning::Failed(m) => assert_eq!(m, "storageclass.storage.k8s.io \"fast\" not found"),
        other => panic!("{other:?}"),
    }
    let made: PersistentVolume = serde_json::from_value(json!({"metadata": {},
        "spec": {"capacity": {"storage": "1Gi"}, "persistentVolumeReclaimPolicy": "Delete"}}))
    .unwrap();
    let v = provisioned_volume(
        made,
        &claim,
        &provisioned_volume_name(&claim),
        "rkube.io/local-path",
    );
    assert_eq!(v.metadata.name.as_deref(), Some("pvc-u1"));
    assert_eq!(
        v.spec.as_ref().unwrap().storage_class_name.as_deref(),
        Some("fast")
    );
    assert_eq!(
        annotation(&v.metadata, ANN_DYNAMICALLY_PROVISIONED),
        Some("rkube.io/local-path")
    );
    assert_eq!(
        v.metadata.finalizers,
        Some(vec![PV_DELETION_IN_TREE_FINALIZER.to_string()])
    );
}
