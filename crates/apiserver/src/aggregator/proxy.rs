//! Passing a request on to an extension API server (upstream `proxyHandler` with
//! `UpgradeAwareHandler` and `NewAuthProxyRoundTripper`): HTTPS to the resolved address, the
//! server's certificate verified for `<service>.<namespace>.svc` against `spec.caBundle` (or not at
//! all with `insecureSkipTLSVerify`), rkube's front-proxy client certificate presented, the user in
//! `X-Remote-User`/`X-Remote-Uid`/`X-Remote-Group` (whatever `X-Remote-*` the client sent is
//! dropped first). Bodies stream both ways, so watches pass through; upgrades are joined.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Limited};
use httpstream::proxy::{self as hproxy, Io, ProxyError};
use hyper::body::Incoming;
use rustls::pki_types::ServerName;
use tokio::net::TcpStream;

use super::frontproxy::{GROUP_HEADER, UID_HEADER, USER_HEADER};
use super::Remote;
use crate::authn::UserInfo;
use crate::response::{self, Body};
use crate::service_resolver::{self as resolve, Location};
use crate::ApiServer;

/// How long dialing (TCP and TLS) an extension server may take.
const DIAL_TIMEOUT: Duration = Duration::from_secs(30);
/// The most of a discovery document read from an extension server.
pub const DISCOVERY_LIMIT: usize = 16 * 1024 * 1024;

/// Why a request did not reach the extension server.
#[derive(Debug, thiserror::Error)]
pub enum DialError {
    #[error(transparent)]
    Resolve(#[from] resolve::ResolveError),
    #[error("{0}")]
    Tls(String),
    #[error(transparent)]
    Proxy(#[from] ProxyError),
}

/// TLS settings for `remote`: its CA bundle (or no verification when it says to skip it, as the
/// availability check always does) and the front-proxy client certificate.
pub fn tls_config(
    api: &ApiServer,
    remote: &Remote,
    verify: bool,
) -> Result<Arc<rustls::ClientConfig>, DialError> {
    let fp = &api.aggregator.front_proxy;
    let client = Some((fp.client_cert.as_bytes(), fp.client_key.as_bytes()));
    let ca = if !verify || remote.insecure_skip_tls_verify {
        None
    } else if remote.ca_bundle.is_empty() {
        // Upstream would fall back to the system roots; an extension server's certificate is
        // practically never signed by one, and rkube carries none.
        return Err(DialError::Tls(format!(
            "apiservice {} has neither caBundle nor insecureSkipTLSVerify",
            remote.name
        )));
    } else {
        Some(remote.ca_bundle.as_slice())
    };
    hproxy::client_tls(ca, client)
        .map(Arc::new)
        .map_err(DialError::Tls)
}

/// `https://host:port` of a location, for messages.
pub fn url(at: &Location, path: &str) -> String {
    let host = if at.host.contains(':') {
        format!("[{}]", at.host)
    } else {
        at.host.clone()
    };
    format!("https://{host}:{}{path}", at.port)
}

/// Opens a TLS connection to `at`, verifying the name `server_name`.
pub async fn dial(
    api: &ApiServer,
    at: &Location,
    tls: Arc<rustls::ClientConfig>,
    server_name: &str,
) -> Result<Box<dyn Io>, DialError> {
    let authority = url(at, "")["https://".len()..].to_string();
    let dial = async {
        let tcp = match (
            &api.pod_network_namespace,
            at.host.parse::<std::net::IpAddr>(),
        ) {
            (Some(ns), Ok(ip)) if at.endpoint => {
                httpstream::netns::connect(ns, (ip, at.port).into(), DIAL_TIMEOUT).await
            }
            _ => TcpStream::connect((at.host.as_str(), at.port)).await,
        }
        .map_err(|e| format!("dial tcp {authority}: {e}"))?;
        let _ = tcp.set_nodelay(true);
        let name = ServerName::try_from(server_name.to_string())
            .map_err(|e| format!("invalid server name {server_name:?}: {e}"))?;
        let tls = tokio_rustls::TlsConnector::from(tls)
            .connect(name, tcp)
            .await
            .map_err(|e| format!("tls: {e}"))?;
        Ok::<Box<dyn Io>, String>(Box::new(tls))
    };
    match tokio::time::timeout(DIAL_TIMEOUT, dial).await {
        Ok(Ok(io)) => Ok(io),
        Ok(Err(e)) => Err(ProxyError::Dial(e).into()),
        Err(_) => Err(ProxyError::Dial(format!("dial tcp {authority}: i/o timeout")).into()),
    }
}

/// The client's headers as the extension server gets them: without its credentials for rkube and
/// without any `X-Remote-*` it sent (only the proxy says who the user is), then the user's.
pub fn remote_headers(src: &HeaderMap, upgrade: bool, user: &UserInfo) -> HeaderMap {
    let mut headers = hproxy::forwarded_headers(src, upgrade);
    let spoofed: Vec<_> = headers
        .keys()
        .filter(|k| k.as_str().starts_with("x-remote-"))
        .cloned()
        .collect();
    for name in spoofed {
        headers.remove(name);
    }
    if let Ok(v) = HeaderValue::from_str(&user.name) {
        headers.insert(USER_HEADER, v);
    }
    if !user.uid.is_empty() {
        if let Ok(v) = HeaderValue::from_str(&user.uid) {
            headers.insert(UID_HEADER, v);
        }
    }
    for group in &user.groups {
        if let Ok(v) = HeaderValue::from_str(group) {
            headers.append(GROUP_HEADER, v);
        }
    }
    headers
}

/// Upstream's `proxyError`: plain text with the status.
fn proxy_error(code: StatusCode, message: &str) -> Response<Body> {
    response::bytes_response(
        code,
        "text/plain; charset=utf-8",
        Bytes::from(format!("{message}\n")),
    )
}

/// Serves `req` from the extension server of `remote`. `deadline` bounds the wait for the response
/// head (None for watches, which stream as long as they last).
pub async fn serve(
    api: &Arc<ApiServer>,
    remote: &Remote,
    user: &UserInfo,
    req: Request<Incoming>,
    deadline: Option<Duration>,
) -> Response<Body> {
    if !remote.available {
        return proxy_error(StatusCode::SERVICE_UNAVAILABLE, "service unavailable");
    }
    let tls = match tls_config(api, remote, true) {
        Ok(tls) => tls,
        Err(e) => return proxy_error(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    let at = match resolve::resolve(api, &remote.namespace, &remote.service, remote.port) {
        Ok(at) => at,
        Err(e) => {
            tracing::warn!(apiservice = %remote.name, error = %e, "cannot resolve the service");
            return proxy_error(StatusCode::SERVICE_UNAVAILABLE, "service unavailable");
        }
    };
    let path_and_query = match req.uri().query() {
        Some(q) => format!("{}?{q}", req.uri().path()),
        None => req.uri().path().to_string(),
    };
    let upgrade = hproxy::is_upgrade(req.headers());
    let (mut parts, body) = req.into_parts();
    let headers = remote_headers(&parts.headers, upgrade, user);
    let authority = url(&at, "")["https://".len()..].to_string();
    let exchange = async {
        let io = dial(api, &at, tls, &remote.server_name()).await?;
        if upgrade {
            let mut out =
                hproxy::upgrade_request(&parts.method, &HeaderMap::new(), &path_and_query)
                    .map_err(ProxyError::Request)?;
            *out.headers_mut() = headers;
            let resp = hproxy::send_on(io, &authority, out).await?;
            let client = parts.extensions.remove::<hyper::upgrade::OnUpgrade>();
            return Ok::<_, DialError>(hproxy::finish_upgrade(resp, client));
        }
        let mut out = Request::new(body);
        *out.method_mut() = parts.method.clone();
        *out.uri_mut() = path_and_query
            .parse()
            .map_err(|e| ProxyError::Request(format!("invalid path {path_and_query:?}: {e}")))?;
        *out.headers_mut() = headers;
        let resp = hproxy::send_on(io, &authority, out).await?;
        Ok(hproxy::relay(resp))
    };
    let result = match deadline {
        Some(limit) => match tokio::time::timeout(limit, exchange).await {
            Ok(r) => r,
            Err(_) => return response::error_response(&crate::timeout::timed_out()),
        },
        None => exchange.await,
    };
    match result {
        Ok(resp) => resp,
        Err(e) => {
            tracing::debug!(apiservice = %remote.name, error = %e, "proxying failed");
            proxy_error(
                StatusCode::SERVICE_UNAVAILABLE,
                &format!("error trying to reach service: {e}"),
            )
        }
    }
}

/// A GET of `path` from the extension server at `at` as `system:kube-aggregator` in
/// `system:masters` (the availability check's identity): the status and at most
/// [`DISCOVERY_LIMIT`] bytes of body.
pub async fn get(
    api: &ApiServer,
    remote: &Remote,
    at: &Location,
    path: &str,
    verify: bool,
) -> Result<(StatusCode, Bytes), String> {
    let tls = tls_config(api, remote, verify).map_err(|e| e.to_string())?;
    let io = dial(api, at, tls, &remote.server_name())
        .await
        .map_err(|e| e.to_string())?;
    let mut req = Request::new(Empty::<Bytes>::new());
    *req.uri_mut() = path.parse().map_err(|e| format!("{path}: {e}"))?;
    let h = req.headers_mut();
    h.insert(
        USER_HEADER,
        HeaderValue::from_static("system:kube-aggregator"),
    );
    h.insert(GROUP_HEADER, HeaderValue::from_static("system:masters"));
    h.insert(
        http::header::ACCEPT,
        HeaderValue::from_static("application/json"),
    );
    let authority = url(at, "")["https://".len()..].to_string();
    let resp = hproxy::send_on(io, &authority, req)
        .await
        .map_err(|e| e.to_string())?;
    let status = resp.status();
    let body = Limited::new(resp.into_body(), DISCOVERY_LIMIT)
        .collect()
        .await
        .map_err(|e| format!("reading the response: {e}"))?
        .to_bytes();
    Ok((status, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_names_the_user_and_drops_what_the_client_claimed() {
        let mut src = HeaderMap::new();
        src.insert("authorization", HeaderValue::from_static("Bearer secret"));
        src.insert("x-remote-user", HeaderValue::from_static("system:admin"));
        src.insert("x-remote-extra-scopes", HeaderValue::from_static("all"));
        src.insert("impersonate-user", HeaderValue::from_static("root"));
        src.insert("accept", HeaderValue::from_static("application/json"));
        let user = UserInfo {
            name: "alice".into(),
            uid: "42".into(),
            groups: vec!["dev".into(), "system:authenticated".into()],
        };
        let out = remote_headers(&src, false, &user);
        assert_eq!(out["x-remote-user"], "alice");
        assert_eq!(out["x-remote-uid"], "42");
        let groups: Vec<_> = out.get_all("x-remote-group").iter().collect();
        assert_eq!(groups, ["dev", "system:authenticated"]);
        assert!(out.get("x-remote-extra-scopes").is_none());
        assert!(out.get("authorization").is_none() && out.get("impersonate-user").is_none());
        assert_eq!(out["accept"], "application/json");
    }

    #[test]
    fn urls_bracket_ipv6() {
        let at = |host: &str| Location {
            host: host.into(),
            port: 443,
            endpoint: true,
        };
        assert_eq!(url(&at("10.0.0.1"), "/apis"), "https://10.0.0.1:443/apis");
        assert_eq!(url(&at("fd00::1"), ""), "https://[fd00::1]:443");
    }
}
