//! The pod printer of upstream `pkg/printers/internalversion` (`printPod`): READY counts ready
//! containers (restartable init containers, "sidecars", included), STATUS condenses phase, reason, init
//! container progress (`Init:0/2`, `Init:CrashLoopBackOff`), container waiting/terminated reasons and
//! deletion (`Terminating`, `Unknown` for `NodeLost` pods) into one word, RESTARTS adds `(5m ago)` after
//! the last restart.

use serde_json::{json, Value};

use super::time::{self, Instant};
use super::util::{arr_at, bool_at, condition_status, deleting, get, int_at, name, or, str_at};
use super::{age_cell, col, printer, wide, ColumnDefinition, Printers, AGE, NAME};

const COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Ready", "string", "The aggregate readiness state of this pod for accepting traffic."),
    col("Status", "string", "The aggregate status of the containers in this pod."),
    col(
        "Restarts",
        "string",
        "The number of times the containers in this pod have been restarted and when the last container in this pod has restarted.",
    ),
    AGE,
    wide("IP", "string", "podIP address allocated to the pod. Routable at least within the cluster. Empty if not yet allocated."),
    wide("Node", "string", "NodeName indicates in which node this pod is scheduled."),
    wide("Nominated Node", "string", "nominatedNodeName is set only when this pod preempts other pods on the node, but it cannot be scheduled right away as preemption victims receive their graceful termination periods."),
    wide("Readiness Gates", "string", "If specified, all readiness gates will be evaluated for pod readiness."),
];

pub(super) const PRINTERS: Printers = &[("", "pods", printer(COLUMNS, cells))];

/// `node.NodeUnreachablePodReason`: the reason the node lifecycle controller gives pods of lost nodes.
const NODE_UNREACHABLE_POD_REASON: &str = "NodeLost";

/// `podutil.IsRestartableInitContainer`: an init container with `restartPolicy: Always`.
fn restartable(pod: &Value, container_name: &str) -> bool {
    arr_at(pod, &["spec", "initContainers"])
        .iter()
        .find(|c| str_at(c, &["name"]) == container_name)
        .is_some_and(|c| str_at(c, &["restartPolicy"]) == "Always")
}

/// `lastState.terminated.finishedAt` of a container status.
fn last_finished(status: &Value) -> Option<Instant> {
    get(status, &["lastState", "terminated"])
        .filter(|t| t.is_object())
        .and_then(|t| time::time_of(t.get("finishedAt")))
}

/// A terminated state, if the container status has one.
fn terminated(status: &Value) -> Option<&Value> {
    get(status, &["state", "terminated"]).filter(|t| t.is_object())
}

/// A waiting state, if the container status has one.
fn waiting(status: &Value) -> Option<&Value> {
    get(status, &["state", "waiting"]).filter(|w| w.is_object())
}

fn later(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

fn cells(pod: &Value, now: Instant) -> Vec<Value> {
    let spec_containers = arr_at(pod, &["spec", "containers"]).len();
    let init_specs = arr_at(pod, &["spec", "initContainers"]);
    let total = spec_containers
        + init_specs
            .iter()
            .filter(|c| str_at(c, &["restartPolicy"]) == "Always")
            .count();
    let mut ready = 0usize;
    let mut restarts: i64 = 0;
    let mut restartable_restarts: i64 = 0;
    let mut last_restart: Option<Instant> = None;
    let mut last_restartable_restart: Option<Instant> = None;

    let phase = str_at(pod, &["status", "phase"]);
    let mut reason = or(str_at(pod, &["status", "reason"]), phase).to_string();
    for c in arr_at(pod, &["status", "conditions"]) {
        if str_at(c, &["type"]) == "PodScheduled" && str_at(c, &["reason"]) == "SchedulingGated" {
            reason = "SchedulingGated".to_string();
        }
    }

    let mut initializing = false;
    for (i, status) in arr_at(pod, &["status", "initContainerStatuses"])
        .iter()
        .enumerate()
    {
        let count = int_at(status, &["restartCount"]);
        restarts += count;
        last_restart = later(last_restart, last_finished(status));
        let is_restartable = restartable(pod, str_at(status, &["name"]));
        if is_restartable {
            restartable_restarts += count;
            last_restartable_restart = later(last_restartable_restart, last_finished(status));
        }
        let term = terminated(status);
        if term.is_some_and(|t| int_at(t, &["exitCode"]) == 0) {
            continue;
        }
        if is_restartable && bool_at(status, &["started"]) {
            if bool_at(status, &["ready"]) {
                ready += 1;
            }
            continue;
        }
        if let Some(t) = term {
            let r = str_at(t, &["reason"]);
            reason = if !r.is_empty() {
                format!("Init:{r}")
            } else if int_at(t, &["signal"]) != 0 {
                format!("Init:Signal:{}", int_at(t, &["signal"]))
            } else {
                format!("Init:ExitCode:{}", int_at(t, &["exitCode"]))
            };
        } else if let Some(r) = waiting(status)
            .map(|w| str_at(w, &["reason"]))
            .filter(|r| !r.is_empty() && *r != "PodInitializing")
        {
            reason = format!("Init:{r}");
        } else {
            reason = format!("Init:{i}/{}", init_specs.len());
        }
        initializing = true;
        break;
    }

    if !initializing
        || condition_status(pod, &["status", "conditions"], "Initialized") == Some("True")
    {
        restarts = restartable_restarts;
        last_restart = last_restartable_restart;
        let mut has_running = false;
        for status in arr_at(pod, &["status", "containerStatuses"]).iter().rev() {
            restarts += int_at(status, &["restartCount"]);
            last_restart = later(last_restart, last_finished(status));
            let waiting_reason = waiting(status)
                .map(|w| str_at(w, &["reason"]))
                .unwrap_or("");
            let term = terminated(status);
            if !waiting_reason.is_empty() {
                reason = waiting_reason.to_string();
            } else if let Some(t) = term {
                let r = str_at(t, &["reason"]);
                reason = if !r.is_empty() {
                    r.to_string()
                } else if int_at(t, &["signal"]) != 0 {
                    format!("Signal:{}", int_at(t, &["signal"]))
                } else {
                    format!("ExitCode:{}", int_at(t, &["exitCode"]))
                };
            } else if bool_at(status, &["ready"])
                && get(status, &["state", "running"]).is_some_and(Value::is_object)
            {
                has_running = true;
                ready += 1;
            }
        }
        if reason == "Completed" && has_running {
            // hasPodReadyCondition: any Ready condition that is True.
            let pod_ready = arr_at(pod, &["status", "conditions"])
                .iter()
                .any(|c| str_at(c, &["type"]) == "Ready" && str_at(c, &["status"]) == "True");
            reason = if pod_ready {
                "Running".to_string()
            } else {
                "NotReady".to_string()
            };
        }
    }

    let deleting = deleting(pod);
    if deleting && str_at(pod, &["status", "reason"]) == NODE_UNREACHABLE_POD_REASON {
        reason = "Unknown".to_string();
    } else if deleting && phase != "Succeeded" && phase != "Failed" {
        reason = "Terminating".to_string();
    }

    let restarts_cell = match last_restart {
        Some(t) if restarts != 0 => format!("{restarts} ({} ago)", time::since(Some(t), now)),
        _ => restarts.to_string(),
    };

    let pod_ip = arr_at(pod, &["status", "podIPs"])
        .first()
        .map(|ip| str_at(ip, &["ip"]))
        .filter(|ip| !ip.is_empty())
        .unwrap_or_else(|| str_at(pod, &["status", "podIP"]));
    let gates = arr_at(pod, &["spec", "readinessGates"]);
    let readiness_gates = if gates.is_empty() {
        "<none>".to_string()
    } else {
        let true_count = gates
            .iter()
            .filter(|g| {
                condition_status(
                    pod,
                    &["status", "conditions"],
                    str_at(g, &["conditionType"]),
                ) == Some("True")
            })
            .count();
        format!("{true_count}/{}", gates.len())
    };

    vec![
        json!(name(pod)),
        json!(format!("{ready}/{total}")),
        json!(reason),
        json!(restarts_cell),
        age_cell(pod, now),
        json!(or(pod_ip, "<none>")),
        json!(or(str_at(pod, &["spec", "nodeName"]), "<none>")),
        json!(or(str_at(pod, &["status", "nominatedNodeName"]), "<none>")),
        json!(readiness_gates),
    ]
}

/// The row conditions of a pod: `Completed` for succeeded and failed pods.
pub(super) fn row_conditions(pod: &Value) -> Option<Value> {
    let (reason, message) = match str_at(pod, &["status", "phase"]) {
        "Succeeded" => ("Succeeded", "The pod has completed successfully."),
        "Failed" => ("Failed", "The pod failed."),
        _ => return None,
    };
    Some(json!([{"type": "Completed", "status": "True", "reason": reason, "message": message}]))
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::testing::{header, now, row, strs, CREATED};
    use super::super::{cells as print, row_conditions};

    fn pod(spec: Value, status: Value) -> Value {
        json!({
            "metadata": {"name": "web", "creationTimestamp": CREATED},
            "spec": spec,
            "status": status,
        })
    }

    fn one_container() -> Value {
        json!({"containers": [{"name": "app", "image": "nginx"}], "nodeName": "node-1"})
    }

    /// The first five cells (NAME READY STATUS RESTARTS AGE) as strings.
    fn short(obj: &Value) -> Vec<String> {
        strs(&row("", "pods", obj)[..5])
    }

    #[test]
    fn columns() {
        assert_eq!(
            header("", "pods"),
            vec![
                ("Name", 0),
                ("Ready", 0),
                ("Status", 0),
                ("Restarts", 0),
                ("Age", 0),
                ("IP", 1),
                ("Node", 1),
                ("Nominated Node", 1),
                ("Readiness Gates", 1),
            ]
        );
    }

    #[test]
    fn running_pod_with_wide_cells() {
        let p = pod(
            one_container(),
            json!({
                "phase": "Running",
                "podIP": "10.0.0.5",
                "podIPs": [{"ip": "10.0.0.5"}, {"ip": "fd00::5"}],
                "conditions": [{"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "app", "ready": true, "restartCount": 0,
                    "state": {"running": {"startedAt": CREATED}}}]
            }),
        );
        assert_eq!(
            row("", "pods", &p),
            vec![
                json!("web"),
                json!("1/1"),
                json!("Running"),
                json!("0"),
                json!("10m"),
                json!("10.0.0.5"),
                json!("node-1"),
                json!("<none>"),
                json!("<none>"),
            ]
        );
        assert_eq!(row_conditions("", "pods", &p), None);
    }

    #[test]
    fn status_cases() {
        let waiting = |reason: &str| json!({"waiting": {"reason": reason}});
        let cs = |state: Value, ready: bool| json!([{"name": "app", "ready": ready, "restartCount": 0, "state": state}]);
        let cases: Vec<(&str, Value, Value, [&str; 3])> = vec![
            (
                "pending, image being pulled",
                one_container(),
                json!({"phase": "Pending", "containerStatuses": cs(waiting("ContainerCreating"), false)}),
                ["0/1", "ContainerCreating", "0"],
            ),
            (
                "pending, no status yet",
                one_container(),
                json!({"phase": "Pending"}),
                ["0/1", "Pending", "0"],
            ),
            (
                "completed",
                one_container(),
                json!({"phase": "Succeeded", "containerStatuses":
                    cs(json!({"terminated": {"exitCode": 0, "reason": "Completed"}}), false)}),
                ["0/1", "Completed", "0"],
            ),
            (
                "failed with error",
                one_container(),
                json!({"phase": "Failed", "containerStatuses":
                    cs(json!({"terminated": {"exitCode": 1, "reason": "Error"}}), false)}),
                ["0/1", "Error", "0"],
            ),
            (
                "terminated without reason: exit code",
                one_container(),
                json!({"phase": "Running", "containerStatuses": cs(json!({"terminated": {"exitCode": 137}}), false)}),
                ["0/1", "ExitCode:137", "0"],
            ),
            (
                "terminated without reason: signal",
                one_container(),
                json!({"phase": "Running", "containerStatuses":
                    cs(json!({"terminated": {"exitCode": 0, "signal": 9}}), false)}),
                ["0/1", "Signal:9", "0"],
            ),
            (
                "evicted: pod reason wins over phase",
                one_container(),
                json!({"phase": "Failed", "reason": "Evicted"}),
                ["0/1", "Evicted", "0"],
            ),
            (
                "scheduling gated",
                one_container(),
                json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]}),
                ["0/1", "SchedulingGated", "0"],
            ),
            (
                "running but not ready",
                one_container(),
                json!({"phase": "Running", "containerStatuses": cs(json!({"running": {}}), false)}),
                ["0/1", "Running", "0"],
            ),
        ];
        for (what, spec, status, want) in cases {
            let got = short(&pod(spec, status));
            assert_eq!(got[1..4], want.map(String::from), "{what}");
        }
    }

    #[test]
    fn completed_pod_row_condition() {
        let p = pod(one_container(), json!({"phase": "Succeeded"}));
        assert_eq!(
            row_conditions("", "pods", &p),
            Some(
                json!([{"type": "Completed", "status": "True", "reason": "Succeeded",
                "message": "The pod has completed successfully."}])
            )
        );
        let p = pod(one_container(), json!({"phase": "Failed"}));
        assert_eq!(
            row_conditions("", "pods", &p).map(|c| c[0]["message"].clone()),
            Some(json!("The pod failed."))
        );
        assert_eq!(row_conditions("apps", "pods", &p), None);
    }

    #[test]
    fn terminating_and_node_lost() {
        let mut p = pod(
            one_container(),
            json!({"phase": "Running", "containerStatuses": [{"name": "app", "ready": true, "state": {"running": {}}}]}),
        );
        p["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:09:00Z");
        assert_eq!(short(&p)[1..3], ["1/1", "Terminating"]);
        p["status"]["reason"] = json!("NodeLost");
        assert_eq!(short(&p)[2], "Unknown");
        // A finished pod being deleted keeps its final status.
        let mut done = pod(one_container(), json!({"phase": "Succeeded"}));
        done["metadata"]["deletionTimestamp"] = json!("2024-01-01T00:09:00Z");
        assert_eq!(short(&done)[2], "Succeeded");
    }

    #[test]
    fn restarts_with_last_restart_age() {
        let p = pod(
            one_container(),
            json!({"phase": "Running", "containerStatuses": [{
                "name": "app", "ready": false, "restartCount": 5,
                "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2024-01-01T00:05:00Z"}}
            }]}),
        );
        assert_eq!(short(&p)[1..4], ["0/1", "CrashLoopBackOff", "5 (5m ago)"]);
        // Restarts without a recorded finish time print the bare count.
        let p = pod(
            one_container(),
            json!({"phase": "Running", "containerStatuses": [{"name": "app", "restartCount": 2, "state": {"running": {}}}]}),
        );
        assert_eq!(short(&p)[3], "2");
    }

    fn init_pod(init_statuses: Value) -> Value {
        pod(
            json!({
                "initContainers": [{"name": "init-a"}, {"name": "init-b"}],
                "containers": [{"name": "app"}]
            }),
            json!({
                "phase": "Pending",
                "initContainerStatuses": init_statuses,
                "containerStatuses": [{"name": "app", "state": {"waiting": {"reason": "PodInitializing"}}}]
            }),
        )
    }

    #[test]
    fn init_containers() {
        let done = json!({"name": "init-a", "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}});
        let cases: Vec<(Value, &str)> = vec![
            (
                json!([{"name": "init-a", "state": {"running": {}}}, {"name": "init-b"}]),
                "Init:0/2",
            ),
            (
                json!([done.clone(), {"name": "init-b", "state": {"running": {}}}]),
                "Init:1/2",
            ),
            (
                json!([done.clone(), {"name": "init-b", "state": {"waiting": {"reason": "PodInitializing"}}}]),
                "Init:1/2",
            ),
            (
                json!([done.clone(), {"name": "init-b", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]),
                "Init:ImagePullBackOff",
            ),
            (
                json!([{"name": "init-a", "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]),
                "Init:Error",
            ),
            (
                json!([{"name": "init-a", "state": {"terminated": {"exitCode": 3}}}]),
                "Init:ExitCode:3",
            ),
            (
                json!([{"name": "init-a", "state": {"terminated": {"exitCode": 2, "signal": 15}}}]),
                "Init:Signal:15",
            ),
            (json!([done.clone(), done.clone()]), "PodInitializing"),
        ];
        for (statuses, want) in cases {
            assert_eq!(short(&init_pod(statuses.clone()))[2], want, "{statuses}");
        }
    }

    #[test]
    fn init_restarts_count_only_while_initializing() {
        let p = init_pod(json!([{
            "name": "init-a", "restartCount": 3,
            "state": {"waiting": {"reason": "CrashLoopBackOff"}},
            "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2024-01-01T00:08:00Z"}}
        }]));
        assert_eq!(short(&p)[2..4], ["Init:CrashLoopBackOff", "3 (2m ago)"]);
    }

    #[test]
    fn sidecar_counts_as_container() {
        let p = pod(
            json!({
                "initContainers": [{"name": "proxy", "restartPolicy": "Always"}],
                "containers": [{"name": "app"}]
            }),
            json!({
                "phase": "Running",
                "conditions": [{"type": "Initialized", "status": "True"}, {"type": "Ready", "status": "True"}],
                "initContainerStatuses": [{"name": "proxy", "started": true, "ready": true, "restartCount": 1,
                    "state": {"running": {}},
                    "lastState": {"terminated": {"exitCode": 1, "finishedAt": "2024-01-01T00:07:00Z"}}}],
                "containerStatuses": [{"name": "app", "ready": true, "state": {"running": {}}}]
            }),
        );
        assert_eq!(short(&p)[1..4], ["2/2", "Running", "1 (3m ago)"]);
    }

    #[test]
    fn completed_container_next_to_running_one() {
        let status = |conditions: Value| {
            json!({
                "phase": "Running",
                "conditions": conditions,
                "containerStatuses": [
                    {"name": "a", "ready": true, "state": {"running": {}}},
                    {"name": "b", "ready": false, "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
                ]
            })
        };
        let spec = json!({"containers": [{"name": "a"}, {"name": "b"}]});
        let ready = pod(
            spec.clone(),
            status(json!([{"type": "Ready", "status": "True"}])),
        );
        assert_eq!(short(&ready)[1..3], ["1/2", "Running"]);
        let not_ready = pod(spec, status(json!([{"type": "Ready", "status": "False"}])));
        assert_eq!(short(&not_ready)[2], "NotReady");
    }

    #[test]
    fn readiness_gates_and_nominated_node() {
        let p = pod(
            json!({"containers": [{"name": "app"}], "readinessGates": [
                {"conditionType": "example.com/lb"}, {"conditionType": "example.com/dns"}]}),
            json!({"phase": "Pending", "nominatedNodeName": "node-2",
                "conditions": [{"type": "example.com/lb", "status": "True"}, {"type": "example.com/dns", "status": "False"}]}),
        );
        let r = row("", "pods", &p);
        assert_eq!(
            r[5..],
            [
                json!("<none>"),
                json!("<none>"),
                json!("node-2"),
                json!("1/2")
            ]
        );
    }

    #[test]
    fn missing_metadata() {
        let r = print("", "pods", &json!({"spec": {"containers": [{}]}}), now());
        assert_eq!(
            r[..5],
            [
                json!(""),
                json!("0/1"),
                json!(""),
                json!("0"),
                json!("<unknown>")
            ]
        );
    }
}
