//! DefaultPreemption (upstream `defaultpreemption` and `framework/preemption`): when no node fits, find
//! nodes where evicting lower-priority pods lets the pod fit (reprieving as many victims as possible,
//! PodDisruptionBudget violators first), pick the node with the fewest PDB violations, then the lowest
//! highest victim priority, the lowest priority sum, the fewest victims and the latest start time, and
//! nominate it. The API writes (DisruptionTarget condition, deleting victims, clearing
//! lower-priority nominations, setting `status.nominatedNodeName`) are done by the scheduler
//! (`scheduler::preempt`) from the returned [`PostFilterResult`].

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use rand::Rng;
use serde::Deserialize;

use crate::framework::selector::Selector;
use crate::framework::{
    CycleState, Framework, Handle, NodeInfo, NodeToStatus, Plugin, PodInfo, PostFilterPlugin,
    PostFilterResult, Status,
};

pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";
pub const NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// `DefaultPreemptionArgs`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    #[serde(default = "ten")]
    pub min_candidate_nodes_percentage: i64,
    #[serde(default = "hundred")]
    pub min_candidate_nodes_absolute: i64,
}

fn ten() -> i64 {
    10
}
fn hundred() -> i64 {
    100
}

impl Default for Args {
    fn default() -> Self {
        Args {
            min_candidate_nodes_percentage: 10,
            min_candidate_nodes_absolute: 100,
        }
    }
}

pub struct DefaultPreemption {
    handle: Handle,
    args: Args,
}

pub fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// Start time (status.startTime, else creation) in seconds, for ordering.
fn start_time(pod: &Pod) -> i64 {
    pod.status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .or(pod.metadata.creation_timestamp.as_ref())
        .map(|t| t.0.as_second())
        .unwrap_or(i64::MAX)
}

/// Upstream `MoreImportantPod`: higher priority, then earlier start.
fn more_important(a: &Pod, b: &Pod) -> std::cmp::Ordering {
    priority(b)
        .cmp(&priority(a))
        .then_with(|| start_time(a).cmp(&start_time(b)))
}

/// Upstream `podTerminatingByPreemption`.
fn terminating_by_preemption(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_some()
        && p.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| {
                c.type_ == "DisruptionTarget"
                    && c.status == "True"
                    && c.reason.as_deref() == Some("PreemptionByScheduler")
            })
}

#[derive(Clone, Debug)]
struct Candidate {
    node: String,
    victims: Vec<Arc<PodInfo>>,
    pdb_violations: usize,
}

/// Upstream `filterPodsWithPDBViolation`: (violating, non-violating), in the given order.
fn split_by_pdb(
    pods: &[Arc<PodInfo>],
    pdbs: &[Arc<PodDisruptionBudget>],
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowed: Vec<i32> = pdbs
        .iter()
        .map(|p| {
            p.status
                .as_ref()
                .map_or(0, |s| s.disruptions_allowed.unwrap_or(0))
        })
        .collect();
    let (mut violating, mut ok) = (Vec::new(), Vec::new());
    for pi in pods {
        let labels = pi.pod.metadata.labels.as_ref();
        let mut violated = false;
        if labels.is_some_and(|l| !l.is_empty()) {
            for (i, pdb) in pdbs.iter().enumerate() {
                if pdb.metadata.namespace.as_deref() != Some(pi.namespace()) {
                    continue;
                }
                let sel = pdb.spec.as_ref().and_then(|s| s.selector.as_ref());
                let Ok(sel) = Selector::from_label_selector(sel) else {
                    continue;
                };
                // A nil or empty selector matches nothing here.
                if sel == Selector::Nothing || sel.is_empty() || !sel.matches(labels) {
                    continue;
                }
                let disrupted = pdb
                    .status
                    .as_ref()
                    .and_then(|s| s.disrupted_pods.as_ref())
                    .is_some_and(|d| d.contains_key(pi.name()));
                if disrupted {
                    continue;
                }
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violated = true;
                }
            }
        }
        if violated {
            violating.push(pi.clone());
        } else {
            ok.push(pi.clone());
        }
    }
    (violating, ok)
}

impl DefaultPreemption {
    pub fn new(args: Args, handle: Handle) -> Result<DefaultPreemption, String> {
        if !(0..=100).contains(&args.min_candidate_nodes_percentage) {
            return Err(format!(
                "minCandidateNodesPercentage: Invalid value: {}: not in valid range [0, 100]",
                args.min_candidate_nodes_percentage
            ));
        }
        if args.min_candidate_nodes_absolute < 0 {
            return Err(format!(
                "minCandidateNodesAbsolute: Invalid value: {}: not in valid range [0, inf)",
                args.min_candidate_nodes_absolute
            ));
        }
        if args.min_candidate_nodes_percentage == 0 && args.min_candidate_nodes_absolute == 0 {
            return Err(
                "minCandidateNodesPercentage, minCandidateNodesAbsolute: both cannot be zero"
                    .into(),
            );
        }
        Ok(DefaultPreemption { handle, args })
    }

    /// Upstream `PodEligibleToPreemptOthers`.
    fn eligible(
        &self,
        state: &CycleState,
        pod: &Pod,
        statuses: &NodeToStatus,
    ) -> Result<(), String> {
        let spec = pod.spec.as_ref();
        if spec.and_then(|s| s.preemption_policy.as_deref()) == Some("Never") {
            return Err("not eligible due to preemptionPolicy=Never.".into());
        }
        let nominated = pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref())
            .unwrap_or("");
        if !nominated.is_empty() {
            if matches!(
                statuses.get(nominated),
                Some((Status::UnschedulableAndUnresolvable(_), _))
            ) {
                return Ok(());
            }
            if let Some(ni) = state.snapshot.get(nominated) {
                let prio = priority(pod);
                if ni
                    .pods
                    .iter()
                    .any(|p| priority(&p.pod) < prio && terminating_by_preemption(&p.pod))
                {
                    return Err(
                        "not eligible due to a terminating pod on the nominated node.".into(),
                    );
                }
            }
        }
        Ok(())
    }

    fn num_candidates(&self, potential: usize) -> usize {
        let n = potential as i64 * self.args.min_candidate_nodes_percentage / 100;
        (n.max(self.args.min_candidate_nodes_absolute) as usize).min(potential)
    }

    /// Upstream `SelectVictimsOnNode`.
    fn select_victims(
        &self,
        fw: &Framework,
        mut state: CycleState,
        pod: &Pod,
        node: &NodeInfo,
        pdbs: &[Arc<PodDisruptionBudget>],
    ) -> Result<(Vec<Arc<PodInfo>>, usize), Status> {
        let mut ni = node.clone();
        let prio = priority(pod);
        let mut potential: Vec<Arc<PodInfo>> = Vec::new();
        for pi in node.pods.iter().filter(|p| priority(&p.pod) < prio) {
            potential.push(pi.clone());
            ni.remove_pod(pi.namespace(), pi.name());
            let s = fw.run_pre_filter_remove_pod(&mut state, pod, pi, &ni);
            if !s.is_success() {
                return Err(s);
            }
        }
        if potential.is_empty() {
            return Err(Status::UnschedulableAndUnresolvable(NO_VICTIMS.into()));
        }
        let (s, _) = fw.run_filter_with_nominated_pods(&state, pod, &ni);
        if !s.is_success() {
            return Err(s);
        }
        potential.sort_by(|a, b| more_important(&a.pod, &b.pod));
        let (violating, non_violating) = split_by_pdb(&potential, pdbs);
        let mut victims = Vec::new();
        let mut violations = 0;
        let both = !violating.is_empty() && !non_violating.is_empty();
        for (list, counts) in [(violating, true), (non_violating, false)] {
            for pi in list {
                ni.add_pod_info(pi.clone());
                let s = fw.run_pre_filter_add_pod(&mut state, pod, &pi, &ni);
                if !s.is_success() {
                    return Err(s);
                }
                let fits = fw
                    .run_filter_with_nominated_pods(&state, pod, &ni)
                    .0
                    .is_success();
                if !fits {
                    ni.remove_pod(pi.namespace(), pi.name());
                    let s = fw.run_pre_filter_remove_pod(&mut state, pod, &pi, &ni);
                    if !s.is_success() {
                        return Err(s);
                    }
                    victims.push(pi);
                    if counts {
                        violations += 1;
                    }
                }
            }
        }
        if both {
            victims.sort_by(|a, b| more_important(&a.pod, &b.pod));
        }
        Ok((victims, violations))
    }
}

/// Upstream `pickOneNodeForPreemption`.
fn pick_one(candidates: &[Candidate]) -> Option<&Candidate> {
    if let Some(c) = candidates.iter().find(|c| c.victims.is_empty()) {
        return Some(c);
    }
    let score_fns: [&dyn Fn(&Candidate) -> i64; 5] = [
        &|c| -(c.pdb_violations as i64),
        &|c| -i64::from(c.victims.first().map_or(0, |v| priority(&v.pod))),
        &|c| {
            -c.victims
                .iter()
                .map(|v| i64::from(priority(&v.pod)) + i64::from(i32::MAX) + 1)
                .sum::<i64>()
        },
        &|c| -(c.victims.len() as i64),
        // The latest earliest-start among the highest-priority victims.
        &|c| {
            let top = c.victims.first().map_or(0, |v| priority(&v.pod));
            c.victims
                .iter()
                .filter(|v| priority(&v.pod) == top)
                .map(|v| start_time(&v.pod))
                .min()
                .unwrap_or(i64::MAX)
        },
    ];
    let mut remaining: Vec<&Candidate> = candidates.iter().collect();
    for f in score_fns {
        let best = remaining.iter().map(|c| f(c)).max()?;
        remaining.retain(|c| f(c) == best);
        if remaining.len() == 1 {
            break;
        }
    }
    remaining.first().copied()
}

/// `0/N nodes are available: ...` over per-node statuses.
fn fit_message(all: usize, reasons: &BTreeMap<String, usize>) -> String {
    crate::scheduler::fit_error(all, reasons, "")
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        "DefaultPreemption"
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        Some(self)
    }
}

impl PostFilterPlugin for DefaultPreemption {
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &Pod,
        statuses: &NodeToStatus,
        fw: &Framework,
    ) -> (PostFilterResult, Status) {
        let (r, s) = self.preempt(state, pod, statuses, fw);
        let s = match s {
            Status::Unschedulable(m) => Status::Unschedulable(format!("preemption: {m}")),
            Status::UnschedulableAndUnresolvable(m) => {
                Status::UnschedulableAndUnresolvable(format!("preemption: {m}"))
            }
            other => other,
        };
        (r, s)
    }
}

impl DefaultPreemption {
    fn preempt(
        &self,
        state: &CycleState,
        pod: &Pod,
        statuses: &NodeToStatus,
        fw: &Framework,
    ) -> (PostFilterResult, Status) {
        if let Err(msg) = self.eligible(state, pod, statuses) {
            return (PostFilterResult::default(), Status::Unschedulable(msg));
        }
        let all = &state.snapshot.nodes;
        if all.is_empty() {
            return (
                PostFilterResult::default(),
                Status::Error("no nodes available".into()),
            );
        }
        let potential: Vec<&Arc<NodeInfo>> = all
            .iter()
            .filter(|n| matches!(statuses.get(n.name()), Some((Status::Unschedulable(_), _))))
            .collect();
        let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
        // The result clears the pod's nomination when no candidate is found.
        let clear = PostFilterResult {
            nominated_node: Some(String::new()),
            ..Default::default()
        };
        if potential.is_empty() {
            reasons.insert(NOT_HELPFUL.into(), all.len());
            return (
                clear,
                Status::Unschedulable(fit_message(all.len(), &reasons)),
            );
        }
        let pdbs = self.handle.listers.pdbs.list();
        let wanted = self.num_candidates(potential.len());
        let offset = rand::rng().random_range(0..potential.len());
        let (non_violating, total) = (AtomicUsize::new(0), AtomicUsize::new(0));
        let results = fw.parallelizer().map(potential.len(), |i| {
            if non_violating.load(Ordering::Relaxed) > 0 && total.load(Ordering::Relaxed) >= wanted
            {
                return None;
            }
            let node = potential[(offset + i) % potential.len()];
            let r = self.select_victims(fw, state.clone(), pod, node, &pdbs);
            if let Ok((victims, violations)) = &r {
                if !victims.is_empty() {
                    total.fetch_add(1, Ordering::Relaxed);
                    if *violations == 0 {
                        non_violating.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
            Some((node.name().to_string(), r))
        });
        let (mut ok, mut violating) = (Vec::new(), Vec::new());
        let mut failed = 0;
        for (node, r) in results.into_iter().flatten() {
            match r {
                Ok((victims, pdb_violations)) if !victims.is_empty() => {
                    let c = Candidate {
                        node,
                        victims,
                        pdb_violations,
                    };
                    if pdb_violations == 0 {
                        ok.push(c)
                    } else {
                        violating.push(c)
                    }
                }
                Ok(_) => {
                    failed += 1;
                    *reasons.entry(NO_VICTIMS.into()).or_default() += 1;
                }
                Err(s) => {
                    failed += 1;
                    for r in super::reasons(&s) {
                        *reasons.entry(r.to_string()).or_default() += 1;
                    }
                }
            }
        }
        ok.truncate(wanted);
        violating.truncate(wanted.saturating_sub(ok.len()));
        ok.extend(violating);
        let Some(best) = pick_one(&ok) else {
            let unresolvable = all.len() - potential.len();
            if unresolvable > 0 {
                *reasons.entry(NOT_HELPFUL.into()).or_default() += unresolvable;
            }
            let _ = failed;
            return (
                clear,
                Status::Unschedulable(fit_message(all.len(), &reasons)),
            );
        };
        let prio = priority(pod);
        let clear_nominated = fw
            .nominator
            .nominated_pods_for_node(&best.node)
            .into_iter()
            .filter(|p| priority(&p.pod) < prio)
            .map(|p| p.pod.clone())
            .collect();
        (
            PostFilterResult {
                nominated_node: Some(best.node.clone()),
                victims: best.victims.iter().map(|v| v.pod.clone()).collect(),
                clear_nominated,
            },
            Status::Success,
        )
    }
}

#[cfg(test)]
#[path = "default_preemption_tests.rs"]
mod tests;
