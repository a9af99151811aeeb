//! Matching pods per topology domain, kept between scheduling cycles. Upstream's PreFilter and
//! PreScore count the pods matching every constraint on every node in each cycle (O(pods) per
//! pod); here the per-node counts of one set of constraints are kept, with the domain each node
//! belongs to, and a cycle counts again only the nodes the snapshot's journal says changed since
//! the last cycle of the same constraints (O(changed nodes)), falling back to counting everything
//! when the node list changed.
//!
//! The counts are upstream's for pods whose node inclusion policies exclude no node (the pod has
//! no required node affinity or node selector while `nodeAffinityPolicy` is Honor, and no
//! constraint honours taints); [`includes_every_node`] tells, and the plugin counts from scratch
//! otherwise.

use rustc_hash::FxHashMap as HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;

use super::{count_matching, node_has_all_keys, Constraint};
use crate::cache::Snapshot;
use crate::framework::parallelize::Parallelizer;
use crate::framework::selector::Selector;
use crate::framework::NodeInfo;

/// A node that does not count for a constraint.
const NONE: u32 = u32::MAX;
/// Constraint sets remembered at once (the pods of a few workloads interleave in the queue).
const KEPT: usize = 8;

/// Does every node (with the topology keys) count for these constraints, whatever its labels and
/// taints? Then the kept counts apply to this pod.
pub(super) fn includes_every_node(pod: &Pod, constraints: &[Constraint]) -> bool {
    let spec = pod.spec.as_ref();
    let has_node_affinity = spec.is_some_and(|s| {
        s.node_selector.as_ref().is_some_and(|m| !m.is_empty())
            || s.affinity
                .as_ref()
                .and_then(|a| a.node_affinity.as_ref())
                .is_some_and(|na| {
                    na.required_during_scheduling_ignored_during_execution
                        .is_some()
                })
    });
    constraints
        .iter()
        .all(|c| !(c.honor_node_taints || c.honor_node_affinity && has_node_affinity))
}

/// What the counts depend on.
#[derive(Clone, PartialEq)]
struct Identity {
    namespace: String,
    constraints: Vec<(String, Selector)>,
    /// A node lacking any of the keys counts for none of the constraints (PreFilter, and PreScore
    /// of a pod's own constraints); otherwise a missing key is the domain "" (upstream reads the
    /// label of a Go map).
    require_all_keys: bool,
}

/// The counts of one constraint set over one snapshot lineage.
pub(super) struct DomainCounts {
    identity: Identity,
    layout: u64,
    version: u64,
    /// Per constraint: the values of its topology key seen so far, and their ids.
    values: Vec<Vec<String>>,
    ids: Vec<HashMap<String, u32>>,
    /// Per constraint, per node index: the node's domain (or NONE) and its matching pods.
    node_domain: Vec<Vec<u32>>,
    node_count: Vec<Vec<i64>>,
    /// Per constraint, per domain: the nodes that count in it, and their matching pods.
    domain_nodes: Vec<Vec<u32>>,
    domain_count: Vec<Vec<i64>>,
}

/// One node's part: per constraint, its domain value (None: it does not count) and matching pods.
type NodePart<'a> = Vec<Option<(&'a str, i64)>>;

fn node_part<'a>(node: &'a NodeInfo, id: &Identity, selectors: &[&Constraint]) -> NodePart<'a> {
    if id.require_all_keys && !node_has_all_keys(node, selectors.iter().copied()) {
        return vec![None; selectors.len()];
    }
    let labels = node.labels();
    selectors
        .iter()
        .map(|c| {
            let value = labels
                .and_then(|l| l.get(&c.topology_key))
                .map_or("", String::as_str);
            Some((value, count_matching(node, &c.selector, &id.namespace)))
        })
        .collect()
}

impl DomainCounts {
    fn new(identity: Identity) -> DomainCounts {
        let n = identity.constraints.len();
        DomainCounts {
            identity,
            layout: 0,
            version: 0,
            values: vec![Vec::new(); n],
            ids: vec![HashMap::default(); n],
            node_domain: vec![Vec::new(); n],
            node_count: vec![Vec::new(); n],
            domain_nodes: vec![Vec::new(); n],
            domain_count: vec![Vec::new(); n],
        }
    }

    fn intern(&mut self, c: usize, value: &str) -> u32 {
        if let Some(&id) = self.ids[c].get(value) {
            return id;
        }
        let id = self.values[c].len() as u32;
        self.values[c].push(value.to_string());
        self.ids[c].insert(value.to_string(), id);
        self.domain_nodes[c].push(0);
        self.domain_count[c].push(0);
        id
    }

    /// Adds (`sign` 1) or takes away (-1) node `i`'s part as recorded.
    fn account(&mut self, i: usize, sign: i64) {
        for c in 0..self.node_domain.len() {
            let d = self.node_domain[c][i];
            if d != NONE {
                let d = d as usize;
                self.domain_nodes[c][d] = (i64::from(self.domain_nodes[c][d]) + sign) as u32;
                self.domain_count[c][d] += sign * self.node_count[c][i];
            }
        }
    }

    fn record(&mut self, i: usize, part: NodePart<'_>) {
        for (c, p) in part.into_iter().enumerate() {
            let (d, n) = match p {
                Some((value, n)) => (self.intern(c, value), n),
                None => (NONE, 0),
            };
            self.node_domain[c][i] = d;
            self.node_count[c][i] = n;
        }
    }

    /// Brings the counts up to the snapshot: the changed nodes only when the journal allows.
    fn sync(&mut self, snapshot: &Snapshot, constraints: &[&Constraint], par: &Parallelizer) {
        let nodes = &snapshot.nodes;
        match snapshot.changed_since(self.version, self.layout) {
            Some(changed) if self.layout != 0 => {
                for i in changed {
                    self.account(i, -1);
                    let part = node_part(&nodes[i], &self.identity, constraints);
                    self.record(i, part);
                    self.account(i, 1);
                }
            }
            _ => {
                let fresh = DomainCounts::new(self.identity.clone());
                *self = fresh;
                for c in 0..constraints.len() {
                    self.node_domain[c] = vec![NONE; nodes.len()];
                    self.node_count[c] = vec![0; nodes.len()];
                }
                let id = &self.identity;
                let parts = par.map(nodes.len(), |i| node_part(&nodes[i], id, constraints));
                for (i, part) in parts.into_iter().enumerate() {
                    self.record(i, part);
                    self.account(i, 1);
                }
            }
        }
        self.layout = snapshot.layout;
        self.version = snapshot.version;
    }

    /// The domains of constraint `c` with at least one counting node, and their matching pods.
    pub(super) fn domains(&self, c: usize) -> impl Iterator<Item = (&str, i64)> + '_ {
        self.values[c]
            .iter()
            .enumerate()
            .filter(move |(d, _)| self.domain_nodes[c][*d] > 0)
            .map(move |(d, v)| (v.as_str(), self.domain_count[c][d]))
    }

    /// Matching pods in the domain `value` of constraint `c` (None: no node counts there).
    pub(super) fn count(&self, c: usize, value: &str) -> Option<i64> {
        let &d = self.ids[c].get(value)?;
        (self.domain_nodes[c][d as usize] > 0).then(|| self.domain_count[c][d as usize])
    }
}

/// The kept counts of the last few constraint sets, most recently used last.
#[derive(Default)]
pub(super) struct Kept(Mutex<Vec<DomainCounts>>);

impl Kept {
    /// Runs `f` on the counts of these constraints, brought up to the snapshot.
    pub(super) fn with<R>(
        &self,
        snapshot: &Arc<Snapshot>,
        namespace: &str,
        constraints: &[Constraint],
        require_all_keys: bool,
        par: &Parallelizer,
        f: impl FnOnce(&DomainCounts) -> R,
    ) -> R {
        let identity = Identity {
            namespace: namespace.to_string(),
            constraints: constraints
                .iter()
                .map(|c| (c.topology_key.clone(), c.selector.clone()))
                .collect(),
            require_all_keys,
        };
        let refs: Vec<&Constraint> = constraints.iter().collect();
        let mut kept = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let mut counts = match kept.iter().position(|k| k.identity == identity) {
            Some(i) => kept.remove(i),
            None => DomainCounts::new(identity),
        };
        counts.sync(snapshot, &refs, par);
        let r = f(&counts);
        if kept.len() == KEPT {
            kept.remove(0);
        }
        kept.push(counts);
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::Cache;
    use serde_json::json;

    fn node(name: &str, zone: Option<&str>) -> Arc<k8s_openapi::api::core::v1::Node> {
        let mut labels = json!({"kubernetes.io/hostname": name});
        if let Some(z) = zone {
            labels["zone"] = json!(z);
        }
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "labels": labels},
                "status": {"allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"}}}))
            .unwrap(),
        )
    }

    fn pod(name: &str, node: &str, app: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": "ns",
                "labels": {"app": app}}, "spec": {"nodeName": node, "containers": []}}))
            .unwrap(),
        )
    }

    fn constraint(key: &str) -> Constraint {
        Constraint {
            max_skew: 1,
            topology_key: key.into(),
            selector: Selector::from_set(&[("app".to_string(), "web".to_string())].into()),
            min_domains: 1,
            honor_node_affinity: true,
            honor_node_taints: false,
        }
    }

    /// The counts as upstream computes them each cycle, for comparison.
    fn from_scratch(
        snapshot: &Snapshot,
        cs: &[Constraint],
        require_all: bool,
    ) -> Vec<Vec<(String, i64)>> {
        let mut out = vec![std::collections::BTreeMap::<String, i64>::new(); cs.len()];
        for n in &snapshot.nodes {
            if require_all && !node_has_all_keys(n, cs.iter()) {
                continue;
            }
            for (c, con) in cs.iter().enumerate() {
                let v = n
                    .labels()
                    .and_then(|l| l.get(&con.topology_key))
                    .cloned()
                    .unwrap_or_default();
                *out[c].entry(v).or_default() += count_matching(n, &con.selector, "ns");
            }
        }
        out.into_iter().map(|m| m.into_iter().collect()).collect()
    }

    fn kept_counts(
        kept: &Kept,
        snapshot: &Arc<Snapshot>,
        cs: &[Constraint],
        require_all: bool,
    ) -> Vec<Vec<(String, i64)>> {
        kept.with(
            snapshot,
            "ns",
            cs,
            require_all,
            &Parallelizer::new(1),
            |k| {
                (0..cs.len())
                    .map(|c| {
                        let mut d: Vec<(String, i64)> =
                            k.domains(c).map(|(v, n)| (v.to_string(), n)).collect();
                        d.sort();
                        d
                    })
                    .collect()
            },
        )
    }

    #[test]
    fn kept_counts_follow_every_change_as_a_fresh_count_would() {
        let mut cache = Cache::default();
        for (i, z) in ["a", "b", "c", "a"].iter().enumerate() {
            cache.update_node(node(&format!("n{i}"), Some(z)));
        }
        cache.update_node(node("bare", None));
        let cs = vec![constraint("zone"), constraint("kubernetes.io/hostname")];
        let kept = Kept::default();
        let mut step = 0;
        let mut check = |cache: &mut Cache| {
            let snap = cache.snapshot();
            for require_all in [true, false] {
                assert_eq!(
                    kept_counts(&kept, &snap, &cs, require_all),
                    from_scratch(&snap, &cs, require_all),
                    "step {step}, require_all {require_all}"
                );
            }
            step += 1;
        };
        check(&mut cache);
        cache.update_pod(pod("w1", "n0", "web"));
        cache.update_pod(pod("w2", "n3", "web"));
        cache.update_pod(pod("x1", "n1", "other"));
        check(&mut cache);
        cache.assume(pod("w3", "bare", "web"), "bare");
        cache.update_pod(pod("w4", "n2", "web"));
        check(&mut cache);
        cache.remove_pod(&pod("w1", "n0", "web"));
        // A node moves to another zone: its pods move with it.
        cache.update_node(node("n3", Some("c")));
        check(&mut cache);
        // A node goes away: the layout changes and everything is counted again.
        cache.remove_node("n2");
        check(&mut cache);
        cache.update_pod(pod("w5", "n1", "web"));
        check(&mut cache);
    }

    #[test]
    fn node_inclusion_decides_whether_kept_counts_apply() {
        let plain: Pod = serde_json::from_value(json!({"spec": {"containers": []}})).unwrap();
        let selective: Pod = serde_json::from_value(
            json!({"spec": {"containers": [], "nodeSelector": {"disk": "ssd"}}}),
        )
        .unwrap();
        let mut c = constraint("zone");
        assert!(includes_every_node(&plain, std::slice::from_ref(&c)));
        assert!(!includes_every_node(&selective, std::slice::from_ref(&c)));
        c.honor_node_affinity = false;
        assert!(includes_every_node(&selective, std::slice::from_ref(&c)));
        c.honor_node_taints = true;
        assert!(!includes_every_node(&plain, std::slice::from_ref(&c)));
    }
}
