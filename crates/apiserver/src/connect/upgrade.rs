//! Upgraded connections to a backend (upstream `UpgradeAwareHandler` with the API server's
//! `TranslatingHandler`s): SPDY (or any other protocol the backend accepts) is passed through
//! unchanged; `v5.channel.k8s.io` WebSockets of exec/attach are translated to SPDY
//! (`StreamTranslatorHandler`); port-forward WebSockets that tunnel SPDY (`SPDY/3.1+portforward.k8s.io`)
//! are unwrapped onto a SPDY upgrade of the backend (`TunnelingHandler`).

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http::{header, HeaderMap, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Empty, Limited};
use httpstream::proxy::{self, Backend, ProxyError};
use httpstream::remotecommand::{self, Outcome};
use httpstream::{spdy, wsstream};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::response::{self, Body};

/// WebSocket subprotocols that tunnel SPDY carry this prefix (upstream
/// `portforward.WebsocketsSPDYTunnelingPrefix`).
pub const TUNNELING_PREFIX: &str = "SPDY/3.1+";
const TUNNELING_SUFFIX: &str = ".k8s.io";

fn dial_error(e: ProxyError) -> Response<Body> {
    let message = match e {
        ProxyError::Dial(m) => format!("error dialing backend: {m}"),
        ProxyError::Request(m) => format!("error dialing backend: {m}"),
    };
    response::error_response(&super::unknown_error(message))
}

fn take_upgrade(req: Request<Incoming>) -> (http::request::Parts, Option<OnUpgrade>) {
    let (mut parts, _body) = req.into_parts();
    let on_upgrade = parts.extensions.remove::<OnUpgrade>();
    (parts, on_upgrade)
}

/// Sends an upgrade request to the backend and, when it switches protocols, answers the client with
/// the backend's 101 and copies bytes both ways; any other answer is relayed as is.
pub async fn pass_through(
    backend: Backend,
    path: String,
    req: Request<Incoming>,
) -> Response<Body> {
    let (parts, on_upgrade) = take_upgrade(req);
    let upstream = match proxy::upgrade_request(&parts.method, &parts.headers, &path) {
        Ok(r) => r,
        Err(e) => return response::error_response(&apimachinery::status::ApiError::internal(e)),
    };
    match backend.send(upstream).await {
        Ok(resp) => proxy::finish_upgrade(resp, on_upgrade),
        Err(e) => dial_error(e),
    }
}

/// Serves a `v5.channel.k8s.io` WebSocket client by translating its channels to SPDY streams on the
/// backend (the WebSocket is accepted first; backend failures come back on the error channel).
pub fn translate(
    backend: Backend,
    path: String,
    req: Request<Incoming>,
    opts: remotecommand::Options,
) -> Response<Body> {
    let (parts, on_upgrade) = take_upgrade(req);
    let handshake =
        match wsstream::handshake_response(&parts.headers, Some(remotecommand::STREAM_PROTOCOL_V5))
        {
            Ok(r) => r,
            Err(message) => return super::text_response(StatusCode::BAD_REQUEST, &message),
        };
    tokio::spawn(async move {
        let Some(on_upgrade) = on_upgrade else {
            return;
        };
        let upgraded = match on_upgrade.await {
            Ok(u) => u,
            Err(e) => {
                tracing::debug!(error = %e, "websocket upgrade failed");
                return;
            }
        };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        remotecommand::translate(ws, opts, dial_spdy(backend, path)).await;
    });
    let (head, ()) = handshake.into_parts();
    Response::from_parts(head, response::full(Bytes::new()))
}

/// Upgrades a connection to the backend to SPDY as client-go's SPDY executor does, offering every
/// remote command protocol version.
async fn dial_spdy(backend: Backend, path: String) -> Result<remotecommand::Dialed, Outcome> {
    let mut req = Request::new(Empty::<Bytes>::new());
    *req.method_mut() = Method::POST;
    *req.uri_mut() = path
        .parse()
        .map_err(|e| Outcome::Error(format!("invalid backend path {path:?}: {e}")))?;
    let h = req.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static(spdy::UPGRADE));
    for p in remotecommand::SPDY_PROTOCOLS {
        h.append(spdy::PROTOCOL_HEADER, HeaderValue::from_static(p));
    }
    let mut resp = backend.send(req).await.map_err(|e| match e {
        ProxyError::Dial(m) => Outcome::Error(format!("error dialing backend: {m}")),
        ProxyError::Request(m) => Outcome::Error(m),
    })?;
    if !switched_to_spdy(&resp) {
        let body = Limited::new(resp.into_body(), 64 * 1024)
            .collect()
            .await
            .map(|c| c.to_bytes())
            .unwrap_or_default();
        return Err(remotecommand::upgrade_failure(&body));
    }
    let protocol = resp
        .headers()
        .get(spdy::PROTOCOL_HEADER)
        .and_then(|v| v.to_str().ok())
        .filter(|p| !p.is_empty())
        .unwrap_or(remotecommand::STREAM_PROTOCOL_V1)
        .to_string();
    let upgraded = hyper::upgrade::on(&mut resp)
        .await
        .map_err(|e| Outcome::Error(format!("upgrade: {e}")))?;
    let (conn, _incoming) = spdy::Connection::client(TokioIo::new(upgraded));
    Ok((conn, protocol))
}

fn switched_to_spdy<B>(resp: &Response<B>) -> bool {
    let has = |name: header::HeaderName, token: &str| {
        resp.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.to_ascii_lowercase().contains(token))
    };
    resp.status() == StatusCode::SWITCHING_PROTOCOLS
        && has(header::CONNECTION, "upgrade")
        && has(header::UPGRADE, "spdy/3.1")
}

/// The SPDY protocols a port-forward WebSocket offers to tunnel (upstream
/// `spdyProtocolsFromWebsocketProtocols`).
fn tunneled_protocols(headers: &HeaderMap) -> Vec<String> {
    wsstream::requested_protocols(headers)
        .into_iter()
        .filter(|p| p.starts_with(TUNNELING_PREFIX) && p.ends_with(TUNNELING_SUFFIX))
        .map(|p| p[TUNNELING_PREFIX.len()..].to_string())
        .collect()
}

/// A WebSocket request offering a SPDY tunneling protocol (upstream
/// `IsWebSocketRequestWithTunnelingProtocol`).
pub fn is_tunneling_request(headers: &HeaderMap) -> bool {
    wsstream::is_websocket_request(headers)
        && wsstream::requested_protocols(headers)
            .iter()
            .any(|p| p.starts_with(TUNNELING_PREFIX))
}

/// Port-forward over WebSocket: the client's WebSocket carries SPDY frames; the backend gets a plain
/// SPDY upgrade and the bytes are passed between them unchanged.
pub async fn tunnel(backend: Backend, path: String, req: Request<Incoming>) -> Response<Body> {
    let (parts, on_upgrade) = take_upgrade(req);
    let protocols = tunneled_protocols(&parts.headers);
    if protocols.is_empty() {
        return super::text_response(
            StatusCode::BAD_REQUEST,
            "unable to upgrade: no tunneling spdy protocols provided",
        );
    }
    let mut upstream = Request::new(Empty::<Bytes>::new());
    *upstream.method_mut() = Method::POST;
    *upstream.uri_mut() = match path.parse() {
        Ok(u) => u,
        Err(e) => {
            return response::error_response(&apimachinery::status::ApiError::internal(format!(
                "invalid backend path {path:?}: {e}"
            )))
        }
    };
    let mut headers = proxy::forwarded_headers(&parts.headers, true);
    for h in [
        wsstream::PROTOCOL_HEADER,
        "Sec-WebSocket-Key",
        "Sec-WebSocket-Version",
        "Sec-WebSocket-Extensions",
        spdy::PROTOCOL_HEADER,
    ] {
        headers.remove(h);
    }
    headers.insert(header::UPGRADE, HeaderValue::from_static(spdy::UPGRADE));
    headers.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    for p in &protocols {
        if let Ok(v) = HeaderValue::from_str(p) {
            headers.append(spdy::PROTOCOL_HEADER, v);
        }
    }
    *upstream.headers_mut() = headers;
    let mut resp = match backend.send(upstream).await {
        Ok(r) => r,
        Err(e) => return dial_error(e),
    };
    if resp.status() != StatusCode::SWITCHING_PROTOCOLS {
        return proxy::relay(resp);
    }
    if !switched_to_spdy(&resp) {
        return super::text_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "unable to upgrade: missing upgrade headers in response",
        );
    }
    let chosen = resp
        .headers()
        .get(spdy::PROTOCOL_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(|p| format!("{TUNNELING_PREFIX}{p}"));
    let handshake = match wsstream::handshake_response(&parts.headers, chosen.as_deref()) {
        Ok(r) => r,
        Err(message) => return super::text_response(StatusCode::BAD_REQUEST, &message),
    };
    let backend_upgrade = hyper::upgrade::on(&mut resp);
    tokio::spawn(async move {
        let Some(client) = on_upgrade else {
            return;
        };
        match tokio::join!(client, backend_upgrade) {
            (Ok(client), Ok(backend)) => {
                let ws = WebSocketStream::from_raw_socket(TokioIo::new(client), Role::Server, None)
                    .await;
                bridge(ws, TokioIo::new(backend)).await;
            }
            (Err(e), _) | (_, Err(e)) => tracing::debug!(error = %e, "upgrade failed"),
        }
    });
    let (head, ()) = handshake.into_parts();
    Response::from_parts(head, response::full(Bytes::new()))
}

/// Binary WebSocket messages to bytes and back (upstream `TunnelingConnection`): the client's close
/// half-closes the backend, the backend's EOF closes the WebSocket normally.
async fn bridge<S, B>(ws: WebSocketStream<S>, backend: B)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    B: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut sink, mut source) = ws.split();
    let (mut read, mut write) = tokio::io::split(backend);
    let inbound = async {
        while let Some(msg) = source.next().await {
            match msg {
                Ok(Message::Binary(b)) => {
                    if write.write_all(&b).await.is_err() {
                        break;
                    }
                }
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => {}
            }
        }
        let _ = write.shutdown().await;
    };
    let outbound = async {
        let mut buf = vec![0u8; 32 * 1024];
        loop {
            match read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let data = Bytes::copy_from_slice(&buf[..n]);
                    if sink.send(Message::Binary(data)).await.is_err() {
                        return;
                    }
                }
            }
        }
        let _ = sink
            .send(Message::Close(Some(CloseFrame {
                code: CloseCode::Normal,
                reason: "".into(),
            })))
            .await;
    };
    tokio::join!(inbound, outbound);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tunneling_protocols() {
        let mut h = HeaderMap::new();
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(
            wsstream::PROTOCOL_HEADER,
            HeaderValue::from_static("SPDY/3.1+portforward.k8s.io, v4.channel.k8s.io"),
        );
        assert!(is_tunneling_request(&h));
        assert_eq!(tunneled_protocols(&h), ["portforward.k8s.io"]);
        h.insert(
            wsstream::PROTOCOL_HEADER,
            HeaderValue::from_static("portforward.k8s.io"),
        );
        assert!(!is_tunneling_request(&h));
    }
}
