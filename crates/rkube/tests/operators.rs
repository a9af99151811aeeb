//! Operators written with the usual frameworks run unmodified against rkube (issue 23 item 5): a
//! Python operator on kopf (from PyPI; `scripts/test.sh` installs it) and a kube-rs
//! `kube::runtime::Controller` each reconcile a custom resource with a status, events and a
//! finalizer.

mod support;

use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::runtime::finalizer::{finalizer, Event as Finalized};
use kube::runtime::watcher;
use kube::Resource;
use serde_json::{json, Value};
use support::{Backend, Cluster};

fn crd(plural: &str, kind: &str) -> String {
    format!(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: {plural}.ops.example.com}}
spec:
  group: ops.example.com
  scope: Namespaced
  names: {{plural: {plural}, singular: {singular}, kind: {kind}}}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {{status: {{}}}}
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties: {{size: {{type: integer}}}}
          status: {{type: object, x-kubernetes-preserve-unknown-fields: true}}
"#,
        singular = kind.to_lowercase()
    )
}

/// A cluster with the CRD of `plural`/`kind` established and namespace `shop`.
fn cluster_with(plural: &str, kind: &str) -> Cluster {
    let cluster = Cluster::start(Backend::Sqlite);
    cluster.kubectl_in(&["apply", "-f", "-"], Some(&crd(plural, kind)));
    cluster.kubectl(&[
        "wait",
        "--for=condition=Established",
        &format!("crd/{plural}.ops.example.com"),
        "--timeout=30s",
    ]);
    cluster.kubectl(&["create", "namespace", "shop"]);
    cluster
}

/// The operator process, killed when the test ends however it ends.
struct Operator(Child);

impl Drop for Operator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_until<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn get(c: &Cluster, kind: &str, name: &str) -> Option<Value> {
    let out = c.kubectl_output(&["get", kind, name, "-n", "shop", "-o", "json"], None);
    out.status
        .success()
        .then(|| serde_json::from_slice(&out.stdout).ok())
        .flatten()
}

fn event_reasons(c: &Cluster, name: &str) -> Vec<String> {
    let out = c.kubectl(&[
        "get",
        "events",
        "-n",
        "shop",
        "--field-selector",
        &format!("involvedObject.name={name}"),
        "-o",
        "json",
    ]);
    let list: Value = serde_json::from_str(&out).unwrap();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|e| e["reason"].as_str().map(String::from))
        .collect()
}

#[test]
fn a_kopf_operator_reconciles_widgets() {
    let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
    let has_kopf = Command::new(&python)
        .args(["-c", "import kopf"])
        .status()
        .is_ok_and(|s| s.success());
    assert!(
        has_kopf,
        "kopf is not installed for {python} (scripts/test.sh installs it: pip install kopf)"
    );
    let cluster = cluster_with("widgets", "Widget");

    let done = tempfile::tempdir().unwrap();
    let log = std::fs::File::create(cluster.dir.path().join("kopf.log")).unwrap();
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/operators/kopf_operator.py"
    );
    let _operator = Operator(
        Command::new(&python)
            .args([
                "-m",
                "kopf",
                "run",
                "--standalone",
                "--all-namespaces",
                script,
            ])
            .env("KUBECONFIG", &cluster.kubeconfig)
            .env("WIDGET_DONE_DIR", done.path())
            .env("HOME", cluster.dir.path())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start kopf"),
    );
    let kopf_log =
        || std::fs::read_to_string(cluster.dir.path().join("kopf.log")).unwrap_or_default();

    cluster.kubectl_in(
        &["apply", "-f", "-"],
        Some("apiVersion: ops.example.com/v1\nkind: Widget\nmetadata: {name: w1, namespace: shop}\nspec: {size: 3}\n"),
    );
    let w = wait_until("the widget's status", Duration::from_secs(60), || {
        get(&cluster, "widget", "w1").filter(|w| w["status"]["phase"] == "Ready")
    });
    assert_eq!(w["status"]["parts"], 6, "{w}\n{}", kopf_log());
    // kopf keeps a handler's result in the status under its name.
    assert_eq!(w["status"]["created"]["observedSize"], 3, "{w}");
    let finalizers = w["metadata"]["finalizers"].to_string();
    assert!(
        finalizers.contains("kopf.zalando.org/KopfFinalizerMarker"),
        "{w}"
    );
    wait_until("the Assembled event", Duration::from_secs(30), || {
        event_reasons(&cluster, "w1")
            .contains(&"Assembled".to_string())
            .then_some(())
    });

    cluster.kubectl(&[
        "patch",
        "widget",
        "w1",
        "-n",
        "shop",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":5}}"#,
    ]);
    wait_until("the resize", Duration::from_secs(60), || {
        get(&cluster, "widget", "w1").filter(|w| w["status"]["parts"] == 10)
    });
    wait_until("the Resized event", Duration::from_secs(30), || {
        event_reasons(&cluster, "w1")
            .contains(&"Resized".to_string())
            .then_some(())
    });

    // Deletion waits for kopf's deletion handler, which then removes its finalizer.
    cluster.kubectl(&["delete", "widget", "w1", "-n", "shop", "--wait=false"]);
    wait_until("the widget to go", Duration::from_secs(60), || {
        get(&cluster, "widget", "w1").is_none().then_some(())
    });
    assert_eq!(
        std::fs::read_to_string(done.path().join("shop.w1")).unwrap_or_default(),
        "deleted\n",
        "{}",
        kopf_log()
    );
}

const FINALIZER: &str = "ops.example.com/cleanup";

/// What the kube-rs operator's reconciler needs.
struct Context {
    client: kube::Client,
    resource: ApiResource,
    recorder: Recorder,
    /// Gadgets whose cleanup ran, by name.
    cleaned: Mutex<Vec<String>>,
}

#[derive(Debug)]
struct ReconcileError(kube::Error);

impl std::fmt::Display for ReconcileError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "reconcile: {}", self.0)
    }
}

impl std::error::Error for ReconcileError {}

/// The status a gadget of `size` should have, and the status and event written when it differs.
async fn apply(
    api: &Api<DynamicObject>,
    ctx: &Context,
    gadget: &DynamicObject,
) -> Result<Action, ReconcileError> {
    let size = gadget.data["spec"]["size"].as_i64().unwrap_or(1);
    if gadget.data["status"]["parts"].as_i64() == Some(size * 2) {
        return Ok(Action::await_change());
    }
    let name = gadget.metadata.name.clone().unwrap_or_default();
    let status = json!({"status": {"phase": "Ready", "parts": size * 2,
        "observedGeneration": gadget.metadata.generation}});
    api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .map_err(ReconcileError)?;
    let event = Event {
        type_: EventType::Normal,
        reason: "Assembled".into(),
        note: Some(format!("gadget {name} has {} parts", size * 2)),
        action: "Reconcile".into(),
        secondary: None,
    };
    ctx.recorder
        .publish(&event, &gadget.object_ref(&ctx.resource))
        .await
        .map_err(ReconcileError)?;
    Ok(Action::await_change())
}

async fn reconcile(
    gadget: Arc<DynamicObject>,
    ctx: Arc<Context>,
) -> Result<Action, kube::runtime::finalizer::Error<ReconcileError>> {
    let namespace = gadget.metadata.namespace.clone().unwrap_or_default();
    let api: Api<DynamicObject> =
        Api::namespaced_with(ctx.client.clone(), &namespace, &ctx.resource);
    finalizer(&api, FINALIZER, gadget, |event| async {
        match event {
            Finalized::Apply(g) => apply(&api, &ctx, &g).await,
            Finalized::Cleanup(g) => {
                let name = g.metadata.name.clone().unwrap_or_default();
                ctx.cleaned.lock().unwrap().push(name);
                Ok(Action::await_change())
            }
        }
    })
    .await
}

#[test]
fn a_kube_rs_controller_reconciles_gadgets() {
    let cluster = cluster_with("gadgets", "Gadget");
    let rt = support::runtime();
    let client = rt.block_on(cluster.client());
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("ops.example.com", "v1", "Gadget"),
        "gadgets",
    );
    let reporter = Reporter {
        controller: "gadget-controller".into(),
        instance: Some("test".into()),
    };
    let ctx = Arc::new(Context {
        client: client.clone(),
        resource: resource.clone(),
        recorder: Recorder::new(client.clone(), reporter),
        cleaned: Mutex::new(Vec::new()),
    });
    let all: Api<DynamicObject> = Api::all_with(client, &resource);
    let controller = Controller::new_with(all, watcher::Config::default(), resource)
        .run(
            reconcile,
            |_, _, _| Action::requeue(Duration::from_millis(500)),
            ctx.clone(),
        )
        .for_each(|result| async move {
            if let Err(e) = result {
                eprintln!("gadget controller: {e:?}");
            }
        });
    let running = rt.spawn(controller);

    cluster.kubectl_in(
        &["apply", "-f", "-"],
        Some("apiVersion: ops.example.com/v1\nkind: Gadget\nmetadata: {name: g1, namespace: shop}\nspec: {size: 4}\n"),
    );
    let g = wait_until("the gadget's status", Duration::from_secs(60), || {
        get(&cluster, "gadget", "g1").filter(|g| g["status"]["parts"] == 8)
    });
    assert_eq!(g["status"]["phase"], "Ready", "{g}");
    assert_eq!(g["status"]["observedGeneration"], 1, "{g}");
    assert_eq!(g["metadata"]["finalizers"], json!([FINALIZER]), "{g}");
    wait_until("the Assembled event", Duration::from_secs(30), || {
        event_reasons(&cluster, "g1")
            .contains(&"Assembled".to_string())
            .then_some(())
    });

    cluster.kubectl(&[
        "patch",
        "gadget",
        "g1",
        "-n",
        "shop",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":6}}"#,
    ]);
    wait_until("the resize", Duration::from_secs(60), || {
        get(&cluster, "gadget", "g1")
            .filter(|g| g["status"]["parts"] == 12 && g["status"]["observedGeneration"] == 2)
    });

    cluster.kubectl(&["delete", "gadget", "g1", "-n", "shop", "--wait=false"]);
    wait_until("the gadget to go", Duration::from_secs(60), || {
        get(&cluster, "gadget", "g1").is_none().then_some(())
    });
    assert_eq!(*ctx.cleaned.lock().unwrap(), vec!["g1".to_string()]);
    running.abort();
}
