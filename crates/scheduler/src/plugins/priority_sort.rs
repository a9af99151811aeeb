//! PrioritySort (upstream `queuesort.PrioritySort`): higher `spec.priority` first, then the pod that
//! entered the queue first.

use crate::framework::{Plugin, QueueSortPlugin, QueuedPodInfo};

pub struct PrioritySort;

impl Plugin for PrioritySort {
    fn name(&self) -> &'static str {
        "PrioritySort"
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        Some(self)
    }
}

impl QueueSortPlugin for PrioritySort {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        a.priority > b.priority || (a.priority == b.priority && a.timestamp < b.timestamp)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn priority_then_time() {
        let t0 = Instant::now();
        let info = |p: i32, dt: u64| QueuedPodInfo {
            key: String::new(),
            priority: p,
            timestamp: t0 + Duration::from_secs(dt),
            seq: 0,
        };
        let cases = [
            (info(10, 5), info(1, 0), true),
            (info(1, 0), info(10, 5), false),
            (info(1, 0), info(1, 5), true),
            (info(1, 5), info(1, 0), false),
            (info(1, 0), info(1, 0), false),
            (info(-5, 0), info(0, 9), false),
        ];
        for (a, b, want) in cases {
            assert_eq!(PrioritySort.less(&a, &b), want, "{a:?} < {b:?}");
        }
    }
}
