//! Several real nodes on one machine: `rkube server --nodes N` (no upstream counterpart; kind and k3d
//! run their nodes as containers on a Docker network). Each node is a kubelet with a containerd of
//! its own in a network namespace of its own (node 0 in `<prefix>`, node i in `<prefix>-<i>`), joined
//! by a namespace that plays the machines' LAN (`<prefix>-fabric`: a bridge with one veth per node,
//! and the control plane's address). The host's own network is never touched.
//!
//! Pod traffic crosses nodes as flannel's host-gw backend sends it: every node, and the fabric, routes
//! each other node's podCIDR via that node's address. The routes follow the Nodes' `spec.podCIDR`s,
//! which the node IPAM controller assigns after the kubelets register ([`run_routes`]).
//!
//! The API server reaches kubelets and pods from inside the fabric (its kubelet client and pod proxy
//! dial there), and the cluster DNS listens there, at the fabric's first address.

use std::collections::{BTreeMap, HashMap};
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};

/// The bridge in the fabric namespace, and each node's end of its link to it.
const BRIDGE: &str = "fabric0";
const NODE_LINK: &str = "eth0";

/// The namespaces and addresses of `--nodes N`.
#[derive(Clone, Debug)]
pub struct Fabric {
    prefix: String,
    base: u32,
    bits: u8,
    pub nodes: usize,
}

impl Fabric {
    /// `nodes` nodes named after `prefix`, with addresses from `cidr` (IPv4): the first for the
    /// control plane, the next ones for the nodes.
    pub fn new(prefix: &str, cidr: &str, nodes: usize) -> Result<Fabric, String> {
        let bad = |why: &str| format!("--node-network-cidr {cidr:?}: {why}");
        let (ip, bits) = cidr.split_once('/').ok_or_else(|| bad("not a CIDR"))?;
        let ip: Ipv4Addr = ip.parse().map_err(|_| bad("not an IPv4 CIDR"))?;
        let bits: u8 = bits.parse().map_err(|_| bad("not a CIDR"))?;
        if !(8..=30).contains(&bits) {
            return Err(bad("the prefix length must be between 8 and 30"));
        }
        if nodes == 0 {
            return Err("--nodes must be at least 1".into());
        }
        let size = 1u64 << (32 - bits);
        // Network and broadcast addresses, the control plane's, then one per node.
        if nodes as u64 + 3 > size {
            return Err(bad(&format!("too small for {nodes} nodes")));
        }
        // Interface names are at most 15 bytes: the veth in the fabric is `n<i>`.
        if prefix.is_empty() || prefix.len() > 40 || prefix.contains('/') {
            return Err(format!("invalid network namespace prefix {prefix:?}"));
        }
        let mask = u32::MAX << (32 - bits);
        Ok(Fabric {
            prefix: prefix.to_string(),
            base: u32::from(ip) & mask,
            bits,
            nodes,
        })
    }

    /// The namespace that joins the nodes.
    pub fn fabric_ns(&self) -> String {
        format!("{}-fabric", self.prefix)
    }

    pub fn fabric_ns_path(&self) -> PathBuf {
        PathBuf::from("/run/netns").join(self.fabric_ns())
    }

    /// Node `i`'s namespace: node 0 keeps the plain prefix, as with one node.
    pub fn node_ns(&self, i: usize) -> String {
        if i == 0 {
            self.prefix.clone()
        } else {
            format!("{}-{i}", self.prefix)
        }
    }

    /// The control plane's address on the fabric (the cluster DNS listens there).
    pub fn gateway(&self) -> Ipv4Addr {
        Ipv4Addr::from(self.base + 1)
    }

    /// Node `i`'s InternalIP.
    pub fn node_ip(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::from(self.base + 2 + i as u32)
    }

    /// Node `i`'s name: node 0 keeps `base`, the others get `-<i>` appended.
    pub fn node_name(base: &str, i: usize) -> String {
        if i == 0 {
            base.to_string()
        } else {
            format!("{base}-{i}")
        }
    }

    /// Creates the namespaces, the bridge and the links, or keeps them when a previous run made them
    /// (a restarted server finds its nodes' namespaces as it left them).
    pub fn setup(&self) -> Result<(), String> {
        let fabric = self.fabric_ns();
        kubelet::netns::ensure_named(&fabric)?;
        if !link_exists(&fabric, BRIDGE) {
            ip(&["-n", &fabric, "link", "add", BRIDGE, "type", "bridge"])?;
        }
        let gw = format!("{}/{}", self.gateway(), self.bits);
        ip(&["-n", &fabric, "addr", "replace", &gw, "dev", BRIDGE])?;
        ip(&["-n", &fabric, "link", "set", BRIDGE, "up"])?;
        for i in 0..self.nodes {
            let ns = self.node_ns(i);
            kubelet::netns::ensure_named(&ns)?;
            let peer = format!("n{i}");
            if !link_exists(&ns, NODE_LINK) {
                if link_exists(&fabric, &peer) {
                    // A half-made link from an interrupted run.
                    ip(&["-n", &fabric, "link", "del", &peer])?;
                }
                ip(&[
                    "-n", &fabric, "link", "add", &peer, "type", "veth", "peer", "name", NODE_LINK,
                    "netns", &ns,
                ])?;
            }
            ip(&["-n", &fabric, "link", "set", &peer, "master", BRIDGE, "up"])?;
            let addr = format!("{}/{}", self.node_ip(i), self.bits);
            ip(&["-n", &ns, "addr", "replace", &addr, "dev", NODE_LINK])?;
            ip(&["-n", &ns, "link", "set", NODE_LINK, "up"])?;
            // A default route, as a machine has: without one the node's own connections to a
            // ClusterIP (host-network pods, the node itself) fail before kube-proxy's DNAT.
            let gw = self.gateway().to_string();
            ip(&["-n", &ns, "route", "replace", "default", "via", &gw])?;
            // Pods' packets to other nodes are forwarded from the pod bridge to the fabric link.
            run(
                "ip",
                &[
                    "netns",
                    "exec",
                    &ns,
                    "sysctl",
                    "-qw",
                    "net.ipv4.ip_forward=1",
                ],
            )?;
        }
        Ok(())
    }
}

/// Creates network namespace `ns` if missing and puts `addr` on its loopback: an address local to
/// the namespace that its pods' packets (through the pod bridge) are delivered to.
pub fn add_local_address(ns: &str, addr: Ipv4Addr) -> Result<(), String> {
    kubelet::netns::ensure_named(ns)?;
    ip(&[
        "-n",
        ns,
        "addr",
        "replace",
        &format!("{addr}/32"),
        "dev",
        "lo",
    ])
}

fn link_exists(ns: &str, link: &str) -> bool {
    Command::new("ip")
        .args(["-n", ns, "link", "show", link])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn ip(args: &[&str]) -> Result<(), String> {
    run("ip", args)
}

fn run(program: &str, args: &[&str]) -> Result<(), String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("cannot run {program}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{program} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// Where each namespace should route each pod CIDR: `(namespace, cidr) -> via`. A node's own CIDR
/// is on its pod bridge, so only the other nodes and the fabric get a route to it.
pub fn desired_routes(
    fabric: &Fabric,
    pod_cidrs: &HashMap<usize, Vec<String>>,
) -> BTreeMap<(String, String), Ipv4Addr> {
    let mut out = BTreeMap::new();
    for (&owner, cidrs) in pod_cidrs {
        // Only IPv4 pod CIDRs: the fabric has no IPv6 addresses.
        for cidr in cidrs.iter().filter(|c| !c.contains(':')) {
            let via = fabric.node_ip(owner);
            out.insert((fabric.fabric_ns(), cidr.clone()), via);
            for i in (0..fabric.nodes).filter(|&i| i != owner) {
                out.insert((fabric.node_ns(i), cidr.clone()), via);
            }
        }
    }
    out
}

/// Keeps the host-gw routes in step with the Nodes' pod CIDRs (checked every second; a few nodes
/// make this a short list).
pub async fn run_routes(client: kube::Client, fabric: Fabric, names: Vec<String>) {
    let api: Api<Node> = Api::all(client);
    let mut applied: BTreeMap<(String, String), Ipv4Addr> = BTreeMap::new();
    loop {
        match api.list(&ListParams::default()).await {
            Ok(list) => {
                let mut cidrs = HashMap::new();
                for node in list.items {
                    let Some(i) = names
                        .iter()
                        .position(|n| Some(n) == node.metadata.name.as_ref())
                    else {
                        continue;
                    };
                    let spec = node.spec.unwrap_or_default();
                    let mut all = spec.pod_cidrs.unwrap_or_default();
                    if all.is_empty() {
                        all.extend(spec.pod_cidr);
                    }
                    cidrs.insert(i, all);
                }
                let wanted = desired_routes(&fabric, &cidrs);
                for ((ns, cidr), via) in &wanted {
                    if applied.get(&(ns.clone(), cidr.clone())) == Some(via) {
                        continue;
                    }
                    let via_s = via.to_string();
                    match ip(&["-n", ns, "route", "replace", cidr, "via", &via_s]) {
                        Ok(()) => {
                            applied.insert((ns.clone(), cidr.clone()), *via);
                        }
                        Err(e) => tracing::warn!(error = %e, "adding a pod route failed"),
                    }
                }
                let gone: Vec<_> = applied
                    .keys()
                    .filter(|k| !wanted.contains_key(*k))
                    .cloned()
                    .collect();
                for (ns, cidr) in gone {
                    let _ = ip(&["-n", &ns, "route", "del", &cidr]);
                    applied.remove(&(ns, cidr));
                }
            }
            Err(e) => tracing::debug!(error = %e, "listing nodes for pod routes failed"),
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_and_names() {
        let f = Fabric::new("rk", "172.31.0.0/24", 3).unwrap();
        assert_eq!(f.gateway().to_string(), "172.31.0.1");
        assert_eq!(f.node_ip(0).to_string(), "172.31.0.2");
        assert_eq!(f.node_ip(2).to_string(), "172.31.0.4");
        assert_eq!(f.node_ns(0), "rk");
        assert_eq!(f.node_ns(2), "rk-2");
        assert_eq!(f.fabric_ns(), "rk-fabric");
        assert_eq!(Fabric::node_name("n", 0), "n");
        assert_eq!(Fabric::node_name("n", 1), "n-1");
        assert!(Fabric::new("rk", "172.31.0.0/30", 2).is_err(), "too small");
        assert!(Fabric::new("rk", "172.31.0.0/29", 5).is_ok());
        assert!(Fabric::new("rk", "nonsense", 2).is_err());
        assert!(Fabric::new("rk", "fd00::/64", 2).is_err());
        assert!(Fabric::new("rk", "10.0.0.0/24", 0).is_err());
    }

    #[test]
    fn every_other_namespace_routes_a_node_cidr_via_the_node() {
        let f = Fabric::new("rk", "172.31.0.0/24", 3).unwrap();
        let cidrs = HashMap::from([
            (0, vec!["10.42.0.0/24".to_string()]),
            (2, vec!["10.42.2.0/24".to_string(), "fd00::/64".to_string()]),
        ]);
        let r = desired_routes(&f, &cidrs);
        let via = |ns: &str, c: &str| r.get(&(ns.to_string(), c.to_string())).copied();
        let n0: Ipv4Addr = "172.31.0.2".parse().unwrap();
        let n2: Ipv4Addr = "172.31.0.4".parse().unwrap();
        assert_eq!(via("rk-fabric", "10.42.0.0/24"), Some(n0));
        assert_eq!(via("rk-1", "10.42.0.0/24"), Some(n0));
        assert_eq!(via("rk-2", "10.42.0.0/24"), Some(n0));
        assert_eq!(via("rk", "10.42.0.0/24"), None, "its own bridge has it");
        assert_eq!(via("rk", "10.42.2.0/24"), Some(n2));
        assert_eq!(via("rk-2", "10.42.2.0/24"), None);
        assert!(r.keys().all(|(_, c)| !c.contains(':')));
        assert_eq!(r.len(), 6);
    }
}
