//! An admission webhook served by the test itself: HTTPS on a free loopback port with a CA of its
//! own (the `caBundle` of the configurations), answering `AdmissionReview` v1 by path:
//!
//! - `/label-pods`: JSONPatch adding the label `webhook.example.com/mutated: "true"`;
//! - `/annotate-pods`: JSONPatch setting the annotation `webhook.example.com/labelled` to whether
//!   the pod has that label yet (so a reinvocation after `/label-pods` shows as `"true"`);
//! - `/deny-configmaps`: denies objects whose name starts with `bad` (`configmap "<name>" is not
//!   allowed`), allows the rest;
//! - `/warn`: allows with a warning (`ConfigMap <name> is looked at by warn.example.com`) and an
//!   audit annotation;
//! - `/slow`: answers after 3 s; `/allow` (and anything else): allows.
//!
//! Every review is counted per path and the last one kept, so tests can tell whether a webhook was
//! called and what it was sent.

#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};

/// The names the serving certificate carries: loopback by address and name, and the Service the
/// service-reference test creates.
pub const SERVICE_DNS: &str = "hook.default.svc";

#[derive(Default)]
struct Seen {
    counts: HashMap<String, usize>,
    last: HashMap<String, Value>,
}

/// A running webhook server; stops when dropped.
pub struct WebhookServer {
    pub addr: SocketAddr,
    /// PEM of the CA that signed the serving certificate.
    pub ca_pem: String,
    seen: Arc<Mutex<Seen>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for WebhookServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl WebhookServer {
    /// Starts on a thread of its own (the tests are synchronous).
    pub fn start() -> WebhookServer {
        let (ca_pem, cert_pem, key_pem) = certificates();
        let acceptor = acceptor(&cert_pem, &key_pem);
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Seen::default()));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let served = seen.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                tokio::select! {
                    _ = serve(listener, acceptor, served) => {}
                    _ = stopped => {}
                }
            });
        });
        WebhookServer {
            addr,
            ca_pem,
            seen,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// The `caBundle` of configurations naming this server.
    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    /// `https://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://{}{path}", self.addr)
    }

    /// How many reviews `path` has answered.
    pub fn count(&self, path: &str) -> usize {
        self.seen
            .lock()
            .unwrap()
            .counts
            .get(path)
            .copied()
            .unwrap_or(0)
    }

    /// The last review `path` received.
    pub fn last(&self, path: &str) -> Option<Value> {
        self.seen.lock().unwrap().last.get(path).cloned()
    }
}

/// A CA, and a serving certificate it signed (CA PEM, certificate PEM, key PEM).
pub fn certificates() -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().expect("ca key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "webhook-test-ca");
    let ca_cert = ca.self_signed(&ca_key).expect("ca cert");
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_cert.pem(), ca_key).expect("issuer");
    let key = rcgen::KeyPair::generate().expect("key");
    let params = rcgen::CertificateParams::new(vec![
        "127.0.0.1".to_string(),
        "localhost".to_string(),
        SERVICE_DNS.to_string(),
    ])
    .expect("params");
    let cert = params.signed_by(&key, &issuer).expect("sign");
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

pub fn acceptor(cert_pem: &str, key_pem: &str) -> tokio_rustls::TlsAcceptor {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .expect("cert");
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("key");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .expect("server config");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    tokio_rustls::TlsAcceptor::from(Arc::new(config))
}

async fn serve(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    seen: Arc<Mutex<Seen>>,
) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let _ = tcp.set_nodelay(true);
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
}

async fn handle(seen: Arc<Mutex<Seen>>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_string();
    let body = match req.into_body().collect().await {
        Ok(b) => b.to_bytes(),
        Err(_) => return reply(StatusCode::BAD_REQUEST, json!({})),
    };
    let Ok(review) = serde_json::from_slice::<Value>(&body) else {
        return reply(StatusCode::BAD_REQUEST, json!({}));
    };
    {
        let mut s = seen.lock().unwrap();
        *s.counts.entry(path.clone()).or_default() += 1;
        s.last.insert(path.clone(), review.clone());
    }
    let request = &review["request"];
    let uid = request["uid"].clone();
    let object = &request["object"];
    let name = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("");
    let mut response = json!({"uid": uid, "allowed": true});
    match path.as_str() {
        "/label-pods" => {
            let op = match object.pointer("/metadata/labels") {
                Some(Value::Object(_)) => json!({"op": "add",
                    "path": "/metadata/labels/webhook.example.com~1mutated", "value": "true"}),
                _ => json!({"op": "add", "path": "/metadata/labels",
                    "value": {"webhook.example.com/mutated": "true"}}),
            };
            set_patch(&mut response, json!([op]));
        }
        "/annotate-pods" => {
            let labelled = object
                .pointer("/metadata/labels/webhook.example.com~1mutated")
                .is_some();
            let value = labelled.to_string();
            let op = match object.pointer("/metadata/annotations") {
                Some(Value::Object(_)) => json!({"op": "add",
                    "path": "/metadata/annotations/webhook.example.com~1labelled", "value": value}),
                _ => json!({"op": "add", "path": "/metadata/annotations",
                    "value": {"webhook.example.com/labelled": value}}),
            };
            set_patch(&mut response, json!([op]));
        }
        "/deny-configmaps" if name.starts_with("bad") => {
            response["allowed"] = json!(false);
            response["status"] = json!({"message": format!("configmap {name:?} is not allowed")});
        }
        "/warn" => {
            response["warnings"] =
                json!([format!("ConfigMap {name} is looked at by warn.example.com")]);
            response["auditAnnotations"] = json!({"seen": "yes"});
        }
        "/slow" => tokio::time::sleep(Duration::from_secs(3)).await,
        _ => {}
    }
    reply(
        StatusCode::OK,
        json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}),
    )
}

fn set_patch(response: &mut Value, ops: Value) {
    response["patchType"] = json!("JSONPatch");
    response["patch"] = json!(base64::engine::general_purpose::STANDARD.encode(ops.to_string()));
}

fn reply(status: StatusCode, body: Value) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}
