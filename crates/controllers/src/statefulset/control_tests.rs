//! Unit tests of the StatefulSet decisions.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use serde_json::{json, Value};

use super::control::*;

fn set(extra: Value) -> StatefulSet {
    let mut v = json!({
        "metadata": {"name": "web", "namespace": "default", "uid": "s-1", "generation": 2},
        "spec": {"replicas": 3, "serviceName": "web-svc", "podManagementPolicy": "OrderedReady",
                 "selector": {"matchLabels": {"app": "web"}},
                 "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"partition": 0}},
                 "template": {"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn merge(a: &mut Value, b: Value) {
    match (a, b) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

/// A pod of ordinal `ord` at `rev`, in `state`: "ready", "pending", "terminating", "failed".
fn pod(ord: i32, rev: &str, state: &str) -> Arc<Pod> {
    let mut v = json!({"metadata": {"name": format!("web-{ord}"), "namespace": "default", "uid": format!("p-{ord}"),
                                    "labels": {"app": "web", REVISION_LABEL: rev, POD_NAME_LABEL: format!("web-{ord}"),
                                               POD_INDEX_LABEL: ord.to_string()}},
                       "spec": {"containers": [{"name": "c"}]}, "status": {"phase": "Pending"}});
    let ready = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True",
                                  "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    match state {
        "ready" => merge(&mut v, ready),
        "terminating" => {
            merge(&mut v, ready);
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:30Z");
        }
        "failed" => v["status"]["phase"] = json!("Failed"),
        _ => {}
    }
    Arc::new(serde_json::from_value(v).unwrap())
}

fn now() -> Timestamp {
    "2026-01-01T00:01:00Z".parse().unwrap()
}

fn template(image: &str) -> Value {
    json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": image}]}})
}

fn run(s: &StatefulSet, pods: &[Arc<Pod>], current: &str, update: &str) -> Plan {
    let (ct, ut) = (template("old"), template("new"));
    let revs = Revisions {
        current,
        current_template: &ct,
        update,
        update_template: &ut,
    };
    plan(s, pods, &revs, now())
}

fn created(p: &Plan) -> Vec<(String, String, String)> {
    p.create
        .iter()
        .map(|v| {
            (
                v["metadata"]["name"].as_str().unwrap().to_string(),
                v["metadata"]["labels"][REVISION_LABEL]
                    .as_str()
                    .unwrap()
                    .to_string(),
                v["spec"]["containers"][0]["image"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

fn c(name: &str, rev: &str, image: &str) -> (String, String, String) {
    (name.into(), rev.into(), image.into())
}

#[test]
fn ordered_ready_creates_one_at_a_time_and_waits() {
    let s = set(json!({}));
    assert_eq!(
        created(&run(&s, &[], "r1", "r1")),
        [c("web-0", "r1", "new")]
    );
    let pending = run(&s, &[pod(0, "r1", "pending")], "r1", "r1");
    assert_eq!(
        pending,
        Plan {
            create_claims: vec![0],
            ..Plan::default()
        }
    );
    let next = run(&s, &[pod(0, "r1", "ready")], "r1", "r1");
    assert_eq!(created(&next), [c("web-1", "r1", "new")]);
    let p = &next.create[0];
    assert_eq!(p["spec"]["hostname"], "web-1");
    assert_eq!(p["metadata"]["generateName"], "web-");
    assert_eq!(p["spec"]["subdomain"], "web-svc");
    assert_eq!(p["metadata"]["labels"][POD_NAME_LABEL], "web-1");
    assert_eq!(p["metadata"]["labels"][POD_INDEX_LABEL], "1");
    assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "StatefulSet");
    assert_eq!(p["metadata"]["ownerReferences"][0]["controller"], true);
}

#[test]
fn parallel_creates_all_and_start_ordinal_shifts_names() {
    let s = set(json!({"spec": {"podManagementPolicy": "Parallel", "ordinals": {"start": 5}}}));
    let names: Vec<_> = created(&run(&s, &[], "r1", "r1"))
        .into_iter()
        .map(|c| c.0)
        .collect();
    assert_eq!(names, ["web-5", "web-6", "web-7"]);
}

#[test]
fn scale_down_highest_first_one_at_a_time() {
    let s = set(json!({"spec": {"replicas": 1}}));
    let all = [
        pod(0, "r1", "ready"),
        pod(1, "r1", "ready"),
        pod(2, "r1", "ready"),
    ];
    assert_eq!(run(&s, &all, "r1", "r1").delete, ["web-2"]);
    let terminating = [
        pod(0, "r1", "ready"),
        pod(1, "r1", "ready"),
        pod(2, "r1", "terminating"),
    ];
    assert!(run(&s, &terminating, "r1", "r1").delete.is_empty());
    let parallel = set(json!({"spec": {"replicas": 1, "podManagementPolicy": "Parallel"}}));
    assert_eq!(run(&parallel, &all, "r1", "r1").delete, ["web-2", "web-1"]);
}

#[test]
fn changed_identity_labels_are_restored() {
    let s = set(json!({"spec": {"replicas": 1}}));
    let mut v = serde_json::to_value(&*pod(0, "r1", "ready")).unwrap();
    v["metadata"]["labels"][POD_NAME_LABEL] = json!("someone-else");
    let p = run(
        &s,
        &[Arc::new(serde_json::from_value(v).unwrap())],
        "r1",
        "r1",
    );
    assert_eq!(
        p.relabel,
        [(
            "web-0".to_string(),
            json!({POD_NAME_LABEL: "web-0", POD_INDEX_LABEL: "0"})
        )]
    );
}

#[test]
fn failed_pods_are_replaced() {
    let s = set(json!({}));
    let p = run(&s, &[pod(0, "r1", "failed")], "r1", "r1");
    assert_eq!(p.delete, ["web-0"]);
    assert!(p.create.is_empty());
}

#[test]
fn rolling_update_respects_partition_and_waits() {
    let s = set(json!({"spec": {"updateStrategy": {"rollingUpdate": {"partition": 1}}}}));
    let old = [
        pod(0, "r1", "ready"),
        pod(1, "r1", "ready"),
        pod(2, "r1", "ready"),
    ];
    assert_eq!(run(&s, &old, "r1", "r2").delete, ["web-2"]);
    // web-2 recreated at the update revision, below the partition web-0 keeps the current one.
    let recreate = run(
        &s,
        &[pod(0, "r1", "ready"), pod(1, "r1", "ready")],
        "r1",
        "r2",
    );
    assert_eq!(created(&recreate), [c("web-2", "r2", "new")]);
    let next = [
        pod(0, "r1", "ready"),
        pod(1, "r1", "ready"),
        pod(2, "r2", "ready"),
    ];
    assert_eq!(run(&s, &next, "r1", "r2").delete, ["web-1"]);
    let done = [
        pod(0, "r1", "ready"),
        pod(1, "r2", "ready"),
        pod(2, "r2", "ready"),
    ];
    assert!(run(&s, &done, "r1", "r2").delete.is_empty());
    let missing0 = run(
        &s,
        &[pod(1, "r2", "ready"), pod(2, "r2", "ready")],
        "r1",
        "r2",
    );
    assert_eq!(created(&missing0), [c("web-0", "r1", "old")]);
    // maxUnavailable 2 under Parallel: two at once.
    let wide = set(json!({"spec": {"podManagementPolicy": "Parallel",
        "updateStrategy": {"rollingUpdate": {"maxUnavailable": 2}}}}));
    assert_eq!(run(&wide, &old, "r1", "r2").delete, ["web-2", "web-1"]);
    let ondelete =
        set(json!({"spec": {"updateStrategy": {"type": "OnDelete", "rollingUpdate": null}}}));
    assert!(run(&ondelete, &old, "r1", "r2").delete.is_empty());
}

#[test]
fn claims_volumes_and_retention_owner_refs() {
    let s = set(
        json!({"spec": {"volumeClaimTemplates": [{"metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}}],
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"}}}),
    );
    let claims = claims(&s, 1);
    assert_eq!(claims.len(), 1);
    assert_eq!(claims[0]["metadata"]["name"], "data-web-1");
    assert_eq!(claims[0]["metadata"]["labels"]["app"], "web");
    let p = new_pod(&s, &template("x"), "r1", 1);
    assert_eq!(
        p["spec"]["volumes"],
        json!([{"name": "data", "persistentVolumeClaim": {"claimName": "data-web-1"}}])
    );
    let claim: PersistentVolumeClaim = serde_json::from_value(claims[0].clone()).unwrap();
    let refs = claim_owner_refs(&s, &pod(1, "r1", "ready"), &claim).unwrap();
    assert_eq!(
        refs,
        json!([{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "s-1"}])
    );
    // Scaled down to 1: the claim of web-1 moves to its pod.
    let scaled = set(
        json!({"spec": {"replicas": 1, "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {}}],
        "persistentVolumeClaimRetentionPolicy": {"whenDeleted": "Delete", "whenScaled": "Delete"}}}),
    );
    let mut owned = claim.clone();
    owned.metadata.owner_references = Some(serde_json::from_value(refs).unwrap());
    let moved = claim_owner_refs(&scaled, &pod(1, "r1", "ready"), &owned).unwrap();
    assert_eq!(
        moved,
        json!([{"apiVersion": "v1", "kind": "Pod", "name": "web-1", "uid": "p-1"}])
    );
    assert_eq!(
        claim_owner_refs(&set(json!({})), &pod(1, "r1", "ready"), &claim),
        None
    );
}

#[test]
fn status_counts_and_completes_rolling_updates() {
    let s = set(json!({"spec": {"replicas": 2}}));
    let pods = [pod(0, "r1", "ready"), pod(1, "r2", "pending")];
    let st = status(&s, &pods, "r1", "r2", 0, now());
    assert_eq!(
        st,
        json!({"observedGeneration": 2, "replicas": 2, "readyReplicas": 1, "currentReplicas": 1,
        "updatedReplicas": 1, "availableReplicas": 1, "currentRevision": "r1", "updateRevision": "r2", "collisionCount": 0})
    );
    let done = [pod(0, "r2", "ready"), pod(1, "r2", "ready")];
    let st = status(&s, &done, "r1", "r2", 0, now());
    assert_eq!(
        (
            st["currentRevision"].as_str(),
            st["currentReplicas"].as_i64()
        ),
        (Some("r2"), Some(2))
    );
    let slow = set(json!({"spec": {"minReadySeconds": 600}}));
    assert_eq!(
        status(&slow, &done, "r2", "r2", 0, now())["availableReplicas"],
        0
    );
}
