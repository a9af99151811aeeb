//! The scheduling loop (upstream `scheduler.go` and `schedule_one.go`): pop a pod, pick its profile by
//! `spec.schedulerName` (pods naming no profile are left alone), run PreFilter, try the nominated node
//! first, filter the nodes of an incremental snapshot in parallel (starting where the last cycle
//! stopped, up to the adaptive number of feasible nodes), PreScore and score the feasible ones, pick
//! the best (ties at random), assume the pod there, Reserve and Permit, then bind asynchronously
//! (WaitOnPermit, PreBind, Bind, PostBind). A pod that fits nowhere runs PostFilter (preemption),
//! is reported (`FailedScheduling`, `PodScheduled=False`, `nominatedNodeName`) and parked until an
//! event one of its rejecting plugins registered for.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client::events::{ApiEventSink, EventBroadcaster, EventType, Recorder};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource};
use rand::Rng;
use serde_json::json;

use crate::cache::{pod_key, Cache};
use crate::config::KubeSchedulerConfiguration;
use crate::framework::parallelize::Parallelizer;
use crate::framework::{
    CycleState, Framework, Handle, NodeInfo, NodeToStatus, PodInfo, PostFilterResult, Status,
};
use crate::queue::{Nominator, SchedulingQueue};

/// Nodes always examined before stopping early (upstream `minFeasibleNodesToFind`).
const MIN_FEASIBLE_NODES: usize = 100;
/// The floor of the adaptive percentage (upstream `minFeasibleNodesPercentageToFind`).
const MIN_PERCENTAGE: usize = 5;

#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// The defaulted, validated configuration (profiles, parallelism, percentageOfNodesToScore).
    pub configuration: KubeSchedulerConfiguration,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            configuration: KubeSchedulerConfiguration::default_config(),
        }
    }
}

/// How many feasible nodes to find before scoring (upstream `numFeasibleNodesToFind`).
pub fn feasible_nodes_to_find(all: usize, percentage: usize) -> usize {
    if all < MIN_FEASIBLE_NODES {
        return all;
    }
    let pct = if percentage == 0 {
        (50usize.saturating_sub(all / 125)).max(MIN_PERCENTAGE)
    } else {
        percentage.min(100)
    };
    (all * pct / 100).max(MIN_FEASIBLE_NODES)
}

/// Upstream's `FitError` message: `0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had ...`,
/// followed by the PostFilter (preemption) message, as upstream (whose messages then end in "..").
pub fn fit_error(all: usize, reasons: &BTreeMap<String, usize>, post_filter: &str) -> String {
    if all == 0 {
        return "no nodes available to schedule pods".into();
    }
    let mut parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    let mut msg = format!("0/{all} nodes are available:");
    if !parts.is_empty() {
        msg.push_str(&format!(" {}.", parts.join(", ")));
    }
    if !post_filter.is_empty() {
        msg.push_str(&format!(" {post_filter}."));
    }
    msg
}

pub(crate) fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

fn assigned(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

pub(crate) fn terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Why a cycle did not place the pod.
enum Failure {
    /// No node fits: per-node statuses, the PreFilter message when PreFilter rejected the pod,
    /// and the plugins that rejected it.
    Fit {
        statuses: Box<NodeToStatus>,
        all: usize,
        pre_filter_msg: Option<String>,
        plugins: HashSet<&'static str>,
    },
    Error(String),
}

pub(crate) struct Shared {
    pub(crate) client: kube::Client,
    pub(crate) cache: Mutex<Cache>,
    pub(crate) queue: SchedulingQueue,
    pub(crate) frameworks: Vec<Arc<Framework>>,
    pub(crate) by_name: HashMap<String, usize>,
    pub(crate) nominator: Arc<Nominator>,
    pub(crate) recorder: Recorder,
    percentage: usize,
    last_cleanup: Mutex<Instant>,
    /// Bounds the `PodScheduled=False` status writes in flight (one HTTP/1.1 connection each), so
    /// that thousands of unschedulable pods do not open thousands of connections.
    status_writes: tokio::sync::Semaphore,
}

impl Shared {
    pub(crate) fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The profile index for a pod this scheduler is responsible for.
    pub(crate) fn profile_of(&self, pod: &Pod) -> Option<usize> {
        let name = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.as_deref())
            .filter(|n| !n.is_empty())
            .unwrap_or(crate::config::DEFAULT_SCHEDULER_NAME);
        self.by_name.get(name).copied()
    }

    /// Unassigned, not terminating or finished, and of one of our profiles.
    pub(crate) fn responsible(&self, pod: &Pod) -> Option<usize> {
        if assigned(pod) || pod.metadata.deletion_timestamp.is_some() || terminal(pod) {
            return None;
        }
        self.profile_of(pod)
    }

    pub(crate) fn interest(
        &self,
    ) -> impl Fn(usize, &HashSet<&'static str>, &crate::framework::ClusterEvent) -> bool + '_ {
        move |profile, plugins, event| {
            self.frameworks
                .get(profile)
                .is_some_and(|fw| fw.interested(plugins, event))
        }
    }

    /// Queues a pending pod, or holds it back when PreEnqueue rejects it.
    pub(crate) fn enqueue(&self, pod: &Pod, profile: usize) {
        let key = pod_key(pod);
        match self.frameworks[profile].run_pre_enqueue(pod) {
            Ok(()) => self.queue.add(&key, priority(pod), profile),
            Err(_) => self.queue.gate(&key, priority(pod), profile),
        }
    }
}

impl SchedulerConfig {
    /// Reads a `KubeSchedulerConfiguration` file and checks that every profile builds.
    pub fn from_file(path: &std::path::Path) -> Result<SchedulerConfig, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("reading {}: {e}", path.display()))?;
        let configuration = KubeSchedulerConfiguration::parse(&text)?;
        let c = SchedulerConfig { configuration };
        c.check()?;
        Ok(c)
    }

    /// Builds every profile's framework once (plugin names, extension points, args).
    pub fn check(&self) -> Result<(), String> {
        for p in &self.configuration.profiles {
            crate::profile::new_framework(p, Handle::default(), Arc::new(Nominator::default()))?;
        }
        Ok(())
    }
}

/// Runs the scheduler until the task is dropped; an invalid configuration is an error at once.
pub async fn run(client: kube::Client, config: SchedulerConfig) {
    if let Err(e) = run_checked(client, config).await {
        tracing::error!(error = %e, "scheduler stopped");
    }
}

/// Like [`run`], returning configuration errors.
pub async fn run_checked(client: kube::Client, config: SchedulerConfig) -> Result<(), String> {
    let factory = crate::informers::Informers::factory(client.clone());
    run_with_factory(client, factory, config).await
}

/// Like [`run_checked`], with the informers of `factory`: in one process with other components
/// (`rkube server`), one factory means one cache of every pod and node instead of one per
/// component. The factory's objects must keep every field but managedFields.
pub async fn run_with_factory(
    client: kube::Client,
    factory: Arc<client::informer::SharedInformerFactory>,
    config: SchedulerConfig,
) -> Result<(), String> {
    let cfg = config.configuration;
    let broadcaster = EventBroadcaster::new();
    broadcaster.start_recording_to_sink(ApiEventSink::new(client.clone()));
    let nominator = Arc::new(Nominator::default());
    // Upstream runs `parallelism` goroutines; threads beyond the cores only add switching here.
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let parallelism = (cfg.parallelism.unwrap_or(16).max(1) as usize).min(cores);
    let informers = crate::informers::Informers::new(factory);
    let handle = Handle {
        client: Some(client.clone()),
        listers: informers.listers(),
        parallelizer: Parallelizer::new(parallelism),
    };
    let mut frameworks = Vec::new();
    let mut by_name = HashMap::new();
    for (i, p) in cfg.profiles.iter().enumerate() {
        let fw = crate::profile::new_framework(p, handle.clone(), nominator.clone())?;
        by_name.insert(p.name().to_string(), i);
        frameworks.push(Arc::new(fw));
    }
    let sort = frameworks.first().and_then(|f| f.queue_sort.clone());
    let queue = SchedulingQueue::new(sort).with_backoff(
        Duration::from_secs(cfg.pod_initial_backoff_seconds.unwrap_or(1).max(1) as u64),
        Duration::from_secs(cfg.pod_max_backoff_seconds.unwrap_or(10).max(1) as u64),
    );
    let shared = Arc::new(Shared {
        recorder: broadcaster.new_recorder("default-scheduler", ""),
        client: client.clone(),
        cache: Mutex::new(Cache::default()),
        queue,
        frameworks,
        by_name,
        nominator,
        percentage: cfg.percentage_of_nodes_to_score.unwrap_or(0).max(0) as usize,
        last_cleanup: Mutex::new(Instant::now()),
        status_writes: tokio::sync::Semaphore::new(crate::plugins::default_binder::MAX_IN_FLIGHT),
    });
    let pods = informers.start(shared.clone()).await;
    let mut next_start = 0usize;
    loop {
        let key = shared.queue.pop().await;
        let Some(pod) = pods.get(&key) else {
            shared.queue.skip(&key);
            shared.queue.remove(&key);
            continue;
        };
        let Some(profile) = shared.responsible(&pod) else {
            shared.queue.skip(&key);
            shared.queue.remove(&key);
            continue;
        };
        if shared.cache().is_placed(&key) {
            shared.queue.done(&key);
            continue;
        }
        schedule_one(&shared, profile, &key, pod, &mut next_start).await;
    }
}

fn snapshot(shared: &Shared) -> Arc<crate::cache::Snapshot> {
    let mut cache = shared.cache();
    let mut last = shared
        .last_cleanup
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    if last.elapsed() >= Duration::from_secs(1) {
        cache.cleanup_expired(Instant::now());
        *last = Instant::now();
    }
    cache.snapshot()
}

/// Upstream `schedulePod`: the chosen node, or why none.
fn schedule_pod(
    fw: &Framework,
    state: &mut CycleState,
    pod: &Pod,
    next_start: &mut usize,
    global_percentage: usize,
) -> Result<String, Failure> {
    let snapshot = state.snapshot.clone();
    let all = snapshot.len();
    if all == 0 {
        return Err(Failure::Fit {
            statuses: Box::default(),
            all: 0,
            pre_filter_msg: None,
            plugins: HashSet::new(),
        });
    }
    let (pfr, status, plugin, narrowed_by) = fw.run_pre_filter(state, pod);
    if !status.is_ok() {
        if !status.is_rejected() {
            return Err(Failure::Error(status.reason().unwrap_or("").to_string()));
        }
        let statuses = Box::new(
            snapshot
                .nodes
                .iter()
                .map(|n| (n.name().to_string(), (status.clone(), plugin.unwrap_or(""))))
                .collect(),
        );
        return Err(Failure::Fit {
            statuses,
            all,
            pre_filter_msg: status.reason().map(str::to_string),
            plugins: plugin.into_iter().collect(),
        });
    }
    // A nominated node (from an earlier preemption) is tried first.
    let nominated = pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty());
    if let Some(ni) = nominated.and_then(|n| snapshot.get(n)) {
        let allowed = pfr
            .node_names
            .as_ref()
            .is_none_or(|s| s.contains(ni.name()));
        if allowed
            && fw
                .run_filter_with_nominated_pods(state, pod, ni)
                .0
                .is_success()
        {
            return Ok(ni.name().to_string());
        }
    }
    let narrowed: Vec<Arc<NodeInfo>>;
    let nodes: &[Arc<NodeInfo>] = match &pfr.node_names {
        Some(names) => {
            narrowed = snapshot
                .nodes
                .iter()
                .filter(|n| names.contains(n.name()))
                .cloned()
                .collect();
            &narrowed
        }
        None => &snapshot.nodes,
    };
    let pct = fw
        .percentage_of_nodes_to_score
        .map(|p| p as usize)
        .unwrap_or(global_percentage);
    let wanted = feasible_nodes_to_find(nodes.len(), pct);
    let start = if nodes.is_empty() {
        0
    } else {
        *next_start % nodes.len()
    };
    let (feasible, mut statuses, processed) =
        fw.find_nodes_that_pass_filters(state, pod, nodes, start, wanted);
    *next_start = (*next_start + processed) % all;
    if feasible.is_empty() {
        if nodes.len() < all {
            let msg = format!(
                "node(s) didn't satisfy plugin(s) [{}]",
                narrowed_by.join(", ")
            );
            for n in &snapshot.nodes {
                statuses.entry(n.name().to_string()).or_insert_with(|| {
                    (
                        Status::UnschedulableAndUnresolvable(msg.clone()),
                        narrowed_by.first().copied().unwrap_or(""),
                    )
                });
            }
        }
        let plugins = statuses
            .values()
            .map(|(_, p)| *p)
            .filter(|p| !p.is_empty())
            .collect();
        return Err(Failure::Fit {
            statuses: Box::new(statuses),
            all,
            pre_filter_msg: None,
            plugins,
        });
    }
    if feasible.len() == 1 {
        return Ok(feasible[0].name().to_string());
    }
    let s = fw.run_pre_score(state, pod, &feasible);
    if !s.is_ok() {
        return Err(Failure::Error(
            s.reason().unwrap_or("PreScore failed").to_string(),
        ));
    }
    let totals = fw.run_score(state, pod, &feasible);
    Ok(select_host(&feasible, &totals).to_string())
}

/// One scheduling cycle against `cache` with no API server behind it: the pod is assumed on the
/// node chosen, which is returned, or the cycle's failure is described. For measuring the algorithm
/// alone (`crates/scheduler/examples/cycles.rs`); no PostFilter, Reserve, Permit or binding.
pub fn schedule_in_memory(
    fw: &Framework,
    cache: &mut crate::cache::Cache,
    pod: Arc<Pod>,
    next_start: &mut usize,
    percentage: usize,
) -> Result<String, String> {
    let mut state = CycleState::new(cache.snapshot());
    match schedule_pod(fw, &mut state, &pod, next_start, percentage) {
        Ok(node) => {
            cache.assume_info(Arc::new(PodInfo::new(pod)), &node);
            Ok(node)
        }
        Err(Failure::Error(msg)) => Err(msg),
        Err(Failure::Fit { all, statuses, .. }) => {
            let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
            for (st, _) in statuses.values() {
                for r in crate::plugins::reasons(st) {
                    *reasons.entry(r.to_string()).or_default() += 1;
                }
            }
            Err(fit_error(all, &reasons, ""))
        }
    }
}

/// The feasible node with the highest total score; ties broken at random (upstream `selectHost`).
fn select_host<'a>(feasible: &'a [Arc<NodeInfo>], totals: &[i64]) -> &'a str {
    let mut rng = rand::rng();
    let (mut best, mut best_score, mut ties) = (0, i64::MIN, 0u32);
    for (i, &score) in totals.iter().enumerate() {
        if score > best_score {
            (best, best_score, ties) = (i, score, 1);
        } else if score == best_score {
            ties += 1;
            if rng.random_range(0..ties) == 0 {
                best = i;
            }
        }
    }
    feasible[best].name()
}

async fn schedule_one(
    shared: &Arc<Shared>,
    profile: usize,
    key: &str,
    pod: Arc<Pod>,
    next_start: &mut usize,
) {
    let fw = shared.frameworks[profile].clone();
    let mut state = CycleState::new(snapshot(shared));
    match schedule_pod(&fw, &mut state, &pod, next_start, shared.percentage) {
        Ok(node) => assume_and_bind(shared, &fw, profile, key, pod, node, state),
        Err(Failure::Error(msg)) => {
            tracing::warn!(pod = %key, error = %msg, "scheduling error");
            spawn_report(
                shared,
                pod.clone(),
                format!("running the scheduling cycle: {msg}"),
                None,
            );
            shared.queue.error(key, priority(&pod), profile);
        }
        Err(Failure::Fit {
            statuses,
            all,
            pre_filter_msg,
            plugins,
        }) => {
            let mut post_msg = String::new();
            let mut nomination = None;
            if fw.has_post_filter() && all > 0 {
                let (result, status) = fw.run_post_filter(&state, &pod, &statuses);
                if let Some(m) = status.reason() {
                    post_msg = m.to_string();
                }
                nomination = result.nominated_node.clone();
                if status.is_success() {
                    post_msg.clear();
                    crate::preempt::spawn_prepare_candidate(shared, &fw, &pod, result.clone());
                }
                if let Some(node) = result.nominated_node.as_deref().filter(|n| !n.is_empty()) {
                    shared
                        .nominator
                        .add(Arc::new(PodInfo::new(pod.clone())), node);
                }
                let _: &PostFilterResult = &result;
            }
            let message = match &pre_filter_msg {
                Some(m) => {
                    let mut s = format!("0/{all} nodes are available: {m}.");
                    if !post_msg.is_empty() {
                        s.push_str(&format!(" {post_msg}."));
                    }
                    s
                }
                None => {
                    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
                    for (st, _) in statuses.values() {
                        for r in crate::plugins::reasons(st) {
                            *reasons.entry(r.to_string()).or_default() += 1;
                        }
                    }
                    fit_error(all, &reasons, &post_msg)
                }
            };
            spawn_report(shared, pod.clone(), message, nomination);
            let interest = shared.interest();
            shared.queue.unschedulable(key, plugins, &interest);
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn assume_and_bind(
    shared: &Arc<Shared>,
    fw: &Arc<Framework>,
    profile: usize,
    key: &str,
    pod: Arc<Pod>,
    node: String,
    mut state: CycleState,
) {
    // The cache records the node an assumed pod is placed on and no plugin reads an assumed
    // pod's `spec.nodeName`, so the pod object is shared rather than deep-copied (upstream copies
    // it to set `nodeName`).
    shared
        .cache()
        .assume_info(Arc::new(PodInfo::new(pod.clone())), &node);
    let fail = |shared: &Arc<Shared>, state: &mut CycleState, status: Status| {
        fw.run_unreserve(state, &pod, &node);
        shared.cache().forget(key);
        let msg = status.reason().unwrap_or("").to_string();
        spawn_report(shared, pod.clone(), msg, None);
        if status.is_rejected() {
            let interest = shared.interest();
            shared.queue.unschedulable(key, HashSet::new(), &interest);
        } else {
            shared.queue.error(key, priority(&pod), profile);
        }
    };
    let s = fw.run_reserve(&mut state, &pod, &node);
    if !s.is_success() {
        return fail(shared, &mut state, s);
    }
    let (s, timeout) = fw.run_permit(&state, &pod, &node);
    if !matches!(s, Status::Success | Status::Wait) {
        return fail(shared, &mut state, s);
    }
    shared.queue.done(key);
    shared.nominator.delete(key);
    // The binding cycle needs only the chosen node: keeping the whole snapshot alive would make the
    // next cycle copy it instead of updating it in place.
    let chosen: Vec<Arc<NodeInfo>> = state.snapshot.get(&node).cloned().into_iter().collect();
    state.snapshot = Arc::new(crate::cache::Snapshot::new(chosen));
    let (shared, fw, key) = (shared.clone(), fw.clone(), key.to_string());
    tokio::spawn(async move {
        let mut status = fw.wait_on_permit(&pod, timeout).await;
        if status.is_success() {
            status = fw.run_pre_bind(&state, &pod, &node).await;
        }
        if status.is_success() {
            status = fw.run_bind(&state, &pod, &node).await;
        }
        if !status.is_success() {
            tracing::warn!(pod = %key, node = %node, status = ?status, "binding failed");
            fw.run_unreserve(&mut state, &pod, &node);
            shared.cache().forget(&key);
            let msg = format!("Binding rejected: {}", status.reason().unwrap_or(""));
            spawn_report(&shared, pod.clone(), msg, None);
            shared.queue.error(&key, priority(&pod), profile);
            return;
        }
        shared.cache().finish_binding(&key);
        fw.run_post_bind(&state, &pod, &node).await;
        let (ns, name) = (
            pod.metadata.namespace.as_deref().unwrap_or(""),
            pod.metadata.name.as_deref().unwrap_or(""),
        );
        shared.recorder.event(
            &pod.object_ref(&()),
            EventType::Normal,
            "Scheduled",
            &format!("Successfully assigned {ns}/{name} to {node}"),
        );
    });
}

fn spawn_report(shared: &Arc<Shared>, pod: Arc<Pod>, message: String, nominated: Option<String>) {
    let shared = shared.clone();
    tokio::spawn(async move { report_unschedulable(&shared, &pod, &message, nominated).await });
}

/// `PodScheduled=False` with reason Unschedulable (and `nominatedNodeName` when PostFilter
/// nominated or cleared one), and a FailedScheduling event.
async fn report_unschedulable(
    shared: &Shared,
    pod: &Pod,
    message: &str,
    nominated: Option<String>,
) {
    let status = pod.status.as_ref();
    let already = status
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
        .is_some_and(|c| c.status == "False" && c.message.as_deref() == Some(message));
    let current_nomination = status
        .and_then(|s| s.nominated_node_name.clone())
        .unwrap_or_default();
    let nomination_changes = nominated.as_ref().is_some_and(|n| *n != current_nomination);
    if !already || nomination_changes {
        let Ok(_slot) = shared.status_writes.acquire().await else {
            return;
        };
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        // The resourceVersion makes the patch conditional: a pod bound (or changed) since this cycle
        // began must not be marked unschedulable by a stale decision.
        let mut patch = json!({"metadata": {"resourceVersion": pod.metadata.resource_version},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": message, "lastProbeTime": null, "lastTransitionTime": now}]}});
        if nomination_changes {
            let n = nominated.clone().unwrap_or_default();
            patch["status"]["nominatedNodeName"] =
                if n.is_empty() { json!(null) } else { json!(n) };
        }
        let api: Api<Pod> = Api::namespaced(
            shared.client.clone(),
            pod.metadata.namespace.as_deref().unwrap_or(""),
        );
        if let Err(e) = api
            .patch_status(
                pod.metadata.name.as_deref().unwrap_or(""),
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            )
            .await
        {
            tracing::debug!(error = %e, "cannot report the pod unschedulable");
            return;
        }
    }
    shared.recorder.event(
        &pod.object_ref(&()),
        EventType::Warning,
        "FailedScheduling",
        message,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_number_of_nodes_to_score() {
        assert_eq!(feasible_nodes_to_find(50, 0), 50);
        assert_eq!(feasible_nodes_to_find(500, 0), 230); // 50 - 4 = 46 %
        assert_eq!(feasible_nodes_to_find(5000, 0), 500); // 50 - 40 = 10 %
        assert_eq!(feasible_nodes_to_find(10000, 0), 500); // floor of 5 %
        assert_eq!(feasible_nodes_to_find(1000, 100), 1000);
        assert_eq!(feasible_nodes_to_find(1000, 1), 100); // never under 100
    }

    #[test]
    fn fit_errors_read_as_upstream() {
        let mut reasons = BTreeMap::new();
        reasons.insert("Insufficient cpu".to_string(), 3);
        reasons.insert(
            "node(s) had untolerated taint {dedicated: db}".to_string(),
            2,
        );
        assert_eq!(
            fit_error(5, &reasons, ""),
            "0/5 nodes are available: 2 node(s) had untolerated taint {dedicated: db}, 3 Insufficient cpu."
        );
        assert_eq!(
            fit_error(0, &BTreeMap::new(), ""),
            "no nodes available to schedule pods"
        );
    }
}
