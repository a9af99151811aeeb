//! Audit logging end to end (issue 20: "the audit log has user, verb, resource, code"): an API
//! server started with `--audit-policy-file` and `--audit-log-path`, driven with kubectl v1.32 and
//! the kube client, writes upstream's `audit.k8s.io/v1` events as JSON lines:
//! - a ConfigMap created, read and deleted by the admin: RequestResponse events (request and
//!   response objects), codes 201/200/200, RequestReceived then ResponseComplete;
//! - a Secret created: a Metadata event, no bodies, the name taken from the request body;
//! - a list refused to a token user (403, `authorization.k8s.io/decision: forbid`), a bad token
//!   (401, one ResponseStarted event with no user), an impersonated request (`impersonatedUser`);
//! - `system:nodes` members and `GET /healthz` are not audited (level None), `/livez` is;
//! - the `Audit-Id` response header is the event's `auditID`;
//! - a policy that does not parse stops the server from starting;
//! - `--audit-log-truncate-enabled` with an 8 KiB event limit: a ConfigMap of 20 KB is logged
//!   without its request and response objects, annotated `audit.k8s.io/truncated`, while the
//!   (untruncated) webhook gets it whole;
//! - the same server also has the webhook backend (`--audit-webhook-config-file`, a kubeconfig
//!   naming a receiver on a loopback port started by the test): the receiver gets
//!   `audit.k8s.io/v1` EventLists holding the same events (log and webhook together, upstream's
//!   union backend);
//! - with `--audit-webhook-mode blocking-strict`, a request whose event the receiver refuses is
//!   answered 500 "failed to store audit event"; once the receiver takes events it is served.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Backend, Cluster};

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: None
  userGroups: ["system:nodes"]
- level: None
  verbs: ["get"]
  nonResourceURLs: ["/healthz*"]
- level: RequestResponse
  resources:
  - group: ""
    resources: ["configmaps"]
- level: Metadata
"#;

fn events(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        // The writer may be in the middle of the last line.
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

/// Polls the log until `done` holds for its events (the writer is asynchronous).
fn wait_for(log: &Path, what: &str, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let all = events(log);
        if done(&all) {
            return all;
        }
        assert!(
            Instant::now() < deadline,
            "the audit log never had {what}; it has:\n{}",
            all.iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
                .join("\n")
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The `ResponseComplete` (or, for `stage`, another) event of `verb` on `resource` named `name`.
fn find<'a>(
    all: &'a [Value],
    stage: &str,
    verb: &str,
    resource: &str,
    name: &str,
) -> Option<&'a Value> {
    all.iter().find(|e| {
        e["stage"] == stage
            && e["verb"] == verb
            && e["objectRef"]["resource"] == resource
            && (name.is_empty() || e["objectRef"]["name"] == name)
    })
}

fn complete<'a>(all: &'a [Value], verb: &str, resource: &str, name: &str) -> &'a Value {
    find(all, "ResponseComplete", verb, resource, name)
        .unwrap_or_else(|| panic!("no ResponseComplete of {verb} {resource} {name} in {all:#?}"))
}

#[test]
fn the_audit_log_records_user_verb_resource_and_code() {
    let files = tempfile::tempdir().expect("tempdir");
    let policy = files.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).unwrap();
    let tokens = files.path().join("tokens.csv");
    std::fs::write(
        &tokens,
        "bob-token,bob,1001\nnode-token,system:node:n1,2000,\"system:nodes\"\n",
    )
    .unwrap();
    let log = files.path().join("logs/audit.log");
    let webhook = Receiver::start();
    let webhook_config = files.path().join("audit-webhook.kubeconfig");
    std::fs::write(&webhook_config, webhook.kubeconfig()).unwrap();
    let c = Cluster::start_with(
        Backend::Sqlite,
        &[
            "--token-auth-file",
            tokens.to_str().unwrap(),
            "--audit-policy-file",
            policy.to_str().unwrap(),
            "--audit-log-path",
            log.to_str().unwrap(),
            "--audit-webhook-config-file",
            webhook_config.to_str().unwrap(),
            "--audit-webhook-batch-max-wait",
            "200ms",
            "--audit-log-truncate-enabled=true",
            "--audit-log-truncate-max-event-size=8192",
        ],
    );
    let as_token = |token: &str, args: &[&str]| c.kubectl_as(token, args, None);

    c.kubectl(&["create", "configmap", "audit-cm", "--from-literal=a=b"]);
    c.kubectl(&["get", "configmap", "audit-cm", "-o", "json"]);
    c.kubectl(&[
        "create",
        "secret",
        "generic",
        "audit-secret",
        "--from-literal=x=y",
    ]);
    c.kubectl(&[
        "get",
        "configmaps",
        "--as=someone",
        "--as-group=system:masters",
    ]);
    let refused = as_token("bob-token", &["get", "secrets", "-n", "default"]);
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("Forbidden"));
    let unauthenticated = as_token("wrong-token", &["get", "pods"]);
    assert!(!unauthenticated.status.success());
    // Whatever the Node authorizer answers, nodes are not audited.
    as_token("node-token", &["get", "configmaps", "-n", "default"]);

    // Raw requests, for the Audit-Id header and the health endpoints.
    let audit_id = support::runtime().block_on(async {
        let client = c.client().await;
        let get = |uri: &str| {
            http::Request::get(uri)
                .body(kube::client::Body::empty())
                .unwrap()
        };
        for path in ["/healthz", "/livez"] {
            let resp = client.send(get(path)).await.expect(path);
            assert!(resp.status().is_success(), "{path}: {}", resp.status());
        }
        let resp = client
            .send(get("/api/v1/namespaces/default/configmaps/audit-cm"))
            .await
            .expect("get audit-cm");
        assert_eq!(resp.status(), 200);
        resp.headers()
            .get("audit-id")
            .expect("an Audit-Id header")
            .to_str()
            .unwrap()
            .to_string()
    });
    c.kubectl(&["delete", "configmap", "audit-cm"]);
    let big = format!("--from-literal=big={}", "x".repeat(20_000));
    c.kubectl(&["create", "configmap", "audit-big", &big]);

    let all = wait_for(&log, "the delete and the refusals", |all| {
        find(all, "ResponseComplete", "delete", "configmaps", "audit-cm").is_some()
            && find(all, "ResponseComplete", "create", "configmaps", "audit-big").is_some()
            && find(all, "ResponseComplete", "list", "secrets", "").is_some()
            && all.iter().any(|e| e["responseStatus"]["code"] == 401)
    });
    for e in &all {
        assert_eq!(e["kind"], "Event");
        assert_eq!(e["apiVersion"], "audit.k8s.io/v1");
    }

    // The ConfigMap's life at RequestResponse.
    let create = complete(&all, "create", "configmaps", "audit-cm");
    assert_eq!(create["user"]["username"], "kubernetes-admin");
    assert!(create["user"]["groups"]
        .as_array()
        .unwrap()
        .contains(&"system:masters".into()));
    assert_eq!(create["level"], "RequestResponse");
    assert_eq!(create["objectRef"]["namespace"], "default");
    assert_eq!(create["objectRef"]["apiVersion"], "v1");
    assert_eq!(create["responseStatus"]["code"], 201);
    assert_eq!(create["requestObject"]["kind"], "ConfigMap");
    assert_eq!(create["requestObject"]["data"]["a"], "b");
    assert_eq!(create["responseObject"]["metadata"]["name"], "audit-cm");
    assert_eq!(
        create["annotations"]["authorization.k8s.io/decision"],
        "allow"
    );
    assert!(create["userAgent"].as_str().unwrap().starts_with("kubectl"));
    assert!(!create["sourceIPs"].as_array().unwrap().is_empty());
    let received = all
        .iter()
        .find(|e| e["auditID"] == create["auditID"] && e["stage"] == "RequestReceived")
        .expect("the create's RequestReceived event");
    assert!(received.get("responseStatus").is_none());
    let stamp = |e: &Value, key: &str| e[key].as_str().unwrap().to_string();
    // RFC 3339 with microseconds.
    assert_eq!(stamp(create, "stageTimestamp").len(), 27);
    assert!(stamp(create, "stageTimestamp") >= stamp(create, "requestReceivedTimestamp"));

    let get = complete(&all, "get", "configmaps", "audit-cm");
    assert_eq!(get["responseStatus"]["code"], 200);
    assert_eq!(get["responseObject"]["data"]["a"], "b");
    assert!(get.get("requestObject").is_none());
    let delete = complete(&all, "delete", "configmaps", "audit-cm");
    assert_eq!(delete["responseStatus"]["code"], 200);
    assert_eq!(delete["user"]["username"], "kubernetes-admin");

    // Over --audit-log-truncate-max-event-size: the objects go, the rest stays, annotated.
    let big = complete(&all, "create", "configmaps", "audit-big");
    assert_eq!(
        big["annotations"]["audit.k8s.io/truncated"], "true",
        "{big}"
    );
    assert!(big.get("requestObject").is_none() && big.get("responseObject").is_none());
    assert_eq!(big["level"], "RequestResponse");
    assert_eq!(big["responseStatus"]["code"], 201);
    assert_eq!(big["user"]["username"], "kubernetes-admin");
    assert!(big.to_string().len() <= 8192);
    assert!(create["annotations"]
        .get("audit.k8s.io/truncated")
        .is_none());

    // The raw GET's Audit-Id names its event.
    let by_id = all
        .iter()
        .find(|e| e["auditID"] == audit_id.as_str() && e["stage"] == "ResponseComplete")
        .unwrap_or_else(|| panic!("no event with auditID {audit_id}"));
    assert_eq!(by_id["verb"], "get");
    assert_eq!(
        by_id["requestURI"],
        "/api/v1/namespaces/default/configmaps/audit-cm"
    );

    // A write at Metadata: no bodies, the name from the request's metadata.
    let secret = complete(&all, "create", "secrets", "audit-secret");
    assert_eq!(secret["level"], "Metadata");
    assert_eq!(secret["responseStatus"]["code"], 201);
    assert!(secret.get("requestObject").is_none());
    assert!(secret.get("responseObject").is_none());

    // Refused by RBAC.
    let forbidden = complete(&all, "list", "secrets", "");
    assert_eq!(forbidden["user"]["username"], "bob");
    assert_eq!(forbidden["objectRef"]["namespace"], "default");
    assert_eq!(forbidden["responseStatus"]["code"], 403);
    assert_eq!(forbidden["responseStatus"]["reason"], "Forbidden");
    assert_eq!(
        forbidden["annotations"]["authorization.k8s.io/decision"],
        "forbid"
    );

    // A bad token: one ResponseStarted event, no user.
    let failed: Vec<&Value> = all
        .iter()
        .filter(|e| e["responseStatus"]["code"] == 401)
        .collect();
    assert!(failed.iter().all(|e| e["stage"] == "ResponseStarted"));
    assert!(failed.iter().all(|e| e["user"] == serde_json::json!({})));
    assert!(failed.iter().any(|e| e["objectRef"]["resource"] == "pods"));

    // Impersonation: the requester is the user, the impersonated one beside it.
    let impersonated = all
        .iter()
        .find(|e| e["impersonatedUser"]["username"] == "someone")
        .expect("an impersonated request");
    assert_eq!(impersonated["user"]["username"], "kubernetes-admin");

    // Level None: nodes, and GET /healthz; /livez is audited.
    assert!(!all
        .iter()
        .any(|e| e["user"]["username"] == "system:node:n1"));
    assert!(!all
        .iter()
        .any(|e| e["requestURI"].as_str().unwrap().starts_with("/healthz")));
    let livez = all
        .iter()
        .find(|e| e["requestURI"] == "/livez" && e["stage"] == "ResponseComplete")
        .expect("/livez is audited");
    assert_eq!(livez["verb"], "get");
    assert_eq!(livez["responseStatus"]["code"], 200);
    assert!(livez.get("objectRef").is_none());

    // The webhook got the same events, batched into EventLists.
    let deadline = Instant::now() + Duration::from_secs(30);
    let posted = loop {
        let posted = webhook.events();
        let has = |verb: &str, resource: &str, code: u16| {
            posted.iter().any(|e| {
                e["stage"] == "ResponseComplete"
                    && e["verb"] == verb
                    && e["objectRef"]["resource"] == resource
                    && e["responseStatus"]["code"] == code
            })
        };
        if has("delete", "configmaps", 200)
            && has("list", "secrets", 403)
            && has("create", "configmaps", 201)
            && find(
                &posted,
                "ResponseComplete",
                "create",
                "configmaps",
                "audit-big",
            )
            .is_some()
        {
            break posted;
        }
        assert!(
            Instant::now() < deadline,
            "the audit webhook never got the delete and the refusal: {posted:#?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    for list in webhook.lists() {
        assert_eq!(list["kind"], "EventList");
        assert_eq!(list["apiVersion"], "audit.k8s.io/v1");
    }
    let hooked = complete(&posted, "create", "configmaps", "audit-cm");
    assert_eq!(hooked["auditID"], create["auditID"]);
    assert_eq!(hooked["user"]["username"], "kubernetes-admin");
    assert_eq!(hooked["responseStatus"]["code"], 201);
    assert_eq!(hooked["requestObject"]["data"]["a"], "b");
    // The webhook has no truncation configured: the large ConfigMap arrives whole.
    let hooked = complete(&posted, "create", "configmaps", "audit-big");
    assert_eq!(
        hooked["requestObject"]["data"]["big"]
            .as_str()
            .map(str::len),
        Some(20_000)
    );
    let hooked = complete(&posted, "list", "secrets", "");
    assert_eq!(hooked["user"]["username"], "bob");
    assert_eq!(hooked["responseStatus"]["code"], 403);
}

#[test]
fn blocking_strict_refuses_requests_it_cannot_audit() {
    let files = tempfile::tempdir().expect("tempdir");
    let policy = files.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Metadata\n",
    )
    .unwrap();
    let webhook = Receiver::start();
    webhook
        .status
        .store(403, std::sync::atomic::Ordering::SeqCst);
    let webhook_config = files.path().join("audit-webhook.kubeconfig");
    std::fs::write(&webhook_config, webhook.kubeconfig()).unwrap();
    let c = Cluster::start_with(
        Backend::Sqlite,
        &[
            "--audit-policy-file",
            policy.to_str().unwrap(),
            "--audit-webhook-config-file",
            webhook_config.to_str().unwrap(),
            "--audit-webhook-mode",
            "blocking-strict",
        ],
    );
    let refused = c.kubectl_output(
        &["get", "--raw", "/api/v1/namespaces/default/configmaps"],
        None,
    );
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("failed to store audit event"), "{stderr}");

    webhook
        .status
        .store(200, std::sync::atomic::Ordering::SeqCst);
    c.kubectl(&["get", "configmaps"]);
    // Sent before the answer, one event per POST.
    let posted = webhook.events();
    assert!(
        posted
            .iter()
            .any(|e| e["verb"] == "list" && e["stage"] == "ResponseComplete"),
        "{posted:#?}"
    );
    assert!(webhook
        .lists()
        .iter()
        .all(|l| l["items"].as_array().map(Vec::len) == Some(1)));
    let metrics = c.kubectl(&["get", "--raw", "/metrics"]);
    let rejected = metrics
        .lines()
        .find_map(|l| l.strip_prefix("apiserver_audit_requests_rejected_total "))
        .and_then(|n| n.parse::<u64>().ok());
    assert!(rejected.is_some_and(|n| n >= 1), "{rejected:?}");
}

/// An audit webhook receiver on a loopback port: plain HTTP/1.1, one request per connection
/// (rkube's webhook client opens one per POST), every body kept.
struct Receiver {
    port: u16,
    bodies: std::sync::Arc<std::sync::Mutex<Vec<Value>>>,
    /// The status answered (200 unless a test changes it).
    status: std::sync::Arc<std::sync::atomic::AtomicU16>,
}

impl Receiver {
    fn start() -> Receiver {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().unwrap().port();
        let bodies = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let kept = bodies.clone();
        let status = std::sync::Arc::new(std::sync::atomic::AtomicU16::new(200));
        let answer = status.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                let mut reader = BufReader::new(conn);
                let mut length = 0;
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                        break;
                    }
                    let lower = line.to_ascii_lowercase();
                    if let Some(v) = lower.strip_prefix("content-length:") {
                        length = v.trim().parse().unwrap_or(0);
                    }
                }
                let mut body = vec![0; length];
                let code = answer.load(std::sync::atomic::Ordering::SeqCst);
                if reader.read_exact(&mut body).is_ok() && code == 200 {
                    if let Ok(v) = serde_json::from_slice(&body) {
                        kept.lock().unwrap().push(v);
                    }
                }
                let _ = reader.get_mut().write_all(
                    format!("HTTP/1.1 {code} X\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                        .as_bytes(),
                );
            }
        });
        Receiver {
            port,
            bodies,
            status,
        }
    }

    fn kubeconfig(&self) -> String {
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: sink\n  cluster:\n    server: http://127.0.0.1:{}/audit\ncontexts:\n- name: sink\n  context: {{cluster: sink, user: sink}}\nusers:\n- name: sink\n  user: {{}}\ncurrent-context: sink\n",
            self.port
        )
    }

    fn lists(&self) -> Vec<Value> {
        self.bodies.lock().unwrap().clone()
    }

    fn events(&self) -> Vec<Value> {
        self.lists()
            .iter()
            .flat_map(|l| l["items"].as_array().cloned().unwrap_or_default())
            .collect()
    }
}

#[test]
fn a_bad_policy_stops_the_start() {
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = dir.path().join("policy.yaml");
    std::fs::write(
        &policy,
        "apiVersion: audit.k8s.io/v1\nkind: Policy\nrules:\n- level: Loud\n",
    )
    .unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args(["apiserver", "--secure-port", "0", "--data-dir"])
        .arg(dir.path().join("data"))
        .arg("--audit-policy-file")
        .arg(&policy)
        .arg("--audit-log-path")
        .arg(dir.path().join("audit.log"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start rkube apiserver");
    let deadline = Instant::now() + Duration::from_secs(30);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("rkube apiserver started with a bad audit policy");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("output");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--audit-policy-file") && stderr.contains("policy.yaml"),
        "{stderr}"
    );
    // Nothing was opened before the policy was read.
    assert!(!dir.path().join("data").join("state.db").exists());
}
