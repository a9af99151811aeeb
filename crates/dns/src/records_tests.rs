//! Tests of [`super::answer`]: every record kind, NXDOMAIN vs NODATA, case and trailing dots.

use super::*;
use crate::snapshot::tests::{config, service, slice};
use serde_json::json;

fn snapshot() -> Snapshot {
    let svcs = [
        service(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.50", "clusterIPs": ["10.96.0.50"],
                     "ports": [{"name": "http", "port": 80, "protocol": "TCP"},
                               {"name": "dns", "port": 53, "protocol": "UDP"}]}
        })),
        service(json!({
            "metadata": {"name": "nginx-sts", "namespace": "default"},
            "spec": {"clusterIP": "None", "ports": [{"name": "web", "port": 80}]}
        })),
        service(json!({
            "metadata": {"name": "empty", "namespace": "default"},
            "spec": {"clusterIP": "None"}
        })),
        service(json!({
            "metadata": {"name": "ext", "namespace": "other"},
            "spec": {"type": "ExternalName", "externalName": "example.com"}
        })),
        service(json!({
            "metadata": {"name": "v6", "namespace": "default"},
            "spec": {"clusterIP": "fd00::10", "ports": [{"port": 443}]}
        })),
    ];
    let slices = [slice(json!({
        "metadata": {"name": "nginx-sts-abc", "namespace": "default",
                     "labels": {"kubernetes.io/service-name": "nginx-sts"}},
        "addressType": "IPv4",
        "ports": [{"name": "web", "port": 80, "protocol": "TCP"}],
        "endpoints": [
            {"addresses": ["10.244.0.5"], "hostname": "nginx-sts-0", "conditions": {"ready": true}},
            {"addresses": ["10.244.0.6"], "hostname": "nginx-sts-1", "conditions": {"ready": true}},
            {"addresses": ["10.244.0.7"], "conditions": {"ready": true}},
            {"addresses": ["10.244.0.8"], "hostname": "nginx-sts-3", "conditions": {"ready": false}}
        ]
    }))];
    Snapshot::build(config(), &svcs, &slices)
}

fn ask(name: &str, qtype: RecordType) -> Response {
    let q = Query::new(Name::from_ascii(name).expect("name"), qtype);
    match answer(&snapshot(), &q) {
        Answer::Local(r) => r,
        Answer::Forward => panic!("{name} was forwarded"),
    }
}

fn ips(r: &Response) -> Vec<String> {
    let mut v: Vec<String> = r
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::A(a) => Some(a.0.to_string()),
            RData::AAAA(a) => Some(a.0.to_string()),
            _ => None,
        })
        .collect();
    v.sort();
    v
}

fn assert_nodata(r: &Response) {
    assert_eq!(r.rcode, ResponseCode::NoError);
    assert!(r.answers.is_empty(), "{:?}", r.answers);
    assert_eq!(r.authorities.len(), 1);
    assert_eq!(r.authorities[0].record_type(), RecordType::SOA);
}

fn assert_nxdomain(r: &Response) {
    assert_eq!(r.rcode, ResponseCode::NXDomain, "{:?}", r.answers);
    assert!(r.answers.is_empty());
    assert_eq!(r.authorities[0].record_type(), RecordType::SOA);
    assert_eq!(r.authorities[0].ttl, 5);
}

#[test]
fn cluster_ip_service_a_record() {
    let r = ask("web.default.svc.cluster.local.", RecordType::A);
    assert_eq!(r.rcode, ResponseCode::NoError);
    // Two ports, one address: deduplicated.
    assert_eq!(ips(&r), ["10.96.0.50"]);
    assert_eq!(r.answers[0].ttl, 5);
    assert_eq!(
        r.answers[0].name.to_ascii(),
        "web.default.svc.cluster.local."
    );
}

#[test]
fn case_and_trailing_dot_do_not_matter_and_case_is_echoed() {
    let r = ask("WEB.Default.SVC.Cluster.Local", RecordType::A);
    assert_eq!(ips(&r), ["10.96.0.50"]);
    assert_eq!(
        r.answers[0].name.to_ascii(),
        "WEB.Default.SVC.Cluster.Local"
    );
}

#[test]
fn aaaa_of_a_v4_service_is_nodata_and_v6_service_answers() {
    assert_nodata(&ask("web.default.svc.cluster.local.", RecordType::AAAA));
    let r = ask("v6.default.svc.cluster.local.", RecordType::AAAA);
    assert_eq!(ips(&r), ["fd00::10"]);
    assert_nodata(&ask("v6.default.svc.cluster.local.", RecordType::A));
}

#[test]
fn headless_service_lists_ready_endpoints() {
    let r = ask("nginx-sts.default.svc.cluster.local.", RecordType::A);
    assert_eq!(ips(&r), ["10.244.0.5", "10.244.0.6", "10.244.0.7"]);
}

#[test]
fn headless_endpoint_hostnames() {
    let r = ask(
        "nginx-sts-1.nginx-sts.default.svc.cluster.local.",
        RecordType::A,
    );
    assert_eq!(ips(&r), ["10.244.0.6"]);
    // Without a hostname the endpoint is published under its dashed IP.
    let r = ask(
        "10-244-0-7.nginx-sts.default.svc.cluster.local.",
        RecordType::A,
    );
    assert_eq!(ips(&r), ["10.244.0.7"]);
    // Not ready: not published.
    assert_nxdomain(&ask(
        "nginx-sts-3.nginx-sts.default.svc.cluster.local.",
        RecordType::A,
    ));
    assert_nxdomain(&ask(
        "nope.nginx-sts.default.svc.cluster.local.",
        RecordType::A,
    ));
}

#[test]
fn headless_without_endpoints_is_nxdomain() {
    assert_nxdomain(&ask("empty.default.svc.cluster.local.", RecordType::A));
}

#[test]
fn srv_for_cluster_ip_ports() {
    let r = ask("_http._tcp.web.default.svc.cluster.local.", RecordType::SRV);
    assert_eq!(r.answers.len(), 1);
    let RData::SRV(srv) = &r.answers[0].data else {
        panic!("not SRV")
    };
    assert_eq!((srv.priority, srv.weight, srv.port), (0, 100, 80));
    assert_eq!(srv.target.to_ascii(), "web.default.svc.cluster.local.");
    assert_eq!(
        ips(&Response {
            answers: r.additionals.clone(),
            ..Response::default()
        }),
        ["10.96.0.50"]
    );
    // All ports without port and protocol labels, each weighted half.
    let r = ask("web.default.svc.cluster.local.", RecordType::SRV);
    let ports: Vec<(u16, u16)> = r
        .answers
        .iter()
        .filter_map(|a| match &a.data {
            RData::SRV(s) => Some((s.port, s.weight)),
            _ => None,
        })
        .collect();
    assert_eq!(ports, [(80, 50), (53, 50)]);
    assert_nxdomain(&ask(
        "_http._udp.web.default.svc.cluster.local.",
        RecordType::SRV,
    ));
    assert_nxdomain(&ask(
        "_nope._tcp.web.default.svc.cluster.local.",
        RecordType::SRV,
    ));
}

#[test]
fn srv_for_headless_points_at_each_endpoint() {
    let r = ask(
        "_web._tcp.nginx-sts.default.svc.cluster.local.",
        RecordType::SRV,
    );
    let mut targets: Vec<String> = r
        .answers
        .iter()
        .filter_map(|a| match &a.data {
            RData::SRV(s) => Some(format!("{} {} {}", s.weight, s.port, s.target)),
            _ => None,
        })
        .collect();
    targets.sort();
    assert_eq!(
        targets,
        [
            "33 80 10-244-0-7.nginx-sts.default.svc.cluster.local.",
            "33 80 nginx-sts-0.nginx-sts.default.svc.cluster.local.",
            "33 80 nginx-sts-1.nginx-sts.default.svc.cluster.local.",
        ]
    );
    assert_eq!(r.additionals.len(), 3);
}

#[test]
fn external_name_is_a_cname() {
    let r = ask("ext.other.svc.cluster.local.", RecordType::CNAME);
    let RData::CNAME(c) = &r.answers[0].data else {
        panic!("not CNAME")
    };
    assert_eq!(c.0.to_ascii(), "example.com.");
    let r = ask("ext.other.svc.cluster.local.", RecordType::A);
    assert_eq!(r.answers[0].record_type(), RecordType::CNAME);
    assert_eq!(
        r.chase.as_ref().map(|n| n.to_ascii()).as_deref(),
        Some("example.com.")
    );
    // No SRV for ExternalName; the name exists, so NODATA.
    assert_nodata(&ask("ext.other.svc.cluster.local.", RecordType::SRV));
}

#[test]
fn ptr_for_cluster_ips_and_endpoints() {
    let r = ask("50.0.96.10.in-addr.arpa.", RecordType::PTR);
    let RData::PTR(p) = &r.answers[0].data else {
        panic!("not PTR")
    };
    assert_eq!(p.0.to_ascii(), "web.default.svc.cluster.local.");
    let r = ask("6.0.244.10.in-addr.arpa.", RecordType::PTR);
    let RData::PTR(p) = &r.answers[0].data else {
        panic!("not PTR")
    };
    assert_eq!(
        p.0.to_ascii(),
        "nginx-sts-1.nginx-sts.default.svc.cluster.local."
    );
    let v6 = "0.1.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.0.d.f.ip6.arpa.";
    let r = ask(v6, RecordType::PTR);
    let RData::PTR(p) = &r.answers[0].data else {
        panic!("not PTR")
    };
    assert_eq!(p.0.to_ascii(), "v6.default.svc.cluster.local.");
}

#[test]
fn unknown_reverse_names_and_outside_names_are_forwarded() {
    for (name, t) in [
        ("1.1.168.192.in-addr.arpa.", RecordType::PTR),
        ("168.192.in-addr.arpa.", RecordType::PTR),
        ("50.0.96.10.in-addr.arpa.", RecordType::A),
        ("example.com.", RecordType::A),
        ("local.", RecordType::A),
    ] {
        let q = Query::new(Name::from_ascii(name).expect("name"), t);
        assert!(matches!(answer(&snapshot(), &q), Answer::Forward), "{name}");
    }
}

#[test]
fn pods_insecure() {
    let r = ask("10-244-1-9.anything.pod.cluster.local.", RecordType::A);
    assert_eq!(ips(&r), ["10.244.1.9"]);
    let r = ask("fd00--9.default.pod.cluster.local.", RecordType::AAAA);
    assert_eq!(ips(&r), ["fd00::9"]);
    assert_nodata(&ask(
        "10-244-1-9.default.pod.cluster.local.",
        RecordType::AAAA,
    ));
    assert_nxdomain(&ask("not-an-ip.default.pod.cluster.local.", RecordType::A));
    assert_nodata(&ask("default.pod.cluster.local.", RecordType::A));
}

#[test]
fn nxdomain_versus_nodata() {
    assert_nxdomain(&ask("missing.default.svc.cluster.local.", RecordType::A));
    assert_nxdomain(&ask("web.other.svc.cluster.local.", RecordType::A));
    assert_nxdomain(&ask("foo.cluster.local.", RecordType::A));
    assert_nxdomain(&ask("a.b.c.web.default.svc.cluster.local.", RecordType::A));
    // Existing names without data of the asked type.
    assert_nodata(&ask("web.default.svc.cluster.local.", RecordType::MX));
    assert_nodata(&ask("web.default.svc.cluster.local.", RecordType::TXT));
    assert_nodata(&ask("web.default.svc.cluster.local.", RecordType::PTR));
    assert_nxdomain(&ask("missing.default.svc.cluster.local.", RecordType::MX));
    assert_nodata(&ask("default.svc.cluster.local.", RecordType::A));
    assert_nodata(&ask("anynamespace.svc.cluster.local.", RecordType::A));
    assert_nodata(&ask("svc.cluster.local.", RecordType::A));
    assert_nodata(&ask("cluster.local.", RecordType::A));
}

#[test]
fn apex_soa_ns_and_dns_version() {
    let r = ask("cluster.local.", RecordType::SOA);
    let RData::SOA(soa) = &r.answers[0].data else {
        panic!("not SOA")
    };
    assert_eq!(soa.mname.to_ascii(), "ns.dns.cluster.local.");
    assert_eq!(soa.rname.to_ascii(), "hostmaster.cluster.local.");
    assert_eq!(soa.minimum, 5);
    let r = ask("cluster.local.", RecordType::NS);
    assert_eq!(r.answers[0].record_type(), RecordType::NS);
    assert_eq!(r.additionals.len(), 1);
    let r = ask("ns.dns.cluster.local.", RecordType::A);
    assert_eq!(ips(&r), ["10.96.0.10"]);
    let r = ask("dns-version.cluster.local.", RecordType::TXT);
    let RData::TXT(txt) = &r.answers[0].data else {
        panic!("not TXT")
    };
    assert_eq!(txt.to_string(), "1.1.0");
}

#[test]
fn other_cluster_domains() {
    let mut c = config();
    c.zone = Name::from_ascii("corp.example.").expect("name");
    let s = Snapshot::build(
        c,
        &[service(json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"clusterIP": "10.96.0.50", "ports": [{"port": 80}]}
        }))],
        &[],
    );
    let q = Query::new(
        Name::from_ascii("web.default.svc.corp.example").expect("n"),
        RecordType::A,
    );
    let Answer::Local(r) = answer(&s, &q) else {
        panic!("forwarded")
    };
    assert_eq!(ips(&r), ["10.96.0.50"]);
    let q = Query::new(
        Name::from_ascii("web.default.svc.cluster.local").expect("n"),
        RecordType::A,
    );
    assert!(matches!(answer(&s, &q), Answer::Forward));
}

#[test]
fn parse_follows_coredns() {
    let p = |s: &str| {
        let labels: Vec<String> = s.split('.').map(String::from).collect();
        parse(&labels)
    };
    let r = p("_http._tcp.web.default.svc")
        .ok()
        .flatten()
        .expect("parsed");
    assert_eq!((r.port.as_str(), r.protocol.as_str()), ("http", "tcp"));
    let r = p("host.web.default.svc").ok().flatten().expect("parsed");
    assert_eq!(r.endpoint, "host");
    assert!(p("svc").ok().expect("ok").is_none());
    assert!(p("web.default.nope").is_err());
}
