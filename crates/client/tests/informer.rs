//! Informers against rkube's real API server (in-process): convergence after a forced watch disconnect
//! and after a compaction (410 -> relist -> tombstones), per-object ordering of handler calls, indexes,
//! one shared watch per resource through the factory, metadata-only and dynamic informers, bookmarks.

mod support;

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::informer::{
    label_index_func, object_key, DeletedObject, EventHandlerFuncs, InformerConfig, SharedInformer,
    SharedInformerFactory, NAMESPACE_INDEX,
};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, ApiResource, DeleteParams, PostParams, WatchEvent, WatchParams};
use kube::Resource;
use support::{eventually, namespace, Proxy, Server};

const CONVERGE: Duration = Duration::from_secs(30);

async fn bounded(test: impl Future<Output = ()>) {
    tokio::time::timeout(Duration::from_secs(120), test)
        .await
        .expect("test timed out");
}

/// Fast retries so that reconnects after a cut take well under a second.
fn fast() -> InformerConfig {
    InformerConfig::new().backoff(Duration::from_millis(50), Duration::from_millis(400))
}

fn cm(name: &str, app: &str, value: &str) -> ConfigMap {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": app}},
        "data": {"value": value},
    }))
    .expect("configmap")
}

fn rv_of<K: Resource>(obj: &K) -> String {
    obj.meta().resource_version.clone().unwrap_or_default()
}

#[derive(Clone, Debug, PartialEq)]
enum Ev {
    Add {
        key: String,
        rv: String,
    },
    Update {
        key: String,
        old: String,
        new: String,
    },
    Delete {
        key: String,
        rv: String,
        tombstone: bool,
    },
}

impl Ev {
    fn key(&self) -> &str {
        match self {
            Ev::Add { key, .. } | Ev::Update { key, .. } | Ev::Delete { key, .. } => key,
        }
    }
}

/// Every handler call, in order.
#[derive(Clone, Default)]
struct EventLog(Arc<Mutex<Vec<Ev>>>);

impl EventLog {
    fn attach<K: Resource + Clone + Send + Sync + 'static>(informer: &SharedInformer<K>) -> Self {
        let log = EventLog::default();
        let (a, u, d) = (log.0.clone(), log.0.clone(), log.0.clone());
        informer.add_event_handler(
            EventHandlerFuncs::new()
                .on_add(move |o: &Arc<K>, _| {
                    a.lock().unwrap().push(Ev::Add {
                        key: object_key(o.as_ref()),
                        rv: rv_of(o.as_ref()),
                    })
                })
                .on_update(move |old: &Arc<K>, new: &Arc<K>| {
                    u.lock().unwrap().push(Ev::Update {
                        key: object_key(new.as_ref()),
                        old: rv_of(old.as_ref()),
                        new: rv_of(new.as_ref()),
                    })
                })
                .on_delete(move |gone: &DeletedObject<K>| {
                    d.lock().unwrap().push(Ev::Delete {
                        key: gone.key(),
                        rv: rv_of(gone.object().as_ref()),
                        tombstone: gone.is_tombstone(),
                    })
                }),
        );
        log
    }

    fn events(&self) -> Vec<Ev> {
        self.0.lock().unwrap().clone()
    }

    fn for_key(&self, key: &str) -> Vec<Ev> {
        self.events()
            .into_iter()
            .filter(|e| e.key() == key)
            .collect()
    }

    /// What the handler believes exists: key -> resourceVersion, from the last call per key.
    fn believed(&self) -> BTreeMap<String, String> {
        let mut state = BTreeMap::new();
        for e in self.events() {
            match e {
                Ev::Add { key, rv } => {
                    state.insert(key, rv);
                }
                Ev::Update { key, new, .. } => {
                    state.insert(key, new);
                }
                Ev::Delete { key, .. } => {
                    state.remove(&key);
                }
            }
        }
        state
    }
}

fn cache_state<K: Resource + Clone + Send + Sync + 'static>(
    informer: &SharedInformer<K>,
) -> BTreeMap<String, String> {
    informer
        .store()
        .list()
        .iter()
        .map(|o| (object_key(o.as_ref()), rv_of(o.as_ref())))
        .collect()
}

async fn server_state(api: &Api<ConfigMap>) -> BTreeMap<String, String> {
    api.list(&Default::default())
        .await
        .expect("list")
        .items
        .iter()
        .map(|o| (object_key(o), rv_of(o)))
        .collect()
}

async fn update(api: &Api<ConfigMap>, name: &str, value: &str) -> ConfigMap {
    let mut cur = api.get(name).await.expect("get");
    cur.data
        .get_or_insert_with(Default::default)
        .insert("value".into(), value.into());
    api.replace(name, &PostParams::default(), &cur)
        .await
        .expect("replace")
}

async fn create(api: &Api<ConfigMap>, name: &str, app: &str) -> ConfigMap {
    api.create(&PostParams::default(), &cm(name, app, "0"))
        .await
        .expect("create")
}

async fn synced<K: Resource + Clone + Send + Sync + 'static>(informer: &SharedInformer<K>) {
    tokio::time::timeout(CONVERGE, informer.wait_for_sync())
        .await
        .expect("informer synced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn informer_cache_converges_after_forced_watch_disconnect() {
    bounded(async {
        let server = Server::start().await;
        let direct = server.client().await;
        let proxy = Proxy::start(server.addr).await;
        namespace(&direct, "disc").await;
        let cms: Api<ConfigMap> = Api::namespaced(direct.clone(), "disc");
        for n in ["a", "b", "c"] {
            create(&cms, n, "web").await;
        }
        let proxied = server.client_at(proxy.addr).await;
        let informer =
            SharedInformer::from_api(Api::<ConfigMap>::namespaced(proxied, "disc"), fast());
        let log = EventLog::attach(&informer);
        informer.start();
        synced(&informer).await;
        assert_eq!(cache_state(&informer), server_state(&cms).await);

        update(&cms, "a", "1").await;
        let expected = server_state(&cms).await;
        eventually("the cache follows the watch", CONVERGE, || {
            cache_state(&informer) == expected
        })
        .await;

        // Cut the watch; change things while the informer cannot reach the server.
        proxy.cut();
        update(&cms, "a", "2").await;
        update(&cms, "a", "3").await;
        cms.delete("b", &DeleteParams::default())
            .await
            .expect("delete");
        create(&cms, "d", "db").await;
        update(&cms, "c", "1").await;
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert_ne!(
            cache_state(&informer),
            server_state(&cms).await,
            "the cut held"
        );
        proxy.resume();

        let expected = server_state(&cms).await;
        eventually("the cache converges after the reconnect", CONVERGE, || {
            cache_state(&informer) == expected
        })
        .await;
        eventually("the handler converges", CONVERGE, || {
            log.believed() == expected
        })
        .await;

        // The watch resumed from the last resourceVersion (history was still there): no relist, and
        // every change arrived, the delete with its final state.
        let stats = informer.stats();
        assert_eq!(stats.lists, 1, "{stats:?}");
        assert_eq!(stats.relists_after_gone, 0, "{stats:?}");
        assert!(stats.watches >= 2, "{stats:?}");
        let a: Vec<Ev> = log.for_key("disc/a");
        assert_eq!(a.len(), 4, "add and three updates of a: {a:?}");
        assert!(matches!(
            log.for_key("disc/b").last(),
            Some(Ev::Delete {
                tombstone: false,
                ..
            })
        ));

        informer.stop();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn informer_relists_after_compaction_with_tombstones() {
    bounded(async {
        let server = Server::start_with(|c| c.compaction_interval = Duration::from_secs(1)).await;
        let direct = server.client().await;
        let proxy = Proxy::start(server.addr).await;
        namespace(&direct, "compact").await;
        let cms: Api<ConfigMap> = Api::namespaced(direct.clone(), "compact");
        for i in 0..20 {
            create(&cms, &format!("o{i:02}"), "web").await;
        }
        let proxied = server.client_at(proxy.addr).await;
        let informer =
            SharedInformer::from_api(Api::<ConfigMap>::namespaced(proxied, "compact"), fast());
        let log = EventLog::attach(&informer);
        informer.start();
        synced(&informer).await;
        let seen = informer.last_sync_resource_version().expect("synced rv");

        proxy.cut();
        for round in 0..3 {
            for i in 0..5 {
                update(&cms, &format!("o{i:02}"), &format!("r{round}")).await;
            }
        }
        for i in 15..20 {
            cms.delete(&format!("o{i:02}"), &DeleteParams::default())
                .await
                .expect("delete");
        }
        for i in 20..23 {
            create(&cms, &format!("o{i:02}"), "db").await;
        }
        // Wait until the history the informer would resume from is compacted away.
        let deadline = tokio::time::Instant::now() + CONVERGE;
        loop {
            let gone = match cms.watch(&WatchParams::default(), &seen).await {
                Err(kube::Error::Api(s)) => s.code == 410,
                Err(e) => panic!("watch: {e}"),
                Ok(stream) => {
                    let mut stream = stream.boxed();
                    matches!(
                        tokio::time::timeout(Duration::from_secs(2), stream.next()).await,
                        Ok(Some(Ok(WatchEvent::Error(s)))) if s.code == 410
                    )
                }
            };
            if gone {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "never compacted");
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        proxy.resume();

        let expected = server_state(&cms).await;
        assert_eq!(expected.len(), 18);
        eventually("the cache converges after the relist", CONVERGE, || {
            cache_state(&informer) == expected
        })
        .await;
        eventually("the handler sees every final state", CONVERGE, || {
            log.believed() == expected
        })
        .await;
        let stats = informer.stats();
        assert!(stats.relists_after_gone >= 1, "{stats:?}");
        assert!(stats.lists >= 2, "{stats:?}");
        // Vanished while disconnected: tombstones with the last state the cache had.
        for i in 15..20 {
            let events = log.for_key(&format!("compact/o{i:02}"));
            assert!(
                matches!(
                    events.last(),
                    Some(Ev::Delete {
                        tombstone: true,
                        ..
                    })
                ),
                "o{i:02}: {events:?}"
            );
        }
        // Changed while disconnected: one update from the cached state to the final one.
        for i in 0..5 {
            let key = format!("compact/o{i:02}");
            let events = log.for_key(&key);
            match events.as_slice() {
                [Ev::Add { rv: first, .. }, Ev::Update { old, new, .. }] => {
                    assert_eq!(old, first);
                    assert_eq!(Some(new), expected.get(&key));
                }
                other => panic!("{key}: {other:?}"),
            }
        }
        // Unchanged objects are not re-delivered.
        assert_eq!(log.for_key("compact/o10").len(), 1);
        informer.stop();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn informer_handlers_see_every_change_in_order_and_indexes_work() {
    bounded(async {
        let server = Server::start().await;
        let direct = server.client().await;
        for ns in ["order-a", "order-b"] {
            namespace(&direct, ns).await;
        }
        let factory = SharedInformerFactory::new(direct.clone(), InformerConfig::new());
        let informer = factory.informer::<ConfigMap>();
        informer
            .add_indexer("app", label_index_func("app"))
            .expect("index");
        let log = EventLog::attach(&informer);
        factory.start();
        tokio::time::timeout(CONVERGE, factory.wait_for_cache_sync())
            .await
            .expect("synced");

        // Eight objects changed concurrently: create, five updates (the third relabels), delete.
        let mut tasks = Vec::new();
        for i in 0..8 {
            let ns = if i % 2 == 0 { "order-a" } else { "order-b" };
            let api: Api<ConfigMap> = Api::namespaced(direct.clone(), ns);
            tasks.push(tokio::spawn(async move {
                let name = format!("churn{i}");
                let mut rvs = vec![rv_of(&create(&api, &name, "web").await)];
                for u in 1..=5 {
                    let mut cur = api.get(&name).await.expect("get");
                    cur.data
                        .get_or_insert_with(Default::default)
                        .insert("value".into(), u.to_string());
                    if u == 3 {
                        cur.metadata
                            .labels
                            .get_or_insert_with(Default::default)
                            .insert("app".into(), "db".into());
                    }
                    let done = api
                        .replace(&name, &PostParams::default(), &cur)
                        .await
                        .expect("replace");
                    rvs.push(rv_of(&done));
                }
                api.delete(&name, &DeleteParams::default())
                    .await
                    .expect("delete");
                (format!("{ns}/{name}"), rvs)
            }));
        }
        let api_a: Api<ConfigMap> = Api::namespaced(direct.clone(), "order-a");
        let api_b: Api<ConfigMap> = Api::namespaced(direct.clone(), "order-b");
        create(&api_a, "p1", "web").await;
        create(&api_b, "p2", "web").await;
        create(&api_a, "p3", "db").await;
        let mut expected = Vec::new();
        for t in tasks {
            expected.push(t.await.expect("writer"));
        }
        eventually("every delete delivered", CONVERGE, || {
            expected
                .iter()
                .all(|(key, _)| matches!(log.for_key(key).last(), Some(Ev::Delete { .. })))
        })
        .await;
        for (key, rvs) in &expected {
            let events = log.for_key(key);
            assert_eq!(events.len(), 7, "{key}: {events:?}");
            assert_eq!(
                events[0],
                Ev::Add {
                    key: key.clone(),
                    rv: rvs[0].clone()
                }
            );
            for u in 1..=5 {
                assert_eq!(
                    events[u],
                    Ev::Update {
                        key: key.clone(),
                        old: rvs[u - 1].clone(),
                        new: rvs[u].clone()
                    },
                    "{key} update {u}"
                );
            }
            match &events[6] {
                Ev::Delete {
                    rv,
                    tombstone: false,
                    ..
                } => {
                    assert!(rv.parse::<u64>().unwrap() > rvs[5].parse::<u64>().unwrap());
                }
                other => panic!("{key}: expected a watched delete, got {other:?}"),
            }
        }

        let store = informer.store();
        eventually("p1..p3 cached", CONVERGE, || store.len() >= 3).await;
        assert_eq!(
            store.index_keys(NAMESPACE_INDEX, "order-a").unwrap(),
            vec!["order-a/p1", "order-a/p3"]
        );
        assert_eq!(
            store.index_keys("app", "web").unwrap(),
            vec!["order-a/p1", "order-b/p2"]
        );
        assert_eq!(store.index_keys("app", "db").unwrap(), vec!["order-a/p3"]);
        assert_eq!(store.list_namespace("order-b").len(), 1);
        // Relabel p3: it moves between index values.
        let mut p3 = api_a.get("p3").await.expect("get");
        p3.metadata
            .labels
            .get_or_insert_with(Default::default)
            .insert("app".into(), "web".into());
        api_a
            .replace("p3", &PostParams::default(), &p3)
            .await
            .expect("relabel");
        eventually("p3 re-indexed", CONVERGE, || {
            store
                .index_keys("app", "db")
                .map(|k| k.is_empty())
                .unwrap_or(false)
        })
        .await;
        let web: Vec<String> = store
            .by_index("app", "web")
            .unwrap()
            .iter()
            .map(|o| object_key(o.as_ref()))
            .collect();
        assert_eq!(web, vec!["order-a/p1", "order-a/p3", "order-b/p2"]);
        factory.shutdown();
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn informer_factory_users_share_one_watch() {
    bounded(async {
        let server = Server::start().await;
        let direct = server.client().await;
        namespace(&direct, "share").await;
        let factory = SharedInformerFactory::new(direct.clone(), InformerConfig::new());
        // Two controllers ask for the configmap informer.
        let first = factory.informer::<ConfigMap>();
        let second = factory.informer::<ConfigMap>();
        assert!(Arc::ptr_eq(&first, &second));
        let log1 = EventLog::attach(&first);
        let log2 = EventLog::attach(&second);
        // Other namespaces, selectors and metadata-only are other informers.
        let namespaced = factory.namespaced_informer::<ConfigMap>("share");
        assert!(Arc::ptr_eq(
            &namespaced,
            &factory.namespaced_informer::<ConfigMap>("share")
        ));
        let selected = factory.informer_for_api(
            Api::<ConfigMap>::all(direct.clone()),
            Some(InformerConfig::new().labels("app=db")),
        );
        let metadata = factory.metadata_informer::<ConfigMap>();
        assert!(Arc::ptr_eq(
            &metadata,
            &factory.metadata_informer::<ConfigMap>()
        ));
        assert_eq!(factory.len(), 4);
        assert_eq!(factory.start(), 4);
        assert_eq!(factory.start(), 0);
        tokio::time::timeout(CONVERGE, factory.wait_for_cache_sync())
            .await
            .expect("synced");
        assert!(factory.has_synced());

        let api: Api<ConfigMap> = Api::namespaced(direct.clone(), "share");
        create(&api, "x", "web").await;
        create(&api, "y", "db").await;
        eventually("both users see both objects", CONVERGE, || {
            log1.believed().contains_key("share/y") && log2.believed().contains_key("share/y")
        })
        .await;
        eventually("the selected informer", CONVERGE, || {
            selected.store().len() == 1
        })
        .await;
        assert_eq!(selected.store().list_keys(), vec!["share/y"]);
        eventually("the metadata informer", CONVERGE, || {
            metadata.store().get("share/x").is_some()
        })
        .await;
        let x = metadata.store().get("share/x").expect("cached");
        assert_eq!(x.metadata.labels.as_ref().expect("labels")["app"], "web");
        // managedFields are kept unless the informer trims them, from watch events and from a list.
        let tracked = PostParams {
            field_manager: Some("informer-test".into()),
            ..PostParams::default()
        };
        api.create(&tracked, &cm("m", "web", "0"))
            .await
            .expect("create m");
        eventually("both informers see m", CONVERGE, || {
            first.store().get("share/m").is_some() && metadata.store().get("share/m").is_some()
        })
        .await;
        let full = first.store().get("share/m").expect("cached in full");
        assert!(full.metadata.managed_fields.is_some(), "{full:?}");
        let m = metadata.store().get("share/m").expect("cached");
        assert!(m.metadata.managed_fields.is_some(), "{m:?}");
        let trimmed = InformerConfig::new().trim_managed_fields();
        let listed = client::informer::metadata_informer(api.clone(), trimmed.clone());
        let watched = SharedInformer::new(
            Arc::new(client::informer::ApiListerWatcher::new(api.clone())),
            trimmed,
        );
        listed.start();
        watched.start();
        synced(&watched).await;
        api.create(&tracked, &cm("n", "web", "0"))
            .await
            .expect("create n");
        eventually("a trimming informer that watched n", CONVERGE, || {
            watched.store().get("share/n").is_some()
        })
        .await;
        let n = watched.store().get("share/n").expect("watched");
        assert!(n.metadata.managed_fields.is_none(), "{n:?}");
        watched.stop();
        eventually(
            "a trimming metadata informer that lists m",
            CONVERGE,
            || listed.store().get("share/m").is_some(),
        )
        .await;
        let m = listed.store().get("share/m").expect("listed");
        assert!(m.metadata.managed_fields.is_none(), "{m:?}");
        listed.stop();
        // One list and one watch served both users.
        let stats = first.stats();
        assert_eq!((stats.lists, stats.watches), (1, 1), "{stats:?}");
        factory.shutdown();
        assert!(!first.is_running());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn informer_dynamic_objects_and_bookmarks() {
    bounded(async {
        let server = Server::start_with(|c| c.bookmark_interval = Duration::from_millis(500)).await;
        let direct = server.client().await;
        namespace(&direct, "dyn").await;
        let factory = SharedInformerFactory::new(direct.clone(), InformerConfig::new());
        let resource = ApiResource::erase::<ConfigMap>(&());
        let informer = factory.dynamic_informer(&resource, Some("dyn"));
        factory.start();
        synced(&informer).await;
        let api: Api<ConfigMap> = Api::namespaced(direct.clone(), "dyn");
        create(&api, "d1", "web").await;
        eventually("the dynamic object", CONVERGE, || {
            informer.store().get("dyn/d1").is_some()
        })
        .await;
        let d1 = informer.store().get("dyn/d1").expect("cached");
        assert_eq!(d1.data["data"]["value"], "0");

        // Writes elsewhere advance the global revision; bookmarks carry it to the informer.
        let secrets: Api<Secret> = Api::namespaced(direct.clone(), "default");
        let secret: Secret = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "elsewhere"}
        }))
        .expect("secret");
        let written = secrets
            .create(&PostParams::default(), &secret)
            .await
            .expect("create secret");
        let target: u64 = rv_of(&written).parse().expect("numeric rv");
        eventually("a bookmark past the unrelated write", CONVERGE, || {
            informer
                .last_sync_resource_version()
                .and_then(|rv| rv.parse::<u64>().ok())
                .is_some_and(|rv| rv >= target)
        })
        .await;
        assert!(informer.stats().bookmarks > 0);
        factory.shutdown();
    })
    .await;
}

/// A restart of the server on the same data dir (new port, same proxy address): the informer resumes
/// from its resourceVersion on the new server, which still has the history.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn informer_resumes_across_a_server_restart() {
    bounded(async {
        let mut server = Server::start().await;
        let direct = server.client().await;
        let proxy = Proxy::start(server.addr).await;
        namespace(&direct, "disc").await;
        let cms: Api<ConfigMap> = Api::namespaced(direct.clone(), "disc");
        for n in ["c", "d"] {
            create(&cms, n, "web").await;
        }
        let proxied = server.client_at(proxy.addr).await;
        let informer =
            SharedInformer::from_api(Api::<ConfigMap>::namespaced(proxied, "disc"), fast());
        let log = EventLog::attach(&informer);
        informer.start();
        synced(&informer).await;

        // Restart on the same data (new port behind the same proxy address), with changes meanwhile.
        proxy.cut();
        server.restart().await;
        proxy.set_upstream(server.addr);
        let cms: Api<ConfigMap> = Api::namespaced(server.client().await, "disc");
        cms.delete("c", &DeleteParams::default())
            .await
            .expect("delete");
        create(&cms, "e", "web").await;
        update(&cms, "d", "1").await;
        proxy.resume();
        let expected = server_state(&cms).await;
        eventually("the cache converges after the restart", CONVERGE, || {
            cache_state(&informer) == expected
        })
        .await;
        eventually("the handler converges after the restart", CONVERGE, || {
            log.believed() == expected
        })
        .await;
        assert_eq!(informer.stats().lists, 1, "{:?}", informer.stats());
        assert!(matches!(
            log.for_key("disc/c").last(),
            Some(Ev::Delete {
                tombstone: false,
                ..
            })
        ));
        informer.stop();
    })
    .await;
}
