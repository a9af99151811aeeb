//! The objects a NetworkPolicy implementation reads, reduced to what decides traffic (upstream
//! `networking.k8s.io/v1` NetworkPolicy, Pod and Namespace as kube-router's and Calico's
//! policy controllers read them): policies with their selectors parsed and `policyTypes`
//! defaulted, pods with an IPv4 address, labels and named container ports, namespaces' labels.
//!
//! IPv4 only, as the proxier: IPv6 pod addresses and ipBlocks are left out (they cannot match
//! IPv4 traffic, and an IPv6 ipBlock must not widen an IPv4 rule).

use std::net::Ipv4Addr;

use apimachinery::labels::{selector_from_label_selector, Selector};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyPeer, NetworkPolicyPort as ApiPort,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde_json::{Map, Value};

use crate::proxier::Cidr;

/// The label the API server puts on every namespace (upstream `kubernetes.io/metadata.name`),
/// which policies commonly select namespaces by.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// The Service proxy's protocol type: the same three, the same API spelling and default.
pub use crate::servicechangetracker::Protocol;

/// A container port with a name, which a policy's named port refers to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamedPort {
    pub name: String,
    pub protocol: Protocol,
    pub port: u16,
}

/// A pod as policies see it: only pods on the pod network with an IPv4 address count, as peers
/// and as isolated pods (host-network pods share the node's address, which upstream CNIs treat
/// as the node, not as a pod).
#[derive(Clone, Debug)]
pub struct PodInfo {
    pub namespace: String,
    pub name: String,
    pub labels: Map<String, Value>,
    pub ip: Ipv4Addr,
    pub node: Option<String>,
    pub ports: Vec<NamedPort>,
}

impl PodInfo {
    /// None for pods that policies ignore: host-network, finished (their IP may already belong to
    /// another pod), or without an IPv4 address yet.
    pub fn from_pod(pod: &Pod) -> Option<PodInfo> {
        let spec = pod.spec.as_ref()?;
        if spec.host_network == Some(true) {
            return None;
        }
        let status = pod.status.as_ref()?;
        if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
            return None;
        }
        let ip = status
            .pod_ips
            .iter()
            .flatten()
            .map(|p| p.ip.as_str())
            .chain(status.pod_ip.as_deref())
            .find_map(|s| s.parse::<Ipv4Addr>().ok())?;
        let ports = spec
            .containers
            .iter()
            .flat_map(|c| c.ports.iter().flatten())
            .filter_map(|p| {
                Some(NamedPort {
                    name: p.name.clone().filter(|n| !n.is_empty())?,
                    protocol: Protocol::parse(p.protocol.as_deref())?,
                    port: u16::try_from(p.container_port).ok()?,
                })
            })
            .collect();
        Some(PodInfo {
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            labels: string_map(pod.metadata.labels.as_ref()),
            ip,
            node: spec.node_name.clone(),
            ports,
        })
    }

    /// The number of the container port `name` with `protocol` (upstream resolves a named port
    /// against the destination pod's ports).
    pub fn named_port(&self, name: &str, protocol: Protocol) -> Option<u16> {
        self.ports
            .iter()
            .find(|p| p.name == name && p.protocol == protocol)
            .map(|p| p.port)
    }
}

#[derive(Clone, Debug)]
pub struct NamespaceInfo {
    pub name: String,
    pub labels: Map<String, Value>,
}

impl NamespaceInfo {
    pub fn from_namespace(ns: &Namespace) -> NamespaceInfo {
        let name = ns.metadata.name.clone().unwrap_or_default();
        let mut labels = string_map(ns.metadata.labels.as_ref());
        // The API server sets it on every namespace; an older object without it still matches.
        labels
            .entry(NAMESPACE_NAME_LABEL)
            .or_insert_with(|| Value::String(name.clone()));
        NamespaceInfo { name, labels }
    }
}

fn string_map(m: Option<&std::collections::BTreeMap<String, String>>) -> Map<String, Value> {
    m.into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect()
}

/// Which namespaces a pod peer's pods are in.
#[derive(Clone, Debug)]
pub enum Namespaces {
    /// The policy's own (a peer with only a podSelector).
    Own,
    /// Those whose labels match.
    Matching(Selector),
}

#[derive(Clone, Debug)]
pub enum Peer {
    /// Pods matching `pods` in `namespaces` (a namespaceSelector alone selects every pod there).
    Pods {
        namespaces: Namespaces,
        pods: Selector,
    },
    /// Addresses in `cidr` but in none of `except`.
    Block { cidr: Cidr, except: Vec<Cidr> },
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortRef {
    Number(u16),
    Named(String),
}

/// One entry of a rule's `ports`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Port {
    pub protocol: Protocol,
    /// None: every port of the protocol.
    pub port: Option<PortRef>,
    /// The last port of a range starting at a numeric `port`.
    pub end_port: Option<u16>,
}

/// One ingress or egress rule: traffic must match a peer AND a port.
#[derive(Clone, Debug)]
pub struct Rule {
    /// None (the field missing or empty): every peer.
    pub peers: Option<Vec<Peer>>,
    /// None (missing or empty): every port and protocol.
    pub ports: Option<Vec<Port>>,
}

/// A NetworkPolicy with its directions decided: `ingress`/`egress` is None when the policy does
/// not apply to that direction, and Some(empty) when it isolates without allowing anything.
#[derive(Clone, Debug)]
pub struct Policy {
    pub namespace: String,
    pub name: String,
    pub pod_selector: Selector,
    pub ingress: Option<Vec<Rule>>,
    pub egress: Option<Vec<Rule>>,
}

fn selector(s: &LabelSelector) -> Result<Selector, String> {
    let v = serde_json::to_value(s).map_err(|e| e.to_string())?;
    selector_from_label_selector(&v)
}

/// A CIDR of an ipBlock; Ok(None) for an IPv6 one.
fn cidr(s: &str) -> Result<Option<Cidr>, String> {
    if s.contains(':') {
        return Ok(None);
    }
    Cidr::parse(s).map(Some).map_err(|e| e.to_string())
}

/// A peer; None when it can never match IPv4 traffic (an IPv6 ipBlock).
fn peer(p: &NetworkPolicyPeer) -> Result<Option<Peer>, String> {
    if let Some(b) = &p.ip_block {
        let Some(c) = cidr(&b.cidr)? else {
            return Ok(None);
        };
        let mut except = Vec::new();
        for e in b.except.iter().flatten() {
            except.extend(cidr(e)?);
        }
        return Ok(Some(Peer::Block { cidr: c, except }));
    }
    let namespaces = match &p.namespace_selector {
        Some(s) => Namespaces::Matching(selector(s)?),
        None => Namespaces::Own,
    };
    // A peer with a namespaceSelector alone selects every pod of those namespaces.
    let pods = match &p.pod_selector {
        Some(s) => selector(s)?,
        None => Selector::everything(),
    };
    Ok(Some(Peer::Pods { namespaces, pods }))
}

fn port(p: &ApiPort) -> Result<Port, String> {
    let protocol = Protocol::parse(p.protocol.as_deref())
        .ok_or_else(|| format!("unsupported protocol {:?}", p.protocol))?;
    let port = match &p.port {
        None => None,
        Some(IntOrString::Int(n)) => Some(PortRef::Number(
            u16::try_from(*n).map_err(|_| format!("port {n} out of range"))?,
        )),
        Some(IntOrString::String(s)) => Some(match s.parse::<u16>() {
            Ok(n) => PortRef::Number(n),
            Err(_) => PortRef::Named(s.clone()),
        }),
    };
    let end_port = p.end_port.and_then(|e| u16::try_from(e).ok());
    Ok(Port {
        protocol,
        port,
        end_port,
    })
}

fn rule(
    peers: Option<&Vec<NetworkPolicyPeer>>,
    ports: Option<&Vec<ApiPort>>,
) -> Result<Rule, String> {
    let peers = match peers {
        Some(ps) if !ps.is_empty() => {
            let mut out = Vec::new();
            for p in ps {
                out.extend(peer(p)?);
            }
            // Only IPv6 blocks: the rule still names peers, none of them IPv4, so it must not
            // turn into "every peer".
            Some(out)
        }
        _ => None,
    };
    let ports = match ports {
        Some(ps) if !ps.is_empty() => Some(ps.iter().map(port).collect::<Result<_, _>>()?),
        _ => None,
    };
    Ok(Rule { peers, ports })
}

impl Policy {
    /// Upstream's defaulting of `policyTypes` when it is missing: Ingress always, Egress when the
    /// policy has egress rules. An error for a policy the API server would have rejected.
    pub fn from_network_policy(np: &NetworkPolicy) -> Result<Policy, String> {
        let spec = np.spec.clone().unwrap_or_default();
        let types = match spec.policy_types.as_deref() {
            Some(t) if !t.is_empty() => t.to_vec(),
            _ => {
                let mut t = vec!["Ingress".to_string()];
                if spec.egress.as_ref().is_some_and(|e| !e.is_empty()) {
                    t.push("Egress".to_string());
                }
                t
            }
        };
        let ingress = if types.iter().any(|t| t == "Ingress") {
            Some(
                spec.ingress
                    .iter()
                    .flatten()
                    .map(|r| rule(r.from.as_ref(), r.ports.as_ref()))
                    .collect::<Result<_, _>>()?,
            )
        } else {
            None
        };
        let egress = if types.iter().any(|t| t == "Egress") {
            Some(
                spec.egress
                    .iter()
                    .flatten()
                    .map(|r| rule(r.to.as_ref(), r.ports.as_ref()))
                    .collect::<Result<_, _>>()?,
            )
        } else {
            None
        };
        Ok(Policy {
            namespace: np.metadata.namespace.clone().unwrap_or_default(),
            name: np.metadata.name.clone().unwrap_or_default(),
            // An absent podSelector is the empty selector: every pod of the namespace.
            pod_selector: selector(&spec.pod_selector.unwrap_or_default())?,
            ingress,
            egress,
        })
    }

    /// Whether the policy applies to `pod` (its namespace, its podSelector).
    pub fn selects(&self, pod: &PodInfo) -> bool {
        pod.namespace == self.namespace && self.pod_selector.matches(&pod.labels)
    }
}
