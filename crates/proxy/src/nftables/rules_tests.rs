use super::*;
use crate::testutil::{config, slice, svc, three, with_type, Fixture};

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

fn web() -> k8s_openapi::api::core::v1::Service {
    svc("ns", "web", "10.96.0.50", &[("http", 80, "TCP")])
}

fn lines_with<'a>(s: &'a str, pat: &str) -> Vec<&'a str> {
    s.lines().filter(|l| l.contains(pat)).collect()
}

#[test]
fn cluster_ip_spreads_over_endpoints() {
    let mut f = Fixture::new();
    f.service(web()).slice(three("ns", "web"));
    f.apply();
    let p = full(&f, &config());
    let names = &f.services.values().next().unwrap().names;
    let s = &p.script;
    assert!(
        s.contains(&format!(
            "10.96.0.50 . tcp . 80 : goto {}",
            names.nft_cluster
        )),
        "{s}"
    );
    let lb = lines_with(s, &format!("add rule ip kube-proxy {} ", names.nft_cluster));
    assert_eq!(lb.len(), 4, "{lb:?}");
    // Without affinity, each endpoint is a DNAT rule of the Service's chain (no endpoint chains).
    assert!(lb[1].contains("numgen random mod 3 == 0 meta l4proto tcp dnat to 10.244."));
    assert!(lb[2].contains("numgen random mod 2 == 0 meta l4proto tcp dnat to 10.244."));
    assert!(lb[3].contains(" meta l4proto tcp dnat to 10.244.") && !lb[3].contains("numgen"));
    assert_eq!(lines_with(s, "dnat to 10.244.").len(), 3);
    assert!(s.contains("meta l4proto tcp dnat to 10.244.2.1:8080"));
    assert!(!s.contains("add chain ip kube-proxy endpoint-"), "{s}");
    // Off-cluster clients are masqueraded (the mark is set inline, not by a jump); hairpin
    // traffic of each endpoint too, through the hairpin set.
    assert!(s.contains(
        "ip daddr 10.96.0.50 tcp dport 80 ip saddr != 10.244.0.0/16 mark set mark or 0x004000"
    ));
    assert!(!s.contains("jump mark-for-masquerade"));
    assert!(s.contains("add element ip kube-proxy hairpin-endpoints { 10.244.1.1 . 10.244.1.1, 10.244.2.1 . 10.244.2.1, 10.244.3.1 . 10.244.3.1 }"), "{s}");
    assert!(s.contains(
        "masquerading ct status dnat ip saddr . ip daddr @hairpin-endpoints mark set mark or 0x004000"
    ));
    assert!(s.contains("add rule ip kube-proxy masquerading masquerade fully-random"));
    assert!(s.contains("mark set mark or 0x004000"));
    // Chains are created before rules refer to them.
    let chain_at = s
        .find(&format!("add chain ip kube-proxy {}", names.nft_cluster))
        .unwrap();
    let rule_at = s
        .find(&format!("add rule ip kube-proxy {}", names.nft_cluster))
        .unwrap();
    assert!(chain_at < rule_at);
    assert_eq!(p.state.chains.len(), 1);
    assert_eq!(p.rules_total, 1 + 3);
}

#[test]
fn service_without_endpoints_is_rejected() {
    let mut f = Fixture::new();
    f.service(with_type(web(), "NodePort", 30080));
    f.apply();
    let s = full(&f, &config()).script;
    assert!(s.contains("add element ip kube-proxy no-endpoint-services { 10.96.0.50 . tcp . 80 : goto reject-chain }"), "{s}");
    assert!(s.contains(
        "add element ip kube-proxy no-endpoint-nodeports { tcp . 30080 : goto reject-chain }"
    ));
    assert!(s.contains("add rule ip kube-proxy reject-chain reject"));
    assert!(s.contains("filter-output ct state new jump endpoints-check"));
    assert!(!s.contains("add chain ip kube-proxy service-"));
}

#[test]
fn nodeport_external_ips_and_load_balancer() {
    let mut f = Fixture::new();
    let mut s = with_type(web(), "LoadBalancer", 30080);
    s.spec.as_mut().unwrap().external_ips = Some(vec!["192.0.2.10".into()]);
    s.status = Some(k8s_openapi::api::core::v1::ServiceStatus {
        load_balancer: Some(k8s_openapi::api::core::v1::LoadBalancerStatus {
            ingress: Some(vec![k8s_openapi::api::core::v1::LoadBalancerIngress {
                ip: Some("198.51.100.7".into()),
                ..Default::default()
            }]),
        }),
        ..Default::default()
    });
    f.service(s).slice(three("ns", "web"));
    f.apply();
    let p = full(&f, &config());
    let ext = &f.services.values().next().unwrap().names.nft_external;
    let s = &p.script;
    assert!(s.contains(&format!("tcp . 30080 : goto {ext}")), "{s}");
    assert!(s.contains(&format!("192.0.2.10 . tcp . 80 : goto {ext}")));
    assert!(s.contains(&format!("198.51.100.7 . tcp . 80 : goto {ext}")));
    assert!(s.contains(&format!(
        "add rule ip kube-proxy {ext} mark set mark or 0x004000"
    )));
    assert!(s.contains("fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports"));
    // --nodeport-addresses: only those addresses.
    let mut cfg = config();
    cfg.nodeport_ips = Some(vec!["10.250.0.1".parse().unwrap()]);
    let s = full(&f, &cfg).script;
    assert!(s.contains("add element ip kube-proxy nodeport-ips { 10.250.0.1 }"));
    assert!(s.contains("ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports"));
}

#[test]
fn session_affinity_uses_timed_sets() {
    let mut f = Fixture::new();
    let mut s = web();
    let spec = s.spec.as_mut().unwrap();
    spec.session_affinity = Some("ClientIP".into());
    spec.session_affinity_config = Some(k8s_openapi::api::core::v1::SessionAffinityConfig {
        client_ip: Some(k8s_openapi::api::core::v1::ClientIPConfig {
            timeout_seconds: Some(60),
        }),
    });
    f.service(s).slice(three("ns", "web"));
    f.apply();
    let p = full(&f, &config());
    let s = &p.script;
    assert_eq!(
        lines_with(s, "flags dynamic,timeout ; timeout 60s").len(),
        3,
        "{s}"
    );
    assert_eq!(lines_with(s, "update @affinity-").len(), 3);
    let checks = lines_with(s, "ip saddr @affinity-");
    assert_eq!(checks.len(), 3);
    // Affinity is checked before the random pick; sticky Services keep upstream's endpoint
    // chains, with their own hairpin rule.
    assert!(s.find(checks[2]).unwrap() < s.find("numgen random mod 3 == 0").unwrap());
    assert!(s.contains("numgen random mod 3 == 0 goto endpoint-"));
    assert_eq!(
        lines_with(s, "ip saddr 10.244.3.1 mark set mark or 0x004000").len(),
        1
    );
    assert!(!s.contains("add element ip kube-proxy hairpin-endpoints"));
    assert_eq!(p.state.chains.len(), 4);
    assert_eq!(p.state.affinity_sets.len(), 3);
}

#[test]
fn external_traffic_policy_local() {
    let mut f = Fixture::new();
    let mut s = with_type(web(), "NodePort", 30080);
    s.spec.as_mut().unwrap().external_traffic_policy = Some("Local".into());
    f.service(s).slice(three("ns", "web"));
    f.apply();
    let n = f.services.values().next().unwrap().names.clone();
    let s = full(&f, &config()).script;
    assert!(
        s.contains(&format!(
            "{} ip saddr 10.244.0.0/16 goto {}",
            n.nft_external, n.nft_cluster
        )),
        "{s}"
    );
    assert!(s.contains(&format!(
        "{} fib saddr type local mark set mark or 0x004000",
        n.nft_external
    )));
    assert!(s.contains(&format!("{} goto {}", n.nft_external, n.nft_local)));
    // Only node-a's endpoint in the local chain.
    let local: Vec<&str> = lines_with(&s, &format!("add rule ip kube-proxy {} ", n.nft_local));
    assert_eq!(local.len(), 1, "{local:?}");
    assert!(
        local[0].contains("meta l4proto tcp dnat to 10.244.1.1:8080")
            && !local[0].contains("numgen")
    );
    // Another node without local endpoints drops external traffic but serves the ClusterIP.
    let mut cfg = config();
    cfg.node_name = "node-z".into();
    let mut g = Fixture::new();
    let mut svc2 = with_type(web(), "NodePort", 30080);
    svc2.spec.as_mut().unwrap().external_traffic_policy = Some("Local".into());
    g.service(svc2);
    g.et_node("node-z");
    g.slice(three("ns", "web"));
    g.apply();
    let s = full(&g, &cfg).script;
    assert!(
        s.contains("no-endpoint-nodeports { tcp . 30080 : drop }"),
        "{s}"
    );
    assert!(s.contains(&format!("10.96.0.50 . tcp . 80 : goto {}", n.nft_cluster)));
}

#[test]
fn internal_traffic_policy_local_without_local_endpoints_drops() {
    let mut f = Fixture::new();
    let mut s = web();
    s.spec.as_mut().unwrap().internal_traffic_policy = Some("Local".into());
    f.service(s).slice(slice(
        "ns",
        "web",
        "web-1",
        ("http", 8080, "TCP"),
        &[("10.244.2.1", "node-b", true, true, false)],
    ));
    f.apply();
    let s = full(&f, &config()).script;
    assert!(
        s.contains("no-endpoint-services { 10.96.0.50 . tcp . 80 : drop }"),
        "{s}"
    );
}

#[test]
fn terminating_endpoints_serve_when_nothing_is_ready() {
    let mut f = Fixture::new();
    f.service(web()).slice(slice(
        "ns",
        "web",
        "web-1",
        ("http", 8080, "TCP"),
        &[
            ("10.244.1.1", "node-a", false, true, true),
            ("10.244.2.1", "node-b", false, false, true),
        ],
    ));
    f.apply();
    let s = full(&f, &config()).script;
    assert!(!s.contains("numgen"), "{s}");
    assert!(s.contains("dnat to 10.244.1.1:8080"));
    assert!(!s.contains("dnat to 10.244.2.1:8080"));
}

#[test]
fn partial_sync_rewrites_only_changed_services() {
    let mut f = Fixture::new();
    f.service(web()).slice(three("ns", "web"));
    f.service(svc("ns", "other", "10.96.0.51", &[("http", 80, "TCP")]))
        .slice(three("ns", "other"));
    f.apply();
    let cfg = config();
    let first = full(&f, &cfg);
    // One endpoint of web goes away.
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
    let updated = f.apply();
    let p = generate(
        &cfg,
        &f.services,
        &f.endpoints,
        false,
        &updated,
        &first.state,
        &HashSet::new(),
    );
    let s = &p.script;
    assert!(
        !s.contains("ns/other/"),
        "unchanged service rewritten:\n{s}"
    );
    assert!(s.contains("numgen random mod 2 == 0 meta l4proto tcp dnat to"));
    assert!(!s.contains("numgen random mod 3"));
    assert!(!s.contains("add element"), "maps did not change:\n{s}");
    assert!(!s.contains("flush map"));
    // 10.244.3.1 still serves `other`: its hairpin element stays.
    assert!(
        !s.contains("element ip kube-proxy hairpin-endpoints"),
        "{s}"
    );
    assert!(p.stale_chains.is_empty(), "{:?}", p.stale_chains);
    assert_eq!(p.rules_written, 1 + 2);
    assert_eq!(p.rules_total, (1 + 3) + (1 + 2));
    // The Service is deleted: its element goes, its chains become stale.
    f.delete_service(&web());
    let updated = f.apply();
    let q = generate(
        &cfg,
        &f.services,
        &f.endpoints,
        false,
        &updated,
        &p.state,
        &HashSet::new(),
    );
    assert!(
        q.script
            .contains("delete element ip kube-proxy service-ips { 10.96.0.50 . tcp . 80 }"),
        "{}",
        q.script
    );
    assert_eq!(q.stale_chains.len(), 1);
    // Both Services gone: the hairpin elements of their endpoints go too.
    f.delete_service(&svc("ns", "other", "10.96.0.51", &[("http", 80, "TCP")]));
    let updated = f.apply();
    let r = generate(
        &cfg,
        &f.services,
        &f.endpoints,
        false,
        &updated,
        &q.state,
        &HashSet::new(),
    );
    assert!(
        r.script.contains(
            "delete element ip kube-proxy hairpin-endpoints { 10.244.1.1 . 10.244.1.1, 10.244.2.1 . 10.244.2.1, 10.244.3.1 . 10.244.3.1 }"
        ),
        "{}",
        r.script
    );
}

#[test]
fn full_sync_cleans_chains_found_in_the_kernel() {
    let f = Fixture::new();
    let existing: HashSet<String> = ["service-AAAAAAAA-gone/svc/tcp/".to_string()].into();
    let p = generate(
        &config(),
        &f.services,
        &f.endpoints,
        true,
        &HashSet::new(),
        &TableState::default(),
        &existing,
    );
    assert_eq!(
        p.stale_chains,
        vec!["service-AAAAAAAA-gone/svc/tcp/".to_string()]
    );
    for m in MAPS {
        let kind = if is_set(m) { "set" } else { "map" };
        assert!(p
            .script
            .contains(&format!("flush {kind} ip kube-proxy {m}")));
    }
}

/// (map, key, verdict), chains, affinity sets: sorted.
type Table = (Vec<(String, String, String)>, Vec<String>, Vec<String>);
type Step = Box<dyn Fn(&mut Fixture)>;

/// The table a state describes.
fn table_of(st: &TableState) -> Table {
    let mut els: Vec<(String, String, String)> = MAPS
        .iter()
        .flat_map(|m| {
            st.elements(m)
                .map(|(k, v)| (m.to_string(), k.to_string(), v.to_string()))
        })
        .collect();
    els.sort();
    let mut chains: Vec<String> = st.chains.iter().cloned().collect();
    chains.sort();
    let mut sets: Vec<String> = st.affinity_sets.iter().cloned().collect();
    sets.sort();
    (els, chains, sets)
}

#[test]
fn partial_syncs_keep_the_state_of_a_full_sync() {
    let mut f = Fixture::new();
    for i in 0..6 {
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
    let cfg = config();
    let mut state = full(&f, &cfg).state;
    let mut sticky = svc("ns", "s1", "10.96.0.11", &[("http", 80, "TCP")]);
    sticky.spec.as_mut().unwrap().session_affinity = Some("ClientIP".into());
    let steps: Vec<Step> = vec![
        // One endpoint fewer.
        Box::new(|f| {
            f.slice(slice(
                "ns",
                "s0",
                "s0-1",
                ("http", 8080, "TCP"),
                &[("10.244.1.1", "node-a", true, true, false)],
            ));
        }),
        // No endpoints: the element moves to no-endpoint-services.
        Box::new(|f| {
            f.slice(slice("ns", "s2", "s2-1", ("http", 8080, "TCP"), &[]));
        }),
        Box::new(move |f| {
            f.service(sticky.clone());
        }),
        Box::new(|f| {
            f.delete_service(&svc("ns", "s3", "10.96.0.13", &[("http", 80, "TCP")]));
        }),
        // A new Service and a second port on another.
        Box::new(|f| {
            f.service(svc("ns", "new", "10.96.0.99", &[("http", 80, "TCP")]))
                .slice(three("ns", "new"));
            f.service(svc(
                "ns",
                "s4",
                "10.96.0.14",
                &[("http", 80, "TCP"), ("dns", 53, "UDP")],
            ));
        }),
        Box::new(|f| {
            f.service(with_type(
                svc("ns", "s5", "10.96.0.15", &[("http", 80, "TCP")]),
                "NodePort",
                30005,
            ));
        }),
    ];
    for (i, step) in steps.iter().enumerate() {
        step(&mut f);
        let updated = f.apply();
        let before = state.clone();
        let d = update(
            &cfg,
            &f.services,
            &f.endpoints,
            false,
            &updated,
            &mut state,
            &HashSet::new(),
        );
        let whole = full(&f, &cfg);
        assert_eq!(table_of(&state), table_of(&whole.state), "step {i}");
        assert_eq!(d.rules_total, whole.rules_total, "step {i}");
        // Only the changed Services' chains are written.
        for (c, _) in &d.changes.rules {
            assert!(
                updated
                    .iter()
                    .any(|u| c.contains(&format!("-{}/{}/", u.namespace, u.name))),
                "step {i}: {c} written"
            );
        }
        // The element changes turn the old table into the new one.
        let mut old: HashMap<(String, String), String> = MAPS
            .iter()
            .flat_map(|m| {
                before
                    .elements(m)
                    .map(|(k, v)| ((m.to_string(), k.to_string()), v.to_string()))
            })
            .collect();
        for mc in &d.changes.maps {
            for k in &mc.deletes {
                assert!(old.remove(&(mc.map.to_string(), k.clone())).is_some());
            }
            for (k, v) in &mc.adds {
                assert!(old
                    .insert((mc.map.to_string(), k.clone()), v.clone())
                    .is_none());
            }
        }
        let mut now: Vec<(String, String, String)> =
            old.into_iter().map(|((m, k), v)| (m, k, v)).collect();
        now.sort();
        assert_eq!(now, table_of(&state).0, "step {i}");
        // Stale chains are exactly those gone.
        for c in &d.stale_chains {
            assert!(before.chains.contains(c) && !state.chains.contains(c));
        }
        assert_eq!(
            d.stale_chains.len(),
            before.chains.difference(&state.chains).count(),
            "step {i}"
        );
    }
}

#[test]
fn a_shared_key_falls_back_to_the_other_service() {
    let mut f = Fixture::new();
    let ext = |name: &str, ip: &str| {
        let mut s = svc("ns", name, ip, &[("http", 80, "TCP")]);
        s.spec.as_mut().unwrap().external_ips = Some(vec!["192.0.2.10".into()]);
        s
    };
    f.service(ext("a", "10.96.0.1")).slice(three("ns", "a"));
    f.service(ext("b", "10.96.0.2")).slice(three("ns", "b"));
    f.apply();
    let cfg = config();
    let first = full(&f, &cfg);
    let key = "192.0.2.10 . tcp . 80";
    let verdict = |st: &TableState| st.element(SERVICE_IPS, key).unwrap().to_string();
    assert!(verdict(&first.state).contains("-ns/b/"));
    f.delete_service(&ext("b", "10.96.0.2"));
    let updated = f.apply();
    let mut state = first.state.clone();
    let d = update(
        &cfg,
        &f.services,
        &f.endpoints,
        false,
        &updated,
        &mut state,
        &HashSet::new(),
    );
    assert!(verdict(&state).contains("-ns/a/"), "{}", verdict(&state));
    let mc = d
        .changes
        .maps
        .iter()
        .find(|m| m.map == SERVICE_IPS)
        .unwrap();
    assert!(mc.deletes.contains(&key.to_string()));
    assert!(mc
        .adds
        .iter()
        .any(|(k, v)| k == key && v.contains("-ns/a/")));
    assert_eq!(table_of(&state), table_of(&full(&f, &cfg).state));
}

#[test]
fn a_partial_sync_without_changes_writes_nothing() {
    let mut f = Fixture::new();
    f.service(web()).slice(three("ns", "web"));
    f.apply();
    let cfg = config();
    let mut state = full(&f, &cfg).state;
    let d = update(
        &cfg,
        &f.services,
        &f.endpoints,
        false,
        &HashSet::new(),
        &mut state,
        &HashSet::new(),
    );
    assert!(d.changes.rules.is_empty() && d.changes.chains.is_empty());
    assert!(d
        .changes
        .maps
        .iter()
        .all(|m| m.adds.is_empty() && m.deletes.is_empty()));
    assert_eq!(d.rules_total, 1 + 3);
}
