//! Server-side field validation as upstream's conformance test "FieldValidation"
//! (test/e2e/apimachinery/field_validation.go) and its integration test check it: unknown and
//! duplicate fields in JSON and YAML bodies of built-in kinds and custom resources, on create,
//! update, patch and server-side apply, with `fieldValidation` Strict (errors), Warn (the default:
//! `Warning` headers) and Ignore.

mod support;

use serde_json::{json, Value};
use support::{runtime, Backend, Cluster};

struct Reply {
    status: u16,
    body: String,
    warnings: Vec<String>,
}

impl Reply {
    fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }
    fn message(&self) -> String {
        self.json()["message"].as_str().unwrap_or("").to_string()
    }
}

async fn send(client: &kube::Client, method: &str, uri: &str, ct: &str, body: &str) -> Reply {
    let req = http::Request::builder()
        .method(method)
        .uri(uri)
        .header("Content-Type", ct)
        .body(body.as_bytes().to_vec())
        .expect("request");
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .unwrap_or_else(|e| panic!("{method} {uri}: {e}"));
    let status = resp.status().as_u16();
    let warnings = resp
        .headers()
        .get_all("Warning")
        .iter()
        .map(|v| {
            let text = v.to_str().expect("ascii warning");
            let quoted = text.strip_prefix("299 - ").expect("299 warning");
            serde_json::from_str::<String>(quoted).expect("quoted warning text")
        })
        .collect();
    let body = resp.into_body().collect_bytes().await.expect("body");
    Reply {
        status,
        body: String::from_utf8_lossy(&body).into_owned(),
        warnings,
    }
}

/// The conformance test's Deployment: an unknown field and `replicas` twice.
const INVALID_DEPLOYMENT: &str = r#"{
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "NAME", "labels": {"app": "nginx"}},
    "spec": {
        "unknownField": "foo",
        "replicas": 2,
        "replicas": 3,
        "selector": {"matchLabels": {"app": "nginx"}},
        "template": {
            "metadata": {"labels": {"app": "nginx"}},
            "spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]}
        }
    }
}"#;

const INVALID_DEPLOYMENT_YAML: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: NAME
  labels:
    app: nginx
spec:
  unknown1: val1
  unknownDupe: valDupe
  unknownDupe: valDupe2
  paused: true
  paused: false
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: nginx:latest
        unknownNested: val1
        imagePullPolicy: Always
        imagePullPolicy: Never
";

const DEPLOYMENTS: &str = "/apis/apps/v1/namespaces/default/deployments";

#[test]
fn typed_objects_report_unknown_and_duplicate_fields() {
    let c = Cluster::start(Backend::Sqlite);
    runtime().block_on(async {
        let client = c.client().await;
        let body = |name: &str| INVALID_DEPLOYMENT.replace("NAME", name);

        // Strict: 400 with upstream's message, unknown and duplicate fields in document order.
        let r = send(&client, "POST", &format!("{DEPLOYMENTS}?fieldValidation=Strict&fieldManager=field_validation_mgr"), "application/json", &body("my-dep")).await;
        assert_eq!((r.status, r.json()["reason"].as_str()), (400, Some("BadRequest")), "{}", r.body);
        assert_eq!(
            r.message(),
            r#"Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: unknown field "spec.unknownField", duplicate field "spec.replicas""#
        );
        // Warn (the default): created, one warning per problem, the last value wins.
        let r = send(&client, "POST", DEPLOYMENTS, "application/json", &body("warned")).await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(r.warnings, [r#"unknown field "spec.unknownField""#, r#"duplicate field "spec.replicas""#]);
        assert_eq!(r.json()["spec"]["replicas"], 3);
        assert!(r.json()["spec"].get("unknownField").is_none());
        // Ignore: created, nothing said.
        let r = send(&client, "POST", &format!("{DEPLOYMENTS}?fieldValidation=Ignore"), "application/json", &body("ignored")).await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert!(r.warnings.is_empty(), "{:?}", r.warnings);
        assert_eq!(r.json()["spec"]["replicas"], 3);

        // Unknown metadata fields.
        let meta = body("my-dep").replace(r#""labels": {"app": "nginx"}},"#, r#""unknownMeta": "foo", "labels": {"app": "nginx"}},"#);
        let r = send(&client, "POST", &format!("{DEPLOYMENTS}?fieldValidation=Strict"), "application/json", &meta).await;
        assert_eq!(r.status, 400);
        assert!(r.message().contains(r#"strict decoding error: unknown field "metadata.unknownMeta""#), "{}", r.message());

        // YAML: go-yaml's duplicate-key error first, then unknown fields in sorted key order.
        let yaml = |name: &str| INVALID_DEPLOYMENT_YAML.replace("NAME", name);
        let r = send(&client, "POST", &format!("{DEPLOYMENTS}?fieldValidation=Strict"), "application/yaml", &yaml("yaml-strict")).await;
        assert_eq!(r.status, 400);
        assert_eq!(
            r.message(),
            "Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: yaml: unmarshal errors:\n  line 10: key \"unknownDupe\" already set in map\n  line 12: key \"paused\" already set in map\n  line 26: key \"imagePullPolicy\" already set in map, unknown field \"spec.template.spec.containers[0].unknownNested\", unknown field \"spec.unknown1\", unknown field \"spec.unknownDupe\""
        );
        let yaml_warnings = [
            r#"line 10: key "unknownDupe" already set in map"#,
            r#"line 12: key "paused" already set in map"#,
            r#"line 26: key "imagePullPolicy" already set in map"#,
            r#"unknown field "spec.template.spec.containers[0].unknownNested""#,
            r#"unknown field "spec.unknown1""#,
            r#"unknown field "spec.unknownDupe""#,
        ];
        let r = send(&client, "POST", DEPLOYMENTS, "application/yaml", &yaml("yaml-warn")).await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(r.warnings, yaml_warnings);
        assert_eq!(r.json()["spec"]["paused"], false);
        assert_eq!(r.json()["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"], "Never");
        let r = send(&client, "POST", &format!("{DEPLOYMENTS}?fieldValidation=Ignore"), "application/yaml", &yaml("yaml-ignore")).await;
        assert_eq!((r.status, r.warnings.len()), (201, 0), "{}", r.body);

        // PUT: the same checks.
        let put = body("warned");
        let r = send(&client, "PUT", &format!("{DEPLOYMENTS}/warned?fieldValidation=Strict"), "application/json", &put).await;
        assert_eq!(r.status, 400);
        assert!(r.message().ends_with(r#"strict decoding error: unknown field "spec.unknownField", duplicate field "spec.replicas""#), "{}", r.message());
        let r = send(&client, "PUT", &format!("{DEPLOYMENTS}/yaml-warn"), "application/yaml", &yaml("yaml-warn")).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.warnings, yaml_warnings);

        // Merge patch: the patch's duplicates first, then the patched object's unknown fields;
        // Strict is upstream's 422 on the field `patch`.
        let patch = r#"{"spec": {"unknown1": "val1", "paused": true, "paused": false,
            "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:latest",
            "unknownNested": "val1", "imagePullPolicy": "Always", "imagePullPolicy": "Never"}]}}}}"#;
        let r = send(&client, "PATCH", &format!("{DEPLOYMENTS}/ignored?fieldValidation=Strict"), "application/merge-patch+json", patch).await;
        assert_eq!((r.status, r.json()["reason"].as_str()), (422, Some("Invalid")), "{}", r.body);
        assert!(r.message().starts_with(r#" "" is invalid: patch: Invalid value: "{"#), "{}", r.message());
        assert!(r.message().ends_with(r#"strict decoding error: duplicate field "spec.paused", duplicate field "spec.template.spec.containers[0].imagePullPolicy", unknown field "spec.template.spec.containers[0].unknownNested", unknown field "spec.unknown1""#), "{}", r.message());
        let r = send(&client, "PATCH", &format!("{DEPLOYMENTS}/ignored"), "application/merge-patch+json", patch).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.warnings,
            [
                r#"duplicate field "spec.paused""#,
                r#"duplicate field "spec.template.spec.containers[0].imagePullPolicy""#,
                r#"unknown field "spec.template.spec.containers[0].unknownNested""#,
                r#"unknown field "spec.unknown1""#,
            ]
        );
        // Strategic merge patch, and a JSON patch whose operations have unknown and repeated fields.
        let r = send(&client, "PATCH", &format!("{DEPLOYMENTS}/ignored?fieldValidation=Warn"), "application/strategic-merge-patch+json", r#"{"spec": {"paused": true, "paused": false}}"#).await;
        assert_eq!((r.status, r.warnings.as_slice()), (200, [r#"duplicate field "spec.paused""#.to_string()].as_slice()), "{}", r.body);
        let json_patch = r#"[{"op": "add", "path": "/spec/unknown1", "value": "val1", "foo": "bar"},
            {"op": "add", "path": "/spec/unknown2", "path": "/spec/paused", "value": true}]"#;
        let r = send(&client, "PATCH", &format!("{DEPLOYMENTS}/ignored"), "application/json-patch+json", json_patch).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(
            r.warnings,
            [
                r#"json patch unknown field "[0].foo""#,
                r#"json patch duplicate field "[1].path""#,
                r#"unknown field "spec.unknown1""#,
            ]
        );
        let r = send(&client, "PATCH", &format!("{DEPLOYMENTS}/ignored?fieldValidation=Ignore"), "application/merge-patch+json", patch).await;
        assert_eq!((r.status, r.warnings.len()), (200, 0), "{}", r.body);

        // Server-side apply: repeated keys as go-yaml's strict mode reports them.
        let apply = r#"{
  "apiVersion": "apps/v1",
  "kind": "Deployment",
  "metadata": {"name": "applied"},
  "spec": {
    "paused": false,
    "paused": true,
    "selector": {"matchLabels": {"app": "nginx"}},
    "template": {"metadata": {"labels": {"app": "nginx"}}, "spec": {"containers": [{"name": "nginx", "image": "nginx:latest"}]}}
  }
}"#;
        let r = send(&client, "PATCH", &format!("{DEPLOYMENTS}/applied?fieldManager=apply_test&fieldValidation=Strict"), "application/apply-patch+yaml", apply).await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert_eq!(r.message(), "error strict decoding YAML: error converting YAML to JSON: yaml: unmarshal errors:\n  line 7: key \"paused\" already set in map");
        let r = send(&client, "PATCH", &format!("{DEPLOYMENTS}/applied?fieldManager=apply_test"), "application/apply-patch+yaml", apply).await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(r.warnings, [r#"line 7: key "paused" already set in map"#]);
        assert_eq!(r.json()["spec"]["paused"], true);
    });
}

/// A CRD as the conformance test makes them (cluster-scoped, kind `Noxu`, `spec` with the given
/// schema), each in a group of its own (`<plural>.example.com`).
fn noxu_crd(plural: &str, spec_schema: Value) -> String {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("noxus.{plural}.example.com")},
        "spec": {
            "group": format!("{plural}.example.com"),
            "scope": "Cluster",
            "names": {"plural": "noxus", "singular": "noxu", "kind": "Noxu", "listKind": "NoxuList"},
            "versions": [{"name": "v1beta1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec_schema}}}}]
        }
    })
    .to_string()
}

fn ports_schema() -> Value {
    json!({"type": "array", "x-kubernetes-list-map-keys": ["containerPort", "protocol"], "x-kubernetes-list-type": "map",
        "items": {"type": "object", "required": ["containerPort", "protocol"], "properties": {
            "containerPort": {"format": "int32", "type": "integer"}, "hostIP": {"type": "string"},
            "hostPort": {"format": "int32", "type": "integer"}, "name": {"type": "string"}, "protocol": {"type": "string"}}}})
}

fn cron_schema() -> Value {
    json!({"type": "string", "pattern": r"^(\d+|\*)(/\d+)?(\s+(\d+|\*)(/\d+)?){4}$"})
}

#[test]
fn custom_resources_report_unknown_and_duplicate_fields() {
    let c = Cluster::start(Backend::Sqlite);
    let crds = [
        (
            "validated",
            json!({"type": "object", "properties": {"foo": {"type": "string"}, "cronSpec": cron_schema(), "ports": ports_schema()}}),
        ),
        (
            "schemaless",
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
        ),
        (
            "embeddeds",
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {
            "template": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {
                "metadata": {"type": "object", "properties": {"name": {"type": "string"}}}, "spec": {"type": "object"}}},
            "foo": {"type": "string"}, "cronSpec": cron_schema(), "ports": ports_schema()}}),
        ),
    ];
    for (plural, schema) in &crds {
        c.kubectl_in(
            &["apply", "-f", "-"],
            Some(&noxu_crd(plural, schema.clone())),
        );
    }
    for (plural, _) in &crds {
        c.kubectl(&[
            "wait",
            "--for=condition=Established",
            &format!("crd/noxus.{plural}.example.com"),
            "--timeout=30s",
        ]);
    }
    runtime().block_on(async {
        let client = c.client().await;
        let base = |group: &str| format!("/apis/{group}.example.com/v1beta1/noxus");
        let apply = |group: &str, name: &str| format!("{}/{name}?fieldManager=field_validation_mgr&fieldValidation=Strict", base(group));
        let yaml = |group: &str, extra_meta: &str, extra_root: &str, spec: &str| {
            format!("\napiVersion: {group}.example.com/v1beta1\nkind: Noxu\nmetadata:\n  name: mytest\n{extra_meta}  finalizers:\n  - test-finalizer\n{extra_root}spec:\n{spec}  cronSpec: \"* * * * */5\"\n  ports:\n  - name: x\n    containerPort: 80\n    protocol: TCP")
        };

        // A valid CR applies; a CRD preserving unknown fields takes any.
        let r = send(&client, "PATCH", &apply("validated", "mytest"), "application/apply-patch+yaml", &yaml("validated", "", "", "  foo: foo1\n")).await;
        assert_eq!(r.status, 201, "{}", r.body);
        let r = send(&client, "PATCH", &apply("schemaless", "mytest"), "application/apply-patch+yaml", &yaml("schemaless", "", "", "  unknown: uk1\n")).await;
        assert_eq!(r.status, 201, "{}", r.body);
        // Undeclared fields fail the apply as upstream's typed conversion fails it.
        let r = send(&client, "PATCH", &apply("validated", "other"), "application/apply-patch+yaml", &yaml("validated", "", "unknownField: unknown\n", "  foo: foo1\n").replace("name: mytest", "name: other")).await;
        assert_eq!(r.status, 500, "{}", r.body);
        assert!(r.body.contains(".unknownField: field not declared in schema"), "{}", r.body);
        let embedded = "  template:\n    apiversion: foo/v1\n    kind: Sub\n    metadata:\n        unknownSubMeta: unknown\n        name: subobject\n        namespace: default\n  foo: foo1\n";
        let r = send(&client, "PATCH", &apply("embeddeds", "mytest"), "application/apply-patch+yaml", &yaml("embeddeds", "  unknownMeta: unknown\n", "", embedded)).await;
        assert!(r.body.contains(".spec.template.metadata.unknownSubMeta: field not declared in schema") || r.body.contains(".metadata.unknownMeta: field not declared in schema"), "{}", r.body);
        // Duplicates are found even where unknown fields are preserved.
        let r = send(&client, "PATCH", &apply("embeddeds", "mytest"), "application/apply-patch+yaml", &yaml("embeddeds", "", "", "  unknown: uk1\n  foo: foo1\n  foo: foo2\n")).await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert!(r.body.contains(r#"line 11: key \"foo\" already set in map"#), "{}", r.body);

        // POST, PUT and merge patch of JSON: repeated keys in document order, then unknown
        // fields (metadata, pruned, embedded metadata), each group sorted.
        let cr = |name: &str, rv: &str| format!(r#"{{
            "apiVersion": "embeddeds.example.com/v1beta1", "kind": "Noxu",
            "metadata": {{"name": "{name}", "resourceVersion": "{rv}", "unknownMeta": 1}},
            "spec": {{"unknown1": "val1", "unknownDupe": "valDupe", "unknownDupe": "valDupe2",
                "foo": "val1", "foo": "val2",
                "template": {{"apiVersion": "v1", "kind": "Sub", "metadata": {{"name": "s", "unknownSubMeta": "u"}}}},
                "ports": [{{"name": "portName", "containerPort": 8080, "protocol": "TCP",
                    "hostPort": 8081, "hostPort": 8082, "unknownNested": "val"}}]}}
        }}"#);
        let expected = [
            r#"duplicate field "spec.unknownDupe""#,
            r#"duplicate field "spec.foo""#,
            r#"duplicate field "spec.ports[0].hostPort""#,
            r#"unknown field "metadata.unknownMeta""#,
            r#"unknown field "spec.ports[0].unknownNested""#,
            r#"unknown field "spec.template.metadata.unknownSubMeta""#,
        ];
        let r = send(&client, "POST", &format!("{}?fieldValidation=Strict", base("embeddeds")), "application/json", &cr("posted", "")).await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert_eq!(r.message(), format!(r#"Noxu in version "v1beta1" cannot be handled as a Noxu: strict decoding error: {}"#, expected.join(", ")));
        let r = send(&client, "POST", &base("embeddeds"), "application/json", &cr("posted", "")).await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(r.warnings, expected);
        let created = r.json();
        assert_eq!(created["spec"]["foo"], "val2");
        assert_eq!(created["spec"]["unknown1"], "val1");
        assert_eq!(created["spec"]["ports"][0]["hostPort"], 8082);
        assert!(created["spec"]["ports"][0].get("unknownNested").is_none());
        assert!(created["metadata"].get("unknownMeta").is_none());
        let rv = created["metadata"]["resourceVersion"].as_str().unwrap().to_string();
        let r = send(&client, "PUT", &format!("{}/posted?fieldValidation=Strict", base("embeddeds")), "application/json", &cr("posted", &rv)).await;
        assert_eq!(r.status, 400, "{}", r.body);
        assert!(r.message().ends_with(&expected.join(", ")), "{}", r.message());
        let r = send(&client, "PUT", &format!("{}/posted", base("embeddeds")), "application/json", &cr("posted", &rv)).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.warnings, expected);
        // YAML: go-yaml's error, then the unknown fields.
        let cr_yaml = "apiVersion: validated.example.com/v1beta1\nkind: Noxu\nmetadata:\n  name: yaml\nspec:\n  foo: a\n  foo: b\n  ports:\n  - {containerPort: 1, protocol: TCP, extra: 1}\n";
        let r = send(&client, "POST", &base("validated"), "application/yaml", cr_yaml).await;
        assert_eq!(r.status, 201, "{}", r.body);
        assert_eq!(r.warnings, [r#"line 7: key "foo" already set in map"#, r#"unknown field "spec.ports[0].extra""#]);
        let patch = r#"{"spec": {"foo": "x", "foo": "y", "bogus": 1}}"#;
        let r = send(&client, "PATCH", &format!("{}/yaml?fieldValidation=Strict", base("validated")), "application/merge-patch+json", patch).await;
        assert_eq!(r.status, 422, "{}", r.body);
        assert!(r.message().ends_with(r#"strict decoding error: duplicate field "spec.foo", unknown field "spec.bogus""#), "{}", r.message());
        let r = send(&client, "PATCH", &format!("{}/yaml", base("validated")), "application/merge-patch+json", patch).await;
        assert_eq!(r.status, 200, "{}", r.body);
        assert_eq!(r.warnings, [r#"duplicate field "spec.foo""#, r#"unknown field "spec.bogus""#]);
        assert_eq!(r.json()["spec"]["foo"], "y");
        let r = send(&client, "PATCH", &format!("{}/yaml?fieldValidation=Ignore", base("validated")), "application/merge-patch+json", patch).await;
        assert_eq!((r.status, r.warnings.len()), (200, 0), "{}", r.body);
    });
}
