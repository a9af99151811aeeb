//! Tests of JSON patch, merge patch and strategic merge patch, modelled on what kubectl sends
//! (`kubectl label/annotate/scale/set image/patch/apply`).

use serde_json::{json, Value};

use super::*;

fn deployment() -> Value {
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": "default", "labels": {"app": "web", "tier": "fe"},
                     "finalizers": ["a", "b"]},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "containers": [
                        {"name": "app", "image": "nginx:1.24",
                         "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                         "ports": [{"containerPort": 80, "protocol": "TCP"}]},
                        {"name": "sidecar", "image": "busybox"}
                    ],
                    "volumes": [{"name": "data", "emptyDir": {}}],
                    "tolerations": [{"key": "k1", "operator": "Exists"}]
                }
            }
        },
        "status": {"conditions": [{"type": "Available", "status": "False"}, {"type": "Progressing", "status": "True"}]}
    })
}

fn at<'a>(v: &'a Value, pointer: &str) -> &'a Value {
    v.pointer(pointer).unwrap_or(&Value::Null)
}

fn names(v: &Value, pointer: &str) -> Vec<String> {
    at(v, pointer)
        .as_array()
        .map(|a| {
            a.iter()
                .map(|i| i["name"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn smp(group: &str, kind: &str, doc: &Value, patch: Value) -> Value {
    apply_strategic_merge_patch(doc, &patch, schema_for(group, kind))
        .unwrap_or_else(|e| panic!("{patch}: {e}"))
}

fn smp_err(group: &str, kind: &str, doc: &Value, patch: Value) -> PatchError {
    match apply_strategic_merge_patch(doc, &patch, schema_for(group, kind)) {
        Ok(v) => panic!("{patch}: expected an error, got {v}"),
        Err(e) => e,
    }
}

fn assert_no_directives(v: &Value) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                assert!(!k.starts_with('$'), "directive {k} left in result");
                assert_no_directives(v);
            }
        }
        Value::Array(a) => a.iter().for_each(assert_no_directives),
        _ => {}
    }
}

// ---- JSON patch (kubectl patch --type=json) ----

#[test]
fn json_patch_operations() {
    let d = deployment();
    let cases: Vec<(Value, &str, Value)> = vec![
        (
            json!([{"op": "replace", "path": "/spec/replicas", "value": 3}]),
            "/spec/replicas",
            json!(3),
        ),
        (
            json!([{"op": "add", "path": "/metadata/labels/env", "value": "prod"}]),
            "/metadata/labels/env",
            json!("prod"),
        ),
        (
            json!([{"op": "remove", "path": "/metadata/labels/tier"}]),
            "/metadata/labels/tier",
            Value::Null,
        ),
        (
            json!([{"op": "test", "path": "/spec/replicas", "value": 1}, {"op": "replace", "path": "/spec/replicas", "value": 2}]),
            "/spec/replicas",
            json!(2),
        ),
        (
            json!([{"op": "add", "path": "/spec/template/spec/containers/-", "value": {"name": "third", "image": "x"}}]),
            "/spec/template/spec/containers/2/name",
            json!("third"),
        ),
        (
            json!([{"op": "add", "path": "/metadata/annotations", "value": {}},
                   {"op": "add", "path": "/metadata/annotations/example.com~1key", "value": "v"}]),
            "/metadata/annotations/example.com~1key",
            json!("v"),
        ),
        (
            json!([{"op": "copy", "from": "/metadata/labels/app", "path": "/metadata/labels/copy"}]),
            "/metadata/labels/copy",
            json!("web"),
        ),
        (
            json!([{"op": "move", "from": "/metadata/labels/tier", "path": "/metadata/labels/layer"}]),
            "/metadata/labels/layer",
            json!("fe"),
        ),
        (
            json!([{"op": "remove", "path": "/spec/template/spec/containers/1"}]),
            "/spec/template/spec/containers/1",
            Value::Null,
        ),
    ];
    for (patch, pointer, want) in cases {
        let out = apply_json_patch(&d, &patch).unwrap_or_else(|e| panic!("{patch}: {e}"));
        assert_eq!(at(&out, pointer), &want, "{patch}");
    }
}

#[test]
fn json_patch_failures() {
    let d = deployment();
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!([{"op": "test", "path": "/spec/replicas", "value": 5}]), 422, "testing value /spec/replicas failed: test failed"),
        (json!([{"op": "test", "path": "/spec/nope", "value": 5}]), 422, "testing value /spec/nope failed: test failed"),
        (
            json!([{"op": "remove", "path": "/metadata/labels/nope"}]),
            422,
            "remove operation does not apply: doc is missing path: \"/metadata/labels/nope\": missing value",
        ),
        (
            json!([{"op": "add", "path": "/spec/foo/bar", "value": 1}]),
            422,
            "add operation does not apply: doc is missing path: \"/spec/foo/bar\": missing value",
        ),
        (
            json!([{"op": "replace", "path": "/spec/nope", "value": 1}]),
            422,
            "replace operation does not apply: doc is missing key: /spec/nope: missing value",
        ),
        (
            json!([{"op": "move", "from": "/spec/nope", "path": "/spec/x"}]),
            422,
            "move operation does not apply: doc is missing from path: /spec/nope: missing value",
        ),
        (json!({"op": "add"}), 400, "json: cannot unmarshal object into Go value of type jsonpatch.Patch"),
    ];
    for (patch, code, msg) in cases {
        let err = apply_json_patch(&d, &patch)
            .err()
            .unwrap_or(PatchError::BadRequest(String::new()));
        assert_eq!((err.code(), err.message()), (code, msg), "{patch}");
    }
    // Unknown operations and missing fields are 422.
    let err = apply_json_patch(&d, &json!([{"op": "frobnicate", "path": "/a"}])).err();
    assert_eq!(err.map(|e| e.code()), Some(422));
    // A failed patch leaves nothing half-applied: the input is untouched and no value is returned.
    let patch = json!([{"op": "replace", "path": "/spec/replicas", "value": 9}, {"op": "test", "path": "/spec/replicas", "value": 1}]);
    assert!(apply_json_patch(&d, &patch).is_err());
    assert_eq!(d["spec"]["replicas"], 1);
}

#[test]
fn json_patch_limits() {
    // Each copy doubles the list: forty of them, under 2 KB, would need terabytes.
    let d = json!({"metadata": {"name": "bomb"}, "data": {"a": ["x".repeat(1000)]}});
    let mut ops = vec![];
    for _ in 0..40 {
        ops.push(json!({"op": "copy", "from": "/data/a", "path": "/data/a/-"}));
    }
    let err = apply_json_patch(&d, &json!(ops)).unwrap_err();
    assert_eq!(err.code(), 413);
    assert!(
        err.message()
            .starts_with("Unable to complete the copy, the accumulated size increase of copy is "),
        "{err}"
    );
    let api = err.to_api_error();
    assert_eq!((api.code, api.reason), (413, "RequestEntityTooLarge"));
    // A few copies are fine, and a copy into place works as before.
    let ok = apply_json_patch(&d, &json!(ops[..3])).unwrap();
    assert_eq!(ok["data"]["a"].as_array().map(Vec::len), Some(4));
    // More than 10,000 operations are refused before any is applied.
    let many: Vec<Value> = (0..10_001)
        .map(|_| json!({"op": "test", "path": "/metadata/name", "value": "bomb"}))
        .collect();
    let err = apply_json_patch(&d, &json!(many)).unwrap_err();
    assert_eq!(
        (err.code(), err.message()),
        (
            413,
            "The allowed maximum operations in a JSON patch is 10000, got 10001"
        )
    );
    // Errors still name the operation that failed, whatever its position.
    let err = apply_json_patch(
        &d,
        &json!([{"op": "test", "path": "/metadata/name", "value": "bomb"},
                {"op": "remove", "path": "/spec/nope"}]),
    )
    .unwrap_err();
    assert_eq!(
        err.message(),
        "remove operation does not apply: doc is missing path: \"/spec/nope\": missing value"
    );
}

#[test]
fn patch_errors_become_statuses() {
    let err = PatchError::Invalid("testing value /spec/replicas failed: test failed".into());
    let api = err.to_api_error();
    assert_eq!((api.code, api.reason), (422, "Invalid"));
    assert_eq!(
        api.message,
        "the server rejected our request due to an error in our request"
    );
    let causes = api.details.map(|d| d.causes).unwrap_or_default();
    assert_eq!(causes.len(), 1);
    assert_eq!(
        causes[0].message,
        "testing value /spec/replicas failed: test failed"
    );
    let api = PatchError::BadRequest("Invalid JSON Patch".into()).to_api_error();
    assert_eq!(
        (api.code, api.reason, api.message.as_str()),
        (400, "BadRequest", "Invalid JSON Patch")
    );
}

// ---- JSON merge patch (kubectl label/annotate/scale, kubectl patch --type=merge) ----

#[test]
fn merge_patch_cases() {
    let d = deployment();
    let cases: Vec<(&str, Value, &str, Value)> = vec![
        (
            "label",
            json!({"metadata": {"labels": {"env": "prod"}}}),
            "/metadata/labels",
            json!({"app": "web", "tier": "fe", "env": "prod"}),
        ),
        (
            "label overwrite",
            json!({"metadata": {"labels": {"tier": "be"}}}),
            "/metadata/labels/tier",
            json!("be"),
        ),
        (
            "unlabel (tier-)",
            json!({"metadata": {"labels": {"tier": null}}}),
            "/metadata/labels",
            json!({"app": "web"}),
        ),
        (
            "annotate",
            json!({"metadata": {"annotations": {"note": "hi", "gone": null}}}),
            "/metadata/annotations",
            json!({"note": "hi"}),
        ),
        (
            "scale",
            json!({"spec": {"replicas": 5}}),
            "/spec/replicas",
            json!(5),
        ),
        (
            "lists replace",
            json!({"metadata": {"finalizers": ["z"]}}),
            "/metadata/finalizers",
            json!(["z"]),
        ),
        (
            "remove field",
            json!({"spec": {"strategy": null}}),
            "/spec/strategy",
            Value::Null,
        ),
        (
            "new object drops nulls",
            json!({"spec": {"paused": {"a": null, "b": 1}}}),
            "/spec/paused",
            json!({"b": 1}),
        ),
    ];
    for (name, patch, pointer, want) in cases {
        let out = apply_merge_patch(&d, &patch).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(at(&out, pointer), &want, "{name}");
        assert_eq!(
            out["spec"]["template"], d["spec"]["template"],
            "{name}: untouched parts stay"
        );
    }
    for bad in [json!([1]), json!(null), json!("x")] {
        assert_eq!(
            apply_merge_patch(&d, &bad),
            Err(PatchError::BadRequest("Invalid JSON Patch".into()))
        );
    }
}

// ---- strategic merge patch ----

#[test]
fn smp_set_image_merges_containers_by_name() {
    let d = deployment();
    let out = smp(
        "apps",
        "Deployment",
        &d,
        json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "image": "nginx:1.25"}]}}}}),
    );
    let c = at(&out, "/spec/template/spec/containers");
    assert_eq!(
        names(&out, "/spec/template/spec/containers"),
        ["app", "sidecar"]
    );
    assert_eq!(c[0]["image"], "nginx:1.25");
    assert_eq!(
        c[0]["env"], d["spec"]["template"]["spec"]["containers"][0]["env"],
        "other fields kept"
    );
    assert_eq!(c[1], d["spec"]["template"]["spec"]["containers"][1]);
    // Key order of the object is kept.
    let keys: Vec<&String> = out["spec"]
        .as_object()
        .map(|m| m.keys().collect())
        .unwrap_or_default();
    assert_eq!(keys, ["replicas", "selector", "strategy", "template"]);
}

#[test]
fn smp_list_and_map_cases() {
    let d = deployment();
    let containers = "/spec/template/spec/containers";
    // (description, patch, pointer, expected)
    let cases: Vec<(&str, Value, &str, Value)> = vec![
        (
            "new container comes first, as upstream orders it",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "new", "image": "redis"}]}}}}),
            containers,
            json!([{"name": "new", "image": "redis"}, d["spec"]["template"]["spec"]["containers"][0], {"name": "sidecar", "image": "busybox"}]),
        ),
        (
            "$patch: delete removes a container by name",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"}]}}}}),
            "/spec/template/spec/containers/1",
            Value::Null,
        ),
        (
            "$patch: replace in a list replaces it",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "only", "image": "x"}, {"$patch": "replace"}]}}}}),
            containers,
            json!([{"name": "only", "image": "x"}]),
        ),
        (
            "env merges by name",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}]}]}}}}),
            "/spec/template/spec/containers/0/env",
            json!([{"name": "A", "value": "1"}, {"name": "B", "value": "3"}, {"name": "C", "value": "4"}]),
        ),
        (
            "null inside a list item deletes that field",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "env": [{"name": "A", "value": null}]}]}}}}),
            "/spec/template/spec/containers/0/env/0",
            json!({"name": "A"}),
        ),
        (
            "ports merge by containerPort",
            json!({"spec": {"template": {"spec": {"containers": [{"name": "app", "ports": [{"containerPort": 80, "name": "http"}]}]}}}}),
            "/spec/template/spec/containers/0/ports",
            json!([{"containerPort": 80, "protocol": "TCP", "name": "http"}]),
        ),
        (
            "tolerations have no strategy: replaced",
            json!({"spec": {"template": {"spec": {"tolerations": [{"key": "k2", "operator": "Exists"}]}}}}),
            "/spec/template/spec/tolerations",
            json!([{"key": "k2", "operator": "Exists"}]),
        ),
        (
            "labels merge, null deletes",
            json!({"metadata": {"labels": {"env": "prod", "tier": null}}}),
            "/metadata/labels",
            json!({"app": "web", "env": "prod"}),
        ),
        (
            "finalizers are a union (patch items first)",
            json!({"metadata": {"finalizers": ["c", "a"]}}),
            "/metadata/finalizers",
            json!(["c", "a", "b"]),
        ),
        (
            "$deleteFromPrimitiveList",
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
            "/metadata/finalizers",
            json!(["b"]),
        ),
        (
            "$patch: replace on a map",
            json!({"metadata": {"labels": {"$patch": "replace", "only": "1"}}}),
            "/metadata/labels",
            json!({"only": "1"}),
        ),
        (
            "$patch: delete on a map empties it",
            json!({"spec": {"template": {"metadata": {"labels": {"$patch": "delete"}}}}}),
            "/spec/template/metadata/labels",
            json!({}),
        ),
        (
            "$patch: merge on a map is the default",
            json!({"metadata": {"labels": {"$patch": "merge", "x": "1"}}}),
            "/metadata/labels/x",
            json!("1"),
        ),
        (
            "$retainKeys on Deployment.spec.strategy",
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
            "/spec/strategy",
            json!({"type": "Recreate"}),
        ),
        (
            "$retainKeys inside a volume switches its source",
            json!({"spec": {"template": {"spec": {"volumes": [{"name": "data", "hostPath": {"path": "/d"}, "$retainKeys": ["hostPath", "name"]}]}}}}),
            "/spec/template/spec/volumes",
            json!([{"name": "data", "hostPath": {"path": "/d"}}]),
        ),
        (
            "status conditions merge by type",
            json!({"status": {"conditions": [{"type": "Available", "status": "True"}]}}),
            "/status/conditions",
            json!([{"type": "Available", "status": "True"}, {"type": "Progressing", "status": "True"}]),
        ),
        (
            "a new nested object loses its nulls and directives",
            json!({"spec": {"template": {"spec": {"securityContext": {"runAsUser": 1000, "fsGroup": null, "$patch": "merge"}}}}}),
            "/spec/template/spec/securityContext",
            json!({"runAsUser": 1000}),
        ),
        (
            "a new merge list loses its directive items",
            json!({"spec": {"template": {"spec": {"initContainers": [{"name": "i", "image": "x"}, {"name": "gone", "$patch": "delete"}]}}}}),
            "/spec/template/spec/initContainers",
            json!([{"name": "i", "image": "x"}]),
        ),
        (
            "$deleteFromPrimitiveList on an absent field is a no-op",
            json!({"spec": {"template": {"metadata": {"$deleteFromPrimitiveList/finalizers": ["x"]}}}}),
            "/spec/template/metadata/finalizers",
            Value::Null,
        ),
        (
            "scale",
            json!({"spec": {"replicas": 3}}),
            "/spec/replicas",
            json!(3),
        ),
        (
            "an empty list for a merge field changes nothing",
            json!({"spec": {"template": {"spec": {"containers": []}}}}),
            "/spec/template/spec/containers/1/name",
            json!("sidecar"),
        ),
        (
            "type change replaces",
            json!({"spec": {"replicas": "2"}}),
            "/spec/replicas",
            json!("2"),
        ),
        (
            "null removes a whole field",
            json!({"spec": {"strategy": null}}),
            "/spec/strategy",
            Value::Null,
        ),
    ];
    for (name, patch, pointer, want) in cases {
        let out = smp("apps", "Deployment", &d, patch);
        assert_eq!(at(&out, pointer), &want, "{name}");
        assert_no_directives(&out);
    }
}

#[test]
fn smp_set_element_order_as_kubectl_apply_sends_it() {
    let mut d = deployment();
    d["spec"]["template"]["spec"]["containers"] = json!([{"name": "a", "image": "1"}, {"name": "b", "image": "1"}, {"name": "c", "image": "1"}]);
    let containers = "/spec/template/spec/containers";
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        (
            "reorder and change one",
            json!({"$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
                   "containers": [{"name": "a", "image": "2"}]}),
            vec!["c", "a", "b"],
        ),
        (
            "delete one, keep a live-only one in place",
            json!({"$setElementOrder/containers": [{"name": "a"}], "containers": [{"name": "b", "$patch": "delete"}]}),
            vec!["a", "c"],
        ),
        (
            "add one in the middle",
            json!({"$setElementOrder/containers": [{"name": "a"}, {"name": "n"}, {"name": "b"}, {"name": "c"}],
                   "containers": [{"name": "n", "image": "x"}]}),
            vec!["a", "n", "b", "c"],
        ),
        (
            "order only",
            json!({"$setElementOrder/containers": [{"name": "b"}, {"name": "c"}, {"name": "a"}]}),
            vec!["b", "c", "a"],
        ),
    ];
    for (name, spec_patch, want) in cases {
        let out = smp(
            "apps",
            "Deployment",
            &d,
            json!({"spec": {"template": {"spec": spec_patch}}}),
        );
        assert_eq!(names(&out, containers), want, "{name}");
        assert_no_directives(&out);
    }
    let out = smp(
        "apps",
        "Deployment",
        &d,
        json!({"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "c"}, {"name": "a"}, {"name": "b"}],
                                              "containers": [{"name": "a", "image": "2"}]}}}}),
    );
    assert_eq!(
        at(&out, "/spec/template/spec/containers/1"),
        &json!({"name": "a", "image": "2"})
    );

    // $setElementOrder together with $retainKeys (kubectl apply switching a volume's source).
    let out = smp(
        "apps",
        "Deployment",
        &deployment(),
        json!({"spec": {"template": {"spec": {
            "$setElementOrder/volumes": [{"name": "cfg"}, {"name": "data"}],
            "volumes": [{"$retainKeys": ["configMap", "name"], "name": "cfg", "configMap": {"name": "c"}},
                        {"$retainKeys": ["hostPath", "name"], "name": "data", "hostPath": {"path": "/d"}, "emptyDir": null}]}}}}),
    );
    assert_eq!(
        at(&out, "/spec/template/spec/volumes"),
        &json!([{"name": "cfg", "configMap": {"name": "c"}}, {"name": "data", "hostPath": {"path": "/d"}}])
    );

    // Primitive lists: finalizers.
    let out = smp(
        "apps",
        "Deployment",
        &deployment(),
        json!({"metadata": {"$setElementOrder/finalizers": ["b", "a", "c"], "finalizers": ["c"]}}),
    );
    assert_eq!(at(&out, "/metadata/finalizers"), &json!(["b", "a", "c"]));
}

#[test]
fn smp_other_kinds() {
    let svc = json!({"kind": "Service", "spec": {"ports": [{"port": 80, "targetPort": 8080}, {"port": 443, "targetPort": 8443}]}});
    let out = smp(
        "",
        "Service",
        &svc,
        json!({"spec": {"ports": [{"port": 443, "targetPort": 9443}]}}),
    );
    assert_eq!(
        at(&out, "/spec/ports"),
        &json!([{"port": 80, "targetPort": 8080}, {"port": 443, "targetPort": 9443}])
    );

    let node = json!({"kind": "Node", "spec": {"podCIDRs": ["10.0.0.0/24"]},
                      "status": {"addresses": [{"type": "InternalIP", "address": "10.1.1.1"}, {"type": "Hostname", "address": "n1"}],
                                 "conditions": [{"type": "Ready", "status": "False"}]}});
    let out = smp(
        "",
        "Node",
        &node,
        json!({"status": {"addresses": [{"type": "Hostname", "address": "n2"}],
                                                   "conditions": [{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}]}}),
    );
    assert_eq!(at(&out, "/status/addresses/1/address"), "n2");
    assert_eq!(
        at(&out, "/status/conditions"),
        &json!([{"type": "Ready", "status": "True"}, {"type": "DiskPressure", "status": "False"}])
    );

    let pod = json!({"kind": "Pod", "metadata": {"ownerReferences": [{"uid": "u1", "name": "rs1"}]},
                     "spec": {"containers": [{"name": "c", "image": "x", "volumeMounts": [{"mountPath": "/a", "name": "v"}]}]}});
    let out = smp(
        "",
        "Pod",
        &pod,
        json!({"metadata": {"ownerReferences": [{"uid": "u2", "name": "rs2"}]},
                                         "spec": {"containers": [{"name": "c", "volumeMounts": [{"mountPath": "/a", "readOnly": true}]}]}}),
    );
    assert_eq!(at(&out, "/metadata/ownerReferences/1/uid"), "u1");
    assert_eq!(
        at(&out, "/spec/containers/0/volumeMounts"),
        &json!([{"mountPath": "/a", "name": "v", "readOnly": true}])
    );

    let cron = json!({"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": {"spec": {
        "containers": [{"name": "job", "image": "a"}, {"name": "helper", "image": "h"}]}}}}}});
    let out = smp(
        "batch",
        "CronJob",
        &cron,
        json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"containers": [{"name": "job", "image": "b"}]}}}}}}),
    );
    assert_eq!(
        names(&out, "/spec/jobTemplate/spec/template/spec/containers"),
        ["job", "helper"]
    );
    assert_eq!(
        at(
            &out,
            "/spec/jobTemplate/spec/template/spec/containers/0/image"
        ),
        "b"
    );

    // Unknown kinds (custom resources): no metadata, so lists are replaced; maps merge; directives apply.
    let cr = json!({"kind": "Widget", "spec": {"items": [{"name": "a"}, {"name": "b"}], "size": 1, "gone": true}});
    let out = smp(
        "example.com",
        "Widget",
        &cr,
        json!({"spec": {"items": [{"name": "c"}], "gone": null}}),
    );
    assert_eq!(out["spec"], json!({"items": [{"name": "c"}], "size": 1}));
}

#[test]
fn smp_errors() {
    let d = deployment();
    let containers = |items: Value| json!({"spec": {"template": {"spec": {"containers": items}}}});
    let cases: Vec<(Value, u16, &str)> = vec![
        (json!({"metadata": {"labels": {"$patch": "bogus"}}}), 422, "unknown patch type: bogus in map: map[$patch:bogus]"),
        (containers(json!([{"name": "app", "$patch": "merge"}])), 422, "merging lists cannot yet be specified in the patch"),
        (containers(json!([{"$patch": "delete"}])), 422, "map: map[$patch:delete] does not contain declared merge key: name"),
        (containers(json!([{"image": "x"}])), 422, "map: map[image:x] does not contain declared merge key: name"),
        (containers(json!(["app"])), 422, "list element types are not identical"),
        (json!({"metadata": {"finalizers": [["x"]]}}), 422, "lists of lists are not supported"),
        (json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}}), 400, "invalid patch format of retainKeys"),
        (json!({"spec": {"strategy": {"$retainKeys": "type"}}}), 400, "invalid patch format of retainKeys"),
        (json!({"metadata": {"$deleteFromPrimitiveList": ["a"]}}), 400, "invalid patch format of primitive list"),
        (json!({"metadata": {"$setElementOrderfinalizers": ["a"]}}), 400, "invalid patch format of setElementOrder list"),
        (
            json!({"spec": {"template": {"spec": {"$setElementOrder/containers": [{"name": "app"}], "containers": [{"name": "x"}]}}}}),
            422,
            "The order in patch list:\n[map[name:x]]\n doesn't match $setElementOrder list:\n[map[name:app]]\n",
        ),
        (json!({"metadata": {"$setElementOrder/finalizers": "a"}}), 422, "expected a []interface {}, but received a string"),
    ];
    for (patch, code, msg) in cases {
        let err = smp_err("apps", "Deployment", &d, patch.clone());
        assert_eq!(err.code(), code, "{patch}: {err}");
        assert!(err.message().starts_with(msg), "{patch}: {err}");
    }
    for bad in [json!([]), json!("x")] {
        let err = smp_err("apps", "Deployment", &d, bad);
        assert_eq!(err, PatchError::BadRequest("invalid JSON document".into()));
    }
    assert_eq!(
        apply_strategic_merge_patch(&d, &Value::Null, schema_for("apps", "Deployment")),
        Ok(d.clone())
    );
    assert_eq!(
        apply_strategic_merge_patch(&json!([]), &json!({}), PatchSchema::none()),
        Err(PatchError::BadRequest("invalid JSON document".into()))
    );
}

#[test]
fn smp_whole_object_directives() {
    let d = deployment();
    let out = smp(
        "apps",
        "Deployment",
        &d,
        json!({"$patch": "replace", "kind": "Deployment", "spec": {"replicas": 2}}),
    );
    assert_eq!(out, json!({"kind": "Deployment", "spec": {"replicas": 2}}));
    let out = smp("apps", "Deployment", &d, json!({"$patch": "delete"}));
    assert_eq!(out, json!({}));
}

/// As upstream's JSON patch: `test` for `null` passes on a member the object does not have (what
/// kube-rs's finalizer helper sends before adding the first finalizer), not on one whose parent is
/// missing nor on a member that holds a value.
#[test]
fn json_patch_test_for_null_passes_on_a_missing_member() {
    let doc = json!({"metadata": {"name": "a", "resourceVersion": "7"}});
    let patch = json!([
        {"op": "test", "path": "/metadata/finalizers", "value": null},
        {"op": "test", "path": "/metadata/resourceVersion", "value": "7"},
        {"op": "add", "path": "/metadata/finalizers", "value": ["x/y"]},
    ]);
    let out = apply_json_patch(&doc, &patch).unwrap();
    assert_eq!(out["metadata"]["finalizers"], json!(["x/y"]));
    for bad in [
        json!([{"op": "test", "path": "/spec/finalizers", "value": null}]),
        json!([{"op": "test", "path": "/metadata/name", "value": null}]),
    ] {
        assert!(apply_json_patch(&doc, &bad).is_err(), "{bad}");
    }
}
