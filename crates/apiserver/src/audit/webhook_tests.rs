use std::sync::Mutex;

use hyper::service::service_fn;
use serde_json::Value;

use super::*;
use crate::audit::buffered::{BatchConfig, Buffered};
use crate::audit::event::User;
use crate::audit::policy::{Level, Stage};

fn event(i: usize) -> Event {
    let now = chrono::Utc::now();
    Event {
        level: Level::Metadata,
        audit_id: format!("id-{i:02}"),
        stage: Stage::ResponseComplete,
        request_uri: "/api/v1/namespaces/default/pods".into(),
        verb: "list".into(),
        user: Some(User {
            username: "alice".into(),
            ..Default::default()
        }),
        request_received: now,
        stage_time: now,
        ..Default::default()
    }
}

/// What the receiver got: each request's Authorization header and parsed body.
type Received = Arc<Mutex<Vec<(Option<String>, Value)>>>;

/// A receiver on a loopback port answering the statuses of `answers` in turn (then 200).
async fn receiver(answers: Vec<u16>) -> (u16, Received) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let got: Received = Arc::default();
    let answers = Arc::new(Mutex::new(answers.into_iter()));
    let seen = got.clone();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (seen, answers) = (seen.clone(), answers.clone());
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let (seen, answers) = (seen.clone(), answers.clone());
                    async move {
                        let auth = req
                            .headers()
                            .get(header::AUTHORIZATION)
                            .map(|v| v.to_str().unwrap().to_string());
                        let body = req.into_body().collect().await.unwrap().to_bytes();
                        let status = answers.lock().unwrap().next().unwrap_or(200);
                        if status == 200 {
                            let v: Value = serde_json::from_slice(&body).unwrap();
                            seen.lock().unwrap().push((auth, v));
                        }
                        let resp = http::Response::builder()
                            .status(status)
                            .body(Full::new(Bytes::from_static(b"{}")))
                            .unwrap();
                        Ok::<_, std::convert::Infallible>(resp)
                    }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tcp), svc)
                    .await;
            });
        }
    });
    (port, got)
}

fn target(port: u16) -> Target {
    let yaml = format!(
        r#"
apiVersion: v1
kind: Config
clusters:
- name: other
  cluster: {{server: "http://127.0.0.1:1/"}}
- name: audit
  cluster: {{server: "http://127.0.0.1:{port}/audit"}}
users:
- name: sink
  user: {{token: secret-token}}
contexts:
- name: default
  context: {{cluster: audit, user: sink}}
current-context: default
"#
    );
    let config: Kubeconfig = serde_yaml_ng::from_str(&yaml).unwrap();
    Target::from_kubeconfig(config, Path::new("/")).unwrap()
}

fn items(got: &Received) -> Vec<Value> {
    got.lock()
        .unwrap()
        .iter()
        .flat_map(|(_, v)| v["items"].as_array().cloned().unwrap_or_default())
        .collect()
}

async fn wait_for_items(got: &Received, n: usize) -> Vec<Value> {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let items = items(got);
        if items.len() >= n || std::time::Instant::now() > deadline {
            return items;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[test]
fn the_kubeconfig_names_server_path_and_credentials() {
    let t = target(8080);
    assert_eq!(
        (t.host.as_str(), t.port, t.path.as_str()),
        ("127.0.0.1", 8080, "/audit")
    );
    assert!(!t.scheme_https);
    assert_eq!(t.bearer.as_deref(), Some("secret-token"));

    let bad = |yaml: &str| {
        let config: Kubeconfig = serde_yaml_ng::from_str(yaml).unwrap();
        Target::from_kubeconfig(config, Path::new("/"))
            .err()
            .unwrap()
    };
    assert!(bad("clusters: []").contains("no cluster"));
    assert!(bad("clusters: [{name: a, cluster: {server: 'ftp://x'}}]").contains("scheme"));
    assert!(bad("current-context: nope").contains("not found"));
    assert!(bad(
        "clusters: [{name: a, cluster: {server: 'https://x', insecure-skip-tls-verify: true}}]"
    )
    .contains("insecure"));
}

#[test]
fn event_lists_are_upstreams_json() {
    let body = event_list(vec![event(1), event(2)]);
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["kind"], "EventList");
    assert_eq!(v["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(v["items"][1]["auditID"], "id-02");
    assert_eq!(v["items"][0]["user"]["username"], "alice");
    let empty: Value = serde_json::from_slice(&event_list(vec![])).unwrap();
    assert_eq!(empty["items"], serde_json::json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_are_posted_and_transient_failures_retried() {
    // The first POST gets a 500, the second a 429: both are retried.
    let (port, got) = receiver(vec![500, 429]).await;
    let hook = Arc::new(Webhook::new(target(port), Duration::from_millis(10)));
    let config = BatchConfig {
        buffer_size: 100,
        max_batch_size: 3,
        max_batch_wait: Duration::from_millis(50),
        throttle: None,
    };
    let buffered = Buffered::start(hook, config).unwrap();
    for i in 0..5 {
        buffered.process(event(i));
    }
    let items = wait_for_items(&got, 5).await;
    let mut ids: Vec<&str> = items
        .iter()
        .map(|e| e["auditID"].as_str().unwrap())
        .collect();
    ids.sort_unstable();
    assert_eq!(ids, ["id-00", "id-01", "id-02", "id-03", "id-04"]);
    // A batch never holds more than max-size events, and the token went along.
    for (auth, list) in got.lock().unwrap().iter() {
        assert!(list["items"].as_array().unwrap().len() <= 3);
        assert_eq!(auth.as_deref(), Some("Bearer secret-token"));
    }
    assert_eq!(buffered.errors(), 0);
}

#[tokio::test]
async fn a_refusal_is_not_retried_and_counts_its_events() {
    let (port, got) = receiver(vec![403]).await;
    let hook = Webhook::new(target(port), Duration::from_secs(60));
    let started = std::time::Instant::now();
    let err = hook.send(vec![event(0), event(1)]).await.unwrap_err();
    assert!(matches!(err, SendError::Status { status, .. } if status == StatusCode::FORBIDDEN));
    // No 60 s backoff was waited.
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(hook.errors.load(Ordering::Relaxed), 2);
    assert!(got.lock().unwrap().is_empty());
}

#[test]
fn a_full_buffer_drops_and_counts_without_blocking() {
    // Nothing drains the buffer: it fills.
    let hook = Arc::new(Webhook::new(target(1), Duration::from_secs(60)));
    let (buffered, _rx) = Buffered::unstarted(hook, 4);
    let started = std::time::Instant::now();
    for i in 0..10 {
        buffered.process(event(i));
    }
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(buffered.errors(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_mode_waits_for_the_post() {
    let (port, got) = receiver(vec![]).await;
    let hook = Arc::new(Webhook::new(target(port), Duration::from_millis(10)));
    let blocking = BlockingWebhook::start(hook).unwrap();
    blocking.process(event(7));
    // Delivered before process returned.
    let items = items(&got);
    assert_eq!(items.len(), 1);
    assert_eq!(items[0]["auditID"], "id-07");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_mode_reports_whether_the_post_was_delivered() {
    let (port, _got) = receiver(vec![403]).await;
    let hook = Arc::new(Webhook::new(target(port), Duration::from_millis(10)));
    let blocking = BlockingWebhook::start(hook.clone()).unwrap();
    assert!(!blocking.process(event(1)), "refused");
    assert!(blocking.process(event(2)), "delivered");
    assert_eq!(hook.errors.load(Ordering::Relaxed), 1);
}
