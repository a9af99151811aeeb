use super::*;
use crate::testutil::{config, slice, svc, three, with_type, Fixture};

fn full(f: &Fixture) -> Plan {
    generate(
        &config(),
        &f.services,
        &f.endpoints,
        true,
        &HashSet::new(),
        &TableState::default(),
        &HashSet::new(),
    )
}

fn web() -> k8s_openapi::api::core::v1::Service {
    svc("ns", "web", "10.96.0.50", &[("http", 80, "TCP")])
}

#[test]
fn cluster_ip_with_statistic_probabilities() {
    let mut f = Fixture::new();
    f.service(web()).slice(three("ns", "web"));
    f.apply();
    let p = full(&f);
    let n = &f.services.values().next().unwrap().names;
    let s = &p.script;
    assert!(s.contains(&format!(
        "-A KUBE-SERVICES -m comment --comment \"ns/web:http cluster IP\" -m tcp -p tcp -d 10.96.0.50 --dport 80 -j {}",
        n.ipt_cluster
    )), "{s}");
    assert!(s.contains(&format!("-A {} -m comment --comment \"ns/web:http cluster IP\" -m tcp -p tcp -d 10.96.0.50 --dport 80 ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ", n.ipt_cluster)));
    assert!(s.contains("-m statistic --mode random --probability 0.3333333333 -j KUBE-SEP-"));
    assert!(s.contains("-m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-"));
    assert!(s.contains("-j DNAT --to-destination 10.244.3.1:8080"));
    assert!(s.contains("-s 10.244.1.1 -j KUBE-MARK-MASQ"));
    assert!(
        s.contains("-A KUBE-POSTROUTING -j MASQUERADE --random-fully")
            || s.contains("-j MASQUERADE --random-fully")
    );
    assert!(s.contains("-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000"));
    // The nodeports jump is the last rule of KUBE-SERVICES.
    let last_services = s
        .lines()
        .rev()
        .find(|l| l.starts_with("-A KUBE-SERVICES"))
        .unwrap();
    assert!(last_services.contains("-m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"));
    assert!(s.starts_with("*filter\n") && s.ends_with("COMMIT\n"));
    assert_eq!(p.state.chains.len(), 4);
}

#[test]
fn no_endpoints_rejects_in_filter() {
    let mut f = Fixture::new();
    f.service(with_type(web(), "NodePort", 30080));
    f.apply();
    let s = full(&f).script;
    assert!(s.contains("-A KUBE-SERVICES -m comment --comment \"ns/web:http has no endpoints\" -m tcp -p tcp -d 10.96.0.50 --dport 80 -j REJECT"), "{s}");
    assert!(s.contains("-A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns/web:http has no endpoints\" -m addrtype --dst-type LOCAL -m tcp -p tcp --dport 30080 -j REJECT"));
    assert!(!s.contains("KUBE-SVC-"));
}

#[test]
fn nodeport_and_recent_affinity() {
    let mut f = Fixture::new();
    let mut s = with_type(web(), "NodePort", 30080);
    s.spec.as_mut().unwrap().session_affinity = Some("ClientIP".into());
    f.service(s).slice(three("ns", "web"));
    f.apply();
    let n = f.services.values().next().unwrap().names.clone();
    let s = full(&f).script;
    assert!(s.contains(&format!("-A KUBE-NODEPORTS -m comment --comment \"ns/web:http\" -m tcp -p tcp --dport 30080 -j {}", n.ipt_external)), "{s}");
    assert!(s.contains(&format!("-A {} -m comment --comment \"masquerade traffic for ns/web:http external destinations\" -j KUBE-MARK-MASQ", n.ipt_external)));
    assert!(s.contains(&format!("-A {} -j {}", n.ipt_external, n.ipt_cluster)));
    let checks: Vec<&str> = s
        .lines()
        .filter(|l| l.contains("--rcheck --seconds 10800 --reap"))
        .collect();
    assert_eq!(checks.len(), 3);
    assert_eq!(
        s.lines()
            .filter(|l| l.contains("--rsource --set -m tcp -p tcp -j DNAT"))
            .count(),
        3
    );
    assert!(s.find(checks[2]).unwrap() < s.find("-m statistic").unwrap());
}

#[test]
fn external_policy_local_and_health_check_port() {
    let mut f = Fixture::new();
    let mut s = with_type(web(), "LoadBalancer", 30080);
    let spec = s.spec.as_mut().unwrap();
    spec.external_traffic_policy = Some("Local".into());
    spec.health_check_node_port = Some(32000);
    f.service(s).slice(three("ns", "web"));
    f.apply();
    let n = f.services.values().next().unwrap().names.clone();
    let s = full(&f).script;
    assert!(
        s.contains(&format!("-s 10.244.0.0/16 -j {}", n.ipt_cluster)),
        "{s}"
    );
    assert!(s.contains("-m addrtype --src-type LOCAL -j KUBE-MARK-MASQ"));
    assert!(s.contains(&format!("-A {} -j {}", n.ipt_external, n.ipt_local)));
    assert!(s.contains("--dport 32000 -j ACCEPT"));
    // The local chain holds node-a's endpoint only.
    let local: Vec<&str> = s
        .lines()
        .filter(|l| l.starts_with(&format!("-A {} ", n.ipt_local)))
        .collect();
    assert_eq!(local.len(), 1);
    assert!(!local[0].contains("statistic"));
}

#[test]
fn partial_sync_declares_only_changed_chains_and_deletes_stale_ones() {
    let mut f = Fixture::new();
    f.service(web()).slice(three("ns", "web"));
    f.service(svc("ns", "other", "10.96.0.51", &[("http", 80, "TCP")]))
        .slice(three("ns", "other"));
    f.apply();
    let first = full(&f);
    let other = f
        .services
        .values()
        .find(|p| p.name.service.name == "other")
        .unwrap()
        .names
        .ipt_cluster
        .clone();
    f.slice(slice(
        "ns",
        "web",
        "web-1",
        ("http", 8080, "TCP"),
        &[("10.244.1.1", "node-a", true, true, false)],
    ));
    let updated = f.apply();
    let p = generate(
        &config(),
        &f.services,
        &f.endpoints,
        false,
        &updated,
        &first.state,
        &HashSet::new(),
    );
    let s = &p.script;
    assert!(
        !s.contains(&format!(":{other} ")),
        "unchanged service declared:\n{s}"
    );
    // Still jumped to from KUBE-SERVICES, which is always rewritten.
    assert!(s.contains(&format!("-j {other}")));
    assert_eq!(p.stale_chains.len(), 2);
    for c in &p.stale_chains {
        assert!(s.contains(&format!(":{c} - [0:0]")) && s.contains(&format!("-X {c}\n")));
    }
}

#[test]
fn large_clusters_drop_comments() {
    let mut f = Fixture::new();
    for i in 0..400 {
        let name = format!("s{i}");
        f.service(svc(
            "ns",
            &name,
            &format!("10.96.{}.{}", i / 256, i % 256),
            &[("http", 80, "TCP")],
        ))
        .slice(three("ns", &name));
    }
    f.apply();
    assert!(!full(&f).script.contains("--comment \"ns/s1:http"));
}

/// A large full sync is split into restores of whole Services; together with the final script
/// they hold the lines of the single restore, and the final script declares no Service chain.
#[test]
fn large_full_syncs_are_written_in_chunks() {
    let mut f = Fixture::new();
    for i in 0..5 {
        let name = format!("s{i}");
        f.service(svc(
            "ns",
            &name,
            &format!("10.96.0.{}", 10 + i),
            &[("http", 80, "TCP")],
        ))
        .slice(three("ns", &name));
    }
    f.apply();
    let (none, no_chains) = (HashSet::new(), HashSet::new());
    let gen = |chunk| {
        generate_chunked(
            &config(),
            &f.services,
            &f.endpoints,
            true,
            &none,
            &TableState::default(),
            &no_chains,
            chunk,
        )
    };
    let whole = gen(CHUNK_CHAINS);
    assert!(whole.chunks.is_empty());
    // Four chains per Service (three endpoints): chunks of two Services, the last of one.
    let split = gen(5);
    assert_eq!(split.chunks.len(), 3);
    let mut lines: Vec<&str> = Vec::new();
    // The first also writes KUBE-MARK-MASQ, which the Services' rules jump to.
    let masq = ":KUBE-MARK-MASQ - [0:0]\n-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000\n";
    assert!(split.chunks[0].starts_with(&format!("*nat\n{masq}")));
    for (i, c) in split.chunks.iter().enumerate() {
        assert!(c.starts_with("*nat\n") && c.ends_with("COMMIT\n"), "{c}");
        let c = if i == 0 { &c[5 + masq.len()..] } else { &c[..] };
        lines.extend(c.lines().filter(|l| *l != "*nat" && *l != "COMMIT"));
    }
    assert!(!split.script.contains(":KUBE-SVC-") && !split.script.contains(":KUBE-SEP-"));
    assert!(!split.script.contains("-A KUBE-SEP-"));
    lines.extend(split.script.lines());
    let mut want: Vec<&str> = whole.script.lines().collect();
    lines.sort();
    want.sort();
    assert_eq!(lines, want);
    // Each chunk declares the chains its rules fill.
    for c in &split.chunks {
        for l in c.lines().filter_map(|l| l.strip_prefix("-A ")) {
            let chain = l.split_whitespace().next().unwrap();
            assert!(c.contains(&format!(":{chain} - [0:0]")), "{chain} in\n{c}");
        }
    }
}
