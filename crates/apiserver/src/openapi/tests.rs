use super::*;
use apimachinery::resources::Registry;

fn doc(snap: &Snapshot, path: &str) -> Value {
    let d = group_version(snap, &CustomSchemas::default(), path).unwrap();
    serde_json::from_slice(&d.body).unwrap()
}

#[test]
fn patch_operations_declare_field_validation() {
    let snap = Registry::with_builtin().snapshot();
    let r = root(&snap, &CustomSchemas::default());
    assert!(r["paths"]["apis/apps/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .starts_with("/openapi/v3/apis/apps/v1?hash="));
    let doc = doc(&snap, "api/v1");
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
    assert!(group_version(&snap, &CustomSchemas::default(), "apis/nope/v1").is_none());
    let list = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps"]["get"];
    let content = &list["responses"]["200"]["content"];
    assert_eq!(
        content["application/vnd.kubernetes.protobuf;stream=watch"]["schema"]["$ref"],
        "#/components/schemas/io.k8s.api.core.v1.ConfigMapList"
    );
    assert!(patch["responses"]["200"]["content"]
        .get("application/vnd.kubernetes.protobuf")
        .is_some());
    let post = &doc["paths"]["/api/v1/namespaces/{namespace}/configmaps"]["post"];
    assert_eq!(
        post["requestBody"]["content"]["*/*"]["schema"]["$ref"],
        "#/components/schemas/io.k8s.api.core.v1.ConfigMap"
    );
}

#[test]
fn every_served_kind_has_a_definition_with_its_gvk() {
    let snap = Registry::with_builtin().snapshot();
    for (group, versions) in &snap.groups {
        for version in versions {
            let path = gv_path(group, version);
            let doc = doc(&snap, &path);
            let schemas = doc["components"]["schemas"].as_object().unwrap();
            for r in snap.group_version(group, version) {
                let mut kinds = vec![r.kind.clone()];
                if r.has_verb("list") {
                    kinds.push(format!("{}List", r.kind));
                }
                for kind in kinds {
                    let found = schemas.iter().find(|(_, s)| {
                        s["x-kubernetes-group-version-kind"]
                            .as_array()
                            .is_some_and(|gvks| {
                                gvks.iter().any(|g| {
                                    g["group"] == group.as_str()
                                        && g["version"] == version.as_str()
                                        && g["kind"] == kind.as_str()
                                })
                            })
                    });
                    let (name, def) = found.unwrap_or_else(|| panic!("{path} {kind}"));
                    assert!(name.starts_with("io.k8s."), "{name}");
                    assert!(
                        def["properties"].as_object().is_some_and(|p| p.len() > 2),
                        "{name}"
                    );
                }
            }
        }
    }
}

#[test]
fn pod_containers_carry_patch_tags() {
    let snap = Registry::with_builtin().snapshot();
    let doc = doc(&snap, "api/v1");
    let s = &doc["components"]["schemas"];
    let containers = &s["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
    assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
    assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
    let volumes = &s["io.k8s.api.core.v1.PodSpec"]["properties"]["volumes"];
    assert_eq!(volumes["x-kubernetes-patch-strategy"], "merge,retainKeys");
    let ports = &s["io.k8s.api.core.v1.Container"]["properties"]["ports"];
    assert_eq!(ports["x-kubernetes-patch-merge-key"], "containerPort");
    let owners =
        &s["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"]["properties"]["ownerReferences"];
    assert_eq!(owners["x-kubernetes-patch-merge-key"], "uid");
    assert_eq!(
        s["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["format"],
        "int-or-string"
    );
    // A ref with a description becomes allOf, as upstream's v3.
    assert_eq!(
        s["io.k8s.api.core.v1.Pod"]["properties"]["spec"]["allOf"][0]["$ref"],
        "#/components/schemas/io.k8s.api.core.v1.PodSpec"
    );
}

fn refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                if let ("$ref", Value::String(r)) = (k.as_str(), v) {
                    out.push(r.clone());
                } else {
                    refs(v, out);
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|v| refs(v, out)),
        _ => {}
    }
}

#[test]
fn refs_resolve_in_every_document() {
    let snap = Registry::with_builtin().snapshot();
    for (group, versions) in &snap.groups {
        for version in versions {
            let doc = doc(&snap, &gv_path(group, version));
            let mut all = Vec::new();
            refs(&doc, &mut all);
            assert!(!all.is_empty());
            for r in all {
                let name = r
                    .strip_prefix("#/components/schemas/")
                    .unwrap_or_else(|| panic!("{r}"));
                assert!(
                    doc["components"]["schemas"].get(name).is_some(),
                    "{group}/{version}: {r}"
                );
            }
        }
    }
    let v2: Value = serde_json::from_slice(&v2(&snap, &CustomSchemas::default()).body).unwrap();
    assert_eq!(v2["swagger"], "2.0");
    let mut all = Vec::new();
    refs(&v2, &mut all);
    for r in all {
        let name = r
            .strip_prefix("#/definitions/")
            .unwrap_or_else(|| panic!("{r}"));
        assert!(v2["definitions"].get(name).is_some(), "v2: {r}");
    }
    assert_eq!(
        v2["definitions"]["io.k8s.api.apps.v1.Deployment"]["x-kubernetes-group-version-kind"][0]
            ["kind"],
        "Deployment"
    );
}

#[test]
fn custom_resources_publish_their_crd_schema() {
    let registry = Registry::with_builtin();
    let crd = json!({
        "spec": {
            "group": "stable.example.com",
            "names": {"kind": "CronTab", "plural": "crontabs"},
            "scope": "Namespaced",
            "versions": [
                {"name": "v1", "served": true, "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {"spec": {"type": "object", "properties": {"cronSpec": {"type": "string"}}}},
                }}},
                {"name": "v2", "served": true},
            ],
        },
    });
    for r in crate::crd::resources_of(&crd) {
        registry.add(r);
    }
    let snap = registry.snapshot();
    let raw = serde_json::to_vec(&crd).unwrap();
    let custom = CustomSchemas::from_crds([&raw[..]]);
    let empty_hash = gv_hash(&snap, &CustomSchemas::default(), "stable.example.com", "v1");
    assert_ne!(
        empty_hash,
        gv_hash(&snap, &custom, "stable.example.com", "v1")
    );
    let doc = group_version(&snap, &custom, "apis/stable.example.com/v1").unwrap();
    let doc: Value = serde_json::from_slice(&doc.body).unwrap();
    let s = &doc["components"]["schemas"]["com.example.stable.v1.CronTab"];
    assert_eq!(
        s["properties"]["spec"]["properties"]["cronSpec"]["type"],
        "string"
    );
    assert_eq!(s["x-kubernetes-group-version-kind"][0]["kind"], "CronTab");
    assert!(
        doc["components"]["schemas"]["io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"].is_object()
    );
    let doc = group_version(&snap, &custom, "apis/stable.example.com/v2").unwrap();
    let doc: Value = serde_json::from_slice(&doc.body).unwrap();
    let s = &doc["components"]["schemas"]["com.example.stable.v2.CronTab"];
    assert_eq!(s["x-kubernetes-preserve-unknown-fields"], true);
    assert!(doc["components"]["schemas"]["com.example.stable.v2.CronTabList"].is_object());
}
