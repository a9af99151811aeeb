//! The `Retry-After` of a refused request (upstream `dropped_requests_tracker.go`), per priority
//! level: 1 s at first, doubled (up to 32 s) when a level refused at least 3 × the current value
//! over the last that-many seconds, lowered by one when it refused fewer than the value.

use std::collections::VecDeque;

const MAX_RETRY_AFTER: i64 = 32;

#[derive(Debug)]
pub struct DroppedRequests {
    /// (unix second, refusals) of past seconds, the last [`MAX_RETRY_AFTER`] of them.
    history: VecDeque<(i64, i64)>,
    current_unix: i64,
    current_count: i64,
    retry_after: i64,
    updated_unix: i64,
}

impl Default for DroppedRequests {
    fn default() -> Self {
        DroppedRequests {
            history: VecDeque::new(),
            current_unix: 0,
            current_count: 0,
            retry_after: 1,
            updated_unix: 0,
        }
    }
}

impl DroppedRequests {
    pub fn retry_after(&self) -> i64 {
        self.retry_after
    }

    pub fn record(&mut self, unix: i64) {
        if unix == self.current_unix {
            self.current_count += 1;
            return;
        }
        self.history
            .push_back((self.current_unix, self.current_count));
        while self
            .history
            .front()
            .is_some_and(|(t, _)| self.current_unix - t > MAX_RETRY_AFTER)
        {
            self.history.pop_front();
        }
        self.current_unix = unix;
        self.current_count = 1;
        self.update(unix);
    }

    fn update(&mut self, unix: i64) {
        let dropped: i64 = self
            .history
            .iter()
            .rev()
            .take_while(|(t, _)| unix - t <= self.retry_after)
            .filter(|(t, _)| *t < unix)
            .map(|(_, n)| n)
            .sum();
        if unix - self.updated_unix >= self.retry_after && dropped >= 3 * self.retry_after {
            self.retry_after = (self.retry_after * 2).min(MAX_RETRY_AFTER);
            self.updated_unix = unix;
        } else if dropped < self.retry_after && self.retry_after > 1 {
            self.retry_after -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doubles_under_steady_refusals_and_decays() {
        let mut d = DroppedRequests::default();
        assert_eq!(d.retry_after(), 1);
        for _ in 0..5 {
            d.record(100);
        }
        d.record(101);
        assert_eq!(d.retry_after(), 2, "5 refusals in the last second >= 3");
        // Bumped at most once per retry-after period.
        for _ in 0..10 {
            d.record(102);
        }
        d.record(103);
        assert_eq!(d.retry_after(), 4);
        // Quiet seconds bring it down one at a time.
        d.record(200);
        assert_eq!(d.retry_after(), 3);
        d.record(300);
        assert_eq!(d.retry_after(), 2);
    }
}
