//! Printers of kinds that configure the API server itself, mirroring upstream
//! `pkg/printers/internalversion` and kube-aggregator's APIService table: admission webhook
//! configurations, validating and mutating admission policies and their bindings, apiservices. API
//! priority and fairness has its own module, `flowcontrol`.
//!
//! One deliberate difference: a policy binding whose `paramRef` uses a selector shows the selector
//! string, where upstream prints the Go struct dump of the `LabelSelector`.

use serde_json::{json, Value};

use super::time::Instant;
use super::util::{arr_at, get, label_selector_string, len_at, name, opt_str, str_at};
use super::{age_cell, col, printer, ColumnDefinition, Printers, AGE, NAME};

const ADMISSION: &str = "admissionregistration.k8s.io";

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
    fn mutating_admission_policies() {
        const G: &str = "admissionregistration.k8s.io";
        for resource in ["mutatingadmissionpolicies", "validatingadmissionpolicies"] {
            let count = if resource.starts_with("mutating") {
                "Mutations"
            } else {
                "Validations"
            };
            assert_eq!(
                header(G, resource),
                vec![("Name", 0), (count, 0), ("ParamKind", 0), ("Age", 0)]
            );
        }
        for resource in [
            "mutatingadmissionpolicybindings",
            "validatingadmissionpolicybindings",
        ] {
            assert_eq!(
                header(G, resource),
                vec![("Name", 0), ("PolicyName", 0), ("ParamRef", 0), ("Age", 0)]
            );
        }
        let map = json!({"metadata": meta("sidecar"), "spec": {
            "paramKind": {"apiVersion": "example.com/v1", "kind": "SidecarConfig"},
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"], "resources": ["pods"]}]},
            "mutations": [
                {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression": "Object{}"}},
                {"patchType": "JSONPatch", "jsonPatch": {"expression": "[]"}}
            ],
            "reinvocationPolicy": "Never"}});
        assert_eq!(
            row(G, "mutatingadmissionpolicies", &map),
            vec![
                json!("sidecar"),
                json!(2),
                json!("example.com/v1/SidecarConfig"),
                json!("10m")
            ]
        );
        let bare = json!({"metadata": meta("labels"), "spec": {}});
        assert_eq!(
            row(G, "mutatingadmissionpolicies", &bare)[1..3],
            [json!(0), json!("<unset>")]
        );
        let binding = json!({"metadata": meta("sidecar-binding"), "spec": {"policyName": "sidecar",
            "paramRef": {"name": "default-sidecar", "namespace": "istio-system", "parameterNotFoundAction": "Deny"}}});
        assert_eq!(
            row(G, "mutatingadmissionpolicybindings", &binding),
            vec![
                json!("sidecar-binding"),
                json!("sidecar"),
                json!("istio-system/default-sidecar"),
                json!("10m")
            ]
        );
        let unbound = json!({"metadata": meta("b"), "spec": {"policyName": "labels"}});
        assert_eq!(
            row(G, "mutatingadmissionpolicybindings", &unbound)[2],
            json!("<unset>")
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
