//! The WebSocket side of streaming (upstream `k8s.io/apimachinery/pkg/util/httpstream/wsstream`):
//! recognising WebSocket upgrade requests, the server handshake with subprotocol negotiation, and the
//! channel protocols (`channel.k8s.io` .. `v5.channel.k8s.io`): every binary message starts with one
//! byte naming its channel (0 stdin, 1 stdout, 2 stderr, 3 error, 4 resize); `v5.channel.k8s.io` adds
//! the close signal `[255, channel]` that half-closes a channel (stdin EOF for `kubectl cp`).
//!
//! Differences: the server side only speaks the binary protocols (the base64 variants are for
//! browsers; the API server's translator serves `v5.channel.k8s.io` only, as upstream's does).

use bytes::{BufMut, Bytes, BytesMut};
use http::{header, HeaderMap, HeaderValue, Response, StatusCode};

use crate::remotecommand::STREAM_PROTOCOL_V5;

pub const PROTOCOL_HEADER: &str = "Sec-WebSocket-Protocol";
/// The v5 close signal's first byte.
pub const STREAM_CLOSE: u8 = 255;

/// Whether `Connection` lists the `upgrade` token (upstream `httpstream.IsUpgradeRequest`).
pub fn is_upgrade_request(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.to_ascii_lowercase().contains("upgrade"))
}

/// `Upgrade: websocket` with `Connection: upgrade`.
pub fn is_websocket_request(headers: &HeaderMap) -> bool {
    headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"))
        && is_upgrade_request(headers)
}

/// The subprotocols a WebSocket client offers, in its order of preference.
pub fn requested_protocols(headers: &HeaderMap) -> Vec<String> {
    headers
        .get_all(PROTOCOL_HEADER)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// A WebSocket request asking for `v5.channel.k8s.io` (upstream
/// `IsWebSocketRequestWithStreamCloseProtocol`): the requests the API server translates to SPDY.
pub fn is_stream_close_request(headers: &HeaderMap) -> bool {
    is_websocket_request(headers)
        && requested_protocols(headers)
            .iter()
            .any(|p| p == STREAM_PROTOCOL_V5)
}

/// The server's answer to a WebSocket handshake: 101 with the accept key and `protocol` (if any), or
/// an error message for a 400.
pub fn handshake_response(
    headers: &HeaderMap,
    protocol: Option<&str>,
) -> Result<Response<()>, String> {
    if !is_websocket_request(headers) {
        return Err("not a websocket upgrade request".into());
    }
    let version = headers
        .get("Sec-WebSocket-Version")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if version.trim() != "13" {
        return Err(format!("unsupported websocket version {version:?}"));
    }
    let key = headers
        .get("Sec-WebSocket-Key")
        .ok_or("missing Sec-WebSocket-Key")?;
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let mut resp = Response::new(());
    *resp.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = resp.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(
        "Sec-WebSocket-Accept",
        HeaderValue::from_str(&accept).map_err(|e| e.to_string())?,
    );
    if let Some(p) = protocol {
        h.insert(
            PROTOCOL_HEADER,
            HeaderValue::from_str(p).map_err(|e| e.to_string())?,
        );
    }
    Ok(resp)
}

/// Picks the first protocol the client offers that the server supports (upstream `handshake`): an
/// empty offer selects `""` when the server supports it.
pub fn negotiate<'a>(offered: &[String], supported: &[&'a str]) -> Option<&'a str> {
    if offered.is_empty() {
        return supported.iter().copied().find(|s| s.is_empty());
    }
    offered
        .iter()
        .find_map(|o| supported.iter().copied().find(|s| s == o))
}

/// One message of the binary channel protocol.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChannelMessage {
    Data(u8, Bytes),
    /// v5: the peer will send nothing more on this channel.
    Close(u8),
}

/// Reads a binary message. `None` for an empty message (ignored upstream) or a malformed close
/// signal; `stream_close` is whether the protocol has the close signal (v5).
pub fn decode(mut msg: Bytes, stream_close: bool) -> Option<ChannelMessage> {
    if msg.is_empty() {
        return None;
    }
    if stream_close && msg[0] == STREAM_CLOSE {
        return (msg.len() == 2).then(|| ChannelMessage::Close(msg[1]));
    }
    let channel = msg[0];
    let _ = msg.split_to(1);
    Some(ChannelMessage::Data(channel, msg))
}

/// A binary message for `channel` carrying `data`.
pub fn encode(channel: u8, data: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(1 + data.len());
    b.put_u8(channel);
    b.put_slice(data);
    b.freeze()
}

/// The v5 close signal for `channel`.
pub fn close_signal(channel: u8) -> Bytes {
    Bytes::from(vec![STREAM_CLOSE, channel])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn recognises_websocket_and_stream_close_requests() {
        let cases = [
            (
                vec![("Upgrade", "websocket"), ("Connection", "Upgrade")],
                true,
                false,
            ),
            (
                vec![
                    ("Upgrade", "WebSocket"),
                    ("Connection", "keep-alive, upgrade"),
                ],
                true,
                false,
            ),
            (
                vec![("Upgrade", "SPDY/3.1"), ("Connection", "Upgrade")],
                false,
                false,
            ),
            (vec![("Upgrade", "websocket")], false, false),
            (
                vec![
                    ("Upgrade", "websocket"),
                    ("Connection", "Upgrade"),
                    (
                        "Sec-WebSocket-Protocol",
                        "v5.channel.k8s.io, v4.channel.k8s.io",
                    ),
                ],
                true,
                true,
            ),
            (
                vec![
                    ("Upgrade", "websocket"),
                    ("Connection", "Upgrade"),
                    ("Sec-WebSocket-Protocol", "v4.channel.k8s.io"),
                    ("Sec-WebSocket-Protocol", "channel.k8s.io"),
                ],
                true,
                false,
            ),
        ];
        for (pairs, ws, v5) in cases {
            let h = headers(&pairs);
            assert_eq!(is_websocket_request(&h), ws, "{pairs:?}");
            assert_eq!(is_stream_close_request(&h), v5, "{pairs:?}");
        }
    }

    #[test]
    fn handshake_answers_with_the_accept_key() {
        // RFC 6455's example key and answer.
        let h = headers(&[
            ("Upgrade", "websocket"),
            ("Connection", "Upgrade"),
            ("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ=="),
            ("Sec-WebSocket-Version", "13"),
        ]);
        let resp = handshake_response(&h, Some("v5.channel.k8s.io")).unwrap();
        assert_eq!(resp.status(), StatusCode::SWITCHING_PROTOCOLS);
        assert_eq!(
            resp.headers()["Sec-WebSocket-Accept"],
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
        assert_eq!(resp.headers()[PROTOCOL_HEADER], "v5.channel.k8s.io");
        let mut old = h.clone();
        old.insert("Sec-WebSocket-Version", HeaderValue::from_static("8"));
        assert!(handshake_response(&old, None).is_err());
        let mut keyless = h;
        keyless.remove("Sec-WebSocket-Key");
        assert!(handshake_response(&keyless, None).is_err());
    }

    #[test]
    fn negotiation_follows_the_client_order() {
        let offered = |s: &[&str]| s.iter().map(|p| p.to_string()).collect::<Vec<_>>();
        assert_eq!(
            negotiate(
                &offered(&["v5.channel.k8s.io", "v4.channel.k8s.io"]),
                &["v4.channel.k8s.io", "v5.channel.k8s.io"]
            ),
            Some("v5.channel.k8s.io")
        );
        assert_eq!(negotiate(&offered(&["x"]), &["v5.channel.k8s.io"]), None);
        assert_eq!(negotiate(&[], &["", "channel.k8s.io"]), Some(""));
        assert_eq!(negotiate(&[], &["channel.k8s.io"]), None);
    }

    #[test]
    fn channel_messages() {
        let cases = [
            (
                vec![1u8, b'h', b'i'],
                true,
                Some(ChannelMessage::Data(1, Bytes::from_static(b"hi"))),
            ),
            (vec![255, 0], true, Some(ChannelMessage::Close(0))),
            (
                vec![255, 0],
                false,
                Some(ChannelMessage::Data(255, Bytes::from_static(&[0]))),
            ),
            (vec![255, 0, 1], true, None),
            (vec![], true, None),
            (vec![0], true, Some(ChannelMessage::Data(0, Bytes::new()))),
        ];
        for (msg, v5, want) in cases {
            assert_eq!(decode(Bytes::from(msg.clone()), v5), want, "{msg:?}");
        }
        assert_eq!(&encode(2, b"err")[..], b"\x02err");
        assert_eq!(&close_signal(0)[..], &[255, 0]);
    }
}
