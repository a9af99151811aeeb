//! Requests that once took the API server down (issue 20's list), refused or handled with a
//! `Status` while the server keeps serving: a JSON patch whose copies double an object (413, the
//! object unchanged), grace periods too large for a timestamp (accepted, saturated at year 9999,
//! no panic), a custom resource `date-time` written with non-ASCII digits (422), and a large body
//! from a client that may not write (403 before the body is kept: not a 413). The server's memory
//! is read from `/proc` around the patch bomb and a 64 MiB unauthenticated body: neither grows it
//! by anything near what buffering them would.

mod support;

use serde_json::Value;
use support::{Backend, Cluster};

/// A `/proc/<pid>/status` figure in KiB (`VmRSS`, `VmHWM`).
fn proc_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("proc status");
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

fn object(c: &Cluster, args: &[&str]) -> Value {
    let mut all = vec!["get"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", "json"]);
    serde_json::from_str(&c.kubectl(&all)).expect("json")
}

#[test]
fn hostile_requests_are_refused_and_the_server_stays_up() {
    let c = Cluster::start(Backend::Sqlite);
    c.kubectl(&["create", "configmap", "bomb", "--from-literal=a=xxxxxxxx"]);
    c.kubectl(&["annotate", "configmap", "bomb", "seed=0123456789"]);

    // Each copy nests the annotations into themselves: forty double the object forty times.
    let ops: Vec<Value> = (0..40)
        .map(|i| {
            serde_json::json!({"op": "copy", "from": "/metadata/annotations",
                "path": format!("/metadata/annotations/x{i}")})
        })
        .collect();
    let patch = serde_json::to_string(&ops).unwrap();
    assert!(patch.len() < 4096, "{}", patch.len());
    let pid = c.pid().expect("server running");
    let rss_before = proc_kib(pid, "VmRSS");
    let err = c.kubectl_fails(
        &["patch", "configmap", "bomb", "--type=json", "-p", &patch],
        None,
    );
    assert!(
        err.contains("Unable to complete the copy, the accumulated size increase of copy is"),
        "{err}"
    );
    // Forty doublings of the annotations would be terabytes; the refusal keeps it to megabytes.
    let rss_after = proc_kib(pid, "VmRSS");
    assert!(
        rss_after < rss_before + 128 * 1024,
        "RSS {rss_before} KiB -> {rss_after} KiB around the patch bomb"
    );
    let cm = object(&c, &["configmap", "bomb"]);
    assert_eq!(
        cm["metadata"]["annotations"].as_object().map(|a| a.len()),
        Some(1)
    );

    // Grace periods past what a timestamp holds: a pod bound to a node (so deletion is graceful).
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "long"},
                "spec": {"nodeName": "nowhere", "terminationGracePeriodSeconds": 99999999999999,
                "containers": [{"name": "c", "image": "busybox"}]}}"#,
        ),
    );
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            r#"{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "asked"},
                "spec": {"nodeName": "nowhere", "containers": [{"name": "c", "image": "busybox"}]}}"#,
        ),
    );
    c.kubectl(&["delete", "pod", "long", "--wait=false"]);
    c.kubectl(&[
        "delete",
        "pod",
        "asked",
        "--wait=false",
        "--grace-period=99999999999999",
    ]);
    for pod in ["long", "asked"] {
        let p = object(&c, &["pod", pod]);
        assert_eq!(
            p["metadata"]["deletionTimestamp"], "9999-12-31T23:59:59Z",
            "{pod}"
        );
    }

    // A date-time with Arabic-Indic digits is no date-time (422), not a crash.
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            r#"{"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "events.hard.example.com"},
                "spec": {"group": "hard.example.com", "scope": "Namespaced",
                  "names": {"plural": "events", "singular": "event", "kind": "Event"},
                  "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                      "at": {"type": "string", "format": "date-time"}}}}}]}}"#,
        ),
    );
    c.kubectl(&[
        "wait",
        "--for=condition=Established",
        "crd/events.hard.example.com",
        "--timeout=30s",
    ]);
    let err = c.kubectl_fails(
        &["apply", "-f", "-"],
        Some(
            r#"{"apiVersion": "hard.example.com/v1", "kind": "Event", "metadata": {"name": "e"},
                "at": "٢٠٢٤-01-01T10:00:00Z"}"#,
        ),
    );
    assert!(
        err.contains("Invalid value") && err.contains("date-time"),
        "{err}"
    );
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(
            r#"{"apiVersion": "hard.example.com/v1", "kind": "Event", "metadata": {"name": "e"},
                "at": "2024-01-01T10:00:00Z"}"#,
        ),
    );
    // A client without credentials is refused (401: anonymous requests are off by default) before
    // its body is read: not buffered (the peak RSS does not grow by its 64 MiB), so not a 413.
    let peak_before = proc_kib(pid, "VmHWM");
    let rss_before = proc_kib(pid, "VmRSS");
    support::runtime().block_on(async {
        let kubeconfig =
            kube::config::Kubeconfig::read_from(c.data_dir().join("admin.kubeconfig")).unwrap();
        let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
            .await
            .unwrap();
        config.auth_info = Default::default();
        let anonymous = kube::Client::try_from(config).unwrap();
        let body = vec![b' '; 64 * 1024 * 1024];
        let req = http::Request::builder()
            .method("POST")
            .uri("/api/v1/namespaces/default/configmaps")
            .header("Content-Type", "application/json")
            .body(body)
            .unwrap();
        match anonymous.request_text(req).await {
            Err(kube::Error::Api(status)) => assert_eq!(
                (status.code, status.reason.as_str()),
                (401, "Unauthorized"),
                "{}",
                status.message
            ),
            other => panic!("expected 401, got {other:?}"),
        }
    });
    let peak_after = proc_kib(pid, "VmHWM");
    assert!(
        peak_after < peak_before.max(rss_before + 32 * 1024),
        "peak RSS {peak_before} KiB -> {peak_after} KiB (RSS before {rss_before} KiB) around a 64 MiB body"
    );
    // Still serving.
    assert_eq!(c.kubectl(&["get", "--raw", "/readyz"]), "ok");
}
