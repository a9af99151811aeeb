//! PodTopologySpread (upstream `podtopologyspread`): `DoNotSchedule` constraints filter nodes whose
//! domain would exceed `maxSkew` over the least loaded domain (with `minDomains`), `ScheduleAnyway`
//! constraints score nodes by the matching pods in their domains. Pods without constraints get the
//! configured default constraints (system defaults: hostname skew 3 and zone skew 5, both soft) with
//! a selector built from the Services, ReplicationControllers, ReplicaSets and StatefulSets that
//! select the pod. `nodeAffinityPolicy` (default Honor) and `nodeTaintsPolicy` (default Ignore)
//! decide which nodes count; `matchLabelKeys` add the pod's own label values to the selector.

mod counts;
mod filtering;
mod scoring;
#[cfg(test)]
mod tests;

use k8s_openapi::api::core::v1::{Pod, TopologySpreadConstraint};
use serde::Deserialize;

use super::node_affinity::required_node_affinity_matches;
use super::taint_toleration::tolerations_tolerate_taint;
use crate::framework::selector::{Labels, Selector};
use crate::framework::{
    action, ClusterEvent, EventResource, FilterPlugin, Handle, NodeInfo, Plugin, PreFilterPlugin,
    PreScorePlugin, ScorePlugin,
};

pub const ERR_REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";
pub const ERR_REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// `PodTopologySpreadArgs`.
#[derive(Clone, Debug, Deserialize, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    #[serde(default)]
    pub default_constraints: Vec<TopologySpreadConstraint>,
    /// "System" (default) or "List".
    #[serde(default)]
    pub defaulting_type: Option<String>,
}

/// A constraint as the plugin uses it (upstream `topologySpreadConstraint`).
#[derive(Clone, Debug)]
pub struct Constraint {
    pub max_skew: i64,
    pub topology_key: String,
    pub selector: Selector,
    pub min_domains: i64,
    pub honor_node_affinity: bool,
    pub honor_node_taints: bool,
}

impl Constraint {
    /// Upstream `matchNodeInclusionPolicies`: does the node count for this constraint?
    fn includes(&self, pod: &Pod, node: &NodeInfo) -> bool {
        if self.honor_node_affinity && !required_node_affinity_matches(pod, node) {
            return false;
        }
        if self.honor_node_taints {
            let tolerations = pod
                .spec
                .as_ref()
                .and_then(|s| s.tolerations.as_deref())
                .unwrap_or_default();
            let taints = &node.taints;
            let untolerated = taints.iter().any(|t| {
                (t.effect == "NoSchedule" || t.effect == "NoExecute")
                    && !tolerations_tolerate_taint(tolerations, t)
            });
            if untolerated {
                return false;
            }
        }
        true
    }
}

pub struct PodTopologySpread {
    handle: Handle,
    default_constraints: Vec<TopologySpreadConstraint>,
    system_defaulted: bool,
    /// Counts kept between cycles for PreFilter's and PreScore's constraints.
    filter_counts: counts::Kept,
    score_counts: counts::Kept,
}

/// Upstream `systemDefaultConstraints`.
pub fn system_default_constraints() -> Vec<TopologySpreadConstraint> {
    let c = |key: &str, skew| TopologySpreadConstraint {
        topology_key: key.into(),
        when_unsatisfiable: "ScheduleAnyway".into(),
        max_skew: skew,
        ..Default::default()
    };
    vec![c(LABEL_HOSTNAME, 3), c(LABEL_ZONE, 5)]
}

impl PodTopologySpread {
    pub fn new(args: Args, handle: Handle) -> Result<PodTopologySpread, String> {
        let system = match args.defaulting_type.as_deref() {
            None | Some("System") => true,
            Some("List") => false,
            Some(other) => {
                return Err(format!(
                    "defaultingType: Unsupported value: {other:?}: supported values: \"System\", \"List\""
                ))
            }
        };
        if system && !args.default_constraints.is_empty() {
            return Err("defaultConstraints: Invalid value: when .defaultingType is \"System\", .defaultConstraints must be empty".into());
        }
        for c in &args.default_constraints {
            if c.label_selector.is_some() {
                return Err("defaultConstraints[*].labelSelector: Forbidden: constraint must not define a selector, as they deduced for each pod".into());
            }
            if c.max_skew <= 0 {
                return Err(format!(
                    "defaultConstraints[*].maxSkew: Invalid value: {}: not in valid range (0, inf)",
                    c.max_skew
                ));
            }
        }
        Ok(PodTopologySpread {
            handle,
            default_constraints: if system {
                system_default_constraints()
            } else {
                args.default_constraints
            },
            system_defaulted: system,
            filter_counts: counts::Kept::default(),
            score_counts: counts::Kept::default(),
        })
    }

    /// Upstream `filterTopologySpreadConstraints`: the constraints with `action`, selectors
    /// compiled, `matchLabelKeys` merged with the pod's labels.
    fn filter_constraints(
        &self,
        constraints: &[TopologySpreadConstraint],
        pod_labels: Option<&Labels>,
        action: &str,
    ) -> Result<Vec<Constraint>, String> {
        let mut out = Vec::new();
        for c in constraints
            .iter()
            .filter(|c| c.when_unsatisfiable == action)
        {
            let mut selector = Selector::from_label_selector(c.label_selector.as_ref())?;
            for key in c.match_label_keys.iter().flatten() {
                if let Some(v) = pod_labels.and_then(|l| l.get(key)) {
                    selector.and_equals(key, v);
                }
            }
            out.push(Constraint {
                max_skew: i64::from(c.max_skew),
                topology_key: c.topology_key.clone(),
                selector,
                min_domains: i64::from(c.min_domains.unwrap_or(1)),
                honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
                honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
            });
        }
        Ok(out)
    }

    /// The pod's own constraints with `action`, or the default ones when it has none.
    pub fn constraints(&self, pod: &Pod, action: &str) -> Result<Vec<Constraint>, String> {
        let own = pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_deref())
            .unwrap_or_default();
        let labels = pod.metadata.labels.as_ref();
        if !own.is_empty() {
            return self.filter_constraints(own, labels, action);
        }
        let mut cs = self.filter_constraints(&self.default_constraints, labels, action)?;
        if cs.is_empty() {
            return Ok(cs);
        }
        let selector = self.default_selector(pod);
        if selector.is_empty() {
            return Ok(Vec::new());
        }
        for c in &mut cs {
            c.selector = selector.clone();
        }
        Ok(cs)
    }

    /// Upstream `helper.DefaultSelector`: the selectors of the Services selecting the pod and of
    /// its controlling ReplicationController, ReplicaSet or StatefulSet, ANDed.
    fn default_selector(&self, pod: &Pod) -> Selector {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        let labels = pod.metadata.labels.as_ref();
        let l = &self.handle.listers;
        let mut set = Labels::new();
        for svc in l.services.list_namespace(ns) {
            let Some(sel) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
                continue;
            };
            if Selector::from_set(sel).matches(labels) {
                set.extend(sel.clone());
            }
        }
        let mut selector = Selector::from_set(&set);
        let owner = pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true));
        if let Some(o) = owner {
            let key = format!("{ns}/{}", o.name);
            match (o.api_version.as_str(), o.kind.as_str()) {
                ("v1", "ReplicationController") => {
                    if let Some(sel) = l
                        .replication_controllers
                        .get(&key)
                        .and_then(|rc| rc.spec.as_ref().and_then(|s| s.selector.clone()))
                    {
                        set.extend(sel);
                        selector = Selector::from_set(&set);
                    }
                }
                ("apps/v1", "ReplicaSet") => {
                    if let Some(rs) = l.replica_sets.get(&key) {
                        if let Ok(s) =
                            Selector::from_label_selector(rs.spec.as_ref().map(|s| &s.selector))
                        {
                            selector.and(&s);
                        }
                    }
                }
                ("apps/v1", "StatefulSet") => {
                    if let Some(ss) = l.stateful_sets.get(&key) {
                        if let Ok(s) =
                            Selector::from_label_selector(ss.spec.as_ref().map(|s| &s.selector))
                        {
                            selector.and(&s);
                        }
                    }
                }
                _ => {}
            }
        }
        selector
    }
}

/// Upstream `nodeLabelsMatchSpreadConstraints`: the node has every constraint's topology key.
fn node_has_all_keys<'a>(
    node: &NodeInfo,
    constraints: impl IntoIterator<Item = &'a Constraint>,
) -> bool {
    let labels = node.labels();
    constraints
        .into_iter()
        .all(|c| labels.is_some_and(|l| l.contains_key(&c.topology_key)))
}

/// Upstream `countPodsMatchSelector`: live pods of the namespace matching the selector.
fn count_matching(node: &NodeInfo, selector: &Selector, ns: &str) -> i64 {
    node.pods
        .iter()
        .filter(|p| {
            p.pod.metadata.deletion_timestamp.is_none()
                && p.namespace() == ns
                && selector.matches(p.pod.metadata.labels.as_ref())
        })
        .count() as i64
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        "PodTopologySpread"
    }
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        vec![
            ClusterEvent::new(EventResource::Pod, action::ALL),
            ClusterEvent::new(
                EventResource::Node,
                action::ADD
                    | action::DELETE
                    | action::UPDATE_NODE_LABEL
                    | action::UPDATE_NODE_TAINT,
            ),
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
