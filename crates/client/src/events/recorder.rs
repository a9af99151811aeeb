//! The broadcaster and the per-component recorder (upstream client-go `tools/record/event.go`:
//! `EventBroadcaster`, `NewRecorder`, `recorderImpl.generateEvent` / `makeEvent`).
//!
//! A [`Recorder`] builds the Event (name `<object>.<unix-nanos hex>`, namespace of the object or
//! `default`, `count` 1, `firstTimestamp` = `lastTimestamp` = now, `source` and
//! `reportingComponent`/`reportingInstance` from the recorder) and hands it to every watcher started on
//! the broadcaster without waiting: each watcher has a queue of 1000 events and an event that finds a
//! queue full is dropped for that watcher (upstream `DropIfChannelFull`). Watchers are tokio tasks: a
//! sink writer with its own [`EventCorrelator`], a log writer, or any function.
//!
//! Differences: the recorder takes an `ObjectReference` (use `kube::Resource::object_ref`) instead of a
//! runtime object and a scheme; the event type is an enum, so invalid types cannot be recorded;
//! [`EventBroadcaster::flush`] waits until everything queued so far was handled (useful before exit
//! and in tests); watchers are stopped together by [`EventBroadcaster::shutdown`], not one by one.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use super::correlator::{event_name, CorrelatorOptions, EventCorrelator};
use super::sink::{record_to_sink, EventSink, RetryPolicy};

/// Upstream `maxQueuedEvents`.
pub const DEFAULT_QUEUE_LEN: usize = 1000;
/// Upstream `maxTriesPerEvent`.
pub const DEFAULT_MAX_TRIES: u32 = 12;
/// Upstream `defaultSleepDuration`.
pub const DEFAULT_RETRY_SLEEP: Duration = Duration::from_secs(10);

/// `Normal` or `Warning` (upstream `EventTypeNormal`, `EventTypeWarning`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// Broadcaster settings; `Default` gives upstream's values.
#[derive(Clone, Debug, PartialEq)]
pub struct BroadcasterOptions {
    /// Queue length per watcher.
    pub queue_len: usize,
    /// Attempts per event on transport errors.
    pub max_tries: u32,
    /// Wait between attempts (the first wait is a random fraction of it).
    pub retry_sleep: Duration,
    /// Options of each sink's correlator.
    pub correlator: CorrelatorOptions,
}

impl Default for BroadcasterOptions {
    fn default() -> BroadcasterOptions {
        BroadcasterOptions {
            queue_len: DEFAULT_QUEUE_LEN,
            max_tries: DEFAULT_MAX_TRIES,
            retry_sleep: DEFAULT_RETRY_SLEEP,
            correlator: CorrelatorOptions::default(),
        }
    }
}

enum Msg {
    Event(Arc<Event>),
    Flush(oneshot::Sender<()>),
}

/// The fan-out point shared by the broadcaster and its recorders.
struct Hub {
    watchers: Mutex<Vec<mpsc::Sender<Msg>>>,
    stopped: AtomicBool,
}

impl Hub {
    fn senders(&self) -> Vec<mpsc::Sender<Msg>> {
        self.watchers.lock().map(|w| w.clone()).unwrap_or_default()
    }

    /// Upstream `ActionOrDrop`: never waits.
    fn action_or_drop(&self, event: Event) {
        if self.stopped.load(Ordering::Acquire) {
            debug!(event = ?event.metadata.name, "event broadcaster is shut down, dropped event");
            return;
        }
        let event = Arc::new(event);
        for tx in self.senders() {
            match tx.try_send(Msg::Event(event.clone())) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(_)) => {
                    warn!(event = ?event.metadata.name, "unable to record event: too many queued events, dropped event");
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {}
            }
        }
    }
}

/// Receives events from recorders and sends them to sinks, logs or handlers (upstream
/// `EventBroadcaster`).
pub struct EventBroadcaster {
    hub: Arc<Hub>,
    options: BroadcasterOptions,
    shutdown: CancellationToken,
    tasks: Mutex<Vec<JoinHandle<()>>>,
}

impl fmt::Debug for EventBroadcaster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventBroadcaster")
            .field("watchers", &self.hub.senders().len())
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl Default for EventBroadcaster {
    fn default() -> EventBroadcaster {
        EventBroadcaster::new()
    }
}

impl EventBroadcaster {
    /// A broadcaster with upstream's defaults (upstream `NewBroadcaster`).
    pub fn new() -> EventBroadcaster {
        EventBroadcaster::with_options(BroadcasterOptions::default())
    }

    pub fn with_options(options: BroadcasterOptions) -> EventBroadcaster {
        EventBroadcaster {
            hub: Arc::new(Hub {
                watchers: Mutex::new(Vec::new()),
                stopped: AtomicBool::new(false),
            }),
            options,
            shutdown: CancellationToken::new(),
            tasks: Mutex::new(Vec::new()),
        }
    }

    /// A recorder whose events carry `source.component` / `reportingComponent` = `component` and
    /// `source.host` / `reportingInstance` = `host` (upstream `NewRecorder`).
    pub fn new_recorder(&self, component: impl Into<String>, host: impl Into<String>) -> Recorder {
        Recorder {
            hub: self.hub.clone(),
            component: component.into(),
            host: host.into(),
        }
    }

    /// Writes every event from now on to `sink`, through a correlator of its own (upstream
    /// `StartRecordingToSink`). Must be called inside a tokio runtime.
    pub fn start_recording_to_sink(&self, sink: impl EventSink) {
        let sink: Arc<dyn EventSink> = Arc::new(sink);
        let mut rx = self.watch();
        let retry = RetryPolicy {
            max_tries: self.options.max_tries.max(1),
            sleep: self.options.retry_sleep,
        };
        let mut correlator = EventCorrelator::new(self.options.correlator.clone());
        let shutdown = self.shutdown.clone();
        self.spawn(async move {
            while let Some(msg) = rx.recv().await {
                match msg {
                    Msg::Event(event) => {
                        let event = Event::clone(&event);
                        record_to_sink(&sink, &mut correlator, event, retry, &shutdown).await;
                    }
                    Msg::Flush(ack) => {
                        let _ = ack.send(());
                    }
                }
            }
        });
    }

    /// Calls `handler` with every event from now on, on a task of its own (upstream
    /// `StartEventWatcher`).
    pub fn start_event_watcher(&self, mut handler: impl FnMut(&Event) + Send + 'static) {
        let mut rx = self.watch();
        self.spawn(async move {
            while let Some(msg) = rx.recv().await {
                match msg {
                    Msg::Event(event) => handler(&event),
                    Msg::Flush(ack) => {
                        let _ = ack.send(());
                    }
                }
            }
        });
    }

    /// Logs every event from now on at INFO (upstream `StartStructuredLogging`).
    pub fn start_logging(&self) {
        self.start_event_watcher(|e| {
            let o = &e.involved_object;
            info!(
                kind = o.kind.as_deref().unwrap_or_default(),
                namespace = o.namespace.as_deref().unwrap_or_default(),
                name = o.name.as_deref().unwrap_or_default(),
                r#type = e.type_.as_deref().unwrap_or_default(),
                reason = e.reason.as_deref().unwrap_or_default(),
                message = e.message.as_deref().unwrap_or_default(),
                "event occurred"
            );
        });
    }

    /// Waits until every watcher has handled the events queued before this call.
    pub async fn flush(&self) {
        let mut acks = Vec::new();
        for tx in self.hub.senders() {
            let (ack, done) = oneshot::channel();
            if tx.send(Msg::Flush(ack)).await.is_ok() {
                acks.push(done);
            }
        }
        for done in acks {
            let _ = done.await;
        }
    }

    /// Stops accepting events, lets the watchers finish what is queued (each queued event gets one
    /// write attempt, as upstream after `Shutdown`), and waits for them.
    pub async fn shutdown(&self) {
        self.hub.stopped.store(true, Ordering::Release);
        self.shutdown.cancel();
        if let Ok(mut w) = self.hub.watchers.lock() {
            w.clear();
        }
        let tasks = self
            .tasks
            .lock()
            .map(|mut t| std::mem::take(&mut *t))
            .unwrap_or_default();
        for task in tasks {
            let _ = task.await;
        }
    }

    fn watch(&self) -> mpsc::Receiver<Msg> {
        let (tx, rx) = mpsc::channel(self.options.queue_len.max(1));
        if let Ok(mut w) = self.hub.watchers.lock() {
            w.push(tx);
        }
        rx
    }

    fn spawn(&self, task: impl std::future::Future<Output = ()> + Send + 'static) {
        let handle = tokio::spawn(task);
        if let Ok(mut t) = self.tasks.lock() {
            t.push(handle);
        }
    }
}

/// Records events on behalf of one component (upstream `EventRecorder`). Cheap to clone.
#[derive(Clone)]
pub struct Recorder {
    hub: Arc<Hub>,
    component: String,
    host: String,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Recorder")
            .field("component", &self.component)
            .field("host", &self.host)
            .finish_non_exhaustive()
    }
}

impl Recorder {
    /// Records an event about `object` (upstream `Event`). Never blocks; the event is dropped (and
    /// logged) if the object has no name or the queues are full.
    pub fn event(&self, object: &ObjectReference, type_: EventType, reason: &str, message: &str) {
        self.annotated_event(object, BTreeMap::new(), type_, reason, message);
    }

    /// Like [`event`](Self::event), with annotations on the Event (upstream `AnnotatedEventf`).
    pub fn annotated_event(
        &self,
        object: &ObjectReference,
        annotations: BTreeMap<String, String>,
        type_: EventType,
        reason: &str,
        message: &str,
    ) {
        if object.name.as_deref().unwrap_or_default().is_empty() {
            warn!(
                reason,
                message, "could not construct reference (no name), will not report event"
            );
            return;
        }
        let event = make_event(
            object,
            annotations,
            type_,
            reason,
            message,
            &self.component,
            &self.host,
            Timestamp::now(),
        );
        self.hub.action_or_drop(event);
    }
}

/// Builds an Event as upstream's `makeEvent` + `generateEvent` do.
#[allow(clippy::too_many_arguments)]
pub fn make_event(
    object: &ObjectReference,
    annotations: BTreeMap<String, String>,
    type_: EventType,
    reason: &str,
    message: &str,
    component: &str,
    host: &str,
    now: Timestamp,
) -> Event {
    let namespace = object
        .namespace
        .clone()
        .filter(|ns| !ns.is_empty())
        .unwrap_or_else(|| "default".to_string());
    Event {
        metadata: ObjectMeta {
            name: Some(event_name(object.name.as_deref().unwrap_or_default(), now)),
            namespace: Some(namespace),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..ObjectMeta::default()
        },
        involved_object: object.clone(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        type_: Some(type_.as_str().to_string()),
        source: Some(EventSource {
            component: Some(component.to_string()),
            host: (!host.is_empty()).then(|| host.to_string()),
        }),
        reporting_component: Some(component.to_string()),
        reporting_instance: Some(host.to_string()),
        ..Event::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::SinkError;
    use futures::future::BoxFuture;
    use std::collections::HashMap;

    /// An in-memory sink with upstream's create/patch semantics.
    #[derive(Default, Clone)]
    struct MemSink {
        events: Arc<Mutex<HashMap<String, Event>>>,
        creates: Arc<Mutex<u32>>,
    }

    impl EventSink for MemSink {
        fn create<'a>(&'a self, event: &'a Event) -> BoxFuture<'a, Result<Event, SinkError>> {
            Box::pin(async move {
                let mut events = self
                    .events
                    .lock()
                    .map_err(|e| SinkError::Transport(e.to_string()))?;
                let name = event.metadata.name.clone().unwrap_or_default();
                if events.contains_key(&name) {
                    return Err(SinkError::Rejected("already exists".into()));
                }
                let mut stored = event.clone();
                stored.metadata.resource_version = Some("1".into());
                events.insert(name, stored.clone());
                if let Ok(mut c) = self.creates.lock() {
                    *c += 1;
                }
                Ok(stored)
            })
        }

        fn patch<'a>(
            &'a self,
            event: &'a Event,
            patch: &'a serde_json::Value,
        ) -> BoxFuture<'a, Result<Event, SinkError>> {
            Box::pin(async move {
                let mut events = self
                    .events
                    .lock()
                    .map_err(|e| SinkError::Transport(e.to_string()))?;
                let name = event.metadata.name.clone().unwrap_or_default();
                let stored = events.get_mut(&name).ok_or(SinkError::NotFound)?;
                stored.count = patch["count"].as_i64().map(|c| c as i32);
                stored.message = patch["message"].as_str().map(str::to_string);
                Ok(stored.clone())
            })
        }
    }

    fn pod(name: &str) -> ObjectReference {
        ObjectReference {
            kind: Some("Pod".into()),
            api_version: Some("v1".into()),
            namespace: Some("ns1".into()),
            name: Some(name.into()),
            uid: Some(format!("uid-{name}")),
            ..ObjectReference::default()
        }
    }

    #[test]
    fn make_event_fields() {
        let t = Timestamp::from_second(1_700_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let e = make_event(
            &pod("web"),
            BTreeMap::new(),
            EventType::Warning,
            "Failed",
            "boom",
            "kubelet",
            "node-1",
            t,
        );
        assert_eq!(e.metadata.name.as_deref(), Some("web.17979cfe362a0000"));
        assert_eq!(e.metadata.namespace.as_deref(), Some("ns1"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.count, Some(1));
        assert_eq!(e.reporting_component.as_deref(), Some("kubelet"));
        assert_eq!(e.reporting_instance.as_deref(), Some("node-1"));
        let source = e.source.unwrap_or_default();
        assert_eq!(source.component.as_deref(), Some("kubelet"));
        assert_eq!(source.host.as_deref(), Some("node-1"));
        let mut node = pod("n1");
        node.namespace = None;
        let e = make_event(
            &node,
            BTreeMap::new(),
            EventType::Normal,
            "R",
            "m",
            "c",
            "",
            t,
        );
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
    }

    #[tokio::test]
    async fn broadcaster_counts_repeats_and_feeds_every_watcher() {
        let b = EventBroadcaster::new();
        let sink = MemSink::default();
        b.start_recording_to_sink(sink.clone());
        let seen = Arc::new(Mutex::new(0u32));
        let seen2 = seen.clone();
        b.start_event_watcher(move |_| {
            if let Ok(mut s) = seen2.lock() {
                *s += 1;
            }
        });
        let r = b.new_recorder("test", "host");
        for _ in 0..5 {
            r.event(&pod("a"), EventType::Normal, "Pulled", "same");
        }
        r.event(&pod("b"), EventType::Normal, "Pulled", "same");
        b.flush().await;
        let events = sink.events.lock().map(|e| e.clone()).unwrap_or_default();
        assert_eq!(events.len(), 2);
        let mut counts: Vec<_> = events.values().filter_map(|e| e.count).collect();
        counts.sort();
        assert_eq!(counts, vec![1, 5]);
        assert_eq!(seen.lock().map(|s| *s).unwrap_or(0), 6);
        b.shutdown().await;
        r.event(&pod("c"), EventType::Normal, "Late", "after shutdown");
        assert_eq!(sink.events.lock().map(|e| e.len()).unwrap_or(0), 2);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn full_queue_drops_instead_of_blocking() {
        let b = EventBroadcaster::with_options(BroadcasterOptions {
            queue_len: 3,
            ..BroadcasterOptions::default()
        });
        let handled = Arc::new(Mutex::new(0u32));
        let h = handled.clone();
        b.start_event_watcher(move |_| {
            if let Ok(mut n) = h.lock() {
                *n += 1;
            }
        });
        let r = b.new_recorder("test", "host");
        // On a single-threaded runtime the watcher cannot run before this loop yields, so only the
        // first three events fit in its queue; recording must neither block nor fail.
        for i in 0..50 {
            r.event(&pod("a"), EventType::Normal, "R", &format!("m{i}"));
        }
        b.flush().await;
        assert_eq!(handled.lock().map(|n| *n).unwrap_or(0), 3);
        b.shutdown().await;
    }
}
