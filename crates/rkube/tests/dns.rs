//! Cluster DNS of `rkube server` (issue 19, item 2): names of Services, headless StatefulSet pods,
//! ExternalName aliases, PTR and pod names, asked over UDP and TCP with a DNS client
//! (hickory-proto messages on std sockets); the kube-dns Service and its EndpointSlice.

mod support;

use std::io::{Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use hickory_proto::op::{Message, MessageType, OpCode, Query, ResponseCode};
use hickory_proto::rr::{Name, RData, RecordType};
use support::{Backend, Cluster};

const DEADLINE: Duration = Duration::from_secs(90);

fn free_port() -> u16 {
    // A UDP port whose TCP twin is free too, below the ephemeral range (32768+) so that no client
    // connection of the test takes it before the server binds it.
    let mut candidate = 20000 + (rand_id() % 10000);
    loop {
        let udp = UdpSocket::bind(("127.0.0.1", candidate));
        let tcp = std::net::TcpListener::bind(("127.0.0.1", candidate));
        if udp.is_ok() && tcp.is_ok() {
            return candidate;
        }
        candidate = 20000 + (candidate - 20000 + 1) % 10000;
    }
}

fn query(name: &str, qtype: RecordType) -> Message {
    let mut m = Message::new(rand_id(), MessageType::Query, OpCode::Query);
    m.metadata.recursion_desired = true;
    m.add_query(Query::query(Name::from_ascii(name).expect("name"), qtype));
    m
}

fn rand_id() -> u16 {
    (std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("time")
        .subsec_nanos()
        & 0xffff) as u16
}

fn ask_udp(server: SocketAddr, name: &str, qtype: RecordType) -> Message {
    let q = query(name, qtype);
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind");
    sock.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    sock.send_to(&q.to_vec().expect("encode"), server)
        .expect("send");
    let mut buf = [0u8; 4096];
    let (n, _) = sock.recv_from(&mut buf).expect("no UDP answer");
    let m = Message::from_vec(&buf[..n]).expect("decode");
    assert_eq!(m.metadata.id, q.metadata.id);
    m
}

fn ask_tcp(server: SocketAddr, name: &str, qtype: RecordType) -> Message {
    let q = query(name, qtype).to_vec().expect("encode");
    let mut s = TcpStream::connect_timeout(&server, Duration::from_secs(5)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let mut framed = (q.len() as u16).to_be_bytes().to_vec();
    framed.extend_from_slice(&q);
    s.write_all(&framed).expect("write");
    let mut len = [0u8; 2];
    s.read_exact(&mut len).expect("length");
    let mut buf = vec![0u8; usize::from(u16::from_be_bytes(len))];
    s.read_exact(&mut buf).expect("body");
    Message::from_vec(&buf).expect("decode")
}

fn addresses(m: &Message) -> Vec<String> {
    let mut v: Vec<String> = m
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

/// Asks until `check` accepts the answer, or fails with the last one at the deadline.
fn wait_for(
    server: SocketAddr,
    name: &str,
    qtype: RecordType,
    check: impl Fn(&Message) -> bool,
) -> Message {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let m = ask_udp(server, name, qtype);
        if check(&m) {
            return m;
        }
        assert!(
            Instant::now() < deadline,
            "no expected answer for {name} {qtype}: {m:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

fn jsonpath(c: &Cluster, args: &[&str]) -> String {
    c.kubectl(args).trim().to_string()
}

const OBJECTS: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: web}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: v1
kind: Service
metadata: {name: nginx-sts}
spec:
  clusterIP: None
  selector: {app: nginx-sts}
  ports: [{name: web, port: 80}]
---
apiVersion: apps/v1
kind: StatefulSet
metadata: {name: nginx-sts}
spec:
  serviceName: nginx-sts
  replicas: 2
  selector: {matchLabels: {app: nginx-sts}}
  template:
    metadata: {labels: {app: nginx-sts}}
    spec:
      containers: [{name: nginx, image: nginx, ports: [{name: web, containerPort: 80}]}]
---
apiVersion: v1
kind: Service
metadata: {name: ext}
spec: {type: ExternalName, externalName: www.example.com}
---
apiVersion: v1
kind: Service
metadata: {name: alias}
spec: {type: ExternalName, externalName: web.default.svc.cluster.local}
"#;

#[test]
fn cluster_dns_answers_for_services_and_pods() {
    let port = free_port();
    let port_text = port.to_string();
    let c = Cluster::start_all(
        Backend::Sqlite,
        &[
            "--sim-nodes",
            "1",
            "--dns-bind-address",
            "127.0.0.1",
            "--dns-port",
            &port_text,
        ],
    );
    let server: SocketAddr = (IpAddr::from([127, 0, 0, 1]), port).into();
    c.kubectl_in(&["apply", "-f", "-"], Some(OBJECTS));

    // The kube-dns Service as kubeadm creates it, and the slice that points at this server.
    let deadline = Instant::now() + DEADLINE;
    let slice = loop {
        let out = c.kubectl_output(
            &["get", "endpointslice", "-n", "kube-system", "kube-dns-rkube", "-o",
              "jsonpath={.endpoints[0].addresses[0]} {.ports[*].port} {.ports[*].protocol} {.metadata.labels}"],
            None,
        );
        if out.status.success() {
            break String::from_utf8_lossy(&out.stdout).to_string();
        }
        assert!(Instant::now() < deadline, "no kube-dns EndpointSlice");
        std::thread::sleep(Duration::from_millis(250));
    };
    assert!(
        slice.starts_with(&format!("127.0.0.1 {port} {port} UDP TCP")),
        "{slice}"
    );
    assert!(
        slice.contains("\"kubernetes.io/service-name\":\"kube-dns\""),
        "{slice}"
    );
    assert!(
        !slice.contains("endpointslice-controller.k8s.io"),
        "{slice}"
    );
    let svc = jsonpath(&c, &["get", "svc", "-n", "kube-system", "kube-dns", "-o",
        "jsonpath={.spec.clusterIP} {.spec.ports[*].name} {.metadata.labels.k8s-app} {.metadata.labels.kubernetes\\.io/name}"]);
    assert_eq!(svc, "10.96.0.10 dns dns-tcp metrics kube-dns CoreDNS");

    // A ClusterIP Service, over UDP and TCP, any case.
    let web_ip = jsonpath(
        &c,
        &["get", "svc", "web", "-o", "jsonpath={.spec.clusterIP}"],
    );
    let m = wait_for(
        server,
        "web.default.svc.cluster.local.",
        RecordType::A,
        |m| !m.answers.is_empty(),
    );
    assert_eq!(addresses(&m), [web_ip.as_str()]);
    assert!(m.metadata.authoritative);
    assert_eq!(m.answers[0].ttl, 5);
    let m = ask_tcp(server, "WEB.default.svc.cluster.local.", RecordType::A);
    assert_eq!(addresses(&m), [web_ip.as_str()]);
    let m = ask_udp(
        server,
        "kube-dns.kube-system.svc.cluster.local.",
        RecordType::A,
    );
    assert_eq!(addresses(&m), ["10.96.0.10"]);
    let m = ask_udp(
        server,
        "kubernetes.default.svc.cluster.local.",
        RecordType::A,
    );
    assert_eq!(addresses(&m), ["10.96.0.1"]);

    // SRV of a named port, PTR of the ClusterIP.
    let m = ask_udp(
        server,
        "_http._tcp.web.default.svc.cluster.local.",
        RecordType::SRV,
    );
    let RData::SRV(srv) = &m.answers[0].data else {
        panic!("{m:?}")
    };
    assert_eq!(
        (srv.port, srv.target.to_ascii().as_str()),
        (80, "web.default.svc.cluster.local.")
    );
    let octets: Vec<&str> = web_ip.split('.').rev().collect();
    let m = ask_udp(
        server,
        &format!("{}.in-addr.arpa.", octets.join(".")),
        RecordType::PTR,
    );
    let RData::PTR(ptr) = &m.answers[0].data else {
        panic!("{m:?}")
    };
    assert_eq!(ptr.0.to_ascii(), "web.default.svc.cluster.local.");

    // The headless Service of the StatefulSet: per-pod names (seed 003's `nginx-sts-1.nginx-sts`).
    let deadline = Instant::now() + DEADLINE;
    let (ip0, ip1) = loop {
        let ips = jsonpath(
            &c,
            &[
                "get",
                "pod",
                "nginx-sts-0",
                "nginx-sts-1",
                "--ignore-not-found",
                "-o",
                "jsonpath={.items[*].status.podIP}",
            ],
        );
        let v: Vec<&str> = ips.split_whitespace().collect();
        if v.len() == 2 {
            break (v[0].to_string(), v[1].to_string());
        }
        assert!(
            Instant::now() < deadline,
            "StatefulSet pods have no IPs: {ips:?}"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let m = wait_for(
        server,
        "nginx-sts-1.nginx-sts.default.svc.cluster.local.",
        RecordType::A,
        |m| !m.answers.is_empty(),
    );
    assert_eq!(addresses(&m), [ip1.as_str()]);
    let mut both = vec![ip0.clone(), ip1.clone()];
    both.sort();
    let m = wait_for(
        server,
        "nginx-sts.default.svc.cluster.local.",
        RecordType::A,
        |m| m.answers.len() == 2,
    );
    assert_eq!(addresses(&m), both);
    let m = ask_tcp(
        server,
        "_web._tcp.nginx-sts.default.svc.cluster.local.",
        RecordType::SRV,
    );
    let mut targets: Vec<String> = m
        .answers
        .iter()
        .filter_map(|r| match &r.data {
            RData::SRV(s) => Some(s.target.to_ascii()),
            _ => None,
        })
        .collect();
    targets.sort();
    assert_eq!(
        targets,
        [
            "nginx-sts-0.nginx-sts.default.svc.cluster.local.",
            "nginx-sts-1.nginx-sts.default.svc.cluster.local."
        ]
    );
    assert_eq!(
        m.additionals
            .iter()
            .filter(|r| r.record_type() == RecordType::A)
            .count(),
        2
    );
    let octets: Vec<&str> = ip1.split('.').rev().collect();
    let m = ask_udp(
        server,
        &format!("{}.in-addr.arpa.", octets.join(".")),
        RecordType::PTR,
    );
    let RData::PTR(ptr) = &m.answers[0].data else {
        panic!("{m:?}")
    };
    assert_eq!(
        ptr.0.to_ascii(),
        "nginx-sts-1.nginx-sts.default.svc.cluster.local."
    );

    // ExternalName: a CNAME; one to a cluster name is followed.
    let m = ask_udp(server, "ext.default.svc.cluster.local.", RecordType::CNAME);
    let RData::CNAME(cname) = &m.answers[0].data else {
        panic!("{m:?}")
    };
    assert_eq!(cname.0.to_ascii(), "www.example.com.");
    let m = ask_udp(server, "alias.default.svc.cluster.local.", RecordType::A);
    assert_eq!(m.answers[0].record_type(), RecordType::CNAME);
    assert_eq!(addresses(&m), [web_ip.as_str()]);

    // `pods insecure` names.
    let dashed = ip0.replace('.', "-");
    let m = ask_udp(
        server,
        &format!("{dashed}.default.pod.cluster.local."),
        RecordType::A,
    );
    assert_eq!(addresses(&m), [ip0.as_str()]);

    // NXDOMAIN vs NODATA, both with the zone's SOA.
    let m = ask_udp(server, "missing.default.svc.cluster.local.", RecordType::A);
    assert_eq!(m.metadata.response_code, ResponseCode::NXDomain);
    assert_eq!(m.authorities[0].record_type(), RecordType::SOA);
    let m = ask_tcp(server, "web.default.svc.cluster.local.", RecordType::AAAA);
    assert_eq!(m.metadata.response_code, ResponseCode::NoError);
    assert!(m.answers.is_empty());
    assert_eq!(m.authorities[0].record_type(), RecordType::SOA);

    // A deleted Service disappears.
    c.kubectl(&["delete", "svc", "web"]);
    wait_for(
        server,
        "web.default.svc.cluster.local.",
        RecordType::A,
        |m| m.metadata.response_code == ResponseCode::NXDomain,
    );
}
