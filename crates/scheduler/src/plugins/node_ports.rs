//! NodePorts (upstream `nodeports`): a pod's host ports must be free on the node.

use k8s_openapi::api::core::v1::Pod;

use crate::framework::resources::pod_host_ports;
use crate::framework::{action, ClusterEvent, EventResource};
use crate::framework::{
    CycleState, FilterPlugin, HostPort, NodeInfo, Plugin, PreFilterPlugin, PreFilterResult, Status,
};

pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

pub struct NodePorts;

/// Upstream `HostPortInfo.CheckConflict`: same protocol and port, and the same IP or either
/// side binding all addresses (0.0.0.0).
fn conflicts(used: &[HostPort], want: &HostPort) -> bool {
    used.iter().any(|u| {
        u.protocol == want.protocol
            && u.port == want.port
            && (u.ip == want.ip || u.ip == "0.0.0.0" || want.ip == "0.0.0.0")
    })
}

/// Whether all of the pod's host ports are free on the node.
pub fn fits(pod: &Pod, node: &NodeInfo) -> bool {
    pod_host_ports(pod)
        .iter()
        .all(|p| !conflicts(&node.used_ports, p))
}

impl FilterPlugin for NodePorts {
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status {
        let fit = match state.read::<Vec<HostPort>>(STATE_KEY) {
            Some(ports) => ports.iter().all(|p| !conflicts(&node.used_ports, p)),
            None => fits(pod, node),
        };
        if fit {
            Status::Success
        } else {
            Status::Unschedulable(ERR_REASON.into())
        }
    }
}

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        "NodePorts"
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(EventResource::Pod, action::DELETE),
            ClusterEvent::new(EventResource::Node, action::ADD),
        ]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

const STATE_KEY: &str = "PreFilterNodePorts";

impl PreFilterPlugin for NodePorts {
    /// The pod's host ports, once; pods without any skip the filter.
    fn pre_filter(&self, state: &mut CycleState, pod: &Pod) -> (Option<PreFilterResult>, Status) {
        let ports = pod_host_ports(pod);
        if ports.is_empty() {
            return (None, Status::Skip);
        }
        state.write(STATE_KEY, ports);
        (None, Status::Success)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::testutil::{node, node_info, pod, st};
    use serde_json::{json, Value};

    /// A pod with one container binding "PROTO/IP/PORT" host ports.
    fn port_pod(name: &str, ports: &[&str]) -> Pod {
        let ports: Vec<Value> = ports
            .iter()
            .map(|p| {
                let parts: Vec<&str> = p.split('/').collect();
                let port: i32 = parts[2].parse().unwrap();
                json!({"containerPort": port, "hostPort": port, "protocol": parts[0], "hostIP": parts[1]})
            })
            .collect();
        pod(name, json!({"containers": [{"name": "c", "ports": ports}]}))
    }

    fn existing(ports: &[&str]) -> NodeInfo {
        node_info(
            node("n", json!({}), json!({}), json!({})),
            vec![port_pod("existing", ports)],
        )
    }

    #[test]
    fn filter() {
        let fail = Status::Unschedulable(ERR_REASON.into());
        let cases: Vec<(&str, Vec<&str>, Vec<&str>, Status)> = vec![
            (
                "nothing requested",
                vec![],
                vec!["TCP/0.0.0.0/80"],
                Status::Success,
            ),
            (
                "other port",
                vec!["UDP/127.0.0.1/8080"],
                vec!["UDP/127.0.0.1/9090"],
                Status::Success,
            ),
            (
                "same udp port",
                vec!["UDP/127.0.0.1/8080"],
                vec!["UDP/127.0.0.1/8080"],
                fail.clone(),
            ),
            (
                "same tcp port",
                vec!["TCP/127.0.0.1/8080"],
                vec!["TCP/127.0.0.1/8080"],
                fail.clone(),
            ),
            (
                "different host ip",
                vec!["TCP/127.0.0.1/8080"],
                vec!["TCP/127.0.0.2/8080"],
                Status::Success,
            ),
            (
                "different protocol",
                vec!["UDP/127.0.0.1/8080"],
                vec!["TCP/127.0.0.1/8080"],
                Status::Success,
            ),
            (
                "second udp port conflict",
                vec!["UDP/127.0.0.1/8000", "UDP/127.0.0.1/8080"],
                vec!["UDP/127.0.0.1/8080"],
                fail.clone(),
            ),
            (
                "first tcp port conflict",
                vec!["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8080"],
                vec!["TCP/127.0.0.1/8001", "UDP/127.0.0.1/8081"],
                fail.clone(),
            ),
            (
                "0.0.0.0 wanted conflicts with a specific ip",
                vec!["TCP/0.0.0.0/8001"],
                vec!["TCP/127.0.0.1/8001"],
                fail.clone(),
            ),
            (
                "0.0.0.0 among several wanted",
                vec!["TCP/10.0.10.10/8001", "TCP/0.0.0.0/8001"],
                vec!["TCP/127.0.0.1/8001"],
                fail.clone(),
            ),
            (
                "specific ip conflicts with 0.0.0.0 in use",
                vec!["TCP/127.0.0.1/8001"],
                vec!["TCP/0.0.0.0/8001"],
                fail.clone(),
            ),
            (
                "0.0.0.0 in use on another protocol",
                vec!["UDP/127.0.0.1/8001"],
                vec!["TCP/0.0.0.0/8001"],
                Status::Success,
            ),
            (
                "udp on 0.0.0.0 in use",
                vec!["UDP/127.0.0.1/8001"],
                vec!["TCP/0.0.0.0/8001", "UDP/0.0.0.0/8001"],
                fail.clone(),
            ),
            (
                "empty ip and protocol default to 0.0.0.0 and TCP",
                vec!["//8001"],
                vec!["TCP/127.0.0.1/8001"],
                fail.clone(),
            ),
        ];
        for (name, want_ports, used, want) in cases {
            assert_eq!(
                NodePorts.filter(&st(), &port_pod("p", &want_ports), &existing(&used)),
                want,
                "{name}"
            );
        }
    }

    #[test]
    fn init_containers() {
        let init = |sidecar: bool| {
            let mut c = json!({"name": "i", "ports": [{"containerPort": 8001, "hostPort": 8001, "protocol": "TCP"}]});
            if sidecar {
                c["restartPolicy"] = json!("Always");
            }
            pod(
                "p",
                json!({"containers": [{"name": "c"}], "initContainers": [c]}),
            )
        };
        let ni = existing(&["TCP/0.0.0.0/8001"]);
        assert_eq!(
            NodePorts.filter(&st(), &init(false), &ni),
            Status::Success,
            "plain init container ports are ignored"
        );
        assert_eq!(
            NodePorts.filter(&st(), &init(true), &ni),
            Status::Unschedulable(ERR_REASON.into()),
            "sidecar ports count"
        );
    }
}
