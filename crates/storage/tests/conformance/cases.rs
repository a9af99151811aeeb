//! Conformance cases for reads and writes.

use std::collections::BTreeMap;
use std::sync::Arc;

use storage::{Error, ListOptions, Store};

use super::{bytes, text, Backend};

pub async fn create_get_update_delete(b: &mut impl Backend) {
    let s = b.open().await;
    let r0 = s.current_revision().await.unwrap();

    let created = s.create("/cm/default/a", bytes("v1")).await.unwrap();
    assert_eq!(created.mod_revision, r0 + 1);
    assert_eq!(created.create_revision, r0 + 1);
    assert_eq!(s.current_revision().await.unwrap(), r0 + 1);

    let err = s.create("/cm/default/a", bytes("again")).await.unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err:?}");

    let got = s.get("/cm/default/a").await.unwrap().unwrap();
    assert_eq!(got, created);
    assert_eq!(text(&got.value), "v1");
    assert!(s.get("/cm/default/missing").await.unwrap().is_none());

    let updated = s
        .update("/cm/default/a", bytes("v2"), Some(created.mod_revision))
        .await
        .unwrap();
    assert_eq!(updated.mod_revision, r0 + 2);
    assert_eq!(updated.create_revision, created.create_revision);
    assert_eq!(
        text(&s.get("/cm/default/a").await.unwrap().unwrap().value),
        "v2"
    );

    match s
        .update("/cm/default/a", bytes("stale"), Some(created.mod_revision))
        .await
    {
        Err(Error::Conflict {
            expected, actual, ..
        }) => {
            assert_eq!(expected, created.mod_revision);
            assert_eq!(actual, updated.mod_revision);
        }
        other => panic!("expected Conflict, got {other:?}"),
    }
    let err = s
        .update("/cm/default/missing", bytes("x"), Some(5))
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");
    let err = s
        .update("/cm/default/missing", bytes("x"), None)
        .await
        .unwrap_err();
    assert!(err.is_not_found(), "{err:?}");

    let unconditional = s.update("/cm/default/a", bytes("v3"), None).await.unwrap();
    assert_eq!(unconditional.mod_revision, r0 + 3);

    let err = s
        .delete("/cm/default/a", Some(updated.mod_revision))
        .await
        .unwrap_err();
    assert!(err.is_conflict(), "{err:?}");
    let deleted = s
        .delete("/cm/default/a", Some(unconditional.mod_revision))
        .await
        .unwrap();
    assert_eq!(deleted.revision, r0 + 4);
    assert_eq!(text(&deleted.prev.value), "v3");
    assert_eq!(deleted.prev.mod_revision, unconditional.mod_revision);
    assert!(s.get("/cm/default/a").await.unwrap().is_none());
    assert!(s
        .delete("/cm/default/a", None)
        .await
        .unwrap_err()
        .is_not_found());

    // Re-creating a deleted key starts a new life: new create revision.
    let again = s.create("/cm/default/a", bytes("v4")).await.unwrap();
    assert_eq!(again.create_revision, r0 + 5);
    assert_eq!(s.count("/cm/").await.unwrap(), 1);
}

pub async fn failed_writes_consume_no_revision(b: &mut impl Backend) {
    let s = b.open().await;
    let kv = s.create("/k/a", bytes("1")).await.unwrap();
    let r = s.current_revision().await.unwrap();
    assert_eq!(r, kv.mod_revision);
    let _ = s.create("/k/a", bytes("dup")).await.unwrap_err();
    let _ = s
        .update("/k/a", bytes("x"), Some(kv.mod_revision - 1))
        .await
        .unwrap_err();
    let _ = s.delete("/k/b", None).await.unwrap_err();
    assert_eq!(s.current_revision().await.unwrap(), r);
    let next = s.create("/k/b", bytes("2")).await.unwrap();
    assert_eq!(
        next.mod_revision,
        r + 1,
        "one revision per successful write"
    );
}

/// 16 writers increment one counter with read-modify-write and retry on conflict: no update is lost.
pub async fn concurrent_writers_lose_no_update(b: &mut impl Backend) {
    const WRITERS: usize = 16;
    const INCREMENTS: usize = 40;
    let s = b.open().await;
    let start = s
        .create("/counter/c", bytes("0"))
        .await
        .unwrap()
        .mod_revision;
    let mut tasks = Vec::new();
    for _ in 0..WRITERS {
        let s = s.clone();
        tasks.push(tokio::spawn(async move {
            let mut conflicts = 0;
            for _ in 0..INCREMENTS {
                loop {
                    let kv = s.get("/counter/c").await.unwrap().unwrap();
                    let n: usize = text(&kv.value).parse().unwrap();
                    match s
                        .update(
                            "/counter/c",
                            bytes((n + 1).to_string()),
                            Some(kv.mod_revision),
                        )
                        .await
                    {
                        Ok(_) => break,
                        Err(Error::Conflict { .. }) => conflicts += 1,
                        Err(e) => panic!("unexpected error: {e}"),
                    }
                }
            }
            conflicts
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let kv = s.get("/counter/c").await.unwrap().unwrap();
    assert_eq!(text(&kv.value), (WRITERS * INCREMENTS).to_string());
    assert_eq!(kv.mod_revision, start + (WRITERS * INCREMENTS) as i64);
    assert_eq!(s.current_revision().await.unwrap(), kv.mod_revision);
}

/// A writer bumps keys k000..k199 round-robin, so a consistent snapshot holds values that never increase
/// along key order and differ by at most one; every snapshot re-read at its revision is identical.
pub async fn list_is_a_consistent_snapshot_during_writes(b: &mut impl Backend) {
    const KEYS: usize = 200;
    let s = b.open().await;
    for i in 0..KEYS {
        s.create(&format!("/snap/k{i:03}"), bytes("0"))
            .await
            .unwrap();
    }
    let writer = {
        let s = s.clone();
        tokio::spawn(async move {
            for round in 1..=5 {
                for i in 0..KEYS {
                    s.update(&format!("/snap/k{i:03}"), bytes(round.to_string()), None)
                        .await
                        .unwrap();
                }
            }
        })
    };
    let mut snapshots = 0;
    while !writer.is_finished() || snapshots == 0 {
        let list = s.list(ListOptions::prefix("/snap/")).await.unwrap();
        assert_eq!(list.items.len(), KEYS);
        let values: Vec<u32> = list
            .items
            .iter()
            .map(|kv| text(&kv.value).parse().unwrap())
            .collect();
        let first = values[0];
        assert!(
            values.windows(2).all(|w| w[0] >= w[1]),
            "torn snapshot: {values:?}"
        );
        assert!(
            values.iter().all(|v| first - v <= 1),
            "torn snapshot: {values:?}"
        );
        assert!(list.items.iter().all(|kv| kv.mod_revision <= list.revision));
        // The same snapshot, read again in pages at its revision while writes go on, is identical.
        let mut paged = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = s
                .list(ListOptions {
                    prefix: "/snap/",
                    start_after: after.as_deref(),
                    limit: Some(64),
                    at_revision: Some(list.revision),
                })
                .await
                .unwrap();
            assert_eq!(page.revision, list.revision);
            after = page.items.last().map(|kv| kv.key.clone());
            paged.extend(page.items);
            if !page.more {
                break;
            }
        }
        assert_eq!(paged, list.items);
        snapshots += 1;
    }
    writer.await.unwrap();
    assert!(snapshots > 0);
}

pub async fn pagination_returns_every_key_once(b: &mut impl Backend) {
    const KEYS: usize = 500;
    let s = b.open().await;
    let mut expected = Vec::new();
    for i in 0..KEYS {
        let key = format!("/page/ns{}/obj-{i}", i % 3);
        s.create(&key, bytes(i.to_string())).await.unwrap();
        expected.push(key);
    }
    expected.sort();
    let first = s.list(ListOptions::prefix("/page/")).await.unwrap();
    assert!(!first.more);
    assert_eq!(
        first
            .items
            .iter()
            .map(|kv| kv.key.clone())
            .collect::<Vec<_>>(),
        expected
    );

    // Pages at a fixed revision return the same set even while keys are deleted and added.
    let mut seen = Vec::new();
    let mut after: Option<String> = None;
    let mut pages = 0;
    loop {
        let page = s
            .list(ListOptions {
                prefix: "/page/",
                start_after: after.as_deref(),
                limit: Some(7),
                at_revision: Some(first.revision),
            })
            .await
            .unwrap();
        assert!(page.items.len() <= 7);
        // `count`: the keys from this page's start to the end of the range, at the page's revision.
        assert_eq!(page.count as usize, KEYS - seen.len());
        pages += 1;
        if pages == 3 {
            s.delete(&expected[KEYS - 1], None).await.unwrap();
            s.create("/page/ns0/zzz-new", bytes("new")).await.unwrap();
        }
        after = page.items.last().map(|kv| kv.key.clone());
        seen.extend(page.items.into_iter().map(|kv| kv.key));
        if !page.more {
            break;
        }
    }
    assert_eq!(seen, expected);
    assert_eq!(pages, KEYS.div_ceil(7));

    // A limit above the number of keys returns them all and says nothing remains.
    let page = s
        .list(ListOptions {
            prefix: "/page/ns0/",
            limit: Some(1000),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(!page.more);
    assert_eq!(
        page.items.len(),
        KEYS.div_ceil(3) + 1,
        "ns0 keys plus the one added"
    );
    // A limit equal to the number of keys: all of them, and nothing more.
    let exact = s
        .list(ListOptions {
            prefix: "/page/",
            limit: Some(KEYS),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(exact.items.len(), KEYS);
    assert!(!exact.more);
    assert_eq!(exact.count, KEYS as i64);
    // At the current revision: one key deleted, one added.
    let current = s
        .list(ListOptions {
            prefix: "/page/",
            start_after: Some(&expected[9]),
            limit: Some(5),
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(current.more);
    assert_eq!(current.count as usize, KEYS - 10);
    assert_eq!(s.count("/page/").await.unwrap(), KEYS as i64);
}

pub async fn list_at_past_revision(b: &mut impl Backend) {
    let s = b.open().await;
    s.create("/past/a", bytes("a1")).await.unwrap();
    s.create("/past/b", bytes("b1")).await.unwrap();
    let r1 = s.current_revision().await.unwrap();
    s.update("/past/a", bytes("a2"), None).await.unwrap();
    s.delete("/past/b", None).await.unwrap();
    s.create("/past/c", bytes("c1")).await.unwrap();

    let old = s
        .list(ListOptions {
            at_revision: Some(r1),
            ..ListOptions::prefix("/past/")
        })
        .await
        .unwrap();
    let old: BTreeMap<_, _> = old
        .items
        .iter()
        .map(|kv| (kv.key.as_str(), text(&kv.value)))
        .collect();
    assert_eq!(
        old,
        BTreeMap::from([("/past/a", "a1".into()), ("/past/b", "b1".into())])
    );

    let now = s.list(ListOptions::prefix("/past/")).await.unwrap();
    let now: BTreeMap<_, _> = now
        .items
        .iter()
        .map(|kv| (kv.key.as_str(), text(&kv.value)))
        .collect();
    assert_eq!(
        now,
        BTreeMap::from([("/past/a", "a2".into()), ("/past/c", "c1".into())])
    );

    let future = s.current_revision().await.unwrap() + 10;
    let err = s
        .list(ListOptions {
            at_revision: Some(future),
            ..ListOptions::prefix("/past/")
        })
        .await
        .unwrap_err();
    assert!(matches!(err, Error::FutureRevision { .. }), "{err:?}");
}

pub async fn prefixes_are_isolated(b: &mut impl Backend) {
    let s = b.open().await;
    for key in [
        "/pods/default/a",
        "/pods/kube-system/b",
        "/podtemplates/default/t",
        "/pods",
    ] {
        s.create(key, bytes(key)).await.unwrap();
    }
    let pods = s.list(ListOptions::prefix("/pods/")).await.unwrap();
    let keys: Vec<_> = pods.items.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/pods/default/a", "/pods/kube-system/b"]);
    assert_eq!(s.count("/pods/").await.unwrap(), 2);
    assert_eq!(s.count("/podtemplates/").await.unwrap(), 1);
    let ns = s.list(ListOptions::prefix("/pods/default/")).await.unwrap();
    assert_eq!(ns.items.len(), 1);
    // start_after outside the prefix does not leak keys in.
    let page = s
        .list(ListOptions {
            prefix: "/pods/",
            start_after: Some("/a"),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(page.items.len(), 2);
}

pub async fn reopen_keeps_data_and_revision(b: &mut impl Backend) {
    let s = b.open().await;
    for i in 0..50 {
        s.create(&format!("/re/k{i}"), bytes(format!("v{i}")))
            .await
            .unwrap();
    }
    s.update("/re/k0", bytes("changed"), None).await.unwrap();
    s.delete("/re/k1", None).await.unwrap();
    let before = s.list(ListOptions::prefix("/re/")).await.unwrap();
    let rev = s.current_revision().await.unwrap();

    let s: Arc<dyn Store> = b.reopen(s).await;
    assert_eq!(s.current_revision().await.unwrap(), rev);
    let after = s.list(ListOptions::prefix("/re/")).await.unwrap();
    assert_eq!(after.items, before.items);
    assert_eq!(after.revision, rev);
    let next = s.create("/re/new", bytes("n")).await.unwrap();
    assert_eq!(next.mod_revision, rev + 1);
}
