//! CustomResourceDefinition validation cases (several from upstream's `validation_test.go`).

use serde_json::{json, Value};

use super::crd::{validate_create, validate_update};

fn base() -> Value {
    json!({
        "metadata": {"name": "widgets.example.com"},
        "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "conversion": {"strategy": "None"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
                    "properties": {"size": {"type": "integer"}}}}}}}]
        },
        "status": {"storedVersions": ["v1"]}
    })
}

fn errors(v: &Value) -> Vec<String> {
    validate_create(v).iter().map(|e| e.to_string()).collect()
}

#[test]
fn crd_create_cases() {
    assert_eq!(errors(&base()), Vec::<String>::new());
    type Change = fn(&mut Value);
    let cases: Vec<(&str, Change, &str)> = vec![
        ("group without dot", |c| c["spec"]["group"] = json!("example"),
            "spec.group: Invalid value: \"example\": should be a domain with at least one dot"),
        ("bad scope", |c| c["spec"]["scope"] = json!("Global"),
            "spec.scope: Unsupported value: \"Global\": supported values: \"Cluster\", \"Namespaced\""),
        ("no storage version", |c| c["spec"]["versions"][0]["storage"] = json!(false),
            "must have exactly one version marked as storage version"),
        ("bad version name", |c| c["spec"]["versions"][0]["name"] = json!("V1"),
            "spec.versions[0].name: Invalid value: \"V1\": a DNS-1035 label must consist of lower case alphanumeric characters"),
        ("schema missing", |c| { c["spec"]["versions"][0].as_object_mut().map(|v| v.remove("schema")); },
            "spec.versions[0].schema.openAPIV3Schema: Required value: schemas are required"),
        ("kind equals listKind", |c| c["spec"]["names"]["listKind"] = json!("Widget"),
            "spec.names.listKind: Invalid value: \"Widget\": kind and listKind may not be the same"),
        ("bad short name", |c| c["spec"]["names"]["shortNames"] = json!(["w_1"]),
            "spec.names.shortNames[0]: Invalid value: \"w_1\""),
        ("non-structural", |c| c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"] = json!({"description": "x"}),
            "spec.validation.openAPIV3Schema.properties[spec].properties[size].type: Required value: must not be empty for specified object fields"),
        ("bad type", |c| c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"] = json!({"type": "int"}),
            "spec.validation.openAPIV3Schema.properties[spec].properties[size].type: Unsupported value: \"int\": supported values: \"array\", \"boolean\", \"integer\", \"number\", \"object\", \"string\""),
        ("uniqueItems", |c| c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"] = json!({"type": "array", "uniqueItems": true, "items": {"type": "string"}}),
            "spec.validation.openAPIV3Schema.properties[spec].properties[size].uniqueItems: Forbidden: uniqueItems cannot be set to true since the runtime complexity becomes quadratic"),
        ("default in metadata", |c| c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["metadata"] = json!({"type": "object", "default": {}}),
            "spec.validation.openAPIV3Schema.properties[metadata].default: Forbidden: must not be set in top-level metadata"),
        ("list map without keys", |c| c["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["size"] = json!({"type": "array", "x-kubernetes-list-type": "map", "items": {"type": "object"}}),
            "spec.validation.openAPIV3Schema.properties[spec].properties[size].x-kubernetes-list-map-keys: Required value: must not be empty if x-kubernetes-list-type is map"),
        ("scale paths", |c| c["spec"]["versions"][0]["subresources"] = json!({"scale": {"specReplicasPath": ".status.x", "statusReplicasPath": "status.y"}}),
            "spec.subresources.scale.specReplicasPath: Invalid value: \".status.x\": should be a json path under .spec"),
        ("printer column type", |c| c["spec"]["versions"][0]["additionalPrinterColumns"] = json!([{"name": "A", "type": "int", "jsonPath": ".spec.size"}]),
            "spec.additionalPrinterColumns[0].type: Invalid value: \"int\": must be one of boolean,date,integer,number,string"),
        ("webhook without config", |c| c["spec"]["conversion"] = json!({"strategy": "Webhook"}),
            "spec.conversion.webhookClientConfig: Required value: required when strategy is set to Webhook"),
        ("protected group", |c| { c["spec"]["group"] = json!("widgets.k8s.io"); c["metadata"]["name"] = json!("widgets.widgets.k8s.io"); },
            "metadata.annotations[api-approved.kubernetes.io]: Required value: protected groups must have approval annotation"),
        ("stored version missing", |c| c["status"]["storedVersions"] = json!(["v0"]),
            "status.storedVersions[0]: Invalid value: \"v0\": must appear in spec.versions"),
        ("wrong name", |c| c["metadata"]["name"] = json!("widget.example.com"),
            "metadata.name: Invalid value: \"widget.example.com\": must be spec.names.plural+\".\"+spec.group"),
    ];
    for (name, change, want) in cases {
        let mut crd = base();
        change(&mut crd);
        let got = errors(&crd);
        assert!(
            got.iter().any(|e| e.contains(want)),
            "{name}: want {want:?} in {got:?}"
        );
    }
}

#[test]
fn crd_update_cases() {
    let mut old = base();
    old["status"]["conditions"] = json!([{"type": "Established", "status": "True"}]);
    let mut new = old.clone();
    new["spec"]["scope"] = json!("Cluster");
    new["spec"]["names"]["kind"] = json!("Gadget");
    new["spec"]["group"] = json!("other.com");
    let got: Vec<String> = validate_update(&new, &old)
        .iter()
        .map(|e| e.to_string())
        .collect();
    for want in [
        "spec.scope: Invalid value: \"Cluster\": field is immutable",
        "spec.names.kind: Invalid value: \"Gadget\": field is immutable",
        "spec.group: Invalid value: \"other.com\": field is immutable",
    ] {
        assert!(got.iter().any(|e| e == want), "want {want:?} in {got:?}");
    }
    // Not established yet: scope and kind may change.
    old["status"]["conditions"] = json!([]);
    let mut new = old.clone();
    new["spec"]["scope"] = json!("Cluster");
    assert!(validate_update(&new, &old).is_empty());
}
