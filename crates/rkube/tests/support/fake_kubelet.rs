//! A stand-in kubelet for streaming tests without a container runtime: an HTTPS server on loopback
//! that requires client certificates from the cluster CA (as a kubelet with `--client-ca-file`) and
//! answers the kubelet's streaming paths the way a kubelet backed by a CRI streaming server does:
//!
//! - `/containerLogs/<ns>/<pod>/<container>`: a first line echoing the query, then `line 1`..`line 3`
//!   (five lines, spaced out, with `follow`); container `missing` gets 404, `waiting` gets 400;
//! - `/exec/...` and `/attach/...`: SPDY/3.1 with `v4.channel.k8s.io` (what containerd speaks); the
//!   "container" is this machine: exec runs the command as a local process, attach runs
//!   `tr a-z A-Z`; the exit status is reported on the error stream;
//! - `/portForward/<ns>/<pod>`: SPDY `portforward.k8s.io`; the "pod" is 127.0.0.1;
//! - anything else (for `nodes/proxy`): `ok <path>`.
//!
//! Every request is recorded as `"<client CN> <METHOD> <path?query> agent=<user agent product>"`.

#![allow(dead_code)]

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{combinators::BoxBody, BodyExt, Full, StreamBody};
use httpstream::spdy::{Connection, Stream};
use hyper::body::{Frame, Incoming};
use hyper_util::rt::TokioIo;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

type Body = BoxBody<Bytes, Infallible>;

pub struct FakeKubelet {
    pub addr: SocketAddr,
    pub requests: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A serving certificate: self-signed, or signed by `ca` (certificate and key PEM).
pub fn serving_cert(ca: Option<(&str, &str)>) -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params =
        rcgen::CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])
            .expect("params");
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "fake-kubelet");
    let cert = match ca {
        Some((ca_cert, ca_key)) => {
            let ca_key = rcgen::KeyPair::from_pem(ca_key).expect("ca key");
            let issuer = rcgen::Issuer::from_ca_cert_pem(ca_cert, ca_key).expect("issuer");
            params.signed_by(&key, &issuer).expect("sign")
        }
        None => params.self_signed(&key).expect("self-sign"),
    };
    (cert.pem(), key.serialize_pem())
}

/// A CA (certificate and key PEM) for kubelet serving certificates.
pub fn make_ca() -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
    params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kubelet-ca");
    let cert = params.self_signed(&key).expect("self-sign");
    (cert.pem(), key.serialize_pem())
}

impl FakeKubelet {
    /// Starts on a free loopback port, trusting client certificates from `client_ca` (PEM file).
    pub async fn start(client_ca: &Path, serving: (String, String)) -> FakeKubelet {
        let ca_pem = std::fs::read(client_ca).expect("client CA");
        let mut roots = rustls::RootCertStore::empty();
        for c in CertificateDer::pem_slice_iter(&ca_pem) {
            roots.add(c.expect("ca cert")).expect("add ca");
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .build()
        .expect("verifier");
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(serving.0.as_bytes())
                .collect::<Result<_, _>>()
                .expect("serving cert");
        let key = PrivateKeyDer::from_pem_slice(serving.1.as_bytes()).expect("serving key");
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .expect("versions")
            .with_client_cert_verifier(verifier)
            .with_single_cert(certs, key)
            .expect("server config");
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        let addr = listener.local_addr().expect("addr");
        let requests = Arc::new(Mutex::new(Vec::new()));
        let recorded = requests.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let (acceptor, recorded) = (acceptor.clone(), recorded.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let cn = tls
                        .get_ref()
                        .1
                        .peer_certificates()
                        .and_then(|c| c.first())
                        .and_then(apiserver::authn::user_from_certificate)
                        .map(|u| u.name)
                        .unwrap_or_default();
                    let service = hyper::service::service_fn(move |req| {
                        let (cn, recorded) = (cn.clone(), recorded.clone());
                        async move { Ok::<_, Infallible>(handle(cn, recorded, req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), service)
                        .with_upgrades()
                        .await;
                });
            }
        });
        FakeKubelet {
            addr,
            requests,
            task,
        }
    }

    pub fn requests(&self) -> Vec<String> {
        self.requests.lock().unwrap().clone()
    }
}

fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).boxed()
}

fn text(code: StatusCode, body: &str) -> Response<Body> {
    let mut r = Response::new(full(body.to_string()));
    *r.status_mut() = code;
    r
}

fn query_map(q: &str) -> HashMap<String, Vec<String>> {
    let mut m: HashMap<String, Vec<String>> = HashMap::new();
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        let decode = |s: &str| {
            let b = s.as_bytes();
            let mut out = Vec::new();
            let mut i = 0;
            while i < b.len() {
                let hex = b
                    .get(i + 1..i + 3)
                    .and_then(|h| std::str::from_utf8(h).ok())
                    .and_then(|h| u8::from_str_radix(h, 16).ok());
                match (b[i], hex) {
                    (b'+', _) => out.push(b' '),
                    (b'%', Some(x)) => {
                        out.push(x);
                        i += 2;
                    }
                    (c, _) => out.push(c),
                }
                i += 1;
            }
            String::from_utf8_lossy(&out).into_owned()
        };
        m.entry(decode(k)).or_default().push(decode(v));
    }
    m
}

async fn handle(
    cn: String,
    recorded: Arc<Mutex<Vec<String>>>,
    req: Request<Incoming>,
) -> Response<Body> {
    let path = req.uri().path().to_string();
    let query = req.uri().query().unwrap_or("").to_string();
    let agent = req
        .headers()
        .get("user-agent")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .split('/')
        .next()
        .unwrap_or("")
        .to_string();
    recorded.lock().unwrap().push(format!(
        "{cn} {} {path}?{query} agent={agent}",
        req.method()
    ));
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["containerLogs", _ns, _pod, container] => logs(container, &query),
        ["exec", _, _, _] => remote_command(req, &query, false),
        ["attach", _, _, _] => remote_command(req, &query, true),
        ["portForward", _, _] => port_forward(req),
        _ => text(StatusCode::OK, &format!("ok {path}")),
    }
}

fn logs(container: &str, query: &str) -> Response<Body> {
    match container {
        "missing" => return text(StatusCode::NOT_FOUND, "container not found (\"missing\")"),
        "waiting" => {
            return text(
                StatusCode::BAD_REQUEST,
                "container \"waiting\" in pod \"p\" is waiting to start: ContainerCreating",
            )
        }
        _ => {}
    }
    let follow = query_map(query)
        .get("follow")
        .is_some_and(|v| v.iter().any(|x| x == "true"));
    let first = format!("query: {query}\n");
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    tokio::spawn(async move {
        let _ = tx.send(Bytes::from(first)).await;
        let n = if follow { 5 } else { 3 };
        for i in 1..=n {
            if follow {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            if tx.send(Bytes::from(format!("line {i}\n"))).await.is_err() {
                return;
            }
        }
    });
    use futures::StreamExt;
    let stream = tokio_stream::wrappers::ReceiverStream::new(rx).map(|b| Ok(Frame::data(b)));
    let mut r = Response::new(BodyExt::boxed(StreamBody::new(stream)));
    r.headers_mut()
        .insert("content-type", http::HeaderValue::from_static("text/plain"));
    r
}

fn switching(protocol: &str) -> Response<Body> {
    let mut r = Response::new(full(Bytes::new()));
    *r.status_mut() = StatusCode::SWITCHING_PROTOCOLS;
    let h = r.headers_mut();
    h.insert("connection", http::HeaderValue::from_static("Upgrade"));
    h.insert("upgrade", http::HeaderValue::from_static("SPDY/3.1"));
    h.insert(
        "x-stream-protocol-version",
        http::HeaderValue::from_str(protocol).expect("protocol"),
    );
    r
}

fn offers(req: &Request<Incoming>, protocol: &str) -> bool {
    req.headers()
        .get_all("x-stream-protocol-version")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|p| p.trim() == protocol)
}

fn is_spdy_upgrade(req: &Request<Incoming>) -> bool {
    req.headers()
        .get("upgrade")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("SPDY/3.1"))
}

fn remote_command(mut req: Request<Incoming>, query: &str, attach: bool) -> Response<Body> {
    if !is_spdy_upgrade(&req) || !offers(&req, "v4.channel.k8s.io") {
        return text(
            StatusCode::BAD_REQUEST,
            "expected a SPDY upgrade offering v4.channel.k8s.io",
        );
    }
    let q = query_map(query);
    let flag = |k: &str| q.get(k).is_some_and(|v| v.iter().any(|x| x == "1"));
    let (stdin, stdout, tty) = (flag("stdin"), flag("stdout"), flag("tty"));
    let stderr = flag("stderr") && !tty;
    let command = if attach {
        vec!["tr".to_string(), "a-z".to_string(), "A-Z".to_string()]
    } else {
        q.get("command").cloned().unwrap_or_default()
    };
    if command.is_empty() {
        return text(
            StatusCode::BAD_REQUEST,
            "you must specify at least 1 command",
        );
    }
    let expected =
        1 + usize::from(stdin) + usize::from(stdout) + usize::from(stderr) + usize::from(tty);
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let (conn, mut incoming) = Connection::server(TokioIo::new(upgraded));
        let mut streams: HashMap<String, Stream> = HashMap::new();
        while streams.len() < expected {
            let accepted = tokio::time::timeout(Duration::from_secs(30), incoming.accept()).await;
            let Ok(Some(s)) = accepted else {
                return;
            };
            let _ = s.writer.reply().await;
            let kind = s.header("streamtype").unwrap_or("").to_string();
            streams.insert(kind, s);
        }
        run_command(&conn, streams, command).await;
        conn.close().await;
        let _ = tokio::time::timeout(Duration::from_secs(10), conn.closed()).await;
    });
    switching("v4.channel.k8s.io")
}

async fn run_command(
    _conn: &Connection,
    mut streams: HashMap<String, Stream>,
    command: Vec<String>,
) {
    let Some(mut error) = streams.remove("error") else {
        return;
    };
    let stdin = streams.remove("stdin");
    let stdout = streams.remove("stdout");
    let stderr = streams.remove("stderr");
    let mut child = match tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            let status = serde_json::json!({
                "metadata": {}, "status": "Failure",
                "message": format!("failed to exec in container: {e}"),
                "reason": "InternalError", "code": 500,
            });
            let _ = error.writer.write(Bytes::from(status.to_string())).await;
            let _ = error.writer.close().await;
            return;
        }
    };
    let feed_stdin = {
        let child_in = child.stdin.take();
        async move {
            if let (Some(mut s), Some(mut pipe)) = (stdin, child_in) {
                while let Some(chunk) = s.reader.next().await {
                    if pipe.write_all(&chunk).await.is_err() {
                        break;
                    }
                }
                let _ = pipe.shutdown().await;
            }
        }
    };
    let pump = |pipe: Option<Box<dyn tokio::io::AsyncRead + Unpin + Send>>,
                target: Option<Stream>| async move {
        let (Some(mut pipe), Some(mut target)) = (pipe, target) else {
            return;
        };
        let mut buf = vec![0u8; 8192];
        loop {
            match pipe.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if target
                        .writer
                        .write(Bytes::copy_from_slice(&buf[..n]))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        let _ = target.writer.close().await;
    };
    let out_pipe = child
        .stdout
        .take()
        .map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Unpin + Send>);
    let err_pipe = child
        .stderr
        .take()
        .map(|p| Box::new(p) as Box<dyn tokio::io::AsyncRead + Unpin + Send>);
    tokio::spawn(feed_stdin);
    tokio::join!(pump(out_pipe, stdout), pump(err_pipe, stderr));
    let code = child.wait().await.ok().and_then(|s| s.code()).unwrap_or(1);
    let status = if code == 0 {
        serde_json::json!({"metadata": {}, "status": "Success"})
    } else {
        serde_json::json!({
            "metadata": {}, "status": "Failure",
            "message": format!("command terminated with non-zero exit code: exit status {code}"),
            "reason": "NonZeroExitCode",
            "details": {"causes": [{"reason": "ExitCode", "message": code.to_string()}]},
        })
    };
    let _ = error.writer.write(Bytes::from(status.to_string())).await;
    let _ = error.writer.close().await;
}

fn port_forward(mut req: Request<Incoming>) -> Response<Body> {
    if !is_spdy_upgrade(&req) || !offers(&req, "portforward.k8s.io") {
        return text(
            StatusCode::BAD_REQUEST,
            "expected a SPDY upgrade offering portforward.k8s.io",
        );
    }
    let on_upgrade = hyper::upgrade::on(&mut req);
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let (conn, mut incoming) = Connection::server(TokioIo::new(upgraded));
        // Streams pair up by requestID: an error stream and a data stream per forwarded connection.
        let mut pending: HashMap<String, Stream> = HashMap::new();
        while let Some(s) = incoming.accept().await {
            let _ = s.writer.reply().await;
            let id = s.header("requestid").unwrap_or("").to_string();
            let Some(other) = pending.remove(&id) else {
                pending.insert(id, s);
                continue;
            };
            let (data, error) = if s.header("streamtype") == Some("data") {
                (s, other)
            } else {
                (other, s)
            };
            tokio::spawn(forward(data, error));
        }
        drop(conn);
    });
    switching("portforward.k8s.io")
}

async fn forward(mut data: Stream, mut error: Stream) {
    let port: u16 = data
        .header("port")
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    let tcp = match tokio::net::TcpStream::connect(("127.0.0.1", port)).await {
        Ok(t) => t,
        Err(e) => {
            let msg = format!("error forwarding port {port}: {e}");
            let _ = error.writer.write(Bytes::from(msg)).await;
            let _ = error.writer.close().await;
            let _ = data.writer.close().await;
            return;
        }
    };
    let (mut r, mut w) = tcp.into_split();
    let inbound = async {
        while let Some(chunk) = data.reader.next().await {
            if w.write_all(&chunk).await.is_err() {
                break;
            }
        }
        let _ = w.shutdown().await;
    };
    let outbound = async {
        let mut buf = vec![0u8; 8192];
        loop {
            match r.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if data
                        .writer
                        .write(Bytes::copy_from_slice(&buf[..n]))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        let _ = data.writer.close().await;
    };
    tokio::join!(inbound, outbound);
    let _ = error.writer.close().await;
}
