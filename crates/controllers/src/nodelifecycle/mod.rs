//! The node lifecycle controller (upstream `pkg/controller/nodelifecycle`, seed 001): watches node
//! heartbeats (the Ready condition's lastHeartbeatTime and the node's Lease in `kube-node-lease`, on
//! this controller's own clock), marks the conditions of a node silent for longer than
//! `--node-monitor-grace-period` Unknown, keeps the condition-based NoSchedule taints, taints
//! not-ready and unreachable nodes NoExecute through a per-zone rate limiter whose rate follows the
//! zone's health, stops tainting altogether when every zone is fully disrupted (the control plane, not
//! the nodes, is then the likelier culprit), and marks pods on nodes that stop being Ready not Ready.
//! Evicting pods from NoExecute-tainted nodes is the taint eviction controller's job.

pub mod health;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::informer::{EventHandlerFuncs, SharedInformerFactory, Store};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Patch, PatchParams};
use kube::Api;
use serde_json::json;

use health::ZoneState;

/// Eviction (tainting) rates of the zones.
#[derive(Clone, Debug)]
pub struct Rates {
    /// `--node-eviction-rate`: nodes per second in a healthy zone.
    pub eviction: f64,
    /// `--secondary-node-eviction-rate`: in a partially disrupted large zone.
    pub secondary: f64,
    /// `--large-cluster-size-threshold`: zones up to this size stop evicting when partially disrupted.
    pub large_cluster_threshold: usize,
}

#[derive(Clone, Debug)]
pub struct Options {
    /// `--node-monitor-period`.
    pub monitor_period: Duration,
    /// `--node-monitor-grace-period`.
    pub grace_period: Duration,
    /// `--node-startup-grace-period`: for nodes that never posted a Ready condition.
    pub startup_grace_period: Duration,
    pub rates: Rates,
    /// `--unhealthy-zone-threshold`.
    pub unhealthy_zone_threshold: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            monitor_period: Duration::from_secs(5),
            grace_period: Duration::from_secs(40),
            startup_grace_period: Duration::from_secs(60),
            rates: Rates {
                eviction: 0.1,
                secondary: 0.01,
                large_cluster_threshold: 50,
            },
            unhealthy_zone_threshold: 0.55,
        }
    }
}

/// What the controller last observed of a node's heartbeats.
struct Health {
    /// When a heartbeat was last seen to change, on our clock (upstream `probeTimestamp`).
    probe: Instant,
    heartbeat: Option<String>,
    lease_renew: Option<String>,
    ready: String,
}

/// A zone's queue of nodes to taint NoExecute, drained by a token bucket (burst 1, as upstream's
/// `RateLimitedTimedQueue`).
struct Tainter {
    queue: VecDeque<String>,
    rate: f64,
    tokens: f64,
    refilled: Instant,
}

impl Tainter {
    fn new(rate: f64) -> Tainter {
        Tainter {
            queue: VecDeque::new(),
            rate,
            tokens: 1.0,
            refilled: Instant::now(),
        }
    }

    fn try_accept(&mut self) -> bool {
        let now = Instant::now();
        self.tokens =
            (self.tokens + self.rate * now.duration_since(self.refilled).as_secs_f64()).min(1.0);
        self.refilled = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

struct Controller {
    client: kube::Client,
    options: Options,
    nodes: Arc<Store<Node>>,
    leases: Arc<Store<Lease>>,
    pods: Arc<Store<Pod>>,
    health: HashMap<String, Health>,
    tainters: HashMap<String, Tainter>,
    zone_states: HashMap<String, ZoneState>,
    all_disrupted: bool,
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory, options: Options) {
    let node_informer = factory.informer::<Node>();
    let nodes = node_informer.store();
    // Upstream's nodeUpdateQueue: a node's condition taints follow its conditions as soon as they
    // change, not at the next monitor pass (a new node's admission-set not-ready taint goes as
    // soon as it reports Ready).
    let (changed_tx, mut changed) = tokio::sync::mpsc::unbounded_channel::<String>();
    let on_update = changed_tx.clone();
    node_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |n: &Arc<Node>, _| {
                let _ = changed_tx.send(n.metadata.name.clone().unwrap_or_default());
            })
            .on_update(move |_, n: &Arc<Node>| {
                let _ = on_update.send(n.metadata.name.clone().unwrap_or_default());
            }),
    );
    let leases = factory
        .namespaced_informer::<Lease>("kube-node-lease")
        .store();
    let pod_informer = factory.informer::<Pod>();
    crate::index_pods_by_node(&pod_informer);
    factory.start();
    factory.wait_for_cache_sync().await;
    let mut c = Controller {
        client,
        nodes,
        leases,
        pods: pod_informer.store(),
        health: HashMap::new(),
        tainters: HashMap::new(),
        zone_states: HashMap::new(),
        all_disrupted: false,
        options,
    };
    let mut monitor = tokio::time::interval(c.options.monitor_period);
    // Upstream drains the tainting queues every `nodeEvictionPeriod` (100 ms).
    let mut tainting = tokio::time::interval(Duration::from_millis(100));
    loop {
        tokio::select! {
            _ = monitor.tick() => c.monitor().await,
            _ = tainting.tick() => c.tainting_pass().await,
            Some(name) = changed.recv() => c.no_schedule_pass(&name).await,
        }
    }
}

impl Controller {
    fn node_api(&self) -> Api<Node> {
        Api::all(self.client.clone())
    }

    /// Writes the node's taints, guarded by its resourceVersion (a concurrent change makes it retry
    /// on the next pass rather than overwrite someone else's taint).
    async fn write_taints(&self, node: &Node, taints: &[k8s_openapi::api::core::v1::Taint]) {
        let name = node.metadata.name.as_deref().unwrap_or("");
        // No taints left: the field goes, as upstream's (omitempty) node has none.
        let taints = if taints.is_empty() {
            json!(null)
        } else {
            json!(taints)
        };
        let patch = json!({"metadata": {"resourceVersion": node.metadata.resource_version},
                           "spec": {"taints": taints}});
        if let Err(e) = self
            .node_api()
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            tracing::warn!(node = name, error = %e, "updating taints");
        }
    }

    /// Upstream `doNoScheduleTaintingPass` for one node that changed.
    async fn no_schedule_pass(&self, name: &str) {
        if let Some(node) = self.nodes.get(name) {
            if let Some(taints) = health::reconcile_no_schedule(&node) {
                self.write_taints(&node, &taints).await;
            }
        }
    }

    /// One pass of upstream `monitorNodeHealth`.
    async fn monitor(&mut self) {
        let now = Instant::now();
        let nodes = self.nodes.list();
        let names: HashSet<String> = nodes
            .iter()
            .filter_map(|n| n.metadata.name.clone())
            .collect();
        self.health.retain(|n, _| names.contains(n));
        for t in self.tainters.values_mut() {
            t.queue.retain(|n| names.contains(n));
        }
        let mut zones: HashMap<String, (usize, usize)> = HashMap::new();
        for node in &nodes {
            let node = self.check_health(node, now).await;
            let name = node.metadata.name.clone().unwrap_or_default();
            let zone = health::zone_key(&node);
            let counts = zones.entry(zone.clone()).or_default();
            if health::ready_status(&node) == "True" {
                counts.0 += 1;
            } else {
                counts.1 += 1;
            }
            if let Some(taints) = health::reconcile_no_schedule(&node) {
                self.write_taints(&node, &taints).await;
                continue; // the next pass sees the new resourceVersion
            }
            match health::wanted_no_execute(&node) {
                Some(key) if health::has_no_execute(&node, key) => {}
                Some(key)
                    if health::has_no_execute(&node, health::NOT_READY)
                        || health::has_no_execute(&node, health::UNREACHABLE) =>
                {
                    // A not-ready node became unreachable or back: swap at once.
                    if let Some(t) =
                        health::set_no_execute(&node, Some(key), jiff::Timestamp::now())
                    {
                        self.write_taints(&node, &t).await;
                    }
                }
                Some(_) => {
                    let rate = self.options.rates.eviction;
                    let tainter = self
                        .tainters
                        .entry(zone)
                        .or_insert_with(|| Tainter::new(rate));
                    if !tainter.queue.contains(&name) {
                        tainter.queue.push_back(name);
                    }
                }
                None => {
                    if let Some(t) = self.tainters.get_mut(&zone) {
                        t.queue.retain(|n| *n != name);
                    }
                    if let Some(t) = health::set_no_execute(&node, None, jiff::Timestamp::now()) {
                        self.write_taints(&node, &t).await;
                    }
                }
            }
        }
        self.handle_disruption(&zones, &nodes).await;
    }

    /// Observes the node's heartbeats; past its grace period, marks its conditions Unknown. Returns
    /// the node as it now is.
    async fn check_health(&mut self, node: &Arc<Node>, now: Instant) -> Node {
        let name = node.metadata.name.clone().unwrap_or_default();
        let heartbeat = health::condition(node, "Ready")
            .and_then(|c| c.last_heartbeat_time.as_ref())
            .map(|t| t.0.to_string());
        let lease_renew = self
            .leases
            .get(&format!("kube-node-lease/{name}"))
            .and_then(|l| {
                l.spec
                    .as_ref()?
                    .renew_time
                    .as_ref()
                    .map(|t| t.0.to_string())
            });
        let h = self.health.entry(name.clone()).or_insert_with(|| Health {
            probe: now,
            heartbeat: heartbeat.clone(),
            lease_renew: lease_renew.clone(),
            ready: health::ready_status(node).to_string(),
        });
        if h.heartbeat != heartbeat || h.lease_renew != lease_renew {
            h.probe = now;
            h.heartbeat = heartbeat;
            h.lease_renew = lease_renew;
        }
        let grace = if health::condition(node, "Ready").is_none() {
            self.options.startup_grace_period
        } else {
            self.options.grace_period
        };
        let mut node = (**node).clone();
        if now.duration_since(h.probe) > grace {
            if let Some(conditions) = health::unknown_conditions(&node, jiff::Timestamp::now()) {
                let patch = json!({"status": {"conditions": conditions}});
                match self
                    .node_api()
                    .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
                    .await
                {
                    Ok(updated) => node = updated,
                    Err(e) => tracing::warn!(node = %name, error = %e, "marking node Unknown"),
                }
            }
        }
        let ready = health::ready_status(&node).to_string();
        let h = self.health.get_mut(&name).expect("inserted above");
        if h.ready == "True" && ready != "True" {
            tracing::info!(node = %name, "node is not Ready: marking its pods not Ready");
            self.mark_pods_not_ready(&name).await;
        }
        self.health.get_mut(&name).expect("inserted above").ready = ready;
        node
    }

    /// Upstream `MarkPodsNotReady`: the pods of a node that stopped being Ready are not Ready either.
    async fn mark_pods_not_ready(&self, node: &str) {
        let pods = self
            .pods
            .by_index(crate::POD_NODE_INDEX, node)
            .unwrap_or_default();
        let now = jiff::Timestamp::now();
        for pod in pods {
            let Some(mut conditions) = pod.status.as_ref().and_then(|s| s.conditions.clone())
            else {
                continue;
            };
            let Some(ready) = conditions.iter_mut().find(|c| c.type_ == "Ready") else {
                continue;
            };
            if ready.status != "True" {
                continue;
            }
            ready.status = "False".into();
            ready.last_transition_time =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(now));
            let ns = pod.metadata.namespace.as_deref().unwrap_or("");
            let name = pod.metadata.name.as_deref().unwrap_or("");
            let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            let patch = json!({"status": {"conditions": conditions}});
            if let Err(e) = api
                .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
                .await
            {
                tracing::warn!(pod = name, error = %e, "marking pod not Ready");
            }
        }
    }

    /// Upstream `handleDisruption`: zone states set the zones' tainting rates; when every zone is
    /// fully disrupted, no node is tainted and existing NoExecute taints go.
    async fn handle_disruption(
        &mut self,
        zones: &HashMap<String, (usize, usize)>,
        nodes: &[Arc<Node>],
    ) {
        let threshold = self.options.unhealthy_zone_threshold;
        let states: HashMap<String, ZoneState> = zones
            .iter()
            .map(|(z, (ready, not_ready))| {
                (z.clone(), health::zone_state(*ready, *not_ready, threshold))
            })
            .collect();
        let all_disrupted =
            !states.is_empty() && states.values().all(|s| *s == ZoneState::FullDisruption);
        if all_disrupted && !self.all_disrupted {
            tracing::warn!(
                "every node is not Ready: entering master disruption mode (no evictions)"
            );
            for t in self.tainters.values_mut() {
                t.rate = 0.0;
            }
            for node in nodes {
                if let Some(taints) = health::set_no_execute(node, None, jiff::Timestamp::now()) {
                    self.write_taints(node, &taints).await;
                }
            }
        } else if !all_disrupted && self.all_disrupted {
            tracing::info!("some nodes are Ready again: leaving master disruption mode");
            // Every node gets a full grace period again before it may be tainted.
            let now = Instant::now();
            for h in self.health.values_mut() {
                h.probe = now;
            }
        }
        self.all_disrupted = all_disrupted;
        if !all_disrupted {
            for (zone, state) in &states {
                let size = zones.get(zone).map_or(0, |(r, n)| r + n);
                let rate = health::zone_rate(*state, size, &self.options.rates);
                let tainter = self
                    .tainters
                    .entry(zone.clone())
                    .or_insert_with(|| Tainter::new(rate));
                tainter.rate = rate;
                if self.zone_states.get(zone) != Some(state) {
                    tracing::info!(zone = %zone, state = ?state, rate, "zone state");
                }
            }
        }
        self.zone_states = states;
    }

    /// Upstream `doNoExecuteTaintingPass`: each zone taints as many queued nodes as its rate allows.
    async fn tainting_pass(&mut self) {
        let mut work = Vec::new();
        for tainter in self.tainters.values_mut() {
            while !tainter.queue.is_empty() && tainter.rate > 0.0 && tainter.try_accept() {
                if let Some(name) = tainter.queue.pop_front() {
                    work.push(name);
                }
            }
        }
        for name in work {
            let Some(node) = self.nodes.get(&name) else {
                continue;
            };
            // Re-read: the node may have recovered while it waited.
            let key = health::wanted_no_execute(&node);
            if key.is_none() {
                continue;
            }
            if let Some(t) = health::set_no_execute(&node, key, jiff::Timestamp::now()) {
                self.write_taints(&node, &t).await;
            }
        }
    }
}
