//! Shared informer unit tests on the scripted lister-watcher of the reflector tests.

use std::sync::Mutex;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::WatchEvent;
use kube::core::Status;

use super::*;
use crate::informer::handlers::EventHandlerFuncs;
use crate::informer::reflector::tests::{cm, page, FakeLw};

fn rv(o: &ConfigMap) -> String {
    o.metadata.resource_version.clone().unwrap_or_default()
}

/// A handler that writes one line per call.
fn recorder() -> (Arc<Mutex<Vec<String>>>, EventHandlerFuncs<ConfigMap>) {
    let log = Arc::new(Mutex::new(Vec::new()));
    let (a, u, d) = (log.clone(), log.clone(), log.clone());
    let h = EventHandlerFuncs::new()
        .on_add(move |o: &Arc<ConfigMap>, initial| {
            a.lock().unwrap().push(format!(
                "add {}@{}{}",
                object_key(o.as_ref()),
                rv(o),
                if initial { " initial" } else { "" }
            ))
        })
        .on_update(move |old: &Arc<ConfigMap>, new: &Arc<ConfigMap>| {
            u.lock().unwrap().push(format!(
                "update {}@{}->{}",
                object_key(new.as_ref()),
                rv(old),
                rv(new)
            ))
        })
        .on_delete(move |gone: &DeletedObject<ConfigMap>| {
            d.lock().unwrap().push(format!(
                "delete {}@{}{}",
                gone.key(),
                rv(gone.object()),
                if gone.is_tombstone() {
                    " tombstone"
                } else {
                    ""
                }
            ))
        });
    (log, h)
}

async fn wait_until(what: &str, f: impl Fn() -> bool) {
    let ok = tokio::time::timeout(Duration::from_secs(10), async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(ok.is_ok(), "timed out waiting for {what}");
}

fn fast() -> InformerConfig {
    InformerConfig::new().backoff(Duration::from_millis(1), Duration::from_millis(5))
}

#[tokio::test]
async fn informer_relist_delivers_updates_adds_and_tombstones() {
    let lw = Arc::new(FakeLw::default());
    lw.list(Ok(page(vec![cm("a", 1), cm("b", 2)], 5, None)))
        .list(Ok(page(vec![cm("a", 6), cm("c", 8)], 9, None)))
        .watch(Ok(vec![
            Ok(WatchEvent::Modified(cm("a", 6))),
            Ok(WatchEvent::Error(Box::new(
                Status::failure("too old", "Expired").with_code(410),
            ))),
        ]));
    let informer = SharedInformer::new(lw.clone(), fast());
    let (log, handler) = recorder();
    let reg = informer.add_event_handler(handler);
    assert!(!informer.has_synced());
    informer.start();
    tokio::time::timeout(Duration::from_secs(10), informer.wait_for_sync())
        .await
        .expect("synced");
    assert!(reg.has_synced());
    wait_until("relist", || log.lock().unwrap().len() >= 5).await;
    assert_eq!(
        *log.lock().unwrap(),
        vec![
            "add default/a@1 initial",
            "add default/b@2 initial",
            "update default/a@1->6",
            // The relist: a unchanged (not re-delivered), c new, b vanished.
            "add default/c@8",
            "delete default/b@2 tombstone",
        ]
    );
    assert_eq!(informer.store().list_keys(), vec!["default/a", "default/c"]);
    assert_eq!(informer.last_sync_resource_version().as_deref(), Some("9"));
    informer.stop();
}

#[tokio::test]
async fn informer_late_handler_gets_synthetic_adds_then_changes() {
    let lw = Arc::new(FakeLw::default());
    lw.list(Ok(page(vec![cm("b", 2), cm("a", 1)], 5, None)));
    let informer = SharedInformer::new(lw.clone(), fast());
    informer.start();
    tokio::time::timeout(Duration::from_secs(10), informer.wait_for_sync())
        .await
        .expect("synced without handlers");
    let (log, handler) = recorder();
    let reg = informer.add_event_handler(handler);
    tokio::time::timeout(Duration::from_secs(10), reg.wait_synced())
        .await
        .expect("late handler synced");
    assert_eq!(
        *log.lock().unwrap(),
        vec!["add default/a@1 initial", "add default/b@2 initial"]
    );
    // A change after registration reaches it too.
    informer.apply(Delta::Deleted(cm("a", 7)));
    wait_until("delete", || log.lock().unwrap().len() == 3).await;
    assert_eq!(log.lock().unwrap()[2], "delete default/a@7");
    assert!(informer.remove_event_handler(&reg));
    assert!(!informer.remove_event_handler(&reg));
    informer.stop();
}

#[tokio::test]
async fn informer_resync_redelivers_cached_objects_as_updates() {
    let lw = Arc::new(FakeLw::default());
    lw.list(Ok(page(vec![cm("a", 1)], 5, None)));
    let informer = SharedInformer::new(lw.clone(), fast().resync(Duration::from_millis(10)));
    assert_eq!(informer.resync_period(), MINIMUM_RESYNC_PERIOD);
    let (log, handler) = recorder();
    informer.add_event_handler(handler);
    let (quiet, no_resync) = recorder();
    informer.add_event_handler_with_resync(no_resync, Duration::ZERO);
    informer.start();
    wait_until("a resync", || log.lock().unwrap().len() >= 2).await;
    assert_eq!(
        log.lock().unwrap()[..2],
        ["add default/a@1 initial", "update default/a@1->1"]
    );
    assert_eq!(*quiet.lock().unwrap(), vec!["add default/a@1 initial"]);
    informer.stop();
}

#[tokio::test]
async fn informer_handler_panic_does_not_stop_delivery() {
    let lw = Arc::new(FakeLw::default());
    lw.list(Ok(page(vec![cm("a", 1), cm("b", 2)], 5, None)));
    let informer = SharedInformer::new(lw, fast());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    informer.add_event_handler(
        EventHandlerFuncs::new().on_add(move |o: &Arc<ConfigMap>, _| {
            let key = object_key(o.as_ref());
            if key == "default/a" {
                panic!("handler bug");
            }
            s.lock().unwrap().push(key);
        }),
    );
    informer.start();
    tokio::time::timeout(Duration::from_secs(10), informer.wait_for_sync())
        .await
        .expect("synced");
    assert_eq!(*seen.lock().unwrap(), vec!["default/b"]);
    informer.stop();
}

#[tokio::test]
async fn informer_transform_applies_to_listed_and_watched_objects_before_caching() {
    let lw = Arc::new(FakeLw::default());
    lw.list(Ok(page(vec![cm("a", 1)], 5, None)))
        .watch(Ok(vec![Ok(WatchEvent::Added(cm("b", 6)))]));
    let informer = SharedInformer::new(lw, fast());
    let mark: TransformFunc<ConfigMap> = Arc::new(|o: &mut ConfigMap| {
        o.data = Some([("slim".to_string(), "yes".to_string())].into());
    });
    informer
        .set_transform(mark.clone())
        .expect("first transform");
    assert_eq!(
        informer.set_transform(mark.clone()),
        Err(TransformError::AlreadySet)
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    informer.add_event_handler(
        EventHandlerFuncs::new().on_add(move |o: &Arc<ConfigMap>, _| {
            let slim = o.data.as_ref().and_then(|d| d.get("slim")).cloned();
            s.lock().unwrap().push(slim);
        }),
    );
    informer.start();
    wait_until("both adds", || seen.lock().unwrap().len() == 2).await;
    assert!(seen
        .lock()
        .unwrap()
        .iter()
        .all(|v| v.as_deref() == Some("yes")));
    let cached = informer.store().get("default/b").expect("cached");
    assert_eq!(cached.data.as_ref().map(|d| d.len()), Some(1));
    // Objects may already be cached untransformed: refused once started.
    assert_eq!(
        informer.set_transform(mark),
        Err(TransformError::AlreadyStarted)
    );
    informer.stop();
}
