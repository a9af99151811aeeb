//! The kubelet's Node (upstream `kubelet_node_status.go`, `nodestatus/setters.go` and
//! `nodelease`): registration (create, or reconcile the existing Node's labels), the status loop (every
//! `nodeStatusUpdateFrequency` the status is computed and posted when it changed or when
//! `nodeStatusReportFrequency` passed since the last post), the Lease in `kube-node-lease` renewed every
//! 10 s, and the CNI config written once the node has a pod CIDR (what k3s's flannel does upstream of
//! the kubelet: a bridge + host-local network from Debian's containernetworking-plugins).

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Node;
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};

use crate::config::KubeletConfig;
use crate::cri::Runtime;
use crate::machine::{kibibytes, MachineInfo};

pub const LEASE_NAMESPACE: &str = "kube-node-lease";
pub const KUBELET_VERSION: &str = "v1.36.0-rkube";
/// Upstream's hard eviction threshold `memory.available<100Mi`, taken off allocatable memory.
const EVICTION_MEMORY_BYTES: u64 = 100 * 1024 * 1024;

pub(crate) fn now_rfc3339() -> String {
    jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// The node's capacity and allocatable (upstream: capacity minus reservations and hard eviction
/// thresholds: 100Mi of memory, 10% of the node filesystem).
pub fn resources(m: &MachineInfo, max_pods: u32) -> (Value, Value) {
    let capacity = json!({
        "cpu": m.cpus.to_string(),
        "memory": kibibytes(m.memory_bytes),
        "ephemeral-storage": kibibytes(m.filesystem_bytes),
        "hugepages-1Gi": "0", "hugepages-2Mi": "0",
        "pods": max_pods.to_string(),
    });
    let allocatable = json!({
        "cpu": m.cpus.to_string(),
        "memory": kibibytes(m.memory_bytes.saturating_sub(EVICTION_MEMORY_BYTES)),
        "ephemeral-storage": (m.filesystem_bytes / 10 * 9).to_string(),
        "hugepages-1Gi": "0", "hugepages-2Mi": "0",
        "pods": max_pods.to_string(),
    });
    (capacity, allocatable)
}

/// Why the node is not ready, from the runtime's conditions (upstream `runtimeErrors` /
/// `networkErrors`), or None when it is.
pub fn not_ready_reason(status: Option<&crate::cri::api::RuntimeStatus>) -> Option<String> {
    let Some(status) = status else {
        return Some("container runtime is down".into());
    };
    let mut errors = Vec::new();
    for (type_, prefix) in [
        ("RuntimeReady", "container runtime is down"),
        ("NetworkReady", "container runtime network not ready"),
    ] {
        match status.conditions.iter().find(|c| c.r#type == type_) {
            Some(c) if c.status => {}
            Some(c) => errors.push(format!(
                "{prefix}: {type_}=false reason:{} message:{}",
                c.reason, c.message
            )),
            None => errors.push(format!("{prefix}: {type_} missing")),
        }
    }
    (!errors.is_empty()).then(|| errors.join(", "))
}

/// The four node conditions; `transitions` holds each condition's last status and transition time.
pub fn conditions(not_ready: Option<&str>, previous: &[Value], now: &str) -> Value {
    let cond = |type_: &str, status: &str, reason: &str, message: &str| {
        let since = previous
            .iter()
            .find(|c| c["type"] == type_ && c["status"] == status)
            .and_then(|c| c["lastTransitionTime"].as_str())
            .unwrap_or(now)
            .to_string();
        json!({"type": type_, "status": status, "reason": reason, "message": message,
               "lastHeartbeatTime": now, "lastTransitionTime": since})
    };
    let ready = match not_ready {
        None => cond(
            "Ready",
            "True",
            "KubeletReady",
            "kubelet is posting ready status",
        ),
        Some(why) => cond("Ready", "False", "KubeletNotReady", why),
    };
    json!([
        cond(
            "MemoryPressure",
            "False",
            "KubeletHasSufficientMemory",
            "kubelet has sufficient memory available"
        ),
        cond(
            "DiskPressure",
            "False",
            "KubeletHasNoDiskPressure",
            "kubelet has no disk pressure"
        ),
        cond(
            "PIDPressure",
            "False",
            "KubeletHasSufficientPID",
            "kubelet has sufficient PID available"
        ),
        ready,
    ])
}

/// Everything of the node's status but the conditions.
fn status_body(config: &KubeletConfig, m: &MachineInfo, runtime_version: &str) -> Value {
    let (capacity, allocatable) = resources(m, config.max_pods);
    json!({
        "capacity": capacity,
        "allocatable": allocatable,
        "addresses": [{"type": "InternalIP", "address": config.node_ip.to_string()},
                      {"type": "Hostname", "address": m.hostname}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": config.port}},
        "nodeInfo": {
            "machineID": m.machine_id, "systemUUID": m.system_uuid, "bootID": m.boot_id,
            "kernelVersion": m.kernel_version, "osImage": m.os_image,
            "containerRuntimeVersion": runtime_version, "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": "", "operatingSystem": "linux", "architecture": std::env::consts::ARCH
                .replace("x86_64", "amd64").replace("aarch64", "arm64"),
        },
    })
}

/// `status.features` and `status.runtimeHandlers` from the runtime's answer (upstream's `NodeFeatures`
/// and `RuntimeHandlers` setters). A runtime that reports no features supports none of them:
/// containerd 1.6 answers without, so its nodes say `supplementalGroupsPolicy: false`, which is what
/// tells users (and the kubelet's admission) that `Strict` cannot be enforced there.
fn runtime_features(body: &mut Value, response: &crate::cri::api::StatusResponse) {
    let features = response.features.as_ref();
    body["features"] = json!({
        "supplementalGroupsPolicy": features.is_some_and(|f| f.supplemental_groups_policy),
    });
    let handlers: Vec<Value> = response
        .runtime_handlers
        .iter()
        .map(|h| {
            let f = h.features.as_ref();
            json!({
                "name": h.name,
                "features": {
                    "recursiveReadOnlyMounts": f.is_some_and(|f| f.recursive_read_only_mounts),
                    "userNamespaces": f.is_some_and(|f| f.user_namespaces),
                },
            })
        })
        .collect();
    if !handlers.is_empty() {
        body["runtimeHandlers"] = Value::Array(handlers);
    }
}

pub(crate) fn labels(config: &KubeletConfig) -> Value {
    let arch = std::env::consts::ARCH
        .replace("x86_64", "amd64")
        .replace("aarch64", "arm64");
    let mut l = serde_json::Map::new();
    for (k, v) in [
        ("kubernetes.io/hostname", config.node_name.as_str()),
        ("kubernetes.io/os", "linux"),
        ("kubernetes.io/arch", arch.as_str()),
        ("beta.kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", arch.as_str()),
    ] {
        l.insert(k.into(), json!(v));
    }
    for (k, v) in &config.node_labels {
        l.insert(k.clone(), json!(v));
    }
    Value::Object(l)
}

/// The node's registration, status and lease.
pub struct NodeStatusManager {
    client: kube::Client,
    config: Arc<KubeletConfig>,
    runtime: Runtime,
    machine: MachineInfo,
    runtime_version: String,
    /// Written by the status loop: the node's pod CIDR once known.
    pub pod_cidr: tokio::sync::watch::Sender<Option<String>>,
}

impl NodeStatusManager {
    pub async fn new(
        client: kube::Client,
        config: Arc<KubeletConfig>,
        runtime: Runtime,
    ) -> Result<NodeStatusManager, String> {
        let v = runtime.version().await.map_err(|e| e.to_string())?;
        Ok(NodeStatusManager {
            machine: MachineInfo::read(&config.root_dir),
            runtime_version: format!(
                "{}://{}",
                v.runtime_name,
                v.runtime_version.trim_start_matches('v')
            ),
            client,
            config,
            runtime,
            pod_cidr: tokio::sync::watch::channel(None).0,
        })
    }

    async fn current_status(&self, previous: &[Value]) -> Value {
        let response = self.runtime.status_response().await.ok();
        let status = response.as_ref().and_then(|r| r.status.as_ref());
        let reason = not_ready_reason(status);
        let mut body = status_body(&self.config, &self.machine, &self.runtime_version);
        if let Some(response) = &response {
            runtime_features(&mut body, response);
        }
        body["conditions"] = conditions(reason.as_deref(), previous, &now_rfc3339());
        body
    }

    /// Registers the node (upstream `registerWithAPIServer`), retrying until it succeeds.
    pub async fn register(&self) -> Node {
        let mut delay = Duration::from_millis(100);
        loop {
            match self.try_register().await {
                Ok(node) => return node,
                Err(e) => {
                    tracing::warn!(node = %self.config.node_name, error = %e, "unable to register node");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(7));
                }
            }
        }
    }

    async fn try_register(&self) -> Result<Node, String> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let status = self.current_status(&[]).await;
        let obj = json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": self.config.node_name, "labels": labels(&self.config),
                         "annotations": {"node.alpha.kubernetes.io/ttl": "0",
                                         "volumes.kubernetes.io/controller-managed-attach-detach": "true"}},
            "status": status,
        });
        let node: Node = serde_json::from_value(obj).map_err(|e| e.to_string())?;
        match nodes.create(&PostParams::default(), &node).await {
            Ok(n) => {
                tracing::info!(node = %self.config.node_name, "node registered");
                // Status is not written by create on a real API server: post it.
                let _ = self.post_status(&status).await;
                Ok(n)
            }
            Err(kube::Error::Api(e)) if e.code == 409 => {
                // Already registered (a restarted kubelet): reconcile the labels we own.
                let patch = json!({"metadata": {"labels": labels(&self.config)}});
                nodes
                    .patch(
                        &self.config.node_name,
                        &PatchParams::default(),
                        &Patch::Merge(&patch),
                    )
                    .await
                    .map_err(|e| format!("node {}: {e}", self.config.node_name))
            }
            Err(e) => Err(format!("node {}: {e}", self.config.node_name)),
        }
    }

    async fn post_status(&self, status: &Value) -> Result<Node, String> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        nodes
            .patch_status(
                &self.config.node_name,
                &PatchParams::default(),
                &Patch::Strategic(&json!({"status": status})),
            )
            .await
            .map_err(|e| format!("node {} status: {e}", self.config.node_name))
    }

    /// The status loop (upstream `syncNodeStatus`); also follows the node's pod CIDR.
    pub async fn run_status(self: Arc<Self>) {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let mut last_posted: Option<(Value, Instant)> = None;
        let mut first = true;
        loop {
            // Until the node is Ready (its pod CIDR assigned, the runtime's network up), look again
            // every half second, as upstream's fastStatusUpdateOnce, so a new node is Ready in about
            // a second rather than after a few status periods.
            let ready = last_posted.as_ref().is_some_and(|(s, _)| is_ready(s));
            if !first {
                tokio::time::sleep(if ready {
                    self.config.node_status_update_frequency
                } else {
                    self.config
                        .node_status_update_frequency
                        .min(FAST_STATUS_PERIOD)
                })
                .await;
            }
            first = false;
            let node = match nodes.get(&self.config.node_name).await {
                Ok(n) => n,
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    // Deleted from under us: register again, as upstream's kubelet does after a restart.
                    self.register().await
                }
                Err(e) => {
                    tracing::warn!(error = %e, "node status: cannot read the node");
                    continue;
                }
            };
            let cidr = node.spec.as_ref().and_then(|s| s.pod_cidr.clone());
            if cidr.is_some() && *self.pod_cidr.borrow() != cidr {
                self.pod_cidr.send_replace(cidr);
            }
            let previous: Vec<Value> = node
                .status
                .as_ref()
                .and_then(|s| serde_json::to_value(&s.conditions).ok())
                .and_then(|v| v.as_array().cloned())
                .unwrap_or_default();
            let status = self.current_status(&previous).await;
            let changed = last_posted.as_ref().is_none_or(|(posted, at)| {
                signature(posted) != signature(&status)
                    || at.elapsed() >= self.config.node_status_report_frequency
            }) || signature_of_node(&previous) != signature(&status)["conditions"];
            if changed {
                match self.post_status(&status).await {
                    Ok(_) => last_posted = Some((status, Instant::now())),
                    Err(e) => tracing::warn!(error = %e, "node status update failed"),
                }
            }
        }
    }

    /// The Lease loop (upstream `nodelease.Controller`): renew every quarter of the lease duration.
    pub async fn run_lease(self: Arc<Self>) {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), LEASE_NAMESPACE);
        let interval =
            Duration::from_secs_f64(self.config.node_lease_duration_seconds as f64 * 0.25);
        let mut cached: Option<Lease> = None;
        loop {
            let now =
                k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
            let result = match cached.take() {
                Some(mut lease) => {
                    lease.spec.get_or_insert_with(Default::default).renew_time = Some(now);
                    leases
                        .replace(&self.config.node_name, &PostParams::default(), &lease)
                        .await
                }
                None => self.get_or_create_lease(&leases, now).await,
            };
            let wait = match result {
                Ok(lease) => {
                    cached = Some(lease);
                    interval
                }
                Err(e) => {
                    tracing::warn!(error = %e, "node lease renewal failed");
                    Duration::from_millis(200)
                }
            };
            tokio::time::sleep(wait).await;
        }
    }

    async fn get_or_create_lease(
        &self,
        leases: &Api<Lease>,
        now: k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime,
    ) -> Result<Lease, kube::Error> {
        let name = &self.config.node_name;
        match leases.get(name).await {
            Ok(mut lease) => {
                let spec = lease.spec.get_or_insert_with(Default::default);
                spec.renew_time = Some(now);
                spec.holder_identity = Some(name.clone());
                spec.lease_duration_seconds = Some(self.config.node_lease_duration_seconds);
                leases.replace(name, &PostParams::default(), &lease).await
            }
            Err(kube::Error::Api(e)) if e.code == 404 => {
                let node_uid = Api::<Node>::all(self.client.clone())
                    .get(name)
                    .await?
                    .metadata
                    .uid
                    .unwrap_or_default();
                let lease: Lease = serde_json::from_value(json!({
                    "metadata": {"name": name, "namespace": LEASE_NAMESPACE,
                                 "ownerReferences": [{"apiVersion": "v1", "kind": "Node", "name": name, "uid": node_uid}]},
                    "spec": {"holderIdentity": name,
                             "leaseDurationSeconds": self.config.node_lease_duration_seconds,
                             "renewTime": now}
                }))
                .map_err(kube::Error::SerdeError)?;
                leases.create(&PostParams::default(), &lease).await
            }
            Err(e) => Err(e),
        }
    }
}

/// What distinguishes two statuses (heartbeat times aside).
/// How often a node that is not Ready yet reads its Node and posts its status.
const FAST_STATUS_PERIOD: Duration = Duration::from_millis(500);

/// Whether a status says Ready=True.
fn is_ready(status: &Value) -> bool {
    status["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
}

fn signature(status: &Value) -> Value {
    let mut s = status.clone();
    if let Some(conds) = s["conditions"].as_array_mut() {
        for c in conds {
            if let Some(o) = c.as_object_mut() {
                o.remove("lastHeartbeatTime");
                o.remove("lastTransitionTime");
            }
        }
    }
    s
}

fn signature_of_node(conditions: &[Value]) -> Value {
    let mut conds: Vec<Value> = conditions.to_vec();
    for c in &mut conds {
        if let Some(o) = c.as_object_mut() {
            o.remove("lastHeartbeatTime");
            o.remove("lastTransitionTime");
        }
    }
    Value::Array(conds)
}

/// The CNI config for a node's pod CIDR: a bridge with host-local IPAM (state under `data_dir`, not the
/// machine-wide /var/lib/cni, so several instances never share allocations), plus portmap for hostPorts.
pub fn cni_conflist(
    bridge: &str,
    pod_cidr: &str,
    ip_masq: bool,
    ipam_dir: &std::path::Path,
) -> Value {
    json!({
        "cniVersion": "0.4.0",
        "name": "rkube",
        "plugins": [
            {
                "type": "bridge",
                "bridge": bridge,
                "isGateway": true,
                "ipMasq": ip_masq,
                "hairpinMode": true,
                "ipam": {
                    "type": "host-local",
                    "dataDir": ipam_dir.display().to_string(),
                    "ranges": [[{"subnet": pod_cidr}]],
                    "routes": [{"dst": "0.0.0.0/0"}]
                }
            },
            {"type": "portmap", "capabilities": {"portMappings": true}}
        ]
    })
}

/// Writes the CNI config when the node's pod CIDR becomes known (and tells the runtime the CIDR, as
/// upstream's `updatePodCIDR` does).
pub async fn run_cni_config(
    config: Arc<KubeletConfig>,
    runtime: Runtime,
    mut pod_cidr: tokio::sync::watch::Receiver<Option<String>>,
) {
    let Some(dir) = config.cni_conf_dir.clone() else {
        return;
    };
    loop {
        let cidr = pod_cidr.borrow_and_update().clone();
        if let Some(cidr) = cidr {
            let conf = cni_conflist(
                &config.cni_bridge_name,
                &cidr,
                config.cni_ip_masq,
                &config.root_dir.join("cni-networks"),
            );
            let path = dir.join("10-rkube.conflist");
            let text = serde_json::to_string_pretty(&conf).unwrap_or_default();
            if std::fs::read_to_string(&path).ok().as_deref() != Some(text.as_str()) {
                let tmp = dir.join(".10-rkube.conflist.tmp");
                let written = std::fs::create_dir_all(&dir)
                    .and_then(|()| std::fs::write(&tmp, &text))
                    .and_then(|()| std::fs::rename(&tmp, &path));
                match written {
                    Ok(()) => tracing::info!(%cidr, path = %path.display(), "CNI config written"),
                    Err(e) => {
                        tracing::error!(error = %e, path = %path.display(), "cannot write the CNI config")
                    }
                }
            }
            let update = crate::cri::api::UpdateRuntimeConfigRequest {
                runtime_config: Some(crate::cri::api::RuntimeConfig {
                    network_config: Some(crate::cri::api::NetworkConfig { pod_cidr: cidr }),
                }),
            };
            if let Err(e) = runtime.runtime.clone().update_runtime_config(update).await {
                tracing::warn!(error = %e, "UpdateRuntimeConfig failed");
            }
        }
        if pod_cidr.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cri::api::{RuntimeCondition, RuntimeStatus};

    #[test]
    fn features_from_the_runtime() {
        use crate::cri::api::{
            RuntimeFeatures, RuntimeHandler, RuntimeHandlerFeatures, StatusResponse,
        };
        // containerd 1.6: no features, no handlers.
        let mut body = json!({});
        runtime_features(&mut body, &StatusResponse::default());
        assert_eq!(
            body,
            json!({"features": {"supplementalGroupsPolicy": false}})
        );
        let newer = StatusResponse {
            features: Some(RuntimeFeatures {
                supplemental_groups_policy: true,
            }),
            runtime_handlers: vec![RuntimeHandler {
                name: "runc".into(),
                features: Some(RuntimeHandlerFeatures {
                    recursive_read_only_mounts: true,
                    user_namespaces: false,
                }),
            }],
            ..Default::default()
        };
        let mut body = json!({});
        runtime_features(&mut body, &newer);
        assert_eq!(body["features"]["supplementalGroupsPolicy"], true);
        assert_eq!(
            body["runtimeHandlers"],
            json!([{"name": "runc", "features": {"recursiveReadOnlyMounts": true, "userNamespaces": false}}])
        );
    }

    #[test]
    fn readiness_from_runtime_conditions() {
        let cond = |t: &str, ok: bool| RuntimeCondition {
            r#type: t.into(),
            status: ok,
            reason: if ok { "" } else { "NetworkPluginNotReady" }.into(),
            message: if ok { "" } else { "cni plugin not initialized" }.into(),
        };
        let ready = RuntimeStatus {
            conditions: vec![cond("RuntimeReady", true), cond("NetworkReady", true)],
        };
        assert_eq!(not_ready_reason(Some(&ready)), None);
        let no_net = RuntimeStatus {
            conditions: vec![cond("RuntimeReady", true), cond("NetworkReady", false)],
        };
        assert_eq!(
            not_ready_reason(Some(&no_net)).as_deref(),
            Some("container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:cni plugin not initialized")
        );
        assert!(not_ready_reason(None).is_some());
    }

    #[test]
    fn conditions_keep_transition_times() {
        let prev = conditions(None, &[], "2026-01-01T00:00:00Z");
        let prev = prev.as_array().unwrap().clone();
        let next = conditions(None, &prev, "2026-01-01T00:00:10Z");
        let ready = &next[3];
        assert_eq!(ready["type"], "Ready");
        assert_eq!(ready["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(ready["lastHeartbeatTime"], "2026-01-01T00:00:10Z");
        let down = conditions(Some("x"), &prev, "2026-01-01T00:00:20Z");
        assert_eq!(down[3]["status"], "False");
        assert_eq!(down[3]["lastTransitionTime"], "2026-01-01T00:00:20Z");
    }

    #[test]
    fn allocatable_subtracts_eviction_thresholds() {
        let m = MachineInfo {
            cpus: 2,
            memory_bytes: 1024 * 1024 * 1024,
            filesystem_bytes: 1000,
            ..Default::default()
        };
        let (cap, alloc) = resources(&m, 110);
        assert_eq!(cap["memory"], "1048576Ki");
        assert_eq!(alloc["memory"], "946176Ki");
        assert_eq!(alloc["ephemeral-storage"], "900");
        assert_eq!(cap["pods"], "110");
    }

    #[test]
    fn cni_config_has_the_pod_cidr() {
        let c = cni_conflist("cni0", "10.42.0.0/24", false, std::path::Path::new("/d"));
        assert_eq!(
            c["plugins"][0]["ipam"]["ranges"][0][0]["subnet"],
            "10.42.0.0/24"
        );
        assert_eq!(c["plugins"][0]["ipam"]["dataDir"], "/d");
        assert_eq!(c["plugins"][0]["ipMasq"], false);
    }
}
