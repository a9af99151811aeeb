use std::sync::mpsc::Receiver;

use apimachinery::status::ApiError;
use http::StatusCode;
use serde_json::Value;

use super::*;
use crate::audit::log::LogBackend;
use crate::audit::{Auditor, Backend};

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: None
  userGroups: ["system:nodes"]
- level: None
  nonResourceURLs: ["/healthz*"]
- level: RequestResponse
  resources: [{group: "", resources: ["configmaps"]}]
- level: Request
  omitStages: [RequestReceived]
  resources: [{group: "", resources: ["secrets"]}]
- level: Metadata
"#;

fn auditor() -> (Auditor, Receiver<Event>) {
    let (backend, rx) = LogBackend::in_memory(100);
    let auditor = Auditor {
        policy: Policy::parse(POLICY.as_bytes()).unwrap(),
        backend: Arc::new(Backends::new(vec![Backend::Log(backend)])),
    };
    (auditor, rx)
}

fn alice() -> UserInfo {
    UserInfo {
        name: "alice".into(),
        uid: "1000".into(),
        groups: vec!["dev".into(), "system:authenticated".into()],
    }
}

fn peer() -> SocketAddr {
    "[::ffff:10.0.0.7]:50000".parse().unwrap()
}

fn request(method: &str, uri: &str) -> Request<()> {
    Request::builder()
        .method(method)
        .uri(uri)
        .header("user-agent", "kubectl/v1.32.4")
        .body(())
        .unwrap()
}

fn drain(rx: &Receiver<Event>) -> Vec<Value> {
    rx.try_iter()
        .map(|e| serde_json::from_slice(&e.to_json_line()).unwrap())
        .collect()
}

fn json(code: StatusCode, body: &str) -> Response<Body> {
    response::bytes_response(code, response::JSON, body.to_string())
}

#[tokio::test]
async fn a_create_is_received_then_completed_with_its_object() {
    let (a, rx) = auditor();
    let req = request(
        "POST",
        "/api/v1/namespaces/default/configmaps?fieldManager=kubectl-create",
    );
    let mut audit = a.begin(&alice(), &req, peer());
    audit.authorized(Ok("RBAC: allowed by RoleBinding \"x\""));
    audit.request_body(&Bytes::from_static(
        br#"{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"cm1","namespace":"default"}}"#,
    ));
    let mut resp = json(
        StatusCode::CREATED,
        r#"{"kind":"ConfigMap","metadata":{"name":"cm1","uid":"u-1"}}"#,
    );
    resp.extensions_mut().insert(AdmissionAnnotations(vec![(
        "mutation.webhook.admission.k8s.io/round_0_index_0".into(),
        "{}".into(),
    )]));
    let resp = audit.respond(resp).await;
    let events = drain(&rx);
    assert_eq!(events.len(), 2);
    let (received, complete) = (&events[0], &events[1]);
    assert_eq!(received["stage"], "RequestReceived");
    assert_eq!(
        received["requestReceivedTimestamp"],
        received["stageTimestamp"]
    );
    assert!(received.get("annotations").is_none());
    assert_eq!(complete["stage"], "ResponseComplete");
    assert_eq!(complete["level"], "RequestResponse");
    assert_eq!(complete["verb"], "create");
    assert_eq!(
        complete["requestURI"],
        "/api/v1/namespaces/default/configmaps?fieldManager=kubectl-create"
    );
    assert_eq!(
        complete["user"],
        serde_json::json!({"username": "alice", "uid": "1000", "groups": ["dev", "system:authenticated"]})
    );
    assert_eq!(complete["sourceIPs"], serde_json::json!(["10.0.0.7"]));
    assert_eq!(complete["userAgent"], "kubectl/v1.32.4");
    assert_eq!(
        complete["objectRef"],
        serde_json::json!({"resource": "configmaps", "namespace": "default", "name": "cm1", "apiVersion": "v1"})
    );
    assert_eq!(
        complete["responseStatus"],
        serde_json::json!({"metadata": {}, "code": 201})
    );
    assert_eq!(complete["requestObject"]["metadata"]["name"], "cm1");
    assert_eq!(complete["responseObject"]["metadata"]["uid"], "u-1");
    assert_eq!(
        complete["annotations"]["authorization.k8s.io/decision"],
        "allow"
    );
    assert_eq!(
        complete["annotations"]["authorization.k8s.io/reason"],
        "RBAC: allowed by RoleBinding \"x\""
    );
    assert_eq!(
        complete["annotations"]["mutation.webhook.admission.k8s.io/round_0_index_0"],
        "{}"
    );
    assert_eq!(received["auditID"], complete["auditID"]);
    assert_eq!(
        resp.headers()[AUDIT_ID_HEADER].to_str().unwrap(),
        complete["auditID"]
    );
    assert!(resp.extensions().get::<AdmissionAnnotations>().is_none());
    // The body still reaches the client.
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert!(body.starts_with(b"{\"kind\":\"ConfigMap\""));
}

#[tokio::test]
async fn metadata_level_has_no_bodies_but_an_error_status() {
    let (a, rx) = auditor();
    let mut bob = alice();
    bob.name = "bob".into();
    let req = request("GET", "/apis/apps/v1/namespaces/ns1/deployments");
    let mut audit = a.begin(&bob, &req, peer());
    audit.authorized(Err(()));
    let err = ApiError::forbidden("deployments.apps is forbidden: User \"bob\" cannot list");
    audit.respond(response::error_response(&err)).await;
    let events = drain(&rx);
    let complete = events.last().unwrap();
    assert_eq!(complete["level"], "Metadata");
    assert_eq!(complete["verb"], "list");
    assert_eq!(complete["objectRef"]["apiGroup"], "apps");
    assert_eq!(complete["responseStatus"]["code"], 403);
    assert_eq!(complete["responseStatus"]["status"], "Failure");
    assert_eq!(complete["responseStatus"]["reason"], "Forbidden");
    assert!(complete.get("responseObject").is_none());
    assert!(complete.get("requestObject").is_none());
    assert_eq!(
        complete["annotations"]["authorization.k8s.io/decision"],
        "forbid"
    );
}

#[tokio::test]
async fn level_none_writes_nothing_but_still_answers_an_audit_id() {
    let (a, rx) = auditor();
    let node = UserInfo {
        name: "system:node:n1".into(),
        uid: String::new(),
        groups: vec!["system:nodes".into()],
    };
    let req = request("GET", "/api/v1/configmaps");
    let resp = a
        .begin(&node, &req, peer())
        .respond(json(StatusCode::OK, "{}"))
        .await;
    assert_eq!(resp.headers()[AUDIT_ID_HEADER].len(), 36);
    let resp = a
        .begin(&alice(), &request("GET", "/healthz"), peer())
        .respond(json(StatusCode::OK, "ok"))
        .await;
    assert!(resp.headers().contains_key(AUDIT_ID_HEADER));
    assert!(drain(&rx).is_empty());
}

#[tokio::test]
async fn a_client_audit_id_is_kept_and_omitted_stages_are_skipped() {
    let (a, rx) = auditor();
    let mut req = request("PUT", "/api/v1/namespaces/ns/secrets/s1");
    req.headers_mut()
        .insert(AUDIT_ID_HEADER, HeaderValue::from_static("my-id"));
    let mut audit = a.begin(&alice(), &req, peer());
    audit.request_body(&Bytes::from_static(
        br#"{"metadata":{"name":"s1","resourceVersion":"7"}}"#,
    ));
    let resp = audit.respond(json(StatusCode::OK, "{}")).await;
    assert_eq!(resp.headers()[AUDIT_ID_HEADER], "my-id");
    let events = drain(&rx);
    assert_eq!(events.len(), 1, "RequestReceived is omitted: {events:?}");
    assert_eq!(events[0]["auditID"], "my-id");
    assert_eq!(events[0]["level"], "Request");
    assert_eq!(events[0]["objectRef"]["resourceVersion"], "7");
    assert!(events[0].get("requestObject").is_some());
    assert!(events[0].get("responseObject").is_none());
}

#[tokio::test]
async fn a_watch_is_started_then_completed_when_its_stream_ends() {
    let (a, rx) = auditor();
    let req = request("GET", "/api/v1/namespaces/ns/pods?watch=true");
    let audit = a.begin(&alice(), &req, peer());
    let (tx, body_rx) = tokio::sync::mpsc::channel(1);
    let resp = audit
        .respond(Response::new(response::streaming(body_rx)))
        .await;
    let events = drain(&rx);
    let stages: Vec<&str> = events
        .iter()
        .map(|e| e["stage"].as_str().unwrap())
        .collect();
    assert_eq!(stages, ["RequestReceived", "ResponseStarted"]);
    assert_eq!(events[1]["verb"], "watch");
    assert_eq!(events[1]["responseStatus"]["code"], 200);
    tx.send(Bytes::from_static(b"{}")).await.unwrap();
    drop(tx);
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    assert_eq!(&body[..], b"{}");
    let events = drain(&rx);
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["stage"], "ResponseComplete");
}

#[tokio::test]
async fn failed_authentication_is_one_response_started_event() {
    let (a, rx) = auditor();
    let mut req = request("GET", "/api/v1/namespaces/default/pods");
    req.headers_mut()
        .insert("authorization", HeaderValue::from_static("Bearer wrong"));
    let resp = a
        .unauthenticated(&req, peer())
        .respond(response::error_response(&ApiError::unauthorized()))
        .await;
    assert!(resp.headers().contains_key(AUDIT_ID_HEADER));
    let events = drain(&rx);
    assert_eq!(events.len(), 1);
    let e = &events[0];
    assert_eq!(e["stage"], "ResponseStarted");
    assert_eq!(e["user"], serde_json::json!({}));
    assert_eq!(e["responseStatus"]["code"], 401);
    assert_eq!(e["responseStatus"]["reason"], "Unauthorized");
    assert_eq!(
        auth_methods(&req),
        "Authentication failed, attempted: bearer"
    );
    assert_eq!(
        auth_methods(&request("GET", "/api")),
        "Authentication failed, no credentials provided"
    );
}

#[test]
fn a_panicking_handler_is_audited_as_panic() {
    let (a, rx) = auditor();
    let req = request("DELETE", "/api/v1/namespaces/ns/pods/p");
    let audit = a.begin(&alice(), &req, peer());
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || {
        let _held = audit;
        panic!("boom");
    }));
    assert!(result.is_err());
    let events = drain(&rx);
    let last = events.last().unwrap();
    assert_eq!(last["stage"], "Panic");
    assert_eq!(last["responseStatus"]["code"], 500);
    assert_eq!(last["responseStatus"]["message"], "APIServer panic'd");
}

#[test]
fn describes_requests_as_upstreams_request_info() {
    let d = describe(&request(
        "GET",
        "/api/v1/namespaces/ns/pods/p/proxy/some/deep/path",
    ));
    let r = d.resource.unwrap();
    assert_eq!(
        (
            d.verb.as_str(),
            r.resource.as_str(),
            r.name.as_deref(),
            r.subresource.as_deref()
        ),
        ("get", "pods", Some("p"), Some("proxy"))
    );
    let d = describe(&request(
        "POST",
        "/api/v1/namespaces/ns/pods/p/exec?command=ls",
    ));
    assert_eq!(d.verb, "create");
    let d = describe(&request("GET", "/apis"));
    assert!(d.resource.is_none());
    assert_eq!(d.verb, "get");
    let d = describe(&request(
        "POST",
        "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
    ));
    assert_eq!(d.resource.unwrap().resource, "selfsubjectaccessreviews");
}

#[test]
fn source_ips_and_user_agents_as_upstream() {
    let mut headers = HeaderMap::new();
    headers.insert(
        "x-forwarded-for",
        HeaderValue::from_static("1.2.3.4, bogus, 5.6.7.8"),
    );
    headers.insert("x-real-ip", HeaderValue::from_static("5.6.7.8"));
    assert_eq!(
        source_ips(&headers, "9.9.9.9".parse().unwrap()),
        ["1.2.3.4", "5.6.7.8", "9.9.9.9"]
    );
    assert_eq!(
        source_ips(&headers, "5.6.7.8".parse().unwrap()),
        ["1.2.3.4", "5.6.7.8"]
    );
    let mut headers = HeaderMap::new();
    let long = "é".repeat(600);
    headers.insert("user-agent", HeaderValue::from_str(&long).unwrap());
    let ua = user_agent(&headers);
    assert!(ua.ends_with("...TRUNCATED"));
    assert_eq!(ua.len(), 1024 + "...TRUNCATED".len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_strict_rejects_a_request_whose_event_is_lost() {
    use crate::audit::webhook::{BlockingWebhook, Target, Webhook};
    // Nothing listens on the receiver's port: every POST fails (after quick retries).
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("webhook.kubeconfig");
    std::fs::write(
        &kubeconfig,
        "clusters: [{name: x, cluster: {server: 'http://127.0.0.1:1/'}}]\n",
    )
    .unwrap();
    let hook = Arc::new(Webhook::new(
        Target::load(&kubeconfig).unwrap(),
        std::time::Duration::from_millis(1),
    ));
    let auditor = |strict: bool| {
        let (log, rx) = LogBackend::in_memory(100);
        let webhook = Backend::BlockingWebhook {
            sender: BlockingWebhook::start(hook.clone()).unwrap(),
            webhook: hook.clone(),
            strict,
        };
        let auditor = Auditor {
            policy: Policy::parse(POLICY.as_bytes()).unwrap(),
            backend: Arc::new(Backends::new(vec![Backend::Log(log), webhook])),
        };
        (auditor, rx)
    };
    let req = request("GET", "/api/v1/namespaces/default/pods");

    let (strict, rx) = auditor(true);
    assert!(strict.begin(&alice(), &req, peer()).rejected());
    // The log still has the event; the refusal is counted.
    assert_eq!(drain(&rx)[0]["stage"], "RequestReceived");
    assert!(strict
        .metrics()
        .contains("apiserver_audit_requests_rejected_total 1\n"));
    // (The dropped record's last event failed too.)
    assert!(strict
        .metrics()
        .contains("apiserver_audit_error_total{plugin=\"webhook\"} 2\n"));

    // Plain blocking ignores the failure.
    let (blocking, _rx) = auditor(false);
    assert!(!blocking.begin(&alice(), &req, peer()).rejected());
}
