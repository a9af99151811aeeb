//! The event recorder and broadcaster for `core/v1` Events (upstream client-go `tools/record`).
//!
//! Components get a [`Recorder`] from an [`EventBroadcaster`] and call
//! [`Recorder::event`]`(object, Normal|Warning, reason, message)`. Recording never blocks: the event is
//! queued (up to 1000 per watcher, further events are dropped with a log line, as upstream's
//! `DropIfChannelFull`) and a task per sink writes it. Before writing, each sink's
//! [`EventCorrelator`] (upstream `events_cache.go`) deduplicates, aggregates and rate limits:
//!
//! - an identical event (same source, involved object, type, reason and message) is not created again:
//!   the existing Event is patched with `count + 1` and a new `lastTimestamp`;
//! - once 10 events that differ only in their message were seen within 10 minutes, further ones are
//!   folded into one Event whose message starts with `(combined from similar events): `;
//! - each source + involved object has a token bucket (burst 25, one more every 5 minutes); events
//!   beyond it are dropped.
//!
//! ```no_run
//! # async fn demo(client: kube::Client, pod: k8s_openapi::api::core::v1::Pod) {
//! use client::events::{ApiEventSink, EventBroadcaster, EventType};
//! use kube::Resource;
//!
//! let broadcaster = EventBroadcaster::new();
//! broadcaster.start_recording_to_sink(ApiEventSink::new(client));
//! let recorder = broadcaster.new_recorder("default-scheduler", "host-1");
//! recorder.event(&pod.object_ref(&()), EventType::Warning, "FailedScheduling", "0/3 nodes are available");
//! broadcaster.shutdown().await; // writes what is queued, then stops
//! # }
//! ```
//!
//! Files: [`recorder`] (broadcaster, recorder, event construction: upstream `event.go`),
//! [`correlator`] (upstream `events_cache.go`), [`sink`] (the API sink and the write/retry loop:
//! upstream `EventSink`, `recordToSink`, `recordEvent`), `lru` (the bounded caches).

pub mod correlator;
mod lru;
pub mod recorder;
pub mod sink;

pub use correlator::{Correlated, CorrelatorOptions, EventCorrelator};
pub use recorder::{BroadcasterOptions, EventBroadcaster, EventType, Recorder};
pub use sink::{ApiEventSink, EventSink, SinkError};
