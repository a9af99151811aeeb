//! What issue 22's failure tests (`ha_failover.rs`, `ha_failures.rs`) share: `rkube` processes whose
//! stderr is tagged and read line by line, the pki shared between API servers, waits with a
//! deadline, and the client load (a ConfigMap writer and a watch resumed from its last
//! resourceVersion) with its end-of-run checks: every acknowledged write reads back, and the watch
//! saw every one in strictly increasing resourceVersion order.

#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};

/// The bound on every wait of these tests (a loaded CI machine runs many tests at once).
pub const DEADLINE: Duration = Duration::from_secs(60);

/// A child process killed when dropped.
pub struct Proc(pub Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Proc {
    /// Sends `sig` (as `kill` spells it: `-STOP`, `-TERM`, ...).
    pub fn signal(&self, sig: &str) {
        let status = Command::new("kill")
            .args([sig, &self.0.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {sig} {}", self.0.id());
    }
}

/// `rkube <args>` with `RUST_LOG=<log>`, stderr piped for [`spawn`].
pub fn rkube_cmd<S: AsRef<std::ffi::OsStr>>(args: &[S], log: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rkube"));
    cmd.args(args)
        .env("RUST_LOG", log)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Starts `cmd` with its stderr tagged `name` on the test's, each line also given to `on_line`
/// (with the time it was read). With `ready`, waits (up to [`DEADLINE`]) for a line starting with it
/// and returns the rest of that line.
pub fn spawn(
    name: &str,
    mut cmd: Command,
    ready: Option<&'static str>,
    on_line: impl Fn(&str, Instant) + Send + 'static,
) -> (Proc, String) {
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("start {name}: {e}"));
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    let tag = name.to_string();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            on_line(&line, Instant::now());
            if let Some(rest) = ready.and_then(|r| line.strip_prefix(r)) {
                let _ = tx.send(rest.to_string());
            }
            eprintln!("[{tag}] {line}");
        }
    });
    let mut proc = Proc(child);
    let line = match ready {
        Some(_) => rx.recv_timeout(DEADLINE).unwrap_or_else(|_| {
            let status = proc.0.try_wait();
            panic!("{name} did not start within {DEADLINE:?} ({status:?})")
        }),
        None => String::new(),
    };
    (proc, line)
}

/// Copies the first server's CA, keys and admin credentials (kubeadm's shared certificates).
pub fn share_pki(from: &Path, to: &Path) {
    let (src, dst) = (from.join("pki"), to.join("pki"));
    std::fs::create_dir_all(&dst).expect("pki dir");
    for entry in std::fs::read_dir(&src).expect("read pki") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("name").to_owned();
        std::fs::copy(&path, dst.join(name)).expect("copy pki file");
    }
}

/// A free TCP port on 127.0.0.1 (servers bind it on 127.0.0.1-3).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// Polls `check` every 100 ms until it returns `Some`, failing after [`DEADLINE`].
pub async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn rv(meta: &ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("numeric resourceVersion")
}

pub fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// Acknowledged writes (name, resourceVersion, when) and failures.
#[derive(Default)]
pub struct Writes {
    pub acked: Vec<(String, u64, Instant)>,
    pub failures: usize,
}

impl Writes {
    /// How long after `at` the first write was acknowledged, if one was.
    pub fn first_after(&self, at: Instant) -> Option<Duration> {
        self.acked
            .iter()
            .rev()
            .take_while(|(_, _, t)| *t > at)
            .last()
            .map(|(_, _, t)| t.duration_since(at))
    }

    /// The longest time without an acknowledged write between `from` and `to`.
    pub fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let mut last = from;
        let mut gap = Duration::ZERO;
        for (_, _, t) in self.acked.iter().filter(|(_, _, t)| *t > from && *t <= to) {
            gap = gap.max(t.duration_since(last));
            last = *t;
        }
        gap.max(to.saturating_duration_since(last))
    }
}

/// Creates `load-<i>` and patches it, over and over, until `stop`.
async fn writer(api: Api<ConfigMap>, writes: Arc<Mutex<Writes>>, stop: Arc<AtomicBool>) {
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let name = format!("load-{i}");
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name}, "data": {"n": "0"}
        }))
        .expect("configmap");
        let ok = match api.create(&PostParams::default(), &cm).await {
            Ok(cm) => {
                let at = Instant::now();
                let mut w = writes.lock().unwrap();
                w.acked.push((name.clone(), rv(&cm.metadata), at));
                true
            }
            Err(_) => {
                writes.lock().unwrap().failures += 1;
                false
            }
        };
        if ok {
            let patch = serde_json::json!({"data": {"n": "1"}});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(cm) => {
                    let at = Instant::now();
                    let mut w = writes.lock().unwrap();
                    w.acked.push((name.clone(), rv(&cm.metadata), at));
                }
                Err(_) => writes.lock().unwrap().failures += 1,
            }
        }
        tokio::time::sleep(Duration::from_millis(if ok { 10 } else { 50 })).await;
    }
}

/// Watches `api` from `from`, resuming from the last resourceVersion whenever the stream ends (its
/// server died), until `stop`; records every object it sees and returns how often it resumed. A
/// 410 (the resume point is gone) is a missed event: it panics.
pub async fn watch_all<K>(
    api: Api<K>,
    from: String,
    seen: Arc<Mutex<Vec<K>>>,
    stop: Arc<AtomicBool>,
) -> usize
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut version = from;
    let mut resumes = 0;
    let params = WatchParams::default().timeout(30);
    while !stop.load(Ordering::Relaxed) {
        let stream = match api.watch(&params, &version).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("watch from {version}: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                resumes += 1;
                continue;
            }
        };
        futures::pin_mut!(stream);
        loop {
            let next = tokio::select! {
                n = stream.next() => n,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    if stop.load(Ordering::Relaxed) { break } else { continue }
                }
            };
            match next {
                Some(Ok(
                    WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o),
                )) => {
                    version = o.meta().resource_version.clone().unwrap_or_default();
                    seen.lock().unwrap().push(o);
                }
                Some(Ok(WatchEvent::Bookmark(b))) => version = b.metadata.resource_version,
                Some(Ok(WatchEvent::Error(e))) => {
                    assert_ne!(e.code, 410, "the watch's resume point is gone: {e:?}");
                    eprintln!("watch error event: {e:?}");
                    break;
                }
                Some(Err(e)) => {
                    eprintln!("watch stream from {version}: {e}");
                    break;
                }
                None => break,
            }
        }
        resumes += 1;
    }
    resumes
}

/// The client load: a writer creating and patching ConfigMaps back to back and a watch of them
/// resumed from its last resourceVersion, both through `api` (a balancer's client).
pub struct Load {
    api: Api<ConfigMap>,
    pub writes: Arc<Mutex<Writes>>,
    seen: Arc<Mutex<Vec<ConfigMap>>>,
    stop_writes: Arc<AtomicBool>,
    stop_watch: Arc<AtomicBool>,
    writer: tokio::task::JoinHandle<()>,
    watcher: tokio::task::JoinHandle<usize>,
}

impl Load {
    /// Starts the watch from a fresh list's resourceVersion, then the writer.
    pub async fn start(api: Api<ConfigMap>) -> Load {
        let from = api
            .list(&ListParams::default())
            .await
            .expect("list")
            .metadata
            .resource_version
            .expect("list resourceVersion");
        let writes = Arc::new(Mutex::new(Writes::default()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let stop_writes = Arc::new(AtomicBool::new(false));
        let stop_watch = Arc::new(AtomicBool::new(false));
        let watcher = tokio::spawn(watch_all(
            api.clone(),
            from,
            seen.clone(),
            stop_watch.clone(),
        ));
        let writer = tokio::spawn(writer(api.clone(), writes.clone(), stop_writes.clone()));
        Load {
            api,
            writes,
            seen,
            stop_writes,
            stop_watch,
            writer,
            watcher,
        }
    }

    pub fn acked(&self) -> usize {
        self.writes.lock().unwrap().acked.len()
    }

    /// Waits until `n` more writes are acknowledged.
    pub async fn more_writes(&self, n: usize) {
        let target = self.acked() + n;
        wait_for(&format!("{n} more writes"), || {
            let done = self.acked() >= target;
            async move { done.then_some(()) }
        })
        .await
    }

    /// How long after `at` the first write was acknowledged (waits for one), at most `bound`.
    pub async fn first_write_after(&self, at: Instant, bound: Duration) -> Duration {
        let d = wait_for("a write acknowledged after the failure", || {
            let d = self.writes.lock().unwrap().first_after(at);
            async move { d }
        })
        .await;
        assert!(d < bound, "writes served again after {d:?}");
        d
    }

    /// The longest time without an acknowledged write from `from` to now.
    pub fn longest_gap_since(&self, from: Instant) -> Duration {
        self.writes
            .lock()
            .unwrap()
            .longest_gap(from, Instant::now())
    }

    /// Stops the load and checks it: the watch catches up with the last write, its resourceVersions
    /// strictly increase, it saw every acknowledged write, and every acknowledged write reads back
    /// (its version or a later one). Returns a summary line.
    pub async fn finish(self) -> String {
        self.stop_writes.store(true, Ordering::Relaxed);
        self.writer.await.expect("writer");
        let (acked, failures) = {
            let w = self.writes.lock().unwrap();
            (w.acked.clone(), w.failures)
        };
        let last = acked.iter().map(|(_, v, _)| *v).max().expect("writes");
        let seen = self.seen.clone();
        wait_for("the watch caught up with the last write", || {
            let done = seen.lock().unwrap().iter().any(|c| rv(&c.metadata) >= last);
            async move { done.then_some(()) }
        })
        .await;
        self.stop_watch.store(true, Ordering::Relaxed);
        let resumes = self.watcher.await.expect("watcher");
        let seen: Vec<(String, u64)> = seen
            .lock()
            .unwrap()
            .iter()
            .map(|c| (c.metadata.name.clone().unwrap_or_default(), rv(&c.metadata)))
            .collect();
        for pair in seen.windows(2) {
            assert!(pair[0].1 < pair[1].1, "watch order: {pair:?}");
        }
        let watched: HashMap<u64, &str> = seen.iter().map(|(n, v)| (*v, n.as_str())).collect();
        for (name, v, _) in &acked {
            assert_eq!(
                watched.get(v),
                Some(&name.as_str()),
                "write {name}@{v} watched"
            );
        }
        let mut latest: HashMap<&str, u64> = HashMap::new();
        for (name, v, _) in &acked {
            let e = latest.entry(name.as_str()).or_default();
            *e = (*e).max(*v);
        }
        let listed = self.api.list(&ListParams::default()).await.expect("list");
        let stored: HashMap<String, u64> = listed
            .items
            .iter()
            .map(|c| (c.metadata.name.clone().unwrap_or_default(), rv(&c.metadata)))
            .collect();
        for (name, v) in &latest {
            let got = stored.get(*name).copied();
            assert!(
                got.is_some_and(|g| g >= *v),
                "{name}@{v} reads back: {got:?}"
            );
        }
        format!(
            "{} writes acknowledged, {failures} failed, {} events watched, {resumes} watch resumes",
            acked.len(),
            seen.len()
        )
    }
}
