//! Test support for the informer tests: rkube's API server in-process on a temporary data dir, kube
//! clients from its admin kubeconfig, and a TCP proxy that can cut every connection through it (a
//! forced watch disconnect) and refuse new ones until resumed.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, PostParams};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A running in-process API server.
pub struct Server {
    pub dir: tempfile::TempDir,
    pub running: Option<apiserver::Running>,
    pub addr: SocketAddr,
}

impl Server {
    pub async fn start() -> Server {
        Server::start_with(|_| {}).await
    }

    /// Starts with the defaults for tests (free port), adjusted by `tweak`.
    pub async fn start_with(tweak: impl FnOnce(&mut apiserver::Config)) -> Server {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut config = apiserver::Config {
            secure_port: 0,
            ..apiserver::Config::new(dir.path())
        };
        tweak(&mut config);
        let running = tokio::time::timeout(Duration::from_secs(60), apiserver::start(config))
            .await
            .expect("API server start timed out")
            .expect("API server start");
        let addr = running.addr;
        Server {
            dir,
            running: Some(running),
            addr,
        }
    }

    pub fn kubeconfig(&self) -> PathBuf {
        self.dir.path().join("admin.kubeconfig")
    }

    /// A client straight to the server.
    pub async fn client(&self) -> kube::Client {
        self.client_at(self.addr).await
    }

    /// A client with the admin credentials that connects to `addr` (e.g. a [`Proxy`]).
    pub async fn client_at(&self, addr: SocketAddr) -> kube::Client {
        let mut config = client::kubeconfig::config_from_file(&self.kubeconfig())
            .await
            .expect("kube config");
        config.cluster_url = format!("https://{addr}").parse().expect("url");
        kube::Client::try_from(config).expect("kube client")
    }

    /// Stops the server and starts a new one on the same data dir (objects and revisions kept) on a
    /// new port.
    pub async fn restart(&mut self) {
        self.shutdown().await;
        let config = apiserver::Config {
            secure_port: 0,
            ..apiserver::Config::new(self.dir.path())
        };
        let running = tokio::time::timeout(Duration::from_secs(60), apiserver::start(config))
            .await
            .expect("API server restart timed out")
            .expect("API server restart");
        self.addr = running.addr;
        self.running = Some(running);
    }

    pub async fn shutdown(&mut self) {
        if let Some(running) = self.running.take() {
            running.shutdown().await;
        }
    }
}

/// Creates a namespace.
pub async fn namespace(client: &kube::Client, name: &str) {
    let ns: Namespace = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}
    }))
    .expect("namespace");
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .expect("create namespace");
}

/// A TCP proxy to `upstream` whose connections can be cut.
pub struct Proxy {
    pub addr: SocketAddr,
    upstream: Arc<Mutex<SocketAddr>>,
    refusing: Arc<AtomicBool>,
    conns: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy addr");
        let refusing = Arc::new(AtomicBool::new(false));
        let upstream = Arc::new(Mutex::new(upstream));
        let conns: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::new(Mutex::new(Vec::new()));
        let accept = {
            let (refusing, conns, upstream) = (refusing.clone(), conns.clone(), upstream.clone());
            tokio::spawn(async move {
                loop {
                    let Ok((mut down, _)) = listener.accept().await else {
                        continue;
                    };
                    if refusing.load(Ordering::SeqCst) {
                        drop(down);
                        continue;
                    }
                    let to = *upstream.lock().unwrap_or_else(|e| e.into_inner());
                    let task = tokio::spawn(async move {
                        if let Ok(mut up) = TcpStream::connect(to).await {
                            let _ = tokio::io::copy_bidirectional(&mut down, &mut up).await;
                        }
                    });
                    let mut conns = conns.lock().unwrap_or_else(|e| e.into_inner());
                    conns.retain(|t| !t.is_finished());
                    conns.push(task);
                }
            })
        };
        Proxy {
            addr,
            upstream,
            refusing,
            conns,
            accept,
        }
    }

    /// Closes every open connection and refuses new ones until [`resume`](Self::resume).
    pub fn cut(&self) {
        self.refusing.store(true, Ordering::SeqCst);
        for task in self
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }

    /// Where new connections go from now on.
    pub fn set_upstream(&self, addr: SocketAddr) {
        *self.upstream.lock().unwrap_or_else(|e| e.into_inner()) = addr;
    }

    pub fn resume(&self) {
        self.refusing.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.accept.abort();
        for task in self
            .conns
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }
}

/// Polls `f` every 20 ms until it holds; panics with `what` after `limit`.
pub async fn eventually(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let ok = tokio::time::timeout(limit, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(ok.is_ok(), "timed out after {limit:?} waiting for {what}");
}
