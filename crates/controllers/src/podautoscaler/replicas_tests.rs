//! Cases of upstream's `replica_calculator_test.go` (the resource-metric ones), same inputs and
//! expected replicas, utilization and average value.

use super::*;
use k8s_openapi::api::core::v1::{
    Container, PodCondition, PodSpec, PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

fn now() -> Timestamp {
    "2026-11-29T12:00:00Z".parse().unwrap()
}

fn ago(secs: i64) -> Timestamp {
    now() - jiff::SignedDuration::from_secs(secs)
}

#[derive(Clone)]
struct P {
    ready: &'static str,
    phase: &'static str,
    deleting: bool,
    start: Timestamp,
    transition: Timestamp,
    request: &'static str,
}

fn cool() -> P {
    P {
        ready: "True",
        phase: "Running",
        deleting: false,
        start: ago(3600),
        transition: ago(3600),
        request: "1",
    }
}

fn pods(specs: &[P]) -> Vec<Pod> {
    specs
        .iter()
        .enumerate()
        .map(|(i, p)| Pod {
            metadata: ObjectMeta {
                name: Some(format!("test-pod-{i}")),
                deletion_timestamp: p.deleting.then(|| Time(now())),
                ..Default::default()
            },
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    resources: Some(ResourceRequirements {
                        requests: Some([("cpu".to_string(), Quantity(p.request.into()))].into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(p.phase.into()),
                start_time: Some(Time(p.start)),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: p.ready.into(),
                    last_transition_time: Some(Time(p.transition)),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
        .collect()
}

fn metrics(levels: &[(usize, i64)]) -> PodMetricsInfo {
    levels
        .iter()
        .map(|(i, v)| {
            (
                format!("test-pod-{i}"),
                PodMetric {
                    timestamp: now(),
                    window: Duration::from_secs(60),
                    value: *v,
                },
            )
        })
        .collect()
}

fn seq(levels: &[i64]) -> Vec<(usize, i64)> {
    levels.iter().copied().enumerate().collect()
}

const CALC: Calculator = Calculator {
    cpu_initialization_period: Duration::from_secs(120),
    delay_of_initial_readiness_status: Duration::from_secs(10),
};

fn run(
    current: i32,
    specs: &[P],
    levels: &[(usize, i64)],
    target: i32,
) -> Result<Proposal, CalcError> {
    let pods = pods(specs);
    let refs: Vec<&Pod> = pods.iter().collect();
    CALC.resource_replicas(
        current,
        target,
        "cpu",
        "",
        Tolerances::uniform(0.1),
        metrics(levels),
        &refs,
        now(),
    )
}

fn expect(r: Result<Proposal, CalcError>, replicas: i32, util: i32, value: i64) {
    let p = r.expect("a proposal");
    assert_eq!(
        (p.replicas, p.utilization, p.raw_average),
        (replicas, Some(util), value)
    );
}

fn with(f: impl Fn(&mut P)) -> P {
    let mut p = cool();
    f(&mut p);
    p
}

#[test]
fn scale_up() {
    expect(
        run(3, &[cool(), cool(), cool()], &seq(&[300, 500, 700]), 30),
        5,
        50,
        500,
    );
}

#[test]
fn scale_up_unready_less_scale() {
    let specs = [with(|p| p.ready = "False"), cool(), cool()];
    expect(run(3, &specs, &seq(&[300, 500, 700]), 30), 4, 60, 600);
}

#[test]
fn scale_up_hot_cpu_less_scale() {
    // Started a minute ago, ready 30 s ago: its sample covers the start-up.
    let hot = with(|p| {
        p.start = ago(60);
        p.transition = ago(30);
    });
    expect(
        run(3, &[hot, cool(), cool()], &seq(&[300, 500, 700]), 30),
        4,
        60,
        600,
    );
}

#[test]
fn scale_up_unready_no_scale() {
    let u = with(|p| p.ready = "False");
    expect(
        run(3, &[cool(), u.clone(), u], &seq(&[400, 500, 700]), 30),
        3,
        40,
        400,
    );
}

#[test]
fn scale_up_ignores_failed_and_deleted_pods() {
    let failed = with(|p| {
        p.ready = "False";
        p.phase = "Failed";
    });
    let specs = [cool(), cool(), failed.clone(), failed];
    expect(run(2, &specs, &seq(&[500, 700]), 30), 4, 60, 600);
    let deleting = with(|p| {
        p.ready = "False";
        p.deleting = true;
    });
    let specs = [cool(), cool(), deleting.clone(), deleting];
    expect(run(2, &specs, &seq(&[500, 700]), 30), 4, 60, 600);
}

#[test]
fn scale_down() {
    let specs = vec![cool(); 5];
    expect(
        run(5, &specs, &seq(&[100, 300, 500, 250, 250]), 50),
        3,
        28,
        280,
    );
}

#[test]
fn scale_down_with_unready_pods() {
    let u = with(|p| p.ready = "False");
    let specs = [cool(), cool(), cool(), u.clone(), u];
    expect(
        run(5, &specs, &seq(&[100, 300, 500, 250, 250]), 50),
        2,
        30,
        300,
    );
}

#[test]
fn within_tolerance() {
    let specs = [
        with(|p| p.request = "0.9"),
        with(|p| p.request = "1.0"),
        with(|p| p.request = "1.1"),
    ];
    expect(run(3, &specs, &seq(&[1010, 1030, 1020]), 100), 3, 102, 1020);
}

#[test]
fn missing_metrics_no_change() {
    let two = [cool(), cool()];
    // Equal, greater (missing at 0% brings it within tolerance), less (missing at 100%).
    expect(run(2, &two, &[(0, 1000)], 100), 2, 100, 1000);
    expect(run(2, &two, &[(0, 1900)], 100), 2, 190, 1900);
    expect(run(2, &two, &[(0, 600)], 100), 2, 60, 600);
}

#[test]
fn missing_metrics_scale_up_and_down() {
    let four = vec![cool(); 4];
    // Scale up: the missing pods at 0%.
    expect(run(4, &four, &[(0, 2000), (1, 2000)], 50), 8, 200, 2000);
    // Scale down: the missing pods at 100%.
    expect(run(4, &four, &[(0, 100), (1, 100)], 100), 3, 10, 100);
}

#[test]
fn rolling_update_with_max_surge_does_not_scale_up() {
    // A surge pod without metrics yet would push a scale-down above the current count.
    let three = vec![cool(); 3];
    expect(run(2, &three, &[(0, 100), (1, 100)], 50), 2, 10, 100);
}

#[test]
fn pending_pods_are_unready() {
    let pending = with(|p| p.phase = "Pending");
    expect(
        run(3, &[cool(), cool(), pending], &seq(&[900, 900]), 50),
        4,
        90,
        900,
    );
}

#[test]
fn errors_match_upstream() {
    assert_eq!(run(1, &[], &[], 50), Err(CalcError::NoPods));
    let u = with(|p| p.ready = "False");
    assert_eq!(run(1, &[u], &seq(&[100]), 50), Err(CalcError::NoMetrics));
    let mut no_request = pods(&[cool()]);
    no_request[0].spec.as_mut().unwrap().containers[0].resources = None;
    let refs: Vec<&Pod> = no_request.iter().collect();
    let err = CALC
        .resource_replicas(
            1,
            50,
            "cpu",
            "",
            Tolerances::uniform(0.1),
            metrics(&seq(&[1])),
            &refs,
            now(),
        )
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "missing request for cpu in container c of Pod test-pod-0"
    );
}

#[test]
fn raw_average_value() {
    let pods = pods(&[cool(), cool(), cool()]);
    let refs: Vec<&Pod> = pods.iter().collect();
    let p = CALC
        .raw_resource_replicas(
            3,
            200,
            "cpu",
            Tolerances::uniform(0.1),
            metrics(&seq(&[300, 500, 700])),
            &refs,
            now(),
        )
        .unwrap();
    // Average 500m against 200m: 2.5 x 3 ready pods.
    assert_eq!((p.replicas, p.utilization, p.raw_average), (8, None, 500));
}

#[test]
fn configurable_tolerance() {
    let three = vec![cool(); 3];
    let pods = pods(&three);
    let refs: Vec<&Pod> = pods.iter().collect();
    // 115% of the target: outside the default 10%, inside a 20% scale-up tolerance.
    let levels = seq(&[1150, 1150, 1150]);
    let wide = Tolerances {
        scale_down: 0.1,
        scale_up: 0.2,
    };
    let p = CALC
        .resource_replicas(3, 100, "cpu", "", wide, metrics(&levels), &refs, now())
        .unwrap();
    assert_eq!(p.replicas, 3);
    expect(run(3, &three, &levels, 100), 4, 115, 1150);
}
