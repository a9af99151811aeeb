//! The node tree (upstream `internal/cache/node_tree.go`): nodes grouped by zone, listed round-robin
//! across zones so that a scheduling cycle that examines only some nodes still sees every zone.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Node;

/// Upstream `utilnode.GetZoneKey`: region and zone (GA labels, else the beta ones); "" for none.
pub fn zone_key(node: &Node) -> String {
    let labels = node.metadata.labels.as_ref();
    let get = |ga: &str, beta: &str| {
        labels
            .and_then(|l| l.get(ga).or_else(|| l.get(beta)))
            .cloned()
            .unwrap_or_default()
    };
    let region = get(
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/region",
    );
    let zone = get(
        "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/zone",
    );
    if region.is_empty() && zone.is_empty() {
        return String::new();
    }
    format!("{region}:\x00:{zone}")
}

#[derive(Default, Debug)]
pub struct NodeTree {
    /// Zones in order of first appearance, with their nodes in order of addition.
    zones: Vec<(String, Vec<String>)>,
    zone_of: HashMap<String, String>,
}

impl NodeTree {
    /// Adds or moves (zone change) a node; true when the tree changed.
    pub fn add(&mut self, node: &Node) -> bool {
        let name = node.metadata.name.clone().unwrap_or_default();
        let zone = zone_key(node);
        if self.zone_of.get(&name) == Some(&zone) {
            return false;
        }
        self.remove(&name);
        match self.zones.iter_mut().find(|(z, _)| *z == zone) {
            Some((_, names)) => names.push(name.clone()),
            None => self.zones.push((zone.clone(), vec![name.clone()])),
        }
        self.zone_of.insert(name, zone);
        true
    }

    pub fn remove(&mut self, name: &str) -> bool {
        let Some(zone) = self.zone_of.remove(name) else {
            return false;
        };
        if let Some(i) = self.zones.iter().position(|(z, _)| *z == zone) {
            self.zones[i].1.retain(|n| n != name);
            if self.zones[i].1.is_empty() {
                self.zones.remove(i);
            }
        }
        true
    }

    pub fn len(&self) -> usize {
        self.zone_of.len()
    }

    pub fn is_empty(&self) -> bool {
        self.zone_of.is_empty()
    }

    /// Round-robin over the zones: the first node of each zone, then the second of each, ...
    pub fn list(&self) -> Vec<String> {
        let mut out = Vec::with_capacity(self.len());
        let longest = self.zones.iter().map(|(_, n)| n.len()).max().unwrap_or(0);
        for i in 0..longest {
            for (_, names) in &self.zones {
                if let Some(n) = names.get(i) {
                    out.push(n.clone());
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn node(name: &str, region: &str, zone: &str) -> Node {
        let mut labels = json!({});
        if !region.is_empty() {
            labels["topology.kubernetes.io/region"] = json!(region);
        }
        if !zone.is_empty() {
            labels["failure-domain.beta.kubernetes.io/zone"] = json!(zone);
        }
        serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}})).unwrap()
    }

    #[test]
    fn round_robin_across_zones() {
        let mut t = NodeTree::default();
        for (n, r, z) in [
            ("a1", "r", "a"),
            ("a2", "r", "a"),
            ("a3", "r", "a"),
            ("b1", "r", "b"),
            ("none", "", ""),
            ("c1", "r2", "a"),
        ] {
            assert!(t.add(&node(n, r, z)));
        }
        assert_eq!(t.list(), ["a1", "b1", "none", "c1", "a2", "a3"]);
        assert!(!t.add(&node("a2", "r", "a")), "same zone: no change");
        assert!(t.add(&node("a2", "r", "b")), "zone change moves it");
        assert_eq!(t.list(), ["a1", "b1", "none", "c1", "a3", "a2"]);
        assert!(t.remove("b1"));
        assert!(!t.remove("b1"));
        t.remove("a2");
        assert_eq!(t.list(), ["a1", "none", "c1", "a3"]);
        assert_eq!(t.len(), 4);
        assert_eq!(zone_key(&node("x", "", "")), "");
        assert_eq!(zone_key(&node("x", "r", "z")), "r:\x00:z");
    }
}
