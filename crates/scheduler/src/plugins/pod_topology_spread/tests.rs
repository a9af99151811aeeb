//! Table-driven cases after upstream's `filtering_test.go` and `scoring_test.go` (our own cases).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use serde_json::{json, Value};

use super::*;
use crate::framework::{CycleState, NodeInfo, Status, MAX_NODE_SCORE};
use crate::plugins::testutil::{node, node_info, st_of};

fn pod(name: &str, ns: &str, labels: Value, spec: Value) -> Pod {
    let mut spec = spec;
    spec["containers"] = json!([{"name": "c"}]);
    serde_json::from_value(
        json!({"metadata": {"name": name, "namespace": ns, "labels": labels}, "spec": spec}),
    )
    .unwrap()
}

fn foo(name: &str) -> Pod {
    pod(name, "default", json!({"foo": ""}), json!({}))
}

/// a, b in zone1; x, y in zone2; `taint` taints node b; `counts` pods with label foo per node.
fn cluster(counts: [usize; 4], taint_b: bool) -> Vec<NodeInfo> {
    ["a", "b", "x", "y"]
        .iter()
        .zip(counts)
        .map(|(n, c)| {
            let zone = if *n < "x" { "zone1" } else { "zone2" };
            let spec = if taint_b && *n == "b" {
                json!({"taints": [{"key": "k", "value": "v", "effect": "NoSchedule"}]})
            } else {
                json!({})
            };
            let pods = (0..c).map(|i| foo(&format!("{n}-{i}"))).collect();
            node_info(
                node(
                    n,
                    json!({"labels": {"zone": zone, "kubernetes.io/hostname": n}}),
                    spec,
                    json!({}),
                ),
                pods,
            )
        })
        .collect()
}

fn constraint(key: &str, skew: i32, when: &str, extra: Value) -> Value {
    let mut c = json!({"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when,
        "labelSelector": {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}});
    if let (Value::Object(c), Value::Object(e)) = (&mut c, extra) {
        c.extend(e);
    }
    c
}

fn plugin() -> PodTopologySpread {
    PodTopologySpread::new(Args::default(), Handle::default()).unwrap()
}

fn filter_all(p: &PodTopologySpread, pod: &Pod, nodes: &[NodeInfo]) -> Vec<Status> {
    let mut st = st_of(nodes);
    let (_, s) = p.pre_filter(&mut st, pod);
    assert!(s.is_ok(), "{s:?}");
    nodes.iter().map(|n| p.filter(&st, pod, n)).collect()
}

#[test]
fn filter() {
    let ok = Status::Success;
    let no = Status::Unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH.into());
    let incoming = |constraints: Value, extra: Value| {
        let mut spec = json!({ "topologySpreadConstraints": constraints });
        if let (Value::Object(s), Value::Object(e)) = (&mut spec, extra) {
            s.extend(e);
        }
        pod("p", "default", json!({"foo": "", "rev": "2"}), spec)
    };
    let zone1 = |skew, extra| json!([constraint("zone", skew, "DoNotSchedule", extra)]);
    type Case = (&'static str, Pod, [usize; 4], bool, Vec<Status>);
    let cases: Vec<Case> = vec![
        (
            "no existing pods",
            incoming(zone1(1, json!({})), json!({})),
            [0, 0, 0, 0],
            false,
            vec![ok.clone(); 4],
        ),
        (
            "zones 3/1: only zone2 fits",
            incoming(zone1(1, json!({})), json!({})),
            [1, 2, 1, 0],
            false,
            vec![no.clone(), no.clone(), ok.clone(), ok.clone()],
        ),
        (
            "zones 3/1 with maxSkew 3: all fit",
            incoming(zone1(3, json!({})), json!({})),
            [1, 2, 1, 0],
            false,
            vec![ok.clone(); 4],
        ),
        (
            "minDomains above the domain count makes the minimum 0",
            incoming(zone1(1, json!({"minDomains": 3})), json!({})),
            [1, 2, 1, 0],
            false,
            vec![no.clone(); 4],
        ),
        (
            "nodeAffinityPolicy Honor counts only zone1",
            incoming(
                zone1(1, json!({})),
                json!({"nodeSelector": {"zone": "zone1"}}),
            ),
            [1, 2, 1, 0],
            false,
            vec![ok.clone(), ok.clone(), ok.clone(), ok.clone()],
        ),
        (
            "nodeAffinityPolicy Ignore counts every zone",
            incoming(
                zone1(1, json!({"nodeAffinityPolicy": "Ignore"})),
                json!({"nodeSelector": {"zone": "zone1"}}),
            ),
            [1, 2, 1, 0],
            false,
            vec![no.clone(), no.clone(), ok.clone(), ok.clone()],
        ),
        (
            "nodeTaintsPolicy Honor leaves the tainted node's pods out",
            incoming(zone1(1, json!({"nodeTaintsPolicy": "Honor"})), json!({})),
            [1, 2, 1, 0],
            true,
            vec![ok.clone(), ok.clone(), ok.clone(), ok.clone()],
        ),
        (
            "nodeTaintsPolicy Ignore (default) counts them",
            incoming(zone1(1, json!({})), json!({})),
            [1, 2, 1, 0],
            true,
            vec![no.clone(), no.clone(), ok.clone(), ok.clone()],
        ),
        (
            "matchLabelKeys: existing pods of another revision do not count",
            incoming(zone1(1, json!({"matchLabelKeys": ["rev"]})), json!({})),
            [1, 2, 1, 0],
            false,
            vec![ok.clone(); 4],
        ),
        (
            "zone and hostname constraints both hold",
            incoming(
                json!([
                    constraint("zone", 3, "DoNotSchedule", json!({})),
                    constraint("kubernetes.io/hostname", 1, "DoNotSchedule", json!({}))
                ]),
                json!({}),
            ),
            [1, 2, 1, 0],
            false,
            vec![no.clone(), no.clone(), no.clone(), ok.clone()],
        ),
    ];
    for (name, p, counts, taint, want) in cases {
        let nodes = cluster(counts, taint);
        assert_eq!(filter_all(&plugin(), &p, &nodes), want, "{name}");
    }
}

#[test]
fn filter_edge_cases() {
    let pl = plugin();
    // A pod not matching its own selector does not count itself.
    let other = pod(
        "p",
        "default",
        json!({"bar": ""}),
        json!({"topologySpreadConstraints": [constraint("zone", 2, "DoNotSchedule", json!({}))]}),
    );
    let nodes = cluster([1, 2, 0, 0], false);
    // zone1 = 3, zone2 = 0: 3 + 0 - 0 > 2 fails, and zone2 fits.
    let got = filter_all(&pl, &other, &nodes);
    assert_eq!(got[2], Status::Success);
    assert!(!got[0].is_success());
    // Pods of another namespace do not count.
    let elsewhere = pod(
        "p",
        "other",
        json!({"foo": ""}),
        json!({"topologySpreadConstraints": [constraint("zone", 1, "DoNotSchedule", json!({}))]}),
    );
    assert!(filter_all(&pl, &elsewhere, &nodes)
        .iter()
        .all(Status::is_success));
    // A node without the key is unresolvable.
    let bare = node_info(
        node("bare", json!({"labels": {}}), json!({}), json!({})),
        vec![],
    );
    let mut all = nodes.clone();
    all.push(bare.clone());
    let p = pod(
        "p",
        "default",
        json!({"foo": ""}),
        json!({"topologySpreadConstraints": [constraint("zone", 1, "DoNotSchedule", json!({}))]}),
    );
    let mut st = st_of(&all);
    assert!(pl.pre_filter(&mut st, &p).1.is_success());
    assert_eq!(
        pl.filter(&st, &p, &bare),
        Status::UnschedulableAndUnresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH.into())
    );
    // Only soft constraints: PreFilter skips.
    let soft = pod(
        "p",
        "default",
        json!({}),
        json!({"topologySpreadConstraints": [constraint("zone", 1, "ScheduleAnyway", json!({}))]}),
    );
    assert_eq!(pl.pre_filter(&mut st_of(&all), &soft).1, Status::Skip);
}

#[test]
fn add_and_remove_pod_update_the_counts() {
    let pl = plugin();
    let nodes = cluster([1, 0, 1, 0], false);
    let p = pod(
        "p",
        "default",
        json!({"foo": ""}),
        json!({"topologySpreadConstraints": [constraint("zone", 1, "DoNotSchedule", json!({}))]}),
    );
    let mut st = st_of(&nodes);
    assert!(pl.pre_filter(&mut st, &p).1.is_success());
    assert!(pl.filter(&st, &p, &nodes[0]).is_success());
    let added = Arc::new(crate::framework::PodInfo::new(Arc::new(foo("new"))));
    pl.add_pod(&mut st, &p, &added, &nodes[1]);
    // zone1 = 2, zone2 = 1: zone1 nodes now fail.
    assert!(!pl.filter(&st, &p, &nodes[0]).is_success());
    pl.remove_pod(&mut st, &p, &added, &nodes[1]);
    assert!(pl.filter(&st, &p, &nodes[0]).is_success());
}

fn scores(pl: &PodTopologySpread, p: &Pod, nodes: &[NodeInfo]) -> Option<Vec<i64>> {
    let mut st: CycleState = st_of(nodes);
    let feasible: Vec<Arc<NodeInfo>> = nodes.iter().cloned().map(Arc::new).collect();
    if pl.pre_score(&mut st, p, &feasible) == Status::Skip {
        return None;
    }
    let mut s: Vec<i64> = nodes.iter().map(|n| pl.score(&st, p, n)).collect();
    pl.normalize(&st, p, &mut s);
    Some(s)
}

#[test]
fn score() {
    let pl = plugin();
    let soft = |key: &str| {
        pod(
            "p",
            "default",
            json!({"foo": ""}),
            json!({"topologySpreadConstraints": [constraint(key, 1, "ScheduleAnyway", json!({}))]}),
        )
    };
    // zone1 = 3, zone2 = 1; weight ln(2 + 2): raw 4 and 1 -> 100 * (4 + 1 - s) / 4.
    assert_eq!(
        scores(&pl, &soft("zone"), &cluster([1, 2, 1, 0], false)),
        Some(vec![25, 25, 100, 100])
    );
    // hostname: weight ln(4 + 2), raw 2, 4, 2, 0.
    assert_eq!(
        scores(
            &pl,
            &soft("kubernetes.io/hostname"),
            &cluster([1, 2, 1, 0], false)
        ),
        Some(vec![50, 0, 50, MAX_NODE_SCORE])
    );
    // No matching pods anywhere: every node gets the maximum.
    assert_eq!(
        scores(&pl, &soft("zone"), &cluster([0, 0, 0, 0], false)),
        Some(vec![100; 4])
    );
    // A node lacking the key is ignored (0).
    let mut nodes = cluster([1, 2, 1, 0], false);
    nodes.push(node_info(
        node("bare", json!({"labels": {}}), json!({}), json!({})),
        vec![],
    ));
    assert_eq!(
        scores(&pl, &soft("zone"), &nodes),
        Some(vec![25, 25, 100, 100, 0])
    );
}

#[test]
fn system_default_constraints_follow_the_pods_service() {
    let handle = Handle::default();
    let pl = PodTopologySpread::new(Args::default(), handle.clone()).unwrap();
    let p = foo("p");
    // No Service, ReplicaSet, ...: no default selector, nothing to do.
    assert_eq!(scores(&pl, &p, &cluster([1, 2, 1, 0], false)), None);
    handle.listers.services.upsert(Arc::new(
        serde_json::from_value(json!({"metadata": {"name": "s", "namespace": "default"},
            "spec": {"selector": {"foo": ""}}}))
        .unwrap(),
    ));
    // Nodes here have no topology.kubernetes.io/zone: with system defaults they still score by
    // hostname (skew 3): raw 1*w+2, 2*w+2, 1*w+2, 2 with w = ln 6.
    let s = scores(&pl, &p, &cluster([1, 2, 1, 0], false)).unwrap();
    assert!(s[3] > s[0] && s[0] > s[1] && s[0] == s[2], "{s:?}");
    // Hard default constraints apply to pods without their own (List defaulting).
    let list = PodTopologySpread::new(
        Args {
            default_constraints: vec![serde_json::from_value(
                json!({"maxSkew": 1, "topologyKey": "zone",
                "whenUnsatisfiable": "DoNotSchedule"}),
            )
            .unwrap()],
            defaulting_type: Some("List".into()),
        },
        handle,
    )
    .unwrap();
    let got = filter_all(&list, &p, &cluster([1, 2, 1, 0], false));
    assert_eq!(got[2], Status::Success);
    assert!(!got[0].is_success());
}

#[test]
fn args_are_validated() {
    let bad_type = Args {
        defaulting_type: Some("Foo".into()),
        ..Default::default()
    };
    assert!(PodTopologySpread::new(bad_type, Handle::default()).is_err());
    let system_with_list = Args {
        default_constraints: vec![serde_json::from_value(
            json!({"maxSkew": 1, "topologyKey": "zone",
            "whenUnsatisfiable": "DoNotSchedule"}),
        )
        .unwrap()],
        defaulting_type: None,
    };
    assert!(PodTopologySpread::new(system_with_list, Handle::default()).is_err());
}
