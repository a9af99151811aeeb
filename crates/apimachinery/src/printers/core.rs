//! Printers of core (`v1`) kinds other than pods, events and volumes, mirroring upstream
//! `pkg/printers/internalversion`: nodes, namespaces, services, endpoints, configmaps, secrets,
//! serviceaccounts, replicationcontrollers, podtemplates, resourcequotas, componentstatuses.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::apps::replica_cells;
use super::time::Instant;
use super::util::{
    arr_at, bool_at, format_labels, get, layout_containers, len_at, name, obj_at, or, quantity,
    str_at,
};
use super::{
    age_cell, col, printer, wide, ColumnDefinition, Printers, AGE, CONTAINERS, IMAGES, NAME,
};

pub(super) const PRINTERS: Printers = &[
    ("", "nodes", printer(NODE_COLUMNS, node_cells)),
    (
        "",
        "namespaces",
        printer(NAMESPACE_COLUMNS, namespace_cells),
    ),
    (
        "",
        "configmaps",
        printer(CONFIGMAP_COLUMNS, configmap_cells),
    ),
    ("", "secrets", printer(SECRET_COLUMNS, secret_cells)),
    (
        "",
        "serviceaccounts",
        printer(SERVICEACCOUNT_COLUMNS, serviceaccount_cells),
    ),
    ("", "replicationcontrollers", printer(RC_COLUMNS, rc_cells)),
    (
        "",
        "podtemplates",
        printer(PODTEMPLATE_COLUMNS, podtemplate_cells),
    ),
    ("", "resourcequotas", printer(QUOTA_COLUMNS, quota_cells)),
    (
        "",
        "componentstatuses",
        printer(COMPONENT_COLUMNS, component_cells),
    ),
];

const ADDRESSES: &str =
    "List of addresses reachable to the node. Queried from cloud provider, if available.";

const NODE_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Status", "string", "The status of the node"),
    col("Roles", "string", "The roles of the node"),
    AGE,
    col("Version", "string", "Kubelet Version reported by the node."),
    wide("Internal-IP", "string", ADDRESSES),
    wide("External-IP", "string", ADDRESSES),
    wide("OS-Image", "string", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
    wide("Kernel-Version", "string", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
    wide("Container-Runtime", "string", "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2)."),
];

/// `node-role.kubernetes.io/<role>` labels and the older `kubernetes.io/role=<role>`.
const NODE_ROLE_PREFIX: &str = "node-role.kubernetes.io/";
const NODE_ROLE_LABEL: &str = "kubernetes.io/role";

/// `findNodeRoles`: sorted, deduplicated.
fn node_roles(node: &Value) -> Vec<String> {
    let mut roles = BTreeSet::new();
    for (k, v) in obj_at(node, &["metadata", "labels"]).into_iter().flatten() {
        if let Some(role) = k.strip_prefix(NODE_ROLE_PREFIX) {
            if !role.is_empty() {
                roles.insert(role.to_string());
            }
        } else if k == NODE_ROLE_LABEL {
            if let Some(v) = v.as_str().filter(|v| !v.is_empty()) {
                roles.insert(v.to_string());
            }
        }
    }
    roles.into_iter().collect()
}

fn node_address<'a>(node: &'a Value, type_: &str) -> &'a str {
    arr_at(node, &["status", "addresses"])
        .iter()
        .find(|a| str_at(a, &["type"]) == type_)
        .map_or("<none>", |a| str_at(a, &["address"]))
}

fn node_cells(node: &Value, now: Instant) -> Vec<Value> {
    // Only the Ready condition counts; the last one of that type wins, as upstream's map does.
    let mut status: Vec<&str> = Vec::new();
    if let Some(ready) = arr_at(node, &["status", "conditions"])
        .iter()
        .rev()
        .find(|c| str_at(c, &["type"]) == "Ready")
    {
        status.push(if str_at(ready, &["status"]) == "True" {
            "Ready"
        } else {
            "NotReady"
        });
    }
    if status.is_empty() {
        status.push("Unknown");
    }
    if bool_at(node, &["spec", "unschedulable"]) {
        status.push("SchedulingDisabled");
    }
    let roles = node_roles(node).join(",");
    let info =
        |field: &str| or(str_at(node, &["status", "nodeInfo", field]), "<unknown>").to_string();
    vec![
        json!(name(node)),
        json!(status.join(",")),
        json!(or(&roles, "<none>")),
        age_cell(node, now),
        json!(str_at(node, &["status", "nodeInfo", "kubeletVersion"])),
        json!(node_address(node, "InternalIP")),
        json!(node_address(node, "ExternalIP")),
        json!(info("osImage")),
        json!(info("kernelVersion")),
        json!(info("containerRuntimeVersion")),
    ]
}

const NAMESPACE_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Status", "string", "The status of the namespace"),
    AGE,
];

fn namespace_cells(ns: &Value, now: Instant) -> Vec<Value> {
    vec![
        json!(name(ns)),
        json!(str_at(ns, &["status", "phase"])),
        age_cell(ns, now),
    ]
}

const CONFIGMAP_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Data", "string", "Data contains the configuration data."),
    AGE,
];

fn configmap_cells(cm: &Value, now: Instant) -> Vec<Value> {
    let n = len_at(cm, &["data"]) + len_at(cm, &["binaryData"]);
    vec![json!(name(cm)), json!(n), age_cell(cm, now)]
}

const SECRET_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "Type",
        "string",
        "Used to facilitate programmatic handling of secret data.",
    ),
    col("Data", "string", "Data contains the secret data."),
    AGE,
];

fn secret_cells(s: &Value, now: Instant) -> Vec<Value> {
    vec![
        json!(name(s)),
        json!(str_at(s, &["type"])),
        json!(len_at(s, &["data"])),
        age_cell(s, now),
    ]
}

const SERVICEACCOUNT_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Secrets", "string", "Secrets is a list of the secrets in the same namespace that pods running using this ServiceAccount are allowed to use."),
    AGE,
];

fn serviceaccount_cells(sa: &Value, now: Instant) -> Vec<Value> {
    vec![
        json!(name(sa)),
        json!(len_at(sa, &["secrets"])),
        age_cell(sa, now),
    ]
}

const RC_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "Desired",
        "integer",
        "Replicas is the number of desired replicas.",
    ),
    col(
        "Current",
        "integer",
        "Replicas is the most recently observed number of replicas.",
    ),
    col(
        "Ready",
        "integer",
        "The number of ready replicas for this replication controller.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    wide(
        "Selector",
        "string",
        "Selector is a label query over pods that should match the Replicas count.",
    ),
];

fn rc_cells(rc: &Value, now: Instant) -> Vec<Value> {
    let selector = format_labels(obj_at(rc, &["spec", "selector"]));
    replica_cells(rc, now, selector)
}

const PODTEMPLATE_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "Containers",
        "string",
        "Names of each container in the template.",
    ),
    col(
        "Images",
        "string",
        "Images referenced by each container in the template.",
    ),
    col("Pod Labels", "string", "The labels for the pod template."),
];

fn podtemplate_cells(pt: &Value, _now: Instant) -> Vec<Value> {
    let (names, images) = layout_containers(arr_at(pt, &["template", "spec", "containers"]));
    vec![
        json!(name(pt)),
        json!(names),
        json!(images),
        json!(format_labels(obj_at(
            pt,
            &["template", "metadata", "labels"]
        ))),
    ]
}

const QUOTA_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Request", "string", "Request represents a minimum amount of cpu/memory that a container may consume."),
    col("Limit", "string", "Limits control the maximum amount of cpu/memory that a container may use independent of contention on the node."),
    AGE,
];

/// `printResourceQuota`: `resource: used/hard` per hard limit, sorted by resource name; `limits.*`
/// resources in the Limit column, all others in Request.
fn quota_cells(q: &Value, now: Instant) -> Vec<Value> {
    let mut resources: Vec<&String> = obj_at(q, &["status", "hard"])
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
        .collect();
    resources.sort();
    let (mut requests, mut limits) = (Vec::new(), Vec::new());
    for r in resources {
        let used = quantity(get(q, &["status", "used", r]));
        let hard = quantity(get(q, &["status", "hard", r]));
        let pieces: Vec<&str> = r.split('.').collect();
        let target = if pieces.len() > 1 && pieces[0] == "limits" {
            &mut limits
        } else {
            &mut requests
        };
        target.push(format!("{r}: {used}/{hard}"));
    }
    vec![
        json!(name(q)),
        json!(requests.join(", ")),
        json!(limits.join(", ")),
        age_cell(q, now),
    ]
}

const COMPONENT_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Status", "string", "Status of the component conditions"),
    col("Message", "string", "Message of the component conditions"),
    col("Error", "string", "Error of the component conditions"),
];

fn component_cells(cs: &Value, _now: Instant) -> Vec<Value> {
    let healthy = arr_at(cs, &["conditions"])
        .iter()
        .find(|c| str_at(c, &["type"]) == "Healthy");
    let (status, message, error) = match healthy {
        Some(c) => (
            if str_at(c, &["status"]) == "True" {
                "Healthy"
            } else {
                "Unhealthy"
            },
            str_at(c, &["message"]),
            str_at(c, &["error"]),
        ),
        None => ("Unknown", "", ""),
    };
    vec![json!(name(cs)), json!(status), json!(message), json!(error)]
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::testing::{header, namespaced_meta, row, strs, CREATED};

    #[test]
    fn node_columns_and_ready_control_plane() {
        assert_eq!(
            header("", "nodes"),
            vec![
                ("Name", 0),
                ("Status", 0),
                ("Roles", 0),
                ("Age", 0),
                ("Version", 0),
                ("Internal-IP", 1),
                ("External-IP", 1),
                ("OS-Image", 1),
                ("Kernel-Version", 1),
                ("Container-Runtime", 1),
            ]
        );
        let node = json!({
            "metadata": {"name": "cp-1", "creationTimestamp": CREATED, "labels": {
                "node-role.kubernetes.io/control-plane": "",
                "node-role.kubernetes.io/etcd": "true",
                "node-role.kubernetes.io/": "",
                "kubernetes.io/role": "master",
                "kubernetes.io/hostname": "cp-1"}},
            "status": {
                "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
                "addresses": [{"type": "Hostname", "address": "cp-1"}, {"type": "InternalIP", "address": "10.0.0.1"}],
                "nodeInfo": {"kubeletVersion": "v1.36.0", "osImage": "Debian GNU/Linux 12 (bookworm)",
                    "kernelVersion": "6.1.0", "containerRuntimeVersion": "containerd://1.7.0"}
            }
        });
        assert_eq!(
            strs(&row("", "nodes", &node)),
            [
                "cp-1",
                "Ready",
                "control-plane,etcd,master",
                "10m",
                "v1.36.0",
                "10.0.0.1",
                "<none>",
                "Debian GNU/Linux 12 (bookworm)",
                "6.1.0",
                "containerd://1.7.0"
            ]
        );
    }

    #[test]
    fn node_statuses() {
        let node = |conditions: Value, unschedulable: bool| {
            json!({"metadata": namespaced_meta("n"), "spec": {"unschedulable": unschedulable},
                "status": {"conditions": conditions}})
        };
        let cases = [
            (
                json!([{"type": "Ready", "status": "True"}]),
                true,
                "Ready,SchedulingDisabled",
            ),
            (
                json!([{"type": "Ready", "status": "False"}]),
                false,
                "NotReady",
            ),
            (
                json!([{"type": "Ready", "status": "Unknown"}]),
                false,
                "NotReady",
            ),
            (json!([]), false, "Unknown"),
            (json!([]), true, "Unknown,SchedulingDisabled"),
        ];
        for (conditions, unschedulable, want) in cases {
            let cells = row("", "nodes", &node(conditions, unschedulable));
            assert_eq!(cells[1], json!(want));
            assert_eq!(cells[2], json!("<none>"));
            assert_eq!(cells[4], json!(""));
            assert_eq!(cells[7], json!("<unknown>"));
        }
    }

    #[test]
    fn namespaces() {
        assert_eq!(
            header("", "namespaces"),
            vec![("Name", 0), ("Status", 0), ("Age", 0)]
        );
        let ns = json!({"metadata": namespaced_meta("kube-system"), "status": {"phase": "Active"}});
        assert_eq!(
            strs(&row("", "namespaces", &ns)),
            ["kube-system", "Active", "10m"]
        );
    }

    #[test]
    fn configmaps_secrets_serviceaccounts() {
        let cm = json!({"metadata": namespaced_meta("cfg"), "data": {"a": "1", "b": "2"}, "binaryData": {"c": "AA=="}});
        assert_eq!(
            header("", "configmaps"),
            vec![("Name", 0), ("Data", 0), ("Age", 0)]
        );
        assert_eq!(
            row("", "configmaps", &cm),
            vec![json!("cfg"), json!(3), json!("10m")]
        );
        let secret = json!({"metadata": namespaced_meta("tls"), "type": "kubernetes.io/tls", "data": {"tls.crt": "", "tls.key": ""}});
        assert_eq!(
            header("", "secrets"),
            vec![("Name", 0), ("Type", 0), ("Data", 0), ("Age", 0)]
        );
        assert_eq!(
            row("", "secrets", &secret),
            vec![
                json!("tls"),
                json!("kubernetes.io/tls"),
                json!(2),
                json!("10m")
            ]
        );
        let sa = json!({"metadata": namespaced_meta("default")});
        assert_eq!(
            header("", "serviceaccounts"),
            vec![("Name", 0), ("Secrets", 0), ("Age", 0)]
        );
        assert_eq!(
            row("", "serviceaccounts", &sa),
            vec![json!("default"), json!(0), json!("10m")]
        );
    }

    #[test]
    fn replicationcontrollers_and_podtemplates() {
        let rc = json!({"metadata": namespaced_meta("rc"),
            "spec": {"replicas": 3, "selector": {"app": "rc"},
                "template": {"spec": {"containers": [{"name": "a", "image": "img:1"}, {"name": "b", "image": "img:2"}]}}},
            "status": {"replicas": 3, "readyReplicas": 2}});
        assert_eq!(
            header("", "replicationcontrollers"),
            vec![
                ("Name", 0),
                ("Desired", 0),
                ("Current", 0),
                ("Ready", 0),
                ("Age", 0),
                ("Containers", 1),
                ("Images", 1),
                ("Selector", 1)
            ]
        );
        assert_eq!(
            row("", "replicationcontrollers", &rc),
            vec![
                json!("rc"),
                json!(3),
                json!(3),
                json!(2),
                json!("10m"),
                json!("a,b"),
                json!("img:1,img:2"),
                json!("app=rc")
            ]
        );
        let pt = json!({"metadata": namespaced_meta("pt"), "template": {"metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "busybox"}]}}});
        assert_eq!(
            header("", "podtemplates"),
            vec![
                ("Name", 0),
                ("Containers", 0),
                ("Images", 0),
                ("Pod Labels", 0)
            ]
        );
        assert_eq!(
            row("", "podtemplates", &pt),
            vec![json!("pt"), json!("c"), json!("busybox"), json!("app=x")]
        );
    }

    #[test]
    fn resourcequotas() {
        let q = json!({"metadata": namespaced_meta("quota"), "status": {
            "hard": {"pods": "10", "requests.cpu": "1", "limits.memory": "2Gi", "limits.cpu": "2"},
            "used": {"pods": "3", "requests.cpu": "500m", "limits.cpu": "1"}}});
        assert_eq!(
            strs(&row("", "resourcequotas", &q)),
            [
                "quota",
                "pods: 3/10, requests.cpu: 500m/1",
                "limits.cpu: 1/2, limits.memory: 0/2Gi",
                "10m"
            ]
        );
    }

    #[test]
    fn componentstatuses() {
        let cs = json!({"metadata": {"name": "etcd-0"}, "conditions": [{"type": "Healthy", "status": "True", "message": "ok"}]});
        assert_eq!(
            strs(&row("", "componentstatuses", &cs)),
            ["etcd-0", "Healthy", "ok", ""]
        );
        assert_eq!(
            strs(&row("", "componentstatuses", &json!({}))),
            ["", "Unknown", "", ""]
        );
        assert_eq!(
            header("", "componentstatuses"),
            vec![("Name", 0), ("Status", 0), ("Message", 0), ("Error", 0)]
        );
        // The first Healthy condition decides; anything but True is Unhealthy.
        let cs = json!({"metadata": {"name": "scheduler"}, "conditions": [
            {"type": "Other", "status": "True", "message": "ignored"},
            {"type": "Healthy", "status": "Unknown", "message": "",
             "error": "Get \"https://127.0.0.1:10259/healthz\": dial tcp 127.0.0.1:10259: connect: connection refused"},
            {"type": "Healthy", "status": "True", "message": "ok"}]});
        assert_eq!(
            strs(&row("", "componentstatuses", &cs)),
            [
                "scheduler",
                "Unhealthy",
                "",
                "Get \"https://127.0.0.1:10259/healthz\": dial tcp 127.0.0.1:10259: connect: connection refused"
            ]
        );
    }
}
