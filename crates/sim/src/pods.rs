//! The pods bound to simulated nodes: one watch on every bound pod (`spec.nodeName!=`), a work queue,
//! and workers that report each pod's status as [`crate::lifecycle`] says, come back when a timed
//! transition is due, and confirm graceful deletions.

use std::collections::HashMap;
use std::net::Ipv4Addr;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use client::controller::Controller;
use client::informer::{split_key, EventHandlerFuncs, InformerConfig, SharedInformerFactory};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::Api;

use crate::cached::SimPod;
use crate::lifecycle::{next_action, Action, Knobs};
use crate::nodes::{Fleet, SimConfig};

/// Pod key -> (node, IP) of the addresses handed out, to give them back.
type Assigned = Arc<Mutex<HashMap<String, (String, Ipv4Addr)>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn pod_key(pod: &SimPod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

fn release(assigned: &Assigned, fleet: &Fleet, key: &str) {
    if let Some((node, ip)) = lock(assigned).remove(key) {
        if let Some(state) = fleet.get(&node) {
            lock(&state.pod_ips).release(ip);
        }
    }
}

pub async fn run(client: kube::Client, config: Arc<SimConfig>, fleet: Arc<Fleet>) {
    let factory = SharedInformerFactory::new(client.clone(), InformerConfig::new());
    // Every bound pod of the cluster is cached here: decoded into the purpose-made SimPod, which
    // keeps only what the workers read.
    let pods = factory.informer_for_api(
        Api::<SimPod>::all(client.clone()),
        Some(InformerConfig::new().fields("spec.nodeName!=")),
    );
    let queue = RateLimitingQueue::with_config(
        default_controller_rate_limiter::<String>(),
        QueueConfig::named("sim-pods"),
    );
    let assigned: Assigned = Arc::default();
    let ours = {
        let fleet = fleet.clone();
        move |pod: &SimPod| {
            pod.spec
                .node_name
                .as_deref()
                .is_some_and(|n| fleet.get(n).is_some())
        }
    };
    let (q_add, q_update, ours_add, ours_update) =
        (queue.clone(), queue.clone(), ours.clone(), ours);
    let (assigned_delete, fleet_delete) = (assigned.clone(), fleet.clone());
    pods.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |p: &Arc<SimPod>, _| {
                if ours_add(p) {
                    q_add.add(pod_key(p));
                }
            })
            .on_update(move |_, p: &Arc<SimPod>| {
                if ours_update(p) {
                    q_update.add(pod_key(p));
                }
            })
            .on_delete(move |d| release(&assigned_delete, &fleet_delete, &pod_key(d.object()))),
    );
    factory.start();
    factory.wait_for_cache_sync().await;
    let controller = Controller::new("sim-pods", queue.clone()).with_max_retries(15);
    let store = pods.store();
    controller
        .run(config.workers.max(1), move |key: String| {
            let (store, client, fleet, queue, assigned) = (
                store.clone(),
                client.clone(),
                fleet.clone(),
                queue.clone(),
                assigned.clone(),
            );
            async move {
                let Some(pod) = store.get(&key) else {
                    return Ok::<(), String>(());
                };
                sync(&client, &fleet, &queue, &assigned, &key, &pod).await
            }
        })
        .await;
}

/// The IP of a pod: the one it reports (kept across simulator restarts) or a new one.
fn pod_ip(
    assigned: &Assigned,
    fleet: &Fleet,
    node: &str,
    key: &str,
    pod: &SimPod,
) -> Option<Ipv4Addr> {
    if let Some((_, ip)) = lock(assigned).get(key) {
        return Some(*ip);
    }
    let state = fleet.get(node)?;
    let mut ips = lock(&state.pod_ips);
    let reported = pod
        .status
        .pod_ip
        .as_deref()
        .and_then(|ip| ip.parse::<Ipv4Addr>().ok())
        .filter(|ip| ips.contains(*ip));
    let ip = match reported {
        Some(ip) => {
            ips.claim(ip);
            ip
        }
        None => ips.allocate()?,
    };
    lock(assigned).insert(key.to_string(), (node.to_string(), ip));
    Some(ip)
}

async fn sync(
    client: &kube::Client,
    fleet: &Fleet,
    queue: &RateLimitingQueue<String>,
    assigned: &Assigned,
    key: &str,
    pod: &SimPod,
) -> Result<(), String> {
    let node = pod.spec.node_name.clone().unwrap_or_default();
    let Some(state) = fleet.get(&node) else {
        return Ok(());
    };
    if state.stopped.load(Ordering::Relaxed) || state.deleted.load(Ordering::Relaxed) {
        // A dead kubelet does nothing; the pod is looked at again when the node comes back.
        queue.add_after(key.to_string(), std::time::Duration::from_secs(5));
        return Ok(());
    }
    let knobs = match Knobs::from_annotations(pod.metadata.annotations.as_ref()) {
        Ok(k) => k,
        Err(e) => {
            tracing::warn!(pod = %key, error = %e, "ignoring bad simulation annotations");
            Knobs::default()
        }
    };
    let Some(ip) = pod_ip(assigned, fleet, &node, key, pod) else {
        return Err(format!("node {node} has no free pod IP for {key}"));
    };
    let (ns, name) = split_key(key);
    let api: Api<Pod> = Api::namespaced(client.clone(), ns.unwrap_or_default());
    match next_action(
        pod,
        &knobs,
        &state.ip.to_string(),
        &ip.to_string(),
        jiff::Timestamp::now(),
    ) {
        Action::Report { status, recheck } => {
            let patch = serde_json::json!({"status": status});
            api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await
                .map_err(|e| format!("pod {key} status: {e}"))?;
            if let Some(after) = recheck {
                queue.add_after(key.to_string(), after);
            }
        }
        Action::Wait(Some(after)) => queue.add_after(key.to_string(), after),
        Action::Wait(None) => {}
        Action::Delete => {
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: pod.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            match api.delete(name, &params).await {
                Ok(_) => release(assigned, fleet, key),
                Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {
                    release(assigned, fleet, key)
                }
                Err(e) => return Err(format!("pod {key} delete: {e}")),
            }
        }
    }
    Ok(())
}
