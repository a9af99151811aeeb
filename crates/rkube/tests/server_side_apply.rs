//! Server-side apply with real kubectl: two field managers, a conflict (409 naming the manager and the
//! field), a forced takeover, a shared field, fields an applier stops applying, and the exact
//! managedFields entries; plus the Update entries creates, patches and scale write.

mod support;

use serde_json::{json, Value};
use support::{Backend, Cluster};

fn config(replicas: u32, image: &str, with_label: bool) -> String {
    let labels = if with_label {
        "\n  labels: {team: blue}"
    } else {
        ""
    };
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: ssa{labels}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: ssa}}}}\n  template:\n    metadata: {{labels: {{app: ssa}}}}\n    spec:\n      containers:\n      - name: main\n        image: {image}\n"
    )
}

fn managed_fields(c: &Cluster) -> Vec<Value> {
    let out = c.kubectl(&[
        "get",
        "deployment",
        "ssa",
        "-o",
        "json",
        "--show-managed-fields",
    ]);
    let obj: Value = serde_json::from_str(&out).unwrap();
    obj["metadata"]["managedFields"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn entry<'a>(entries: &'a [Value], manager: &str) -> &'a Value {
    entries
        .iter()
        .find(|e| e["manager"] == manager)
        .unwrap_or_else(|| panic!("no managedFields entry of {manager}: {entries:?}"))
}

fn server_side_apply(backend: Backend) {
    let c = Cluster::start(backend);
    let apply = |manager: &str, manifest: &str, force: bool| {
        let mut args = vec![
            "apply",
            "--server-side",
            "--field-manager",
            manager,
            "-f",
            "-",
        ];
        if force {
            args.push("--force-conflicts");
        }
        c.kubectl_output(&args, Some(manifest))
    };

    // Alice creates by applying.
    let out = apply("alice", &config(2, "nginx:1.25", true), false);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "deployment.apps/ssa serverside-applied\n"
    );
    let entries = managed_fields(&c);
    assert_eq!(entries.len(), 1);
    let alice = entry(&entries, "alice");
    assert_eq!(alice["operation"], "Apply");
    assert_eq!(alice["apiVersion"], "apps/v1");
    assert_eq!(alice["fieldsType"], "FieldsV1");
    assert_eq!(
        alice["fieldsV1"],
        json!({
            "f:metadata": {"f:labels": {"f:team": {}}},
            "f:spec": {
                "f:replicas": {},
                "f:selector": {"f:matchLabels": {"f:app": {}}},
                "f:template": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"main\"}": {".": {}, "f:image": {}, "f:name": {}}}}
                }
            }
        })
    );

    // Bob applies the same image (shared) and other replicas: a conflict with alice, nothing changes.
    let out = apply("bob", &config(3, "nginx:1.25", false), false);
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: Apply failed with 1 conflict: conflict with \"alice\" using apps/v1: .spec.replicas\n"),
        "{stderr}"
    );
    assert_eq!(
        c.kubectl(&[
            "get",
            "deployment",
            "ssa",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "2"
    );

    // Forced: bob takes the replicas; both own the image.
    let out = apply("bob", &config(3, "nginx:1.25", false), true);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        c.kubectl(&[
            "get",
            "deployment",
            "ssa",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "3"
    );
    let entries = managed_fields(&c);
    assert_eq!(entries.len(), 2);
    let (alice, bob) = (entry(&entries, "alice"), entry(&entries, "bob"));
    assert!(
        alice["fieldsV1"]["f:spec"].get("f:replicas").is_none(),
        "{alice}"
    );
    assert_eq!(bob["fieldsV1"]["f:spec"]["f:replicas"], json!({}));
    let image = |e: &Value| {
        e["fieldsV1"]["f:spec"]["f:template"]["f:spec"]["f:containers"]["k:{\"name\":\"main\"}"]
            ["f:image"]
            .clone()
    };
    assert_eq!((image(alice), image(bob)), (json!({}), json!({})));

    // Alice drops her label and the replicas from her configuration: the label goes (nobody else owns
    // it); the shared image stays.
    let alice_config = config(3, "nginx:1.25", false).replace("  replicas: 3\n", "");
    let out = apply("alice", &alice_config, false);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let obj: Value =
        serde_json::from_str(&c.kubectl(&["get", "deployment", "ssa", "-o", "json"])).unwrap();
    assert!(
        obj["metadata"].get("labels").is_none(),
        "{}",
        obj["metadata"]
    );
    assert_eq!(obj["spec"]["replicas"], 3);
    assert_eq!(
        obj["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.25"
    );

    // Alice changes the shared image: a conflict with bob now.
    let out = apply(
        "alice",
        &alice_config.replace("nginx:1.25", "nginx:1.26"),
        false,
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("conflict with \"bob\" using apps/v1: .spec.template.spec.containers[name=\"main\"].image"),
        "{stderr}"
    );

    // An imperative scale is an Update through the scale subresource and takes the replicas from bob.
    c.kubectl(&["scale", "deployment", "ssa", "--replicas=4"]);
    let entries = managed_fields(&c);
    let scaler = entries
        .iter()
        .find(|e| e["operation"] == "Update")
        .unwrap_or_else(|| panic!("no Update entry: {entries:?}"));
    assert_eq!(scaler["subresource"], "scale");
    assert_eq!(scaler["fieldsV1"], json!({"f:spec": {"f:replicas": {}}}));
    assert!(entry(&entries, "bob")["fieldsV1"]["f:spec"]
        .get("f:replicas")
        .is_none());

    // Creates record what they set under kubectl's manager name; the diff of a server-side apply works.
    c.kubectl(&["create", "configmap", "plain", "--from-literal=a=b"]);
    let cm: Value = serde_json::from_str(&c.kubectl(&[
        "get",
        "configmap",
        "plain",
        "-o",
        "json",
        "--show-managed-fields",
    ]))
    .unwrap();
    assert_eq!(
        cm["metadata"]["managedFields"][0]["manager"],
        "kubectl-create"
    );
    assert_eq!(
        cm["metadata"]["managedFields"][0]["fieldsV1"],
        json!({"f:data": {"f:a": {}}})
    );
    let diff = c.kubectl_output(
        &[
            "diff",
            "--server-side",
            "--field-manager",
            "bob",
            "--force-conflicts",
            "-f",
            "-",
        ],
        Some(&config(5, "nginx:1.25", false)),
    );
    assert_eq!(
        diff.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&diff.stderr)
    );
    assert!(String::from_utf8_lossy(&diff.stdout).contains("+  replicas: 5"));
    assert_eq!(
        c.kubectl(&[
            "get",
            "deployment",
            "ssa",
            "-o",
            "jsonpath={.spec.replicas}"
        ]),
        "4"
    );

    // Apply needs a field manager (kubectl always sends one; a bare request does not).
    support::runtime().block_on(async {
        let client = c.client().await;
        let req = http::Request::patch("/apis/apps/v1/namespaces/default/deployments/ssa")
            .header(http::header::CONTENT_TYPE, "application/apply-patch+yaml")
            .body(b"{\"apiVersion\":\"apps/v1\",\"kind\":\"Deployment\"}".to_vec())
            .unwrap();
        match client.request_text(req).await {
            Err(kube::Error::Api(status)) => {
                assert_eq!(status.code, 422);
                assert!(
                    status
                        .message
                        .contains("fieldManager: Required value: is required for apply patch"),
                    "{}",
                    status.message
                );
            }
            other => panic!("apply without a field manager: {other:?}"),
        }
    });
}

on_both_backends!(server_side_apply);
