//! The ClusterRole aggregation controller (upstream `pkg/controller/clusterroleaggregation`,
//! "clusterrole-aggregation-controller"): a ClusterRole with an `aggregationRule` gets as its rules
//! the union of the rules of the ClusterRoles its `clusterRoleSelectors` select (selected roles in
//! name order, each rule once, itself excluded), written with server-side apply as field manager
//! `clusterrole-aggregation-controller`. Any ClusterRole change requeues every aggregated role, as
//! upstream does (the set of ClusterRoles is small and the dependency graph unknown); chains such as
//! view -> edit -> admin converge over successive syncs.

use std::sync::Arc;

use client::controller::Controller;
use client::informer::{EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::api::{Patch, PatchParams};
use kube::Api;

/// The field manager of the controller's applies (upstream's).
pub const FIELD_MANAGER: &str = "clusterrole-aggregation-controller";

/// A rule with empty lists as absent, so `[]` and a missing list compare equal (upstream compares
/// with `equality.Semantic`, for which nil and empty slices are equal).
fn normalized(rule: &PolicyRule) -> PolicyRule {
    let norm = |v: &Option<Vec<String>>| v.clone().filter(|v| !v.is_empty());
    PolicyRule {
        api_groups: norm(&rule.api_groups),
        non_resource_urls: norm(&rule.non_resource_urls),
        resource_names: norm(&rule.resource_names),
        resources: norm(&rule.resources),
        verbs: rule.verbs.clone(),
    }
}

/// The rules an aggregated ClusterRole should have, or `None` when it is not aggregated or already
/// has them (upstream `syncClusterRole`).
pub fn aggregate(
    role: &ClusterRole,
    all: &[Arc<ClusterRole>],
) -> Result<Option<Vec<PolicyRule>>, String> {
    let Some(rule) = role.aggregation_rule.as_ref() else {
        return Ok(None);
    };
    let own_name = role.metadata.name.as_deref().unwrap_or("");
    let mut sorted: Vec<&Arc<ClusterRole>> = all.iter().collect();
    sorted.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    let mut rules: Vec<PolicyRule> = Vec::new();
    for selector in rule.cluster_role_selectors.iter().flatten() {
        let value = serde_json::to_value(selector).map_err(|e| e.to_string())?;
        let selector = apimachinery::labels::selector_from_label_selector(&value)?;
        for other in &sorted {
            if other.metadata.name.as_deref() == Some(own_name) {
                continue;
            }
            let labels: serde_json::Map<String, serde_json::Value> = other
                .metadata
                .labels
                .iter()
                .flatten()
                .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                .collect();
            if !selector.matches(&labels) {
                continue;
            }
            for r in other.rules.iter().flatten() {
                let r = normalized(r);
                if !rules.contains(&r) {
                    rules.push(r);
                }
            }
        }
    }
    let current: Vec<PolicyRule> = role.rules.iter().flatten().map(normalized).collect();
    Ok((current != rules).then_some(rules))
}

struct Ctx {
    client: kube::Client,
    roles: Arc<Store<ClusterRole>>,
    queue: RateLimitingQueue<String>,
}

impl Ctx {
    /// Queues every aggregated ClusterRole (upstream `enqueue`).
    fn enqueue_aggregated(&self) {
        for role in self.roles.list() {
            if role.aggregation_rule.is_some() {
                self.queue
                    .add(role.metadata.name.clone().unwrap_or_default());
            }
        }
    }

    async fn sync(&self, name: &str) -> Result<(), String> {
        let Some(role) = self.roles.get(name) else {
            return Ok(());
        };
        let Some(rules) = aggregate(&role, &self.roles.list())? else {
            return Ok(());
        };
        let apply = serde_json::json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": rules,
        });
        let api: Api<ClusterRole> = Api::all(self.client.clone());
        api.patch(
            name,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&apply),
        )
        .await
        .map(|_| ())
        .map_err(|e| format!("apply ClusterRole {name}: {}", crate::api_error_message(&e)))
    }
}

/// Runs the controller until the future is dropped.
pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
    let informer = factory.informer::<ClusterRole>();
    let ctx = Arc::new(Ctx {
        client,
        roles: informer.store(),
        queue: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("ClusterRoleAggregator"),
        ),
    });
    let (a, b, c) = (ctx.clone(), ctx.clone(), ctx.clone());
    informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |_: &Arc<ClusterRole>, _| a.enqueue_aggregated())
            .on_update(move |_: &Arc<ClusterRole>, _: &Arc<ClusterRole>| b.enqueue_aggregated())
            .on_delete(move |_| c.enqueue_aggregated()),
    );
    factory.start();
    informer.wait_for_sync().await;
    Controller::new("clusterrole-aggregation", ctx.queue.clone())
        .run(workers, move |name: String| {
            let ctx = ctx.clone();
            async move { ctx.sync(&name).await }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn role(v: serde_json::Value) -> Arc<ClusterRole> {
        Arc::new(serde_json::from_value(v).expect("cluster role"))
    }

    #[test]
    fn union_of_selected_roles_in_name_order() {
        let aggregated = role(json!({"metadata": {"name": "agg"},
            "aggregationRule": {"clusterRoleSelectors": [
                {"matchLabels": {"agg": "true"}},
                {"matchExpressions": [{"key": "extra", "operator": "Exists"}]}]}}));
        let all = vec![
            aggregated.clone(),
            role(json!({"metadata": {"name": "b", "labels": {"agg": "true"}},
                "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]})),
            role(
                json!({"metadata": {"name": "a", "labels": {"agg": "true", "extra": "1"}},
                "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["list"]},
                          {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"], "resourceNames": []}]}),
            ),
            role(json!({"metadata": {"name": "c"},
                "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["*"]}]})),
        ];
        let rules = aggregate(&aggregated, &all)
            .expect("aggregate")
            .expect("changed");
        let got: Vec<String> = rules
            .iter()
            .map(|r| format!("{:?}/{:?}", r.resources, r.verbs))
            .collect();
        assert_eq!(
            got,
            [
                "Some([\"secrets\"])/[\"list\"]",
                "Some([\"pods\"])/[\"get\"]",
            ]
        );
        // Already aggregated: nothing to write.
        let mut done = (*aggregated).clone();
        done.rules = Some(rules);
        assert_eq!(aggregate(&done, &all), Ok(None));
        // Not aggregated.
        assert_eq!(aggregate(&all[3], &all), Ok(None));
        // Nothing selected any more: the rules go.
        let none = aggregate(&done, &all[..1]).expect("aggregate");
        assert_eq!(none, Some(vec![]));
    }
}
