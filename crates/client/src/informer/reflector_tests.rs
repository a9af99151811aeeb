//! Reflector unit tests on a scripted lister-watcher: resume points, bookmarks, 410 relists, paging.

use std::collections::VecDeque;
use std::sync::Mutex;

use futures::stream;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ObjectMeta;
use kube::core::{ListMeta, Status, TypeMeta};

use super::*;

pub(crate) fn cm(name: &str, rv: u64) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            resource_version: Some(rv.to_string()),
            ..Default::default()
        },
        ..Default::default()
    }
}

pub(crate) fn page(items: Vec<ConfigMap>, rv: u64, cont: Option<&str>) -> ObjectList<ConfigMap> {
    ObjectList {
        types: TypeMeta::list::<ConfigMap>(),
        metadata: ListMeta {
            resource_version: Some(rv.to_string()),
            continue_: cont.map(str::to_string),
            ..Default::default()
        },
        items,
    }
}

pub(crate) fn gone() -> kube::Error {
    kube::Error::Api(Box::new(
        Status::failure("too old resource version", "Expired").with_code(410),
    ))
}

fn bookmark(rv: u64) -> WatchEvent<ConfigMap> {
    serde_json::from_value(serde_json::json!({
        "type": "BOOKMARK",
        "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"resourceVersion": rv.to_string()}}
    }))
    .expect("bookmark event")
}

type ListReply = Result<ObjectList<ConfigMap>, kube::Error>;
type WatchReply = Result<Vec<Result<WatchEvent<ConfigMap>, kube::Error>>, kube::Error>;

/// Replies to lists and watches from scripts; once a script runs out, lists repeat the last reply
/// and watches hang (as an idle watch does).
#[derive(Default)]
pub(crate) struct FakeLw {
    lists: Mutex<VecDeque<ListReply>>,
    watches: Mutex<VecDeque<WatchReply>>,
    pub(crate) list_calls: Mutex<Vec<ListParams>>,
    pub(crate) watch_calls: Mutex<Vec<(WatchParams, String)>>,
}

impl FakeLw {
    pub(crate) fn list(&self, reply: ListReply) -> &Self {
        self.lists.lock().unwrap().push_back(reply);
        self
    }

    pub(crate) fn watch(&self, reply: WatchReply) -> &Self {
        self.watches.lock().unwrap().push_back(reply);
        self
    }

    pub(crate) fn watched_from(&self) -> Vec<String> {
        self.watch_calls
            .lock()
            .unwrap()
            .iter()
            .map(|(_, rv)| rv.clone())
            .collect()
    }
}

impl ListerWatcher<ConfigMap> for FakeLw {
    fn list(
        &self,
        params: ListParams,
    ) -> BoxFuture<'_, Result<ObjectList<ConfigMap>, kube::Error>> {
        self.list_calls.lock().unwrap().push(params);
        let mut lists = self.lists.lock().unwrap();
        let reply = if lists.len() > 1 {
            lists.pop_front().unwrap()
        } else {
            match lists.front() {
                Some(Ok(l)) => Ok(l.clone()),
                _ => Err(gone()),
            }
        };
        async move { reply }.boxed()
    }

    fn watch(
        &self,
        params: WatchParams,
        resource_version: String,
    ) -> BoxFuture<'_, Result<WatchStream<ConfigMap>, kube::Error>> {
        self.watch_calls
            .lock()
            .unwrap()
            .push((params, resource_version));
        let reply = self.watches.lock().unwrap().pop_front();
        async move {
            match reply {
                Some(Ok(events)) => Ok(stream::iter(events).boxed()),
                Some(Err(e)) => Err(e),
                None => Ok(stream::pending().boxed()),
            }
        }
        .boxed()
    }

    fn describe(&self) -> String {
        "fake".into()
    }
}

#[derive(Default)]
pub(crate) struct Recorder(pub(crate) Mutex<Vec<Delta<ConfigMap>>>);

impl DeltaSink<ConfigMap> for Recorder {
    fn apply(&self, delta: Delta<ConfigMap>) {
        self.0.lock().unwrap().push(delta);
    }
}

fn fast() -> ReflectorConfig {
    ReflectorConfig {
        initial_backoff: Duration::from_millis(1),
        max_backoff: Duration::from_millis(5),
        ..ReflectorConfig::default()
    }
}

/// Runs the reflector until `done` holds (bounded), then returns what the sink saw.
async fn run_until(
    lw: Arc<FakeLw>,
    config: ReflectorConfig,
    done: impl Fn(&FakeLw) -> bool,
) -> (Vec<Delta<ConfigMap>>, ReflectorStats) {
    let reflector = Reflector::new(lw.clone() as Arc<dyn ListerWatcher<ConfigMap>>, config);
    let sink = Recorder::default();
    let finished = tokio::time::timeout(Duration::from_secs(120), async {
        tokio::select! {
            _ = reflector.run(&sink) => {}
            _ = async {
                while !done(&lw) {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            } => {}
        }
    })
    .await;
    assert!(finished.is_ok(), "reflector test timed out");
    let deltas = std::mem::take(&mut *sink.0.lock().unwrap());
    (deltas, reflector.stats())
}

#[tokio::test]
async fn informer_reflector_resumes_from_last_event_and_bookmark() {
    let lw = Arc::new(FakeLw::default());
    lw.list(Ok(page(vec![cm("a", 3)], 5, None)))
        // Ends cleanly after an add and a bookmark: resume from the bookmark.
        .watch(Ok(vec![Ok(WatchEvent::Added(cm("b", 6))), Ok(bookmark(9))]))
        // Breaks after a modify: resume from the modify.
        .watch(Ok(vec![
            Ok(WatchEvent::Modified(cm("a", 10))),
            Err(kube::Error::ReadEvents(std::io::Error::other("reset"))),
        ]))
        // The watch request itself fails: retry from the same point.
        .watch(Err(kube::Error::ReadEvents(std::io::Error::other(
            "refused",
        ))))
        .watch(Ok(vec![Ok(WatchEvent::Deleted(cm("b", 11)))]));
    let (deltas, stats) = run_until(lw.clone(), fast(), |lw| lw.watched_from().len() >= 5).await;
    // The reflector may already have opened one more watch when it is stopped: pin the first ones.
    assert_eq!(lw.watched_from()[..5], ["5", "9", "10", "10", "11"]);
    assert_eq!(
        deltas,
        vec![
            Delta::Replaced(vec![cm("a", 3)]),
            Delta::Added(cm("b", 6)),
            Delta::Modified(cm("a", 10)),
            Delta::Deleted(cm("b", 11)),
        ]
    );
    assert_eq!(stats.lists, 1);
    assert_eq!(stats.bookmarks, 1);
    assert_eq!(stats.events, 3);
    // Every watch asks for bookmarks and a bounded timeout.
    for (params, _) in lw.watch_calls.lock().unwrap().iter() {
        assert!(params.bookmarks);
        let t = params.timeout.expect("timeout");
        assert!((145..=290).contains(&t), "timeout {t}");
    }
}

#[tokio::test]
async fn informer_reflector_relists_after_gone() {
    let lw = Arc::new(FakeLw::default());
    lw.list(Ok(page(vec![cm("a", 3)], 5, None)))
        .list(Ok(page(vec![cm("c", 20)], 21, None)))
        .list(Ok(page(vec![cm("c", 20), cm("d", 30)], 31, None)))
        // A 410 error event mid-stream, then a 410 on the watch request itself.
        .watch(Ok(vec![
            Ok(WatchEvent::Added(cm("b", 6))),
            Ok(WatchEvent::Error(Box::new(
                Status::failure("too old", "Expired").with_code(410),
            ))),
        ]))
        .watch(Err(gone()));
    let (deltas, stats) = run_until(lw.clone(), fast(), |lw| lw.watched_from().len() >= 3).await;
    assert_eq!(lw.watched_from()[..3], ["5", "21", "31"]);
    assert_eq!(
        deltas,
        vec![
            Delta::Replaced(vec![cm("a", 3)]),
            Delta::Added(cm("b", 6)),
            Delta::Replaced(vec![cm("c", 20)]),
            Delta::Replaced(vec![cm("c", 20), cm("d", 30)]),
        ]
    );
    assert_eq!(stats.lists, 3);
    assert_eq!(stats.relists_after_gone, 2);
}

#[tokio::test]
async fn informer_reflector_pages_and_falls_back_when_the_token_expires() {
    let lw = Arc::new(FakeLw::default());
    lw.list(Ok(page(vec![cm("a", 1)], 7, Some("t1"))))
        .list(Err(gone()))
        .list(Ok(page(vec![cm("a", 1), cm("b", 2)], 8, None)));
    let config = ReflectorConfig {
        page_size: Some(1),
        ..fast()
    };
    let (deltas, _) = run_until(lw.clone(), config, |lw| !lw.watched_from().is_empty()).await;
    let calls = lw.list_calls.lock().unwrap().clone();
    assert_eq!(calls.len(), 3);
    assert_eq!(calls[0].limit, Some(1));
    assert_eq!(calls[1].continue_token.as_deref(), Some("t1"));
    assert_eq!(calls[2].limit, None);
    assert_eq!(calls[2].continue_token, None);
    assert_eq!(deltas, vec![Delta::Replaced(vec![cm("a", 1), cm("b", 2)])]);
    assert_eq!(lw.watched_from()[..1], ["8"]);
}

#[tokio::test(start_paused = true)]
async fn informer_reflector_abandons_a_watch_silent_past_its_timeout() {
    let lw = Arc::new(FakeLw::default());
    // No watch scripts: every watch hangs without a byte, as on a dead connection.
    lw.list(Ok(page(vec![cm("a", 1)], 4, None)));
    let config = ReflectorConfig {
        watch_timeout: Duration::from_secs(10),
        ..fast()
    };
    let start = tokio::time::Instant::now();
    let (_, stats) = run_until(lw.clone(), config, |lw| lw.watched_from().len() >= 2).await;
    assert!(start.elapsed() >= Duration::from_secs(5) + WATCH_GRACE);
    // The silent watch was abandoned and a new one resumed from the same revision; one more may have
    // started by the time the reflector is stopped, so only the first two are pinned.
    let watched = lw.watched_from();
    assert!(
        watched.len() >= 2 && watched.iter().all(|rv| rv == "4"),
        "{watched:?}"
    );
    assert_eq!(stats.lists, 1);
}
