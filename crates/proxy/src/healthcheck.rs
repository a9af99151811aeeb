//! Service health-check node ports (upstream `pkg/proxy/healthcheck/service_health.go`): for each
//! Service with `externalTrafficPolicy: Local` and a `healthCheckNodePort`, an HTTP server on that
//! port of the node, so that a load balancer sends traffic only to nodes with local endpoints. Any
//! path answers 200 while the node has local ready endpoints for the Service and the proxy is
//! healthy, else 503, with upstream's JSON body (indented with tabs):
//! `{"service": {"namespace": "default", "name": "web"}, "localEndpoints": 3,
//! "serviceProxyHealthy": true}`.
//!
//! The listeners are opened in the proxier's network namespace (where NodePorts answer) on all of
//! its addresses (upstream's default `--nodeport-addresses`), after each successful sync.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::endpointschangetracker::EndpointsMap;
use crate::servicechangetracker::{NamespacedName, ServicePortMap};

const MAX_REQUEST: usize = 8192;

/// Upstream `ServicePortMap.HealthCheckNodePorts`: Service -> its health-check node port.
pub fn health_check_node_ports(services: &ServicePortMap) -> HashMap<NamespacedName, u16> {
    services
        .iter()
        .filter(|(_, p)| p.health_check_node_port != 0)
        .map(|(name, p)| (name.service.clone(), p.health_check_node_port))
        .collect()
}

/// Upstream `EndpointsMap.LocalReadyEndpoints`: Service -> its local ready endpoints, counted once
/// per `ip:port` across the Service's ports.
pub fn local_ready_endpoints(endpoints: &EndpointsMap) -> HashMap<NamespacedName, usize> {
    let mut eps: HashMap<NamespacedName, HashSet<(Ipv4Addr, u16)>> = HashMap::new();
    for (name, list) in endpoints {
        for ep in list.iter().filter(|e| e.is_local && e.ready) {
            eps.entry(name.service.clone())
                .or_default()
                .insert((ep.ip, ep.port));
        }
    }
    eps.into_iter().map(|(k, v)| (k, v.len())).collect()
}

/// The status line and body of an answer (upstream `hcHandler.ServeHTTP`).
pub fn response(name: &NamespacedName, local_endpoints: usize, proxy_healthy: bool) -> String {
    let status = if local_endpoints != 0 && proxy_healthy {
        "200 OK"
    } else {
        "503 Service Unavailable"
    };
    let body = format!(
        "{{\n\t\"service\": {{\n\t\t\"namespace\": {:?},\n\t\t\"name\": {:?}\n\t}},\n\t\"localEndpoints\": {local_endpoints},\n\t\"serviceProxyHealthy\": {proxy_healthy}\n}}",
        name.namespace, name.name
    );
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nX-Content-Type-Options: nosniff\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

/// Opens a listener on `0.0.0.0:port` inside `/run/netns/<netns>` (or the process's own namespace).
fn listen(netns: Option<&str>, port: u16) -> std::io::Result<std::net::TcpListener> {
    let addr = SocketAddr::from((Ipv4Addr::UNSPECIFIED, port));
    let Some(ns) = netns else {
        let l = std::net::TcpListener::bind(addr)?;
        l.set_nonblocking(true)?;
        return Ok(l);
    };
    let path = format!("/run/netns/{ns}");
    // A socket belongs to the namespace of the thread that created it: a short-lived thread
    // enters the namespace and binds.
    std::thread::spawn(move || {
        let f = std::fs::File::open(&path)?;
        // SAFETY: setns on a valid namespace file descriptor affects only this thread, which
        // ends after binding.
        let rc = unsafe { libc::setns(std::os::fd::AsRawFd::as_raw_fd(&f), libc::CLONE_NEWNET) };
        if rc != 0 {
            return Err(std::io::Error::last_os_error());
        }
        let l = std::net::TcpListener::bind(addr)?;
        l.set_nonblocking(true)?;
        Ok(l)
    })
    .join()
    .unwrap_or_else(|_| Err(std::io::Error::other("listener thread panicked")))
}

struct Instance {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

/// The health-check servers of one proxier (upstream `ServiceHealthServer`).
pub struct ServiceHealthServer {
    netns: Option<String>,
    runtime: tokio::runtime::Handle,
    /// Whether the proxy is healthy (its `/healthz`), asked per request.
    proxy_healthy: Arc<dyn Fn() -> bool + Send + Sync>,
    services: HashMap<NamespacedName, Instance>,
    /// Local ready endpoints per Service, read by the listeners.
    counts: Arc<Mutex<BTreeMap<NamespacedName, usize>>>,
}

impl ServiceHealthServer {
    pub fn new(
        netns: Option<String>,
        runtime: tokio::runtime::Handle,
        proxy_healthy: Arc<dyn Fn() -> bool + Send + Sync>,
    ) -> Self {
        Self {
            netns,
            runtime,
            proxy_healthy,
            services: HashMap::new(),
            counts: Arc::default(),
        }
    }

    /// The ports listened on: Service -> port.
    pub fn ports(&self) -> HashMap<NamespacedName, u16> {
        self.services
            .iter()
            .map(|(n, i)| (n.clone(), i.port))
            .collect()
    }

    /// Upstream `SyncServices`: closes the listeners of Services gone or moved to another port,
    /// opens the new ones (a port that cannot be opened is retried at the next sync).
    pub fn sync_services(&mut self, wanted: &HashMap<NamespacedName, u16>) {
        self.services.retain(|name, inst| {
            let keep = wanted.get(name) == Some(&inst.port);
            if !keep {
                tracing::debug!(service = %name, port = inst.port, "closing health check");
                inst.task.abort();
            }
            keep
        });
        for (name, &port) in wanted {
            if self.services.contains_key(name) {
                continue;
            }
            let listener = match listen(self.netns.as_deref(), port) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!(service = %name, port, error = %e, "cannot open the health check node port");
                    continue;
                }
            };
            let (counts, healthy, name2) = (
                self.counts.clone(),
                self.proxy_healthy.clone(),
                name.clone(),
            );
            let task = self.runtime.spawn(async move {
                let listener = match tokio::net::TcpListener::from_std(listener) {
                    Ok(l) => l,
                    Err(e) => {
                        tracing::warn!(service = %name2, error = %e, "health check listener");
                        return;
                    }
                };
                loop {
                    let Ok((conn, _)) = listener.accept().await else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let (counts, healthy, name) = (counts.clone(), healthy.clone(), name2.clone());
                    tokio::spawn(async move {
                        let _ = tokio::time::timeout(
                            Duration::from_secs(10),
                            answer(conn, &name, &counts, &*healthy),
                        )
                        .await;
                    });
                }
            });
            self.services.insert(name.clone(), Instance { port, task });
        }
    }

    /// Upstream `SyncEndpoints`: the local ready endpoints of each Service (absent: none).
    pub fn sync_endpoints(&self, counts: &HashMap<NamespacedName, usize>) {
        let mut c = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        *c = counts
            .iter()
            .filter(|(n, _)| self.services.contains_key(*n))
            .map(|(n, v)| (n.clone(), *v))
            .collect();
    }
}

impl Drop for ServiceHealthServer {
    fn drop(&mut self) {
        for inst in self.services.values() {
            inst.task.abort();
        }
    }
}

async fn answer(
    mut conn: TcpStream,
    name: &NamespacedName,
    counts: &Mutex<BTreeMap<NamespacedName, usize>>,
    healthy: &(dyn Fn() -> bool + Send + Sync),
) {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_REQUEST {
        match conn.read(&mut chunk).await {
            Ok(0) | Err(_) => break,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
    let count = counts
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(name)
        .copied()
        .unwrap_or(0);
    let _ = conn
        .write_all(response(name, count, healthy()).as_bytes())
        .await;
    let _ = conn.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nsn(name: &str) -> NamespacedName {
        NamespacedName {
            namespace: "default".into(),
            name: name.into(),
        }
    }

    #[test]
    fn response_is_upstreams() {
        let r = response(&nsn("web"), 3, true);
        assert!(r.starts_with("HTTP/1.1 200 OK\r\n"), "{r}");
        assert!(r.contains("Content-Type: application/json\r\n"));
        assert!(r.contains("X-Content-Type-Options: nosniff\r\n"));
        let body = r.split("\r\n\r\n").nth(1).unwrap();
        assert_eq!(
            body,
            "{\n\t\"service\": {\n\t\t\"namespace\": \"default\",\n\t\t\"name\": \"web\"\n\t},\n\t\"localEndpoints\": 3,\n\t\"serviceProxyHealthy\": true\n}"
        );
        let v: serde_json::Value = serde_json::from_str(body).unwrap();
        assert_eq!(v["localEndpoints"], 3);
        // No local endpoint, or an unhealthy proxy: 503.
        assert!(response(&nsn("web"), 0, true).starts_with("HTTP/1.1 503 "));
        assert!(response(&nsn("web"), 2, false).starts_with("HTTP/1.1 503 "));
    }

    #[tokio::test]
    async fn listeners_follow_services_and_counts() {
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut hs =
            ServiceHealthServer::new(None, tokio::runtime::Handle::current(), Arc::new(|| true));
        let get = || async move {
            let mut c = TcpStream::connect(("127.0.0.1", port)).await?;
            c.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                .await?;
            let mut out = String::new();
            c.read_to_string(&mut out).await?;
            Ok::<_, std::io::Error>(out)
        };
        hs.sync_services(&HashMap::from([(nsn("web"), port)]));
        hs.sync_endpoints(&HashMap::from([(nsn("web"), 2), (nsn("other"), 5)]));
        let r = get().await.unwrap();
        assert!(r.starts_with("HTTP/1.1 200 OK"), "{r}");
        assert!(r.contains("\"localEndpoints\": 2"), "{r}");
        hs.sync_endpoints(&HashMap::new());
        let r = get().await.unwrap();
        assert!(r.starts_with("HTTP/1.1 503 "), "{r}");
        assert!(r.contains("\"localEndpoints\": 0"), "{r}");
        // The Service no longer has a health-check port: the listener closes.
        hs.sync_services(&HashMap::new());
        assert!(hs.ports().is_empty());
        let mut closed = false;
        for _ in 0..100 {
            if get().await.is_err() {
                closed = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(closed, "the listener of a removed Service still answers");
    }
}
