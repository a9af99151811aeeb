//! The endpoints map and its change tracker, fed by EndpointSlices (upstream
//! `pkg/proxy/endpointschangetracker.go`, `endpointslicecache.go` and `endpoint.go`).
//!
//! Differs from upstream: IPv4 slices only (one proxier per family upstream; FQDN slices are ignored
//! there too); chain names are computed when a slice changes (see `names`); the slices of a Service
//! are kept parsed per slice name, applied on sync, as upstream's `endpointSliceTracker` does.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::Ipv4Addr;
use std::sync::Arc;

use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::names::EndpointChainNames;
use crate::servicechangetracker::{NamespacedName, Protocol, ServicePortName};

/// The label tying a slice to its Service.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";

/// One endpoint of one Service port (upstream `BaseEndpointInfo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub ip: Ipv4Addr,
    pub port: u16,
    pub is_local: bool,
    pub ready: bool,
    pub serving: bool,
    pub terminating: bool,
    /// `hints.forZones`, when set.
    pub zone_hints: Option<Vec<String>>,
    /// `hints.forNodes`, when set.
    pub node_hints: Option<Vec<String>>,
    pub names: EndpointChainNames,
}

impl Endpoint {
    /// `ip:port`, as rules and comments print it.
    pub fn addr(&self) -> String {
        format!("{}:{}", self.ip, self.port)
    }
}

/// Endpoints of each Service port, sorted by address so that rules come out the same every time.
pub type EndpointsMap = HashMap<ServicePortName, Vec<Endpoint>>;

#[derive(Clone, Debug, PartialEq, Eq)]
struct EpData {
    ip: Ipv4Addr,
    node_name: Option<String>,
    ready: bool,
    serving: bool,
    terminating: bool,
    zone_hints: Option<Vec<String>>,
    node_hints: Option<Vec<String>>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct SliceData {
    /// (port name, port, protocol)
    ports: Vec<(String, u16, Protocol)>,
    endpoints: Vec<EpData>,
}

fn parse_slice(slice: &EndpointSlice) -> SliceData {
    let ports = slice
        .ports
        .iter()
        .flatten()
        .filter_map(|p| {
            let port = u16::try_from(p.port?).ok()?;
            let proto = Protocol::parse(p.protocol.as_deref())?;
            Some((p.name.clone().unwrap_or_default(), port, proto))
        })
        .collect();
    let endpoints = slice
        .endpoints
        .iter()
        .flatten()
        .filter_map(|ep| {
            let c = ep.conditions.as_ref();
            // Upstream: a missing ready condition means ready; serving defaults to ready.
            let ready = c.and_then(|c| c.ready).unwrap_or(true);
            let serving = c.and_then(|c| c.serving).unwrap_or(ready);
            let terminating = c.and_then(|c| c.terminating).unwrap_or(false);
            let hints = ep.hints.as_ref();
            let zone_hints = hints
                .and_then(|h| h.for_zones.as_ref())
                .map(|z| z.iter().map(|z| z.name.clone()).collect());
            let node_hints = hints
                .and_then(|h| h.for_nodes.as_ref())
                .map(|n| n.iter().map(|n| n.name.clone()).collect());
            // Upstream uses only the first address of an endpoint.
            ep.addresses
                .first()
                .and_then(|a| a.parse::<Ipv4Addr>().ok())
                .map(|ip| EpData {
                    ip,
                    node_name: ep.node_name.clone(),
                    ready,
                    serving,
                    terminating,
                    zone_hints,
                    node_hints,
                })
        })
        .collect();
    SliceData { ports, endpoints }
}

/// Pending EndpointSlice changes per Service (upstream `EndpointsChangeTracker` with its
/// `EndpointSliceCache`).
pub struct EndpointsChangeTracker {
    hostname: String,
    applied: HashMap<NamespacedName, BTreeMap<String, Arc<SliceData>>>,
    pending: HashMap<NamespacedName, BTreeMap<String, Option<Arc<SliceData>>>>,
}

impl EndpointsChangeTracker {
    pub fn new(hostname: &str) -> Self {
        Self {
            hostname: hostname.to_string(),
            applied: HashMap::new(),
            pending: HashMap::new(),
        }
    }

    /// Records an added/updated (`remove` false) or deleted slice. Returns whether the slice's
    /// Service now has changes pending.
    pub fn endpoint_slice_update(&mut self, slice: &EndpointSlice, remove: bool) -> bool {
        if slice.address_type != "IPv4" {
            return false;
        }
        let Some(svc) = slice
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(LABEL_SERVICE_NAME))
        else {
            return false;
        };
        let Some(slice_name) = slice.metadata.name.clone() else {
            return false;
        };
        let key = NamespacedName::new(slice.metadata.namespace.as_deref().unwrap_or(""), svc);
        let new = (!remove).then(|| Arc::new(parse_slice(slice)));
        let applied = self.applied.get(&key).and_then(|m| m.get(&slice_name));
        let unchanged = match (applied, &new) {
            (None, None) => true,
            (Some(a), Some(n)) => a == n,
            _ => false,
        };
        let pending = self.pending.entry(key.clone()).or_default();
        if unchanged {
            pending.remove(&slice_name);
        } else {
            pending.insert(slice_name, new);
        }
        if pending.is_empty() {
            self.pending.remove(&key);
            return false;
        }
        true
    }

    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    fn endpoints_of(&self, key: &NamespacedName) -> EndpointsMap {
        let mut out: HashMap<ServicePortName, BTreeMap<(Ipv4Addr, u16), Endpoint>> = HashMap::new();
        for slice in self.applied.get(key).into_iter().flat_map(|m| m.values()) {
            for (pname, port, proto) in &slice.ports {
                let spn = ServicePortName {
                    service: key.clone(),
                    port: pname.clone(),
                    protocol: *proto,
                };
                let eps = out.entry(spn.clone()).or_default();
                for ep in &slice.endpoints {
                    // The same endpoint in two slices (during a controller's rewrite): keep a
                    // ready copy over an unready one, as upstream does.
                    if let Some(existing) = eps.get(&(ep.ip, *port)) {
                        if existing.ready || !ep.ready {
                            continue;
                        }
                    }
                    eps.insert(
                        (ep.ip, *port),
                        Endpoint {
                            ip: ep.ip,
                            port: *port,
                            is_local: ep.node_name.as_deref() == Some(self.hostname.as_str()),
                            ready: ep.ready,
                            serving: ep.serving,
                            terminating: ep.terminating,
                            zone_hints: ep.zone_hints.clone(),
                            node_hints: ep.node_hints.clone(),
                            names: EndpointChainNames::new(&spn, ep.ip, *port),
                        },
                    );
                }
            }
        }
        out.into_iter()
            .map(|(k, v)| (k, v.into_values().collect()))
            .collect()
    }
}

/// What applying the pending changes changed (upstream `UpdateEndpointsMapResult`).
#[derive(Debug, Default)]
pub struct EndpointsUpdateResult {
    pub updated_services: HashSet<NamespacedName>,
    /// UDP endpoints that went away or stopped serving: their conntrack entries must go, or
    /// clients keep sending to a dead backend.
    pub deleted_udp_endpoints: Vec<(ServicePortName, Ipv4Addr)>,
    /// UDP Service ports that had no usable endpoint and now have one: entries created while the
    /// Service rejected traffic must go.
    pub newly_active_udp_services: Vec<ServicePortName>,
}

fn usable(eps: Option<&Vec<Endpoint>>) -> bool {
    eps.is_some_and(|e| e.iter().any(|e| e.ready || (e.serving && e.terminating)))
}

/// Applies the pending changes to `map` (upstream `EndpointsMap.Update`).
pub fn apply_endpoints_changes(
    map: &mut EndpointsMap,
    tracker: &mut EndpointsChangeTracker,
) -> EndpointsUpdateResult {
    let mut result = EndpointsUpdateResult::default();
    let pending = std::mem::take(&mut tracker.pending);
    for (key, slices) in pending {
        let previous = tracker.endpoints_of(&key);
        let applied = tracker.applied.entry(key.clone()).or_default();
        for (name, data) in slices {
            match data {
                Some(d) => applied.insert(name, d),
                None => applied.remove(&name),
            };
        }
        if applied.is_empty() {
            tracker.applied.remove(&key);
        }
        let current = tracker.endpoints_of(&key);
        for (spn, old) in &previous {
            if spn.protocol != Protocol::Udp {
                continue;
            }
            let new = current.get(spn);
            for ep in old {
                let still = new.and_then(|n| n.iter().find(|e| e.ip == ep.ip && e.port == ep.port));
                let was_serving = ep.ready || (ep.serving && ep.terminating);
                let is_serving = still.is_some_and(|e| e.ready || (e.serving && e.terminating));
                if was_serving && !is_serving {
                    result.deleted_udp_endpoints.push((spn.clone(), ep.ip));
                }
            }
        }
        for (spn, new) in &current {
            if spn.protocol == Protocol::Udp && !usable(previous.get(spn)) && usable(Some(new)) {
                result.newly_active_udp_services.push(spn.clone());
            }
        }
        for spn in previous.keys() {
            map.remove(spn);
        }
        map.extend(current);
        result.updated_services.insert(key);
    }
    result
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::discovery::v1::{
        Endpoint as ApiEndpoint, EndpointConditions, EndpointPort,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    /// A slice of `svc` with one port and endpoints (ip, node, ready, serving, terminating).
    pub(crate) fn slice(
        ns: &str,
        svc: &str,
        name: &str,
        port: (&str, i32, &str),
        eps: &[(&str, &str, bool, bool, bool)],
    ) -> EndpointSlice {
        EndpointSlice {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                labels: Some([(LABEL_SERVICE_NAME.to_string(), svc.to_string())].into()),
                ..Default::default()
            },
            address_type: "IPv4".into(),
            ports: Some(vec![EndpointPort {
                name: (!port.0.is_empty()).then(|| port.0.to_string()),
                port: Some(port.1),
                protocol: Some(port.2.into()),
                ..Default::default()
            }]),
            endpoints: Some(
                eps.iter()
                    .map(|(ip, node, ready, serving, term)| ApiEndpoint {
                        addresses: vec![ip.to_string()],
                        node_name: (!node.is_empty()).then(|| node.to_string()),
                        conditions: Some(EndpointConditions {
                            ready: Some(*ready),
                            serving: Some(*serving),
                            terminating: Some(*term),
                        }),
                        ..Default::default()
                    })
                    .collect(),
            ),
        }
    }

    #[test]
    fn slices_merge_and_removals_are_reported() {
        let mut t = EndpointsChangeTracker::new("node-a");
        let s1 = slice(
            "ns",
            "dns",
            "dns-1",
            ("dns", 53, "UDP"),
            &[
                ("10.1.0.1", "node-a", true, true, false),
                ("10.1.0.2", "node-b", true, true, false),
            ],
        );
        let s2 = slice(
            "ns",
            "dns",
            "dns-2",
            ("dns", 53, "UDP"),
            &[("10.1.0.3", "node-b", true, true, false)],
        );
        assert!(t.endpoint_slice_update(&s1, false));
        assert!(t.endpoint_slice_update(&s2, false));
        let mut map = EndpointsMap::new();
        let r = apply_endpoints_changes(&mut map, &mut t);
        assert_eq!(r.newly_active_udp_services.len(), 1);
        let eps = map.values().next().unwrap();
        assert_eq!(eps.len(), 3);
        assert!(eps[0].is_local && !eps[1].is_local);
        // Re-sending the applied slice is no change.
        assert!(!t.endpoint_slice_update(&s1, false));
        assert!(t.endpoint_slice_update(&s2, true));
        let r = apply_endpoints_changes(&mut map, &mut t);
        assert_eq!(r.deleted_udp_endpoints.len(), 1);
        assert_eq!(
            r.deleted_udp_endpoints[0].1,
            "10.1.0.3".parse::<Ipv4Addr>().unwrap()
        );
        assert_eq!(map.values().next().unwrap().len(), 2);
        t.endpoint_slice_update(&s1, true);
        apply_endpoints_changes(&mut map, &mut t);
        assert!(map.is_empty());
    }

    #[test]
    fn slices_without_service_or_of_other_families_are_ignored() {
        let mut t = EndpointsChangeTracker::new("n");
        let mut s = slice(
            "ns",
            "a",
            "a-1",
            ("", 80, "TCP"),
            &[("10.0.0.1", "", true, true, false)],
        );
        s.address_type = "IPv6".into();
        assert!(!t.endpoint_slice_update(&s, false));
        s.address_type = "IPv4".into();
        s.metadata.labels = None;
        assert!(!t.endpoint_slice_update(&s, false));
    }
}
