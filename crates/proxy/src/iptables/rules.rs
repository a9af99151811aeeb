//! The iptables ruleset as an `iptables-restore --noflush` input, a pure function of the service
//! and endpoints maps (upstream `pkg/proxy/iptables/proxier.go`, `syncProxyRules` and
//! `writeServiceToEndpointRules`).
//!
//! Upstream's chains: filter `KUBE-SERVICES`/`KUBE-EXTERNAL-SERVICES` (REJECT for Services without
//! endpoints), `KUBE-FORWARD`, `KUBE-NODEPORTS` (health-check ports), `KUBE-PROXY-FIREWALL`; nat
//! `KUBE-SERVICES`, `KUBE-NODEPORTS`, `KUBE-POSTROUTING`, `KUBE-MARK-MASQ` and per port
//! `KUBE-SVC-`/`KUBE-SVL-`/`KUBE-EXT-`, per endpoint `KUBE-SEP-` (upstream hashes, see `names`);
//! `statistic` random probabilities and `recent` affinity. As upstream with
//! MinimizeIPTablesRestore, a partial sync rewrites the top-level chains and only the chains of
//! Services that changed; chains a restore does not declare are left as they are.
//! Differs: no loadBalancerSourceRanges (`KUBE-FW-`, KUBE-PROXY-FIREWALL stays empty); IPv4 only.

use std::collections::HashSet;
use std::fmt::Write as _;

use crate::endpointschangetracker::{Endpoint, EndpointsMap};
use crate::nftables::rules::Config;
use crate::servicechangetracker::{NamespacedName, ServicePort, ServicePortMap};
use crate::topology::categorize;

/// Above this many endpoints upstream drops rule comments to keep restores small.
const LARGE_CLUSTER_ENDPOINTS: usize = 1000;

/// A full sync declaring more Service chains than this writes them in restores of about this
/// many chains each ([`Plan::chunks`]). `iptables-restore --noflush` of the nf_tables backend
/// (1.8.9) keeps the chains a restore names in a sorted linked list, inserting every chain and
/// jump target of every line by a linear walk: one restore of 10,000 Services x 5 endpoints
/// (60,000 chains, 170,000 rules) did not finish in 8 minutes.
pub const CHUNK_CHAINS: usize = 2000;

/// Prefixes of the per-service chains (stale ones are deleted).
pub const SERVICE_CHAIN_PREFIXES: [&str; 5] = [
    "KUBE-SVC-",
    "KUBE-SVL-",
    "KUBE-EXT-",
    "KUBE-FW-",
    "KUBE-SEP-",
];

/// Jumps from built-in chains: (table, built-in chain, target, comment, extra match).
pub const JUMPS: [(&str, &str, &str, &str, &str); 11] = [
    (
        "filter",
        "INPUT",
        "KUBE-EXTERNAL-SERVICES",
        "kubernetes externally-visible service portals",
        "-m conntrack --ctstate NEW",
    ),
    (
        "filter",
        "FORWARD",
        "KUBE-EXTERNAL-SERVICES",
        "kubernetes externally-visible service portals",
        "-m conntrack --ctstate NEW",
    ),
    (
        "filter",
        "INPUT",
        "KUBE-NODEPORTS",
        "kubernetes health check service ports",
        "",
    ),
    (
        "filter",
        "FORWARD",
        "KUBE-SERVICES",
        "kubernetes service portals",
        "-m conntrack --ctstate NEW",
    ),
    (
        "filter",
        "OUTPUT",
        "KUBE-SERVICES",
        "kubernetes service portals",
        "-m conntrack --ctstate NEW",
    ),
    (
        "filter",
        "FORWARD",
        "KUBE-FORWARD",
        "kubernetes forwarding rules",
        "",
    ),
    (
        "filter",
        "INPUT",
        "KUBE-PROXY-FIREWALL",
        "kubernetes load balancer firewall",
        "-m conntrack --ctstate NEW",
    ),
    (
        "filter",
        "OUTPUT",
        "KUBE-PROXY-FIREWALL",
        "kubernetes load balancer firewall",
        "-m conntrack --ctstate NEW",
    ),
    (
        "nat",
        "OUTPUT",
        "KUBE-SERVICES",
        "kubernetes service portals",
        "",
    ),
    (
        "nat",
        "PREROUTING",
        "KUBE-SERVICES",
        "kubernetes service portals",
        "",
    ),
    (
        "nat",
        "POSTROUTING",
        "KUBE-POSTROUTING",
        "kubernetes postrouting rules",
        "",
    ),
];

/// nat chains of Services in use after the last successful sync.
#[derive(Clone, Debug, Default)]
pub struct TableState {
    pub chains: HashSet<String>,
}

#[derive(Debug, Default)]
pub struct Plan {
    /// Restores to apply before `script`, in order, on large full syncs: each declares and fills
    /// the chains of a group of Services (a Service's chains are always in one group, so every
    /// chain is complete whenever a jump reaches it). `script` then writes the top-level chains
    /// and deletes stale ones. Unlike upstream's single transaction, a failure part way leaves
    /// some Services rewritten and the old top-level chains in place (all still consistent); the
    /// next sync is a full one.
    pub chunks: Vec<String>,
    pub script: String,
    pub state: TableState,
    pub rules_written: usize,
    pub rules_total: usize,
    pub stale_chains: Vec<String>,
}

struct Gen<'a> {
    cfg: &'a Config,
    comments: bool,
    filter: String,
    nat_heads: String,
    nat_services: String,
    nat_nodeports: String,
    nat_chains: String,
    state: TableState,
    written: usize,
    total: usize,
    /// Service chains declared so far.
    declared: usize,
}

/// `-m comment --comment "..."`, unless the cluster is large.
fn comment(on: bool, text: &str) -> String {
    if on {
        format!("-m comment --comment \"{text}\" ")
    } else {
        String::new()
    }
}

/// The restore input of one sync; `existing` lists per-service nat chains found in the kernel
/// (full syncs), so chains of a previous process are removed too.
pub fn generate(
    cfg: &Config,
    services: &ServicePortMap,
    endpoints: &EndpointsMap,
    full: bool,
    updated: &HashSet<NamespacedName>,
    prev: &TableState,
    existing: &HashSet<String>,
) -> Plan {
    generate_chunked(
        cfg,
        services,
        endpoints,
        full,
        updated,
        prev,
        existing,
        CHUNK_CHAINS,
    )
}

/// [`generate`], with chunks of `chunk_chains` chains.
#[allow(clippy::too_many_arguments)]
fn generate_chunked(
    cfg: &Config,
    services: &ServicePortMap,
    endpoints: &EndpointsMap,
    full: bool,
    updated: &HashSet<NamespacedName>,
    prev: &TableState,
    existing: &HashSet<String>,
    chunk_chains: usize,
) -> Plan {
    let total_eps: usize = endpoints.values().map(|e| e.len()).sum();
    let mut g = Gen {
        cfg,
        comments: total_eps <= LARGE_CLUSTER_ENDPOINTS,
        filter: String::new(),
        nat_heads: String::new(),
        nat_services: String::new(),
        nat_nodeports: String::new(),
        nat_chains: String::new(),
        state: TableState::default(),
        written: 0,
        total: 0,
        declared: 0,
    };
    let mut ports: Vec<&ServicePort> = services.values().map(|p| p.as_ref()).collect();
    ports.sort_by(|a, b| a.name.cmp(&b.name));
    let empty = Vec::new();
    // After each Service: (chains declared, end of its declarations, end of its rules).
    let mut ends: Vec<(usize, usize, usize)> = Vec::new();
    for svc in ports {
        let eps = endpoints.get(&svc.name).unwrap_or(&empty);
        g.service(svc, eps, full || updated.contains(&svc.name.service));
        ends.push((g.declared, g.nat_heads.len(), g.nat_chains.len()));
    }
    let mark = format!("{:#x}", cfg.masquerade_mark);
    let mut chunks = Vec::new();
    if full && g.declared > chunk_chains {
        let (mut d0, mut h0, mut c0) = (0, 0, 0);
        for (d, h, c) in ends {
            if d - d0 >= chunk_chains {
                chunks.push(format!(
                    "*nat\n{}{}COMMIT\n",
                    &g.nat_heads[h0..h],
                    &g.nat_chains[c0..c]
                ));
                (d0, h0, c0) = (d, h, c);
            }
        }
        if d0 < g.declared {
            chunks.push(format!(
                "*nat\n{}{}COMMIT\n",
                &g.nat_heads[h0..],
                &g.nat_chains[c0..]
            ));
        }
        // The Services' rules jump to KUBE-MARK-MASQ, which may not exist yet: the first
        // chunk writes it whole too (declaring it flushes it, in the same transaction).
        if let Some(first) = chunks.first_mut() {
            first.insert_str(
                "*nat\n".len(),
                &format!(":KUBE-MARK-MASQ - [0:0]\n-A KUBE-MARK-MASQ -j MARK --or-mark {mark}\n"),
            );
        }
        // Declaring them again in `script` would flush them.
        g.nat_heads.clear();
        g.nat_chains.clear();
    }
    let mut s = String::with_capacity(g.nat_chains.len() + g.nat_services.len() + 4096);
    s.push_str("*filter\n");
    for c in [
        "KUBE-NODEPORTS",
        "KUBE-SERVICES",
        "KUBE-EXTERNAL-SERVICES",
        "KUBE-FORWARD",
        "KUBE-PROXY-FIREWALL",
    ] {
        let _ = writeln!(s, ":{c} - [0:0]");
    }
    s.push_str(&g.filter);
    let _ = writeln!(s, "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP");
    let _ = writeln!(s, "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark {mark}/{mark} -j ACCEPT");
    let _ = writeln!(s, "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT");
    s.push_str("COMMIT\n*nat\n");
    for c in [
        "KUBE-SERVICES",
        "KUBE-NODEPORTS",
        "KUBE-POSTROUTING",
        "KUBE-MARK-MASQ",
    ] {
        let _ = writeln!(s, ":{c} - [0:0]");
    }
    s.push_str(&g.nat_heads);
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
        let _ = writeln!(s, ":{c} - [0:0]");
    }
    let _ = writeln!(
        s,
        "-A KUBE-POSTROUTING -m mark ! --mark {mark}/{mark} -j RETURN"
    );
    let _ = writeln!(s, "-A KUBE-POSTROUTING -j MARK --xor-mark {mark}");
    let _ = writeln!(s, "-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully");
    let _ = writeln!(s, "-A KUBE-MARK-MASQ -j MARK --or-mark {mark}");
    s.push_str(&g.nat_services);
    let np = "-m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\"";
    match &cfg.nodeport_ips {
        None => {
            let _ = writeln!(
                s,
                "-A KUBE-SERVICES {np} -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"
            );
        }
        Some(ips) => {
            for ip in ips.iter().filter(|ip| !ip.is_loopback()) {
                let _ = writeln!(s, "-A KUBE-SERVICES {np} -d {ip} -j KUBE-NODEPORTS");
            }
        }
    }
    s.push_str(&g.nat_nodeports);
    s.push_str(&g.nat_chains);
    for c in &stale {
        let _ = writeln!(s, "-X {c}");
    }
    s.push_str("COMMIT\n");
    Plan {
        chunks,
        script: s,
        state: g.state,
        rules_written: g.written,
        rules_total: g.total,
        stale_chains: stale,
    }
}

impl Gen<'_> {
    fn chain(&mut self, name: &str, write: bool) {
        if self.state.chains.insert(name.to_string()) && write {
            self.declared += 1;
            let _ = writeln!(self.nat_heads, ":{name} - [0:0]");
        }
    }

    fn rule(&mut self, chain: &str, rule: &str, write: bool) {
        self.total += 1;
        if write {
            self.written += 1;
            let _ = writeln!(self.nat_chains, "-A {chain} {rule}");
        }
    }

    fn service(&mut self, svc: &ServicePort, eps: &[Endpoint], write: bool) {
        let cfg = self.cfg;
        let c = categorize(eps, svc, &cfg.node_name, &cfg.node_labels);
        let p = svc.name.protocol.lower();
        let n = &svc.names;
        let name = svc.name.to_string();
        let on = self.comments;
        for ep in &c.all_reachable {
            self.chain(&ep.names.ipt_chain, write);
        }
        let uses_cluster = !c.cluster.is_empty() && svc.uses_cluster_endpoints();
        if uses_cluster {
            self.chain(&n.ipt_cluster, write);
        }
        let uses_local = !c.local.is_empty() && svc.uses_local_endpoints();
        if uses_local {
            self.chain(&n.ipt_local, write);
        }
        let (internal_chain, has_internal) = if svc.internal_policy_local {
            (&n.ipt_local, !c.local.is_empty())
        } else {
            (&n.ipt_cluster, c.has_any)
        };
        let (external_policy_chain, has_external) = if svc.external_policy_local {
            (&n.ipt_local, !c.local.is_empty())
        } else {
            (&n.ipt_cluster, c.has_any)
        };
        let uses_external = c.has_any && svc.externally_accessible;
        if uses_external {
            self.chain(&n.ipt_external, write);
        }
        // Reject (connection refused at once) without endpoints anywhere; drop when there are
        // endpoints but none for this traffic's Local policy (upstream).
        let (int_target, int_why) = if c.has_any {
            ("DROP", "has no local endpoints")
        } else {
            ("REJECT", "has no endpoints")
        };
        let ext = (int_target, int_why);
        let dst =
            |ip: &std::net::Ipv4Addr, port: u16| format!("-m {p} -p {p} -d {ip} --dport {port}");

        let cip = dst(&svc.cluster_ip, svc.port);
        if has_internal {
            let _ = writeln!(
                self.nat_services,
                "-A KUBE-SERVICES {}{cip} -j {internal_chain}",
                comment(on, &format!("{name} cluster IP"))
            );
        } else {
            let _ = writeln!(
                self.filter,
                "-A KUBE-SERVICES {}{cip} -j {}",
                comment(on, &format!("{name} {}", int_why)),
                int_target
            );
        }
        for (ips, what) in [
            (&svc.external_ips, "external IP"),
            (&svc.load_balancer_vips, "loadbalancer IP"),
        ] {
            for ip in ips {
                let d = dst(ip, svc.port);
                if c.has_any {
                    let _ = writeln!(
                        self.nat_services,
                        "-A KUBE-SERVICES {}{d} -j {}",
                        comment(on, &format!("{name} {what}")),
                        n.ipt_external
                    );
                }
                if !has_external {
                    let _ = writeln!(
                        self.filter,
                        "-A KUBE-EXTERNAL-SERVICES {}{d} -j {}",
                        comment(on, &format!("{name} {}", ext.1)),
                        ext.0
                    );
                }
            }
        }
        if svc.node_port != 0 {
            let d = format!("-m {p} -p {p} --dport {}", svc.node_port);
            if c.has_any {
                let _ = writeln!(
                    self.nat_nodeports,
                    "-A KUBE-NODEPORTS {}{d} -j {}",
                    comment(on, &name),
                    n.ipt_external
                );
            }
            if !has_external {
                let _ = writeln!(
                    self.filter,
                    "-A KUBE-EXTERNAL-SERVICES {}-m addrtype --dst-type LOCAL {d} -j {}",
                    comment(on, &format!("{name} {}", ext.1)),
                    ext.0
                );
            }
        }
        if svc.health_check_node_port != 0 {
            let _ = writeln!(
                self.filter,
                "-A KUBE-NODEPORTS {}-m tcp -p tcp --dport {} -j ACCEPT",
                comment(on, &format!("{name} health check node port")),
                svc.health_check_node_port
            );
        }

        if has_internal {
            let why = comment(on, &format!("{name} cluster IP"));
            if cfg.masquerade_all {
                self.rule(
                    internal_chain,
                    &format!("{why}{cip} -j KUBE-MARK-MASQ"),
                    write,
                );
            } else if let Some(cidr) = &cfg.cluster_cidr {
                self.rule(
                    internal_chain,
                    &format!("{why}{cip} ! -s {cidr} -j KUBE-MARK-MASQ"),
                    write,
                );
            }
        }
        if uses_external {
            let ext_chain = n.ipt_external.clone();
            if !svc.external_policy_local {
                let why = comment(
                    on,
                    &format!("masquerade traffic for {name} external destinations"),
                );
                self.rule(&ext_chain, &format!("{why}-j KUBE-MARK-MASQ"), write);
            } else {
                if let Some(cidr) = &cfg.cluster_cidr {
                    let why = comment(on, &format!("pod traffic for {name} external destinations"));
                    self.rule(
                        &ext_chain,
                        &format!("{why}-s {cidr} -j {}", n.ipt_cluster),
                        write,
                    );
                }
                let why = comment(
                    on,
                    &format!("masquerade LOCAL traffic for {name} external destinations"),
                );
                self.rule(
                    &ext_chain,
                    &format!("{why}-m addrtype --src-type LOCAL -j KUBE-MARK-MASQ"),
                    write,
                );
                let why = comment(
                    on,
                    &format!("route LOCAL traffic for {name} external destinations"),
                );
                self.rule(
                    &ext_chain,
                    &format!("{why}-m addrtype --src-type LOCAL -j {}", n.ipt_cluster),
                    write,
                );
            }
            if has_external {
                self.rule(&ext_chain, &format!("-j {external_policy_chain}"), write);
            }
        }
        if uses_cluster {
            self.write_endpoint_rules(svc, &name, &n.ipt_cluster, &c.cluster, write);
        }
        if uses_local {
            self.write_endpoint_rules(svc, &name, &n.ipt_local, &c.local, write);
        }
        for ep in &c.all_reachable {
            let chain = &ep.names.ipt_chain;
            let why = comment(on, &name);
            self.rule(
                chain,
                &format!("{why}-s {} -j KUBE-MARK-MASQ", ep.ip),
                write,
            );
            let recent = if svc.sticky_max_age_seconds.is_some() {
                format!("-m recent --name {chain} --mask 255.255.255.255 --rsource --set ")
            } else {
                String::new()
            };
            self.rule(
                chain,
                &format!(
                    "{why}{recent}-m {p} -p {p} -j DNAT --to-destination {}",
                    ep.addr()
                ),
                write,
            );
        }
    }

    /// Upstream `writeServiceToEndpointRules`: `recent` affinity checks first, then each endpoint
    /// with probability 1/(remaining), the last unconditionally.
    fn write_endpoint_rules(
        &mut self,
        svc: &ServicePort,
        name: &str,
        chain: &str,
        eps: &[&Endpoint],
        write: bool,
    ) {
        let on = self.comments;
        if let Some(secs) = svc.sticky_max_age_seconds {
            for ep in eps {
                let why = comment(on, &format!("{name} -> {}", ep.addr()));
                let sep = &ep.names.ipt_chain;
                self.rule(chain, &format!("{why}-m recent --name {sep} --mask 255.255.255.255 --rsource --rcheck --seconds {secs} --reap -j {sep}"), write);
            }
        }
        let n = eps.len();
        for (i, ep) in eps.iter().enumerate() {
            let why = comment(on, &format!("{name} -> {}", ep.addr()));
            let sep = &ep.names.ipt_chain;
            if i + 1 < n {
                let prob = 1.0 / (n - i) as f64;
                self.rule(
                    chain,
                    &format!("{why}-m statistic --mode random --probability {prob:.10} -j {sep}"),
                    write,
                );
            } else {
                self.rule(chain, &format!("{why}-j {sep}"), write);
            }
        }
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
