//! The log backend (upstream `plugin/pkg/audit/log` with `--audit-log-path`, `--audit-log-maxsize`,
//! `--audit-log-maxbackup`): one JSON event per line, in a file (rotated as upstream's lumberjack
//! writer does) or on stdout (`-`).
//!
//! Requests never wait for the disk: events go through a bounded queue to one writer thread, which
//! serializes them (bodies included) and writes. When the queue is full the event is dropped and
//! counted (`apiserver_audit_error_total{plugin="log"}`), where upstream's default `blocking` mode
//! would hold the request; its `batch` and `blocking-strict` modes are not built either.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;

use super::event::Event;
use super::truncate::TruncateConfig;

/// Events waiting for the writer (upstream's batch buffer holds as many).
const QUEUE_EVENTS: usize = 10_000;
/// Body bytes waiting for the writer. Past it, new events keep their metadata but lose their bodies
/// (annotated with [`BODIES_DROPPED`]), so a burst of large RequestResponse events cannot hold
/// gigabytes.
const QUEUE_BYTES: usize = 64 << 20;
/// The annotation of an event whose bodies were left out because of [`QUEUE_BYTES`].
pub const BODIES_DROPPED: &str = "audit.rkube.io/bodies-dropped";
/// Written events between flushes when the queue never empties.
const FLUSH_EVERY: usize = 1024;
/// lumberjack's size limit when `--audit-log-maxsize` is 0.
pub const DEFAULT_MAX_BYTES: u64 = 100 << 20;

#[derive(Default)]
struct Stats {
    events: AtomicU64,
    errors: AtomicU64,
    queued_bytes: AtomicUsize,
}

/// Where events go; cheap to share (the request path only calls [`LogBackend::process`]).
pub struct LogBackend {
    tx: SyncSender<Event>,
    stats: Arc<Stats>,
}

/// The file side of the writer.
struct Output {
    sink: Sink,
    size: u64,
}

enum Sink {
    Stdout(std::io::Stdout),
    File {
        path: PathBuf,
        file: BufWriter<File>,
        max_bytes: u64,
        /// Old files kept (0: all, as upstream).
        max_backups: usize,
    },
}

impl LogBackend {
    /// Opens (creating, mode 0600, directories too) the log at `path` (`-`: stdout) and starts the
    /// writer thread. Files over `max_bytes` are renamed `<name>-<UTC time><ext>` and a new one is
    /// begun; the oldest of those past `max_backups` (0: none) are deleted.
    pub fn start(path: &Path, max_bytes: u64, max_backups: usize) -> Result<LogBackend, String> {
        Self::start_with(path, max_bytes, max_backups, None)
    }

    /// As [`LogBackend::start`], events over `truncate`'s size trimmed or dropped (see
    /// [`super::truncate`]).
    pub fn start_with(
        path: &Path,
        max_bytes: u64,
        max_backups: usize,
        truncate: Option<TruncateConfig>,
    ) -> Result<LogBackend, String> {
        let sink = if path == Path::new("-") {
            Sink::Stdout(std::io::stdout())
        } else {
            Sink::File {
                path: path.to_path_buf(),
                file: BufWriter::new(open(path)?),
                max_bytes,
                max_backups,
            }
        };
        let size = match &sink {
            Sink::File { file, .. } => file.get_ref().metadata().map_or(0, |m| m.len()),
            Sink::Stdout(_) => 0,
        };
        let (tx, rx) = sync_channel(QUEUE_EVENTS);
        let stats = Arc::new(Stats::default());
        let writer_stats = stats.clone();
        std::thread::Builder::new()
            .name("audit-log".into())
            .spawn(move || run(rx, Output { sink, size }, &writer_stats, truncate))
            .map_err(|e| format!("cannot start the audit log writer: {e}"))?;
        Ok(LogBackend { tx, stats })
    }

    /// Queues an event; never blocks.
    pub fn process(&self, mut event: Event) {
        let held = event.bodies.held_bytes();
        if held > 0 {
            let before = self.stats.queued_bytes.fetch_add(held, Ordering::Relaxed);
            if before + held > QUEUE_BYTES {
                self.stats.queued_bytes.fetch_sub(held, Ordering::Relaxed);
                event.bodies.request = None;
                event.bodies.response = None;
                event.annotations.insert(
                    BODIES_DROPPED.into(),
                    "the audit log queue was over its byte budget".into(),
                );
            }
        }
        let held = event.bodies.held_bytes();
        match self.tx.try_send(event) {
            Ok(()) => {
                self.stats.events.fetch_add(1, Ordering::Relaxed);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.stats.queued_bytes.fetch_sub(held, Ordering::Relaxed);
                let n = self.stats.errors.fetch_add(1, Ordering::Relaxed) + 1;
                if n == 1 || n.is_multiple_of(1000) {
                    tracing::warn!(
                        dropped = n,
                        "the audit log queue is full: audit events are being dropped"
                    );
                }
            }
        }
    }

    /// A backend whose events stay in memory, for tests.
    #[cfg(test)]
    pub(crate) fn in_memory(capacity: usize) -> (LogBackend, Receiver<Event>) {
        let (tx, rx) = sync_channel(capacity);
        let backend = LogBackend {
            tx,
            stats: Arc::default(),
        };
        (backend, rx)
    }

    /// Events dropped or not written.
    pub fn errors(&self) -> u64 {
        self.stats.errors.load(Ordering::Relaxed)
    }
}

fn open(path: &Path) -> Result<File, String> {
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| format!("--audit-log-path {}: {e}", path.display()))?;
    }
    OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| format!("--audit-log-path {}: {e}", path.display()))
}

/// The writer thread: serializes and writes until every sender is gone, flushing whenever the
/// queue runs empty, so the file is current within one event of the last request.
fn run(rx: Receiver<Event>, mut out: Output, stats: &Stats, truncate: Option<TruncateConfig>) {
    while let Ok(first) = rx.recv() {
        let mut written = 0;
        let mut next = Some(first);
        while let Some(event) = next.take() {
            let held = event.bodies.held_bytes();
            // Decoding bodies is the one complex step here: should it ever panic, that event is
            // lost (counted), not the writer and every event after it.
            let line = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                super::truncate::to_json_line(event, truncate.as_ref())
            }));
            stats.queued_bytes.fetch_sub(held, Ordering::Relaxed);
            let written_ok = match line {
                Ok(Ok(line)) => out.write(&line),
                Ok(Err(too_large)) => Err(std::io::Error::other(too_large)),
                Err(_) => Err(std::io::Error::other(
                    "an audit event could not be serialized",
                )),
            };
            if let Err(e) = written_ok {
                let n = stats.errors.fetch_add(1, Ordering::Relaxed) + 1;
                if n == 1 || n.is_multiple_of(1000) {
                    tracing::warn!(error = %e, "cannot write the audit log");
                }
            }
            written += 1;
            if written < FLUSH_EVERY {
                next = rx.try_recv().ok();
            }
        }
        if let Err(e) = out.flush() {
            tracing::warn!(error = %e, "cannot flush the audit log");
        }
    }
    let _ = out.flush();
}

impl Output {
    fn write(&mut self, line: &[u8]) -> std::io::Result<()> {
        let len = line.len() as u64;
        if let Sink::File { max_bytes, .. } = &self.sink {
            if self.size > 0 && self.size + len > *max_bytes {
                self.rotate()?;
            }
        }
        match &mut self.sink {
            Sink::Stdout(out) => out.write_all(line)?,
            Sink::File { file, .. } => file.write_all(line)?,
        }
        self.size += len;
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        match &mut self.sink {
            Sink::Stdout(out) => out.flush(),
            Sink::File { file, .. } => file.flush(),
        }
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        let Sink::File {
            path,
            file,
            max_backups,
            ..
        } = &mut self.sink
        else {
            return Ok(());
        };
        file.flush()?;
        let stamp = chrono::Utc::now()
            .format("%Y-%m-%dT%H-%M-%S%.3f")
            .to_string();
        let (dir, prefix, ext) = backup_parts(path);
        std::fs::rename(&*path, dir.join(format!("{prefix}-{stamp}{ext}")))?;
        *file = BufWriter::new(open(path).map_err(std::io::Error::other)?);
        self.size = 0;
        if *max_backups > 0 {
            prune(&dir, &prefix, &ext, *max_backups);
        }
        Ok(())
    }
}

/// The directory, the file name without its extension, and the extension (with its dot).
fn backup_parts(path: &Path) -> (PathBuf, String, String) {
    let dir = path
        .parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let ext = path
        .extension()
        .map(|e| format!(".{}", e.to_string_lossy()))
        .unwrap_or_default();
    let prefix = name.strip_suffix(ext.as_str()).unwrap_or(&name).to_string();
    (dir, prefix, ext)
}

/// Deletes the oldest backups past `keep` (their names sort by time).
fn prune(dir: &Path, prefix: &str, ext: &str, keep: usize) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    let start = format!("{prefix}-");
    let mut backups: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| {
            n.strip_prefix(&start)
                .and_then(|rest| rest.strip_suffix(ext))
                .is_some_and(|stamp| {
                    chrono::NaiveDateTime::parse_from_str(stamp, "%Y-%m-%dT%H-%M-%S%.3f").is_ok()
                })
        })
        .collect();
    backups.sort_unstable_by(|a, b| b.cmp(a));
    for old in backups.iter().skip(keep) {
        let _ = std::fs::remove_file(dir.join(old));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::event::{Bodies, User};
    use crate::audit::policy::{Level, Stage};

    fn event(i: usize) -> Event {
        let now = chrono::Utc::now();
        Event {
            level: Level::Metadata,
            audit_id: format!("id-{i:02}"),
            stage: Stage::ResponseComplete,
            request_uri: "/api".into(),
            verb: "get".into(),
            user: Some(User {
                username: "alice".into(),
                ..Default::default()
            }),
            impersonated_user: None,
            source_ips: vec![],
            user_agent: String::new(),
            object_ref: None,
            response_status: None,
            request_received: now,
            stage_time: now,
            annotations: Default::default(),
            bodies: Bodies::default(),
        }
    }

    fn lines_of(path: &Path) -> Vec<serde_json::Value> {
        std::fs::read_to_string(path)
            .unwrap_or_default()
            .lines()
            // A line the writer is still in the middle of is not one yet.
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Waits until the file has `n` lines or its last event is `last`.
    fn wait_for(path: &Path, n: usize, last: &str) -> Vec<serde_json::Value> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let lines = lines_of(path);
            let done = lines.len() >= n || lines.last().is_some_and(|l| l["auditID"] == last);
            if done || std::time::Instant::now() > deadline {
                return lines;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }

    #[test]
    fn writes_one_event_per_line_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sub/audit.log");
        let log = LogBackend::start(&path, DEFAULT_MAX_BYTES, 0).unwrap();
        for i in 0..50 {
            log.process(event(i));
        }
        let lines = wait_for(&path, 50, "id-49");
        assert_eq!(lines.len(), 50);
        assert_eq!(lines[49]["auditID"], "id-49");
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
        assert_eq!(log.stats.events.load(Ordering::Relaxed), 50);
    }

    #[test]
    fn rotates_past_the_size_and_keeps_max_backups() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("audit.log");
        let one = event(0).to_json_line().len() as u64;
        // Three events per file.
        let log = LogBackend::start(&path, one * 3 + 1, 2).unwrap();
        for round in 0..5 {
            for i in 0..3 {
                log.process(event(round * 3 + i));
            }
            // Backups are named by the millisecond: give each rotation its own.
            let last = format!("id-{:02}", round * 3 + 2);
            let lines = wait_for(&path, usize::MAX, &last);
            assert_eq!(lines.len(), 3, "{lines:?}");
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        let mut names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names.len(), 3, "{names:?}");
        assert!(names[0].starts_with("audit-") && names[0].ends_with(".log"));
        // The newest backup holds the events just before the last rotation.
        assert_eq!(lines_of(&dir.path().join(&names[1]))[0]["auditID"], "id-09");
    }

    #[test]
    fn a_full_queue_drops_and_counts_instead_of_blocking() {
        let (tx, _rx) = sync_channel(1);
        let log = LogBackend {
            tx,
            stats: Arc::default(),
        };
        let started = std::time::Instant::now();
        for i in 0..5 {
            log.process(event(i));
        }
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        assert_eq!(log.stats.events.load(Ordering::Relaxed), 1);
        assert_eq!(log.errors(), 4);
    }

    #[test]
    fn bodies_past_the_byte_budget_are_left_out() {
        let (tx, rx) = sync_channel(4);
        let log = LogBackend {
            tx,
            stats: Arc::default(),
        };
        let big = bytes::Bytes::from(vec![b' '; QUEUE_BYTES / 2 + 1]);
        for i in 0..2 {
            let mut e = event(i);
            e.bodies.request = Some(big.clone());
            log.process(e);
        }
        let first = rx.recv().unwrap();
        let second = rx.recv().unwrap();
        assert!(first.bodies.request.is_some());
        assert!(second.bodies.request.is_none());
        assert!(second.annotations.contains_key(BODIES_DROPPED));
    }
}
