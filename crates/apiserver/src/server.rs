//! The HTTPS server and the top of the handler chain (upstream `server.GenericAPIServer` with
//! `DefaultBuildHandlerChain`): TLS with optional client certificates, HTTP/1.1 and HTTP/2,
//! authentication, impersonation, authorization, then health and version endpoints, discovery, and
//! resources.

use std::net::SocketAddr;
use std::sync::Arc;

use apimachinery::status::ApiError;
use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::json;
use tokio::net::TcpListener;

use crate::authn::{self, UserInfo};
use crate::certs::Pki;
use crate::request::{self, Query, Target};
use crate::response::{self, Body};
use crate::rest::decode_limit;
use crate::serving::{self, Phase, ServingOptions};
use crate::{audit, discovery, ApiServer};

/// A running server: its address, and how to stop it.
pub struct Running {
    pub addr: SocketAddr,
    pub(crate) api: Arc<ApiServer>,
    /// Tells the accept loop and the connections to drain or close (see [`crate::shutdown`]).
    pub(crate) phase: tokio::sync::watch::Sender<Phase>,
    pub(crate) accept: tokio::task::JoinHandle<()>,
    pub(crate) compactor: tokio::task::JoinHandle<()>,
    in_process: serving::InProcess,
}

impl Running {
    /// The server's state, for tests that drive handlers directly.
    #[cfg(test)]
    pub(crate) fn api(&self) -> &Arc<ApiServer> {
        &self.api
    }

    /// Probes the component `name` (`scheduler`, `controller-manager`) in-process for
    /// ComponentStatuses, instead of at upstream's address.
    pub fn register_component(&self, name: &str, probe: crate::rest::componentstatus::Probe) {
        self.api.components.register(name, probe);
    }

    /// Connections to this server from inside its process (see [`serving::InProcess`]): the
    /// all-in-one server's components use them instead of TLS on loopback.
    pub fn in_process(&self) -> serving::InProcess {
        self.in_process.clone()
    }

    /// Serves until the process is stopped.
    pub async fn wait(self) {
        let _ = self.accept.await;
    }

    /// Stops serving at once: no new connections, open ones (watches included) are closed,
    /// background work stops and the store is closed, releasing its files, so the data dir can be
    /// opened again. [`Running::graceful_shutdown`] is the way a process stops.
    pub async fn shutdown(self) {
        self.api.health.begin_shutdown();
        self.phase.send_replace(Phase::Closing);
        self.compactor.abort();
        let _ = self.accept.await;
        self.api.store.close().await;
    }
}

fn tls_config(pki: &Pki) -> Result<rustls::ServerConfig, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pki.ca_cert.as_bytes()) {
        roots
            .add(cert.map_err(|e| format!("ca.crt: {e}"))?)
            .map_err(|e| format!("ca.crt: {e}"))?;
    }
    // Client certificates are optional at the TLS layer: token users connect without one.
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        provider.clone(),
    )
    .allow_unauthenticated()
    .build()
    .map_err(|e| format!("client certificate verifier: {e}"))?;
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(pki.serving_cert.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| format!("apiserver.crt: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(pki.serving_key.as_bytes())
        .map_err(|e| format!("apiserver.key: {e}"))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_client_cert_verifier(verifier)
        .with_single_cert(certs, key)
        .map_err(|e| format!("serving certificate: {e}"))?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    // Stateless session tickets (as Go's TLS server, upstream's, issues by default): HTTP/1.1 clients
    // open a connection per concurrent request, and with rustls's default 256-entry server session
    // cache nearly every reconnect in a burst found its session evicted and paid a full handshake
    // (certificate signing and client certificate verification on both sides). A ticket carries the
    // session, client certificate included, so any ticket a client holds resumes.
    config.ticketer =
        rustls::crypto::ring::Ticketer::new().map_err(|e| format!("TLS session tickets: {e}"))?;
    Ok(config)
}

/// Serves on `listeners` (the first one's address is [`Running::addr`]; each has its own accept
/// loop and connection limits, and all drain together).
pub async fn serve(
    api: Arc<ApiServer>,
    listeners: Vec<TcpListener>,
    pki: &Pki,
    compactor: tokio::task::JoinHandle<()>,
    options: &ServingOptions,
) -> Result<Running, String> {
    let addr = listeners
        .first()
        .ok_or("no listener")?
        .local_addr()
        .map_err(|e| e.to_string())?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(tls_config(pki)?));
    let (phase, phase_rx) = tokio::sync::watch::channel(Phase::Serving);
    let handler_api = api.clone();
    let handler: serving::Handler = Arc::new(move |cert_user, peer, req: Request<Incoming>| {
        let api = handler_api.clone();
        Box::pin(async move {
            let what = format!("{} {}", req.method(), req.uri().path());
            recover_panics(handle(&api, cert_user, peer, req), &what).await
        })
    });
    let in_process = serving::InProcess::new(
        options,
        handler.clone(),
        api.metrics.clone(),
        phase_rx.clone(),
    );
    let loops: Vec<_> = listeners
        .into_iter()
        .map(|listener| {
            serving::accept_loop(
                listener,
                acceptor.clone(),
                options.clone(),
                handler.clone(),
                api.metrics.clone(),
                phase_rx.clone(),
            )
        })
        .collect();
    let accept = tokio::spawn(async move {
        futures::future::join_all(loops).await;
    });
    Ok(Running {
        addr,
        api,
        phase,
        accept,
        compactor,
        in_process,
    })
}

/// Upstream's `WithPanicRecovery`: a handler that panics answers 500 (and is logged) instead of
/// dropping the connection, and the server goes on; one bad request never takes it down.
async fn recover_panics(
    handled: impl std::future::Future<Output = Response<Body>>,
    what: &str,
) -> Response<Body> {
    use futures::FutureExt;
    match std::panic::AssertUnwindSafe(handled).catch_unwind().await {
        Ok(resp) => resp,
        Err(panic) => {
            let reason = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!(request = what, panic = %reason, "a request handler panicked");
            response::bytes_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain; charset=utf-8",
                Bytes::from_static(
                    b"This request caused apiserver to panic. Look in the logs for details.\n",
                ),
            )
        }
    }
}

/// After a body passed the limit, this much more is read and dropped (never kept) so an HTTP/1.1
/// client still sending gets its 413 rather than a reset connection; past it the connection is cut.
const DISCARD_LIMIT: usize = 64 * 1024 * 1024;
/// How long an unused body is drained at most.
const DISCARD_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Reads a request body of at most `limit` bytes. A larger one is a 413 and is not buffered: what
/// follows the limit is discarded as it arrives (up to [`DISCARD_LIMIT`]).
async fn read_body(mut body: Incoming, limit: usize) -> Result<Bytes, ApiError> {
    let mut buf = bytes::BytesMut::new();
    let mut over = 0usize;
    while let Some(frame) = body.frame().await {
        let frame = frame
            .map_err(|e| ApiError::bad_request(format!("cannot read the request body: {e}")))?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if over == 0 && buf.len() + data.len() <= limit {
            buf.extend_from_slice(&data);
            continue;
        }
        // Over the limit: drop what was kept and only count from here on.
        buf = bytes::BytesMut::new();
        over = over.saturating_add(data.len()).max(1);
        if over > DISCARD_LIMIT {
            break;
        }
    }
    if over > 0 {
        return Err(ApiError::request_entity_too_large(format!(
            "the request body is over the limit of {limit} bytes"
        )));
    }
    Ok(buf.freeze())
}

/// Reads and drops a body nobody will use (up to [`DISCARD_LIMIT`]), so a client still sending
/// it reads our answer instead of a broken pipe.
async fn discard_body(mut body: Incoming) {
    let drain = async {
        let mut seen = 0usize;
        while let Some(Ok(frame)) = body.frame().await {
            seen = seen.saturating_add(frame.data_ref().map_or(0, |d| d.len()));
            if seen > DISCARD_LIMIT {
                break;
            }
        }
    };
    // A client trickling its body does not hold the answer back for long.
    let _ = tokio::time::timeout(DISCARD_TIME_LIMIT, drain).await;
}

const PUBLIC_PATHS: &[&str] = &["/healthz", "/livez", "/readyz", "/version"];

fn is_public(path: &str) -> bool {
    PUBLIC_PATHS
        .iter()
        .any(|p| path == *p || path.starts_with(&format!("{p}/")))
}

/// The user of a request's credentials: its client certificate, else its bearer token, else
/// `system:anonymous` when anonymous requests are allowed; None when they are refused (401).
fn authenticate(
    api: &ApiServer,
    cert_user: Option<UserInfo>,
    headers: &http::HeaderMap,
) -> Option<UserInfo> {
    if cert_user.is_some() {
        return cert_user;
    }
    match authn::bearer_token(headers) {
        Some(token) => api.authenticate_token(token),
        None if api.anonymous_auth => Some(authn::anonymous()),
        None => None,
    }
}

/// Authentication, then the audit record (when auditing is on) around everything else.
async fn handle(
    api: &Arc<ApiServer>,
    cert_user: Option<UserInfo>,
    peer: SocketAddr,
    req: Request<Incoming>,
) -> Response<Body> {
    let path = req.uri().path().to_string();
    // Before authentication, as upstream's `WithRetryAfter`: during a `--shutdown-send-retry-after`
    // drain new requests are refused with 429 (not audited: upstream's filter is outside audit).
    let _in_flight = match api.retry_after.admit(&path, req.headers()) {
        crate::retry_after::Admission::Refused(resp) => return resp,
        crate::retry_after::Admission::Counted(guard) => Some(guard),
        crate::retry_after::Admission::Exempt => None,
    };
    let health = crate::healthz::endpoint(&path).is_some();
    if health || is_public(&path) {
        // Served whatever the credentials; audited as whoever they name (anonymous if nobody).
        let audit = api.audit.as_ref().map(|a| {
            let user = authenticate(api, cert_user, req.headers()).unwrap_or_else(authn::anonymous);
            a.begin(&user, &req, peer)
        });
        let resp = if health {
            crate::healthz::serve(api, &path, req.uri().query()).await
        } else {
            public(&path)
        };
        return audited(audit, resp).await;
    }
    let Some(user) = authenticate(api, cert_user, req.headers()) else {
        let audit = api.audit.as_ref().map(|a| a.unauthenticated(&req, peer));
        // Drained (not kept), so a client still sending its body reads the 401, not a reset.
        discard_body(req.into_body()).await;
        return audited(audit, response::error_response(&ApiError::unauthorized())).await;
    };
    let mut audit = api.audit.as_ref().map(|a| a.begin(&user, &req, peer));
    if audit.as_ref().is_some_and(audit::RequestAudit::rejected) {
        // `--audit-webhook-mode=blocking-strict`: a request that cannot be audited is not served.
        let error = ApiError::internal("failed to store audit event");
        return audited(audit, response::error_response(&error)).await;
    }
    let resp = handle_authenticated(api, user, path, req, &mut audit).await;
    audited(audit, resp).await
}

/// The response, with its audit events written and its `Audit-Id` set when auditing is on.
async fn audited(audit: Option<audit::RequestAudit>, resp: Response<Body>) -> Response<Body> {
    match audit {
        Some(audit) => audit.respond(resp).await,
        None => resp,
    }
}

async fn handle_authenticated(
    api: &Arc<ApiServer>,
    user: UserInfo,
    path: String,
    req: Request<Incoming>,
    audit: &mut Option<audit::RequestAudit>,
) -> Response<Body> {
    let user = match crate::authz::impersonation::resolve(&api.authorizer, user, req.headers()) {
        Ok(user) => user,
        Err(e) => return response::error_response(&e),
    };
    if let Some(audit) = audit.as_mut() {
        audit.impersonated(req.headers(), &user);
    }
    // Connect subresources stream their bodies and may switch protocols: they skip body reading.
    if let Some(target) = crate::connect::target(&path) {
        let decision = crate::authz::check_connect(api, &user, req.method(), &target);
        if let Some(audit) = audit.as_mut() {
            audit.authorized(decision.as_deref().map_err(|_| ()));
        }
        if let Err(e) = decision {
            return response::error_response(&e);
        }
        return crate::connect::serve(api, target, req).await;
    }
    let (parts, body) = req.into_parts();
    let query = Query::parse(parts.uri.query());
    // Authorized before the body is read, so an unauthorized client cannot make us buffer it.
    let target = match request::parse(&parts.method, &path, &query) {
        Ok(target) => target,
        Err(e) => return response::error_response(&ApiError::bad_request(e)),
    };
    let decision = crate::authz::check(api, &user, &parts.method, &target, &path, &query);
    if let Some(audit) = audit.as_mut() {
        audit.authorized(decision.as_deref().map_err(|_| ()));
    }
    if let Err(e) = decision {
        discard_body(body).await;
        return response::error_response(&e);
    }
    let seat =
        match crate::flowcontrol::filter::admit(api, &user, &parts.method, &target, &path, &query)
            .await
        {
            Ok(seat) => seat,
            Err(refused) => {
                discard_body(body).await;
                return refused;
            }
        };
    // A group version an extension API server serves: its request goes there, body unread.
    if let Some(remote) = remote_of(api, &target) {
        let started = std::time::Instant::now();
        let req = Request::from_parts(parts, body);
        let is_watch = matches!(&target, Target::Resource(r) if r.verb == request::Verb::Watch);
        let resp = if is_watch {
            // Counted against the user's open watches, and ended at shutdown as local ones are
            // (between two chunks of the extension server's stream, which may split an event:
            // the client sees a cut stream, as upstream's clients do when the server exits).
            match api.watches.admit(&user) {
                Err(e) => response::error_response(&e),
                Ok(watch_seat) => {
                    let resp = crate::aggregator::proxy::serve(api, &remote, &user, req, None);
                    let resp = api.watch_terminator.terminable(resp.await);
                    hold_while_streaming(resp, watch_seat)
                }
            }
        } else {
            let deadline = crate::timeout::deadline(&query, api.request_timeout)
                .unwrap_or(api.request_timeout);
            crate::aggregator::proxy::serve(api, &remote, &user, req, Some(deadline)).await
        };
        record_metrics(api, &target, &resp, started);
        return seat.annotate(resp);
    }
    let limit = decode_limit();
    // A client trickling its body (a byte a minute) holds its seats and a task no longer than a
    // request may take; upstream's request deadline covers the body read the same way.
    let body = match tokio::time::timeout(api.request_timeout, read_body(body, limit)).await {
        Ok(Ok(body)) => body,
        Ok(Err(e)) => return response::error_response(&e),
        Err(_) => return response::error_response(&crate::timeout::timed_out()),
    };
    if let Some(audit) = audit.as_mut() {
        audit.request_body(&body);
    }
    let started = std::time::Instant::now();
    let is_watch = matches!(&target, Target::Resource(r) if r.verb == request::Verb::Watch);
    let resp = if is_watch {
        // A watch counts against its user's open watches for as long as its body streams.
        match api.watches.admit(&user) {
            Err(e) => response::error_response(&e),
            Ok(seat) => match route(api, &user, &target, &path, &query, &parts.headers, body).await
            {
                // Ended cleanly, between two events, when the server shuts down.
                Ok(resp) => hold_while_streaming(api.watch_terminator.terminable(resp), seat),
                Err(e) => response::error_response(&e),
            },
        }
    } else {
        route_with_deadline(api, &user, &target, &path, &query, &parts.headers, body).await
    };
    record_metrics(api, &target, &resp, started);
    // A watch's seats were held only while it was set up (upstream's watch initialization).
    seat.annotate(resp)
}

/// `apiserver_request_total` and the latency histogram for a resource request.
fn record_metrics(
    api: &ApiServer,
    target: &Target,
    resp: &Response<Body>,
    started: std::time::Instant,
) {
    if let Target::Resource(r) = target {
        let verb = match r.verb {
            request::Verb::Create => "POST".to_string(),
            request::Verb::Update => "PUT".to_string(),
            v => v.as_str().to_ascii_uppercase(),
        };
        let resource = match &r.subresource {
            Some(sub) => format!("{}/{sub}", r.resource),
            None => r.resource.clone(),
        };
        let code = resp.status().as_u16();
        api.metrics.record(
            &verb,
            &r.group,
            &r.version,
            &resource,
            code,
            started.elapsed(),
        );
    }
}

/// The remote APIService serving what `target` names, if one does.
fn remote_of(api: &ApiServer, target: &Target) -> Option<Arc<crate::aggregator::Remote>> {
    match target {
        Target::Resource(r) => api.aggregator.remote(&r.group, &r.version),
        Target::ApiResources { group, version } => api.aggregator.remote(group, version),
        _ => None,
    }
}

/// `route` within the request's deadline (see [`crate::timeout`]): past it the client gets 504 and
/// the handler, on a task of its own, still finishes (a write half done is never abandoned).
async fn route_with_deadline(
    api: &Arc<ApiServer>,
    user: &UserInfo,
    target: &Target,
    path: &str,
    query: &Query,
    headers: &http::HeaderMap,
    body: Bytes,
) -> Response<Body> {
    let limit = match crate::timeout::deadline(query, api.request_timeout) {
        Ok(limit) => limit,
        Err(e) => return response::error_response(&e),
    };
    let (api, user, target) = (api.clone(), user.clone(), target.clone());
    let (path, query, headers) = (path.to_string(), query.clone(), headers.clone());
    let handler = tokio::spawn(async move {
        match route(&api, &user, &target, &path, &query, &headers, body).await {
            Ok(resp) => resp,
            Err(e) => response::error_response(&e),
        }
    });
    match tokio::time::timeout(limit, handler).await {
        Ok(Ok(resp)) => resp,
        // A panic goes on to the panic recovery around the whole request (500, logged).
        Ok(Err(e)) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Ok(Err(e)) => response::error_response(&ApiError::internal(e)),
        Err(_) => response::error_response(&crate::timeout::timed_out()),
    }
}

/// Keeps `seat` until the response body is dropped (the watch ends or its client goes).
fn hold_while_streaming(
    resp: Response<Body>,
    seat: Option<crate::watchlimit::WatchSeat>,
) -> Response<Body> {
    match seat {
        None => resp,
        Some(seat) => response::hold(resp, seat),
    }
}

fn public(path: &str) -> Response<Body> {
    if path.starts_with("/version") {
        let version = json!({
            "major": "1",
            "minor": "36",
            "emulationMajor": "1",
            "emulationMinor": "36",
            "minCompatibilityMajor": "1",
            "minCompatibilityMinor": "35",
            "gitVersion": concat!("v1.36.0-rkube.", env!("CARGO_PKG_VERSION")),
            "gitCommit": "",
            "gitTreeState": "clean",
            "buildDate": "1970-01-01T00:00:00Z",
            "goVersion": "rust",
            "compiler": "rustc",
            "platform": format!("{}/{}", std::env::consts::OS, if std::env::consts::ARCH == "x86_64" { "amd64" } else { std::env::consts::ARCH }),
        });
        return response::json_response(StatusCode::OK, &version);
    }
    response::bytes_response(
        StatusCode::OK,
        "text/plain; charset=utf-8",
        Bytes::from_static(b"ok"),
    )
}

pub(crate) fn not_found() -> ApiError {
    ApiError {
        code: 404,
        reason: "NotFound",
        message: "the server could not find the requested resource".into(),
        details: None,
    }
}

async fn route(
    api: &Arc<ApiServer>,
    user: &UserInfo,
    target: &Target,
    path: &str,
    query: &Query,
    headers: &http::HeaderMap,
    body: Bytes,
) -> Result<Response<Body>, ApiError> {
    let snap = || api.registry.snapshot();
    let discovery_json = |doc: serde_json::Value| Ok(response::json_response(StatusCode::OK, &doc));
    let aggregated = |legacy: bool, media: &'static str| {
        let mut doc = discovery::aggregated(&snap(), legacy);
        if !legacy {
            crate::aggregator::discovery::merge_aggregated(&api.aggregator, &mut doc);
        }
        let body = if media.starts_with(apimachinery::serializer::protobuf::MEDIA_TYPE) {
            apimachinery::serializer::protobuf::encode(&doc).map_err(ApiError::internal)?
        } else {
            serde_json::to_vec(&doc).unwrap_or_default()
        };
        Ok(response::bytes_response(StatusCode::OK, media, body))
    };
    match target {
        Target::ApiVersions => match discovery::wants_aggregated(headers) {
            Some(media) => aggregated(true, media),
            None => discovery_json(discovery::api_versions(&api.server_address)),
        },
        Target::ApiGroups => match discovery::wants_aggregated(headers) {
            Some(media) => aggregated(false, media),
            None => {
                let mut doc = discovery::api_group_list(&snap());
                crate::aggregator::discovery::merge_group_list(&api.aggregator, &mut doc);
                discovery_json(doc)
            }
        },
        Target::ApiGroup(group) => discovery::api_group_doc(&snap(), group)
            .or_else(|| crate::aggregator::discovery::group_doc(&api.aggregator, group))
            .map_or_else(|| Err(not_found()), discovery_json),
        Target::ApiResources { group, version } => {
            discovery::api_resource_list(&snap(), group, version)
                .map_or_else(|| Err(not_found()), discovery_json)
        }
        Target::Resource(req) => {
            crate::rest::handle(api, Some(user), req, query, headers, body).await
        }
        Target::NonResource if path == "/metrics" => {
            let mut text = api.metrics.render();
            if let Some(auditor) = &api.audit {
                text.push_str(&auditor.metrics());
            }
            if let Some(encryption) = &api.encryption {
                text.push_str(&encryption.metrics_text());
            }
            if let Some(apf) = &api.flowcontrol {
                text.push_str(&apf.metrics_text());
            }
            if let Some(extra) = &api.extra_metrics {
                text.push_str(&extra());
            }
            Ok(response::bytes_response(
                StatusCode::OK,
                "text/plain; version=0.0.4; charset=utf-8",
                text,
            ))
        }
        Target::NonResource if path == crate::serviceaccount::oidc::CONFIGURATION_PATH => {
            Ok(response::json_response(
                StatusCode::OK,
                &crate::serviceaccount::oidc::configuration(
                    &api.service_accounts,
                    &api.server_address,
                ),
            ))
        }
        Target::NonResource if path == crate::serviceaccount::oidc::JWKS_PATH => {
            let body = crate::serviceaccount::oidc::jwks(&api.service_accounts).to_string();
            Ok(response::bytes_response(
                StatusCode::OK,
                "application/jwk-set+json",
                body,
            ))
        }
        Target::NonResource if path.starts_with("/openapi/") => {
            crate::openapi::handler::serve(api, &snap(), path, query, headers)
        }
        Target::NonResource if path.starts_with(crate::flowcontrol::debug::PREFIX) => api
            .flowcontrol
            .as_ref()
            .and_then(|apf| crate::flowcontrol::debug::serve(apf, path))
            .map(|text| response::bytes_response(StatusCode::OK, "text/plain; charset=utf-8", text))
            .ok_or_else(not_found),
        Target::NonResource => Err(not_found()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_panicking_handler_answers_500() {
        let ok = recover_panics(
            async { response::bytes_response(StatusCode::OK, "text/plain", Bytes::new()) },
            "GET /ok",
        )
        .await;
        assert_eq!(ok.status(), StatusCode::OK);
        let index = 7usize;
        let panicked = recover_panics(
            async move {
                let v: Vec<u8> = Vec::new();
                let _ = v[index];
                response::bytes_response(StatusCode::OK, "text/plain", Bytes::new())
            },
            "GET /boom",
        )
        .await;
        assert_eq!(panicked.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}
