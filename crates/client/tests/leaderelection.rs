//! Leader election with three candidate processes (`src/bin/leader-candidate.rs`) against a real API
//! server started in-process. Timings: lease 2 s, renew deadline 1.5 s, retry 0.3 s (candidates poll
//! every 0.3-0.66 s: upstream's jitter factor 1.2).
//!
//! Checked: exactly one candidate leads at any time, both from the intervals the candidates print and
//! from the Lease's `holderIdentity` sampled every 100 ms; SIGKILL of the leader hands over after the
//! lease expires (not before: at least lease - retry; at most lease + two jittered polls); SIGTERM
//! hands over at once (the lease is released) and the process exits 0; `leaseTransitions` counts the
//! changes of holder.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use tokio_util::sync::CancellationToken;

const LEASE_MS: u64 = 2000;
const RENEW_MS: u64 = 1500;
const RETRY_MS: u64 = 300;
/// Longest wait between two polls of a candidate: retry * (1 + 1.2).
const MAX_POLL_MS: u64 = RETRY_MS * 22 / 10;
/// Allowance for process scheduling and request latency on a loaded test machine.
const SLACK_MS: u64 = 700;
const LOCK: &str = "rkube-test-lock";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// A line printed by a candidate: (kind, identity, unix ms).
#[derive(Clone, Debug, PartialEq)]
struct Line {
    kind: String,
    identity: String,
    ms: u64,
}

type Lines = Arc<Mutex<Vec<Line>>>;

/// Kills every child still running when dropped (also on panic).
struct Candidates {
    children: Vec<(String, Child)>,
    lines: Lines,
}

impl Drop for Candidates {
    fn drop(&mut self) {
        for (_, child) in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Candidates {
    fn spawn(kubeconfig: &Path, ids: &[&str]) -> Candidates {
        let lines: Lines = Arc::default();
        let mut children = Vec::new();
        for id in ids {
            let mut child = Command::new(env!("CARGO_BIN_EXE_leader-candidate"))
                .arg(kubeconfig)
                .arg(id)
                .args([LEASE_MS, RENEW_MS, RETRY_MS].map(|v| v.to_string()))
                .arg(format!("default/{LOCK}"))
                .stdout(Stdio::piped())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn leader-candidate");
            let stdout = child.stdout.take().expect("piped stdout");
            let sink = lines.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                    let parts: Vec<&str> = line.split_whitespace().collect();
                    let (Some(kind), Some(identity), Some(ms)) =
                        (parts.first(), parts.get(1), parts.last())
                    else {
                        continue;
                    };
                    let Ok(ms) = ms.parse() else { continue };
                    if let Ok(mut l) = sink.lock() {
                        l.push(Line {
                            kind: kind.to_string(),
                            identity: identity.to_string(),
                            ms,
                        });
                    }
                }
            });
            children.push((id.to_string(), child));
        }
        Candidates { children, lines }
    }

    fn lines(&self, kind: &str) -> Vec<Line> {
        self.lines
            .lock()
            .map(|l| l.iter().filter(|x| x.kind == kind).cloned().collect())
            .unwrap_or_default()
    }

    fn child(&mut self, id: &str) -> &mut Child {
        &mut self
            .children
            .iter_mut()
            .find(|(i, _)| i == id)
            .expect("known candidate")
            .1
    }

    /// Waits for the `n`-th (1-based) line of `kind`.
    async fn wait_line(&self, kind: &str, n: usize, limit: Duration) -> Line {
        let give_up = Instant::now() + limit;
        loop {
            if let Some(l) = self.lines(kind).get(n - 1) {
                return l.clone();
            }
            assert!(
                Instant::now() < give_up,
                "no {kind:?} line #{n} within {limit:?}; lines: {:?}",
                self.lines.lock().map(|l| l.clone()).unwrap_or_default()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn wait_exit(&mut self, id: &str, limit: Duration) -> std::process::ExitStatus {
        let give_up = Instant::now() + limit;
        loop {
            if let Some(status) = self.child(id).try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < give_up,
                "{id} did not exit within {limit:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn sigterm(&mut self, id: &str) {
        let pid = self.child(id).id();
        let status = Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -TERM {pid}");
    }
}

#[derive(Clone, Debug)]
struct Sample {
    ms: u64,
    holder: String,
    transitions: i32,
}

async fn kube_client(kubeconfig: &Path) -> kube::Client {
    client::kubeconfig::client_from_file(kubeconfig)
        .await
        .expect("kube client")
}

/// Samples the Lease every 100 ms until `stop` is cancelled.
fn sample_lease(api: Api<Lease>, stop: CancellationToken) -> tokio::task::JoinHandle<Vec<Sample>> {
    tokio::spawn(async move {
        let mut samples = Vec::new();
        while !stop.is_cancelled() {
            let ms = now_ms();
            if let Ok(Some(lease)) = api.get_opt(LOCK).await {
                let spec = lease.spec.unwrap_or_default();
                samples.push(Sample {
                    ms,
                    holder: spec.holder_identity.unwrap_or_default(),
                    transitions: spec.lease_transitions.unwrap_or_default(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        samples
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_candidate_processes_hand_over_leadership() {
    let dir = tempfile::tempdir().expect("tempdir");
    let _server = apiserver::start(apiserver::Config {
        secure_port: 0,
        ..apiserver::Config::new(dir.path())
    })
    .await
    .expect("start apiserver");
    let kubeconfig = dir.path().join("admin.kubeconfig");
    let client = kube_client(&kubeconfig).await;
    let leases: Api<Lease> = Api::namespaced(client, "default");

    let stop_sampling = CancellationToken::new();
    let sampler = sample_lease(leases.clone(), stop_sampling.clone());
    let mut c = Candidates::spawn(&kubeconfig, &["cand-0", "cand-1", "cand-2"]);

    // 1. One of them leads, and stays the only leader.
    let first = c.wait_line("leading", 1, Duration::from_secs(30)).await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(c.lines("leading").len(), 1, "a single stable leader");
    assert!(c.lines("stopped").is_empty());

    // 2. SIGKILL the leader: another takes over once the lease expired, not before.
    let killed_at = now_ms();
    c.child(&first.identity).kill().expect("SIGKILL leader");
    let _ = c.child(&first.identity).wait();
    let second = c.wait_line("leading", 2, Duration::from_secs(15)).await;
    assert_ne!(second.identity, first.identity);
    let gap = second.ms.saturating_sub(killed_at);
    eprintln!("SIGKILL handover: {gap} ms");
    assert!(
        gap >= LEASE_MS - RETRY_MS - 200,
        "took over {gap} ms after the kill: before the lease expired"
    );
    assert!(
        gap <= LEASE_MS + 2 * MAX_POLL_MS + SLACK_MS,
        "took over {gap} ms after the kill"
    );

    // 3. SIGTERM the new leader: it releases the lease, the last candidate takes over at once.
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(c.lines("leading").len(), 2);
    let termed_at = now_ms();
    c.sigterm(&second.identity);
    let third = c.wait_line("leading", 3, Duration::from_secs(15)).await;
    let status = c.wait_exit(&second.identity, Duration::from_secs(10)).await;
    assert!(status.success(), "graceful exit, got {status:?}");
    assert_ne!(third.identity, first.identity);
    assert_ne!(third.identity, second.identity);
    let gap = third.ms.saturating_sub(termed_at);
    eprintln!("SIGTERM handover: {gap} ms");
    assert!(
        gap <= MAX_POLL_MS + SLACK_MS,
        "graceful handover took {gap} ms (lease is {LEASE_MS} ms)"
    );
    let stopped_second = c
        .lines("stopped")
        .into_iter()
        .find(|l| l.identity == second.identity)
        .expect("the terminated leader printed `stopped`");

    // 4. Stop the last one too: the Lease ends released.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let last_stop = now_ms();
    c.sigterm(&third.identity);
    let status = c.wait_exit(&third.identity, Duration::from_secs(10)).await;
    assert!(status.success(), "graceful exit, got {status:?}");
    let end = now_ms();
    stop_sampling.cancel();
    let samples = sampler.await.expect("sampler");
    let lease = leases.get(LOCK).await.expect("lease exists");
    let spec = lease.spec.unwrap_or_default();
    assert_eq!(spec.holder_identity.as_deref().unwrap_or(""), "");
    assert_eq!(spec.lease_duration_seconds, Some(1));
    assert_eq!(spec.lease_transitions, Some(2), "two changes of holder");
    assert!(spec.acquire_time.is_some() && spec.renew_time.is_some());

    // 5. Leadership intervals from the printed lines never overlap.
    let stopped_third = c
        .lines("stopped")
        .into_iter()
        .find(|l| l.identity == third.identity)
        .expect("the last leader printed `stopped`");
    assert!(stopped_third.ms >= last_stop && stopped_third.ms <= end);
    let intervals = [
        (first.identity.clone(), first.ms, killed_at),
        (second.identity.clone(), second.ms, stopped_second.ms),
        (third.identity.clone(), third.ms, stopped_third.ms),
    ];
    assert_eq!(c.lines("leading").len(), 3, "no other leadership changes");
    for pair in intervals.windows(2) {
        let ((a, _, a_end), (b, b_start, _)) = (&pair[0], &pair[1]);
        assert!(
            b_start >= a_end,
            "{b} started leading at {b_start} before {a} stopped at {a_end}"
        );
    }

    // 6. The sampled Lease agrees: one holder at a time, in the same order, transitions only grow.
    assert!(samples.len() > 40, "only {} samples", samples.len());
    for s in &samples {
        for (id, start, stop) in &intervals {
            if s.ms > start + 200 && s.ms + 200 < *stop {
                assert_eq!(&s.holder, id, "sample at {} during {id}'s term", s.ms);
            }
        }
    }
    let mut holders: Vec<&str> = samples
        .iter()
        .map(|s| s.holder.as_str())
        .filter(|h| !h.is_empty())
        .collect();
    holders.dedup();
    assert_eq!(
        holders,
        vec![
            first.identity.as_str(),
            second.identity.as_str(),
            third.identity.as_str()
        ]
    );
    assert!(samples
        .windows(2)
        .all(|w| w[0].transitions <= w[1].transitions));
}

/// The elector records upstream's `LeaderElection` events on the Lease when given a recorder.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_election_records_events_on_the_lease() {
    use client::events::{ApiEventSink, EventBroadcaster};
    use client::leaderelection::{
        LeaderCallbacks, LeaderElectionConfig, LeaderElector, RunOutcome,
    };
    use k8s_openapi::api::core::v1::Event;

    let dir = tempfile::tempdir().expect("tempdir");
    let _server = apiserver::start(apiserver::Config {
        secure_port: 0,
        ..apiserver::Config::new(dir.path())
    })
    .await
    .expect("start apiserver");
    let client = kube_client(&dir.path().join("admin.kubeconfig")).await;
    let broadcaster = EventBroadcaster::new();
    broadcaster.start_recording_to_sink(ApiEventSink::new(client.clone()));
    let config = LeaderElectionConfig::new("default", "evented-lock", "solo");
    let leading = CancellationToken::new();
    let on_start = leading.clone();
    let callbacks = LeaderCallbacks::default().on_started_leading(move |_| on_start.cancel());
    let elector = LeaderElector::for_lease(client.clone(), config, callbacks)
        .expect("valid config")
        .with_event_recorder(broadcaster.new_recorder("rkube-test", "host-a"));
    let cancel = CancellationToken::new();
    let run = tokio::spawn({
        let cancel = cancel.clone();
        async move { elector.run(cancel).await }
    });
    tokio::time::timeout(Duration::from_secs(20), leading.cancelled())
        .await
        .expect("acquired");
    cancel.cancel();
    let outcome = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("run returns")
        .expect("run task");
    assert_eq!(outcome, RunOutcome::Cancelled);
    tokio::time::timeout(Duration::from_secs(20), broadcaster.flush())
        .await
        .expect("events written");

    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let mut messages: Vec<String> = events
        .list(&Default::default())
        .await
        .expect("list events")
        .items
        .into_iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some("Lease"))
        .filter(|e| e.involved_object.name.as_deref() == Some("evented-lock"))
        .filter(|e| e.reason.as_deref() == Some("LeaderElection"))
        .filter_map(|e| e.message)
        .collect();
    messages.sort();
    assert_eq!(messages, vec!["solo became leader", "solo stopped leading"]);
    let lease = Api::<Lease>::namespaced(client, "default")
        .get("evented-lock")
        .await
        .expect("lease");
    let spec = lease.spec.unwrap_or_default();
    assert_eq!(
        spec.holder_identity.as_deref().unwrap_or(""),
        "",
        "released"
    );
    assert_eq!(spec.lease_transitions, Some(0));
    broadcaster.shutdown().await;
}
