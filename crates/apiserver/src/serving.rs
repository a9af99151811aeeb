//! The API server's connections (upstream `SecureServingInfo.Serve` and the `http.Server` it
//! configures): accepting with limits ([`crate::conn_limits`]), TLS within a deadline, HTTP/1.1 and
//! HTTP/2 with upstream's limits, idle connections closed, and the connection side of the graceful
//! shutdown ([`crate::shutdown`]).
//!
//! Upstream's figures (`secure_serving.go`): `ReadHeaderTimeout` 32 s (which Go also applies to the
//! TLS handshake), `IdleTimeout` 90 s, `MaxHeaderBytes` 1 MiB; HTTP/2 streams of 256 KiB buffer
//! and frame size, the connection's buffer 256 KiB per allowed stream.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::Instant;

use bytes::Bytes;
use futures::future::BoxFuture;
use http::{Request, Response};
use http_body_util::BodyExt;
use hyper::body::{Frame, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpListener;
use tokio::sync::{watch, Notify};

use crate::authn::{self, UserInfo};
use crate::conn_limits::{ConnLimits, ConnPermit};
use crate::metrics::{ApiMetrics, Protocol};
use crate::response::Body;

/// Upstream's `ReadHeaderTimeout`: the request line and headers of a request, and the TLS
/// handshake before, must arrive within it.
pub const DEFAULT_READ_HEADER_TIMEOUT: Duration = Duration::from_secs(32);
/// Upstream's `IdleTimeout`: a connection with no request in flight is closed after it.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(90);
/// Streams per HTTP/2 connection when `--http2-max-streams-per-connection` is 0. Upstream's is
/// 100; rkube's is larger because hyper-based clients (kube-rs, rkube's own components) queue
/// requests past the limit on one connection where Go's client opens another, and a controller's
/// watches would wait behind each other forever.
pub const DEFAULT_HTTP2_MAX_STREAMS: u32 = 1000;
/// Upstream's `MaxHeaderBytes`, also the HTTP/2 header list limit.
const MAX_HEADER_BYTES: usize = 1 << 20;
/// Upstream's HTTP/2 per-stream receive buffer and frame size ("99% of serialized resources").
const HTTP2_STREAM_BUFFER: u32 = 256 * 1024;
/// The connection's receive window is the stream buffer times this many streams at most (upstream:
/// times every allowed stream; with rkube's 1,000 that would let one connection hold 256 MiB).
const HTTP2_WINDOW_STREAMS: u32 = 100;
/// Upstream's `tcpKeepAliveListener` period: an accepted connection idle this long gets TCP
/// keep-alive probes, so one whose peer vanished without a FIN (powered off, cable cut) is found
/// dead and frees its place under `--max-connections` and its watches. Go (1.23 on) sets only the
/// idle time with `SetKeepAlivePeriod`; the probe interval and count stay the kernel's.
pub const TCP_KEEPALIVE_IDLE: Duration = Duration::from_secs(180);
/// Go's `http.Server` waits 5 ms after a failed accept, doubling up to 1 s.
const ACCEPT_BACKOFF: (Duration, Duration) = (Duration::from_millis(5), Duration::from_secs(1));

/// How connections are served (the flags of `rkube apiserver`/`server`; see their help).
#[derive(Clone, Debug)]
pub struct ServingOptions {
    pub read_header_timeout: Duration,
    pub idle_timeout: Duration,
    /// `--http2-max-streams-per-connection` (0: [`DEFAULT_HTTP2_MAX_STREAMS`]).
    pub http2_max_streams_per_connection: u32,
    /// `--max-connections` (0: no limit).
    pub max_connections: usize,
    /// `--max-connections-per-ip` (0: no limit).
    pub max_connections_per_ip: usize,
}

impl Default for ServingOptions {
    fn default() -> Self {
        ServingOptions {
            read_header_timeout: DEFAULT_READ_HEADER_TIMEOUT,
            idle_timeout: DEFAULT_IDLE_TIMEOUT,
            http2_max_streams_per_connection: 0,
            max_connections: crate::conn_limits::DEFAULT_MAX_CONNECTIONS,
            max_connections_per_ip: 0,
        }
    }
}

impl ServingOptions {
    fn http2_streams(&self) -> u32 {
        match self.http2_max_streams_per_connection {
            0 => DEFAULT_HTTP2_MAX_STREAMS,
            n => n,
        }
    }
}

/// Where the server is in its life, as the accept loop and every connection see it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    Serving,
    /// Not accepting: connections finish what is in flight and close.
    Draining,
    /// Everything still open is closed now.
    Closing,
}

/// Answers one request: the client certificate's user, the peer, the request.
pub(crate) type Handler = Arc<
    dyn Fn(Option<UserInfo>, SocketAddr, Request<Incoming>) -> BoxFuture<'static, Response<Body>>
        + Send
        + Sync,
>;

/// The HTTP/1.1 and HTTP/2 settings.
fn http_builder(options: &ServingOptions) -> auto::Builder<TokioExecutor> {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        // hyper's header timer also runs while a kept-alive connection waits for its next request,
        // which would make the header timeout its idle timeout: [`Activity`] times heads instead,
        // from their first byte.
        .header_read_timeout(None)
        // The read buffer bounds the request line and headers (431 past it).
        .max_buf_size(MAX_HEADER_BYTES);
    let streams = options.http2_streams();
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(streams)
        .max_header_list_size(MAX_HEADER_BYTES as u32)
        .initial_stream_window_size(HTTP2_STREAM_BUFFER)
        .initial_connection_window_size(HTTP2_STREAM_BUFFER * streams.min(HTTP2_WINDOW_STREAMS))
        .max_frame_size(HTTP2_STREAM_BUFFER)
        // Rapid reset (CVE-2023-44487): a client that resets streams faster than the server
        // accepts them, or makes the server reset too many, gets a GOAWAY (h2's figures).
        .max_pending_accept_reset_streams(20)
        .max_local_error_reset_streams(1024);
    builder
}

/// Waits until `phase` satisfies `f`; never, if the server's handle is gone (it serves on).
async fn until(phase: &mut watch::Receiver<Phase>, f: impl Fn(Phase) -> bool) -> Phase {
    let reached = phase.wait_for(|p| f(*p)).await.map(|p| *p);
    match reached {
        Ok(p) => p,
        Err(_) => std::future::pending().await,
    }
}

/// Accepts connections until the phase leaves `Serving`, then waits for them to finish until it
/// is `Closing`, when the rest are closed.
pub(crate) async fn accept_loop(
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    options: ServingOptions,
    handler: Handler,
    metrics: Arc<ApiMetrics>,
    mut phase: watch::Receiver<Phase>,
) {
    let limits = ConnLimits::new(options.max_connections, options.max_connections_per_ip);
    let builder = Arc::new(http_builder(&options));
    // Connection tasks are owned here, so that stopping the server closes them all.
    let mut connections = tokio::task::JoinSet::new();
    let mut backoff: Option<Duration> = None;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            _ = until(&mut phase, |p| p != Phase::Serving) => break,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => {
                backoff = None;
                accepted
            }
            Err(e) => {
                // Out of file descriptors and the like: wait instead of spinning.
                let wait = backoff.map_or(ACCEPT_BACKOFF.0, |d| (d * 2).min(ACCEPT_BACKOFF.1));
                backoff = Some(wait);
                tracing::warn!(error = %e, retry_in = ?wait, "accept failed");
                tokio::select! {
                    _ = tokio::time::sleep(wait) => continue,
                    _ = until(&mut phase, |p| p != Phase::Serving) => break,
                }
            }
        };
        let permit = match limits.admit(peer.ip()) {
            Ok(permit) => permit,
            Err(why) => {
                limits.log_refusal(peer, &why);
                drop(tcp);
                continue;
            }
        };
        let _ = tcp.set_nodelay(true);
        if let Err(e) = keep_alive(&tcp) {
            tracing::debug!(%peer, error = %e, "TCP keep-alive not set");
        }
        connections.spawn(serve_connection(
            Accepted {
                tcp,
                peer,
                _permit: permit,
            },
            acceptor.clone(),
            builder.clone(),
            (options.read_header_timeout, options.idle_timeout),
            handler.clone(),
            metrics.clone(),
            phase.clone(),
        ));
    }
    drop(listener);
    if *phase.borrow() == Phase::Draining {
        tracing::info!(
            open = connections.len(),
            "stopped listening; waiting for open connections to finish"
        );
        loop {
            tokio::select! {
                next = connections.join_next() => if next.is_none() { break },
                _ = until(&mut phase, |p| p == Phase::Closing) => break,
            }
        }
    }
    if !connections.is_empty() {
        tracing::info!(open = connections.len(), "closing open connections");
    }
    connections.abort_all();
    while connections.join_next().await.is_some() {}
}

/// TCP keep-alive on an accepted connection, as upstream's listener does.
fn keep_alive(tcp: &tokio::net::TcpStream) -> std::io::Result<()> {
    let probes = socket2::TcpKeepalive::new().with_time(TCP_KEEPALIVE_IDLE);
    socket2::SockRef::from(tcp).set_tcp_keepalive(&probes)
}

struct Accepted {
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    /// Held while the connection is open.
    _permit: ConnPermit,
}

async fn serve_connection(
    accepted: Accepted,
    acceptor: tokio_rustls::TlsAcceptor,
    builder: Arc<auto::Builder<TokioExecutor>>,
    (header_timeout, idle_timeout): (Duration, Duration),
    handler: Handler,
    metrics: Arc<ApiMetrics>,
    phase: watch::Receiver<Phase>,
) {
    let Accepted { tcp, peer, _permit } = accepted;
    let tls = match tokio::time::timeout(header_timeout, acceptor.accept(tcp)).await {
        Ok(Ok(tls)) => tls,
        Ok(Err(e)) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Err(_) => {
            tracing::debug!(%peer, "TLS handshake not done within the header timeout");
            return;
        }
    };
    let session = tls.get_ref().1;
    let h2 = session.alpn_protocol() == Some(b"h2".as_slice());
    let cert_user = session
        .peer_certificates()
        .and_then(|certs| certs.first())
        .and_then(authn::user_from_certificate);
    let _counted = metrics.connection_opened(if h2 { Protocol::H2 } else { Protocol::Http1 });
    let served = Served {
        builder,
        timeouts: (header_timeout, idle_timeout),
        handler,
        phase,
    };
    served.serve(tls, h2, cert_user, peer).await;
}

/// How a connection is served once its bytes are readable: shared by TLS connections and the
/// in-process ones ([`InProcess`]).
#[derive(Clone)]
struct Served {
    builder: Arc<auto::Builder<TokioExecutor>>,
    /// The header and idle timeouts.
    timeouts: (Duration, Duration),
    handler: Handler,
    phase: watch::Receiver<Phase>,
}

impl Served {
    /// Serves HTTP on `io` (HTTP/2 when `h2`, else whatever the client speaks) as `cert_user`
    /// from `peer`, until the connection ends or the server drains (graceful) or closes.
    async fn serve<I>(self, io: I, h2: bool, cert_user: Option<UserInfo>, peer: SocketAddr)
    where
        I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    {
        let Served {
            builder,
            timeouts: (header_timeout, idle_timeout),
            handler,
            mut phase,
        } = self;
        let activity = Activity::new(!h2);
        let service = {
            let activity = activity.clone();
            hyper::service::service_fn(move |req| {
                let guard = activity.enter();
                let handled = handler(cert_user.clone(), peer, req);
                let activity = activity.clone();
                async move {
                    let mut resp = handled.await;
                    // `Connection: close` (the shutdown's 429): HTTP/1.1 closes after this response
                    // by itself; HTTP/2 has no such header, so the connection gets a GOAWAY, as
                    // Go's server does for it.
                    if h2 && connection_close(resp.headers()) {
                        resp.headers_mut().remove(http::header::CONNECTION);
                        activity.request_close();
                    }
                    Ok::<_, Infallible>(resp.map(|inner| {
                        Tracked {
                            inner,
                            _guard: guard,
                        }
                        .boxed()
                    }))
                }
            })
        };
        // Upgrades: exec, attach, port-forward and proxied WebSockets switch protocols.
        let io = Watched {
            inner: io,
            activity: activity.clone(),
        };
        let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
        tokio::pin!(conn);
        // Until its first request a connection has the header timeout, as Go's; HTTP/2 ones (whose
        // clients may open them ahead of use) have the idle timeout.
        let first = if h2 { idle_timeout } else { header_timeout };
        let mut closing = false;
        loop {
            tokio::select! {
                result = conn.as_mut() => {
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    return;
                }
                expired = activity.idle(first, header_timeout, idle_timeout), if !closing => {
                    match expired {
                        Expired::Head => {
                            tracing::debug!(%peer, "a request head did not arrive within the header timeout");
                            return;
                        }
                        Expired::Close => tracing::debug!(%peer, "closing a connection on Connection: close"),
                        Expired::Idle => tracing::debug!(%peer, "closing an idle connection"),
                    }
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
                _ = until(&mut phase, |p| p != Phase::Serving), if !closing => {
                    // HTTP/2: GOAWAY, streams in flight go on; HTTP/1.1: closed after this response.
                    conn.as_mut().graceful_shutdown();
                    closing = true;
                }
            }
        }
    }
}

/// The peer address of in-process connections: loopback, no port (no socket is involved).
pub const IN_PROCESS_PEER: SocketAddr =
    SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), 0);
/// Bytes buffered in each direction of an in-process pipe (as a socket's buffer: a writer waits
/// for the reader past it). HTTP/2 flow control bounds what is in flight anyway.
const IN_PROCESS_PIPE_BUFFER: usize = 256 * 1024;

/// Connections from inside the server's own process (the all-in-one server's scheduler,
/// controllers and simulated nodes): an in-memory pipe instead of TCP and TLS on loopback, served
/// by the same HTTP/2 settings and the same handler as a TLS connection, so authorization,
/// admission, audit, flow control, max-inflight and metrics all apply. The user is the one the
/// component's client certificate would have authenticated as. The server's drain closes them
/// as it does TLS connections (GOAWAY, then closed when it closes).
#[derive(Clone)]
pub struct InProcess {
    served: Served,
    metrics: Arc<ApiMetrics>,
}

impl InProcess {
    pub(crate) fn new(
        options: &ServingOptions,
        handler: Handler,
        metrics: Arc<ApiMetrics>,
        phase: watch::Receiver<Phase>,
    ) -> InProcess {
        InProcess {
            served: Served {
                builder: Arc::new(http_builder(options)),
                timeouts: (options.read_header_timeout, options.idle_timeout),
                handler,
                phase,
            },
            metrics,
        }
    }

    /// A new connection as `user`: the client's end of a pipe whose other end the server serves
    /// (HTTP/2 with prior knowledge: there is no ALPN). Refused once the server drains.
    pub fn dial(&self, user: &UserInfo) -> std::io::Result<tokio::io::DuplexStream> {
        if *self.served.phase.borrow() != Phase::Serving {
            return Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "the API server is shutting down",
            ));
        }
        let (client, server) = tokio::io::duplex(IN_PROCESS_PIPE_BUFFER);
        let served = self.served.clone();
        let mut phase = self.served.phase.clone();
        let counted = self.metrics.connection_opened(Protocol::InProcess);
        let user = Some(user.clone());
        tokio::spawn(async move {
            let _counted = counted;
            // Closing (after the drain, or `Running::shutdown`) ends the connection as the accept
            // loop's abort does a TLS one.
            tokio::select! {
                _ = served.serve(server, true, user, IN_PROCESS_PEER) => {}
                _ = until(&mut phase, |p| p == Phase::Closing) => {}
            }
        });
        Ok(client)
    }
}

/// Requests in flight on one connection, and since when it has none.
struct Activity {
    state: Mutex<ActivityState>,
    changed: Notify,
}

struct ActivityState {
    active: usize,
    since: Instant,
    served: bool,
    /// HTTP/1: when the first byte of a request head came (none in flight then); cleared when
    /// the request is dispatched.
    head_started: Option<Instant>,
    /// Whether heads are timed (not on HTTP/2, whose frames flow between requests).
    time_heads: bool,
    /// A response asked for the connection to close (HTTP/2's stand-in for `Connection: close`).
    close_requested: bool,
}

/// Why [`Activity::idle`] returned.
#[derive(Debug, PartialEq, Eq)]
enum Expired {
    /// A request head started and did not finish in time.
    Head,
    /// Nothing in flight or arriving for the idle timeout.
    Idle,
    /// A response asked for the connection to close.
    Close,
}

/// Whether `headers` carry `Connection: close`.
fn connection_close(headers: &http::HeaderMap) -> bool {
    headers
        .get_all(http::header::CONNECTION)
        .iter()
        .flat_map(|v| v.as_bytes().split(|b| *b == b','))
        .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"))
}

impl Activity {
    fn new(time_heads: bool) -> Arc<Activity> {
        Arc::new(Activity {
            state: Mutex::new(ActivityState {
                active: 0,
                since: Instant::now(),
                served: false,
                head_started: None,
                time_heads,
                close_requested: false,
            }),
            changed: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, ActivityState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// One more request in flight, until the guard (kept by its response body) goes.
    fn enter(self: &Arc<Self>) -> ActiveGuard {
        {
            let mut state = self.lock();
            state.active += 1;
            state.served = true;
            state.head_started = None;
        }
        self.changed.notify_waiters();
        ActiveGuard(self.clone())
    }

    /// Asks for the connection to be closed gracefully (see [`Expired::Close`]).
    fn request_close(&self) {
        self.lock().close_requested = true;
        self.changed.notify_waiters();
    }

    /// Bytes came from the client: with no request in flight, a request head has started.
    fn received(&self) {
        let mut state = self.lock();
        if state.time_heads && state.active == 0 && state.head_started.is_none() {
            state.head_started = Some(Instant::now());
            drop(state);
            self.changed.notify_waiters();
        }
    }

    /// Resolves once a started request head has taken longer than `head`, or no request has been
    /// in flight for `idle` (`first` before any request).
    async fn idle(&self, first: Duration, head: Duration, idle: Duration) -> Expired {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let deadline = {
                let state = self.lock();
                if state.close_requested {
                    return Expired::Close;
                }
                match (state.active, state.head_started) {
                    (0, Some(started)) => Some((started + head, Expired::Head)),
                    (0, None) => Some((
                        state.since + if state.served { idle } else { first },
                        Expired::Idle,
                    )),
                    _ => None,
                }
            };
            match deadline {
                None => notified.await,
                Some((deadline, why)) => tokio::select! {
                    _ = notified => {}
                    _ = tokio::time::sleep_until(deadline) => return why,
                },
            }
        }
    }
}

struct ActiveGuard(Arc<Activity>);

impl Drop for ActiveGuard {
    fn drop(&mut self) {
        {
            let mut state = self.0.lock();
            state.active = state.active.saturating_sub(1);
            if state.active == 0 {
                state.since = Instant::now();
            }
        }
        self.0.changed.notify_waiters();
    }
}

/// The connection's (decrypted) stream, telling [`Activity`] when bytes arrive.
struct Watched<T> {
    inner: T,
    activity: Arc<Activity>,
}

impl<T: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for Watched<T> {
    fn poll_read(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = std::pin::Pin::new(&mut this.inner).poll_read(cx, buf);
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.activity.received();
        }
        read
    }
}

impl<T: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for Watched<T> {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A response body that keeps its request counted as in flight until it is sent or dropped.
struct Tracked {
    inner: Body,
    _guard: ActiveGuard,
}

impl hyper::body::Body for Tracked {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        std::pin::Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hyper::body::Body as _;

    #[tokio::test(start_paused = true)]
    async fn a_connection_is_idle_only_without_requests_in_flight() {
        let activity = Activity::new(true);
        let (first, idle) = (Duration::from_secs(32), Duration::from_secs(90));
        // No request yet: the first deadline.
        let started = tokio::time::Instant::now();
        assert_eq!(activity.idle(first, first, idle).await, Expired::Idle);
        assert_eq!(started.elapsed(), first);

        let guard = activity.enter();
        let waiting = tokio::spawn({
            let activity = activity.clone();
            async move {
                let t = tokio::time::Instant::now();
                let why = activity.idle(first, first, idle).await;
                (why, t.elapsed())
            }
        });
        // A request in flight for 10 minutes holds the connection open.
        tokio::time::sleep(Duration::from_secs(600)).await;
        assert!(!waiting.is_finished());
        drop(guard);
        // Then the idle timeout counts from its end.
        assert_eq!(
            waiting.await.unwrap(),
            (Expired::Idle, Duration::from_secs(600) + idle)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_head_is_timed_from_its_first_byte() {
        let (head, idle) = (Duration::from_secs(32), Duration::from_secs(90));
        let activity = Activity::new(true);
        drop(activity.enter());
        // Kept alive and quiet past the header timeout: still open (the idle timeout applies).
        tokio::time::sleep(Duration::from_secs(60)).await;
        let t = tokio::time::Instant::now();
        activity.received();
        assert_eq!(activity.idle(head, head, idle).await, Expired::Head);
        assert_eq!(t.elapsed(), head);

        // Bytes of a request in flight (its body) start no head; HTTP/2 times no heads.
        let guard = activity.enter();
        activity.received();
        assert_eq!(activity.lock().head_started, None);
        drop(guard);
        let h2 = Activity::new(false);
        h2.received();
        assert_eq!(h2.lock().head_started, None);
    }

    #[tokio::test]
    async fn a_tracked_body_counts_until_it_is_sent() {
        let activity = Activity::new(true);
        let body = Tracked {
            inner: http_body_util::Full::new(Bytes::from_static(b"ok")).boxed(),
            _guard: activity.enter(),
        };
        assert_eq!(body.size_hint().exact(), Some(2));
        assert_eq!(activity.lock().active, 1);
        let bytes = body.collect().await.unwrap().to_bytes();
        assert_eq!(&bytes[..], b"ok");
        assert_eq!(activity.lock().active, 0);
    }

    #[tokio::test]
    async fn a_close_request_ends_the_wait_at_once() {
        let activity = Activity::new(false);
        let _in_flight = activity.enter();
        let waiting = tokio::spawn({
            let activity = activity.clone();
            async move {
                let long = Duration::from_secs(3600);
                activity.idle(long, long, long).await
            }
        });
        activity.request_close();
        let why = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("woken")
            .unwrap();
        assert_eq!(why, Expired::Close);
    }

    #[test]
    fn connection_close_is_found_among_tokens() {
        let mut headers = http::HeaderMap::new();
        assert!(!connection_close(&headers));
        headers.insert(http::header::CONNECTION, "keep-alive".parse().unwrap());
        assert!(!connection_close(&headers));
        headers.insert(http::header::CONNECTION, "Upgrade, Close".parse().unwrap());
        assert!(connection_close(&headers));
    }

    #[tokio::test]
    async fn accepted_connections_get_upstreams_keep_alive() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let (tcp, _) = listener.accept().await.unwrap();
        keep_alive(&tcp).unwrap();
        let sock = socket2::SockRef::from(&tcp);
        assert!(sock.keepalive().unwrap());
        assert_eq!(sock.tcp_keepalive_time().unwrap(), TCP_KEEPALIVE_IDLE);
    }

    #[test]
    fn http2_streams_default_and_flag() {
        let mut options = ServingOptions::default();
        assert_eq!(options.http2_streams(), DEFAULT_HTTP2_MAX_STREAMS);
        options.http2_max_streams_per_connection = 100;
        assert_eq!(options.http2_streams(), 100);
        // Builds without panicking (hyper checks some sizes when building).
        let _ = http_builder(&options);
    }
}
