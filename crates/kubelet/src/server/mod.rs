//! The kubelet's HTTPS server (upstream `pkg/kubelet/server`), on port 10250 by default: container
//! logs (`/containerLogs/<ns>/<pod>/<container>`), `exec`, `attach` and `portForward` (passed through
//! to the runtime's streaming server, see [`streaming`]), `/pods`, `/healthz`, `/configz` (see
//! [`configz`]), `/stats/summary`, `/metrics/resource` and `/metrics` (see [`crate::stats`]).
//!
//! TLS with the certificate given by flags, or a self-signed one kept in `<root-dir>/pki`
//! (`kubelet.crt`, as upstream makes it). Every request is authenticated and authorized first
//! ([`auth`]): client certificates from `--client-ca-file`, bearer tokens through `TokenReview`,
//! anonymous access; then `AlwaysAllow` or `SubjectAccessReview` (`--authorization-mode Webhook`).
//!
//! Differences: `/metrics` has only the volume stats gauges; no `/metrics/cadvisor`,
//! `/metrics/probes`, `/spec`, `/runningpods` or `/checkpoint` endpoints.

pub mod auth;
pub mod configz;
pub mod logs;
pub mod streaming;

use std::convert::Infallible;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full, StreamBody};
use httpstream::proxy::ProxyBody;
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use k8s_openapi::api::core::v1::Pod;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};

use crate::kubelet::{lock, Kubelet};

/// Where and how the server listens.
#[derive(Clone, Debug)]
pub struct ServerConfig {
    /// `--address` (all interfaces by default).
    pub address: IpAddr,
    /// `--port`; 0 picks a free port.
    pub port: u16,
    /// `--tls-cert-file` / `--tls-private-key-file`.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    /// A serving certificate and key (PEM) handed over in memory (`rkube server` signs one with the
    /// cluster CA); used when no files are given.
    pub serving_cert: Option<(String, String)>,
    /// Where a self-signed certificate is kept when none is given (`<root-dir>/pki`).
    pub cert_dir: PathBuf,
    /// Names and addresses the self-signed certificate covers.
    pub hostnames: Vec<String>,
    /// `--client-ca-file`: clients must present a certificate signed by it.
    pub client_ca_file: Option<PathBuf>,
    /// Listen inside this network namespace (`/run/netns/NAME`): a node of `rkube server --nodes N`
    /// listens at its address in its own namespace, as a kubelet on its own machine would.
    pub netns: Option<PathBuf>,
    /// Who may use the server (`authentication`/`authorization` of the kubelet configuration).
    pub auth: auth::AuthConfig,
}

impl ServerConfig {
    pub fn new(cert_dir: PathBuf) -> ServerConfig {
        ServerConfig {
            address: IpAddr::from([0, 0, 0, 0]),
            port: 10250,
            tls_cert_file: None,
            tls_private_key_file: None,
            serving_cert: None,
            cert_dir,
            hostnames: Vec::new(),
            client_ca_file: None,
            netns: None,
            auth: auth::AuthConfig::default(),
        }
    }
}

/// A bound server, not yet serving (the kubelet registers its node with the actual port first).
pub struct Listener {
    tcp: tokio::net::TcpListener,
    tls: tokio_rustls::TlsAcceptor,
    auth: auth::AuthConfig,
    pub addr: SocketAddr,
}

/// Binds the port and prepares TLS.
pub async fn bind(config: &ServerConfig) -> Result<Listener, String> {
    let (cert, key) = serving_credentials(config)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    if config.auth.anonymous && config.auth.mode == auth::AuthorizationMode::AlwaysAllow {
        tracing::warn!(
            "kubelet server: anonymous access with --authorization-mode=AlwaysAllow: every client may read logs and exec"
        );
    }
    let builder = match &config.client_ca_file {
        Some(path) => {
            let pem = std::fs::read(path)
                .map_err(|e| format!("--client-ca-file {}: {e}", path.display()))?;
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&pem) {
                roots
                    .add(c.map_err(|e| format!("--client-ca-file: {e}"))?)
                    .map_err(|e| format!("--client-ca-file: {e}"))?;
            }
            // Certificates are checked when presented; requests without one get 401.
            let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                Arc::new(roots),
                provider,
            )
            .allow_unauthenticated()
            .build()
            .map_err(|e| format!("--client-ca-file: {e}"))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("kubelet serving certificate: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key.as_bytes())
        .map_err(|e| format!("kubelet serving key: {e}"))?;
    let mut tls = builder
        .with_single_cert(certs, key)
        .map_err(|e| format!("kubelet serving certificate: {e}"))?;
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let tcp = httpstream::netns::bind_tcp(
        config.netns.as_deref(),
        SocketAddr::new(config.address, config.port),
    )
    .map_err(|e| {
        format!(
            "kubelet server: cannot listen on {}:{}: {e}",
            config.address, config.port
        )
    })?;
    let addr = tcp.local_addr().map_err(|e| e.to_string())?;
    Ok(Listener {
        tcp,
        tls: tokio_rustls::TlsAcceptor::from(Arc::new(tls)),
        auth: config.auth.clone(),
        addr,
    })
}

/// The serving certificate: from files, handed over, or self-signed (made once, then reused).
fn serving_credentials(config: &ServerConfig) -> Result<(String, String), String> {
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| format!("cannot read {}: {e}", p.display()))
    };
    match (&config.tls_cert_file, &config.tls_private_key_file) {
        (Some(c), Some(k)) => return Ok((read(c)?, read(k)?)),
        (None, None) => {}
        _ => return Err("--tls-cert-file and --tls-private-key-file go together".into()),
    }
    if let Some(pair) = &config.serving_cert {
        return Ok(pair.clone());
    }
    let (crt, key) = (
        config.cert_dir.join("kubelet.crt"),
        config.cert_dir.join("kubelet.key"),
    );
    if crt.exists() && key.exists() {
        return Ok((read(&crt)?, read(&key)?));
    }
    let mut names = config.hostnames.clone();
    if names.is_empty() {
        names.push(crate::machine::hostname());
    }
    let made = (|| -> Result<(String, String), rcgen::Error> {
        let key = rcgen::KeyPair::generate()?;
        let mut params = rcgen::CertificateParams::new(names.clone())?;
        let now = jiff::Timestamp::now().as_second();
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, format!("{}-ca@{now}", names[0]));
        params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ServerAuth];
        let cert = params.self_signed(&key)?;
        Ok((cert.pem(), key.serialize_pem()))
    })()
    .map_err(|e| format!("cannot make the kubelet's serving certificate: {e}"))?;
    std::fs::create_dir_all(&config.cert_dir)
        .map_err(|e| format!("{}: {e}", config.cert_dir.display()))?;
    write_private(&key, &made.1)?;
    write_private(&crt, &made.0)?;
    Ok(made)
}

fn write_private(path: &Path, contents: &str) -> Result<(), String> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    f.write_all(contents.as_bytes())
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// Serves until the task is dropped.
pub async fn serve(listener: Listener, kubelet: Arc<Kubelet>) {
    let Listener {
        tcp,
        tls,
        auth,
        addr,
    } = listener;
    let auth = Arc::new(auth::Auth::new(
        auth,
        &kubelet.config.node_name,
        kubelet.client.clone(),
    ));
    // One per server: it keeps the CPU samples rates are computed from.
    let stats = Arc::new(crate::stats::Provider::default());
    // Volume use is measured in the background and only read by requests; stops with the server.
    // (A JoinSet aborts its tasks when dropped.)
    let mut background = tokio::task::JoinSet::new();
    let k = kubelet.clone();
    background.spawn(
        stats
            .volumes
            .clone()
            .run(kubelet.config.volume_stats_agg_period, move || {
                k.volumes.stat_sources()
            }),
    );
    tracing::info!(%addr, "kubelet server listening");
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let (stream, peer) = tokio::select! {
            accepted = tcp.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(error = %e, "kubelet server: accept failed");
                    continue;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
        };
        let _ = stream.set_nodelay(true);
        let (tls, kubelet, auth, stats) =
            (tls.clone(), kubelet.clone(), auth.clone(), stats.clone());
        connections.spawn(async move {
            let Ok(stream) = tls.accept(stream).await else {
                tracing::debug!(%peer, "kubelet server: TLS handshake failed");
                return;
            };
            // Certificates are only asked for, and verified in the handshake, with a client CA.
            let cert_user = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|c| c.first())
                .and_then(|c| auth::User::from_certificate(c.as_ref()));
            let cert_user = Arc::new(cert_user);
            let service = hyper::service::service_fn(move |req: Request<Incoming>| {
                let (kubelet, auth, cert_user, stats) =
                    (kubelet.clone(), auth.clone(), cert_user.clone(), stats.clone());
                async move {
                    let checked = auth
                        .check(
                            cert_user.as_ref().as_ref(),
                            req.method(),
                            req.uri().path(),
                            req.headers(),
                        )
                        .await;
                    Ok::<_, Infallible>(match checked {
                        Ok(_) => handle(&kubelet, &stats, req).await,
                        Err(auth::Refusal(code, message)) => text(
                            StatusCode::from_u16(code).unwrap_or(StatusCode::FORBIDDEN),
                            &message,
                        ),
                    })
                }
            });
            let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            if let Err(e) = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .await
            {
                tracing::debug!(%peer, error = %e, "kubelet server: connection ended with an error");
            }
        });
    }
}

pub(crate) fn text(code: StatusCode, body: &str) -> Response<ProxyBody> {
    let mut r = Response::new(BodyExt::boxed(Full::new(Bytes::from(body.to_string()))));
    *r.status_mut() = code;
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// What the server needs of a pod the kubelet runs.
#[derive(Clone, Debug)]
pub struct PodView {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    pub pod: Arc<Pod>,
    /// The kubelet's latest status for it (else the one from its source).
    pub status: Value,
}

impl Kubelet {
    /// The pod `namespace/name` this kubelet runs (upstream `GetPodByName`), with its latest status.
    pub fn pod_by_name(&self, namespace: &str, name: &str) -> Option<PodView> {
        let pod = lock(&self.pods)
            .values()
            .filter(|e| !e.removed)
            .find(|e| {
                e.pod.metadata.namespace.as_deref().unwrap_or("default") == namespace
                    && e.pod.metadata.name.as_deref() == Some(name)
            })
            .map(|e| e.pod.clone())?;
        Some(self.view(pod))
    }

    fn view(&self, pod: Arc<Pod>) -> PodView {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let status = self.status.last(&uid).unwrap_or_else(|| {
            pod.status
                .as_ref()
                .and_then(|s| serde_json::to_value(s).ok())
                .unwrap_or_else(|| json!({}))
        });
        PodView {
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid,
            pod,
            status,
        }
    }

    /// Every pod this kubelet runs, with its latest status.
    pub fn pod_views(&self) -> Vec<PodView> {
        let pods: Vec<Arc<Pod>> = lock(&self.pods)
            .values()
            .filter(|e| !e.removed)
            .map(|e| e.pod.clone())
            .collect();
        pods.into_iter().map(|p| self.view(p)).collect()
    }
}

/// The query as key/value pairs, repeated keys kept, form-decoded.
fn query_pairs(raw: Option<&str>) -> Vec<(String, String)> {
    fn decode(s: &str) -> String {
        let b = s.as_bytes();
        let mut out = Vec::with_capacity(b.len());
        let mut i = 0;
        while i < b.len() {
            let hex = b
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok());
            match (b[i], hex) {
                (b'+', _) => out.push(b' '),
                (b'%', Some(x)) => {
                    out.push(x);
                    i += 2;
                }
                (c, _) => out.push(c),
            }
            i += 1;
        }
        String::from_utf8_lossy(&out).into_owned()
    }
    raw.unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect()
}

async fn handle(
    kubelet: &Arc<Kubelet>,
    stats: &crate::stats::Provider,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let path = req.uri().path().to_string();
    let query = query_pairs(req.uri().query());
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let method = req.method().clone();
    let get_or_post = method == Method::GET || method == Method::POST;
    match segments.as_slice() {
        ["healthz"] => text(StatusCode::OK, "ok"),
        ["pods"] | ["pods", ""] if method == Method::GET => pods(kubelet),
        ["configz"] if method == Method::GET => body_response(
            "application/json",
            serde_json::to_vec(&configz::body(&kubelet.config)).unwrap_or_default(),
        ),
        ["stats", "summary"] if method == Method::GET => {
            // Upstream's query parameter: only the CPU and memory figures (what metrics-server asks).
            let only = query
                .iter()
                .any(|(k, v)| k == "only_cpu_and_memory" && v == "true");
            let summary = stats.collect(kubelet).await.to_json(only);
            body_response(
                "application/json",
                serde_json::to_vec(&summary).unwrap_or_default(),
            )
        }
        ["metrics", "resource"] if method == Method::GET => body_response(
            "text/plain; version=0.0.4; charset=utf-8",
            stats.collect(kubelet).await.to_prometheus().into_bytes(),
        ),
        // Of upstream's `/metrics`, only the volume stats collector's gauges.
        ["metrics"] if method == Method::GET => body_response(
            "text/plain; version=0.0.4; charset=utf-8",
            crate::stats::volume::prometheus(&stats.volumes.all()).into_bytes(),
        ),
        ["containerLogs", ns, pod, container] if method == Method::GET => {
            container_logs(kubelet, ns, pod, container, &query).await
        }
        ["exec" | "attach", ns, pod, container] if get_or_post => {
            let attach = segments[0] == "attach";
            let view = kubelet.pod_by_name(ns, pod);
            streaming::exec_or_attach(kubelet, view, container, &query, attach, req).await
        }
        ["exec" | "attach", ns, pod, uid, container] if get_or_post => {
            let attach = segments[0] == "attach";
            let view = kubelet.pod_by_name(ns, pod).filter(|v| v.uid == *uid);
            streaming::exec_or_attach(kubelet, view, container, &query, attach, req).await
        }
        ["portForward", ns, pod, rest @ ..] if get_or_post && rest.len() <= 1 => {
            let view = kubelet
                .pod_by_name(ns, pod)
                .filter(|v| rest.first().is_none_or(|u| *u == v.uid));
            streaming::port_forward(kubelet, view, &query, req).await
        }
        _ => text(StatusCode::NOT_FOUND, "404 page not found"),
    }
}

fn body_response(content_type: &'static str, body: Vec<u8>) -> Response<ProxyBody> {
    let mut r = Response::new(BodyExt::boxed(Full::new(Bytes::from(body))));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static(content_type),
    );
    r
}

/// `GET /pods`: a `PodList` of what the kubelet runs.
fn pods(kubelet: &Kubelet) -> Response<ProxyBody> {
    let items: Vec<Value> = kubelet
        .pod_views()
        .into_iter()
        .filter_map(|v| {
            let mut pod = serde_json::to_value(&*v.pod).ok()?;
            pod["status"] = v.status;
            Some(pod)
        })
        .collect();
    let list = json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items});
    let mut r = Response::new(BodyExt::boxed(Full::new(Bytes::from(
        serde_json::to_vec(&list).unwrap_or_default(),
    ))));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    r
}

async fn container_logs(
    kubelet: &Arc<Kubelet>,
    namespace: &str,
    pod: &str,
    container: &str,
    query: &[(String, String)],
) -> Response<ProxyBody> {
    if pod.is_empty() {
        return text(StatusCode::BAD_REQUEST, r#"{"message": "Missing podID."}"#);
    }
    let opts = match logs::parse_options(query, jiff::Timestamp::now()) {
        Ok(o) => o,
        Err(logs::Refusal(code, message)) => {
            return text(
                StatusCode::from_u16(code).unwrap_or(StatusCode::BAD_REQUEST),
                &message,
            )
        }
    };
    let Some(view) = kubelet.pod_by_name(namespace, pod) else {
        return text(
            StatusCode::NOT_FOUND,
            &format!("pod {pod:?} does not exist"),
        );
    };
    let spec_has = |field: &str| {
        let spec = view.pod.spec.as_ref();
        let list = match field {
            "init" => spec
                .and_then(|s| s.init_containers.as_ref())
                .map(|c| c.iter().any(|c| c.name == container)),
            "ephemeral" => spec
                .and_then(|s| s.ephemeral_containers.as_ref())
                .map(|c| c.iter().any(|c| c.name == container)),
            _ => spec.map(|s| s.containers.iter().any(|c| c.name == container)),
        };
        list.unwrap_or(false)
    };
    if !(spec_has("containers") || spec_has("init") || spec_has("ephemeral")) {
        return text(
            StatusCode::NOT_FOUND,
            &format!("container {container:?} not found in pod {pod:?}"),
        );
    }
    let id = match logs::container_for_logs(&view.status, pod, container, opts.previous) {
        Ok(id) => id,
        Err(message) => return text(StatusCode::BAD_REQUEST, &message),
    };
    // From here on the answer is 200 (upstream has written its first, empty chunk): failures are
    // told in the body, as upstream's are.
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    let runtime = kubelet.runtime.clone();
    tokio::spawn(async move {
        let path = match runtime.container_status(&id).await {
            Ok(s) => PathBuf::from(s.log_path),
            Err(e) => {
                tracing::debug!(error = %e, "container status for logs");
                let _ = tx
                    .send(Bytes::from(format!(
                        "unable to retrieve container logs for containerd://{id}"
                    )))
                    .await;
                return;
            }
        };
        logs::stream(path, opts, tx, move || {
            let (runtime, id) = (runtime.clone(), id.clone());
            async move { logs::is_running(&runtime, &id).await }
        })
        .await;
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok(Frame::data(b)), rx))
    });
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    r.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("text/plain"),
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn queries_keep_repeated_keys() {
        assert_eq!(
            query_pairs(Some("command=sh&command=-c&command=echo+a%3Bb&tty")),
            [
                ("command".to_string(), "sh".to_string()),
                ("command".to_string(), "-c".to_string()),
                ("command".to_string(), "echo a;b".to_string()),
                ("tty".to_string(), String::new()),
            ]
        );
    }

    #[test]
    fn self_signed_certificates_are_made_once() {
        let dir = tempfile::tempdir().unwrap();
        let mut config = ServerConfig::new(dir.path().join("pki"));
        config.hostnames = vec!["node-1".into(), "10.0.0.5".into()];
        let first = serving_credentials(&config).unwrap();
        let second = serving_credentials(&config).unwrap();
        assert_eq!(first, second);
        assert!(dir.path().join("pki/kubelet.key").exists());
        config.tls_cert_file = Some(dir.path().join("x.crt"));
        assert!(
            serving_credentials(&config).is_err(),
            "a cert file without a key"
        );
    }
}
