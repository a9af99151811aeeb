//! Connection-level protection and graceful shutdown of the API server, against one real `rkube
//! server` with short timeouts, driven by a raw TLS client (HTTP/1.1 written by hand, so a test
//! can stop half-way through a header or stop reading a body):
//!
//! - a TCP client that never starts TLS, and a TLS client that sends half a header block, are
//!   disconnected after `--read-header-timeout`, without an answer, while a kept-alive connection
//!   quiet for longer is still served;
//! - past `--max-connections-per-ip` a connection from that address is closed at once while other
//!   addresses are served, and a freed place can be taken again;
//! - a request whose body trickles in gets 504 `Timeout` after `--request-timeout`;
//! - SIGTERM while a large LIST is being read slowly and a watch is open: `/readyz` fails with
//!   `[-]shutdown failed` during `--shutdown-delay-duration`, then the listener closes while the LIST
//!   goes on, the LIST completes, the watch ends cleanly and the process exits 0;
//! - with `--shutdown-send-retry-after` (a second server): after SIGTERM and the delay, new
//!   requests get 429 with `Retry-After: 5` and `Connection: close` on a listener still open,
//!   health probes are still answered, a request that was in flight finishes, and only then does
//!   the listener close and the process exit 0.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::{Backend, Cluster};

const TOKEN: &str = "connection-limits-admin";
const HEADER_TIMEOUT: Duration = Duration::from_secs(2);
const SHUTDOWN_DELAY: Duration = Duration::from_secs(5);
/// `--request-timeout`, which also bounds reading a request's body.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(8);
/// Above what the server's own components (from 127.0.0.1) and this test hold at once.
const PER_IP: usize = 16;
/// Bound on every wait of the test.
const DEADLINE: Duration = Duration::from_secs(30);
/// The large LIST: more than loopback's socket buffers hold, so its writing stalls while the
/// client does not read.
const BIG_OBJECTS: usize = 200;
const BIG_OBJECT_BYTES: usize = 100 * 1024;

struct Ctx {
    addr: SocketAddr,
    tls: Arc<rustls::ClientConfig>,
    rt: tokio::runtime::Runtime,
}

impl Ctx {
    fn new(c: &Cluster) -> Ctx {
        let addr: SocketAddr = c
            .url
            .trim_start_matches("https://")
            .parse()
            .unwrap_or_else(|e| panic!("server address {:?}: {e}", c.url));
        let ca = std::fs::read(c.data_dir().join("pki/ca.crt")).expect("ca.crt");
        let mut roots = rustls::RootCertStore::empty();
        for cert in rustls::pki_types::pem::PemObject::pem_slice_iter(&ca) {
            roots.add(cert.expect("CA PEM")).expect("CA certificate");
        }
        let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ctx {
            addr,
            tls: Arc::new(tls),
            rt: support::runtime(),
        }
    }

    /// A TCP connection from the loopback address `from` (127.0.0.x: each is a client address).
    fn tcp_from(&self, from: IpAddr) -> std::io::Result<TcpStream> {
        let addr = self.addr;
        let tcp = self.rt.block_on(async move {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.bind(SocketAddr::new(from, 0))?;
            socket.connect(addr).await?.into_std()
        })?;
        tcp.set_nonblocking(false)?;
        tcp.set_read_timeout(Some(DEADLINE))?;
        Ok(tcp)
    }

    /// A TLS connection from `from`, handshake done.
    fn connect_from(&self, from: IpAddr) -> std::io::Result<Conn> {
        let mut tcp = self.tcp_from(from)?;
        let name = rustls::pki_types::ServerName::IpAddress(self.addr.ip().into());
        let mut tls =
            rustls::ClientConnection::new(self.tls.clone(), name).map_err(std::io::Error::other)?;
        while tls.is_handshaking() {
            tls.complete_io(&mut tcp)?;
        }
        Ok(Conn {
            stream: rustls::StreamOwned::new(tls, tcp),
            buf: Vec::new(),
        })
    }

    fn connect(&self) -> Conn {
        self.connect_from(localhost()).expect("TLS connection")
    }
}

fn localhost() -> IpAddr {
    IpAddr::from([127, 0, 0, 1])
}

/// An HTTP/1.1 response head.
struct Head {
    status: u16,
    headers: Vec<(String, String)>,
}

impl Head {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// One TLS connection speaking HTTP/1.1 by hand.
struct Conn {
    stream: rustls::StreamOwned<rustls::ClientConnection, TcpStream>,
    buf: Vec<u8>,
}

fn is_closed(e: &std::io::Error) -> bool {
    matches!(
        e.kind(),
        ErrorKind::UnexpectedEof
            | ErrorKind::ConnectionReset
            | ErrorKind::ConnectionAborted
            | ErrorKind::BrokenPipe
    )
}

impl Conn {
    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("send");
        self.stream.flush().expect("flush");
    }

    fn request(&mut self, method: &str, path: &str, body: Option<&str>) {
        let mut req = format!(
            "{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n"
        );
        if let Some(body) = body {
            req.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        req.push_str("\r\n");
        req.push_str(body.unwrap_or(""));
        self.send(req.as_bytes());
    }

    /// Reads more into the buffer; false at the end of the connection.
    fn fill(&mut self) -> bool {
        let mut chunk = [0u8; 16 * 1024];
        match self.stream.read(&mut chunk) {
            Ok(0) => false,
            Ok(n) => {
                self.buf.extend_from_slice(&chunk[..n]);
                true
            }
            Err(e) if is_closed(&e) => false,
            Err(e) => panic!("read: {e}"),
        }
    }

    fn take(&mut self, n: usize) -> Vec<u8> {
        while self.buf.len() < n {
            assert!(self.fill(), "connection closed within a message");
        }
        self.buf.drain(..n).collect()
    }

    fn line(&mut self) -> String {
        loop {
            if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                let line = self.take(i + 2);
                return String::from_utf8_lossy(&line[..i]).into_owned();
            }
            assert!(self.fill(), "connection closed within a line");
        }
    }

    fn head(&mut self) -> Head {
        let status_line = self.line();
        let status = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("status line {status_line:?}"));
        let mut headers = Vec::new();
        loop {
            let line = self.line();
            if line.is_empty() {
                return Head { status, headers };
            }
            let (name, value) = line.split_once(':').expect("header line");
            headers.push((name.trim().to_string(), value.trim().to_string()));
        }
    }

    /// The next chunk of a chunked body; None at its (clean) end.
    fn chunk(&mut self) -> Option<Vec<u8>> {
        let size_line = self.line();
        let size = usize::from_str_radix(size_line.split(';').next().unwrap_or("").trim(), 16)
            .unwrap_or_else(|_| panic!("chunk size {size_line:?}"));
        if size == 0 {
            assert_eq!(self.line(), "", "no trailers");
            return None;
        }
        let data = self.take(size);
        assert_eq!(self.line(), "");
        Some(data)
    }

    fn body(&mut self, head: &Head) -> Vec<u8> {
        if let Some(len) = head.header("content-length") {
            return self.take(len.parse().expect("content-length"));
        }
        assert_eq!(head.header("transfer-encoding"), Some("chunked"));
        let mut body = Vec::new();
        while let Some(chunk) = self.chunk() {
            body.extend(chunk);
        }
        body
    }

    fn call(&mut self, method: &str, path: &str, body: Option<&str>) -> (u16, Vec<u8>) {
        self.request(method, path, body);
        let head = self.head();
        let body = self.body(&head);
        (head.status, body)
    }

    /// Waits for the server to close the connection; what it sent meanwhile.
    fn wait_closed(&mut self) -> Vec<u8> {
        while self.fill() {}
        std::mem::take(&mut self.buf)
    }
}

fn raw_tcp_waits_for_close(tcp: &mut TcpStream) {
    let mut byte = [0u8; 1];
    match tcp.read(&mut byte) {
        Ok(0) => {}
        Err(e) if is_closed(&e) => {}
        other => panic!("expected the server to close the connection, got {other:?}"),
    }
}

#[test]
fn slow_clients_connection_limits_and_graceful_shutdown() {
    let tokens = support::token_file(&format!("{TOKEN},admin,admin-uid,\"system:masters\"\n"));
    let tokens_path = tokens.path().to_str().expect("path").to_string();
    let header_timeout = format!("--read-header-timeout={}s", HEADER_TIMEOUT.as_secs());
    let per_ip = format!("--max-connections-per-ip={PER_IP}");
    let delay = format!("--shutdown-delay-duration={}s", SHUTDOWN_DELAY.as_secs());
    let request_timeout = format!("--request-timeout={}s", REQUEST_TIMEOUT.as_secs());
    let mut c = Cluster::start_with(
        Backend::Sqlite,
        &[
            "--token-auth-file",
            &tokens_path,
            &header_timeout,
            &per_ip,
            &delay,
            &request_timeout,
        ],
    );
    let ctx = Ctx::new(&c);

    // A client trickling its body: the request ends within the request timeout (checked after
    // the next two cases, which run meanwhile).
    let mut trickling = ctx.connect();
    trickling.send(
        format!(
            "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\
             Content-Length: 1000\r\n\r\n{{\"metadata\":"
        )
        .as_bytes(),
    );
    let trickle_started = Instant::now();

    slow_clients_are_disconnected(&ctx);
    connections_over_the_per_address_limit_are_refused(&ctx);

    let head = trickling.head();
    let waited = trickle_started.elapsed();
    assert_eq!(head.status, 504);
    let status: serde_json::Value =
        serde_json::from_slice(&trickling.body(&head)).expect("a Status");
    assert_eq!(status["reason"], "Timeout", "{status}");
    assert!(
        waited >= REQUEST_TIMEOUT - Duration::from_millis(200),
        "answered after {waited:?}"
    );

    sigterm_drains_and_exits_zero(&ctx, &mut c);
}

fn slow_clients_are_disconnected(ctx: &Ctx) {
    let started = Instant::now();
    // A TCP client that never starts its TLS handshake.
    let mut silent = ctx.tcp_from(localhost()).expect("tcp");
    // A TLS client that sends half a header block and waits.
    let mut half = ctx.connect();
    half.send(b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: applic");
    // Meanwhile a whole request is answered; its kept-alive connection is idle afterwards.
    let mut kept = ctx.connect();
    let (status, _) = kept.call("GET", "/version", None);
    assert_eq!(status, 200);
    let answered_at = started.elapsed();

    raw_tcp_waits_for_close(&mut silent);
    let silent_after = started.elapsed();
    let answered = half.wait_closed();
    let half_after = started.elapsed();
    assert!(
        answered.is_empty(),
        "no answer to half a request: {:?}",
        String::from_utf8_lossy(&answered)
    );
    for (what, after) in [("TLS handshake", silent_after), ("headers", half_after)] {
        assert!(
            after >= HEADER_TIMEOUT - Duration::from_millis(200) && after < DEADLINE,
            "{what}: closed after {after:?}, the timeout being {HEADER_TIMEOUT:?}"
        );
    }
    // A kept-alive connection quiet for longer than the header timeout is still served: the
    // header timeout counts from a request's first byte, idleness has its own (90 s) timeout.
    // (What this shows is that nothing happens for a while: the only wait here that is not for a
    // condition, at most the remainder of one header timeout.)
    let quiet = answered_at + HEADER_TIMEOUT + Duration::from_millis(500);
    std::thread::sleep(quiet.saturating_sub(started.elapsed()));
    assert_eq!(kept.call("GET", "/version", None).0, 200);
}

fn connections_over_the_per_address_limit_are_refused(ctx: &Ctx) {
    let client = IpAddr::from([127, 0, 0, 2]);
    // PER_IP watches hold PER_IP connections of 127.0.0.2 open.
    let mut watches: Vec<Conn> = (0..PER_IP)
        .map(|_| {
            let mut conn = ctx
                .connect_from(client)
                .expect("a connection under the limit");
            conn.request("GET", "/api/v1/namespaces/default/configmaps?watch=1", None);
            assert_eq!(conn.head().status, 200);
            conn
        })
        .collect();
    // One more from that address is closed before its TLS handshake ends...
    let refused = ctx.connect_from(client);
    assert!(
        matches!(&refused, Err(e) if is_closed(e)),
        "over the limit: {:?}",
        refused.err()
    );
    // ... while other addresses are served.
    let (status, _) = ctx.connect().call("GET", "/version", None);
    assert_eq!(status, 200);

    // A watch whose client left frees its place once the server writes to it (an event).
    drop(watches.pop());
    let mut writer = ctx.connect();
    let deadline = Instant::now() + DEADLINE;
    for i in 0.. {
        let cm = format!(r#"{{"metadata":{{"name":"free-{i}"}},"data":{{"k":"v"}}}}"#);
        let (status, _) = writer.call("POST", "/api/v1/namespaces/default/configmaps", Some(&cm));
        assert_eq!(status, 201);
        if let Ok(mut conn) = ctx.connect_from(client) {
            assert_eq!(conn.call("GET", "/version", None).0, 200);
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the freed place was never given back"
        );
    }
}

fn sigterm_drains_and_exits_zero(ctx: &Ctx, c: &mut Cluster) {
    let mut writer = ctx.connect();
    let ns = r#"{"metadata":{"name":"big"}}"#;
    assert_eq!(writer.call("POST", "/api/v1/namespaces", Some(ns)).0, 201);
    let filler = "x".repeat(BIG_OBJECT_BYTES);
    for i in 0..BIG_OBJECTS {
        let cm = format!(r#"{{"metadata":{{"name":"big-{i}"}},"data":{{"filler":"{filler}"}}}}"#);
        let (status, body) = writer.call("POST", "/api/v1/namespaces/big/configmaps", Some(&cm));
        assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    }
    drop(writer);

    let mut watch = ctx.connect();
    // (In `default`, where a few small objects are: its initial events are small.)
    watch.request(
        "GET",
        "/api/v1/namespaces/default/configmaps?watch=1&resourceVersion=0",
        None,
    );
    assert_eq!(watch.head().status, 200);
    assert!(watch.chunk().is_some(), "the watch's first event");

    // A LIST of ~20 MB whose client reads its head and then nothing for a while.
    let mut list = ctx.connect();
    list.request("GET", "/api/v1/namespaces/big/configmaps", None);
    let list_head = list.head();
    assert_eq!(list_head.status, 200);

    let pid = c.pid().expect("server running") as i32;
    // SAFETY: signalling the child process this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let signalled = Instant::now();

    // /readyz fails at once, while requests are still served during the delay.
    loop {
        let (status, body) = ctx.connect().call("GET", "/readyz?verbose", None);
        let body = String::from_utf8_lossy(&body).into_owned();
        if status == 500 {
            assert!(body.contains("[-]shutdown failed"), "{body}");
            assert!(body.contains("[+]etcd ok"), "{body}");
            break;
        }
        assert!(
            signalled.elapsed() < SHUTDOWN_DELAY,
            "/readyz still passes: {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, _) = ctx.connect().call("GET", "/version", None);
    assert_eq!(status, 200, "served during the delay");

    // After the delay the listener closes, though the LIST is still being sent.
    loop {
        match ctx.tcp_from(localhost()) {
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => break,
            _ => assert!(
                signalled.elapsed() < SHUTDOWN_DELAY + DEADLINE,
                "the listener never closed"
            ),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        signalled.elapsed() >= SHUTDOWN_DELAY - Duration::from_millis(200),
        "the listener closed before --shutdown-delay-duration: {:?}",
        signalled.elapsed()
    );

    // The LIST completes.
    let body = list.body(&list_head);
    let parsed: serde_json::Value = serde_json::from_slice(&body).expect("the whole LIST");
    assert_eq!(
        parsed["items"].as_array().map(Vec::len),
        Some(BIG_OBJECTS),
        "every object"
    );
    // The watch ends cleanly (its terminating chunk), after its remaining events.
    while watch.chunk().is_some() {}

    let status = c
        .wait_exit(DEADLINE)
        .expect("the server exits after the drain");
    assert_eq!(status.code(), Some(0), "{status:?}");
}

#[test]
fn send_retry_after_refuses_new_requests_until_those_in_flight_finish() {
    let tokens = support::token_file(&format!("{TOKEN},admin,admin-uid,\"system:masters\"\n"));
    let tokens_path = tokens.path().to_str().expect("path").to_string();
    let mut c = Cluster::start_with(
        Backend::Sqlite,
        &[
            "--token-auth-file",
            &tokens_path,
            "--shutdown-send-retry-after",
            "--shutdown-delay-duration=1s",
            "--request-timeout=30s",
        ],
    );
    let ctx = Ctx::new(&c);
    // A request in flight: its body is half sent.
    let body = r#"{"metadata":{"name":"in-flight"},"data":{"k":"v"}}"#;
    let (first, rest) = body.split_at(20);
    let mut in_flight = ctx.connect();
    in_flight.send(
        format!(
            "POST /api/v1/namespaces/default/configmaps HTTP/1.1\r\nHost: 127.0.0.1\r\n\
             Authorization: Bearer {TOKEN}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{first}",
            body.len()
        )
        .as_bytes(),
    );
    // Served as usual until the signal (and the request above has reached the handler).
    assert_eq!(ctx.connect().call("GET", "/version", None).0, 200);
    std::thread::sleep(Duration::from_millis(200));

    let pid = c.pid().expect("server running") as i32;
    // SAFETY: signalling the child process this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGTERM) }, 0);
    let signalled = Instant::now();

    // After the delay: 429, Retry-After, Connection: close, upstream's text; the connection is
    // closed after it.
    let refused_body = loop {
        let mut conn = ctx.connect();
        conn.request("GET", "/api/v1/namespaces/default/configmaps", None);
        let head = conn.head();
        let body = conn.body(&head);
        if head.status == 429 {
            assert_eq!(head.header("retry-after"), Some("5"));
            assert_eq!(head.header("connection"), Some("close"));
            assert!(conn.wait_closed().is_empty(), "closed after the 429");
            break body;
        }
        assert_eq!(head.status, 200, "{}", String::from_utf8_lossy(&body));
        assert!(
            signalled.elapsed() < DEADLINE,
            "never refused with Retry-After"
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(
        String::from_utf8_lossy(&refused_body),
        "The apiserver is shutting down, please try again later.\n"
    );
    // Health probes are still answered (readyz failing), other paths refused.
    let (status, body) = ctx.connect().call("GET", "/readyz?verbose", None);
    assert_eq!(status, 500);
    assert!(
        String::from_utf8_lossy(&body).contains("[-]shutdown failed"),
        "{}",
        String::from_utf8_lossy(&body)
    );
    assert_eq!(ctx.connect().call("GET", "/livez", None).0, 200);
    assert_eq!(ctx.connect().call("GET", "/version", None).0, 429);

    // The request in flight completes; then the listener closes and the process exits 0.
    in_flight.send(rest.as_bytes());
    let head = in_flight.head();
    let created = in_flight.body(&head);
    assert_eq!(head.status, 201, "{}", String::from_utf8_lossy(&created));
    loop {
        match ctx.tcp_from(localhost()) {
            Err(e) if e.kind() == ErrorKind::ConnectionRefused => break,
            _ => assert!(signalled.elapsed() < DEADLINE, "the listener never closed"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let status = c
        .wait_exit(DEADLINE)
        .expect("the server exits after the drain");
    assert_eq!(status.code(), Some(0), "{status:?}");
}
