//! Events without a watch cache (upstream's `DefaultWatchCacheSizes`: events 0, served from
//! storage): GET with any `resourceVersion`, lists (whole, paged, by field selector, through
//! events.k8s.io/v1 too), watches from the initial state, from a revision and live, and
//! deletecollection all still answer as upstream does, through kubectl and a Rust client. Run on
//! SQLite and on etcd.

mod support;

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Event, Namespace};
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::{json, Value};
use support::{runtime, Backend, Cluster};

fn event(name: &str, ns: &str, pod: &str, reason: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": ns},
        "involvedObject": {"kind": "Pod", "name": pod, "namespace": ns, "apiVersion": "v1"},
        "reason": reason,
        "message": format!("{reason} {pod}"),
        "type": "Normal",
        "source": {"component": "test"},
        "count": 1,
    }))
    .expect("event")
}

async fn create_namespace(client: &kube::Client, name: &str) {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    api.create(&PostParams::default(), &ns)
        .await
        .expect("namespace");
}

/// Names in a kubectl `-o json` list.
fn names(json: &str) -> Vec<String> {
    let v: Value = serde_json::from_str(json).expect("kubectl json");
    let mut names: Vec<String> = v["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| {
            i["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        })
        .collect();
    names.sort();
    names
}

/// The names of the watch frames of a raw watch stream, in order, by type.
fn frames(raw: &str) -> Vec<(String, String)> {
    raw.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let v: Value = serde_json::from_str(l).expect("watch frame");
            let name = v["object"]["metadata"]["name"].as_str().unwrap_or_default();
            (v["type"].as_str().unwrap_or_default().into(), name.into())
        })
        .collect()
}

fn events_without_a_cache(backend: Backend) {
    let cluster = Cluster::start(backend);
    runtime().block_on(async {
        let client = cluster.client().await;
        create_namespace(&client, "a").await;
        create_namespace(&client, "b").await;
        let a: Api<Event> = Api::namespaced(client.clone(), "a");
        let b: Api<Event> = Api::namespaced(client.clone(), "b");
        let pp = PostParams::default();
        for (api, ns, name, pod) in [
            (&a, "a", "e1", "web-1"),
            (&a, "a", "e2", "web-2"),
            (&b, "b", "e3", "web-1"),
        ] {
            api.create(&pp, &event(name, ns, pod, "Scheduled"))
                .await
                .unwrap_or_else(|e| panic!("create {name}: {e}"));
        }

        // Lists: all namespaces, one namespace, a field selector, and events.k8s.io/v1.
        let all = cluster.kubectl(&["get", "events", "-A", "-o", "json"]);
        assert_eq!(names(&all), ["e1", "e2", "e3"]);
        let in_a = cluster.kubectl(&["get", "events", "-n", "a", "-o", "json"]);
        assert_eq!(names(&in_a), ["e1", "e2"]);
        let selected = cluster.kubectl(&[
            "get",
            "events",
            "-A",
            "--field-selector",
            "involvedObject.name=web-1",
            "-o",
            "json",
        ]);
        assert_eq!(names(&selected), ["e1", "e3"]);
        let v1 = cluster.kubectl(&["get", "events.v1.events.k8s.io", "-n", "a", "-o", "json"]);
        assert_eq!(names(&v1), ["e1", "e2"]);
        let table = cluster.kubectl(&["get", "events", "-n", "a"]);
        assert!(table.contains("Scheduled"), "{table}");

        // A GET that accepts any version is read from the store, not answered 404 by an empty cache.
        let got = cluster.kubectl(&[
            "get",
            "--raw",
            "/api/v1/namespaces/a/events/e1?resourceVersion=0",
        ]);
        let got: Value = serde_json::from_str(&got).expect("event json");
        assert_eq!(got["reason"], "Scheduled");

        // resourceVersion=0 with a limit pages (the store honours the limit; a cache would not).
        let page = a
            .list(&ListParams::default().limit(1).match_any())
            .await
            .expect("page");
        assert_eq!(page.items.len(), 1);
        let token = page.metadata.continue_.clone().expect("continue token");
        let rest = a
            .list(&ListParams::default().limit(1).continue_token(&token))
            .await
            .expect("second page");
        assert_eq!(rest.items.len(), 1);
        assert_ne!(page.items[0].metadata.name, rest.items[0].metadata.name);

        // A watch from the initial state gets the current events, then live ones.
        let initial = a
            .watch(&WatchParams::default().timeout(30), "0")
            .await
            .expect("watch from 0");
        futures::pin_mut!(initial);
        let mut seen = Vec::new();
        while seen.len() < 2 {
            match initial.try_next().await.expect("watch").expect("open") {
                WatchEvent::Added(e) => seen.push(e.metadata.name.unwrap_or_default()),
                other => panic!("unexpected {other:?}"),
            }
        }
        seen.sort();
        assert_eq!(seen, ["e1", "e2"]);
        let rv = a.list(&ListParams::default()).await.expect("list");
        let rv = rv.metadata.resource_version.expect("list revision");
        a.create(&pp, &event("e4", "a", "web-3", "Pulled"))
            .await
            .expect("create e4");
        b.create(&pp, &event("e5", "b", "web-3", "Pulled"))
            .await
            .expect("create e5");
        let deadline = Instant::now() + Duration::from_secs(20);
        let live = loop {
            assert!(Instant::now() < deadline, "no live event within 20 s");
            let next = tokio::time::timeout(Duration::from_secs(20), initial.next()).await;
            match next
                .expect("live event in time")
                .expect("open")
                .expect("watch")
            {
                WatchEvent::Added(e) => break e,
                WatchEvent::Bookmark(_) => continue,
                other => panic!("unexpected {other:?}"),
            }
        };
        assert_eq!(live.metadata.name.as_deref(), Some("e4"));

        // A watch from the list's revision (kubectl, raw, ended by the server): only what followed.
        let raw = cluster.kubectl(&[
            "get",
            "--raw",
            &format!("/api/v1/namespaces/a/events?watch=1&resourceVersion={rv}&timeoutSeconds=2"),
        ]);
        assert_eq!(frames(&raw), [("ADDED".to_string(), "e4".to_string())]);
        let raw = cluster.kubectl(&[
            "get",
            "--raw",
            "/api/v1/events?watch=1&timeoutSeconds=1&fieldSelector=involvedObject.name%3Dweb-3",
        ]);
        let mut initial_frames = frames(&raw);
        initial_frames.sort();
        assert_eq!(
            initial_frames,
            [
                ("ADDED".to_string(), "e4".to_string()),
                ("ADDED".to_string(), "e5".to_string())
            ]
        );

        // deletecollection reads the store's objects too.
        cluster.kubectl(&["delete", "events", "--all", "-n", "a"]);
        let left = cluster.kubectl(&["get", "events", "-A", "-o", "json"]);
        assert_eq!(names(&left), ["e3", "e5"]);
    });
}

on_both_backends!(events_without_a_cache);
