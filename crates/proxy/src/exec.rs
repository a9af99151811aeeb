//! Running the netfilter tools (upstream `k8s.io/utils/exec` as the proxiers use it), optionally
//! inside a named network namespace (/run/netns/NAME, entered by the child before exec), which is how tests and several nodes on
//! one machine keep the host's own network untouched.

use std::fs::File;
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

/// Errors of a proxier's commands.
#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("cannot run {cmd}: {source}")]
    Spawn {
        cmd: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{cmd} failed ({status}): {stderr}")]
    Failed {
        cmd: String,
        status: String,
        stderr: String,
    },
}

/// How commands are started: directly, or inside a named network namespace.
#[derive(Clone, Debug, Default)]
pub struct Exec {
    netns: Option<String>,
}

impl Exec {
    pub fn host() -> Self {
        Self { netns: None }
    }

    /// Commands run in /run/netns/NAME.
    pub fn in_netns(name: &str) -> Self {
        Self {
            netns: Some(name.to_string()),
        }
    }

    pub fn netns(&self) -> Option<&str> {
        self.netns.as_deref()
    }

    /// Runs `prog args`, feeding `stdin`; returns stdout.
    pub fn run(&self, prog: &str, args: &[&str], stdin: Option<&str>) -> Result<String, ExecError> {
        let name = format!("{prog} {}", args.join(" "));
        let mut cmd = Command::new(prog);
        // Entering the namespace in the child before exec, rather than through `ip netns exec`
        // (which also remounts /sys): that costs ~20 ms per command, half a partial sync's budget.
        let ns_file =
            match &self.netns {
                Some(ns) => Some(File::open(format!("/run/netns/{ns}")).map_err(|source| {
                    ExecError::Spawn {
                        cmd: name.clone(),
                        source,
                    }
                })?),
                None => None,
            };
        if let Some(f) = &ns_file {
            let fd = f.as_raw_fd();
            // SAFETY: runs in the forked child before exec; setns is a plain system call
            // (async-signal-safe) on a descriptor the parent keeps open until spawn returns.
            unsafe {
                cmd.pre_exec(move || {
                    if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        cmd.args(args)
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|source| ExecError::Spawn {
            cmd: name.clone(),
            source,
        })?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            // A write error shows up as the command's failure below.
            let _ = pipe.write_all(input.as_bytes());
        }
        let out = child
            .wait_with_output()
            .map_err(|source| ExecError::Spawn {
                cmd: name.clone(),
                source,
            })?;
        if !out.status.success() {
            let mut stderr = String::from_utf8_lossy(&out.stderr).into_owned();
            stderr.truncate(4000);
            return Err(ExecError::Failed {
                cmd: name,
                status: out.status.to_string(),
                stderr,
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}
