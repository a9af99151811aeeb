//! Elector tests on an in-memory lock with optimistic concurrency, in paused tokio time (so the
//! default 15 s / 10 s / 2 s timings run instantly and exactly). The multi-process test against a real
//! API server is `tests/leaderelection.rs`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::{sleep, Instant};
use tokio_util::sync::CancellationToken;

use super::*;

#[derive(Default)]
struct Server {
    record: Option<LeaderElectionRecord>,
    rv: u64,
}

/// One candidate's view of the shared in-memory lock; `down` makes its requests hang forever;
/// `freeze` makes the next update, once applied, take that long to answer while the clock moves on
/// (a process stopped with its reply waiting in the socket), and hands the lease to "thief" then.
struct FakeLock {
    identity: String,
    server: Arc<Mutex<Server>>,
    seen_rv: Mutex<Option<u64>>,
    down: Arc<AtomicBool>,
    freeze: Arc<Mutex<Option<Duration>>>,
}

impl FakeLock {
    async fn request(&self) {
        sleep(Duration::from_millis(5)).await;
        if self.down.load(Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }

    fn remember(&self, rv: u64) {
        if let Ok(mut seen) = self.seen_rv.lock() {
            *seen = Some(rv);
        }
    }
}

impl ResourceLock for FakeLock {
    fn identity(&self) -> &str {
        &self.identity
    }

    fn describe(&self) -> String {
        "test/lock".into()
    }

    async fn get(&self) -> Result<Option<LeaderElectionRecord>, LockError> {
        self.request().await;
        let (record, rv) = {
            let s = self.server.lock().map_err(|_| LockError::NotInitialized)?;
            (s.record.clone(), s.rv)
        };
        if record.is_some() {
            self.remember(rv);
        }
        Ok(record)
    }

    async fn create(&self, record: LeaderElectionRecord) -> Result<(), LockError> {
        self.request().await;
        let rv = {
            let mut s = self.server.lock().map_err(|_| LockError::NotInitialized)?;
            if s.record.is_some() {
                return Err(LockError::AlreadyExists);
            }
            s.rv += 1;
            s.record = Some(record);
            s.rv
        };
        self.remember(rv);
        Ok(())
    }

    async fn update(&self, record: LeaderElectionRecord) -> Result<(), LockError> {
        self.request().await;
        let seen = self
            .seen_rv
            .lock()
            .map_err(|_| LockError::NotInitialized)?
            .ok_or(LockError::NotInitialized)?;
        let rv = {
            let mut s = self.server.lock().map_err(|_| LockError::NotInitialized)?;
            if s.rv != seen {
                return Err(LockError::Conflict);
            }
            s.rv += 1;
            s.record = Some(record);
            s.rv
        };
        self.remember(rv);
        let frozen = self.freeze.lock().ok().and_then(|mut f| f.take());
        if let Some(d) = frozen {
            // Nothing of this candidate runs meanwhile (not even its timeouts, which the answer
            // beats on wake-up); another candidate takes the expired lease.
            tokio::time::advance(d).await;
            if let Ok(mut s) = self.server.lock() {
                s.rv += 1;
                s.record = Some(LeaderElectionRecord {
                    holder_identity: "thief".into(),
                    lease_duration_seconds: 15,
                    ..LeaderElectionRecord::default()
                });
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, PartialEq)]
enum Ev {
    Started(String),
    Stopped(String),
    NewLeader(String, String),
}

#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<(Instant, Ev)>>>);

impl Log {
    fn push(&self, ev: Ev) {
        if let Ok(mut l) = self.0.lock() {
            l.push((Instant::now(), ev));
        }
    }

    fn all(&self) -> Vec<(Instant, Ev)> {
        self.0.lock().map(|l| l.clone()).unwrap_or_default()
    }

    fn time_of(&self, ev: &Ev) -> Option<Instant> {
        self.all()
            .into_iter()
            .find(|(_, e)| e == ev)
            .map(|(t, _)| t)
    }
}

struct Candidate {
    elector: Arc<LeaderElector<FakeLock>>,
    cancel: CancellationToken,
    down: Arc<AtomicBool>,
    freeze: Arc<Mutex<Option<Duration>>>,
    task: tokio::task::JoinHandle<RunOutcome>,
}

fn candidate(id: &str, server: &Arc<Mutex<Server>>, log: &Log) -> Candidate {
    let down = Arc::new(AtomicBool::new(false));
    let freeze = Arc::new(Mutex::new(None));
    let lock = FakeLock {
        identity: id.into(),
        server: server.clone(),
        seen_rv: Mutex::new(None),
        down: down.clone(),
        freeze: freeze.clone(),
    };
    let (l1, l2, l3) = (log.clone(), log.clone(), log.clone());
    let (i1, i2, i3) = (id.to_string(), id.to_string(), id.to_string());
    let callbacks = LeaderCallbacks::default()
        .on_started_leading(move |_| l1.push(Ev::Started(i1.clone())))
        .on_stopped_leading(move || l2.push(Ev::Stopped(i2.clone())))
        .on_new_leader(move |who| l3.push(Ev::NewLeader(i3.clone(), who.to_string())));
    let config = LeaderElectionConfig::new("test", "lock", id);
    let elector = Arc::new(LeaderElector::new(config, lock, callbacks).expect("valid config"));
    let cancel = CancellationToken::new();
    let task = tokio::spawn({
        let elector = elector.clone();
        let cancel = cancel.clone();
        async move { elector.run(cancel).await }
    });
    Candidate {
        elector,
        cancel,
        down,
        freeze,
        task,
    }
}

fn record(server: &Arc<Mutex<Server>>) -> LeaderElectionRecord {
    server
        .lock()
        .ok()
        .and_then(|s| s.record.clone())
        .unwrap_or_default()
}

async fn wait_for(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) -> Instant {
    let give_up = Instant::now() + limit;
    while !cond() {
        assert!(Instant::now() < give_up, "timed out waiting for {what}");
        sleep(Duration::from_millis(10)).await;
    }
    Instant::now()
}

#[tokio::test(start_paused = true)]
async fn first_candidate_creates_the_lease_and_keeps_renewing() {
    let server = Arc::new(Mutex::new(Server::default()));
    let log = Log::default();
    let a = candidate("a", &server, &log);
    wait_for("a to lead", Duration::from_secs(5), || {
        a.elector.is_leader()
    })
    .await;
    let first = record(&server);
    assert_eq!(first.holder_identity, "a");
    assert_eq!(first.lease_duration_seconds, 15);
    assert_eq!(first.leader_transitions, 0);
    sleep(Duration::from_secs(60)).await;
    let later = record(&server);
    assert_eq!(later.holder_identity, "a");
    assert_eq!(later.acquire_time, first.acquire_time);
    assert_ne!(later.renew_time, first.renew_time);
    assert_eq!(later.leader_transitions, 0);
    assert_eq!(a.elector.get_leader(), "a");
    let events: Vec<Ev> = log.all().into_iter().map(|(_, e)| e).collect();
    assert_eq!(
        events,
        vec![
            Ev::NewLeader("a".into(), "a".into()),
            Ev::Started("a".into())
        ]
    );
    a.cancel.cancel();
    assert_eq!(a.task.await.ok(), Some(RunOutcome::Cancelled));
}

#[tokio::test(start_paused = true)]
async fn follower_takes_over_only_after_the_lease_expires() {
    let server = Arc::new(Mutex::new(Server::default()));
    let log = Log::default();
    let a = candidate("a", &server, &log);
    wait_for("a to lead", Duration::from_secs(5), || {
        a.elector.is_leader()
    })
    .await;
    let b = candidate("b", &server, &log);
    sleep(Duration::from_secs(60)).await;
    assert!(!b.elector.is_leader());
    assert_eq!(b.elector.get_leader(), "a");

    // "Kill" a: its task is gone, nothing is released.
    a.task.abort();
    let killed = Instant::now();
    let took = wait_for("b to lead", Duration::from_secs(30), || {
        record(&server).holder_identity == "b"
    })
    .await;
    let gap = took - killed;
    // a renewed at most one retry period (2 s) before it died; b must wait the full 15 s from when it
    // observed that renewal. b polls at most 2 s * 2.2 apart, so it may observe the last renewal up to
    // 4.4 s after it was written and take over up to 4.4 s after the lease expired in its eyes.
    assert!(gap >= Duration::from_secs(13), "took over after {gap:?}");
    assert!(
        gap <= Duration::from_millis(4_400 + 15_000 + 4_400 + 200),
        "took over after {gap:?}"
    );
    assert_eq!(record(&server).leader_transitions, 1);
    assert!(log
        .all()
        .iter()
        .any(|(_, e)| *e == Ev::NewLeader("b".into(), "b".into())));
    b.cancel.cancel();
    let _ = b.task.await;
}

#[tokio::test(start_paused = true)]
async fn graceful_stop_releases_and_hands_over_at_once() {
    let server = Arc::new(Mutex::new(Server::default()));
    let log = Log::default();
    let a = candidate("a", &server, &log);
    wait_for("a to lead", Duration::from_secs(5), || {
        a.elector.is_leader()
    })
    .await;
    let b = candidate("b", &server, &log);
    sleep(Duration::from_secs(10)).await;

    let stop = Instant::now();
    a.cancel.cancel();
    assert_eq!(a.task.await.ok(), Some(RunOutcome::Cancelled));
    let released = record(&server);
    assert!(released.holder_identity.is_empty() || released.holder_identity == "b");
    let took = wait_for("b to lead", Duration::from_secs(30), || {
        b.elector.is_leader()
    })
    .await;
    assert!(
        took - stop <= Duration::from_millis(4_400 + 200),
        "handover took {:?}",
        took - stop
    );
    assert_eq!(record(&server).leader_transitions, 1);
    let stopped_a = log.time_of(&Ev::Stopped("a".into())).expect("a stopped");
    let started_b = log.time_of(&Ev::Started("b".into())).expect("b started");
    assert!(stopped_a <= started_b);
    b.cancel.cancel();
    let _ = b.task.await;
    assert!(record(&server).holder_identity.is_empty());
    assert_eq!(record(&server).lease_duration_seconds, 1);
}

#[tokio::test(start_paused = true)]
async fn leader_that_cannot_renew_stops_before_others_may_take_over() {
    let server = Arc::new(Mutex::new(Server::default()));
    let log = Log::default();
    let a = candidate("a", &server, &log);
    wait_for("a to lead", Duration::from_secs(5), || {
        a.elector.is_leader()
    })
    .await;
    let b = candidate("b", &server, &log);
    sleep(Duration::from_secs(7)).await;

    let cut = Instant::now();
    a.down.store(true, Ordering::SeqCst);
    let outcome = tokio::time::timeout(Duration::from_secs(30), a.task)
        .await
        .expect("a gives up")
        .ok();
    assert_eq!(outcome, Some(RunOutcome::Lost));
    let stopped = log.time_of(&Ev::Stopped("a".into())).expect("a stopped");
    assert!(
        stopped - cut <= Duration::from_secs(10),
        "{:?}",
        stopped - cut
    );
    let took = wait_for("b to lead", Duration::from_secs(30), || {
        b.elector.is_leader()
    })
    .await;
    // a stops renew_deadline (10 s) after its last renewal started; b may take over no earlier than
    // lease_duration (15 s) after it observed that renewal.
    assert!(
        took - stopped >= Duration::from_secs(4),
        "{:?}",
        took - stopped
    );
    b.cancel.cancel();
    let _ = b.task.await;
}

#[tokio::test(start_paused = true)]
async fn leader_that_sees_another_holder_stops_at_once() {
    let server = Arc::new(Mutex::new(Server::default()));
    let log = Log::default();
    let a = candidate("a", &server, &log);
    wait_for("a to lead", Duration::from_secs(5), || {
        a.elector.is_leader()
    })
    .await;
    let intrusion = Instant::now();
    if let Ok(mut s) = server.lock() {
        s.rv += 1;
        s.record = Some(LeaderElectionRecord {
            holder_identity: "intruder".into(),
            lease_duration_seconds: 15,
            ..LeaderElectionRecord::default()
        });
    }
    let outcome = tokio::time::timeout(Duration::from_secs(30), a.task)
        .await
        .expect("a stops")
        .ok();
    assert_eq!(outcome, Some(RunOutcome::Lost));
    let stopped = log.time_of(&Ev::Stopped("a".into())).expect("a stopped");
    assert!(stopped - intrusion <= Duration::from_millis(2_100));
    assert_eq!(a.elector.get_leader(), "intruder");
    // Not ours, so not released.
    assert_eq!(record(&server).holder_identity, "intruder");
    assert!(log
        .all()
        .iter()
        .any(|(_, e)| *e == Ev::NewLeader("a".into(), "intruder".into())));
}

#[tokio::test(start_paused = true)]
async fn cancelled_before_acquiring_never_calls_stop() {
    let server = Arc::new(Mutex::new(Server::default()));
    let log = Log::default();
    let a = candidate("a", &server, &log);
    wait_for("a to lead", Duration::from_secs(5), || {
        a.elector.is_leader()
    })
    .await;
    let b = candidate("b", &server, &log);
    sleep(Duration::from_secs(5)).await;
    b.cancel.cancel();
    assert_eq!(b.task.await.ok(), Some(RunOutcome::NotAcquired));
    assert_eq!(log.time_of(&Ev::Stopped("b".into())), None);
    assert_eq!(record(&server).holder_identity, "a");
    a.cancel.cancel();
    let _ = a.task.await;
}

/// A leader stopped (SIGSTOP) past the lease while a renewal was in flight wakes up to that
/// renewal's answer: it must stop leading at once, not lead on for another retry period beside the
/// candidate that took the lease meanwhile.
#[tokio::test(start_paused = true)]
async fn leader_woken_after_the_lease_with_an_old_answer_stops_at_once() {
    let server = Arc::new(Mutex::new(Server::default()));
    let log = Log::default();
    let a = candidate("a", &server, &log);
    wait_for("a to lead", Duration::from_secs(5), || {
        a.elector.is_leader()
    })
    .await;
    sleep(Duration::from_secs(5)).await;
    if let Ok(mut f) = a.freeze.lock() {
        *f = Some(Duration::from_secs(20));
    }
    let thief = wait_for(
        "the lease taken during the freeze",
        Duration::from_secs(60),
        || record(&server).holder_identity == "thief",
    )
    .await;
    let outcome = tokio::time::timeout(Duration::from_secs(30), a.task)
        .await
        .expect("a stops")
        .ok();
    assert_eq!(outcome, Some(RunOutcome::Lost));
    let stopped = log.time_of(&Ev::Stopped("a".into())).expect("a stopped");
    assert!(
        stopped - thief < Duration::from_millis(100),
        "led on for {:?} after waking",
        stopped - thief
    );
    assert_eq!(record(&server).holder_identity, "thief");
}

#[test]
fn identity_must_match_the_lock() {
    let lock = FakeLock {
        identity: "x".into(),
        server: Arc::default(),
        seen_rv: Mutex::new(None),
        down: Arc::default(),
        freeze: Arc::default(),
    };
    let config = LeaderElectionConfig::new("test", "lock", "y");
    let err = LeaderElector::new(config, lock, LeaderCallbacks::default()).err();
    assert!(matches!(err, Some(ConfigError::IdentityMismatch { .. })));
}
