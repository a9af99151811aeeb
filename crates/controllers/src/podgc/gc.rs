//! Which pods pod GC deletes (pure; upstream `pkg/controller/podgc/gc_controller.go`).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn node_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
}

/// Terminated: any phase but Pending, Running and Unknown (upstream `isPodTerminated`).
pub fn is_terminated(pod: &Pod) -> bool {
    !matches!(phase(pod), "Pending" | "Running" | "Unknown")
}

fn is_evicted(pod: &Pod) -> bool {
    phase(pod) == "Failed"
        && pod.status.as_ref().and_then(|s| s.reason.as_deref()) == Some("Evicted")
}

/// Deletion order: evicted pods first, then oldest first, then by name.
fn by_eviction_and_creation(a: &&Pod, b: &&Pod) -> std::cmp::Ordering {
    is_evicted(b)
        .cmp(&is_evicted(a))
        .then_with(|| {
            a.metadata
                .creation_timestamp
                .cmp(&b.metadata.creation_timestamp)
        })
        .then_with(|| a.metadata.name.cmp(&b.metadata.name))
}

/// The terminated pods beyond `threshold`, in deletion order (0 turns this off).
pub fn terminated_over_threshold<'a>(pods: &[&'a Pod], threshold: usize) -> Vec<&'a Pod> {
    if threshold == 0 {
        return Vec::new();
    }
    let mut terminated: Vec<&Pod> = pods.iter().copied().filter(|p| is_terminated(p)).collect();
    if terminated.len() <= threshold {
        return Vec::new();
    }
    let n = terminated.len() - threshold;
    terminated.sort_by(by_eviction_and_creation);
    terminated.truncate(n);
    terminated
}

/// Terminating pods on nodes that are not Ready and carry the `node.kubernetes.io/out-of-service`
/// taint: their kubelet will not finish them.
pub fn terminating_on_out_of_service<'a>(
    pods: &[&'a Pod],
    node: impl Fn(&str) -> Option<std::sync::Arc<Node>>,
) -> Vec<&'a Pod> {
    let mut out: Vec<&Pod> = pods
        .iter()
        .copied()
        .filter(|p| p.metadata.deletion_timestamp.is_some())
        .filter(|p| {
            node(node_name(p)).is_some_and(|n| {
                let ready = n
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .into_iter()
                    .flatten()
                    .any(|c| c.type_ == "Ready" && c.status == "True");
                let out_of_service = n
                    .spec
                    .as_ref()
                    .and_then(|s| s.taints.as_ref())
                    .into_iter()
                    .flatten()
                    .any(|t| t.key == "node.kubernetes.io/out-of-service");
                !ready && out_of_service
            })
        })
        .collect();
    out.sort_by(by_eviction_and_creation);
    out
}

/// Terminating pods never scheduled: no kubelet will confirm their deletion.
pub fn unscheduled_terminating<'a>(pods: &[&'a Pod]) -> Vec<&'a Pod> {
    pods.iter()
        .copied()
        .filter(|p| p.metadata.deletion_timestamp.is_some() && node_name(p).is_empty())
        .collect()
}

/// Nodes pods are bound to but that are missing from the cache wait out a quarantine before they
/// are checked against the API (upstream: a delaying queue with a 40 s delay).
#[derive(Debug, Default)]
pub struct Quarantine {
    ready_at: HashMap<String, Instant>,
}

impl Quarantine {
    /// Records the missing nodes of this round and returns those whose quarantine is over (to be
    /// confirmed missing with a live read); they leave the quarantine.
    pub fn due(
        &mut self,
        pods: &[&Pod],
        existing: &HashSet<String>,
        now: Instant,
        quarantine: Duration,
    ) -> Vec<String> {
        for pod in pods {
            let node = node_name(pod);
            if !node.is_empty() && !existing.contains(node) {
                self.ready_at
                    .entry(node.to_string())
                    .or_insert(now + quarantine);
            }
        }
        let mut due: Vec<String> = self
            .ready_at
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(n, _)| n.clone())
            .collect();
        due.sort();
        for n in &due {
            self.ready_at.remove(n);
        }
        due.retain(|n| !existing.contains(n));
        due
    }
}

/// The pods bound to any of `deleted` nodes.
pub fn orphaned<'a>(pods: &[&'a Pod], deleted: &HashSet<String>) -> Vec<&'a Pod> {
    pods.iter()
        .copied()
        .filter(|p| deleted.contains(node_name(p)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, phase: &str, created: &str, node: &str) -> Pod {
        serde_json::from_value(
            json!({"metadata": {"name": name, "creationTimestamp": created},
            "spec": {"nodeName": node, "containers": []}, "status": {"phase": phase}}),
        )
        .unwrap()
    }

    #[test]
    fn oldest_terminated_pods_over_the_threshold() {
        let pods = [
            pod("new", "Succeeded", "2024-01-03T00:00:00Z", "n"),
            pod("old", "Failed", "2024-01-01T00:00:00Z", "n"),
            pod("mid", "Succeeded", "2024-01-02T00:00:00Z", "n"),
            pod("run", "Running", "2023-01-01T00:00:00Z", "n"),
        ];
        let refs: Vec<&Pod> = pods.iter().collect();
        let names = |v: Vec<&Pod>| -> Vec<String> {
            v.iter().map(|p| p.metadata.name.clone().unwrap()).collect()
        };
        assert_eq!(names(terminated_over_threshold(&refs, 1)), ["old", "mid"]);
        assert!(terminated_over_threshold(&refs, 3).is_empty());
        assert!(terminated_over_threshold(&refs, 0).is_empty());
        let mut evicted = pod("evicted", "Failed", "2024-02-01T00:00:00Z", "n");
        evicted.status.as_mut().unwrap().reason = Some("Evicted".into());
        let refs2: Vec<&Pod> = refs.iter().copied().chain([&evicted]).collect();
        assert_eq!(names(terminated_over_threshold(&refs2, 3)), ["evicted"]);
    }

    #[test]
    fn missing_nodes_wait_out_the_quarantine() {
        let pods = [pod("a", "Running", "2024-01-01T00:00:00Z", "gone")];
        let refs: Vec<&Pod> = pods.iter().collect();
        let mut q = Quarantine::default();
        let t0 = Instant::now();
        let q40 = Duration::from_secs(40);
        let existing = HashSet::new();
        assert!(q.due(&refs, &existing, t0, q40).is_empty());
        assert!(q
            .due(&refs, &existing, t0 + Duration::from_secs(20), q40)
            .is_empty());
        assert_eq!(q.due(&refs, &existing, t0 + q40, q40), ["gone"]);
        // A node that came back is not reported.
        let back = HashSet::from(["gone".to_string()]);
        assert!(q.due(&refs, &existing, t0 + q40 * 2, q40).is_empty());
        assert!(q.due(&refs, &back, t0 + q40 * 4, q40).is_empty());
        let deleted = HashSet::from(["gone".to_string()]);
        assert_eq!(orphaned(&refs, &deleted).len(), 1);
    }

    #[test]
    fn terminating_pods_without_node_or_on_out_of_service_nodes() {
        let mut p = pod("a", "Running", "2024-01-01T00:00:00Z", "");
        p.metadata.deletion_timestamp = p.metadata.creation_timestamp.clone();
        let mut q = pod("b", "Running", "2024-01-01T00:00:00Z", "n1");
        q.metadata.deletion_timestamp = q.metadata.creation_timestamp.clone();
        let refs = [&p, &q];
        assert_eq!(unscheduled_terminating(&refs).len(), 1);
        let node: Node = serde_json::from_value(json!({"metadata": {"name": "n1"},
            "spec": {"taints": [{"key": "node.kubernetes.io/out-of-service", "effect": "NoExecute"}]},
            "status": {"conditions": [{"type": "Ready", "status": "False"}]}}))
        .unwrap();
        let node = std::sync::Arc::new(node);
        let found = terminating_on_out_of_service(&refs, |n| (n == "n1").then(|| node.clone()));
        assert_eq!(found[0].metadata.name.as_deref(), Some("b"));
    }
}
