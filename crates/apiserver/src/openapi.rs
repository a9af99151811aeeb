//! OpenAPI v3 (upstream `/openapi/v3`, `k8s.io/kube-openapi/pkg/handler3`): the discovery root listing
//! one document per group version, and per group version the paths of every resource with their
//! operations, `x-kubernetes-group-version-kind`/`x-kubernetes-action` and query parameters.
//!
//! This is what kubectl reads to learn that the server validates fields itself (`fieldValidation` on
//! PATCH), so it sends `fieldValidation=Strict` instead of validating client-side. Component schemas
//! (for `kubectl explain` and client-side apply) are not published yet: `components.schemas` is empty.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};

use apimachinery::resources::{Resource, Snapshot};
use serde_json::{json, Map, Value};

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// A stable hash of a group version's resources, used as the documents' cache key.
fn gv_hash(snap: &Snapshot, group: &str, version: &str) -> String {
    let mut h = DefaultHasher::new();
    for r in snap.group_version(group, version) {
        (&r.plural, &r.kind, r.namespaced, &r.verbs, &r.subresources).hash(&mut h);
    }
    format!("{:016X}", h.finish())
}

/// `GET /openapi/v3`.
pub fn root(snap: &Snapshot) -> Value {
    let mut paths = Map::new();
    for (group, versions) in &snap.groups {
        for version in versions {
            let p = gv_path(group, version);
            let url = format!("/openapi/v3/{p}?hash={}", gv_hash(snap, group, version));
            paths.insert(p, json!({"serverRelativeURL": url}));
        }
    }
    json!({"paths": paths})
}

fn param(name: &str) -> Value {
    json!({"name": name, "in": "query", "schema": {"type": "string", "uniqueItems": true}})
}

/// The media types an operation answers in, as upstream lists them: protobuf only for built-in kinds,
/// and the watch stream types for lists (which watch with `watch=true`).
fn response_content(r: &Resource, action: &str) -> Value {
    let mut types = vec!["application/json", "application/yaml"];
    if !r.custom {
        types.push("application/vnd.kubernetes.protobuf");
    }
    if action == "list" {
        types.push("application/json;stream=watch");
        if !r.custom {
            types.push("application/vnd.kubernetes.protobuf;stream=watch");
        }
    }
    Value::Object(
        types
            .into_iter()
            .map(|t| (t.to_string(), json!({})))
            .collect(),
    )
}

fn operation(r: &Resource, action: &str, id: &str, params: &[&str]) -> Value {
    json!({
        "operationId": id,
        "parameters": params.iter().map(|p| param(p)).collect::<Vec<_>>(),
        "responses": {"200": {"description": "OK", "content": response_content(r, action)}},
        "x-kubernetes-action": action,
        "x-kubernetes-group-version-kind": {"group": r.group, "version": r.version, "kind": r.kind},
    })
}

const WRITE_PARAMS: &[&str] = &["dryRun", "fieldManager", "fieldValidation", "pretty"];
const PATCH_PARAMS: &[&str] = &[
    "dryRun",
    "fieldManager",
    "fieldValidation",
    "force",
    "pretty",
];

/// `GET /openapi/v3/<api/v1 | apis/<group>/<version>>`; None for an unknown group version.
pub fn group_version(snap: &Snapshot, path: &str) -> Option<Value> {
    let (group, version) = match path
        .trim_matches('/')
        .split('/')
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["api", v] => (String::new(), v.to_string()),
        ["apis", g, v] => (g.to_string(), v.to_string()),
        _ => return None,
    };
    let resources = snap.group_version(&group, &version);
    if resources.is_empty() {
        return None;
    }
    let prefix = format!("/{}", gv_path(&group, &version));
    let mut paths = Map::new();
    for r in &resources {
        let op_kind = r.kind.clone();
        let collection = if r.namespaced {
            format!("{prefix}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("{prefix}/{}", r.plural)
        };
        let mut coll = Map::new();
        if r.has_verb("list") {
            coll.insert(
                "get".into(),
                operation(
                    r,
                    "list",
                    &format!("list{op_kind}"),
                    &[
                        "labelSelector",
                        "fieldSelector",
                        "limit",
                        "continue",
                        "resourceVersion",
                        "watch",
                    ],
                ),
            );
        }
        if r.has_verb("create") {
            coll.insert(
                "post".into(),
                operation(r, "post", &format!("create{op_kind}"), WRITE_PARAMS),
            );
        }
        if r.has_verb("deletecollection") {
            coll.insert(
                "delete".into(),
                operation(
                    r,
                    "deletecollection",
                    &format!("deleteCollection{op_kind}"),
                    &["dryRun", "gracePeriodSeconds", "propagationPolicy"],
                ),
            );
        }
        paths.insert(collection.clone(), Value::Object(coll));
        let item = format!("{collection}/{{name}}");
        let mut obj = Map::new();
        if r.has_verb("get") {
            obj.insert(
                "get".into(),
                operation(r, "get", &format!("read{op_kind}"), &["pretty"]),
            );
        }
        if r.has_verb("update") {
            obj.insert(
                "put".into(),
                operation(r, "put", &format!("replace{op_kind}"), WRITE_PARAMS),
            );
        }
        if r.has_verb("patch") {
            obj.insert(
                "patch".into(),
                operation(r, "patch", &format!("patch{op_kind}"), PATCH_PARAMS),
            );
        }
        if r.has_verb("delete") {
            obj.insert(
                "delete".into(),
                operation(
                    r,
                    "delete",
                    &format!("delete{op_kind}"),
                    &["dryRun", "gracePeriodSeconds", "propagationPolicy"],
                ),
            );
        }
        paths.insert(item.clone(), Value::Object(obj));
        for sub in &r.subresources {
            let mut ops = Map::new();
            ops.insert(
                "get".into(),
                operation(r, "get", &format!("read{op_kind}{sub}"), &["pretty"]),
            );
            ops.insert(
                "put".into(),
                operation(r, "put", &format!("replace{op_kind}{sub}"), WRITE_PARAMS),
            );
            ops.insert(
                "patch".into(),
                operation(r, "patch", &format!("patch{op_kind}{sub}"), PATCH_PARAMS),
            );
            paths.insert(format!("{item}/{sub}"), Value::Object(ops));
        }
    }
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.33.0"},
        "paths": paths,
        "components": {"schemas": {}},
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use apimachinery::resources::Registry;

    #[test]
    fn patch_operations_declare_field_validation() {
        let snap = Registry::with_builtin().snapshot();
        let r = root(&snap);
        assert!(r["paths"]["apis/apps/v1"]["serverRelativeURL"]
            .as_str()
            .unwrap()
            .starts_with("/openapi/v3/apis/apps/v1?hash="));
        let doc = group_version(&snap, "api/v1").unwrap();
        let patch = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps/{name}"]["patch"];
        assert_eq!(
            patch["x-kubernetes-group-version-kind"]["kind"],
            "ConfigMap"
        );
        assert!(patch["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "fieldValidation" && p["in"] == "query"));
        assert!(group_version(&snap, "apis/nope/v1").is_none());
        let list = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps"]["get"];
        let content = &list["responses"]["200"]["content"];
        assert!(content
            .get("application/vnd.kubernetes.protobuf;stream=watch")
            .is_some());
        assert!(patch["responses"]["200"]["content"]
            .get("application/vnd.kubernetes.protobuf")
            .is_some());
    }
}
