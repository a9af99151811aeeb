//! What a pod consumes of a quota (upstream `pkg/quota/v1/evaluator/core/pods.go`, with
//! `pkg/api/v1/resource`'s `PodRequests`/`PodLimits` and `qos.GetPodQOS`): its requests and limits
//! (init containers as a maximum, restartable sidecars summed, overhead added), the compute resource
//! names it is charged under, the quota scopes it falls in, and whether it is charged at all (terminal
//! pods and pods past their deletion grace period are not).
//!
//! Deliberately different: requests come from the pod spec only; upstream also takes the larger of
//! spec and `status.containerStatuses[].allocatedResources` for in-place resized pods, and honours
//! pod-level `spec.resources` (an alpha feature in 1.33).

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Container, Pod, PodAffinityTerm, ScopedResourceSelectorRequirement,
};

use super::{add, parse_list, ResourceList};
use crate::quantity::Quantity;

/// The resources a pod is charged under (upstream `podResources`).
pub const POD_RESOURCES: &[&str] = &[
    "count/pods",
    "cpu",
    "memory",
    "ephemeral-storage",
    "requests.cpu",
    "requests.memory",
    "requests.ephemeral-storage",
    "limits.cpu",
    "limits.memory",
    "limits.ephemeral-storage",
    "pods",
];

/// Resource names whose presence on every container a quota tracking them requires (upstream's
/// `validationSet`, kept for backward compatibility).
const VALIDATION_SET: &[&str] = &[
    "cpu",
    "memory",
    "requests.cpu",
    "requests.memory",
    "limits.cpu",
    "limits.memory",
];

/// Whether a resource name is native to Kubernetes (upstream `helper.IsNativeResource`).
pub fn is_native_resource(name: &str) -> bool {
    !name.contains('/') || name.contains("kubernetes.io/")
}

/// An extended resource a container may request (upstream `helper.IsExtendedResourceName`).
pub fn is_extended_resource_name(name: &str) -> bool {
    !is_native_resource(name)
        && !name.starts_with("requests.")
        && crate::validation::names::is_qualified_name(&format!("requests.{name}")).is_empty()
}

/// An extended resource as a quota names it: `requests.<domain>/<name>` (upstream
/// `isExtendedResourceNameForQuota`).
fn is_extended_resource_name_for_quota(name: &str) -> bool {
    !is_native_resource(name) && name.starts_with("requests.")
}

/// The quota resources among `input` that pods can consume (upstream `MatchingResources`).
pub fn matching_resources(input: &[String]) -> Vec<String> {
    let mut out = super::intersection(input, POD_RESOURCES);
    for name in input {
        let hugepages = name.starts_with("hugepages-") || name.starts_with("requests.hugepages-");
        if hugepages || is_extended_resource_name_for_quota(name) {
            out.push(name.clone());
        }
    }
    out
}

/// A container's requests (`limits` false) or limits.
pub fn container_list(c: &Container, limits: bool) -> Result<ResourceList, String> {
    let r = c.resources.as_ref();
    let list = if limits {
        r.and_then(|r| r.limits.as_ref())
    } else {
        r.and_then(|r| r.requests.as_ref())
    };
    parse_list(list).map_err(|e| format!("container {}: {e}", c.name))
}

/// `list[k] = max(list[k], other[k])` for every name of `other`.
fn max_into(list: &mut ResourceList, other: &ResourceList) {
    for (k, v) in other {
        if list.get(k).is_none_or(|x| v > x) {
            list.insert(k.clone(), *v);
        }
    }
}

fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// The pod's effective requests or limits: containers summed, init containers as a running maximum
/// where restartable (sidecar) init containers add up and stay, then the overhead (upstream
/// `PodRequests` / `PodLimits`).
fn pod_resources(pod: &Pod, limits: bool, overhead: bool) -> Result<ResourceList, String> {
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(ResourceList::new());
    };
    let mut total = ResourceList::new();
    for c in &spec.containers {
        total = add(&total, &container_list(c, limits)?);
    }
    let mut sidecars = ResourceList::new();
    let mut init_max = ResourceList::new();
    for c in spec.init_containers.iter().flatten() {
        let own = container_list(c, limits)?;
        let effective = if is_sidecar(c) {
            total = add(&total, &own);
            sidecars = add(&sidecars, &own);
            sidecars.clone()
        } else {
            add(&own, &sidecars)
        };
        max_into(&mut init_max, &effective);
    }
    max_into(&mut total, &init_max);
    if !overhead {
        return Ok(total);
    }
    let overhead = parse_list(spec.overhead.as_ref()).map_err(|e| format!("overhead: {e}"))?;
    if limits {
        // Overhead only adds to limits that are set.
        for (k, v) in &overhead {
            if let Some(x) = total.get(k) {
                let sum = x.add(v);
                total.insert(k.clone(), sum);
            }
        }
    } else {
        total = add(&total, &overhead);
    }
    Ok(total)
}

/// The pod's effective requests (upstream `resourcehelper.PodRequests`).
pub fn pod_requests(pod: &Pod) -> Result<ResourceList, String> {
    pod_resources(pod, false, true)
}

/// Requests and limits without the pod overhead (the LimitRanger's own `podRequests` /
/// `podLimits`, which leave it out).
pub fn pod_requests_and_limits_without_overhead(
    pod: &Pod,
) -> Result<(ResourceList, ResourceList), String> {
    Ok((
        pod_resources(pod, false, false)?,
        pod_resources(pod, true, false)?,
    ))
}

/// The pod's effective limits (upstream `resourcehelper.PodLimits`).
pub fn pod_limits(pod: &Pod) -> Result<ResourceList, String> {
    pod_resources(pod, true, true)
}

/// The compute resources requests and limits are charged under (upstream `podComputeUsageHelper`).
pub fn compute_usage(requests: &ResourceList, limits: &ResourceList) -> ResourceList {
    let mut out = ResourceList::new();
    out.insert(
        "pods".into(),
        Quantity::new(1, crate::quantity::Format::DecimalSi),
    );
    for res in ["cpu", "memory", "ephemeral-storage"] {
        if let Some(v) = requests.get(res) {
            out.insert(res.into(), *v);
            out.insert(format!("requests.{res}"), *v);
        }
        if let Some(v) = limits.get(res) {
            out.insert(format!("limits.{res}"), *v);
        }
    }
    for (name, v) in requests {
        if name.starts_with("hugepages-") {
            out.insert(name.clone(), *v);
            out.insert(format!("requests.{name}"), *v);
        }
        if is_extended_resource_name(name) {
            out.insert(format!("requests.{name}"), *v);
        }
    }
    out
}

/// Whether the pod is charged for compute resources (upstream `QuotaV1Pod`): not terminal, and not
/// past its deletion grace period (a pod stuck terminating on a lost node must not block new ones).
pub fn counts_against_quota(pod: &Pod, now: jiff::Timestamp) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Failed") | Some("Succeeded")) {
        return false;
    }
    if let (Some(deleted), Some(grace)) = (
        pod.metadata.deletion_timestamp.as_ref(),
        pod.metadata.deletion_grace_period_seconds,
    ) {
        let end = deleted
            .0
            .checked_add(jiff::SignedDuration::from_secs(grace));
        if end.is_ok_and(|end| now > end) {
            return false;
        }
    }
    true
}

/// What the pod is charged: `count/pods` always; compute resources while it counts (upstream
/// `PodUsageFunc`).
pub fn usage(pod: &Pod, now: jiff::Timestamp) -> Result<ResourceList, String> {
    let mut out = ResourceList::new();
    out.insert(
        "count/pods".into(),
        Quantity::new(1, crate::quantity::Format::DecimalSi),
    );
    if !counts_against_quota(pod, now) {
        return Ok(out);
    }
    let compute = compute_usage(&pod_requests(pod)?, &pod_limits(pod)?);
    Ok(add(&out, &compute))
}

/// Every container must set what a matching quota tracks among cpu and memory requests and limits
/// (upstream `Constraints`); the error lists, per resource, the containers missing it.
pub fn constraints(required: &[String], pod: &Pod) -> Result<(), String> {
    let required: BTreeSet<&str> = required
        .iter()
        .map(String::as_str)
        .filter(|r| VALIDATION_SET.contains(r))
        .collect();
    if required.is_empty() {
        return Ok(());
    }
    let mut missing: BTreeMap<&str, BTreeSet<String>> = BTreeMap::new();
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(());
    };
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        let usage = compute_usage(&container_list(c, false)?, &container_list(c, true)?);
        for r in &required {
            if !usage.contains_key(*r) {
                missing.entry(r).or_default().insert(c.name.clone());
            }
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let parts: Vec<String> = missing
        .iter()
        .map(|(r, names)| {
            format!(
                "{r} for: {}",
                names.iter().cloned().collect::<Vec<_>>().join(",")
            )
        })
        .collect();
    Err(format!("must specify {}", parts.join("; ")))
}

/// The pod's QoS class (upstream `qos.GetPodQOS`: the status field when set, else computed from
/// the containers' cpu and memory).
pub fn qos_class(pod: &Pod) -> String {
    if let Some(q) = pod
        .status
        .as_ref()
        .and_then(|s| s.qos_class.as_deref())
        .filter(|q| !q.is_empty())
    {
        return q.to_string();
    }
    compute_qos_class(pod).to_string()
}

/// Upstream `ComputePodQOS` for container-level resources.
pub fn compute_qos_class(pod: &Pod) -> &'static str {
    let Some(spec) = pod.spec.as_ref() else {
        return "BestEffort";
    };
    let (mut requests, mut limits) = (ResourceList::new(), ResourceList::new());
    let mut guaranteed = true;
    for c in spec
        .containers
        .iter()
        .chain(spec.init_containers.iter().flatten())
    {
        let positive = |list: ResourceList| -> ResourceList {
            list.into_iter()
                .filter(|(k, v)| (k == "cpu" || k == "memory") && v.sign() > 0)
                .collect()
        };
        let reqs = positive(container_list(c, false).unwrap_or_default());
        let lims = positive(container_list(c, true).unwrap_or_default());
        if !(lims.contains_key("cpu") && lims.contains_key("memory")) {
            guaranteed = false;
        }
        requests = add(&requests, &reqs);
        limits = add(&limits, &lims);
    }
    if requests.is_empty() && limits.is_empty() {
        return "BestEffort";
    }
    if guaranteed
        && requests.len() == limits.len()
        && requests.iter().all(|(k, v)| limits.get(k) == Some(v))
    {
        return "Guaranteed";
    }
    "Burstable"
}

/// Upstream `isTerminating`: an active deadline makes a pod terminating.
pub fn is_terminating(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.active_deadline_seconds)
        .is_some_and(|d| d >= 0)
}

fn cross_namespace_term(t: &PodAffinityTerm) -> bool {
    t.namespaces.as_ref().is_some_and(|n| !n.is_empty()) || t.namespace_selector.is_some()
}

/// Whether any pod (anti-)affinity term reaches other namespaces (upstream
/// `usesCrossNamespacePodAffinity`).
pub fn uses_cross_namespace_pod_affinity(pod: &Pod) -> bool {
    let Some(affinity) = pod.spec.as_ref().and_then(|s| s.affinity.as_ref()) else {
        return false;
    };
    let required = |terms: Option<&Vec<PodAffinityTerm>>| {
        terms.into_iter().flatten().any(cross_namespace_term)
    };
    if let Some(a) = &affinity.pod_affinity {
        if required(
            a.required_during_scheduling_ignored_during_execution
                .as_ref(),
        ) || a
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .any(|w| cross_namespace_term(&w.pod_affinity_term))
        {
            return true;
        }
    }
    if let Some(a) = &affinity.pod_anti_affinity {
        if required(
            a.required_during_scheduling_ignored_during_execution
                .as_ref(),
        ) || a
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .any(|w| cross_namespace_term(&w.pod_affinity_term))
        {
            return true;
        }
    }
    false
}

/// Matches a scope selector's operator against a value that may be absent (upstream
/// `ScopedResourceSelectorRequirementsAsSelector` applied to a one-label set).
pub fn selector_matches(
    sel: &ScopedResourceSelectorRequirement,
    value: Option<&str>,
) -> Result<bool, String> {
    let values = sel.values.as_deref().unwrap_or_default();
    match sel.operator.as_str() {
        "In" => Ok(value.is_some_and(|v| values.iter().any(|x| x == v))),
        "NotIn" => Ok(value.is_none_or(|v| !values.iter().any(|x| x == v))),
        "Exists" => Ok(value.is_some()),
        "DoesNotExist" => Ok(value.is_none()),
        other => Err(format!("{other:?} is not a valid scope selector operator")),
    }
}

/// Whether the pod falls in a quota scope (upstream `podMatchesScopeFunc`).
pub fn matches_scope(sel: &ScopedResourceSelectorRequirement, pod: &Pod) -> Result<bool, String> {
    Ok(match sel.scope_name.as_str() {
        "Terminating" => is_terminating(pod),
        "NotTerminating" => !is_terminating(pod),
        "BestEffort" => qos_class(pod) == "BestEffort",
        "NotBestEffort" => qos_class(pod) != "BestEffort",
        "PriorityClass" => {
            let class = pod
                .spec
                .as_ref()
                .and_then(|s| s.priority_class_name.as_deref())
                .filter(|c| !c.is_empty());
            if sel.operator == "Exists" {
                class.is_some()
            } else {
                selector_matches(sel, class)?
            }
        }
        "CrossNamespacePodAffinity" => uses_cross_namespace_pod_affinity(pod),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("pod")
    }

    fn now() -> jiff::Timestamp {
        "2026-01-01T00:01:00Z".parse().expect("time")
    }

    #[test]
    fn usage_of_pods() {
        struct Case {
            name: &'static str,
            pod: serde_json::Value,
            want: &'static str,
        }
        let cases = [
            Case {
                name: "requests and limits",
                pod: json!({"spec": {"containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "100m", "memory": "1Gi"}, "limits": {"cpu": "200m"}}},
                    {"name": "b", "resources": {"requests": {"cpu": "1"}}}]}}),
                want: "count/pods=1,cpu=1100m,limits.cpu=200m,memory=1Gi,pods=1,requests.cpu=1100m,requests.memory=1Gi",
            },
            Case {
                name: "init containers are a maximum, sidecars add up",
                pod: json!({"spec": {
                    "initContainers": [
                        {"name": "init", "resources": {"requests": {"cpu": "2"}}},
                        {"name": "side", "restartPolicy": "Always", "resources": {"requests": {"cpu": "500m"}}}],
                    "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}}),
                want: "count/pods=1,cpu=2,pods=1,requests.cpu=2",
            },
            Case {
                name: "overhead adds to requests and to set limits",
                pod: json!({"spec": {"overhead": {"cpu": "250m", "memory": "100Mi"},
                    "containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}}]}}),
                want: "count/pods=1,cpu=1250m,limits.cpu=1250m,memory=100Mi,pods=1,requests.cpu=1250m,requests.memory=100Mi",
            },
            Case {
                name: "hugepages and extended resources",
                pod: json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"hugepages-2Mi": "4Mi", "example.com/gpu": "2"}}}]}}),
                want: "count/pods=1,hugepages-2Mi=4Mi,pods=1,requests.example.com/gpu=2,requests.hugepages-2Mi=4Mi",
            },
            Case {
                name: "a terminal pod is only counted",
                pod: json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}, "status": {"phase": "Succeeded"}}),
                want: "count/pods=1",
            },
            Case {
                name: "past its grace period",
                pod: json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z", "deletionGracePeriodSeconds": 30},
                    "spec": {"containers": [{"name": "a"}]}}),
                want: "count/pods=1",
            },
            Case {
                name: "within its grace period",
                pod: json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:30Z", "deletionGracePeriodSeconds": 30},
                    "spec": {"containers": [{"name": "a"}]}}),
                want: "count/pods=1,pods=1",
            },
        ];
        for c in cases {
            let got = usage(&pod(c.pod), now()).expect(c.name);
            assert_eq!(super::super::pretty_print(&got), c.want, "{}", c.name);
        }
    }

    #[test]
    fn constraints_name_the_containers_missing_resources() {
        let p = pod(json!({"spec": {
            "initContainers": [{"name": "init", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}}}],
            "containers": [
                {"name": "b", "resources": {"requests": {"cpu": "1"}}},
                {"name": "a"}]}}));
        let req = |r: &[&str]| r.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(constraints(&req(&["pods", "count/pods"]), &p), Ok(()));
        assert_eq!(
            constraints(&req(&["requests.cpu", "limits.memory", "pods"]), &p),
            Err("must specify limits.memory for: a,b; requests.cpu for: a,init".into())
        );
    }

    #[test]
    fn qos_and_scopes() {
        let best = pod(json!({"spec": {"containers": [{"name": "a"}]}}));
        let guaranteed = pod(
            json!({"spec": {"activeDeadlineSeconds": 10, "priorityClassName": "high",
            "containers": [{"name": "a", "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}}]}}),
        );
        let burstable = pod(
            json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}}),
        );
        assert_eq!(compute_qos_class(&best), "BestEffort");
        assert_eq!(compute_qos_class(&guaranteed), "Guaranteed");
        assert_eq!(compute_qos_class(&burstable), "Burstable");
        let sel = |scope: &str, op: &str, values: &[&str]| ScopedResourceSelectorRequirement {
            scope_name: scope.into(),
            operator: op.into(),
            values: Some(values.iter().map(|s| s.to_string()).collect()),
        };
        let cases = [
            (sel("BestEffort", "Exists", &[]), &best, true),
            (sel("BestEffort", "Exists", &[]), &burstable, false),
            (sel("NotBestEffort", "Exists", &[]), &guaranteed, true),
            (sel("Terminating", "Exists", &[]), &guaranteed, true),
            (sel("NotTerminating", "Exists", &[]), &guaranteed, false),
            (
                sel("PriorityClass", "In", &["high", "low"]),
                &guaranteed,
                true,
            ),
            (sel("PriorityClass", "In", &["low"]), &guaranteed, false),
            (sel("PriorityClass", "NotIn", &["low"]), &best, true),
            (sel("PriorityClass", "Exists", &[]), &best, false),
            (sel("PriorityClass", "DoesNotExist", &[]), &best, true),
            (
                sel("CrossNamespacePodAffinity", "Exists", &[]),
                &best,
                false,
            ),
        ];
        for (s, p, want) in cases {
            assert_eq!(matches_scope(&s, p), Ok(want), "{s:?}");
        }
        assert!(matches_scope(&sel("PriorityClass", "Gt", &[]), &best).is_err());
    }

    #[test]
    fn matching_resources_of_pods() {
        let input: Vec<String> = [
            "pods",
            "secrets",
            "requests.hugepages-1Gi",
            "requests.example.com/gpu",
            "requests.cpu",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        assert_eq!(
            matching_resources(&input),
            [
                "pods",
                "requests.cpu",
                "requests.hugepages-1Gi",
                "requests.example.com/gpu"
            ]
        );
    }
}
