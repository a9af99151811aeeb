//! What the ReplicaSet controller waits to see of its own creates and deletes (upstream
//! `UIDTrackingControllerExpectations`), and what pod events tell it (upstream `replica_set.go`'s
//! `addPod`/`updatePod`/`deletePod`), kept apart from the informer wiring so event sequences can be
//! tested.
//!
//! Deletions are tracked by pod, not counted: a graceful deletion is reported twice (the update
//! that sets `deletionTimestamp`, then the deletion a grace period later) and both count as the
//! deletion observed, once. Counting instead (and skipping deletions that carry a
//! `deletionTimestamp` to avoid counting twice) stalled a ReplicaSet whenever it deleted a pod that
//! was already terminating: that DELETE changes nothing, so no update follows, and the expectation
//! waited out its five-minute timeout (the density bench's rolling-update stall).

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, MutexGuard};
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;

use super::{OwnerKind, EXPECTATIONS_TIMEOUT};

/// The pod's key as expectations track it (upstream `PodKey`).
pub fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.name.as_deref().unwrap_or("")
    )
}

struct Pending {
    /// Creates not yet seen.
    adds: i64,
    /// Pods deleted and not yet seen terminating or gone. At most `BURST_REPLICAS` per sync.
    deletes: HashSet<String>,
    at: Instant,
}

/// Per controller key: the creates and the deletes (by pod) it waits to see.
#[derive(Default)]
pub struct UidTrackingExpectations {
    pending: Mutex<HashMap<String, Pending>>,
}

impl UidTrackingExpectations {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The controller is about to create `count` pods (replaces what it waited for).
    pub fn expect_creations(&self, key: &str, count: usize) {
        self.lock().insert(
            key.to_string(),
            Pending {
                adds: count as i64,
                deletes: HashSet::new(),
                at: Instant::now(),
            },
        );
    }

    /// The controller is about to delete these pods (replaces what it waited for).
    pub fn expect_deletions(&self, key: &str, pods: impl IntoIterator<Item = String>) {
        self.lock().insert(
            key.to_string(),
            Pending {
                adds: 0,
                deletes: pods.into_iter().collect(),
                at: Instant::now(),
            },
        );
    }

    /// `count` creates seen (or never to be seen: they failed or were skipped).
    pub fn creations_observed(&self, key: &str, count: usize) {
        if let Some(p) = self.lock().get_mut(key) {
            p.adds -= count as i64;
        }
    }

    /// The pod is terminating or gone; counts only if we were waiting for it.
    pub fn deletion_observed(&self, key: &str, pod: &str) {
        if let Some(p) = self.lock().get_mut(key) {
            p.deletes.remove(pod);
        }
    }

    /// Nothing awaited, or what was awaited is older than the timeout (upstream
    /// `SatisfiedExpectations`).
    pub fn satisfied(&self, key: &str) -> bool {
        match self.lock().get(key) {
            None => true,
            Some(p) => {
                (p.adds <= 0 && p.deletes.is_empty()) || p.at.elapsed() > EXPECTATIONS_TIMEOUT
            }
        }
    }

    pub fn forget(&self, key: &str) {
        self.lock().remove(key);
    }
}

/// Turns pod events into observed creates and deletes; each method returns the owner keys to sync.
pub struct PodEvents<'a> {
    pub kind: OwnerKind,
    pub expectations: &'a UidTrackingExpectations,
}

impl PodEvents<'_> {
    fn owner_key(&self, pod: &Pod) -> Option<String> {
        crate::controller_key(&pod.metadata, self.kind.kind)
    }

    /// The controller is about to delete these pods of `key`.
    pub fn deleting(&self, key: &str, pods: &[&Pod]) {
        self.expectations
            .expect_deletions(key, pods.iter().map(|p| pod_key(p)));
    }

    /// A delete request that will not be observed (not found, or failed).
    pub fn delete_not_observed(&self, key: &str, pod: &Pod) {
        self.expectations.deletion_observed(key, &pod_key(pod));
    }

    /// A pod seen terminating or gone: a deletion observed for its controller (upstream
    /// `deletePod`, which `updatePod` and `addPod` call for a pod with a deletionTimestamp).
    fn gone(&self, pod: &Pod) -> Option<String> {
        let key = self.owner_key(pod)?;
        self.expectations.deletion_observed(&key, &pod_key(pod));
        Some(key)
    }

    /// A new pod; one already terminating (a relist after a restart) counts as deleted.
    pub fn added(&self, pod: &Pod) -> Vec<String> {
        if pod.metadata.deletion_timestamp.is_some() {
            return self.gone(pod).into_iter().collect();
        }
        let Some(key) = self.owner_key(pod) else {
            return Vec::new();
        };
        self.expectations.creations_observed(&key, 1);
        vec![key]
    }

    pub fn updated(&self, old: &Pod, new: &Pod) -> Vec<String> {
        let mut keys = Vec::new();
        if new.metadata.deletion_timestamp.is_some() {
            keys.extend(self.gone(new));
            // A controller that lost the pod by the same update saw it go too (upstream: labels
            // changed).
            if self.owner_key(old) != self.owner_key(new) {
                keys.extend(self.gone(old));
            }
        } else {
            keys.extend(
                [self.owner_key(old), self.owner_key(new)]
                    .into_iter()
                    .flatten(),
            );
        }
        keys.dedup();
        keys
    }

    pub fn deleted(&self, pod: &Pod) -> Vec<String> {
        self.gone(pod).into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, terminating: bool) -> Pod {
        let mut v = json!({"metadata": {"name": name, "namespace": "ns", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "old", "uid": "u", "controller": true}]}});
        if terminating {
            v["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:30Z");
        }
        serde_json::from_value(v).expect("pod")
    }

    /// The density bench's stall: a sync that listed the pods just before the update marking `b`
    /// terminating arrived (and satisfied the expectations) chose `b` again. Its second DELETE
    /// changes nothing, so no update follows: only `b`'s final deletion, a grace period later,
    /// carrying its deletionTimestamp. The expectations must be met by it, as upstream's
    /// UID-tracking expectations are, not wait out the five-minute timeout.
    #[test]
    fn a_pod_deleted_again_while_terminating_is_observed_at_its_final_deletion() {
        let expectations = UidTrackingExpectations::default();
        let events = PodEvents {
            kind: super::super::REPLICA_SET,
            expectations: &expectations,
        };
        let (a, b) = (pod("a", false), pod("b", false));
        events.deleting("ns/old", &[&a, &b]);
        events.updated(&a, &pod("a", true));
        events.updated(&b, &pod("b", true));
        assert!(expectations.satisfied("ns/old"));
        // The stale sync deletes `b` again.
        events.deleting("ns/old", &[&b]);
        assert!(!expectations.satisfied("ns/old"));
        assert_eq!(events.deleted(&pod("b", true)), ["ns/old"]);
        assert!(
            expectations.satisfied("ns/old"),
            "the final deletion of a pod we deleted is its deletion observed"
        );
    }

    /// One deletion reported twice (the update setting deletionTimestamp, then the deletion) counts
    /// once: the other pod's deletion is still awaited.
    #[test]
    fn a_deletion_seen_as_update_then_delete_counts_once() {
        let expectations = UidTrackingExpectations::default();
        let events = PodEvents {
            kind: super::super::REPLICA_SET,
            expectations: &expectations,
        };
        let (a, b) = (pod("a", false), pod("b", false));
        events.deleting("ns/old", &[&a, &b]);
        events.updated(&a, &pod("a", true));
        events.deleted(&pod("a", true));
        assert!(!expectations.satisfied("ns/old"), "b not seen yet");
        events.deleted(&b);
        assert!(expectations.satisfied("ns/old"));
    }
}
