//! InterPodAffinity (upstream `interpodaffinity`): required pod affinity and anti-affinity of the
//! incoming pod, the required anti-affinity of existing pods (symmetry), and scoring by preferred
//! terms of both sides plus existing pods' required affinity (`hardPodAffinityWeight`).
//! Namespace selectors of the incoming pod's terms are resolved to namespaces once per cycle.

mod filtering;
mod scoring;
#[cfg(test)]
mod tests;

use serde::Deserialize;

use crate::framework::selector::Labels;
use crate::framework::{
    action, AffinityTerm, ClusterEvent, EventResource, FilterPlugin, Handle, NodeInfo, Plugin,
    PreFilterPlugin, PreScorePlugin, ScorePlugin,
};
use k8s_openapi::api::core::v1::Pod;

pub const ERR_REASON_AFFINITY: &str = "node(s) didn't match pod affinity rules";
pub const ERR_REASON_ANTI_AFFINITY: &str = "node(s) didn't match pod anti-affinity rules";
pub const ERR_REASON_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

/// `InterPodAffinityArgs`.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    #[serde(default = "one")]
    pub hard_pod_affinity_weight: i64,
    #[serde(default)]
    pub ignore_preferred_terms_of_existing_pods: bool,
}

fn one() -> i64 {
    1
}

impl Default for Args {
    fn default() -> Self {
        Args {
            hard_pod_affinity_weight: 1,
            ignore_preferred_terms_of_existing_pods: false,
        }
    }
}

pub struct InterPodAffinity {
    handle: Handle,
    args: Args,
}

impl InterPodAffinity {
    pub fn new(args: Args, handle: Handle) -> Result<InterPodAffinity, String> {
        if !(0..=100).contains(&args.hard_pod_affinity_weight) {
            return Err(format!(
                "hardPodAffinityWeight: Invalid value: {}: not in valid range [0, 100]",
                args.hard_pod_affinity_weight
            ));
        }
        Ok(InterPodAffinity { handle, args })
    }

    /// Upstream `mergeAffinityTermNamespacesIfNotEmpty`: the namespaces a term's namespace selector
    /// picks join its namespace list; the selector then matches nothing more.
    fn merge_namespaces(&self, term: &mut AffinityTerm) {
        if term.namespace_selector.is_empty() {
            return;
        }
        for ns in self.handle.listers.namespaces.list() {
            if term.namespace_selector.matches(ns.metadata.labels.as_ref()) {
                term.namespaces
                    .insert(ns.metadata.name.clone().unwrap_or_default());
            }
        }
        term.namespace_selector = crate::framework::selector::Selector::Nothing;
    }

    /// The labels of the pod's namespace (for existing pods' namespace selectors).
    fn namespace_labels(&self, pod: &Pod) -> Option<Labels> {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        self.handle
            .listers
            .namespaces
            .get(ns)
            .and_then(|n| n.metadata.labels.clone())
    }
}

/// Upstream `podMatchesAllAffinityTerms`: false for no terms.
fn matches_all(terms: &[AffinityTerm], pod: &Pod) -> bool {
    !terms.is_empty() && terms.iter().all(|t| t.matches(pod, None))
}

fn topology_value<'a>(node: &'a NodeInfo, key: &str) -> Option<&'a String> {
    node.labels().and_then(|l| l.get(key))
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        "InterPodAffinity"
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(EventResource::Pod, action::ALL),
            ClusterEvent::new(EventResource::Node, action::ADD | action::UPDATE_NODE_LABEL),
            ClusterEvent::new(EventResource::Namespace, action::ADD | action::UPDATE),
        ]
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}
