//! The FlowSchemas' `Dangling` condition (upstream's API priority and fairness config consumer,
//! `apiserver/pkg/util/flowcontrol/apf_controller.go`): whether the PriorityLevelConfiguration a
//! FlowSchema names exists. Kept current as FlowSchemas and PriorityLevelConfigurations change.
//!
//! The fairness itself (queuing requests by flow) is not implemented (the hardening issue).

use std::collections::HashSet;
use std::sync::Arc;

use serde_json::{json, Value};

use crate::objects;
use crate::watch_cache::WatchStart;
use crate::ApiServer;

const FLOW_SCHEMAS: &str = "flowschemas";
const PRIORITY_LEVELS: &str = "prioritylevelconfigurations";
const GROUP: &str = "flowcontrol.apiserver.k8s.io";

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

async fn reconcile(api: &ApiServer) {
    let levels: HashSet<String> = crate::internal::cached_objects(api, PRIORITY_LEVELS)
        .iter()
        .filter(|l| objects::meta_str(l, "deletionTimestamp").is_none())
        .map(|l| objects::name(l).to_string())
        .collect();
    for fs in crate::internal::cached_objects(api, FLOW_SCHEMAS) {
        let Some(updated) = with_condition(&fs, &levels) else {
            continue;
        };
        let key = format!("/{FLOW_SCHEMAS}/{}", objects::name(&fs));
        crate::internal::replace_if_unchanged(api, &key, &updated).await;
    }
}

/// Follows FlowSchemas and PriorityLevelConfigurations until the server stops; a watch the cache
/// drops (a slow reader) is taken up again after a full pass.
pub async fn run(api: Arc<ApiServer>) {
    loop {
        let start = api.caches.revision();
        let subscribe = |storage: &str| {
            api.caches
                .ensure(storage, GROUP, storage)
                .subscribe(Default::default(), WatchStart::After(start), start)
                .ok()
        };
        let (Some(schemas), Some(levels)) = (subscribe(FLOW_SCHEMAS), subscribe(PRIORITY_LEVELS))
        else {
            return;
        };
        let (mut schemas, mut levels) = (schemas.live, levels.live);
        reconcile(&api).await;
        loop {
            let open = tokio::select! {
                e = schemas.recv() => e.is_some(),
                e = levels.recv() => e.is_some(),
            };
            if !open {
                break;
            }
            // Take whatever else arrived meanwhile, then look at the whole (small) set once.
            while schemas.try_recv().is_ok() || levels.try_recv().is_ok() {}
            reconcile(&api).await;
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
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
