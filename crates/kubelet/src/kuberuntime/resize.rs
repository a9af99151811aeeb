//! In-place pod resize (upstream 1.35+ InPlacePodVerticalScaling, GA): what the kubelet decides,
//! as pure functions. Upstream's parts: `pkg/kubelet/allocation` (the allocated resources, admitted
//! against the node: `Infeasible` when the pod alone exceeds the node's allocatable, `Deferred` when
//! the other pods' allocations leave too little), `computePodActions`' resize part (a running
//! container whose applied resources differ from its allocation is updated in place, or restarted
//! when its `resizePolicy` for a changed resource says `RestartContainer`), and the status manager's
//! `PodResizePending`/`PodResizeInProgress` conditions and `allocatedResources`/`resources`.
//!
//! The I/O (CRI `UpdateContainerResources`, the checkpoint, events) is in `crate::sync::resize`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, Pod, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use scheduler::framework::resources::{parse_milli_quantity, parse_quantity, pod_requests};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::pod_actions::is_sidecar;

/// The resources a resize may change.
pub const RESIZABLE: [&str; 2] = ["cpu", "memory"];

/// Why a resize waits (upstream `PodReasonInfeasible`/`PodReasonDeferred`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub reason: String,
    pub message: String,
}

/// What the kubelet holds about one pod's resources: checkpointed, so that a restarted kubelet
/// neither forgets an admitted resize nor re-applies one.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PodAllocation {
    /// Resizable containers (app containers and sidecars) by name: the resources admitted.
    pub containers: BTreeMap<String, ResourceRequirements>,
    /// Container ID -> the resources the runtime was given (at creation or by the last update).
    #[serde(default)]
    pub actuated: BTreeMap<String, ResourceRequirements>,
    /// A resize that could not be allocated, and the pod generation it was decided for.
    #[serde(default)]
    pub pending: Option<(Pending, i64)>,
    /// An allocated resize not yet applied to every container: (error of the last attempt,
    /// generation).
    #[serde(default)]
    pub in_progress: Option<(Option<String>, i64)>,
}

/// Upstream `IsResizableContainer`: app containers and sidecars.
fn resizable(spec: &k8s_openapi::api::core::v1::PodSpec) -> impl Iterator<Item = &Container> {
    spec.containers.iter().chain(
        spec.init_containers
            .iter()
            .flatten()
            .filter(|c| is_sidecar(c)),
    )
}

/// The allocation a pod is admitted with: its resizable containers' resources as in the spec.
pub fn allocation_from_spec(pod: &Pod) -> BTreeMap<String, ResourceRequirements> {
    pod.spec
        .iter()
        .flat_map(resizable)
        .map(|c| (c.name.clone(), c.resources.clone().unwrap_or_default()))
        .collect()
}

/// The pod as allocated (upstream `UpdatePodFromAllocation`): its containers' resources replaced
/// by the allocation where it has them.
pub fn apply_allocation(pod: &Pod, alloc: &BTreeMap<String, ResourceRequirements>) -> Pod {
    let mut pod = pod.clone();
    if let Some(spec) = pod.spec.as_mut() {
        let all = spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten());
        for c in all {
            if let Some(r) = alloc.get(&c.name) {
                c.resources = Some(r.clone());
            }
        }
    }
    pod
}

/// One resource's amount (cpu in millicores, others in units); None when absent or malformed.
fn amount(name: &str, q: Option<&Quantity>) -> Option<i64> {
    let q = q?;
    if name == "cpu" {
        parse_milli_quantity(&q.0).ok()
    } else {
        parse_quantity(&q.0).ok()
    }
}

fn list_amount(r: &ResourceRequirements, list: &str, name: &str) -> (Option<i64>, Option<String>) {
    let l = if list == "requests" {
        r.requests.as_ref()
    } else {
        r.limits.as_ref()
    };
    let q = l.and_then(|l| l.get(name));
    (amount(name, q), q.map(|q| q.0.clone()))
}

/// Does resource `name` differ between `a` and `b` (compared as amounts: "0.5" is "500m")?
pub fn differs_in(a: &ResourceRequirements, b: &ResourceRequirements, name: &str) -> bool {
    ["requests", "limits"].iter().any(|list| {
        let (x, xs) = list_amount(a, list, name);
        let (y, ys) = list_amount(b, list, name);
        // Unparsable quantities compare as text.
        if x.is_none() && y.is_none() {
            xs != ys
        } else {
            x != y
        }
    })
}

/// Do `a` and `b` differ in cpu or memory?
pub fn differs(a: &ResourceRequirements, b: &ResourceRequirements) -> bool {
    RESIZABLE.iter().any(|n| differs_in(a, b, n))
}

/// Does the pod's spec ask for other resources than it was allocated (a resize to decide)?
pub fn resize_requested(pod: &Pod, alloc: &BTreeMap<String, ResourceRequirements>) -> bool {
    pod.spec.iter().flat_map(resizable).any(|c| {
        let want = c.resources.clone().unwrap_or_default();
        alloc.get(&c.name).is_none_or(|have| differs(&want, have))
    })
}

/// cpu (millicores) and memory (bytes) a pod's spec requests of its node. The status is left out:
/// the scheduler's `pod_requests` reads the kubelet's own allocation from it, and once a resize is
/// `Infeasible` only that, which would let the next resize of the pod pass unchecked.
pub fn requests(pod: &Pod) -> (i64, i64) {
    let spec_only = Pod {
        metadata: Default::default(),
        spec: pod.spec.clone(),
        status: None,
    };
    let r = pod_requests(&spec_only);
    (r.milli_cpu, r.memory)
}

/// Upstream's resize admission (1.33+ `canResizePod` and the predicate admit handler): the
/// resized pod must fit the node's allocatable alone (else `Infeasible`, memory named first),
/// and beside the other admitted pods (else `Deferred`, with the scheduler's insufficient-resource
/// message for cpu, then memory).
pub fn check_fit(
    desired: (i64, i64),
    others: (i64, i64),
    allocatable: (i64, i64),
) -> Result<(), Pending> {
    let (cpu, mem) = desired;
    let (cpu_cap, mem_cap) = allocatable;
    if cpu > cpu_cap || mem > mem_cap {
        let what = if mem > mem_cap {
            format!("memory, requested: {mem}, capacity: {mem_cap}")
        } else {
            format!("cpu, requested: {cpu}, capacity: {cpu_cap}")
        };
        return Err(Pending {
            reason: "Infeasible".into(),
            message: format!("Node didn't have enough capacity: {what}"),
        });
    }
    let (cpu_used, mem_used) = others;
    let short = if cpu > 0 && cpu_used.saturating_add(cpu) > cpu_cap {
        Some(("cpu", cpu, cpu_used, cpu_cap))
    } else if mem > 0 && mem_used.saturating_add(mem) > mem_cap {
        Some(("memory", mem, mem_used, mem_cap))
    } else {
        None
    };
    match short {
        Some((name, requested, used, capacity)) => Err(Pending {
            reason: "Deferred".into(),
            message: format!(
                "Node didn't have enough resource: {name}, requested: {requested}, used: {used}, capacity: {capacity}"
            ),
        }),
        None => Ok(()),
    }
}

/// What a running container needs for its allocation.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContainerResize {
    /// Applied as allocated.
    None,
    /// Update its resources in place (`UpdateContainerResources`).
    Update,
    /// Its `resizePolicy` restarts it for a resource that changed.
    Restart,
}

/// The container's `resizePolicy` for `resource` (default `NotRequired`).
fn restart_policy_for<'a>(c: &'a Container, resource: &str) -> &'a str {
    c.resize_policy
        .iter()
        .flatten()
        .find(|p| p.resource_name == resource)
        .map(|p| p.restart_policy.as_str())
        .unwrap_or("NotRequired")
}

/// Upstream `computePodResizeAction` for one running container: `allocated` is its spec as
/// allocated, `actuated` what the runtime was given.
pub fn container_resize(c: &Container, actuated: &ResourceRequirements) -> ContainerResize {
    let allocated = c.resources.clone().unwrap_or_default();
    let changed: Vec<&str> = RESIZABLE
        .iter()
        .copied()
        .filter(|n| differs_in(&allocated, actuated, n))
        .collect();
    if changed.is_empty() {
        ContainerResize::None
    } else if changed
        .iter()
        .any(|n| restart_policy_for(c, n) == "RestartContainer")
    {
        ContainerResize::Restart
    } else {
        ContainerResize::Update
    }
}

/// The `memory` limit (bytes) of `r`, if any.
pub fn memory_limit(r: &ResourceRequirements) -> Option<i64> {
    list_amount(r, "limits", "memory").0
}

/// Only cpu and memory, as status reports them.
fn cpu_memory(list: Option<&BTreeMap<String, Quantity>>) -> Option<BTreeMap<String, Quantity>> {
    let m: BTreeMap<String, Quantity> = list?
        .iter()
        .filter(|(k, _)| RESIZABLE.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    (!m.is_empty()).then_some(m)
}

/// `containerStatuses[].resources`: the cpu and memory requests and limits applied.
pub fn status_resources(r: &ResourceRequirements) -> Value {
    let mut v = json!({});
    if let Some(req) = cpu_memory(r.requests.as_ref()) {
        v["requests"] = json!(req);
    }
    if let Some(lim) = cpu_memory(r.limits.as_ref()) {
        v["limits"] = json!(lim);
    }
    v
}

fn condition(kind: &str, reason: &str, message: &str, generation: i64, since: &str) -> Value {
    let mut c = json!({"type": kind, "status": "True", "lastProbeTime": null,
        "lastTransitionTime": since});
    if !reason.is_empty() {
        c["reason"] = json!(reason);
    }
    if !message.is_empty() {
        c["message"] = json!(message);
    }
    if generation > 0 {
        c["observedGeneration"] = json!(generation);
    }
    c
}

/// Sets the resize conditions and per-container resources in a status the kubelet generated:
/// `PodResizePending` and `PodResizeInProgress` (kept with their transition time while their
/// reason stays), `allocatedResources` (the allocated requests) and `resources` (what the runtime
/// was given, for running containers; the allocation otherwise), and `observedGeneration`.
pub fn decorate_status(
    status: &mut Value,
    pod: &Pod,
    alloc: &PodAllocation,
    running: &BTreeMap<String, String>,
    now: &str,
) {
    let previous: Vec<Value> = status["conditions"].as_array().cloned().unwrap_or_default();
    let since = |kind: &str, reason: &str| {
        previous
            .iter()
            .find(|c| c["type"] == kind && c["reason"].as_str().unwrap_or("") == reason)
            .and_then(|c| c["lastTransitionTime"].as_str().map(String::from))
            .unwrap_or_else(|| now.to_string())
    };
    let mut conditions: Vec<Value> = previous
        .iter()
        .filter(|c| c["type"] != "PodResizePending" && c["type"] != "PodResizeInProgress")
        .cloned()
        .collect();
    if let Some((p, generation)) = &alloc.pending {
        let t = since("PodResizePending", &p.reason);
        conditions.push(condition(
            "PodResizePending",
            &p.reason,
            &p.message,
            *generation,
            &t,
        ));
    }
    if let Some((error, generation)) = &alloc.in_progress {
        let reason = if error.is_some() { "Error" } else { "" };
        let t = since("PodResizeInProgress", reason);
        let message = error.as_deref().unwrap_or("");
        conditions.push(condition(
            "PodResizeInProgress",
            reason,
            message,
            *generation,
            &t,
        ));
    }
    status["conditions"] = Value::Array(conditions);
    if let Some(g) = pod.metadata.generation {
        status["observedGeneration"] = json!(g);
    }
    for list in ["containerStatuses", "initContainerStatuses"] {
        let Some(statuses) = status.get_mut(list).and_then(Value::as_array_mut) else {
            continue;
        };
        for s in statuses {
            let name = s["name"].as_str().unwrap_or("").to_string();
            let Some(allocated) = alloc.containers.get(&name) else {
                continue;
            };
            if let Some(req) = cpu_memory(allocated.requests.as_ref()) {
                s["allocatedResources"] = json!(req);
            }
            let applied = running
                .get(&name)
                .and_then(|id| alloc.actuated.get(id))
                .unwrap_or(allocated);
            s["resources"] = status_resources(applied);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rr(v: Value) -> ResourceRequirements {
        serde_json::from_value(v).unwrap()
    }

    fn pod(resources: Value, policy: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p", "uid": "u", "generation": 2},
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": resources,
                "resizePolicy": policy}],
                "initContainers": [{"name": "init", "image": "busybox",
                    "resources": {"requests": {"cpu": "1"}}},
                    {"name": "side", "image": "busybox", "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "50m"}}}]}
        }))
        .unwrap()
    }

    #[test]
    fn allocations_cover_app_containers_and_sidecars() {
        let p = pod(json!({"limits": {"cpu": "200m"}}), json!([]));
        let alloc = allocation_from_spec(&p);
        assert_eq!(
            alloc.keys().cloned().collect::<Vec<_>>(),
            vec!["c".to_string(), "side".to_string()]
        );
        assert!(!resize_requested(&p, &alloc));
        // "0.3" is "300m": no resize.
        let same = pod(json!({"limits": {"cpu": "0.2"}}), json!([]));
        assert!(!resize_requested(&same, &alloc));
        let bigger = pod(json!({"limits": {"cpu": "300m"}}), json!([]));
        assert!(resize_requested(&bigger, &alloc));
        // The allocated pod runs with what was admitted until the resize is.
        let allocated = apply_allocation(&bigger, &alloc);
        let c = &allocated.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            c.resources.as_ref().unwrap().limits.as_ref().unwrap()["cpu"].0,
            "200m"
        );
    }

    #[test]
    fn requests_are_the_specs_whatever_the_status_says() {
        let mut p = pod(json!({"requests": {"cpu": "3"}}), json!([]));
        p.status = serde_json::from_value(json!({
            "conditions": [{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}],
            "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": true,
                "restartCount": 0, "allocatedResources": {"cpu": "100m"}}]}))
        .unwrap();
        // c's 3 cores, and the sidecar's 50m (the init container's 1 core runs before them).
        assert_eq!(requests(&p).0, 3050);
    }

    #[test]
    fn fit_is_infeasible_over_allocatable_and_deferred_beside_other_pods() {
        let cap = (2000, 4 << 30);
        assert_eq!(check_fit((1500, 1 << 30), (400, 0), cap), Ok(()));
        let infeasible = check_fit((5000, 1 << 30), (0, 0), cap).unwrap_err();
        assert_eq!(infeasible.reason, "Infeasible");
        assert_eq!(
            infeasible.message,
            "Node didn't have enough capacity: cpu, requested: 5000, capacity: 2000"
        );
        // Memory is named first when both exceed the node.
        let both = check_fit((5000, 5 << 30), (0, 0), cap).unwrap_err();
        assert_eq!(
            both.message,
            format!(
                "Node didn't have enough capacity: memory, requested: {}, capacity: {}",
                5i64 << 30,
                4i64 << 30
            )
        );
        let deferred = check_fit((1500, 0), (600, 0), cap).unwrap_err();
        assert_eq!(deferred.reason, "Deferred");
        assert_eq!(
            deferred.message,
            "Node didn't have enough resource: cpu, requested: 1500, used: 600, capacity: 2000"
        );
    }

    #[test]
    fn containers_update_in_place_unless_their_policy_restarts_them() {
        let actuated = rr(json!({"limits": {"cpu": "200m", "memory": "64Mi"}}));
        let cpu_up = pod(
            json!({"limits": {"cpu": "300m", "memory": "64Mi"}}),
            json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"}]),
        );
        let c = &cpu_up.spec.as_ref().unwrap().containers[0];
        assert_eq!(container_resize(c, &actuated), ContainerResize::Update);
        let mem_up = pod(
            json!({"limits": {"cpu": "200m", "memory": "128Mi"}}),
            json!([{"resourceName": "memory", "restartPolicy": "RestartContainer"}]),
        );
        let c = &mem_up.spec.as_ref().unwrap().containers[0];
        assert_eq!(container_resize(c, &actuated), ContainerResize::Restart);
        let same = pod(
            json!({"limits": {"cpu": "0.2", "memory": "64Mi"}}),
            json!([]),
        );
        let c = &same.spec.as_ref().unwrap().containers[0];
        assert_eq!(container_resize(c, &actuated), ContainerResize::None);
        assert_eq!(memory_limit(&actuated), Some(64 << 20));
    }

    #[test]
    fn status_reports_conditions_and_resources() {
        let p = pod(
            json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "300m"}}),
            json!([]),
        );
        let mut alloc = PodAllocation {
            containers: allocation_from_spec(&p),
            ..Default::default()
        };
        alloc.actuated.insert(
            "id1".into(),
            rr(json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}})),
        );
        alloc.in_progress = Some((None, 2));
        alloc.pending = Some((
            Pending {
                reason: "Deferred".into(),
                message: "m".into(),
            },
            2,
        ));
        let mut status = json!({"conditions": [
            {"type": "Ready", "status": "True"},
            {"type": "PodResizePending", "status": "True", "reason": "Deferred",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "containerStatuses": [{"name": "c"}],
            "initContainerStatuses": [{"name": "init"}, {"name": "side"}]});
        let running = BTreeMap::from([("c".to_string(), "id1".to_string())]);
        decorate_status(&mut status, &p, &alloc, &running, "2026-02-02T00:00:00Z");
        let conds = status["conditions"].as_array().unwrap();
        assert_eq!(conds.len(), 3);
        assert_eq!(conds[1]["type"], "PodResizePending");
        assert_eq!(conds[1]["lastTransitionTime"], "2026-01-01T00:00:00Z");
        assert_eq!(conds[1]["observedGeneration"], 2);
        assert_eq!(conds[2]["type"], "PodResizeInProgress");
        assert!(conds[2].get("reason").is_none());
        assert_eq!(conds[2]["lastTransitionTime"], "2026-02-02T00:00:00Z");
        assert_eq!(status["observedGeneration"], 2);
        let c = &status["containerStatuses"][0];
        assert_eq!(c["allocatedResources"], json!({"cpu": "100m"}));
        assert_eq!(
            c["resources"],
            json!({"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}})
        );
        // Regular init containers are not resizable: nothing reported.
        assert!(status["initContainerStatuses"][0]
            .get("allocatedResources")
            .is_none());
        assert_eq!(
            status["initContainerStatuses"][1]["allocatedResources"],
            json!({"cpu": "50m"})
        );
        // Cleared once nothing is pending or in progress.
        decorate_status(
            &mut status,
            &p,
            &PodAllocation::default(),
            &running,
            "2026-02-02T00:00:00Z",
        );
        assert_eq!(status["conditions"].as_array().unwrap().len(), 1);
    }
}
