//! Updates that start from a stale watch cache copy end as if they had started from storage.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::BodyExt;
use serde_json::{json, Value};

use crate::request::{Query, ResourceRequest, Verb};
use crate::watch_cache::CachedObject;
use crate::ApiServer;

const KEY: &str = "/pods/default/p";

fn request(verb: Verb, sub: Option<&str>) -> ResourceRequest {
    ResourceRequest {
        group: String::new(),
        version: "v1".into(),
        namespace: Some("default".into()),
        resource: "pods".into(),
        name: Some("p".into()),
        subresource: sub.map(str::to_string),
        verb,
    }
}

async fn call(
    api: &Arc<ApiServer>,
    verb: Verb,
    sub: Option<&str>,
    content_type: &str,
    body: Value,
) -> (u16, Value) {
    let mut headers = HeaderMap::new();
    headers.insert(http::header::CONTENT_TYPE, content_type.parse().unwrap());
    let resp = super::handle(
        api,
        None,
        &request(verb, sub),
        &Query::parse(None),
        &headers,
        Bytes::from(body.to_string()),
    )
    .await
    .unwrap();
    let code = resp.status().as_u16();
    let Ok(body) = resp.into_body().collect().await;
    (code, serde_json::from_slice(&body.to_bytes()).unwrap())
}

/// The cached version of the pod once the cache has caught up with storage.
async fn cached(api: &Arc<ApiServer>) -> Arc<CachedObject> {
    let stored = api.store.get(KEY).await.unwrap().unwrap().mod_revision;
    let cache = api.caches.get("pods").unwrap();
    for _ in 0..500 {
        if let Some(obj) = cache.get(KEY).filter(|o| o.rv == stored) {
            return obj;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("the watch cache did not reach revision {stored}");
}

async fn stored_rv(api: &Arc<ApiServer>) -> i64 {
    api.store.get(KEY).await.unwrap().unwrap().mod_revision
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_cached_copy_is_never_the_last_word() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = crate::Config::new(dir.path());
    config.secure_port = 0;
    let running = crate::start(config).await.unwrap();
    let api = running.api().clone();
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": "default"}});
    // The service account controller is not running here; pod admission needs the account.
    crate::rest::create_internal(&api, ("", "v1", "serviceaccounts"), Some("default"), sa)
        .await
        .unwrap();
    let accounts = api.caches.get("serviceaccounts").unwrap();
    for _ in 0..500 {
        if accounts.get("/serviceaccounts/default/default").is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
        "spec": {"containers": [{"name": "c", "image": "i"}]}});
    crate::rest::create_internal(&api, ("", "v1", "pods"), Some("default"), pod)
        .await
        .unwrap();
    let unbound = cached(&api).await;
    let cache = api.caches.get("pods").unwrap();
    let binding = |node: &str| json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"name": node}});

    let (code, _) = call(
        &api,
        Verb::Create,
        Some("binding"),
        "application/json",
        binding("n1"),
    )
    .await;
    assert_eq!(code, 201);
    cached(&api).await;

    // The cache still says unbound: the write from it conflicts, and storage says bound.
    cache.make_stale(KEY, unbound.clone());
    let (code, status) = call(
        &api,
        Verb::Create,
        Some("binding"),
        "application/json",
        binding("n2"),
    )
    .await;
    assert_eq!(code, 409, "{status}");
    assert_eq!(
        status["message"],
        "Operation cannot be fulfilled on pods \"p\": pod p is already assigned to node \"n1\""
    );

    // The same label patch, sent twice: first to change the pod, then as a no-op.
    let label_patch = || {
        call(
            &api,
            Verb::Patch,
            None,
            "application/merge-patch+json",
            json!({"metadata": {"labels": {"a": "b"}}}),
        )
    };

    // A patch computed from the stale copy is redone from storage.
    cache.make_stale(KEY, unbound.clone());
    let before = stored_rv(&api).await;
    let (code, patched) = label_patch().await;
    assert_eq!(code, 200, "{patched}");
    assert_eq!(patched["spec"]["nodeName"], "n1");
    assert_eq!(patched["metadata"]["labels"]["a"], "b");
    assert!(
        patched["metadata"]["resourceVersion"]
            .as_str()
            .unwrap()
            .parse::<i64>()
            .unwrap()
            > before
    );
    let current = cached(&api).await;

    // A no-op patch on a stale copy is checked against storage, not answered from the copy.
    cache.make_stale(KEY, unbound.clone());
    let (code, same) = label_patch().await;
    assert_eq!(code, 200);
    assert_eq!(same["metadata"]["resourceVersion"], current.rv.to_string());
    assert_eq!(same["spec"]["nodeName"], "n1");

    // A PUT's resourceVersion precondition is judged against storage: the current one succeeds...
    let mut put: Value = serde_json::from_slice(&current.json).unwrap();
    put["metadata"]["labels"]["a"] = "c".into();
    cache.make_stale(KEY, unbound.clone());
    let (code, updated) = call(&api, Verb::Update, None, "application/json", put.clone()).await;
    assert_eq!(code, 200, "{updated}");
    assert_eq!(updated["metadata"]["labels"]["a"], "c");
    cached(&api).await;

    // ...and the stale copy's own revision is a conflict.
    cache.make_stale(KEY, unbound.clone());
    put["metadata"]["resourceVersion"] = unbound.rv.to_string().into();
    let (code, _) = call(&api, Verb::Update, None, "application/json", put).await;
    assert_eq!(code, 409);
    running.shutdown().await;
}
