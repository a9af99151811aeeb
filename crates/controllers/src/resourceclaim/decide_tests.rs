use super::*;
use serde_json::json;

fn pod(status_claims: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "web", "namespace": "ns", "uid": "p1"},
        "spec": {"containers": [], "resourceClaims": [
            {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
            {"name": "shared", "resourceClaimName": "common"}]},
        "status": {"resourceClaimStatuses": status_claims}}))
    .unwrap()
}

fn claim(v: serde_json::Value) -> ResourceClaim {
    let mut base = json!({"metadata": {"name": "web-gpu-abcde", "namespace": "ns",
        "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "p1",
                             "controller": true}],
        "annotations": {POD_CLAIM_ANNOTATION: "gpu"}},
        "spec": {"devices": {"requests": []}}});
    merge(&mut base, v);
    serde_json::from_value(base).unwrap()
}

fn merge(base: &mut serde_json::Value, patch: serde_json::Value) {
    match (base, patch) {
        (serde_json::Value::Object(b), serde_json::Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k).or_insert(serde_json::Value::Null), v);
            }
        }
        (b, p) => *b = p,
    }
}

fn entry(name: &str, uid: &str) -> ResourceClaimConsumerReference {
    ResourceClaimConsumerReference {
        api_group: None,
        resource: "pods".into(),
        name: name.into(),
        uid: uid.into(),
    }
}

#[test]
fn names_of_pod_claims() {
    let p = pod(json!([]));
    let pcs = pod_claims(&p);
    assert_eq!(
        claim_name(&p, &pcs[0]),
        Err(NameError::NotCreated("ns/web".into()))
    );
    assert_eq!(
        NameError::NotCreated("ns/web".into()).to_string(),
        "pod \"ns/web\": ResourceClaim not created yet"
    );
    assert_eq!(claim_name(&p, &pcs[1]), Ok((Some("common".into()), false)));
    let p = pod(json!([{"name": "gpu", "resourceClaimName": "web-gpu-abcde"}]));
    assert_eq!(
        claim_name(&p, &pod_claims(&p)[0]),
        Ok((Some("web-gpu-abcde".into()), true))
    );
    assert_eq!(pod_claim_index(&p), ["ns/web-gpu-abcde", "ns/common"]);
    // Recorded as not needed.
    let p = pod(json!([{"name": "gpu"}]));
    assert_eq!(claim_name(&p, &pod_claims(&p)[0]), Ok((None, true)));
    let bare = PodResourceClaim {
        name: "x".into(),
        ..Default::default()
    };
    assert!(matches!(
        claim_name(&p, &bare),
        Err(NameError::Unsupported { .. })
    ));
}

#[test]
fn claims_from_templates() {
    let p = pod(json!([]));
    let template: ResourceClaimTemplate = serde_json::from_value(json!({
        "metadata": {"name": "one-gpu", "namespace": "ns"},
        "spec": {"metadata": {"labels": {"a": "b"}, "annotations": {"x": "y"}},
                 "spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu"}}]}}}}))
    .unwrap();
    let c = claim_from_template(&p, &pod_claims(&p)[0], &template);
    assert_eq!(c.metadata.generate_name.as_deref(), Some("web-gpu-"));
    assert_eq!(c.metadata.name, None);
    assert_eq!(c.metadata.namespace.as_deref(), Some("ns"));
    let a = c.metadata.annotations.as_ref().unwrap();
    assert_eq!(
        (a["x"].as_str(), a[POD_CLAIM_ANNOTATION].as_str()),
        ("y", "gpu")
    );
    assert_eq!(c.metadata.labels.as_ref().unwrap()["a"], "b");
    let o = &c.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (
            o.kind.as_str(),
            o.name.as_str(),
            o.uid.as_str(),
            o.controller,
            o.block_owner_deletion
        ),
        ("Pod", "web", "p1", Some(true), Some(true))
    );
    assert_eq!(c.spec, template.spec.spec);
    assert_eq!(owning_pod(&c), Some(("web", "p1")));
    assert_eq!(owner_index(&c), ["p1"]);
}

#[test]
fn long_generated_names_keep_both_parts() {
    let pod_name = "p".repeat(60);
    let pc = "c".repeat(20);
    let g = generate_name(&pod_name, &pc);
    assert!(g.len() <= 57, "{g}");
    // 60*57/82 = 41, 20*57/82 = 13.
    assert_eq!(g, format!("{}-{}", "p".repeat(41), "c".repeat(13)));
    assert_eq!(generate_name("a", "b"), "a-b-");
}

#[test]
fn ownership_and_lookup() {
    let p = pod(json!([]));
    let mine = Arc::new(claim(json!({})));
    assert!(is_for_pod(&p, &mine).is_ok());
    let foreign = claim(json!({"metadata": {"ownerReferences": [
        {"apiVersion": "v1", "kind": "Pod", "name": "web", "uid": "other", "controller": true}]}}));
    assert_eq!(
        is_for_pod(&p, &foreign).unwrap_err(),
        "ResourceClaim ns/web-gpu-abcde was not created for pod ns/web (pod is not owner)"
    );
    let other_entry = Arc::new(claim(
        json!({"metadata": {"name": "x", "annotations": {POD_CLAIM_ANNOTATION: "other"}}}),
    ));
    let found = find_generated([other_entry.clone(), mine.clone()], "gpu").unwrap();
    assert_eq!(found.metadata.name.as_deref(), Some("web-gpu-abcde"));
    assert!(find_generated([other_entry], "gpu").is_none());
}

#[test]
fn which_pods_need_work() {
    // No claim yet for the template entry: create.
    let p = pod(json!([]));
    assert!(pod_needs_work(&p, |_| None));
    // Created and recorded; the user's claim is missing: the user must create it.
    let p = pod(json!([{"name": "gpu", "resourceClaimName": "web-gpu-abcde"}]));
    let mine = Arc::new(claim(json!({})));
    let lookup = |n: &str| (n == "web-gpu-abcde").then(|| mine.clone());
    assert!(!pod_needs_work(&p, lookup));
    // Recorded but deleted since: made again.
    assert!(pod_needs_work(&p, |_| None));
    // Scheduled, allocated and not reserved: reserve.
    let mut bound = p.clone();
    bound.spec.as_mut().unwrap().node_name = Some("n1".into());
    bound
        .spec
        .as_mut()
        .unwrap()
        .resource_claims
        .as_mut()
        .unwrap()
        .truncate(1);
    let allocated = Arc::new(claim(
        json!({"status": {"allocation": {"devices": {"results": []}}}}),
    ));
    assert!(pod_needs_work(&bound, |_| Some(allocated.clone())));
    let reserved = Arc::new(claim(json!({"status": {
        "allocation": {"devices": {"results": []}},
        "reservedFor": [{"resource": "pods", "name": "web", "uid": "p1"}]}})));
    assert!(!pod_needs_work(&bound, |_| Some(reserved.clone())));
    // Being deleted: nothing.
    let mut deleting = pod(json!([]));
    deleting.metadata.deletion_timestamp =
        serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap();
    assert!(!pod_needs_work(&deleting, |_| None));
}

#[test]
fn done_pods() {
    let mut p = pod(json!([]));
    assert!(pod_needs_claims(&p, false));
    assert!(!pod_needs_claims(&p, true));
    p.status.as_mut().unwrap().phase = Some("Succeeded".into());
    assert!(is_pod_done(&p));
    let mut p = pod(json!([]));
    p.metadata.deletion_timestamp = serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap();
    assert!(is_pod_done(&p), "deleted before scheduling");
    p.spec.as_mut().unwrap().node_name = Some("n1".into());
    assert!(!is_pod_done(&p), "deleted on a node: may still run");
}

#[test]
fn reservation_checks() {
    let p = pod(json!([]));
    let e = entry("web", "p1");
    assert_eq!(check_entry(&e, true, Some(&p)), Ok(Verdict::Remove));
    assert_eq!(check_entry(&e, false, Some(&p)), Ok(Verdict::Keep));
    assert_eq!(check_entry(&e, false, None), Ok(Verdict::AskServer));
    assert_eq!(
        check_entry(&entry("web", "old"), false, Some(&p)),
        Ok(Verdict::Remove)
    );
    let mut failed = p.clone();
    failed.status.as_mut().unwrap().phase = Some("Failed".into());
    assert_eq!(check_entry(&e, false, Some(&failed)), Ok(Verdict::Remove));
    let mut foreign = e.clone();
    foreign.api_group = Some("apps".into());
    assert!(check_entry(&foreign, false, None)
        .unwrap_err()
        .starts_with("unsupported ReservedFor entry"));
    assert_eq!(server_verdict(&e, Some(&p)), Verdict::Keep);
    assert_eq!(server_verdict(&e, None), Verdict::Remove);
    assert_eq!(
        server_verdict(&entry("web", "old"), Some(&p)),
        Verdict::Remove
    );
}

#[test]
fn claim_plans() {
    let reserved = json!({"metadata": {"finalizers": [FINALIZER]}, "status": {
        "allocation": {"devices": {"results": []}},
        "reservedFor": [{"resource": "pods", "name": "web", "uid": "p1"},
                        {"resource": "pods", "name": "b", "uid": "p2"}]}});
    let c = claim(reserved.clone());

    // One of two users gone: pruned, still allocated, finalizer kept.
    let plan = plan_claim(&c, vec![entry("b", "p2")], Owner::Needs);
    let s = plan.status.unwrap().status.unwrap();
    assert_eq!(s.reserved_for.unwrap(), [entry("b", "p2")]);
    assert!(s.allocation.is_some());
    assert!(!plan.remove_finalizer && !plan.delete);

    // The last user gone: deallocated, finalizer dropped, and the done pod's claim deleted.
    let plan = plan_claim(&c, vec![], Owner::Done);
    let s = plan.status.unwrap().status.unwrap();
    assert!(s.reserved_for.is_none() && s.allocation.is_none());
    assert!(plan.remove_finalizer && plan.delete);
    // ... but not when the owner is unknown (the garbage collector's case).
    assert!(!plan_claim(&c, vec![], Owner::Unknown).delete);

    // Without the finalizer the allocation is not the controller's to clear.
    let mut no_fin = c.clone();
    no_fin.metadata.finalizers = None;
    let plan = plan_claim(&no_fin, vec![], Owner::None);
    assert!(plan.status.unwrap().status.unwrap().allocation.is_some());
    assert!(!plan.remove_finalizer && !plan.delete);

    // Nothing changed: nothing written.
    let plan = plan_claim(&c, reserved_for(&c).to_vec(), Owner::Needs);
    assert_eq!(
        plan,
        ClaimPlan {
            status: None,
            remove_finalizer: false,
            delete: false
        }
    );

    // Deleted while allocated and unused: deallocated, finalizer dropped.
    let deleting = claim(json!({"metadata": {"finalizers": [FINALIZER, "other"],
        "deletionTimestamp": "2026-01-01T00:00:00Z"},
        "status": {"allocation": {"devices": {"results": []}}}}));
    let plan = plan_claim(&deleting, vec![], Owner::Done);
    assert!(plan.status.unwrap().status.unwrap().allocation.is_none());
    assert!(plan.remove_finalizer);
    assert!(!plan.delete, "already being deleted");
    assert_eq!(
        without_finalizer(deleting).metadata.finalizers.unwrap(),
        ["other"]
    );
    assert_eq!(without_finalizer(c).metadata.finalizers, None);
}

#[test]
fn owner_states() {
    let c = claim(json!({}));
    let live = Arc::new(pod(json!([])));
    assert_eq!(owner_state(&c, |_| Some(live.clone())), Owner::Needs);
    assert_eq!(owner_state(&c, |_| None), Owner::Unknown);
    let mut replaced = pod(json!([]));
    replaced.metadata.uid = Some("p9".into());
    let replaced = Arc::new(replaced);
    assert_eq!(owner_state(&c, |_| Some(replaced.clone())), Owner::Done);
    let mut plain = c.clone();
    plain.metadata.owner_references = None;
    assert_eq!(owner_state(&plain, |_| None), Owner::None);
}

#[test]
fn deleted_uids_are_bounded() {
    let mut d = DeletedUids::default();
    for i in 0..DELETED_UIDS_MAX + 10 {
        d.add(&format!("u{i}"));
    }
    d.add("u20");
    assert!(!d.has("u0") && !d.has("u9"));
    assert!(d.has("u10") && d.has(&format!("u{}", DELETED_UIDS_MAX + 9)));
    assert_eq!(d.order.len(), DELETED_UIDS_MAX);
}
