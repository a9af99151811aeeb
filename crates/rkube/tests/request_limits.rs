//! What one client may make the API server do (issue 20): requests without credentials get 401 by
//! default (health and version excepted), and a large body sent with them is drained, not kept, so
//! the client reads its 401; a request past its deadline (`?timeout=`, `--request-timeout`) gets
//! upstream's 504 while its handler still finishes; a user holds at most `--max-watches-per-user`
//! watches open.

#[path = "admission_webhooks/server.rs"]
mod server;
mod support;

use std::time::{Duration, Instant};

use http::Request;
use kube::client::Body;
use server::WebhookServer;
use support::{Backend, Cluster};

const TOKENS: &str = "watcher-token,watcher,1001\n";

/// A client that sends no credentials of its own (requests add a bearer token when they want one).
async fn bare_client(c: &Cluster) -> kube::Client {
    let mut config = kube::Config::new(c.url.parse().expect("url"));
    config.accept_invalid_certs = true;
    // The test wants to see each 429, not kube's retries of it.
    config.default_retry = false;
    kube::Client::try_from(config).expect("client")
}

fn request(method: &str, uri: &str, token: Option<&str>, body: Vec<u8>) -> Request<Body> {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header("Content-Type", "application/json");
    if let Some(t) = token {
        req = req.header("Authorization", format!("Bearer {t}"));
    }
    req.body(Body::from(body)).expect("request")
}

async fn status_and_body(client: &kube::Client, req: Request<Body>) -> (u16, serde_json::Value) {
    use http_body_util::BodyExt;
    let resp = client.send(req).await.expect("send");
    let code = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.expect("body").to_bytes();
    (
        code,
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| String::from_utf8_lossy(&bytes).into_owned().into()),
    )
}

#[test]
fn request_limits() {
    let tokens = support::token_file(TOKENS);
    let c = Cluster::start_with(
        Backend::Sqlite,
        &[
            "--token-auth-file",
            tokens.path().to_str().unwrap(),
            "--max-watches-per-user",
            "2",
        ],
    );
    let rt = support::runtime();
    let client = rt.block_on(bare_client(&c));

    // Anonymous access is off: 401 for the API, health and version answered.
    rt.block_on(async {
        let (code, _) = status_and_body(&client, request("GET", "/api", None, vec![])).await;
        assert_eq!(code, 401);
        for path in ["/healthz", "/livez", "/readyz", "/version"] {
            let (code, body) = status_and_body(&client, request("GET", path, None, vec![])).await;
            assert_eq!(code, 200, "{path}: {body}");
        }
        // 8 MiB without credentials: answered 401 (read and dropped, never kept), not a reset.
        let big = vec![b' '; 8 << 20];
        let (code, body) = status_and_body(
            &client,
            request("POST", "/api/v1/namespaces/default/configmaps", None, big),
        )
        .await;
        assert_eq!(code, 401, "{body}");
        assert_eq!(body["reason"], "Unauthorized", "{body}");
    });

    request_deadlines(&c, &rt);
    watches_per_user(&c, &client, &rt);
}

/// A webhook that answers after 3 s holds a create back: with `?timeout=1s` the client gets 504
/// after a second, and the object still lands once the webhook answers; a `timeout` that is no
/// duration is a 400.
fn request_deadlines(c: &Cluster, rt: &tokio::runtime::Runtime) {
    let hook = WebhookServer::start();
    c.kubectl_in(
        &["create", "-f", "-"],
        Some("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: deadline\n  labels: {slow: \"yes\"}\n"),
    );
    c.kubectl_in(
        &["create", "-f", "-"],
        Some(&format!(
            "apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingWebhookConfiguration
metadata: {{name: slow}}
webhooks:
- name: slow.example.com
  clientConfig:
    url: {}
    caBundle: {}
  admissionReviewVersions: [v1]
  sideEffects: None
  timeoutSeconds: 10
  failurePolicy: Ignore
  rules: [{{operations: [CREATE], apiGroups: [\"\"], apiVersions: [v1], resources: [configmaps]}}]
  namespaceSelector: {{matchLabels: {{slow: \"yes\"}}}}
",
            hook.url("/slow"),
            hook.ca_bundle()
        )),
    );
    // The server's caches have the configuration once a consistent list answers.
    c.kubectl(&["get", "validatingwebhookconfigurations"]);
    let admin = rt.block_on(c.client());
    let cm = |name: &str| {
        serde_json::to_vec(&serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}}))
        .unwrap()
    };
    rt.block_on(async {
        let started = Instant::now();
        let (code, body) = status_and_body(
            &admin,
            request(
                "POST",
                "/api/v1/namespaces/deadline/configmaps?timeout=1s",
                None,
                cm("late"),
            ),
        )
        .await;
        assert_eq!(code, 504, "{body}");
        assert_eq!(body["reason"], "Timeout");
        assert_eq!(
            body["message"],
            "Timeout: request did not complete within requested timeout - context deadline exceeded"
        );
        assert!(
            started.elapsed() < Duration::from_millis(2800),
            "{:?}",
            started.elapsed()
        );
        let (code, body) = status_and_body(
            &admin,
            request(
                "POST",
                "/api/v1/namespaces/deadline/configmaps?timeout=soon",
                None,
                cm("never"),
            ),
        )
        .await;
        assert_eq!(code, 400, "{body}");
        assert_eq!(
            body["message"],
            "invalid timeout specified in the request URL - time: invalid duration \"soon\""
        );
    });
    // The handler went on: the object is there once the webhook answered.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !c
        .kubectl_output(&["get", "configmap", "late", "-n", "deadline"], None)
        .status
        .success()
    {
        assert!(
            Instant::now() < deadline,
            "the timed-out create never landed"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    c.kubectl(&["delete", "validatingwebhookconfiguration", "slow"]);
}

/// Two watches for `watcher` (the limit given), a third is 429 with Retry-After until one ends;
/// the admin is not counted.
fn watches_per_user(c: &Cluster, client: &kube::Client, rt: &tokio::runtime::Runtime) {
    c.kubectl(&[
        "create",
        "clusterrolebinding",
        "watcher-view",
        "--clusterrole=view",
        "--user=watcher",
    ]);
    let watch = "/api/v1/namespaces/default/configmaps?watch=true";
    // The first ends by itself after five seconds (the server closes it).
    let short = "/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=5";
    rt.block_on(async {
        // RBAC's cache may lag the binding by a moment: the first watch is retried until allowed.
        let deadline = Instant::now() + Duration::from_secs(30);
        let first = loop {
            let resp = client
                .send(request("GET", short, Some("watcher-token"), vec![]))
                .await
                .expect("watch");
            if resp.status() == 200 {
                break resp;
            }
            assert!(Instant::now() < deadline, "{}", resp.status());
            tokio::time::sleep(Duration::from_millis(200)).await;
        };
        let second = client
            .send(request("GET", watch, Some("watcher-token"), vec![]))
            .await
            .expect("watch");
        assert_eq!(second.status(), 200);
        let third = client
            .send(request("GET", watch, Some("watcher-token"), vec![]))
            .await
            .expect("watch");
        assert_eq!(third.status(), 429);
        assert_eq!(third.headers()["retry-after"], "1");
        // The admin's watches do not count.
        let admin = c.client().await;
        let mine: Vec<_> = futures::future::join_all(
            (0..3).map(|_| admin.send(request("GET", watch, None, vec![]))),
        )
        .await;
        assert!(mine.iter().all(|r| r.as_ref().unwrap().status() == 200));
        // One of watcher's ends: a new one is served.
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let again = client
                .send(request("GET", watch, Some("watcher-token"), vec![]))
                .await
                .expect("watch");
            if again.status() == 200 {
                break;
            }
            assert_eq!(again.status(), 429);
            assert!(
                Instant::now() < deadline,
                "the ended watch was never released"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        drop((first, second));
    });
}
