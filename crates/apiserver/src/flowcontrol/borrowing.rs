//! Borrowing between priority levels (upstream `apf_controller.go` `updateBorrowing` and
//! `conc_alloc.go`): every [`ADJUSTMENT_PERIOD`] each limited level's seat demand over the period
//! (seats in use plus seats wanted by waiting requests, integrated over time) updates its
//! [`SeatDemandStats`]; the server's seats (the sum of the nominal limits) are then divided in
//! proportion to the smoothed demands, each level kept between
//! `max(nominal - lendable, min(nominal, demand high watermark))` and `nominal + borrowing limit`.
//! A busy level so takes what idle ones lend, never past its `borrowingLimitPercent`, and a level
//! that was busy during the period keeps what it used of its nominal limit.
//!
//! Pure: the controller feeds it the integrators' results and applies the limits.

use std::time::Duration;

/// Upstream's `borrowingAdjustmentPeriod`.
pub const ADJUSTMENT_PERIOD: Duration = Duration::from_secs(10);
/// Upstream's `seatDemandSmoothingCoefficient`: the weight of the past in the smoothed demand.
pub const SMOOTHING: f64 = 0.977;
/// Targets below this count as this (upstream's `MinTarget`), so no level's share is zero.
const MIN_TARGET: f64 = 0.001;

/// A level's nominal limit, and the least and most it may run at.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub nominal: usize,
    /// `nominal - round(nominal × lendablePercent / 100)`.
    pub min: usize,
    /// `nominal + round(nominal × borrowingLimitPercent / 100)`; with no borrowingLimitPercent,
    /// `nominal + the server's limit`.
    pub max: usize,
}

impl Limits {
    pub fn new(
        nominal: usize,
        lendable_percent: u64,
        borrowing_limit_percent: Option<u64>,
        server_limit: usize,
    ) -> Limits {
        let share = |pct: u64| ((nominal as f64) * (pct.min(100) as f64) / 100.0).round() as usize;
        let lendable = share(lendable_percent);
        let borrowing = match borrowing_limit_percent {
            // Not capped at 100: a level may borrow several times its nominal limit.
            Some(pct) => ((nominal as f64) * (pct as f64) / 100.0).round() as usize,
            None => server_limit,
        };
        Limits {
            nominal,
            min: nominal.saturating_sub(lendable),
            max: nominal.saturating_add(borrowing),
        }
    }
}

/// What a level's seat demand was over one period (upstream's `IntegratorResults`).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct DemandPeriod {
    /// Seconds integrated.
    pub duration: f64,
    pub average: f64,
    pub deviation: f64,
    pub max: f64,
}

/// Time-weighted seat demand of one level (upstream's `fairqueuing.Integrator`). The queue set
/// calls [`DemandIntegrator::hold`] before each change with the demand in force since the last
/// one, and the controller [`DemandIntegrator::reset`]s it at the end of each period.
#[derive(Clone, Debug, Default)]
pub struct DemandIntegrator {
    value: f64,
    since: f64,
    duration: f64,
    sum: f64,
    sum_squares: f64,
    max: f64,
}

impl DemandIntegrator {
    pub fn new(now: f64) -> DemandIntegrator {
        DemandIntegrator {
            since: now,
            ..Default::default()
        }
    }

    /// The demand was `value` from the last call until `now`.
    pub fn hold(&mut self, value: f64, now: f64) {
        let dt = (now - self.since).max(0.0);
        self.duration += dt;
        self.sum += value * dt;
        self.sum_squares += value * value * dt;
        self.since = self.since.max(now);
        self.value = value;
        self.max = self.max.max(value);
    }

    /// The period so far (call [`DemandIntegrator::hold`] first); the next begins with the
    /// demand last held.
    pub fn reset(&mut self) -> DemandPeriod {
        let period = if self.duration > 0.0 {
            let average = self.sum / self.duration;
            let variance = (self.sum_squares / self.duration - average * average).max(0.0);
            DemandPeriod {
                duration: self.duration,
                average,
                deviation: variance.sqrt(),
                max: self.max,
            }
        } else {
            DemandPeriod {
                max: self.max,
                ..Default::default()
            }
        };
        self.duration = 0.0;
        self.sum = 0.0;
        self.sum_squares = 0.0;
        self.max = self.value;
        period
    }
}

/// Upstream's `seatDemandStats`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct SeatDemandStats {
    pub average: f64,
    pub deviation: f64,
    pub high_watermark: f64,
    pub smoothed: f64,
}

impl SeatDemandStats {
    /// Takes a period: the envelope is `average + deviation`, and the smoothed demand rises to it
    /// at once but falls only by `1 - SMOOTHING` of the gap per period.
    pub fn update(&mut self, period: DemandPeriod) {
        self.high_watermark = period.max;
        if period.duration <= 0.0 {
            return;
        }
        self.average = period.average;
        self.deviation = if period.deviation.is_nan() {
            0.0
        } else {
            period.deviation
        };
        let envelope = self.average + self.deviation;
        self.smoothed = envelope.max(SMOOTHING * self.smoothed + (1.0 - SMOOTHING) * envelope);
    }
}

/// One level in the division: what it should get, and its bounds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Item {
    pub target: f64,
    pub lower: f64,
    pub upper: f64,
}

impl Item {
    /// Upstream's problem item of a level: the lower bound keeps what the level used of its
    /// nominal limit during the period (and never less than it may not lend), the target is its
    /// smoothed demand.
    pub fn of(limits: Limits, stats: &SeatDemandStats) -> Item {
        let lower = (limits.min as f64).max((limits.nominal as f64).min(stats.high_watermark));
        Item {
            target: lower.max(stats.smoothed),
            lower,
            upper: limits.max as f64,
        }
    }
}

/// Why no division fits the bounds.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum AllocError {
    #[error("lower bounds sum to {0}, more than the {1} seats to divide")]
    LowerTooHigh(f64, usize),
    #[error("upper bounds sum to {0}, fewer than the {1} seats to divide")]
    UpperTooLow(f64, usize),
    #[error("item {0} has bounds or a target out of order")]
    BadItem(usize),
}

/// Upstream's `computeConcurrencyAllocation`: allocations summing to `total`, each
/// `clamp(fair × target, lower, upper)` for the one `fair` proportion that makes them sum so
/// (found by bisection: the sum only grows with `fair`).
pub fn allocate(total: usize, items: &[Item]) -> Result<Vec<f64>, AllocError> {
    const EPSILON: f64 = 1e-7;
    let total_f = total as f64;
    let (mut low_sum, mut high_sum) = (0.0, 0.0);
    for (i, item) in items.iter().enumerate() {
        let ordered = item.lower >= 0.0 && item.target >= item.lower && item.upper >= item.lower;
        if !ordered || !item.target.is_finite() {
            return Err(AllocError::BadItem(i));
        }
        low_sum += item.lower;
        high_sum += item.upper;
    }
    if low_sum - total_f > EPSILON {
        return Err(AllocError::LowerTooHigh(low_sum, total));
    }
    if total_f - high_sum > EPSILON {
        return Err(AllocError::UpperTooLow(high_sum, total));
    }
    if total == 0 {
        return Ok(vec![0.0; items.len()]);
    }
    if low_sum - total_f > -EPSILON {
        return Ok(items.iter().map(|i| i.lower).collect());
    }
    if total_f - high_sum > -EPSILON {
        return Ok(items.iter().map(|i| i.upper).collect());
    }
    let at = |fair: f64| -> Vec<f64> {
        items
            .iter()
            .map(|i| (fair * i.target.max(MIN_TARGET)).clamp(i.lower, i.upper))
            .collect()
    };
    let sum = |fair: f64| at(fair).iter().sum::<f64>();
    // At fair = 0 every item sits on its lower bound (sum < total); find a fair past the total.
    let mut hi = 1.0;
    while sum(hi) < total_f {
        hi *= 2.0;
        if !hi.is_finite() {
            return Ok(items.iter().map(|i| i.upper).collect());
        }
    }
    let mut lo = 0.0;
    for _ in 0..200 {
        let mid = (lo + hi) / 2.0;
        if sum(mid) < total_f {
            lo = mid;
        } else {
            hi = mid;
        }
        if hi - lo <= f64::EPSILON * hi {
            break;
        }
    }
    Ok(at(hi))
}

/// New current limits of levels (same order as `levels`), rounded as upstream. The server's
/// seats to divide are the sum of the nominal limits. An error (impossible with limits built by
/// [`Limits::new`]) leaves the caller's limits as they are, as upstream.
pub fn current_limits(levels: &[(Limits, SeatDemandStats)]) -> Result<Vec<usize>, AllocError> {
    let total: usize = levels.iter().map(|(l, _)| l.nominal).sum();
    let items: Vec<Item> = levels.iter().map(|(l, s)| Item::of(*l, s)).collect();
    let allocs = allocate(total, &items)?;
    Ok(allocs.iter().map(|a| a.round() as usize).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(demand: f64) -> SeatDemandStats {
        let mut s = SeatDemandStats::default();
        s.update(DemandPeriod {
            duration: 10.0,
            average: demand,
            deviation: 0.0,
            max: demand,
        });
        s
    }

    #[test]
    fn limits_from_percentages() {
        // catch-all as suggested: 5 shares, 0 % lendable, no borrowing limit.
        assert_eq!(
            Limits::new(13, 0, None, 600),
            Limits {
                nominal: 13,
                min: 13,
                max: 613
            }
        );
        assert_eq!(
            Limits::new(30, 50, Some(200), 600),
            Limits {
                nominal: 30,
                min: 15,
                max: 90
            }
        );
        assert_eq!(Limits::new(30, 100, Some(0), 600).min, 0);
    }

    #[test]
    fn a_saturated_level_borrows_what_idle_ones_lend() {
        // Three levels of 100 seats each; a lends half, b everything, c nothing. Only a is busy.
        let levels = [
            (Limits::new(100, 50, None, 300), stats(290.0)),
            (Limits::new(100, 100, None, 300), stats(0.0)),
            (Limits::new(100, 0, None, 300), stats(0.0)),
        ];
        let got = current_limits(&levels).unwrap();
        // b lends all it has, c keeps its unlendable 100: a gets the rest.
        assert_eq!(got, [200, 0, 100]);
        assert_eq!(got.iter().sum::<usize>(), 300);
    }

    #[test]
    fn never_past_the_borrowing_limit() {
        let levels = [
            (Limits::new(100, 0, Some(20), 300), stats(1000.0)),
            (Limits::new(100, 100, None, 300), stats(0.0)),
            (Limits::new(100, 100, None, 300), stats(0.0)),
        ];
        let got = current_limits(&levels).unwrap();
        assert_eq!(got[0], 120, "{got:?}");
        assert_eq!(got.iter().sum::<usize>(), 300);
    }

    #[test]
    fn busy_levels_share_in_proportion_to_demand() {
        let levels = [
            (Limits::new(50, 100, None, 200), stats(300.0)),
            (Limits::new(50, 100, None, 200), stats(100.0)),
            (Limits::new(100, 100, None, 200), stats(0.0)),
        ];
        let got = current_limits(&levels).unwrap();
        assert_eq!(got, [150, 50, 0]);
    }

    #[test]
    fn what_a_level_used_of_its_nominal_limit_is_kept() {
        // b's smoothed demand is small but it reached 40 seats in the period: it keeps 40.
        let mut b = stats(2.0);
        b.high_watermark = 40.0;
        let levels = [
            (Limits::new(100, 100, None, 200), stats(500.0)),
            (Limits::new(100, 100, None, 200), b),
        ];
        assert_eq!(current_limits(&levels).unwrap(), [160, 40]);
    }

    #[test]
    fn idle_everywhere_gives_the_unlendable_parts_and_shares_the_rest() {
        let levels = [
            (Limits::new(100, 50, None, 200), stats(0.0)),
            (Limits::new(100, 50, None, 200), stats(0.0)),
        ];
        let got = current_limits(&levels).unwrap();
        assert_eq!(got, [100, 100]);
    }

    #[test]
    fn smoothing_rises_at_once_and_falls_slowly() {
        let mut s = SeatDemandStats::default();
        let period = |avg: f64| DemandPeriod {
            duration: 10.0,
            average: avg,
            deviation: 0.0,
            max: avg,
        };
        s.update(period(100.0));
        assert_eq!(s.smoothed, 100.0);
        s.update(period(0.0));
        assert!((s.smoothed - 97.7).abs() < 1e-9, "{}", s.smoothed);
        assert_eq!(s.high_watermark, 0.0);
        // An empty period changes only the high watermark.
        s.update(DemandPeriod {
            max: 3.0,
            ..Default::default()
        });
        assert!((s.smoothed - 97.7).abs() < 1e-9);
        assert_eq!(s.high_watermark, 3.0);
    }

    #[test]
    fn the_integrator_weighs_by_time() {
        let mut d = DemandIntegrator::new(0.0);
        d.hold(10.0, 1.0);
        d.hold(0.0, 4.0);
        let p = d.reset();
        assert_eq!(p.duration, 4.0);
        assert!((p.average - 2.5).abs() < 1e-9);
        // E[x²] = 25, avg² = 6.25.
        assert!((p.deviation - 18.75f64.sqrt()).abs() < 1e-9);
        assert_eq!(p.max, 10.0);
        // The next period starts from the value in force.
        d.hold(0.0, 5.0);
        let p = d.reset();
        assert_eq!((p.duration, p.average, p.max), (1.0, 0.0, 0.0));
    }

    #[test]
    fn impossible_bounds_are_errors_not_panics() {
        let item = |lower: f64, upper: f64| Item {
            target: lower,
            lower,
            upper,
        };
        assert!(matches!(
            allocate(10, &[item(8.0, 9.0), item(8.0, 9.0)]),
            Err(AllocError::LowerTooHigh(..))
        ));
        assert!(matches!(
            allocate(10, &[item(1.0, 2.0)]),
            Err(AllocError::UpperTooLow(..))
        ));
        assert!(matches!(
            allocate(10, &[item(5.0, 1.0)]),
            Err(AllocError::BadItem(0))
        ));
        assert_eq!(allocate(0, &[]).unwrap(), Vec::<f64>::new());
    }
}
