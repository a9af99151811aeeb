//! DefaultTolerationSeconds admission (upstream `plugin/pkg/admission/defaulttolerationseconds`):
//! pods that do not tolerate the `node.kubernetes.io/not-ready` and `node.kubernetes.io/unreachable`
//! NoExecute taints get tolerations for them bounded to 300 seconds, so the taint eviction
//! controller evicts them five minutes after their node goes away rather than at once.
//!
//! Difference: upstream's `--default-not-ready-toleration-seconds` and
//! `--default-unreachable-toleration-seconds` are constants here (their default, 300).

use apimachinery::status::ApiError;
use serde_json::{json, Value};

use super::{Attributes, Operation};
use crate::ApiServer;

/// Upstream's `--default-not-ready-toleration-seconds` default.
pub const NOT_READY_SECONDS: i64 = 300;
/// Upstream's `--default-unreachable-toleration-seconds` default.
pub const UNREACHABLE_SECONDS: i64 = 300;

const NOT_READY: &str = "node.kubernetes.io/not-ready";
const UNREACHABLE: &str = "node.kubernetes.io/unreachable";

/// The plugin (upstream `DefaultTolerationSeconds`): mutating, on pod creates and updates.
pub struct DefaultTolerationSeconds;

#[async_trait::async_trait]
impl super::Plugin for DefaultTolerationSeconds {
    fn name(&self) -> &'static str {
        "DefaultTolerationSeconds"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        matches!(attrs.operation, Operation::Create | Operation::Update)
            && attrs.group.is_empty()
            && attrs.resource == "pods"
            && attrs.subresource.is_none()
    }

    async fn admit(
        &self,
        _api: &ApiServer,
        _attrs: &Attributes<'_>,
        object: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        add_default_tolerations(object, NOT_READY_SECONDS, UNREACHABLE_SECONDS);
        Ok(())
    }
}

/// Whether `t` tolerates the NoExecute taint `key` the way upstream's plugin reads it: the same
/// key or an empty one (which, with `Exists`, tolerates everything), and NoExecute or no effect.
fn tolerates(t: &Value, key: &str) -> bool {
    let t_key = t["key"].as_str().unwrap_or("");
    let effect = t["effect"].as_str().unwrap_or("");
    (t_key == key || t_key.is_empty()) && (effect == "NoExecute" || effect.is_empty())
}

/// Adds the not-ready and unreachable NoExecute tolerations the pod lacks.
pub fn add_default_tolerations(pod: &mut Value, not_ready: i64, unreachable: i64) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let tolerations = spec.entry("tolerations").or_insert_with(|| json!([]));
    if tolerations.is_null() {
        *tolerations = json!([]);
    }
    let Some(tolerations) = tolerations.as_array_mut() else {
        return;
    };
    let has_not_ready = tolerations.iter().any(|t| tolerates(t, NOT_READY));
    let has_unreachable = tolerations.iter().any(|t| tolerates(t, UNREACHABLE));
    for (has, key, seconds) in [
        (has_not_ready, NOT_READY, not_ready),
        (has_unreachable, UNREACHABLE, unreachable),
    ] {
        if !has {
            tolerations.push(json!({
                "key": key,
                "operator": "Exists",
                "effect": "NoExecute",
                "tolerationSeconds": seconds,
            }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(tolerations: Value) -> Value {
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}], "tolerations": tolerations}})
    }

    #[test]
    fn pods_get_both_tolerations_with_300_seconds() {
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}});
        add_default_tolerations(&mut pod, 300, 300);
        assert_eq!(
            pod["spec"]["tolerations"],
            json!([
                {"key": NOT_READY, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
                {"key": UNREACHABLE, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            ])
        );
    }

    #[test]
    fn existing_tolerations_are_respected() {
        // The pod's own not-ready toleration stays as it is; only unreachable is added.
        let mut pod = with(
            json!([{"key": NOT_READY, "operator": "Exists", "effect": "NoExecute",
            "tolerationSeconds": 60}]),
        );
        add_default_tolerations(&mut pod, 300, 300);
        let t = pod["spec"]["tolerations"].as_array().unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0]["tolerationSeconds"], 60);
        assert_eq!(t[1]["key"], UNREACHABLE);

        // An empty key with no effect tolerates everything: nothing to add.
        let mut pod = with(json!([{"operator": "Exists"}]));
        let before = pod.clone();
        add_default_tolerations(&mut pod, 300, 300);
        assert_eq!(pod, before);

        // A NoSchedule toleration of the key does not cover NoExecute.
        let mut pod =
            with(json!([{"key": UNREACHABLE, "operator": "Exists", "effect": "NoSchedule"}]));
        add_default_tolerations(&mut pod, 300, 300);
        assert_eq!(pod["spec"]["tolerations"].as_array().unwrap().len(), 3);

        // A key-specific toleration with no effect covers NoExecute too.
        let mut pod = with(json!([{"key": UNREACHABLE, "operator": "Exists"}]));
        add_default_tolerations(&mut pod, 300, 300);
        let t = pod["spec"]["tolerations"].as_array().unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[1]["key"], NOT_READY);
    }

    #[test]
    fn flag_values_are_used() {
        let mut pod = with(Value::Null);
        add_default_tolerations(&mut pod, 10, 20);
        assert_eq!(pod["spec"]["tolerations"][0]["tolerationSeconds"], 10);
        assert_eq!(pod["spec"]["tolerations"][1]["tolerationSeconds"], 20);
    }
}
