//! Where container logs live and their format (upstream `pkg/kubelet/kuberuntime/helpers.go`
//! `BuildPodLogsDirectory`/`BuildContainerLogsDirectory`, and `pkg/kubelet/kuberuntime/logs` for the
//! format).
//!
//! Layout: `<pod-logs-root>/<namespace>_<pod>_<uid>/<container>/<restartCount>.log`. The sandbox's
//! `log_directory` is the pod directory; each container's `log_path` is `<container>/<restartCount>.log`
//! relative to it, and the runtime (containerd) writes the file. The root is `/var/log/pods` upstream; the
//! kubelet's `--pod-logs-dir` chooses it here (`rkube server` uses `<data-dir>/kubelet/pod-logs`), and
//! `ContainerStatus.log_path` always has the absolute path of a container's file.
//!
//! Format (CRI): one line per chunk, `<RFC3339Nano time> <stdout|stderr> <F|P> <content>`, where `P`
//! marks a partial line continued by the next entry and `F` a full one.

use std::path::{Path, PathBuf};

/// The directory of a pod's logs.
pub fn pod_log_dir(root: &Path, namespace: &str, name: &str, uid: &str) -> PathBuf {
    root.join(format!("{namespace}_{name}_{uid}"))
}

/// A container's log path relative to its pod's log directory (what `ContainerConfig.log_path` holds).
pub fn container_log_relative_path(container: &str, restart_count: i32) -> PathBuf {
    Path::new(container).join(format!("{restart_count}.log"))
}

/// One parsed CRI log line.
#[derive(Debug, PartialEq, Eq)]
pub struct LogLine<'a> {
    /// RFC 3339 with nanoseconds, as written by the runtime.
    pub timestamp: &'a str,
    /// `stdout` or `stderr`.
    pub stream: &'a str,
    /// False for a partial line (`P`) that the next entry continues.
    pub full: bool,
    pub content: &'a [u8],
}

/// Parses one line of a CRI log file (without its trailing newline).
pub fn parse_line(line: &[u8]) -> Result<LogLine<'_>, String> {
    let mut parts = line.splitn(4, |&b| b == b' ');
    let mut field = |what: &str| {
        parts
            .next()
            .ok_or_else(|| format!("CRI log line lacks {what}"))
    };
    let timestamp = std::str::from_utf8(field("a timestamp")?)
        .map_err(|_| "CRI log timestamp is not UTF-8".to_string())?;
    let stream = match field("a stream")? {
        b"stdout" => "stdout",
        b"stderr" => "stderr",
        other => {
            return Err(format!(
                "CRI log stream {:?} is neither stdout nor stderr",
                String::from_utf8_lossy(other)
            ))
        }
    };
    let full = match field("a tag")? {
        b"F" => true,
        b"P" => false,
        other => {
            return Err(format!(
                "CRI log tag {:?} is neither F nor P",
                String::from_utf8_lossy(other)
            ))
        }
    };
    let content = parts.next().unwrap_or(b"");
    Ok(LogLine {
        timestamp,
        stream,
        full,
        content,
    })
}

/// The content of a whole CRI log (all streams), partial lines joined, each full line ending in `\n`.
pub fn content(log: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::with_capacity(log.len());
    for line in log.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
        let parsed = parse_line(line)?;
        out.extend_from_slice(parsed.content);
        if parsed.full {
            out.push(b'\n');
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout() {
        let dir = pod_log_dir(Path::new("/var/log/pods"), "default", "web-0", "u-1");
        assert_eq!(dir, Path::new("/var/log/pods/default_web-0_u-1"));
        assert_eq!(
            dir.join(container_log_relative_path("nginx", 2)),
            Path::new("/var/log/pods/default_web-0_u-1/nginx/2.log")
        );
    }

    type Parsed<'a> = Result<(&'a str, bool, &'a [u8]), ()>;

    #[test]
    fn lines() {
        let cases: &[(&[u8], Parsed)] = &[
            (
                b"2016-10-06T00:17:09.669794202Z stdout F hello world",
                Ok(("stdout", true, b"hello world")),
            ),
            (
                b"2016-10-06T00:17:09.669794202Z stderr P part",
                Ok(("stderr", false, b"part")),
            ),
            (
                b"2016-10-06T00:17:09.669794202Z stdout F ",
                Ok(("stdout", true, b"")),
            ),
            (
                b"2016-10-06T00:17:09.669794202Z stdout F",
                Ok(("stdout", true, b"")),
            ),
            (b"2016-10-06T00:17:09.669794202Z stdin F x", Err(())),
            (b"2016-10-06T00:17:09.669794202Z stdout X x", Err(())),
            (b"garbage", Err(())),
        ];
        for (line, want) in cases {
            let got = parse_line(line)
                .map(|l| (l.stream, l.full, l.content))
                .map_err(|_| ());
            assert_eq!(&got, want, "{}", String::from_utf8_lossy(line));
        }
    }

    #[test]
    fn whole_log() {
        let log = b"t stdout P 3.14\nt stdout F 159\nt stderr F warn\n";
        assert_eq!(content(log).unwrap(), b"3.14159\nwarn\n");
    }
}
