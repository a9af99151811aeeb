//! From a metric recommendation to the replicas the HPA sets (upstream `horizontal.go`:
//! `normalizeDesiredReplicas[WithBehaviors]`, the stabilization windows, the scaling policies and
//! `convertDesiredReplicasWithRules`). Pure: the per-HPA history ([`History`]) and the clock are
//! passed in.

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::autoscaling::v2::{
    HPAScalingPolicy, HPAScalingRules, HorizontalPodAutoscalerBehavior,
};

/// Upstream `scaleUpLimitFactor` / `scaleUpLimitMinimum`: without `behavior`, at most double (or
/// 4) replicas per step.
const SCALE_UP_LIMIT_FACTOR: f64 = 2.0;
const SCALE_UP_LIMIT_MINIMUM: f64 = 4.0;
/// Most recommendations and scale events kept per HPA: they are pruned by age, but a window of
/// hours with a short sync period must not grow them without bound.
const MAX_SAMPLES: usize = 4096;

#[derive(Clone, Copy, Debug, PartialEq)]
struct Recommendation {
    replicas: i32,
    at: Timestamp,
}

#[derive(Clone, Copy, Debug, PartialEq)]
struct ScaleEvent {
    change: i32,
    at: Timestamp,
    outdated: bool,
}

/// What the controller remembers of one HPA between syncs.
#[derive(Clone, Debug, Default)]
pub struct History {
    recommendations: Vec<Recommendation>,
    scale_up_events: Vec<ScaleEvent>,
    scale_down_events: Vec<ScaleEvent>,
}

/// A condition to set: (reason, message).
pub type Why = (&'static str, &'static str);

/// The outcome of normalization and the two conditions it decides (`AbleToScale` with status
/// True, `ScalingLimited` with `limited`).
#[derive(Clone, Debug, PartialEq)]
pub struct Normalized {
    pub replicas: i32,
    pub able_to_scale: Why,
    pub limited: bool,
    pub scaling_limited: Why,
}

const READY: Why = ("ReadyForNewScale", "recommended size matches current size");
const DOWN_STABILIZED: Why = (
    "ScaleDownStabilized",
    "recent recommendations were higher than current one, applying the highest recent recommendation",
);
const UP_STABILIZED: Why = (
    "ScaleUpStabilized",
    "recent recommendations were lower than current one, applying the lowest recent recommendation",
);
const WITHIN: Why = (
    "DesiredWithinRange",
    "the desired count is within the acceptable range",
);
const UP_LIMIT: Why = (
    "ScaleUpLimit",
    "the desired replica count is increasing faster than the maximum scale rate",
);
const TOO_MANY: Why = (
    "TooManyReplicas",
    "the desired replica count is more than the maximum replica count",
);
const DOWN_LIMIT: Why = (
    "ScaleDownLimit",
    "the desired replica count is decreasing faster than the maximum scale rate",
);
const TOO_FEW: Why = (
    "TooFewReplicas",
    "the desired replica count is less than the minimum replica count",
);

fn before(now: Timestamp, secs: i64) -> Timestamp {
    now.checked_sub(SignedDuration::from_secs(secs.max(0)))
        .unwrap_or(Timestamp::MIN)
}

/// The scaling rules with upstream's API defaults filled in (`GenerateHPAScaleUpRules` /
/// `GenerateHPAScaleDownRules`); a scale-down window left unset is the controller's
/// `--horizontal-pod-autoscaler-downscale-stabilization`.
pub fn rules_with_defaults(
    behavior: &HorizontalPodAutoscalerBehavior,
    downscale_window_secs: i32,
) -> (HPAScalingRules, HPAScalingRules) {
    let policy = |t: &str, value, period| HPAScalingPolicy {
        type_: t.into(),
        value,
        period_seconds: period,
    };
    let fill = |given: Option<&HPAScalingRules>, window, policies: Vec<HPAScalingPolicy>| {
        let given = given.cloned().unwrap_or_default();
        HPAScalingRules {
            policies: given.policies.or(Some(policies)),
            select_policy: given.select_policy.or(Some("Max".into())),
            stabilization_window_seconds: given.stabilization_window_seconds.or(Some(window)),
            tolerance: given.tolerance,
        }
    };
    (
        fill(
            behavior.scale_up.as_ref(),
            0,
            vec![policy("Pods", 4, 15), policy("Percent", 100, 15)],
        ),
        fill(
            behavior.scale_down.as_ref(),
            downscale_window_secs,
            vec![policy("Percent", 100, 15)],
        ),
    )
}

impl History {
    /// Upstream `recordInitialRecommendation`: the current size is the first recommendation.
    pub fn record_initial(&mut self, current: i32, now: Timestamp) {
        if self.recommendations.is_empty() {
            self.recommendations.push(Recommendation {
                replicas: current,
                at: now,
            });
        }
    }

    /// Records `desired`, replacing a sample older than every window (or appending).
    fn record(&mut self, old: Option<usize>, desired: i32, now: Timestamp) {
        let r = Recommendation {
            replicas: desired,
            at: now,
        };
        match old {
            Some(i) => self.recommendations[i] = r,
            None if self.recommendations.len() < MAX_SAMPLES => self.recommendations.push(r),
            None => {
                self.recommendations.remove(0);
                self.recommendations.push(r);
            }
        }
    }

    /// Upstream `normalizeDesiredReplicas` (no `behavior`): the highest recommendation of the
    /// downscale window, then min/max and the fixed scale-up rate.
    pub fn normalize(
        &mut self,
        current: i32,
        desired: i32,
        min: i32,
        max: i32,
        downscale_window_secs: i64,
        now: Timestamp,
    ) -> Normalized {
        let cutoff = before(now, downscale_window_secs);
        let mut stabilized = desired;
        let mut old = None;
        for (i, r) in self.recommendations.iter().enumerate() {
            if r.at < cutoff {
                old = Some(i);
            } else if r.replicas > stabilized {
                stabilized = r.replicas;
            }
        }
        self.record(old, desired, now);
        let able_to_scale = if stabilized != desired {
            DOWN_STABILIZED
        } else {
            READY
        };
        let (replicas, why) = with_rules(current, stabilized, min, max);
        Normalized {
            replicas,
            able_to_scale,
            limited: replicas != stabilized,
            scaling_limited: why,
        }
    }

    /// Upstream `normalizeDesiredReplicasWithBehaviors`: the up/down stabilization windows, then
    /// the policies' rate limits and min/max.
    #[allow(clippy::too_many_arguments)]
    pub fn normalize_with_behavior(
        &mut self,
        current: i32,
        desired: i32,
        min: i32,
        max: i32,
        up: &HPAScalingRules,
        down: &HPAScalingRules,
        now: Timestamp,
    ) -> Normalized {
        let up_cutoff = before(now, up.stabilization_window_seconds.unwrap_or(0).into());
        let down_cutoff = before(now, down.stabilization_window_seconds.unwrap_or(0).into());
        let (mut up_rec, mut down_rec) = (desired, desired);
        let mut old = None;
        for (i, r) in self.recommendations.iter().enumerate() {
            if r.at > up_cutoff {
                up_rec = up_rec.min(r.replicas);
            }
            if r.at > down_cutoff {
                down_rec = down_rec.max(r.replicas);
            }
            if r.at < up_cutoff && r.at < down_cutoff {
                old = Some(i);
            }
        }
        let stabilized = current.max(up_rec).min(down_rec);
        self.record(old, desired, now);
        let able_to_scale = if stabilized == desired {
            READY
        } else if desired >= current {
            UP_STABILIZED
        } else {
            DOWN_STABILIZED
        };
        let (replicas, why) = self.with_behavior_rate(current, stabilized, min, max, up, down, now);
        Normalized {
            replicas,
            able_to_scale,
            limited: replicas != stabilized,
            scaling_limited: why,
        }
    }

    /// Upstream `convertDesiredReplicasWithBehaviorRate`.
    #[allow(clippy::too_many_arguments)]
    fn with_behavior_rate(
        &self,
        current: i32,
        desired: i32,
        min: i32,
        max: i32,
        up: &HPAScalingRules,
        down: &HPAScalingRules,
        now: Timestamp,
    ) -> (i32, Why) {
        if desired > current {
            let limit = scale_up_limit(
                current,
                &self.scale_up_events,
                &self.scale_down_events,
                up,
                now,
            )
            .max(current);
            let (allowed, why) = if max > limit {
                (limit, UP_LIMIT)
            } else {
                (max, TOO_MANY)
            };
            if desired > allowed {
                return (allowed, why);
            }
        } else if desired < current {
            let limit = scale_down_limit(
                current,
                &self.scale_up_events,
                &self.scale_down_events,
                down,
                now,
            )
            .min(current);
            let (allowed, why) = if min < limit {
                (limit, DOWN_LIMIT)
            } else {
                (min, TOO_FEW)
            };
            if desired < allowed {
                return (allowed, why);
            }
        }
        (desired, WITHIN)
    }

    /// Upstream `storeScaleEvent` (only with `behavior`).
    pub fn store_scale_event(
        &mut self,
        rules: (&HPAScalingRules, &HPAScalingRules),
        prev: i32,
        new: i32,
        now: Timestamp,
    ) {
        let (events, change, r) = if new > prev {
            (&mut self.scale_up_events, new - prev, rules.0)
        } else {
            (&mut self.scale_down_events, prev - new, rules.1)
        };
        let longest = r
            .policies
            .iter()
            .flatten()
            .map(|p| p.period_seconds)
            .max()
            .unwrap_or(0);
        let cutoff = before(now, longest.into());
        for e in events.iter_mut() {
            if e.at < cutoff {
                e.outdated = true;
            }
        }
        let event = ScaleEvent {
            change,
            at: now,
            outdated: false,
        };
        match events.iter().position(|e| e.outdated) {
            Some(i) => events[i] = event,
            None if events.len() < MAX_SAMPLES => events.push(event),
            None => {
                events.remove(0);
                events.push(event);
            }
        }
    }
}

/// Upstream `convertDesiredReplicasWithRules`.
fn with_rules(current: i32, desired: i32, min: i32, max: i32) -> (i32, Why) {
    let scale_up_limit =
        (SCALE_UP_LIMIT_FACTOR * f64::from(current)).max(SCALE_UP_LIMIT_MINIMUM) as i32;
    let (maximum, why) = if max > scale_up_limit {
        (scale_up_limit, UP_LIMIT)
    } else {
        (max, TOO_MANY)
    };
    if desired < min {
        return (min, TOO_FEW);
    }
    if desired > maximum {
        return (maximum, why);
    }
    (desired, WITHIN)
}

/// Upstream `getReplicasChangePerPeriod`.
fn change_in_period(period_secs: i32, events: &[ScaleEvent], now: Timestamp) -> i32 {
    let cutoff = before(now, period_secs.into());
    events
        .iter()
        .filter(|e| e.at > cutoff)
        .fold(0i32, |acc, e| acc.saturating_add(e.change))
}

fn period_start(
    current: i32,
    p: &HPAScalingPolicy,
    up: &[ScaleEvent],
    down: &[ScaleEvent],
    now: Timestamp,
) -> i32 {
    current - change_in_period(p.period_seconds, up, now)
        + change_in_period(p.period_seconds, down, now)
}

/// Upstream `calculateScaleUpLimitWithScalingRules`.
fn scale_up_limit(
    current: i32,
    up: &[ScaleEvent],
    down: &[ScaleEvent],
    rules: &HPAScalingRules,
    now: Timestamp,
) -> i32 {
    let select = rules.select_policy.as_deref().unwrap_or("Max");
    if select == "Disabled" {
        return current;
    }
    let min_change = select == "Min";
    let mut result = if min_change { i32::MAX } else { i32::MIN };
    for p in rules.policies.iter().flatten() {
        let start = period_start(current, p, up, down, now);
        let proposed = match p.type_.as_str() {
            "Pods" => start.saturating_add(p.value),
            "Percent" => (f64::from(start) * (1.0 + f64::from(p.value) / 100.0)).ceil() as i32,
            _ => continue,
        };
        result = if min_change {
            result.min(proposed)
        } else {
            result.max(proposed)
        };
    }
    result
}

/// Upstream `calculateScaleDownLimitWithBehaviors`.
fn scale_down_limit(
    current: i32,
    up: &[ScaleEvent],
    down: &[ScaleEvent],
    rules: &HPAScalingRules,
    now: Timestamp,
) -> i32 {
    let select = rules.select_policy.as_deref().unwrap_or("Max");
    if select == "Disabled" {
        return current;
    }
    let min_change = select == "Min";
    let mut result = if min_change { i32::MIN } else { i32::MAX };
    for p in rules.policies.iter().flatten() {
        let start = period_start(current, p, up, down, now);
        let proposed = match p.type_.as_str() {
            "Pods" => start.saturating_sub(p.value),
            "Percent" => (f64::from(start) * (1.0 - f64::from(p.value) / 100.0)) as i32,
            _ => continue,
        };
        result = if min_change {
            result.max(proposed)
        } else {
            result.min(proposed)
        };
    }
    result
}

#[cfg(test)]
#[path = "normalize_tests.rs"]
mod tests;
