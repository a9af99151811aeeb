//! Dialing inside a network namespace (no upstream counterpart: upstream components share the host's
//! network). `rkube server` can keep pods in a network namespace of their own; the API server's pod
//! and service proxies then reach pod IPs from inside it.
//!
//! A socket belongs to the namespace it is created in, whatever thread later uses it: a short-lived OS
//! thread enters the namespace (`setns`), connects (or binds), and hands the socket to tokio. Several
//! nodes on one machine (`rkube server --nodes N`) also listen this way: each kubelet inside its
//! node's namespace, the cluster DNS inside the namespace that joins the nodes.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Connects to `addr` from inside the network namespace at `netns` (a `/run/netns/NAME` file).
pub async fn connect(
    netns: &Path,
    addr: SocketAddr,
    timeout: Duration,
) -> std::io::Result<tokio::net::TcpStream> {
    let netns: PathBuf = netns.to_path_buf();
    let (tx, rx) = tokio::sync::oneshot::channel();
    std::thread::Builder::new()
        .name("netns-dial".into())
        .spawn(move || {
            let result = enter(&netns).and_then(|()| {
                let s = std::net::TcpStream::connect_timeout(&addr, timeout)?;
                s.set_nonblocking(true)?;
                Ok(s)
            });
            let _ = tx.send(result);
        })?;
    let stream = rx
        .await
        .map_err(|_| std::io::Error::other("network namespace dialer thread died"))??;
    tokio::net::TcpStream::from_std(stream)
}

/// Runs `f` on a short-lived thread inside the network namespace at `netns`: sockets `f` creates
/// stay in that namespace.
pub fn within<T: Send + 'static>(
    netns: &Path,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    let netns = netns.to_path_buf();
    std::thread::Builder::new()
        .name("netns-bind".into())
        .spawn(move || enter(&netns).and_then(|()| f()))?
        .join()
        .map_err(|_| std::io::Error::other("network namespace thread panicked"))?
}

/// A TCP listener on `addr` inside `netns` (the host's namespace when `None`).
pub fn bind_tcp(
    netns: Option<&Path>,
    addr: SocketAddr,
) -> std::io::Result<tokio::net::TcpListener> {
    let listen = move || {
        let l = std::net::TcpListener::bind(addr)?;
        l.set_nonblocking(true)?;
        Ok(l)
    };
    let l = match netns {
        Some(ns) => within(ns, listen)?,
        None => listen()?,
    };
    tokio::net::TcpListener::from_std(l)
}

/// A UDP socket on `addr` inside `netns` (the host's namespace when `None`).
pub fn bind_udp(netns: Option<&Path>, addr: SocketAddr) -> std::io::Result<tokio::net::UdpSocket> {
    let bind = move || {
        let s = std::net::UdpSocket::bind(addr)?;
        s.set_nonblocking(true)?;
        Ok(s)
    };
    let s = match netns {
        Some(ns) => within(ns, bind)?,
        None => bind()?,
    };
    tokio::net::UdpSocket::from_std(s)
}

/// Moves the calling thread into the network namespace at `path`.
fn enter(path: &Path) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let file = std::fs::File::open(path)?;
    // SAFETY: setns on an open namespace file descriptor only changes this thread's namespace.
    if unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_missing_namespace_is_an_error() {
        let err = connect(
            Path::new("/run/netns/rkube-does-not-exist"),
            "127.0.0.1:9".parse().unwrap(),
            Duration::from_secs(1),
        )
        .await
        .unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::NotFound);
    }

    #[tokio::test]
    async fn the_own_namespace_reaches_a_loopback_listener() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let accept = tokio::spawn(async move { listener.accept().await.map(|_| ()) });
        connect(Path::new("/proc/self/ns/net"), addr, Duration::from_secs(5))
            .await
            .unwrap();
        accept.await.unwrap().unwrap();
    }
}
