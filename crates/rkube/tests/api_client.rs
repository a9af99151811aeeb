//! `rkube server` driven by a Rust client (the kube crate): optimistic concurrency under 16 writers,
//! watch resume, compaction (410), bad input (each with its code, nothing stored), and restart.
//! Every test runs on SQLite and on etcd.

mod support;

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use support::{runtime, Backend, Cluster};

fn cm(name: &str, value: &str) -> ConfigMap {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name},
        "data": {"value": value},
    }))
    .expect("configmap")
}

fn api_code(err: &kube::Error) -> u16 {
    match err {
        kube::Error::Api(status) => status.code,
        other => panic!("expected an API error, got {other:?}"),
    }
}

/// 16 clients increment one counter with GET + PUT, retrying on 409: the count is exact.
fn sixteen_writers_count_exactly(backend: Backend) {
    let c = Cluster::start(backend);
    runtime().block_on(async {
        let client = c.client().await;
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        cms.create(&PostParams::default(), &cm("counter", "0"))
            .await
            .expect("create");
        let mut tasks = Vec::new();
        for _ in 0..16 {
            let cms = cms.clone();
            tasks.push(tokio::spawn(async move {
                let mut conflicts = 0u32;
                for _ in 0..25 {
                    loop {
                        let mut cur = cms.get("counter").await.expect("get");
                        let n: u64 = cur
                            .data
                            .as_ref()
                            .and_then(|d| d.get("value"))
                            .and_then(|v| v.parse().ok())
                            .expect("value");
                        cur.data
                            .get_or_insert_with(Default::default)
                            .insert("value".into(), (n + 1).to_string());
                        match cms.replace("counter", &PostParams::default(), &cur).await {
                            Ok(_) => break,
                            Err(e) if api_code(&e) == 409 => conflicts += 1,
                            Err(e) => panic!("replace: {e}"),
                        }
                    }
                }
                conflicts
            }));
        }
        let mut conflicts = 0;
        for t in tasks {
            conflicts += t.await.expect("task");
        }
        let end = cms.get("counter").await.expect("get");
        assert_eq!(
            end.data.unwrap()["value"],
            "400",
            "lost updates ({conflicts} conflicts seen)"
        );
        assert!(
            conflicts > 0,
            "16 concurrent writers should have conflicted at least once"
        );
    });
}

/// A watch resumed from a saved resourceVersion after 1,000 writes sees every one of them, in order.
fn watch_resumes_without_gaps(backend: Backend) {
    let c = Cluster::start(backend);
    runtime().block_on(async {
        let cms: Api<ConfigMap> = Api::namespaced(c.client().await, "default");
        let first = cms
            .create(&PostParams::default(), &cm("w-0", "0"))
            .await
            .expect("create");
        let saved = first.metadata.resource_version.clone().expect("rv");
        let mut expected = Vec::new();
        for i in 1..=1000 {
            let name = format!("w-{}", i % 50);
            let obj = if i < 50 {
                cms.create(&PostParams::default(), &cm(&name, &i.to_string()))
                    .await
            } else {
                let mut cur = cms.get(&name).await.expect("get");
                cur.data = Some([("value".to_string(), i.to_string())].into());
                cms.replace(&name, &PostParams::default(), &cur).await
            }
            .expect("write");
            expected.push((name, obj.metadata.resource_version.expect("rv")));
        }
        let mut stream = cms
            .watch(&WatchParams::default(), &saved)
            .await
            .expect("watch")
            .boxed();
        let mut seen = Vec::new();
        while seen.len() < expected.len() {
            let ev = tokio::time::timeout(Duration::from_secs(30), stream.try_next())
                .await
                .expect("watch stalled")
                .expect("watch error")
                .expect("watch ended");
            match ev {
                WatchEvent::Added(o) | WatchEvent::Modified(o) => seen.push((
                    o.metadata.name.unwrap(),
                    o.metadata.resource_version.unwrap(),
                )),
                WatchEvent::Bookmark(_) => {}
                other => panic!("unexpected event {other:?}"),
            }
        }
        assert_eq!(seen, expected);
    });
}

/// With compaction every second, a resourceVersion from before the compaction is 410 Gone.
fn compacted_resource_version_is_gone(backend: Backend) {
    let c = Cluster::start_with(backend, &["--compaction-interval", "1s"]);
    runtime().block_on(async {
        let cms: Api<ConfigMap> = Api::namespaced(c.client().await, "default");
        let old = cms
            .create(&PostParams::default(), &cm("old", "1"))
            .await
            .expect("create");
        let old_rv = old.metadata.resource_version.unwrap();
        for i in 0..20 {
            cms.create(&PostParams::default(), &cm(&format!("n{i}"), "x"))
                .await
                .expect("create");
        }
        // A continue token from a paged list taken now expires with the compaction too.
        let page = cms
            .list(&ListParams::default().limit(5))
            .await
            .expect("first page");
        let token = page.metadata.continue_.clone().expect("more pages remain");
        for i in 0..3 {
            cms.create(&PostParams::default(), &cm(&format!("after{i}"), "x"))
                .await
                .expect("create");
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            // A list at the old revision, and a watch from it.
            let lp = ListParams::default()
                .at(&old_rv)
                .matching(kube::api::VersionMatch::Exact);
            let listed = cms.list(&lp).await;
            let watched = async {
                let mut s = cms.watch(&WatchParams::default(), &old_rv).await?.boxed();
                match tokio::time::timeout(Duration::from_secs(5), s.next()).await {
                    Ok(Some(Ok(WatchEvent::Error(e)))) => Ok(e.code),
                    Ok(Some(Ok(_))) => Ok(200),
                    Ok(Some(Err(e))) => Err(e),
                    _ => Ok(0),
                }
            }
            .await;
            let list_gone = matches!(&listed, Err(e) if api_code(e) == 410);
            let watch_gone = match &watched {
                Ok(code) => *code == 410,
                Err(e) => api_code(e) == 410,
            };
            let continued = cms
                .list(&ListParams::default().limit(5).continue_token(&token))
                .await;
            let continue_gone = matches!(&continued, Err(e) if api_code(e) == 410);
            if list_gone && watch_gone && continue_gone {
                break;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "never compacted: list {listed:?}, watch {watched:?}"
            );
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
    });
}

/// Raw requests with bad bodies: each gets its upstream code as a Status, and nothing is stored.
fn bad_input_is_rejected_and_stores_nothing(backend: Backend) {
    let c = Cluster::start(backend);
    runtime().block_on(async {
        let client = c.client().await;
        let base = "/api/v1/namespaces/default/configmaps";
        let send = |method: &str, uri: &str, content_type: &str, body: Vec<u8>| {
            let req = http::Request::builder()
                .method(method)
                .uri(uri)
                .header("Content-Type", content_type)
                .body(body)
                .expect("request");
            let client = client.clone();
            async move { client.request_text(req).await }
        };
        // (method, uri, content type, body, expected code, expected reason)
        type Case<'a> = (&'a str, String, &'a str, Vec<u8>, u16, &'a str);
        let cases: Vec<Case> = vec![
            ("POST", base.into(), "application/json", b"{not json".to_vec(), 400, "BadRequest"),
            ("POST", base.into(), "application/json", br#"{"apiVersion":"v1","kind":"Secret","metadata":{"name":"x"}}"#.to_vec(), 400, "BadRequest"),
            ("POST", base.into(), "application/json", format!(r#"{{"apiVersion":"v1","kind":"ConfigMap","metadata":{{"name":"{}"}}}}"#, "a".repeat(300)).into_bytes(), 422, "Invalid"),
            ("POST", base.into(), "application/json", br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"Bad_Name"}}"#.to_vec(), 422, "Invalid"),
            ("POST", format!("{base}?fieldValidation=Strict"), "application/json", br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"strict"},"bogus":1}"#.to_vec(), 400, "BadRequest"),
            ("POST", base.into(), "application/json", {
                let mut big = br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"big"},"data":{"a":""#.to_vec();
                big.extend(std::iter::repeat_n(b'x', 3 * 1024 * 1024 + 10));
                big.extend(br#""}}"#);
                big
            }, 413, "RequestEntityTooLarge"),
            ("POST", base.into(), "text/plain", b"hello".to_vec(), 415, "UnsupportedMediaType"),
            ("POST", "/api/v1/namespaces/nope/configmaps".into(), "application/json", br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"x"}}"#.to_vec(), 404, "NotFound"),
            ("PUT", format!("{base}/missing"), "application/json", br#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"missing"}}"#.to_vec(), 404, "NotFound"),
            ("GET", format!("{base}?labelSelector=a%20in%20(b"), "application/json", Vec::new(), 400, "BadRequest"),
            ("GET", format!("{base}?resourceVersion=abc"), "application/json", Vec::new(), 400, "BadRequest"),
        ];
        for (method, uri, ct, body, code, reason) in cases {
            match send(method, &uri, ct, body).await {
                Err(kube::Error::Api(status)) => {
                    assert_eq!((status.code, status.reason.as_str()), (code, reason), "{method} {uri}: {}", status.message);
                }
                other => panic!("{method} {uri}: expected {code}, got {other:?}"),
            }
        }
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
        let left = cms.list(&ListParams::default()).await.expect("list");
        assert!(left.items.is_empty(), "bad input stored something: {:?}", left.items.iter().map(|c| c.metadata.name.clone()).collect::<Vec<_>>());
        // A stale resourceVersion on update is a 409.
        let created = cms.create(&PostParams::default(), &cm("ok", "1")).await.expect("create");
        let mut stale = created.clone();
        let mut changed = created.clone();
        changed.data = Some([("value".to_string(), "changed".to_string())].into());
        cms.replace("ok", &PostParams::default(), &changed).await.expect("first update");
        stale.data = Some([("value".to_string(), "2".to_string())].into());
        let err = cms.replace("ok", &PostParams::default(), &stale).await.expect_err("stale update");
        assert_eq!(api_code(&err), 409);
        assert_eq!(cms.get("ok").await.expect("get").data.unwrap()["value"], "changed");
    });
}

/// After a restart every object and its resourceVersion are unchanged.
fn restart_keeps_objects_and_versions(backend: Backend) {
    let mut c = Cluster::start(backend);
    let rt = runtime();
    let before = rt.block_on(async {
        let cms: Api<ConfigMap> = Api::namespaced(c.client().await, "default");
        for i in 0..20 {
            cms.create(
                &PostParams::default(),
                &cm(&format!("keep-{i}"), &i.to_string()),
            )
            .await
            .expect("create");
        }
        cms.delete("keep-3", &Default::default())
            .await
            .expect("delete");
        let list = cms.list(&ListParams::default()).await.expect("list");
        list.items
            .into_iter()
            .map(|o| {
                (
                    o.metadata.name.unwrap(),
                    o.metadata.resource_version.unwrap(),
                    o.metadata.uid.unwrap(),
                )
            })
            .collect::<Vec<_>>()
    });
    c.restart();
    let after = rt.block_on(async {
        let cms: Api<ConfigMap> = Api::namespaced(c.client().await, "default");
        let list = cms.list(&ListParams::default()).await.expect("list");
        list.items
            .into_iter()
            .map(|o| {
                (
                    o.metadata.name.unwrap(),
                    o.metadata.resource_version.unwrap(),
                    o.metadata.uid.unwrap(),
                )
            })
            .collect::<Vec<_>>()
    });
    assert_eq!(before.len(), 19);
    assert_eq!(before, after);
}

on_both_backends!(
    sixteen_writers_count_exactly,
    watch_resumes_without_gaps,
    compacted_resource_version_is_gone,
    bad_input_is_rejected_and_stores_nothing,
    restart_keeps_objects_and_versions,
);
