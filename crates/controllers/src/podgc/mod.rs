//! The pod garbage collector (upstream `pkg/controller/podgc`): every period it force-deletes
//! terminated pods beyond `--terminated-pod-gc-threshold` (oldest first), terminating pods on
//! out-of-service nodes, pods bound to nodes that no longer exist (after a quarantine and a live
//! check), and terminating pods that were never scheduled. Pods not yet terminal are first marked
//! Failed, with a `DisruptionTarget` condition when their node is gone (see [`gc`]).

pub mod gc;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Instant;

use client::informer::Store;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::Api;
use serde_json::json;

/// Deletes in flight at once (upstream deletes terminated pods with 50 goroutines).
const PARALLEL_DELETES: usize = 50;

struct Ctx {
    client: kube::Client,
    pods: Arc<Store<Pod>>,
    nodes: Arc<Store<Node>>,
}

pub async fn run(c: &crate::ControllerContext) {
    let pod_informer = c.factory.informer::<Pod>();
    let node_informer = c.factory.informer::<Node>();
    let ctx = Ctx {
        client: c.client.clone(),
        pods: pod_informer.store(),
        nodes: node_informer.store(),
    };
    c.factory.start();
    c.factory.wait_for_cache_sync().await;
    let opts = c.options.clone();
    let mut quarantine = gc::Quarantine::default();
    let mut ticker = tokio::time::interval(opts.pod_gc_period);
    loop {
        ticker.tick().await;
        let pods = ctx.pods.list();
        let pods: Vec<&Pod> = pods.iter().map(|p| p.as_ref()).collect();
        let terminated = gc::terminated_over_threshold(&pods, opts.terminated_pod_gc_threshold);
        if !terminated.is_empty() {
            tracing::info!(
                count = terminated.len(),
                "garbage collecting terminated pods"
            );
        }
        delete_all(&ctx, &terminated, None).await;
        let out_of_service = gc::terminating_on_out_of_service(&pods, |n| ctx.nodes.get(n));
        delete_all(&ctx, &out_of_service, None).await;
        let existing: HashSet<String> = ctx.nodes.list_keys().into_iter().collect();
        let due = quarantine.due(&pods, &existing, Instant::now(), opts.pod_gc_quarantine);
        let mut deleted_nodes = HashSet::new();
        let nodes_api: Api<Node> = Api::all(ctx.client.clone());
        for node in due {
            match nodes_api.get_opt(&node).await {
                Ok(None) => {
                    deleted_nodes.insert(node);
                }
                Ok(Some(_)) => {}
                // Checked again next round if pods still name it.
                Err(e) => tracing::warn!(node, error = %e, "pod GC: cannot read node"),
            }
        }
        let condition = json!({"type": "DisruptionTarget", "status": "True",
            "reason": "DeletionByPodGC", "message": "PodGC: node no longer exists"});
        delete_all(&ctx, &gc::orphaned(&pods, &deleted_nodes), Some(&condition)).await;
        delete_all(&ctx, &gc::unscheduled_terminating(&pods), None).await;
    }
}

async fn delete_all(ctx: &Ctx, pods: &[&Pod], condition: Option<&serde_json::Value>) {
    futures::stream::iter(pods.iter())
        .for_each_concurrent(PARALLEL_DELETES, |pod| async move {
            if let Err(e) = mark_failed_and_delete(ctx, pod, condition).await {
                tracing::warn!(pod = pod.metadata.name.as_deref().unwrap_or(""), error = %e, "pod GC");
            }
        })
        .await;
}

/// Marks a pod that is not terminal Failed (so an orphan does not stay Running forever), with the
/// condition if any, then deletes it with no grace period.
async fn mark_failed_and_delete(
    ctx: &Ctx,
    pod: &Pod,
    condition: Option<&serde_json::Value>,
) -> Result<(), String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    let name = pod.metadata.name.as_deref().unwrap_or("");
    tracing::info!(namespace = ns, pod = name, "pod GC is force deleting pod");
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    if !matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    ) {
        let mut status = json!({"phase": "Failed"});
        if let Some(c) = condition {
            let mut c = c.clone();
            let now = jiff::Timestamp::now()
                .strftime("%Y-%m-%dT%H:%M:%SZ")
                .to_string();
            c["lastTransitionTime"] = json!(now);
            status["conditions"] = json!([c]);
        }
        let patch = json!({"metadata": {"uid": pod.metadata.uid}, "status": status});
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(()),
            Err(e) => return Err(format!("mark failed: {e}")),
        }
    }
    match api
        .delete(
            name,
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(format!("delete: {e}")),
    }
}
