//! The HTTP transport of rkube's own components: a `kube::Client` that speaks HTTP/2 to the API
//! server (ALPN `h2`, HTTP/1.1 as the fallback), as client-go's transport does against upstream.
//!
//! kube's own `Client::try_from(Config)` offers only HTTP/1.1, where every request in flight is its
//! own TLS connection: a component with 30 informers held 30 connections for their watches alone,
//! and the all-in-one server ~150 to itself. Over HTTP/2 each client is one connection whatever
//! its number of watches.
//!
//! The stack is kube's (`make_generic_builder`) minus its retry layer (off in rkube, see
//! [`crate::kubeconfig::config_from_file`]) and its per-request debug span: the base URI, the
//! kubeconfig's credentials (client certificate through rustls, tokens through the auth layer),
//! its extra and impersonation headers, and its connect/read/write timeouts.
//!
//! No component uses exec, attach or port-forward (kube's `ws` feature is off), whose upgrades
//! would need HTTP/1.1.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::client::legacy::connect::{Connect, Connected, Connection, HttpConnector};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use kube::client::ConfigExt;
use tokio::io::DuplexStream;
use tower::ServiceBuilder;

/// Go's `http2.Transport` receive window of one stream (`transportDefaultStreamFlow`, 4 MiB):
/// a watch whose consumer is slow stops its own stream at this much unread data...
pub const STREAM_WINDOW: u32 = 4 << 20;
/// ...and the connection's (`transportDefaultConnFlow`, 1 GiB) is so large that the other streams
/// on the connection never wait for it: one stalled watch must not block every other watch of the
/// component. Memory is bounded by the streams' windows, not this.
pub const CONNECTION_WINDOW: u32 = 1 << 30;
/// client-go's `ReadIdleTimeout`: a ping when nothing was read for this long...
pub const PING_INTERVAL: Duration = Duration::from_secs(30);
/// ...and its `PingTimeout`: no answer within this and the connection is closed, so a server that
/// vanished without a FIN is noticed and every watch on the connection reconnects.
pub const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// The error of [`client_from_config`]: the kubeconfig's credentials or TLS settings are unusable.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct TransportError(#[from] kube::Error);

/// A client for `config` over HTTP/2 (HTTP/1.1 where the server offers only that; plain `http://`
/// URLs use HTTP/1.1).
pub fn client_from_config(config: &kube::Config) -> Result<kube::Client, TransportError> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    // As Go's dialer (and the API server's accepted connections): small requests go out at once.
    http.set_nodelay(true);
    let mut builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = name
            .clone()
            .try_into()
            .map_err(kube::client::RustlsTlsError::InvalidServerName)
            .map_err(kube::Error::RustlsTls)?;
        builder =
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let https = builder.enable_all_versions().wrap_connector(http);
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector.set_reset_reader_on_write(config.reset_reader_on_write);
    client_with_connector(config, connector, false)
}

/// A client for `config` whose connections come from `connector` (any byte stream: TLS, or an
/// in-process pipe); `http2_only` when the stream has no ALPN to say HTTP/2 is spoken.
pub fn client_with_connector<C>(
    config: &kube::Config,
    connector: C,
    http2_only: bool,
) -> Result<kube::Client, TransportError>
where
    C: Connect + Clone + Send + Sync + 'static,
{
    let http: hyper_util::client::legacy::Client<C, kube::client::Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new())
            .timer(TokioTimer::new())
            .pool_timer(TokioTimer::new())
            .http2_only(http2_only)
            .http2_initial_stream_window_size(STREAM_WINDOW)
            .http2_initial_connection_window_size(CONNECTION_WINDOW)
            .http2_keep_alive_interval(PING_INTERVAL)
            .http2_keep_alive_timeout(PING_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .build(connector);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(tower::BoxError::from)
        .service(http);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

/// Opens an in-process connection to the API server (`apiserver::serving::InProcess::dial`).
pub type Dial = Arc<dyn Fn() -> std::io::Result<DuplexStream> + Send + Sync>;

/// A client for `config` whose connections are in-memory pipes from `dial` instead of TLS (the
/// all-in-one server's own components): HTTP/2 with prior knowledge, `config`'s headers and
/// tokens as over the network; the user is whatever `dial` connects as.
pub fn client_in_process(
    config: &kube::Config,
    dial: Dial,
) -> Result<kube::Client, TransportError> {
    client_with_connector(config, InProcessConnector(dial), true)
}

/// Connects by calling its [`Dial`]; the URI is not used.
#[derive(Clone)]
struct InProcessConnector(Dial);

impl tower::Service<http::Uri> for InProcessConnector {
    type Response = InProcessStream;
    type Error = std::io::Error;
    type Future = std::future::Ready<std::io::Result<InProcessStream>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, _: http::Uri) -> Self::Future {
        std::future::ready((self.0)().map(|pipe| InProcessStream(TokioIo::new(pipe))))
    }
}

/// One in-process connection: a pipe, with no TLS or ALPN to describe.
struct InProcessStream(TokioIo<DuplexStream>);

impl Connection for InProcessStream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

impl hyper::rt::Read for InProcessStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_read(cx, buf)
    }
}

impl hyper::rt::Write for InProcessStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // A runtime: kube's client spawns its request buffer's worker.
    #[tokio::test]
    async fn plain_http_and_https_configs_build() {
        for url in ["http://127.0.0.1:1", "https://127.0.0.1:1"] {
            let config = kube::Config::new(url.parse().unwrap());
            let _ = client_from_config(&config).unwrap();
        }
    }
}
