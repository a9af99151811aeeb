//! The remote command protocol of exec and attach (upstream `k8s.io/apimachinery/pkg/util/remotecommand`
//! constants, client-go `tools/remotecommand` for the SPDY client side, and
//! `k8s.io/apiserver/pkg/util/proxy` `StreamTranslatorHandler` for the WebSocket-to-SPDY translation).
//!
//! Over SPDY a client opens one stream per standard stream, named by the `streamType` header: `error`
//! first, then `stdin`, `stdout`, `stderr` (not with a TTY) and, from `v3.channel.k8s.io` on with a TTY,
//! `resize`. When the command ends the server writes a `metav1.Status` on the error stream
//! (`v4.channel.k8s.io`; plain text before) and closes the streams.
//!
//! kubectl 1.30+ speaks `v5.channel.k8s.io` over WebSocket to the API server, which translates to SPDY
//! towards the kubelet because kubelets and container runtimes only speak SPDY with stream half-close.

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use serde_json::{json, Value};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::spdy::{self, Connection, StreamReader, StreamWriter};
use crate::wsstream::{self, ChannelMessage};

pub const STREAM_PROTOCOL_V1: &str = "channel.k8s.io";
pub const STREAM_PROTOCOL_V2: &str = "v2.channel.k8s.io";
pub const STREAM_PROTOCOL_V3: &str = "v3.channel.k8s.io";
pub const STREAM_PROTOCOL_V4: &str = "v4.channel.k8s.io";
pub const STREAM_PROTOCOL_V5: &str = "v5.channel.k8s.io";
/// What a SPDY client offers, newest first (client-go's SPDY executor).
pub const SPDY_PROTOCOLS: [&str; 5] = [
    STREAM_PROTOCOL_V5,
    STREAM_PROTOCOL_V4,
    STREAM_PROTOCOL_V3,
    STREAM_PROTOCOL_V2,
    STREAM_PROTOCOL_V1,
];

pub const STREAM_TYPE_HEADER: &str = "streamType";
pub const STREAM_TYPE_ERROR: &str = "error";
pub const STREAM_TYPE_STDIN: &str = "stdin";
pub const STREAM_TYPE_STDOUT: &str = "stdout";
pub const STREAM_TYPE_STDERR: &str = "stderr";
pub const STREAM_TYPE_RESIZE: &str = "resize";

/// WebSocket channel numbers.
pub const CHANNEL_STDIN: u8 = 0;
pub const CHANNEL_STDOUT: u8 = 1;
pub const CHANNEL_STDERR: u8 = 2;
pub const CHANNEL_ERROR: u8 = 3;
pub const CHANNEL_RESIZE: u8 = 4;

pub const NON_ZERO_EXIT_CODE_REASON: &str = "NonZeroExitCode";
pub const EXIT_CODE_CAUSE_TYPE: &str = "ExitCode";

/// Which standard streams a session has (the `stdin`, `stdout`, `stderr`, `tty` query parameters).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Options {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// How a remote command ended, as its error stream tells.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    Success,
    ExitCode(u32),
    /// A `metav1.Status` to pass on as is (e.g. the backend's answer to a refused upgrade).
    Status(Value),
    /// Anything else: reported as an internal error.
    Error(String),
}

impl Outcome {
    /// The `metav1.Status` the translator writes on the WebSocket error channel for this outcome.
    pub fn status(&self) -> Value {
        match self {
            Outcome::Success => json!({"metadata": {}, "status": "Success"}),
            Outcome::ExitCode(code) => json!({
                "metadata": {},
                "status": "Failure",
                "message": format!(
                    "command terminated with non-zero exit code: command terminated with exit code {code}"
                ),
                "reason": NON_ZERO_EXIT_CODE_REASON,
                "details": {"causes": [{"reason": EXIT_CODE_CAUSE_TYPE, "message": code.to_string()}]},
            }),
            Outcome::Status(status) => status.clone(),
            Outcome::Error(message) => json!({
                "metadata": {},
                "status": "Failure",
                "message": format!("Internal error occurred: {message}"),
                "reason": "InternalError",
                "details": {"causes": [{"message": message}]},
                "code": 500,
            }),
        }
    }
}

fn protocol_version(protocol: &str) -> u8 {
    match protocol {
        STREAM_PROTOCOL_V5 => 5,
        STREAM_PROTOCOL_V4 => 4,
        STREAM_PROTOCOL_V3 => 3,
        STREAM_PROTOCOL_V2 => 2,
        _ => 1,
    }
}

/// Reads what a server wrote on the error stream (client-go's `errorDecoderV4`, and the plain-text
/// message of the older protocols).
pub fn decode_error_stream(protocol: &str, message: &[u8]) -> Outcome {
    if message.is_empty() {
        return Outcome::Success;
    }
    if protocol_version(protocol) < 4 {
        return Outcome::Error(format!(
            "error executing remote command: {}",
            String::from_utf8_lossy(message)
        ));
    }
    let status: Value = match serde_json::from_slice(message) {
        Ok(v) => v,
        Err(e) => {
            return Outcome::Error(format!(
                "error stream protocol error: {e} in {:?}",
                String::from_utf8_lossy(message)
            ))
        }
    };
    match status.get("status").and_then(Value::as_str) {
        Some("Success") => Outcome::Success,
        Some("Failure") => {
            if status.get("reason").and_then(Value::as_str) == Some(NON_ZERO_EXIT_CODE_REASON) {
                let causes = status
                    .pointer("/details/causes")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
                let Some(cause) = causes.iter().find(|c| {
                    c.get("reason").and_then(Value::as_str) == Some(EXIT_CODE_CAUSE_TYPE)
                }) else {
                    return Outcome::Error(
                        "error stream protocol error: no ExitCode cause given".into(),
                    );
                };
                let text = cause.get("message").and_then(Value::as_str).unwrap_or("");
                // client-go parses the code as an 8-bit unsigned integer.
                return match text.parse::<u8>() {
                    Ok(code) => Outcome::ExitCode(u32::from(code)),
                    Err(_) => Outcome::Error(format!(
                        "error stream protocol error: invalid exit code value {text:?}"
                    )),
                };
            }
            Outcome::Error(
                status
                    .get("message")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string(),
            )
        }
        _ => Outcome::Error("error stream protocol error: unknown error".into()),
    }
}

/// A refused SPDY upgrade as client-go reports it: the backend's `Status` if its body is one, else
/// "unable to upgrade connection: <body>".
pub fn upgrade_failure(body: &[u8]) -> Outcome {
    if let Ok(v) = serde_json::from_slice::<Value>(body) {
        if v.get("kind").and_then(Value::as_str) == Some("Status") {
            return Outcome::Status(v);
        }
    }
    Outcome::Error(format!(
        "unable to upgrade connection: {}",
        String::from_utf8_lossy(body).trim()
    ))
}

/// The client side of a session's SPDY streams.
pub struct ClientStreams {
    pub error: StreamReader,
    pub stdin: Option<StreamWriter>,
    pub stdout: Option<StreamReader>,
    pub stderr: Option<StreamReader>,
    pub resize: Option<StreamWriter>,
}

fn stream_headers(kind: &str) -> spdy::Headers {
    vec![(STREAM_TYPE_HEADER.to_string(), vec![kind.to_string()])]
}

/// Opens the streams of a session in client-go's order (error, stdin, stdout, stderr, resize).
pub async fn open_client_streams(
    conn: &Connection,
    protocol: &str,
    opts: Options,
) -> Result<ClientStreams, spdy::conn::Error> {
    let mut error = conn.open(stream_headers(STREAM_TYPE_ERROR)).await?;
    // The client never writes on the error stream.
    let _ = error.writer.close().await;
    let stdin = match opts.stdin {
        true => Some(conn.open(stream_headers(STREAM_TYPE_STDIN)).await?.writer),
        false => None,
    };
    let stdout = match opts.stdout {
        true => Some(conn.open(stream_headers(STREAM_TYPE_STDOUT)).await?.reader),
        false => None,
    };
    let stderr = match opts.stderr && !opts.tty {
        true => Some(conn.open(stream_headers(STREAM_TYPE_STDERR)).await?.reader),
        false => None,
    };
    let resize = match opts.tty && protocol_version(protocol) >= 3 {
        true => Some(conn.open(stream_headers(STREAM_TYPE_RESIZE)).await?.writer),
        false => None,
    };
    Ok(ClientStreams {
        error: error.reader,
        stdin,
        stdout,
        stderr,
        resize,
    })
}

/// A SPDY connection to the backend and the protocol it chose.
pub type Dialed = (Connection, String);

enum WsOut {
    Data(u8, Bytes),
    /// Write this status on the error channel, close the WebSocket and stop.
    Finish(Value),
}

/// Serves one exec/attach session for a WebSocket client (already upgraded, `v5.channel.k8s.io`) by
/// dialing the backend with `dial` and translating between the WebSocket channels and the SPDY
/// streams. Returns when the session is over.
pub async fn translate<S, F>(ws: WebSocketStream<S>, opts: Options, dial: F)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    F: std::future::Future<Output = Result<Dialed, Outcome>>,
{
    let (mut sink, mut source) = ws.split();
    let (out_tx, mut out_rx) = mpsc::channel::<WsOut>(32);
    let writer = tokio::spawn(async move {
        while let Some(item) = out_rx.recv().await {
            match item {
                WsOut::Data(ch, data) => {
                    if sink
                        .send(Message::Binary(wsstream::encode(ch, &data)))
                        .await
                        .is_err()
                    {
                        return false;
                    }
                }
                WsOut::Finish(status) => {
                    let body = serde_json::to_vec(&status).unwrap_or_default();
                    let _ = sink
                        .send(Message::Binary(wsstream::encode(CHANNEL_ERROR, &body)))
                        .await;
                    let _ = sink
                        .send(Message::Close(Some(CloseFrame {
                            code: CloseCode::Normal,
                            reason: "".into(),
                        })))
                        .await;
                    let _ = sink.flush().await;
                    return true;
                }
            }
        }
        true
    });
    // An empty message on the lowest writable channel tells the client the session is set up.
    let ready = if opts.stdout {
        CHANNEL_STDOUT
    } else if opts.stderr {
        CHANNEL_STDERR
    } else {
        CHANNEL_ERROR
    };
    let _ = out_tx.send(WsOut::Data(ready, Bytes::new())).await;

    let outcome = match dial.await {
        Err(outcome) => outcome,
        Ok((conn, protocol)) => {
            let outcome = run_session(&conn, &protocol, opts, &mut source, &out_tx).await;
            conn.close().await;
            outcome
        }
    };
    let _ = out_tx.send(WsOut::Finish(outcome.status())).await;
    drop(out_tx);
    let _ = writer.await;
}

async fn run_session<S>(
    conn: &Connection,
    protocol: &str,
    opts: Options,
    source: &mut futures::stream::SplitStream<WebSocketStream<S>>,
    out: &mpsc::Sender<WsOut>,
) -> Outcome
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let streams = match open_client_streams(conn, protocol, opts).await {
        Ok(s) => s,
        Err(e) => return Outcome::Error(e.to_string()),
    };
    let ClientStreams {
        mut error,
        mut stdin,
        stdout,
        stderr,
        mut resize,
    } = streams;
    let copy_out = |reader: Option<StreamReader>, channel: u8| {
        let out = out.clone();
        async move {
            let Some(mut reader) = reader else {
                return true;
            };
            while let Some(chunk) = reader.next().await {
                if out.send(WsOut::Data(channel, chunk)).await.is_err() {
                    return false;
                }
            }
            true
        }
    };
    // WebSocket to SPDY: stdin data and its close signal, resize events.
    let inbound = async {
        while let Some(msg) = source.next().await {
            let data = match msg {
                Ok(Message::Binary(b)) => b,
                Ok(Message::Text(t)) => Bytes::from(t),
                Ok(Message::Close(_)) | Err(_) => break,
                Ok(_) => continue,
            };
            match wsstream::decode(data, true) {
                Some(ChannelMessage::Data(CHANNEL_STDIN, data)) => {
                    if let Some(w) = &stdin {
                        if w.write(data).await.is_err() {
                            stdin = None;
                        }
                    }
                }
                Some(ChannelMessage::Close(CHANNEL_STDIN)) => {
                    if let Some(mut w) = stdin.take() {
                        let _ = w.close().await;
                    }
                }
                Some(ChannelMessage::Data(CHANNEL_RESIZE, data)) => {
                    if let Some(w) = &resize {
                        let _ = w.write(data).await;
                    }
                }
                _ => {}
            }
        }
        // The client is gone or closed the connection: its stdin is over.
        if let Some(mut w) = stdin.take() {
            let _ = w.close().await;
        }
        if let Some(mut w) = resize.take() {
            let _ = w.close().await;
        }
        std::future::pending::<()>().await;
    };
    let outputs = async {
        let (a, b) = tokio::join!(
            copy_out(stdout, CHANNEL_STDOUT),
            copy_out(stderr, CHANNEL_STDERR)
        );
        if !(a && b) {
            return None;
        }
        let message = error.read_all().await;
        Some((message, error.aborted()))
    };
    tokio::select! {
        message = outputs => match message {
            // The backend went away without reporting how the command ended.
            Some((_, true)) => Outcome::Error(
                "error reading from error stream: the connection to the backend was lost".into(),
            ),
            Some((message, false)) => decode_error_stream(protocol, &message),
            None => Outcome::Error("the client went away".into()),
        },
        _ = inbound => Outcome::Error("unreachable".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_stream_decoding_follows_client_go() {
        let cases: Vec<(&str, &str, Outcome)> = vec![
            (STREAM_PROTOCOL_V4, "", Outcome::Success),
            (
                STREAM_PROTOCOL_V4,
                r#"{"metadata":{},"status":"Success"}"#,
                Outcome::Success,
            ),
            (
                STREAM_PROTOCOL_V4,
                r#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"3"}]}}"#,
                Outcome::ExitCode(3),
            ),
            (
                STREAM_PROTOCOL_V5,
                r#"{"status":"Failure","reason":"NonZeroExitCode","details":{"causes":[{"reason":"ExitCode","message":"300"}]}}"#,
                Outcome::Error(
                    "error stream protocol error: invalid exit code value \"300\"".into(),
                ),
            ),
            (
                STREAM_PROTOCOL_V4,
                r#"{"status":"Failure","reason":"NonZeroExitCode","details":{}}"#,
                Outcome::Error("error stream protocol error: no ExitCode cause given".into()),
            ),
            (
                STREAM_PROTOCOL_V4,
                r#"{"status":"Failure","message":"exec failed: no such file"}"#,
                Outcome::Error("exec failed: no such file".into()),
            ),
            (
                STREAM_PROTOCOL_V4,
                r#"{"status":"Weird"}"#,
                Outcome::Error("error stream protocol error: unknown error".into()),
            ),
            (
                STREAM_PROTOCOL_V2,
                "boom",
                Outcome::Error("error executing remote command: boom".into()),
            ),
        ];
        for (protocol, message, want) in cases {
            assert_eq!(
                decode_error_stream(protocol, message.as_bytes()),
                want,
                "{message}"
            );
        }
        assert!(matches!(
            decode_error_stream(STREAM_PROTOCOL_V4, b"not json"),
            Outcome::Error(m) if m.starts_with("error stream protocol error:")
        ));
    }

    /// A remote command server on the SPDY side: upper-cases stdin onto stdout, then reports exit
    /// code 3 once stdin is closed.
    async fn fake_runtime(io: tokio::io::DuplexStream, expect: usize) {
        let (conn, mut incoming) = Connection::server(io);
        let mut streams = std::collections::HashMap::new();
        while streams.len() < expect {
            let Some(s) = incoming.accept().await else {
                return;
            };
            s.writer.reply().await.unwrap();
            streams.insert(s.header("streamtype").unwrap().to_string(), s);
        }
        let mut stdin = streams.remove("stdin").unwrap();
        let mut stdout = streams.remove("stdout").unwrap();
        let mut error = streams.remove("error").unwrap();
        let input = stdin.reader.read_all().await;
        stdout
            .writer
            .write(Bytes::from(input.to_ascii_uppercase()))
            .await
            .unwrap();
        stdout.writer.close().await.unwrap();
        let status = Outcome::ExitCode(3).status().to_string();
        error.writer.write(Bytes::from(status)).await.unwrap();
        error.writer.close().await.unwrap();
        conn.close().await;
        conn.closed().await;
    }

    #[tokio::test]
    async fn translates_v5_websocket_to_spdy() {
        use tokio_tungstenite::tungstenite::protocol::Role;
        let (client_io, server_io) = tokio::io::duplex(4096);
        let server_ws = WebSocketStream::from_raw_socket(server_io, Role::Server, None).await;
        let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;
        let opts = Options {
            stdin: true,
            stdout: true,
            stderr: true,
            tty: false,
        };
        let dial = async {
            let (a, b) = tokio::io::duplex(4096);
            // error, stdin, stdout, stderr
            tokio::spawn(fake_runtime(b, 4));
            Ok((Connection::client(a).0, STREAM_PROTOCOL_V4.to_string()))
        };
        let session = tokio::spawn(translate(server_ws, opts, dial));
        let first = client.next().await.unwrap().unwrap();
        assert_eq!(
            first,
            Message::Binary(Bytes::from_static(&[CHANNEL_STDOUT]))
        );
        client
            .send(Message::Binary(wsstream::encode(CHANNEL_STDIN, b"hello ")))
            .await
            .unwrap();
        client
            .send(Message::Binary(wsstream::encode(CHANNEL_STDIN, b"world")))
            .await
            .unwrap();
        client
            .send(Message::Binary(wsstream::close_signal(CHANNEL_STDIN)))
            .await
            .unwrap();
        let mut stdout = Vec::new();
        let status = loop {
            match client.next().await {
                Some(Ok(Message::Binary(b))) => match wsstream::decode(b, true) {
                    Some(ChannelMessage::Data(CHANNEL_STDOUT, d)) => stdout.extend_from_slice(&d),
                    Some(ChannelMessage::Data(CHANNEL_ERROR, d)) => {
                        break serde_json::from_slice::<Value>(&d).unwrap()
                    }
                    other => panic!("unexpected message {other:?}"),
                },
                other => panic!("unexpected {other:?}"),
            }
        };
        assert_eq!(stdout, b"HELLO WORLD");
        assert_eq!(status, Outcome::ExitCode(3).status());
        assert!(matches!(client.next().await, Some(Ok(Message::Close(_)))));
        session.await.unwrap();
    }

    #[tokio::test]
    async fn failed_dials_are_reported_on_the_error_channel() {
        use tokio_tungstenite::tungstenite::protocol::Role;
        let (client_io, server_io) = tokio::io::duplex(4096);
        let server_ws = WebSocketStream::from_raw_socket(server_io, Role::Server, None).await;
        let mut client = WebSocketStream::from_raw_socket(client_io, Role::Client, None).await;
        let dial = async { Err(upgrade_failure(b"pod not found")) };
        let session = tokio::spawn(translate(server_ws, Options::default(), dial));
        // No output streams: the ready message goes to the error channel.
        let first = client.next().await.unwrap().unwrap();
        assert_eq!(first, Message::Binary(Bytes::from_static(&[CHANNEL_ERROR])));
        let Some(Ok(Message::Binary(b))) = client.next().await else {
            panic!("expected the status");
        };
        let Some(ChannelMessage::Data(CHANNEL_ERROR, d)) = wsstream::decode(b, true) else {
            panic!("expected the error channel");
        };
        let status: Value = serde_json::from_slice(&d).unwrap();
        assert_eq!(
            status["message"],
            "Internal error occurred: unable to upgrade connection: pod not found"
        );
        session.await.unwrap();
    }

    #[test]
    fn statuses_as_upstream_writes_them() {
        assert_eq!(
            Outcome::ExitCode(2).status(),
            json!({
                "metadata": {}, "status": "Failure",
                "message": "command terminated with non-zero exit code: command terminated with exit code 2",
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": "2"}]},
            })
        );
        assert_eq!(Outcome::Success.status()["status"], "Success");
        let failed = upgrade_failure(b"container not found (\"x\")\n");
        assert_eq!(
            failed.status()["message"],
            "Internal error occurred: unable to upgrade connection: container not found (\"x\")"
        );
        let status = upgrade_failure(br#"{"kind":"Status","status":"Failure","code":404}"#);
        assert_eq!(status.status()["code"], 404);
    }
}
