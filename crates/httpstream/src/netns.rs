//! Dialing inside a network namespace (no upstream counterpart: upstream components share the host's
//! network). `rkube server` can keep pods in a network namespace of their own; the API server's pod
//! and service proxies then reach pod IPs from inside it.
//!
//! A socket belongs to the namespace it is created in, whatever thread later uses it: a short-lived OS
//! thread enters the namespace (`setns`), connects, and hands the connected socket to tokio.

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
