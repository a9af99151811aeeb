//! The APIServices of the API server's own group versions (kube-aggregator's `autoregister` and
//! `crdregistration` controllers, and the local half of its availability controller): each served
//! group/version has an APIService `<version>.<group>` (`v1.` for core) without a `service`, which
//! means "served locally", marked `Available=True` (reason `Local`). Built-in ones carry the label
//! `kube-aggregator.kubernetes.io/automanaged: onstart` and are re-created at start; those of CRD
//! groups carry `automanaged: "true"` and come and go with the CRDs.
//!
//! Not here (the extensions issue): proxying to APIServices backed by a Service, and their
//! availability checks; such APIServices are stored and served but get no condition from us.

use std::collections::BTreeMap;
use std::sync::Arc;

use apimachinery::resources::Snapshot;
use serde_json::{json, Value};

use crate::objects;
use crate::watch_cache::{EventType, WatchStart};
use crate::ApiServer;

pub const AUTOMANAGED_LABEL: &str = "kube-aggregator.kubernetes.io/automanaged";
const STORAGE: &str = "apiservices";

/// Upstream's `apiVersionPriorities` for the group versions rkube serves: (group priority minimum,
/// version priority). Group versions missing here (CRD groups) get 1000 and 100, as the CRD
/// registration controller gives them.
pub fn priority(group: &str, version: &str) -> (i64, i64) {
    match (group, version) {
        ("", "v1") => (18000, 1),
        ("apiregistration.k8s.io", "v1") => (18000, 15),
        ("apps", "v1") => (17800, 15),
        ("events.k8s.io", "v1") => (17750, 15),
        ("authentication.k8s.io", "v1") => (17700, 15),
        ("authorization.k8s.io", "v1") => (17600, 15),
        ("autoscaling", "v1") => (17500, 15),
        ("autoscaling", "v2") => (17500, 30),
        ("batch", "v1") => (17400, 15),
        ("certificates.k8s.io", "v1") => (17300, 15),
        ("networking.k8s.io", "v1") => (17200, 15),
        ("policy", "v1") => (17100, 15),
        ("rbac.authorization.k8s.io", "v1") => (17000, 15),
        ("storage.k8s.io", "v1") => (16800, 15),
        ("apiextensions.k8s.io", "v1") => (16700, 15),
        ("admissionregistration.k8s.io", "v1") => (16700, 15),
        ("scheduling.k8s.io", "v1") => (16600, 15),
        ("coordination.k8s.io", "v1") => (16500, 15),
        ("node.k8s.io", "v1") => (16300, 15),
        ("discovery.k8s.io", "v1") => (16200, 15),
        ("resource.k8s.io", "v1") => (16200, 21),
        ("flowcontrol.apiserver.k8s.io", "v1") => (16100, 21),
        // metrics-server's own APIService.
        ("metrics.k8s.io", "v1beta1") => (100, 100),
        _ => (1000, 100),
    }
}

/// The local APIServices the registry calls for, by name; `custom` tells CRD groups apart.
pub fn local_apiservices(snapshot: &Snapshot) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for r in snapshot.resources.values() {
        let name = format!("{}.{}", r.version, r.group);
        if out.contains_key(&name) {
            continue;
        }
        let (group_priority, version_priority) = priority(&r.group, &r.version);
        let managed = if r.custom { "true" } else { "onstart" };
        out.insert(
            name.clone(),
            json!({
                "apiVersion": "apiregistration.k8s.io/v1",
                "kind": "APIService",
                "metadata": {"name": name, "labels": {AUTOMANAGED_LABEL: managed}},
                "spec": {
                    "group": r.group,
                    "version": r.version,
                    "groupPriorityMinimum": group_priority,
                    "versionPriority": version_priority,
                },
            }),
        );
    }
    out
}

/// Creates the missing local APIServices; with `prune`, also deletes automanaged ones of group
/// versions no longer served (a CRD group gone; not at start, when CRDs are still being loaded).
pub async fn sync(api: &Arc<ApiServer>, prune: bool) {
    let wanted = local_apiservices(&api.registry.snapshot());
    let existing = crate::internal::cached_objects(api, STORAGE);
    for obj in &existing {
        let name = objects::name(obj);
        let managed = obj
            .pointer(&format!(
                "/metadata/labels/{}",
                AUTOMANAGED_LABEL.replace('/', "~1")
            ))
            .and_then(Value::as_str);
        if prune && managed.is_some() && !wanted.contains_key(name) {
            if let Err(e) = api.store.delete(&format!("/{STORAGE}/{name}"), None).await {
                if !e.is_not_found() {
                    tracing::warn!(apiservice = %name, error = %e, "cannot delete APIService");
                }
            }
        }
    }
    for (name, obj) in wanted {
        if existing.iter().any(|o| objects::name(o) == name) {
            continue;
        }
        match crate::rest::create_internal(
            api,
            ("apiregistration.k8s.io", "v1", STORAGE),
            None,
            obj,
        )
        .await
        {
            Ok(()) => {}
            Err(e) if e.code == 409 => {}
            Err(e) => {
                tracing::warn!(apiservice = %name, error = %e.message, "cannot create APIService")
            }
        }
    }
}

/// The status of a local APIService: `Available=True`, keeping the transition time it had.
pub fn local_status(current: &Value) -> Value {
    let since = current
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|cs| {
            cs.iter()
                .find(|c| c["type"] == "Available" && c["status"] == "True")
        })
        .and_then(|c| c["lastTransitionTime"].as_str())
        .map(str::to_string)
        .unwrap_or_else(objects::now_rfc3339);
    json!({"conditions": [{
        "type": "Available",
        "status": "True",
        "lastTransitionTime": since,
        "reason": "Local",
        "message": "Local APIServices are always available",
    }]})
}

/// Marks local APIServices available as they appear or change, until the server stops.
pub async fn run(api: Arc<ApiServer>) {
    let cache = api
        .caches
        .ensure(STORAGE, "apiregistration.k8s.io", STORAGE);
    let Ok(sub) = cache.subscribe(
        Default::default(),
        WatchStart::InitialState,
        api.caches.revision(),
    ) else {
        return;
    };
    for (event, kind) in sub.initial {
        mark_available(&api, &event.object.json, kind).await;
    }
    let mut live = sub.live;
    while let Some((event, kind)) = live.recv().await {
        mark_available(&api, &event.object.json, kind).await;
    }
}

async fn mark_available(api: &Arc<ApiServer>, json: &[u8], kind: EventType) {
    if kind == EventType::Deleted {
        return;
    }
    let Ok(obj) = serde_json::from_slice::<Value>(json) else {
        return;
    };
    if !obj.pointer("/spec/service").is_none_or(Value::is_null) {
        return;
    }
    let status = local_status(&obj);
    if obj["status"] == status {
        return;
    }
    let mut updated = obj.clone();
    updated["status"] = status;
    let key = format!("/{STORAGE}/{}", objects::name(&obj));
    crate::internal::replace_if_unchanged(api, &key, &updated).await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use apimachinery::resources::Registry;

    #[test]
    fn every_built_in_group_version_has_a_local_apiservice() {
        let services = local_apiservices(&Registry::with_builtin().snapshot());
        let names: Vec<&str> = services.keys().map(String::as_str).collect();
        for expected in [
            "v1.",
            "v1.apps",
            "v2.autoscaling",
            "v1.autoscaling",
            "v1.resource.k8s.io",
            "v1.apiregistration.k8s.io",
            "v1.flowcontrol.apiserver.k8s.io",
        ] {
            assert!(
                names.contains(&expected),
                "{expected} missing from {names:?}"
            );
        }
        let core = &services["v1."];
        assert_eq!(core["spec"]["group"], "");
        assert_eq!(core["spec"]["groupPriorityMinimum"], 18000);
        assert_eq!(core["metadata"]["labels"][AUTOMANAGED_LABEL], "onstart");
        assert!(core["spec"].get("service").is_none());
        assert_eq!(services["v2.autoscaling"]["spec"]["versionPriority"], 30);
    }

    #[test]
    fn local_status_keeps_its_transition_time() {
        let first = local_status(&json!({}));
        assert_eq!(first["conditions"][0]["reason"], "Local");
        let again = local_status(&json!({"status": first.clone()}));
        assert_eq!(again, first);
    }
}
