//! Custom resources as apiextensions-apiserver serves them, driven by kubectl and the kube crate:
//! schema pruning, defaulting (on write and from storage) and validation with upstream's messages;
//! CRD validation; versions with the `None` conversion (lists and watches included); the scale
//! subresource (`kubectl scale`); `additionalPrinterColumns` in `kubectl get`; and the
//! `customresourcecleanup` finalizer.

mod support;

use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{
    Api, ApiResource, DynamicObject, GroupVersionKind, PostParams, WatchEvent, WatchParams,
};
use serde_json::{json, Value};
use support::{Backend, Cluster};

const CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: crontabs.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names: {plural: crontabs, singular: crontab, kind: CronTab, shortNames: [ct]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources:
      status: {}
      scale: {specReplicasPath: .spec.replicas, statusReplicasPath: .status.replicas, labelSelectorPath: .status.selector}
    additionalPrinterColumns:
    - {name: Spec, type: string, jsonPath: .spec.cronSpec}
    - {name: Replicas, type: integer, jsonPath: .spec.replicas}
    - {name: Image, type: string, jsonPath: .spec.image, priority: 1}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [image]
            properties:
              cronSpec: {type: string, pattern: '^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$'}
              image: {type: string}
              replicas: {type: integer, minimum: 0, default: 1}
              mode: {type: string, enum: [Fast, Slow]}
              template:
                type: object
                properties:
                  containers:
                    type: array
                    x-kubernetes-list-type: map
                    x-kubernetes-list-map-keys: [name]
                    items:
                      type: object
                      required: [name]
                      properties:
                        name: {type: string, description: The container name.}
          status:
            type: object
            properties:
              replicas: {type: integer}
              selector: {type: string}
"#;

fn wait_established(c: &Cluster, crd: &str) {
    c.kubectl(&[
        "wait",
        "--for=condition=Established",
        &format!("crd/{crd}"),
        "--timeout=30s",
    ]);
}

fn start_with_crd(backend: Backend) -> Cluster {
    let c = Cluster::start(backend);
    c.kubectl_in(&["apply", "-f", "-"], Some(CRD));
    wait_established(&c, "crontabs.stable.example.com");
    c
}

fn get_json(c: &Cluster, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&c.kubectl(&all)).expect("kubectl -o json")
}

fn crontab(name: &str, spec: &str) -> String {
    format!("apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata: {{name: {name}}}\nspec: {spec}\n")
}

fn pruning_defaulting_and_validation(backend: Backend) {
    let c = start_with_crd(backend);
    // kubectl validates strictly by default: unknown fields are a 400 naming each of them.
    let err = c.kubectl_fails(
        &["create", "-f", "-"],
        Some(&crontab("a", "{image: nginx, foo: 1, template: {bar: 2}}")),
    );
    assert!(
        err.contains(
            r#"strict decoding error: unknown field "spec.foo", unknown field "spec.template.bar""#
        ),
        "{err}"
    );
    // With --validate=false they are pruned; the default fills in replicas.
    c.kubectl_in(
        &["create", "--validate=false", "-f", "-"],
        Some(&crontab("a", "{image: nginx, foo: 1}")),
    );
    let a = get_json(&c, &["get", "crontab", "a"]);
    assert_eq!(a["spec"], json!({"image": "nginx", "replicas": 1}));
    // Warn: created, with a warning on stderr.
    let out = c.kubectl_output(
        &["create", "--validate=warn", "-f", "-"],
        Some(&crontab("b", "{image: nginx, extra: true}")),
    );
    assert!(out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(r#"unknown field "spec.extra""#), "{stderr}");
    // Schema validation: 422 with upstream's messages.
    let err = c.kubectl_fails(
        &["create", "-f", "-"],
        Some(&crontab(
            "c",
            "{cronSpec: 'every day', replicas: -1, mode: Medium}",
        )),
    );
    for want in [
        r#"The CronTab "c" is invalid"#,
        "spec.image: Required value",
        "spec.replicas: Invalid value: -1: spec.replicas in body should be greater than or equal to 0",
        r#"spec.mode: Unsupported value: "Medium": supported values: "Fast", "Slow""#,
        r#"spec.cronSpec: Invalid value: "every day": spec.cronSpec in body should match"#,
    ] {
        assert!(err.contains(want), "missing {want:?} in {err}");
    }
    let err = c.kubectl_fails(
        &["create", "-f", "-"],
        Some(&crontab(
            "d",
            "{image: x, replicas: two, template: {containers: [{name: a}, {name: a}]}}",
        )),
    );
    assert!(err.contains(r#"spec.replicas: Invalid value: "string": spec.replicas in body must be of type integer: "string""#), "{err}");
    assert!(
        err.contains(
            r#"spec.template.containers[1]: Duplicate value: map[string]interface {}{"name":"a"}"#
        ),
        "{err}"
    );
    let err = c.kubectl_fails(
        &["create", "-f", "-"],
        Some(&crontab("Bad_Name", "{image: x}")),
    );
    assert!(
        err.contains(r#"metadata.name: Invalid value: "Bad_Name""#),
        "{err}"
    );
    // Defaulting from storage: a default added to the schema later shows on read.
    let mut crd: Value = get_json(&c, &["get", "crd", "crontabs.stable.example.com"]);
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
        ["mode"]["default"] = json!("Slow");
    c.kubectl_in(&["replace", "-f", "-"], Some(&crd.to_string()));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let a = get_json(&c, &["get", "crontab", "a"]);
        if a["spec"]["mode"] == "Slow" {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "default from storage not applied: {a}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn crd_validation_uses_upstream_messages() {
    let c = Cluster::start(Backend::Sqlite);
    let bad = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: widgets, kind: Widget}
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, properties: {spec: {properties: {a: {type: string}}}}}}}
  - {name: v2, served: true, storage: true}
"#;
    let err = c.kubectl_fails(&["create", "-f", "-"], Some(bad));
    for want in [
        r#"The CustomResourceDefinition "widgets.example.com" is invalid"#,
        "spec.versions[1].schema.openAPIV3Schema: Required value: schemas are required",
        "must have exactly one version marked as storage version",
        "spec.versions[0].schema.openAPIV3Schema.properties[spec].type: Required value: must not be empty for specified object fields",
    ] {
        assert!(err.contains(want), "missing {want:?} in {err}");
    }
    let wrong_name = CRD.replace(
        "name: crontabs.stable.example.com",
        "name: crontab.stable.example.com",
    );
    let err = c.kubectl_fails(&["create", "-f", "-"], Some(&wrong_name));
    assert!(err.contains(r#"metadata.name: Invalid value: "crontab.stable.example.com": must be spec.names.plural+"."+spec.group"#), "{err}");
    c.kubectl_in(&["create", "-f", "-"], Some(CRD));
    wait_established(&c, "crontabs.stable.example.com");
    let crd = get_json(&c, &["get", "crd", "crontabs.stable.example.com"]);
    assert_eq!(crd["status"]["storedVersions"], json!(["v1"]));
    let err = c.kubectl_fails(
        &[
            "patch",
            "crd",
            "crontabs.stable.example.com",
            "--type=merge",
            "-p",
            r#"{"spec":{"scope":"Cluster"}}"#,
        ],
        None,
    );
    assert!(
        err.contains("spec.scope: Invalid value: \"Cluster\": field is immutable"),
        "{err}"
    );
}

const VERSIONED: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gadgets.example.com}
spec:
  group: example.com
  scope: Namespaced
  names: {plural: gadgets, kind: Gadget}
  versions:
  - name: v1
    served: true
    storage: true
    schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: {size: {type: integer, default: 1}}}}}}
  - name: v2
    served: true
    storage: false
    deprecated: true
    schema: {openAPIV3Schema: {type: object, properties: {spec: {type: object, properties: {size: {type: integer}, color: {type: string, default: red}}}}}}
"#;

fn versions_convert_with_none(backend: Backend) {
    let c = Cluster::start(backend);
    c.kubectl_in(&["apply", "-f", "-"], Some(VERSIONED));
    wait_established(&c, "gadgets.example.com");
    support::runtime().block_on(async {
        let client = c.client().await;
        let ar = |v: &str| {
            ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("example.com", v, "Gadget"),
                "gadgets",
            )
        };
        let v1: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar("v1"));
        let v2: Api<DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar("v2"));
        let mut watch = v2
            .watch(&WatchParams::default(), "0")
            .await
            .expect("watch v2")
            .boxed();
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "example.com/v2", "kind": "Gadget", "metadata": {"name": "g"}, "spec": {}
        }))
        .expect("object");
        // The request is defaulted in v2 (color), stored in v1 (the storage version, which has no
        // color: the None conversion drops it) and read back with v1's defaults (size).
        let created = v2
            .create(&PostParams::default(), &obj)
            .await
            .expect("create via v2");
        assert_eq!(
            created.types.as_ref().map(|t| t.api_version.as_str()),
            Some("example.com/v2")
        );
        assert_eq!(created.data["spec"], json!({"size": 1}));
        let as_v1 = v1.get("g").await.expect("get v1");
        assert_eq!(
            as_v1.types.as_ref().map(|t| t.api_version.as_str()),
            Some("example.com/v1")
        );
        assert_eq!(as_v1.data["spec"], json!({"size": 1}));
        let listed = v1.list(&Default::default()).await.expect("list v1");
        assert_eq!(listed.items.len(), 1);
        assert_eq!(
            listed.items[0]
                .types
                .as_ref()
                .map(|t| t.api_version.as_str()),
            Some("example.com/v1")
        );
        let listed = v2.list(&Default::default()).await.expect("list v2");
        assert_eq!(
            listed.items[0]
                .types
                .as_ref()
                .map(|t| t.api_version.as_str()),
            Some("example.com/v2")
        );
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        loop {
            let event = tokio::time::timeout_at(deadline, watch.next())
                .await
                .expect("a watch event in time")
                .expect("watch open")
                .expect("watch event");
            if let WatchEvent::Added(o) = event {
                assert_eq!(
                    o.types.as_ref().map(|t| t.api_version.as_str()),
                    Some("example.com/v2")
                );
                break;
            }
        }
    });
    let stored = c.kubectl(&[
        "get",
        "gadgets.v1.example.com",
        "g",
        "-o",
        "jsonpath={.apiVersion}",
    ]);
    assert_eq!(stored, "example.com/v1");
}

#[test]
fn scale_subresource_and_printer_columns() {
    let c = start_with_crd(Backend::Sqlite);
    c.kubectl_in(
        &["create", "-f", "-"],
        Some(&crontab(
            "web",
            "{cronSpec: '*/5 * * * *', image: nginx, replicas: 2}",
        )),
    );
    let out = c.kubectl(&["get", "crontabs"]);
    let header: Vec<&str> = out
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .collect();
    assert_eq!(header, ["NAME", "SPEC", "REPLICAS"], "{out}");
    assert!(out.contains("*/5 * * * *") && out.contains(" 2"), "{out}");
    let wide = c.kubectl(&["get", "ct", "-o", "wide"]);
    assert!(
        wide.lines().next().unwrap_or("").contains("IMAGE") && wide.contains("nginx"),
        "{wide}"
    );
    c.kubectl(&["scale", "crontab/web", "--replicas=5"]);
    let web = get_json(&c, &["get", "crontab", "web"]);
    assert_eq!(web["spec"]["replicas"], 5);
    assert_eq!(web["metadata"]["generation"], 2);
    // Status through /status (the main resource ignores it), then the Scale view.
    c.kubectl(&[
        "patch",
        "crontab",
        "web",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"replicas":4,"selector":"app=web"}}"#,
    ]);
    let scale = get_json(&c, &["get", "crontab", "web", "--subresource=scale"]);
    assert_eq!(scale["kind"], "Scale");
    assert_eq!(scale["apiVersion"], "autoscaling/v1");
    assert_eq!(scale["spec"]["replicas"], 5);
    assert_eq!(
        scale["status"],
        json!({"replicas": 4, "selector": "app=web"})
    );
    let err = c.kubectl_fails(&["scale", "crontab/web", "--replicas=-1"], None);
    assert!(!err.is_empty());
}

#[test]
fn deleting_a_crd_deletes_its_custom_resources_first() {
    let c = start_with_crd(Backend::Sqlite);
    c.kubectl_in(
        &["create", "-f", "-"],
        Some(&crontab("plain", "{image: x}")),
    );
    let held = "apiVersion: stable.example.com/v1\nkind: CronTab\nmetadata: {name: held, finalizers: [example.com/hold]}\nspec: {image: x}\n";
    c.kubectl_in(&["create", "-f", "-"], Some(held));
    c.kubectl(&[
        "delete",
        "crd",
        "crontabs.stable.example.com",
        "--wait=false",
    ]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let crd = get_json(&c, &["get", "crd", "crontabs.stable.example.com"]);
        let terminating = crd["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Terminating")
            .cloned()
            .unwrap_or(Value::Null);
        let plain_gone = !c
            .kubectl(&["get", "crontabs", "-o", "name"])
            .contains("plain");
        if plain_gone && terminating["status"] == "True" {
            assert!(crd["metadata"]["finalizers"].as_array().is_some_and(|f| f
                .iter()
                .any(|f| f == "customresourcecleanup.apiextensions.k8s.io")));
            break;
        }
        assert!(Instant::now() < deadline, "cleanup did not start: {crd}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let held_obj = get_json(&c, &["get", "crontab", "held"]);
    assert!(held_obj["metadata"]["deletionTimestamp"].is_string());
    let err = c.kubectl_fails(&["create", "-f", "-"], Some(&crontab("late", "{image: x}")));
    assert!(
        err.contains("create not allowed while custom resource definition is terminating"),
        "{err}"
    );
    c.kubectl(&[
        "patch",
        "crontab",
        "held",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/metadata/finalizers"}]"#,
    ]);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = c.kubectl_output(&["get", "crd", "crontabs.stable.example.com"], None);
        if !out.status.success() {
            break;
        }
        assert!(Instant::now() < deadline, "the CRD was not deleted");
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn explain_reads_nested_custom_fields() {
    let c = start_with_crd(Backend::Sqlite);
    let out = c.kubectl(&["explain", "crontabs.spec.template.containers.name"]);
    assert!(out.contains("The container name."), "{out}");
    let out = c.kubectl(&["explain", "crontabs.spec", "--recursive"]);
    assert!(
        out.contains("containers") && out.contains("replicas"),
        "{out}"
    );
}

on_both_backends!(
    pruning_defaulting_and_validation,
    versions_convert_with_none
);
