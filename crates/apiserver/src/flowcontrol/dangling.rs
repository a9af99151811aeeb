//! The FlowSchemas' `Dangling` condition (upstream's API priority and fairness config consumer,
//! `apiserver/pkg/util/flowcontrol/apf_controller.go`): whether the PriorityLevelConfiguration a
//! FlowSchema names exists. Kept current as FlowSchemas and PriorityLevelConfigurations change
//! (see [`super::run`]).

use std::collections::HashSet;

use serde_json::{json, Value};

use super::FLOW_SCHEMAS;
use crate::objects;
use crate::ApiServer;

/// The `Dangling` condition of a FlowSchema naming `level`, keeping the transition time when the
/// status does not change.
pub fn dangling_condition(flow_schema: &Value, levels: &HashSet<String>) -> Value {
    let level = flow_schema
        .pointer("/spec/priorityLevelConfiguration/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let (status, reason, message) = if levels.contains(level) {
        (
            "False",
            "Found",
            format!("This FlowSchema references the PriorityLevelConfiguration object named {level:?} and it exists"),
        )
    } else {
        (
            "True",
            "NotFound",
            format!("This FlowSchema references the PriorityLevelConfiguration object named {level:?} but there is no such object"),
        )
    };
    let previous = flow_schema
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| cs.iter().find(|c| c["type"] == "Dangling"));
    let since = previous
        .filter(|c| c["status"] == status)
        .and_then(|c| c["lastTransitionTime"].as_str())
        .map(str::to_string)
        .unwrap_or_else(objects::now_rfc3339);
    json!({"type": "Dangling", "status": status, "lastTransitionTime": since, "reason": reason, "message": message})
}

/// The FlowSchema with its `Dangling` condition set, or `None` when it already has it.
fn with_condition(flow_schema: &Value, levels: &HashSet<String>) -> Option<Value> {
    let wanted = dangling_condition(flow_schema, levels);
    let mut conditions: Vec<Value> = flow_schema
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    match conditions.iter_mut().find(|c| c["type"] == "Dangling") {
        Some(c) if *c == wanted => return None,
        Some(c) => *c = wanted,
        None => conditions.push(wanted),
    }
    let mut updated = flow_schema.clone();
    if !updated["status"].is_object() {
        updated["status"] = json!({});
    }
    updated["status"]["conditions"] = Value::Array(conditions);
    Some(updated)
}

/// Sets the condition on every FlowSchema that lacks it or has it wrong.
pub(super) async fn reconcile(api: &ApiServer, schemas: &[Value], levels: &[Value]) {
    let levels: HashSet<String> = levels
        .iter()
        .filter(|l| objects::meta_str(l, "deletionTimestamp").is_none())
        .map(|l| objects::name(l).to_string())
        .collect();
    for fs in schemas {
        let Some(updated) = with_condition(fs, &levels) else {
            continue;
        };
        let key = format!("/{FLOW_SCHEMAS}/{}", objects::name(fs));
        crate::internal::replace_if_unchanged(api, &key, &updated).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dangling_follows_the_priority_level() {
        let fs = json!({"metadata": {"name": "a"}, "spec": {"priorityLevelConfiguration": {"name": "p"}}});
        let none = HashSet::new();
        let missing = with_condition(&fs, &none).unwrap();
        let c = &missing["status"]["conditions"][0];
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str()),
            (Some("True"), Some("NotFound"))
        );
        assert_eq!(
            c["message"],
            "This FlowSchema references the PriorityLevelConfiguration object named \"p\" but there is no such object"
        );
        assert!(with_condition(&missing, &none).is_none(), "settled");
        let found = with_condition(&missing, &HashSet::from(["p".to_string()])).unwrap();
        assert_eq!(found["status"]["conditions"][0]["status"], "False");
        assert_eq!(found["status"]["conditions"].as_array().unwrap().len(), 1);
    }
}
