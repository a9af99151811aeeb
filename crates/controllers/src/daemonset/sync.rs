//! The pure part of the DaemonSet controller (upstream `daemon_controller.go`, `update.go` and
//! `daemon/util`): which nodes should run a daemon pod, the pod for a node (pinned by node affinity,
//! with the daemon tolerations), what `manage` and the rolling update create and delete, and the
//! status.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::DaemonSet;
use k8s_openapi::api::core::v1::{Node, Pod, Toleration};
use scheduler::framework::NodeInfo;
use scheduler::plugins::node_affinity::required_node_affinity_matches;
use scheduler::plugins::taint_toleration::tolerations_tolerate_taint;
use serde_json::{json, Value};

/// Pod and revision label with the template hash (upstream `DefaultDaemonSetUniqueLabelKey`).
pub const HASH_LABEL: &str = "controller-revision-hash";
/// Pod label with the DaemonSet's template generation (upstream `DaemonSetTemplateGenerationKey`).
pub const GENERATION_LABEL: &str = "pod-template-generation";
/// The annotation the API server keeps the template generation in for apps/v1.
pub const GENERATION_ANNOTATION: &str = "deprecated.daemonset.template.generation";

/// Upstream `controller.ComputeHash`: FNV-1a of the template, then the collision count's 4 bytes
/// (little endian), safe-encoded. We hash our JSON form of the template.
pub fn template_hash(template: &Value, collision_count: Option<i32>) -> String {
    let bytes = serde_json::to_vec(template).unwrap_or_default();
    let probe = collision_count
        .map(|c| (c as u32).to_le_bytes().to_vec())
        .unwrap_or_default();
    crate::history::safe_encode(crate::history::fnv32a(&[&bytes, &probe]))
}

/// The template generation: the annotation the API server maintains, else `metadata.generation`
/// (our API server does not set the annotation yet).
pub fn template_generation(ds: &DaemonSet) -> Option<i64> {
    ds.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(GENERATION_ANNOTATION))
        .and_then(|g| g.parse().ok())
        .or(ds.metadata.generation)
}

fn toleration(key: &str, effect: &str) -> Value {
    json!({"key": key, "operator": "Exists", "effect": effect})
}

/// Upstream `AddOrUpdateDaemonPodTolerations`: daemon pods tolerate not-ready and unreachable nodes
/// (without a time limit), node pressure and unschedulable nodes, and, with host networking, nodes
/// whose network is not ready.
pub fn add_daemon_tolerations(spec: &mut Value) {
    let mut wanted = vec![
        toleration("node.kubernetes.io/not-ready", "NoExecute"),
        toleration("node.kubernetes.io/unreachable", "NoExecute"),
        toleration("node.kubernetes.io/disk-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/memory-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/pid-pressure", "NoSchedule"),
        toleration("node.kubernetes.io/unschedulable", "NoSchedule"),
    ];
    if spec["hostNetwork"] == json!(true) {
        wanted.push(toleration(
            "node.kubernetes.io/network-unavailable",
            "NoSchedule",
        ));
    }
    let mut list: Vec<Value> = spec["tolerations"].as_array().cloned().unwrap_or_default();
    for t in wanted {
        // A toleration of the same key, operator, value and effect is replaced (upstream
        // `AddOrUpdateTolerationInPodSpec`), so a tolerationSeconds there does not survive.
        let same = |x: &Value| {
            x["key"] == t["key"]
                && x["operator"] == t["operator"]
                && x["effect"] == t["effect"]
                && x.get("value")
                    .is_none_or(|v| v.as_str().is_none_or(str::is_empty))
        };
        match list.iter_mut().find(|x| same(x)) {
            Some(existing) => *existing = t,
            None => list.push(t),
        }
    }
    spec["tolerations"] = json!(list);
}

/// The node a daemon pod is for: its nodeName, else the name its required node affinity pins
/// (upstream `GetTargetNodeName`).
pub fn target_node(pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    if let Some(n) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
        return Some(n.to_string());
    }
    let terms = &spec
        .affinity
        .as_ref()?
        .node_affinity
        .as_ref()?
        .required_during_scheduling_ignored_during_execution
        .as_ref()?
        .node_selector_terms;
    terms
        .iter()
        .flat_map(|t| t.match_fields.iter().flatten())
        .find_map(|f| {
            let values = f.values.as_deref().unwrap_or_default();
            (f.key == "metadata.name" && f.operator == "In" && values.len() == 1)
                .then(|| values[0].clone())
        })
}

/// The pod for `node` from the DaemonSet's template (upstream `NewPod` plus
/// `ReplaceDaemonSetPodNodeNameNodeAffinity`): the required node affinity becomes a single
/// `metadata.name` field match, so the scheduler binds it there.
pub fn new_pod(ds: &DaemonSet, template: &Value, node: &str, hash: &str) -> Value {
    let name = ds.metadata.name.as_deref().unwrap_or("");
    let mut meta = template
        .get("metadata")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if !meta["labels"].is_object() {
        meta["labels"] = json!({});
    }
    meta["labels"][HASH_LABEL] = json!(hash);
    if let Some(g) = template_generation(ds) {
        meta["labels"][GENERATION_LABEL] = json!(g.to_string());
    }
    meta["generateName"] = json!(format!("{name}-"));
    meta["namespace"] = json!(ds.metadata.namespace);
    meta["ownerReferences"] = json!([crate::history::controller_ref(&ds.metadata, "DaemonSet")]);
    if let Some(m) = meta.as_object_mut() {
        m.remove("creationTimestamp");
    }
    let mut spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
    if !spec["affinity"].is_object() {
        spec["affinity"] = json!({});
    }
    if !spec["affinity"]["nodeAffinity"].is_object() {
        spec["affinity"]["nodeAffinity"] = json!({});
    }
    spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"] = json!({
        "nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}]
    });
    add_daemon_tolerations(&mut spec);
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
}

/// Upstream `NodeShouldRunDaemonPod`: (should run, should keep running). The template's nodeName,
/// nodeSelector and required node affinity must match; untolerated NoSchedule taints stop new pods,
/// untolerated NoExecute ones also evict. Unschedulable nodes are tolerated like a taint.
pub fn node_should_run(ds: &DaemonSet, node: &Arc<Node>) -> (bool, bool) {
    let template = ds.spec.as_ref().map(|s| &s.template);
    let node_name = node.metadata.name.as_deref().unwrap_or("");
    let mut spec = template
        .and_then(|t| t.spec.as_ref())
        .map(|s| serde_json::to_value(s).unwrap_or_default())
        .unwrap_or_else(|| json!({}));
    if let Some(n) = spec["nodeName"].as_str() {
        if !n.is_empty() && n != node_name {
            return (false, false);
        }
    }
    spec["nodeName"] = json!(node_name);
    add_daemon_tolerations(&mut spec);
    let tolerations: Vec<Toleration> =
        serde_json::from_value(spec["tolerations"].clone()).unwrap_or_default();
    let Ok(pod) = serde_json::from_value::<Pod>(json!({"metadata": {}, "spec": spec})) else {
        return (false, false);
    };
    if !required_node_affinity_matches(&pod, &NodeInfo::new(node.clone())) {
        return (false, false);
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default();
    let untolerated = |effect: &str| {
        taints
            .iter()
            .any(|t| t.effect == effect && !tolerations_tolerate_taint(&tolerations, t))
    };
    let evicted = untolerated("NoExecute");
    (!evicted && !untolerated("NoSchedule"), !evicted)
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn ready_since(pod: &Pod) -> Option<Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .map_or(Timestamp::UNIX_EPOCH, |t| t.0)
        })
}

pub fn is_ready(pod: &Pod) -> bool {
    ready_since(pod).is_some()
}

/// Upstream `IsPodAvailable`: ready for at least minReadySeconds.
pub fn is_available(pod: &Pod, min_ready: i64, now: Timestamp) -> bool {
    ready_since(pod)
        .is_some_and(|s| min_ready == 0 || s + jiff::SignedDuration::from_secs(min_ready) <= now)
}

/// When a ready pod will become available, if later than now.
pub fn available_at(pod: &Pod, min_ready: i64, now: Timestamp) -> Option<Timestamp> {
    let at = ready_since(pod)? + jiff::SignedDuration::from_secs(min_ready);
    (min_ready > 0 && at > now).then_some(at)
}

fn label<'a>(pod: &'a Pod, key: &str) -> Option<&'a str> {
    pod.metadata.labels.as_ref()?.get(key).map(String::as_str)
}

/// Upstream `IsPodUpdated`: the template generation or the hash matches.
pub fn is_updated(pod: &Pod, hash: &str, generation: Option<i64>) -> bool {
    let gen_match =
        generation.is_some_and(|g| label(pod, GENERATION_LABEL) == Some(g.to_string().as_str()));
    gen_match || label(pod, HASH_LABEL) == Some(hash)
}

fn created(pod: &Pod) -> Option<Timestamp> {
    pod.metadata.creation_timestamp.as_ref().map(|t| t.0)
}

fn name(pod: &Pod) -> String {
    pod.metadata.name.clone().unwrap_or_default()
}

/// The daemon pods by target node, oldest first; terminal pods already being deleted are left out
/// (upstream `getNodesToDaemonPods`).
pub fn pods_by_node(pods: &[Arc<Pod>]) -> BTreeMap<String, Vec<Arc<Pod>>> {
    let mut map: BTreeMap<String, Vec<Arc<Pod>>> = BTreeMap::new();
    for pod in pods {
        let terminal = matches!(phase(pod), "Succeeded" | "Failed");
        if terminal && pod.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if let Some(node) = target_node(pod) {
            map.entry(node).or_default().push(pod.clone());
        }
    }
    for list in map.values_mut() {
        list.sort_by_key(|p| (created(p), name(p)));
    }
    map
}

/// One sync's creates (node names) and deletes (pod names).
#[derive(Debug, Default, PartialEq)]
pub struct Changes {
    pub create: Vec<String>,
    pub delete: Vec<String>,
}

/// (maxSurge, maxUnavailable) against the number of nodes that should run the pod, rounded up; never
/// both zero (upstream `updatedDesiredNodeCounts`).
pub fn surge_and_unavailable(ds: &DaemonSet, desired: i32) -> (i32, i32) {
    let ru = ds
        .spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref())
        .map(|r| serde_json::to_value(r).unwrap_or_default())
        .unwrap_or_default();
    let scaled = |v: Option<&Value>, default: i32| match v {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(0) as i32,
        Some(Value::String(s)) => {
            let pct: f64 = s.trim_end_matches('%').parse().unwrap_or(0.0);
            (pct * f64::from(desired) / 100.0).ceil() as i32
        }
        _ => default,
    };
    let surge = scaled(ru.get("maxSurge"), 0);
    let unavailable = scaled(ru.get("maxUnavailable"), 1);
    if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable)
    }
}

fn rolling(ds: &DaemonSet) -> bool {
    ds.spec
        .as_ref()
        .and_then(|s| s.update_strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate")
        == "RollingUpdate"
}

/// Upstream `manage` (`podsShouldBeOnNode` per node, then unscheduled pods of vanished nodes).
pub fn manage(
    ds: &DaemonSet,
    nodes: &[Arc<Node>],
    by_node: &BTreeMap<String, Vec<Arc<Pod>>>,
    hash: &str,
    now: Timestamp,
) -> Changes {
    let mut c = Changes::default();
    let min_ready = ds
        .spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0) as i64;
    let (surge, _) = surge_and_unavailable(ds, 0);
    let use_surge = rolling(ds) && surge > 0;
    let empty = Vec::new();
    for node in nodes {
        let node_name = node.metadata.name.clone().unwrap_or_default();
        let pods = by_node.get(&node_name).unwrap_or(&empty);
        let (should_run, should_continue) = node_should_run(ds, node);
        if should_run && pods.is_empty() {
            c.create.push(node_name);
            continue;
        }
        if !should_continue {
            c.delete.extend(
                pods.iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .map(|p| name(p)),
            );
            continue;
        }
        let mut running: Vec<&Arc<Pod>> = Vec::new();
        for pod in pods {
            if pod.metadata.deletion_timestamp.is_some() {
                continue;
            }
            if phase(pod) == "Failed" {
                // Replaced by a new pod on a later sync.
                c.delete.push(name(pod));
                continue;
            }
            running.push(pod);
        }
        if !use_surge {
            // One pod per node: the oldest stays.
            c.delete.extend(running.iter().skip(1).map(|p| name(p)));
        } else {
            let (mut oldest_new, mut oldest_old) = (None, None);
            for pod in &running {
                let slot = if label(pod, HASH_LABEL) == Some(hash) {
                    &mut oldest_new
                } else {
                    &mut oldest_old
                };
                if slot.is_none() {
                    *slot = Some(*pod);
                } else {
                    c.delete.push(name(pod));
                }
            }
            if let (Some(new), Some(old)) = (oldest_new, oldest_old) {
                if !is_ready(old) || is_available(new, min_ready, now) {
                    c.delete.push(name(old));
                }
            }
        }
    }
    // Pods for nodes that no longer exist and were never scheduled (upstream
    // `getUnscheduledPodsWithoutNode`); bound ones are the pod garbage collector's.
    for (node, pods) in by_node {
        if nodes
            .iter()
            .any(|n| n.metadata.name.as_deref() == Some(node))
        {
            continue;
        }
        for pod in pods {
            let bound = pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_some_and(|n| !n.is_empty());
            if !bound && pod.metadata.deletion_timestamp.is_none() {
                c.delete.push(name(pod));
            }
        }
    }
    c
}

/// A node's updated pod and old pod, either possibly missing.
type NewAndOld<'a> = (Option<&'a Arc<Pod>>, Option<&'a Arc<Pod>>);

/// Upstream `findUpdatedPodsOnNode`: the node's one new and one old live pod, or None when it has
/// more than one of either.
fn updated_and_old<'a>(
    pods: &'a [Arc<Pod>],
    hash: &str,
    generation: Option<i64>,
) -> Option<NewAndOld<'a>> {
    let (mut new, mut old) = (None, None);
    for pod in pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let slot = if is_updated(pod, hash, generation) {
            &mut new
        } else {
            &mut old
        };
        if slot.is_some() {
            return None;
        }
        *slot = Some(pod);
    }
    Some((new, old))
}

/// Upstream `rollingUpdate`: old pods to delete (maxSurge 0), or nodes to surge onto and old pods
/// whose replacement is available (maxSurge > 0).
pub fn rolling_update(
    ds: &DaemonSet,
    nodes: &[Arc<Node>],
    by_node: &BTreeMap<String, Vec<Arc<Pod>>>,
    hash: &str,
    now: Timestamp,
) -> Changes {
    let mut c = Changes::default();
    if !rolling(ds) {
        return c;
    }
    let min_ready = ds
        .spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0) as i64;
    let desired = nodes.iter().filter(|n| node_should_run(ds, n).0).count() as i32;
    let (max_surge, max_unavailable) = surge_and_unavailable(ds, desired);
    let generation = template_generation(ds);
    if max_surge == 0 {
        let (mut unavailable, mut replace, mut candidates) = (0, Vec::new(), Vec::new());
        for pods in by_node.values() {
            let Some((new, old)) = updated_and_old(pods, hash, generation) else {
                unavailable += 1;
                continue;
            };
            match (new, old) {
                (None, None) | (Some(_), Some(_)) => unavailable += 1,
                (Some(new), None) => {
                    if !is_available(new, min_ready, now) {
                        unavailable += 1;
                    }
                }
                (None, Some(old)) => {
                    if !is_available(old, min_ready, now) {
                        replace.push(name(old));
                    } else if unavailable < max_unavailable {
                        candidates.push(name(old));
                    }
                }
            }
        }
        let room = (max_unavailable - unavailable).max(0) as usize;
        c.delete = replace;
        c.delete.extend(candidates.into_iter().take(room));
        return c;
    }
    let (mut surged, mut allowed, mut candidates) = (0, Vec::new(), Vec::new());
    for (node, pods) in by_node {
        let Some((new, old)) = updated_and_old(pods, hash, generation) else {
            surged += 1;
            continue;
        };
        match (new, old) {
            (_, None) => {}
            (None, Some(old)) => {
                if !is_available(old, min_ready, now) {
                    allowed.push(node.clone());
                } else if surged < max_surge {
                    candidates.push(node.clone());
                }
            }
            (Some(new), Some(old)) => {
                if is_available(new, min_ready, now) {
                    c.delete.push(name(old));
                } else {
                    surged += 1;
                }
            }
        }
    }
    let room = (max_surge - surged).max(0) as usize;
    c.create = allowed;
    c.create.extend(candidates.into_iter().take(room));
    c
}

/// Upstream `updateDaemonSetStatus`'s counts.
pub fn status(
    ds: &DaemonSet,
    nodes: &[Arc<Node>],
    by_node: &BTreeMap<String, Vec<Arc<Pod>>>,
    hash: &str,
    now: Timestamp,
) -> Value {
    let min_ready = ds
        .spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0) as i64;
    let generation = template_generation(ds);
    let mut n: HashMap<&str, i64> = HashMap::new();
    for node in nodes {
        let (should_run, _) = node_should_run(ds, node);
        let pods = by_node.get(node.metadata.name.as_deref().unwrap_or(""));
        let oldest = pods.and_then(|p| p.first());
        if should_run {
            *n.entry("desiredNumberScheduled").or_default() += 1;
            let Some(pod) = oldest else { continue };
            *n.entry("currentNumberScheduled").or_default() += 1;
            if is_ready(pod) {
                *n.entry("numberReady").or_default() += 1;
                if is_available(pod, min_ready, now) {
                    *n.entry("numberAvailable").or_default() += 1;
                }
            }
            if is_updated(pod, hash, generation) {
                *n.entry("updatedNumberScheduled").or_default() += 1;
            }
        } else if oldest.is_some() {
            *n.entry("numberMisscheduled").or_default() += 1;
        }
    }
    let get = |k: &str| n.get(k).copied().unwrap_or(0);
    json!({
        "observedGeneration": ds.metadata.generation.unwrap_or(0),
        "desiredNumberScheduled": get("desiredNumberScheduled"),
        "currentNumberScheduled": get("currentNumberScheduled"),
        "numberMisscheduled": get("numberMisscheduled"),
        "numberReady": get("numberReady"),
        "updatedNumberScheduled": get("updatedNumberScheduled"),
        "numberAvailable": get("numberAvailable"),
        "numberUnavailable": get("desiredNumberScheduled") - get("numberAvailable"),
    })
}
