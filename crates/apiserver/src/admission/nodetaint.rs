//! TaintNodesByCondition admission (upstream `plugin/pkg/admission/nodetaint`): every new Node gets
//! the `node.kubernetes.io/not-ready:NoSchedule` taint, so that no pod is scheduled onto a node
//! whose kubelet has not yet reported Ready; the node lifecycle controller removes the taint once
//! the node's Ready condition is True.
//!
//! Difference: upstream also adds taints from an admission configuration file; rkube has no such
//! file, so only the not-ready taint is added.

use apimachinery::status::ApiError;
use serde_json::{json, Value};

use super::{Attributes, Operation};
use crate::ApiServer;

/// The taint key upstream's node lifecycle controller owns for a node that is not Ready.
pub const NOT_READY: &str = "node.kubernetes.io/not-ready";

/// The plugin (upstream `TaintNodesByCondition`): mutating, on node creates.
pub struct TaintNodesByCondition;

#[async_trait::async_trait]
impl super::Plugin for TaintNodesByCondition {
    fn name(&self) -> &'static str {
        "TaintNodesByCondition"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        attrs.operation == Operation::Create
            && attrs.group.is_empty()
            && attrs.resource == "nodes"
            && attrs.subresource.is_none()
    }

    async fn admit(
        &self,
        _api: &ApiServer,
        _attrs: &Attributes<'_>,
        object: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        add_not_ready_taint(object);
        Ok(())
    }
}

/// Adds the not-ready NoSchedule taint unless the node has a taint with that key and effect
/// already (upstream `Taint.MatchTaint`: key and effect, whatever the value).
pub fn add_not_ready_taint(node: &mut Value) {
    let Some(obj) = node.as_object_mut() else {
        return;
    };
    let spec = obj.entry("spec").or_insert_with(|| json!({}));
    let Some(spec) = spec.as_object_mut() else {
        // Not an object: validation refuses the node; nothing to add to.
        return;
    };
    let taints = spec.entry("taints").or_insert_with(|| json!([]));
    if taints.is_null() {
        *taints = json!([]);
    }
    let Some(taints) = taints.as_array_mut() else {
        return;
    };
    let present = taints
        .iter()
        .any(|t| t["key"] == NOT_READY && t["effect"] == "NoSchedule");
    if !present {
        taints.push(json!({"key": NOT_READY, "effect": "NoSchedule"}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_nodes_get_the_not_ready_taint() {
        let mut node = json!({"metadata": {"name": "n1"}});
        add_not_ready_taint(&mut node);
        assert_eq!(
            node["spec"]["taints"],
            json!([{"key": NOT_READY, "effect": "NoSchedule"}])
        );

        // Existing taints are kept, the new one appended.
        let mut node = json!({"metadata": {"name": "n1"}, "spec": {"taints": [
            {"key": "dedicated", "value": "db", "effect": "NoSchedule"}]}});
        add_not_ready_taint(&mut node);
        assert_eq!(node["spec"]["taints"].as_array().unwrap().len(), 2);
        assert_eq!(node["spec"]["taints"][1]["key"], NOT_READY);
    }

    #[test]
    fn a_matching_taint_is_not_added_twice() {
        // Same key and effect, another value: upstream's MatchTaint says it is there already.
        let mut node = json!({"spec": {"taints": [
            {"key": NOT_READY, "value": "x", "effect": "NoSchedule"}]}});
        let before = node.clone();
        add_not_ready_taint(&mut node);
        assert_eq!(node, before);

        // Same key, other effect: a different taint.
        let mut node = json!({"spec": {"taints": [{"key": NOT_READY, "effect": "NoExecute"}]}});
        add_not_ready_taint(&mut node);
        assert_eq!(node["spec"]["taints"].as_array().unwrap().len(), 2);
    }

    #[test]
    fn only_node_creates_are_handled() {
        use super::super::{Outcome, Plugin};
        let user = crate::authn::UserInfo::server().clone();
        let outcome = Outcome::default();
        let attrs = |resource, sub, operation| Attributes {
            group: "",
            version: "v1",
            kind: "Node",
            resource,
            subresource: sub,
            namespace: "",
            name: "n1",
            operation,
            dry_run: false,
            user: &user,
            outcome: &outcome,
        };
        let p = TaintNodesByCondition;
        assert!(p.handles(&attrs("nodes", None, Operation::Create)));
        assert!(!p.handles(&attrs("nodes", None, Operation::Update)));
        assert!(!p.handles(&attrs("nodes", Some("status"), Operation::Create)));
        assert!(!p.handles(&attrs("pods", None, Operation::Create)));
    }
}
