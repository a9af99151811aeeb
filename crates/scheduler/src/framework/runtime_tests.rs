//! The runtime's ordering and bookkeeping with fake plugins (after upstream's `framework_test.go`).

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use serde_json::json;

use super::*;
use crate::framework::{FilterPlugin, PermitPlugin, PreFilterPlugin, ReservePlugin, ScorePlugin};
use crate::plugins::testutil::{node, node_info, pod, pod_with_requests, st_of};

/// A plugin whose behaviour the test sets.
struct Fake {
    name: &'static str,
    narrow: Option<Vec<&'static str>>,
    reject_nodes: Vec<&'static str>,
    score_by_name: Vec<(&'static str, i64)>,
    reserve_fails: bool,
    permit: Option<Status>,
    log: Arc<Mutex<Vec<String>>>,
}

impl Fake {
    fn new(name: &'static str, log: &Arc<Mutex<Vec<String>>>) -> Fake {
        Fake {
            name,
            narrow: None,
            reject_nodes: vec![],
            score_by_name: vec![],
            reserve_fails: false,
            permit: None,
            log: log.clone(),
        }
    }
}

impl Plugin for Fake {
    fn name(&self) -> &'static str {
        self.name
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for Fake {
    fn pre_filter(&self, _: &mut CycleState, _: &Pod) -> (Option<PreFilterResult>, Status) {
        let r = self.narrow.as_ref().map(|n| PreFilterResult {
            node_names: Some(n.iter().map(|s| s.to_string()).collect()),
        });
        (r, Status::Success)
    }
}

impl FilterPlugin for Fake {
    fn filter(&self, _: &CycleState, _: &Pod, node: &NodeInfo) -> Status {
        if self.reject_nodes.contains(&node.name()) {
            Status::Unschedulable(format!("{} says no", self.name))
        } else {
            Status::Success
        }
    }
}

impl ScorePlugin for Fake {
    fn score(&self, _: &CycleState, _: &Pod, node: &NodeInfo) -> i64 {
        self.score_by_name
            .iter()
            .find(|(n, _)| *n == node.name())
            .map_or(0, |(_, s)| *s)
    }
}

impl ReservePlugin for Fake {
    fn reserve(&self, _: &mut CycleState, _: &Pod, node: &str) -> Status {
        self.log
            .lock()
            .unwrap()
            .push(format!("reserve {} {node}", self.name));
        if self.reserve_fails {
            Status::Unschedulable("no room".into())
        } else {
            Status::Success
        }
    }
    fn unreserve(&self, _: &mut CycleState, _: &Pod, node: &str) {
        self.log
            .lock()
            .unwrap()
            .push(format!("unreserve {} {node}", self.name));
    }
}

impl PermitPlugin for Fake {
    fn permit(&self, _: &CycleState, _: &Pod, _: &str) -> (Status, Duration) {
        match &self.permit {
            Some(Status::Wait) => (Status::Wait, Duration::from_secs(30)),
            Some(s) => (s.clone(), Duration::ZERO),
            None => (Status::Success, Duration::ZERO),
        }
    }
}

fn framework(plugins: Vec<Fake>) -> Framework {
    let mut fw = Framework::new(
        "test",
        Handle::default(),
        Arc::new(crate::queue::Nominator::default()),
    );
    let ps: Vec<Arc<dyn Plugin>> = plugins
        .into_iter()
        .map(|p| Arc::new(p) as Arc<dyn Plugin>)
        .collect();
    fw.pre_filter = ps.clone();
    fw.filter = ps.clone();
    fw.score = ps.iter().cloned().zip([1, 3]).collect();
    fw.reserve = ps.clone();
    fw.permit = ps;
    fw
}

fn nodes(n: usize) -> Vec<NodeInfo> {
    (0..n)
        .map(|i| {
            node_info(
                node(
                    &format!("n{i}"),
                    json!({}),
                    json!({}),
                    json!({"cpu": "1", "pods": "10"}),
                ),
                vec![],
            )
        })
        .collect()
}

#[test]
fn pre_filter_narrowings_intersect() {
    let log = Arc::default();
    let mut a = Fake::new("A", &log);
    a.narrow = Some(vec!["n1", "n2"]);
    let mut b = Fake::new("B", &log);
    b.narrow = Some(vec!["n2", "n3"]);
    let fw = framework(vec![a, b]);
    let mut st = st_of(&nodes(4));
    let (r, s, _, by) = fw.run_pre_filter(&mut st, &pod("p", json!({})));
    assert!(s.is_success());
    assert_eq!(r.node_names, Some(HashSet::from(["n2".to_string()])));
    assert_eq!(by, ["A", "B"]);
    let mut a = Fake::new("A", &log);
    a.narrow = Some(vec!["n1"]);
    let mut b = Fake::new("B", &log);
    b.narrow = Some(vec!["n3"]);
    let fw = framework(vec![a, b]);
    let (_, s, _, _) = fw.run_pre_filter(&mut st_of(&nodes(4)), &pod("p", json!({})));
    assert_eq!(
        s,
        Status::UnschedulableAndUnresolvable(
            "node(s) didn't satisfy plugin(s) [A, B] simultaneously".into()
        )
    );
}

#[test]
fn filtering_stops_at_the_wanted_number_and_reports_failures() {
    let log = Arc::default();
    let mut a = Fake::new("A", &log);
    a.reject_nodes = vec!["n1", "n3"];
    let fw = framework(vec![a]);
    let ns = nodes(6);
    let st = st_of(&ns);
    let all = st.snapshot.nodes.clone();
    // From n1: n1 fails, n2 fits, n3 fails, n4 fits -> stop after 4 examined.
    let (feasible, statuses, processed) =
        fw.find_nodes_that_pass_filters(&st, &pod("p", json!({})), &all, 1, 2);
    let names: Vec<&str> = feasible.iter().map(|n| n.name()).collect();
    assert_eq!(names, ["n2", "n4"]);
    assert_eq!(processed, 4);
    assert_eq!(statuses.len(), 2);
    assert_eq!(
        statuses["n1"],
        (Status::Unschedulable("A says no".into()), "A")
    );
    // Wrapping around from n5.
    let (feasible, _, processed) =
        fw.find_nodes_that_pass_filters(&st, &pod("p", json!({})), &all, 5, 6);
    assert_eq!(
        feasible.iter().map(|n| n.name()).collect::<Vec<_>>(),
        ["n5", "n0", "n2", "n4"]
    );
    assert_eq!(processed, 6);
}

#[test]
fn scores_are_weighted_and_summed() {
    let log = Arc::default();
    let mut a = Fake::new("A", &log);
    a.score_by_name = vec![("n0", 10), ("n1", 20)];
    let mut b = Fake::new("B", &log);
    b.score_by_name = vec![("n0", 5)];
    let fw = framework(vec![a, b]);
    let ns = nodes(2);
    let st = st_of(&ns);
    assert_eq!(
        fw.run_score(&st, &pod("p", json!({})), &st.snapshot.nodes),
        vec![10 + 3 * 5, 20]
    );
}

#[test]
fn a_failed_reserve_unreserves_everything_in_reverse() {
    let log: Arc<Mutex<Vec<String>>> = Arc::default();
    let a = Fake::new("A", &log);
    let mut b = Fake::new("B", &log);
    b.reserve_fails = true;
    let fw = framework(vec![a, b]);
    let mut st = st_of(&nodes(1));
    let p = pod("p", json!({}));
    assert!(!fw.run_reserve(&mut st, &p, "n0").is_success());
    fw.run_unreserve(&mut st, &p, "n0");
    assert_eq!(
        *log.lock().unwrap(),
        [
            "reserve A n0",
            "reserve B n0",
            "unreserve B n0",
            "unreserve A n0"
        ]
    );
}

#[tokio::test]
async fn permit_waits_for_allow_or_reject() {
    let log = Arc::default();
    let mut a = Fake::new("A", &log);
    a.permit = Some(Status::Wait);
    let fw = Arc::new(framework(vec![a]));
    let st = st_of(&nodes(1));
    let mut p = pod("p", json!({}));
    p.metadata.uid = Some("u1".into());
    let (s, timeout) = fw.run_permit(&st, &p, "n0");
    assert_eq!(s, Status::Wait);
    assert_eq!(fw.waiting_pods(), ["u1"]);
    let fw2 = fw.clone();
    let waiter = tokio::spawn(async move { fw2.wait_on_permit(&p, timeout).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    fw.allow("u1", "A");
    assert_eq!(waiter.await.unwrap(), Status::Success);
    // Rejection and timeout.
    let mut q = pod("q", json!({}));
    q.metadata.uid = Some("u2".into());
    fw.run_permit(&st, &q, "n0");
    fw.reject("u2", "A", "not now");
    assert_eq!(
        fw.wait_on_permit(&q, Duration::from_secs(5)).await,
        Status::Success,
        "rejected before waiting: forgotten"
    );
    let mut r = pod("r", json!({}));
    r.metadata.uid = Some("u3".into());
    fw.run_permit(&st, &r, "n0");
    assert!(
        matches!(fw.wait_on_permit(&r, Duration::from_millis(10)).await, Status::Unschedulable(m) if m.contains("timeout"))
    );
    // A plugin that rejects outright.
    let mut d = Fake::new("D", &log);
    d.permit = Some(Status::Unschedulable("denied".into()));
    let fw = framework(vec![d]);
    assert_eq!(
        fw.run_permit(&st, &pod("x", json!({})), "n0").0,
        Status::Unschedulable("denied".into())
    );
}

#[test]
fn nominated_pods_of_higher_priority_count_on_their_node() {
    let fw = {
        let cfg = crate::config::KubeSchedulerConfiguration::default_config();
        crate::profile::new_framework(
            &cfg.profiles[0],
            Handle::default(),
            Arc::new(crate::queue::Nominator::default()),
        )
        .unwrap()
    };
    let ns = nodes(1);
    let mut st = st_of(&ns);
    let mut p = pod_with_requests("p", &[json!({"cpu": "600m"})]);
    p.spec.as_mut().unwrap().priority = Some(5);
    assert!(fw.run_pre_filter(&mut st, &p).1.is_ok());
    assert!(fw
        .run_filter_with_nominated_pods(&st, &p, &ns[0])
        .0
        .is_success());
    let mut higher = pod_with_requests("h", &[json!({"cpu": "600m"})]);
    higher.spec.as_mut().unwrap().priority = Some(10);
    fw.nominator
        .add(Arc::new(PodInfo::new(Arc::new(higher))), "n0");
    assert!(!fw
        .run_filter_with_nominated_pods(&st, &p, &ns[0])
        .0
        .is_success());
    // A lower-priority nomination does not count.
    fw.nominator.delete("default/h");
    let mut lower = pod_with_requests("l", &[json!({"cpu": "600m"})]);
    lower.spec.as_mut().unwrap().priority = Some(1);
    fw.nominator
        .add(Arc::new(PodInfo::new(Arc::new(lower))), "n0");
    assert!(fw
        .run_filter_with_nominated_pods(&st, &p, &ns[0])
        .0
        .is_success());
}
