//! Remote groups in discovery (upstream's `apisHandler`, `apiGroupHandler` and the aggregated
//! discovery manager): `/apis` lists the groups of remote APIServices from their specs, ordered by
//! `groupPriorityMinimum` among the local ones and their versions by `versionPriority`;
//! `/apis/<group>` of a remote group is answered here; the aggregated document
//! (`apidiscovery.k8s.io/v2`) gets each remote version's resources, converted from the
//! `APIResourceList` the availability check read (`Stale` while the APIService is unavailable).
//! `/apis/<group>/<version>` itself is proxied.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};

use super::{Aggregator, Remote};

/// Remote versions by group, each group's versions highest `versionPriority` first.
fn remote_groups(agg: &Aggregator) -> BTreeMap<String, Vec<Arc<Remote>>> {
    let mut groups: BTreeMap<String, Vec<Arc<Remote>>> = BTreeMap::new();
    for r in agg.remotes() {
        groups.entry(r.group.clone()).or_default().push(r);
    }
    for versions in groups.values_mut() {
        versions.sort_by(|a, b| {
            b.version_priority
                .cmp(&a.version_priority)
                .then_with(|| a.version.cmp(&b.version))
        });
    }
    groups
}

fn group_priority(remotes: &BTreeMap<String, Vec<Arc<Remote>>>, name: &str, first: &str) -> i64 {
    match remotes.get(name) {
        Some(vs) => vs
            .iter()
            .map(|r| r.group_priority_minimum)
            .max()
            .unwrap_or(0),
        None => crate::apiservices::priority(name, first).0,
    }
}

/// Sorts discovery groups by priority, highest first, then by name (upstream's order).
fn sort_groups(
    items: &mut [Value],
    remotes: &BTreeMap<String, Vec<Arc<Remote>>>,
    name: fn(&Value) -> (&str, &str),
) {
    items.sort_by(|a, b| {
        let (an, av) = name(a);
        let (bn, bv) = name(b);
        group_priority(remotes, bn, bv)
            .cmp(&group_priority(remotes, an, av))
            .then_with(|| an.cmp(bn))
    });
}

fn version_entry(group: &str, version: &str) -> Value {
    json!({"groupVersion": format!("{group}/{version}"), "version": version})
}

/// A legacy `APIGroup` of a remote group.
fn api_group(name: &str, versions: &[Arc<Remote>]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|r| version_entry(name, &r.version))
        .collect();
    json!({
        "name": name,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

/// Adds the remote groups (and remote versions of local groups) to an `APIGroupList`.
pub fn merge_group_list(agg: &Aggregator, doc: &mut Value) {
    let remotes = remote_groups(agg);
    if remotes.is_empty() {
        return;
    }
    let Some(groups) = doc.get_mut("groups").and_then(Value::as_array_mut) else {
        return;
    };
    for (name, versions) in &remotes {
        match groups.iter_mut().find(|g| g["name"] == name.as_str()) {
            Some(local) => {
                if let Some(vs) = local["versions"].as_array_mut() {
                    for r in versions {
                        if !vs.iter().any(|v| v["version"] == r.version.as_str()) {
                            vs.push(version_entry(name, &r.version));
                        }
                    }
                }
            }
            None => groups.push(api_group(name, versions)),
        }
    }
    sort_groups(groups, &remotes, |g| {
        (
            g["name"].as_str().unwrap_or(""),
            g.pointer("/preferredVersion/version")
                .and_then(Value::as_str)
                .unwrap_or(""),
        )
    });
}

/// `GET /apis/<group>` of a group only remote APIServices serve.
pub fn group_doc(agg: &Aggregator, group: &str) -> Option<Value> {
    let remotes = remote_groups(agg);
    let versions = remotes.get(group)?;
    let mut doc = api_group(group, versions);
    doc["kind"] = "APIGroup".into();
    doc["apiVersion"] = "v1".into();
    Some(doc)
}

/// An `APIResourceList`'s entries as aggregated discovery resources (upstream
/// `convertAPIResourceToDiscovery`): subresources (`name/sub`) go under their resource.
pub fn discovery_resources(group: &str, version: &str, list: &Value) -> Vec<Value> {
    let entries = list
        .get("resources")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let kind_of = |e: &Value| {
        json!({
            "group": e.get("group").and_then(Value::as_str).unwrap_or(group),
            "version": e.get("version").and_then(Value::as_str).unwrap_or(version),
            "kind": e.get("kind").and_then(Value::as_str).unwrap_or(""),
        })
    };
    let mut out: Vec<Value> = Vec::new();
    for e in entries
        .iter()
        .filter(|e| !e["name"].as_str().unwrap_or("").contains('/'))
    {
        let namespaced = e
            .get("namespaced")
            .and_then(Value::as_bool)
            .unwrap_or(false);
        let mut r = json!({
            "resource": e["name"],
            "responseKind": kind_of(e),
            "scope": if namespaced { "Namespaced" } else { "Cluster" },
            "singularResource": e.get("singularName").cloned().unwrap_or_else(|| json!("")),
            "verbs": e.get("verbs").cloned().unwrap_or_else(|| json!([])),
        });
        for field in ["shortNames", "categories"] {
            if let Some(v) = e
                .get(field)
                .filter(|v| v.as_array().is_some_and(|a| !a.is_empty()))
            {
                r[field] = v.clone();
            }
        }
        out.push(r);
    }
    for e in &entries {
        let Some((parent, sub)) = e["name"].as_str().and_then(|n| n.split_once('/')) else {
            continue;
        };
        if let Some(r) = out.iter_mut().find(|r| r["resource"] == parent) {
            let entry = json!({
                "subresource": sub,
                "responseKind": kind_of(e),
                "verbs": e.get("verbs").cloned().unwrap_or_else(|| json!([])),
            });
            match r.get_mut("subresources").and_then(Value::as_array_mut) {
                Some(subs) => subs.push(entry),
                None => r["subresources"] = json!([entry]),
            }
        }
    }
    out
}

/// Adds the remote group versions whose resources are known to an `APIGroupDiscoveryList` of
/// `/apis`.
pub fn merge_aggregated(agg: &Aggregator, doc: &mut Value) {
    let remotes = remote_groups(agg);
    if remotes.is_empty() {
        return;
    }
    let Some(items) = doc.get_mut("items").and_then(Value::as_array_mut) else {
        return;
    };
    for (name, versions) in &remotes {
        let entries: Vec<Value> = versions
            .iter()
            .filter_map(|r| {
                let list = agg.resources(&r.name)?;
                Some(json!({
                    "version": r.version,
                    "resources": discovery_resources(name, &r.version, &list),
                    "freshness": if r.available { "Current" } else { "Stale" },
                }))
            })
            .collect();
        if entries.is_empty() {
            continue;
        }
        match items
            .iter_mut()
            .find(|i| i.pointer("/metadata/name") == Some(&json!(name)))
        {
            Some(local) => {
                if let Some(vs) = local["versions"].as_array_mut() {
                    vs.extend(entries);
                }
            }
            None => items.push(json!({
                "metadata": {"name": name, "creationTimestamp": null},
                "versions": entries,
            })),
        }
    }
    sort_groups(items, &remotes, |i| {
        (
            i.pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or(""),
            i.pointer("/versions/0/version")
                .and_then(Value::as_str)
                .unwrap_or(""),
        )
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregator::FrontProxy;
    use apimachinery::resources::Registry;

    fn remote(group: &str, version: &str, priority: i64, available: bool) -> Remote {
        Remote {
            name: format!("{version}.{group}"),
            group: group.into(),
            version: version.into(),
            namespace: "ns".into(),
            service: "api".into(),
            port: 443,
            ca_bundle: Vec::new(),
            insecure_skip_tls_verify: true,
            group_priority_minimum: priority,
            version_priority: if version == "v1" { 20 } else { 10 },
            available,
        }
    }

    fn aggregator() -> Aggregator {
        let agg = Aggregator::new(FrontProxy::for_tests());
        for r in [
            remote("wardle.example.com", "v1alpha1", 1000, true),
            remote("wardle.example.com", "v1", 1000, false),
            remote("top.example.com", "v1", 20000, true),
        ] {
            agg.set_remote(&r.name.clone(), Some(r));
        }
        agg
    }

    #[test]
    fn apis_lists_remote_groups_in_priority_order() {
        let agg = aggregator();
        let snap = Registry::with_builtin().snapshot();
        let mut doc = crate::discovery::api_group_list(&snap);
        merge_group_list(&agg, &mut doc);
        let names: Vec<&str> = doc["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert_eq!(names[0], "top.example.com");
        assert_eq!(names[1], "apiregistration.k8s.io");
        let wardle = names
            .iter()
            .position(|n| *n == "wardle.example.com")
            .unwrap();
        // 1000 is below the priority of most built-in groups.
        for later in &names[wardle + 1..] {
            let versions = snap.versions(later).unwrap();
            let p = crate::apiservices::priority(later, &versions[0]).0;
            assert!(
                p < 1000 || (p == 1000 && *later > "wardle.example.com"),
                "{names:?}"
            );
        }
        assert!(names.iter().position(|n| *n == "apps").unwrap() < wardle);
        let doc = group_doc(&agg, "wardle.example.com").unwrap();
        assert_eq!(
            doc["preferredVersion"]["groupVersion"],
            "wardle.example.com/v1"
        );
        assert_eq!(doc["versions"][1]["version"], "v1alpha1");
        assert!(group_doc(&agg, "apps").is_none());
    }

    #[test]
    fn aggregated_discovery_carries_fetched_resources() {
        let agg = aggregator();
        let list = json!({"kind": "APIResourceList", "groupVersion": "wardle.example.com/v1alpha1", "resources": [
            {"name": "flunders", "singularName": "flunder", "namespaced": true, "kind": "Flunder",
             "verbs": ["get", "list"], "shortNames": ["fl"]},
            {"name": "flunders/status", "singularName": "", "namespaced": true, "kind": "Flunder",
             "verbs": ["get"]},
        ]});
        agg.set_resources("v1alpha1.wardle.example.com", Some(list));
        let snap = Registry::with_builtin().snapshot();
        let mut doc = crate::discovery::aggregated(&snap, false);
        merge_aggregated(&agg, &mut doc);
        let items = doc["items"].as_array().unwrap();
        let wardle = items
            .iter()
            .find(|i| i["metadata"]["name"] == "wardle.example.com")
            .unwrap();
        // v1 has no resources known yet: only v1alpha1 is listed.
        assert_eq!(wardle["versions"].as_array().unwrap().len(), 1);
        let r = &wardle["versions"][0]["resources"][0];
        assert_eq!(r["resource"], "flunders");
        assert_eq!(r["scope"], "Namespaced");
        assert_eq!(r["responseKind"]["group"], "wardle.example.com");
        assert_eq!(r["shortNames"], json!(["fl"]));
        assert_eq!(r["subresources"][0]["subresource"], "status");
        assert_eq!(wardle["versions"][0]["freshness"], "Current");
        // No resources known for top.example.com: not listed.
        assert!(!items
            .iter()
            .any(|i| i["metadata"]["name"] == "top.example.com"));
    }
}
