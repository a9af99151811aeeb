//! `apiserver_flowcontrol_*` metrics (upstream `fairqueuing/../metrics/metrics.go`, a subset):
//! requests waiting and seats executing per level, rejections by reason, dispatches, the time
//! requests waited, and each level's nominal limit.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

/// Upstream's `request_wait_duration_seconds` buckets.
const WAIT_BUCKETS: &[f64] = &[
    0.0, 0.005, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 15.0, 30.0,
];

#[derive(Default)]
struct Wait {
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

/// (priority level, flow schema, reason)
type RejectKey = (String, String, &'static str);
/// (priority level, flow schema, execute)
type WaitKey = (String, String, bool);

#[derive(Default)]
pub struct FlowMetrics {
    rejected: Mutex<BTreeMap<RejectKey, u64>>,
    dispatched: Mutex<BTreeMap<(String, String), u64>>,
    waits: Mutex<BTreeMap<WaitKey, Wait>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// One level's gauges, read from its state when rendering.
pub struct LevelGauges {
    pub name: String,
    pub waiting: usize,
    pub executing: usize,
    pub seats: usize,
    pub nominal_limit: usize,
    /// Limited levels only.
    pub borrowing: Option<BorrowingGauges>,
}

/// A limited level's borrowing state (upstream's `SetPriorityLevelConfiguration` and
/// `NotePriorityLevelConcurrencyAdjustment` gauges).
pub struct BorrowingGauges {
    pub lower: usize,
    pub upper: usize,
    pub current: usize,
    pub stats: super::borrowing::SeatDemandStats,
    pub target: f64,
}

impl FlowMetrics {
    /// `reason`: upstream's `queue-full`, `concurrency-limit`, `time-out` or `cancelled`.
    pub fn rejected(&self, level: &str, schema: &str, reason: &'static str) {
        *lock(&self.rejected)
            .entry((level.into(), schema.into(), reason))
            .or_default() += 1;
    }

    pub fn dispatched(&self, level: &str, schema: &str) {
        *lock(&self.dispatched)
            .entry((level.into(), schema.into()))
            .or_default() += 1;
    }

    pub fn waited(&self, level: &str, schema: &str, executed: bool, seconds: f64) {
        let mut waits = lock(&self.waits);
        let w = waits
            .entry((level.into(), schema.into(), executed))
            .or_default();
        if w.counts.is_empty() {
            w.counts = vec![0; WAIT_BUCKETS.len()];
        }
        for (i, bound) in WAIT_BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                w.counts[i] += 1;
            }
        }
        w.sum += seconds;
        w.count += 1;
    }

    pub fn render(&self, levels: &[LevelGauges]) -> String {
        let mut out = String::new();
        let gauge =
            |out: &mut String, name: &str, help: &str, value: &dyn Fn(&LevelGauges) -> usize| {
                let _ = writeln!(out, "# HELP apiserver_flowcontrol_{name} {help}");
                let _ = writeln!(out, "# TYPE apiserver_flowcontrol_{name} gauge");
                for l in levels {
                    let _ = writeln!(
                        out,
                        "apiserver_flowcontrol_{name}{{priority_level=\"{}\"}} {}",
                        l.name,
                        value(l)
                    );
                }
            };
        gauge(&mut out, "current_inqueue_requests", "Number of requests currently pending in queues of the API Priority and Fairness subsystem", &|l| l.waiting);
        gauge(&mut out, "current_executing_requests", "Number of requests in initial (for a WATCH) or any (for a non-WATCH) execution stage in the API Priority and Fairness subsystem", &|l| l.executing);
        gauge(&mut out, "current_executing_seats", "Concurrency (number of seats) occupied by the currently executing (initial stage for a WATCH, any stage otherwise) requests in the API Priority and Fairness subsystem", &|l| l.seats);
        gauge(
            &mut out,
            "nominal_limit_seats",
            "Nominal number of execution seats configured for each priority level",
            &|l| l.nominal_limit,
        );
        let borrowing =
            |out: &mut String, name: &str, help: &str, value: &dyn Fn(&BorrowingGauges) -> f64| {
                let _ = writeln!(out, "# HELP apiserver_flowcontrol_{name} {help}");
                let _ = writeln!(out, "# TYPE apiserver_flowcontrol_{name} gauge");
                for l in levels {
                    if let Some(b) = &l.borrowing {
                        let _ = writeln!(
                            out,
                            "apiserver_flowcontrol_{name}{{priority_level=\"{}\"}} {}",
                            l.name,
                            value(b)
                        );
                    }
                }
            };
        borrowing(
            &mut out,
            "lower_limit_seats",
            "Configured lower bound on number of execution seats available to each priority level",
            &|b| b.lower as f64,
        );
        borrowing(
            &mut out,
            "upper_limit_seats",
            "Configured upper bound on number of execution seats available to each priority level",
            &|b| b.upper as f64,
        );
        borrowing(
            &mut out,
            "current_limit_seats",
            "current derived number of execution seats available to each priority level",
            &|b| b.current as f64,
        );
        borrowing(
            &mut out,
            "demand_seats_average",
            "Time-weighted average, over last adjustment period, of demand_seats",
            &|b| b.stats.average,
        );
        borrowing(
            &mut out,
            "demand_seats_stdev",
            "Time-weighted standard deviation, over last adjustment period, of demand_seats",
            &|b| b.stats.deviation,
        );
        borrowing(
            &mut out,
            "demand_seats_high_watermark",
            "High watermark, over last adjustment period, of demand_seats",
            &|b| b.stats.high_watermark,
        );
        borrowing(
            &mut out,
            "demand_seats_smoothed",
            "Smoothed seat demands",
            &|b| b.stats.smoothed,
        );
        borrowing(&mut out, "target_seats", "Seat allocation targets", &|b| {
            b.target
        });

        let _ = writeln!(out, "# HELP apiserver_flowcontrol_rejected_requests_total Number of requests rejected by API Priority and Fairness subsystem");
        let _ = writeln!(
            out,
            "# TYPE apiserver_flowcontrol_rejected_requests_total counter"
        );
        for ((level, schema, reason), n) in lock(&self.rejected).iter() {
            let _ = writeln!(out, "apiserver_flowcontrol_rejected_requests_total{{flow_schema=\"{schema}\",priority_level=\"{level}\",reason=\"{reason}\"}} {n}");
        }
        let _ = writeln!(out, "# HELP apiserver_flowcontrol_dispatched_requests_total Number of requests executed by API Priority and Fairness subsystem");
        let _ = writeln!(
            out,
            "# TYPE apiserver_flowcontrol_dispatched_requests_total counter"
        );
        for ((level, schema), n) in lock(&self.dispatched).iter() {
            let _ = writeln!(out, "apiserver_flowcontrol_dispatched_requests_total{{flow_schema=\"{schema}\",priority_level=\"{level}\"}} {n}");
        }
        let name = "apiserver_flowcontrol_request_wait_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Length of time a request spent waiting in its queue"
        );
        let _ = writeln!(out, "# TYPE {name} histogram");
        for ((level, schema, executed), w) in lock(&self.waits).iter() {
            let labels = format!(
                "execute=\"{executed}\",flow_schema=\"{schema}\",priority_level=\"{level}\""
            );
            for (bound, count) in WAIT_BUCKETS.iter().zip(&w.counts) {
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {count}");
            }
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", w.count);
            let _ = writeln!(out, "{name}_sum{{{labels}}} {}", w.sum);
            let _ = writeln!(out, "{name}_count{{{labels}}} {}", w.count);
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_gauges_and_waits() {
        let m = FlowMetrics::default();
        m.rejected("global-default", "global-default", "queue-full");
        m.dispatched("global-default", "global-default");
        m.waited("global-default", "global-default", true, 0.01);
        let text = m.render(&[LevelGauges {
            name: "global-default".into(),
            waiting: 2,
            executing: 1,
            seats: 3,
            nominal_limit: 49,
            borrowing: Some(BorrowingGauges {
                lower: 24,
                upper: 98,
                current: 60,
                stats: Default::default(),
                target: 24.0,
            }),
        }]);
        for line in [
            "apiserver_flowcontrol_current_inqueue_requests{priority_level=\"global-default\"} 2",
            "apiserver_flowcontrol_current_executing_seats{priority_level=\"global-default\"} 3",
            "apiserver_flowcontrol_current_limit_seats{priority_level=\"global-default\"} 60",
            "apiserver_flowcontrol_upper_limit_seats{priority_level=\"global-default\"} 98",
            "apiserver_flowcontrol_rejected_requests_total{flow_schema=\"global-default\",priority_level=\"global-default\",reason=\"queue-full\"} 1",
            "apiserver_flowcontrol_request_wait_duration_seconds_bucket{execute=\"true\",flow_schema=\"global-default\",priority_level=\"global-default\",le=\"0.02\"} 1",
            "apiserver_flowcontrol_request_wait_duration_seconds_bucket{execute=\"true\",flow_schema=\"global-default\",priority_level=\"global-default\",le=\"0.005\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        }
    }
}
