//! Printers of `apps` kinds, mirroring upstream `pkg/printers/internalversion`: deployments,
//! replicasets, statefulsets, daemonsets, controllerrevisions.

use serde_json::{json, Value};

use super::time::Instant;
use super::util::{
    arr_at, format_label_selector, format_labels, get, int_at, label_selector_string, name, obj_at,
    opt_int, str_at, template_containers,
};
use super::{
    age_cell, col, printer, wide, ColumnDefinition, Printers, AGE, CONTAINERS, IMAGES, NAME,
};

pub(super) const PRINTERS: Printers = &[
    (
        "apps",
        "deployments",
        printer(DEPLOYMENT_COLUMNS, deployment_cells),
    ),
    (
        "apps",
        "replicasets",
        printer(REPLICASET_COLUMNS, replicaset_cells),
    ),
    (
        "apps",
        "statefulsets",
        printer(STATEFULSET_COLUMNS, statefulset_cells),
    ),
    (
        "apps",
        "daemonsets",
        printer(DAEMONSET_COLUMNS, daemonset_cells),
    ),
    (
        "apps",
        "controllerrevisions",
        printer(REVISION_COLUMNS, revision_cells),
    ),
];

/// `spec.replicas`, which apps/v1 and core/v1 default to 1.
fn desired_replicas(obj: &Value) -> i64 {
    opt_int(obj, &["spec", "replicas"]).unwrap_or(1)
}

const DEPLOYMENT_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Ready", "string", "Number of the pod with ready state"),
    col("Up-to-date", "string", "Total number of non-terminated pods targeted by this deployment that have the desired template spec."),
    col("Available", "string", "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment."),
    AGE,
    CONTAINERS,
    IMAGES,
    wide("Selector", "string", "Label selector for pods."),
];

fn deployment_cells(d: &Value, now: Instant) -> Vec<Value> {
    let (names, images) = template_containers(d);
    // Upstream prints a deployment's selector with `selector.String()`, `<invalid>` if it is not one.
    let selector = label_selector_string(get(d, &["spec", "selector"]))
        .unwrap_or_else(|()| "<invalid>".to_string());
    vec![
        json!(name(d)),
        json!(format!(
            "{}/{}",
            int_at(d, &["status", "readyReplicas"]),
            desired_replicas(d)
        )),
        json!(int_at(d, &["status", "updatedReplicas"])),
        json!(int_at(d, &["status", "availableReplicas"])),
        age_cell(d, now),
        json!(names),
        json!(images),
        json!(selector),
    ]
}

const REPLICASET_COLUMNS: &[ColumnDefinition] = &[
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
        "The number of ready replicas for this replica set.",
    ),
    AGE,
    CONTAINERS,
    IMAGES,
    wide(
        "Selector",
        "string",
        "Selector is a label query over pods that should match the replica count.",
    ),
];

fn replicaset_cells(rs: &Value, now: Instant) -> Vec<Value> {
    let selector = format_label_selector(get(rs, &["spec", "selector"]));
    replica_cells(rs, now, selector)
}

/// The cells upstream's `printReplicaSet` and `printReplicationController` share (they differ only in
/// how the selector prints): name, desired, current and ready replicas, age, the pod template's
/// containers and images, then `selector`.
pub(super) fn replica_cells(obj: &Value, now: Instant, selector: String) -> Vec<Value> {
    let (names, images) = template_containers(obj);
    vec![
        json!(name(obj)),
        json!(desired_replicas(obj)),
        json!(int_at(obj, &["status", "replicas"])),
        json!(int_at(obj, &["status", "readyReplicas"])),
        age_cell(obj, now),
        json!(names),
        json!(images),
        json!(selector),
    ]
}

const STATEFULSET_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Ready", "string", "Number of the pod with ready state"),
    AGE,
    CONTAINERS,
    IMAGES,
];

fn statefulset_cells(ss: &Value, now: Instant) -> Vec<Value> {
    let (names, images) = template_containers(ss);
    vec![
        json!(name(ss)),
        json!(format!(
            "{}/{}",
            int_at(ss, &["status", "readyReplicas"]),
            desired_replicas(ss)
        )),
        age_cell(ss, now),
        json!(names),
        json!(images),
    ]
}

const DAEMONSET_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Desired", "integer", "The total number of nodes that should be running the daemon pod (including nodes correctly running the daemon pod)."),
    col("Current", "integer", "The number of nodes that are running at least 1 daemon pod and are supposed to run the daemon pod."),
    col("Ready", "integer", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and ready."),
    col("Up-to-date", "integer", "The total number of nodes that are running updated daemon pod"),
    col("Available", "integer", "The number of nodes that should be running the daemon pod and have one or more of the daemon pod running and available (ready for at least spec.minReadySeconds)"),
    col("Node Selector", "string", "NodeSelector is a selector which must be true for the pod to fit on a node."),
    AGE,
    CONTAINERS,
    IMAGES,
    wide("Selector", "string", "A label query over pods that are managed by the daemon set."),
];

fn daemonset_cells(ds: &Value, now: Instant) -> Vec<Value> {
    let (names, images) = template_containers(ds);
    vec![
        json!(name(ds)),
        json!(int_at(ds, &["status", "desiredNumberScheduled"])),
        json!(int_at(ds, &["status", "currentNumberScheduled"])),
        json!(int_at(ds, &["status", "numberReady"])),
        json!(int_at(ds, &["status", "updatedNumberScheduled"])),
        json!(int_at(ds, &["status", "numberAvailable"])),
        json!(format_labels(obj_at(
            ds,
            &["spec", "template", "spec", "nodeSelector"]
        ))),
        age_cell(ds, now),
        json!(names),
        json!(images),
        json!(format_label_selector(get(ds, &["spec", "selector"]))),
    ]
}

const REVISION_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Controller", "string", "Controller of the object"),
    col(
        "Revision",
        "string",
        "Revision indicates the revision of the state represented by Data.",
    ),
    AGE,
];

/// The owner reference marked `controller: true`, as `kind.group/name` (`statefulset.apps/web`).
pub(super) fn controller_of(obj: &Value) -> String {
    let Some(owner) = arr_at(obj, &["metadata", "ownerReferences"])
        .iter()
        .find(|o| o.get("controller").and_then(Value::as_bool) == Some(true))
    else {
        return "<none>".to_string();
    };
    let api_version = str_at(owner, &["apiVersion"]);
    let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
    let kind = str_at(owner, &["kind"]);
    let owner_name = str_at(owner, &["name"]);
    if group.is_empty() && kind.is_empty() {
        return owner_name.to_string();
    }
    let group_kind = if group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{group}")
    };
    format!("{}/{owner_name}", group_kind.to_lowercase())
}

fn revision_cells(cr: &Value, now: Instant) -> Vec<Value> {
    vec![
        json!(name(cr)),
        json!(controller_of(cr)),
        json!(int_at(cr, &["revision"])),
        age_cell(cr, now),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::testing::{header, row, CREATED};

    fn workload(spec: Value, status: Value) -> Value {
        json!({"metadata": {"name": "web", "creationTimestamp": CREATED}, "spec": spec, "status": status})
    }

    fn template() -> Value {
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [
            {"name": "app", "image": "nginx:1.27"}, {"name": "sidecar", "image": "envoy:1.30"}]}})
    }

    #[test]
    fn deployments() {
        assert_eq!(
            header("apps", "deployments"),
            vec![
                ("Name", 0),
                ("Ready", 0),
                ("Up-to-date", 0),
                ("Available", 0),
                ("Age", 0),
                ("Containers", 1),
                ("Images", 1),
                ("Selector", 1)
            ]
        );
        let d = workload(
            json!({"replicas": 3, "selector": {"matchLabels": {"app": "web"}}, "template": template()}),
            json!({"replicas": 3, "readyReplicas": 2, "updatedReplicas": 3, "availableReplicas": 2}),
        );
        assert_eq!(
            row("apps", "deployments", &d),
            vec![
                json!("web"),
                json!("2/3"),
                json!(3),
                json!(2),
                json!("10m"),
                json!("app,sidecar"),
                json!("nginx:1.27,envoy:1.30"),
                json!("app=web"),
            ]
        );
        let fresh = workload(
            json!({"selector": {"matchExpressions": [{"key": "a", "operator": "Bad"}]}}),
            json!({}),
        );
        let r = row("apps", "deployments", &fresh);
        assert_eq!(
            (r[1].clone(), r[2].clone(), r[7].clone()),
            (json!("0/1"), json!(0), json!("<invalid>"))
        );
        let no_selector = workload(json!({"replicas": 0}), json!({}));
        assert_eq!(row("apps", "deployments", &no_selector)[7], json!(""));
    }

    #[test]
    fn replicasets() {
        assert_eq!(
            header("apps", "replicasets"),
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
        let rs = workload(
            json!({"replicas": 2, "selector": {"matchLabels": {"app": "web", "pod-template-hash": "abc"}}, "template": template()}),
            json!({"replicas": 2, "readyReplicas": 1}),
        );
        assert_eq!(
            row("apps", "replicasets", &rs),
            vec![
                json!("web"),
                json!(2),
                json!(2),
                json!(1),
                json!("10m"),
                json!("app,sidecar"),
                json!("nginx:1.27,envoy:1.30"),
                json!("app=web,pod-template-hash=abc"),
            ]
        );
        assert_eq!(
            row("apps", "replicasets", &workload(json!({}), json!({})))[7],
            json!("<none>")
        );
    }

    #[test]
    fn statefulsets() {
        assert_eq!(
            header("apps", "statefulsets"),
            vec![
                ("Name", 0),
                ("Ready", 0),
                ("Age", 0),
                ("Containers", 1),
                ("Images", 1)
            ]
        );
        let ss = workload(
            json!({"replicas": 3, "template": template()}),
            json!({"readyReplicas": 3}),
        );
        assert_eq!(
            row("apps", "statefulsets", &ss),
            vec![
                json!("web"),
                json!("3/3"),
                json!("10m"),
                json!("app,sidecar"),
                json!("nginx:1.27,envoy:1.30")
            ]
        );
    }

    #[test]
    fn daemonsets() {
        assert_eq!(
            header("apps", "daemonsets"),
            vec![
                ("Name", 0),
                ("Desired", 0),
                ("Current", 0),
                ("Ready", 0),
                ("Up-to-date", 0),
                ("Available", 0),
                ("Node Selector", 0),
                ("Age", 0),
                ("Containers", 1),
                ("Images", 1),
                ("Selector", 1)
            ]
        );
        let mut tpl = template();
        tpl["spec"]["nodeSelector"] = json!({"kubernetes.io/os": "linux"});
        let ds = workload(
            json!({"selector": {"matchLabels": {"app": "web"}}, "template": tpl}),
            json!({"desiredNumberScheduled": 3, "currentNumberScheduled": 3, "numberReady": 2,
                "updatedNumberScheduled": 3, "numberAvailable": 2}),
        );
        assert_eq!(
            row("apps", "daemonsets", &ds),
            vec![
                json!("web"),
                json!(3),
                json!(3),
                json!(2),
                json!(3),
                json!(2),
                json!("kubernetes.io/os=linux"),
                json!("10m"),
                json!("app,sidecar"),
                json!("nginx:1.27,envoy:1.30"),
                json!("app=web"),
            ]
        );
        assert_eq!(
            row("apps", "daemonsets", &workload(json!({}), json!({})))[6],
            json!("<none>")
        );
    }

    #[test]
    fn controllerrevisions() {
        let cr = json!({"metadata": {"name": "web-7d9", "creationTimestamp": CREATED, "ownerReferences": [
            {"apiVersion": "v1", "kind": "Pod", "name": "other"},
            {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "controller": true}]},
            "revision": 2});
        assert_eq!(
            row("apps", "controllerrevisions", &cr),
            vec![
                json!("web-7d9"),
                json!("statefulset.apps/web"),
                json!(2),
                json!("10m")
            ]
        );
        let core_owner = json!({"metadata": {"ownerReferences": [
            {"apiVersion": "v1", "kind": "Node", "name": "n1", "controller": true}]}});
        assert_eq!(
            row("apps", "controllerrevisions", &core_owner)[1],
            json!("node/n1")
        );
        assert_eq!(
            row("apps", "controllerrevisions", &json!({}))[1],
            json!("<none>")
        );
    }
}
