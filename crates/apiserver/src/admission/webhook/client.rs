//! How webhooks are reached (upstream `k8s.io/apiserver/pkg/util/webhook` `ClientManager` and the
//! REST client under it): HTTPS only, the server verified against the configuration's `caBundle`
//! (the system's roots without one), a `url` or a `service` reference, HTTP/1.1 connections kept
//! alive and reused per destination (a webhook sees one request per write), and responses read up
//! to [`MAX_RESPONSE_BYTES`].

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use http::{header, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;
use tokio::net::TcpStream;

use super::MAX_RESPONSE_BYTES;

/// Idle connections kept per destination, destinations pooled at most, and how long an idle
/// connection may wait for its next request (Go's `IdleConnTimeout` is 90 s).
const MAX_IDLE_PER_DESTINATION: usize = 32;
const MAX_DESTINATIONS: usize = 64;
const IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Where Go looks for the system's roots on Linux (`crypto/x509` `certFiles`).
const SYSTEM_ROOTS: &[&str] = &[
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

/// Where a webhook is (upstream `ClientConfig`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Destination {
    /// `clientConfig.url`: dialed as written.
    Url {
        /// As written, for error messages.
        url: String,
        host: String,
        port: u16,
        path_and_query: String,
    },
    /// `clientConfig.service`: a ready endpoint of the Service, verified as `<name>.<ns>.svc`.
    Service {
        namespace: String,
        name: String,
        port: u16,
        path: String,
    },
}

/// A webhook's destination and TLS settings.
#[derive(Clone)]
pub struct Endpoint {
    pub destination: Destination,
    pub tls: Arc<rustls::ClientConfig>,
    /// Tells pooled connections made with different roots apart.
    pub tls_id: u64,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:?}", self.destination)
    }
}

impl Endpoint {
    /// The URL upstream's client posts to, as its errors show it: the configured URL (or the
    /// Service's DNS name) with the `timeout` parameter client-go adds.
    pub fn url(&self, timeout: Duration) -> String {
        let base = match &self.destination {
            Destination::Url { url, .. } => url.clone(),
            Destination::Service {
                namespace,
                name,
                port,
                path,
            } => format!("https://{name}.{namespace}.svc:{port}{path}"),
        };
        let sep = if base.contains('?') { '&' } else { '?' };
        format!("{base}{sep}timeout={}s", timeout.as_secs())
    }
}

/// TLS settings per distinct `caBundle` (empty: the system's roots), shared by the webhooks that
/// name the same bundle and kept across recompilations so pooled connections stay usable.
#[derive(Default)]
pub struct TlsCache {
    configs: Mutex<HashMap<Vec<u8>, TlsEntry>>,
}

/// Shared TLS settings and the id pooled connections made with them carry.
type TlsEntry = (Arc<rustls::ClientConfig>, u64);

static NEXT_TLS_ID: AtomicU64 = AtomicU64::new(1);

impl TlsCache {
    fn get(&self, ca_bundle: &[u8], in_use: &mut HashSet<Vec<u8>>) -> Result<TlsEntry, String> {
        let mut configs = self.configs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = configs.get(ca_bundle) {
            in_use.insert(ca_bundle.to_vec());
            return Ok(found.clone());
        }
        let config = Arc::new(tls_config(ca_bundle)?);
        let entry = (config, NEXT_TLS_ID.fetch_add(1, Ordering::Relaxed));
        configs.insert(ca_bundle.to_vec(), entry.clone());
        in_use.insert(ca_bundle.to_vec());
        Ok(entry)
    }

    /// Forgets the bundles no webhook names any more.
    pub fn retain(&self, in_use: &HashSet<Vec<u8>>) {
        self.configs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k, _| in_use.contains(k));
    }
}

/// Client TLS trusting the PEM certificates of `ca_bundle`, or the system's roots when empty.
fn tls_config(ca_bundle: &[u8]) -> Result<rustls::ClientConfig, String> {
    let mut roots = rustls::RootCertStore::empty();
    if ca_bundle.is_empty() {
        let pem = system_roots().ok_or("no system certificate roots found")?;
        roots.add_parsable_certificates(CertificateDer::pem_slice_iter(pem).filter_map(Result::ok));
    } else {
        for cert in CertificateDer::pem_slice_iter(ca_bundle) {
            let cert = cert.map_err(|e| format!("unable to load root certificates: {e}"))?;
            roots
                .add(cert)
                .map_err(|e| format!("unable to load root certificates: {e}"))?;
        }
    }
    if roots.is_empty() {
        return Err("unable to load root certificates: unable to parse bytes as PEM block".into());
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

fn system_roots() -> Option<&'static [u8]> {
    static ROOTS: OnceLock<Option<Vec<u8>>> = OnceLock::new();
    ROOTS
        .get_or_init(|| {
            std::env::var_os("SSL_CERT_FILE")
                .map(std::path::PathBuf::from)
                .into_iter()
                .chain(SYSTEM_ROOTS.iter().map(std::path::PathBuf::from))
                .find_map(|p| std::fs::read(p).ok())
        })
        .as_deref()
}

/// The endpoint of a webhook's `clientConfig`; the error is the reason upstream's client manager
/// gives for not making a client.
pub fn endpoint(
    client_config: Option<&Value>,
    tls: &TlsCache,
    in_use: &mut HashSet<Vec<u8>>,
) -> Result<Endpoint, String> {
    let cc = client_config.unwrap_or(&Value::Null);
    let ca_bundle = match cc.get("caBundle").and_then(Value::as_str) {
        Some(b64) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| format!("invalid caBundle: {e}"))?,
        None => Vec::new(),
    };
    let destination = if let Some(url) = cc.get("url").and_then(Value::as_str) {
        url_destination(url)?
    } else if let Some(svc) = cc.get("service") {
        let field = |f: &str| svc.get(f).and_then(Value::as_str).unwrap_or("");
        let (namespace, name) = (field("namespace"), field("name"));
        if namespace.is_empty() || name.is_empty() {
            return Err("service namespace and name are required".into());
        }
        let port = svc.get("port").and_then(Value::as_u64).unwrap_or(443);
        let port = u16::try_from(port)
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("invalid service port {port}"))?;
        let path = match field("path") {
            "" => "/".to_string(),
            p => p.to_string(),
        };
        Destination::Service {
            namespace: namespace.into(),
            name: name.into(),
            port,
            path,
        }
    } else {
        return Err("webhook configuration must have either service or URL".into());
    };
    let (tls, tls_id) = tls.get(&ca_bundle, in_use)?;
    Ok(Endpoint {
        destination,
        tls,
        tls_id,
    })
}

fn url_destination(url: &str) -> Result<Destination, String> {
    let uri: http::Uri = url
        .parse()
        .map_err(|e| format!("invalid webhook URL {url:?}: {e}"))?;
    if uri.scheme_str() != Some("https") {
        return Err(format!(
            "invalid webhook URL {url:?}: the scheme must be https"
        ));
    }
    let host = uri
        .host()
        .ok_or_else(|| format!("invalid webhook URL {url:?}: no host"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    Ok(Destination::Url {
        url: url.to_string(),
        host: host.to_string(),
        port: uri.port_u16().unwrap_or(443),
        path_and_query: uri
            .path_and_query()
            .map_or("/".to_string(), |p| p.as_str().to_string()),
    })
}

/// One POST to a webhook: where to dial, the name to verify, and what to send.
pub struct Post<'a> {
    /// Host name or IP address to dial.
    pub dial_host: &'a str,
    pub port: u16,
    /// The name the server's certificate must carry (and the `Host` header's host).
    pub server_name: &'a str,
    pub path_and_query: &'a str,
    pub tls: &'a Arc<rustls::ClientConfig>,
    pub tls_id: u64,
}

/// One POST of `body` to `endpoint` within `timeout`, shared by admission and CRD conversion
/// webhooks: a `service` reference is resolved to a ready endpoint first. The error reads as
/// client-go's: `Post "<url>?timeout=<n>s": <why>`.
pub async fn send(
    api: &crate::ApiServer,
    client: &Client,
    endpoint: &Endpoint,
    timeout: Duration,
    body: Bytes,
) -> Result<(StatusCode, Bytes), String> {
    let url = endpoint.url(timeout);
    let send = async {
        let (dial_host, port, server_name, path) = match &endpoint.destination {
            Destination::Url {
                host,
                port,
                path_and_query,
                ..
            } => (host.clone(), *port, host.clone(), path_and_query.clone()),
            Destination::Service {
                namespace,
                name,
                port,
                path,
            } => {
                let to = crate::service_resolver::resolve(api, namespace, name, *port)
                    .map_err(|e| e.to_string())?;
                (
                    to.host,
                    to.port,
                    format!("{name}.{namespace}.svc"),
                    path.clone(),
                )
            }
        };
        let sep = if path.contains('?') { '&' } else { '?' };
        let path_and_query = format!("{path}{sep}timeout={}s", timeout.as_secs());
        client
            .post(
                &Post {
                    dial_host: &dial_host,
                    port,
                    server_name: &server_name,
                    path_and_query: &path_and_query,
                    tls: &endpoint.tls,
                    tls_id: endpoint.tls_id,
                },
                body,
            )
            .await
    };
    match tokio::time::timeout(timeout, send).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(format!("Post {url:?}: {e}")),
        Err(_) => Err(format!("Post {url:?}: context deadline exceeded")),
    }
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct PoolKey {
    tls_id: u64,
    host: String,
    port: u16,
    server_name: String,
}

type Sender = SendRequest<Full<Bytes>>;

/// Pooled HTTP/1.1 connections to webhooks.
#[derive(Default)]
pub struct Client {
    idle: Mutex<HashMap<PoolKey, Vec<(Sender, Instant)>>>,
}

impl Client {
    /// Sends `body` and reads the whole response (any status). Errors are transport errors, in
    /// the words Go's HTTP client uses where they are common (`dial tcp ...: connect: connection
    /// refused`).
    pub async fn post(&self, post: &Post<'_>, body: Bytes) -> Result<(StatusCode, Bytes), String> {
        let key = PoolKey {
            tls_id: post.tls_id,
            host: post.dial_host.to_string(),
            port: post.port,
            server_name: post.server_name.to_string(),
        };
        let authority = if post.server_name.contains(':') {
            format!("[{}]:{}", post.server_name, post.port)
        } else {
            format!("{}:{}", post.server_name, post.port)
        };
        loop {
            let (mut sender, reused) = match self.take_idle(&key) {
                Some(s) => (s, true),
                None => (connect(post).await?, false),
            };
            let req = Request::post(post.path_and_query)
                .header(header::HOST, &authority)
                .header(header::CONTENT_TYPE, "application/json")
                .header(header::ACCEPT, "application/json, */*")
                .header(header::USER_AGENT, "kube-apiserver-admission")
                .body(Full::new(body.clone()))
                .map_err(|e| e.to_string())?;
            let resp = match sender.send_request(req).await {
                Ok(resp) => resp,
                // The server closed a kept-alive connection before it took the request: try the
                // next one (Go's transport retries these too).
                Err(e) if reused && (e.is_canceled() || e.is_closed()) => continue,
                Err(e) => return Err(e.to_string()),
            };
            let status = resp.status();
            let body = read_limited(resp.into_body(), MAX_RESPONSE_BYTES).await?;
            self.put_idle(key, sender);
            return Ok((status, body));
        }
    }

    fn take_idle(&self, key: &PoolKey) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        let list = idle.get_mut(key)?;
        while let Some((sender, since)) = list.pop() {
            if !sender.is_closed() && sender.is_ready() && since.elapsed() < IDLE_TIMEOUT {
                return Some(sender);
            }
        }
        None
    }

    fn put_idle(&self, key: PoolKey, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.idle.lock().unwrap_or_else(|e| e.into_inner());
        if !idle.contains_key(&key) && idle.len() >= MAX_DESTINATIONS {
            idle.retain(|_, list| {
                list.retain(|(s, since)| !s.is_closed() && since.elapsed() < IDLE_TIMEOUT);
                !list.is_empty()
            });
            if idle.len() >= MAX_DESTINATIONS {
                return;
            }
        }
        let list = idle.entry(key).or_default();
        if list.len() < MAX_IDLE_PER_DESTINATION {
            list.push((sender, Instant::now()));
        }
    }
}

/// TCP, TLS (verifying `server_name`), then an HTTP/1.1 handshake.
async fn connect(post: &Post<'_>) -> Result<Sender, String> {
    let addr = if post.dial_host.contains(':') {
        format!("[{}]:{}", post.dial_host, post.port)
    } else {
        format!("{}:{}", post.dial_host, post.port)
    };
    let tcp = TcpStream::connect((post.dial_host, post.port))
        .await
        .map_err(|e| dial_error(&addr, &e))?;
    let _ = tcp.set_nodelay(true);
    let name = ServerName::try_from(post.server_name.to_string())
        .map_err(|e| format!("invalid server name {:?}: {e}", post.server_name))?;
    let tls = tokio_rustls::TlsConnector::from(post.tls.clone())
        .connect(name, tcp)
        .await
        .map_err(|e| format!("tls: failed to verify certificate: {e}"))?;
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!(error = %e, "webhook connection ended with an error");
        }
    });
    Ok(sender)
}

/// Go's `net.OpError` text for the common dial failures.
fn dial_error(addr: &str, e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::ConnectionRefused => {
            format!("dial tcp {addr}: connect: connection refused")
        }
        _ => format!("dial tcp {addr}: {e}"),
    }
}

async fn read_limited(mut body: hyper::body::Incoming, limit: usize) -> Result<Bytes, String> {
    let mut buf = BytesMut::new();
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| e.to_string())?;
        if let Some(data) = frame.data_ref() {
            if buf.len() + data.len() > limit {
                return Err(format!("the response body exceeds {limit} bytes"));
            }
            buf.extend_from_slice(data);
        }
    }
    Ok(buf.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ca_pem() -> String {
        let key = rcgen::KeyPair::generate().unwrap();
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.self_signed(&key).unwrap().pem()
    }

    #[test]
    fn url_and_service_destinations() {
        let tls = TlsCache::default();
        let mut used = HashSet::new();
        let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem());
        let ep = endpoint(
            Some(&json!({"url": "https://[::1]:8443/hook?x=1", "caBundle": ca})),
            &tls,
            &mut used,
        )
        .unwrap();
        assert_eq!(
            ep.destination,
            Destination::Url {
                url: "https://[::1]:8443/hook?x=1".into(),
                host: "::1".into(),
                port: 8443,
                path_and_query: "/hook?x=1".into(),
            }
        );
        assert_eq!(
            ep.url(Duration::from_secs(10)),
            "https://[::1]:8443/hook?x=1&timeout=10s"
        );
        // The same bundle shares its TLS settings.
        let again = endpoint(
            Some(&json!({"url": "https://example.com/other", "caBundle": ca})),
            &tls,
            &mut used,
        )
        .unwrap();
        assert_eq!(again.tls_id, ep.tls_id);

        let svc = endpoint(
            Some(&json!({"service": {"namespace": "ns", "name": "hook", "port": 8443}, "caBundle": ca})),
            &tls,
            &mut used,
        )
        .unwrap();
        assert_eq!(
            svc.url(Duration::from_secs(5)),
            "https://hook.ns.svc:8443/?timeout=5s"
        );
    }

    #[test]
    fn bad_client_configs_are_reasons_not_panics() {
        let tls = TlsCache::default();
        let mut used = HashSet::new();
        let mut err = |cc: Value| endpoint(Some(&cc), &tls, &mut used).unwrap_err();
        assert_eq!(
            err(json!({})),
            "webhook configuration must have either service or URL"
        );
        assert!(err(json!({"url": "http://x/"})).contains("scheme must be https"));
        assert!(err(json!({"url": "https://x/", "caBundle": "!!"})).contains("invalid caBundle"));
        let not_pem = base64::engine::general_purpose::STANDARD.encode("hello");
        assert_eq!(
            err(json!({"url": "https://x/", "caBundle": not_pem})),
            "unable to load root certificates: unable to parse bytes as PEM block"
        );
        assert!(err(json!({"service": {"name": "x"}})).contains("required"));
        assert!(
            err(json!({"service": {"namespace": "n", "name": "x", "port": 70000}}))
                .contains("invalid service port")
        );
    }

    #[test]
    fn dial_errors_read_as_gos() {
        let e = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        assert_eq!(
            dial_error("127.0.0.1:1", &e),
            "dial tcp 127.0.0.1:1: connect: connection refused"
        );
    }
}
