//! Conformance cases for watch and compaction.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use storage::{Error, EventKind, ListOptions, Revision, Store};

use super::{assert_quiet, bytes, collect_until, text, Backend};

/// What a watcher must see for one revision: kind, key, value, previous value.
type Expected = (EventKind, String, String, Option<String>);

/// `writers` tasks write `total` times: creates, updates and deletes over a few keys each, a quarter of
/// them outside `prefix` (under a sibling prefix sharing its first characters). Returns, per revision,
/// what a watcher on `prefix` must see.
async fn mixed_writes(
    s: &Arc<dyn Store>,
    prefix: &str,
    writers: usize,
    total: usize,
) -> BTreeMap<Revision, Expected> {
    let mut tasks = Vec::new();
    for w in 0..writers {
        let s = s.clone();
        let prefix = prefix.to_string();
        let count = total / writers + usize::from(w < total % writers);
        tasks.push(tokio::spawn(async move {
            let mut live: HashMap<String, String> = HashMap::new();
            let mut expected = Vec::new();
            for j in 0..count {
                let outside = j % 4 == 3;
                let dir = if outside {
                    format!("{}x/", prefix.trim_end_matches('/'))
                } else {
                    prefix.clone()
                };
                let key = format!("{dir}w{w}/k{}", j % 10);
                let value = format!("w{w}-{j}");
                let (rev, event) = match live.get(&key).cloned() {
                    None => {
                        let kv = s.create(&key, bytes(value.clone())).await.unwrap();
                        live.insert(key.clone(), value.clone());
                        (kv.mod_revision, (EventKind::Put, key, value, None))
                    }
                    Some(prev) if j % 7 == 0 => {
                        let d = s.delete(&key, None).await.unwrap();
                        assert_eq!(text(&d.prev.value), prev);
                        live.remove(&key);
                        (
                            d.revision,
                            (EventKind::Delete, key, String::new(), Some(prev)),
                        )
                    }
                    Some(prev) => {
                        let kv = s.update(&key, bytes(value.clone()), None).await.unwrap();
                        live.insert(key.clone(), value.clone());
                        (kv.mod_revision, (EventKind::Put, key, value, Some(prev)))
                    }
                };
                if !outside {
                    expected.push((rev, event));
                }
            }
            expected
        }));
    }
    let mut all = BTreeMap::new();
    for t in tasks {
        for (rev, event) in t.await.unwrap() {
            assert!(
                all.insert(rev, event).is_none(),
                "revision {rev} given twice"
            );
        }
    }
    all
}

pub async fn watch_delivers_every_event_once_in_order(b: &mut impl Backend) {
    let s = b.open().await;
    s.create("/w/before", bytes("old")).await.unwrap();
    let start = s.current_revision().await.unwrap();
    let mut stream = s.watch("/w/", start).await.unwrap();
    let expected = mixed_writes(&s, "/w/", 16, 10_000).await;
    let last = *expected.keys().last().unwrap();
    let events = collect_until(&mut stream, last).await;
    let seen: BTreeMap<Revision, Expected> = events
        .iter()
        .map(|e| {
            let prev = e.prev.as_ref().map(|p| text(&p.value));
            (
                e.revision(),
                (e.kind, e.kv.key.clone(), text(&e.kv.value), prev),
            )
        })
        .collect();
    assert_eq!(events.len(), seen.len(), "an event was delivered twice");
    assert!(
        events.windows(2).all(|w| w[0].revision() < w[1].revision()),
        "events out of order"
    );
    assert_eq!(seen.len(), expected.len());
    assert_eq!(seen, expected);
    assert_quiet(&mut stream).await;
}

pub async fn watch_replays_history_then_follows(b: &mut impl Backend) {
    let s = b.open().await;
    let mut resume_at = 0;
    for i in 0..100 {
        let key = format!("/h/k{}", i % 10);
        if i < 10 {
            s.create(&key, bytes(format!("v{i}"))).await.unwrap();
        } else {
            s.update(&key, bytes(format!("v{i}")), None).await.unwrap();
        }
        if i == 29 {
            resume_at = s.current_revision().await.unwrap();
        }
    }
    s.delete("/h/k3", None).await.unwrap();
    let mut stream = s.watch("/h/", resume_at).await.unwrap();
    let now = s.current_revision().await.unwrap();
    let replayed = collect_until(&mut stream, now).await;
    assert_eq!(replayed.len(), 71);
    assert_eq!(replayed[0].revision(), resume_at + 1);
    assert_eq!(text(&replayed[0].kv.value), "v30");
    assert_eq!(text(&replayed[0].prev.as_ref().unwrap().value), "v20");
    let delete = replayed.last().unwrap();
    assert_eq!(delete.kind, EventKind::Delete);
    assert_eq!(delete.kv.key, "/h/k3");
    assert_eq!(text(&delete.prev.as_ref().unwrap().value), "v93");
    // Then live events follow without a gap.
    let kv = s.create("/h/live", bytes("live")).await.unwrap();
    let live = collect_until(&mut stream, kv.mod_revision).await;
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].kv, kv);
}

/// 100 watchers on one prefix across 10,000 writes: half start before the writes, half join midway from
/// the same starting revision (so they replay), and every one sees every event once, in order.
pub async fn hundred_watchers_see_everything(b: &mut impl Backend) {
    const WATCHERS: usize = 100;
    let s = b.open().await;
    let start = s.current_revision().await.unwrap();
    let (last_tx, last_rx) = tokio::sync::watch::channel(0);
    let spawn_watcher = |stream: storage::WatchStream| {
        let mut last_rx = last_rx.clone();
        tokio::spawn(async move {
            let mut stream = stream;
            let mut revisions = Vec::new();
            loop {
                let target = *last_rx.borrow();
                if target > 0 && revisions.last().is_some_and(|r| *r >= target) {
                    return revisions;
                }
                tokio::select! {
                    item = stream.next() => {
                        let event = item.expect("stream ended").expect("watch error");
                        revisions.push(event.revision());
                    }
                    _ = last_rx.changed() => {}
                    _ = tokio::time::sleep(Duration::from_secs(60)) => panic!("watcher stalled"),
                }
            }
        })
    };
    let mut watchers = Vec::new();
    for _ in 0..WATCHERS / 2 {
        watchers.push(spawn_watcher(s.watch("/fan/", start).await.unwrap()));
    }
    let writes = {
        let s = s.clone();
        tokio::spawn(async move { mixed_writes(&s, "/fan/", 16, 10_000).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    for _ in 0..WATCHERS / 2 {
        watchers.push(spawn_watcher(s.watch("/fan/", start).await.unwrap()));
    }
    let expected: Vec<Revision> = writes.await.unwrap().into_keys().collect();
    last_tx.send_replace(*expected.last().unwrap());
    for w in watchers {
        assert_eq!(w.await.unwrap(), expected);
    }
}

pub async fn watch_from_now_sees_only_new_events(b: &mut impl Backend) {
    let s = b.open().await;
    s.create("/now/a", bytes("a")).await.unwrap();
    let mut stream = s.watch("/now/", 0).await.unwrap();
    assert_quiet(&mut stream).await;
    let updated = s.update("/now/a", bytes("a2"), None).await.unwrap();
    let deleted = s.delete("/now/a", None).await.unwrap();
    let events = collect_until(&mut stream, deleted.revision).await;
    assert_eq!(events.len(), 2);
    assert_eq!(events[0].kind, EventKind::Put);
    assert_eq!(events[0].kv, updated);
    assert_eq!(events[1].kind, EventKind::Delete);
    assert_eq!(events[1].kv.key, "/now/a");
    assert!(events[1].kv.value.is_empty());
    assert_eq!(events[1].kv.mod_revision, deleted.revision);
    assert_eq!(events[1].prev.as_ref(), Some(&updated));
}

async fn expect_compacted(s: &Arc<dyn Store>, prefix: &str, from: Revision) {
    match s.watch(prefix, from).await {
        Err(Error::Compacted { .. }) => {}
        Err(e) => panic!("expected Compacted, got {e}"),
        Ok(mut stream) => {
            let first = tokio::time::timeout(Duration::from_secs(10), stream.next())
                .await
                .expect("no item from a compacted watch");
            assert!(
                matches!(first, Some(Err(Error::Compacted { .. }))),
                "expected Compacted, got {first:?}"
            );
        }
    }
}

pub async fn compaction_fails_old_revisions_and_keeps_current_state(b: &mut impl Backend) {
    let s = b.open().await;
    s.create("/c/a", bytes("a1")).await.unwrap();
    s.create("/c/b", bytes("b1")).await.unwrap();
    for i in 2..=4 {
        s.update("/c/a", bytes(format!("a{i}")), None)
            .await
            .unwrap();
    }
    s.delete("/c/b", None).await.unwrap();
    s.create("/c/untouched", bytes("u")).await.unwrap();
    let at = s.current_revision().await.unwrap();
    s.update("/c/a", bytes("a5"), None).await.unwrap();
    s.create("/c/b", bytes("b2")).await.unwrap();
    s.compact(at).await.unwrap();
    // Compacting again, or to an older revision, is harmless.
    s.compact(at).await.unwrap();
    s.compact(at - 2).await.unwrap();
    let err = s
        .compact(s.current_revision().await.unwrap() + 100)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::FutureRevision { .. }), "{err:?}");

    expect_compacted(&s, "/c/", at - 2).await;
    let err = s
        .list(ListOptions {
            at_revision: Some(at - 1),
            ..ListOptions::prefix("/c/")
        })
        .await
        .unwrap_err();
    assert!(err.is_compacted(), "{err:?}");

    let snapshot = s
        .list(ListOptions {
            at_revision: Some(at),
            ..ListOptions::prefix("/c/")
        })
        .await
        .unwrap();
    let state: BTreeMap<_, _> = snapshot
        .items
        .iter()
        .map(|kv| (kv.key.as_str(), text(&kv.value)))
        .collect();
    assert_eq!(
        state,
        BTreeMap::from([("/c/a", "a4".into()), ("/c/untouched", "u".into())])
    );

    let mut stream = s.watch("/c/", at).await.unwrap();
    let now = s.current_revision().await.unwrap();
    let events = collect_until(&mut stream, now).await;
    assert_eq!(events.len(), 2);
    assert_eq!(text(&events[0].kv.value), "a5");
    assert_eq!(text(&events[0].prev.as_ref().unwrap().value), "a4");
    assert_eq!(text(&events[1].kv.value), "b2");
    assert!(events[1].prev.is_none());

    let current = s.list(ListOptions::prefix("/c/")).await.unwrap();
    assert_eq!(current.items.len(), 3);
    assert_eq!(
        text(&s.get("/c/untouched").await.unwrap().unwrap().value),
        "u"
    );
}

/// Progress notifications: a watch on one prefix, asked for progress, reports a revision at least the
/// store's current one although the writes that moved it were under another prefix, after every event
/// of its own prefix and before any later one.
pub async fn progress_reports_revisions_moved_elsewhere(b: &mut impl Backend) {
    let s = b.open().await;
    s.create("/mine/a", bytes("a")).await.unwrap();
    let start = s.current_revision().await.unwrap();
    let storage::ProgressWatch {
        mut stream,
        requester,
    } = s.watch_progress("/mine/", start).await.unwrap();
    let requester = requester.expect("the backend reports progress");
    for i in 0..5 {
        s.create(&format!("/other/{i}"), bytes("x")).await.unwrap();
    }
    let mine = s.create("/mine/b", bytes("b")).await.unwrap();
    for i in 5..10 {
        s.create(&format!("/other/{i}"), bytes("x")).await.unwrap();
    }
    let target = s.current_revision().await.unwrap();
    assert!(target > mine.mod_revision);
    // The prefix's event first, so none is in flight when progress is asked for (etcd before 3.4.24
    // may answer ahead of one).
    let first = tokio::time::timeout(Duration::from_secs(10), stream.next())
        .await
        .expect("no event within 10 s")
        .expect("stream ended")
        .expect("watch error");
    let mut events = match first {
        storage::WatchItem::Event(event) => vec![event],
        other => panic!("progress before it was asked for: {other:?}"),
    };
    let progress = loop {
        requester.request();
        let item = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("no progress within 10 s")
            .expect("stream ended")
            .expect("watch error");
        match item {
            storage::WatchItem::Event(event) => events.push(event),
            // An answer to an earlier request may be older; ask again.
            storage::WatchItem::Progress(revision) if revision >= target => break revision,
            storage::WatchItem::Progress(_) => {}
        }
    };
    assert_eq!(
        events.len(),
        1,
        "only the watched prefix's event: {events:?}"
    );
    assert_eq!(events[0].kv, mine);
    assert!(progress >= target);
    // Later writes come as events with revisions past the progress reported.
    let later = s.create("/mine/c", bytes("c")).await.unwrap();
    loop {
        let item = tokio::time::timeout(Duration::from_secs(10), stream.next())
            .await
            .expect("no event within 10 s")
            .expect("stream ended")
            .expect("watch error");
        if let storage::WatchItem::Event(event) = item {
            assert_eq!(event.kv, later);
            assert!(event.revision() > progress);
            break;
        }
    }
}

/// A store reports the revision it was compacted to, to a reader that opened it after the
/// compaction too (an API server starting after another one, or an operator, compacted it).
pub async fn compacted_revision_is_known_after_reopening(b: &mut impl Backend) {
    let s = b.open().await;
    assert_eq!(s.compacted_to().await.unwrap(), 0, "nothing compacted yet");
    for i in 0..4 {
        s.create(&format!("/r/{i}"), bytes("v")).await.unwrap();
    }
    let at = s.current_revision().await.unwrap();
    s.update("/r/0", bytes("w"), None).await.unwrap();
    s.compact(at).await.unwrap();
    assert_eq!(s.compacted_to().await.unwrap(), at);
    let s = b.reopen(s).await;
    assert_eq!(s.compacted_to().await.unwrap(), at);
    // What it reports is what a watch from just before it is refused with.
    expect_compacted(&s, "/r/", at - 2).await;
}
