//! `/healthz`, `/livez` and `/metrics` over plain HTTP (upstream `pkg/proxy/healthcheck`'s proxier
//! health server and the metrics handler of `cmd/kube-proxy`). A request is read up to a small
//! bound, answered, and the connection closed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::metrics::Metrics;

const MAX_REQUEST: usize = 8192;

/// Which paths a listener answers.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Serve {
    Health,
    Metrics,
    Both,
}

pub async fn bind(addr: SocketAddr) -> std::io::Result<TcpListener> {
    TcpListener::bind(addr).await
}

/// Answers on `listener` until the task is dropped.
pub async fn serve(
    listener: TcpListener,
    what: Serve,
    metrics: Arc<Metrics>,
    health_timeout: Duration,
) {
    loop {
        let Ok((conn, _)) = listener.accept().await else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let m = metrics.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(
                Duration::from_secs(10),
                answer(conn, what, &m, health_timeout),
            )
            .await;
        });
    }
}

async fn answer(
    mut conn: TcpStream,
    what: Serve,
    m: &Metrics,
    timeout: Duration,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") && buf.len() < MAX_REQUEST {
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let head = String::from_utf8_lossy(&buf);
    let path = head
        .lines()
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .unwrap_or("/");
    let path = path.split('?').next().unwrap_or(path);
    let health = what != Serve::Metrics;
    let (status, ctype, body) = match path {
        "/healthz" | "/livez" if health => {
            let (ok, last) = m.healthy(timeout);
            let last = last
                .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                .map(|d| d.as_secs())
                .unwrap_or(0);
            let now = std::time::SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0);
            let body = format!("{{\"lastUpdated\": {last}, \"currentTime\": {now}}}");
            (
                if ok {
                    "200 OK"
                } else {
                    "503 Service Unavailable"
                },
                "application/json",
                body,
            )
        }
        "/metrics" if what != Serve::Health => ("200 OK", "text/plain; version=0.0.4", m.render()),
        _ => (
            "404 Not Found",
            "text/plain",
            "404 page not found\n".to_string(),
        ),
    };
    let resp = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    conn.write_all(resp.as_bytes()).await?;
    conn.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn get(addr: SocketAddr, path: &str) -> String {
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = String::new();
        c.read_to_string(&mut out).await.unwrap();
        out
    }

    #[tokio::test]
    async fn healthz_and_metrics() {
        let l = bind("127.0.0.1:0".parse().unwrap()).await.unwrap();
        let addr = l.local_addr().unwrap();
        let m = Arc::new(Metrics::new("nftables"));
        let task = tokio::spawn(serve(l, Serve::Both, m.clone(), Duration::from_millis(100)));
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        m.queued();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        loop {
            if get(addr, "/healthz").await.starts_with("HTTP/1.1 503") {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "never unhealthy");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        m.synced(&crate::proxier::SyncStats {
            full: true,
            duration: Duration::from_millis(3),
            rules_written: 7,
            rules_total: 7,
            service_ports: 1,
            endpoints: 2,
        });
        assert!(get(addr, "/healthz").await.starts_with("HTTP/1.1 200"));
        let metrics = get(addr, "/metrics").await;
        assert!(metrics.contains("kubeproxy_sync_proxy_rules_duration_seconds_count 1"));
        assert!(metrics.contains("kubeproxy_sync_proxy_rules_total{mode=\"nftables\"} 7"));
        task.abort();
    }
}
