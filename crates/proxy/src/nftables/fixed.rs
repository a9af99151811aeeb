//! The fixed part of the `ip kube-proxy` table (upstream `setupNFTables`): base chains and their
//! jumps, the regular chains Service rules rely on (`services`, `endpoints-check`,
//! `masquerading`, `mark-for-masquerade`, `reject-chain`), the verdict maps' and sets'
//! definitions. Written by full syncs only (partial syncs do not change it), before the Services'
//! part.

use std::fmt::Write as _;

use super::rules::Config;

pub const TABLE: &str = "kube-proxy";
pub(crate) const SERVICES: &str = "services";
pub(crate) const SERVICE_IPS: &str = "service-ips";
pub(crate) const SERVICE_NODEPORTS: &str = "service-nodeports";
pub(crate) const NODEPORT_IPS: &str = "nodeport-ips";
pub(crate) const ENDPOINTS_CHECK: &str = "endpoints-check";
pub(crate) const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
pub(crate) const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
pub(crate) const REJECT_CHAIN: &str = "reject-chain";
pub(crate) const MARK_MASQ: &str = "mark-for-masquerade";
pub(crate) const MASQUERADING: &str = "masquerading";

/// Pairs `ENDPOINT . ENDPOINT` of the endpoints whose DNAT rules are written in their Service's
/// chain (see `rules.rs`): `masquerading` marks a connection an endpoint makes to itself through
/// a Service (hairpin), which upstream marks in each endpoint's chain. Not in upstream's table.
pub(crate) const HAIRPIN: &str = "hairpin-endpoints";

/// The verdict maps and the set whose contents a sync diffs.
pub const MAPS: [&str; 5] = [
    SERVICE_IPS,
    SERVICE_NODEPORTS,
    NO_ENDPOINT_SERVICES,
    NO_ENDPOINT_NODEPORTS,
    HAIRPIN,
];

/// Whether `map` holds plain elements (no verdicts).
pub fn is_set(map: &str) -> bool {
    map == HAIRPIN
}

/// Base chains: (name, type, hook, priority). Filter chains see pre-DNAT addresses. Priorities are
/// upstream's `dstnat - 10`, `dstnat` (-100) and `srcnat` (100) as numbers: nft before 1.0.7
/// accepts the names only on the hooks they belong to.
pub(crate) const BASE_CHAINS: [(&str, &str, &str, &str); 7] = [
    ("filter-prerouting", "filter", "prerouting", "-110"),
    ("filter-input", "filter", "input", "-110"),
    ("filter-forward", "filter", "forward", "-110"),
    ("filter-output", "filter", "output", "-110"),
    ("nat-prerouting", "nat", "prerouting", "-100"),
    ("nat-output", "nat", "output", "-100"),
    ("nat-postrouting", "nat", "postrouting", "100"),
];

/// Chains and sets of the fixed part of the table (see [`setup`]): base chains, the five regular
/// chains, the four verdict maps and the hairpin set; `nodeport-ips` exists only with `--nodeport-addresses`.
pub fn fixed_objects(cfg: &Config) -> usize {
    BASE_CHAINS.len() + 5 + MAPS.len() + usize::from(cfg.nodeport_ips.is_some())
}

/// Jumps from base chains: (target, from, match). Reject is only valid in input/forward/output
/// hooks, hence endpoints-check there.
pub(crate) const JUMPS: [(&str, &str, &str); 6] = [
    (ENDPOINTS_CHECK, "filter-input", "ct state new "),
    (ENDPOINTS_CHECK, "filter-forward", "ct state new "),
    (ENDPOINTS_CHECK, "filter-output", "ct state new "),
    (SERVICES, "nat-output", ""),
    (SERVICES, "nat-prerouting", ""),
    (MASQUERADING, "nat-postrouting", ""),
];

/// The fixed part of the table, rewritten every sync (upstream `setupNFTables`).
pub(crate) fn setup(cfg: &Config, s: &mut String) {
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
    let _ = writeln!(
        s,
        "add rule ip {TABLE} {MARK_MASQ} {}",
        mark_for_masquerade(cfg)
    );
    let _ = writeln!(
        s,
        "add set ip {TABLE} {HAIRPIN} {{ type ipv4_addr . ipv4_addr ; comment \"endpoints reached through Services by themselves\" ; }}"
    );
    // `ct status dnat`: only a connection DNATed to the endpoint, as upstream's rule in the
    // endpoint's chain (the node reaching its own address directly is not masqueraded).
    let _ = writeln!(
        s,
        "add rule ip {TABLE} {MASQUERADING} ct status dnat ip saddr . ip daddr @{HAIRPIN} {}",
        mark_for_masquerade(cfg)
    );
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

/// The statement requesting SNAT, written inline where upstream jumps to `mark-for-masquerade`
/// (see `rules.rs`: a jump is a chain the kernel's loop check visits, once per path).
pub(crate) fn mark_for_masquerade(cfg: &Config) -> String {
    format!("mark set mark or {:#08x}", cfg.masquerade_mark)
}
