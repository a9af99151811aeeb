//! The taint eviction controller (upstream `pkg/controller/tainteviction`, the former taint
//! manager): a pod on a node with NoExecute taints it does not tolerate is deleted at once; one that
//! tolerates them for `tolerationSeconds` is deleted that long after the controller first saw it so
//! (the smallest tolerationSeconds wins); one that tolerates them forever stays. Before deleting, the
//! pod gets the `DisruptionTarget` condition, as upstream.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client::controller::Controller;
use client::informer::{split_key, EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::{Node, Pod, Taint, Toleration};
use kube::Api;

use crate::util::eviction::{mark_disruption_target_and_delete, DisruptionTarget};

/// When a pod on NoExecute-tainted nodes must go.
#[derive(Debug, PartialEq, Eq)]
pub enum Verdict {
    /// No NoExecute taint, or tolerated forever.
    Stay,
    Now,
    After(Duration),
}

/// Upstream `processPodOnNode`'s decision for the node's NoExecute taints and the pod's tolerations.
pub fn verdict(taints: &[Taint], tolerations: &[Toleration]) -> Verdict {
    let no_execute: Vec<&Taint> = taints.iter().filter(|t| t.effect == "NoExecute").collect();
    if no_execute.is_empty() {
        return Verdict::Stay;
    }
    let mut min: Option<i64> = None;
    for taint in no_execute {
        let used: Vec<&Toleration> = tolerations
            .iter()
            .filter(|t| apimachinery::taints::tolerates_taint(t, taint))
            .collect();
        if used.is_empty() {
            return Verdict::Now;
        }
        for t in used {
            if let Some(secs) = t.toleration_seconds {
                min = Some(min.map_or(secs, |m| m.min(secs)));
            }
        }
    }
    match min {
        None => Verdict::Stay,
        Some(s) if s <= 0 => Verdict::Now,
        Some(s) => Verdict::After(Duration::from_secs(s as u64)),
    }
}

struct Ctx {
    client: kube::Client,
    nodes: Arc<Store<Node>>,
    pods: Arc<Store<Pod>>,
    /// When each pod was first seen to need evicting (what its tolerationSeconds count from).
    first_seen: Mutex<HashMap<String, Instant>>,
    queue: RateLimitingQueue<String>,
}

fn pod_key(p: &Pod) -> String {
    format!(
        "{}/{}",
        p.metadata.namespace.as_deref().unwrap_or(""),
        p.metadata.name.as_deref().unwrap_or("")
    )
}

fn no_execute(node: &Node) -> Vec<Taint> {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .into_iter()
        .filter(|t| t.effect == "NoExecute")
        .collect()
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
    let node_informer = factory.informer::<Node>();
    let pod_informer = factory.informer::<Pod>();
    crate::index_pods_by_node(&pod_informer);
    let queue = RateLimitingQueue::with_config(
        default_controller_rate_limiter::<String>(),
        QueueConfig::named("taint-eviction"),
    );
    let ctx = Arc::new(Ctx {
        client,
        nodes: node_informer.store(),
        pods: pod_informer.store(),
        first_seen: Mutex::default(),
        queue: queue.clone(),
    });
    let (q1, q2) = (queue.clone(), queue.clone());
    pod_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |p: &Arc<Pod>, _| q1.add(pod_key(p)))
            .on_update(move |_, p: &Arc<Pod>| q2.add(pod_key(p))),
    );
    let (c1, c2) = (ctx.clone(), ctx.clone());
    let enqueue_node_pods = |ctx: &Ctx, node: &Node| {
        let name = node.metadata.name.as_deref().unwrap_or("");
        for p in ctx
            .pods
            .by_index(crate::POD_NODE_INDEX, name)
            .unwrap_or_default()
        {
            ctx.queue.add(pod_key(&p));
        }
    };
    node_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |n: &Arc<Node>, _| {
                if !no_execute(n).is_empty() {
                    enqueue_node_pods(&c1, n)
                }
            })
            .on_update(move |old: &Arc<Node>, new: &Arc<Node>| {
                if no_execute(old) != no_execute(new) {
                    enqueue_node_pods(&c2, new)
                }
            }),
    );
    factory.start();
    factory.wait_for_cache_sync().await;
    Controller::new("taint-eviction", queue)
        .with_max_retries(5)
        .run(workers, move |key: String| {
            let ctx = ctx.clone();
            async move { sync_pod(&ctx, &key).await }
        })
        .await;
}

async fn sync_pod(ctx: &Ctx, key: &str) -> Result<(), String> {
    let forget = || {
        ctx.first_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        Ok(())
    };
    let Some(pod) = ctx.pods.get(key) else {
        return forget();
    };
    let node_name = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default();
    if pod.metadata.deletion_timestamp.is_some() || node_name.is_empty() {
        return forget();
    }
    let Some(node) = ctx.nodes.get(&node_name) else {
        return forget();
    };
    let tolerations = pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.clone())
        .unwrap_or_default();
    let wait = match verdict(&no_execute(&node), &tolerations) {
        Verdict::Stay => return forget(),
        Verdict::Now => Duration::ZERO,
        Verdict::After(d) => d,
    };
    let first = *ctx
        .first_seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key.to_string())
        .or_insert_with(Instant::now);
    let elapsed = first.elapsed();
    if elapsed < wait {
        ctx.queue.add_after(key.to_string(), wait - elapsed);
        return Ok(());
    }
    evict(ctx, key).await?;
    forget()
}

async fn evict(ctx: &Ctx, key: &str) -> Result<(), String> {
    let (ns, name) = split_key(key);
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns.unwrap_or(""));
    tracing::info!(pod = key, "deleting pod: NoExecute taint not tolerated");
    mark_disruption_target_and_delete(
        &api,
        name,
        DisruptionTarget {
            reason: "DeletionByTaintManager",
            message: "Taint manager: deleting due to NoExecute taint",
        },
        None,
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn taints(v: serde_json::Value) -> Vec<Taint> {
        serde_json::from_value(v).unwrap()
    }

    fn tolerations(v: serde_json::Value) -> Vec<Toleration> {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn verdicts_as_upstream() {
        let unreachable = taints(
            json!([{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
                                         {"key": "dedicated", "effect": "NoSchedule"}]),
        );
        assert_eq!(verdict(&unreachable, &[]), Verdict::Now);
        assert_eq!(
            verdict(&taints(json!([{"key": "x", "effect": "NoSchedule"}])), &[]),
            Verdict::Stay
        );
        // The default tolerations admission adds: 300 s.
        let default = tolerations(json!([
            {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]));
        assert_eq!(
            verdict(&unreachable, &default),
            Verdict::After(Duration::from_secs(300))
        );
        // Tolerated forever (no tolerationSeconds) by one, for 5 s by another: the smaller wins.
        let mixed = tolerations(json!([{"operator": "Exists"},
            {"key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 5}]));
        assert_eq!(
            verdict(&unreachable, &mixed),
            Verdict::After(Duration::from_secs(5))
        );
        assert_eq!(
            verdict(&unreachable, &tolerations(json!([{"operator": "Exists"}]))),
            Verdict::Stay
        );
        // Two NoExecute taints, one not tolerated: now.
        let two = taints(
            json!([{"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
                                {"key": "gpu", "value": "broken", "effect": "NoExecute"}]),
        );
        assert_eq!(verdict(&two, &default), Verdict::Now);
        let zero = tolerations(
            json!([{"key": "node.kubernetes.io/unreachable", "operator": "Exists", "tolerationSeconds": 0}]),
        );
        assert_eq!(verdict(&unreachable, &zero), Verdict::Now);
    }
}
