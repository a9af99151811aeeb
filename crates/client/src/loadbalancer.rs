//! A client-side TCP load balancer in front of several API servers, as k3s's agent load balancer
//! (`pkg/agent/loadbalancer`): components dial a loopback port and the balancer forwards each
//! connection to one API server, preferring the one that worked last, so that a component whose
//! server dies reconnects (through its client's ordinary retry) to another one without knowing
//! there are several.
//!
//! Choice: the current server first, then the other servers in list order after it; servers known
//! to be down go last (tried only when none is known up, as k3s falls back to any server). A dial
//! that fails marks its server down at once; a periodic health check (the caller's, e.g. an HTTPS
//! `/readyz`, else a TCP dial) marks servers up or down.
//! When a server goes down, the connections forwarded to it are closed, so long-running requests
//! (watches) end and their clients reconnect through the balancer to a live server instead of
//! hanging on a half-dead peer.
//!
//! TLS passes through untouched: clients verify the server's certificate against the name they
//! dialed, the balancer's loopback address, so API server certificates must carry `127.0.0.1`
//! (rkube's always do, as k3s's).

use std::collections::HashMap;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// At most this many servers: the list can come from the cluster (EndpointSlices).
pub const MAX_SERVERS: usize = 64;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ServerListError {
    #[error("no API server given")]
    Empty,
    #[error("more than {MAX_SERVERS} API servers")]
    TooMany,
    #[error("{0:?} is not an https://host[:port] URL")]
    BadUrl(String),
}

/// `host:port` of each `https://host[:port][/path]` URL (port 443 when none), checked.
pub fn server_addresses(urls: &[String]) -> Result<Vec<String>, ServerListError> {
    if urls.is_empty() {
        return Err(ServerListError::Empty);
    }
    if urls.len() > MAX_SERVERS {
        return Err(ServerListError::TooMany);
    }
    urls.iter().map(|u| authority(u)).collect()
}

fn authority(url: &str) -> Result<String, ServerListError> {
    let bad = || ServerListError::BadUrl(url.to_string());
    let rest = url.trim().strip_prefix("https://").ok_or_else(bad)?;
    let host_port = rest.split('/').next().unwrap_or_default();
    if host_port.is_empty() || host_port.contains('@') || host_port.contains(char::is_whitespace) {
        return Err(bad());
    }
    // `[v6]:port`, `[v6]`, `host:port`, `host`.
    let (host, port) = if let Some(v6) = host_port.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(bad)?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or_else(bad)?),
        };
        (format!("[{host}]"), port)
    } else {
        match host_port.split_once(':') {
            Some((h, p)) => (h.to_string(), Some(p)),
            None => (host_port.to_string(), None),
        }
    };
    let port: u16 = match port {
        None => 443,
        Some(p) => p.parse().ok().filter(|p| *p != 0).ok_or_else(bad)?,
    };
    if host.is_empty() || host == "[]" {
        return Err(bad());
    }
    Ok(format!("{host}:{port}"))
}

/// A health check of one server (`host:port`): true when it is fit to serve. The balancer bounds
/// it with [`Options::health_timeout`].
pub type HealthCheck =
    Arc<dyn Fn(String) -> Pin<Box<dyn Future<Output = bool> + Send>> + Send + Sync>;

/// Upstream's readiness probe of each server: `GET /readyz` answered `ok`, with the process's
/// credentials, verified against the name clients of the balancer verify (the kubeconfig's
/// `tls-server-name`, else `127.0.0.1`), so a server that is up but hung or not ready (or whose
/// certificate clients would refuse) stops getting connections. Each check waits at most 2 s.
pub fn readyz_check(config: &kube::Config) -> HealthCheck {
    let config = config.clone();
    let client_for = move |addr: &str| -> Result<kube::Client, String> {
        let mut c = config.clone();
        c.cluster_url = format!("https://{addr}")
            .parse()
            .map_err(|e| format!("--server {addr}: {e}"))?;
        c.tls_server_name
            .get_or_insert_with(|| "127.0.0.1".to_string());
        c.read_timeout = Some(Duration::from_secs(2));
        kube::Client::try_from(c).map_err(|e| format!("--server {addr}: {e}"))
    };
    // One client per server, made on its first check (the list can change).
    let clients = Mutex::new(HashMap::new());
    Arc::new(move |addr: String| {
        let client = clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(addr.clone())
            .or_insert_with(|| client_for(&addr))
            .clone();
        Box::pin(async move {
            let Ok(client) = client else { return false };
            // A server that refuses connections fails here, quietly: kube's client logs every
            // failed connect at ERROR, once a second per component while a server is down.
            let dialed = tokio::time::timeout(
                Duration::from_secs(1),
                tokio::net::TcpStream::connect(&addr),
            )
            .await;
            if !matches!(dialed, Ok(Ok(_))) {
                return false;
            }
            let Ok(request) = http::Request::get("/readyz").body(Vec::new()) else {
                return false;
            };
            matches!(client.request_text(request).await, Ok(body) if body.trim() == "ok")
        })
    })
}

/// Timings and limits of a [`LoadBalancer`].
#[derive(Clone)]
pub struct Options {
    /// Connections forwarded at once; more wait in the listener's backlog.
    pub max_connections: usize,
    /// How long one dial of a server may take before the next server is tried.
    pub dial_timeout: Duration,
    /// How often every server is health-checked (a TCP dial).
    pub health_interval: Duration,
    /// How long a health check may take; longer counts as a failure.
    pub health_timeout: Duration,
    /// The check; `None`: a TCP dial (which a hung but listening server passes).
    pub health_check: Option<HealthCheck>,
    /// Failed checks in a row that mark a server down: one slow answer on a loaded machine must
    /// not close every connection of a healthy server. (A refused dial marks it down at once.)
    pub health_failures: u32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            max_connections: 4096,
            dial_timeout: Duration::from_secs(3),
            health_interval: Duration::from_secs(1),
            health_timeout: Duration::from_secs(2),
            health_check: None,
            health_failures: 2,
        }
    }
}

/// One server: its address, whether it is believed up, and the token its connections close on.
struct Server {
    addr: String,
    up: bool,
    /// Failed health checks in a row.
    failed: u32,
    conns: CancellationToken,
}

/// The balancer's choice state, kept apart from I/O so the choice can be tested alone.
struct Pool {
    servers: Vec<Server>,
    current: usize,
}

impl Pool {
    fn new(addrs: Vec<String>) -> Pool {
        Pool {
            servers: addrs
                .into_iter()
                .map(|addr| Server {
                    addr,
                    up: true,
                    failed: 0,
                    conns: CancellationToken::new(),
                })
                .collect(),
            current: 0,
        }
    }

    /// Indexes in the order to try: servers believed up from the current one on (wrapping), then
    /// those believed down in the same order.
    fn candidates(&self) -> Vec<usize> {
        let n = self.servers.len();
        let order = (0..n).map(|i| (self.current + i) % n);
        let (up, down): (Vec<usize>, Vec<usize>) = order.partition(|&i| self.servers[i].up);
        up.into_iter().chain(down).collect()
    }

    /// A dial of `addr` worked: it is up and becomes the current server.
    fn dialed(&mut self, addr: &str) -> Option<CancellationToken> {
        let i = self.servers.iter().position(|s| s.addr == addr)?;
        self.servers[i].up = true;
        self.current = i;
        Some(self.servers[i].conns.clone())
    }

    /// `addr` is up (`true`) or down; going down closes its connections and, if it was the
    /// current server, moves on to the next one believed up.
    /// A health check's result: down after `needed` failures in a row, up at the first success.
    fn checked(&mut self, addr: &str, up: bool, needed: u32) {
        let Some(server) = self.servers.iter_mut().find(|s| s.addr == addr) else {
            return;
        };
        server.failed = if up {
            0
        } else {
            server.failed.saturating_add(1)
        };
        if up || server.failed >= needed.max(1) {
            self.mark(addr, up);
        }
    }

    fn mark(&mut self, addr: &str, up: bool) {
        let Some(i) = self.servers.iter().position(|s| s.addr == addr) else {
            return;
        };
        let server = &mut self.servers[i];
        let was_up = server.up;
        server.up = up;
        if was_up && !up {
            server.conns.cancel();
            server.conns = CancellationToken::new();
            if i == self.current {
                if let Some(&next) = self.candidates().first() {
                    self.current = next;
                }
            }
        }
    }

    /// Replaces the list, keeping what is known of servers still in it; connections to servers no
    /// longer listed are closed. The current server stays current if it is still listed.
    fn set(&mut self, addrs: Vec<String>) {
        let current = self.servers.get(self.current).map(|s| s.addr.clone());
        let mut old: Vec<Server> = std::mem::take(&mut self.servers);
        for addr in addrs {
            if self.servers.iter().any(|s| s.addr == addr) {
                continue;
            }
            match old.iter().position(|s| s.addr == addr) {
                Some(i) => self.servers.push(old.swap_remove(i)),
                None => self.servers.push(Server {
                    addr,
                    up: true,
                    failed: 0,
                    conns: CancellationToken::new(),
                }),
            }
        }
        for gone in old {
            gone.conns.cancel();
        }
        self.current = current
            .and_then(|c| self.servers.iter().position(|s| s.addr == c))
            .unwrap_or(0);
    }

    fn addrs(&self) -> Vec<String> {
        self.servers.iter().map(|s| s.addr.clone()).collect()
    }
}

struct Shared {
    pool: Mutex<Pool>,
    options: Options,
}

impl Shared {
    fn pool(&self) -> std::sync::MutexGuard<'_, Pool> {
        // A panic while holding the lock leaves the pool consistent (every update is one step).
        self.pool.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A running balancer; dropping it stops listening, health checks and every forwarded connection.
pub struct LoadBalancer {
    local: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl Drop for LoadBalancer {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

impl LoadBalancer {
    /// Listens on `127.0.0.1:0` and forwards to `servers` (`host:port`, see [`server_addresses`]).
    pub async fn start(servers: Vec<String>, options: Options) -> std::io::Result<LoadBalancer> {
        if servers.is_empty() || servers.len() > MAX_SERVERS {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("between 1 and {MAX_SERVERS} servers"),
            ));
        }
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let local = listener.local_addr()?;
        let shared = Arc::new(Shared {
            pool: Mutex::new(Pool::new(servers)),
            options,
        });
        let stop = CancellationToken::new();
        tokio::spawn(accept_loop(listener, shared.clone(), stop.clone()));
        tokio::spawn(health_loop(shared.clone(), stop.clone()));
        Ok(LoadBalancer {
            local,
            shared,
            stop,
        })
    }

    /// The loopback address clients dial.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// `https://127.0.0.1:<port>`: the URL to give clients instead of the servers'.
    pub fn url(&self) -> String {
        format!("https://{}", self.local)
    }

    /// The server new connections go to first.
    pub fn current(&self) -> Option<String> {
        let pool = self.shared.pool();
        pool.servers.get(pool.current).map(|s| s.addr.clone())
    }

    /// The servers, in their order.
    pub fn servers(&self) -> Vec<String> {
        self.shared.pool().addrs()
    }

    /// Replaces the server list (e.g. from the `kubernetes` Service's endpoints); an empty or too
    /// long list is ignored (the balancer never ends up with nowhere to go).
    pub fn set_servers(&self, servers: Vec<String>) {
        if servers.is_empty() || servers.len() > MAX_SERVERS {
            return;
        }
        self.shared.pool().set(servers);
    }
}

async fn accept_loop(listener: TcpListener, shared: Arc<Shared>, stop: CancellationToken) {
    let limit = Arc::new(Semaphore::new(shared.options.max_connections.max(1)));
    loop {
        // The permit comes first: over the limit, connections wait in the kernel's backlog.
        let permit = tokio::select! {
            _ = stop.cancelled() => return,
            p = limit.clone().acquire_owned() => match p {
                Ok(p) => p,
                Err(_) => return,
            },
        };
        let accepted = tokio::select! {
            _ = stop.cancelled() => return,
            a = listener.accept() => a,
        };
        let (client, _) = match accepted {
            Ok(c) => c,
            Err(e) => {
                // Out of file descriptors and the like: wait instead of spinning.
                tracing::warn!(error = %e, "load balancer: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (shared, stop) = (shared.clone(), stop.clone());
        tokio::spawn(async move {
            forward(client, &shared, &stop).await;
            drop(permit);
        });
    }
}

/// Dials the first server that answers and copies bytes both ways until either side ends, the
/// server is marked down, or the balancer stops.
async fn forward(mut client: TcpStream, shared: &Shared, stop: &CancellationToken) {
    let Some((mut server, closed)) = dial(shared).await else {
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    tokio::select! {
        _ = stop.cancelled() => {}
        _ = closed.cancelled() => {}
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
    }
}

async fn dial(shared: &Shared) -> Option<(TcpStream, CancellationToken)> {
    let candidates: Vec<String> = {
        let pool = shared.pool();
        pool.candidates()
            .into_iter()
            .map(|i| pool.servers[i].addr.clone())
            .collect()
    };
    for addr in candidates {
        match tokio::time::timeout(shared.options.dial_timeout, TcpStream::connect(&addr)).await {
            Ok(Ok(stream)) => {
                let token = shared.pool().dialed(&addr)?;
                return Some((stream, token));
            }
            Ok(Err(e)) => tracing::info!(server = %addr, error = %e, "load balancer: dial failed"),
            Err(_) => tracing::info!(server = %addr, "load balancer: dial timed out"),
        }
        shared.pool().mark(&addr, false);
    }
    tracing::warn!("load balancer: no API server answers");
    None
}

async fn health_loop(shared: Arc<Shared>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(shared.options.health_interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let addrs = shared.pool().addrs();
        let checks = addrs.into_iter().map(|addr| {
            let timeout = shared.options.health_timeout;
            let check = shared.options.health_check.clone();
            async move {
                let up = match check {
                    Some(check) => {
                        matches!(
                            tokio::time::timeout(timeout, check(addr.clone())).await,
                            Ok(true)
                        )
                    }
                    None => matches!(
                        tokio::time::timeout(timeout, TcpStream::connect(&addr)).await,
                        Ok(Ok(_))
                    ),
                };
                (addr, up)
            }
        });
        for (addr, up) in futures::future::join_all(checks).await {
            let mut pool = shared.pool();
            let was = pool.servers.iter().find(|s| s.addr == addr).map(|s| s.up);
            if was != Some(up) {
                tracing::info!(server = %addr, up, "load balancer: health changed");
            }
            pool.checked(&addr, up, shared.options.health_failures);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn pool(n: usize) -> Pool {
        Pool::new((0..n).map(|i| format!("s{i}:6443")).collect())
    }

    #[test]
    fn urls_become_host_ports() {
        let urls = [
            "https://10.0.0.1:6443",
            "https://api.example:8443/prefix",
            "https://host",
            "https://[::1]:6443",
            "https://[fd00::1]",
        ]
        .map(String::from);
        assert_eq!(
            server_addresses(&urls).unwrap(),
            [
                "10.0.0.1:6443",
                "api.example:8443",
                "host:443",
                "[::1]:6443",
                "[fd00::1]:443"
            ]
        );
        for bad in [
            "http://a:1",
            "https://",
            "https://a:0",
            "https://a:x",
            "https://u@a:1",
            "https://[::1",
            "a:6443",
        ] {
            assert_eq!(
                server_addresses(&[bad.to_string()]),
                Err(ServerListError::BadUrl(bad.to_string())),
                "{bad}"
            );
        }
        assert_eq!(server_addresses(&[]), Err(ServerListError::Empty));
        let many: Vec<String> = (0..=MAX_SERVERS).map(|i| format!("https://h{i}")).collect();
        assert_eq!(server_addresses(&many), Err(ServerListError::TooMany));
    }

    #[test]
    fn current_first_then_the_rest_in_order_down_ones_last() {
        let mut p = pool(3);
        assert_eq!(p.candidates(), [0, 1, 2]);
        p.dialed("s1:6443");
        assert_eq!(
            p.candidates(),
            [1, 2, 0],
            "the last server that worked first"
        );
        p.mark("s2:6443", false);
        assert_eq!(p.candidates(), [1, 0, 2], "down servers are tried last");
        p.mark("s1:6443", false);
        assert_eq!(
            p.current, 0,
            "the current server's failure moves on to a live one"
        );
        assert_eq!(p.candidates(), [0, 1, 2]);
        p.mark("s0:6443", false);
        assert_eq!(
            p.candidates(),
            [0, 1, 2],
            "all down: every server is still tried"
        );
        p.mark("s2:6443", true);
        assert_eq!(p.candidates(), [2, 0, 1]);
        assert_eq!(
            p.current, 0,
            "recovery alone does not move the current server"
        );
    }

    #[test]
    fn health_checks_need_failures_in_a_row() {
        let mut p = pool(2);
        p.checked("s0:6443", false, 2);
        assert!(p.servers[0].up, "one failure is not enough");
        p.checked("s0:6443", true, 2);
        p.checked("s0:6443", false, 2);
        assert!(p.servers[0].up, "a success in between starts over");
        p.checked("s0:6443", false, 2);
        assert!(!p.servers[0].up);
        assert_eq!(p.current, 1);
        p.checked("s0:6443", true, 2);
        assert!(p.servers[0].up, "one success brings it back");
    }

    #[test]
    fn going_down_closes_that_servers_connections_only() {
        let mut p = pool(2);
        let a = p.dialed("s0:6443").unwrap();
        let b = p.dialed("s1:6443").unwrap();
        p.mark("s0:6443", false);
        assert!(a.is_cancelled());
        assert!(!b.is_cancelled());
        // A new connection to the recovered server gets a fresh token.
        p.mark("s0:6443", true);
        assert!(!p.dialed("s0:6443").unwrap().is_cancelled());
        // Marking an already down server down again closes nothing new.
        let b2 = p.dialed("s1:6443").unwrap();
        p.mark("s1:6443", false);
        assert!(b2.is_cancelled());
        p.mark("unknown:1", false);
    }

    #[test]
    fn a_new_list_keeps_the_current_server_and_closes_the_removed() {
        let mut p = pool(3);
        let t0 = p.dialed("s0:6443").unwrap();
        let t2 = p.dialed("s2:6443").unwrap();
        p.mark("s1:6443", false);
        p.set(vec![
            "s2:6443".into(),
            "s1:6443".into(),
            "s3:6443".into(),
            "s3:6443".into(),
        ]);
        assert_eq!(p.addrs(), ["s2:6443", "s1:6443", "s3:6443"]);
        assert_eq!(p.current, 0, "s2 stays current");
        assert!(t0.is_cancelled(), "s0 is gone");
        assert!(!t2.is_cancelled());
        assert_eq!(p.candidates(), [0, 2, 1], "s1 is still known down");
        p.set(vec!["s9:1".into()]);
        assert_eq!(p.current, 0);
        assert!(t2.is_cancelled());
    }

    /// An echo server that prefixes what it returns with `tag`.
    async fn echo(tag: &'static str) -> (String, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut buf = [0u8; 64];
                    while let Ok(n) = s.read(&mut buf).await {
                        if n == 0 || s.write_all(tag.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (addr, task)
    }

    async fn ask(lb: &LoadBalancer) -> std::io::Result<(TcpStream, String)> {
        let mut s = TcpStream::connect(lb.local_addr()).await?;
        s.write_all(b"?").await?;
        let mut buf = [0u8; 1];
        let n = s.read(&mut buf).await?;
        Ok((s, String::from_utf8_lossy(&buf[..n]).into_owned()))
    }

    fn fast() -> Options {
        Options {
            health_interval: Duration::from_millis(50),
            health_timeout: Duration::from_millis(500),
            ..Options::default()
        }
    }

    #[tokio::test]
    async fn fails_over_on_a_refused_dial_and_closes_a_dead_servers_connections() {
        // A port nobody listens on: bind, note, drop.
        let dead = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dead_addr = dead.local_addr().unwrap().to_string();
        drop(dead);
        let (a, a_task) = echo("a").await;
        let (b, _b_task) = echo("b").await;
        let lb = LoadBalancer::start(vec![dead_addr.clone(), a.clone(), b.clone()], fast())
            .await
            .unwrap();
        let (mut held, got) = ask(&lb).await.unwrap();
        assert_eq!(got, "a", "the refused first server is skipped");
        assert_eq!(lb.current().as_deref(), Some(a.as_str()));
        // A stops listening: the health check marks it down, its connection is closed by the
        // balancer, and new connections go to B.
        a_task.abort();
        let _ = a_task.await;
        let mut buf = [0u8; 8];
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            // The echo task for `held` is still alive (spawned apart): only the balancer closes it.
            loop {
                match held.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "the dead server's connection was closed");
        let (_s, got) = ask(&lb).await.unwrap();
        assert_eq!(got, "b");
        assert_eq!(lb.current().as_deref(), Some(b.as_str()));
        assert_eq!(lb.servers(), [dead_addr, a, b]);
    }

    #[tokio::test]
    async fn a_failed_custom_check_moves_traffic_off_a_server_that_still_listens() {
        let (a, _a_task) = echo("a").await;
        let (b, _b_task) = echo("b").await;
        let sick = Arc::new(Mutex::new(String::new()));
        let check: HealthCheck = {
            let sick = sick.clone();
            Arc::new(move |addr: String| {
                let up = *sick.lock().unwrap() != addr;
                Box::pin(async move { up })
            })
        };
        let options = Options {
            health_check: Some(check),
            ..fast()
        };
        let lb = LoadBalancer::start(vec![a.clone(), b.clone()], options)
            .await
            .unwrap();
        let (mut held, got) = ask(&lb).await.unwrap();
        assert_eq!(got, "a");
        *sick.lock().unwrap() = a.clone();
        let mut buf = [0u8; 8];
        let closed = tokio::time::timeout(Duration::from_secs(5), async {
            loop {
                match held.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "the unfit server's connection was closed");
        let (_s, got) = ask(&lb).await.unwrap();
        assert_eq!(got, "b");
    }

    #[tokio::test]
    async fn the_connection_limit_holds_new_clients_back() {
        let (a, _a_task) = echo("a").await;
        let options = Options {
            max_connections: 1,
            ..fast()
        };
        let lb = LoadBalancer::start(vec![a], options).await.unwrap();
        let (first, got) = ask(&lb).await.unwrap();
        assert_eq!(got, "a");
        // The second client connects (backlog) but gets no answer while the first is open.
        let waiting = tokio::spawn(async move {
            let mut s = TcpStream::connect(lb.local_addr()).await.unwrap();
            s.write_all(b"?").await.unwrap();
            let mut buf = [0u8; 1];
            let n = s.read(&mut buf).await.unwrap();
            (lb, String::from_utf8_lossy(&buf[..n]).into_owned())
        });
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(!waiting.is_finished(), "over the limit: held back");
        drop(first);
        let (_lb, got) = tokio::time::timeout(Duration::from_secs(5), waiting)
            .await
            .expect("served once the first left")
            .unwrap();
        assert_eq!(got, "a");
    }
}
