//! NetworkPolicy semantics, asserted on the plan with a small evaluator of (source, destination,
//! protocol, port) that mirrors what the rendered table does in the forward hook: the sender's
//! egress allowances if it is an isolated pod of this node, then the receiver's ingress ones.

use std::net::Ipv4Addr;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use serde_json::{json, Value};

use super::model::{NamespaceInfo, PodInfo, Policy, Protocol};
use super::plan::{build, Allow, Inputs, PeerMatch, Plan, PortMatch};
use super::rules;

const NODE: &str = "node-a";

fn pod(ns: &str, name: &str, ip: &str, labels: Value) -> Value {
    json!({
        "metadata": {"namespace": ns, "name": name, "labels": labels},
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "x",
            "ports": [{"name": "http", "containerPort": 8080},
                      {"name": "dns", "containerPort": 5353, "protocol": "UDP"}]}]},
        "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]},
    })
}

struct World {
    pods: Vec<PodInfo>,
    namespaces: Vec<NamespaceInfo>,
    policies: Vec<Policy>,
}

impl World {
    fn new(pods: &[Value], namespaces: &[Value]) -> World {
        World {
            pods: pods
                .iter()
                .filter_map(|p| {
                    PodInfo::from_pod(&serde_json::from_value::<Pod>(p.clone()).unwrap())
                })
                .collect(),
            namespaces: namespaces
                .iter()
                .map(|n| {
                    NamespaceInfo::from_namespace(
                        &serde_json::from_value::<Namespace>(n.clone()).unwrap(),
                    )
                })
                .collect(),
            policies: Vec::new(),
        }
    }

    fn policy(&mut self, ns: &str, name: &str, spec: Value) -> &mut Self {
        let np: NetworkPolicy = serde_json::from_value(
            json!({"metadata": {"namespace": ns, "name": name}, "spec": spec}),
        )
        .unwrap();
        self.policies
            .push(Policy::from_network_policy(&np).expect("valid policy"));
        self
    }

    fn plan(&self) -> Plan {
        build(&Inputs {
            policies: &self.policies,
            pods: &self.pods,
            namespaces: &self.namespaces,
            node_name: NODE,
        })
    }

    /// Whether a new connection `src -> dst:port/proto` passes the table.
    fn allowed(&self, src: &str, dst: &str, proto: Protocol, port: u16) -> bool {
        evaluate(
            &self.plan(),
            src.parse().unwrap(),
            dst.parse().unwrap(),
            proto,
            port,
        )
    }

    fn tcp(&self, src: &str, dst: &str, port: u16) -> bool {
        self.allowed(src, dst, Protocol::Tcp, port)
    }
}

fn allow_matches(plan: &Plan, a: &Allow, peer: Ipv4Addr, proto: Protocol, port: u16) -> bool {
    let peer_ok = match &a.peer {
        PeerMatch::Any => true,
        PeerMatch::Set(i) => plan.sets[*i].contains(&peer),
        PeerMatch::Ip(ip) => *ip == peer,
        PeerMatch::Block { cidr, except } => {
            cidr.contains(peer) && !except.iter().any(|e| e.contains(peer))
        }
    };
    let port_ok = match &a.ports {
        PortMatch::Any => true,
        PortMatch::Protocol(p) => *p == proto,
        PortMatch::Range(p, first, last) => *p == proto && (*first..=*last).contains(&port),
    };
    peer_ok && port_ok
}

/// The forward chain: egress of an isolated sender, then ingress of an isolated receiver.
fn evaluate(plan: &Plan, src: Ipv4Addr, dst: Ipv4Addr, proto: Protocol, port: u16) -> bool {
    if let Some(allows) = plan
        .pods
        .iter()
        .find(|p| p.ip == src)
        .and_then(|p| p.egress.as_ref())
    {
        if !allows
            .iter()
            .any(|a| allow_matches(plan, a, dst, proto, port))
        {
            return false;
        }
    }
    if let Some(allows) = plan
        .pods
        .iter()
        .find(|p| p.ip == dst)
        .and_then(|p| p.ingress.as_ref())
    {
        if !allows
            .iter()
            .any(|a| allow_matches(plan, a, src, proto, port))
        {
            return false;
        }
    }
    true
}

const SERVER: &str = "10.244.0.10";
const CLIENT: &str = "10.244.0.11";
const TRUSTED: &str = "10.244.0.12";
const OTHER_NS: &str = "10.244.0.20";
const PROD_WEB: &str = "10.244.0.21";
const OUTSIDE: &str = "192.168.1.5";

/// server and two clients in `default`, two pods in `prod` (labelled env=prod).
fn world() -> World {
    World::new(
        &[
            pod("default", "server", SERVER, json!({"app": "server"})),
            pod("default", "client", CLIENT, json!({})),
            pod("default", "trusted", TRUSTED, json!({"access": "true"})),
            pod("prod", "db", OTHER_NS, json!({"app": "db"})),
            pod("prod", "web", PROD_WEB, json!({"access": "true"})),
        ],
        &[
            json!({"metadata": {"name": "default"}}),
            json!({"metadata": {"name": "prod", "labels": {"env": "prod"}}}),
        ],
    )
}

#[test]
fn pods_no_policy_selects_are_not_isolated() {
    let w = world();
    assert!(w.plan().pods.is_empty());
    assert!(w.tcp(CLIENT, SERVER, 80));
    assert!(w.tcp(OUTSIDE, SERVER, 80));
    assert!(w.allowed(SERVER, OUTSIDE, Protocol::Udp, 53));
}

#[test]
fn ingress_from_a_pod_selector_in_the_policys_namespace() {
    let mut w = world();
    w.policy(
        "default",
        "allow-access",
        json!({"podSelector": {"matchLabels": {"app": "server"}},
               "ingress": [{"from": [{"podSelector": {"matchLabels": {"access": "true"}}}]}]}),
    );
    assert!(!w.tcp(CLIENT, SERVER, 80));
    assert!(w.tcp(TRUSTED, SERVER, 80));
    assert!(
        w.allowed(TRUSTED, SERVER, Protocol::Udp, 53),
        "no ports: all"
    );
    // A pod with the label in another namespace is not a peer of a podSelector alone.
    assert!(!w.tcp(PROD_WEB, SERVER, 80));
    assert!(!w.tcp(OUTSIDE, SERVER, 80));
    // Only ingress was defaulted: the server still reaches anything, and other pods are open.
    assert!(w.tcp(SERVER, OUTSIDE, 443));
    assert!(w.tcp(CLIENT, TRUSTED, 80));
}

#[test]
fn policy_types_default_and_empty_rule_lists_deny() {
    // No rules at all: ingress isolated, nothing allowed; egress untouched.
    let mut w = world();
    w.policy("default", "deny", json!({"podSelector": {}}));
    assert!(!w.tcp(TRUSTED, SERVER, 80));
    assert!(!w.tcp(SERVER, CLIENT, 80), "the receiver is isolated too");
    assert!(w.tcp(SERVER, OUTSIDE, 80), "egress not isolated");
    assert!(w.tcp(OTHER_NS, PROD_WEB, 80), "another namespace");

    // Egress rules without policyTypes: both directions.
    let mut w = world();
    w.policy(
        "default",
        "both",
        json!({"podSelector": {"matchLabels": {"app": "server"}},
               "egress": [{"to": [{"ipBlock": {"cidr": "192.168.0.0/16"}}]}]}),
    );
    assert!(w.tcp(SERVER, OUTSIDE, 80));
    assert!(!w.tcp(SERVER, CLIENT, 80));
    assert!(
        !w.tcp(CLIENT, SERVER, 80),
        "ingress defaulted, with no rules"
    );

    // Egress only, with no rules: egress denied, ingress open.
    let mut w = world();
    w.policy(
        "default",
        "egress-deny",
        json!({"podSelector": {"matchLabels": {"app": "server"}}, "policyTypes": ["Egress"]}),
    );
    assert!(!w.tcp(SERVER, OUTSIDE, 80));
    assert!(w.tcp(CLIENT, SERVER, 80));
}

#[test]
fn empty_peer_lists_and_empty_rules_allow_everything() {
    for rule in [
        json!({}),
        json!({"from": []}),
        json!({"from": [], "ports": []}),
    ] {
        let mut w = world();
        w.policy(
            "default",
            "open",
            json!({"podSelector": {}, "ingress": [rule.clone()]}),
        );
        assert!(w.tcp(OUTSIDE, SERVER, 80), "{rule}");
        assert!(w.allowed(CLIENT, SERVER, Protocol::Sctp, 9), "{rule}");
    }
    // `from: []` with ports: every source, those ports only.
    let mut w = world();
    w.policy(
        "default",
        "port-only",
        json!({"podSelector": {}, "ingress": [{"from": [], "ports": [{"port": 80}]}]}),
    );
    assert!(w.tcp(OUTSIDE, SERVER, 80));
    assert!(!w.tcp(OUTSIDE, SERVER, 81));
}

#[test]
fn rules_and_policies_are_unions() {
    let mut w = world();
    w.policy(
        "default",
        "a",
        json!({"podSelector": {"matchLabels": {"app": "server"}},
               "ingress": [{"from": [{"podSelector": {"matchLabels": {"access": "true"}}}]}]}),
    );
    w.policy(
        "default",
        "b",
        json!({"podSelector": {"matchLabels": {"app": "server"}},
               "ingress": [{"from": [{"ipBlock": {"cidr": "192.168.1.0/24"}}], "ports": [{"port": 443}]}]}),
    );
    assert!(w.tcp(TRUSTED, SERVER, 80));
    assert!(w.tcp(OUTSIDE, SERVER, 443));
    assert!(!w.tcp(OUTSIDE, SERVER, 80));
    assert!(!w.tcp(CLIENT, SERVER, 443));
}

#[test]
fn namespace_selectors_alone_and_with_pod_selectors() {
    // namespaceSelector alone: every pod of matching namespaces.
    let mut w = world();
    w.policy(
        "default",
        "from-prod",
        json!({"podSelector": {"matchLabels": {"app": "server"}},
               "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"env": "prod"}}}]}]}),
    );
    assert!(w.tcp(OTHER_NS, SERVER, 80));
    assert!(w.tcp(PROD_WEB, SERVER, 80));
    assert!(!w.tcp(TRUSTED, SERVER, 80), "default is not env=prod");

    // Both in one peer: matching pods in matching namespaces (AND).
    let mut w = world();
    w.policy(
        "default",
        "from-prod-access",
        json!({"podSelector": {"matchLabels": {"app": "server"}},
               "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"env": "prod"}},
                                      "podSelector": {"matchLabels": {"access": "true"}}}]}]}),
    );
    assert!(w.tcp(PROD_WEB, SERVER, 80));
    assert!(!w.tcp(OTHER_NS, SERVER, 80));
    assert!(!w.tcp(TRUSTED, SERVER, 80));

    // An empty namespaceSelector selects all namespaces; the automatic name label works.
    let mut w = world();
    w.policy(
        "default",
        "all-ns",
        json!({"podSelector": {"matchLabels": {"app": "server"}},
               "ingress": [{"from": [{"namespaceSelector": {}, "podSelector": {"matchLabels": {"access": "true"}}},
                                     {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "prod"}},
                                      "podSelector": {"matchLabels": {"app": "db"}}}]}]}),
    );
    assert!(w.tcp(TRUSTED, SERVER, 80));
    assert!(w.tcp(PROD_WEB, SERVER, 80));
    assert!(w.tcp(OTHER_NS, SERVER, 80));
    assert!(!w.tcp(CLIENT, SERVER, 80));
}

#[test]
fn ip_blocks_with_exceptions() {
    let mut w = world();
    w.policy(
        "default",
        "block",
        json!({"podSelector": {"matchLabels": {"app": "server"}},
               "ingress": [{"from": [{"ipBlock": {"cidr": "10.244.0.0/16", "except": ["10.244.0.11/32"]}}]}]}),
    );
    assert!(w.tcp(TRUSTED, SERVER, 80));
    assert!(!w.tcp(CLIENT, SERVER, 80));
    assert!(!w.tcp(OUTSIDE, SERVER, 80));
    // An IPv6 block never widens a rule to every source.
    let mut w = world();
    w.policy(
        "default",
        "v6",
        json!({"podSelector": {}, "ingress": [{"from": [{"ipBlock": {"cidr": "fd00::/8"}}]}]}),
    );
    assert!(!w.tcp(CLIENT, SERVER, 80));
}

#[test]
fn ports_protocols_and_ranges() {
    let mut w = world();
    w.policy(
        "default",
        "ports",
        json!({"podSelector": {"matchLabels": {"app": "server"}},
               "ingress": [{"ports": [{"port": 80}, {"protocol": "UDP", "port": 53},
                                      {"protocol": "TCP", "port": 8000, "endPort": 8010},
                                      {"protocol": "SCTP"}]}]}),
    );
    assert!(w.tcp(CLIENT, SERVER, 80), "TCP is the default protocol");
    assert!(!w.allowed(CLIENT, SERVER, Protocol::Udp, 80));
    assert!(w.allowed(CLIENT, SERVER, Protocol::Udp, 53));
    assert!(!w.tcp(CLIENT, SERVER, 53));
    assert!(w.tcp(CLIENT, SERVER, 8000));
    assert!(w.tcp(CLIENT, SERVER, 8010));
    assert!(!w.tcp(CLIENT, SERVER, 8011));
    assert!(w.allowed(CLIENT, SERVER, Protocol::Sctp, 1234));
}

#[test]
fn named_ports_resolve_against_the_destination_pod() {
    // Ingress: the isolated pod's own container ports.
    let mut w = world();
    w.policy(
        "default",
        "named",
        json!({"podSelector": {"matchLabels": {"app": "server"}},
               "ingress": [{"ports": [{"port": "http"}, {"port": "dns", "protocol": "UDP"},
                                      {"port": "nosuch"}, {"port": "dns"}]}]}),
    );
    assert!(w.tcp(CLIENT, SERVER, 8080));
    assert!(!w.tcp(CLIENT, SERVER, 80));
    assert!(w.allowed(CLIENT, SERVER, Protocol::Udp, 5353));
    assert!(!w.tcp(CLIENT, SERVER, 5353), "dns is UDP on the pod");

    // Egress: each destination pod's port of that name; only pods have named ports.
    let mut w = world();
    w.pods.push(PodInfo {
        namespace: "default".into(),
        name: "alt".into(),
        labels: Default::default(),
        ip: "10.244.1.9".parse().unwrap(),
        node: Some("node-b".into()),
        ports: vec![super::model::NamedPort {
            name: "http".into(),
            protocol: Protocol::Tcp,
            port: 9090,
        }],
    });
    w.policy(
        "default",
        "egress-named",
        json!({"podSelector": {"matchLabels": {"app": "server"}}, "policyTypes": ["Egress"],
               "egress": [{"ports": [{"port": "http"}]}]}),
    );
    assert!(w.tcp(SERVER, CLIENT, 8080));
    assert!(w.tcp(SERVER, "10.244.1.9", 9090));
    assert!(!w.tcp(SERVER, "10.244.1.9", 8080));
    assert!(!w.tcp(SERVER, OUTSIDE, 8080));
}

#[test]
fn egress_to_pods_and_between_two_isolated_pods_of_the_node() {
    let mut w = world();
    w.policy(
        "default",
        "server-in",
        json!({"podSelector": {"matchLabels": {"app": "server"}},
               "ingress": [{"from": [{"podSelector": {"matchLabels": {"access": "true"}}}]}]}),
    );
    w.policy(
        "default",
        "trusted-out",
        json!({"podSelector": {"matchLabels": {"access": "true"}}, "policyTypes": ["Egress"],
               "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "db"}},
                                   "namespaceSelector": {"matchLabels": {"env": "prod"}}}],
                           "ports": [{"port": 5432}]}]}),
    );
    // trusted may only reach prod's db on 5432, so not the server that would admit it.
    assert!(!w.tcp(TRUSTED, SERVER, 80));
    assert!(w.tcp(TRUSTED, OTHER_NS, 5432));
    assert!(!w.tcp(TRUSTED, OTHER_NS, 80));
    assert!(!w.tcp(CLIENT, SERVER, 80));
}

#[test]
fn only_this_nodes_pods_get_chains_and_ignored_pods_are_no_peers() {
    let mut remote = pod(
        "default",
        "remote-server",
        "10.244.1.10",
        json!({"app": "server"}),
    );
    remote["spec"]["nodeName"] = json!("node-b");
    let mut remote_trusted = pod(
        "default",
        "remote-trusted",
        "10.244.1.11",
        json!({"access": "true"}),
    );
    remote_trusted["spec"]["nodeName"] = json!("node-b");
    let mut host = pod("default", "host", "10.0.0.1", json!({"access": "true"}));
    host["spec"]["hostNetwork"] = json!(true);
    let mut done = pod("default", "done", "10.244.0.99", json!({"access": "true"}));
    done["status"]["phase"] = json!("Succeeded");
    let mut w = World::new(
        &[
            pod("default", "server", SERVER, json!({"app": "server"})),
            remote,
            remote_trusted,
            host,
            done,
        ],
        &[json!({"metadata": {"name": "default"}})],
    );
    w.policy(
        "default",
        "allow-access",
        json!({"podSelector": {"matchLabels": {"app": "server"}},
               "ingress": [{"from": [{"podSelector": {"matchLabels": {"access": "true"}}}]}]}),
    );
    let plan = w.plan();
    assert_eq!(plan.pods.len(), 1, "{plan:?}");
    assert_eq!(plan.pods[0].name, "server");
    assert!(w.tcp("10.244.1.11", SERVER, 80), "a peer on another node");
    assert!(
        !w.tcp("10.0.0.1", SERVER, 80),
        "host-network pods are not pod peers"
    );
    assert!(
        !w.tcp("10.244.0.99", SERVER, 80),
        "finished pods are not peers"
    );
}

#[test]
fn the_table_renders_the_plan() {
    let mut w = world();
    w.policy(
        "default",
        "allow-access",
        json!({"podSelector": {"matchLabels": {"app": "server"}},
               "ingress": [{"from": [{"podSelector": {"matchLabels": {"access": "true"}}},
                                     {"ipBlock": {"cidr": "192.168.1.7/16", "except": ["192.168.1.0/24"]}}],
                            "ports": [{"port": 8000, "endPort": 8080}, {"protocol": "UDP"}]}]}),
    );
    w.policy(
        "default",
        "egress",
        json!({"podSelector": {"matchLabels": {"access": "true"}}, "policyTypes": ["Egress"]}),
    );
    let script = super::table(&w.policies, &w.pods, &w.namespaces, NODE);
    let server = rules::ingress_chain("default", "server");
    let trusted = rules::egress_chain("default", "trusted");
    for want in [
        "add table ip rkube-netpol\ndelete table ip rkube-netpol\ntable ip rkube-netpol {",
        "set peers-0 {\n\t\ttype ipv4_addr\n\t\telements = { 10.244.0.12 }",
        &format!("elements = {{ {SERVER} : jump {server} }}"),
        &format!("elements = {{ {TRUSTED} : jump {trusted} }}"),
        "ip saddr @peers-0 meta l4proto tcp th dport 8000-8080 return comment \"default/allow-access ingress rule 0\"",
        "ip saddr @peers-0 meta l4proto udp return",
        "ip saddr 192.168.0.0/16 ip saddr != { 192.168.1.0/24 } meta l4proto tcp th dport 8000-8080 return",
        &format!("chain {trusted} {{\n\t\tdrop\n\t}}"),
        "type filter hook forward priority filter; policy accept;\n\t\tct state established,related accept\n\t\tip saddr vmap @egress-pods\n\t\tip daddr vmap @ingress-pods",
    ] {
        assert!(script.contains(want), "missing {want:?} in\n{script}");
    }
    // Chains are declared before the maps that jump to them.
    assert!(script.find(&format!("chain {server}")) < script.find("map ingress-pods"));
    // Long names stay within nftables' limit and distinct.
    let long = "p".repeat(253);
    assert!(rules::ingress_chain("ns", &long).len() <= 250);
    assert_ne!(
        rules::ingress_chain("ns", &format!("{long}a")),
        rules::ingress_chain("ns", &format!("{long}b"))
    );
    // No policy: an empty table (its maps empty, the base chain passes everything).
    let empty = super::table(&[], &w.pods, &w.namespaces, NODE);
    assert!(!empty.contains("jump"), "{empty}");
}
