//! CustomResourceDefinitions (upstream `apiextensions-apiserver`: the establishing, naming and
//! finalizer controllers, and the custom resource handler): a task follows the CRDs in the watch cache,
//! adds each served version of each CRD to the resource registry (so discovery, OpenAPI paths and the
//! generic REST handlers serve it), keeps what serving needs in [`info`], and marks the CRD
//! `NamesAccepted` and `Established`. Custom resources are stored under `/<group>/<plural>/...` in the
//! storage version; [`handler`] holds what the generic handlers do differently for them (schema
//! pruning, defaulting and validation, the `None` conversion, scale); [`finalizer`] deletes a deleted
//! CRD's custom resources before letting the CRD go.
//!
//! [`conversion`] calls a CRD's conversion webhook (`strategy: Webhook`).
//!
//! Differences: CEL `x-kubernetes-validations` checked for field names but not types or estimated
//! cost (see [`validation_rules`]), and names are accepted without checking conflicts
//! with other CRDs (upstream's naming controller).

pub mod conversion;
pub mod finalizer;
pub mod handler;
pub mod info;
pub mod validation_eval;
pub mod validation_rules;

use std::collections::HashMap;
use std::sync::Arc;

use apimachinery::resources::{Resource, STANDARD_VERBS};
use serde_json::{json, Value};

use crate::objects;
use crate::watch_cache::{EventType, WatchStart};
use crate::ApiServer;

/// The registry entries of a CRD: one per served version.
pub fn resources_of(crd: &Value) -> Vec<Resource> {
    let spec = &crd["spec"];
    let (Some(group), Some(kind), Some(plural)) = (
        spec["group"].as_str(),
        spec.pointer("/names/kind").and_then(Value::as_str),
        spec.pointer("/names/plural").and_then(Value::as_str),
    ) else {
        return Vec::new();
    };
    let strings = |v: &Value| -> Vec<String> {
        v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default()
    };
    let singular = spec
        .pointer("/names/singular")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    versions
        .iter()
        .filter(|v| v["served"].as_bool().unwrap_or(false))
        .filter_map(|v| {
            let version = v["name"].as_str()?;
            let mut subresources = Vec::new();
            if v.pointer("/subresources/status")
                .is_some_and(|s| !s.is_null())
            {
                subresources.push("status".to_string());
            }
            if v.pointer("/subresources/scale")
                .is_some_and(|s| !s.is_null())
            {
                subresources.push("scale".to_string());
            }
            Some(Resource {
                group: group.to_string(),
                version: version.to_string(),
                kind: kind.to_string(),
                plural: plural.to_string(),
                singular: singular.clone(),
                namespaced: spec["scope"].as_str() != Some("Cluster"),
                short_names: strings(&spec["names"]["shortNames"]),
                categories: strings(&spec["names"]["categories"]),
                verbs: STANDARD_VERBS.iter().map(|s| s.to_string()).collect(),
                subresources,
                storage: format!("{group}/{plural}"),
                generation: true,
                custom: true,
            })
        })
        .collect()
}

/// The status the controllers of upstream would write: names accepted, established, stored versions.
fn desired_status(crd: &Value) -> Value {
    let spec = &crd["spec"];
    let current = &crd["status"];
    let now = objects::now_rfc3339();
    let condition = |kind: &str, reason: &str, message: &str| {
        let since = current["conditions"]
            .as_array()
            .and_then(|cs| {
                cs.iter()
                    .find(|c| c["type"] == kind && c["status"] == "True")
            })
            .and_then(|c| c["lastTransitionTime"].as_str())
            .map(str::to_string)
            .unwrap_or_else(|| now.clone());
        json!({"type": kind, "status": "True", "lastTransitionTime": since, "reason": reason, "message": message})
    };
    let mut names = spec["names"].clone();
    if names["singular"].as_str().is_none_or(str::is_empty) {
        names["singular"] = spec
            .pointer("/names/kind")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_lowercase()
            .into();
    }
    if names["listKind"].as_str().is_none_or(str::is_empty) {
        names["listKind"] = format!(
            "{}List",
            spec.pointer("/names/kind")
                .and_then(Value::as_str)
                .unwrap_or("")
        )
        .into();
    }
    let mut stored: Vec<String> = current["storedVersions"]
        .as_array()
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    for v in spec["versions"].as_array().into_iter().flatten() {
        if v["storage"].as_bool() == Some(true) {
            if let Some(name) = v["name"].as_str() {
                if !stored.iter().any(|s| s == name) {
                    stored.push(name.to_string());
                }
            }
        }
    }
    let mut conditions = vec![
        condition("NamesAccepted", "NoConflicts", "no conflicts found"),
        condition(
            "Established",
            "InitialNamesAccepted",
            "the initial names have been accepted",
        ),
    ];
    // Conditions other controllers own (Terminating, from the finalizer) stay as they are.
    for c in current["conditions"].as_array().into_iter().flatten() {
        if c["type"] != "NamesAccepted" && c["type"] != "Established" {
            conditions.push(c.clone());
        }
    }
    json!({
        "conditions": conditions,
        "acceptedNames": names,
        "storedVersions": stored,
    })
}

/// Follows the CRDs until the server stops.
pub async fn run(api: Arc<ApiServer>) {
    let cache = api.caches.ensure(
        "customresourcedefinitions",
        "apiextensions.k8s.io",
        "customresourcedefinitions",
    );
    let Ok(sub) = cache.subscribe(
        Default::default(),
        WatchStart::InitialState,
        api.caches.revision(),
    ) else {
        return;
    };
    let mut served: HashMap<String, Vec<Resource>> = HashMap::new();
    for (event, kind) in sub.initial {
        handle(&api, &mut served, &event.object.json, kind).await;
    }
    let mut live = sub.live;
    while let Some((event, kind)) = live.recv().await {
        handle(&api, &mut served, &event.object.json, kind).await;
    }
}

async fn handle(
    api: &Arc<ApiServer>,
    served: &mut HashMap<String, Vec<Resource>>,
    json: &[u8],
    kind: EventType,
) {
    let Ok(crd) = serde_json::from_slice::<Value>(json) else {
        return;
    };
    let name = objects::name(&crd).to_string();
    let old = served.remove(&name).unwrap_or_default();
    if kind == EventType::Deleted {
        for r in &old {
            api.registry.remove(&r.group, &r.version, &r.plural);
        }
        if let (Some(group), Some(plural)) = (
            crd["spec"]["group"].as_str(),
            crd.pointer("/spec/names/plural").and_then(Value::as_str),
        ) {
            api.crds.remove(group, plural);
        }
        let api = api.clone();
        tokio::spawn(async move { crate::apiservices::sync(&api, true).await });
        return;
    }
    let new = resources_of(&crd);
    if let Some(info) = info::CrdInfo::parse(&crd) {
        api.crds.set(info, &crd);
    }
    if finalizer::pending(&crd) {
        finalizer::spawn(api.clone(), name.clone());
    }
    for r in &old {
        if !new
            .iter()
            .any(|n| n.version == r.version && n.plural == r.plural)
        {
            api.registry.remove(&r.group, &r.version, &r.plural);
        }
    }
    for r in &new {
        api.caches.ensure(&r.storage, &r.group, &r.plural);
        api.registry.add(r.clone());
    }
    if old != new {
        let api = api.clone();
        tokio::spawn(async move { crate::apiservices::sync(&api, false).await });
    }
    served.insert(name.clone(), new);
    let status = desired_status(&crd);
    if crd["status"] != status {
        let mut updated = crd.clone();
        updated["status"] = status;
        let key = format!("/customresourcedefinitions/{name}");
        crate::internal::replace_if_unchanged(api, &key, &updated).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({"metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"kind": "Widget", "plural": "widgets", "shortNames": ["wd"]},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}}},
                         {"name": "v1beta1", "served": false, "storage": false}]}})
    }

    #[test]
    fn served_versions_become_resources() {
        let rs = resources_of(&crd());
        assert_eq!(rs.len(), 1);
        let r = &rs[0];
        assert_eq!(
            (
                r.group.as_str(),
                r.version.as_str(),
                r.kind.as_str(),
                r.plural.as_str()
            ),
            ("example.com", "v1", "Widget", "widgets")
        );
        assert_eq!(r.singular, "widget");
        assert_eq!(r.storage, "example.com/widgets");
        assert!(r.namespaced && r.custom && r.has_subresource("status"));
        assert_eq!(r.short_names, ["wd"]);
    }

    #[test]
    fn status_accepts_names_and_establishes() {
        let status = desired_status(&crd());
        assert_eq!(status["conditions"][1]["type"], "Established");
        assert_eq!(status["acceptedNames"]["listKind"], "WidgetList");
        assert_eq!(status["storedVersions"], json!(["v1"]));
        let mut again = crd();
        again["status"] = status.clone();
        assert_eq!(desired_status(&again), status, "stable: no write loop");
    }
}
