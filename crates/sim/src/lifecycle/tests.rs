//! The simulated kubelet's decisions over time, from the pod and a clock.

use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

use super::*;
use crate::cached::SimPod;

/// The pod as the simulator's informer decodes it from the API server's JSON.
fn cached(p: &Pod) -> SimPod {
    serde_json::from_value(serde_json::to_value(p).unwrap()).unwrap()
}

/// `next_action` on the pod as cached (shadows the glob import: every test goes through the decode).
fn next_action(p: &Pod, knobs: &Knobs, host_ip: &str, pod_ip: &str, now: Timestamp) -> Action {
    super::next_action(&cached(p), knobs, host_ip, pod_ip, now)
}

fn pod(extra: Value) -> Pod {
    let mut v = json!({
        "metadata": {"name": "p", "namespace": "default", "uid": "u-1"},
        "spec": {"nodeName": "sim-0", "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Pending", "qosClass": "BestEffort"}
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

fn t(s: &str) -> Timestamp {
    s.parse().unwrap()
}

fn knobs(p: &Pod) -> Knobs {
    Knobs::from_annotations(cached(p).metadata.annotations.as_ref()).unwrap()
}

/// Applies a reported status to the pod, as the API server would.
fn with_status(p: &Pod, status: &Value) -> Pod {
    let mut v = serde_json::to_value(p).unwrap();
    merge(&mut v, json!({"status": status}));
    serde_json::from_value(v).unwrap()
}

#[test]
fn a_pending_pod_goes_running_and_ready_then_stays_quiet() {
    let p = pod(json!({}));
    let now = t("2026-01-01T00:00:00Z");
    let Action::Report { status, recheck } =
        next_action(&p, &knobs(&p), "172.16.0.1", "10.128.0.2", now)
    else {
        panic!("expected a status report");
    };
    assert_eq!(recheck, None);
    assert_eq!(status["phase"], "Running");
    assert_eq!(status["podIP"], "10.128.0.2");
    assert_eq!(status["hostIPs"], json!([{"ip": "172.16.0.1"}]));
    assert_eq!(status["startTime"], "2026-01-01T00:00:00Z");
    let types: Vec<&str> = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled"
        ]
    );
    assert!(status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .all(|c| c["status"] == "True"));
    let c = &status["containerStatuses"][0];
    assert_eq!(
        (c["ready"].as_bool(), c["started"].as_bool()),
        (Some(true), Some(true))
    );
    assert_eq!(c["state"]["running"]["startedAt"], "2026-01-01T00:00:00Z");
    // Reported once: the same pod later needs nothing.
    let running = with_status(&p, &status);
    assert_eq!(
        next_action(
            &running,
            &knobs(&running),
            "172.16.0.1",
            "10.128.0.2",
            t("2026-01-01T00:05:00Z")
        ),
        Action::Wait(None)
    );
}

#[test]
fn run_for_completes_a_never_restarting_pod() {
    let p = pod(
        json!({"metadata": {"annotations": {RUN_FOR: "1s"}}, "spec": {"restartPolicy": "Never"}}),
    );
    let start = t("2026-01-01T00:00:00Z");
    let Action::Report { status, recheck } = next_action(&p, &knobs(&p), "h", "10.0.0.2", start)
    else {
        panic!()
    };
    assert_eq!(recheck, Some(Duration::from_secs(1)));
    let running = with_status(&p, &status);
    let Action::Report { status, .. } = next_action(
        &running,
        &knobs(&running),
        "h",
        "10.0.0.2",
        t("2026-01-01T00:00:01Z"),
    ) else {
        panic!()
    };
    assert_eq!(status["phase"], "Succeeded");
    assert_eq!(
        status["containerStatuses"][0]["state"]["terminated"]["reason"],
        "Completed"
    );
    let ready = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("PodCompleted"))
    );
    let done = with_status(&running, &status);
    assert_eq!(
        next_action(
            &done,
            &knobs(&done),
            "h",
            "10.0.0.2",
            t("2026-01-01T00:00:05Z")
        ),
        Action::Wait(None)
    );
}

#[test]
fn a_failing_pod_fails_or_restarts_by_policy() {
    let failing = pod(
        json!({"metadata": {"annotations": {RUN_FOR: "2s", EXIT_CODE: "3"}}, "spec": {"restartPolicy": "Never"}}),
    );
    let started = with_status(
        &failing,
        &json!({"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}),
    );
    let Action::Report { status, .. } = next_action(
        &started,
        &knobs(&started),
        "h",
        "ip",
        t("2026-01-01T00:00:02Z"),
    ) else {
        panic!()
    };
    assert_eq!(status["phase"], "Failed");
    assert_eq!(
        status["containerStatuses"][0]["state"]["terminated"]["exitCode"],
        3
    );

    let always = pod(json!({"metadata": {"annotations": {RUN_FOR: "2s"}}}));
    let started = with_status(
        &always,
        &json!({"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}),
    );
    let Action::Report { status, recheck } = next_action(
        &started,
        &knobs(&started),
        "h",
        "ip",
        t("2026-01-01T00:00:05Z"),
    ) else {
        panic!()
    };
    assert_eq!(status["phase"], "Running");
    assert_eq!(status["containerStatuses"][0]["restartCount"], 2);
    assert_eq!(
        status["containerStatuses"][0]["state"]["running"]["startedAt"],
        "2026-01-01T00:00:04Z"
    );
    assert_eq!(recheck, Some(Duration::from_secs(1)));
}

#[test]
fn unready_after_and_readiness_gates() {
    let p = pod(json!({"metadata": {"annotations": {UNREADY_AFTER: "10s"}}}));
    let started = with_status(
        &p,
        &json!({"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}),
    );
    let Action::Report { status, recheck } = next_action(
        &started,
        &knobs(&started),
        "h",
        "ip",
        t("2026-01-01T00:00:04Z"),
    ) else {
        panic!()
    };
    assert_eq!(recheck, Some(Duration::from_secs(6)));
    assert_eq!(status["containerStatuses"][0]["ready"], true);
    let Action::Report { status, .. } = next_action(
        &started,
        &knobs(&started),
        "h",
        "ip",
        t("2026-01-01T00:00:10Z"),
    ) else {
        panic!()
    };
    assert_eq!(status["containerStatuses"][0]["ready"], false);

    let gated = pod(json!({"spec": {"readinessGates": [{"conditionType": "example.com/lb"}]}}));
    let Action::Report { status, .. } =
        next_action(&gated, &knobs(&gated), "h", "ip", t("2026-01-01T00:00:00Z"))
    else {
        panic!()
    };
    let ready = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap()
        .clone();
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some("ReadinessGatesNotReady"))
    );
    let mut with_gate = serde_json::to_value(with_status(&gated, &status)).unwrap();
    with_gate["status"]["conditions"]
        .as_array_mut()
        .unwrap()
        .push(json!({"type": "example.com/lb", "status": "True"}));
    let opened: Pod = serde_json::from_value(with_gate).unwrap();
    let Action::Report { status, .. } = next_action(
        &opened,
        &knobs(&opened),
        "h",
        "ip",
        t("2026-01-01T00:00:01Z"),
    ) else {
        panic!()
    };
    assert!(status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True"));
}

#[test]
fn graceful_deletion_is_confirmed_after_the_grace_period() {
    let p = pod(
        json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:30Z", "deletionGracePeriodSeconds": 30},
                       "status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z"}}),
    );
    assert_eq!(
        next_action(&p, &knobs(&p), "h", "ip", t("2026-01-01T00:00:10Z")),
        Action::Wait(Some(Duration::from_secs(20)))
    );
    assert_eq!(
        next_action(&p, &knobs(&p), "h", "ip", t("2026-01-01T00:00:30Z")),
        Action::Delete
    );
    let done = pod(
        json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:30Z"}, "status": {"phase": "Succeeded"}}),
    );
    assert_eq!(
        next_action(&done, &knobs(&done), "h", "ip", t("2026-01-01T00:00:01Z")),
        Action::Delete
    );
}

#[test]
fn bad_knobs_are_reported() {
    let p = pod(json!({"metadata": {"annotations": {RUN_FOR: "soon"}}}));
    assert!(Knobs::from_annotations(p.metadata.annotations.as_ref())
        .unwrap_err()
        .contains("run-for"));
    let host = pod(json!({"spec": {"hostNetwork": true}}));
    let Action::Report { status, .. } = next_action(
        &host,
        &knobs(&host),
        "172.16.0.9",
        "10.0.0.2",
        t("2026-01-01T00:00:00Z"),
    ) else {
        panic!()
    };
    assert_eq!(status["podIP"], "172.16.0.9");
}

/// A pod as a Deployment makes it, with what the simulator does not read: labels, owner,
/// managedFields, resources, probes, volumes, tolerations.
fn rich_pod(extra: Value) -> Pod {
    pod(merge_all(
        json!({
            "metadata": {
                "labels": {"app": "web"}, "generateName": "web-",
                "annotations": {"kubectl.kubernetes.io/restartedAt": "x", RESTARTS: "2"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
                    "uid": "rs-1", "controller": true}],
                "managedFields": [{"manager": "kube-controller-manager", "operation": "Update",
                    "apiVersion": "v1", "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}}]
            },
            "spec": {
                "restartPolicy": "OnFailure", "schedulerName": "default-scheduler",
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                    "effect": "NoExecute", "tolerationSeconds": 300}],
                "volumes": [{"name": "v", "emptyDir": {}}],
                "initContainers": [{"name": "init", "image": "busybox", "command": ["true"]}],
                "containers": [{"name": "c", "image": "busybox",
                    "resources": {"requests": {"cpu": "10m"}},
                    "readinessProbe": {"exec": {"command": ["true"]}},
                    "env": [{"name": "A", "value": "1"}]}],
                "readinessGates": [{"conditionType": "example.com/lb"}]
            }
        }),
        extra,
    ))
}

fn merge_all(mut a: Value, b: Value) -> Value {
    merge(&mut a, b);
    a
}

#[test]
fn the_cached_pod_keeps_only_what_the_simulator_reads() {
    let p = rich_pod(json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:30Z"}}));
    let c = cached(&p);
    assert_eq!(c.metadata.name.as_deref(), Some("p"));
    assert_eq!(c.metadata.uid.as_deref(), Some("u-1"));
    assert!(c.metadata.deletion_timestamp.is_some());
    assert!(c.metadata.labels.is_none() && c.metadata.managed_fields.is_none());
    assert!(c.metadata.owner_references.is_none() && c.metadata.generate_name.is_none());
    let annotations = c.metadata.annotations.as_ref().unwrap();
    assert_eq!(annotations.keys().collect::<Vec<_>>(), [RESTARTS]);
    assert_eq!(knobs(&p).restarts, 2);
    assert_eq!(c.spec.restart_policy.as_deref(), Some("OnFailure"));
    assert_eq!(c.spec.readiness_gates[0].condition_type, "example.com/lb");
    assert_eq!(
        (
            c.spec.init_containers[0].name.as_str(),
            c.spec.containers[0].image.as_deref()
        ),
        ("init", Some("busybox"))
    );
    // Nulls read as absent, as in the typed Pod.
    let nulls: SimPod =
        serde_json::from_value(json!({"metadata": null, "spec": {"containers": null,
        "readinessGates": null}, "status": {"conditions": null, "containerStatuses": [{"name": "c",
        "ready": null, "restartCount": null, "state": null}]}}))
        .unwrap();
    assert!(nulls.spec.containers.is_empty() && nulls.status.container_statuses[0].state.is_none());
}

/// The cached status's signature is the one the whole status's JSON gives, for the statuses the
/// simulator writes over a pod's life and for ones others may write.
#[test]
fn the_cached_status_signature_matches_the_whole_status() {
    let same = |p: &Pod| {
        let whole = signature(&serde_json::to_value(p.status.clone().unwrap_or_default()).unwrap());
        assert_eq!(cached(p).status.signature(), whole, "{:?}", p.status);
    };
    let started = json!({"status": {"phase": "Running", "startTime": "2026-01-01T00:00:00Z",
        "podIP": "10.0.0.2", "conditions": [{"type": "example.com/lb", "status": "True"}]}});
    let cases = [
        rich_pod(json!({})),
        rich_pod(started.clone()),
        rich_pod(merge_all(
            started,
            json!({"metadata": {"annotations": {RUN_FOR: "5s", EXIT_CODE: "3"}}}),
        )),
        rich_pod(json!({"spec": {"hostNetwork": true, "restartPolicy": "Never"}})),
    ];
    for mut p in cases {
        same(&p);
        for at in ["00:00:00", "00:00:04", "00:00:10", "00:00:31"] {
            let now = t(&format!("2026-01-01T{at}Z"));
            if let Action::Report { status, .. } = next_action(&p, &knobs(&p), "h", "ip", now) {
                p = with_status(&p, &status);
                same(&p);
            }
        }
    }
    same(&pod(
        json!({"status": {"phase": null, "containerStatuses": [
        {"name": "a", "ready": false, "restartCount": 1, "image": "i", "imageID": "",
            "state": {"waiting": {"reason": "CrashLoopBackOff"}}},
        {"name": "b", "ready": true, "restartCount": 0, "image": "i", "imageID": "", "state": {}},
        {"name": "c", "ready": true, "restartCount": 0, "image": "i", "imageID": ""},
        {"name": "d", "ready": false, "restartCount": 0, "image": "i", "imageID": "",
            "state": {"terminated": {"exitCode": 1}, "waiting": {}}}],
        "conditions": [{"type": "Ready", "status": "False"}, {"type": "DisruptionTarget", "status": "True"}]}}),
    ));
}
