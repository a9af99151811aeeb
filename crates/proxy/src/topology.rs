//! Which endpoints a Service port's traffic goes to (upstream `pkg/proxy/topology.go`,
//! `CategorizeEndpoints`): ready endpoints, else serving-and-terminating ones as a fallback;
//! node-local ones for the Local traffic policies; topology hints (trafficDistribution) when every
//! endpoint carries them and one matches this node.

use std::collections::{BTreeMap, HashMap};

use crate::endpointschangetracker::Endpoint;
use crate::servicechangetracker::ServicePort;

/// The node label holding its zone.
pub const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";

/// The endpoints of one Service port, sorted by use.
#[derive(Debug, Default)]
pub struct Categorized<'a> {
    pub cluster: Vec<&'a Endpoint>,
    pub local: Vec<&'a Endpoint>,
    /// Every endpoint some rule of this node may send to (cluster ∪ local).
    pub all_reachable: Vec<&'a Endpoint>,
    /// Whether any endpoint anywhere in the cluster can serve.
    pub has_any: bool,
}

#[derive(Clone, Copy, PartialEq)]
enum Hints {
    None,
    Node,
    Zone,
}

/// Upstream `canUseTopology`: hints apply only when every ready endpoint has them and at least
/// one names this node (or its zone); otherwise some traffic would have nowhere to go.
fn topology_mode(eps: &[Endpoint], node: &str, labels: &HashMap<String, String>) -> Hints {
    let ready: Vec<&Endpoint> = eps.iter().filter(|e| e.ready).collect();
    if ready.is_empty() {
        return Hints::None;
    }
    if ready.iter().all(|e| e.node_hints.is_some())
        && ready
            .iter()
            .any(|e| e.node_hints.iter().flatten().any(|n| n == node))
    {
        return Hints::Node;
    }
    let Some(zone) = labels.get(LABEL_TOPOLOGY_ZONE) else {
        return Hints::None;
    };
    if ready.iter().all(|e| e.zone_hints.is_some())
        && ready
            .iter()
            .any(|e| e.zone_hints.iter().flatten().any(|z| z == zone))
    {
        return Hints::Zone;
    }
    Hints::None
}

fn matches_topology(
    e: &Endpoint,
    mode: Hints,
    node: &str,
    labels: &HashMap<String, String>,
) -> bool {
    match mode {
        Hints::None => true,
        Hints::Node => e.node_hints.iter().flatten().any(|n| n == node),
        Hints::Zone => {
            let zone = labels.get(LABEL_TOPOLOGY_ZONE);
            e.zone_hints.iter().flatten().any(|z| Some(z) == zone)
        }
    }
}

/// Upstream `CategorizeEndpoints`.
pub fn categorize<'a>(
    eps: &'a [Endpoint],
    svc: &ServicePort,
    node: &str,
    node_labels: &HashMap<String, String>,
) -> Categorized<'a> {
    let mut out = Categorized::default();
    if svc.uses_cluster_endpoints() {
        let mode = topology_mode(eps, node, node_labels);
        out.cluster = eps
            .iter()
            .filter(|e| e.ready && matches_topology(e, mode, node, node_labels))
            .collect();
        // No ready endpoint anywhere: fall back to those still serving while terminating
        // (KEP-1669), so that a rolling update does not drop connections.
        if out.cluster.is_empty() {
            out.cluster = eps.iter().filter(|e| e.serving && e.terminating).collect();
        }
        out.has_any = !out.cluster.is_empty();
    }
    if !svc.uses_local_endpoints() {
        out.all_reachable = out.cluster.clone();
        return out;
    }
    let (mut local_ready, mut local_terminating) = (false, false);
    for e in eps {
        if e.ready {
            out.has_any = true;
            local_ready |= e.is_local;
        } else if e.serving && e.terminating {
            out.has_any = true;
            local_terminating |= e.is_local;
        }
    }
    if local_ready {
        out.local = eps.iter().filter(|e| e.is_local && e.ready).collect();
    } else if local_terminating {
        out.local = eps
            .iter()
            .filter(|e| e.is_local && e.serving && e.terminating)
            .collect();
    }
    if !svc.uses_cluster_endpoints() {
        out.all_reachable = out.local.clone();
        return out;
    }
    let mut all: BTreeMap<(std::net::Ipv4Addr, u16), &Endpoint> = BTreeMap::new();
    for e in out.cluster.iter().chain(out.local.iter()) {
        all.insert((e.ip, e.port), e);
    }
    out.all_reachable = all.into_values().collect();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpointschangetracker::tests::slice;
    use crate::endpointschangetracker::{
        apply_endpoints_changes, EndpointsChangeTracker, EndpointsMap,
    };
    use crate::servicechangetracker::service_to_ports;
    use crate::servicechangetracker::tests::svc;

    fn eps(list: &[(&str, &str, bool, bool, bool)]) -> Vec<Endpoint> {
        let mut t = EndpointsChangeTracker::new("me");
        t.endpoint_slice_update(&slice("ns", "s", "s-1", ("", 80, "TCP"), list), false);
        let mut m = EndpointsMap::new();
        apply_endpoints_changes(&mut m, &mut t);
        m.into_values().next().unwrap_or_default()
    }

    #[test]
    fn terminating_endpoints_are_a_fallback() {
        let s = service_to_ports(&svc("ns", "s", "10.0.0.1", &[("", 80, "TCP")]));
        let s = s.values().next().unwrap();
        let e = eps(&[
            ("10.1.0.1", "me", true, true, false),
            ("10.1.0.2", "other", false, true, true),
        ]);
        let c = categorize(&e, s, "me", &HashMap::new());
        assert_eq!(c.cluster.len(), 1);
        let e = eps(&[
            ("10.1.0.1", "me", false, false, true),
            ("10.1.0.2", "other", false, true, true),
        ]);
        let c = categorize(&e, s, "me", &HashMap::new());
        assert_eq!(c.cluster.len(), 1);
        assert_eq!(c.cluster[0].ip.to_string(), "10.1.0.2");
        let e = eps(&[("10.1.0.1", "me", false, false, false)]);
        assert!(!categorize(&e, s, "me", &HashMap::new()).has_any);
    }

    #[test]
    fn local_policy_uses_only_local_endpoints() {
        let mut api = svc("ns", "s", "10.0.0.1", &[("", 80, "TCP")]);
        api.spec.as_mut().unwrap().internal_traffic_policy = Some("Local".into());
        let s = service_to_ports(&api);
        let s = s.values().next().unwrap();
        let e = eps(&[
            ("10.1.0.1", "me", true, true, false),
            ("10.1.0.2", "other", true, true, false),
        ]);
        let c = categorize(&e, s, "me", &HashMap::new());
        assert!(c.cluster.is_empty());
        assert_eq!(c.local.len(), 1);
        assert_eq!(c.all_reachable.len(), 1);
        assert!(c.has_any);
        // No endpoint on this node: nothing local, though the Service has endpoints elsewhere.
        let e = eps(&[("10.1.0.2", "other", true, true, false)]);
        let c = categorize(&e, s, "me", &HashMap::new());
        assert!(c.local.is_empty() && c.has_any);
    }

    #[test]
    fn zone_hints_filter_when_all_have_them() {
        let s = service_to_ports(&svc("ns", "s", "10.0.0.1", &[("", 80, "TCP")]));
        let s = s.values().next().unwrap();
        let mut e = eps(&[
            ("10.1.0.1", "a", true, true, false),
            ("10.1.0.2", "b", true, true, false),
        ]);
        e[0].zone_hints = Some(vec!["z1".into()]);
        let labels: HashMap<String, String> =
            [(LABEL_TOPOLOGY_ZONE.to_string(), "z1".to_string())].into();
        // One endpoint without hints: hints are ignored.
        assert_eq!(categorize(&e, s, "me", &labels).cluster.len(), 2);
        e[1].zone_hints = Some(vec!["z2".into()]);
        let c = categorize(&e, s, "me", &labels);
        assert_eq!(c.cluster.len(), 1);
        assert_eq!(c.cluster[0].ip.to_string(), "10.1.0.1");
    }
}
