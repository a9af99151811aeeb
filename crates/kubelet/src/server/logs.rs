//! Container logs as the kubelet serves them (upstream `pkg/kubelet/server` `getContainerLogs`,
//! `kubelet_pods.go` `GetKubeletContainerLogs`/`validateContainerLogStatus`, and
//! `pkg/kubelet/kuberuntime/logs` `ReadLogs`): the container is chosen from the pod's status (its
//! current one, or the last terminated one for `previous`), then its CRI log file is read directly:
//! `tailLines` from the end, entries before `sinceTime`/`sinceSeconds` skipped, `timestamps` prefixed
//! in RFC 3339 with nine fractional digits, output cut at `limitBytes`, and with `follow` the file is
//! watched until the container stops running.
//!
//! Differences: following polls the file (every 100 ms, and the container's state every second)
//! instead of inotify; log rotation is not followed (this kubelet does not rotate logs).

use std::io::SeekFrom;
use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncSeekExt};
use tokio::sync::mpsc;

use crate::cri::{api, logs, Runtime};

/// The kubelet's view of `PodLogOptions` (the v1 query parameters).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LogOptions {
    pub follow: bool,
    pub previous: bool,
    pub timestamps: bool,
    pub since: Option<jiff::Timestamp>,
    pub tail_lines: Option<i64>,
    pub limit_bytes: Option<i64>,
}

/// Why a logs request cannot be served: an HTTP status and the text upstream writes.
#[derive(Debug, PartialEq, Eq)]
pub struct Refusal(pub u16, pub String);

fn query_value<'a>(query: &'a [(String, String)], key: &str) -> Option<&'a str> {
    query
        .iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v.as_str())
}

/// Reads the options as upstream's kubelet does: `tail` is the old name of `tailLines` (`all` means
/// none), undecodable values are 400 and invalid ones 422, with upstream's terse messages.
pub fn parse_options(
    query: &[(String, String)],
    now: jiff::Timestamp,
) -> Result<LogOptions, Refusal> {
    let undecodable = || Refusal(400, r#"{"message": "Unable to decode query."}"#.into());
    let invalid = || Refusal(422, r#"{"message": "Invalid request."}"#.into());
    let flag = |key: &str| match query_value(query, key) {
        None => false,
        Some(v) => !(v == "0" || v.eq_ignore_ascii_case("false")),
    };
    let int = |key: &str| -> Result<Option<i64>, Refusal> {
        match query_value(query, key) {
            None | Some("") => Ok(None),
            Some(v) => v.parse().map(Some).map_err(|_| undecodable()),
        }
    };
    let mut tail_lines = int("tailLines")?;
    if let Some(tail) = query_value(query, "tail").filter(|t| !t.is_empty()) {
        tail_lines = if tail == "all" {
            None
        } else {
            Some(tail.parse().map_err(|_| undecodable())?)
        };
    }
    let since_seconds = int("sinceSeconds")?;
    let since_time = match query_value(query, "sinceTime") {
        None | Some("") => None,
        Some(v) => Some(v.parse::<jiff::Timestamp>().map_err(|_| undecodable())?),
    };
    let limit_bytes = int("limitBytes")?;
    if tail_lines.is_some_and(|t| t < 0)
        || limit_bytes.is_some_and(|l| l < 1)
        || (since_seconds.is_some() && since_time.is_some())
        || since_seconds.is_some_and(|s| s < 1)
    {
        return Err(invalid());
    }
    let since = match (since_seconds, since_time) {
        (Some(s), _) => now.checked_sub(jiff::SignedDuration::from_secs(s)).ok(),
        (None, t) => t,
    };
    Ok(LogOptions {
        follow: flag("follow"),
        previous: flag("previous"),
        timestamps: flag("timestamps"),
        since,
        tail_lines,
        limit_bytes,
    })
}

fn find_status<'a>(status: &'a Value, container: &str) -> Option<&'a Value> {
    [
        "containerStatuses",
        "initContainerStatuses",
        "ephemeralContainerStatuses",
    ]
    .iter()
    .filter_map(|f| status.get(*f).and_then(Value::as_array))
    .flatten()
    .find(|s| s.get("name").and_then(Value::as_str) == Some(container))
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or("")
}

/// The runtime id of the container whose logs to show (upstream `validateContainerLogStatus`), or
/// the reason there is none, worded as upstream.
pub fn container_for_logs(
    status: &Value,
    pod: &str,
    container: &str,
    previous: bool,
) -> Result<String, String> {
    let Some(cs) = find_status(status, container) else {
        return Err(format!(
            "container {container:?} in pod {pod:?} is not available"
        ));
    };
    let last_terminated = cs.pointer("/lastState/terminated");
    let last_id = str_at(cs, "/lastState/terminated/containerID");
    let id = if previous {
        if last_terminated.is_none() || last_id.is_empty() {
            return Err(format!(
                "previous terminated container {container:?} in pod {pod:?} not found"
            ));
        }
        last_id
    } else if cs.pointer("/state/running").is_some() {
        str_at(cs, "/containerID")
    } else if cs.pointer("/state/terminated").is_some() {
        let id = str_at(cs, "/state/terminated/containerID");
        if !id.is_empty() {
            id
        } else if !last_id.is_empty() {
            last_id
        } else {
            return Err(format!(
                "container {container:?} in pod {pod:?} is terminated"
            ));
        }
    } else if last_terminated.is_some() {
        if last_id.is_empty() {
            return Err(format!(
                "container {container:?} in pod {pod:?} is terminated"
            ));
        }
        last_id
    } else if let Some(waiting) = cs.pointer("/state/waiting") {
        let reason = waiting.get("reason").and_then(Value::as_str).unwrap_or("");
        return Err(match reason {
            "ErrImagePull" => format!(
                "container {container:?} in pod {pod:?} is waiting to start: image can't be pulled"
            ),
            "ImagePullBackOff" => format!(
                "container {container:?} in pod {pod:?} is waiting to start: trying and failing to pull image"
            ),
            _ => format!("container {container:?} in pod {pod:?} is waiting to start: {reason}"),
        });
    } else {
        return Err(format!(
            "container {container:?} in pod {pod:?} is waiting to start - no logs yet"
        ));
    };
    // `containerd://<id>` -> `<id>`.
    Ok(id.split_once("://").map_or(id, |(_, i)| i).to_string())
}

/// Where the last `n` lines of `data` start (upstream `tail.FindTailLineStartIndex`): a final line
/// without a newline counts as a line.
pub fn tail_start(data: &[u8], n: u64) -> usize {
    if n == 0 {
        return data.len();
    }
    let mut end = data.len();
    if data.last() == Some(&b'\n') {
        end -= 1;
    }
    let mut seen = 0;
    for i in (0..end).rev() {
        if data[i] == b'\n' {
            seen += 1;
            if seen == n {
                return i + 1;
            }
        }
    }
    0
}

/// The timestamp of a log entry as upstream prints it: RFC 3339 with nine fractional digits.
pub fn format_timestamp(ts: jiff::Timestamp) -> String {
    let secs = ts.strftime("%Y-%m-%dT%H:%M:%S");
    format!("{secs}.{:09}Z", ts.subsec_nanosecond())
}

/// Turns CRI log lines into what the client sees, applying `since`, `timestamps` and `limitBytes`.
struct Formatter<'a> {
    opts: &'a LogOptions,
    /// Bytes still allowed by `limitBytes`.
    left: Option<u64>,
}

impl Formatter<'_> {
    /// The output of one complete CRI line (without its newline); empty when filtered out. A line
    /// that is not valid CRI is skipped, as upstream logs and skips it.
    fn line(&mut self, line: &[u8]) -> Vec<u8> {
        let Ok(entry) = logs::parse_line(line) else {
            return Vec::new();
        };
        let ts = entry.timestamp.parse::<jiff::Timestamp>().ok();
        if let (Some(since), Some(ts)) = (self.opts.since, ts) {
            if ts < since {
                return Vec::new();
            }
        }
        let mut out = Vec::with_capacity(entry.content.len() + 40);
        if self.opts.timestamps {
            if let Some(ts) = ts {
                out.extend_from_slice(format_timestamp(ts).as_bytes());
                out.push(b' ');
            }
        }
        out.extend_from_slice(entry.content);
        if entry.full {
            out.push(b'\n');
        }
        if let Some(left) = &mut self.left {
            if (out.len() as u64) > *left {
                out.truncate(*left as usize);
            }
            *left -= out.len() as u64;
        }
        out
    }

    fn done(&self) -> bool {
        self.left == Some(0)
    }
}

/// Sends the log in file `path` on `out` according to `opts`; returns when done or when the receiver
/// is gone. With `follow`, `running` says whether the container still runs (asked about once a
/// second while there is nothing new to read).
pub async fn stream<F, Fut>(
    path: PathBuf,
    opts: LogOptions,
    out: mpsc::Sender<Bytes>,
    mut running: F,
) where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut file = match tokio::fs::File::open(&path).await {
        Ok(f) => f,
        Err(e) => {
            let _ = out
                .send(Bytes::from(format!(
                    "failed to open log file {:?}: {e}",
                    path.display().to_string()
                )))
                .await;
            return;
        }
    };
    let mut fmt = Formatter {
        opts: &opts,
        left: opts.limit_bytes.map(|l| l.max(0) as u64),
    };
    // Tail: find where the last lines start in what is there now.
    let mut pending: Vec<u8> = Vec::new();
    if let Some(n) = opts.tail_lines {
        let mut all = Vec::new();
        if file.read_to_end(&mut all).await.is_err() {
            return;
        }
        pending = all.split_off(tail_start(&all, n.max(0) as u64));
    }
    let mut buf = vec![0u8; 64 * 1024];
    let mut last_state_check = tokio::time::Instant::now();
    loop {
        // Emit every complete line buffered so far.
        while let Some(nl) = pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = pending.drain(..=nl).collect();
            let text = fmt.line(&line[..line.len() - 1]);
            if !text.is_empty() && out.send(Bytes::from(text)).await.is_err() {
                return;
            }
            if fmt.done() {
                return;
            }
        }
        match file.read(&mut buf).await {
            Ok(0) => {
                if !opts.follow {
                    return;
                }
                // Keep following while the container runs; after it stops, what it wrote last is
                // read once more, then the stream ends.
                if last_state_check.elapsed() >= Duration::from_secs(1) {
                    last_state_check = tokio::time::Instant::now();
                    if !running().await {
                        let mut rest = Vec::new();
                        let _ = file.read_to_end(&mut rest).await;
                        pending.extend_from_slice(&rest);
                        while let Some(nl) = pending.iter().position(|&b| b == b'\n') {
                            let line: Vec<u8> = pending.drain(..=nl).collect();
                            let text = fmt.line(&line[..line.len() - 1]);
                            if !text.is_empty() && out.send(Bytes::from(text)).await.is_err() {
                                return;
                            }
                            if fmt.done() {
                                return;
                            }
                        }
                        return;
                    }
                }
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                    _ = out.closed() => return,
                }
                // A truncated file (log reopened) starts over.
                if let (Ok(meta), Ok(pos)) = (file.metadata().await, file.stream_position().await) {
                    if meta.len() < pos {
                        let _ = file.seek(SeekFrom::Start(0)).await;
                        pending.clear();
                    }
                }
            }
            Ok(n) => pending.extend_from_slice(&buf[..n]),
            Err(e) => {
                tracing::debug!(error = %e, path = %path.display(), "reading a container log failed");
                return;
            }
        }
    }
}

/// Whether container `id` is running (upstream `isContainerRunning`).
pub async fn is_running(runtime: &Runtime, id: &str) -> bool {
    runtime
        .container_status(id)
        .await
        .is_ok_and(|s| s.state == api::ContainerState::ContainerRunning as i32)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn q(s: &str) -> Vec<(String, String)> {
        s.split('&')
            .filter(|p| !p.is_empty())
            .map(|p| {
                let (k, v) = p.split_once('=').unwrap_or((p, ""));
                (k.to_string(), v.to_string())
            })
            .collect()
    }

    #[test]
    fn options() {
        let now: jiff::Timestamp = "2024-01-01T00:10:00Z".parse().unwrap();
        let o = parse_options(&q("follow=true&tail=5&timestamps=1&sinceSeconds=60"), now).unwrap();
        assert!(o.follow && o.timestamps && !o.previous);
        assert_eq!(o.tail_lines, Some(5));
        assert_eq!(o.since, Some("2024-01-01T00:09:00Z".parse().unwrap()));
        assert_eq!(
            parse_options(&q("tail=all&tailLines=3"), now)
                .unwrap()
                .tail_lines,
            None
        );
        assert_eq!(
            parse_options(&q("sinceTime=2024-01-01T00:00:00Z"), now)
                .unwrap()
                .since,
            Some("2024-01-01T00:00:00Z".parse().unwrap())
        );
        let cases = [
            ("tailLines=x", 400),
            ("sinceTime=yesterday", 400),
            ("tailLines=-1", 422),
            ("limitBytes=0", 422),
            ("sinceSeconds=0", 422),
            ("sinceSeconds=5&sinceTime=2024-01-01T00:00:00Z", 422),
        ];
        for (query, code) in cases {
            assert_eq!(
                parse_options(&q(query), now).unwrap_err().0,
                code,
                "{query}"
            );
        }
    }

    #[test]
    fn container_choice_follows_upstream() {
        let status = json!({"containerStatuses": [
            {"name": "run", "containerID": "containerd://r2", "state": {"running": {}},
             "lastState": {"terminated": {"containerID": "containerd://r1"}}},
            {"name": "done", "containerID": "containerd://d1", "state": {"terminated": {"containerID": "containerd://d1"}}},
            {"name": "restarting", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
             "lastState": {"terminated": {"containerID": "containerd://c1"}}},
            {"name": "pulling", "state": {"waiting": {"reason": "ImagePullBackOff"}}},
            {"name": "new", "state": {"waiting": {"reason": "ContainerCreating"}}},
            {"name": "blank", "state": {}},
        ], "initContainerStatuses": [
            {"name": "init", "containerID": "containerd://i1", "state": {"terminated": {"containerID": "containerd://i1"}}},
        ]});
        let cases: Vec<(&str, bool, Result<&str, &str>)> = vec![
            ("run", false, Ok("r2")),
            ("run", true, Ok("r1")),
            ("done", false, Ok("d1")),
            ("done", true, Err("previous terminated container \"done\" in pod \"p\" not found")),
            ("restarting", false, Ok("c1")),
            ("init", false, Ok("i1")),
            ("pulling", false, Err("container \"pulling\" in pod \"p\" is waiting to start: trying and failing to pull image")),
            ("new", false, Err("container \"new\" in pod \"p\" is waiting to start: ContainerCreating")),
            ("blank", false, Err("container \"blank\" in pod \"p\" is waiting to start - no logs yet")),
            ("ghost", false, Err("container \"ghost\" in pod \"p\" is not available")),
        ];
        for (name, previous, want) in cases {
            let got = container_for_logs(&status, "p", name, previous);
            assert_eq!(
                got.as_deref().map_err(String::as_str),
                want,
                "{name} previous={previous}"
            );
        }
    }

    #[test]
    fn tail_positions() {
        let data = b"a\nb\nc\n";
        let cases = [(0, 6), (1, 4), (2, 2), (3, 0), (10, 0)];
        for (n, want) in cases {
            assert_eq!(tail_start(data, n), want, "tail {n}");
        }
        assert_eq!(
            tail_start(b"a\nb", 1),
            2,
            "an unterminated last line counts"
        );
        assert_eq!(tail_start(b"", 3), 0);
    }

    #[test]
    fn formatting_applies_since_timestamps_and_limits() {
        let opts = LogOptions {
            timestamps: true,
            since: Some("2024-01-01T00:00:01Z".parse().unwrap()),
            limit_bytes: Some(40),
            ..Default::default()
        };
        let mut f = Formatter {
            opts: &opts,
            left: Some(40),
        };
        assert!(f
            .line(b"2024-01-01T00:00:00.5Z stdout F too early")
            .is_empty());
        assert_eq!(
            f.line(b"2024-01-01T00:00:02.25Z stdout P part"),
            b"2024-01-01T00:00:02.250000000Z part"
        );
        // 35 bytes so far; the next line is cut at the limit.
        assert_eq!(f.line(b"2024-01-01T00:00:03Z stderr F more"), b"2024-");
        assert!(f.done());
        assert!(f.line(b"not a cri line").is_empty());
    }

    async fn collect(path: PathBuf, opts: LogOptions, running: bool) -> Vec<u8> {
        let (tx, mut rx) = mpsc::channel(16);
        let reader = tokio::spawn(stream(path, opts, tx, move || async move { running }));
        let mut out = Vec::new();
        while let Some(b) = rx.recv().await {
            out.extend_from_slice(&b);
        }
        reader.await.unwrap();
        out
    }

    #[tokio::test]
    async fn reads_a_cri_log_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(
            &path,
            "2024-01-01T00:00:00Z stdout F one\n2024-01-01T00:00:01Z stderr F two\n2024-01-01T00:00:02Z stdout P thr\n2024-01-01T00:00:02Z stdout F ee\n",
        )
        .unwrap();
        let tail = LogOptions {
            tail_lines: Some(2),
            ..Default::default()
        };
        assert_eq!(collect(path.clone(), tail, false).await, b"three\n");
        assert_eq!(
            collect(path.clone(), LogOptions::default(), false).await,
            b"one\ntwo\nthree\n"
        );
        let limited = LogOptions {
            limit_bytes: Some(6),
            ..Default::default()
        };
        assert_eq!(collect(path.clone(), limited, false).await, b"one\ntw");
        let missing = collect(dir.path().join("gone.log"), LogOptions::default(), false).await;
        assert!(String::from_utf8_lossy(&missing).starts_with("failed to open log file"));
    }

    #[tokio::test]
    async fn follow_reads_what_is_appended_until_the_container_stops() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("0.log");
        std::fs::write(&path, "2024-01-01T00:00:00Z stdout F first\n").unwrap();
        let (tx, mut rx) = mpsc::channel(16);
        let running = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let flag = running.clone();
        let opts = LogOptions {
            follow: true,
            ..Default::default()
        };
        let reader = tokio::spawn(stream(path.clone(), opts, tx, move || {
            let flag = flag.clone();
            async move { flag.load(std::sync::atomic::Ordering::SeqCst) }
        }));
        assert_eq!(rx.recv().await.unwrap(), Bytes::from_static(b"first\n"));
        // Written in two pieces: the line is sent once it is complete.
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&path)
            .unwrap();
        f.write_all(b"2024-01-01T00:00:01Z stdout F sec").unwrap();
        f.flush().unwrap();
        f.write_all(b"ond\n").unwrap();
        f.flush().unwrap();
        assert_eq!(rx.recv().await.unwrap(), Bytes::from_static(b"second\n"));
        // The container stops after a last line: it is read, then the stream ends.
        f.write_all(b"2024-01-01T00:00:02Z stdout F last\n")
            .unwrap();
        running.store(false, std::sync::atomic::Ordering::SeqCst);
        let mut rest = Vec::new();
        while let Some(b) = rx.recv().await {
            rest.extend_from_slice(&b);
        }
        assert_eq!(rest, b"last\n");
        reader.await.unwrap();
    }
}
