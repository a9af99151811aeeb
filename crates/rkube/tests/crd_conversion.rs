//! CRD conversion webhooks end to end (upstream's e2e example): the test serves a conversion
//! webhook itself (HTTPS on a loopback port, its own CA passed as `caBundle`, the certificate code
//! of `admission_webhooks/server.rs`) converting between v1 `spec.hostPort: "host:port"` and v2
//! `spec.host` + `spec.port`. A CRD with v1 (storage) and v2 and `strategy: Webhook` pointing at
//! it: an object created in v1 reads in v2 with converted fields, one created in v2 is stored and
//! read in v1, a LIST in v2 sends one review for its objects not converted before (converted
//! objects are remembered by their bytes), a watch in v2 converts each event,
//! `status.storedVersions` holds the storage version, `/openapi/v2` publishes both versions'
//! schemas; after the storage version moves to v2 a no-op `kubectl replace` migrates the objects
//! (then v1 is dropped from `storedVersions` by hand); a CRD whose webhook is down fails reads in
//! the other version with upstream's message.

mod support;

#[path = "admission_webhooks/server.rs"]
mod server;

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, WatchEvent, WatchParams};
use serde_json::{json, Value};
use support::{Backend, Cluster};

/// The conversion webhook: answers `ConversionReview` v1 and remembers each review's desired
/// version and object count.
struct ConversionServer {
    addr: std::net::SocketAddr,
    ca_pem: String,
    reviews: Arc<Mutex<Vec<(String, usize)>>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl ConversionServer {
    fn start() -> ConversionServer {
        let (ca_pem, cert_pem, key_pem) = server::certificates();
        let acceptor = server::acceptor(&cert_pem, &key_pem);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let reviews = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let seen = reviews.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let serve = async {
                    loop {
                        let Ok((tcp, _)) = listener.accept().await else {
                            continue;
                        };
                        let (acceptor, seen) = (acceptor.clone(), seen.clone());
                        tokio::spawn(async move {
                            let Ok(tls) = acceptor.accept(tcp).await else {
                                return;
                            };
                            let service = hyper::service::service_fn(move |req| {
                                let seen = seen.clone();
                                async move { Ok::<_, Infallible>(handle(seen, req).await) }
                            });
                            let _ = hyper::server::conn::http1::Builder::new()
                                .serve_connection(TokioIo::new(tls), service)
                                .await;
                        });
                    }
                };
                tokio::select! {
                    _ = serve => {}
                    _ = stopped => {}
                }
            });
        });
        ConversionServer {
            addr,
            ca_pem,
            reviews,
            _stop: stop,
        }
    }

    fn reviews(&self) -> Vec<(String, usize)> {
        self.reviews.lock().unwrap().clone()
    }
}

/// v1 `spec.hostPort` <-> v2 `spec.host` + `spec.port`.
fn convert(obj: &Value, desired: &str) -> Value {
    let mut out = obj.clone();
    let spec = out["spec"].as_object_mut().cloned().unwrap_or_default();
    let mut spec = spec;
    if desired.ends_with("/v2") {
        if let Some(hp) = spec.remove("hostPort") {
            let (host, port) = hp
                .as_str()
                .unwrap_or("")
                .split_once(':')
                .unwrap_or(("", ""));
            spec.insert("host".into(), host.into());
            spec.insert("port".into(), port.into());
        }
    } else if let (Some(host), Some(port)) = (spec.remove("host"), spec.remove("port")) {
        let hp = format!(
            "{}:{}",
            host.as_str().unwrap_or(""),
            port.as_str().unwrap_or("")
        );
        spec.insert("hostPort".into(), hp.into());
    }
    out["spec"] = Value::Object(spec);
    out["apiVersion"] = desired.into();
    out
}

async fn handle(
    seen: Arc<Mutex<Vec<(String, usize)>>>,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let body = req.into_body().collect().await.map(|b| b.to_bytes());
    let review: Value = body
        .ok()
        .and_then(|b| serde_json::from_slice(&b).ok())
        .unwrap_or(Value::Null);
    let request = &review["request"];
    let desired = request["desiredAPIVersion"].as_str().unwrap_or("");
    let objects = request["objects"].as_array().cloned().unwrap_or_default();
    seen.lock()
        .unwrap()
        .push((desired.to_string(), objects.len()));
    let converted: Vec<Value> = objects.iter().map(|o| convert(o, desired)).collect();
    let answer = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "response": {"uid": request["uid"], "convertedObjects": converted, "result": {"status": "Success"}}});
    let mut r = Response::new(Full::new(Bytes::from(answer.to_string())));
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

fn crd(plural: &str, kind: &str, url: &str, ca_bundle: &str) -> String {
    format!(
        r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: {plural}.stable.example.com
spec:
  group: stable.example.com
  scope: Namespaced
  names: {{plural: {plural}, singular: {singular}, kind: {kind}}}
  conversion:
    strategy: Webhook
    webhook:
      conversionReviewVersions: [v1, v1beta1]
      clientConfig:
        url: {url}
        caBundle: {ca_bundle}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {{type: object, properties: {{hostPort: {{type: string}}}}}}
  - name: v2
    served: true
    storage: false
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              host: {{type: string}}
              port: {{type: string, nullable: true}}
"#,
        singular = plural.trim_end_matches('s'),
    )
}

fn json_of(text: &str) -> Value {
    serde_json::from_str(text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
}

#[test]
fn crd_conversion_webhooks() {
    let hook = ConversionServer::start();
    let ca_bundle = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(&hook.ca_pem)
    };
    // A port nothing listens on, for the CRD whose webhook is down.
    let dead = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let c = Cluster::start(Backend::Sqlite);
    let url = format!("https://{}/convert", hook.addr);
    let down = format!("https://{dead}/convert");
    c.kubectl_in(
        &["apply", "-f", "-"],
        Some(&format!(
            "{}---{}",
            crd("widgets", "Widget", &url, &ca_bundle),
            crd("gizmos", "Gizmo", &down, &ca_bundle)
        )),
    );
    for name in ["widgets", "gizmos"] {
        c.kubectl(&[
            "wait",
            "--for=condition=Established",
            &format!("crd/{name}.stable.example.com"),
            "--timeout=30s",
        ]);
    }

    let rt = support::runtime();
    let client = rt.block_on(c.client());
    let v2: Api<DynamicObject> = Api::namespaced_with(
        client,
        "default",
        &ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk("stable.example.com", "v2", "Widget"),
            "widgets",
        ),
    );
    let mut watch = rt
        .block_on(v2.watch(&WatchParams::default(), "0"))
        .expect("watch v2")
        .boxed();

    // Created in v1 (the storage version: no conversion), read in v2.
    c.kubectl_in(
        &["create", "-f", "-"],
        Some("apiVersion: stable.example.com/v1\nkind: Widget\nmetadata:\n  name: w1\n  labels: {app: demo}\nspec:\n  hostPort: \"localhost:7070\"\n"),
    );
    let w1 = json_of(&c.kubectl(&["get", "widgets.v2.stable.example.com", "w1", "-o", "json"]));
    assert_eq!(w1["apiVersion"], "stable.example.com/v2");
    assert_eq!(w1["spec"], json!({"host": "localhost", "port": "7070"}));
    assert_eq!(w1["metadata"]["labels"], json!({"app": "demo"}));

    // Created in v2: converted to v1 for storage, and back for the response.
    let created = json_of(&c.kubectl_in(
        &["create", "-o", "json", "-f", "-"],
        Some("apiVersion: stable.example.com/v2\nkind: Widget\nmetadata:\n  name: w2\nspec:\n  host: example.com\n  port: \"443\"\n"),
    ));
    assert_eq!(created["apiVersion"], "stable.example.com/v2");
    assert_eq!(
        created["spec"],
        json!({"host": "example.com", "port": "443"})
    );
    let w2 = json_of(&c.kubectl(&["get", "widgets.v1.stable.example.com", "w2", "-o", "json"]));
    assert_eq!(w2["apiVersion"], "stable.example.com/v1");
    assert_eq!(w2["spec"], json!({"hostPort": "example.com:443"}));
    assert!(hook
        .reviews()
        .contains(&("stable.example.com/v1".to_string(), 1)));

    // An update in v2 goes through the webhook both ways too.
    c.kubectl(&[
        "patch",
        "widgets.v2.stable.example.com",
        "w2",
        "--type=merge",
        "-p",
        r#"{"spec":{"port":"8443"}}"#,
    ]);
    let raw = json_of(&c.kubectl(&[
        "get",
        "--raw",
        "/apis/stable.example.com/v1/namespaces/default/widgets/w2",
    ]));
    assert_eq!(raw["spec"], json!({"hostPort": "example.com:8443"}));

    // A LIST in v2 (in a namespace the watch does not see): one review for its two objects. The
    // objects of `default` were converted as they are now (by the reads and the watch), and a
    // LIST there sends nothing.
    c.kubectl(&["create", "namespace", "other"]);
    for (name, hp) in [("w3", "a:1"), ("w4", "b:2")] {
        c.kubectl_in(
            &["create", "-n", "other", "-f", "-"],
            Some(&format!("apiVersion: stable.example.com/v1\nkind: Widget\nmetadata:\n  name: {name}\nspec:\n  hostPort: \"{hp}\"\n")),
        );
    }
    let before = hook.reviews().len();
    let list = json_of(&c.kubectl(&[
        "get",
        "widgets.v2.stable.example.com",
        "-n",
        "other",
        "-o",
        "json",
    ]));
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 2);
    for item in items {
        assert_eq!(item["apiVersion"], "stable.example.com/v2");
    }
    assert_eq!(items[1]["spec"], json!({"host": "b", "port": "2"}));
    assert_eq!(
        hook.reviews()[before..],
        [("stable.example.com/v2".to_string(), 2)],
        "one review for the list"
    );
    let before = hook.reviews().len();
    let list = json_of(&c.kubectl(&["get", "widgets.v2.stable.example.com", "-o", "json"]));
    let items = list["items"].as_array().expect("items");
    assert_eq!(items.len(), 2);
    for item in items {
        assert_eq!(item["apiVersion"], "stable.example.com/v2");
        assert!(item["spec"]["host"].is_string(), "{item}");
    }
    assert_eq!(
        hook.reviews().len(),
        before,
        "converted objects are remembered"
    );
    // The table kubectl prints by default comes from the converted objects too.
    let table = c.kubectl(&["get", "widgets.v2.stable.example.com"]);
    assert!(table.contains("w1") && table.contains("w2"), "{table}");

    // The watch in v2 saw both objects converted.
    let mut seen = std::collections::BTreeMap::new();
    rt.block_on(async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
        while !seen.contains_key("w1")
            || seen
                .get("w2")
                .map(|s: &Value| s["port"] != "8443")
                .unwrap_or(true)
        {
            let event = tokio::time::timeout_at(deadline, watch.next())
                .await
                .expect("watch events in time")
                .expect("watch open")
                .expect("watch event");
            if let WatchEvent::Added(o) | WatchEvent::Modified(o) = event {
                assert_eq!(
                    o.types.as_ref().map(|t| t.api_version.as_str()),
                    Some("stable.example.com/v2")
                );
                seen.insert(
                    o.metadata.name.clone().unwrap_or_default(),
                    o.data["spec"].clone(),
                );
            }
        }
    });
    assert_eq!(seen["w1"], json!({"host": "localhost", "port": "7070"}));
    assert_eq!(seen["w2"], json!({"host": "example.com", "port": "8443"}));

    // The storage version is recorded; both versions' schemas are published in /openapi/v2 (v2's
    // `nullable` stripped as upstream's v2 conversion does).
    let stored = c.kubectl(&[
        "get",
        "crd",
        "widgets.stable.example.com",
        "-o",
        "jsonpath={.status.storedVersions}",
    ]);
    assert_eq!(stored, r#"["v1"]"#);
    let openapi = json_of(&c.kubectl(&["get", "--raw", "/openapi/v2"]));
    let defs = &openapi["definitions"];
    let v2_spec = &defs["com.example.stable.v2.Widget"]["properties"]["spec"]["properties"];
    assert_eq!(v2_spec["host"]["type"], "string");
    assert!(v2_spec["port"].get("nullable").is_none(), "{v2_spec}");
    assert_eq!(
        defs["com.example.stable.v1.Widget"]["properties"]["spec"]["properties"]["hostPort"]
            ["type"],
        "string"
    );

    // Storage version migration: with v2 the storage version, both versions are recorded, objects
    // stay in v1 (reading them in v2 still needs the webhook) until rewritten; a no-op replace
    // rewrites them in v2, after which v1 can be dropped from storedVersions by hand.
    c.kubectl(&[
        "patch",
        "crd",
        "widgets.stable.example.com",
        "--type=json",
        "-p",
        r#"[{"op":"replace","path":"/spec/versions/0/storage","value":false},{"op":"replace","path":"/spec/versions/1/storage","value":true}]"#,
    ]);
    let stored_versions = || {
        c.kubectl(&[
            "get",
            "crd",
            "widgets.stable.example.com",
            "-o",
            "jsonpath={.status.storedVersions}",
        ])
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while stored_versions() != r#"["v1","v2"]"# {
        assert!(
            std::time::Instant::now() < deadline,
            "{}",
            stored_versions()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let n = hook.reviews().len();
    c.kubectl(&["get", "widgets.v2.stable.example.com", "w1", "-o", "json"]);
    assert!(hook.reviews().len() > n, "w1 is still stored in v1");
    let all = c.kubectl(&["get", "widgets.v2.stable.example.com", "-o", "json"]);
    c.kubectl_in(&["replace", "-f", "-"], Some(&all));
    let n = hook.reviews().len();
    let w1 = json_of(&c.kubectl(&["get", "widgets.v2.stable.example.com", "w1", "-o", "json"]));
    assert_eq!(w1["spec"], json!({"host": "localhost", "port": "7070"}));
    assert_eq!(hook.reviews().len(), n, "w1 is stored in v2 now");
    c.kubectl(&[
        "patch",
        "crd",
        "widgets.stable.example.com",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"storedVersions":["v2"]}}"#,
    ]);
    assert_eq!(stored_versions(), r#"["v2"]"#);

    // The webhook down: objects in the storage version are served as stored; the other version
    // fails with upstream's message.
    c.kubectl_in(
        &["create", "-f", "-"],
        Some("apiVersion: stable.example.com/v1\nkind: Gizmo\nmetadata:\n  name: g1\nspec:\n  hostPort: \"a:1\"\n"),
    );
    c.kubectl(&["get", "gizmos.v1.stable.example.com", "g1"]);
    let err = c.kubectl_fails(&["get", "gizmos.v2.stable.example.com", "g1"], None);
    let expected = format!(
        "conversion webhook for stable.example.com/v1, Kind=Gizmo failed: Post \"https://{dead}/convert?timeout=30s\": dial tcp {dead}: connect: connection refused"
    );
    assert!(err.contains(&expected), "{err}");
    let err = c.kubectl_fails(&["get", "gizmos.v2.stable.example.com"], None);
    assert!(err.contains(&expected), "{err}");
    let err = c.kubectl_fails(
        &["create", "-f", "-"],
        Some("apiVersion: stable.example.com/v2\nkind: Gizmo\nmetadata:\n  name: g2\nspec:\n  host: b\n  port: \"2\"\n"),
    );
    assert!(
        err.contains("conversion webhook for stable.example.com/v2, Kind=Gizmo failed"),
        "{err}"
    );
}
