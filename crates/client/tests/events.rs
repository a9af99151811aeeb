//! The event recorder against a real API server started in-process: identical events become one
//! Event whose `count` grows, similar events with different messages are combined after ten, the
//! per-object spam filter stops at the burst of 25, and a deleted Event is recreated on the next
//! repeat (upstream `recordEvent`'s patch-then-create fallback).

use std::path::Path;
use std::time::Duration;

use client::events::{ApiEventSink, EventBroadcaster, EventType, Recorder};
use k8s_openapi::api::core::v1::{ConfigMap, Event, ObjectReference};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::Resource;

struct Env {
    _dir: tempfile::TempDir,
    _server: apiserver::Running,
    client: kube::Client,
    broadcaster: EventBroadcaster,
    recorder: Recorder,
}

async fn kube_client(kubeconfig: &Path) -> kube::Client {
    client::kubeconfig::client_from_file(kubeconfig)
        .await
        .expect("kube client")
}

async fn env() -> Env {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = apiserver::start(apiserver::Config {
        secure_port: 0,
        ..apiserver::Config::new(dir.path())
    })
    .await
    .expect("start apiserver");
    let client = kube_client(&dir.path().join("admin.kubeconfig")).await;
    let broadcaster = EventBroadcaster::new();
    broadcaster.start_recording_to_sink(ApiEventSink::new(client.clone()));
    let recorder = broadcaster.new_recorder("rkube-test", "host-a");
    Env {
        _dir: dir,
        _server: server,
        client,
        broadcaster,
        recorder,
    }
}

impl Env {
    /// Creates a ConfigMap to be the involved object and returns its reference.
    async fn object(&self, name: &str) -> ObjectReference {
        let api: Api<ConfigMap> = Api::namespaced(self.client.clone(), "default");
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        let created = api
            .create(&PostParams::default(), &cm)
            .await
            .expect("create configmap");
        let reference = created.object_ref(&());
        assert!(reference.uid.is_some());
        reference
    }

    /// Events about `name`, after everything recorded so far was written.
    async fn events_about(&self, name: &str) -> Vec<Event> {
        tokio::time::timeout(Duration::from_secs(30), self.broadcaster.flush())
            .await
            .expect("sink drains within 30 s");
        let api: Api<Event> = Api::namespaced(self.client.clone(), "default");
        let list = api.list(&ListParams::default()).await.expect("list events");
        let mut events: Vec<Event> = list
            .items
            .into_iter()
            .filter(|e| e.involved_object.name.as_deref() == Some(name))
            .collect();
        events.sort_by_key(|e| e.metadata.creation_timestamp.clone().map(|t| t.0));
        events
    }
}

fn message(e: &Event) -> &str {
    e.message.as_deref().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identical_events_become_one_event_with_a_count() {
    let env = env().await;
    let obj = env.object("cm-a").await;
    for _ in 0..7 {
        env.recorder
            .event(&obj, EventType::Normal, "Synced", "synced successfully");
    }
    let events = env.events_about("cm-a").await;
    assert_eq!(events.len(), 1, "{events:#?}");
    let e = &events[0];
    assert_eq!(e.count, Some(7));
    assert_eq!(message(e), "synced successfully");
    assert_eq!(e.type_.as_deref(), Some("Normal"));
    assert_eq!(e.reason.as_deref(), Some("Synced"));
    let name = e.metadata.name.clone().unwrap_or_default();
    let suffix = name.strip_prefix("cm-a.").expect("name is <object>.<hex>");
    assert!(u64::from_str_radix(suffix, 16).is_ok(), "{name}");
    let source = e.source.clone().unwrap_or_default();
    assert_eq!(source.component.as_deref(), Some("rkube-test"));
    assert_eq!(source.host.as_deref(), Some("host-a"));
    assert_eq!(e.reporting_component.as_deref(), Some("rkube-test"));
    assert_eq!(e.reporting_instance.as_deref(), Some("host-a"));
    assert_eq!(e.involved_object.uid, obj.uid);
    assert_eq!(e.involved_object.kind.as_deref(), Some("ConfigMap"));
    let (first, last) = (
        e.first_timestamp.clone().expect("firstTimestamp"),
        e.last_timestamp.clone().expect("lastTimestamp"),
    );
    assert!(first.0 <= last.0);

    // A Warning with the same reason and message is a different event.
    env.recorder
        .event(&obj, EventType::Warning, "Synced", "synced successfully");
    assert_eq!(env.events_about("cm-a").await.len(), 2);

    // The Event is deleted (e.g. by its TTL): the next repeat recreates it under the same name.
    let api: Api<Event> = Api::namespaced(env.client.clone(), "default");
    api.delete(&name, &DeleteParams::default())
        .await
        .expect("delete event");
    env.recorder
        .event(&obj, EventType::Normal, "Synced", "synced successfully");
    let events = env.events_about("cm-a").await;
    let again = events
        .iter()
        .find(|e| e.metadata.name.as_deref() == Some(name.as_str()))
        .expect("recreated with the same name");
    assert_eq!(again.count, Some(8));
    env.broadcaster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn similar_events_are_combined_after_ten_messages() {
    let env = env().await;
    let obj = env.object("cm-b").await;
    for i in 0..12 {
        env.recorder.event(
            &obj,
            EventType::Warning,
            "FailedSync",
            &format!("attempt {i} failed"),
        );
    }
    let events = env.events_about("cm-b").await;
    assert_eq!(
        events.len(),
        10,
        "9 single events and one combined: {events:#?}"
    );
    let (combined, single): (Vec<&Event>, Vec<&Event>) = events
        .iter()
        .partition(|e| message(e).starts_with("(combined from similar events): "));
    assert_eq!(single.len(), 9);
    assert!(single.iter().all(|e| e.count == Some(1)));
    let mut messages: Vec<&str> = single.iter().map(|e| message(e)).collect();
    messages.sort();
    let want: Vec<String> = (0..9).map(|i| format!("attempt {i} failed")).collect();
    assert_eq!(
        messages,
        want.iter().map(String::as_str).collect::<Vec<_>>()
    );
    assert_eq!(combined.len(), 1);
    assert_eq!(combined[0].count, Some(3), "messages 9, 10 and 11");
    assert_eq!(
        message(combined[0]),
        "(combined from similar events): attempt 11 failed"
    );
    assert_eq!(combined[0].reason.as_deref(), Some("FailedSync"));
    env.broadcaster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spam_filter_drops_events_beyond_the_burst() {
    let env = env().await;
    let same = env.object("cm-c").await;
    let varied = env.object("cm-d").await;
    for i in 0..30 {
        env.recorder
            .event(&same, EventType::Warning, "BackOff", "back-off restarting");
        env.recorder
            .event(&varied, EventType::Normal, "Progress", &format!("step {i}"));
    }
    // 25 of 30 identical events pass: one Event, count 25.
    let events = env.events_about("cm-c").await;
    assert_eq!(events.len(), 1, "{events:#?}");
    assert_eq!(events[0].count, Some(25));

    // 25 of 30 varied events pass: 9 single ones, then 16 counted on the combined one.
    let events = env.events_about("cm-d").await;
    let total: i32 = events.iter().filter_map(|e| e.count).sum();
    assert_eq!(total, 25, "{events:#?}");
    assert_eq!(events.len(), 10);
    let combined = events
        .iter()
        .find(|e| message(e).starts_with("(combined from similar events): "))
        .expect("combined event");
    assert_eq!(combined.count, Some(16));

    // Each object has its own bucket: a third object is not affected.
    let other = env.object("cm-e").await;
    env.recorder
        .event(&other, EventType::Normal, "Created", "created");
    assert_eq!(env.events_about("cm-e").await.len(), 1);
    env.broadcaster.shutdown().await;
}
