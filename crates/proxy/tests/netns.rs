//! The proxier's rules at work, in both modes, inside network namespaces these tests create: a
//! "node" namespace where the rules go and clients connect, a "backend" namespace with three TCP
//! servers answering with their own address, joined by a veth pair. Nothing touches the host's
//! network. Skipped (with a reason) when not root or without `ip`/`nft`/`iptables-restore`.

use std::collections::{HashMap, HashSet};
use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{ClientIPConfig, SessionAffinityConfig};
use proxy::metrics::Metrics;
use proxy::netns::NetNs;
use proxy::nftables::rules::Config;
use proxy::objects::{service, slice};
use proxy::{Exec, Mode, Proxier};

const BACKENDS: [&str; 3] = ["10.250.0.2", "10.250.0.3", "10.250.0.4"];
const NODE_IP: &str = "10.250.0.1";

fn skip_reason() -> Option<String> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return Some("not root".into());
    }
    for tool in ["ip", "nft", "iptables-restore", "iptables"] {
        let found = std::process::Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        if !found {
            return Some(format!("no {tool} binary"));
        }
    }
    None
}

/// Servers in the backend namespace; stopped (and their thread joined) on drop.
struct Backends {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<(), proxy::netns::NetnsError>>>,
}

impl Drop for Backends {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start_backends(ns: &NetNs) -> Backends {
    let stop = Arc::new(AtomicBool::new(false));
    let s = stop.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let thread = ns.spawn(move || {
        let listeners: Vec<(TcpListener, &str)> = BACKENDS
            .iter()
            .map(|ip| {
                let l = TcpListener::bind(format!("{ip}:8080")).expect("bind backend");
                l.set_nonblocking(true).expect("nonblocking");
                (l, *ip)
            })
            .collect();
        let _ = ready_tx.send(());
        while !s.load(Ordering::SeqCst) {
            let mut idle = true;
            for (l, ip) in &listeners {
                if let Ok((mut c, _)) = l.accept() {
                    idle = false;
                    let _ = c.write_all(ip.as_bytes());
                }
            }
            if idle {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    });
    ready_rx
        .recv_timeout(Duration::from_secs(10))
        .expect("backends did not start");
    Backends {
        stop,
        thread: Some(thread),
    }
}

/// Node and backend namespaces joined by a veth pair; both deleted on drop.
struct Net {
    node: NetNs,
    backend: NetNs,
}

fn network() -> Net {
    let node = NetNs::create("rkp-node").expect("node netns");
    let backend = NetNs::create("rkp-be").expect("backend netns");
    node.ip(&[
        "link",
        "add",
        "vn",
        "type",
        "veth",
        "peer",
        "name",
        "vb",
        "netns",
        backend.name(),
    ])
    .expect("veth");
    node.ip(&["addr", "add", &format!("{NODE_IP}/24"), "dev", "vn"])
        .expect("addr");
    node.ip(&["link", "set", "vn", "up"]).expect("up");
    // Service addresses need a route for connect() to reach the nat hooks at all.
    node.ip(&["route", "add", "default", "dev", "vn"])
        .expect("route");
    for ip in BACKENDS {
        backend
            .ip(&["addr", "add", &format!("{ip}/24"), "dev", "vb"])
            .expect("addr");
    }
    backend.ip(&["link", "set", "vb", "up"]).expect("up");
    Net { node, backend }
}

#[derive(Debug, PartialEq)]
enum Outcome {
    Answer(String),
    Refused,
    Other(String),
}

/// Connects from the node namespace to each address in turn; what each attempt got and how long
/// the slowest took.
fn connect_all(node: &NetNs, addrs: Vec<SocketAddr>) -> (Vec<Outcome>, Duration) {
    node.spawn(move || {
        let mut slowest = Duration::ZERO;
        let out = addrs
            .into_iter()
            .map(|a| {
                let t = Instant::now();
                let r = match TcpStream::connect_timeout(&a, Duration::from_secs(3)) {
                    Ok(mut c) => {
                        let _ = c.set_read_timeout(Some(Duration::from_secs(3)));
                        let mut s = String::new();
                        match c.read_to_string(&mut s) {
                            Ok(_) => Outcome::Answer(s),
                            Err(e) => Outcome::Other(e.to_string()),
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::ConnectionRefused => Outcome::Refused,
                    Err(e) => Outcome::Other(e.to_string()),
                };
                slowest = slowest.max(t.elapsed());
                r
            })
            .collect();
        (out, slowest)
    })
    .join()
    .expect("client thread")
    .expect("enter node netns")
}

fn answers(outcomes: &[Outcome]) -> HashMap<String, usize> {
    let mut m = HashMap::new();
    for o in outcomes {
        match o {
            Outcome::Answer(a) => *m.entry(a.clone()).or_default() += 1,
            other => panic!("connection failed: {other:?}"),
        }
    }
    m
}

fn scenario(mode: Mode) {
    if let Some(why) = skip_reason() {
        eprintln!("skipping: {why}");
        return;
    }
    let net = network();
    let _backends = start_backends(&net.backend);
    let cfg = Config {
        masquerade_mark: 0x4000,
        masquerade_all: false,
        cluster_cidr: Some("10.244.0.0/16".into()),
        nodeport_ips: None,
        node_name: "node-a".into(),
        node_labels: HashMap::new(),
    };
    let mut p = Proxier::new(
        mode,
        cfg,
        Exec::in_netns(net.node.name()),
        vec![],
        Arc::new(Metrics::new("test")),
    );
    let all: Vec<String> = BACKENDS.iter().map(|s| s.to_string()).collect();

    let mut web = service("default", "web", "10.96.0.50", 80);
    {
        let spec = web.spec.as_mut().unwrap();
        spec.type_ = Some("NodePort".into());
        spec.ports.as_mut().unwrap()[0].node_port = Some(30080);
    }
    let empty = service("default", "empty", "10.96.0.51", 80);
    let mut sticky = service("default", "sticky", "10.96.0.52", 80);
    {
        let spec = sticky.spec.as_mut().unwrap();
        spec.session_affinity = Some("ClientIP".into());
        spec.session_affinity_config = Some(SessionAffinityConfig {
            client_ip: Some(ClientIPConfig {
                timeout_seconds: Some(600),
            }),
        });
    }
    p.on_service(None, Some(&web));
    p.on_service(None, Some(&empty));
    p.on_service(None, Some(&sticky));
    p.on_endpoint_slice(&slice("default", "web", 8080, &all, "node-b"), false);
    p.on_endpoint_slice(&slice("default", "sticky", 8080, &all, "node-b"), false);
    let st = p.sync().expect("first sync");
    assert!(st.full);

    // Spread: each endpoint answers within 100 connections.
    let vip: SocketAddr = "10.96.0.50:80".parse().unwrap();
    let (out, _) = connect_all(&net.node, vec![vip; 100]);
    let seen = answers(&out);
    assert_eq!(
        seen.keys().cloned().collect::<HashSet<_>>(),
        all.iter().cloned().collect(),
        "{mode:?}: {seen:?}"
    );

    // No endpoints: refused at once, not a timeout.
    let (out, slowest) = connect_all(&net.node, vec!["10.96.0.51:80".parse().unwrap()]);
    assert_eq!(out, vec![Outcome::Refused], "{mode:?}");
    assert!(
        slowest < Duration::from_secs(1),
        "{mode:?}: refusal took {slowest:?}"
    );

    // ClientIP affinity: one client, one endpoint.
    let (out, _) = connect_all(&net.node, vec!["10.96.0.52:80".parse().unwrap(); 30]);
    let seen = answers(&out);
    assert_eq!(seen.len(), 1, "{mode:?}: affinity did not hold: {seen:?}");

    // NodePort on the node's own address.
    let (out, _) = connect_all(
        &net.node,
        vec![format!("{NODE_IP}:30080").parse().unwrap(); 60],
    );
    let seen = answers(&out);
    assert!(!seen.is_empty(), "{mode:?}");
    assert!(seen.keys().all(|k| all.contains(k)));

    // One endpoint goes: the next (partial) sync stops sending to it.
    let two: Vec<String> = all[..2].to_vec();
    p.on_endpoint_slice(&slice("default", "web", 8080, &two, "node-b"), false);
    let st = p.sync().expect("partial sync");
    assert!(!st.full, "{mode:?}: expected a partial sync");
    let (out, _) = connect_all(&net.node, vec![vip; 60]);
    let seen = answers(&out);
    assert_eq!(
        seen.keys().cloned().collect::<HashSet<_>>(),
        two.iter().cloned().collect(),
        "{mode:?}: {seen:?}"
    );

    // The last endpoints go: now refused.
    p.on_endpoint_slice(&slice("default", "web", 8080, &[], "node-b"), false);
    p.sync().expect("sync");
    let (out, slowest) = connect_all(
        &net.node,
        vec![vip, format!("{NODE_IP}:30080").parse().unwrap()],
    );
    assert_eq!(out, vec![Outcome::Refused, Outcome::Refused], "{mode:?}");
    assert!(slowest < Duration::from_secs(1));

    // Endpoints come back; a full sync (as after a restart) leaves the same behaviour.
    p.on_endpoint_slice(&slice("default", "web", 8080, &all, "node-b"), false);
    p.force_full_sync();
    p.sync().expect("full sync");
    let (out, _) = connect_all(&net.node, vec![vip; 100]);
    assert_eq!(answers(&out).len(), 3, "{mode:?}");

    udp_conntrack_cleanup(&net, &mut p, mode);

    p.cleanup().expect("cleanup");
    let (out, _) = connect_all(&net.node, vec!["10.96.0.51:80".parse().unwrap()]);
    assert_ne!(
        out,
        vec![Outcome::Refused],
        "{mode:?}: rules left after cleanup"
    );
}

fn has(tool: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// UDP conntrack entries of the node namespace towards `vip`, as `conntrack -L` prints them.
fn udp_entries(ns: &NetNs, vip: &str) -> String {
    let out = std::process::Command::new("ip")
        .args([
            "netns",
            "exec",
            ns.name(),
            "conntrack",
            "-L",
            "-p",
            "udp",
            "--orig-dst",
            vip,
        ])
        .output()
        .expect("conntrack -L");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A UDP flow DNATed to an endpoint outlives the endpoint unless the proxier deletes its
/// conntrack entry (UDP has no connection to break).
fn udp_conntrack_cleanup(net: &Net, p: &mut Proxier, mode: Mode) {
    if !has("conntrack") {
        eprintln!("skipping the UDP conntrack check: no conntrack binary");
        return;
    }
    let mut dns = service("default", "dns", "10.96.0.60", 53);
    dns.spec.as_mut().unwrap().ports.as_mut().unwrap()[0].protocol = Some("UDP".into());
    let slice_of = |ips: &[String]| {
        let mut s = slice("default", "dns", 5353, ips, "node-b");
        s.ports.as_mut().unwrap()[0].protocol = Some("UDP".into());
        s
    };
    let all: Vec<String> = BACKENDS.iter().map(|s| s.to_string()).collect();
    p.on_service(None, Some(&dns));
    p.on_endpoint_slice(&slice_of(&all), false);
    p.sync().expect("sync");
    // One datagram from a fixed port: one entry, DNATed to one endpoint (nothing listens there;
    // the entry exists all the same).
    net.node
        .spawn(|| {
            let s = std::net::UdpSocket::bind("10.250.0.1:40053").expect("bind");
            s.send_to(b"q", "10.96.0.60:53").expect("send");
        })
        .join()
        .expect("thread")
        .expect("netns");
    let deadline = Instant::now() + Duration::from_secs(5);
    let entry = loop {
        let e = udp_entries(&net.node, "10.96.0.60");
        if e.contains("dport=53") || Instant::now() > deadline {
            break e;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let target = all
        .iter()
        .find(|ip| entry.contains(&format!("src={ip} ")))
        .unwrap_or_else(|| panic!("{mode:?}: no DNATed UDP entry: {entry:?}"))
        .clone();
    let rest: Vec<String> = all.iter().filter(|ip| **ip != target).cloned().collect();
    p.on_endpoint_slice(&slice_of(&rest), false);
    p.sync().expect("sync");
    let left = udp_entries(&net.node, "10.96.0.60");
    assert!(
        !left.contains(&format!("src={target} ")),
        "{mode:?}: stale UDP entry kept: {left:?}"
    );
}

/// Hairpin: a backend reaching its own Service may be sent to itself; unless the node
/// masquerades that connection, the backend gets a packet from its own address and drops it.
/// The client's address is inside `--cluster-cidr` here, so only the hairpin rule masquerades.
/// One endpoint: the backends share a namespace, so unmasqueraded traffic between two of them
/// through the node is dropped as well (a source address of their own).
fn hairpin(mode: Mode) {
    if skip_reason().is_some() {
        return;
    }
    let net = network();
    let _backends = start_backends(&net.backend);
    net.node
        .spawn(|| std::fs::write("/proc/sys/net/ipv4/ip_forward", "1"))
        .join()
        .expect("thread")
        .expect("netns")
        .expect("ip_forward");
    net.backend
        .ip(&[
            "route",
            "add",
            "10.96.0.0/16",
            "via",
            NODE_IP,
            "src",
            BACKENDS[0],
        ])
        .expect("route");
    let cfg = Config {
        masquerade_mark: 0x4000,
        masquerade_all: false,
        cluster_cidr: Some("10.250.0.0/24".into()),
        nodeport_ips: None,
        node_name: "node-a".into(),
        node_labels: HashMap::new(),
    };
    let mut p = Proxier::new(
        mode,
        cfg,
        Exec::in_netns(net.node.name()),
        vec![],
        Arc::new(Metrics::new("test")),
    );
    let me = vec![BACKENDS[0].to_string()];
    p.on_service(None, Some(&service("default", "web", "10.96.0.50", 80)));
    p.on_endpoint_slice(&slice("default", "web", 8080, &me, "node-b"), false);
    p.sync().expect("sync");
    let (out, _) = connect_all(&net.backend, vec!["10.96.0.50:80".parse().unwrap(); 5]);
    let seen = answers(&out);
    assert_eq!(seen.get(BACKENDS[0]), Some(&5), "{mode:?}: {seen:?}");
    p.cleanup().expect("cleanup");
}

#[test]
fn hairpin_nftables() {
    hairpin(Mode::Nftables);
}

#[test]
fn hairpin_iptables() {
    hairpin(Mode::Iptables);
}

#[test]
fn nftables_mode() {
    scenario(Mode::Nftables);
}

#[test]
fn iptables_mode() {
    scenario(Mode::Iptables);
}
