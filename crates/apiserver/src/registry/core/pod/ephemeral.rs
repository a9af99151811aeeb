//! `pods/ephemeralcontainers` (upstream `podEphemeralContainersStrategy`): only
//! `spec.ephemeralContainers` is taken from the request (upstream
//! `dropNonEphemeralContainerUpdates`); the generation moves when they changed. Validation is
//! `apimachinery::validation::validate_pod_ephemeral_containers_update`.

use serde_json::{json, Value};

use crate::objects;

/// The stored pod `old` with the request's ephemeral containers.
pub fn prepare_for_update(new: &Value, old: &Value) -> Value {
    let mut merged = old.clone();
    let wanted = new
        .pointer("/spec/ephemeralContainers")
        .cloned()
        .unwrap_or(Value::Null);
    if !merged["spec"].is_object() {
        merged["spec"] = json!({});
    }
    merged["spec"]["ephemeralContainers"] = wanted;
    if merged.pointer("/spec/ephemeralContainers") != old.pointer("/spec/ephemeralContainers")
        && !(merged["spec"]["ephemeralContainers"].is_null()
            && old.pointer("/spec/ephemeralContainers").is_none())
    {
        let generation = objects::meta(old)
            .and_then(|m| m.get("generation"))
            .and_then(Value::as_i64)
            .unwrap_or(1);
        objects::set_meta(&mut merged, "generation", json!(generation + 1));
    }
    if merged["spec"]["ephemeralContainers"].is_null() {
        if let Some(spec) = merged["spec"].as_object_mut() {
            spec.remove("ephemeralContainers");
        }
    }
    merged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_ephemeral_containers_come_from_the_request() {
        let old = json!({"metadata": {"name": "p", "generation": 1},
            "spec": {"containers": [{"name": "app", "image": "a"}]},
            "status": {"phase": "Running"}});
        let new = json!({"metadata": {"name": "p", "labels": {"x": "y"}},
            "spec": {"containers": [{"name": "app", "image": "changed"}],
                     "ephemeralContainers": [{"name": "dbg", "image": "busybox"}]},
            "status": {}});
        let merged = prepare_for_update(&new, &old);
        assert_eq!(merged["spec"]["containers"][0]["image"], "a");
        assert_eq!(merged["spec"]["ephemeralContainers"][0]["name"], "dbg");
        assert_eq!(merged["metadata"]["generation"], 2);
        assert!(merged["metadata"].get("labels").is_none());
        assert_eq!(merged["status"]["phase"], "Running");
        // Nothing added: nothing moves.
        let same = prepare_for_update(&old, &old);
        assert_eq!(same, old);
    }
}
