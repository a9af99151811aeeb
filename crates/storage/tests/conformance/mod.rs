//! The storage conformance suite: the semantics every backend must have, run against SQLite and etcd
//! (`sqlite_conformance.rs`, `etcd_conformance.rs`). Each case gets a fresh, empty store.

#![allow(dead_code)]

pub mod cases;
pub mod watch_cases;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use storage::{Event, Revision, Store, WatchStream};

/// A way to get a fresh store and to close and reopen it on the same data.
#[async_trait]
pub trait Backend: Send {
    async fn open(&mut self) -> Arc<dyn Store>;
    /// Closes `store` (releasing its files/connections) and opens the same data again.
    async fn reopen(&mut self, store: Arc<dyn Store>) -> Arc<dyn Store>;
}

/// Upper bound for any single case; a hang is a failure, not a stuck CI run.
pub const CASE_TIMEOUT: Duration = Duration::from_secs(180);

/// Generates one `#[tokio::test]` per conformance case for a backend constructor expression.
#[macro_export]
macro_rules! conformance_suite {
    ($make:expr) => {
        $crate::conformance_suite!(@cases $make;
            cases::create_get_update_delete,
            cases::failed_writes_consume_no_revision,
            cases::concurrent_writers_lose_no_update,
            cases::list_is_a_consistent_snapshot_during_writes,
            cases::pagination_returns_every_key_once,
            cases::list_at_past_revision,
            cases::prefixes_are_isolated,
            cases::reopen_keeps_data_and_revision,
            watch_cases::watch_delivers_every_event_once_in_order,
            watch_cases::watch_replays_history_then_follows,
            watch_cases::hundred_watchers_see_everything,
            watch_cases::watch_from_now_sees_only_new_events,
            watch_cases::compaction_fails_old_revisions_and_keeps_current_state,
            watch_cases::progress_reports_revisions_moved_elsewhere,
            watch_cases::compacted_revision_is_known_after_reopening,
        );
    };
    (@cases $make:expr; $($module:ident :: $case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let mut backend = $make;
                tokio::time::timeout(
                    conformance::CASE_TIMEOUT,
                    conformance::$module::$case(&mut backend),
                )
                .await
                .expect("conformance case timed out");
            }
        )*
    };
}

pub fn bytes(s: impl Into<String>) -> Bytes {
    Bytes::from(s.into())
}

pub fn text(b: &Bytes) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Receives events until one with revision >= `until` arrives (or panics after a bounded wait).
pub async fn collect_until(stream: &mut WatchStream, until: Revision) -> Vec<Event> {
    let mut events = Vec::new();
    if until <= 0 {
        return events;
    }
    loop {
        let next = tokio::time::timeout(Duration::from_secs(30), stream.next())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no watch event within 30s; waiting for revision {until}, have {}",
                    events.len()
                )
            });
        let event = next
            .expect("watch stream ended early")
            .expect("watch stream error");
        let rev = event.revision();
        events.push(event);
        if rev >= until {
            return events;
        }
    }
}

/// Asserts that no event arrives on `stream` within a short time.
pub async fn assert_quiet(stream: &mut WatchStream) {
    if let Ok(Some(item)) = tokio::time::timeout(Duration::from_millis(300), stream.next()).await {
        panic!("unexpected watch item: {item:?}");
    }
}
