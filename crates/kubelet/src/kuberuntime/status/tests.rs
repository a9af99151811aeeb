use super::*;

fn running() -> Value {
    json!({"state": {"running": {}}, "lastState": {}})
}
fn exited(code: i32) -> Value {
    json!({"state": {"terminated": {"exitCode": code}}, "lastState": {}})
}
fn crashloop() -> Value {
    json!({"state": {"waiting": {"reason": "CrashLoopBackOff"}}, "lastState": {"terminated": {"exitCode": 1}}})
}
fn creating() -> Value {
    json!({"state": {"waiting": {"reason": "ContainerCreating"}}, "lastState": {}})
}

#[test]
fn phases_follow_get_phase() {
    let cases: Vec<(&str, Vec<Value>, bool, &str)> = vec![
        ("Always", vec![creating()], false, "Pending"),
        ("Always", vec![running()], false, "Running"),
        ("Always", vec![running(), creating()], false, "Pending"),
        ("Always", vec![exited(0)], false, "Running"),
        ("Always", vec![crashloop()], false, "Running"),
        ("OnFailure", vec![exited(0), exited(0)], false, "Succeeded"),
        ("OnFailure", vec![exited(1)], false, "Running"),
        ("Never", vec![exited(1)], false, "Failed"),
        ("Never", vec![exited(0), running()], false, "Running"),
        ("Always", vec![exited(137)], true, "Failed"),
        ("Always", vec![exited(0)], true, "Succeeded"),
        ("Always", vec![creating()], true, "Failed"),
        ("Always", vec![running()], true, "Running"),
    ];
    for (i, (policy, statuses, terminating, want)) in cases.into_iter().enumerate() {
        assert_eq!(
            phase(policy, false, false, &statuses, 0, terminating),
            want,
            "case {i}"
        );
    }
    assert_eq!(
        phase("Never", false, true, &[running()], 0, false),
        "Failed"
    );
    assert_eq!(
        phase("Always", true, false, &[creating()], 0, false),
        "Pending"
    );
}

fn record(state: RecordState, code: i32, attempt: u32) -> ContainerRecord {
    ContainerRecord {
        id: format!("id{attempt}"),
        name: "c".into(),
        attempt,
        state,
        created_at: 1,
        started_at: 1_700_000_000_000_000_000,
        finished_at: if state == RecordState::Exited {
            1_700_000_010_000_000_000
        } else {
            0
        },
        exit_code: code,
        reason: String::new(),
        message: String::new(),
        image: "docker.io/library/busybox:latest".into(),
        image_ref: "sha256:abc".into(),
        hash: "h".into(),
    }
}

fn test_pod(policy: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {"restartPolicy": policy, "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Pending", "qosClass": "BestEffort",
                   "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}]}
    }))
    .unwrap()
}

#[test]
fn running_container_status() {
    let rec = PodRecord {
        sandbox_id: Some("s".into()),
        sandbox_ready: true,
        pod_ips: vec!["10.42.0.5".into()],
        containers: vec![
            record(RecordState::Running, 0, 1),
            record(RecordState::Exited, 2, 0),
        ],
    };
    let inputs = StatusInputs {
        host_ip: "127.0.0.1".into(),
        ..Default::default()
    };
    let s = pod_status(&test_pod("Always"), &rec, &inputs, Timestamp::UNIX_EPOCH);
    assert_eq!(s["phase"], "Running");
    assert_eq!(s["podIP"], "10.42.0.5");
    let c = &s["containerStatuses"][0];
    assert_eq!(c["restartCount"], 1);
    assert_eq!(c["ready"], true);
    assert_eq!(c["started"], true);
    assert_eq!(c["containerID"], "containerd://id1");
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 2);
    assert_eq!(c["lastState"]["terminated"]["reason"], "Error");
    let types: Vec<&str> = s["conditions"]
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
    assert_eq!(
        s["conditions"][4]["lastTransitionTime"],
        "2020-01-01T00:00:00Z"
    );
    assert_eq!(s["conditions"][2]["status"], "True");
}

#[test]
fn crashlooping_and_unready() {
    let rec = PodRecord {
        sandbox_id: Some("s".into()),
        sandbox_ready: true,
        pod_ips: vec!["10.42.0.5".into()],
        containers: vec![record(RecordState::Exited, 1, 3)],
    };
    let mut inputs = StatusInputs {
        host_ip: "h".into(),
        ..Default::default()
    };
    inputs.waiting.insert(
        "c".into(),
        ("CrashLoopBackOff".into(), "back-off 40s".into()),
    );
    let s = pod_status(&test_pod("Always"), &rec, &inputs, Timestamp::UNIX_EPOCH);
    let c = &s["containerStatuses"][0];
    assert_eq!(c["state"]["waiting"]["reason"], "CrashLoopBackOff");
    assert_eq!(c["lastState"]["terminated"]["exitCode"], 1);
    assert_eq!(c["restartCount"], 3);
    assert_eq!(s["conditions"][2]["reason"], "ContainersNotReady");
    assert_eq!(
        s["conditions"][2]["message"],
        "containers with unready status: [c]"
    );

    let done = PodRecord {
        containers: vec![record(RecordState::Exited, 0, 0)],
        ..rec
    };
    let s = pod_status(
        &test_pod("OnFailure"),
        &done,
        &StatusInputs::default(),
        Timestamp::UNIX_EPOCH,
    );
    assert_eq!(s["phase"], "Succeeded");
    assert_eq!(
        s["containerStatuses"][0]["state"]["terminated"]["reason"],
        "Completed"
    );
    assert_eq!(s["conditions"][2]["reason"], "PodCompleted");
}

#[test]
fn readiness_probe_gates_ready() {
    let rec = PodRecord {
        sandbox_id: Some("s".into()),
        sandbox_ready: true,
        pod_ips: vec!["10.42.0.5".into()],
        containers: vec![record(RecordState::Running, 0, 0)],
    };
    let mut inputs = StatusInputs::default();
    inputs.ready.insert("id0".into(), false);
    let s = pod_status(&test_pod("Always"), &rec, &inputs, Timestamp::UNIX_EPOCH);
    assert_eq!(s["containerStatuses"][0]["ready"], false);
    assert_eq!(s["conditions"][2]["status"], "False");
}

fn sidecar_pod(policy: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": "p", "namespace": "default", "uid": "u"},
        "spec": {"restartPolicy": policy,
                 "initContainers": [{"name": "side", "image": "busybox", "restartPolicy": "Always",
                                     "startupProbe": {"exec": {"command": ["true"]}}}],
                 "containers": [{"name": "c", "image": "busybox"}]},
        "status": {"phase": "Pending"}
    }))
    .unwrap()
}

fn named(name: &str, id: &str, state: RecordState, code: i32) -> ContainerRecord {
    ContainerRecord {
        name: name.into(),
        id: id.into(),
        ..record(state, code, 0)
    }
}

#[test]
fn a_sidecar_initializes_the_pod_once_started_and_takes_part_in_readiness() {
    let mut rec = PodRecord {
        sandbox_id: Some("s".into()),
        sandbox_ready: true,
        pod_ips: vec!["10.42.0.5".into()],
        containers: vec![named("side", "sc", RecordState::Running, 0)],
    };
    let mut inputs = StatusInputs::default();
    inputs.started.insert("sc".into(), false);
    let s = pod_status(&sidecar_pod("Never"), &rec, &inputs, Timestamp::UNIX_EPOCH);
    assert_eq!(s["phase"], "Pending");
    let initialized = |s: &Value| {
        s["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == "Initialized")
            .cloned()
            .unwrap()
    };
    assert_eq!(initialized(&s)["status"], "False");
    assert_eq!(
        initialized(&s)["message"],
        "containers with incomplete status: [side]"
    );

    // Started: initialized; the app runs; an unready sidecar keeps the pod unready.
    inputs.started.insert("sc".into(), true);
    inputs.ready.insert("sc".into(), false);
    rec.containers
        .insert(0, named("c", "app", RecordState::Running, 0));
    let s = pod_status(&sidecar_pod("Never"), &rec, &inputs, Timestamp::UNIX_EPOCH);
    assert_eq!(s["phase"], "Running");
    assert_eq!(initialized(&s)["status"], "True");
    assert_eq!(s["initContainerStatuses"][0]["started"], true);
    let ready = s["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "ContainersReady")
        .cloned()
        .unwrap();
    assert_eq!(ready["status"], "False");
    assert_eq!(ready["message"], "containers with unready status: [side]");

    // The app is done, the sidecar still runs: Running until the sidecar is stopped; its exit
    // code then does not count.
    rec.containers[0] = named("c", "app", RecordState::Exited, 0);
    let s = pod_status(&sidecar_pod("Never"), &rec, &inputs, Timestamp::UNIX_EPOCH);
    assert_eq!(s["phase"], "Running");
    rec.containers[1] = named("side", "sc", RecordState::Exited, 137);
    let s = pod_status(&sidecar_pod("Never"), &rec, &inputs, Timestamp::UNIX_EPOCH);
    assert_eq!(s["phase"], "Succeeded");
}

/// Upstream `getPhase`: once the pod has initialized, a restarted sidecar (a new attempt not yet
/// started, or waiting to restart) does not make a pod whose app containers run Pending again.
#[test]
fn a_restarted_sidecar_keeps_a_running_pod_running() {
    let mut pod = sidecar_pod("Always");
    pod.status = Some(
        serde_json::from_value(json!({"phase": "Running", "conditions": [
            {"type": "Initialized", "status": "True", "lastTransitionTime": "2020-01-01T00:00:00Z"}]}))
        .unwrap(),
    );
    let side = |id: &str, state, code, attempt| ContainerRecord {
        attempt,
        ..named("side", id, state, code)
    };
    let mut inputs = StatusInputs::default();
    inputs.started.insert("sc1".into(), false);
    for new_attempt in [RecordState::Created, RecordState::Running] {
        let rec = PodRecord {
            sandbox_id: Some("s".into()),
            sandbox_ready: true,
            pod_ips: vec!["10.42.0.5".into()],
            containers: vec![
                named("c", "app", RecordState::Running, 0),
                // Newest attempt first, as `pod_record` orders them.
                side("sc1", new_attempt, 0, 1),
                side("sc0", RecordState::Exited, 1, 0),
            ],
        };
        let s = pod_status(&pod, &rec, &inputs, Timestamp::UNIX_EPOCH);
        assert_eq!(s["phase"], "Running", "{new_attempt:?}: {s:#}");
        let side = &s["initContainerStatuses"][0];
        assert_eq!(side["restartCount"], 1);
        assert_eq!(side["lastState"]["terminated"]["exitCode"], 1, "{side:#}");
        assert_eq!(
            s["conditions"]
                .as_array()
                .unwrap()
                .iter()
                .find(|c| c["type"] == "Initialized")
                .unwrap()["status"],
            "True"
        );
    }
    // Waiting to restart (CrashLoopBackOff) after its exit.
    let rec = PodRecord {
        sandbox_id: Some("s".into()),
        sandbox_ready: true,
        pod_ips: vec!["10.42.0.5".into()],
        containers: vec![
            named("c", "app", RecordState::Running, 0),
            side("sc0", RecordState::Exited, 1, 0),
        ],
    };
    inputs.waiting.insert(
        "side".into(),
        ("CrashLoopBackOff".into(), "back-off 10s".into()),
    );
    let s = pod_status(&pod, &rec, &inputs, Timestamp::UNIX_EPOCH);
    assert_eq!(s["phase"], "Running", "{s:#}");
}
