//! Table-driven cases after upstream's `filtering_test.go` and `scoring_test.go` (our own cases).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

use super::*;
use crate::framework::{CycleState, NodeInfo, Status};
use crate::plugins::testutil::{node, node_info, st_of};

fn pod(name: &str, ns: &str, labels: Value, affinity: Value) -> Pod {
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": ns, "labels": labels},
        "spec": {"containers": [{"name": "c"}], "affinity": affinity}}),
    )
    .unwrap()
}

fn term(labels: Value, key: &str, extra: Value) -> Value {
    let mut t = json!({"labelSelector": {"matchLabels": labels}, "topologyKey": key});
    if let (Value::Object(t), Value::Object(e)) = (&mut t, extra) {
        t.extend(e);
    }
    t
}

fn required(kind: &str, terms: Vec<Value>) -> Value {
    json!({ kind: {"requiredDuringSchedulingIgnoredDuringExecution": terms} })
}

fn preferred(kind: &str, weight: i32, t: Value) -> Value {
    json!({ kind: {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": weight, "podAffinityTerm": t}]} })
}

/// n1, n2 in zone z1, n3 in z2, n4 without a zone; `existing` pods by node index.
fn cluster(existing: Vec<(usize, Pod)>) -> Vec<NodeInfo> {
    let labels = [
        json!({"zone": "z1", "kubernetes.io/hostname": "n1"}),
        json!({"zone": "z1", "kubernetes.io/hostname": "n2"}),
        json!({"zone": "z2", "kubernetes.io/hostname": "n3"}),
        json!({"kubernetes.io/hostname": "n4"}),
    ];
    labels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let pods = existing
                .iter()
                .filter(|(n, _)| *n == i)
                .map(|(_, p)| p.clone())
                .collect();
            node_info(
                node(
                    &format!("n{}", i + 1),
                    json!({ "labels": l }),
                    json!({}),
                    json!({}),
                ),
                pods,
            )
        })
        .collect()
}

fn plugin(handle: Handle) -> InterPodAffinity {
    InterPodAffinity::new(Args::default(), handle).unwrap()
}

fn filter_all(pl: &InterPodAffinity, p: &Pod, nodes: &[NodeInfo]) -> Vec<Status> {
    let mut st = st_of(nodes);
    let (_, s) = pl.pre_filter(&mut st, p);
    if s == Status::Skip {
        return vec![Status::Success; nodes.len()];
    }
    assert!(s.is_success(), "{s:?}");
    nodes.iter().map(|n| pl.filter(&st, p, n)).collect()
}

#[test]
fn filter() {
    let ok = Status::Success;
    let aff = Status::UnschedulableAndUnresolvable(ERR_REASON_AFFINITY.into());
    let anti = Status::Unschedulable(ERR_REASON_ANTI_AFFINITY.into());
    let existing_anti = Status::Unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY.into());
    let scan = || {
        pod(
            "scan",
            "default",
            json!({"service": "securityscan"}),
            json!({}),
        )
    };
    let web = |name: &str| pod(name, "default", json!({"app": "web"}), json!({}));
    type Case = (&'static str, Pod, Vec<(usize, Pod)>, Vec<Status>);
    let cases: Vec<Case> = vec![
        (
            "no affinity: everything fits",
            pod("p", "default", json!({}), json!({})),
            vec![(0, scan())],
            vec![ok.clone(); 4],
        ),
        (
            "required affinity by zone: the zone of the matching pod",
            pod(
                "p",
                "default",
                json!({}),
                required(
                    "podAffinity",
                    vec![term(json!({"service": "securityscan"}), "zone", json!({}))],
                ),
            ),
            vec![(0, scan())],
            vec![ok.clone(), ok.clone(), aff.clone(), aff.clone()],
        ),
        (
            "required affinity nobody satisfies",
            pod(
                "p",
                "default",
                json!({}),
                required(
                    "podAffinity",
                    vec![term(json!({"service": "other"}), "zone", json!({}))],
                ),
            ),
            vec![(0, scan())],
            vec![aff.clone(); 4],
        ),
        (
            "the first pod of a self-affine group fits where the key exists",
            pod(
                "p",
                "default",
                json!({"app": "web"}),
                required(
                    "podAffinity",
                    vec![term(json!({"app": "web"}), "zone", json!({}))],
                ),
            ),
            vec![(0, scan())],
            vec![ok.clone(), ok.clone(), ok.clone(), aff.clone()],
        ),
        (
            "affinity to pods of another namespace only",
            pod(
                "p",
                "default",
                json!({}),
                required(
                    "podAffinity",
                    vec![term(
                        json!({"service": "securityscan"}),
                        "zone",
                        json!({"namespaces": ["other"]}),
                    )],
                ),
            ),
            vec![(0, scan())],
            vec![aff.clone(); 4],
        ),
        (
            "every affinity term must match the same pod",
            pod(
                "p",
                "default",
                json!({}),
                required(
                    "podAffinity",
                    vec![
                        term(json!({"service": "securityscan"}), "zone", json!({})),
                        term(json!({"app": "web"}), "zone", json!({})),
                    ],
                ),
            ),
            vec![(0, scan()), (2, web("w"))],
            vec![aff.clone(); 4],
        ),
        (
            "required anti-affinity by hostname",
            pod(
                "p",
                "default",
                json!({}),
                required(
                    "podAntiAffinity",
                    vec![term(
                        json!({"app": "web"}),
                        "kubernetes.io/hostname",
                        json!({}),
                    )],
                ),
            ),
            vec![(0, web("w"))],
            vec![anti.clone(), ok.clone(), ok.clone(), ok.clone()],
        ),
        (
            "required anti-affinity by zone",
            pod(
                "p",
                "default",
                json!({}),
                required(
                    "podAntiAffinity",
                    vec![term(json!({"app": "web"}), "zone", json!({}))],
                ),
            ),
            vec![(1, web("w"))],
            vec![anti.clone(), anti.clone(), ok.clone(), ok.clone()],
        ),
        (
            "an existing pod's anti-affinity keeps the pod out of its zone",
            pod("p", "default", json!({"app": "web"}), json!({})),
            vec![(
                0,
                pod(
                    "guard",
                    "default",
                    json!({}),
                    required(
                        "podAntiAffinity",
                        vec![term(json!({"app": "web"}), "zone", json!({}))],
                    ),
                ),
            )],
            vec![
                existing_anti.clone(),
                existing_anti.clone(),
                ok.clone(),
                ok.clone(),
            ],
        ),
        (
            "an existing pod's anti-affinity for another namespace does not apply",
            pod("p", "default", json!({"app": "web"}), json!({})),
            vec![(
                0,
                pod(
                    "guard",
                    "other",
                    json!({}),
                    required(
                        "podAntiAffinity",
                        vec![term(json!({"app": "web"}), "zone", json!({}))],
                    ),
                ),
            )],
            vec![ok.clone(); 4],
        ),
    ];
    for (name, p, existing, want) in cases {
        let nodes = cluster(existing);
        assert_eq!(
            filter_all(&plugin(Handle::default()), &p, &nodes),
            want,
            "{name}"
        );
    }
}

#[test]
fn namespace_selectors() {
    let handle = Handle::default();
    for (ns, team) in [("ns-a", "a"), ("ns-b", "b"), ("default", "a")] {
        handle.listers.namespaces.upsert(Arc::new(
            serde_json::from_value(json!({"metadata": {"name": ns, "labels": {"team": team}}}))
                .unwrap(),
        ));
    }
    let pl = plugin(handle);
    let selector = json!({"namespaceSelector": {"matchLabels": {"team": "a"}}});
    // The incoming pod's term selects namespaces of team a: the pod in ns-a counts.
    let p = pod(
        "p",
        "default",
        json!({}),
        required(
            "podAffinity",
            vec![term(json!({"app": "db"}), "zone", selector.clone())],
        ),
    );
    let nodes = cluster(vec![(
        2,
        pod("db", "ns-a", json!({"app": "db"}), json!({})),
    )]);
    assert!(filter_all(&pl, &p, &nodes)[2].is_success());
    assert!(!filter_all(&pl, &p, &nodes)[0].is_success());
    let nodes = cluster(vec![(
        2,
        pod("db", "ns-b", json!({"app": "db"}), json!({})),
    )]);
    assert!(!filter_all(&pl, &p, &nodes)[2].is_success());
    // An existing pod's anti-affinity selecting the incoming pod's namespace by its labels.
    let guard = pod(
        "g",
        "ns-b",
        json!({}),
        required(
            "podAntiAffinity",
            vec![term(json!({"app": "web"}), "zone", selector)],
        ),
    );
    let nodes = cluster(vec![(0, guard)]);
    let incoming = pod("p", "default", json!({"app": "web"}), json!({}));
    let got = filter_all(&pl, &incoming, &nodes);
    assert!(!got[0].is_success() && got[2].is_success(), "{got:?}");
}

#[test]
fn nominated_and_preemption_updates() {
    let pl = plugin(Handle::default());
    let p = pod(
        "p",
        "default",
        json!({}),
        required(
            "podAntiAffinity",
            vec![term(json!({"app": "web"}), "zone", json!({}))],
        ),
    );
    let nodes = cluster(vec![]);
    let mut st = st_of(&nodes);
    assert!(pl.pre_filter(&mut st, &p).1.is_success());
    assert!(pl.filter(&st, &p, &nodes[0]).is_success());
    let w = Arc::new(crate::framework::PodInfo::new(Arc::new(pod(
        "w",
        "default",
        json!({"app": "web"}),
        json!({}),
    ))));
    pl.add_pod(&mut st, &p, &w, &nodes[1]);
    assert!(
        !pl.filter(&st, &p, &nodes[0]).is_success(),
        "same zone as the added pod"
    );
    assert!(pl.filter(&st, &p, &nodes[2]).is_success());
    pl.remove_pod(&mut st, &p, &w, &nodes[1]);
    assert!(pl.filter(&st, &p, &nodes[0]).is_success());
}

fn scores(pl: &InterPodAffinity, p: &Pod, nodes: &[NodeInfo]) -> Vec<i64> {
    let mut st: CycleState = st_of(nodes);
    let feasible: Vec<Arc<NodeInfo>> = nodes.iter().cloned().map(Arc::new).collect();
    if pl.pre_score(&mut st, p, &feasible) == Status::Skip {
        return vec![0; nodes.len()];
    }
    let mut s: Vec<i64> = nodes.iter().map(|n| pl.score(&st, p, n)).collect();
    pl.normalize(&st, p, &mut s);
    s
}

#[test]
fn score() {
    let pl = plugin(Handle::default());
    let s1 = || pod("s1", "default", json!({"security": "S1"}), json!({}));
    type ScoreCase = (&'static str, Pod, Vec<(usize, Pod)>, Vec<i64>);
    let cases: Vec<ScoreCase> = vec![
        (
            "no affinity anywhere",
            pod("p", "default", json!({}), json!({})),
            vec![(0, s1())],
            vec![0, 0, 0, 0],
        ),
        (
            "preferred affinity to the zone of S1",
            pod(
                "p",
                "default",
                json!({}),
                preferred(
                    "podAffinity",
                    5,
                    term(json!({"security": "S1"}), "zone", json!({})),
                ),
            ),
            vec![(0, s1())],
            vec![100, 100, 0, 0],
        ),
        (
            "preferred anti-affinity away from S1's zone",
            pod(
                "p",
                "default",
                json!({}),
                preferred(
                    "podAntiAffinity",
                    5,
                    term(json!({"security": "S1"}), "zone", json!({})),
                ),
            ),
            vec![(0, s1())],
            vec![0, 0, 100, 100],
        ),
        (
            "weights add up per matching pod",
            pod(
                "p",
                "default",
                json!({}),
                preferred(
                    "podAffinity",
                    4,
                    term(
                        json!({"security": "S1"}),
                        "kubernetes.io/hostname",
                        json!({}),
                    ),
                ),
            ),
            vec![
                (0, s1()),
                (
                    0,
                    pod("s1b", "default", json!({"security": "S1"}), json!({})),
                ),
                (2, s1()),
            ],
            vec![100, 0, 50, 0],
        ),
        (
            "an existing pod's required affinity attracts (hardPodAffinityWeight)",
            pod("p", "default", json!({"app": "web"}), json!({})),
            vec![(
                2,
                pod(
                    "e",
                    "default",
                    json!({}),
                    required(
                        "podAffinity",
                        vec![term(
                            json!({"app": "web"}),
                            "kubernetes.io/hostname",
                            json!({}),
                        )],
                    ),
                ),
            )],
            vec![0, 0, 100, 0],
        ),
        (
            "an existing pod's preferred anti-affinity repels",
            pod("p", "default", json!({"app": "web"}), json!({})),
            vec![(
                0,
                pod(
                    "e",
                    "default",
                    json!({}),
                    preferred(
                        "podAntiAffinity",
                        10,
                        term(json!({"app": "web"}), "zone", json!({})),
                    ),
                ),
            )],
            vec![0, 0, 100, 100],
        ),
    ];
    for (name, p, existing, want) in cases {
        assert_eq!(scores(&pl, &p, &cluster(existing)), want, "{name}");
    }
    // hardPodAffinityWeight 0 ignores existing pods' required affinity.
    let zero = InterPodAffinity::new(
        Args {
            hard_pod_affinity_weight: 0,
            ignore_preferred_terms_of_existing_pods: false,
        },
        Handle::default(),
    )
    .unwrap();
    let nodes = cluster(vec![(
        2,
        pod(
            "e",
            "default",
            json!({}),
            required(
                "podAffinity",
                vec![term(
                    json!({"app": "web"}),
                    "kubernetes.io/hostname",
                    json!({}),
                )],
            ),
        ),
    )]);
    assert_eq!(
        scores(
            &zero,
            &pod("p", "default", json!({"app": "web"}), json!({})),
            &nodes
        ),
        vec![0; 4]
    );
    assert!(InterPodAffinity::new(
        Args {
            hard_pod_affinity_weight: 101,
            ignore_preferred_terms_of_existing_pods: false
        },
        Handle::default()
    )
    .is_err());
}
