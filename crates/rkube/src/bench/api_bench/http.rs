//! The benchmark's HTTPS client: hyper's pooled client over rustls (ring), set up from a kubeconfig the way
//! client-go would be: the cluster's CA as the only root, the user's client certificate (or bearer token),
//! HTTP/2 negotiated by ALPN unless HTTP/1.1 is forced.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use bytes::Bytes;
use http::{Method, Request, StatusCode, Uri, Version};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;

/// Any single request (headers and whole body) that takes longer than this is an error.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A cheaply cloneable client bound to one API server.
#[derive(Clone)]
pub struct ApiClient {
    client: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    connector: HttpsConnector<HttpConnector>,
    base: Arc<str>,
    bearer: Option<Arc<str>>,
}

/// A response whose body has been read in full.
pub struct Reply {
    pub status: StatusCode,
    pub version: Version,
    pub body: Bytes,
}

impl Reply {
    /// The body when the status is one of `ok`, else an error naming the request.
    pub fn expect(self, ok: &[StatusCode], what: &str) -> Result<Bytes, String> {
        if ok.contains(&self.status) {
            Ok(self.body)
        } else {
            Err(format!(
                "{what}: HTTP {}: {}",
                self.status,
                String::from_utf8_lossy(&self.body[..self.body.len().min(300)])
            ))
        }
    }
}

#[derive(Deserialize)]
struct Kubeconfig {
    #[serde(default)]
    clusters: Vec<Named<ClusterEntry>>,
    #[serde(default)]
    users: Vec<Named<UserEntry>>,
    #[serde(default)]
    contexts: Vec<Named<ContextEntry>>,
    #[serde(rename = "current-context", default)]
    current_context: String,
}

#[derive(Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "user", alias = "context")]
    value: T,
}

#[derive(Deserialize)]
struct ClusterEntry {
    server: String,
    #[serde(rename = "certificate-authority-data")]
    ca_data: Option<String>,
}

#[derive(Deserialize)]
struct UserEntry {
    #[serde(rename = "client-certificate-data")]
    cert_data: Option<String>,
    #[serde(rename = "client-key-data")]
    key_data: Option<String>,
    token: Option<String>,
}

#[derive(Deserialize)]
struct ContextEntry {
    cluster: String,
    user: String,
}

fn pick<'a, T>(entries: &'a [Named<T>], name: Option<&str>, kind: &str) -> Result<&'a T, String> {
    let found = match name {
        Some(name) => entries.iter().find(|e| e.name == name),
        None => entries.first(),
    };
    found
        .map(|e| &e.value)
        .ok_or_else(|| format!("kubeconfig: no {kind} {}", name.unwrap_or("entry")))
}

fn decode(field: &str, data: &str) -> Result<Vec<u8>, String> {
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|e| format!("kubeconfig {field}: {e}"))
}

impl ApiClient {
    /// Builds a client from the kubeconfig's current context (or its first cluster and user).
    pub fn from_kubeconfig(path: &std::path::Path, force_http1: bool) -> Result<Self, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let config: Kubeconfig =
            serde_yaml_ng::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        let context = config
            .contexts
            .iter()
            .find(|c| c.name == config.current_context);
        let cluster = pick(
            &config.clusters,
            context.map(|c| c.value.cluster.as_str()),
            "cluster",
        )?;
        let user = pick(
            &config.users,
            context.map(|c| c.value.user.as_str()),
            "user",
        )?;
        if !cluster.server.starts_with("https://") {
            return Err(format!(
                "kubeconfig server {:?} is not https://",
                cluster.server
            ));
        }

        let mut roots = rustls::RootCertStore::empty();
        let ca = decode(
            "certificate-authority-data",
            cluster.ca_data.as_deref().unwrap_or(""),
        )?;
        for cert in CertificateDer::pem_slice_iter(&ca) {
            let cert = cert.map_err(|e| format!("kubeconfig CA: {e}"))?;
            roots.add(cert).map_err(|e| format!("kubeconfig CA: {e}"))?;
        }
        if roots.is_empty() {
            return Err("kubeconfig: certificate-authority-data holds no certificate".into());
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots);
        let tls = match (&user.cert_data, &user.key_data) {
            (Some(cert), Some(key)) => {
                let cert = decode("client-certificate-data", cert)?;
                let key = decode("client-key-data", key)?;
                let chain = CertificateDer::pem_slice_iter(&cert)
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|e| format!("kubeconfig client certificate: {e}"))?;
                let key = PrivateKeyDer::from_pem_slice(&key)
                    .map_err(|e| format!("kubeconfig client key: {e}"))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| format!("kubeconfig client certificate: {e}"))?
            }
            _ => builder.with_no_client_auth(),
        };

        let mut tcp = HttpConnector::new();
        tcp.enforce_http(false);
        tcp.set_nodelay(true);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_only()
            .enable_http1();
        let connector = if force_http1 {
            connector.wrap_connector(tcp)
        } else {
            connector.enable_http2().wrap_connector(tcp)
        };
        Ok(ApiClient {
            client: pooled_client(connector.clone()),
            connector,
            base: cluster.server.trim_end_matches('/').into(),
            bearer: user.token.as_deref().map(Into::into),
        })
    }

    /// The same server and credentials with a pool of its own: over HTTP/2, a connection of its own.
    pub fn with_own_connections(&self) -> Self {
        ApiClient {
            client: pooled_client(self.connector.clone()),
            ..self.clone()
        }
    }

    pub fn server(&self) -> &str {
        &self.base
    }

    fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<Request<Full<Bytes>>, String> {
        let uri: Uri = format!("{}{path}", self.base)
            .parse()
            .map_err(|e| format!("{path}: {e}"))?;
        let patch = method == Method::PATCH;
        let mut req = Request::builder()
            .method(method)
            .uri(uri)
            .header(http::header::ACCEPT, "application/json");
        if let Some(token) = &self.bearer {
            req = req.header(http::header::AUTHORIZATION, format!("Bearer {token}"));
        }
        if body.is_some() {
            let content_type = if patch {
                "application/merge-patch+json"
            } else {
                "application/json"
            };
            req = req.header(http::header::CONTENT_TYPE, content_type);
        }
        req.body(Full::new(body.unwrap_or_default()))
            .map_err(|e| e.to_string())
    }

    /// Sends a request and reads the whole response, within [`REQUEST_TIMEOUT`].
    pub async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<Reply, String> {
        let req = self.request(method.clone(), path, body)?;
        let exchange = async {
            let resp = self
                .client
                .request(req)
                .await
                .map_err(|e| error_chain(&e))?;
            let (status, version) = (resp.status(), resp.version());
            let body = resp
                .into_body()
                .collect()
                .await
                .map_err(|e| format!("reading the body: {e}"))?
                .to_bytes();
            Ok::<_, String>(Reply {
                status,
                version,
                body,
            })
        };
        tokio::time::timeout(REQUEST_TIMEOUT, exchange)
            .await
            .map_err(|_| format!("{method} {path}: no answer within {REQUEST_TIMEOUT:?}"))?
            .map_err(|e| format!("{method} {path}: {e}"))
    }

    pub async fn get(&self, path: &str) -> Result<Reply, String> {
        self.send(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: String) -> Result<Reply, String> {
        self.send(Method::POST, path, Some(Bytes::from(body))).await
    }

    /// Starts a streaming GET (a watch): returns once the response headers arrive, with the body unread.
    pub async fn open_stream(
        &self,
        path: &str,
        timeout: Duration,
        accept: &str,
    ) -> Result<Incoming, String> {
        let mut req = self.request(Method::GET, path, None)?;
        req.headers_mut().insert(
            http::header::ACCEPT,
            http::HeaderValue::from_str(accept).map_err(|e| e.to_string())?,
        );
        let resp = tokio::time::timeout(timeout, self.client.request(req))
            .await
            .map_err(|_| format!("GET {path}: no response headers within {timeout:?}"))?
            .map_err(|e| format!("GET {path}: {}", error_chain(&e)))?;
        let status = resp.status();
        if status != StatusCode::OK {
            let body = tokio::time::timeout(timeout, resp.into_body().collect())
                .await
                .ok()
                .and_then(Result::ok)
                .map(|b| b.to_bytes())
                .unwrap_or_default();
            return Err(format!(
                "GET {path}: HTTP {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            ));
        }
        Ok(resp.into_body())
    }
}

fn pooled_client(
    connector: HttpsConnector<HttpConnector>,
) -> Client<HttpsConnector<HttpConnector>, Full<Bytes>> {
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .build(connector)
}

/// hyper's client errors say little at the top level ("client error (Connect)"); include the causes.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}
