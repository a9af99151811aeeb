//! The namespace deletion conditions (upstream `namespace/deletion/status_condition_utils.go`): what
//! went wrong or remains in a terminating namespace, as five conditions that are `False` with an
//! "ok" reason when nothing is wrong, so `kubectl describe ns` tells why a namespace is stuck.

use std::collections::BTreeMap;

use serde_json::{json, Value};

pub const DISCOVERY_FAILURE: &str = "NamespaceDeletionDiscoveryFailure";
pub const GV_PARSING_FAILURE: &str = "NamespaceDeletionGroupVersionParsingFailure";
pub const CONTENT_FAILURE: &str = "NamespaceDeletionContentFailure";
pub const CONTENT_REMAINING: &str = "NamespaceContentRemaining";
pub const FINALIZERS_REMAINING: &str = "NamespaceFinalizersRemaining";

const TYPES: [&str; 5] = [
    DISCOVERY_FAILURE,
    GV_PARSING_FAILURE,
    CONTENT_FAILURE,
    CONTENT_REMAINING,
    FINALIZERS_REMAINING,
];

/// The "ok" reason and message of each type.
fn ok(t: &str) -> (&'static str, &'static str) {
    match t {
        DISCOVERY_FAILURE => (
            "ResourcesDiscovered",
            "All resources successfully discovered",
        ),
        GV_PARSING_FAILURE => (
            "ParsedGroupVersions",
            "All legacy kube types successfully parsed",
        ),
        CONTENT_FAILURE => (
            "ContentDeleted",
            "All content successfully deleted, may be waiting on finalization",
        ),
        _ => ("ContentRemoved", "All content successfully removed"),
    }
}

/// A condition that is true: type, reason, message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failing {
    pub type_: &'static str,
    pub reason: &'static str,
    pub message: String,
}

/// Collects what one deletion pass found (upstream `namespaceConditionUpdater`).
#[derive(Debug, Default)]
pub struct ConditionUpdater {
    pub failing: Vec<Failing>,
    content_errors: Vec<String>,
}

impl ConditionUpdater {
    pub fn discovery_failed(&mut self, failing_groups: usize, err: &str) {
        self.failing.push(Failing {
            type_: DISCOVERY_FAILURE,
            reason: "DiscoveryFailed",
            message: format!("Discovery failed for some groups, {failing_groups} failing: {err}"),
        });
    }

    pub fn group_version_failed(&mut self, err: &str) {
        self.failing.push(Failing {
            type_: GV_PARSING_FAILURE,
            reason: "GroupVersionParsingFailed",
            message: err.to_string(),
        });
    }

    pub fn delete_content_failed(&mut self, err: String) {
        self.content_errors.push(err);
    }

    /// Remaining objects per `<resource>.<group>` and per finalizer.
    pub fn content_totals(
        &mut self,
        remaining: &BTreeMap<String, usize>,
        finalizers: &BTreeMap<String, usize>,
    ) {
        if !remaining.is_empty() {
            let mut parts: Vec<String> = remaining
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(gr, n)| format!("{gr} has {n} resource instances"))
                .collect();
            parts.sort();
            self.failing.push(Failing {
                type_: CONTENT_REMAINING,
                reason: "SomeResourcesRemain",
                message: format!("Some resources are remaining: {}", parts.join(", ")),
            });
        }
        if !finalizers.is_empty() {
            let mut parts: Vec<String> = finalizers
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(f, n)| format!("{f} in {n} resource instances"))
                .collect();
            parts.sort();
            self.failing.push(Failing {
                type_: FINALIZERS_REMAINING,
                reason: "SomeFinalizerRemain",
                message: format!("Some finalizers are remaining: {}", parts.join(", ")),
            });
        }
    }

    /// The namespace's new `status.conditions` from its current ones, or `None` if unchanged. A
    /// condition's transition time moves only when its status flips.
    pub fn update(mut self, current: &[Value], now: &str) -> Option<Vec<Value>> {
        if !self.failing.iter().any(|f| f.type_ == CONTENT_FAILURE)
            && !self.content_errors.is_empty()
        {
            self.content_errors.sort();
            self.failing.push(Failing {
                type_: CONTENT_FAILURE,
                reason: "ContentDeletionFailed",
                message: format!(
                    "Failed to delete all resource types, {} remaining: {}",
                    self.content_errors.len(),
                    self.content_errors.join(", ")
                ),
            });
        }
        let mut conditions = current.to_vec();
        let mut changed = false;
        for t in TYPES {
            let (status, reason, message) = match self.failing.iter().find(|f| f.type_ == t) {
                Some(f) => ("True", f.reason.to_string(), f.message.clone()),
                None => {
                    let (r, m) = ok(t);
                    ("False", r.to_string(), m.to_string())
                }
            };
            let fresh = json!({"type": t, "status": status, "lastTransitionTime": now,
                "reason": reason, "message": message});
            match conditions.iter_mut().find(|c| c["type"] == t) {
                None => {
                    conditions.push(fresh);
                    changed = true;
                }
                Some(old) => {
                    let same = |k: &str| old[k] == fresh[k];
                    if !(same("status") && same("reason") && same("message")) {
                        if !same("status") {
                            old["lastTransitionTime"] = json!(now);
                        }
                        old["status"] = fresh["status"].clone();
                        old["reason"] = fresh["reason"].clone();
                        old["message"] = fresh["message"].clone();
                        changed = true;
                    }
                }
            }
        }
        changed.then_some(conditions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ok_conditions_then_remaining_finalizers() {
        let first = ConditionUpdater::default()
            .update(&[], "2026-01-01T00:00:00Z")
            .expect("all five added");
        assert_eq!(first.len(), 5);
        assert!(first.iter().all(|c| c["status"] == "False"));
        assert_eq!(first[3]["reason"], "ContentRemoved");
        // Nothing new: unchanged.
        assert!(ConditionUpdater::default()
            .update(&first, "2026-01-01T00:00:05Z")
            .is_none());
        let mut u = ConditionUpdater::default();
        u.content_totals(
            &BTreeMap::from([
                ("configmaps.".to_string(), 1),
                ("widgets.example.com".to_string(), 2),
            ]),
            &BTreeMap::from([("example.com/hold".to_string(), 3)]),
        );
        u.delete_content_failed("b failed".into());
        u.delete_content_failed("a failed".into());
        let next = u.update(&first, "2026-01-01T00:00:09Z").unwrap();
        let by = |t: &str| next.iter().find(|c| c["type"] == t).unwrap().clone();
        assert_eq!(
            by(CONTENT_REMAINING)["message"],
            "Some resources are remaining: configmaps. has 1 resource instances, widgets.example.com has 2 resource instances"
        );
        assert_eq!(by(FINALIZERS_REMAINING)["reason"], "SomeFinalizerRemain");
        assert_eq!(
            by(FINALIZERS_REMAINING)["message"],
            "Some finalizers are remaining: example.com/hold in 3 resource instances"
        );
        assert_eq!(
            by(FINALIZERS_REMAINING)["lastTransitionTime"],
            "2026-01-01T00:00:09Z"
        );
        assert_eq!(
            by(CONTENT_FAILURE)["message"],
            "Failed to delete all resource types, 2 remaining: a failed, b failed"
        );
        assert_eq!(
            by(DISCOVERY_FAILURE)["lastTransitionTime"],
            "2026-01-01T00:00:00Z"
        );
    }
}
