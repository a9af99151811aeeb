//! Kubernetes 1.36's API, as the move to 1.36 is "done when":
//! (a) `kubectl api-resources -o wide` and `kubectl api-versions` equal upstream 1.36's;
//! (b) every resource new in 1.36 (see `api_1_36/kinds.rs`) is created, read, listed, watched,
//! updated, patched, written through its status subresource (where it has one), deleted and
//! deleted by collection in JSON, protobuf and CBOR; `componentstatuses` answers get and list for
//! upstream's three names and refuses create;
//! (c) client-go-style informers (a protobuf LIST, then a WATCH from the list's resourceVersion) sync
//! for every list/watch resource of upstream 1.36, as a 1.36 kube-scheduler and
//! kube-controller-manager need.
//!
//! One server per backend: everything runs as named checks inside one test, each reported (pass, or
//! its failure) before the test fails on any failed check. Servers create objects of their own
//! (default ServiceCIDR, local APIServices, mandatory FlowSchemas...), so every check filters by a
//! label it sets. Protobuf answers are read with upstream's messages (k8s-pb), CBOR and protobuf
//! answers are compared with the JSON answer for the same object.

#[path = "api_1_36/cluster_wide.rs"]
mod cluster_wide;
#[path = "api_1_36/kinds.rs"]
mod kinds;
mod support;
#[path = "api_1_36/wire.rs"]
mod wire;

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::time::{Duration, Instant};

use futures::FutureExt;
use http::{Method, StatusCode};
use kinds::Kind;
use serde_json::{json, Value};
use support::{runtime, Backend, Cluster};
use wire::{Format, Http, Watch, FORMATS};

/// The label every object of the CRUD checks carries: its value is the format of the check.
const LABEL: &str = "api-1-36.rkube.test/format";

/// How long any awaited change (a watch event, a deletion) may take.
const DEADLINE: Duration = Duration::from_secs(20);

fn kubernetes_1_36_api(backend: Backend) {
    let started = Instant::now();
    let c = Cluster::start(backend);
    let mut report = Report::default();
    runtime().block_on(async {
        let http = Http::new(c.client().await);
        // Discovery first: the APIServices of the CRUD checks add (unavailable) aggregated groups.
        report
            .check("discovery: kubectl api-resources -o wide", async {
                cluster_wide::api_resources(&c)
            })
            .await;
        report
            .check("discovery: kubectl api-versions", async {
                cluster_wide::api_versions(&c)
            })
            .await;
        report
            .check("componentstatuses: get, list, create refused", async {
                cluster_wide::component_statuses(&c, &http).await
            })
            .await;
        report
            .check(
                "informers: protobuf LIST then WATCH of every list/watch resource",
                cluster_wide::informers(&http),
            )
            .await;
        report
            .check(
                "informers: streaming lists (sendInitialEvents) of every list/watch resource",
                cluster_wide::streaming_lists(&http),
            )
            .await;

        report
            .check(
                "fixtures: DeviceClass, PriorityLevelConfiguration, MutatingAdmissionPolicy",
                fixtures(&http, true),
            )
            .await;
        for kind in kinds::kinds() {
            for format in FORMATS {
                report
                    .check(
                        &format!("{}.{} in {}", kind.plural, kind.group, format.name()),
                        crud(&http, &kind, format),
                    )
                    .await;
            }
            if kind.status.is_none() {
                report
                    .check(
                        &format!("{}.{}: no status subresource", kind.plural, kind.group),
                        no_status_subresource(&http, &kind),
                    )
                    .await;
            }
        }
        report
            .check("fixtures deleted", fixtures(&http, false))
            .await;
    });
    drop(c);
    report.finish(backend, started.elapsed());
}

on_both_backends!(kubernetes_1_36_api);

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

    fn finish(self, backend: Backend, elapsed: Duration) {
        let failed: Vec<_> = self.results.iter().filter(|r| r.2.is_some()).collect();
        eprintln!(
            "\n=== api_1_36 on {backend:?}: {} checks, {} failed, {elapsed:.1?}",
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
                "{} of {} checks failed on {backend:?}:\n{}",
                failed.len(),
                self.results.len(),
                text.join("\n")
            );
        }
    }
}

/// The objects the checked ones refer to, created (`create`) or deleted, in JSON.
async fn fixtures(http: &Http, create: bool) {
    let fixtures = [
        (
            "/apis/resource.k8s.io/v1/deviceclasses",
            kinds::device_class(kinds::DEVICE_CLASS_FIXTURE),
        ),
        (
            "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations",
            kinds::priority_level(kinds::PLC_FIXTURE),
        ),
        (
            "/apis/admissionregistration.k8s.io/v1/mutatingadmissionpolicies",
            kinds::mutating_admission_policy(kinds::MAP_FIXTURE),
        ),
    ];
    for (collection, object) in fixtures {
        let name = object["metadata"]["name"].as_str().unwrap();
        let (status, body) = if create {
            http.json(Method::POST, collection, Some(&object)).await
        } else {
            http.json(Method::DELETE, &format!("{collection}/{name}"), None)
                .await
        };
        let want = if create {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        };
        assert_eq!(
            status,
            want,
            "{} {collection}/{name}: {body}",
            if create { "POST" } else { "DELETE" }
        );
    }
}

fn with_label(mut object: Value, format: Format) -> Value {
    object["metadata"]["labels"][LABEL] = json!(format.name());
    object
}

/// Whether `needle` is part of `haystack` (every field of every object, every item of every list).
fn contains(haystack: &Value, needle: &Value) -> bool {
    match (haystack, needle) {
        (Value::Object(h), Value::Object(n)) => n
            .iter()
            .all(|(k, v)| h.get(k).is_some_and(|hv| contains(hv, v))),
        (Value::Array(h), Value::Array(n)) => {
            n.iter().all(|nv| h.iter().any(|hv| contains(hv, nv)))
        }
        _ => haystack == needle,
    }
}

/// `got` (an answer in some format) is the object `json` (the JSON answer): equal when both are
/// of the same resourceVersion; otherwise (a controller of the server wrote in between) the same
/// object with the same contents but status.
fn assert_same(what: &str, got: &Value, json: &Value) {
    if got["metadata"]["resourceVersion"] == json["metadata"]["resourceVersion"] {
        assert_eq!(got, json, "{what}: the answer differs from the JSON answer");
        return;
    }
    for key in ["name", "namespace", "uid", "labels", "creationTimestamp"] {
        assert_eq!(
            got["metadata"][key], json["metadata"][key],
            "{what}: metadata.{key} differs from the JSON answer"
        );
    }
    let contents = |v: &Value| {
        let mut v = v.clone();
        let map = v.as_object_mut().unwrap();
        map.remove("metadata");
        map.remove("status");
        v
    };
    assert_eq!(
        contents(got),
        contents(json),
        "{what}: the answer differs from the JSON answer"
    );
}

/// GET `path` in `format` and in JSON until both answers are of one resourceVersion, then compares them.
async fn get_same(http: &Http, path: &str, format: Format, k: &Kind) -> Value {
    let mut last = None;
    for _ in 0..5 {
        let answer = http.call(Method::GET, path, format, None).await;
        answer.expect(StatusCode::OK, &format!("GET {path} in {}", format.name()));
        let got = format.read(&answer, &k.api_version(), k.kind, Some(k.typed));
        let (status, json) = http.json(Method::GET, path, None).await;
        assert_eq!(status, StatusCode::OK, "GET {path}: {json}");
        if got["metadata"]["resourceVersion"] == json["metadata"]["resourceVersion"] {
            assert_eq!(
                got,
                json,
                "GET {path} in {} differs from the JSON answer",
                format.name()
            );
            return got;
        }
        last = Some(got);
    }
    last.expect("an answer")
}

/// Create, get, list, watch, update, patch, status, delete and deletecollection of `k` in `format`.
async fn crud(http: &Http, k: &Kind, format: Format) {
    let fmt = format.name();
    let collection = k.collection();
    let selector = format!("labelSelector={}", LABEL.replace('/', "%2F") + "%3D" + fmt);
    let (a, b) = (
        k.name(fmt, format.index(), 1),
        k.name(fmt, format.index(), 2),
    );
    let api_version = k.api_version();
    let list_kind = format!("{}List", k.kind);

    // LIST (none of ours yet), then WATCH from its resourceVersion.
    let answer = http
        .call(
            Method::GET,
            &format!("{collection}?{selector}"),
            format,
            None,
        )
        .await;
    answer.expect(StatusCode::OK, &format!("LIST {collection} in {fmt}"));
    let list = format.read_list(&answer, &api_version, &list_kind, k);
    assert_eq!(
        list["items"],
        json!([]),
        "LIST {collection}?{selector} before any create"
    );
    let revision = list["metadata"]["resourceVersion"]
        .as_str()
        .expect("list resourceVersion")
        .to_string();
    let mut watch = Watch::open(
        http,
        format,
        &format!("{collection}?watch=true&{selector}&resourceVersion={revision}"),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}"));

    // CREATE, with a status the create must drop when there is a status subresource.
    let status = k.status.as_ref().map(|s| (s.status)());
    let mut object = with_label((k.object)(&a, format.index() * 10 + 1), format);
    if let Some(status) = &status {
        object["status"] = status.clone();
    }
    let created = http
        .write(
            Method::POST,
            &collection,
            format,
            &object,
            StatusCode::CREATED,
            k,
        )
        .await;
    assert_eq!(created["metadata"]["name"], a.as_str());
    assert_eq!(created["metadata"]["labels"][LABEL], fmt);
    assert!(
        created["metadata"]["uid"]
            .as_str()
            .is_some_and(|u| !u.is_empty()),
        "{created}"
    );
    if let Some(status) = &status {
        assert!(
            !contains(&created["status"], status),
            "POST {collection} kept the status sent with the create: {created}"
        );
    }
    let path = format!("{collection}/{a}");
    let json_created = http.json(Method::GET, &path, None).await.1;
    assert_same(
        &format!("POST {collection} in {fmt}"),
        &created,
        &json_created,
    );
    let mut writes = vec![("ADDED", created["metadata"]["resourceVersion"].clone())];

    // GET, LIST.
    let got = get_same(http, &path, format, k).await;
    let answer = http
        .call(
            Method::GET,
            &format!("{collection}?{selector}"),
            format,
            None,
        )
        .await;
    answer.expect(StatusCode::OK, &format!("LIST {collection} in {fmt}"));
    let list = format.read_list(&answer, &api_version, &list_kind, k);
    let names: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(names, [a.as_str()], "LIST {collection}?{selector} in {fmt}");

    // UPDATE (PUT): a label; a status sent with it is ignored.
    let updated = http
        .update(&path, format, k, got, |object| {
            object["metadata"]["labels"]["step"] = json!("updated");
            if let Some(status) = &status {
                object["status"] = status.clone();
            }
        })
        .await;
    assert_eq!(
        updated["metadata"]["labels"]["step"], "updated",
        "{updated}"
    );
    if let Some(status) = &status {
        assert!(
            !contains(&updated["status"], status),
            "PUT {path} changed the status: {updated}"
        );
    }
    writes.push(("MODIFIED", updated["metadata"]["resourceVersion"].clone()));

    // PATCH (JSON merge patch), answered in the format.
    let patch = json!({"metadata": {"labels": {"step": "patched"}}});
    let answer = http
        .call(
            Method::PATCH,
            &path,
            format,
            Some((
                "application/merge-patch+json",
                serde_json::to_vec(&patch).unwrap(),
            )),
        )
        .await;
    answer.expect(StatusCode::OK, &format!("PATCH {path} in {fmt}"));
    let patched = format.read(&answer, &api_version, k.kind, Some(k.typed));
    assert_eq!(
        patched["metadata"]["labels"]["step"], "patched",
        "{patched}"
    );
    writes.push(("MODIFIED", patched["metadata"]["resourceVersion"].clone()));

    // The status subresource: PUT sets the status and ignores a spec change; GET reads it.
    if let (Some(case), Some(status)) = (&k.status, &status) {
        let status_path = format!("{path}/status");
        let written = http
            .update(&status_path, format, k, patched.clone(), |object| {
                merge(object, &(case.spec_change)());
                object["status"] = status.clone();
            })
            .await;
        assert!(
            contains(&written["status"], status),
            "PUT {status_path} in {fmt}: status not written: {written}"
        );
        let spec_key = if written.get("spec").is_some() {
            "spec"
        } else {
            "driverName"
        };
        assert_eq!(
            written[spec_key], patched[spec_key],
            "PUT {status_path} in {fmt} changed the spec"
        );
        writes.push(("MODIFIED", written["metadata"]["resourceVersion"].clone()));
        let got = get_same(http, &status_path, format, k).await;
        assert_eq!(got["metadata"]["name"], a.as_str());
    }

    // A second object, then DELETE of the first with DeleteOptions in the format.
    let second = with_label((k.object)(&b, format.index() * 10 + 2), format);
    let second = http
        .write(
            Method::POST,
            &collection,
            format,
            &second,
            StatusCode::CREATED,
            k,
        )
        .await;
    let options =
        json!({"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"});
    let answer = http
        .call(
            Method::DELETE,
            &path,
            format,
            Some((format.media(), format.encode_delete_options(&options))),
        )
        .await;
    answer.expect(StatusCode::OK, &format!("DELETE {path} in {fmt}"));
    // Upstream answers with the object for some resources (ReturnDeletedObject) and with a Status for
    // others: either, in the format.
    let deleted = format.read_any(&answer);
    match deleted["kind"].as_str() {
        Some("Status") => assert_eq!(
            (
                deleted["status"].as_str(),
                deleted["details"]["name"].as_str()
            ),
            (Some("Success"), Some(a.as_str())),
            "{deleted}"
        ),
        _ => {
            assert_eq!(
                (
                    deleted["kind"].as_str(),
                    deleted["metadata"]["name"].as_str()
                ),
                (Some(k.kind), Some(a.as_str())),
                "{deleted}"
            );
            format.read(&answer, &api_version, k.kind, Some(k.typed));
        }
    }
    http.gone(&path).await;

    // DELETECOLLECTION by the label: the deleted objects, as a list in the format.
    let answer = http
        .call(
            Method::DELETE,
            &format!("{collection}?{selector}"),
            format,
            None,
        )
        .await;
    answer.expect(
        StatusCode::OK,
        &format!("DELETECOLLECTION {collection}?{selector} in {fmt}"),
    );
    let deleted = format.read_list(&answer, &api_version, &list_kind, k);
    let names: Vec<&str> = deleted["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|i| i["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        names,
        [b.as_str()],
        "DELETECOLLECTION {collection}?{selector} in {fmt}: {deleted}"
    );
    http.gone(&format!("{collection}/{b}")).await;
    let answer = http
        .call(
            Method::GET,
            &format!("{collection}?{selector}"),
            format,
            None,
        )
        .await;
    answer.expect(StatusCode::OK, &format!("LIST {collection} in {fmt}"));
    assert_eq!(
        format.read_list(&answer, &api_version, &list_kind, k)["items"],
        json!([]),
        "LIST {collection}?{selector} after the deletes"
    );

    // The watch saw every write, in order, with the object in the format: ADDED, our MODIFIED ones
    // (a controller of the server may add others), DELETED; the second object ADDED then DELETED.
    let events = watch
        .events_until(Instant::now() + DEADLINE, k, |events| {
            [&a, &b].iter().all(|n| {
                events
                    .iter()
                    .any(|(t, o)| t == "DELETED" && o["metadata"]["name"] == n.as_str())
            })
        })
        .await
        .unwrap_or_else(|e| panic!("WATCH {collection}?{selector} in {fmt}: {e}"));
    for (t, o) in &events {
        assert_eq!(
            (o["kind"].as_str(), o["apiVersion"].as_str()),
            (Some(k.kind), Some(api_version.as_str())),
            "{t} event: {o}"
        );
        assert_eq!(
            o["metadata"]["labels"][LABEL], fmt,
            "{t} event of an object without the label: {o}"
        );
    }
    let of = |name: &str| -> Vec<(String, Value)> {
        events
            .iter()
            .filter(|(_, o)| o["metadata"]["name"] == name)
            .map(|(t, o)| (t.clone(), o["metadata"]["resourceVersion"].clone()))
            .collect()
    };
    let seen = of(&a);
    let mut rest = seen.iter();
    for (t, rv) in &writes {
        assert!(
            rest.any(|(et, erv)| et == t && erv == rv),
            "WATCH in {fmt}: no {t} event at resourceVersion {rv} (in order) for {a}: {seen:?}"
        );
    }
    assert_eq!(
        seen.last().map(|e| e.0.as_str()),
        Some("DELETED"),
        "WATCH in {fmt}: events of {a}: {seen:?}"
    );
    let seen = of(&b);
    assert_eq!(
        seen.first(),
        Some(&(
            "ADDED".to_string(),
            second["metadata"]["resourceVersion"].clone()
        )),
        "WATCH in {fmt}: events of {b}: {seen:?}"
    );
    assert_eq!(
        seen.last().map(|e| e.0.as_str()),
        Some("DELETED"),
        "WATCH in {fmt}: events of {b}: {seen:?}"
    );

    // Errors are a Status in the format.
    let answer = http.call(Method::GET, &path, format, None).await;
    answer.expect(
        StatusCode::NOT_FOUND,
        &format!("GET {path} in {fmt} after the delete"),
    );
    let status = format.read_any(&answer);
    assert_eq!(
        (
            status["kind"].as_str(),
            status["reason"].as_str(),
            status["code"].as_u64()
        ),
        (Some("Status"), Some("NotFound"), Some(404)),
        "{status}"
    );
}

/// A resource without a status subresource has no `/status` path (404), as upstream.
async fn no_status_subresource(http: &Http, k: &Kind) {
    let name = k.name("nostatus", 9, 1);
    let object = with_label((k.object)(&name, 91), Format::Json);
    let (status, body) = http
        .json(Method::POST, &k.collection(), Some(&object))
        .await;
    assert_eq!(
        status,
        StatusCode::CREATED,
        "POST {}: {body}",
        k.collection()
    );
    let path = format!("{}/{name}", k.collection());
    let (status, body) = http
        .json(Method::GET, &format!("{path}/status"), None)
        .await;
    let (deleted, _) = http.json(Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "GET {path}/status: {body}");
    assert_eq!(deleted, StatusCode::OK, "DELETE {path}");
}

/// RFC 7386 merge of `patch` into `target`.
fn merge(target: &mut Value, patch: &Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                match t.get_mut(k) {
                    Some(existing) if v.is_object() => merge(existing, v),
                    _ => {
                        t.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (t, p) => *t = p.clone(),
    }
}
