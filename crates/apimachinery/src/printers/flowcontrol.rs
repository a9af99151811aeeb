//! Printers of API priority and fairness (`flowcontrol.apiserver.k8s.io`), mirroring upstream
//! `pkg/printers/internalversion`: flowschemas and prioritylevelconfigurations.
//!
//! Upstream's FlowSchema list printer also reorders the list (`FlowSchemaSequence`: lowest
//! matchingPrecedence first, then by name); [`flowschema_order`] is that order, applied through
//! [`super::sort_rows`].

use std::cmp::Ordering;

use serde_json::{json, Value};

use super::time::Instant;
use super::util::{condition_status, get, int_at, name, str_at};
use super::{age_cell, col, printer, ColumnDefinition, Printers, AGE, NAME};

const FLOWCONTROL: &str = "flowcontrol.apiserver.k8s.io";

pub(super) const PRINTERS: Printers = &[
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
];

/// Whether a list of `group`/`resource` is printed in [`flowschema_order`].
pub(super) fn is_flowschemas(group: &str, resource: &str) -> bool {
    group == FLOWCONTROL && resource == "flowschemas"
}

/// `FlowSchemaSequence.Less`: the lower `spec.matchingPrecedence` first, then by name.
pub(super) fn flowschema_order(a: &Value, b: &Value) -> Ordering {
    int_at(a, &["spec", "matchingPrecedence"])
        .cmp(&int_at(b, &["spec", "matchingPrecedence"]))
        .then_with(|| name(a).cmp(name(b)))
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

#[cfg(test)]
mod tests {
    use serde_json::{json, Value};

    use super::super::testing::{header, meta, row};

    const G: &str = "flowcontrol.apiserver.k8s.io";

    #[test]
    fn headers() {
        assert_eq!(
            header(G, "flowschemas"),
            vec![
                ("Name", 0),
                ("PriorityLevel", 0),
                ("MatchingPrecedence", 0),
                ("DistinguisherMethod", 0),
                ("Age", 0),
                ("MissingPL", 0)
            ]
        );
        assert_eq!(
            header(G, "prioritylevelconfigurations"),
            vec![
                ("Name", 0),
                ("Type", 0),
                ("NominalConcurrencyShares", 0),
                ("Queues", 0),
                ("HandSize", 0),
                ("QueueLengthLimit", 0),
                ("Age", 0)
            ]
        );
        for resource in ["flowschemas", "prioritylevelconfigurations"] {
            assert!(super::super::columns(G, resource)
                .iter()
                .all(|c| c.type_ == "string"));
        }
    }

    #[test]
    fn flowschema_lists_sort_by_precedence_then_name() {
        let fs = |n: &str, p: Option<i64>| match p {
            Some(p) => json!({"metadata": meta(n), "spec": {"matchingPrecedence": p}}),
            None => json!({"metadata": meta(n), "spec": {}}),
        };
        let items = [
            fs("workload-low", Some(9000)),
            fs("global-default", Some(9900)),
            fs("system-nodes", Some(500)),
            fs("exempt", Some(1)),
            fs("system-leader-election", Some(100)),
            fs("kube-controller-manager", Some(800)),
            fs("kube-scheduler", Some(800)),
            fs("catch-all", Some(10000)),
            fs("probes", Some(2)),
            fs("unset", None),
        ];
        let mut refs: Vec<&Value> = items.iter().collect();
        super::super::sort_rows(G, "flowschemas", &mut refs);
        let names: Vec<&str> = refs.iter().map(|v| super::name(v)).collect();
        assert_eq!(
            names,
            [
                "unset",
                "exempt",
                "probes",
                "system-leader-election",
                "system-nodes",
                "kube-controller-manager",
                "kube-scheduler",
                "workload-low",
                "global-default",
                "catch-all"
            ]
        );
        // Other resources keep the listed order.
        let mut refs: Vec<&Value> = items.iter().collect();
        super::super::sort_rows(G, "prioritylevelconfigurations", &mut refs);
        assert_eq!(super::name(refs[0]), "workload-low");
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
}
