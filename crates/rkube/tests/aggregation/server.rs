//! An extension API server served by the test itself (what upstream's sample-apiserver "wardle"
//! is to its e2e test): HTTPS with a CA of its own, a serving certificate for
//! `api.wardle.svc` (the name the aggregator verifies), client certificates required and verified
//! against the front-proxy CA rkube publishes, with the common name among the allowed names; the
//! user is read from `X-Remote-User`/`X-Remote-Group` as upstream's request-header authenticator
//! does. It serves `wardle.example.com/v1alpha1` with one namespaced kind, Flunder:
//!
//! - `GET /apis/wardle.example.com/v1alpha1`: the APIResourceList (`flunders`, `flunders/status`);
//! - `GET .../namespaces/<ns>/flunders`: a list of one Flunder, `first`, in that namespace;
//! - the same with `watch=true`: an ADDED event of `first`, then the stream stays open;
//! - `GET .../namespaces/<ns>/flunders/first`: that Flunder;
//! - `GET /openapi/v3/apis/wardle.example.com/v1alpha1`: an OpenAPI v3 document with its schema.
//!
//! Every request is recorded with the user and groups it came with.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use base64::Engine as _;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};

pub const GROUP: &str = "wardle.example.com";
pub const VERSION: &str = "v1alpha1";
/// The name the serving certificate carries: Service `api` in namespace `wardle`.
pub const SERVICE_DNS: &str = "api.wardle.svc";

/// One request as the extension server saw it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub path: String,
    pub user: String,
    pub groups: Vec<String>,
}

pub struct ExtensionServer {
    pub addr: SocketAddr,
    /// PEM of the CA of the serving certificate (the APIService's `caBundle`).
    pub ca_pem: String,
    seen: Arc<Mutex<Vec<Seen>>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for ExtensionServer {
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl ExtensionServer {
    /// Serves on `ip` (a free port), trusting client certificates of `client_ca_pem` whose common
    /// name is one of `allowed_names`.
    pub fn start(ip: std::net::IpAddr, client_ca_pem: &str, allowed_names: Vec<String>) -> Self {
        let (ca_pem, cert_pem, key_pem) = certificates();
        let config = tls_config(&cert_pem, &key_pem, client_ca_pem);
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = std::net::TcpListener::bind((ip, 0)).expect("bind");
        listener.set_nonblocking(true).expect("nonblocking");
        let addr = listener.local_addr().expect("addr");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let served = seen.clone();
        let allowed = Arc::new(allowed_names);
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                tokio::select! {
                    _ = serve(listener, acceptor, served, allowed) => {}
                    _ = stopped => {}
                }
            });
        });
        ExtensionServer {
            addr,
            ca_pem,
            seen,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    pub fn ca_bundle(&self) -> String {
        base64::engine::general_purpose::STANDARD.encode(&self.ca_pem)
    }

    pub fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }
}

fn certificates() -> (String, String, String) {
    let ca_key = rcgen::KeyPair::generate().expect("ca key");
    let mut ca = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(rcgen::DnType::CommonName, "wardle-test-ca");
    let ca_cert = ca.self_signed(&ca_key).expect("ca cert");
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_cert.pem(), ca_key).expect("issuer");
    let key = rcgen::KeyPair::generate().expect("key");
    let params = rcgen::CertificateParams::new(vec![SERVICE_DNS.to_string()]).expect("params");
    let cert = params.signed_by(&key, &issuer).expect("sign");
    (ca_cert.pem(), cert.pem(), key.serialize_pem())
}

fn tls_config(cert_pem: &str, key_pem: &str, client_ca_pem: &str) -> rustls::ServerConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(client_ca_pem.as_bytes()) {
        roots.add(cert.expect("client CA")).expect("client CA");
    }
    // A client without a certificate of the front-proxy CA does not get past the handshake.
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .build()
    .expect("client verifier");
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .expect("cert");
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).expect("key");
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("versions")
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .expect("server config");
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

/// The common name of the client's certificate.
fn client_name(tls: &tokio_rustls::server::TlsStream<tokio::net::TcpStream>) -> Option<String> {
    let cert = tls.get_ref().1.peer_certificates()?.first()?.clone();
    let (_, parsed) = x509_parser::parse_x509_certificate(&cert).ok()?;
    let cn = parsed.subject().iter_common_name().next()?;
    cn.as_str().ok().map(str::to_string)
}

type Body = BoxBody<Bytes, Infallible>;

async fn serve(
    listener: tokio::net::TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    seen: Arc<Mutex<Vec<Seen>>>,
    allowed: Arc<Vec<String>>,
) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        let (acceptor, seen, allowed) = (acceptor.clone(), seen.clone(), allowed.clone());
        tokio::spawn(async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            // Upstream's request-header authenticator: only the allowed proxy names may assert
            // a user.
            let proxy_allowed = client_name(&tls).is_some_and(|cn| allowed.contains(&cn));
            let service = hyper::service::service_fn(move |req| {
                let seen = seen.clone();
                async move { Ok::<_, Infallible>(handle(seen, proxy_allowed, req)) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(tls), service)
                .await;
        });
    }
}

fn json_response(status: StatusCode, body: &Value) -> Response<Body> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_string())).boxed());
    *r.status_mut() = status;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

fn flunder(namespace: &str) -> Value {
    json!({
        "apiVersion": format!("{GROUP}/{VERSION}"),
        "kind": "Flunder",
        "metadata": {"name": "first", "namespace": namespace, "resourceVersion": "1",
                     "uid": "5b1d1f1e-0000-4000-8000-000000000001",
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"reference": "none"},
    })
}

/// The group version's OpenAPI v3 document: the Flunder schema, found by its GVK.
fn openapi() -> Value {
    let text = |d: &str| json!({"type": "string", "description": d});
    json!({
        "openapi": "3.0.0",
        "info": {"title": "wardle", "version": VERSION},
        // kubectl explain finds the kind through the GET operation of its path, as upstream's
        // servers publish it.
        "paths": {
            format!("/apis/{GROUP}/{VERSION}/namespaces/{{namespace}}/flunders/{{name}}"): {"get": {
                "x-kubernetes-action": "get",
                "x-kubernetes-group-version-kind": {"group": GROUP, "kind": "Flunder", "version": VERSION},
                "responses": {"200": {"description": "OK", "content": {"application/json": {
                    "schema": {"$ref": "#/components/schemas/com.example.wardle.v1alpha1.Flunder"},
                }}}},
            }},
        },
        "components": {"schemas": {"com.example.wardle.v1alpha1.Flunder": {
            "description": "Flunder is an example type.",
            "type": "object",
            "properties": {
                "apiVersion": text("APIVersion defines the versioned schema of this object."),
                "kind": text("Kind is the type of this object."),
                "metadata": {"type": "object", "description": "Standard object metadata."},
                "spec": {
                    "type": "object",
                    "description": "The desired flunder.",
                    "properties": {"reference": text("What the flunder refers to.")},
                },
            },
            "x-kubernetes-group-version-kind": [{"group": GROUP, "kind": "Flunder", "version": VERSION}],
        }}},
    })
}

fn handle(
    seen: Arc<Mutex<Vec<Seen>>>,
    proxy_allowed: bool,
    req: Request<Incoming>,
) -> Response<Body> {
    if !proxy_allowed {
        return json_response(
            StatusCode::UNAUTHORIZED,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 401,
                    "reason": "Unauthorized", "message": "Unauthorized"}),
        );
    }
    let header_values = |name: &str| -> Vec<String> {
        req.headers()
            .get_all(name)
            .iter()
            .filter_map(|v| v.to_str().ok().map(str::to_string))
            .collect()
    };
    let path = req.uri().path().to_string();
    seen.lock().unwrap().push(Seen {
        path: path.clone(),
        user: header_values("x-remote-user").join(","),
        groups: header_values("x-remote-group"),
    });
    let watch = req
        .uri()
        .query()
        .is_some_and(|q| q.split('&').any(|p| p == "watch=true" || p == "watch=1"));
    if path == format!("/openapi/v3/apis/{GROUP}/{VERSION}") {
        return json_response(StatusCode::OK, &openapi());
    }
    let base = format!("/apis/{GROUP}/{VERSION}");
    let rest = path.strip_prefix(&base).unwrap_or("/unknown");
    let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        [] => json_response(
            StatusCode::OK,
            &json!({
                "kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": format!("{GROUP}/{VERSION}"),
                "resources": [
                    {"name": "flunders", "singularName": "flunder", "namespaced": true,
                     "kind": "Flunder", "verbs": ["get", "list", "watch"], "shortNames": ["fl"]},
                    {"name": "flunders/status", "singularName": "", "namespaced": true,
                     "kind": "Flunder", "verbs": ["get"]},
                ],
            }),
        ),
        ["namespaces", ns, "flunders"] if watch => {
            let event = format!("{}\n", json!({"type": "ADDED", "object": flunder(ns)}));
            let first = futures::stream::once(async move {
                Ok::<_, Infallible>(Frame::data(Bytes::from(event)))
            });
            // The stream stays open until the client goes.
            let body =
                StreamBody::new(futures::StreamExt::chain(first, futures::stream::pending()));
            let mut r = Response::new(BodyExt::boxed(body));
            r.headers_mut().insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
            r
        }
        ["namespaces", ns, "flunders"] => json_response(
            StatusCode::OK,
            &json!({
                "apiVersion": format!("{GROUP}/{VERSION}"), "kind": "FlunderList",
                "metadata": {"resourceVersion": "1"},
                "items": [flunder(ns)],
            }),
        ),
        ["namespaces", ns, "flunders", "first"] => json_response(StatusCode::OK, &flunder(ns)),
        _ => json_response(
            StatusCode::NOT_FOUND,
            &json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 404,
                    "reason": "NotFound", "message": "the server could not find the requested resource"}),
        ),
    }
}
