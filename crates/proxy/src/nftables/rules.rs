//! The nftables ruleset, as a pure function of the service and endpoints maps (upstream
//! `pkg/proxy/nftables/proxier.go`: `setupNFTables`, `syncProxyRules`,
//! `writeServiceToEndpointRules`). The output is an `nft -f` script applied as one transaction.
//!
//! Same layout and names as upstream's `ip kube-proxy` table: base chains `filter-*`/`nat-*`, the
//! `services` chain dispatching through the `service-ips` and `service-nodeports` verdict maps,
//! `endpoints-check` rejecting through `no-endpoint-services`/`no-endpoint-nodeports`,
//! `mark-for-masquerade`/`masquerading`, the `nodeport-ips` set, per-port `service-`/`local-`/
//! `external-` chains, per-endpoint `endpoint-` chains and `affinity-` sets with timeouts.
//!
//! Partial syncs as upstream's: map contents are kept in [`TableState`] and only their differences
//! are written; chains are rewritten only for Services that changed; a full sync rewrites all.
//! Differs: no loadBalancerSourceRanges firewall (`firewall-ips`) and no `cluster-ips` check of
//! unallocated ClusterIPs (they need the ServiceCIDRs); IPv4 only; the random pick among
//! endpoints is a rule per endpoint instead of an anonymous vmap (see `write_endpoint_rules`).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use crate::endpointschangetracker::{Endpoint, EndpointsMap};
use crate::servicechangetracker::{NamespacedName, ServicePort, ServicePortMap};
use crate::topology::categorize;

pub const TABLE: &str = "kube-proxy";
const SERVICES: &str = "services";
const SERVICE_IPS: &str = "service-ips";
const SERVICE_NODEPORTS: &str = "service-nodeports";
const NODEPORT_IPS: &str = "nodeport-ips";
const ENDPOINTS_CHECK: &str = "endpoints-check";
const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
const REJECT_CHAIN: &str = "reject-chain";
const MARK_MASQ: &str = "mark-for-masquerade";
const MASQUERADING: &str = "masquerading";

/// The verdict maps whose contents a sync diffs.
pub const MAPS: [&str; 4] = [
    SERVICE_IPS,
    SERVICE_NODEPORTS,
    NO_ENDPOINT_SERVICES,
    NO_ENDPOINT_NODEPORTS,
];

/// Base chains: (name, type, hook, priority). Filter chains see pre-DNAT addresses. Priorities are
/// upstream's `dstnat - 10`, `dstnat` (-100) and `srcnat` (100) as numbers: nft before 1.0.7
/// accepts the names only on the hooks they belong to.
const BASE_CHAINS: [(&str, &str, &str, &str); 7] = [
    ("filter-prerouting", "filter", "prerouting", "-110"),
    ("filter-input", "filter", "input", "-110"),
    ("filter-forward", "filter", "forward", "-110"),
    ("filter-output", "filter", "output", "-110"),
    ("nat-prerouting", "nat", "prerouting", "-100"),
    ("nat-output", "nat", "output", "-100"),
    ("nat-postrouting", "nat", "postrouting", "100"),
];

/// Jumps from base chains: (target, from, match). Reject is only valid in input/forward/output
/// hooks, hence endpoints-check there.
const JUMPS: [(&str, &str, &str); 6] = [
    (ENDPOINTS_CHECK, "filter-input", "ct state new "),
    (ENDPOINTS_CHECK, "filter-forward", "ct state new "),
    (ENDPOINTS_CHECK, "filter-output", "ct state new "),
    (SERVICES, "nat-output", ""),
    (SERVICES, "nat-prerouting", ""),
    (MASQUERADING, "nat-postrouting", ""),
];

/// Proxier settings the rules depend on.
#[derive(Clone, Debug)]
pub struct Config {
    /// The fwmark bit requesting SNAT (upstream `--masquerade-bit`, default 14: 0x4000).
    pub masquerade_mark: u32,
    pub masquerade_all: bool,
    /// `--cluster-cidr`: traffic from outside it to a ClusterIP is masqueraded.
    pub cluster_cidr: Option<String>,
    /// Addresses NodePorts answer on; `None`: every local address but loopback.
    pub nodeport_ips: Option<Vec<Ipv4Addr>>,
    pub node_name: String,
    pub node_labels: HashMap<String, String>,
}

/// What the table holds after the last successful sync.
#[derive(Clone, Debug, Default)]
pub struct TableState {
    /// Map name -> key -> verdict.
    pub elements: HashMap<&'static str, HashMap<String, String>>,
    /// Service and endpoint chains in use.
    pub chains: HashSet<String>,
    pub affinity_sets: HashSet<String>,
}

/// One sync's script and what the table will hold once it is applied.
#[derive(Debug, Default)]
pub struct Plan {
    pub script: String,
    pub state: TableState,
    /// Chains no longer used: flushed by this script, to be deleted by a later one (kernels
    /// before 6.2 do not see at once that a deleted map element released its chain).
    pub stale_chains: Vec<String>,
    /// Rules written by this script.
    pub rules_written: usize,
    /// Rules of the whole ruleset (chains of unchanged Services counted too).
    pub rules_total: usize,
}

/// `nft` statements of one sync; `existing` lists the service chains found in the kernel (full
/// syncs), so chains of a previous process are cleaned up too.
pub fn generate(
    cfg: &Config,
    services: &ServicePortMap,
    endpoints: &EndpointsMap,
    full: bool,
    updated: &HashSet<NamespacedName>,
    prev: &TableState,
    existing: &HashSet<String>,
) -> Plan {
    let mut g = Gen {
        cfg,
        chains_out: String::new(),
        rules_out: String::new(),
        sets_out: String::new(),
        state: TableState::default(),
        rules_written: 0,
        rules_total: 0,
    };
    for m in MAPS {
        g.state.elements.insert(m, HashMap::new());
    }
    let mut head = String::new();
    setup(cfg, &mut head);
    let mut ports: Vec<&ServicePort> = services.values().map(|p| p.as_ref()).collect();
    ports.sort_by(|a, b| a.name.cmp(&b.name));
    let empty = Vec::new();
    for svc in ports {
        let eps = endpoints.get(&svc.name).unwrap_or(&empty);
        let write = full || updated.contains(&svc.name.service);
        g.service(svc, eps, write);
    }

    let mut s = head;
    s.push_str(&g.sets_out);
    s.push_str(&g.chains_out);
    s.push_str(&g.rules_out);
    for m in MAPS {
        let new = &g.state.elements[m];
        let mut adds: Vec<String> = Vec::new();
        if full {
            let _ = writeln!(s, "flush map ip {TABLE} {m}");
            adds.extend(new.iter().map(|(k, v)| format!("{k} : {v}")));
        } else {
            let old = prev.elements.get(m);
            let mut dels: Vec<&str> = Vec::new();
            for (k, v) in old.into_iter().flatten() {
                match new.get(k) {
                    Some(nv) if nv == v => {}
                    Some(nv) => {
                        dels.push(k);
                        adds.push(format!("{k} : {nv}"));
                    }
                    None => dels.push(k),
                }
            }
            for (k, v) in new {
                if !old.is_some_and(|o| o.contains_key(k)) {
                    adds.push(format!("{k} : {v}"));
                }
            }
            batched(&mut s, "delete", m, dels.iter().map(|k| k.to_string()));
        }
        adds.sort();
        batched(&mut s, "add", m, adds.into_iter());
    }
    let mut stale: Vec<String> = prev
        .chains
        .iter()
        .chain(existing.iter())
        .filter(|c| !g.state.chains.contains(*c))
        .cloned()
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    stale.sort();
    for c in &stale {
        let _ = writeln!(s, "flush chain ip {TABLE} {c}");
    }
    for set in &prev.affinity_sets {
        if !g.state.affinity_sets.contains(set) {
            let _ = writeln!(s, "delete set ip {TABLE} {set}");
        }
    }
    Plan {
        script: s,
        stale_chains: stale,
        rules_written: g.rules_written,
        rules_total: g.rules_total,
        state: g.state,
    }
}

/// `add|delete element` statements, a thousand elements each: one statement per element makes
/// `nft` parse far slower at 10,000 Services.
fn batched(s: &mut String, verb: &str, map: &str, items: impl Iterator<Item = String>) {
    let items: Vec<String> = items.collect();
    for chunk in items.chunks(1000) {
        let _ = writeln!(
            s,
            "{verb} element ip {TABLE} {map} {{ {} }}",
            chunk.join(", ")
        );
    }
}

/// The fixed part of the table, rewritten every sync (upstream `setupNFTables`).
fn setup(cfg: &Config, s: &mut String) {
    let mark = format!("{:#08x}", cfg.masquerade_mark);
    let _ = writeln!(
        s,
        "add table ip {TABLE} {{ comment \"rules for kube-proxy\" ; }}"
    );
    for (name, ty, hook, prio) in BASE_CHAINS {
        let _ = writeln!(
            s,
            "add chain ip {TABLE} {name} {{ type {ty} hook {hook} priority {prio} ; }}"
        );
        let _ = writeln!(s, "flush chain ip {TABLE} {name}");
    }
    for c in [
        ENDPOINTS_CHECK,
        SERVICES,
        MASQUERADING,
        MARK_MASQ,
        REJECT_CHAIN,
    ] {
        let _ = writeln!(s, "add chain ip {TABLE} {c}");
        let _ = writeln!(s, "flush chain ip {TABLE} {c}");
    }
    for (to, from, m) in JUMPS {
        let _ = writeln!(s, "add rule ip {TABLE} {from} {m}jump {to}");
    }
    let _ = writeln!(s, "add rule ip {TABLE} {MARK_MASQ} mark set mark or {mark}");
    let _ = writeln!(
        s,
        "add rule ip {TABLE} {MASQUERADING} mark and {mark} == 0 return"
    );
    let _ = writeln!(
        s,
        "add rule ip {TABLE} {MASQUERADING} mark set mark xor {mark}"
    );
    let _ = writeln!(
        s,
        "add rule ip {TABLE} {MASQUERADING} masquerade fully-random"
    );
    let _ = writeln!(s, "add rule ip {TABLE} {REJECT_CHAIN} reject");

    let _ = writeln!(
        s,
        "add set ip {TABLE} {NODEPORT_IPS} {{ type ipv4_addr ; comment \"IPs that accept NodePort traffic\" ; }}"
    );
    let nodeport_match = match &cfg.nodeport_ips {
        None => {
            // add+delete: delete alone fails when the set does not exist.
            let _ = writeln!(s, "delete set ip {TABLE} {NODEPORT_IPS}");
            "fib daddr type local ip daddr != 127.0.0.0/8".to_string()
        }
        Some(ips) => {
            let _ = writeln!(s, "flush set ip {TABLE} {NODEPORT_IPS}");
            let ips: Vec<String> = ips
                .iter()
                .filter(|ip| !ip.is_loopback())
                .map(|ip| ip.to_string())
                .collect();
            if !ips.is_empty() {
                let _ = writeln!(
                    s,
                    "add element ip {TABLE} {NODEPORT_IPS} {{ {} }}",
                    ips.join(", ")
                );
            }
            format!("ip daddr @{NODEPORT_IPS}")
        }
    };
    for (m, k, c) in [
        (
            NO_ENDPOINT_SERVICES,
            "ipv4_addr . inet_proto . inet_service",
            "vmap to drop or reject packets to services with no endpoints",
        ),
        (
            NO_ENDPOINT_NODEPORTS,
            "inet_proto . inet_service",
            "vmap to drop or reject packets to service nodeports with no endpoints",
        ),
        (
            SERVICE_IPS,
            "ipv4_addr . inet_proto . inet_service",
            "ClusterIP, ExternalIP and LoadBalancer IP traffic",
        ),
        (
            SERVICE_NODEPORTS,
            "inet_proto . inet_service",
            "NodePort traffic",
        ),
    ] {
        let _ = writeln!(
            s,
            "add map ip {TABLE} {m} {{ type {k} : verdict ; comment \"{c}\" ; }}"
        );
    }
    let _ = writeln!(
        s,
        "add rule ip {TABLE} {ENDPOINTS_CHECK} ip daddr . meta l4proto . th dport vmap @{NO_ENDPOINT_SERVICES}"
    );
    let _ = writeln!(
        s,
        "add rule ip {TABLE} {ENDPOINTS_CHECK} {nodeport_match} meta l4proto . th dport vmap @{NO_ENDPOINT_NODEPORTS}"
    );
    let _ = writeln!(
        s,
        "add rule ip {TABLE} {SERVICES} ip daddr . meta l4proto . th dport vmap @{SERVICE_IPS}"
    );
    let _ = writeln!(
        s,
        "add rule ip {TABLE} {SERVICES} {nodeport_match} meta l4proto . th dport vmap @{SERVICE_NODEPORTS}"
    );
}

struct Gen<'a> {
    cfg: &'a Config,
    chains_out: String,
    rules_out: String,
    sets_out: String,
    state: TableState,
    rules_written: usize,
    rules_total: usize,
}

impl Gen<'_> {
    fn element(&mut self, map: &'static str, key: String, verdict: String) {
        if let Some(m) = self.state.elements.get_mut(map) {
            m.insert(key, verdict);
        }
    }

    fn chain(&mut self, name: &str, write: bool) {
        if self.state.chains.insert(name.to_string()) && write {
            let _ = writeln!(self.chains_out, "add chain ip {TABLE} {name}");
            let _ = writeln!(self.chains_out, "flush chain ip {TABLE} {name}");
        }
    }

    fn rule(&mut self, chain: &str, rule: &str, write: bool) {
        self.rules_total += 1;
        if write {
            self.rules_written += 1;
            let _ = writeln!(self.rules_out, "add rule ip {TABLE} {chain} {rule}");
        }
    }

    /// One Service port: map elements always (they are diffed), chains when `write`.
    fn service(&mut self, svc: &ServicePort, eps: &[Endpoint], write: bool) {
        let cfg = self.cfg;
        let c = categorize(eps, svc, &cfg.node_name, &cfg.node_labels);
        let proto = svc.name.protocol.lower();
        let n = &svc.names;
        for ep in &c.all_reachable {
            self.chain(&ep.names.nft_chain, write);
        }
        let uses_cluster = !c.cluster.is_empty() && svc.uses_cluster_endpoints();
        if uses_cluster {
            self.chain(&n.nft_cluster, write);
        }
        let uses_local = !c.local.is_empty() && svc.uses_local_endpoints();
        if uses_local {
            self.chain(&n.nft_local, write);
        }
        let (internal_chain, has_internal) = if svc.internal_policy_local {
            (&n.nft_local, !c.local.is_empty())
        } else {
            (&n.nft_cluster, c.has_any)
        };
        let (external_policy_chain, has_external) = if svc.external_policy_local {
            (&n.nft_local, !c.local.is_empty())
        } else {
            (&n.nft_cluster, c.has_any)
        };
        let uses_external = c.has_any && svc.externally_accessible;
        if uses_external {
            self.chain(&n.nft_external, write);
        }
        // No endpoints anywhere: reject (the client sees "connection refused" at once). Endpoints
        // elsewhere but none for this policy: drop, as upstream.
        let reject = format!("goto {REJECT_CHAIN}");
        let internal_verdict = if c.has_any {
            "drop".to_string()
        } else {
            reject.clone()
        };
        let external_verdict = internal_verdict.clone();
        let key = |ip: Ipv4Addr, port: u16| format!("{ip} . {proto} . {port}");

        if has_internal {
            self.element(
                SERVICE_IPS,
                key(svc.cluster_ip, svc.port),
                format!("goto {internal_chain}"),
            );
        } else {
            self.element(
                NO_ENDPOINT_SERVICES,
                key(svc.cluster_ip, svc.port),
                internal_verdict,
            );
        }
        for ip in svc.external_ips.iter().chain(svc.load_balancer_vips.iter()) {
            if c.has_any {
                self.element(
                    SERVICE_IPS,
                    key(*ip, svc.port),
                    format!("goto {}", n.nft_external),
                );
            }
            if !has_external {
                self.element(
                    NO_ENDPOINT_SERVICES,
                    key(*ip, svc.port),
                    external_verdict.clone(),
                );
            }
        }
        if svc.node_port != 0 {
            let k = format!("{proto} . {}", svc.node_port);
            if c.has_any {
                self.element(
                    SERVICE_NODEPORTS,
                    k.clone(),
                    format!("goto {}", n.nft_external),
                );
            }
            if !has_external {
                self.element(NO_ENDPOINT_NODEPORTS, k, external_verdict);
            }
        }

        if has_internal {
            let dst = format!("ip daddr {} {proto} dport {}", svc.cluster_ip, svc.port);
            if cfg.masquerade_all {
                self.rule(internal_chain, &format!("{dst} jump {MARK_MASQ}"), write);
            } else if let Some(cidr) = &cfg.cluster_cidr {
                // Off-cluster traffic to a ClusterIP (a route to the service range via a node)
                // may leave the node again: masquerade it so replies come back here.
                self.rule(
                    internal_chain,
                    &format!("{dst} ip saddr != {cidr} jump {MARK_MASQ}"),
                    write,
                );
            }
        }
        if uses_external {
            let ext = n.nft_external.clone();
            if !svc.external_policy_local {
                // Cluster policy may pick an endpoint on another node: masquerade.
                self.rule(&ext, &format!("jump {MARK_MASQ}"), write);
            } else {
                if let Some(cidr) = &cfg.cluster_cidr {
                    // Pod traffic to an external address is subject to neither policy (as if it
                    // went out to the load balancer and back).
                    self.rule(
                        &ext,
                        &format!("ip saddr {cidr} goto {}", n.nft_cluster),
                        write,
                    );
                }
                // Traffic from the node itself has a local source address: masquerade it.
                self.rule(
                    &ext,
                    &format!("fib saddr type local jump {MARK_MASQ}"),
                    write,
                );
                self.rule(
                    &ext,
                    &format!("fib saddr type local goto {}", n.nft_cluster),
                    write,
                );
            }
            if has_external {
                self.rule(&ext, &format!("goto {external_policy_chain}"), write);
            }
        }
        if let Some(timeout) = svc.sticky_max_age_seconds {
            for ep in &c.all_reachable {
                let set = &ep.names.nft_affinity_set;
                self.state.affinity_sets.insert(set.clone());
                if write {
                    // "dynamic": the kernel adds it anyway, and a later add without it would be
                    // a conflicting redefinition.
                    let _ = writeln!(
                        self.sets_out,
                        "add set ip {TABLE} {set} {{ type ipv4_addr ; flags dynamic,timeout ; timeout {timeout}s ; }}"
                    );
                }
            }
        }
        if uses_cluster {
            self.write_endpoint_rules(svc, &n.nft_cluster, &c.cluster, write);
        }
        if uses_local {
            self.write_endpoint_rules(svc, &n.nft_local, &c.local, write);
        }
        for ep in &c.all_reachable {
            let chain = &ep.names.nft_chain;
            // Hairpin: a pod reaching itself through the Service must see a source other than
            // its own address, or it would answer itself directly.
            self.rule(
                chain,
                &format!("ip saddr {} jump {MARK_MASQ}", ep.ip),
                write,
            );
            if svc.sticky_max_age_seconds.is_some() {
                self.rule(
                    chain,
                    &format!("update @{} {{ ip saddr }}", ep.names.nft_affinity_set),
                    write,
                );
            }
            self.rule(
                chain,
                &format!("meta l4proto {proto} dnat to {}", ep.addr()),
                write,
            );
        }
    }

    /// Upstream `writeServiceToEndpointRules`: affinity first, then a random pick.
    fn write_endpoint_rules(
        &mut self,
        svc: &ServicePort,
        chain: &str,
        eps: &[&Endpoint],
        write: bool,
    ) {
        if svc.sticky_max_age_seconds.is_some() {
            for ep in eps {
                let r = format!(
                    "ip saddr @{} goto {}",
                    ep.names.nft_affinity_set, ep.names.nft_chain
                );
                self.rule(chain, &r, write);
            }
        }
        // Upstream writes one `numgen random mod N vmap { 0 : goto A, ... }`, an anonymous set per
        // Service. The kernel allocates anonymous set names by scanning every set of the table,
        // which makes a full sync quadratic: 35 s of system time for 10,000 Services on this
        // machine. The same distribution as rules: endpoint i with probability 1/(N-i), the
        // last one always (as the iptables mode's statistic rules do).
        let n = eps.len();
        for (i, ep) in eps.iter().enumerate() {
            let r = if i + 1 < n {
                format!(
                    "numgen random mod {} == 0 goto {}",
                    n - i,
                    ep.names.nft_chain
                )
            } else {
                format!("goto {}", ep.names.nft_chain)
            };
            self.rule(chain, &r, write);
        }
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
