//! The kubelet's predicate admission of a new pod (upstream `pkg/kubelet/lifecycle/predicate.go`
//! `predicateAdmitHandler.Admit` and `generalFilter`, which run the scheduler's `AdmissionCheck`):
//! a pod bound to this node (by the scheduler or by `spec.nodeName` directly) must fit beside the
//! pods already admitted, match the node's selector/affinity and name, find its host ports free
//! and tolerate the node's NoExecute taints. Only the first failure is reported, as upstream.
//!
//! Not done: upstream's critical-pod admission failure handler (evicting other pods to make room
//! for a system-critical pod) and the device plugin resource update before the check.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use scheduler::framework::resources::pod_requests;
use scheduler::framework::{NodeInfo, Resources};
use scheduler::plugins::{node_affinity, node_name, node_ports, taint_toleration};

use super::admit::Rejection;

/// The OS rkube's kubelet runs pods for (upstream `runtime.GOOS`).
const NODE_OS: &str = "linux";
const OS_LABEL: &str = "kubernetes.io/os";

/// Upstream `TaintToleration`'s `ErrReasonNotMatch` (the kubelet reports this one, not the
/// scheduler's Filter text naming the taint).
const TAINTS_NOT_TOLERATED: &str = "node(s) had taints that the pod didn't tolerate";

/// Upstream `v1helper.IsExtendedResourceName`: not native (a `/` and no `kubernetes.io/`), not a
/// quota `requests.` name.
fn is_extended(name: &str) -> bool {
    name.contains('/') && !name.contains("kubernetes.io/") && !name.starts_with("requests.")
}

/// The requests the pod is judged on: its spec only (the status may carry an older allocation),
/// without extended resources the node does not list (upstream `removeMissingExtendedResources`:
/// cluster-level resources unknown to nodes).
fn requests(pod: &Pod, node: &NodeInfo) -> Resources {
    let spec_only = Pod {
        metadata: Default::default(),
        spec: pod.spec.clone(),
        status: None,
    };
    let mut r = pod_requests(&spec_only);
    r.scalar
        .retain(|name, _| !is_extended(name) || node.allocatable.scalar.contains_key(name));
    r
}

/// One resource the node is short of (upstream `InsufficientResource`).
struct Short {
    name: String,
    requested: i64,
    used: i64,
    capacity: i64,
}

/// Upstream `noderesources.fitsRequest` with all failures, in its order: pods, cpu, memory,
/// ephemeral-storage, then scalar resources (by name; upstream's map order is random).
fn insufficient(req: &Resources, node: &NodeInfo) -> Vec<Short> {
    let mut out = Vec::new();
    let (alloc, used) = (&node.allocatable, &node.requested);
    let pods = node.pods.len() as i64;
    if pods + 1 > alloc.allowed_pod_number {
        out.push(Short {
            name: "pods".into(),
            requested: 1,
            used: pods,
            capacity: alloc.allowed_pod_number,
        });
    }
    let mut check = |name: &str, want: i64, capacity: i64, in_use: i64| {
        if want > 0 && want > capacity.saturating_sub(in_use) {
            out.push(Short {
                name: name.into(),
                requested: want,
                used: in_use,
                capacity,
            });
        }
    };
    check("cpu", req.milli_cpu, alloc.milli_cpu, used.milli_cpu);
    check("memory", req.memory, alloc.memory, used.memory);
    check(
        "ephemeral-storage",
        req.ephemeral_storage,
        alloc.ephemeral_storage,
        used.ephemeral_storage,
    );
    for (name, want) in &req.scalar {
        let capacity = alloc.scalar.get(name).copied().unwrap_or(0);
        check(
            name,
            *want,
            capacity,
            used.scalar.get(name).copied().unwrap_or(0),
        );
    }
    out
}

/// The node with the pods already admitted to it.
pub fn node_info(node: Arc<Node>, admitted: impl IntoIterator<Item = Arc<Pod>>) -> NodeInfo {
    let mut info = NodeInfo::new(node);
    for p in admitted {
        info.add_pod(p);
    }
    info
}

fn predicate(name: &str, desc: &str) -> Rejection {
    Rejection {
        reason: name.to_string(),
        message: format!("Predicate {name} failed: {desc}"),
    }
}

/// Upstream's predicate admission of `pod` onto `node` (which holds the other admitted pods).
/// `is_static`: static pods skip the taint check, as upstream.
pub fn admit(pod: &Pod, node: &NodeInfo, is_static: bool) -> Result<(), Rejection> {
    // Upstream compares the pod's *labels* (not its nodeSelector) with the node's OS.
    let pod_os = pod.metadata.labels.as_ref().and_then(|l| l.get(OS_LABEL));
    if pod_os.is_some_and(|os| os != NODE_OS) {
        return Err(Rejection {
            reason: "PodOSSelectorNodeLabelDoesNotMatch".into(),
            message: "Failed to admit pod as the `kubernetes.io/os` label doesn't match node label"
                .into(),
        });
    }
    let spec = pod.spec.as_ref();
    let os_field = spec.and_then(|s| s.os.as_ref()).map(|o| o.name.as_str());
    if os_field.is_some_and(|os| os != NODE_OS) {
        return Err(Rejection {
            reason: "PodOSNotSupported".into(),
            message: "Failed to admit pod as the OS field doesn't match node OS".into(),
        });
    }
    if let Some(s) = insufficient(&requests(pod, node), node).into_iter().next() {
        let reason = format!("OutOf{}", s.name);
        return Err(Rejection {
            reason,
            message: format!(
                "Node didn't have enough resource: {}, requested: {}, used: {}, capacity: {}",
                s.name, s.requested, s.used, s.capacity
            ),
        });
    }
    if !node_affinity::required_node_affinity_matches(pod, node) {
        return Err(predicate("NodeAffinity", node_affinity::ERR_REASON_POD));
    }
    let wanted = spec.and_then(|s| s.node_name.as_deref()).unwrap_or("");
    if !wanted.is_empty() && wanted != node.name() {
        return Err(predicate("NodeName", node_name::ERR_REASON));
    }
    if !node_ports::fits(pod, node) {
        return Err(predicate("NodePorts", node_ports::ERR_REASON));
    }
    if !is_static {
        let tolerations = spec
            .and_then(|s| s.tolerations.as_deref())
            .unwrap_or_default();
        let untolerated = node.taints.iter().any(|t| {
            t.effect == "NoExecute" && !taint_toleration::tolerations_tolerate_taint(tolerations, t)
        });
        if untolerated {
            return Err(predicate("TaintToleration", TAINTS_NOT_TOLERATED));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(extra: serde_json::Value) -> Arc<Node> {
        let mut n = json!({
            "metadata": {"name": "n1", "labels": {"kubernetes.io/hostname": "n1", "disk": "ssd"}},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "3",
                "ephemeral-storage": "10Gi", "example.com/gpu": "1"}},
        });
        if let Some(spec) = extra.get("spec") {
            n["spec"] = spec.clone();
        }
        Arc::new(serde_json::from_value(n).unwrap())
    }

    fn pod(name: &str, cpu: &str, mem: &str, extra: serde_json::Value) -> Pod {
        let mut p = json!({
            "metadata": {"name": name, "namespace": "default"},
            "spec": {"nodeName": "n1", "containers": [{"name": "c", "image": "busybox",
                "resources": {"requests": {"cpu": cpu, "memory": mem}}}]},
        });
        if let Some(spec) = extra.get("spec").and_then(|s| s.as_object()) {
            for (k, v) in spec {
                p["spec"][k] = v.clone();
            }
        }
        if let Some(labels) = extra.get("labels") {
            p["metadata"]["labels"] = labels.clone();
        }
        serde_json::from_value(p).unwrap()
    }

    fn none() -> serde_json::Value {
        json!({})
    }

    #[test]
    fn a_pod_that_fits_beside_the_admitted_ones_is_admitted() {
        let others = [Arc::new(pod("a", "1", "1Gi", none()))];
        let info = node_info(node(none()), others);
        assert_eq!(admit(&pod("b", "1", "3Gi", none()), &info, false), Ok(()));
    }

    #[test]
    fn too_much_cpu_is_out_of_cpu_with_upstreams_message() {
        let others = [Arc::new(pod("a", "1500m", "1Gi", none()))];
        let info = node_info(node(none()), others);
        let r = admit(&pod("b", "1", "100Mi", none()), &info, false).unwrap_err();
        assert_eq!(r.reason, "OutOfcpu");
        assert_eq!(
            r.status_message(),
            "Pod was rejected: Node didn't have enough resource: cpu, requested: 1000, used: 1500, capacity: 2000"
        );
        // cpu is reported before memory when both are short.
        let r = admit(&pod("b", "1", "4Gi", none()), &info, false).unwrap_err();
        assert_eq!(r.reason, "OutOfcpu");
        let r = admit(&pod("b", "100m", "4Gi", none()), &info, false).unwrap_err();
        assert_eq!(r.reason, "OutOfmemory");
        assert_eq!(
            r.message,
            "Node didn't have enough resource: memory, requested: 4294967296, used: 1073741824, capacity: 4294967296"
        );
    }

    #[test]
    fn the_pod_count_and_extended_resources_are_checked() {
        let others: Vec<_> = ["a", "b", "c"]
            .iter()
            .map(|n| Arc::new(pod(n, "0", "0", none())))
            .collect();
        let info = node_info(node(none()), others);
        let r = admit(&pod("d", "0", "0", none()), &info, false).unwrap_err();
        assert_eq!(r.reason, "OutOfpods");
        assert_eq!(
            r.message,
            "Node didn't have enough resource: pods, requested: 1, used: 3, capacity: 3"
        );
        let info = node_info(node(none()), []);
        let gpus = |n: &str| {
            let mut p = pod("g", "0", "0", none());
            let c = &mut p.spec.as_mut().unwrap().containers[0];
            let r = c.resources.as_mut().unwrap().requests.as_mut().unwrap();
            r.insert(
                n.into(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity("2".into()),
            );
            p
        };
        let r = admit(&gpus("example.com/gpu"), &info, false).unwrap_err();
        assert_eq!(r.reason, "OutOfexample.com/gpu");
        // An extended resource the node does not list is a cluster-level one: not checked here.
        assert_eq!(admit(&gpus("example.com/fpga"), &info, false), Ok(()));
    }

    #[test]
    fn selector_name_ports_and_taints() {
        let info = node_info(node(none()), []);
        let sel = pod(
            "s",
            "0",
            "0",
            json!({"spec": {"nodeSelector": {"disk": "hdd"}}}),
        );
        let r = admit(&sel, &info, false).unwrap_err();
        assert_eq!(r.reason, "NodeAffinity");
        assert_eq!(
            r.status_message(),
            "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
        );
        let ok = pod(
            "s",
            "0",
            "0",
            json!({"spec": {"nodeSelector": {"disk": "ssd"}}}),
        );
        assert_eq!(admit(&ok, &info, false), Ok(()));
        let other = pod("o", "0", "0", json!({"spec": {"nodeName": "n2"}}));
        assert_eq!(admit(&other, &info, false).unwrap_err().reason, "NodeName");

        let port = json!({"spec": {"containers": [{"name": "c", "image": "busybox",
            "ports": [{"containerPort": 80, "hostPort": 8080}]}]}});
        let info = node_info(node(none()), [Arc::new(pod("p1", "0", "0", port.clone()))]);
        let r = admit(&pod("p2", "0", "0", port), &info, false).unwrap_err();
        assert_eq!(r.reason, "NodePorts");

        let tainted = |effect: &str| {
            node_info(
                node(json!({"spec": {"taints": [{"key": "k", "value": "v", "effect": effect}]}})),
                [],
            )
        };
        let plain = pod("t", "0", "0", none());
        let r = admit(&plain, &tainted("NoExecute"), false).unwrap_err();
        assert_eq!(r.reason, "TaintToleration");
        assert_eq!(
            r.message,
            "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"
        );
        // Only NoExecute matters to the kubelet; static pods skip the check.
        assert_eq!(admit(&plain, &tainted("NoSchedule"), false), Ok(()));
        assert_eq!(admit(&plain, &tainted("NoExecute"), true), Ok(()));
        let tolerating = pod(
            "t",
            "0",
            "0",
            json!({"spec": {"tolerations": [{"key": "k", "operator": "Exists"}]}}),
        );
        assert_eq!(admit(&tolerating, &tainted("NoExecute"), false), Ok(()));
    }

    #[test]
    fn os_label_and_field() {
        let info = node_info(node(none()), []);
        let w = pod(
            "w",
            "0",
            "0",
            json!({"labels": {"kubernetes.io/os": "windows"}}),
        );
        assert_eq!(
            admit(&w, &info, false).unwrap_err().reason,
            "PodOSSelectorNodeLabelDoesNotMatch"
        );
        let l = pod(
            "l",
            "0",
            "0",
            json!({"labels": {"kubernetes.io/os": "linux"}}),
        );
        assert_eq!(admit(&l, &info, false), Ok(()));
        let f = pod("f", "0", "0", json!({"spec": {"os": {"name": "windows"}}}));
        assert_eq!(
            admit(&f, &info, false).unwrap_err().reason,
            "PodOSNotSupported"
        );
    }
}
