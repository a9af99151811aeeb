//! The node IPAM controller's range allocator (upstream `pkg/controller/nodeipam`, seed 000): with
//! `--allocate-node-cidrs`, every node without `spec.podCIDR` gets the next free `/node-cidr-mask-size`
//! subnet of `--cluster-cidr`; subnets of existing nodes are occupied at start, a deleted node's is
//! released. One worker allocates, so no subnet is ever handed out twice.

pub mod cidrset;

use std::sync::{Arc, Mutex};

use client::controller::Controller;
use client::informer::{EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;

use cidrset::CidrSet;

#[derive(Clone, Debug, Default)]
pub struct Options {
    /// `--allocate-node-cidrs`.
    pub allocate_node_cidrs: bool,
    /// `--cluster-cidr`.
    pub cluster_cidr: Option<String>,
    /// `--node-cidr-mask-size` (default 24 for IPv4, 64 for IPv6).
    pub node_cidr_mask_size: Option<u8>,
}

fn pod_cidr(node: &Node) -> Option<String> {
    node.spec
        .as_ref()?
        .pod_cidr
        .clone()
        .filter(|c| !c.is_empty())
}

struct Ctx {
    client: kube::Client,
    nodes: Arc<Store<Node>>,
    set: Mutex<CidrSet>,
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory, options: Options) {
    if !options.allocate_node_cidrs {
        return;
    }
    let Some(cluster_cidr) = options.cluster_cidr.clone() else {
        tracing::error!("--allocate-node-cidrs needs --cluster-cidr: not allocating node CIDRs");
        return;
    };
    let v6 = cidrset::parse_cidr(&cluster_cidr).is_ok_and(|(_, _, v6)| v6);
    let mask = options
        .node_cidr_mask_size
        .unwrap_or(if v6 { 64 } else { 24 });
    let set = match CidrSet::new(&cluster_cidr, mask) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(error = %e, "node IPAM: not allocating node CIDRs");
            return;
        }
    };
    let informer = factory.informer::<Node>();
    let queue = RateLimitingQueue::with_config(
        default_controller_rate_limiter::<String>(),
        QueueConfig::named("node-ipam"),
    );
    let ctx = Arc::new(Ctx {
        client,
        nodes: informer.store(),
        set: Mutex::new(set),
    });
    factory.start();
    factory.wait_for_cache_sync().await;
    // Occupy what nodes already have before handing anything out.
    for node in ctx.nodes.list() {
        if let Some(cidr) = pod_cidr(&node) {
            if let Err(e) = lock(&ctx.set).occupy(&cidr) {
                tracing::warn!(node = ?node.metadata.name, error = %e, "node podCIDR not occupied");
            }
        }
    }
    let (q1, q2, released) = (queue.clone(), queue.clone(), ctx.clone());
    let (c1, c2) = (ctx.clone(), ctx.clone());
    let name = |n: &Node| n.metadata.name.clone().unwrap_or_default();
    // A node that arrives with a subnet of ours (given by someone else) occupies it.
    let see = move |ctx: &Ctx, n: &Node, queue: &RateLimitingQueue<String>| match pod_cidr(n) {
        Some(cidr) => {
            let _ = lock(&ctx.set).occupy(&cidr);
        }
        None => queue.add(name(n)),
    };
    informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |n: &Arc<Node>, _| see(&c1, n, &q1))
            .on_update(move |_, n: &Arc<Node>| see(&c2, n, &q2))
            .on_delete(move |d| {
                if let Some(cidr) = pod_cidr(d.object()) {
                    let _ = lock(&released.set).release(&cidr);
                }
            }),
    );
    Controller::new("node-ipam", queue)
        .with_max_retries(15)
        .run(1, move |key: String| {
            let ctx = ctx.clone();
            async move { allocate(&ctx, &key).await }
        })
        .await;
}

fn lock(m: &Mutex<CidrSet>) -> std::sync::MutexGuard<'_, CidrSet> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Upstream `AllocateOrOccupyCIDR` + `updateCIDRsAllocation`.
async fn allocate(ctx: &Ctx, name: &str) -> Result<(), String> {
    let Some(node) = ctx.nodes.get(name) else {
        return Ok(());
    };
    if pod_cidr(&node).is_some() || node.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let cidr = lock(&ctx.set).allocate().ok_or_else(|| {
        format!("node {name}: CIDRNotAvailable: no free subnet in the cluster CIDR")
    })?;
    let api: Api<Node> = Api::all(ctx.client.clone());
    let patch = json!({"spec": {"podCIDR": cidr, "podCIDRs": [cidr]}});
    match api
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) => {
            let _ = lock(&ctx.set).release(&cidr);
            match e {
                kube::Error::Api(e) if e.code == 404 => Ok(()),
                e => Err(format!("node {name}: CIDRAssignmentFailed: {e}")),
            }
        }
    }
}
