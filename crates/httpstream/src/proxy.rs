//! Reaching a backend and passing traffic through (upstream
//! `k8s.io/apimachinery/pkg/util/proxy.UpgradeAwareHandler` and its dialer): one HTTP/1.1 connection
//! per request, over TLS when the backend is `https`, that keeps serving after a `101 Switching
//! Protocols` so the upgraded bytes can be copied both ways unchanged.
//!
//! Differences: no connection pooling (streaming requests are long-lived and rare), no rewriting of
//! HTML in proxied responses, no bandwidth throttling.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, Request, Response};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Body, Frame, Incoming};
use hyper::upgrade::{OnUpgrade, Upgraded};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

/// How long dialing a backend (TCP and TLS) may take.
pub const DIAL_TIMEOUT: Duration = Duration::from_secs(30);

#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    #[error("error dialing backend: {0}")]
    Dial(String),
    #[error("error trying to reach service: {0}")]
    Request(String),
}

/// Any connection a request can travel on.
pub trait Io: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> Io for T {}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    Http,
    Https,
}

impl Scheme {
    pub fn as_str(self) -> &'static str {
        match self {
            Scheme::Http => "http",
            Scheme::Https => "https",
        }
    }
}

/// Where a backend is and how to talk to it.
#[derive(Clone)]
pub struct Backend {
    pub scheme: Scheme,
    pub host: String,
    pub port: u16,
    /// TLS settings for `https`.
    pub tls: Option<Arc<rustls::ClientConfig>>,
    /// Dial from inside this network namespace (`/run/netns/NAME`) instead of the process's own.
    pub netns: Option<std::path::PathBuf>,
}

impl std::fmt::Debug for Backend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}://{}", self.scheme.as_str(), self.authority())
    }
}

impl Backend {
    /// `host:port`, with IPv6 addresses in brackets.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The URL of `path_and_query` on this backend.
    pub fn url(&self, path_and_query: &str) -> String {
        format!(
            "{}://{}{}",
            self.scheme.as_str(),
            self.authority(),
            path_and_query
        )
    }

    /// Opens a connection: TCP, then TLS for `https`.
    pub async fn connect(&self) -> Result<Box<dyn Io>, ProxyError> {
        let dial = async {
            let tcp = match &self.netns {
                None => TcpStream::connect((self.host.as_str(), self.port)).await,
                Some(ns) => match self.host.parse::<std::net::IpAddr>() {
                    Ok(ip) => crate::netns::connect(ns, (ip, self.port).into(), DIAL_TIMEOUT).await,
                    Err(_) => Err(std::io::Error::other(
                        "only IP addresses are dialed in a network namespace",
                    )),
                },
            }
            .map_err(|e| format!("dial tcp {}: {e}", self.authority()))?;
            let _ = tcp.set_nodelay(true);
            match self.scheme {
                Scheme::Http => Ok::<Box<dyn Io>, String>(Box::new(tcp)),
                Scheme::Https => {
                    let config = self
                        .tls
                        .clone()
                        .ok_or("no TLS configuration for an https backend")?;
                    let name = ServerName::try_from(self.host.clone())
                        .map_err(|e| format!("invalid server name {:?}: {e}", self.host))?;
                    let tls = tokio_rustls::TlsConnector::from(config)
                        .connect(name, tcp)
                        .await
                        .map_err(|e| format!("tls: {e}"))?;
                    Ok(Box::new(tls) as Box<dyn Io>)
                }
            }
        };
        match tokio::time::timeout(DIAL_TIMEOUT, dial).await {
            Ok(Ok(io)) => Ok(io),
            Ok(Err(e)) => Err(ProxyError::Dial(e)),
            Err(_) => Err(ProxyError::Dial(format!(
                "dial tcp {}: i/o timeout",
                self.authority()
            ))),
        }
    }

    /// Sends `req` on a new connection and returns the response head; the body streams as it is
    /// read. After a 101, [`hyper::upgrade::on`] on the response yields the upgraded connection.
    pub async fn send<B>(&self, req: Request<B>) -> Result<Response<Incoming>, ProxyError>
    where
        B: Body + Send + 'static,
        B::Data: Send,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let io = self.connect().await?;
        send_on(io, &self.authority(), req).await
    }
}

/// Sends `req` on an open connection to `authority` (HTTP/1.1, upgrades allowed).
pub async fn send_on<B>(
    io: Box<dyn Io>,
    authority: &str,
    mut req: Request<B>,
) -> Result<Response<Incoming>, ProxyError>
where
    B: Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let (mut sender, conn) = hyper::client::conn::http1::Builder::new()
        .handshake(TokioIo::new(io))
        .await
        .map_err(|e| ProxyError::Request(e.to_string()))?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "backend connection ended with an error");
        }
    });
    if let Ok(v) = http::HeaderValue::from_str(authority) {
        req.headers_mut().insert(header::HOST, v);
    }
    sender
        .send_request(req)
        .await
        .map_err(|e| ProxyError::Request(e.to_string()))
}

/// Response bodies of proxied requests.
pub type ProxyBody = BoxBody<Bytes, Infallible>;

/// A backend's response body, streamed to the client as it arrives; a read error ends it. When the
/// client goes away the backend body is dropped, which closes its connection.
pub fn stream_body(body: Incoming) -> ProxyBody {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(16);
    tokio::spawn(async move {
        let mut body = body;
        while let Some(frame) = body.frame().await {
            match frame {
                Ok(frame) => {
                    if let Ok(data) = frame.into_data() {
                        if tx.send(data).await.is_err() {
                            return;
                        }
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "backend response body ended with an error");
                    return;
                }
            }
        }
    });
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok(Frame::data(b)), rx))
    });
    BodyExt::boxed(StreamBody::new(stream))
}

/// A backend response passed on to the client: its status, its headers (less hop-by-hop ones) and
/// its body as it streams.
pub fn relay(resp: Response<Incoming>) -> Response<ProxyBody> {
    let (parts, body) = resp.into_parts();
    let mut out = Response::new(stream_body(body));
    *out.status_mut() = parts.status;
    *out.headers_mut() = response_headers(&parts.headers);
    out
}

/// The end of an upgrade request sent on to a backend (upstream `UpgradeAwareHandler.tryUpgrade`):
/// when the backend switched protocols, the client gets the backend's 101 and the two upgraded
/// connections are joined; any other answer is relayed as is.
pub fn finish_upgrade(
    mut resp: Response<Incoming>,
    client: Option<OnUpgrade>,
) -> Response<ProxyBody> {
    if resp.status() != http::StatusCode::SWITCHING_PROTOCOLS {
        return relay(resp);
    }
    let backend = hyper::upgrade::on(&mut resp);
    let mut out = Response::new(BodyExt::boxed(Full::new(Bytes::new())));
    *out.status_mut() = http::StatusCode::SWITCHING_PROTOCOLS;
    *out.headers_mut() = resp.headers().clone();
    tokio::spawn(async move {
        let Some(client) = client else {
            return;
        };
        match tokio::join!(client, backend) {
            (Ok(client), Ok(backend)) => pipe(client, backend).await,
            (Err(e), _) | (_, Err(e)) => tracing::debug!(error = %e, "upgrade failed"),
        }
    });
    out
}

/// The request that carries an upgrade on to a backend: the client's method and headers (less its
/// credentials for this server) at `path_and_query`, without a body.
pub fn upgrade_request(
    method: &http::Method,
    headers: &HeaderMap,
    path_and_query: &str,
) -> Result<Request<http_body_util::Empty<Bytes>>, String> {
    let mut req = Request::new(http_body_util::Empty::new());
    *req.method_mut() = method.clone();
    *req.uri_mut() = path_and_query
        .parse()
        .map_err(|e| format!("invalid backend path {path_and_query:?}: {e}"))?;
    *req.headers_mut() = forwarded_headers(headers, true);
    Ok(req)
}

/// Copies bytes both ways between two upgraded connections until both directions end; each side's
/// EOF is passed on as a half-close.
pub async fn pipe(a: Upgraded, b: Upgraded) {
    let (mut a, mut b) = (TokioIo::new(a), TokioIo::new(b));
    if let Err(e) = tokio::io::copy_bidirectional(&mut a, &mut b).await {
        tracing::debug!(error = %e, "proxied connection ended with an error");
    }
}

/// Headers that describe one hop, not the message (RFC 9110 and Go's `httputil.ReverseProxy`).
const HOP_BY_HOP: &[&str] = &[
    "connection",
    "proxy-connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// The client's headers as sent on to a backend: its credentials for this server (`Authorization`,
/// impersonation) are removed, as upstream's authentication filter does; hop-by-hop headers are
/// removed unless the request is an upgrade, which needs `Connection` and `Upgrade` to reach the
/// backend.
pub fn forwarded_headers(src: &HeaderMap, upgrade: bool) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(src.len());
    for (name, value) in src {
        let n = name.as_str();
        if n == "authorization" || n == "host" || n.starts_with("impersonate-") {
            continue;
        }
        if !upgrade && HOP_BY_HOP.contains(&n) {
            continue;
        }
        out.append(name.clone(), value.clone());
    }
    out
}

/// A backend response's headers without the hop-by-hop ones.
pub fn response_headers(src: &HeaderMap) -> HeaderMap {
    let mut out = HeaderMap::with_capacity(src.len());
    for (name, value) in src {
        if !HOP_BY_HOP.contains(&name.as_str()) {
            out.append(name.clone(), value.clone());
        }
    }
    out
}

/// Whether a request asks to switch protocols.
pub fn is_upgrade(headers: &HeaderMap) -> bool {
    crate::wsstream::is_upgrade_request(headers) && headers.contains_key(header::UPGRADE)
}

/// TLS settings for reaching backends: verify their certificates against `ca_pem` (PEM), or not at
/// all without one (upstream's kubelet client without `--kubelet-certificate-authority`), and present
/// `client` (certificate and key PEM) when given. Only HTTP/1.1 is offered: upgrades need it.
pub fn client_tls(
    ca_pem: Option<&[u8]>,
    client: Option<(&[u8], &[u8])>,
) -> Result<rustls::ClientConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?;
    let builder = match ca_pem {
        Some(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem) {
                roots
                    .add(cert.map_err(|e| format!("certificate authority: {e}"))?)
                    .map_err(|e| format!("certificate authority: {e}"))?;
            }
            if roots.is_empty() {
                return Err("certificate authority: no certificate in the PEM data".into());
            }
            builder.with_root_certificates(roots)
        }
        None => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerify(provider))),
    };
    let mut config = match client {
        Some((cert, key)) => {
            let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("client certificate: {e}"))?;
            let key = PrivateKeyDer::from_pem_slice(key).map_err(|e| format!("client key: {e}"))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| format!("client certificate: {e}"))?
        }
        None => builder.with_no_client_auth(),
    };
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(config)
}

/// Accepts any server certificate but still checks that the handshake is signed by its key.
#[derive(Debug)]
struct NoVerify(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for NoVerify {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::{HeaderName, HeaderValue};

    #[test]
    fn forwarded_headers_drop_credentials_and_hop_by_hop() {
        let mut h = HeaderMap::new();
        for (k, v) in [
            ("authorization", "Bearer secret"),
            ("impersonate-user", "bob"),
            ("host", "apiserver"),
            ("connection", "Upgrade"),
            ("upgrade", "SPDY/3.1"),
            ("x-stream-protocol-version", "v4.channel.k8s.io"),
            ("x-stream-protocol-version", "v3.channel.k8s.io"),
        ] {
            h.append(HeaderName::from_static(k), HeaderValue::from_static(v));
        }
        let up = forwarded_headers(&h, true);
        assert!(up.get("authorization").is_none() && up.get("impersonate-user").is_none());
        assert!(up.get("host").is_none());
        assert_eq!(up.get("upgrade").unwrap(), "SPDY/3.1");
        assert_eq!(up.get_all("x-stream-protocol-version").iter().count(), 2);
        let plain = forwarded_headers(&h, false);
        assert!(plain.get("connection").is_none() && plain.get("upgrade").is_none());
        assert!(is_upgrade(&h));
        assert!(!is_upgrade(&plain));
    }

    #[test]
    fn authorities_bracket_ipv6() {
        let b = |host: &str| Backend {
            scheme: Scheme::Https,
            host: host.into(),
            port: 10250,
            tls: None,
            netns: None,
        };
        assert_eq!(b("10.0.0.1").authority(), "10.0.0.1:10250");
        assert_eq!(b("fd00::1").authority(), "[fd00::1]:10250");
        assert_eq!(
            b("node-1").url("/containerLogs/a/b/c?follow=true"),
            "https://node-1:10250/containerLogs/a/b/c?follow=true"
        );
    }

    #[test]
    fn tls_configs_build_with_and_without_a_ca() {
        assert!(client_tls(None, None).is_ok());
        assert!(client_tls(Some(b"not pem"), None).is_err());
    }
}
