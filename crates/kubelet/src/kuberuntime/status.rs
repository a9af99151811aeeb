//! A pod's status from what the runtime reports (upstream `kubelet_pods.go` `generateAPIPodStatus`,
//! `getPhase`, `convertToAPIContainerStatuses`, and `pkg/kubelet/status/generate.go` for the
//! conditions). Pure: the runtime's records, the probe results and the kubelet's waiting reasons in,
//! the `status` JSON out.

use std::collections::HashMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Pod};
use serde_json::{json, Value};

use super::pod_actions::is_sidecar;

/// The runtime's view of one container attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct ContainerRecord {
    pub id: String,
    pub name: String,
    pub attempt: u32,
    pub state: RecordState,
    pub created_at: i64,
    pub started_at: i64,
    pub finished_at: i64,
    pub exit_code: i32,
    pub reason: String,
    pub message: String,
    pub image: String,
    pub image_ref: String,
    pub hash: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordState {
    Created,
    Running,
    Exited,
    Unknown,
}

/// The runtime's view of a pod: its newest sandbox and every container attempt (newest first).
#[derive(Clone, Debug, Default)]
pub struct PodRecord {
    pub sandbox_id: Option<String>,
    pub sandbox_ready: bool,
    pub pod_ips: Vec<String>,
    pub containers: Vec<ContainerRecord>,
}

impl PodRecord {
    /// The newest attempt of container `name`.
    pub fn latest(&self, name: &str) -> Option<&ContainerRecord> {
        self.containers.iter().find(|c| c.name == name)
    }

    /// The attempt before the newest of container `name`.
    pub fn previous(&self, name: &str) -> Option<&ContainerRecord> {
        self.containers.iter().filter(|c| c.name == name).nth(1)
    }
}

/// What the kubelet knows beyond the runtime: probe results, why containers wait, and the times.
#[derive(Clone, Debug, Default)]
pub struct StatusInputs {
    /// Container ID -> ready (readiness probe; absent: not probed yet).
    pub ready: HashMap<String, bool>,
    /// Container ID -> started (startup probe).
    pub started: HashMap<String, bool>,
    /// Container name -> (reason, message) of a container that is waiting (CrashLoopBackOff,
    /// ErrImageNeverPull, CreateContainerConfigError, ...).
    pub waiting: HashMap<String, (String, String)>,
    pub host_ip: String,
    /// The pod is being terminated: its phase becomes terminal once nothing runs.
    pub terminating: bool,
}

fn rfc3339_ns(ns: i64) -> Value {
    if ns <= 0 {
        return Value::Null;
    }
    Timestamp::from_nanosecond(ns as i128)
        .map(|t| json!(t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()))
        .unwrap_or(Value::Null)
}

fn terminated_json(c: &ContainerRecord) -> Value {
    let reason = if !c.reason.is_empty() {
        c.reason.clone()
    } else if c.exit_code == 0 {
        "Completed".into()
    } else {
        "Error".into()
    };
    let mut t = json!({
        "exitCode": c.exit_code, "reason": reason,
        "startedAt": rfc3339_ns(c.started_at), "finishedAt": rfc3339_ns(c.finished_at),
        "containerID": format!("containerd://{}", c.id),
    });
    if !c.message.is_empty() {
        t["message"] = json!(c.message);
    }
    t
}

/// The status of one spec container.
pub(super) fn container_status(
    spec: &Container,
    record: &PodRecord,
    inputs: &StatusInputs,
    is_init: bool,
) -> Value {
    let image = spec.image.clone().unwrap_or_default();
    let latest = record.latest(&spec.name);
    let waiting = inputs.waiting.get(&spec.name);
    let mut s = json!({
        "name": spec.name, "image": image, "imageID": "", "ready": false,
        "restartCount": 0, "started": false, "state": {}, "lastState": {},
    });
    let Some(c) = latest else {
        let (reason, message) = waiting
            .cloned()
            .unwrap_or_else(|| ("ContainerCreating".into(), String::new()));
        let mut w = json!({"reason": reason});
        if !message.is_empty() {
            w["message"] = json!(message);
        }
        s["state"] = json!({"waiting": w});
        if is_init {
            s["started"] = json!(false);
        }
        return s;
    };
    s["containerID"] = json!(format!("containerd://{}", c.id));
    s["imageID"] = json!(c.image_ref);
    if !c.image.is_empty() && !c.image.starts_with("sha256:") {
        s["image"] = json!(c.image);
    }
    s["restartCount"] = json!(c.attempt);
    let previous = record.previous(&spec.name);
    match c.state {
        RecordState::Running => {
            s["state"] = json!({"running": {"startedAt": rfc3339_ns(c.started_at)}});
            let started = inputs.started.get(&c.id).copied().unwrap_or(true);
            s["started"] = json!(started);
            s["ready"] = json!(started && inputs.ready.get(&c.id).copied().unwrap_or(true));
            if let Some(p) = previous.filter(|p| p.state == RecordState::Exited) {
                s["lastState"] = json!({"terminated": terminated_json(p)});
            }
        }
        RecordState::Exited => match waiting {
            // Waiting to restart: the attempt that ended is the last state.
            Some((reason, message)) => {
                let mut w = json!({"reason": reason});
                if !message.is_empty() {
                    w["message"] = json!(message);
                }
                s["state"] = json!({"waiting": w});
                s["lastState"] = json!({"terminated": terminated_json(c)});
            }
            None => {
                s["state"] = json!({"terminated": terminated_json(c)});
                if let Some(p) = previous.filter(|p| p.state == RecordState::Exited) {
                    s["lastState"] = json!({"terminated": terminated_json(p)});
                }
                // A completed init container counts as ready (upstream).
                s["ready"] = json!(is_init && c.exit_code == 0);
            }
        },
        RecordState::Created | RecordState::Unknown => {
            let (reason, message) = waiting
                .cloned()
                .unwrap_or_else(|| ("ContainerCreating".into(), String::new()));
            let mut w = json!({"reason": reason});
            if !message.is_empty() {
                w["message"] = json!(message);
            }
            s["state"] = json!({"waiting": w});
            // A restarted container being created still shows how the last attempt ended
            // (upstream: lastTerminationState whatever the current state); without it a restarted
            // sidecar reads as one that never ran, which upstream's getPhase counts as pending.
            if let Some(p) = previous.filter(|p| p.state == RecordState::Exited) {
                s["lastState"] = json!({"terminated": terminated_json(p)});
            }
        }
    }
    s
}

/// Upstream `getPhase` for the regular containers' statuses.
/// `sidecars_running`: running sidecars count as running containers (upstream), terminated ones
/// do not count at all.
pub fn phase(
    restart_policy: &str,
    init_pending: bool,
    init_failed: bool,
    statuses: &[Value],
    sidecars_running: usize,
    terminating: bool,
) -> &'static str {
    if init_failed {
        return "Failed";
    }
    if init_pending {
        return "Pending";
    }
    let (mut running, mut waiting, mut stopped, mut succeeded) = (sidecars_running, 0, 0, 0);
    for s in statuses {
        if s["state"].get("running").is_some() {
            running += 1;
        } else if let Some(t) = s["state"].get("terminated") {
            stopped += 1;
            if t["exitCode"] == 0 {
                succeeded += 1;
            }
        } else if s["lastState"].get("terminated").is_some() {
            stopped += 1;
        } else {
            waiting += 1;
        }
    }
    if waiting > 0 && !(terminating && running == 0) {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped > 0 || terminating {
        // A pod being terminated ends in a terminal phase once nothing runs (upstream 1.27+).
        if terminating {
            return if stopped > 0 && stopped == succeeded && waiting == 0 {
                "Succeeded"
            } else {
                "Failed"
            };
        }
        if restart_policy == "Always" {
            return "Running";
        }
        if stopped == succeeded {
            return "Succeeded";
        }
        if restart_policy == "Never" {
            return "Failed";
        }
        return "Running";
    }
    "Pending"
}

fn condition(
    previous: &[Value],
    type_: &str,
    ok: bool,
    reason: Option<&str>,
    message: Option<String>,
    now: &str,
) -> Value {
    let status = if ok { "True" } else { "False" };
    let since = previous
        .iter()
        .find(|c| c["type"] == type_ && c["status"] == status)
        .and_then(|c| c["lastTransitionTime"].as_str())
        .unwrap_or(now)
        .to_string();
    let mut c = json!({"type": type_, "status": status, "lastProbeTime": null, "lastTransitionTime": since});
    if let Some(r) = reason {
        c["reason"] = json!(r);
    }
    if let Some(m) = message {
        c["message"] = json!(m);
    }
    c
}

/// The pod's status (upstream `generateAPIPodStatus`).
pub fn pod_status(pod: &Pod, record: &PodRecord, inputs: &StatusInputs, now: Timestamp) -> Value {
    let spec = pod.spec.clone().unwrap_or_default();
    let old = pod.status.clone().unwrap_or_default();
    let now_s = now.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let previous: Vec<Value> = old
        .conditions
        .as_ref()
        .and_then(|c| serde_json::to_value(c).ok())
        .and_then(|v| v.as_array().cloned())
        .unwrap_or_default();
    let policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let sidecar = |s: &Value| {
        spec.init_containers
            .iter()
            .flatten()
            .any(|c| c.name == s["name"].as_str().unwrap_or("") && is_sidecar(c))
    };
    let init: Vec<Value> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| container_status(c, record, inputs, !is_sidecar(c)))
        .collect();
    let containers: Vec<Value> = spec
        .containers
        .iter()
        .map(|c| container_status(c, record, inputs, false))
        .collect();
    // A regular init container is done once it succeeded, a sidecar once it runs and started.
    let init_done = |s: &Value| {
        if sidecar(s) {
            s["state"].get("running").is_some() && s["started"] == true
        } else {
            s["state"]["terminated"]["exitCode"] == 0
        }
    };
    let init_pending_names: Vec<String> = init
        .iter()
        .filter(|s| !init_done(s))
        .filter_map(|s| s["name"].as_str().map(String::from))
        .collect();
    let init_failed = policy == "Never"
        && init.iter().filter(|s| !sidecar(s)).any(|s| {
            s["state"]["terminated"]["exitCode"]
                .as_i64()
                .is_some_and(|c| c != 0)
        });
    // Once regular containers have started, init containers are done even if their records are
    // gone; a sidecar that exited and waits to restart does not make the pod pending again.
    let app_started = containers.iter().any(|s| s["containerID"].is_string());
    let init_pending = !init_pending_names.is_empty() && !app_started;
    let sidecars_running = init
        .iter()
        .filter(|s| sidecar(s) && s["state"].get("running").is_some())
        .count();
    let phase = phase(
        policy,
        init_pending,
        init_failed,
        &containers,
        sidecars_running,
        inputs.terminating,
    );
    let terminal = matches!(phase, "Succeeded" | "Failed");
    // Sidecars take part in the pod's readiness (upstream 1.29+), listed first.
    let unready: Vec<String> = init
        .iter()
        .filter(|s| sidecar(s))
        .chain(containers.iter())
        .filter(|s| s["ready"] != true)
        .filter_map(|s| s["name"].as_str().map(String::from))
        .collect();
    let gates_ok = spec.readiness_gates.iter().flatten().all(|g| {
        previous
            .iter()
            .any(|c| c["type"] == g.condition_type.as_str() && c["status"] == "True")
    });
    let containers_ready = unready.is_empty() && !terminal;
    let list = |names: &[String]| format!("[{}]", names.join(" "));
    let (ready_reason, ready_message) = if terminal {
        (Some("PodCompleted"), None)
    } else if !unready.is_empty() {
        (
            Some("ContainersNotReady"),
            Some(format!(
                "containers with unready status: {}",
                list(&unready)
            )),
        )
    } else if !gates_ok {
        (
            Some("ReadinessGatesNotReady"),
            Some("the status of pod readiness gate is not \"True\"".to_string()),
        )
    } else {
        (None, None)
    };
    let sandbox_ok =
        record.sandbox_ready && (spec.host_network == Some(true) || !record.pod_ips.is_empty());
    let mut conditions = vec![
        condition(
            &previous,
            "PodReadyToStartContainers",
            sandbox_ok && !terminal,
            None,
            None,
            &now_s,
        ),
        if init_pending {
            condition(
                &previous,
                "Initialized",
                false,
                Some("ContainersNotInitialized"),
                Some(format!(
                    "containers with incomplete status: {}",
                    list(&init_pending_names)
                )),
                &now_s,
            )
        } else {
            condition(
                &previous,
                "Initialized",
                true,
                terminal.then_some("PodCompleted"),
                None,
                &now_s,
            )
        },
        condition(
            &previous,
            "Ready",
            containers_ready && gates_ok,
            ready_reason,
            ready_message.clone(),
            &now_s,
        ),
        condition(
            &previous,
            "ContainersReady",
            containers_ready,
            if terminal {
                Some("PodCompleted")
            } else if unready.is_empty() {
                None
            } else {
                Some("ContainersNotReady")
            },
            if terminal || unready.is_empty() {
                None
            } else {
                ready_message.clone()
            },
            &now_s,
        ),
        condition(&previous, "PodScheduled", true, None, None, &now_s),
    ];
    // Conditions owned by others (readiness gates, DisruptionTarget, ...) are kept as they are.
    let ours = [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ];
    for c in &previous {
        if !ours.contains(&c["type"].as_str().unwrap_or("")) {
            conditions.push(c.clone());
        }
    }
    let start_time = old
        .start_time
        .as_ref()
        .map(|t| json!(t.0.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()))
        .unwrap_or_else(|| json!(now_s));
    let ips: Vec<String> = if spec.host_network == Some(true) {
        vec![inputs.host_ip.clone()]
    } else {
        record.pod_ips.clone()
    };
    let mut status = json!({
        "phase": phase,
        "conditions": conditions,
        "hostIP": inputs.host_ip, "hostIPs": [{"ip": inputs.host_ip}],
        "startTime": start_time,
        "containerStatuses": containers,
        "qosClass": crate::kuberuntime::config::qos_class(pod),
    });
    if let Some(ip) = ips.first() {
        status["podIP"] = json!(ip);
        status["podIPs"] = json!(ips.iter().map(|ip| json!({"ip": ip})).collect::<Vec<_>>());
    } else if let Some(ip) = old.pod_ip.as_ref() {
        // A stopped sandbox has no IP any more; upstream keeps reporting the last one.
        status["podIP"] = json!(ip);
        status["podIPs"] = json!([{"ip": ip}]);
    }
    if !init.is_empty() {
        status["initContainerStatuses"] = Value::Array(init);
    }
    if let Some(e) = super::ephemeral::statuses(&spec, record, inputs) {
        status["ephemeralContainerStatuses"] = e;
    }
    status
}

#[cfg(test)]
mod tests;
