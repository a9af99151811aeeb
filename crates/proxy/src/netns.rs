//! Named network namespaces (`ip netns`), for tests, benchmarks and nodes sharing one machine: the
//! proxier's rules go into such a namespace, never the host's own.

use std::fs::File;
use std::os::fd::AsRawFd;
use std::process::Command;

#[derive(Debug, thiserror::Error)]
pub enum NetnsError {
    #[error("{cmd}: {msg}")]
    Command { cmd: String, msg: String },
    #[error("setns {name}: {source}")]
    Setns {
        name: String,
        #[source]
        source: std::io::Error,
    },
}

/// Runs `ip args`.
pub fn ip(args: &[&str]) -> Result<(), NetnsError> {
    let cmd = format!("ip {}", args.join(" "));
    let out = Command::new("ip")
        .args(args)
        .output()
        .map_err(|e| NetnsError::Command {
            cmd: cmd.clone(),
            msg: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(NetnsError::Command {
            cmd,
            msg: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(())
}

/// A network namespace that is deleted when dropped (also when a test fails).
pub struct NetNs {
    name: String,
}

impl NetNs {
    /// Creates `<prefix>-<random>` with its loopback up.
    pub fn create(prefix: &str) -> Result<NetNs, NetnsError> {
        let name = format!("{prefix}-{:08x}", rand::random::<u32>());
        ip(&["netns", "add", &name])?;
        let ns = NetNs { name };
        ns.ip(&["link", "set", "lo", "up"])?;
        Ok(ns)
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Runs `ip args` inside the namespace.
    pub fn ip(&self, args: &[&str]) -> Result<(), NetnsError> {
        let mut full = vec!["-n", self.name.as_str()];
        full.extend_from_slice(args);
        ip(&full)
    }

    /// Moves the calling thread into the namespace (the thread should be one of its own: it
    /// stays there).
    pub fn enter(&self) -> Result<(), NetnsError> {
        let err = |source| NetnsError::Setns {
            name: self.name.clone(),
            source,
        };
        let f = File::open(format!("/run/netns/{}", self.name)).map_err(err)?;
        // SAFETY: setns on a valid namespace file descriptor affects only this thread.
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        if rc != 0 {
            return Err(err(std::io::Error::last_os_error()));
        }
        Ok(())
    }

    /// Runs `f` on a new thread inside the namespace.
    pub fn spawn<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> std::thread::JoinHandle<Result<T, NetnsError>> {
        let me = NetNs {
            name: self.name.clone(),
        };
        std::thread::spawn(move || {
            let r = me.enter().map(|_| f());
            // Not ours to delete: the owner's guard does.
            std::mem::forget(me);
            r
        })
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = ip(&["netns", "delete", &self.name]);
    }
}
