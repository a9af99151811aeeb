//! What a node enforces (the policy compilation kube-router's `network_policy_controller` and
//! Calico's Felix calculation graph do): for each pod on THIS node that some policy isolates, per
//! direction, the list of (peer, port) combinations it allows. A pure function of the policies,
//! pods and namespaces; `rules.rs` turns the plan into nftables, and the unit tests evaluate it.
//!
//! Upstream semantics kept here: a pod no policy selects for a direction is not isolated in it;
//! an isolated pod's allowed traffic is the union of every selecting policy's rules; a rule with
//! no peers allows every peer and one with no ports every port; named ports resolve against the
//! destination pod (the isolated pod itself for ingress, each peer pod for egress).

use std::collections::{BTreeSet, HashMap};
use std::net::Ipv4Addr;

use super::model::{NamespaceInfo, Namespaces, Peer, PodInfo, Policy, Port, PortRef, Protocol};
use crate::proxier::Cidr;

/// Which remote addresses an allowance admits (sources for ingress, destinations for egress).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PeerMatch {
    Any,
    /// The pods of a shared set (`Plan::sets`), by index.
    Set(usize),
    /// One pod (an egress named port, resolved per destination pod).
    Ip(Ipv4Addr),
    /// An ipBlock.
    Block {
        cidr: Cidr,
        except: Vec<Cidr>,
    },
}

/// Which protocol and destination ports an allowance admits.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortMatch {
    Any,
    Protocol(Protocol),
    /// Ports `first..=last` of a protocol.
    Range(Protocol, u16, u16),
}

/// One allowed combination, with the rule it comes from (for the rule's comment).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allow {
    pub peer: PeerMatch,
    pub ports: PortMatch,
    pub origin: String,
}

/// A pod of this node that at least one policy isolates.
#[derive(Clone, Debug)]
pub struct PodPlan {
    pub namespace: String,
    pub name: String,
    pub ip: Ipv4Addr,
    /// None: not isolated for ingress. Some(empty): isolated, nothing allowed.
    pub ingress: Option<Vec<Allow>>,
    pub egress: Option<Vec<Allow>>,
}

#[derive(Clone, Debug, Default)]
pub struct Plan {
    /// Sets of pod addresses shared by allowances (deduplicated by content).
    pub sets: Vec<BTreeSet<Ipv4Addr>>,
    /// Isolated pods of this node, sorted by namespace and name.
    pub pods: Vec<PodPlan>,
}

/// The inputs, borrowed from the informers' snapshot.
pub struct Inputs<'a> {
    pub policies: &'a [Policy],
    pub pods: &'a [PodInfo],
    pub namespaces: &'a [NamespaceInfo],
    pub node_name: &'a str,
}

struct Builder<'a> {
    inputs: &'a Inputs<'a>,
    ns_labels: HashMap<&'a str, &'a serde_json::Map<String, serde_json::Value>>,
    sets: Vec<BTreeSet<Ipv4Addr>>,
    set_index: HashMap<BTreeSet<Ipv4Addr>, usize>,
    /// The set of each pod peer already resolved (None: it selects no pod).
    peer_sets: HashMap<usize, Option<usize>>,
}

impl<'a> Builder<'a> {
    /// The pods a pod peer of a policy in `policy_ns` selects.
    fn peer_pods(
        &self,
        policy_ns: &str,
        namespaces: &Namespaces,
        pods: &apimachinery::labels::Selector,
    ) -> Vec<&'a PodInfo> {
        self.inputs
            .pods
            .iter()
            .filter(|p| match namespaces {
                Namespaces::Own => p.namespace == policy_ns,
                Namespaces::Matching(sel) => match self.ns_labels.get(p.namespace.as_str()) {
                    Some(labels) => sel.matches(labels),
                    // A namespace the informer has not delivered yet: the one label the API
                    // server gives every namespace (the next sync sees the rest).
                    None => {
                        let mut labels = serde_json::Map::new();
                        labels.insert(
                            super::model::NAMESPACE_NAME_LABEL.to_string(),
                            serde_json::Value::String(p.namespace.clone()),
                        );
                        sel.matches(&labels)
                    }
                },
            })
            .filter(|p| pods.matches(&p.labels))
            .collect()
    }

    fn set(&mut self, ips: BTreeSet<Ipv4Addr>) -> usize {
        if let Some(&i) = self.set_index.get(&ips) {
            return i;
        }
        self.sets.push(ips.clone());
        self.set_index.insert(ips, self.sets.len() - 1);
        self.sets.len() - 1
    }

    /// The pods an egress peer may reach, for resolving a named port per destination pod.
    fn egress_destinations(&self, policy_ns: &str, peer: Option<&Peer>) -> Vec<&'a PodInfo> {
        match peer {
            None => self.inputs.pods.iter().collect(),
            Some(Peer::Pods { namespaces, pods }) => self.peer_pods(policy_ns, namespaces, pods),
            Some(Peer::Block { cidr, except }) => self
                .inputs
                .pods
                .iter()
                .filter(|p| cidr.contains(p.ip) && !except.iter().any(|e| e.contains(p.ip)))
                .collect(),
        }
    }

    /// The allowances of one rule of `policy` for the isolated pod `pod`.
    fn rule_allows(
        &mut self,
        policy: &Policy,
        peers: Option<&[Peer]>,
        ports: Option<&[Port]>,
        pod: &PodInfo,
        egress: bool,
        origin: &str,
    ) -> Vec<Allow> {
        // Numeric ports and protocol-only entries do not depend on the destination pod.
        let mut fixed = Vec::new();
        let mut named = Vec::new();
        match ports {
            None => fixed.push(PortMatch::Any),
            Some(ports) => {
                for p in ports {
                    match &p.port {
                        None => fixed.push(PortMatch::Protocol(p.protocol)),
                        Some(PortRef::Number(n)) => {
                            let last = p.end_port.filter(|e| e >= n).unwrap_or(*n);
                            fixed.push(PortMatch::Range(p.protocol, *n, last));
                        }
                        Some(PortRef::Named(name)) if egress => {
                            named.push((name.as_str(), p.protocol))
                        }
                        // Ingress: the destination is the isolated pod; a name it does not
                        // define matches nothing.
                        Some(PortRef::Named(name)) => {
                            if let Some(n) = pod.named_port(name, p.protocol) {
                                fixed.push(PortMatch::Range(p.protocol, n, n));
                            }
                        }
                    }
                }
            }
        }
        let peer_matches: Vec<(Option<&Peer>, PeerMatch)> = match peers {
            None => vec![(None, PeerMatch::Any)],
            Some(peers) => peers
                .iter()
                .filter_map(|peer| {
                    let m = match peer {
                        Peer::Block { cidr, except } => PeerMatch::Block {
                            cidr: *cidr,
                            except: except.clone(),
                        },
                        Peer::Pods { namespaces, pods } => {
                            // A peer's pods do not depend on the isolated pod: computed once per
                            // peer (keyed by its address in the borrowed policies), not per pod.
                            let key = std::ptr::from_ref(peer) as usize;
                            let set = match self.peer_sets.get(&key) {
                                Some(s) => *s,
                                None => {
                                    let ips: BTreeSet<Ipv4Addr> = self
                                        .peer_pods(&policy.namespace, namespaces, pods)
                                        .iter()
                                        .map(|p| p.ip)
                                        .collect();
                                    // No such pods (yet): nothing to allow, no empty set.
                                    let s = (!ips.is_empty()).then(|| self.set(ips));
                                    self.peer_sets.insert(key, s);
                                    s
                                }
                            };
                            PeerMatch::Set(set?)
                        }
                    };
                    Some((Some(peer), m))
                })
                .collect(),
        };
        let mut out = Vec::new();
        for (peer, m) in &peer_matches {
            for ports in &fixed {
                out.push(Allow {
                    peer: m.clone(),
                    ports: ports.clone(),
                    origin: origin.to_string(),
                });
            }
            for (name, protocol) in &named {
                let dests = self.egress_destinations(&policy.namespace, *peer);
                for d in dests {
                    if let Some(n) = d.named_port(name, *protocol) {
                        out.push(Allow {
                            peer: PeerMatch::Ip(d.ip),
                            ports: PortMatch::Range(*protocol, n, n),
                            origin: origin.to_string(),
                        });
                    }
                }
            }
        }
        out
    }

    /// The allowances of one direction for `pod`; None when no policy isolates it there.
    fn direction(&mut self, pod: &PodInfo, egress: bool) -> Option<Vec<Allow>> {
        let policies = self.inputs.policies;
        let mut isolated = false;
        let mut allows = Vec::new();
        for policy in policies.iter().filter(|p| p.selects(pod)) {
            let rules = if egress {
                &policy.egress
            } else {
                &policy.ingress
            };
            let Some(rules) = rules else { continue };
            isolated = true;
            for (i, rule) in rules.iter().enumerate() {
                let origin = format!(
                    "{}/{} {} rule {i}",
                    policy.namespace,
                    policy.name,
                    if egress { "egress" } else { "ingress" }
                );
                allows.extend(self.rule_allows(
                    policy,
                    rule.peers.as_deref(),
                    rule.ports.as_deref(),
                    pod,
                    egress,
                    &origin,
                ));
            }
        }
        // A pod and its rules may name one combination twice (two policies alike); once is enough.
        let mut seen = BTreeSet::new();
        allows.retain(|a| seen.insert(format!("{:?}{:?}", a.peer, a.ports)));
        isolated.then_some(allows)
    }
}

/// The plan for `inputs.node_name`: only its own pods get chains (another node's agent isolates
/// its pods), while peers are pods of every node.
pub fn build(inputs: &Inputs<'_>) -> Plan {
    let mut b = Builder {
        inputs,
        ns_labels: inputs
            .namespaces
            .iter()
            .map(|n| (n.name.as_str(), &n.labels))
            .collect(),
        sets: Vec::new(),
        set_index: HashMap::new(),
        peer_sets: HashMap::new(),
    };
    let mut local: Vec<&PodInfo> = inputs
        .pods
        .iter()
        .filter(|p| p.node.as_deref() == Some(inputs.node_name))
        .collect();
    local.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
    // Two pods claiming one address (a stale status) would give the address two chains; the
    // first by name wins rather than failing the whole table.
    let mut claimed = BTreeSet::new();
    let mut pods = Vec::new();
    for pod in local {
        if !claimed.insert(pod.ip) {
            continue;
        }
        let ingress = b.direction(pod, false);
        let egress = b.direction(pod, true);
        if ingress.is_none() && egress.is_none() {
            continue;
        }
        pods.push(PodPlan {
            namespace: pod.namespace.clone(),
            name: pod.name.clone(),
            ip: pod.ip,
            ingress,
            egress,
        });
    }
    Plan { sets: b.sets, pods }
}
