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
//! Unlike upstream, [`TableState`] keeps what each Service port contributed (chains, sets, map
//! keys, rule count), so a partial sync generates the changed Services only: its cost follows the
//! change, not the number of Services. What a sync writes is also given as data ([`Changes`]), for
//! the netlink writer (`netlink/`), which does not parse `nft` scripts.
//! Differs: no loadBalancerSourceRanges firewall (`firewall-ips`) and no `cluster-ips` check of
//! unallocated ClusterIPs (they need the ServiceCIDRs); IPv4 only; the random pick among
//! endpoints is a rule per endpoint instead of an anonymous vmap; Services without session
//! affinity have no `endpoint-` chains (each endpoint is a DNAT rule of the `service-`/`local-`
//! chain, hairpin traffic is marked in `masquerading` from the `hairpin-endpoints` set), and
//! rules set the masquerade mark inline instead of jumping to `mark-for-masquerade` (the chain
//! is kept, unused by Service rules). Both for the kernel's loop check on each commit: see
//! `write_endpoint_rules`. Traffic behaviour is upstream's.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use crate::endpointschangetracker::{Endpoint, EndpointsMap};
use crate::servicechangetracker::{
    ports_of, NamespacedName, ServicePort, ServicePortMap, ServicePortName,
};
use crate::topology::categorize;

pub use super::fixed::{fixed_objects, MAPS, TABLE};
use super::fixed::{
    is_set, mark_for_masquerade, setup, HAIRPIN, NO_ENDPOINT_NODEPORTS, NO_ENDPOINT_SERVICES,
    REJECT_CHAIN, SERVICE_IPS, SERVICE_NODEPORTS,
};

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

/// The Service ports claiming one map key, sorted by name: two ports may write the same key (an
/// external IP shared by two Services); the last one wins, as it would in a walk in name order.
type Claims = Vec<(ServicePortName, String)>;

/// What one Service port put into the table at the last sync.
#[derive(Clone, Debug, Default)]
struct PortOut {
    chains: Vec<String>,
    elements: Vec<(&'static str, String)>,
    affinity_sets: Vec<String>,
    rules: usize,
}

/// What the table holds after the last successful sync.
#[derive(Clone, Debug, Default)]
pub struct TableState {
    /// Map name -> key -> claims (the element's verdict is the last claim's).
    elements: HashMap<&'static str, HashMap<String, Claims>>,
    /// Service and endpoint chains in use.
    pub chains: HashSet<String>,
    pub affinity_sets: HashSet<String>,
    /// Per Service port: what it wrote, so a partial sync can take it back without a walk
    /// (ordered by Service: [`ports_of`]).
    ports: BTreeMap<ServicePortName, PortOut>,
    /// Rules of all Service ports.
    rules: usize,
}

impl TableState {
    /// The verdict of `key` in `map`.
    pub fn element(&self, map: &str, key: &str) -> Option<&str> {
        let claims = self.elements.get(map)?.get(key)?;
        claims.last().map(|(_, v)| v.as_str())
    }

    /// The elements of `map`: (key, verdict), unordered.
    pub fn elements(&self, map: &str) -> impl Iterator<Item = (&str, &str)> {
        self.elements
            .get(map)
            .into_iter()
            .flatten()
            .filter_map(|(k, c)| c.last().map(|(_, v)| (k.as_str(), v.as_str())))
    }

    fn claim(&mut self, map: &'static str, key: String, port: &ServicePortName, verdict: String) {
        let claims = self
            .elements
            .entry(map)
            .or_default()
            .entry(key)
            .or_default();
        match claims.binary_search_by(|(n, _)| n.cmp(port)) {
            Ok(i) => claims[i].1 = verdict,
            Err(i) => claims.insert(i, (port.clone(), verdict)),
        }
    }

    fn unclaim(&mut self, map: &'static str, key: &str, port: &ServicePortName) {
        let Some(m) = self.elements.get_mut(map) else {
            return;
        };
        if let Some(claims) = m.get_mut(key) {
            claims.retain(|(n, _)| n != port);
            if claims.is_empty() {
                m.remove(key);
            }
        }
    }
}

/// One map's changes in a sync.
#[derive(Debug, Default)]
pub struct MapChange {
    pub map: &'static str,
    /// Full syncs empty the map first.
    pub flush: bool,
    /// Keys to delete (before the adds; a changed verdict is a delete and an add).
    pub deletes: Vec<String>,
    /// (key, verdict) to add, sorted.
    pub adds: Vec<(String, String)>,
}

/// What one sync writes, in the order the script writes it.
#[derive(Debug, Default)]
pub struct Changes {
    /// A full sync (the script then also holds the fixed part, see `setup`, which is written
    /// every sync but changes only in full ones).
    pub full: bool,
    /// Affinity sets to add: (name, timeout in seconds).
    pub sets: Vec<(String, u32)>,
    /// Service and endpoint chains to add, or flush when they exist.
    pub chains: Vec<String>,
    /// Rules to append: (chain, rule in `nft` syntax).
    pub rules: Vec<(String, String)>,
    pub maps: Vec<MapChange>,
    /// Chains no longer used, flushed (see [`Plan::stale_chains`]).
    pub flush_chains: Vec<String>,
    /// Affinity sets no longer used, deleted.
    pub delete_sets: Vec<String>,
}

impl Changes {
    /// The `nft -f` script.
    pub fn script(&self, cfg: &Config) -> String {
        let mut s = String::new();
        setup(cfg, &mut s);
        for (set, timeout) in &self.sets {
            // "dynamic": the kernel adds it anyway, and a later add without it would be a
            // conflicting redefinition.
            let _ = writeln!(
                s,
                "add set ip {TABLE} {set} {{ type ipv4_addr ; flags dynamic,timeout ; timeout {timeout}s ; }}"
            );
        }
        for c in &self.chains {
            let _ = writeln!(s, "add chain ip {TABLE} {c}");
            let _ = writeln!(s, "flush chain ip {TABLE} {c}");
        }
        for (c, r) in &self.rules {
            let _ = writeln!(s, "add rule ip {TABLE} {c} {r}");
        }
        for m in &self.maps {
            if m.flush {
                let kind = if is_set(m.map) { "set" } else { "map" };
                let _ = writeln!(s, "flush {kind} ip {TABLE} {}", m.map);
            }
            batched(
                &mut s,
                "delete",
                m.map,
                m.deletes.iter().map(|k| k.as_str()),
            );
            let adds: Vec<String> = m
                .adds
                .iter()
                .map(|(k, v)| match is_set(m.map) {
                    true => k.clone(),
                    false => format!("{k} : {v}"),
                })
                .collect();
            batched(&mut s, "add", m.map, adds.iter().map(|a| a.as_str()));
        }
        for c in &self.flush_chains {
            let _ = writeln!(s, "flush chain ip {TABLE} {c}");
        }
        for set in &self.delete_sets {
            let _ = writeln!(s, "delete set ip {TABLE} {set}");
        }
        s
    }
}

/// One sync's script and what the table will hold once it is applied.
#[derive(Debug, Default)]
pub struct Plan {
    pub script: String,
    pub state: TableState,
    /// What the script writes, as data.
    pub changes: Changes,
    /// Chains no longer used: flushed by this script, to be deleted by a later one (kernels
    /// before 6.2 do not see at once that a deleted map element released its chain).
    pub stale_chains: Vec<String>,
    /// Rules written by this script.
    pub rules_written: usize,
    /// Rules of the whole ruleset (chains of unchanged Services counted too).
    pub rules_total: usize,
}

/// A sync computed in place over the previous [`TableState`] (see [`update`]).
#[derive(Debug, Default)]
pub struct Delta {
    pub changes: Changes,
    pub stale_chains: Vec<String>,
    pub rules_written: usize,
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
    let mut state = if full {
        // Only its chains and sets matter (to clean up): skip copying the rest.
        TableState {
            chains: prev.chains.clone(),
            affinity_sets: prev.affinity_sets.clone(),
            ..Default::default()
        }
    } else {
        prev.clone()
    };
    let d = update(
        cfg, services, endpoints, full, updated, &mut state, existing,
    );
    Plan {
        script: d.changes.script(cfg),
        state,
        changes: d.changes,
        stale_chains: d.stale_chains,
        rules_written: d.rules_written,
        rules_total: d.rules_total,
    }
}

/// [`generate`] without the script and in place: `state` (what the table held after the last
/// sync) becomes what it holds once the changes are applied. A partial sync generates only the
/// ports of `updated` Services. If applying fails, the next sync must be a full one.
pub fn update(
    cfg: &Config,
    services: &ServicePortMap,
    endpoints: &EndpointsMap,
    full: bool,
    updated: &HashSet<NamespacedName>,
    state: &mut TableState,
    existing: &HashSet<String>,
) -> Delta {
    let mut changes = Changes {
        full,
        ..Default::default()
    };
    // Chains and sets that may have become unused; element keys whose verdict may change, with
    // their verdict before this sync.
    let mut old_chains: Vec<String> = Vec::new();
    let mut old_sets: Vec<String> = Vec::new();
    let mut before: HashMap<(&'static str, String), Option<String>> = HashMap::new();
    let mut ports: Vec<&ServicePort>;
    if full {
        old_chains.extend(state.chains.drain().chain(existing.iter().cloned()));
        old_sets.extend(state.affinity_sets.drain());
        *state = TableState::default();
        ports = services.values().map(|p| p.as_ref()).collect();
    } else {
        // The ports of the changed Services, now and at the last sync: ranges of the two maps
        // ordered by Service, so nothing unchanged is visited.
        let mut gone: Vec<ServicePortName> = Vec::new();
        ports = Vec::new();
        for svc in updated {
            gone.extend(ports_of(&state.ports, svc).map(|(n, _)| n.clone()));
            ports.extend(ports_of(services, svc).map(|(_, p)| p.as_ref()));
        }
        for name in gone {
            let Some(old) = state.ports.remove(&name) else {
                continue;
            };
            state.rules -= old.rules;
            for (m, k) in old.elements {
                let v = state.element(m, &k).map(str::to_string);
                before.entry((m, k.clone())).or_insert(v);
                state.unclaim(m, &k, &name);
            }
            for c in old.chains {
                state.chains.remove(&c);
                old_chains.push(c);
            }
            for s in old.affinity_sets {
                state.affinity_sets.remove(&s);
                old_sets.push(s);
            }
        }
    }
    ports.sort_by(|a, b| a.name.cmp(&b.name));
    let empty = Vec::new();
    let mut rules_written = 0;
    for svc in ports {
        let eps = endpoints.get(&svc.name).unwrap_or(&empty);
        let mut g = Gen {
            cfg,
            state,
            changes: &mut changes,
            port: PortOut::default(),
            elements: Vec::new(),
        };
        g.service(svc, eps);
        let Gen {
            mut port, elements, ..
        } = g;
        for (m, k, v) in elements {
            if !full && !before.contains_key(&(m, k.clone())) {
                let v = state.element(m, &k).map(str::to_string);
                before.insert((m, k.clone()), v);
            }
            state.claim(m, k.clone(), &svc.name, v);
            port.elements.push((m, k));
        }
        rules_written += port.rules;
        state.rules += port.rules;
        state.ports.insert(svc.name.clone(), port);
    }

    for m in MAPS {
        let mut mc = MapChange {
            map: m,
            flush: full,
            ..Default::default()
        };
        if full {
            mc.adds = state
                .elements(m)
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        }
        changes.maps.push(mc);
    }
    if !full {
        let mut keys: Vec<_> = before.into_iter().collect();
        keys.sort();
        for ((m, k), old) in keys {
            let new = state.element(m, &k);
            if old.as_deref() == new {
                continue;
            }
            let Some(mc) = changes.maps.iter_mut().find(|c| c.map == m) else {
                continue;
            };
            if old.is_some() {
                mc.deletes.push(k.clone());
            }
            if let Some(v) = new {
                mc.adds.push((k, v.to_string()));
            }
        }
    }
    for mc in &mut changes.maps {
        mc.adds.sort();
    }

    let mut stale: Vec<String> = old_chains
        .into_iter()
        .filter(|c| !state.chains.contains(c))
        .collect::<HashSet<_>>()
        .into_iter()
        .collect();
    stale.sort();
    changes.flush_chains = stale.clone();
    let mut gone_sets: Vec<String> = old_sets
        .into_iter()
        .filter(|s| !state.affinity_sets.contains(s))
        .collect();
    gone_sets.sort();
    gone_sets.dedup();
    changes.delete_sets = gone_sets;
    Delta {
        changes,
        stale_chains: stale,
        rules_written,
        rules_total: state.rules,
    }
}

/// `add|delete element` statements, a thousand elements each: one statement per element makes
/// `nft` parse far slower at 10,000 Services.
fn batched<'a>(s: &mut String, verb: &str, map: &str, items: impl Iterator<Item = &'a str>) {
    let items: Vec<&str> = items.collect();
    for chunk in items.chunks(1000) {
        let _ = writeln!(
            s,
            "{verb} element ip {TABLE} {map} {{ {} }}",
            chunk.join(", ")
        );
    }
}

struct Gen<'a> {
    cfg: &'a Config,
    state: &'a mut TableState,
    changes: &'a mut Changes,
    port: PortOut,
    /// This port's map elements: (map, key, verdict), a key once (the last verdict).
    elements: Vec<(&'static str, String, String)>,
}

impl Gen<'_> {
    fn element(&mut self, map: &'static str, key: String, verdict: String) {
        match self
            .elements
            .iter_mut()
            .find(|(m, k, _)| *m == map && *k == key)
        {
            Some(e) => e.2 = verdict,
            None => self.elements.push((map, key, verdict)),
        }
    }

    fn chain(&mut self, name: &str) {
        if self.state.chains.insert(name.to_string()) {
            self.port.chains.push(name.to_string());
            self.changes.chains.push(name.to_string());
        }
    }

    fn rule(&mut self, chain: &str, rule: &str) {
        self.port.rules += 1;
        self.changes
            .rules
            .push((chain.to_string(), rule.to_string()));
    }

    /// One Service port's chains, rules, sets and map elements.
    fn service(&mut self, svc: &ServicePort, eps: &[Endpoint]) {
        let cfg = self.cfg;
        let c = categorize(eps, svc, &cfg.node_name, &cfg.node_labels);
        let proto = svc.name.protocol.lower();
        let n = &svc.names;
        let masq = mark_for_masquerade(cfg);
        // Endpoint chains only where affinity needs them (see `write_endpoint_rules`).
        let sticky = svc.sticky_max_age_seconds.is_some();
        if sticky {
            for ep in &c.all_reachable {
                self.chain(&ep.names.nft_chain);
            }
        }
        let uses_cluster = !c.cluster.is_empty() && svc.uses_cluster_endpoints();
        if uses_cluster {
            self.chain(&n.nft_cluster);
        }
        let uses_local = !c.local.is_empty() && svc.uses_local_endpoints();
        if uses_local {
            self.chain(&n.nft_local);
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
            self.chain(&n.nft_external);
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
                self.rule(internal_chain, &format!("{dst} {masq}"));
            } else if let Some(cidr) = &cfg.cluster_cidr {
                // Off-cluster traffic to a ClusterIP (a route to the service range via a node)
                // may leave the node again: masquerade it so replies come back here.
                self.rule(internal_chain, &format!("{dst} ip saddr != {cidr} {masq}"));
            }
        }
        if uses_external {
            let ext = n.nft_external.clone();
            if !svc.external_policy_local {
                // Cluster policy may pick an endpoint on another node: masquerade.
                self.rule(&ext, &masq);
            } else {
                if let Some(cidr) = &cfg.cluster_cidr {
                    // Pod traffic to an external address is subject to neither policy (as if it
                    // went out to the load balancer and back).
                    self.rule(&ext, &format!("ip saddr {cidr} goto {}", n.nft_cluster));
                }
                // Traffic from the node itself has a local source address: masquerade it.
                self.rule(&ext, &format!("fib saddr type local {masq}"));
                self.rule(
                    &ext,
                    &format!("fib saddr type local goto {}", n.nft_cluster),
                );
            }
            if has_external {
                self.rule(&ext, &format!("goto {external_policy_chain}"));
            }
        }
        if let Some(timeout) = svc.sticky_max_age_seconds {
            for ep in &c.all_reachable {
                let set = &ep.names.nft_affinity_set;
                if !self.state.affinity_sets.insert(set.clone()) {
                    continue;
                }
                self.port.affinity_sets.push(set.clone());
                self.changes.sets.push((set.clone(), timeout));
            }
        }
        if uses_cluster {
            self.write_endpoint_rules(svc, &n.nft_cluster, &c.cluster);
        }
        if uses_local {
            self.write_endpoint_rules(svc, &n.nft_local, &c.local);
        }
        if !sticky {
            // Endpoints are DNAT rules of the Service's chains (see `write_endpoint_rules`);
            // the hairpin mark is `masquerading`'s, from this set.
            for ep in &c.all_reachable {
                self.element(HAIRPIN, format!("{0} . {0}", ep.ip), String::new());
            }
            return;
        }
        for ep in &c.all_reachable {
            let chain = &ep.names.nft_chain;
            // Hairpin: a pod reaching itself through the Service must see a source other than
            // its own address, or it would answer itself directly.
            self.rule(chain, &format!("ip saddr {} {masq}", ep.ip));
            self.rule(
                chain,
                &format!("update @{} {{ ip saddr }}", ep.names.nft_affinity_set),
            );
            self.rule(
                chain,
                &format!("meta l4proto {proto} dnat to {}", ep.addr()),
            );
        }
    }

    /// Upstream `writeServiceToEndpointRules`: affinity first, then a random pick.
    ///
    /// Differs from upstream: without session affinity there are no endpoint chains; each
    /// endpoint is one DNAT rule here. A commit that adds a rule with a verdict, a NAT or a
    /// lookup makes the kernel check the whole table for loops from every base chain (kernel
    /// 6.18, `nft_table_validate`), visiting each chain once per path that reaches it: with an
    /// endpoint chain per endpoint (and upstream's jump to `mark-for-masquerade` in each), that
    /// walk was ~55 ms of a one-endpoint change at 10,000 Services x 5; without them it is
    /// ~10 ms (docs/benchmarks.md). Affinity needs a chain per endpoint (its `update` of the
    /// endpoint's set must follow the pick), so sticky Services keep upstream's layout.
    fn write_endpoint_rules(&mut self, svc: &ServicePort, chain: &str, eps: &[&Endpoint]) {
        let proto = svc.name.protocol.lower();
        let sticky = svc.sticky_max_age_seconds.is_some();
        if sticky {
            for ep in eps {
                let r = format!(
                    "ip saddr @{} goto {}",
                    ep.names.nft_affinity_set, ep.names.nft_chain
                );
                self.rule(chain, &r);
            }
        }
        // Upstream writes one `numgen random mod N vmap { 0 : goto A, ... }`, an anonymous set per
        // Service. The kernel allocates anonymous set names by scanning every set of the table,
        // which makes a full sync quadratic: 35 s of system time for 10,000 Services on this
        // machine. The same distribution as rules: endpoint i with probability 1/(N-i), the
        // last one always (as the iptables mode's statistic rules do).
        let n = eps.len();
        for (i, ep) in eps.iter().enumerate() {
            let pick = if i + 1 < n {
                format!("numgen random mod {} == 0 ", n - i)
            } else {
                String::new()
            };
            let r = if sticky {
                format!("{pick}goto {}", ep.names.nft_chain)
            } else {
                format!("{pick}meta l4proto {proto} dnat to {}", ep.addr())
            };
            self.rule(chain, &r);
        }
    }
}

#[cfg(test)]
#[path = "rules_tests.rs"]
mod tests;
