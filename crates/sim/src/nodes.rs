//! Registration and heartbeats of the simulated nodes (upstream kubelet `registerWithAPIServer`,
//! `nodeLeaseController` and `syncNodeStatus`): each node is created with its capacity, labels, taints,
//! pod CIDR and conditions; its Lease in `kube-node-lease` is renewed every `renew_interval`; its status
//! (condition heartbeats) is written every `status_interval` and whenever a condition changes.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};

use crate::ipam::{Cidr, PodIps};

/// Nodes this simulator manages carry this label.
pub const MANAGED_LABEL: &str = "sim.rkube.io/managed";
/// `stopped` on a node: no more heartbeats (a dead kubelet) until removed.
pub const HEARTBEAT_ANNOTATION: &str = "sim.rkube.io/heartbeat";
const LEASE_NAMESPACE: &str = "kube-node-lease";
const FIELD_MANAGER: &str = "rkube-sim";

#[derive(Clone, Debug)]
pub struct SimConfig {
    pub nodes: usize,
    /// Node names are `<prefix><index>`.
    pub name_prefix: String,
    /// Index of the first node (to run several simulators side by side).
    pub first_index: usize,
    pub cpu: String,
    pub memory: String,
    pub pods: String,
    pub ephemeral_storage: String,
    /// Nodes are spread round-robin over this many zones (`<region>-<letter>`).
    pub zones: usize,
    pub region: String,
    /// `key=value:Effect` taints of every node.
    pub taints: Vec<String>,
    pub cluster_cidr: String,
    pub node_cidr_mask: u8,
    /// InternalIPs of the nodes come from here, in order.
    pub node_ip_cidr: String,
    pub lease_duration_seconds: i32,
    pub renew_interval: Duration,
    pub status_interval: Duration,
    /// Concurrent API writes (registration, heartbeats, pod status).
    pub workers: usize,
    /// DRA devices every node publishes in ResourceSlices (see [`crate::devices`]).
    pub devices: Vec<crate::devices::DeviceSpec>,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            nodes: 10,
            name_prefix: "sim-".into(),
            first_index: 0,
            cpu: "32".into(),
            memory: "256Gi".into(),
            pods: "110".into(),
            ephemeral_storage: "1Ti".into(),
            zones: 3,
            region: "sim".into(),
            taints: Vec::new(),
            cluster_cidr: "10.128.0.0/9".into(),
            node_cidr_mask: 24,
            node_ip_cidr: "172.16.0.0/12".into(),
            lease_duration_seconds: 40,
            renew_interval: Duration::from_secs(10),
            // Upstream's nodeStatusReportFrequency: status without changes every 5 minutes.
            status_interval: Duration::from_secs(300),
            workers: 16,
            devices: Vec::new(),
        }
    }
}

pub fn node_name(config: &SimConfig, index: usize) -> String {
    format!("{}{}", config.name_prefix, config.first_index + index)
}

/// One simulated node.
pub struct NodeState {
    pub name: String,
    pub ip: Ipv4Addr,
    pub pod_cidr: Mutex<Cidr>,
    pub pod_ips: Mutex<PodIps>,
    pub stopped: AtomicBool,
    pub deleted: AtomicBool,
    lease: Mutex<Option<Lease>>,
    next_renew: Mutex<Instant>,
    next_status: Mutex<Instant>,
    /// The Ready status last reported, to set lastTransitionTime on changes.
    ready_reported: AtomicBool,
}

pub struct Fleet {
    pub nodes: Vec<Arc<NodeState>>,
    pub by_name: HashMap<String, usize>,
}

impl Fleet {
    pub fn new(config: &SimConfig) -> Result<Fleet, String> {
        let cluster = Cidr::parse(&config.cluster_cidr)?;
        let node_ips = Cidr::parse(&config.node_ip_cidr)?;
        let now = Instant::now();
        let n = config.nodes.max(1) as u32;
        let mut nodes = Vec::with_capacity(config.nodes);
        for i in 0..config.nodes {
            let index = (config.first_index + i) as u64;
            let cidr = cluster
                .subnet(config.node_cidr_mask, index)
                .ok_or_else(|| {
                    format!(
                        "cluster CIDR {cluster} has no /{} subnet #{index}",
                        config.node_cidr_mask
                    )
                })?;
            let ip = node_ips
                .address(index + 1)
                .ok_or_else(|| format!("node IP range {node_ips} has no address #{}", index + 1))?;
            // Spread the heartbeats of the fleet over their intervals, as independent kubelets would be.
            let offset = config.renew_interval * (i as u32 % n) / n;
            let status_offset = config.status_interval * (i as u32 % n) / n;
            nodes.push(Arc::new(NodeState {
                name: node_name(config, i),
                ip,
                pod_cidr: Mutex::new(cidr),
                pod_ips: Mutex::new(PodIps::new(cidr)),
                stopped: AtomicBool::new(false),
                deleted: AtomicBool::new(false),
                lease: Mutex::new(None),
                next_renew: Mutex::new(now + offset),
                next_status: Mutex::new(now + status_offset),
                ready_reported: AtomicBool::new(true),
            }));
        }
        let by_name = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        Ok(Fleet { nodes, by_name })
    }

    pub fn get(&self, name: &str) -> Option<&Arc<NodeState>> {
        self.by_name.get(name).map(|&i| &self.nodes[i])
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

fn conditions(ready: bool, transition: Option<&str>) -> Value {
    let now = now_rfc3339();
    let condition = |type_: &str, status: &str, reason: &str, message: &str| {
        let mut c = json!({"type": type_, "status": status, "reason": reason, "message": message,
                           "lastHeartbeatTime": now});
        if let Some(t) = transition {
            c["lastTransitionTime"] = json!(t);
        }
        c
    };
    json!([
        condition(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        condition(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        condition(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        if ready {
            condition(
                "Ready",
                "True",
                "KubeletReady",
                "kubelet is posting ready status",
            )
        } else {
            condition("Ready", "False", "KubeletNotReady", "kubelet is not ready")
        },
    ])
}

fn parse_taint(spec: &str) -> Result<Value, String> {
    let (kv, effect) = spec
        .rsplit_once(':')
        .ok_or_else(|| format!("taint {spec:?}: expected key[=value]:Effect"))?;
    let (key, value) = kv.split_once('=').unwrap_or((kv, ""));
    let mut t = json!({"key": key, "effect": effect});
    if !value.is_empty() {
        t["value"] = json!(value);
    }
    Ok(t)
}

fn node_object(config: &SimConfig, state: &NodeState, index: usize) -> Result<Value, String> {
    let zone = format!(
        "{}-{}",
        config.region,
        (b'a' + ((config.first_index + index) % config.zones.max(1)) as u8 % 26) as char
    );
    let taints = config
        .taints
        .iter()
        .map(|t| parse_taint(t))
        .collect::<Result<Vec<_>, _>>()?;
    let resources = json!({"cpu": config.cpu, "memory": config.memory, "pods": config.pods,
                           "ephemeral-storage": config.ephemeral_storage});
    let cidr = lock(&state.pod_cidr).to_string();
    let mut labels = BTreeMap::new();
    for (k, v) in [
        ("kubernetes.io/hostname", state.name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", "amd64"),
        ("topology.kubernetes.io/zone", zone.as_str()),
        ("topology.kubernetes.io/region", config.region.as_str()),
        ("node.kubernetes.io/instance-type", "sim"),
        ("type", "sim"),
        (MANAGED_LABEL, "true"),
    ] {
        labels.insert(k.to_string(), v.to_string());
    }
    let now = now_rfc3339();
    let mut spec = json!({"podCIDR": cidr, "podCIDRs": [cidr]});
    if !taints.is_empty() {
        spec["taints"] = Value::Array(taints);
    }
    Ok(json!({
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": state.name, "labels": labels,
                     // As the kubelet: attach/detach of the node's volumes is the controller's.
                     "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                     "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
        "spec": spec,
        "status": {
            "capacity": resources, "allocatable": resources,
            "conditions": conditions(true, Some(&now)),
            "addresses": [{"type": "InternalIP", "address": state.ip.to_string()},
                          {"type": "Hostname", "address": state.name}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "nodeInfo": {"machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "sim",
                         "osImage": "rkube simulated node", "containerRuntimeVersion": "sim://0.1.0",
                         "kubeletVersion": "v1.36.0-rkube-sim", "kubeProxyVersion": "",
                         "operatingSystem": "linux", "architecture": "amd64"},
            "phase": "Running",
        }
    }))
}

/// Creates every node (or adopts an existing one, keeping its pod CIDR) and its Lease.
pub async fn register_all(
    client: &kube::Client,
    config: &Arc<SimConfig>,
    fleet: &Arc<Fleet>,
) -> Result<(), String> {
    let results: Vec<Result<(), String>> = futures::stream::iter(fleet.nodes.iter().enumerate())
        .map(|(i, state)| register(client, config, state, i))
        .buffer_unordered(config.workers.max(1))
        .collect()
        .await;
    results.into_iter().collect()
}

async fn register(
    client: &kube::Client,
    config: &SimConfig,
    state: &Arc<NodeState>,
    index: usize,
) -> Result<(), String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let obj: Node =
        serde_json::from_value(node_object(config, state, index)?).map_err(|e| e.to_string())?;
    let params = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    };
    let node = match nodes.create(&params, &obj).await {
        Ok(node) => node,
        Err(kube::Error::Api(e)) if e.code == 409 => {
            let existing = nodes
                .get(&state.name)
                .await
                .map_err(|e| format!("node {}: {e}", state.name))?;
            if let Some(cidr) = existing.spec.as_ref().and_then(|s| s.pod_cidr.as_deref()) {
                let cidr = Cidr::parse(cidr)?;
                *lock(&state.pod_cidr) = cidr;
                *lock(&state.pod_ips) = PodIps::new(cidr);
            }
            existing
        }
        Err(e) => return Err(format!("node {}: {e}", state.name)),
    };
    if node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_none_or(Vec::is_empty)
    {
        report_status(client, state, true).await?;
    }
    renew_lease(client, config, state, node.metadata.uid.as_deref()).await?;
    crate::devices::publish(
        client,
        &config.devices,
        &state.name,
        node.metadata.uid.as_deref(),
    )
    .await
}

/// Renews (or creates) the node's Lease, as the kubelet's node lease controller.
async fn renew_lease(
    client: &kube::Client,
    config: &SimConfig,
    state: &NodeState,
    node_uid: Option<&str>,
) -> Result<(), String> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), LEASE_NAMESPACE);
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
    let cached = lock(&state.lease).clone();
    let result = match cached {
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(Default::default);
            spec.renew_time = Some(now);
            leases
                .replace(&state.name, &PostParams::default(), &lease)
                .await
        }
        None => {
            let mut lease: Lease = serde_json::from_value(json!({
                "metadata": {"name": state.name, "namespace": LEASE_NAMESPACE},
                "spec": {"holderIdentity": state.name, "leaseDurationSeconds": config.lease_duration_seconds}
            }))
            .map_err(|e| e.to_string())?;
            if let Some(uid) = node_uid {
                lease.metadata.owner_references = Some(vec![serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Node", "name": state.name, "uid": uid
                }))
                .map_err(|e| e.to_string())?]);
            }
            lease.spec.get_or_insert_with(Default::default).renew_time = Some(now);
            match leases.create(&PostParams::default(), &lease).await {
                Err(kube::Error::Api(e)) if e.code == 409 => leases.get(&state.name).await,
                other => other,
            }
        }
    };
    match result {
        Ok(lease) => {
            *lock(&state.lease) = Some(lease);
            Ok(())
        }
        Err(e) => {
            // Stale or gone: read it afresh (or create it) on the next renewal.
            *lock(&state.lease) = None;
            if let kube::Error::Api(api) = &e {
                if api.code == 409 {
                    if let Ok(lease) = leases.get(&state.name).await {
                        *lock(&state.lease) = Some(lease);
                    }
                }
            }
            Err(format!("lease {}: {e}", state.name))
        }
    }
}

async fn report_status(
    client: &kube::Client,
    state: &NodeState,
    ready: bool,
) -> Result<(), String> {
    let nodes: Api<Node> = Api::all(client.clone());
    let changed = state.ready_reported.swap(ready, Ordering::Relaxed) != ready;
    let now = now_rfc3339();
    let patch =
        json!({"status": {"conditions": conditions(ready, changed.then_some(now.as_str()))}});
    nodes
        .patch_status(
            &state.name,
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        )
        .await
        .map(drop)
        .map_err(|e| format!("node {} status: {e}", state.name))
}

/// Renews the leases and refreshes the status of every live node, on their cadences, with at most
/// `workers` writes in flight.
pub async fn heartbeats(client: kube::Client, config: Arc<SimConfig>, fleet: Arc<Fleet>) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tick.tick().await;
        let now = Instant::now();
        let due: Vec<(Arc<NodeState>, bool, bool)> = fleet
            .nodes
            .iter()
            .filter(|n| !n.stopped.load(Ordering::Relaxed) && !n.deleted.load(Ordering::Relaxed))
            .filter_map(|n| {
                let renew = *lock(&n.next_renew) <= now;
                let status = *lock(&n.next_status) <= now;
                (renew || status).then(|| (n.clone(), renew, status))
            })
            .collect();
        futures::stream::iter(due)
            .for_each_concurrent(config.workers.max(1), |(node, renew, status)| {
                let (client, config) = (client.clone(), config.clone());
                async move {
                    if renew {
                        *lock(&node.next_renew) = Instant::now() + config.renew_interval;
                        if let Err(e) = renew_lease(&client, &config, &node, None).await {
                            tracing::warn!(node = %node.name, error = %e, "lease renewal failed");
                            // Retry soon, as the kubelet's backoff does.
                            *lock(&node.next_renew) = Instant::now() + Duration::from_secs(1);
                        }
                    }
                    if status {
                        *lock(&node.next_status) = Instant::now() + config.status_interval;
                        if let Err(e) = report_status(&client, &node, true).await {
                            tracing::warn!(node = %node.name, error = %e, "status update failed");
                        }
                    }
                }
            })
            .await;
    }
}

/// Follows the simulated Nodes: the heartbeat annotation stops and resumes a node; a deleted node is
/// forgotten.
pub async fn watch_nodes(client: kube::Client, fleet: Arc<Fleet>) {
    use client::informer::{EventHandlerFuncs, InformerConfig, SharedInformerFactory};
    let factory = SharedInformerFactory::new(client.clone(), InformerConfig::new());
    let informer = factory.informer_for_api(
        Api::<Node>::all(client.clone()),
        Some(InformerConfig::new().labels(format!("{MANAGED_LABEL}=true"))),
    );
    let apply = {
        let (fleet, client) = (fleet.clone(), client.clone());
        move |node: &Arc<Node>| {
            let Some(state) = node.metadata.name.as_deref().and_then(|n| fleet.get(n)) else {
                return;
            };
            let stopped = node
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(HEARTBEAT_ANNOTATION))
                .is_some_and(|v| v == "stopped");
            let was = state.stopped.swap(stopped, Ordering::Relaxed);
            if was && !stopped {
                // Resumed: report Ready at once (the node lifecycle controller may have marked it Unknown).
                let (client, state) = (client.clone(), state.clone());
                *lock(&state.next_renew) = Instant::now();
                state.ready_reported.store(false, Ordering::Relaxed);
                tokio::spawn(async move {
                    if let Err(e) = report_status(&client, &state, true).await {
                        tracing::warn!(node = %state.name, error = %e, "status update failed");
                    }
                });
            }
        }
    };
    let on_update = apply.clone();
    let fleet_deleted = fleet.clone();
    informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |n, _| apply(n))
            .on_update(move |_, n| on_update(n))
            .on_delete(move |d| {
                if let Some(state) = d
                    .object()
                    .metadata
                    .name
                    .as_deref()
                    .and_then(|n| fleet_deleted.get(n))
                {
                    state.deleted.store(true, Ordering::Relaxed);
                }
            }),
    );
    factory.start();
    std::future::pending::<()>().await;
}
