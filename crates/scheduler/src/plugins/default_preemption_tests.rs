//! Cases after upstream's `default_preemption_test.go` (our own cases): candidates, victims with
//! reprieves, PDBs, the node choice and ineligible pods, through a default-profile framework.

use std::sync::Arc;

use serde_json::{json, Value};

use super::*;
use crate::config::KubeSchedulerConfiguration;
use crate::framework::{Framework, NodeInfo};
use crate::plugins::testutil::{node, node_info, st_of};
use crate::queue::Nominator;

fn framework(h: Handle) -> Framework {
    let cfg = KubeSchedulerConfiguration::default_config();
    crate::profile::new_framework(&cfg.profiles[0], h, Arc::new(Nominator::default())).unwrap()
}

fn pod(name: &str, prio: i32, cpu: &str, extra: Value) -> Pod {
    let mut v = json!({"metadata": {"name": name, "namespace": "default", "uid": name, "labels": {"app": name}},
        "spec": {"priority": prio, "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}});
    if let (Value::Object(s), Value::Object(e)) = (&mut v["spec"], extra) {
        s.extend(e);
    }
    serde_json::from_value(v).unwrap()
}

fn nodes(pods: Vec<Vec<Pod>>) -> Vec<NodeInfo> {
    pods.into_iter()
        .enumerate()
        .map(|(i, ps)| {
            let name = format!("n{}", i + 1);
            node_info(
                node(
                    &name,
                    json!({"labels": {"kubernetes.io/hostname": name}}),
                    json!({}),
                    json!({"cpu": "1", "pods": "10"}),
                ),
                ps,
            )
        })
        .collect()
}

fn preempt(fw: &Framework, nodes: &[NodeInfo], p: &Pod) -> (PostFilterResult, Status) {
    let mut st = st_of(nodes);
    let (_, s, _, _) = fw.run_pre_filter(&mut st, p);
    assert!(s.is_ok(), "{s:?}");
    let all = st.snapshot.nodes.clone();
    let (feasible, statuses, _) = fw.find_nodes_that_pass_filters(&st, p, &all, 0, all.len());
    assert!(feasible.is_empty(), "the pod must not fit anywhere");
    fw.run_post_filter(&st, p, &statuses)
}

fn victims(r: &PostFilterResult) -> Vec<&str> {
    r.victims
        .iter()
        .map(|v| v.metadata.name.as_deref().unwrap_or(""))
        .collect()
}

#[test]
fn candidates_and_victims() {
    let fw = framework(Handle::default());
    type Case = (
        &'static str,
        Vec<Vec<Pod>>,
        Pod,
        Option<&'static str>,
        Vec<&'static str>,
    );
    let cases: Vec<Case> = vec![
        (
            "a lower-priority pod is evicted",
            vec![vec![pod("low", 0, "1", json!({}))]],
            pod("high", 10, "500m", json!({})),
            Some("n1"),
            vec!["low"],
        ),
        (
            "the node whose victims have the lower priority",
            vec![
                vec![pod("mid", 5, "1", json!({}))],
                vec![pod("low", 1, "1", json!({}))],
            ],
            pod("high", 10, "500m", json!({})),
            Some("n2"),
            vec!["low"],
        ),
        (
            "the node with the smaller priority sum (fewer victims)",
            vec![
                vec![
                    pod("a", 1, "500m", json!({})),
                    pod("b", 1, "500m", json!({})),
                ],
                vec![pod("c", 1, "1", json!({}))],
            ],
            pod("high", 10, "800m", json!({})),
            Some("n2"),
            vec!["c"],
        ),
        (
            "higher-priority pods are reprieved first",
            vec![vec![
                pod("p3", 3, "300m", json!({})),
                pod("p2", 2, "300m", json!({})),
                pod("p1", 1, "300m", json!({})),
            ]],
            pod("high", 10, "500m", json!({})),
            Some("n1"),
            vec!["p2", "p1"],
        ),
    ];
    for (name, layout, p, want_node, want_victims) in cases {
        let (r, s) = preempt(&fw, &nodes(layout), &p);
        assert_eq!(s, Status::Success, "{name}");
        assert_eq!(r.nominated_node.as_deref(), want_node, "{name}");
        assert_eq!(victims(&r), want_victims, "{name}");
    }
}

#[test]
fn pod_disruption_budgets_are_respected() {
    let h = Handle::default();
    h.listers.pdbs.upsert(Arc::new(
        serde_json::from_value(json!({"metadata": {"name": "pdb", "namespace": "default"},
            "spec": {"selector": {"matchLabels": {"app": "guarded"}}},
            "status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1}}))
        .unwrap(),
    ));
    let fw = framework(h);
    let layout = vec![
        vec![pod("guarded", 1, "1", json!({}))],
        vec![pod("free", 1, "1", json!({}))],
    ];
    let (r, s) = preempt(&fw, &nodes(layout), &pod("high", 10, "500m", json!({})));
    assert_eq!(s, Status::Success);
    assert_eq!(
        (r.nominated_node.as_deref(), victims(&r)),
        (Some("n2"), vec!["free"])
    );
    // Only a guarded pod to evict: it still goes (a PDB is best effort for preemption).
    let layout = vec![vec![pod("guarded", 1, "1", json!({}))]];
    let (r, s) = preempt(&fw, &nodes(layout), &pod("high", 10, "500m", json!({})));
    assert_eq!(s, Status::Success);
    assert_eq!(victims(&r), vec!["guarded"]);
}

#[test]
fn no_preemption() {
    let fw = framework(Handle::default());
    let unschedulable = |m: &str| Status::Unschedulable(m.to_string());
    let cases: Vec<(&str, Vec<Vec<Pod>>, Pod, Status)> = vec![
        (
            "only pods of equal or higher priority",
            vec![vec![pod("same", 10, "1", json!({}))], vec![pod("higher", 20, "1", json!({}))]],
            pod("p", 10, "500m", json!({})),
            unschedulable("no new claims to deallocate, preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."),
        ),
        (
            "preemptionPolicy Never",
            vec![vec![pod("low", 0, "1", json!({}))]],
            pod("p", 10, "500m", json!({"preemptionPolicy": "Never"})),
            unschedulable("no new claims to deallocate, preemption: not eligible due to preemptionPolicy=Never."),
        ),
        (
            "nodes that preemption cannot help",
            vec![vec![pod("low", 0, "1", json!({}))]],
            pod("p", 10, "500m", json!({"nodeSelector": {"disk": "ssd"}})),
            unschedulable("no new claims to deallocate, preemption: 0/1 nodes are available: 1 Preemption is not helpful for scheduling."),
        ),
        (
            "too big even on an empty node",
            vec![vec![pod("low", 0, "500m", json!({}))]],
            pod("p", 10, "2", json!({})),
            unschedulable("no new claims to deallocate, preemption: 0/1 nodes are available: 1 Insufficient cpu."),
        ),
    ];
    for (name, layout, p, want) in cases {
        let (r, s) = preempt(&fw, &nodes(layout), &p);
        assert_eq!(s, want, "{name}");
        assert!(r.victims.is_empty(), "{name}");
    }
}

#[test]
fn choosing_among_candidates() {
    let c = |node: &str, prios: &[i32], violations: usize| Candidate {
        node: node.to_string(),
        victims: prios
            .iter()
            .enumerate()
            .map(|(i, p)| {
                Arc::new(PodInfo::new(Arc::new(pod(
                    &format!("{node}-{i}"),
                    *p,
                    "1",
                    json!({}),
                ))))
            })
            .collect(),
        pdb_violations: violations,
    };
    let pick = |cs: Vec<Candidate>| pick_one(&cs).map(|c| c.node.clone());
    assert_eq!(
        pick(vec![c("a", &[1], 1), c("b", &[5], 0)]),
        Some("b".into()),
        "fewest PDB violations"
    );
    assert_eq!(
        pick(vec![c("a", &[5], 0), c("b", &[3, 3], 0)]),
        Some("b".into()),
        "lowest highest priority"
    );
    assert_eq!(
        pick(vec![c("a", &[3, 2], 0), c("b", &[3, 1], 0)]),
        Some("b".into()),
        "lowest sum"
    );
    assert_eq!(
        pick(vec![c("a", &[3, 1, 1], 0), c("b", &[3], 0)]),
        Some("b".into()),
        "fewest victims"
    );
    assert_eq!(
        pick(vec![c("a", &[], 0), c("b", &[1], 0)]),
        Some("a".into()),
        "no victims at all"
    );
    assert_eq!(pick(vec![]), None);
}
