//! The netlink writer against the kernel: in fresh network namespaces (root needed; skipped
//! otherwise), a partial sync written over netlink leaves the table `nft -f` of the same plan
//! leaves, expression for expression.

use std::collections::HashSet;

use super::*;
use crate::exec::Exec;
use crate::netns::NetNs;
use crate::nftables::rules::{generate, Config, Plan, TableState};
use crate::testutil::{config, slice, svc, three, with_type, Fixture};

fn namespace() -> Option<NetNs> {
    match NetNs::create("rkp-nl") {
        Ok(ns) => Some(ns),
        Err(e) => {
            eprintln!("skipped: cannot create a network namespace ({e})");
            None
        }
    }
}

fn nft(ns: &NetNs, script: &str) {
    Exec::in_netns(ns.name())
        .run("nft", &["-f", "-"], Some(script))
        .unwrap_or_else(|e| panic!("{e}\n{script}"));
}

/// The table as `nft` prints it, and its expressions as `nft --debug=netlink` dumps them
/// (handles dropped, elements sorted: their order is the kernel's hash order).
fn listing(ns: &NetNs) -> (String, String) {
    let exec = Exec::in_netns(ns.name());
    let plain = sort_elements(
        &exec
            .run("nft", &["list", "table", "ip", "kube-proxy"], None)
            .unwrap(),
    );
    let debug = exec
        .run(
            "nft",
            &["--debug=netlink", "list", "table", "ip", "kube-proxy"],
            None,
        )
        .unwrap();
    let mut out: Vec<String> = Vec::new();
    let mut elements: Vec<String> = Vec::new();
    for l in debug.lines() {
        if l.trim_start().starts_with("element") {
            // One line holds several elements.
            elements.extend(l.split("[end]").map(|e| e.trim().to_string()));
            continue;
        }
        elements.sort();
        out.append(&mut elements);
        if l.starts_with("ip kube-proxy ") {
            out.push(l.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
        } else {
            out.push(l.to_string());
        }
    }
    elements.sort();
    out.append(&mut elements);
    (plain, out.join("\n"))
}

/// `elements = { a, b }` blocks (which may span lines) with their elements sorted.
fn sort_elements(listing: &str) -> String {
    let mut out = String::new();
    let mut rest = listing;
    while let Some(at) = rest.find("elements = {") {
        let (head, tail) = rest.split_at(at + "elements = {".len());
        out.push_str(head);
        let end = tail.find('}').unwrap_or(tail.len());
        let mut items: Vec<&str> = tail[..end].split(',').map(str::trim).collect();
        items.sort();
        out.push(' ');
        out.push_str(&items.join(", "));
        out.push(' ');
        rest = &tail[end..];
    }
    out.push_str(rest);
    out
}

fn full(f: &Fixture, cfg: &Config) -> Plan {
    generate(
        cfg,
        &f.services,
        &f.endpoints,
        true,
        &HashSet::new(),
        &TableState::default(),
        &HashSet::new(),
    )
}

fn partial(f: &mut Fixture, cfg: &Config, prev: &TableState) -> Plan {
    let updated = f.apply();
    generate(
        cfg,
        &f.services,
        &f.endpoints,
        false,
        &updated,
        prev,
        &HashSet::new(),
    )
}

fn sticky(name: &str, ip: &str) -> k8s_openapi::api::core::v1::Service {
    let mut s = svc("ns", name, ip, &[("http", 80, "TCP"), ("dns", 53, "UDP")]);
    s.spec.as_mut().unwrap().session_affinity = Some("ClientIP".into());
    s
}

#[test]
fn partial_syncs_over_netlink_match_nft() {
    let (Some(a), Some(b)) = (namespace(), namespace()) else {
        return;
    };
    let mut cfg = config();
    // Not on a byte boundary: the address match goes through a mask.
    cfg.cluster_cidr = Some("10.64.0.0/10".into());
    let mut f = Fixture::new();
    f.service(svc("ns", "web", "10.96.0.50", &[("http", 80, "TCP")]))
        .slice(three("ns", "web"));
    let mut local = with_type(
        svc("ns", "np", "10.96.0.51", &[("http", 80, "TCP")]),
        "NodePort",
        30080,
    );
    local.spec.as_mut().unwrap().external_traffic_policy = Some("Local".into());
    f.service(local).slice(three("ns", "np"));
    f.service(svc("ns", "gone", "10.96.0.52", &[("http", 80, "TCP")]))
        .slice(three("ns", "gone"));
    f.service(sticky("aff", "10.96.0.53"));
    f.apply();
    let first = full(&f, &cfg);
    nft(&a, &first.script);
    nft(&b, &first.script);
    assert_eq!(listing(&a), listing(&b));

    // Partial syncs: an endpoint leaves web, a sticky Service gets endpoints (new sets and
    // chains), one Service goes away, a new one appears with its node port.
    f.slice(slice(
        "ns",
        "web",
        "web-1",
        ("http", 8080, "TCP"),
        &[
            ("10.244.1.1", "node-a", true, true, false),
            ("10.244.2.1", "node-b", true, true, false),
        ],
    ));
    f.slice(slice(
        "ns",
        "aff",
        "aff-1",
        ("dns", 53, "UDP"),
        &[
            ("10.244.5.1", "node-a", true, true, false),
            ("10.244.5.2", "node-b", true, true, false),
        ],
    ));
    f.delete_service(&svc("ns", "gone", "10.96.0.52", &[("http", 80, "TCP")]));
    f.service(with_type(
        svc("ns", "new", "10.96.0.54", &[("sctp", 9000, "SCTP")]),
        "NodePort",
        30090,
    ));
    let p = partial(&mut f, &cfg, &first.state);
    assert!(!p.changes.rules.is_empty() && !p.changes.sets.is_empty());
    nft(&a, &p.script);
    let mut sock = Socket::open(Some(b.name())).unwrap();
    apply(&mut sock, &p.changes).unwrap();
    let (la, lb) = (listing(&a), listing(&b));
    assert_eq!(la.0, lb.0);
    assert_eq!(la.1, lb.1);
    assert!(la.0.contains("numgen random mod 2"), "{}", la.0);

    // The sticky Service loses its endpoints: sets deleted, chains flushed, elements moved.
    f.slice(slice("ns", "aff", "aff-1", ("dns", 53, "UDP"), &[]));
    let q = partial(&mut f, &cfg, &p.state);
    assert!(!q.changes.delete_sets.is_empty());
    nft(&a, &q.script);
    apply(&mut sock, &q.changes).unwrap();
    assert_eq!(listing(&a), listing(&b));

    // Stale chains deleted over netlink.
    let mut stale = p.stale_chains.clone();
    stale.extend(q.stale_chains.iter().cloned());
    assert!(!stale.is_empty());
    let mut s = String::new();
    for c in &stale {
        s.push_str(&format!("delete chain ip kube-proxy {c}\n"));
    }
    nft(&a, &s);
    delete_chains(&mut sock, &stale).unwrap();
    assert_eq!(listing(&a), listing(&b));
}

#[test]
fn a_refused_batch_changes_nothing() {
    let Some(ns) = namespace() else {
        return;
    };
    let cfg = config();
    let mut f = Fixture::new();
    f.service(svc("ns", "web", "10.96.0.50", &[("http", 80, "TCP")]))
        .slice(three("ns", "web"));
    f.apply();
    let first = full(&f, &cfg);
    nft(&ns, &first.script);
    let before = listing(&ns);
    // A good change followed by a jump to a chain that does not exist.
    f.slice(slice(
        "ns",
        "web",
        "web-1",
        ("http", 8080, "TCP"),
        &[("10.244.1.1", "node-a", true, true, false)],
    ));
    let mut p = partial(&mut f, &cfg, &first.state);
    let chain = p.changes.chains[0].clone();
    p.changes
        .rules
        .push((chain, "goto no-such-chain".to_string()));
    let mut sock = Socket::open(Some(ns.name())).unwrap();
    match apply(&mut sock, &p.changes) {
        Err(NetlinkError::Rejected { what, source }) => {
            assert!(what.contains("goto no-such-chain"), "{what}");
            assert_eq!(source.raw_os_error(), Some(libc::ENOENT));
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(listing(&ns), before);
    // The socket is still usable: the same changes without the bad rule go through.
    p.changes.rules.pop();
    apply(&mut sock, &p.changes).unwrap();
    assert_ne!(listing(&ns), before);
    // Untranslatable rules are refused before anything is sent.
    p.changes.rules.push(("x".into(), "counter accept".into()));
    assert!(matches!(
        apply(&mut sock, &p.changes),
        Err(NetlinkError::Unsupported(_))
    ));
}

#[test]
fn full_syncs_over_netlink_match_nft() {
    let (Some(a), Some(b)) = (namespace(), namespace()) else {
        return;
    };
    let mut cfg = config();
    cfg.masquerade_all = true;
    let mut f = Fixture::new();
    f.service(svc("ns", "web", "10.96.0.50", &[("http", 80, "TCP")]))
        .slice(three("ns", "web"));
    f.service(sticky("aff", "10.96.0.53"))
        .slice(three("ns", "aff"));
    f.service(with_type(
        svc("ns", "np", "10.96.0.51", &[("http", 80, "TCP")]),
        "NodePort",
        30080,
    ));
    f.apply();
    let setup = Changes {
        full: true,
        ..Default::default()
    }
    .script(&cfg);
    let mut sock = Socket::open(Some(b.name())).unwrap();
    let first = full(&f, &cfg);
    nft(&a, &first.script);
    nft(&b, &setup);
    apply(&mut sock, &first.changes).unwrap();
    assert_eq!(listing(&a), listing(&b));
    // Again over the existing table, with one Service gone (its chains found in the kernel).
    f.delete_service(&svc("ns", "web", "10.96.0.50", &[("http", 80, "TCP")]));
    f.apply();
    let existing: HashSet<String> = first.state.chains.clone();
    let second = generate(
        &cfg,
        &f.services,
        &f.endpoints,
        true,
        &HashSet::new(),
        &TableState::default(),
        &existing,
    );
    assert!(!second.stale_chains.is_empty());
    let mut listed = list_chains(&mut sock).unwrap();
    listed.sort();
    let mut want: Vec<String> = crate::nftables::proxier::parse_service_chains(
        &Exec::in_netns(b.name())
            .run("nft", &["list", "chains", "ip"], None)
            .unwrap(),
    )
    .into_iter()
    .collect();
    want.sort();
    listed.retain(|c| c.contains('/'));
    assert_eq!(listed, want);
    nft(&a, &second.script);
    nft(&b, &setup);
    apply(&mut sock, &second.changes).unwrap();
    assert_eq!(listing(&a), listing(&b));
}

/// The table's use count is what a full sync uses to skip listing its chains: fixed objects plus
/// the Services' chains and affinity sets; a chain someone else adds changes it.
#[test]
fn table_use_counts_chains_and_sets() {
    let Some(ns) = namespace() else {
        return;
    };
    let cfg = config();
    let mut f = Fixture::new();
    f.service(svc("ns", "web", "10.96.0.50", &[("http", 80, "TCP")]))
        .slice(three("ns", "web"));
    f.service(sticky("aff", "10.96.0.53"))
        .slice(three("ns", "aff"));
    f.apply();
    let mut sock = Socket::open(Some(ns.name())).unwrap();
    assert_eq!(table_use(&mut sock).unwrap(), None);
    let plan = full(&f, &cfg);
    nft(&ns, &plan.script);
    let expected = crate::nftables::rules::fixed_objects(&cfg)
        + plan.state.chains.len()
        + plan.state.affinity_sets.len();
    assert!(!plan.state.affinity_sets.is_empty());
    assert_eq!(table_use(&mut sock).unwrap(), Some(expected as u32));
    nft(&ns, "add chain ip kube-proxy someone/else\n");
    assert_eq!(table_use(&mut sock).unwrap(), Some(expected as u32 + 1));
}
