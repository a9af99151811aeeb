//! Focused tests of the etcd backend against a real etcd (see `support/etcd_server.rs`). The shared
//! conformance suite covers the full `Store` contract for both backends; these pin etcd-specific
//! behaviour: key prefixing, revisions taken from etcd, the error mapping, and watch stream handling.

#[path = "support/etcd_server.rs"]
mod etcd_server;

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use etcd_server::EtcdServer;
use futures::StreamExt;
use storage::etcd::{EtcdStore, DEFAULT_PREFIX};
use storage::{Error, Event, EventKind, ListOptions, Store, WatchStream};

const WAIT: Duration = Duration::from_secs(10);

async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    tokio::time::timeout(WAIT, future)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

async fn connect(server: &EtcdServer) -> EtcdStore {
    bounded(
        "connect",
        EtcdStore::connect(std::slice::from_ref(&server.endpoint), DEFAULT_PREFIX),
    )
    .await
    .expect("connect to etcd")
}

async fn next_event(watch: &mut WatchStream) -> Event {
    bounded("next watch event", watch.next())
        .await
        .expect("watch stream ended")
        .expect("watch error")
}

fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

#[tokio::test]
async fn create_get_update_delete() {
    let server = etcd_server::start();
    let store = connect(&server).await;
    let start = store.current_revision().await.unwrap();
    assert_eq!(start, 1, "an empty etcd is at revision 1");

    let created = store.create("/pods/default/a", b("v1")).await.unwrap();
    assert_eq!(created.key, "/pods/default/a");
    assert_eq!(created.create_revision, 2);
    assert_eq!(created.mod_revision, 2);
    assert!(matches!(
        store.create("/pods/default/a", b("again")).await,
        Err(Error::AlreadyExists { .. })
    ));
    assert_eq!(
        store.get("/pods/default/a").await.unwrap(),
        Some(created.clone())
    );
    assert_eq!(store.get("/pods/default/missing").await.unwrap(), None);

    // The key lives under the prefix in etcd itself.
    let mut raw = etcd_client::Client::connect([server.endpoint.as_str()], None)
        .await
        .unwrap();
    let resp = raw.get("/registry/pods/default/a", None).await.unwrap();
    assert_eq!(resp.kvs().len(), 1);
    assert_eq!(resp.kvs()[0].value(), b"v1");

    match store.update("/pods/default/a", b("v2"), Some(1)).await {
        Err(Error::Conflict {
            key,
            expected,
            actual,
        }) => assert_eq!((key.as_str(), expected, actual), ("/pods/default/a", 1, 2)),
        other => panic!("expected a conflict, got {other:?}"),
    }
    let updated = store
        .update("/pods/default/a", b("v2"), Some(2))
        .await
        .unwrap();
    assert_eq!((updated.create_revision, updated.mod_revision), (2, 3));
    assert_eq!(updated.value, b("v2"));
    let updated = store
        .update("/pods/default/a", b("v3"), None)
        .await
        .unwrap();
    assert_eq!((updated.create_revision, updated.mod_revision), (2, 4));

    for expected in [None, Some(0), Some(4)] {
        assert!(matches!(
            store
                .update("/pods/default/missing", b("x"), expected)
                .await,
            Err(Error::NotFound { .. })
        ));
    }
    assert_eq!(store.get("/pods/default/missing").await.unwrap(), None);

    assert!(store
        .delete("/pods/default/a", Some(3))
        .await
        .unwrap_err()
        .is_conflict());
    let deleted = store.delete("/pods/default/a", Some(4)).await.unwrap();
    assert_eq!(deleted.revision, 5);
    assert_eq!(deleted.prev, updated);
    assert_eq!(store.get("/pods/default/a").await.unwrap(), None);
    assert!(store
        .delete("/pods/default/a", None)
        .await
        .unwrap_err()
        .is_not_found());

    // Re-created keys get a new create revision.
    let again = store.create("/pods/default/a", b("v4")).await.unwrap();
    assert_eq!((again.create_revision, again.mod_revision), (6, 6));
    assert_eq!(store.current_revision().await.unwrap(), 6);
}

#[tokio::test]
async fn list_pages_at_a_snapshot() {
    let server = etcd_server::start();
    let store = connect(&server).await;
    for name in ["a", "b", "c", "d", "e"] {
        store
            .create(&format!("/pods/ns/{name}"), b(name))
            .await
            .unwrap();
    }
    // Neighbours that a sloppy range would include.
    store.create("/pods/ns2/x", b("x")).await.unwrap();
    store.create("/pods/n", b("x")).await.unwrap();
    store.create("/podsx", b("x")).await.unwrap();
    let snapshot = store.current_revision().await.unwrap();

    let page1 = store
        .list(ListOptions {
            prefix: "/pods/ns/",
            limit: Some(2),
            ..Default::default()
        })
        .await
        .unwrap();
    let keys =
        |items: &[storage::KeyValue]| items.iter().map(|kv| kv.key.clone()).collect::<Vec<_>>();
    assert_eq!(keys(&page1.items), ["/pods/ns/a", "/pods/ns/b"]);
    assert!(page1.more);
    assert_eq!(page1.revision, snapshot);

    // Writes after the first page do not show in later pages read at its revision.
    store.delete("/pods/ns/c", None).await.unwrap();
    store.create("/pods/ns/bb", b("bb")).await.unwrap();

    let page2 = store
        .list(ListOptions {
            prefix: "/pods/ns/",
            start_after: Some("/pods/ns/b"),
            limit: Some(2),
            at_revision: Some(page1.revision),
        })
        .await
        .unwrap();
    assert_eq!(keys(&page2.items), ["/pods/ns/c", "/pods/ns/d"]);
    assert!(page2.more);
    assert_eq!(page2.revision, snapshot);
    let page3 = store
        .list(ListOptions {
            prefix: "/pods/ns/",
            start_after: Some("/pods/ns/d"),
            limit: Some(2),
            at_revision: Some(page1.revision),
        })
        .await
        .unwrap();
    assert_eq!(keys(&page3.items), ["/pods/ns/e"]);
    assert!(!page3.more);

    // The current state, unlimited (0 means no limit).
    let now = store
        .list(ListOptions {
            prefix: "/pods/ns/",
            limit: Some(0),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(
        keys(&now.items),
        [
            "/pods/ns/a",
            "/pods/ns/b",
            "/pods/ns/bb",
            "/pods/ns/d",
            "/pods/ns/e"
        ]
    );
    assert_eq!(now.revision, store.current_revision().await.unwrap());
    assert!(!now.more);

    // start_after past the range, or before it.
    let past = store
        .list(ListOptions {
            prefix: "/pods/ns/",
            start_after: Some("/pods/zzz"),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(past.items.is_empty() && !past.more);
    let before = store
        .list(ListOptions {
            prefix: "/pods/ns/",
            start_after: Some("/a"),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(before.items.len(), 5);

    assert_eq!(store.count("/pods/ns/").await.unwrap(), 5);
    assert_eq!(store.count("/pods/").await.unwrap(), 7);
    assert_eq!(store.count("/nothing/").await.unwrap(), 0);

    let current = store.current_revision().await.unwrap();
    match store
        .list(ListOptions {
            prefix: "/pods/",
            at_revision: Some(current + 10),
            ..Default::default()
        })
        .await
    {
        Err(Error::FutureRevision {
            requested,
            current: c,
        }) => {
            assert_eq!((requested, c), (current + 10, current))
        }
        other => panic!("expected FutureRevision, got {other:?}"),
    }
}

#[tokio::test]
async fn prefixes_isolate_stores() {
    let server = etcd_server::start();
    let endpoints = [server.endpoint.clone()];
    let one = EtcdStore::connect(&endpoints, "/one").await.unwrap();
    // A trailing slash is ignored: keys already start with one.
    let two = EtcdStore::connect(&endpoints, "/two/").await.unwrap();
    one.create("/pods/a", b("1")).await.unwrap();
    two.create("/pods/a", b("2")).await.unwrap();
    assert_eq!(one.get("/pods/a").await.unwrap().unwrap().value, b("1"));
    let listed = two.list(ListOptions::prefix("/")).await.unwrap();
    assert_eq!(listed.items.len(), 1);
    assert_eq!(listed.items[0].key, "/pods/a");
    assert_eq!(listed.items[0].value, b("2"));
}

#[tokio::test]
async fn watch_delivers_ordered_events_with_previous_values() {
    let server = etcd_server::start();
    let store = connect(&server).await;
    let before = store.current_revision().await.unwrap();

    // From now: writes right after watch() returns are seen.
    let mut watch = store.watch("/pods/", 0).await.unwrap();
    let a1 = store.create("/pods/a", b("a1")).await.unwrap();
    store.create("/services/s", b("s")).await.unwrap(); // outside the prefix
    let a2 = store.update("/pods/a", b("a2"), None).await.unwrap();
    let b1 = store.create("/pods/b", b("b1")).await.unwrap();
    let deleted = store.delete("/pods/a", None).await.unwrap();

    let expected = vec![
        Event {
            kind: EventKind::Put,
            kv: a1.clone(),
            prev: None,
        },
        Event {
            kind: EventKind::Put,
            kv: a2.clone(),
            prev: Some(a1.clone()),
        },
        Event {
            kind: EventKind::Put,
            kv: b1.clone(),
            prev: None,
        },
        Event {
            kind: EventKind::Delete,
            kv: storage::KeyValue {
                key: "/pods/a".into(),
                value: Bytes::new(),
                create_revision: a1.create_revision,
                mod_revision: deleted.revision,
            },
            prev: Some(a2.clone()),
        },
    ];
    for want in &expected {
        assert_eq!(&next_event(&mut watch).await, want);
    }
    // Nothing else arrives (the /services write was filtered by etcd).
    assert!(
        tokio::time::timeout(Duration::from_millis(300), watch.next())
            .await
            .is_err(),
        "unexpected extra event"
    );

    // Replay from history: etcd sends these in one response; they are flattened in order, and only
    // revisions after from_revision are delivered.
    let mut replay = store.watch("/pods/", before).await.unwrap();
    for want in &expected {
        assert_eq!(&next_event(&mut replay).await, want);
    }
    let mut replay = store.watch("/pods/", a2.mod_revision).await.unwrap();
    assert_eq!(&next_event(&mut replay).await, &expected[2]);
    assert_eq!(&next_event(&mut replay).await, &expected[3]);

    // A re-creation after a delete has no previous value.
    let a3 = store.create("/pods/a", b("a3")).await.unwrap();
    let event = next_event(&mut replay).await;
    assert_eq!(event.kv, a3);
    assert_eq!(event.prev, None);
}

#[tokio::test]
async fn compaction_fails_old_reads_and_watches() {
    let server = etcd_server::start();
    let store = connect(&server).await;
    let first = store.create("/pods/a", b("1")).await.unwrap().mod_revision;
    store.update("/pods/a", b("2"), None).await.unwrap();
    store.update("/pods/a", b("3"), None).await.unwrap();
    let compact_at = store.current_revision().await.unwrap();
    store.compact(compact_at).await.unwrap();

    match store
        .list(ListOptions {
            prefix: "/pods/",
            at_revision: Some(first),
            ..Default::default()
        })
        .await
    {
        Err(Error::Compacted {
            requested,
            compacted,
        }) => assert_eq!((requested, compacted), (first, compact_at)),
        other => panic!("expected Compacted, got {other:?}"),
    }
    // The compaction revision itself is still readable; current values are kept.
    let at = store
        .list(ListOptions {
            prefix: "/pods/",
            at_revision: Some(compact_at),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(at.items[0].value, b("3"));

    // A watch from a compacted revision fails, from the call or as its first and last item.
    match store.watch("/pods/", first).await {
        Err(e) => assert!(e.is_compacted(), "{e:?}"),
        Ok(mut watch) => {
            match bounded("compacted watch", watch.next()).await {
                Some(Err(Error::Compacted {
                    requested,
                    compacted,
                })) => assert_eq!((requested, compacted), (first, compact_at)),
                other => panic!("expected Compacted, got {other:?}"),
            }
            assert!(bounded("end of compacted watch", watch.next())
                .await
                .is_none());
        }
    }
    // etcd needs history only after from_revision, so watching from just before the compaction works.
    let mut watch = store.watch("/pods/", compact_at - 1).await.unwrap();
    let event = next_event(&mut watch).await;
    assert_eq!(event.revision(), compact_at);

    // Compacting again, or to an older revision, is fine; a future revision is not.
    store.compact(compact_at).await.unwrap();
    store.compact(first).await.unwrap();
    match store.compact(compact_at + 5).await {
        Err(Error::FutureRevision { requested, current }) => {
            assert_eq!((requested, current), (compact_at + 5, compact_at))
        }
        other => panic!("expected FutureRevision, got {other:?}"),
    }
}

#[tokio::test]
async fn dropping_a_watch_cancels_the_etcd_watcher() {
    const WATCHERS: &str = "etcd_debugging_mvcc_watcher_total";
    let server = etcd_server::start();
    let store = connect(&server).await;
    assert_eq!(server.metric(WATCHERS), Some(0.0));
    let watch = store.watch("/pods/", 0).await.unwrap();
    assert_eq!(server.metric(WATCHERS), Some(1.0));
    drop(watch);
    bounded("etcd cancels the watcher", async {
        while server.metric(WATCHERS) != Some(0.0) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

#[tokio::test]
async fn large_lists_and_watch_replays_exceed_grpc_default_limit() {
    // gRPC's default 4 MiB receive limit would fail these; upstream raises it too.
    let server = etcd_server::start();
    let store = connect(&server).await;
    let before = store.current_revision().await.unwrap();
    let value = Bytes::from(vec![b'x'; 1 << 20]);
    for i in 0..6 {
        store
            .create(&format!("/big/{i}"), value.clone())
            .await
            .unwrap();
    }
    let listed = store.list(ListOptions::prefix("/big/")).await.unwrap();
    assert_eq!(listed.items.len(), 6);
    let mut watch = store.watch("/big/", before).await.unwrap();
    for i in 0..6 {
        assert_eq!(next_event(&mut watch).await.kv.key, format!("/big/{i}"));
    }
}

/// Upstream's coordinated compaction (`etcd3/compact.go`): several servers on one etcd run the
/// compactor, and per round only the one whose view of `compact_rev_key` is current compacts; the
/// others learn the new round count and the revision compacted to.
#[tokio::test]
async fn servers_on_one_etcd_take_turns_compacting() {
    use storage::CompactionState;
    let server = etcd_server::start();
    let sa = connect(&server).await;
    let sb = connect(&server).await;
    sa.create("/k/x", b("1")).await.unwrap();

    // First round of both: A records the bootstrap (no compaction); B finds the round taken.
    let a1 = sa.compact_round(CompactionState::default()).await.unwrap();
    assert_eq!(a1.compacted, None);
    assert_eq!(a1.next.epoch, 1);
    let b1 = sb.compact_round(CompactionState::default()).await.unwrap();
    assert_eq!(
        b1.compacted, None,
        "B skipped: the record holds no compaction yet"
    );
    assert_eq!(b1.next.epoch, 1, "B caught up with the round count");

    for i in 0..3 {
        sa.update("/k/x", b(&format!("v{i}")), None).await.unwrap();
    }
    // Second round: B goes first this time and compacts to the revision it read in round one.
    let b2 = sb.compact_round(b1.next).await.unwrap();
    assert_eq!(b2.compacted, Some(b1.next.revision));
    assert_eq!(b2.next.epoch, 2);
    // A's view is one round old: it skips, and learns what B compacted to.
    let a2 = sa.compact_round(a1.next).await.unwrap();
    assert_eq!(
        a2.compacted,
        Some(b1.next.revision),
        "A learns B's compaction"
    );
    assert_eq!(a2.next.epoch, 2);
    // History before B's revision is gone for both.
    // Compaction at R keeps R: a watch whose first revision is R - 1 is refused.
    match sa.watch("/k/", b1.next.revision - 2).await {
        Err(Error::Compacted { compacted, .. }) => assert_eq!(compacted, b1.next.revision),
        Err(e) => panic!("unexpected error {e}"),
        Ok(mut stream) => match bounded("compacted watch", stream.next()).await {
            Some(Err(Error::Compacted { .. })) => {}
            other => panic!("expected Compacted, got {other:?}"),
        },
    }
    // The record is upstream's: its version counts the rounds, its value is the revision.
    let raw = etcd_client::Client::connect([server.endpoint.as_str()], None)
        .await
        .unwrap()
        .get(storage::etcd::COMPACT_REV_KEY, None)
        .await
        .unwrap();
    let kv = &raw.kvs()[0];
    assert_eq!(kv.version(), 2);
    assert_eq!(kv.value_str().unwrap(), b1.next.revision.to_string());
}

/// The compaction loop with two stores on one etcd: one compaction per round in all.
#[tokio::test]
async fn two_compactors_on_one_etcd_compact_once_per_round() {
    let server = etcd_server::start();
    let sa: std::sync::Arc<dyn Store> = std::sync::Arc::new(connect(&server).await);
    let sb: std::sync::Arc<dyn Store> = std::sync::Arc::new(connect(&server).await);
    let compactions = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let spawn = |store: std::sync::Arc<dyn Store>, name: &'static str| {
        let compactions = compactions.clone();
        storage::compaction::spawn_auto_compaction_with(
            store,
            Duration::from_millis(300),
            move |revision| compactions.lock().unwrap().push((name, revision)),
        )
    };
    let ta = spawn(sa.clone(), "a");
    let tb = spawn(sb.clone(), "b");
    let deadline = tokio::time::Instant::now() + WAIT;
    let mut i = 0;
    while compactions.lock().unwrap().len() < 6 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "too few compactions"
        );
        sa.create(&format!("/k/{i}"), b("v")).await.unwrap();
        i += 1;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    ta.abort();
    tb.abort();
    // Each round writes the record once and its winner compacts once; without the turns each server
    // would compact on every tick of its own. etcd counts the compactions it ran.
    let raw = etcd_client::Client::connect([server.endpoint.as_str()], None)
        .await
        .unwrap()
        .get(storage::etcd::COMPACT_REV_KEY, None)
        .await
        .unwrap();
    let rounds = raw.kvs()[0].version() as f64;
    let ran = server
        .metric("etcd_debugging_mvcc_db_compaction_total_duration_milliseconds_count")
        .expect("etcd's compaction count");
    let seen = compactions.lock().unwrap().clone();
    assert!(ran >= 3.0, "etcd ran {ran} compactions: {seen:?}");
    // The bootstrap round compacts nothing; one more may be under way as the tasks were stopped.
    assert!(
        ran <= rounds,
        "etcd ran {ran} compactions in {rounds} rounds: {seen:?}"
    );
}
