//! Printers of the remaining API groups, mirroring upstream `pkg/printers/internalversion`:
//! poddisruptionbudgets, horizontalpodautoscalers, priorityclasses, rolebindings, clusterrolebindings,
//! certificatesigningrequests, leases, runtimeclasses.

use serde_json::{json, Value};

use super::duration::human_duration_nanos;
use super::time::Instant;
use super::util::{arr_at, bool_at, get, int_at, int_or_string, name, opt_int, str_at};
use super::{age_cell, col, printer, ColumnDefinition, Printers, AGE, NAME};

const RBAC: &str = "rbac.authorization.k8s.io";

pub(super) const PRINTERS: Printers = &[
    (
        "policy",
        "poddisruptionbudgets",
        printer(PDB_COLUMNS, pdb_cells),
    ),
    (
        "autoscaling",
        "horizontalpodautoscalers",
        printer(HPA_COLUMNS, hpa_cells),
    ),
    (
        "scheduling.k8s.io",
        "priorityclasses",
        printer(PC_COLUMNS, pc_cells),
    ),
    (RBAC, "rolebindings", printer(RB_COLUMNS, binding_cells)),
    (
        RBAC,
        "clusterrolebindings",
        printer(CRB_COLUMNS, binding_cells),
    ),
    (
        "certificates.k8s.io",
        "certificatesigningrequests",
        printer(CSR_COLUMNS, csr_cells),
    ),
    (
        "coordination.k8s.io",
        "leases",
        printer(LEASE_COLUMNS, lease_cells),
    ),
    (
        "node.k8s.io",
        "runtimeclasses",
        printer(RUNTIMECLASS_COLUMNS, runtimeclass_cells),
    ),
];

const PDB_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "Min Available",
        "string",
        "The minimum number of pods that must be available.",
    ),
    col(
        "Max Unavailable",
        "string",
        "The maximum number of pods that may be unavailable.",
    ),
    col(
        "Allowed Disruptions",
        "integer",
        "Calculated number of pods that may be disrupted at this time.",
    ),
    AGE,
];

fn pdb_cells(pdb: &Value, now: Instant) -> Vec<Value> {
    let or_na = |field: &str| {
        int_or_string(get(pdb, &["spec", field])).unwrap_or_else(|| "N/A".to_string())
    };
    vec![
        json!(name(pdb)),
        json!(or_na("minAvailable")),
        json!(or_na("maxUnavailable")),
        json!(int_at(pdb, &["status", "disruptionsAllowed"])),
        age_cell(pdb, now),
    ]
}

const HPA_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Reference", "string", "scaleTargetRef points to the target resource to scale, and is used to the pods for which metrics should be collected, as well as to actually change the replica count."),
    col("Targets", "string", "metrics contains the specifications for which to use to calculate the desired replica count (the maximum replica count across all metrics will be used)."),
    col("MinPods", "string", "minReplicas is the lower limit for the number of replicas to which the autoscaler can scale down."),
    col("MaxPods", "string", "maxReplicas is the upper limit for the number of replicas to which the autoscaler can scale up."),
    col("Replicas", "string", "currentReplicas is current number of replicas of pods managed by this autoscaler, as last seen by the autoscaler."),
    AGE,
];

/// A quantity field as Go's `(*Quantity).String()`, `<nil>` when unset.
fn qty(v: &Value, path: &[&str]) -> String {
    match get(v, path) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Number(n)) => n.to_string(),
        _ => "<nil>".to_string(),
    }
}

/// One metric of `formatHPAMetrics`; `status` is the current metric at the same index, if any.
fn format_metric(spec: &Value, status: Option<&Value>) -> String {
    // The status block of the metric's source, e.g. `currentMetrics[i].resource`.
    let current = |source: &str| status.and_then(|s| s.get(source)).filter(|s| s.is_object());
    let has = |v: &Value, path: &[&str]| get(v, path).is_some_and(|q| !q.is_null());
    match str_at(spec, &["type"]) {
        source @ ("External" | "Object") => {
            let key = if source == "External" {
                "external"
            } else {
                "object"
            };
            let target = get(spec, &[key, "target"]).unwrap_or(&Value::Null);
            if has(target, &["averageValue"]) {
                let cur = current(key)
                    .filter(|c| has(c, &["current", "averageValue"]))
                    .map_or("<unknown>".to_string(), |c| {
                        qty(c, &["current", "averageValue"])
                    });
                format!("{cur}/{} (avg)", qty(target, &["averageValue"]))
            } else {
                let cur =
                    current(key).map_or("<unknown>".to_string(), |c| qty(c, &["current", "value"]));
                format!("{cur}/{}", qty(target, &["value"]))
            }
        }
        "Pods" => {
            let cur = current("pods").map_or("<unknown>".to_string(), |c| {
                qty(c, &["current", "averageValue"])
            });
            format!("{cur}/{}", qty(spec, &["pods", "target", "averageValue"]))
        }
        source @ ("Resource" | "ContainerResource") => {
            let key = if source == "Resource" {
                "resource"
            } else {
                "containerResource"
            };
            let resource = str_at(spec, &[key, "name"]);
            let target = get(spec, &[key, "target"]).unwrap_or(&Value::Null);
            if has(target, &["averageValue"]) {
                let cur = current(key).map_or("<unknown>".to_string(), |c| {
                    qty(c, &["current", "averageValue"])
                });
                format!("{resource}: {cur}/{}", qty(target, &["averageValue"]))
            } else {
                let cur = current(key)
                    .and_then(|c| get(c, &["current", "averageUtilization"]))
                    .and_then(Value::as_i64)
                    .map_or("<unknown>".to_string(), |u| format!("{u}%"));
                let goal = get(target, &["averageUtilization"])
                    .and_then(Value::as_i64)
                    .map_or("<auto>".to_string(), |u| format!("{u}%"));
                format!("{resource}: {cur}/{goal}")
            }
        }
        _ => "<unknown type>".to_string(),
    }
}

/// `formatHPAMetrics`: the first two metrics, then `+ N more...`; `<none>` without metrics. An
/// autoscaling/v1 object's CPU target reads as the CPU utilization metric it converts to.
fn format_hpa_metrics(hpa: &Value) -> String {
    let (specs, statuses): (Vec<Value>, Vec<Value>) = match get(hpa, &["spec", "metrics"]) {
        Some(Value::Array(m)) => (
            m.clone(),
            arr_at(hpa, &["status", "currentMetrics"]).to_vec(),
        ),
        _ => match opt_int(hpa, &["spec", "targetCPUUtilizationPercentage"]) {
            Some(target) => {
                let spec = json!({"type": "Resource", "resource": {"name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": target}}});
                let status = opt_int(hpa, &["status", "currentCPUUtilizationPercentage"])
                    .map(|c| json!({"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": c}}}));
                (vec![spec], status.into_iter().collect())
            }
            None => (Vec::new(), Vec::new()),
        },
    };
    if specs.is_empty() {
        return "<none>".to_string();
    }
    const MAX: usize = 2;
    let list: Vec<String> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| format_metric(s, statuses.get(i)))
        .collect();
    let shown = list
        .iter()
        .take(MAX)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if list.len() > MAX {
        format!("{shown} + {} more...", list.len() - MAX)
    } else {
        shown
    }
}

fn hpa_cells(hpa: &Value, now: Instant) -> Vec<Value> {
    let reference = format!(
        "{}/{}",
        str_at(hpa, &["spec", "scaleTargetRef", "kind"]),
        str_at(hpa, &["spec", "scaleTargetRef", "name"])
    );
    let min =
        opt_int(hpa, &["spec", "minReplicas"]).map_or("<unset>".to_string(), |n| n.to_string());
    vec![
        json!(name(hpa)),
        json!(reference),
        json!(format_hpa_metrics(hpa)),
        json!(min),
        json!(int_at(hpa, &["spec", "maxReplicas"])),
        json!(int_at(hpa, &["status", "currentReplicas"])),
        age_cell(hpa, now),
    ]
}

const PC_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Value", "integer", "value represents the integer value of this priority class."),
    col("Global-Default", "boolean", "globalDefault specifies whether this PriorityClass should be considered as the default priority for pods that do not have any priority class."),
    AGE,
    col("PreemptionPolicy", "string", "preemptionPolicy is the Policy for preempting pods with lower priority."),
];

fn pc_cells(pc: &Value, now: Instant) -> Vec<Value> {
    vec![
        json!(name(pc)),
        json!(int_at(pc, &["value"])),
        json!(bool_at(pc, &["globalDefault"])),
        age_cell(pc, now),
        json!(str_at(pc, &["preemptionPolicy"])),
    ]
}

const RB_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Role", "string", "RoleRef can reference a Role in the current namespace or a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error."),
    AGE,
    super::wide("Users", "string", "Users in the roleBinding"),
    super::wide("Groups", "string", "Groups in the roleBinding"),
    super::wide("ServiceAccounts", "string", "ServiceAccounts in the roleBinding"),
];

const CRB_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Role", "string", "RoleRef can only reference a ClusterRole in the global namespace. If the RoleRef cannot be resolved, the Authorizer must return an error."),
    AGE,
    super::wide("Users", "string", "Users in the clusterRoleBinding"),
    super::wide("Groups", "string", "Groups in the clusterRoleBinding"),
    super::wide("ServiceAccounts", "string", "ServiceAccounts in the clusterRoleBinding"),
];

/// Role and cluster role bindings: `Kind/name` of the role, and `rbac.SubjectsStrings` joined by `, `.
fn binding_cells(b: &Value, now: Instant) -> Vec<Value> {
    let (mut users, mut groups, mut sas) = (Vec::new(), Vec::new(), Vec::new());
    for s in arr_at(b, &["subjects"]) {
        match str_at(s, &["kind"]) {
            "ServiceAccount" => sas.push(format!(
                "{}/{}",
                str_at(s, &["namespace"]),
                str_at(s, &["name"])
            )),
            "User" => users.push(str_at(s, &["name"]).to_string()),
            "Group" => groups.push(str_at(s, &["name"]).to_string()),
            _ => {}
        }
    }
    vec![
        json!(name(b)),
        json!(format!(
            "{}/{}",
            str_at(b, &["roleRef", "kind"]),
            str_at(b, &["roleRef", "name"])
        )),
        age_cell(b, now),
        json!(users.join(", ")),
        json!(groups.join(", ")),
        json!(sas.join(", ")),
    ]
}

const CSR_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    AGE,
    col("SignerName", "string", "Requested signer for the request."),
    col("Requestor", "string", "Base64-encoded PKCS#10 CSR data"),
    col(
        "RequestedDuration",
        "string",
        "expirationSeconds is the requested duration of validity of the issued certificate.",
    ),
    col(
        "Condition",
        "string",
        "Conditions applied to the request, such as approval or denial.",
    ),
];

/// `extractCSRStatus`: `Denied`, `Approved` or `Pending`, then `,Failed` and `,Issued`.
fn csr_status(csr: &Value) -> String {
    let has = |t: &str| {
        arr_at(csr, &["status", "conditions"])
            .iter()
            .any(|c| str_at(c, &["type"]) == t)
    };
    let mut status = if has("Denied") {
        "Denied".to_string()
    } else if has("Approved") {
        "Approved".to_string()
    } else {
        "Pending".to_string()
    };
    if has("Failed") {
        status.push_str(",Failed");
    }
    if !str_at(csr, &["status", "certificate"]).is_empty() {
        status.push_str(",Issued");
    }
    status
}

fn csr_cells(csr: &Value, now: Instant) -> Vec<Value> {
    let duration = opt_int(csr, &["spec", "expirationSeconds"]).map_or("<none>".to_string(), |s| {
        human_duration_nanos(s.saturating_mul(1_000_000_000))
    });
    vec![
        json!(name(csr)),
        age_cell(csr, now),
        json!(super::util::or(
            str_at(csr, &["spec", "signerName"]),
            "<none>"
        )),
        json!(str_at(csr, &["spec", "username"])),
        json!(duration),
        json!(csr_status(csr)),
    ]
}

const LEASE_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "Holder",
        "string",
        "holderIdentity contains the identity of the holder of a current lease.",
    ),
    AGE,
];

fn lease_cells(l: &Value, now: Instant) -> Vec<Value> {
    vec![
        json!(name(l)),
        json!(str_at(l, &["spec", "holderIdentity"])),
        age_cell(l, now),
    ]
}

/// Upstream looks the handler's description up under a key ObjectMeta does not have: empty.
const RUNTIMECLASS_COLUMNS: &[ColumnDefinition] = &[NAME, col("Handler", "string", ""), AGE];

fn runtimeclass_cells(rc: &Value, now: Instant) -> Vec<Value> {
    vec![
        json!(name(rc)),
        json!(str_at(rc, &["handler"])),
        age_cell(rc, now),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::{header, meta, row};

    #[test]
    fn poddisruptionbudgets() {
        assert_eq!(
            header("policy", "poddisruptionbudgets"),
            vec![
                ("Name", 0),
                ("Min Available", 0),
                ("Max Unavailable", 0),
                ("Allowed Disruptions", 0),
                ("Age", 0)
            ]
        );
        let pdb = json!({"metadata": meta("web"), "spec": {"minAvailable": 2}, "status": {"disruptionsAllowed": 1}});
        assert_eq!(
            row("policy", "poddisruptionbudgets", &pdb),
            vec![
                json!("web"),
                json!("2"),
                json!("N/A"),
                json!(1),
                json!("10m")
            ]
        );
        let pdb = json!({"metadata": meta("db"), "spec": {"maxUnavailable": "25%"}});
        assert_eq!(
            row("policy", "poddisruptionbudgets", &pdb)[1..4],
            [json!("N/A"), json!("25%"), json!(0)]
        );
    }

    #[test]
    fn horizontalpodautoscalers() {
        assert_eq!(
            header("autoscaling", "horizontalpodautoscalers"),
            vec![
                ("Name", 0),
                ("Reference", 0),
                ("Targets", 0),
                ("MinPods", 0),
                ("MaxPods", 0),
                ("Replicas", 0),
                ("Age", 0)
            ]
        );
        let hpa = json!({
            "metadata": meta("web"),
            "spec": {"scaleTargetRef": {"kind": "Deployment", "name": "web"}, "minReplicas": 1, "maxReplicas": 10,
                "metrics": [{"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}]},
            "status": {"currentReplicas": 3, "currentMetrics": [{"type": "Resource", "resource": {"name": "cpu", "current": {"averageUtilization": 45}}}]}
        });
        assert_eq!(
            row("autoscaling", "horizontalpodautoscalers", &hpa),
            vec![
                json!("web"),
                json!("Deployment/web"),
                json!("cpu: 45%/80%"),
                json!("1"),
                json!(10),
                json!(3),
                json!("10m")
            ]
        );
        let many = json!({"metadata": meta("m"), "spec": {"maxReplicas": 5, "metrics": [
            {"type": "Resource", "resource": {"name": "memory", "target": {"type": "AverageValue", "averageValue": "500Mi"}}},
            {"type": "Pods", "pods": {"metric": {"name": "rps"}, "target": {"type": "AverageValue", "averageValue": "1k"}}},
            {"type": "External", "external": {"metric": {"name": "queue"}, "target": {"type": "Value", "value": "30"}}}
        ]}, "status": {"currentMetrics": [{"type": "Resource", "resource": {"name": "memory", "current": {"averageValue": "200Mi"}}}]}});
        assert_eq!(
            row("autoscaling", "horizontalpodautoscalers", &many)[2..4],
            [
                json!("memory: 200Mi/500Mi, <unknown>/1k + 1 more..."),
                json!("<unset>")
            ]
        );
        let unknown = json!({"spec": {"metrics": [
            {"type": "Resource", "resource": {"name": "cpu", "target": {"type": "Utilization"}}},
            {"type": "Object", "object": {"target": {"type": "AverageValue", "averageValue": "2"}}}]}});
        assert_eq!(
            row("autoscaling", "horizontalpodautoscalers", &unknown)[2],
            json!("cpu: <unknown>/<auto>, <unknown>/2 (avg)")
        );
        let v1 = json!({"spec": {"scaleTargetRef": {"kind": "Deployment", "name": "w"}, "targetCPUUtilizationPercentage": 50},
            "status": {"currentCPUUtilizationPercentage": 20}});
        assert_eq!(
            row("autoscaling", "horizontalpodautoscalers", &v1)[2],
            json!("cpu: 20%/50%")
        );
        assert_eq!(
            row("autoscaling", "horizontalpodautoscalers", &json!({}))[2],
            json!("<none>")
        );
    }

    #[test]
    fn priorityclasses() {
        let pc = json!({"metadata": meta("system-cluster-critical"), "value": 2000000000, "globalDefault": false,
            "preemptionPolicy": "PreemptLowerPriority"});
        assert_eq!(
            header("scheduling.k8s.io", "priorityclasses"),
            vec![
                ("Name", 0),
                ("Value", 0),
                ("Global-Default", 0),
                ("Age", 0),
                ("PreemptionPolicy", 0)
            ]
        );
        assert_eq!(
            row("scheduling.k8s.io", "priorityclasses", &pc),
            vec![
                json!("system-cluster-critical"),
                json!(2000000000),
                json!(false),
                json!("10m"),
                json!("PreemptLowerPriority")
            ]
        );
    }

    #[test]
    fn bindings() {
        let want = vec![
            ("Name", 0),
            ("Role", 0),
            ("Age", 0),
            ("Users", 1),
            ("Groups", 1),
            ("ServiceAccounts", 1),
        ];
        assert_eq!(header("rbac.authorization.k8s.io", "rolebindings"), want);
        assert_eq!(
            header("rbac.authorization.k8s.io", "clusterrolebindings"),
            want
        );
        let b = json!({"metadata": meta("admins"), "roleRef": {"kind": "ClusterRole", "name": "cluster-admin"},
            "subjects": [{"kind": "User", "name": "alice"}, {"kind": "User", "name": "bob"}, {"kind": "Group", "name": "ops"},
                {"kind": "ServiceAccount", "namespace": "kube-system", "name": "ci"}]});
        assert_eq!(
            row("rbac.authorization.k8s.io", "clusterrolebindings", &b),
            vec![
                json!("admins"),
                json!("ClusterRole/cluster-admin"),
                json!("10m"),
                json!("alice, bob"),
                json!("ops"),
                json!("kube-system/ci")
            ]
        );
    }

    #[test]
    fn certificatesigningrequests() {
        assert_eq!(
            header("certificates.k8s.io", "certificatesigningrequests"),
            vec![
                ("Name", 0),
                ("Age", 0),
                ("SignerName", 0),
                ("Requestor", 0),
                ("RequestedDuration", 0),
                ("Condition", 0)
            ]
        );
        let csr = json!({"metadata": meta("csr-1"), "spec": {"signerName": "kubernetes.io/kube-apiserver-client",
            "username": "alice", "expirationSeconds": 86400},
            "status": {"conditions": [{"type": "Approved", "status": "True"}], "certificate": "LS0t"}});
        assert_eq!(
            row("certificates.k8s.io", "certificatesigningrequests", &csr),
            vec![
                json!("csr-1"),
                json!("10m"),
                json!("kubernetes.io/kube-apiserver-client"),
                json!("alice"),
                json!("24h"),
                json!("Approved,Issued")
            ]
        );
        let denied = json!({"status": {"conditions": [{"type": "Approved"}, {"type": "Denied"}, {"type": "Failed"}]}});
        let r = row("certificates.k8s.io", "certificatesigningrequests", &denied);
        assert_eq!(
            r[2..],
            [
                json!("<none>"),
                json!(""),
                json!("<none>"),
                json!("Denied,Failed")
            ]
        );
        assert_eq!(
            row(
                "certificates.k8s.io",
                "certificatesigningrequests",
                &json!({})
            )[5],
            json!("Pending")
        );
    }

    #[test]
    fn leases_runtimeclasses_webhooks() {
        let lease =
            json!({"metadata": meta("kube-scheduler"), "spec": {"holderIdentity": "cp-1_abc"}});
        assert_eq!(
            header("coordination.k8s.io", "leases"),
            vec![("Name", 0), ("Holder", 0), ("Age", 0)]
        );
        assert_eq!(
            row("coordination.k8s.io", "leases", &lease),
            vec![json!("kube-scheduler"), json!("cp-1_abc"), json!("10m")]
        );
        let rc = json!({"metadata": meta("gvisor"), "handler": "runsc"});
        assert_eq!(
            row("node.k8s.io", "runtimeclasses", &rc),
            vec![json!("gvisor"), json!("runsc"), json!("10m")]
        );
        let wh = json!({"metadata": meta("policy"), "webhooks": [{"name": "a"}, {"name": "b"}]});
        assert_eq!(
            row(
                "admissionregistration.k8s.io",
                "validatingwebhookconfigurations",
                &wh
            ),
            vec![json!("policy"), json!(2), json!("10m")]
        );
    }
}
