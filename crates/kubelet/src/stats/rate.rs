//! `usageNanoCores`: the CPU rate between two samples of a cumulative counter. As upstream's CRI
//! stats provider does, the last sample of each container (and pod, and the node) is kept, and the
//! rate is computed when a newer one arrives; a sample less than [`MIN_INTERVAL`] after the kept
//! one returns the kept rate instead of replacing it, so two clients asking at once (the metrics
//! scraper and a user) do not shrink the window to nothing. Entries of containers no longer
//! reported are dropped at each collection ([`CpuRates::retain`]), which bounds the map by the
//! number of live containers.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

/// Samples closer than this to the kept one do not replace it (upstream: cadvisor's housekeeping
/// interval is 10 s; the CRI provider recomputes on each call but keeps the cached value within
/// its update period).
pub const MIN_INTERVAL_NANOS: i64 = 1_000_000_000;

#[derive(Clone, Copy, Debug)]
struct Sample {
    at_nanos: i64,
    usage: u64,
    rate: Option<u64>,
}

#[derive(Default)]
pub struct CpuRates {
    last: Mutex<HashMap<String, Sample>>,
}

impl CpuRates {
    /// Records `usage` (cumulative core-nanoseconds) of `key` at `at_nanos` (Unix time) and returns
    /// the rate in nanocores, once two samples are known. A counter that went backwards (the
    /// container restarted under the same key) starts over.
    pub fn observe(&self, key: &str, at_nanos: i64, usage: u64) -> Option<u64> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let fresh = Sample {
            at_nanos,
            usage,
            rate: None,
        };
        let Some(prev) = last.get(key).copied() else {
            last.insert(key.to_string(), fresh);
            return None;
        };
        let elapsed = at_nanos.saturating_sub(prev.at_nanos);
        if (0..MIN_INTERVAL_NANOS).contains(&elapsed) && usage >= prev.usage {
            return prev.rate;
        }
        if elapsed <= 0 || usage < prev.usage {
            last.insert(key.to_string(), fresh);
            return None;
        }
        let rate = ((usage - prev.usage) as u128 * 1_000_000_000 / elapsed as u128) as u64;
        last.insert(
            key.to_string(),
            Sample {
                rate: Some(rate),
                ..fresh
            },
        );
        Some(rate)
    }

    /// Forgets every key not in `live`.
    pub fn retain(&self, live: &HashSet<String>) {
        self.last
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k, _| live.contains(k));
    }

    pub fn len(&self) -> usize {
        self.last.lock().unwrap_or_else(|e| e.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: i64 = 1_000_000_000;

    #[test]
    fn the_rate_needs_two_samples() {
        let r = CpuRates::default();
        assert_eq!(r.observe("c", 10 * S, 5_000_000_000), None);
        // 0.5 core-seconds over 2 s: a quarter of a core.
        assert_eq!(r.observe("c", 12 * S, 5_500_000_000), Some(250_000_000));
        // Within a second of the kept sample: the kept rate, the sample not replaced.
        assert_eq!(
            r.observe("c", 12 * S + S / 2, 9_000_000_000),
            Some(250_000_000)
        );
        // Measured from the sample at 12 s: 1 core-second over 2 s.
        assert_eq!(r.observe("c", 14 * S, 6_500_000_000), Some(500_000_000));
    }

    #[test]
    fn a_counter_going_back_starts_over() {
        let r = CpuRates::default();
        r.observe("c", 10 * S, 5_000);
        assert_eq!(r.observe("c", 12 * S, 1_000), None);
        assert_eq!(r.observe("c", 14 * S, 2_000_001_000), Some(1_000_000_000));
    }

    #[test]
    fn gone_keys_are_forgotten() {
        let r = CpuRates::default();
        r.observe("a", S, 1);
        r.observe("b", S, 1);
        r.retain(&HashSet::from(["b".to_string()]));
        assert_eq!(r.len(), 1);
        assert_eq!(r.observe("a", 3 * S, 2), None, "a starts over");
    }
}
