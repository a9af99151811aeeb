//! In-place pod resize, the kubelet's I/O side (upstream `allocation_manager.go`,
//! `kuberuntime_manager.go` `doPodResizeAction`, the status manager's resize conditions): the
//! allocation checkpoint, the resize's admission against the node, CRI `UpdateContainerResources`,
//! restarts asked by `resizePolicy`, and the events `ResizeStarted`, `ResizeCompleted`,
//! `ResizeDeferred`, `ResizeInfeasible` and `ResizeError`. What to do is decided by
//! [`crate::kuberuntime::resize`].
//!
//! Differs from upstream: rkube's kubelet sets no pod-level cgroup limits (neither at creation nor
//! on resize), so only the containers' cgroups change; a deferred resize is retried by its pod's
//! own sync every 30 s rather than by a node-wide retry queue ordered by priority.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::events::EventType;
use k8s_openapi::api::core::v1::{Pod, ResourceRequirements};
use serde_json::json;

use super::{min_requeue, pod_ref, PodContext};
use crate::cri::api;
use crate::kubelet::{lock, Kubelet};
use crate::kuberuntime::pod_actions::{ContainerAction, KillReason};
use crate::kuberuntime::resize::{
    allocation_from_spec, apply_allocation, check_fit, container_resize, decorate_status,
    memory_limit, requests, resize_requested, ContainerResize, PodAllocation,
};
use crate::kuberuntime::status::{PodRecord, RecordState};
use crate::kuberuntime::{self as kr};

/// The checkpoint's name under the kubelet's root dir (upstream's `allocated_pods_state`).
const CHECKPOINT: &str = "allocated_pods_state";
/// A checkpoint larger than this is not read (the node's pods take a few KiB each).
const MAX_CHECKPOINT_BYTES: u64 = 16 << 20;
/// How often a deferred resize is tried again.
const DEFERRED_RETRY: Duration = Duration::from_secs(30);
/// How soon a resize that failed to apply is tried again.
const ERROR_RETRY: Duration = Duration::from_secs(10);

/// The pods' allocations, by pod UID, kept in memory and in the checkpoint.
pub struct Allocations {
    path: PathBuf,
    pods: Mutex<BTreeMap<String, PodAllocation>>,
}

impl Allocations {
    /// Reads the checkpoint of `root_dir`; a missing, oversized or unreadable one starts empty
    /// (the pods' specs are then taken as allocated, as on a first start).
    pub fn load(root_dir: &Path) -> Allocations {
        let path = root_dir.join(CHECKPOINT);
        let pods = std::fs::metadata(&path)
            .ok()
            .filter(|m| m.len() <= MAX_CHECKPOINT_BYTES)
            .and_then(|_| std::fs::read(&path).ok())
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Allocations {
            path,
            pods: Mutex::new(pods),
        }
    }

    pub fn get(&self, uid: &str) -> Option<PodAllocation> {
        lock(&self.pods).get(uid).cloned()
    }

    /// Stores `alloc` for `uid`, writing the checkpoint when it changed.
    pub fn put(&self, uid: &str, alloc: PodAllocation) {
        let mut pods = lock(&self.pods);
        if pods.get(uid) == Some(&alloc) {
            return;
        }
        pods.insert(uid.to_string(), alloc);
        self.save(&pods);
    }

    /// Forgets the pods not in `keep` (gone from the node).
    pub fn retain(&self, keep: &HashSet<String>) {
        let mut pods = lock(&self.pods);
        let before = pods.len();
        pods.retain(|uid, _| keep.contains(uid));
        if pods.len() != before {
            self.save(&pods);
        }
    }

    fn save(&self, pods: &BTreeMap<String, PodAllocation>) {
        let tmp = self.path.with_extension("tmp");
        let written = serde_json::to_vec(pods)
            .map_err(std::io::Error::other)
            .and_then(|b| std::fs::write(&tmp, b))
            .and_then(|_| std::fs::rename(&tmp, &self.path));
        if let Err(e) = written {
            tracing::warn!(path = %self.path.display(), error = %e, "allocation checkpoint not written");
        }
    }
}

fn generation(pod: &Pod) -> i64 {
    pod.metadata.generation.unwrap_or(0)
}

pub(super) fn terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded" | "Failed")
    )
}

/// Upstream's event summary: each container's resources, the generation, an error.
fn summary(prefix: &str, pod: &Pod, error: &str) -> String {
    let spec = pod.spec.clone().unwrap_or_default();
    let list = |cs: &[k8s_openapi::api::core::v1::Container]| -> Vec<serde_json::Value> {
        cs.iter()
            .map(|c| json!({"name": c.name, "resources": c.resources.clone().unwrap_or_default()}))
            .collect()
    };
    let mut s = json!({"generation": generation(pod)});
    let inits = spec.init_containers.clone().unwrap_or_default();
    if !inits.is_empty() {
        s["initContainers"] = json!(list(&inits));
    }
    if !spec.containers.is_empty() {
        s["containers"] = json!(list(&spec.containers));
    }
    if !error.is_empty() {
        s["error"] = json!(error);
    }
    format!("{prefix}: {s}")
}

fn allocatable_amounts(map: &BTreeMap<String, String>) -> (i64, i64) {
    use scheduler::framework::resources::{parse_milli_quantity, parse_quantity};
    let cpu = map
        .get("cpu")
        .and_then(|q| parse_milli_quantity(q).ok())
        .unwrap_or(0);
    let mem = map
        .get("memory")
        .and_then(|q| parse_quantity(q).ok())
        .unwrap_or(0);
    (cpu, mem)
}

/// Container name -> ID of its newest attempt, for those running.
fn running_ids(record: &PodRecord) -> BTreeMap<String, String> {
    record
        .containers
        .iter()
        .filter(|c| c.state == RecordState::Running)
        .filter(|c| record.latest(&c.name).is_some_and(|l| l.id == c.id))
        .map(|c| (c.name.clone(), c.id.clone()))
        .collect()
}

impl Kubelet {
    /// The other admitted pods' allocated requests (upstream `getAllocatedPods`).
    fn others_requests(&self, uid: &str) -> (i64, i64) {
        let pods: Vec<(String, Arc<Pod>)> = lock(&self.pods)
            .iter()
            .filter(|(u, e)| u.as_str() != uid && !e.removed)
            .map(|(u, e)| (u.clone(), e.pod.clone()))
            .collect();
        let mut total = (0i64, 0i64);
        for (u, p) in pods {
            if terminal(&p) {
                continue;
            }
            let (cpu, mem) = match self.allocations.get(&u) {
                Some(a) => requests(&apply_allocation(&p, &a.containers)),
                None => requests(&p),
            };
            total.0 = total.0.saturating_add(cpu);
            total.1 = total.1.saturating_add(mem);
        }
        total
    }

    /// The pod as allocated; a resize its spec asks for is admitted against the node first
    /// (upstream `handlePodResourcesResize`). A pod seen for the first time is allocated its spec.
    pub(super) fn allocate(&self, pod: &Pod) -> Pod {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let keep: HashSet<String> = lock(&self.pods).keys().cloned().collect();
        self.allocations.retain(&keep);
        let Some(mut alloc) = self.allocations.get(&uid) else {
            let alloc = PodAllocation {
                containers: allocation_from_spec(pod),
                ..Default::default()
            };
            self.allocations.put(&uid, alloc);
            return pod.clone();
        };
        let gen = generation(pod);
        if terminal(pod) {
            alloc.pending = None;
        } else if resize_requested(pod, &alloc.containers) {
            let allocatable = allocatable_amounts(&self.node_allocatable);
            match check_fit(requests(pod), self.others_requests(&uid), allocatable) {
                Ok(()) => {
                    alloc.containers = allocation_from_spec(pod);
                    alloc.pending = None;
                    alloc.in_progress = Some((None, gen));
                    self.event(
                        &pod_ref(pod),
                        EventType::Normal,
                        "ResizeStarted",
                        &summary("Pod resize started", pod, ""),
                    );
                }
                Err(p) => {
                    let seen = alloc
                        .pending
                        .as_ref()
                        .is_some_and(|(q, g)| *q == p && *g == gen);
                    if !seen {
                        let reason = if p.reason == "Infeasible" {
                            "ResizeInfeasible"
                        } else {
                            "ResizeDeferred"
                        };
                        let msg = summary(&format!("Pod resize {}", p.reason), pod, &p.message);
                        self.event(&pod_ref(pod), EventType::Warning, reason, &msg);
                    }
                    alloc.pending = Some((p, gen));
                }
            }
        } else {
            // The spec went back to what is allocated: nothing waits.
            alloc.pending = None;
        }
        let allocated = apply_allocation(pod, &alloc.containers);
        self.allocations.put(&uid, alloc);
        allocated
    }

    /// Applies the allocation to the pod's running containers (upstream `doPodResizeAction` and
    /// the resize part of `computePodActions`), records what each new container was given, and
    /// ends the resize once everything runs as allocated. `pod` is the allocated pod.
    pub(super) async fn actuate_resizes(
        self: &Arc<Self>,
        ctx: &PodContext<'_>,
        requeue: &mut Option<Duration>,
    ) {
        let pod = ctx.pod;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let Some(mut alloc) = self.allocations.get(&uid) else {
            return;
        };
        let Ok(record) = kr::pod_record(&self.runtime, &uid).await else {
            return;
        };
        let spec = pod.spec.clone().unwrap_or_default();
        let running = running_ids(&record);
        let qos = kr::config::qos_class(pod);
        let mut error = None;
        let mut restarted = false;
        let resizable = spec.containers.iter().chain(
            spec.init_containers
                .iter()
                .flatten()
                .filter(|c| kr::pod_actions::is_sidecar(c)),
        );
        // Limits that grow are raised on the pod cgroup before its containers, ones that shrink
        // lowered after them (upstream's ordering of pod and container resizes).
        self.write_pod_cgroup(pod, kr::pod_cgroup::Direction::Grow);
        for c in resizable {
            let Some(id) = running.get(&c.name) else {
                continue;
            };
            let allocated = c.resources.clone().unwrap_or_default();
            // A container first seen running was created in a sync that used the current
            // allocation (each sync records the containers it started, at its end).
            let Some(actuated) = alloc.actuated.get(id).cloned() else {
                alloc.actuated.insert(id.clone(), allocated);
                continue;
            };
            match container_resize(c, &actuated) {
                ContainerResize::None => {}
                ContainerResize::Restart => {
                    let action = ContainerAction::Kill {
                        id: id.clone(),
                        reason: KillReason::ResizeRestart,
                    };
                    let is_init = !spec.containers.iter().any(|x| x.name == c.name);
                    let mut inputs = self.status_inputs(&record);
                    // Restarted whatever the pod's restart policy, as upstream.
                    self.apply_action(ctx, c, is_init, "Always", action, &mut inputs, requeue)
                        .await;
                    restarted = true;
                }
                ContainerResize::Update => {
                    match self
                        .update_container(pod, &c.name, id, c, &actuated, &qos)
                        .await
                    {
                        Ok(()) => {
                            alloc.actuated.insert(id.clone(), allocated);
                        }
                        Err(e) => error = Some(e),
                    }
                }
            }
        }
        if error.is_none() {
            self.write_pod_cgroup(pod, kr::pod_cgroup::Direction::Shrink);
        }
        let live: HashSet<&String> = record.containers.iter().map(|c| &c.id).collect();
        alloc.actuated.retain(|id, _| live.contains(id));
        if restarted {
            // The new attempts are recorded by the next sync.
            *requeue = min_requeue(*requeue, Duration::from_secs(1));
        } else if let Some((_, gen)) = alloc.in_progress.clone() {
            match error {
                Some(e) => {
                    if alloc.in_progress.as_ref().and_then(|p| p.0.as_ref()) != Some(&e) {
                        self.event(
                            &pod_ref(pod),
                            EventType::Warning,
                            "ResizeError",
                            &summary("Pod resize error", pod, &e),
                        );
                    }
                    alloc.in_progress = Some((Some(e), gen));
                    *requeue = min_requeue(*requeue, ERROR_RETRY);
                }
                None => {
                    alloc.in_progress = None;
                    self.event(
                        &pod_ref(pod),
                        EventType::Normal,
                        "ResizeCompleted",
                        &summary("Pod resize completed", pod, ""),
                    );
                }
            }
        }
        if alloc
            .pending
            .as_ref()
            .is_some_and(|(p, _)| p.reason == "Deferred")
        {
            *requeue = min_requeue(*requeue, DEFERRED_RETRY);
        }
        self.allocations.put(&uid, alloc);
    }

    /// The pod cgroup's limits for the pod as allocated (a failure is logged: the containers keep
    /// their own limits, as before pod-level limits existed).
    pub(super) fn write_pod_cgroup(&self, pod: &Pod, direction: kr::pod_cgroup::Direction) {
        let parent = kr::config::pod_cgroup_parent(&self.config.cgroup_root, pod);
        let config = kr::pod_cgroup::config_for_pod(pod);
        if let Err(e) = kr::pod_cgroup::write(&parent, &config, direction) {
            tracing::warn!(pod = %super::pod_desc(pod), error = %e, "pod cgroup limits not written");
        }
    }

    /// CRI `UpdateContainerResources` with the container's resources as allocated; a memory limit
    /// below what the container uses now is refused (the kernel would reclaim or OOM-kill).
    async fn update_container(
        &self,
        pod: &Pod,
        name: &str,
        id: &str,
        c: &k8s_openapi::api::core::v1::Container,
        actuated: &ResourceRequirements,
        qos: &str,
    ) -> Result<(), String> {
        let allocated = c.resources.clone().unwrap_or_default();
        if let Some(new) = memory_limit(&allocated) {
            if memory_limit(actuated).is_none_or(|old| new < old) {
                let cgroup = format!(
                    "{}/{id}",
                    kr::config::pod_cgroup_parent(&self.config.cgroup_root, pod)
                );
                let h = crate::stats::cgroup::Hierarchies::detect();
                let usage = crate::stats::cgroup::read(&h, &cgroup)
                    .memory
                    .map(|m| m.usage_bytes);
                if let Some(usage) = usage.filter(|u| *u > new as u64) {
                    return Err(format!(
                        "attempting to set container {name:?} memory limit ({new}) below current usage ({usage})"
                    ));
                }
            }
        }
        let linux = kr::config::linux_resources(c, qos);
        self.runtime
            .runtime
            .clone()
            .update_container_resources(api::UpdateContainerResourcesRequest {
                container_id: id.to_string(),
                linux: Some(linux),
                ..Default::default()
            })
            .await
            .map(|_| ())
            .map_err(|s| {
                format!(
                    "failed to update resources of container {name:?}: {}",
                    s.message()
                )
            })
    }

    /// Adds the resize conditions, `allocatedResources`, `resources` and `observedGeneration`
    /// to a status generated for `pod`.
    pub(super) fn decorate_resize_status(
        &self,
        pod: &Pod,
        record: &PodRecord,
        status: &mut serde_json::Value,
    ) {
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        let alloc = self.allocations.get(uid).unwrap_or_default();
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        decorate_status(status, pod, &alloc, &running_ids(record), &now);
    }
}
