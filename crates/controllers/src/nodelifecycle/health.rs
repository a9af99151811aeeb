//! The pure decisions of the node lifecycle controller (upstream `pkg/controller/nodelifecycle`):
//! when a node's kubelet counts as gone, how its conditions are then marked Unknown, which NoSchedule
//! taints its conditions call for, which NoExecute taint it should carry, and each zone's state.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

pub const NOT_READY: &str = "node.kubernetes.io/not-ready";
pub const UNREACHABLE: &str = "node.kubernetes.io/unreachable";
pub const UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";
pub const MEMORY_PRESSURE: &str = "node.kubernetes.io/memory-pressure";
pub const DISK_PRESSURE: &str = "node.kubernetes.io/disk-pressure";
pub const PID_PRESSURE: &str = "node.kubernetes.io/pid-pressure";
pub const NETWORK_UNAVAILABLE: &str = "node.kubernetes.io/network-unavailable";

/// The conditions the controller marks Unknown when the kubelet stops posting (upstream
/// `nodeConditionTypes` plus Ready).
pub const MONITORED: [&str; 4] = ["Ready", "MemoryPressure", "DiskPressure", "PIDPressure"];

pub fn condition<'a>(node: &'a Node, type_: &str) -> Option<&'a NodeCondition> {
    node.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)
}

/// The Ready condition's status: "True", "False" or "Unknown" (a missing condition is Unknown).
pub fn ready_status(node: &Node) -> &str {
    condition(node, "Ready").map_or("Unknown", |c| c.status.as_str())
}

/// The conditions after the kubelet's grace period ran out (upstream `tryUpdateNodeHealth`): each
/// monitored condition becomes Unknown — "Kubelet stopped posting node status." — or, never posted,
/// is added as Unknown. `None` when every one already is Unknown.
pub fn unknown_conditions(node: &Node, now: Timestamp) -> Option<Vec<NodeCondition>> {
    let mut conditions: Vec<NodeCondition> = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    let created = node.metadata.creation_timestamp.clone();
    let mut changed = false;
    for type_ in MONITORED {
        match conditions.iter_mut().find(|c| c.type_ == type_) {
            Some(c) if c.status == "Unknown" => {}
            Some(c) => {
                c.status = "Unknown".into();
                c.reason = Some("NodeStatusUnknown".into());
                c.message = Some("Kubelet stopped posting node status.".into());
                c.last_transition_time = Some(Time(now));
                changed = true;
            }
            None => {
                conditions.push(NodeCondition {
                    type_: type_.into(),
                    status: "Unknown".into(),
                    reason: Some("NodeStatusNeverUpdated".into()),
                    message: Some("Kubelet never posted node status.".into()),
                    last_heartbeat_time: created.clone(),
                    last_transition_time: Some(Time(now)),
                });
                changed = true;
            }
        }
    }
    changed.then_some(conditions)
}

fn taint(key: &str, effect: &str) -> Taint {
    Taint {
        key: key.into(),
        effect: effect.into(),
        value: None,
        time_added: None,
    }
}

/// The NoSchedule taints the node's conditions and `spec.unschedulable` call for (upstream
/// `doNoScheduleTaintingPass`), among the keys the controller owns.
pub fn wanted_no_schedule(node: &Node) -> Vec<Taint> {
    let mut wanted = Vec::new();
    match ready_status(node) {
        "False" => wanted.push(taint(NOT_READY, "NoSchedule")),
        "Unknown" if condition(node, "Ready").is_some() => {
            wanted.push(taint(UNREACHABLE, "NoSchedule"))
        }
        _ => {}
    }
    for (type_, key) in [
        ("MemoryPressure", MEMORY_PRESSURE),
        ("DiskPressure", DISK_PRESSURE),
        ("PIDPressure", PID_PRESSURE),
        ("NetworkUnavailable", NETWORK_UNAVAILABLE),
    ] {
        if condition(node, type_).is_some_and(|c| c.status == "True") {
            wanted.push(taint(key, "NoSchedule"));
        }
    }
    if node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) {
        wanted.push(taint(UNSCHEDULABLE, "NoSchedule"));
    }
    wanted
}

const NO_SCHEDULE_KEYS: [&str; 7] = [
    NOT_READY,
    UNREACHABLE,
    MEMORY_PRESSURE,
    DISK_PRESSURE,
    PID_PRESSURE,
    NETWORK_UNAVAILABLE,
    UNSCHEDULABLE,
];

fn taints(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
}

/// The node's taints with the controller's NoSchedule ones made to match `wanted`; `None` if they do.
pub fn reconcile_no_schedule(node: &Node) -> Option<Vec<Taint>> {
    let current = taints(node);
    let wanted = wanted_no_schedule(node);
    let owned = |t: &Taint| t.effect == "NoSchedule" && NO_SCHEDULE_KEYS.contains(&t.key.as_str());
    let have: Vec<&str> = current
        .iter()
        .filter(|t| owned(t))
        .map(|t| t.key.as_str())
        .collect();
    let mut want: Vec<&str> = wanted.iter().map(|t| t.key.as_str()).collect();
    let mut have_sorted = have.clone();
    have_sorted.sort();
    want.sort();
    if have_sorted == want {
        return None;
    }
    let mut next: Vec<Taint> = current.into_iter().filter(|t| !owned(t)).collect();
    next.extend(wanted);
    Some(next)
}

/// The NoExecute taint key a node with this Ready status should carry (upstream
/// `processTaintBaseEviction`): not-ready for False, unreachable for Unknown, none for True.
pub fn wanted_no_execute(node: &Node) -> Option<&'static str> {
    match ready_status(node) {
        "False" => Some(NOT_READY),
        "Unknown" => Some(UNREACHABLE),
        _ => None,
    }
}

pub fn has_no_execute(node: &Node, key: &str) -> bool {
    taints(node)
        .iter()
        .any(|t| t.key == key && t.effect == "NoExecute")
}

/// The node's taints with the controller's NoExecute taint set to `key` (or removed for `None`);
/// `None` when nothing changes. A new taint carries `timeAdded` (what tolerationSeconds count from).
pub fn set_no_execute(node: &Node, key: Option<&str>, now: Timestamp) -> Option<Vec<Taint>> {
    let current = taints(node);
    let owned = |t: &Taint| t.effect == "NoExecute" && (t.key == NOT_READY || t.key == UNREACHABLE);
    let have: Vec<&Taint> = current.iter().filter(|t| owned(t)).collect();
    if have.len() == usize::from(key.is_some()) && have.iter().all(|t| Some(t.key.as_str()) == key)
    {
        return None;
    }
    let mut next: Vec<Taint> = current.iter().filter(|t| !owned(t)).cloned().collect();
    if let Some(key) = key {
        next.push(Taint {
            key: key.into(),
            effect: "NoExecute".into(),
            value: None,
            time_added: Some(Time(now)),
        });
    }
    Some(next)
}

/// A zone's health (upstream `ZoneState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZoneState {
    Initial,
    Normal,
    PartialDisruption,
    FullDisruption,
}

/// Upstream `ComputeZoneState`: no Ready node at all is a full disruption; more than two not-Ready
/// nodes making at least `unhealthy_threshold` of the zone is a partial one.
pub fn zone_state(ready: usize, not_ready: usize, unhealthy_threshold: f64) -> ZoneState {
    if ready == 0 && not_ready > 0 {
        ZoneState::FullDisruption
    } else if not_ready > 2 && not_ready as f64 / (ready + not_ready) as f64 >= unhealthy_threshold
    {
        ZoneState::PartialDisruption
    } else {
        ZoneState::Normal
    }
}

/// The zone of a node (upstream `GetZoneKey`: region and zone labels).
pub fn zone_key(node: &Node) -> String {
    let labels = node.metadata.labels.as_ref();
    let get = |k: &str| labels.and_then(|l| l.get(k)).cloned().unwrap_or_default();
    format!(
        "{}:{}",
        get("topology.kubernetes.io/region"),
        get("topology.kubernetes.io/zone")
    )
}

/// Evictions per second allowed in a zone of `size` nodes in `state` (upstream `setLimiterInZone`
/// with `HealthyQPSFunc` / `ReducedQPSFunc`).
pub fn zone_rate(state: ZoneState, size: usize, rates: &super::Rates) -> f64 {
    match state {
        ZoneState::Normal | ZoneState::Initial | ZoneState::FullDisruption => rates.eviction,
        ZoneState::PartialDisruption if size > rates.large_cluster_threshold => rates.secondary,
        ZoneState::PartialDisruption => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(ready: &str, extra: serde_json::Value) -> Node {
        let mut v = json!({"metadata": {"name": "n1", "creationTimestamp": "2026-01-01T00:00:00Z",
                                        "labels": {"topology.kubernetes.io/region": "r", "topology.kubernetes.io/zone": "r-a"}},
                           "spec": {"taints": [{"key": "dedicated", "value": "db", "effect": "NoSchedule"}]},
                           "status": {"conditions": [{"type": "Ready", "status": ready, "reason": "KubeletReady",
                                                      "lastHeartbeatTime": "2026-01-01T00:00:00Z"}]}});
        if let (Some(o), Some(e)) = (v["spec"].as_object_mut(), extra.as_object()) {
            o.extend(e.clone());
        }
        serde_json::from_value(v).unwrap()
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + s).unwrap()
    }

    #[test]
    fn a_silent_kubelet_leaves_its_conditions_unknown() {
        let n = node("True", json!({}));
        let c = unknown_conditions(&n, at(50)).unwrap();
        let ready = c.iter().find(|c| c.type_ == "Ready").unwrap();
        assert_eq!(ready.status, "Unknown");
        assert_eq!(ready.reason.as_deref(), Some("NodeStatusUnknown"));
        assert_eq!(
            ready.message.as_deref(),
            Some("Kubelet stopped posting node status.")
        );
        assert_eq!(
            ready.last_heartbeat_time,
            Some(Time(at(0))),
            "the last heartbeat stays"
        );
        let never = c.iter().find(|c| c.type_ == "PIDPressure").unwrap();
        assert_eq!(never.reason.as_deref(), Some("NodeStatusNeverUpdated"));
        assert_eq!(c.len(), 4);
        let mut n = n;
        n.status.as_mut().unwrap().conditions = Some(c);
        assert!(
            unknown_conditions(&n, at(60)).is_none(),
            "already Unknown: no write"
        );
    }

    #[test]
    fn no_schedule_taints_follow_conditions_and_keep_foreign_ones() {
        let n = node("False", json!({"unschedulable": true}));
        let t = reconcile_no_schedule(&n).unwrap();
        let keys: Vec<&str> = t.iter().map(|t| t.key.as_str()).collect();
        assert_eq!(keys, ["dedicated", NOT_READY, UNSCHEDULABLE]);
        let mut n = n;
        n.spec.as_mut().unwrap().taints = Some(t);
        assert!(reconcile_no_schedule(&n).is_none());
        n.status.as_mut().unwrap().conditions.as_mut().unwrap()[0].status = "True".into();
        n.spec.as_mut().unwrap().unschedulable = None;
        let t = reconcile_no_schedule(&n).unwrap();
        assert_eq!(t.len(), 1, "{t:?}");
    }

    #[test]
    fn no_execute_taints_swap_and_clear() {
        let n = node("Unknown", json!({}));
        assert_eq!(wanted_no_execute(&n), Some(UNREACHABLE));
        let t = set_no_execute(&n, Some(UNREACHABLE), at(5)).unwrap();
        assert_eq!(t[1].key, UNREACHABLE);
        assert_eq!(t[1].time_added, Some(Time(at(5))));
        let mut n = n;
        n.spec.as_mut().unwrap().taints = Some(t);
        assert!(set_no_execute(&n, Some(UNREACHABLE), at(6)).is_none());
        let swapped = set_no_execute(&n, Some(NOT_READY), at(7)).unwrap();
        assert_eq!(
            swapped.iter().filter(|t| t.effect == "NoExecute").count(),
            1
        );
        let cleared = set_no_execute(&n, None, at(8)).unwrap();
        assert_eq!(cleared.len(), 1);
        assert_eq!(zone_key(&n), "r:r-a");
    }

    #[test]
    fn zone_states_as_upstream() {
        assert_eq!(zone_state(0, 3, 0.55), ZoneState::FullDisruption);
        assert_eq!(zone_state(9, 1, 0.55), ZoneState::Normal);
        assert_eq!(
            zone_state(2, 2, 0.55),
            ZoneState::Normal,
            "two not-ready nodes never disrupt"
        );
        assert_eq!(zone_state(2, 3, 0.55), ZoneState::PartialDisruption);
        assert_eq!(zone_state(3, 3, 0.55), ZoneState::Normal);
        let rates = super::super::Rates {
            eviction: 0.1,
            secondary: 0.01,
            large_cluster_threshold: 50,
        };
        assert_eq!(zone_rate(ZoneState::PartialDisruption, 10, &rates), 0.0);
        assert_eq!(zone_rate(ZoneState::PartialDisruption, 100, &rates), 0.01);
        assert_eq!(zone_rate(ZoneState::FullDisruption, 10, &rates), 0.1);
    }
}
