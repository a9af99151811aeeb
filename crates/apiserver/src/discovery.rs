//! Discovery (upstream `endpoints/discovery` and `discovery/aggregated`): `/api`, `/apis`,
//! `/apis/<group>`, the resource lists of each group version, and the aggregated form
//! (`apidiscovery.k8s.io/v2` `APIGroupDiscoveryList`) that kubectl 1.32 asks for first. Everything is
//! generated from the resource registry, so custom resources appear as soon as they are added.

use std::sync::Arc;

use apimachinery::resources::{Resource, Snapshot};
use http::HeaderMap;
use serde_json::{json, Value};

pub const AGGREGATED_V2: &str =
    "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";
pub const AGGREGATED_V2_PROTOBUF: &str =
    "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList";

/// Which aggregated discovery format the client accepts, if any (first acceptable entry wins), as the
/// content type to answer with. Only `v2`: upstream stopped serving `v2beta1` in 1.33
/// (`AggregatedDiscoveryRemoveBetaType`), so a client asking for it gets its next choice.
pub fn wants_aggregated(headers: &HeaderMap) -> Option<&'static str> {
    let accept = headers.get(http::header::ACCEPT)?.to_str().ok()?;
    for entry in accept.split(',') {
        let params: Vec<&str> = entry.split(';').map(str::trim).collect();
        let has = |p: &str| params.contains(&p);
        let media = params.first().copied();
        if matches!(
            media,
            Some("application/json" | "application/vnd.kubernetes.protobuf")
        ) && has("g=apidiscovery.k8s.io")
            && has("as=APIGroupDiscoveryList")
        {
            let protobuf = media == Some("application/vnd.kubernetes.protobuf");
            match (has("v=v2"), protobuf) {
                (true, false) => return Some(AGGREGATED_V2),
                (true, true) => return Some(AGGREGATED_V2_PROTOBUF),
                _ => {}
            }
        }
        if params.first() == Some(&"application/json") && params.len() == 1 {
            return None;
        }
    }
    None
}

/// The verbs, response kind and group/version of a subresource.
fn subresource_info(
    resource: &Resource,
    sub: &str,
) -> (Vec<&'static str>, (String, String, String)) {
    let same = (
        resource.group.clone(),
        resource.version.clone(),
        resource.kind.clone(),
    );
    match sub {
        "scale" => (
            vec!["get", "patch", "update"],
            ("autoscaling".into(), "v1".into(), "Scale".into()),
        ),
        "binding" => (vec!["create"], ("".into(), "v1".into(), "Binding".into())),
        "eviction" => (
            vec!["create"],
            ("policy".into(), "v1".into(), "Eviction".into()),
        ),
        "token" => (
            vec!["create"],
            (
                "authentication.k8s.io".into(),
                "v1".into(),
                "TokenRequest".into(),
            ),
        ),
        "finalize" => (vec!["update"], same),
        // Connect subresources (upstream lists the options kind they take).
        "attach" | "exec" | "portforward" => (
            vec!["create", "get"],
            (
                String::new(),
                "v1".into(),
                match sub {
                    "attach" => "PodAttachOptions",
                    "exec" => "PodExecOptions",
                    _ => "PodPortForwardOptions",
                }
                .into(),
            ),
        ),
        "log" => (vec!["get"], same),
        "proxy" => (
            vec!["create", "delete", "get", "patch", "update"],
            (
                String::new(),
                "v1".into(),
                format!("{}ProxyOptions", resource.kind),
            ),
        ),
        _ => (vec!["get", "patch", "update"], same),
    }
}

fn group_version(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// `GET /api`.
pub fn api_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn api_group(name: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": group_version(name, v), "version": v}))
        .collect();
    json!({
        "name": name,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

/// `GET /apis`.
/// The groups in upstream's discovery order: by their APIServices' `groupPriorityMinimum`, highest
/// first, then by name (kube-aggregator's `sortGroupDiscoveryByKubeAwareVersion` / `ByPriority`).
fn ordered_groups(snap: &Snapshot) -> Vec<&(String, Vec<String>)> {
    let mut groups: Vec<&(String, Vec<String>)> = snap.groups.iter().collect();
    groups.sort_by(|(a, av), (b, bv)| {
        let pa = crate::apiservices::priority(a, av.first().map_or("", String::as_str)).0;
        let pb = crate::apiservices::priority(b, bv.first().map_or("", String::as_str)).0;
        pb.cmp(&pa).then_with(|| a.cmp(b))
    });
    groups
}

pub fn api_group_list(snap: &Snapshot) -> Value {
    let groups: Vec<Value> = ordered_groups(snap)
        .into_iter()
        .filter(|(g, _)| !g.is_empty())
        .map(|(g, vs)| api_group(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/<group>`.
pub fn api_group_doc(snap: &Snapshot, group: &str) -> Option<Value> {
    let versions = snap.versions(group)?;
    let mut g = api_group(group, versions);
    g["kind"] = "APIGroup".into();
    g["apiVersion"] = "v1".into();
    Some(g)
}

/// `GET /api/v1`, `GET /apis/<group>/<version>`.
pub fn api_resource_list(snap: &Snapshot, group: &str, version: &str) -> Option<Value> {
    let resources = snap.group_version(group, version);
    if resources.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    for r in &resources {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs,
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            entry["categories"] = json!(r.categories);
        }
        out.push(entry);
        for sub in &r.subresources {
            let (verbs, (g, v, kind)) = subresource_info(r, sub);
            let mut e = json!({
                "name": format!("{}/{sub}", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": kind,
                "verbs": verbs,
            });
            if (g.as_str(), v.as_str()) != (r.group.as_str(), r.version.as_str()) {
                e["group"] = g.into();
                e["version"] = v.into();
            }
            out.push(e);
        }
    }
    Some(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version(group, version),
        "resources": out,
    }))
}

fn discovery_resource(r: &Arc<Resource>) -> Value {
    let subresources: Vec<Value> = r
        .subresources
        .iter()
        .map(|sub| {
            let (verbs, (g, v, kind)) = subresource_info(r, sub);
            json!({
                "subresource": sub,
                "responseKind": {"group": g, "version": v, "kind": kind},
                "verbs": verbs,
            })
        })
        .collect();
    let mut entry = json!({
        "resource": r.plural,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": if r.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": r.singular,
        "verbs": r.verbs,
    });
    if !r.short_names.is_empty() {
        entry["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        entry["categories"] = json!(r.categories);
    }
    if !subresources.is_empty() {
        entry["subresources"] = Value::Array(subresources);
    }
    entry
}

/// The aggregated document for `/api` (core only) or `/apis` (all named groups).
pub fn aggregated(snap: &Snapshot, legacy: bool) -> Value {
    let items: Vec<Value> = ordered_groups(snap)
        .into_iter()
        .filter(|(g, _)| g.is_empty() == legacy)
        .map(|(group, versions)| {
            let vs: Vec<Value> = versions
                .iter()
                .map(|v| {
                    let resources: Vec<Value> = snap
                        .group_version(group, v)
                        .iter()
                        .map(discovery_resource)
                        .collect();
                    json!({"version": v, "resources": resources, "freshness": "Current"})
                })
                .collect();
            json!({"metadata": {"name": group, "creationTimestamp": null}, "versions": vs})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": "apidiscovery.k8s.io/v2",
        "metadata": {},
        "items": items,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use apimachinery::resources::Registry;

    #[test]
    fn documents_cover_the_registry() {
        let snap = Registry::with_builtin().snapshot();
        let core = api_resource_list(&snap, "", "v1").unwrap();
        let names: Vec<&str> = core["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert!(
            names.contains(&"pods")
                && names.contains(&"pods/status")
                && names.contains(&"namespaces/finalize")
        );
        let apps = api_resource_list(&snap, "apps", "v1").unwrap();
        let scale = apps["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == "deployments/scale")
            .unwrap();
        assert_eq!(scale["group"], "autoscaling");
        assert_eq!(scale["kind"], "Scale");
        let groups = api_group_list(&snap);
        assert!(groups["groups"]
            .as_array()
            .unwrap()
            .iter()
            .any(|g| g["name"] == "apps"));
        let agg = aggregated(&snap, false);
        let apps = agg["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "apps")
            .unwrap();
        assert_eq!(
            apps["versions"][0]["resources"].as_array().unwrap().len(),
            5
        );
    }

    #[test]
    fn groups_in_upstream_priority_order() {
        let snap = apimachinery::resources::Registry::with_builtin().snapshot();
        let list = api_group_list(&snap);
        let names: Vec<&str> = list["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            &names[..5],
            [
                "apiregistration.k8s.io",
                "apps",
                "events.k8s.io",
                "authentication.k8s.io",
                "authorization.k8s.io"
            ]
        );
        // metrics.k8s.io has metrics-server's low priority; the built-in groups end with flowcontrol.
        assert_eq!(
            names[names.len() - 2..],
            ["flowcontrol.apiserver.k8s.io", "metrics.k8s.io"]
        );
        let agg = aggregated(&snap, false);
        assert_eq!(
            agg["items"][0]["metadata"]["name"],
            "apiregistration.k8s.io"
        );
        let autoscaling = agg["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "autoscaling")
            .unwrap();
        assert_eq!(autoscaling["versions"][0]["version"], "v2");
    }

    #[test]
    fn kubectl_accept_header_selects_v2() {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::ACCEPT,
            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json".parse().unwrap(),
        );
        assert_eq!(wants_aggregated(&h), Some(AGGREGATED_V2));
        h.insert(http::header::ACCEPT, "application/json".parse().unwrap());
        assert_eq!(wants_aggregated(&h), None);
        // v2beta1 is no longer served (1.33+): the client's next choice, legacy JSON, is.
        h.insert(
            http::header::ACCEPT,
            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json"
                .parse()
                .unwrap(),
        );
        assert_eq!(wants_aggregated(&h), None);
    }

    #[test]
    fn client_go_gets_aggregated_discovery_in_protobuf() {
        let mut h = HeaderMap::new();
        h.insert(
            http::header::ACCEPT,
            "application/vnd.kubernetes.protobuf;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json".parse().unwrap(),
        );
        let media = wants_aggregated(&h).unwrap();
        assert_eq!(media, AGGREGATED_V2_PROTOBUF);
        let snap = apimachinery::resources::Registry::with_builtin().snapshot();
        let doc = aggregated(&snap, false);
        assert_eq!(doc["apiVersion"], "apidiscovery.k8s.io/v2");
        let bytes = apimachinery::serializer::protobuf::encode(&doc).unwrap();
        let back = apimachinery::serializer::protobuf::decode(&bytes).unwrap();
        // Equal but for the explicit `creationTimestamp: null`, which protobuf has no way to carry.
        let items = |v: &Value| -> Vec<(Value, Value)> {
            v["items"]
                .as_array()
                .unwrap()
                .iter()
                .map(|i| (i["metadata"]["name"].clone(), i["versions"].clone()))
                .collect()
        };
        assert!(items(&back) == items(&doc), "aggregated discovery changed");
    }
}
