//! The service port map and its change tracker (upstream `pkg/proxy/servicechangetracker.go`,
//! `serviceport.go` and `service.go`).
//!
//! Differs from upstream: one IPv4 proxier (upstream runs one per IP family behind a metaproxier);
//! the chain names both backends need are computed once here, when a Service changes, rather than
//! in per-backend `newServiceInfo` callbacks, so a sync over 10,000 unchanged Services hashes nothing.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt;
use std::net::Ipv4Addr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Service;

use crate::names;

/// Namespace and name of a Service (upstream `types.NamespacedName`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NamespacedName {
    pub namespace: String,
    pub name: String,
}

impl NamespacedName {
    pub fn new(namespace: &str, name: &str) -> Self {
        Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
        }
    }
}

impl fmt::Display for NamespacedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    Tcp,
    Udp,
    Sctp,
}

impl Protocol {
    /// The API's spelling; absent means TCP, as the API defaults it.
    pub fn parse(s: Option<&str>) -> Option<Protocol> {
        match s.unwrap_or("TCP") {
            "TCP" => Some(Protocol::Tcp),
            "UDP" => Some(Protocol::Udp),
            "SCTP" => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// Lower case, as both backends use it in chain names and rules.
    pub fn lower(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
            Protocol::Sctp => "sctp",
        }
    }
}

/// One port of one Service (upstream `proxy.ServicePortName`).
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServicePortName {
    pub service: NamespacedName,
    pub port: String,
    pub protocol: Protocol,
}

impl fmt::Display for ServicePortName {
    /// `ns/name:port`, or `ns/name` for an unnamed port: upstream's `String()`, which the iptables
    /// chain hashes are computed from.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.port.is_empty() {
            write!(f, "{}", self.service)
        } else {
            write!(f, "{}:{}", self.service, self.port)
        }
    }
}

/// What the proxier needs of one Service port (upstream `BaseServicePortInfo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePort {
    pub name: ServicePortName,
    pub cluster_ip: Ipv4Addr,
    pub port: u16,
    /// 0 when the Service has no node port.
    pub node_port: u16,
    pub external_ips: Vec<Ipv4Addr>,
    pub load_balancer_vips: Vec<Ipv4Addr>,
    /// `Some(timeout seconds)` for sessionAffinity ClientIP.
    pub sticky_max_age_seconds: Option<u32>,
    pub externally_accessible: bool,
    pub external_policy_local: bool,
    pub internal_policy_local: bool,
    /// 0 when none.
    pub health_check_node_port: u16,
    pub names: names::ServiceChainNames,
}

impl ServicePort {
    /// Whether any traffic uses the endpoints of the "Cluster" policy (upstream `UsesClusterEndpoints`).
    pub fn uses_cluster_endpoints(&self) -> bool {
        !self.internal_policy_local || (self.externally_accessible && !self.external_policy_local)
    }

    /// Whether any traffic uses the node-local endpoints (upstream `UsesLocalEndpoints`).
    pub fn uses_local_endpoints(&self) -> bool {
        self.internal_policy_local || (self.externally_accessible && self.external_policy_local)
    }
}

/// Default of `sessionAffinityConfig.clientIP.timeoutSeconds` (three hours), as the API defaults it.
pub const DEFAULT_STICKY_MAX_AGE_SECONDS: u32 = 10800;

/// Ordered by Service first, so a partial sync finds the ports of the Services that changed
/// ([`ports_of`]) without walking all of them (at 10,000 Services that walk was 20 ms).
pub type ServicePortMap = BTreeMap<ServicePortName, Arc<ServicePort>>;

/// The entries of `service`'s ports in a map keyed by [`ServicePortName`].
pub fn ports_of<'a, V>(
    map: &'a BTreeMap<ServicePortName, V>,
    service: &'a NamespacedName,
) -> impl Iterator<Item = (&'a ServicePortName, &'a V)> + 'a {
    // The smallest name of the Service: empty port name, first protocol.
    let from = ServicePortName {
        service: service.clone(),
        port: String::new(),
        protocol: Protocol::Tcp,
    };
    map.range(from..)
        .take_while(move |(k, _)| &k.service == service)
}

/// The ports of one Service, as the proxier sees them; empty for Services it does not proxy
/// (headless, ExternalName, no IPv4 cluster IP).
pub fn service_to_ports(svc: &Service) -> ServicePortMap {
    let mut out = ServicePortMap::new();
    let ns = svc.metadata.namespace.as_deref().unwrap_or("");
    let Some(name) = svc.metadata.name.as_deref() else {
        return out;
    };
    let Some(spec) = svc.spec.as_ref() else {
        return out;
    };
    let type_ = spec.type_.as_deref().unwrap_or("ClusterIP");
    if type_ == "ExternalName" {
        return out;
    }
    // The IPv4 address among clusterIPs (dual-stack Services list one per family).
    let cluster_ip = spec
        .cluster_ips
        .iter()
        .flatten()
        .chain(spec.cluster_ip.iter())
        .find_map(|ip| ip.parse::<Ipv4Addr>().ok());
    let Some(cluster_ip) = cluster_ip else {
        return out;
    };
    let external_ips: Vec<Ipv4Addr> = spec
        .external_ips
        .iter()
        .flatten()
        .filter_map(|ip| ip.parse().ok())
        .collect();
    let mut load_balancer_vips = Vec::new();
    if type_ == "LoadBalancer" {
        for ing in svc
            .status
            .as_ref()
            .and_then(|s| s.load_balancer.as_ref())
            .and_then(|lb| lb.ingress.as_ref())
            .into_iter()
            .flatten()
        {
            // ipMode Proxy: the load balancer rewrites the destination, traffic must not be
            // short-circuited on the node (KEP-1860).
            if ing.ip_mode.as_deref() == Some("Proxy") {
                continue;
            }
            if let Some(ip) = ing.ip.as_deref().and_then(|ip| ip.parse().ok()) {
                load_balancer_vips.push(ip);
            }
        }
    }
    let externally_accessible =
        type_ == "NodePort" || type_ == "LoadBalancer" || !external_ips.is_empty();
    let external_policy_local =
        externally_accessible && spec.external_traffic_policy.as_deref() == Some("Local");
    let internal_policy_local = spec.internal_traffic_policy.as_deref() == Some("Local");
    let sticky = (spec.session_affinity.as_deref() == Some("ClientIP")).then(|| {
        spec.session_affinity_config
            .as_ref()
            .and_then(|c| c.client_ip.as_ref())
            .and_then(|c| c.timeout_seconds)
            .and_then(|t| u32::try_from(t).ok())
            .filter(|t| *t > 0)
            .unwrap_or(DEFAULT_STICKY_MAX_AGE_SECONDS)
    });
    let health_check_node_port = if external_policy_local {
        spec.health_check_node_port
            .and_then(|p| u16::try_from(p).ok())
            .unwrap_or(0)
    } else {
        0
    };
    for p in spec.ports.iter().flatten() {
        let Some(protocol) = Protocol::parse(p.protocol.as_deref()) else {
            continue;
        };
        let Ok(port) = u16::try_from(p.port) else {
            continue;
        };
        let spn = ServicePortName {
            service: NamespacedName::new(ns, name),
            port: p.name.clone().unwrap_or_default(),
            protocol,
        };
        let node_port = p.node_port.and_then(|n| u16::try_from(n).ok()).unwrap_or(0);
        let names = names::ServiceChainNames::new(&spn);
        out.insert(
            spn.clone(),
            Arc::new(ServicePort {
                name: spn,
                cluster_ip,
                port,
                node_port,
                external_ips: external_ips.clone(),
                load_balancer_vips: load_balancer_vips.clone(),
                sticky_max_age_seconds: sticky,
                externally_accessible,
                external_policy_local,
                internal_policy_local,
                health_check_node_port,
                names,
            }),
        );
    }
    out
}

/// Changes to Services since the last sync, accumulated per Service: `previous` is the state the
/// last sync applied, `current` the newest (upstream `ServiceChangeTracker`).
#[derive(Default)]
pub struct ServiceChangeTracker {
    items: HashMap<NamespacedName, (ServicePortMap, ServicePortMap)>,
}

impl ServiceChangeTracker {
    /// Records a change (`None` old: add; `None` new: delete). Returns whether anything is pending.
    pub fn update(&mut self, old: Option<&Service>, new: Option<&Service>) -> bool {
        let Some(svc) = new.or(old) else {
            return !self.items.is_empty();
        };
        let key = NamespacedName::new(
            svc.metadata.namespace.as_deref().unwrap_or(""),
            svc.metadata.name.as_deref().unwrap_or(""),
        );
        let previous = match self.items.remove(&key) {
            Some((previous, _)) => previous,
            None => old.map(service_to_ports).unwrap_or_default(),
        };
        let current = new.map(service_to_ports).unwrap_or_default();
        // Back where the last sync left it: nothing to do for this Service.
        if previous != current {
            self.items.insert(key, (previous, current));
        }
        !self.items.is_empty()
    }

    pub fn pending(&self) -> usize {
        self.items.len()
    }
}

/// What applying the pending changes changed (upstream `UpdateServiceMapResult`).
#[derive(Debug, Default)]
pub struct ServiceUpdateResult {
    pub updated_services: HashSet<NamespacedName>,
    /// Cluster IPs of deleted UDP Service ports: their conntrack entries must go.
    pub deleted_udp_cluster_ips: HashSet<Ipv4Addr>,
}

/// Applies the tracker's pending changes to `map` (upstream `ServicePortMap.Update`).
pub fn apply_service_changes(
    map: &mut ServicePortMap,
    tracker: &mut ServiceChangeTracker,
) -> ServiceUpdateResult {
    let mut result = ServiceUpdateResult::default();
    for (key, (previous, current)) in tracker.items.drain() {
        for (spn, port) in &previous {
            if !current.contains_key(spn) {
                map.remove(spn);
                if spn.protocol == Protocol::Udp {
                    result.deleted_udp_cluster_ips.insert(port.cluster_ip);
                }
            }
        }
        for (spn, port) in current {
            map.insert(spn, port);
        }
        result.updated_services.insert(key);
    }
    result
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ServicePort as ApiPort, ServiceSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    pub(crate) fn svc(ns: &str, name: &str, ip: &str, ports: &[(&str, i32, &str)]) -> Service {
        Service {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(ServiceSpec {
                cluster_ip: Some(ip.into()),
                cluster_ips: Some(vec![ip.into()]),
                ports: Some(
                    ports
                        .iter()
                        .map(|(n, p, proto)| ApiPort {
                            name: (!n.is_empty()).then(|| n.to_string()),
                            port: *p,
                            protocol: Some(proto.to_string()),
                            ..Default::default()
                        })
                        .collect(),
                ),
                ..Default::default()
            }),
            status: None,
        }
    }

    #[test]
    fn headless_and_external_name_are_not_proxied() {
        let mut s = svc("ns", "a", "None", &[("", 80, "TCP")]);
        assert!(service_to_ports(&s).is_empty());
        s.spec.as_mut().unwrap().cluster_ip = Some("10.0.0.1".into());
        s.spec.as_mut().unwrap().cluster_ips = None;
        assert_eq!(service_to_ports(&s).len(), 1);
        s.spec.as_mut().unwrap().type_ = Some("ExternalName".into());
        assert!(service_to_ports(&s).is_empty());
    }

    #[test]
    fn affinity_and_policies() {
        let mut s = svc("ns", "a", "10.0.0.1", &[("http", 80, "TCP")]);
        let spec = s.spec.as_mut().unwrap();
        spec.session_affinity = Some("ClientIP".into());
        spec.external_traffic_policy = Some("Local".into());
        let p = service_to_ports(&s).into_values().next().unwrap();
        assert_eq!(
            p.sticky_max_age_seconds,
            Some(DEFAULT_STICKY_MAX_AGE_SECONDS)
        );
        // Local external policy means nothing for a Service that is not externally reachable.
        assert!(!p.external_policy_local);
        s.spec.as_mut().unwrap().type_ = Some("NodePort".into());
        let p = service_to_ports(&s).into_values().next().unwrap();
        // Internal traffic keeps the Cluster policy: both sets of endpoints are in use.
        assert!(p.external_policy_local && p.uses_local_endpoints() && p.uses_cluster_endpoints());
    }

    #[test]
    fn tracker_accumulates_and_cancels() {
        let mut t = ServiceChangeTracker::default();
        let a = svc("ns", "a", "10.0.0.1", &[("", 53, "UDP")]);
        assert!(t.update(None, Some(&a)));
        // Added then deleted before a sync: nothing to do.
        assert!(!t.update(Some(&a), None));
        assert!(t.update(None, Some(&a)));
        let mut map = ServicePortMap::new();
        let r = apply_service_changes(&mut map, &mut t);
        assert_eq!(map.len(), 1);
        assert_eq!(r.updated_services.len(), 1);
        assert_eq!(t.pending(), 0);
        t.update(Some(&a), None);
        let r = apply_service_changes(&mut map, &mut t);
        assert!(map.is_empty());
        assert!(r
            .deleted_udp_cluster_ips
            .contains(&"10.0.0.1".parse().unwrap()));
    }
}
