//! What `rkube bench density` measures while its workload runs: latency of the calls it makes and of
//! probes at a steady rate (GET, LIST in a namespace, paged LIST of the cluster, ConfigMap writes
//! and their watch events), pod startup and binding from a pod watch, and the server's RSS and CPU.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use kube::Api;
use rand::Rng;
use serde_json::json;

use super::report::{Kind, Sample, Usage};

/// Label every pod (and Deployment) of the workload carries.
pub const LABEL: &str = "density-bench";
/// Namespace of the write/watch probe.
pub const PROBE_NAMESPACE: &str = "density-probe";

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Collects samples against one clock.
pub struct Recorder {
    start: Instant,
    samples: Mutex<Vec<(Kind, Sample)>>,
    errors: Mutex<HashMap<Kind, usize>>,
}

impl Recorder {
    pub fn new() -> Arc<Self> {
        Arc::new(Recorder {
            start: Instant::now(),
            samples: Mutex::default(),
            errors: Mutex::default(),
        })
    }

    /// Seconds since the run started.
    pub fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    pub fn at(&self, instant: Instant) -> f64 {
        instant.saturating_duration_since(self.start).as_secs_f64()
    }

    pub fn record(&self, kind: Kind, at: f64, ms: f64) {
        lock(&self.samples).push((kind, Sample { at, ms }));
    }

    /// Times `call`; its latency is recorded whether it succeeds or not (a refused call is a
    /// served call), and failures are counted.
    pub async fn time<T, E>(
        &self,
        kind: Kind,
        call: impl std::future::Future<Output = Result<T, E>>,
    ) -> Result<T, E> {
        let started = Instant::now();
        let result = call.await;
        self.record(
            kind,
            self.at(started),
            started.elapsed().as_secs_f64() * 1e3,
        );
        if result.is_err() {
            *lock(&self.errors).entry(kind).or_default() += 1;
        }
        result
    }

    pub fn take(&self) -> (Vec<(Kind, Sample)>, HashMap<Kind, usize>) {
        (
            std::mem::take(&mut lock(&self.samples)),
            lock(&self.errors).clone(),
        )
    }
}

/// What the pod watch saw.
#[derive(Default)]
pub struct PodsSeen {
    /// When each pod (by UID) was first seen, and whether it has been counted as started.
    first_seen: HashMap<String, (Instant, bool)>,
    /// When each pod was first seen bound to a node.
    pub bound_at: Vec<Instant>,
    bound: std::collections::HashSet<String>,
    /// Pods known now: (uid, namespace, name), for the GET probe; `index` finds a UID's slot.
    pods: Vec<(String, String, String)>,
    index: HashMap<String, usize>,
}

impl PodsSeen {
    fn apply(&mut self, pod: &Pod, recorder: &Recorder) {
        let Some(uid) = pod.metadata.uid.clone() else {
            return;
        };
        let now = Instant::now();
        if !self.index.contains_key(&uid) {
            self.index.insert(uid.clone(), self.pods.len());
            self.pods.push((
                uid.clone(),
                pod.metadata.namespace.clone().unwrap_or_default(),
                pod.metadata.name.clone().unwrap_or_default(),
            ));
        }
        let (seen, started) = self.first_seen.entry(uid.clone()).or_insert((now, false));
        if pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
            && self.bound.insert(uid.clone())
        {
            self.bound_at.push(now);
        }
        let status = pod.status.as_ref();
        let running = status.and_then(|s| s.phase.as_deref()) == Some("Running")
            && status
                .and_then(|s| s.container_statuses.as_ref())
                .is_some_and(|cs| !cs.is_empty() && cs.iter().all(|c| c.started == Some(true)));
        if running && !*started {
            *started = true;
            recorder.record(
                Kind::PodStartup,
                recorder.at(*seen),
                now.duration_since(*seen).as_secs_f64() * 1e3,
            );
        }
    }

    fn delete(&mut self, pod: &Pod) {
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return;
        };
        self.first_seen.remove(uid);
        self.bound.remove(uid);
        if let Some(i) = self.index.remove(uid) {
            self.pods.swap_remove(i);
            // The last pod took slot i.
            if let Some((moved, _, _)) = self.pods.get(i) {
                self.index.insert(moved.clone(), i);
            }
        }
    }

    /// A pod known now, picked at random: (namespace, name).
    pub fn random_pod(&self) -> Option<(String, String)> {
        if self.pods.is_empty() {
            return None;
        }
        let (_, ns, name) = &self.pods[rand::rng().random_range(0..self.pods.len())];
        Some((ns.clone(), name.clone()))
    }
}

/// Watches the workload's pods across the cluster.
pub fn watch_pods(
    client: kube::Client,
    recorder: Arc<Recorder>,
    seen: Arc<Mutex<PodsSeen>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let api: Api<Pod> = Api::all(client);
        let mut events = watcher(
            api,
            watcher::Config::default().labels(&format!("{LABEL}=1")),
        )
        .boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                    lock(&seen).apply(&p, &recorder)
                }
                Ok(watcher::Event::Delete(p)) => lock(&seen).delete(&p),
                Ok(_) => {}
                Err(e) => tracing::debug!(error = %e, "density: pod watch"),
            }
        }
    })
}

/// The steady probes; they stop when the returned handles are aborted.
pub fn start_probes(
    client: &kube::Client,
    recorder: &Arc<Recorder>,
    seen: &Arc<Mutex<PodsSeen>>,
    namespaces: Vec<String>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
    // GET of a random pod of the workload, ten a second.
    {
        let (client, recorder, seen) = (client.clone(), recorder.clone(), seen.clone());
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            loop {
                tick.tick().await;
                let target = lock(&seen).random_pod();
                let Some((ns, name)) = target else { continue };
                let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
                let _ = recorder.time(Kind::Get, api.get_opt(&name)).await;
            }
        }));
    }
    // LIST of the pods of a random namespace, once a second.
    {
        let (client, recorder) = (client.clone(), recorder.clone());
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                if namespaces.is_empty() {
                    continue;
                }
                let ns = &namespaces[rand::rng().random_range(0..namespaces.len())];
                let api: Api<Pod> = Api::namespaced(client.clone(), ns);
                let _ = recorder
                    .time(Kind::ListNamespace, api.list(&Default::default()))
                    .await;
            }
        }));
    }
    // Every pod of the cluster in pages of 500, every 10 s; the bodies are not decoded into Pods,
    // so the bench's own CPU stays with the server.
    {
        let (client, recorder) = (client.clone(), recorder.clone());
        tasks.push(tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(10));
            loop {
                tick.tick().await;
                let mut token = String::new();
                for _page in 0..10_000 {
                    let uri = format!("/api/v1/pods?limit=500&continue={token}");
                    let Ok(request) = http::Request::get(uri).body(Vec::new()) else {
                        break;
                    };
                    let Ok(text) = recorder
                        .time(Kind::ListCluster, client.request_text(request))
                        .await
                    else {
                        break;
                    };
                    token = continue_token(&text).unwrap_or_default();
                    if token.is_empty() {
                        break;
                    }
                }
            }
        }));
    }
    // A ConfigMap updated five times a second, and the delay until each update's watch event.
    {
        let (client, recorder) = (client.clone(), recorder.clone());
        tasks.push(tokio::spawn(write_and_watch(client, recorder)));
    }
    tasks
}

/// The `metadata.continue` of a list body, without decoding its items.
fn continue_token(body: &str) -> Option<String> {
    #[derive(serde::Deserialize)]
    struct ListMeta {
        #[serde(rename = "continue")]
        continue_: Option<String>,
    }
    #[derive(serde::Deserialize)]
    struct List {
        metadata: ListMeta,
    }
    serde_json::from_str::<List>(body).ok()?.metadata.continue_
}

async fn write_and_watch(client: kube::Client, recorder: Arc<Recorder>) {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), PROBE_NAMESPACE);
    let cm: ConfigMap = match serde_json::from_value(json!({"metadata": {"name": "probe"}})) {
        Ok(cm) => cm,
        Err(_) => return,
    };
    let _ = recorder
        .time(Kind::Mutating, api.create(&PostParams::default(), &cm))
        .await;
    // seq -> when its write was acknowledged; seq -> when its event came (if before the ack).
    let acked: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let early: Arc<Mutex<HashMap<u64, Instant>>> = Arc::default();
    let watch = {
        let (api, acked, early, recorder) =
            (api.clone(), acked.clone(), early.clone(), recorder.clone());
        tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default()).boxed();
            while let Some(event) = events.next().await {
                let Ok(watcher::Event::Apply(cm)) = event else {
                    continue;
                };
                let Some(seq) = cm
                    .data
                    .as_ref()
                    .and_then(|d| d.get("seq"))
                    .and_then(|s| s.parse::<u64>().ok())
                else {
                    continue;
                };
                let now = Instant::now();
                match lock(&acked).remove(&seq) {
                    Some(ack) => recorder.record(
                        Kind::WatchDelay,
                        recorder.at(ack),
                        now.duration_since(ack).as_secs_f64() * 1e3,
                    ),
                    None => {
                        lock(&early).insert(seq, now);
                    }
                }
            }
        })
    };
    let _stop_watch = tokio_util::task::AbortOnDropHandle::new(watch);
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    for seq in 1u64.. {
        tick.tick().await;
        let patch = json!({"data": {"seq": seq.to_string()}});
        let wrote = recorder
            .time(
                Kind::Mutating,
                api.patch("probe", &PatchParams::default(), &Patch::Merge(&patch)),
            )
            .await;
        let ack = Instant::now();
        if wrote.is_ok() {
            // An event that beat the response counts as no delay.
            if lock(&early).remove(&seq).is_some() {
                recorder.record(Kind::WatchDelay, recorder.at(ack), 0.0);
            } else {
                lock(&acked).insert(seq, ack);
            }
        }
        // Writes whose event never came (a re-listing watch skips them) are forgotten after a
        // minute, so the maps stay small.
        let old = ack.checked_sub(Duration::from_secs(60));
        if let Some(old) = old {
            lock(&acked).retain(|_, t| *t > old);
            lock(&early).retain(|_, t| *t > old);
        }
    }
}

/// Samples a process's RSS and CPU once a second.
pub fn sample_usage(
    pid: u32,
    recorder: Arc<Recorder>,
    into: Arc<Mutex<Vec<Usage>>>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut last: Option<(f64, u64)> = None;
        loop {
            tick.tick().await;
            let Ok(rss) = super::super::proc_status_mib(&pid.to_string(), "VmRSS") else {
                return;
            };
            let Some(ticks) = cpu_ticks(pid) else { return };
            let at = recorder.now();
            let cpu_percent = match last {
                Some((t, before)) if at > t => {
                    (ticks.saturating_sub(before) as f64 / CLOCK_TICKS) / (at - t) * 100.0
                }
                _ => 0.0,
            };
            last = Some((at, ticks));
            lock(&into).push(Usage {
                at,
                rss_mib: rss,
                cpu_percent,
            });
        }
    })
}

/// `USER_HZ`: Linux reports process times in hundredths of a second on every architecture rkube
/// builds for.
const CLOCK_TICKS: f64 = 100.0;

/// utime + stime of a process, in clock ticks (`/proc/<pid>/stat` fields 14 and 15).
fn cpu_ticks(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    parse_cpu_ticks(&stat)
}

fn parse_cpu_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) is in parentheses and may hold spaces: count from after it.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split(' ').collect();
    // `rest` starts at field 3 (state), so fields 14 and 15 are at 11 and 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some(utime + stime)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_ticks_from_stat() {
        let stat = "1234 (rkube server) S 1 1234 1234 0 -1 4194560 100 0 0 0 250 50 0 0 20 0 9 0";
        assert_eq!(parse_cpu_ticks(stat), Some(300));
        assert!(cpu_ticks(std::process::id()).is_some());
        assert_eq!(parse_cpu_ticks("garbage"), None);
    }

    #[test]
    fn continue_tokens() {
        assert_eq!(
            continue_token(r#"{"kind":"PodList","metadata":{"continue":"abc"},"items":[{"x":1}]}"#),
            Some("abc".into())
        );
        assert_eq!(
            continue_token(r#"{"metadata":{"resourceVersion":"5"},"items":[]}"#),
            None
        );
    }

    fn pod(uid: &str, name: &str, node: Option<&str>, running: bool) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"uid": uid, "name": name, "namespace": "ns"},
            "spec": {"containers": [], "nodeName": node},
            "status": if running {
                json!({"phase": "Running", "containerStatuses": [{"name": "c", "image": "i",
                    "imageID": "", "ready": true, "restartCount": 0, "started": true}]})
            } else {
                json!({"phase": "Pending"})
            }
        }))
        .unwrap()
    }

    #[test]
    fn pods_seen_binding_startup_and_deletes() {
        let recorder = Recorder::new();
        let mut seen = PodsSeen::default();
        seen.apply(&pod("a", "pa", None, false), &recorder);
        seen.apply(&pod("b", "pb", Some("n1"), false), &recorder);
        assert_eq!(seen.bound_at.len(), 1);
        seen.apply(&pod("a", "pa", Some("n1"), true), &recorder);
        seen.apply(&pod("a", "pa", Some("n1"), true), &recorder);
        assert_eq!(seen.bound_at.len(), 2);
        let (samples, _) = recorder.take();
        // Started once, counted once.
        assert_eq!(
            samples
                .iter()
                .filter(|(k, _)| *k == Kind::PodStartup)
                .count(),
            1
        );
        assert_eq!(seen.pods.len(), 2);
        seen.delete(&pod("a", "pa", None, false));
        assert_eq!(
            seen.random_pod(),
            Some(("ns".to_string(), "pb".to_string()))
        );
        // b moved to slot 0 and can still be deleted.
        seen.delete(&pod("b", "pb", None, false));
        assert!(seen.pods.is_empty() && seen.index.is_empty());
        assert_eq!(seen.random_pod(), None);
    }
}
