//! Printers of kinds that configure the API server itself, mirroring upstream
//! `pkg/printers/internalversion` and kube-aggregator's APIService table: admission webhook
//! configurations, validating and mutating admission policies and their bindings, API priority and
//! fairness (flowschemas, prioritylevelconfigurations), apiservices.
//!
//! One deliberate difference: a policy binding whose `paramRef` uses a selector shows the selector
//! string, where upstream prints the Go struct dump of the `LabelSelector`.

use serde_json::{json, Value};

use super::time::Instant;
use super::util::{
    arr_at, condition_status, get, int_at, label_selector_string, len_at, name, opt_str, str_at,
};
use super::{age_cell, col, printer, ColumnDefinition, Printers, AGE, NAME};

const ADMISSION: &str = "admissionregistration.k8s.io";
const FLOWCONTROL: &str = "flowcontrol.apiserver.k8s.io";

pub(super) const PRINTERS: Printers = &[
    (
        ADMISSION,
        "mutatingwebhookconfigurations",
        printer(WEBHOOK_COLUMNS, webhook_cells),
    ),
    (
        ADMISSION,
        "validatingwebhookconfigurations",
        printer(WEBHOOK_COLUMNS, webhook_cells),
    ),
    (
        ADMISSION,
        "validatingadmissionpolicies",
        printer(VAP_COLUMNS, vap_cells),
    ),
    (
        ADMISSION,
        "validatingadmissionpolicybindings",
        printer(BINDING_COLUMNS, binding_cells),
    ),
    (
        ADMISSION,
        "mutatingadmissionpolicies",
        printer(MAP_COLUMNS, map_cells),
    ),
    (
        ADMISSION,
        "mutatingadmissionpolicybindings",
        printer(BINDING_COLUMNS, binding_cells),
    ),
    (
        FLOWCONTROL,
        "flowschemas",
        printer(FLOWSCHEMA_COLUMNS, flowschema_cells),
    ),
    (
        FLOWCONTROL,
        "prioritylevelconfigurations",
        printer(PLC_COLUMNS, plc_cells),
    ),
    (
        "apiregistration.k8s.io",
        "apiservices",
        printer(APISERVICE_COLUMNS, apiservice_cells),
    ),
];

const WEBHOOK_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "Webhooks",
        "integer",
        "Webhooks indicates the number of webhooks registered in this configuration",
    ),
    AGE,
];

fn webhook_cells(w: &Value, now: Instant) -> Vec<Value> {
    vec![
        json!(name(w)),
        json!(len_at(w, &["webhooks"])),
        age_cell(w, now),
    ]
}

const PARAM_KIND: ColumnDefinition = col(
    "ParamKind",
    "string",
    "ParamKind specifies the kind of resources used to parameterize this policy",
);

const VAP_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "Validations",
        "integer",
        "Validations indicates the number of validation rules defined in this configuration",
    ),
    PARAM_KIND,
    AGE,
];

const MAP_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "Mutations",
        "integer",
        "Mutation indicates the number of mutations rules defined in this configuration",
    ),
    PARAM_KIND,
    AGE,
];

fn param_kind(p: &Value) -> String {
    match get(p, &["spec", "paramKind"]).filter(|k| k.is_object()) {
        Some(k) => format!("{}/{}", str_at(k, &["apiVersion"]), str_at(k, &["kind"])),
        None => "<unset>".to_string(),
    }
}

fn vap_cells(p: &Value, now: Instant) -> Vec<Value> {
    vec![
        json!(name(p)),
        json!(len_at(p, &["spec", "validations"])),
        json!(param_kind(p)),
        age_cell(p, now),
    ]
}

fn map_cells(p: &Value, now: Instant) -> Vec<Value> {
    vec![
        json!(name(p)),
        json!(len_at(p, &["spec", "mutations"])),
        json!(param_kind(p)),
        age_cell(p, now),
    ]
}

const BINDING_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "PolicyName",
        "string",
        "PolicyName indicates the policy definition which the policy binding binded to",
    ),
    col(
        "ParamRef",
        "string",
        "ParamRef indicates the param resource which sets the configration param",
    ),
    AGE,
];

fn binding_cells(b: &Value, now: Instant) -> Vec<Value> {
    let param = match get(b, &["spec", "paramRef"]).filter(|p| p.is_object()) {
        Some(p) => {
            let (ns, n) = (str_at(p, &["namespace"]), str_at(p, &["name"]));
            match (n.is_empty(), ns.is_empty()) {
                (false, false) => format!("{ns}/{n}"),
                // Whether the param is cluster-scoped is unknown here: `*` stands for any namespace.
                (false, true) => format!("*/{n}"),
                (true, _) => match get(p, &["selector"]).filter(|s| s.is_object()) {
                    Some(s) => {
                        label_selector_string(Some(s)).unwrap_or_else(|()| "<error>".to_string())
                    }
                    None => "<unset>".to_string(),
                },
            }
        }
        None => "<unset>".to_string(),
    };
    vec![
        json!(name(b)),
        json!(str_at(b, &["spec", "policyName"])),
        json!(param),
        age_cell(b, now),
    ]
}

const FLOWSCHEMA_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("PriorityLevel", "string", "`name` is the name of the priority level configuration being referenced Required."),
    col("MatchingPrecedence", "string", "`matchingPrecedence` is used to choose among the FlowSchemas that match a given request."),
    col("DistinguisherMethod", "string", "`distinguisherMethod` defines how to compute the flow distinguisher for requests that match this schema."),
    AGE,
    col("MissingPL", "string", "references a broken or non-existent PriorityLevelConfiguration"),
];

fn flowschema_cells(fs: &Value, now: Instant) -> Vec<Value> {
    let method = match get(fs, &["spec", "distinguisherMethod"]).filter(|m| m.is_object()) {
        Some(m) => str_at(m, &["type"]).to_string(),
        None => "<none>".to_string(),
    };
    vec![
        json!(name(fs)),
        json!(str_at(fs, &["spec", "priorityLevelConfiguration", "name"])),
        json!(int_at(fs, &["spec", "matchingPrecedence"])),
        json!(method),
        age_cell(fs, now),
        json!(condition_status(fs, &["status", "conditions"], "Dangling").unwrap_or("?")),
    ]
}

const PLC_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col("Type", "string", "`type` indicates whether this priority level is subject to limitation on request execution."),
    col("NominalConcurrencyShares", "string", "`nominalConcurrencyShares` (NCS) contributes to the computation of the NominalConcurrencyLimit (NominalCL) of this level."),
    col("Queues", "string", "`queues` is the number of queues for this priority level."),
    col("HandSize", "string", "`handSize` is a small positive number that configures the shuffle sharding of requests into queues."),
    col("QueueLengthLimit", "string", "`queueLengthLimit` is the maximum number of requests allowed to be waiting in a given queue of this priority level at a time; excess requests are rejected."),
    AGE,
];

fn plc_cells(plc: &Value, now: Instant) -> Vec<Value> {
    let none = || json!("<none>");
    let (mut ncs, mut queues, mut hand, mut limit) = (none(), none(), none(), none());
    if let Some(limited) = get(plc, &["spec", "limited"]).filter(|l| l.is_object()) {
        ncs = json!(int_at(limited, &["nominalConcurrencyShares"]));
        if let Some(q) = get(limited, &["limitResponse", "queuing"]).filter(|q| q.is_object()) {
            queues = json!(int_at(q, &["queues"]));
            hand = json!(int_at(q, &["handSize"]));
            limit = json!(int_at(q, &["queueLengthLimit"]));
        }
    }
    vec![
        json!(name(plc)),
        json!(str_at(plc, &["spec", "type"])),
        ncs,
        queues,
        hand,
        limit,
        age_cell(plc, now),
    ]
}

const APISERVICE_COLUMNS: &[ColumnDefinition] = &[
    NAME,
    col(
        "Service",
        "string",
        "The reference to the service that hosts this API endpoint.",
    ),
    col("Available", "string", "Whether this service is available."),
    AGE,
];

/// kube-aggregator: `Local` or `namespace/name` of the backing service; `True`, or the status with the
/// reason (`False (MissingEndpoints)`) of the Available condition, `Unknown` without one.
fn apiservice_cells(s: &Value, now: Instant) -> Vec<Value> {
    let service = match get(s, &["spec", "service"]).filter(|v| v.is_object()) {
        Some(svc) => format!("{}/{}", str_at(svc, &["namespace"]), str_at(svc, &["name"])),
        None => "Local".to_string(),
    };
    let available = match arr_at(s, &["status", "conditions"])
        .iter()
        .find(|c| str_at(c, &["type"]) == "Available")
    {
        None => "Unknown".to_string(),
        Some(c) => match (
            str_at(c, &["status"]),
            opt_str(c, &["reason"]).unwrap_or(""),
        ) {
            ("True", _) => "True".to_string(),
            (status, "") => status.to_string(),
            (status, reason) => format!("{status} ({reason})"),
        },
    };
    vec![
        json!(name(s)),
        json!(service),
        json!(available),
        age_cell(s, now),
    ]
}

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::testing::{header, meta, row};

    #[test]
    fn admission_policies() {
        let vap = json!({"metadata": meta("replicas"), "spec": {"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "validations": [{"expression": "true"}]}});
        assert_eq!(
            row(
                "admissionregistration.k8s.io",
                "validatingadmissionpolicies",
                &vap
            ),
            vec![
                json!("replicas"),
                json!(1),
                json!("v1/ConfigMap"),
                json!("10m")
            ]
        );
        let binding = |param: Value| json!({"metadata": meta("b"), "spec": {"policyName": "replicas", "paramRef": param}});
        let cases = [
            (
                json!({"namespace": "default", "name": "limits"}),
                "default/limits",
            ),
            (json!({"name": "limits"}), "*/limits"),
            (
                json!({"selector": {"matchLabels": {"env": "test"}}}),
                "env=test",
            ),
            (json!(null), "<unset>"),
        ];
        for (param, want) in cases {
            let r = row(
                "admissionregistration.k8s.io",
                "validatingadmissionpolicybindings",
                &binding(param),
            );
            assert_eq!(r[1..3], [json!("replicas"), json!(want)]);
        }
    }

    #[test]
    fn flowcontrol() {
        let fs = json!({"metadata": meta("exempt"), "spec": {"priorityLevelConfiguration": {"name": "exempt"},
            "matchingPrecedence": 1, "distinguisherMethod": {"type": "ByUser"}},
            "status": {"conditions": [{"type": "Dangling", "status": "False"}]}});
        assert_eq!(
            row("flowcontrol.apiserver.k8s.io", "flowschemas", &fs),
            vec![
                json!("exempt"),
                json!("exempt"),
                json!(1),
                json!("ByUser"),
                json!("10m"),
                json!("False")
            ]
        );
        let fs = json!({"metadata": meta("x"), "spec": {"matchingPrecedence": 9000}});
        assert_eq!(
            row("flowcontrol.apiserver.k8s.io", "flowschemas", &fs)[3..],
            [json!("<none>"), json!("10m"), json!("?")]
        );
        let limited = json!({"metadata": meta("workload-low"), "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": 100, "limitResponse": {"type": "Queue", "queuing": {"queues": 128, "handSize": 6, "queueLengthLimit": 50}}}}});
        assert_eq!(
            row(
                "flowcontrol.apiserver.k8s.io",
                "prioritylevelconfigurations",
                &limited
            ),
            vec![
                json!("workload-low"),
                json!("Limited"),
                json!(100),
                json!(128),
                json!(6),
                json!(50),
                json!("10m")
            ]
        );
        let exempt = json!({"metadata": meta("exempt"), "spec": {"type": "Exempt"}});
        assert_eq!(
            row(
                "flowcontrol.apiserver.k8s.io",
                "prioritylevelconfigurations",
                &exempt
            )[1..6],
            [
                json!("Exempt"),
                json!("<none>"),
                json!("<none>"),
                json!("<none>"),
                json!("<none>")
            ]
        );
    }

    #[test]
    fn apiservices() {
        assert_eq!(
            header("apiregistration.k8s.io", "apiservices"),
            vec![("Name", 0), ("Service", 0), ("Available", 0), ("Age", 0)]
        );
        let local = json!({"metadata": meta("v1.apps"), "status": {"conditions": [{"type": "Available", "status": "True", "reason": "Local"}]}});
        assert_eq!(
            row("apiregistration.k8s.io", "apiservices", &local),
            vec![
                json!("v1.apps"),
                json!("Local"),
                json!("True"),
                json!("10m")
            ]
        );
        let remote = json!({"metadata": meta("v1beta1.metrics.k8s.io"), "spec": {"service": {"namespace": "kube-system", "name": "metrics-server"}},
            "status": {"conditions": [{"type": "Available", "status": "False", "reason": "MissingEndpoints"}]}});
        assert_eq!(
            row("apiregistration.k8s.io", "apiservices", &remote)[1..3],
            [
                json!("kube-system/metrics-server"),
                json!("False (MissingEndpoints)")
            ]
        );
        assert_eq!(
            row("apiregistration.k8s.io", "apiservices", &json!({}))[2],
            json!("Unknown")
        );
    }
}
