//! The delay before replacing failed pods (upstream `pkg/controller/job/backoff_utils.go`): 10 s after
//! the first failure since the last success, doubling per further failure, at most 10 minutes, counted
//! from the last failure's finish time.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;

/// Upstream `DefaultJobPodFailureBackOff`.
pub const DEFAULT_BACKOFF: Duration = Duration::from_secs(10);
/// Upstream `MaxJobPodFailureBackOff`.
pub const MAX_BACKOFF: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Default, PartialEq)]
pub struct BackoffRecord {
    pub failures_after_last_success: u32,
    pub last_failure_time: Option<Timestamp>,
}

/// Backoff records per Job key, kept in memory like upstream's `backoffStore`.
#[derive(Default)]
pub struct BackoffStore {
    records: Mutex<HashMap<String, BackoffRecord>>,
}

impl BackoffStore {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, BackoffRecord>> {
        self.records.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, key: &str) -> BackoffRecord {
        self.lock().get(key).cloned().unwrap_or_default()
    }

    pub fn update(&self, key: &str, record: BackoffRecord) {
        self.lock().insert(key.to_string(), record);
    }

    pub fn remove(&self, key: &str) {
        self.lock().remove(key);
    }
}

/// When the pod finished: its containers' latest finish time, else when it became not ready, else
/// its deletion timestamp, else `now` (upstream `getFinishedTime`).
pub fn finished_time(pod: &Pod, now: Timestamp) -> Timestamp {
    let status = pod.status.as_ref();
    let containers = status
        .and_then(|s| s.container_statuses.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| c.state.as_ref()?.terminated.as_ref()?.finished_at.as_ref())
        .map(|t| t.0)
        .max();
    let not_ready = || {
        status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .find(|c| c.type_ == "Ready" && c.status == "False")
            .and_then(|c| c.last_transition_time.as_ref())
            .map(|t| t.0)
    };
    containers
        .or_else(not_ready)
        .or_else(|| pod.metadata.deletion_timestamp.as_ref().map(|t| t.0))
        .unwrap_or(now)
}

/// Upstream `newBackoffRecord`: the record after this sync's newly finished pods.
pub fn new_record(
    prev: BackoffRecord,
    succeeded: &[Arc<Pod>],
    failed: &[Arc<Pod>],
    now: Timestamp,
) -> BackoffRecord {
    let mut failed_times: Vec<Timestamp> = failed.iter().map(|p| finished_time(p, now)).collect();
    failed_times.sort();
    let last_success = succeeded.iter().map(|p| finished_time(p, now)).max();
    match last_success {
        None if failed_times.is_empty() => prev,
        None => BackoffRecord {
            failures_after_last_success: prev.failures_after_last_success
                + failed_times.len() as u32,
            last_failure_time: failed_times.last().copied(),
        },
        Some(success) => {
            let after: Vec<&Timestamp> = failed_times.iter().filter(|t| **t > success).collect();
            BackoffRecord {
                failures_after_last_success: after.len() as u32,
                last_failure_time: after.last().map(|t| **t),
            }
        }
    }
}

/// Upstream `getRemainingTime`: how long pod creation must still wait.
pub fn remaining(record: &BackoffRecord, now: Timestamp) -> Duration {
    let (n, Some(last)) = (record.failures_after_last_success, record.last_failure_time) else {
        return Duration::ZERO;
    };
    if n == 0 {
        return Duration::ZERO;
    }
    let mut delay = DEFAULT_BACKOFF;
    for _ in 1..n {
        delay *= 2;
        if delay >= MAX_BACKOFF {
            delay = MAX_BACKOFF;
            break;
        }
    }
    let elapsed = Duration::try_from(now.duration_since(last)).unwrap_or(Duration::ZERO);
    delay.saturating_sub(elapsed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn finished(at: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({"status": {"containerStatuses": [{
                "name": "c", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 1, "finishedAt": at}},
            }]}}))
            .unwrap(),
        )
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn delay_doubles_and_caps() {
        let now = ts("2026-01-01T00:00:00Z");
        let rec = |n| BackoffRecord {
            failures_after_last_success: n,
            last_failure_time: Some(now),
        };
        assert_eq!(remaining(&rec(0), now), Duration::ZERO);
        assert_eq!(remaining(&rec(1), now), Duration::from_secs(10));
        assert_eq!(remaining(&rec(2), now), Duration::from_secs(20));
        assert_eq!(remaining(&rec(4), now), Duration::from_secs(80));
        assert_eq!(remaining(&rec(20), now), MAX_BACKOFF);
        let later = ts("2026-01-01T00:00:04Z");
        assert_eq!(remaining(&rec(1), later), Duration::from_secs(6));
        assert_eq!(
            remaining(&rec(1), ts("2026-01-01T00:01:00Z")),
            Duration::ZERO
        );
    }

    #[test]
    fn record_counts_failures_since_last_success() {
        let now = ts("2026-01-01T00:10:00Z");
        let r = new_record(
            BackoffRecord::default(),
            &[],
            &[finished("2026-01-01T00:00:05Z")],
            now,
        );
        assert_eq!(r.failures_after_last_success, 1);
        assert_eq!(r.last_failure_time, Some(ts("2026-01-01T00:00:05Z")));
        let r = new_record(r, &[], &[finished("2026-01-01T00:00:09Z")], now);
        assert_eq!(r.failures_after_last_success, 2);
        // A success resets; only failures after it count.
        let r = new_record(
            r,
            &[finished("2026-01-01T00:00:10Z")],
            &[
                finished("2026-01-01T00:00:08Z"),
                finished("2026-01-01T00:00:12Z"),
            ],
            now,
        );
        assert_eq!(r.failures_after_last_success, 1);
        assert_eq!(r.last_failure_time, Some(ts("2026-01-01T00:00:12Z")));
        let r = new_record(r, &[finished("2026-01-01T00:00:20Z")], &[], now);
        assert_eq!(r, BackoffRecord::default());
    }
}
