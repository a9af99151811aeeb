//! Upstream's suggested API priority and fairness configuration (`apis/flowcontrol/bootstrap`
//! `SuggestedPriorityLevelConfigurations` and `SuggestedFlowSchemas`, v1): created at start when
//! missing and marked `apf.kubernetes.io/autoupdate-spec: "true"`, beside the mandatory `exempt` and
//! `catch-all` objects of [`crate::bootstrap::flowcontrol`]. A deleted one comes back at the next
//! start, as upstream's ensurer does; one edited by a user is left as it is.

use std::sync::Arc;

use serde_json::{json, Value};

use crate::ApiServer;

const GROUP: &str = "flowcontrol.apiserver.k8s.io";

fn meta(name: &str) -> Value {
    json!({"name": name, "annotations": {"apf.kubernetes.io/autoupdate-spec": "true"}})
}

fn level(name: &str, shares: u64, lendable: u64, queues: u64, hand: u64, length: u64) -> Value {
    json!({
        "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
        "metadata": meta(name),
        "spec": {"type": "Limited", "limited": {
            "nominalConcurrencyShares": shares, "lendablePercent": lendable,
            "limitResponse": {"type": "Queue", "queuing": {"queues": queues, "handSize": hand, "queueLengthLimit": length}},
        }},
    })
}

/// The suggested PriorityLevelConfigurations.
pub fn priority_levels() -> Vec<Value> {
    vec![
        level("node-high", 40, 25, 64, 6, 50),
        level("system", 30, 33, 64, 6, 50),
        level("leader-election", 10, 0, 16, 4, 50),
        level("workload-high", 40, 50, 128, 6, 50),
        level("workload-low", 100, 90, 128, 6, 50),
        level("global-default", 20, 50, 128, 6, 50),
    ]
}

fn user(name: &str) -> Value {
    json!({"kind": "User", "user": {"name": name}})
}
fn group(name: &str) -> Value {
    json!({"kind": "Group", "group": {"name": name}})
}
fn service_account(namespace: &str, name: &str) -> Value {
    json!({"kind": "ServiceAccount", "serviceAccount": {"namespace": namespace, "name": name}})
}

fn schema(name: &str, level: &str, precedence: u64, by: Option<&str>, rules: Value) -> Value {
    let mut spec = json!({
        "priorityLevelConfiguration": {"name": level},
        "matchingPrecedence": precedence,
        "rules": rules,
    });
    if let Some(by) = by {
        spec["distinguisherMethod"] = json!({"type": by});
    }
    json!({"apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema", "metadata": meta(name), "spec": spec})
}

/// A rule over every resource and non-resource request of `subjects`.
fn everything(subjects: Vec<Value>) -> Value {
    json!([{
        "subjects": subjects,
        "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"], "clusterScope": true, "namespaces": ["*"]}],
        "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
    }])
}

/// The suggested FlowSchemas.
pub fn flow_schemas() -> Vec<Value> {
    let leases = json!({"verbs": ["get", "create", "update"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "namespaces": ["*"]});
    let kcm = "system:kube-controller-manager";
    vec![
        schema(
            "system-leader-election",
            "leader-election",
            100,
            Some("ByUser"),
            json!([{
                "subjects": [user(kcm), user("system:kube-scheduler"), service_account("kube-system", "*")],
                "resourceRules": [leases],
            }]),
        ),
        schema(
            "endpoint-controller",
            "workload-high",
            150,
            Some("ByUser"),
            json!([{
                "subjects": [user(kcm), service_account("kube-system", "endpoint-controller")],
                "resourceRules": [{"verbs": ["get", "create", "update"], "apiGroups": [""], "resources": ["endpoints"], "namespaces": ["*"]}],
            }]),
        ),
        schema(
            "workload-leader-election",
            "leader-election",
            200,
            Some("ByUser"),
            json!([{
                "subjects": [service_account("kube-system", "*")],
                "resourceRules": [leases],
            }]),
        ),
        schema(
            "system-node-high",
            "node-high",
            400,
            Some("ByUser"),
            json!([{
                "subjects": [group("system:nodes")],
                "resourceRules": [
                    {"verbs": ["*"], "apiGroups": [""], "resources": ["nodes", "nodes/status"], "clusterScope": true},
                    {"verbs": ["*"], "apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "namespaces": ["*"]},
                ],
            }]),
        ),
        schema(
            "system-nodes",
            "system",
            500,
            Some("ByUser"),
            everything(vec![group("system:nodes")]),
        ),
        schema(
            "kube-controller-manager",
            "workload-high",
            800,
            Some("ByNamespace"),
            everything(vec![user(kcm)]),
        ),
        schema(
            "kube-scheduler",
            "workload-high",
            800,
            Some("ByNamespace"),
            everything(vec![user("system:kube-scheduler")]),
        ),
        schema(
            "kube-system-service-accounts",
            "workload-high",
            900,
            Some("ByNamespace"),
            everything(vec![service_account("kube-system", "*")]),
        ),
        schema(
            "service-accounts",
            "workload-low",
            9000,
            Some("ByUser"),
            everything(vec![group("system:serviceaccounts")]),
        ),
        schema(
            "global-default",
            "global-default",
            9900,
            Some("ByUser"),
            everything(vec![
                group("system:unauthenticated"),
                group("system:authenticated"),
            ]),
        ),
        schema(
            "probes",
            "exempt",
            2,
            None,
            json!([{
                "subjects": [group("system:unauthenticated"), group("system:authenticated")],
                "nonResourceRules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz", "/readyz", "/livez"]}],
            }]),
        ),
    ]
}

async fn create_if_missing(api: &Arc<ApiServer>, plural: &str, obj: Value) -> Result<(), String> {
    let name = crate::objects::name(&obj).to_string();
    if api
        .store
        .get(&format!("/{plural}/{name}"))
        .await
        .map_err(|e| e.to_string())?
        .is_some()
    {
        return Ok(());
    }
    match crate::rest::create_internal(api, (GROUP, "v1", plural), None, obj).await {
        Ok(()) => Ok(()),
        Err(e) if e.code == 409 => Ok(()),
        Err(e) => Err(format!("cannot create {plural}/{name}: {e}")),
    }
}

/// Creates the suggested objects that are missing.
pub async fn ensure(api: &Arc<ApiServer>) -> Result<(), String> {
    for plc in priority_levels() {
        create_if_missing(api, "prioritylevelconfigurations", plc).await?;
    }
    for fs in flow_schemas() {
        create_if_missing(api, "flowschemas", fs).await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::config;
    use super::*;

    #[test]
    fn suggested_objects_digest_and_reference_existing_levels() {
        let mut levels = priority_levels();
        levels.extend(crate::bootstrap::flowcontrol::priority_levels());
        let mut schemas = flow_schemas();
        schemas.extend(crate::bootstrap::flowcontrol::flow_schemas());
        let d = config::digest(&schemas, &levels);
        assert_eq!(d.schemas.len(), 13, "none dangling");
        assert_eq!(d.levels.len(), 8);
        let limits = config::nominal_limits(&d.levels, 600);
        // 245 shares in all, as upstream: global-default gets ceil(600 * 20 / 245).
        assert_eq!(limits["global-default"], 49);
        assert_eq!(limits["workload-low"], 245);
        assert_eq!(limits["catch-all"], 13);
        let order: Vec<&str> = d.schemas.iter().take(3).map(|s| s.name.as_str()).collect();
        assert_eq!(order, ["exempt", "probes", "system-leader-election"]);
    }
}
