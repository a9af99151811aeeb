//! Cases in the manner of upstream's `horizontal_test.go` (`TestNormalizeDesiredReplicas*`,
//! `TestScalingWithRules`, `TestStoreScaleEvents`).

use super::*;

fn now() -> Timestamp {
    "2026-11-29T12:00:00Z".parse().unwrap()
}

fn ago(secs: i64) -> Timestamp {
    before(now(), secs)
}

fn rules(window: i32, select: &str, policies: &[(&str, i32, i32)]) -> HPAScalingRules {
    HPAScalingRules {
        stabilization_window_seconds: Some(window),
        select_policy: Some(select.into()),
        policies: Some(
            policies
                .iter()
                .map(|(t, v, p)| HPAScalingPolicy {
                    type_: (*t).into(),
                    value: *v,
                    period_seconds: *p,
                })
                .collect(),
        ),
        tolerance: None,
    }
}

fn defaults() -> (HPAScalingRules, HPAScalingRules) {
    let mut d = rules_with_defaults(&HorizontalPodAutoscalerBehavior::default(), 300);
    d.1.stabilization_window_seconds = Some(0);
    d
}

fn history(recs: &[(i32, i64)]) -> History {
    History {
        recommendations: recs
            .iter()
            .map(|(r, a)| Recommendation {
                replicas: *r,
                at: ago(*a),
            })
            .collect(),
        ..Default::default()
    }
}

#[test]
fn defaults_are_upstreams() {
    let (up, down) = rules_with_defaults(&HorizontalPodAutoscalerBehavior::default(), 300);
    assert_eq!(
        up,
        rules(0, "Max", &[("Pods", 4, 15), ("Percent", 100, 15)])
    );
    assert_eq!(down, rules(300, "Max", &[("Percent", 100, 15)]));
    let b = HorizontalPodAutoscalerBehavior {
        scale_down: Some(HPAScalingRules {
            stabilization_window_seconds: Some(10),
            ..Default::default()
        }),
        ..Default::default()
    };
    assert_eq!(
        rules_with_defaults(&b, 300).1,
        rules(10, "Max", &[("Percent", 100, 15)])
    );
}

#[test]
fn without_behavior_scale_up_is_doubled_at_most() {
    let mut h = History::default();
    let n = h.normalize(5, 20, 1, 100, 300, now());
    assert_eq!(
        (n.replicas, n.limited, n.scaling_limited.0),
        (10, true, "ScaleUpLimit")
    );
    assert_eq!(n.able_to_scale.0, "ReadyForNewScale");
    let mut h = History::default();
    let n = h.normalize(1, 20, 1, 100, 300, now());
    assert_eq!(n.replicas, 4);
    let n = History::default().normalize(5, 8, 1, 6, 300, now());
    assert_eq!((n.replicas, n.scaling_limited.0), (6, "TooManyReplicas"));
    let n = History::default().normalize(5, 0, 2, 6, 300, now());
    assert_eq!((n.replicas, n.scaling_limited.0), (2, "TooFewReplicas"));
    let n = History::default().normalize(5, 4, 2, 6, 300, now());
    assert_eq!(
        (n.replicas, n.limited, n.scaling_limited.0),
        (4, false, "DesiredWithinRange")
    );
}

#[test]
fn without_behavior_scale_down_is_stabilized() {
    // A recommendation of 8 a minute ago holds a scale-down to 3 for the 5-minute window.
    let mut h = history(&[(8, 60)]);
    let n = h.normalize(8, 3, 1, 10, 300, now());
    assert_eq!(n.replicas, 8);
    assert_eq!(n.able_to_scale.0, "ScaleDownStabilized");
    // Past the window the old sample is replaced, not kept.
    let mut h = history(&[(8, 400)]);
    let n = h.normalize(8, 3, 1, 10, 300, now());
    assert_eq!(n.replicas, 3);
    assert_eq!(h.recommendations.len(), 1);
}

#[test]
fn behavior_default_rules() {
    let (up, down) = defaults();
    let n = History::default().normalize_with_behavior(5, 50, 1, 100, &up, &down, now());
    // max(5 + 4 pods, 5 x 200%) = 10.
    assert_eq!((n.replicas, n.scaling_limited.0), (10, "ScaleUpLimit"));
    let n = History::default().normalize_with_behavior(50, 5, 1, 100, &up, &down, now());
    assert_eq!((n.replicas, n.limited), (5, false));
    let n = History::default().normalize_with_behavior(5, 50, 1, 8, &up, &down, now());
    assert_eq!((n.replicas, n.scaling_limited.0), (8, "TooManyReplicas"));
    let n = History::default().normalize_with_behavior(50, 1, 3, 100, &up, &down, now());
    assert_eq!((n.replicas, n.scaling_limited.0), (3, "TooFewReplicas"));
}

#[test]
fn select_policy_min_max_disabled() {
    let down = defaults().1;
    let up = rules(0, "Min", &[("Pods", 4, 60), ("Percent", 100, 60)]);
    let n = History::default().normalize_with_behavior(10, 50, 1, 100, &up, &down, now());
    assert_eq!(n.replicas, 14);
    let up = rules(0, "Max", &[("Pods", 4, 60), ("Percent", 100, 60)]);
    let n = History::default().normalize_with_behavior(10, 50, 1, 100, &up, &down, now());
    assert_eq!(n.replicas, 20);
    let up = rules(0, "Disabled", &[("Pods", 4, 60)]);
    let n = History::default().normalize_with_behavior(10, 50, 1, 100, &up, &down, now());
    assert_eq!(
        (n.replicas, n.limited, n.scaling_limited.0),
        (10, true, "ScaleUpLimit")
    );
    let up = defaults().0;
    let down = rules(0, "Max", &[("Percent", 10, 60), ("Pods", 1, 60)]);
    let n = History::default().normalize_with_behavior(100, 10, 1, 100, &up, &down, now());
    assert_eq!((n.replicas, n.scaling_limited.0), (90, "ScaleDownLimit"));
    let down = rules(0, "Min", &[("Percent", 10, 60), ("Pods", 1, 60)]);
    let n = History::default().normalize_with_behavior(100, 10, 1, 100, &up, &down, now());
    assert_eq!(n.replicas, 99);
}

#[test]
fn policies_count_the_changes_of_their_period() {
    let (_, down) = defaults();
    let up = rules(0, "Max", &[("Pods", 4, 60)]);
    let mut h = History::default();
    h.store_scale_event((&up, &down), 5, 9, ago(30));
    // 4 pods added 30 s ago: the period started at 5, so 9 is already the limit.
    let n = h.normalize_with_behavior(9, 20, 1, 100, &up, &down, now());
    assert_eq!((n.replicas, n.scaling_limited.0), (9, "ScaleUpLimit"));
    // Past the period the budget is whole again.
    let mut h = History::default();
    h.store_scale_event((&up, &down), 5, 9, ago(90));
    let n = h.normalize_with_behavior(9, 20, 1, 100, &up, &down, now());
    assert_eq!(n.replicas, 13);
}

#[test]
fn outdated_scale_events_are_reused() {
    let up = rules(0, "Max", &[("Pods", 4, 60)]);
    let down = defaults().1;
    let mut h = History::default();
    h.store_scale_event((&up, &down), 1, 2, ago(120));
    h.store_scale_event((&up, &down), 2, 3, ago(100));
    h.store_scale_event((&up, &down), 3, 5, now());
    // The first outdated slot took the new event.
    assert_eq!(h.scale_up_events.len(), 2);
    assert_eq!(h.scale_up_events[0].change, 2);
    assert!(h.scale_up_events[1].outdated);
}

#[test]
fn behavior_stabilization_windows() {
    let up = rules(0, "Max", &[("Pods", 100, 15)]);
    let down = rules(10, "Max", &[("Percent", 100, 15)]);
    // A recommendation of 6 five seconds ago holds a scale-down to 2.
    let mut h = history(&[(6, 5)]);
    let n = h.normalize_with_behavior(6, 2, 2, 6, &up, &down, now());
    assert_eq!((n.replicas, n.able_to_scale.0), (6, "ScaleDownStabilized"));
    // After the 10 s window it goes through.
    let mut h = history(&[(6, 15)]);
    let n = h.normalize_with_behavior(6, 2, 2, 6, &up, &down, now());
    assert_eq!((n.replicas, n.able_to_scale.0), (2, "ReadyForNewScale"));
    // A scale-up window keeps the lowest recent recommendation.
    let up = rules(60, "Max", &[("Pods", 100, 15)]);
    let mut h = history(&[(3, 30)]);
    let n = h.normalize_with_behavior(2, 6, 1, 10, &up, &down, now());
    assert_eq!((n.replicas, n.able_to_scale.0), (3, "ScaleUpStabilized"));
}
