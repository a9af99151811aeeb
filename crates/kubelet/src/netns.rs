//! The pod network namespace: where the container runtime, the CNI bridge and the pod IPs live. Upstream
//! the kubelet and the runtime share the host's network namespace; rkube can put the runtime in a named
//! namespace of its own (`/run/netns/NAME`, created with `ip netns add` if missing) so that pods of
//! several instances (tests, sandboxes) never touch the host's network. Everything the kubelet (or its
//! HTTPS server) dials on the pod side — probes, containerd's streaming server — goes through
//! [`PodNetwork::connect`], which opens the socket inside that namespace.
//!
//! A socket belongs to the namespace it was created in, whatever thread later uses it; so a short-lived
//! OS thread enters the namespace (`setns`), connects, and hands the connected socket to tokio.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where the pod side of the network is: the host's namespace, or a named one.
#[derive(Clone, Debug, Default)]
pub struct PodNetwork {
    /// `None`: the kubelet's own (host) namespace.
    pub netns: Option<PathBuf>,
}

impl PodNetwork {
    pub fn host() -> PodNetwork {
        PodNetwork { netns: None }
    }

    pub fn named(path: &Path) -> PodNetwork {
        PodNetwork {
            netns: Some(path.to_path_buf()),
        }
    }

    /// Connects a TCP socket to `addr` as seen from the pod network, within `timeout`.
    pub async fn connect(
        &self,
        addr: SocketAddr,
        timeout: Duration,
    ) -> std::io::Result<tokio::net::TcpStream> {
        let Some(ns) = self.netns.clone() else {
            return tokio::time::timeout(timeout, tokio::net::TcpStream::connect(addr))
                .await
                .map_err(|_| {
                    std::io::Error::new(std::io::ErrorKind::TimedOut, "connect timed out")
                })?;
        };
        httpstream::netns::connect(&ns, addr, timeout).await
    }
}

/// Creates the named network namespace `/run/netns/NAME` (with its loopback up) unless it exists, and
/// returns its path.
pub fn ensure_named(name: &str) -> Result<PathBuf, String> {
    if name.is_empty() || name.contains('/') {
        return Err(format!(
            "network namespace name {name:?} must be a plain name"
        ));
    }
    let path = Path::new("/run/netns").join(name);
    if !path.exists() {
        run("ip", &["netns", "add", name])?;
    }
    run("ip", &["-n", name, "link", "set", "lo", "up"])?;
    Ok(path)
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = std::process::Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_plain() {
        assert!(ensure_named("a/b").is_err());
        assert!(ensure_named("").is_err());
    }

    #[tokio::test]
    async fn host_connect_reaches_a_loopback_listener() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accept = tokio::spawn(async move { listener.accept().await.map(|_| ()) });
        PodNetwork::host()
            .connect(addr, Duration::from_secs(5))
            .await
            .unwrap();
        accept.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn a_missing_namespace_is_an_error() {
        let net = PodNetwork::named(Path::new("/run/netns/rkube-does-not-exist"));
        let addr = "127.0.0.1:9".parse().unwrap();
        assert!(net.connect(addr, Duration::from_secs(1)).await.is_err());
    }
}
