//! The webhook backend (upstream `plugin/pkg/audit/webhook` with `--audit-webhook-config-file`):
//! events are POSTed as one `audit.k8s.io/v1` `EventList` to the server a kubeconfig names, retried
//! with upstream's backoff (initial `--audit-webhook-initial-backoff`, factor 1.5, jitter 0.2, five
//! tries) when the failure looks transient.
//!
//! In `batch` mode (the default) the [`super::buffered`] backend collects events and calls
//! [`Webhook::send`] off the request path; in `blocking` mode the request waits for its own event's
//! POST ([`BlockingWebhook`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use http::{header, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use serde::Deserialize;
use tokio::net::TcpStream;

use super::event::Event;

/// Upstream's `DefaultRequestTimeout` for webhooks.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// Tries of one batch (upstream's `DefaultRetryBackoffWithInitialDelay` has 5 steps).
const TRIES: u32 = 5;
/// A receiver's answer is read up to this and then dropped (nothing in it is used).
const MAX_RESPONSE_BYTES: usize = 1 << 20;

/// Why the webhook's kubeconfig cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("--audit-webhook-config-file {path}: {reason}")]
    Invalid { path: PathBuf, reason: String },
}

/// How to reach the receiver: the current context's cluster and user of the kubeconfig.
#[derive(Clone)]
pub struct Target {
    scheme_https: bool,
    host: String,
    port: u16,
    path: String,
    /// `server` as written, for log lines.
    server: String,
    tls: Option<Arc<rustls::ClientConfig>>,
    bearer: Option<String>,
    basic: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct Kubeconfig {
    #[serde(default)]
    clusters: Vec<Named<Cluster>>,
    #[serde(default)]
    users: Vec<Named<User>>,
    #[serde(default)]
    contexts: Vec<Named<Context>>,
    #[serde(default)]
    current_context: String,
}

#[derive(Deserialize)]
struct Named<T> {
    #[serde(default)]
    name: String,
    #[serde(alias = "cluster", alias = "user", alias = "context")]
    value: Option<T>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(rename_all = "kebab-case")]
struct Cluster {
    #[serde(default)]
    server: String,
    certificate_authority: Option<PathBuf>,
    certificate_authority_data: Option<String>,
    #[serde(default)]
    insecure_skip_tls_verify: bool,
    tls_server_name: Option<String>,
}

#[derive(Deserialize, Default, Clone)]
#[serde(rename_all = "kebab-case")]
struct User {
    client_certificate: Option<PathBuf>,
    client_certificate_data: Option<String>,
    client_key: Option<PathBuf>,
    client_key_data: Option<String>,
    token: Option<String>,
    token_file: Option<PathBuf>,
    username: Option<String>,
    password: Option<String>,
}

#[derive(Deserialize, Default, Clone)]
struct Context {
    #[serde(default)]
    cluster: String,
    #[serde(default)]
    user: String,
}

impl Target {
    /// Reads the kubeconfig at `path` (YAML or JSON): the current context's cluster and user, or
    /// the first of each when it names none. Relative file names are relative to the kubeconfig.
    pub fn load(path: &Path) -> Result<Target, ConfigError> {
        let invalid = |reason: String| ConfigError::Invalid {
            path: path.to_path_buf(),
            reason,
        };
        let text = std::fs::read(path).map_err(|e| invalid(e.to_string()))?;
        let config: Kubeconfig =
            serde_yaml_ng::from_slice(&text).map_err(|e| invalid(e.to_string()))?;
        Target::from_kubeconfig(config, path.parent().unwrap_or(Path::new("."))).map_err(invalid)
    }

    fn from_kubeconfig(config: Kubeconfig, dir: &Path) -> Result<Target, String> {
        let context = if config.current_context.is_empty() {
            None
        } else {
            let found = config
                .contexts
                .iter()
                .find(|c| c.name == config.current_context)
                .and_then(|c| c.value.clone())
                .ok_or_else(|| format!("context {:?} not found", config.current_context))?;
            Some(found)
        };
        let cluster = match &context {
            Some(c) => config.clusters.iter().find(|n| n.name == c.cluster),
            None => config.clusters.first(),
        }
        .and_then(|n| n.value.clone())
        .ok_or("no cluster to send audit events to")?;
        let user = match &context {
            Some(c) => config.users.iter().find(|n| n.name == c.user),
            None => config.users.first(),
        }
        .and_then(|n| n.value.clone())
        .unwrap_or_default();
        let file = |p: &PathBuf| -> Result<Vec<u8>, String> {
            let p = if p.is_relative() {
                dir.join(p)
            } else {
                p.clone()
            };
            std::fs::read(&p).map_err(|e| format!("{}: {e}", p.display()))
        };
        let data = |d: &str| {
            base64::engine::general_purpose::STANDARD
                .decode(d.trim())
                .map_err(|e| format!("invalid base64 data: {e}"))
        };
        let uri: http::Uri = cluster
            .server
            .parse()
            .map_err(|e| format!("invalid server {:?}: {e}", cluster.server))?;
        let scheme_https = match uri.scheme_str() {
            Some("https") => true,
            Some("http") => false,
            _ => {
                return Err(format!(
                    "server {:?}: the scheme must be http or https",
                    cluster.server
                ))
            }
        };
        let host = uri
            .host()
            .ok_or_else(|| format!("server {:?} has no host", cluster.server))?
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri
            .port_u16()
            .unwrap_or(if scheme_https { 443 } else { 80 });
        let path = match uri.path_and_query().map(|p| p.as_str()) {
            None | Some("") => "/".to_string(),
            Some(p) => p.to_string(),
        };
        let tls = if scheme_https {
            if cluster.insecure_skip_tls_verify {
                return Err(
                    "insecure-skip-tls-verify is not supported: give certificate-authority".into(),
                );
            }
            let ca = match (
                &cluster.certificate_authority_data,
                &cluster.certificate_authority,
            ) {
                (Some(d), _) => Some(data(d)?),
                (None, Some(p)) => Some(file(p)?),
                (None, None) => None,
            };
            let cert = match (&user.client_certificate_data, &user.client_certificate) {
                (Some(d), _) => Some(data(d)?),
                (None, Some(p)) => Some(file(p)?),
                (None, None) => None,
            };
            let key = match (&user.client_key_data, &user.client_key) {
                (Some(d), _) => Some(data(d)?),
                (None, Some(p)) => Some(file(p)?),
                (None, None) => None,
            };
            Some(Arc::new(tls_config(ca.as_deref(), cert.zip(key))?))
        } else {
            None
        };
        let _ = &cluster.tls_server_name;
        let bearer = match (&user.token, &user.token_file) {
            (Some(t), _) if !t.is_empty() => Some(t.clone()),
            (_, Some(p)) => Some(String::from_utf8_lossy(&file(p)?).trim().to_string()),
            _ => None,
        };
        let basic = match (&user.username, &user.password) {
            (Some(u), Some(p)) if bearer.is_none() => {
                Some(base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}")))
            }
            _ => None,
        };
        Ok(Target {
            scheme_https,
            host,
            port,
            path,
            server: cluster.server.clone(),
            tls,
            bearer,
            basic,
        })
    }
}

fn tls_config(
    ca: Option<&[u8]>,
    client: Option<(Vec<u8>, Vec<u8>)>,
) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    match ca {
        Some(pem) => {
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| format!("certificate-authority: {e}"))?;
                roots
                    .add(cert)
                    .map_err(|e| format!("certificate-authority: {e}"))?;
            }
        }
        None => {
            for f in [
                "/etc/ssl/certs/ca-certificates.crt",
                "/etc/pki/tls/certs/ca-bundle.crt",
            ] {
                if let Ok(pem) = std::fs::read(f) {
                    roots.add_parsable_certificates(
                        CertificateDer::pem_slice_iter(&pem).filter_map(Result::ok),
                    );
                }
            }
        }
    }
    if roots.is_empty() {
        return Err("certificate-authority: no certificates found".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots);
    let mut config = match client {
        Some((cert, key)) => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("client-certificate: {e}"))?;
            let key =
                PrivateKeyDer::from_pem_slice(&key).map_err(|e| format!("client-key: {e}"))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| format!("client-certificate: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// A failed POST, and whether upstream's `DefaultShouldRetry` would try again.
#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("{0}")]
    Transport(String),
    #[error("the audit webhook answered {status}: {body}")]
    Status {
        status: StatusCode,
        body: String,
        retry_after: bool,
    },
}

impl SendError {
    /// Transient: a transport failure, 500, 504, 429 or any answer with `Retry-After`.
    fn transient(&self) -> bool {
        match self {
            SendError::Transport(_) => true,
            SendError::Status {
                status,
                retry_after,
                ..
            } => {
                *retry_after
                    || matches!(
                        *status,
                        StatusCode::INTERNAL_SERVER_ERROR
                            | StatusCode::GATEWAY_TIMEOUT
                            | StatusCode::TOO_MANY_REQUESTS
                    )
            }
        }
    }
}

/// Serialized events (JSON lines) as one `EventList`.
fn list_of_lines(lines: Vec<Vec<u8>>) -> Bytes {
    let len: usize = lines.iter().map(Vec::len).sum();
    let mut out = BytesMut::with_capacity(96 + len);
    out.extend_from_slice(
        br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":["#,
    );
    for (i, line) in lines.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b",");
        }
        out.extend_from_slice(line.strip_suffix(b"\n").unwrap_or(line));
    }
    out.extend_from_slice(b"]}");
    out.freeze()
}

/// Events as one `EventList` (the events' own JSON, joined).
pub fn event_list(events: Vec<Event>) -> Bytes {
    let mut out = BytesMut::with_capacity(128 + events.len() * 512);
    out.extend_from_slice(
        br#"{"kind":"EventList","apiVersion":"audit.k8s.io/v1","metadata":{},"items":["#,
    );
    let mut first = true;
    for event in events {
        // Serializing decodes bodies, the one complex step: a panic loses that event only.
        let Ok(mut line) =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| event.to_json_line()))
        else {
            continue;
        };
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        if !first {
            out.extend_from_slice(b",");
        }
        first = false;
        out.extend_from_slice(&line);
    }
    out.extend_from_slice(b"]}");
    out.freeze()
}

/// The sending side, shared by the batch and blocking modes.
pub struct Webhook {
    target: Target,
    initial_backoff: Duration,
    /// `--audit-webhook-truncate-*` (see [`super::truncate`]).
    truncate: Option<super::truncate::TruncateConfig>,
    pub(super) errors: AtomicU64,
}

impl Webhook {
    pub fn new(target: Target, initial_backoff: Duration) -> Webhook {
        Webhook {
            target,
            initial_backoff,
            truncate: None,
            errors: AtomicU64::new(0),
        }
    }

    /// Events over the limits are trimmed or dropped, batches split (see [`super::truncate`]).
    pub fn with_truncate(mut self, truncate: Option<super::truncate::TruncateConfig>) -> Webhook {
        self.truncate = truncate;
        self
    }

    /// `events` as the EventList bodies to POST: one, or with truncation on, as many as keep each
    /// within the max batch size (events too large even without their objects are counted as
    /// errors and left out).
    fn bodies(&self, events: Vec<Event>) -> Vec<(Bytes, u64)> {
        let Some(limit) = self.truncate else {
            let n = events.len() as u64;
            return vec![(event_list(events), n)];
        };
        let mut lines = Vec::with_capacity(events.len());
        for event in events {
            let line = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                super::truncate::to_json_line(event, Some(&limit))
            }));
            match line {
                Ok(Ok(line)) => lines.push(line),
                Ok(Err(e)) => {
                    let total = self.errors.fetch_add(1, Ordering::Relaxed) + 1;
                    if total == 1 || total.is_multiple_of(1000) {
                        tracing::warn!(error = %e, total, "audit webhook: event dropped");
                    }
                }
                Err(_) => {
                    self.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        }
        super::truncate::batches(lines, limit.max_batch_size)
            .into_iter()
            .map(|run| {
                let n = run.len() as u64;
                (list_of_lines(run), n)
            })
            .collect()
    }

    /// POSTs `events` as one EventList (several when truncation splits them), retrying transient
    /// failures with upstream's backoff.
    /// A batch that cannot be delivered is logged and its events counted as errors.
    pub async fn send(&self, events: Vec<Event>) -> Result<(), SendError> {
        if events.is_empty() {
            return Ok(());
        }
        let mut result = Ok(());
        for (body, n) in self.bodies(events) {
            if let Err(e) = self.send_body(body, n).await {
                result = Err(e);
            }
        }
        result
    }

    /// POSTs one EventList of `n` events, with retries.
    async fn send_body(&self, body: Bytes, n: u64) -> Result<(), SendError> {
        let mut delay = self.initial_backoff;
        let mut tries = 0;
        let result = loop {
            tries += 1;
            let attempt = tokio::time::timeout(REQUEST_TIMEOUT, self.post(body.clone())).await;
            let err = match attempt {
                Ok(Ok(())) => break Ok(()),
                Ok(Err(e)) => e,
                Err(_) => SendError::Transport(format!(
                    "no answer from {} within {REQUEST_TIMEOUT:?}",
                    self.target.server
                )),
            };
            if tries >= TRIES || !err.transient() {
                break Err(err);
            }
            tracing::debug!(error = %err, ?delay, "audit webhook: retrying");
            tokio::time::sleep(jittered(delay)).await;
            delay = delay.mul_f64(1.5);
        };
        if let Err(e) = &result {
            let total = self.errors.fetch_add(n, Ordering::Relaxed) + n;
            tracing::error!(
                error = %e,
                events = n,
                errors = total,
                server = %self.target.server,
                "Error in audit plugin 'webhook' affecting {n} audit events"
            );
        }
        result
    }

    async fn post(&self, body: Bytes) -> Result<(), SendError> {
        let t = &self.target;
        let transport = |e: &dyn std::fmt::Display| SendError::Transport(e.to_string());
        let tcp = TcpStream::connect((t.host.as_str(), t.port))
            .await
            .map_err(|e| SendError::Transport(format!("dial tcp {}:{}: {e}", t.host, t.port)))?;
        let _ = tcp.set_nodelay(true);
        let authority = if t.host.contains(':') {
            format!("[{}]:{}", t.host, t.port)
        } else {
            format!("{}:{}", t.host, t.port)
        };
        let mut req = Request::post(t.path.as_str())
            .header(header::HOST, authority)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::ACCEPT, "application/json, */*")
            .header(header::USER_AGENT, "kube-apiserver-audit");
        if let Some(token) = &t.bearer {
            req = req.header(header::AUTHORIZATION, format!("Bearer {token}"));
        } else if let Some(basic) = &t.basic {
            req = req.header(header::AUTHORIZATION, format!("Basic {basic}"));
        }
        let req = req.body(Full::new(body)).map_err(|e| transport(&e))?;
        let resp = match (&t.tls, t.scheme_https) {
            (Some(tls), true) => {
                let name = ServerName::try_from(t.host.clone()).map_err(|e| transport(&e))?;
                let stream = tokio_rustls::TlsConnector::from(tls.clone())
                    .connect(name, tcp)
                    .await
                    .map_err(|e| transport(&e))?;
                request(TokioIo::new(stream), req).await?
            }
            _ => request(TokioIo::new(tcp), req).await?,
        };
        let status = resp.status();
        let retry_after = resp.headers().contains_key(header::RETRY_AFTER);
        let mut body = resp.into_body();
        let mut read = BytesMut::new();
        while let Some(frame) = body.frame().await {
            let Ok(frame) = frame else { break };
            if let Some(d) = frame.data_ref() {
                if read.len() + d.len() > MAX_RESPONSE_BYTES {
                    break;
                }
                read.extend_from_slice(d);
            }
        }
        if status.is_success() {
            return Ok(());
        }
        let text = String::from_utf8_lossy(&read);
        Err(SendError::Status {
            status,
            body: text.chars().take(256).collect(),
            retry_after,
        })
    }
}

async fn request<S>(
    io: TokioIo<S>,
    req: Request<Full<Bytes>>,
) -> Result<http::Response<hyper::body::Incoming>, SendError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, conn) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|e| SendError::Transport(e.to_string()))?;
    tokio::spawn(async move {
        let _ = conn.await;
    });
    sender
        .send_request(req)
        .await
        .map_err(|e| SendError::Transport(e.to_string()))
}

/// `wait.Jitter(d, 0.2)`: d plus up to 20 %.
fn jittered(d: Duration) -> Duration {
    d.mul_f64(1.0 + 0.2 * rand::random::<f64>())
}

/// `--audit-webhook-mode=blocking`: each event is POSTed by itself while its request waits, as
/// upstream. The POST runs on a thread of its own (with its own runtime), so the waiting request
/// holds its worker through `block_in_place` rather than starving the server's runtime.
pub struct BlockingWebhook {
    tx: std::sync::mpsc::SyncSender<(Event, std::sync::mpsc::SyncSender<bool>)>,
}

/// Requests waiting on the blocking sender at once; past it a request waits for a place.
const BLOCKING_QUEUE: usize = 1024;
/// POSTs in flight at once in blocking mode.
const BLOCKING_IN_FLIGHT: usize = 64;

impl BlockingWebhook {
    pub fn start(webhook: Arc<Webhook>) -> Result<BlockingWebhook, String> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<(Event, std::sync::mpsc::SyncSender<bool>)>(
            BLOCKING_QUEUE,
        );
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("audit-webhook-io")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the audit webhook: {e}"))?;
        std::thread::Builder::new()
            .name("audit-webhook".into())
            .spawn(move || {
                let slots = Arc::new(tokio::sync::Semaphore::new(BLOCKING_IN_FLIGHT));
                while let Ok((event, done)) = rx.recv() {
                    let Ok(permit) = rt.block_on(slots.clone().acquire_owned()) else {
                        return;
                    };
                    let webhook = webhook.clone();
                    rt.spawn(async move {
                        let sent = webhook.send(vec![event]).await.is_ok();
                        let _ = done.try_send(sent);
                        drop(permit);
                    });
                }
            })
            .map_err(|e| format!("cannot start the audit webhook: {e}"))?;
        Ok(BlockingWebhook { tx })
    }

    /// Sends the event and waits until the POST is done: whether it was delivered.
    pub fn process(&self, event: Event) -> bool {
        let (done_tx, done_rx) = std::sync::mpsc::sync_channel(1);
        let wait =
            move || self.tx.send((event, done_tx)).is_ok() && done_rx.recv().unwrap_or(false);
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        if multi_thread {
            tokio::task::block_in_place(wait)
        } else {
            wait()
        }
    }
}

#[cfg(test)]
#[path = "webhook_tests.rs"]
mod tests;
