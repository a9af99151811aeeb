//! The scheduling loop (upstream `schedule_one.go`): pop a pod, filter the nodes of a snapshot
//! (starting where the last cycle stopped, up to the adaptive number of feasible nodes), score the
//! feasible ones, pick the best (ties at random), assume the pod there and bind it asynchronously;
//! or report why no node fits (`FailedScheduling`, `PodScheduled=False`) and park the pod.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use client::events::{ApiEventSink, EventBroadcaster, EventType, Recorder};
use client::informer::{EventHandlerFuncs, InformerConfig, SharedInformerFactory};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Resource};
use rand::Rng;
use serde_json::json;

use crate::cache::{pod_key, Cache};
use crate::framework::{FilterPlugin, NodeInfo, ScorePlugin};
use crate::queue::SchedulingQueue;

/// Nodes always examined before stopping early (upstream `minFeasibleNodesToFind`).
const MIN_FEASIBLE_NODES: usize = 100;
/// The floor of the adaptive percentage (upstream `minFeasibleNodesPercentageToFind`).
const MIN_PERCENTAGE: usize = 5;

#[derive(Clone, Debug)]
pub struct SchedulerConfig {
    /// Pods naming this scheduler (`spec.schedulerName`) are scheduled; others are left alone.
    pub scheduler_name: String,
    /// `percentageOfNodesToScore`: 0 for upstream's adaptive default.
    pub percentage_of_nodes_to_score: usize,
}

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            scheduler_name: "default-scheduler".into(),
            percentage_of_nodes_to_score: 0,
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

/// Upstream's `FitError` message: `0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had ...`.
pub fn fit_error(all: usize, reasons: &BTreeMap<String, usize>) -> String {
    if all == 0 {
        return "no nodes available to schedule pods".into();
    }
    let mut parts: Vec<String> = reasons.iter().map(|(r, n)| format!("{n} {r}")).collect();
    parts.sort();
    format!("0/{all} nodes are available: {}.", parts.join(", "))
}

fn responsible(pod: &Pod, name: &str) -> bool {
    let spec = pod.spec.as_ref();
    spec.and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
        .is_empty()
        && spec
            .and_then(|s| s.scheduler_name.as_deref())
            .unwrap_or("default-scheduler")
            == name
        && pod.metadata.deletion_timestamp.is_none()
        && spec
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_none_or(Vec::is_empty)
        && !matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
}

fn priority(pod: &Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

struct Shared {
    config: SchedulerConfig,
    client: kube::Client,
    cache: Mutex<Cache>,
    queue: SchedulingQueue,
    filters: Vec<Box<dyn FilterPlugin>>,
    scores: Vec<Box<dyn ScorePlugin>>,
    recorder: Recorder,
}

impl Shared {
    fn cache(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Runs the scheduler until the task is dropped.
pub async fn run(client: kube::Client, config: SchedulerConfig) {
    let broadcaster = EventBroadcaster::new();
    broadcaster.start_recording_to_sink(ApiEventSink::new(client.clone()));
    let shared = Arc::new(Shared {
        recorder: broadcaster.new_recorder(config.scheduler_name.clone(), ""),
        config,
        client: client.clone(),
        cache: Mutex::new(Cache::default()),
        queue: SchedulingQueue::default(),
        filters: crate::plugins::default_filters(),
        scores: crate::plugins::default_scores(),
    });
    let factory = SharedInformerFactory::new(client.clone(), InformerConfig::new());
    let nodes = factory.informer::<Node>();
    let pods = factory.informer::<Pod>();
    let (s1, s2, s3) = (shared.clone(), shared.clone(), shared.clone());
    nodes.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |n: &Arc<Node>, _| {
                s1.cache().update_node(n.clone());
                s1.queue.move_all_to_active_or_backoff();
            })
            .on_update(move |_, n: &Arc<Node>| {
                s2.cache().update_node(n.clone());
                s2.queue.move_all_to_active_or_backoff();
            })
            .on_delete(move |d| {
                s3.cache()
                    .remove_node(d.object().metadata.name.as_deref().unwrap_or(""));
            }),
    );
    let (p1, p2, p3) = (shared.clone(), shared.clone(), shared.clone());
    let on_pod = move |s: &Shared, p: &Arc<Pod>| {
        let key = pod_key(p);
        if p.spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty())
        {
            s.cache().update_pod(p.clone());
            s.queue.remove(&key);
        } else if responsible(p, &s.config.scheduler_name) {
            s.queue.add(&key, priority(p));
        } else {
            s.queue.remove(&key);
        }
    };
    let on_pod_update = on_pod;
    pods.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |p: &Arc<Pod>, _| on_pod(&p1, p))
            .on_update(move |_, p: &Arc<Pod>| on_pod_update(&p2, p))
            .on_delete(move |d| {
                let pod = d.object();
                p3.queue.remove(&pod_key(pod));
                p3.cache().remove_pod(pod);
                // Freed capacity may let waiting pods fit.
                p3.queue.move_all_to_active_or_backoff();
            }),
    );
    factory.start();
    factory.wait_for_cache_sync().await;
    let store = pods.store();
    let mut next_start = 0usize;
    loop {
        let key = shared.queue.pop().await;
        let Some(pod) = store.get(&key) else {
            shared.queue.done(&key);
            continue;
        };
        if !responsible(&pod, &shared.config.scheduler_name) || shared.cache().is_placed(&key) {
            shared.queue.done(&key);
            continue;
        }
        schedule_one(&shared, &key, pod, &mut next_start).await;
    }
}

async fn schedule_one(shared: &Arc<Shared>, key: &str, pod: Arc<Pod>, next_start: &mut usize) {
    let snapshot = shared.cache().snapshot();
    let all = snapshot.len();
    let wanted = feasible_nodes_to_find(all, shared.config.percentage_of_nodes_to_score);
    let mut feasible: Vec<Arc<NodeInfo>> = Vec::new();
    let mut reasons: BTreeMap<String, usize> = BTreeMap::new();
    let mut visited = 0;
    while visited < all && feasible.len() < wanted {
        let node = &snapshot[(*next_start + visited) % all];
        visited += 1;
        let failed = shared
            .filters
            .iter()
            .map(|f| f.filter(&pod, node))
            .find(|s| !s.is_success());
        match failed.as_ref().and_then(|s| s.reason()) {
            // A plugin may report several reasons at once, one per line.
            Some(r) => r
                .lines()
                .for_each(|r| *reasons.entry(r.to_string()).or_default() += 1),
            None => feasible.push(node.clone()),
        }
    }
    if all > 0 {
        *next_start = (*next_start + visited) % all;
    }
    if feasible.is_empty() {
        let message = fit_error(all, &reasons);
        report_unschedulable(shared, &pod, &message).await;
        shared.queue.unschedulable(key, priority(&pod));
        return;
    }
    let chosen = select_host(shared, &pod, &feasible);
    let node = chosen.name().to_string();
    let mut assumed = (*pod).clone();
    assumed.spec.get_or_insert_with(Default::default).node_name = Some(node.clone());
    shared.cache().assume(Arc::new(assumed), &node);
    shared.queue.done(key);
    let (shared, key) = (shared.clone(), key.to_string());
    tokio::spawn(async move {
        if let Err(e) = bind(&shared.client, &pod, &node).await {
            tracing::warn!(pod = %key, node = %node, error = %e, "binding failed");
            shared.cache().forget(&key);
            shared.queue.error(&key, priority(&pod));
            return;
        }
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

/// The feasible node with the highest weighted score; ties broken at random (upstream `selectHost`).
fn select_host(shared: &Shared, pod: &Pod, feasible: &[Arc<NodeInfo>]) -> Arc<NodeInfo> {
    let mut totals = vec![0i64; feasible.len()];
    for plugin in &shared.scores {
        let mut scores: Vec<i64> = feasible.iter().map(|n| plugin.score(pod, n)).collect();
        plugin.normalize(pod, &mut scores);
        for (t, s) in totals.iter_mut().zip(scores) {
            *t += s * plugin.weight();
        }
    }
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
    feasible[best].clone()
}

async fn bind(client: &kube::Client, pod: &Pod, node: &str) -> Result<(), String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let name = pod.metadata.name.as_deref().unwrap_or("");
    let binding = json!({
        "apiVersion": "v1", "kind": "Binding",
        "metadata": {"name": name, "namespace": ns, "uid": pod.metadata.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": node},
    });
    Api::<Pod>::namespaced(client.clone(), ns)
        .create_subresource::<_, serde_json::Value>(
            "binding",
            name,
            &PostParams::default(),
            &binding,
        )
        .await
        .map(drop)
        .map_err(|e| e.to_string())
}

/// `PodScheduled=False` with reason Unschedulable, and a FailedScheduling event.
async fn report_unschedulable(shared: &Shared, pod: &Pod, message: &str) {
    let already = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
        .is_some_and(|c| c.status == "False" && c.message.as_deref() == Some(message));
    if !already {
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        // The resourceVersion makes the patch conditional: a pod bound (or changed) since this cycle
        // began must not be marked unschedulable by a stale decision.
        let patch = json!({"metadata": {"resourceVersion": pod.metadata.resource_version},
            "status": {"conditions": [{"type": "PodScheduled", "status": "False",
            "reason": "Unschedulable", "message": message, "lastProbeTime": null, "lastTransitionTime": now}]}});
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
            fit_error(5, &reasons),
            "0/5 nodes are available: 2 node(s) had untolerated taint {dedicated: db}, 3 Insufficient cpu."
        );
        assert_eq!(
            fit_error(0, &BTreeMap::new()),
            "no nodes available to schedule pods"
        );
    }
}
