//! Upstream 1.36's conformance tests of "API operations" lifecycles, replayed through the kube crate
//! against one `rkube server` (the API server alone): the same requests, fields and expected status
//! codes as the e2e tests named in each check, which upstream's conformance suite runs against rkube
//! from outside.
//!
//! One server for the whole file: every lifecycle is a named check in its own namespace (as the e2e
//! framework gives each test one), each reported, before the test fails on any failed check.

#[path = "api_operations/certificates.rs"]
mod certificates;
#[path = "api_operations/events.rs"]
mod events;
#[path = "api_operations/services.rs"]
mod services;
mod support;

use std::fmt::Debug;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::networking::v1::{Ingress, IngressClass};
use k8s_openapi::serde::de::DeserializeOwned;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams,
};
use kube::Client;
use serde_json::{json, Value};
use support::{runtime, Cluster};

/// How long any awaited watch event may take (upstream: `wait.ForeverTestTimeout`, 30 s).
pub const DEADLINE: Duration = Duration::from_secs(30);

#[test]
fn api_operations() {
    let started = Instant::now();
    let c = Cluster::start(support::Backend::Sqlite);
    let mut report = Report::default();
    runtime().block_on(async {
        let client = c.client().await;
        let checks: Vec<(&str, &str)> = vec![
            ("cronjob-ops", "[sig-apps] CronJob should support CronJob API operations"),
            ("ingress-ops", "[sig-network] Ingress API should support creating Ingress API operations"),
            ("ingressclass-ops", "[sig-network] IngressClass API should support creating IngressClass API operations"),
            ("events-v1", "[sig-instrumentation] Events API should ensure that an event can be fetched, patched, deleted, and listed"),
            ("events-v1-collection", "[sig-instrumentation] Events API should delete a collection of events"),
            ("core-events", "[sig-instrumentation] Events should manage the lifecycle of an event"),
            ("core-events-collection", "[sig-instrumentation] Events should delete a collection of events"),
            ("csr-ops", "[sig-auth] Certificates API should support CSR API operations"),
            ("service-status", "[sig-network] Services should complete a service status lifecycle"),
            ("endpoint-lifecycle", "[sig-network] Endpoints should test the lifecycle of an Endpoint"),
        ];
        for (ns, name) in checks {
            let client = client.clone();
            report
                .check(name, async move {
                    namespace(&client, ns).await;
                    match ns {
                        "cronjob-ops" => cronjob_api_operations(client, ns).await,
                        "ingress-ops" => ingress_api_operations(client, ns).await,
                        "ingressclass-ops" => ingress_class_api_operations(client, ns).await,
                        "events-v1" => events::events_v1_lifecycle(client, ns).await,
                        "events-v1-collection" => events::events_v1_collection(client, ns).await,
                        "core-events" => events::core_event_lifecycle(client, ns).await,
                        "core-events-collection" => events::core_events_collection(client, ns).await,
                        "csr-ops" => certificates::csr_api_operations(client, ns).await,
                        "service-status" => services::service_status_lifecycle(client, ns).await,
                        "endpoint-lifecycle" => services::endpoint_lifecycle(client, ns).await,
                        other => unreachable!("{other}"),
                    }
                })
                .await;
        }
    });
    drop(c);
    report.finish(started.elapsed());
}

/// Named checks, each run to its end or its first failed assertion, reported together.
#[derive(Default)]
struct Report {
    results: Vec<(String, Duration, Option<String>)>,
}

impl Report {
    async fn check(&mut self, name: &str, body: impl Future<Output = ()>) {
        let start = Instant::now();
        let outcome = AssertUnwindSafe(body).catch_unwind().await;
        let failure = outcome.err().map(|panic| {
            panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "panicked".into())
        });
        self.results
            .push((name.to_string(), start.elapsed(), failure));
    }

    fn finish(self, elapsed: Duration) {
        let failed: Vec<_> = self.results.iter().filter(|r| r.2.is_some()).collect();
        eprintln!(
            "\n=== api_operations: {} checks, {} failed, {elapsed:.1?}",
            self.results.len(),
            failed.len()
        );
        for (name, took, failure) in &self.results {
            let verdict = if failure.is_some() { "FAIL" } else { "ok  " };
            eprintln!("{verdict} {name} ({took:.1?})");
        }
        if !failed.is_empty() {
            let text: Vec<String> = failed
                .iter()
                .map(|(name, _, failure)| {
                    format!("--- {name}:\n{}", failure.as_deref().unwrap_or(""))
                })
                .collect();
            panic!(
                "{} of {} checks failed:\n{}",
                failed.len(),
                self.results.len(),
                text.join("\n")
            );
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Helpers shared by the checks.

pub fn from<T: DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("valid object")
}

/// The HTTP status of a failed request.
pub fn code<T: Debug>(r: Result<T, kube::Error>) -> u16 {
    match r {
        Err(kube::Error::Api(s)) => s.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

pub async fn namespace(client: &Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    api.create(
        &PostParams::default(),
        &from(json!({"metadata": {"name": name}})),
    )
    .await
    .unwrap_or_else(|e| panic!("create namespace {name}: {e}"));
}

/// `GET` of a path as JSON (the dynamic client's `Get(..., "status")`).
pub async fn get_json(client: &Client, path: &str) -> Value {
    let req = http::Request::get(path).body(Vec::new()).unwrap();
    let text = client
        .request_text(req)
        .await
        .unwrap_or_else(|e| panic!("GET {path}: {e}"));
    serde_json::from_str(&text).expect("JSON")
}

/// The metadata of `obj` as JSON.
pub fn meta<K: serde::Serialize>(obj: &K) -> Value {
    serde_json::to_value(obj).expect("serialize")["metadata"].clone()
}

/// Reads a watch (started by the e2e test before its patch and update) until an event's object
/// satisfies `done`; every event before must be `MODIFIED`, as upstream's loop asserts.
pub async fn until_modified<K: Clone + Debug>(
    stream: impl Stream<Item = kube::Result<WatchEvent<K>>>,
    what: &str,
    done: impl Fn(&K) -> bool,
) {
    let mut stream = std::pin::pin!(stream);
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let event = tokio::time::timeout_at(deadline, stream.next())
            .await
            .unwrap_or_else(|_| panic!("{what}: timed out waiting for watch event"))
            .unwrap_or_else(|| panic!("{what}: watch channel should not close"))
            .unwrap_or_else(|e| panic!("{what}: watch error: {e}"));
        match event {
            WatchEvent::Modified(obj) => {
                if done(&obj) {
                    return;
                }
            }
            WatchEvent::Bookmark(_) => {}
            other => panic!("{what}: expected a MODIFIED event, got {other:?}"),
        }
    }
}

fn annotation(m: &Value, key: &str) -> Option<String> {
    m["annotations"][key].as_str().map(str::to_string)
}

/// The finalizer expectation of the CronJob and Ingress tests: a deleted object still listed is
/// being deleted and has finalizers.
fn expect_finalizer(m: &Value, step: &str) {
    assert!(
        !m["deletionTimestamp"].is_null(),
        "expected deletionTimestamp, got nil on step {step:?}: {m}"
    );
    assert!(
        m["finalizers"].as_array().is_some_and(|f| !f.is_empty()),
        "expected finalizers, got none on step {step:?}: {m}"
    );
}

// ---------------------------------------------------------------------------------------------
// test/e2e/apps/cronjob.go: "should support CronJob API operations".

fn test_cronjob(name: &str, label: &str) -> CronJob {
    // newTestCronJob("test-api", "* */1 * * ?", AllowConcurrent, successCommand, 1, 0)
    from(json!({
        "kind": "CronJob",
        "metadata": {"name": name, "labels": {"special-label": label}},
        "spec": {
            "schedule": "* */1 * * ?",
            "concurrencyPolicy": "Allow",
            "successfulJobsHistoryLimit": 1,
            "failedJobsHistoryLimit": 0,
            "jobTemplate": {"spec": {
                "parallelism": 1, "completions": 1, "backoffLimit": 1,
                "template": {"spec": {
                    "restartPolicy": "OnFailure",
                    "volumes": [{"name": "data", "emptyDir": {}}],
                    "containers": [{
                        "name": "c", "image": "busybox", "command": ["/bin/true"],
                        "volumeMounts": [{"mountPath": "/data", "name": "data"}]
                    }]
                }}
            }}
        }
    }))
}

/// RFC 3339 at second precision, as `metav1.Now().Rfc3339Copy()`.
fn now_rfc3339() -> String {
    jiff::Timestamp::from_second(jiff::Timestamp::now().as_second())
        .unwrap()
        .to_string()
}

async fn cronjob_api_operations(client: Client, ns: &str) {
    let label = format!("special-label={ns}");
    let cjs: Api<CronJob> = Api::namespaced(client.clone(), ns);
    let created = cjs
        .create(&PostParams::default(), &test_cronjob("test-api", ns))
        .await
        .expect("creating");
    let gotten = cjs.get("test-api").await.expect("getting");
    assert_eq!(gotten.metadata.uid, created.metadata.uid);

    let list = cjs
        .list(&ListParams::default().labels(&label))
        .await
        .expect("listing");
    assert_eq!(list.items.len(), 1, "filtered list should have 1 item");
    let rv = list.metadata.resource_version.clone().unwrap();
    let watch = cjs
        .watch(&WatchParams::default().labels(&label), &rv)
        .await
        .expect("watching");

    let all: Api<CronJob> = Api::all(client.clone());
    let cluster = all
        .list(&ListParams::default().labels(&label))
        .await
        .expect("cluster-wide listing");
    assert_eq!(cluster.items.len(), 1, "filtered list should have 1 item");
    drop(
        all.watch(&WatchParams::default().labels(&label), &rv)
            .await
            .expect("cluster-wide watching"),
    );

    let patched = cjs
        .patch(
            "test-api",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"patched": "true"}}})),
        )
        .await
        .expect("patching");
    assert_eq!(
        annotation(&meta(&patched), "patched").as_deref(),
        Some("true")
    );

    let mut to_update = cjs.get("test-api").await.expect("get");
    to_update
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("updated".into(), "true".into());
    let updated = cjs
        .replace("test-api", &PostParams::default(), &to_update)
        .await
        .expect("updating");
    assert_eq!(
        annotation(&meta(&updated), "updated").as_deref(),
        Some("true")
    );
    until_modified(watch, "cronjob watch", |cj: &CronJob| {
        annotation(&meta(cj), "patched").as_deref() == Some("true")
    })
    .await;

    // /status
    let now1 = now_rfc3339();
    let patched_status = cjs
        .patch_status(
            "test-api",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"patchedstatus": "true"}},
                "status": {"lastScheduleTime": now1}}),
            ),
        )
        .await
        .expect("patching /status");
    let status = serde_json::to_value(&patched_status.status).unwrap();
    assert_eq!(
        status["lastScheduleTime"],
        json!(now1),
        "patched lastScheduleTime"
    );
    assert_eq!(
        annotation(&meta(&patched_status), "patchedstatus").as_deref(),
        Some("true")
    );

    let now2 = jiff::Timestamp::from_second(jiff::Timestamp::now().as_second() + 1)
        .unwrap()
        .to_string();
    let mut status_to_update = cjs.get("test-api").await.expect("get");
    status_to_update
        .status
        .get_or_insert_default()
        .last_schedule_time = Some(from(json!(now2)));
    let updated_status = cjs
        .replace_status("test-api", &PostParams::default(), &status_to_update)
        .await
        .expect("updating /status");
    let status = serde_json::to_value(&updated_status.status).unwrap();
    assert_eq!(
        status["lastScheduleTime"],
        json!(now2),
        "updated lastScheduleTime"
    );

    let gotten_status = get_json(
        &client,
        &format!("/apis/batch/v1/namespaces/{ns}/cronjobs/test-api/status"),
    )
    .await;
    assert_eq!(
        gotten_status["metadata"]["uid"],
        json!(created.metadata.uid),
        "get /status"
    );

    // delete, deletecollection
    cjs.create(&PostParams::default(), &test_cronjob("for-removal", ns))
        .await
        .expect("create for-removal");
    cjs.delete("for-removal", &DeleteParams::default())
        .await
        .expect("deleting");
    match cjs.get("for-removal").await {
        Ok(cj) => expect_finalizer(&meta(&cj), "deleting cronjob"),
        other => assert_eq!(code(other), 404),
    }
    cjs.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels(&label),
    )
    .await
    .expect("deleting a collection");
    let left = cjs
        .list(&ListParams::default().labels(&label))
        .await
        .expect("list");
    assert!(left.items.len() <= 2);
    for cj in &left.items {
        expect_finalizer(&meta(cj), "deleting cronjob collection");
    }
}

// ---------------------------------------------------------------------------------------------
// Discovery steps shared by the Ingress, IngressClass and CSR tests: the group in /apis, the
// version in /apis/<group>, the resources in /apis/<group>/<version>.

pub async fn discovery(client: &Client, group: &str, version: &str, resources: &[&str]) {
    let groups = get_json(client, "/apis").await;
    let found = groups["groups"].as_array().unwrap().iter().any(|g| {
        g["name"] == group
            && g["versions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|v| v["version"] == version)
    });
    assert!(found, "expected {group}/{version} in /apis");
    let g = get_json(client, &format!("/apis/{group}")).await;
    assert!(
        g["versions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v["version"] == version),
        "expected {version} in /apis/{group}: {g}"
    );
    let list = get_json(client, &format!("/apis/{group}/{version}")).await;
    let names: Vec<&str> = list["resources"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    for r in resources {
        assert!(
            names.contains(r),
            "expected {r} in /apis/{group}/{version}: {names:?}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// test/e2e/network/ingress.go: "should support creating Ingress API operations".

fn test_ingress(label: &str, host: &str) -> Ingress {
    from(json!({
        "metadata": {"generateName": "e2e-example-ing", "labels": {"special-label": label}},
        "spec": {
            "defaultBackend": {"service": {"name": "default-backend", "port": {"number": 8080}}},
            "rules": [{"host": host, "http": {"paths": [{
                "path": "/", "pathType": "ImplementationSpecific",
                "backend": {"service": {"name": "test-backend", "port": {"number": 8080}}}
            }]}}]
        },
        "status": {"loadBalancer": {}}
    }))
}

async fn ingress_api_operations(client: Client, ns: &str) {
    let label = format!("special-label={ns}");
    discovery(&client, "networking.k8s.io", "v1", &["ingresses"]).await;
    let ings: Api<Ingress> = Api::namespaced(client.clone(), ns);
    let pp = PostParams::default();
    ings.create(&pp, &test_ingress(ns, "host1.bar.com"))
        .await
        .expect("creating");
    ings.create(&pp, &test_ingress(ns, "host2.bar.com"))
        .await
        .expect("creating");
    let created = ings
        .create(&pp, &test_ingress(ns, "host3.bar.com"))
        .await
        .expect("creating");
    let name = created.metadata.name.clone().unwrap();
    assert!(name.starts_with("e2e-example-ing"), "{name}");

    let gotten = ings.get(&name).await.expect("getting");
    assert_eq!(gotten.metadata.uid, created.metadata.uid);
    let list = ings
        .list(&ListParams::default().labels(&label))
        .await
        .expect("listing");
    assert_eq!(list.items.len(), 3, "filtered list should have 3 items");
    let rv = list.metadata.resource_version.clone().unwrap();
    let watch = ings
        .watch(&WatchParams::default().labels(&label), &rv)
        .await
        .expect("watching");
    let all: Api<Ingress> = Api::all(client.clone());
    let cluster = all
        .list(&ListParams::default().labels(&label))
        .await
        .expect("cluster-wide listing");
    assert_eq!(cluster.items.len(), 3, "filtered list should have 3 items");
    drop(
        all.watch(&WatchParams::default().labels(&label), &rv)
            .await
            .expect("cluster-wide watching"),
    );

    let patched = ings
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"patched": "true"}}})),
        )
        .await
        .expect("patching");
    assert_eq!(
        annotation(&meta(&patched), "patched").as_deref(),
        Some("true")
    );
    let mut to_update = ings.get(&name).await.expect("get");
    to_update
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("updated".into(), "true".into());
    let updated = ings
        .replace(&name, &pp, &to_update)
        .await
        .expect("updating");
    assert_eq!(
        annotation(&meta(&updated), "updated").as_deref(),
        Some("true")
    );
    until_modified(watch, "ingress watch", |i: &Ingress| {
        annotation(&meta(i), "patched").as_deref() == Some("true")
    })
    .await;

    // /status
    let lb1 = json!({"ingress": [{"ip": "169.1.1.1"}]});
    let patched_status = ings
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"patchedstatus": "true"}},
                "status": {"loadBalancer": lb1}}),
            ),
        )
        .await
        .expect("patching /status");
    let status = serde_json::to_value(&patched_status.status).unwrap();
    assert_eq!(
        status["loadBalancer"], lb1,
        "patched object should have the applied loadBalancer status"
    );
    assert_eq!(
        annotation(&meta(&patched_status), "patchedstatus").as_deref(),
        Some("true")
    );

    let lb2 = json!({"ingress": [{"ip": "169.1.1.2"}]});
    let mut status_to_update = ings.get(&name).await.expect("get");
    status_to_update
        .status
        .get_or_insert_default()
        .load_balancer = Some(from(lb2.clone()));
    let updated_status = ings
        .replace_status(&name, &pp, &status_to_update)
        .await
        .expect("updating /status");
    let status = serde_json::to_value(&updated_status.status).unwrap();
    assert_eq!(
        status["loadBalancer"], lb2,
        "updated object expected to have updated loadbalancer status"
    );

    let gotten_status = get_json(
        &client,
        &format!("/apis/networking.k8s.io/v1/namespaces/{ns}/ingresses/{name}/status"),
    )
    .await;
    assert_eq!(
        gotten_status["metadata"]["uid"],
        json!(created.metadata.uid),
        "get /status"
    );

    // delete, deletecollection
    ings.delete(&name, &DeleteParams::default())
        .await
        .expect("deleting");
    match ings.get(&name).await {
        Ok(i) => expect_finalizer(&meta(&i), "deleting createdIngress"),
        other => assert_eq!(code(other), 404),
    }
    let left = ings
        .list(&ListParams::default().labels(&label))
        .await
        .expect("list");
    assert!(
        left.items.len() <= 3,
        "filtered list should have <= 3 items"
    );
    for i in left
        .items
        .iter()
        .filter(|i| i.metadata.name.as_deref() == Some(name.as_str()))
    {
        expect_finalizer(&meta(i), "listing after deleting createdIngress");
    }
    ings.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels(&label),
    )
    .await
    .expect("deleting a collection");
    let left = ings
        .list(&ListParams::default().labels(&label))
        .await
        .expect("list");
    assert!(
        left.items.len() <= 3,
        "filtered list should have <= 3 items"
    );
    for i in &left.items {
        expect_finalizer(&meta(i), "deleting ingress collection");
    }
}

// ---------------------------------------------------------------------------------------------
// test/e2e/network/ingressclass.go: "should support creating IngressClass API operations".

fn test_ingress_class(name: &str, unique: &str) -> IngressClass {
    from(json!({
        "metadata": {"name": name, "labels": {"ingressclass": unique, "special-label": "generic"}},
        "spec": {"controller": "example.com/controller"}
    }))
}

async fn ingress_class_api_operations(client: Client, unique: &str) {
    discovery(&client, "networking.k8s.io", "v1", &["ingressclasses"]).await;
    let ics: Api<IngressClass> = Api::all(client.clone());
    let pp = PostParams::default();
    let ic1 = ics
        .create(&pp, &test_ingress_class("ingressclass1", unique))
        .await
        .expect("creating");
    ics.create(&pp, &test_ingress_class("ingressclass2", unique))
        .await
        .expect("creating");
    ics.create(&pp, &test_ingress_class("ingressclass3", unique))
        .await
        .expect("creating");

    let gotten = ics.get("ingressclass1").await.expect("getting");
    assert_eq!(gotten.metadata.uid, ic1.metadata.uid);
    let list = ics
        .list(&ListParams::default().labels("special-label=generic"))
        .await
        .expect("listing");
    assert_eq!(list.items.len(), 3, "filtered list should have 3 items");
    let label = format!("ingressclass={unique}");
    let rv = list.metadata.resource_version.clone().unwrap();
    let watch = ics
        .watch(&WatchParams::default().labels(&label), &rv)
        .await
        .expect("watching");

    let patched = ics
        .patch(
            "ingressclass1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"patched": "true"}}})),
        )
        .await
        .expect("patching");
    assert_eq!(
        annotation(&meta(&patched), "patched").as_deref(),
        Some("true")
    );
    let mut to_update = patched.clone();
    to_update
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("updated".into(), "true".into());
    let updated = ics
        .replace("ingressclass1", &pp, &to_update)
        .await
        .expect("updating");
    assert_eq!(
        annotation(&meta(&updated), "updated").as_deref(),
        Some("true")
    );
    until_modified(watch, "ingressclass watch", |i: &IngressClass| {
        annotation(&meta(i), "patched").as_deref() == Some("true")
    })
    .await;

    ics.delete("ingressclass1", &DeleteParams::default())
        .await
        .expect("deleting");
    assert_eq!(code(ics.get("ingressclass1").await), 404);
    let left = ics
        .list(&ListParams::default().labels(&label))
        .await
        .expect("list");
    assert_eq!(left.items.len(), 2, "filtered list should have 2 items");
    ics.delete_collection(
        &DeleteParams::default(),
        &ListParams::default().labels(&label),
    )
    .await
    .expect("deleting a collection");
    let left = ics
        .list(&ListParams::default().labels(&label))
        .await
        .expect("list");
    assert_eq!(left.items.len(), 0, "filtered list should have 0 items");
}
