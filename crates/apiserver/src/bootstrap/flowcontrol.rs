//! The mandatory API priority and fairness configuration (upstream
//! `apiserver/pkg/apis/flowcontrol/bootstrap` and the configuration ensurer run at start): the `exempt`
//! and `catch-all` PriorityLevelConfigurations and FlowSchemas, re-created when missing and marked
//! `apf.kubernetes.io/autoupdate-spec: "true"`, so clients and tools listing them find upstream's.
//!
//! Upstream's suggested configuration, the FlowSchemas' `Dangling` condition and the fairness
//! itself are in [`crate::flowcontrol`].

use std::sync::Arc;

use serde_json::{json, Value};

use crate::ApiServer;

const GROUP: &str = "flowcontrol.apiserver.k8s.io";
const AUTOUPDATE: &str = "apf.kubernetes.io/autoupdate-spec";

fn meta(name: &str) -> Value {
    json!({"name": name, "annotations": {AUTOUPDATE: "true"}})
}

fn everything() -> (Value, Value) {
    (
        json!([{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}]),
        json!([{"verbs": ["*"], "nonResourceURLs": ["*"]}]),
    )
}

/// The mandatory PriorityLevelConfigurations.
pub fn priority_levels() -> Vec<Value> {
    vec![
        json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": meta("exempt"),
            "spec": {"type": "Exempt", "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0}},
        }),
        json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": meta("catch-all"),
            "spec": {"type": "Limited", "limited": {
                "nominalConcurrencyShares": 5, "lendablePercent": 0, "limitResponse": {"type": "Reject"},
            }},
        }),
    ]
}

/// The mandatory FlowSchemas.
pub fn flow_schemas() -> Vec<Value> {
    let (resources, non_resources) = everything();
    let group = |name: &str| json!({"kind": "Group", "group": {"name": name}});
    vec![
        json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": meta("exempt"),
            "spec": {
                "priorityLevelConfiguration": {"name": "exempt"},
                "matchingPrecedence": 1,
                "rules": [{"subjects": [group("system:masters")], "resourceRules": resources, "nonResourceRules": non_resources}],
            },
        }),
        json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": meta("catch-all"),
            "spec": {
                "priorityLevelConfiguration": {"name": "catch-all"},
                "matchingPrecedence": 10000,
                "distinguisherMethod": {"type": "ByUser"},
                "rules": [{
                    "subjects": [group("system:unauthenticated"), group("system:authenticated")],
                    "resourceRules": resources,
                    "nonResourceRules": non_resources,
                }],
            },
        }),
    ]
}

pub async fn ensure(api: &Arc<ApiServer>) -> Result<(), String> {
    for plc in priority_levels() {
        super::create_if_missing(api, (GROUP, "v1", "prioritylevelconfigurations"), None, plc)
            .await?;
    }
    for fs in flow_schemas() {
        super::create_if_missing(api, (GROUP, "v1", "flowschemas"), None, fs).await?;
    }
    Ok(())
}
