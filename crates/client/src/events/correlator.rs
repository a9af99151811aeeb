//! Event correlation: deduplication, aggregation and spam filtering before events reach the API
//! (upstream client-go `tools/record/events_cache.go`: `EventCorrelator`, `EventAggregator`,
//! `eventLogger`, `EventSourceObjectSpamFilter`).
//!
//! For each event, in upstream's order:
//! 1. **Aggregate**: events equal in source, involved object, type, reason and reporting
//!    controller/instance but with different messages are "similar". When 10 distinct messages were
//!    seen with no gap longer than 10 minutes, the event is replaced by a combined event (message
//!    `(combined from similar events): <message>`) whose cache key is the similarity key, so all later
//!    similar events count onto that one combined Event.
//! 2. **Observe**: if the (possibly combined) event's key was seen before, the event takes the existing
//!    Event's name and `firstTimestamp`, `count` becomes the previous count + 1, and a patch of
//!    `count`, `lastTimestamp` and `message` is prepared instead of a create.
//! 3. **Spam filter**: a token bucket per source + involved object (burst 25, refilled at one token per
//!    300 s); without a token the event is dropped.
//!
//! The correlator is owned by one sink task, so it takes `&mut self` instead of locking, and the
//! current time is passed in, which makes it a pure state machine for tests. Differences: keys join
//! their fields with a separator (upstream concatenates them, which can collide); the combined event
//! keeps `reportingComponent`/`reportingInstance`; the patch is built directly rather than by diffing
//! two serialized events (same content: `count`, `lastTimestamp`, `message`).

use std::collections::HashSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;

use super::lru::Lru;

/// Upstream `maxLruCacheEntries`.
pub const DEFAULT_LRU_CACHE_SIZE: usize = 4096;
/// Upstream `defaultAggregateMaxEvents`.
pub const DEFAULT_AGGREGATE_MAX_EVENTS: usize = 10;
/// Upstream `defaultAggregateIntervalInSeconds`.
pub const DEFAULT_AGGREGATE_INTERVAL: Duration = Duration::from_secs(600);
/// Upstream `defaultSpamBurst`.
pub const DEFAULT_SPAM_BURST: u32 = 25;
/// Upstream `defaultSpamQPS`: one event every 5 minutes.
pub const DEFAULT_SPAM_QPS: f64 = 1.0 / 300.0;
/// Upstream `EventAggregatorByReasonMessageFunc` prefix.
pub const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// Tunables (upstream `CorrelatorOptions`); `Default` gives upstream's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct CorrelatorOptions {
    pub lru_cache_size: usize,
    /// Token bucket burst per source + object.
    pub burst: u32,
    /// Token bucket refill rate (tokens per second).
    pub qps: f64,
    /// Distinct messages of similar events before aggregation.
    pub max_events: usize,
    /// A gap longer than this between similar events starts a fresh aggregation window.
    pub max_interval: Duration,
}

impl Default for CorrelatorOptions {
    fn default() -> CorrelatorOptions {
        CorrelatorOptions {
            lru_cache_size: DEFAULT_LRU_CACHE_SIZE,
            burst: DEFAULT_SPAM_BURST,
            qps: DEFAULT_SPAM_QPS,
            max_events: DEFAULT_AGGREGATE_MAX_EVENTS,
            max_interval: DEFAULT_AGGREGATE_INTERVAL,
        }
    }
}

/// An event ready to be written (upstream `EventCorrelateResult` without `Skip`).
#[derive(Clone, Debug, PartialEq)]
pub struct Correlated {
    /// The event to create, or (when `patch` is set) the state the existing Event should reach.
    pub event: Event,
    /// A strategic merge patch for the existing Event named `event.metadata.name`; `None` to create.
    pub patch: Option<serde_json::Value>,
}

#[derive(Clone, Debug, Default)]
struct AggregateRecord {
    local_keys: HashSet<String>,
    last_timestamp: Option<Timestamp>,
}

#[derive(Clone, Debug)]
struct EventLog {
    count: i32,
    first_timestamp: Option<Time>,
    name: Option<String>,
    resource_version: Option<String>,
}

#[derive(Clone, Debug)]
struct TokenBucket {
    tokens: f64,
    last: Timestamp,
}

/// Filters, aggregates, counts and deduplicates events (upstream `EventCorrelator`).
#[derive(Debug)]
pub struct EventCorrelator {
    options: CorrelatorOptions,
    aggregates: Lru<AggregateRecord>,
    logs: Lru<EventLog>,
    buckets: Lru<TokenBucket>,
}

fn s(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or("")
}

fn join(parts: &[&str]) -> String {
    parts.join("\u{1f}")
}

/// Upstream `getEventKey`: source, involved object (with field path), type, reason, message.
pub fn event_key(e: &Event) -> String {
    let src = e.source.clone().unwrap_or_default();
    let o = &e.involved_object;
    join(&[
        s(&src.component),
        s(&src.host),
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.field_path),
        s(&o.uid),
        s(&o.api_version),
        s(&e.type_),
        s(&e.reason),
        s(&e.message),
    ])
}

/// Upstream `getSpamKey`: source and involved object.
pub fn spam_key(e: &Event) -> String {
    let src = e.source.clone().unwrap_or_default();
    let o = &e.involved_object;
    join(&[
        s(&src.component),
        s(&src.host),
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.uid),
        s(&o.api_version),
    ])
}

/// Upstream `EventAggregatorByReasonFunc`: (similarity key, message).
pub fn aggregate_keys(e: &Event) -> (String, String) {
    let src = e.source.clone().unwrap_or_default();
    let o = &e.involved_object;
    let key = join(&[
        s(&src.component),
        s(&src.host),
        s(&o.kind),
        s(&o.namespace),
        s(&o.name),
        s(&o.uid),
        s(&o.api_version),
        s(&e.type_),
        s(&e.reason),
        s(&e.reporting_component),
        s(&e.reporting_instance),
    ]);
    (key, s(&e.message).to_string())
}

/// Upstream's Event name: `<involved object name>.<unix nanoseconds in hex>`.
pub fn event_name(object_name: &str, at: Timestamp) -> String {
    format!("{object_name}.{:x}", at.as_nanosecond())
}

impl EventCorrelator {
    pub fn new(options: CorrelatorOptions) -> EventCorrelator {
        let size = options.lru_cache_size;
        EventCorrelator {
            options,
            aggregates: Lru::new(size),
            logs: Lru::new(size),
            buckets: Lru::new(size),
        }
    }

    /// Runs `event` through aggregation, observation and the spam filter at time `now`. `None` means
    /// the spam filter dropped it (upstream `Skip`).
    pub fn correlate(&mut self, event: Event, now: Timestamp) -> Option<Correlated> {
        let (event, key) = self.aggregate(event, now);
        let (event, patch) = self.observe(event, &key);
        if self.filtered(&event, now) {
            return None;
        }
        Some(Correlated { event, patch })
    }

    /// Records the server's copy of a written event, so the next identical event patches it
    /// (upstream `UpdateState`).
    pub fn update_state(&mut self, event: &Event) {
        self.logs.put(event_key(event), log_of(event));
    }

    /// Upstream `EventAggregator.EventAggregate`.
    fn aggregate(&mut self, event: Event, now: Timestamp) -> (Event, String) {
        let key = event_key(&event);
        let (aggregate_key, local_key) = aggregate_keys(&event);
        let mut record = self
            .aggregates
            .get(&aggregate_key)
            .cloned()
            .unwrap_or_default();
        let fresh = match record.last_timestamp {
            None => true,
            Some(last) => {
                now.duration_since(last).as_secs_f64() > self.options.max_interval.as_secs_f64()
            }
        };
        if fresh {
            record = AggregateRecord::default();
        }
        record.local_keys.insert(local_key);
        record.last_timestamp = Some(now);
        if record.local_keys.len() < self.options.max_events {
            self.aggregates.put(aggregate_key, record);
            return (event, key);
        }
        // Do not grow the set beyond the maximum.
        if let Some(any) = record.local_keys.iter().next().cloned() {
            record.local_keys.remove(&any);
        }
        self.aggregates.put(aggregate_key.clone(), record);

        let name = s(&event.involved_object.name).to_string();
        let combined = Event {
            metadata: ObjectMeta {
                name: Some(event_name(&name, now)),
                namespace: event.metadata.namespace.clone(),
                ..ObjectMeta::default()
            },
            count: Some(1),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            involved_object: event.involved_object.clone(),
            message: Some(format!("{COMBINED_PREFIX}{}", s(&event.message))),
            type_: event.type_.clone(),
            reason: event.reason.clone(),
            source: event.source.clone(),
            reporting_component: event.reporting_component.clone(),
            reporting_instance: event.reporting_instance.clone(),
            ..Event::default()
        };
        (combined, aggregate_key)
    }

    /// Upstream `eventLogger.eventObserve`.
    fn observe(&mut self, mut event: Event, key: &str) -> (Event, Option<serde_json::Value>) {
        let mut patch = None;
        if let Some(last) = self.logs.get(key).filter(|l| l.count > 0).cloned() {
            event.metadata.name = last.name;
            event.metadata.resource_version = last.resource_version;
            event.first_timestamp = last.first_timestamp;
            event.count = Some(last.count.saturating_add(1));
            patch = Some(json!({
                "count": event.count,
                "lastTimestamp": event.last_timestamp,
                "message": event.message,
            }));
        }
        self.logs.put(key.to_string(), log_of(&event));
        (event, patch)
    }

    /// Upstream `EventSourceObjectSpamFilter.Filter`: true when the event must be dropped.
    fn filtered(&mut self, event: &Event, now: Timestamp) -> bool {
        let key = spam_key(event);
        let burst = f64::from(self.options.burst);
        let mut bucket = self.buckets.get(&key).cloned().unwrap_or(TokenBucket {
            tokens: burst,
            last: now,
        });
        let elapsed = now.duration_since(bucket.last).as_secs_f64().max(0.0);
        bucket.tokens = (bucket.tokens + elapsed * self.options.qps).min(burst);
        bucket.last = now;
        let accept = bucket.tokens >= 1.0;
        if accept {
            bucket.tokens -= 1.0;
        }
        self.buckets.put(key, bucket);
        !accept
    }
}

fn log_of(event: &Event) -> EventLog {
    EventLog {
        count: event.count.unwrap_or(0),
        first_timestamp: event.first_timestamp.clone(),
        name: event.metadata.name.clone(),
        resource_version: event.metadata.resource_version.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{EventSource, ObjectReference};

    fn at(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn ev(object: &str, reason: &str, message: &str, t: Timestamp) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(event_name(object, t)),
                namespace: Some("default".into()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                kind: Some("Pod".into()),
                api_version: Some("v1".into()),
                namespace: Some("default".into()),
                name: Some(object.into()),
                uid: Some(format!("uid-{object}")),
                ..ObjectReference::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some("Normal".into()),
            count: Some(1),
            first_timestamp: Some(Time(t)),
            last_timestamp: Some(Time(t)),
            source: Some(EventSource {
                component: Some("test".into()),
                host: Some("host".into()),
            }),
            reporting_component: Some("test".into()),
            reporting_instance: Some("host".into()),
            ..Event::default()
        }
    }

    /// Feeds an event and simulates the server accepting the write.
    fn feed(c: &mut EventCorrelator, e: Event, t: Timestamp) -> Option<Correlated> {
        let out = c.correlate(e, t)?;
        let mut stored = out.event.clone();
        stored.metadata.resource_version = Some("1".into());
        c.update_state(&stored);
        Some(out)
    }

    #[test]
    fn identical_events_count_up_on_the_first_name() {
        let mut c = EventCorrelator::new(CorrelatorOptions::default());
        let first = feed(&mut c, ev("p", "Pulled", "same", at(0)), at(0)).expect("not filtered");
        assert_eq!(first.patch, None);
        assert_eq!(first.event.count, Some(1));
        for i in 1..5 {
            let out = feed(&mut c, ev("p", "Pulled", "same", at(i)), at(i)).expect("not filtered");
            assert_eq!(out.event.metadata.name, first.event.metadata.name);
            assert_eq!(out.event.count, Some(i as i32 + 1));
            assert_eq!(out.event.first_timestamp, Some(Time(at(0))));
            let patch = out.patch.expect("patch for a repeat");
            assert_eq!(patch["count"], json!(i + 1));
            assert_eq!(patch["message"], json!("same"));
            assert!(patch["lastTimestamp"].is_string());
        }
        // A different object is a different event.
        let other = feed(&mut c, ev("q", "Pulled", "same", at(9)), at(9)).expect("not filtered");
        assert_eq!(other.patch, None);
    }

    #[test]
    fn similar_events_are_combined_after_ten_messages() {
        let mut c = EventCorrelator::new(CorrelatorOptions::default());
        let mut created = Vec::new();
        for i in 0..9 {
            let out = feed(&mut c, ev("p", "Failed", &format!("m{i}"), at(i)), at(i))
                .expect("not filtered");
            assert_eq!(out.patch, None, "message {i} is new");
            created.push(out.event.metadata.name.clone());
        }
        let tenth = feed(&mut c, ev("p", "Failed", "m9", at(9)), at(9)).expect("not filtered");
        assert_eq!(tenth.patch, None);
        assert_eq!(
            tenth.event.message.as_deref(),
            Some("(combined from similar events): m9")
        );
        assert!(!created.contains(&tenth.event.metadata.name));
        let eleventh =
            feed(&mut c, ev("p", "Failed", "m10", at(10)), at(10)).expect("not filtered");
        assert_eq!(eleventh.event.metadata.name, tenth.event.metadata.name);
        assert_eq!(eleventh.event.count, Some(2));
        assert_eq!(
            eleventh.patch.expect("patch")["message"],
            json!("(combined from similar events): m10")
        );
    }

    #[test]
    fn aggregation_window_restarts_after_ten_minutes() {
        let mut c = EventCorrelator::new(CorrelatorOptions::default());
        for i in 0..9 {
            feed(&mut c, ev("p", "Failed", &format!("m{i}"), at(i)), at(i));
        }
        // More than 600 s after the last similar event: a fresh window, so no aggregation.
        let t = at(8 + 601);
        let out = feed(&mut c, ev("p", "Failed", "late", t), t).expect("not filtered");
        assert_eq!(out.event.message.as_deref(), Some("late"));
    }

    #[test]
    fn spam_filter_allows_burst_then_one_per_five_minutes() {
        let mut c = EventCorrelator::new(CorrelatorOptions::default());
        let mut passed = 0;
        for i in 0..40 {
            // Identical events still spend tokens (upstream filters after observing).
            if feed(&mut c, ev("p", "Tick", "same", at(0)), at(0)).is_some() {
                passed += 1;
            } else {
                assert!(i >= 25);
            }
        }
        assert_eq!(passed, 25);
        assert!(feed(&mut c, ev("p", "Tick", "same", at(299)), at(299)).is_none());
        assert!(feed(&mut c, ev("p", "Tick", "same", at(301)), at(301)).is_some());
        assert!(feed(&mut c, ev("p", "Tick", "same", at(302)), at(302)).is_none());
        // Another object has its own bucket.
        assert!(feed(&mut c, ev("q", "Tick", "same", at(302)), at(302)).is_some());
    }

    #[test]
    fn keys_ignore_and_include_the_right_fields() {
        let a = ev("p", "R", "m1", at(0));
        let mut b = ev("p", "R", "m2", at(5));
        assert_ne!(event_key(&a), event_key(&b));
        assert_eq!(aggregate_keys(&a).0, aggregate_keys(&b).0);
        assert_eq!(spam_key(&a), spam_key(&b));
        b.reason = Some("Other".into());
        assert_ne!(aggregate_keys(&a).0, aggregate_keys(&b).0);
        assert_eq!(spam_key(&a), spam_key(&b));
        assert_eq!(event_name("web-0", Timestamp::UNIX_EPOCH), "web-0.0");
        let t = Timestamp::from_nanosecond(0x17a2_b3c4_d5e6_f708).unwrap_or(Timestamp::UNIX_EPOCH);
        assert_eq!(event_name("web-0", t), "web-0.17a2b3c4d5e6f708");
    }
}
