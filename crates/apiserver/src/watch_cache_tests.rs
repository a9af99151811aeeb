//! Tests of the watch cache: selection transitions, replay, slow watchers, and progress
//! notifications against a real etcd.

use super::*;
use bytes::Bytes;
use storage::{Event, KeyValue};

fn put(key: &str, labels: &str, rv: i64, prev: Option<(&str, i64)>) -> Event {
    let obj = |l: &str| {
        Bytes::from(format!(
            r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{}","namespace":"ns","labels":{{"app":"{l}"}}}}}}"#,
            key.rsplit('/').next().unwrap()
        ))
    };
    Event {
        kind: EventKind::Put,
        kv: KeyValue {
            key: key.into(),
            value: obj(labels),
            create_revision: rv,
            mod_revision: rv,
        },
        prev: prev.map(|(l, r)| KeyValue {
            key: key.into(),
            value: obj(l),
            create_revision: r,
            mod_revision: r,
        }),
    }
}

fn filter(sel: &str) -> Filter {
    Filter::new("", "configmaps", None, Some(sel), None).unwrap()
}

#[test]
fn selection_transitions_become_added_and_deleted() {
    let cache = WatchCache::new("configmaps", "", "configmaps");
    let sub = cache
        .subscribe(filter("app=a"), WatchStart::After(0), 0)
        .ok()
        .unwrap();
    let mut live = sub.live;
    cache.apply(&put("/configmaps/ns/x", "a", 2, None));
    cache.apply(&put("/configmaps/ns/x", "b", 3, Some(("a", 2))));
    cache.apply(&put("/configmaps/ns/x", "a", 4, Some(("b", 3))));
    let kinds: Vec<EventType> = std::iter::from_fn(|| live.try_recv().ok())
        .map(|(_, t)| t)
        .collect();
    assert_eq!(
        kinds,
        [EventType::Added, EventType::Deleted, EventType::Added]
    );
    let frame = cache.read().ring[1].json_frame(EventType::Deleted);
    let v: serde_json::Value = serde_json::from_slice(&frame).unwrap();
    assert_eq!(v["type"], "DELETED");
    assert_eq!(v["object"]["metadata"]["resourceVersion"], "3");
}

#[test]
fn replay_from_the_ring_and_too_old_outside_it() {
    let cache = WatchCache::new("configmaps", "", "configmaps");
    cache.reset(BTreeMap::new(), 0, 1);
    for rv in 2..10 {
        cache.apply(&put(&format!("/configmaps/ns/o{rv}"), "a", rv, None));
    }
    let sub = cache
        .subscribe(filter("app=a"), WatchStart::After(5), 9)
        .ok()
        .unwrap();
    let replayed: Vec<i64> = sub.initial.iter().map(|(e, _)| e.rv).collect();
    assert_eq!(replayed, [6, 7, 8, 9]);
    let initial = cache
        .subscribe(Filter::default(), WatchStart::InitialState, 9)
        .ok()
        .unwrap();
    assert_eq!(initial.initial.len(), 8);
    assert!(initial.initial.iter().all(|(_, t)| *t == EventType::Added));
    assert!(matches!(
        cache.subscribe(Filter::default(), WatchStart::After(0), 9),
        Err(SubscribeError::TooOld)
    ));
}

#[test]
fn a_watcher_that_stops_reading_is_dropped_not_waited_for() {
    let cache = WatchCache::new("configmaps", "", "configmaps");
    let slow = cache
        .subscribe(Filter::default(), WatchStart::After(0), 0)
        .ok()
        .unwrap();
    let fast = cache
        .subscribe(Filter::default(), WatchStart::After(0), 0)
        .ok()
        .unwrap();
    let mut fast_live = fast.live;
    let mut received = 0;
    for rv in 2..(WATCHER_BUFFER as i64 + 10) {
        cache.apply(&put(&format!("/configmaps/ns/o{}", rv % 7), "a", rv, None));
        while fast_live.try_recv().is_ok() {
            received += 1;
        }
    }
    assert_eq!(
        received,
        WATCHER_BUFFER + 8,
        "the reading watcher got every event"
    );
    assert_eq!(
        cache.read().watchers.len(),
        1,
        "the full watcher was closed"
    );
    drop(slow);
}

/// A ConfigMap as stored.
fn configmap(name: &str) -> Bytes {
    Bytes::from(format!(
        r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{name}","namespace":"ns"}}}}"#
    ))
}

/// Waits until the caches follow a store watch (with its requester, if any).
async fn following(caches: &CacheSet, store: &Arc<dyn Store>) {
    let current = store.current_revision().await.unwrap();
    assert!(caches.wait_for(current, Duration::from_secs(20)).await);
    // The requester is set once the watch is open, just after the load.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !caches.reports_progress() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Writes outside the cache's etcd prefix move etcd's revision without an event the cache sees: a
/// consistent read's wait ends by a progress notification within a fraction of a second, not at the
/// timeout; without progress notifications it gives up after the short wait (lists then read etcd).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_outside_the_prefix_do_not_hold_consistent_reads() {
    use storage::etcd::EtcdStore;
    let etcd = storage::etcd_process::EtcdProcess::start().unwrap_or_else(|e| panic!("{e}"));
    let endpoints = [etcd.endpoint.clone()];
    let mut with_progress = EtcdStore::connect(&endpoints, "/registry").await.unwrap();
    // This machine's etcd (3.4.23) predates the fixes the store checks for; asked while no event of
    // the watch is in flight, as here, its answers are right.
    with_progress.set_reports_progress(true);
    let mut without = with_progress.clone();
    without.set_reports_progress(false);
    let other = EtcdStore::connect(&endpoints, "/elsewhere").await.unwrap();
    let store: Arc<dyn Store> = Arc::new(with_progress);
    store
        .create("/configmaps/ns/a", configmap("a"))
        .await
        .unwrap();

    let caches = CacheSet::new();
    tokio::spawn(caches.clone().run(store.clone()));
    following(&caches, &store).await;
    assert!(caches.reports_progress());
    let mut slowest = Duration::ZERO;
    for round in 0..5 {
        for i in 0..3 {
            other
                .create(&format!("/x/{round}-{i}"), "v".into())
                .await
                .unwrap();
        }
        let target = store.current_revision().await.unwrap();
        assert!(caches.revision() < target, "no event moved the caches");
        let started = std::time::Instant::now();
        assert!(
            caches.wait_consistent(target, Duration::from_secs(3)).await,
            "the caches never reached {target}"
        );
        slowest = slowest.max(started.elapsed());
    }
    assert!(
        slowest < Duration::from_millis(800),
        "a wait took {slowest:?}"
    );
    // Events of the prefix still come through, in between progress answers.
    let written = store
        .create("/configmaps/ns/b", configmap("b"))
        .await
        .unwrap();
    assert!(
        caches
            .wait_for(written.mod_revision, Duration::from_secs(3))
            .await
    );
    assert!(caches
        .get("configmaps")
        .and_then(|cache| cache.get("/configmaps/ns/b"))
        .is_some());

    // The same with a store that reports no progress: the wait gives up after the short bound.
    let store: Arc<dyn Store> = Arc::new(without);
    let caches = CacheSet::new();
    tokio::spawn(caches.clone().run(store.clone()));
    following(&caches, &store).await;
    assert!(!caches.reports_progress());
    other.create("/x/last", "v".into()).await.unwrap();
    let target = store.current_revision().await.unwrap();
    let started = std::time::Instant::now();
    assert!(!caches.wait_consistent(target, Duration::from_secs(3)).await);
    let waited = started.elapsed();
    assert!(
        waited >= NO_PROGRESS_WAIT && waited < Duration::from_secs(2),
        "waited {waited:?}"
    );
    eprintln!("slowest wait with progress: {slowest:?}; without: {waited:?}");
}

#[test]
fn events_keep_no_objects_but_reach_live_watchers() {
    assert!(!keeps_objects("events"));
    assert!(keeps_objects("pods"));
    let cache = WatchCache::new("events", "", "events");
    let event = |name: &str, reason: &str, rv: i64, prev: Option<(&str, i64)>| {
        let obj = |reason: &str| {
            Bytes::from(format!(
                r#"{{"apiVersion":"v1","kind":"Event","metadata":{{"name":"{name}","namespace":"ns"}},"involvedObject":{{"name":"web"}},"reason":"{reason}"}}"#
            ))
        };
        Event {
            kind: EventKind::Put,
            kv: KeyValue {
                key: format!("/events/ns/{name}"),
                value: obj(reason),
                create_revision: rv,
                mod_revision: rv,
            },
            prev: prev.map(|(r, at)| KeyValue {
                key: format!("/events/ns/{name}"),
                value: obj(r),
                create_revision: at,
                mod_revision: at,
            }),
        }
    };
    cache.reset(BTreeMap::new(), 3, 1);
    // No watcher yet: only counted.
    cache.apply(&event("a", "Scheduled", 2, None));
    assert_eq!(cache.len(), 4);
    assert!(cache.get("/events/ns/a").is_none());
    assert!(cache.list("/events/", &Filter::default()).is_empty());
    // A revision the caches have not reached, or one before the last change, is the store's.
    assert!(matches!(
        cache.subscribe(Filter::default(), WatchStart::After(5), 2),
        Err(SubscribeError::TooOld)
    ));
    assert!(matches!(
        cache.subscribe(Filter::default(), WatchStart::After(1), 2),
        Err(SubscribeError::TooOld)
    ));
    let sub = cache
        .subscribe(Filter::default(), WatchStart::After(2), 2)
        .ok()
        .unwrap();
    let mut live = sub.live;
    cache.apply(&event("b", "Pulled", 3, None));
    cache.apply(&event("b", "Started", 4, Some(("Pulled", 3))));
    let got: Vec<(EventType, i64)> = std::iter::from_fn(|| live.try_recv().ok())
        .map(|(e, t)| (t, e.rv))
        .collect();
    assert_eq!(got, [(EventType::Added, 3), (EventType::Modified, 4)]);
    assert_eq!(cache.len(), 5);
    assert!(cache.read().ring.is_empty());
}
