//! The nftables table that enforces a node's [`Plan`] (what kube-router writes as iptables
//! chains `KUBE-POD-FW-*`/`KUBE-NWPLCY-*` and Calico as `cali-tw-*`/`cali-fw-*`, here one table):
//!
//! ```text
//! table ip rkube-netpol {
//!   set peers-N { type ipv4_addr; elements = { pod IPs a rule's peers select } }
//!   map ingress-pods { type ipv4_addr : verdict; elements = { <pod IP> : jump <its ingress chain> } }
//!   map egress-pods  { ... }
//!   chain forward {                       # hook forward, filter priority
//!     ct state established,related accept # replies of allowed connections
//!     ip saddr vmap @egress-pods          # the sender's egress rules, if isolated
//!     ip daddr vmap @ingress-pods         # the receiver's ingress rules, if isolated
//!   }
//!   chain ingress-<hash>-<ns>/<pod> { <peer> <ports> return ... ; drop }
//!   chain egress-<hash>-<ns>/<pod>  { ... }
//! }
//! ```
//!
//! Why this shape: a table of its own never touches kube-proxy's (`ip kube-proxy` or the
//! iptables chains), and is replaced whole in one transaction. The forward hook sees traffic
//! routed through the node and, with `br_netfilter` (bridge-nf-call-iptables, on by default in
//! every network namespace once the module is loaded), traffic bridged between two pods on
//! `cni0`; after kube-proxy's DNAT (prerouting), so a Service's traffic is judged by the endpoint
//! pod it reaches, as upstream. The node's own traffic to its pods (kubelet probes) goes through
//! output, not forward, so it stays allowed, as upstream requires. Per-pod chains `return` on an
//! allowed packet, so a packet between two isolated pods of this node passes the sender's egress
//! and then the receiver's ingress chain. Dropped, not rejected, as Calico and Cilium do.

use std::fmt::Write;

use data_encoding::BASE32;
use ring::digest::{digest, SHA256};

use super::plan::{Allow, PeerMatch, Plan, PortMatch};
use crate::proxier::Cidr;

pub const TABLE: &str = "rkube-netpol";
/// The forward hook's filter priority; the order against kube-proxy's chains does not change
/// verdicts (an accept only ends one table's chain, a drop anywhere is final).
pub const PRIORITY: &str = "filter";

fn hash8(s: &str) -> String {
    BASE32.encode(digest(&SHA256, s.as_bytes()).as_ref())[..8].to_string()
}

/// `<prefix>-<hash>-<ns>/<name>`, within nftables' 256-character names (a pod name alone may be
/// 253 characters; the hash keeps truncated names distinct).
fn chain_name(prefix: &str, namespace: &str, name: &str) -> String {
    let full = format!("{namespace}/{name}");
    let mut out = format!("{prefix}-{}-{full}", hash8(&full));
    if out.len() > 250 {
        // Names are ASCII (API validation), so this cuts on a character boundary.
        out.truncate(250);
    }
    out
}

pub fn ingress_chain(namespace: &str, name: &str) -> String {
    chain_name("ingress", namespace, name)
}

pub fn egress_chain(namespace: &str, name: &str) -> String {
    chain_name("egress", namespace, name)
}

fn set_name(i: usize) -> String {
    format!("peers-{i}")
}

/// The network address (nft refuses a prefix with host bits set).
fn network(c: &Cidr) -> String {
    let mask = if c.prefix == 0 {
        0
    } else {
        u32::MAX << (32 - c.prefix)
    };
    format!(
        "{}/{}",
        std::net::Ipv4Addr::from(u32::from(c.addr) & mask),
        c.prefix
    )
}

/// One allowance as an nft rule; `field` is `saddr` (ingress) or `daddr` (egress).
fn allow_rule(a: &Allow, field: &str) -> String {
    let mut r = String::new();
    match &a.peer {
        PeerMatch::Any => {}
        PeerMatch::Set(i) => {
            let _ = write!(r, "ip {field} @{} ", set_name(*i));
        }
        PeerMatch::Ip(ip) => {
            let _ = write!(r, "ip {field} {ip} ");
        }
        PeerMatch::Block { cidr, except } => {
            let _ = write!(r, "ip {field} {} ", network(cidr));
            if !except.is_empty() {
                let list: Vec<String> = except.iter().map(network).collect();
                let _ = write!(r, "ip {field} != {{ {} }} ", list.join(", "));
            }
        }
    }
    match &a.ports {
        PortMatch::Any => {}
        PortMatch::Protocol(p) => {
            let _ = write!(r, "meta l4proto {} ", p.lower());
        }
        PortMatch::Range(p, first, last) if first == last => {
            let _ = write!(r, "meta l4proto {} th dport {first} ", p.lower());
        }
        PortMatch::Range(p, first, last) => {
            let _ = write!(r, "meta l4proto {} th dport {first}-{last} ", p.lower());
        }
    }
    // Origins are built from API names (no quotes), but keep the comment well-formed anyway.
    let comment: String = a.origin.chars().filter(|c| *c != '"').take(120).collect();
    let _ = write!(r, "return comment \"{comment}\"");
    r
}

/// The whole table, as one `nft -f -` transaction that replaces whatever the table held.
pub fn script(plan: &Plan) -> String {
    let mut s = String::new();
    // `add` first so that `delete` never fails on a node without the table yet.
    let _ = writeln!(s, "add table ip {TABLE}");
    let _ = writeln!(s, "delete table ip {TABLE}");
    let _ = writeln!(s, "table ip {TABLE} {{");
    let _ = writeln!(s, "\tcomment \"rkube NetworkPolicy enforcement\"");
    for (i, ips) in plan.sets.iter().enumerate() {
        let _ = writeln!(s, "\tset {} {{", set_name(i));
        let _ = writeln!(s, "\t\ttype ipv4_addr");
        let list: Vec<String> = ips.iter().map(|ip| ip.to_string()).collect();
        let _ = writeln!(s, "\t\telements = {{ {} }}", list.join(", "));
        let _ = writeln!(s, "\t}}");
    }
    // Per-pod chains before the maps whose elements jump to them.
    for p in &plan.pods {
        for (allows, egress) in [(&p.egress, true), (&p.ingress, false)] {
            let Some(allows) = allows else { continue };
            let (chain, field) = if egress {
                (egress_chain(&p.namespace, &p.name), "daddr")
            } else {
                (ingress_chain(&p.namespace, &p.name), "saddr")
            };
            let _ = writeln!(s, "\tchain {chain} {{");
            for a in allows {
                let _ = writeln!(s, "\t\t{}", allow_rule(a, field));
            }
            let _ = writeln!(s, "\t\tdrop");
            let _ = writeln!(s, "\t}}");
        }
    }
    for (map, egress) in [("ingress-pods", false), ("egress-pods", true)] {
        let _ = writeln!(s, "\tmap {map} {{");
        let _ = writeln!(s, "\t\ttype ipv4_addr : verdict");
        let elems: Vec<String> = plan
            .pods
            .iter()
            .filter(|p| {
                if egress {
                    p.egress.is_some()
                } else {
                    p.ingress.is_some()
                }
            })
            .map(|p| {
                let chain = if egress {
                    egress_chain(&p.namespace, &p.name)
                } else {
                    ingress_chain(&p.namespace, &p.name)
                };
                format!("{} : jump {chain}", p.ip)
            })
            .collect();
        if !elems.is_empty() {
            let _ = writeln!(s, "\t\telements = {{ {} }}", elems.join(", "));
        }
        let _ = writeln!(s, "\t}}");
    }
    let _ = writeln!(s, "\tchain forward {{");
    let _ = writeln!(
        s,
        "\t\ttype filter hook forward priority {PRIORITY}; policy accept;"
    );
    let _ = writeln!(s, "\t\tct state established,related accept");
    let _ = writeln!(s, "\t\tip saddr vmap @egress-pods");
    let _ = writeln!(s, "\t\tip daddr vmap @ingress-pods");
    let _ = writeln!(s, "\t}}");
    let _ = writeln!(s, "}}");
    s
}

/// Removes the table (`rkube proxy --cleanup`); `add` first so a missing table is no error.
pub fn cleanup_script() -> String {
    format!("add table ip {TABLE}\ndelete table ip {TABLE}\n")
}
