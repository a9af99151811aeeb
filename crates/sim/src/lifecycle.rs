//! What a simulated kubelet does with one pod at a given time (pure, unit-tested): the status it reports
//! (upstream kubelet `generateAPIPodStatus`: phase, the five pod conditions, container statuses, IPs,
//! start time), when to look again, and when a graceful deletion is confirmed.
//!
//! Behaviour knobs, as pod annotations (all optional):
//! - `sim.rkube.io/run-for: <Go duration>`: the containers exit after running that long, with
//!   `sim.rkube.io/exit-code` (default 0). With `restartPolicy: Never` the pod then Succeeds (code 0) or
//!   Fails; `OnFailure` restarts failed containers, `Always` restarts every time (restartCount counts).
//! - `sim.rkube.io/unready-after: <Go duration>`: the containers stop being ready after that long.
//! - `sim.rkube.io/restarts: <N>`: the containers report N earlier restarts (last state: Error, exit 1).
//!
//! Deletion: a pod with a deletionTimestamp is deleted (grace 0) once the timestamp is reached, as a
//! kubelet whose containers used their whole grace period; terminated pods are deleted at once.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::Timestamp;
use serde_json::{json, Value};

use crate::cached::{SimPod, KUBELET_CONDITIONS};

pub const RUN_FOR: &str = "sim.rkube.io/run-for";
pub const EXIT_CODE: &str = "sim.rkube.io/exit-code";
pub const UNREADY_AFTER: &str = "sim.rkube.io/unready-after";
pub const RESTARTS: &str = "sim.rkube.io/restarts";

#[derive(Debug, Default, PartialEq)]
pub struct Knobs {
    pub run_for: Option<Duration>,
    pub exit_code: i32,
    pub unready_after: Option<Duration>,
    pub restarts: i32,
}

impl Knobs {
    pub fn from_annotations(
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Result<Knobs, String> {
        let get = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
        let duration = |k: &str| -> Result<Option<Duration>, String> {
            get(k)
                .map(|v| {
                    v.parse::<jiff::SignedDuration>()
                        .ok()
                        .and_then(|d| Duration::try_from(d).ok())
                        .ok_or_else(|| format!("{k}: {v:?} is not a duration"))
                })
                .transpose()
        };
        let number = |k: &str| -> Result<i32, String> {
            get(k)
                .map(|v| v.parse().map_err(|_| format!("{k}: {v:?} is not a number")))
                .transpose()
                .map(Option::unwrap_or_default)
        };
        Ok(Knobs {
            run_for: duration(RUN_FOR)?,
            exit_code: number(EXIT_CODE)?,
            unready_after: duration(UNREADY_AFTER)?,
            restarts: number(RESTARTS)?,
        })
    }
}

/// What to do with a pod now.
#[derive(Debug, PartialEq)]
pub enum Action {
    /// Write this status (a strategic merge patch of `pods/status`), then look again after `recheck`.
    Report {
        status: Value,
        recheck: Option<Duration>,
    },
    /// Nothing to write; look again after the given time, if any.
    Wait(Option<Duration>),
    /// Confirm the deletion: delete with grace period 0.
    Delete,
}

fn rfc3339(t: Timestamp) -> String {
    t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

fn until(now: Timestamp, later: Timestamp) -> Duration {
    Duration::try_from(later.duration_since(now)).unwrap_or(Duration::ZERO)
}

/// The state of the containers at `now`.
#[derive(Debug, PartialEq)]
struct Containers {
    phase: &'static str,
    running_since: Timestamp,
    restart_count: i32,
    ready: bool,
    /// Exit code of terminated containers (phase Succeeded/Failed).
    exit_code: Option<i32>,
    recheck: Option<Duration>,
}

fn containers_at(pod: &SimPod, knobs: &Knobs, started: Timestamp, now: Timestamp) -> Containers {
    let policy = pod.spec.restart_policy.as_deref().unwrap_or("Always");
    let elapsed = until(started, now);
    let mut c = Containers {
        phase: "Running",
        running_since: started,
        restart_count: knobs.restarts,
        ready: true,
        exit_code: None,
        recheck: None,
    };
    let mut next: Vec<Duration> = Vec::new();
    if let Some(run) = knobs.run_for.filter(|d| !d.is_zero()) {
        let restarts_forever =
            policy == "Always" || (policy == "OnFailure" && knobs.exit_code != 0);
        if elapsed >= run && !restarts_forever {
            c.phase = if knobs.exit_code == 0 {
                "Succeeded"
            } else {
                "Failed"
            };
            c.ready = false;
            c.exit_code = Some(knobs.exit_code);
            return c;
        }
        let cycles = (elapsed.as_nanos() / run.as_nanos()) as u32;
        c.restart_count += cycles as i32;
        c.running_since = started + run * cycles;
        next.push(run * (cycles + 1) - elapsed);
    }
    if let Some(after) = knobs.unready_after {
        if elapsed >= after {
            c.ready = false;
        } else {
            next.push(after - elapsed);
        }
    }
    c.recheck = next.into_iter().min();
    c
}

/// The action for `pod` on a node whose InternalIP is `host_ip`, with `pod_ip` its address.
pub fn next_action(
    pod: &SimPod,
    knobs: &Knobs,
    host_ip: &str,
    pod_ip: &str,
    now: Timestamp,
) -> Action {
    let status = &pod.status;
    let phase = status.phase.as_deref().unwrap_or("Pending");
    let terminated = matches!(phase, "Succeeded" | "Failed");
    if let Some(deletion) = &pod.metadata.deletion_timestamp {
        if terminated || now >= deletion.0 {
            return Action::Delete;
        }
        return Action::Wait(Some(until(now, deletion.0)));
    }
    if terminated {
        return Action::Wait(None);
    }
    let started = status.start_time.as_ref().map_or(now, |t| t.0);
    let c = containers_at(pod, knobs, started, now);
    let spec = &pod.spec;
    let old_conditions = &status.conditions;
    let gates_pass = spec.readiness_gates.iter().all(|g| {
        old_conditions
            .iter()
            .any(|c| c.type_ == g.condition_type && c.status == "True")
    });
    let running = c.phase == "Running";
    let pod_ready = running && c.ready && gates_pass;
    let condition = |type_: &str, ok: bool, reason: Option<&str>| {
        let s = if ok { "True" } else { "False" };
        let since = old_conditions
            .iter()
            .find(|o| o.type_ == type_ && o.status == s)
            .and_then(|o| o.last_transition_time.as_ref())
            .map_or(rfc3339(now), |t| rfc3339(t.0));
        let mut v =
            json!({"type": type_, "status": s, "lastProbeTime": null, "lastTransitionTime": since});
        if let Some(r) = reason {
            v["reason"] = json!(r);
        }
        v
    };
    let not_ready_reason = if running {
        "ContainersNotReady"
    } else {
        "PodCompleted"
    };
    let conditions = vec![
        condition("PodReadyToStartContainers", running, None),
        condition("Initialized", true, (!running).then_some("PodCompleted")),
        condition(
            "Ready",
            pod_ready,
            (!pod_ready).then_some(if running && c.ready {
                "ReadinessGatesNotReady"
            } else {
                not_ready_reason
            }),
        ),
        condition(
            "ContainersReady",
            running && c.ready,
            (!(running && c.ready)).then_some(not_ready_reason),
        ),
        condition("PodScheduled", true, None),
    ];
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let container_status = |name: &str, image: &str, init: bool| {
        let id = format!("sim://{uid}/{name}");
        let state = match (init, c.exit_code) {
            (true, _) => {
                json!({"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": rfc3339(started), "finishedAt": rfc3339(started), "containerID": id}})
            }
            (false, Some(code)) => {
                json!({"terminated": {"exitCode": code, "reason": if code == 0 { "Completed" } else { "Error" }, "startedAt": rfc3339(c.running_since), "finishedAt": rfc3339(now), "containerID": id}})
            }
            (false, None) => json!({"running": {"startedAt": rfc3339(c.running_since)}}),
        };
        let last_state = if !init && c.restart_count > 0 {
            json!({"terminated": {"exitCode": if knobs.exit_code != 0 { knobs.exit_code } else { 1 }, "reason": "Error", "startedAt": rfc3339(started), "finishedAt": rfc3339(c.running_since), "containerID": id}})
        } else {
            json!({})
        };
        json!({
            "name": name, "image": image, "imageID": format!("sim://{image}"), "containerID": id,
            "ready": init || (running && c.ready), "started": !init && running,
            "restartCount": if init { 0 } else { c.restart_count },
            "state": state, "lastState": last_state,
        })
    };
    let containers: Vec<Value> = spec
        .containers
        .iter()
        .map(|k| container_status(&k.name, k.image.as_deref().unwrap_or(""), false))
        .collect();
    let init: Vec<Value> = spec
        .init_containers
        .iter()
        .map(|k| container_status(&k.name, k.image.as_deref().unwrap_or(""), true))
        .collect();
    let ip = if spec.host_network == Some(true) {
        host_ip
    } else {
        pod_ip
    };
    let mut desired = json!({
        "phase": c.phase,
        "conditions": conditions,
        "hostIP": host_ip, "hostIPs": [{"ip": host_ip}],
        "podIP": ip, "podIPs": [{"ip": ip}],
        "startTime": rfc3339(started),
        "containerStatuses": containers,
    });
    if !init.is_empty() {
        desired["initContainerStatuses"] = Value::Array(init);
    }
    if status.signature() == signature(&desired) {
        return Action::Wait(c.recheck);
    }
    Action::Report {
        status: desired,
        recheck: c.recheck,
    }
}

/// What distinguishes one reported status from another (timestamps aside); for a cached pod's
/// status, [`SimStatus::signature`](crate::cached::SimStatus::signature) gives the same value.
pub fn signature(status: &Value) -> Value {
    let containers: Vec<Value> = status["containerStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            let state = c["state"]
                .as_object()
                .and_then(|s| s.keys().next().cloned());
            json!([c["name"], c["ready"], c["restartCount"], state])
        })
        .collect();
    let conditions: Vec<Value> = status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            c["type"]
                .as_str()
                .is_some_and(|t| KUBELET_CONDITIONS.contains(&t))
        })
        .map(|c| json!([c["type"], c["status"]]))
        .collect();
    json!([
        status["phase"],
        status["podIP"],
        status["hostIP"],
        conditions,
        containers
    ])
}

#[cfg(test)]
mod tests;
