//! kube-proxy end to end on a real node (issue 19's "Done when"), in nftables and in iptables
//! mode: one node per mode runs every scenario in sequence (a node start costs 10-20 s).
//!
//! - a ClusterIP Service spreads over its 3 endpoints (each answers within 100 requests from a pod);
//! - a NodePort answers at a node address, from the node's network namespace and from a pod;
//! - sessionAffinity ClientIP: 20 requests from one client reach one pod;
//! - externalTrafficPolicy Local keeps the source address of a client outside the node (a network
//!   namespace of the test's, linked to the node's by a veth pair); Cluster masquerades it;
//! - health-check node ports of LoadBalancers with policy Local answer 200 with the local
//!   endpoints' count, 503 without any;
//! - scaling the Deployment 3 -> 1 -> 3 changes where requests go within a few seconds of the
//!   EndpointSlice change (the proxy's min sync period is 1 s);
//! - a Service whose only endpoint is terminating but serving keeps using it;
//! - a UDP flow moves to another pod when its endpoint goes (stale conntrack entries cleared).
//!
//! A Service without endpoints refusing at once is `service_proxy.rs`'s.
//!
//! The web pods are nginx answering `<pod name> <client address>`. Requests from the node's or the
//! client's namespace are made by this process, from a thread that entered the namespace (no tool
//! of the host needed); requests from a pod run busybox `wget` in a client pod (`kubectl exec`).

#[path = "support/real_node.rs"]
mod real_node;
mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use real_node::{wait_for, RealNode};
use serde_json::{json, Value};

/// The node side and the client side of the veth pair to the outside client (a private range no
/// node uses: pods are in 10.244.0.0/16, Services in 10.96.0.0/12).
const NODE_VETH_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 254, 1);
const CLIENT_IP: Ipv4Addr = Ipv4Addr::new(192, 168, 254, 2);

/// An external IP and a load balancer's ingress IP (TEST-NET-2), routed by the outside client
/// to the node.
const EXTERNAL_IP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 10);
const LB_IP: Ipv4Addr = Ipv4Addr::new(198, 51, 100, 11);

/// How long after an EndpointSlice change the rules must follow (min sync period 1 s, plus the
/// time this test takes to see the slice and to make requests).
const RESYNC_DEADLINE: Duration = Duration::from_secs(5);

/// nginx answering every request with `<pod name> <client address>`.
const NGINX_SCRIPT: &str = r#"printf 'server { listen 80; location / { return 200 "$hostname $remote_addr"; } }\n' > /etc/nginx/sites-enabled/default
exec nginx -g 'daemon off;'"#;

/// A UDP server answering every datagram with its pod's name.
const UDP_SERVER: &str = "import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(('', 5353))
name = socket.gethostname().encode()
while True:
    _, peer = s.recvfrom(512)
    s.sendto(name, peer)
";

fn objects() -> Vec<Value> {
    let service = |name: &str, spec: Value| {
        let mut s = json!({"selector": {"app": "web"}, "ports": [{"port": 80}]});
        for (k, v) in spec.as_object().unwrap() {
            s[k] = v.clone();
        }
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": s})
    };
    vec![
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 2,
                        "containers": [{
                            "name": "nginx", "image": "nginx",
                            "command": ["sh", "-c", NGINX_SCRIPT],
                            "readinessProbe": {
                                "httpGet": {"path": "/", "port": 80},
                                "periodSeconds": 1,
                            },
                        }],
                    },
                },
            },
        }),
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "udp"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "udp"}},
                "template": {
                    "metadata": {"labels": {"app": "udp"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 2,
                        "containers": [{
                            "name": "echo", "image": "python",
                            "command": ["python3", "-c", UDP_SERVER],
                        }],
                    },
                },
            },
        }),
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "udp"},
            "spec": {"selector": {"app": "udp"}, "ports": [{"port": 5353, "protocol": "UDP"}]},
        }),
        // One pod that keeps serving for a while after its deletion (preStop).
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "drain"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "drain"}},
                "template": {
                    "metadata": {"labels": {"app": "drain"}},
                    "spec": {
                        "terminationGracePeriodSeconds": 30,
                        "containers": [{
                            "name": "nginx", "image": "nginx",
                            "command": ["sh", "-c", NGINX_SCRIPT],
                            "readinessProbe": {
                                "httpGet": {"path": "/", "port": 80},
                                "periodSeconds": 1,
                            },
                            "lifecycle": {"preStop": {"exec": {"command": ["sleep", "20"]}}},
                        }],
                    },
                },
            },
        }),
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "drain"},
            "spec": {"selector": {"app": "drain"}, "ports": [{"port": 80}]},
        }),
        service("web", json!({"type": "NodePort"})),
        service(
            "web-local",
            json!({"type": "NodePort", "externalTrafficPolicy": "Local"}),
        ),
        service("web-sticky", json!({"sessionAffinity": "ClientIP"})),
        service(
            "web-ext",
            json!({"externalIPs": [EXTERNAL_IP.to_string()], "externalTrafficPolicy": "Local"}),
        ),
        // Its ingress IP is set by the test, as a load balancer controller would.
        service("web-lb", json!({"type": "LoadBalancer"})),
        service(
            "nobody",
            json!({"type": "NodePort", "selector": {"app": "nobody"}}),
        ),
        // Endpoints from the test's EndpointSlices (`remote_slice`), on another node.
        service(
            "remote-local",
            json!({"type": "NodePort", "externalTrafficPolicy": "Local", "selector": null}),
        ),
        service(
            "remote-itp",
            json!({"internalTrafficPolicy": "Local", "selector": null}),
        ),
        json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "client"},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}],
            },
        }),
    ]
}

/// An EndpointSlice of `service` whose one endpoint, `ip`, is on another node.
fn remote_slice(service: &str, ip: &str) -> Value {
    json!({
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": format!("{service}-1"), "labels": {
            "kubernetes.io/service-name": service,
            "endpointslice.kubernetes.io/managed-by": "service-networking-test",
        }},
        "addressType": "IPv4",
        "endpoints": [{"addresses": [ip], "conditions": {"ready": true}, "nodeName": "elsewhere"}],
        "ports": [{"name": "", "port": 80, "protocol": "TCP"}],
    })
}

/// A new TCP connection from `netns` to `addr` (1 s): connected, or why not.
fn connect(netns: &str, addr: SocketAddr) -> Result<(), std::io::ErrorKind> {
    in_netns(netns, move || {
        TcpStream::connect_timeout(&addr, Duration::from_secs(1))
            .map(drop)
            .map_err(|e| e.kind())
    })
}

/// Runs `f` on a thread that entered network namespace `/run/netns/<netns>`.
fn in_netns<T: Send + 'static>(netns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/run/netns/{netns}");
    std::thread::spawn(move || {
        extern "C" {
            fn setns(fd: i32, nstype: i32) -> i32;
        }
        const CLONE_NEWNET: i32 = 0x4000_0000;
        let ns = std::fs::File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let rc = unsafe { setns(ns.as_raw_fd(), CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("netns thread")
}

/// `GET /` on a new connection from `netns`: the body (`<pod> <client address>`).
fn get(netns: &str, addr: SocketAddr) -> Result<String, String> {
    in_netns(netns, move || {
        let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(1))
            .map_err(|e| format!("{addr}: {e}"))?;
        conn.set_read_timeout(Some(Duration::from_secs(2))).ok();
        conn.write_all(b"GET / HTTP/1.0\r\nHost: web\r\n\r\n")
            .map_err(|e| format!("{addr}: {e}"))?;
        let mut raw = Vec::new();
        conn.read_to_end(&mut raw)
            .map_err(|e| format!("{addr}: {e}"))?;
        let raw = String::from_utf8_lossy(&raw);
        let (head, body) = raw
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("{addr}: no HTTP response: {raw:?}"))?;
        if !head.starts_with("HTTP/1.1 200") {
            return Err(format!("{addr}: {head}"));
        }
        Ok(body.trim().to_string())
    })
}

/// `GET /` of a health-check node port from `netns`: the status code and the JSON body.
fn health(netns: &str, addr: SocketAddr) -> Result<(u16, Value), String> {
    in_netns(netns, move || {
        let mut conn = TcpStream::connect_timeout(&addr, Duration::from_secs(1))
            .map_err(|e| format!("{addr}: {e}"))?;
        conn.set_read_timeout(Some(Duration::from_secs(2))).ok();
        conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: lb\r\nConnection: close\r\n\r\n")
            .map_err(|e| format!("{addr}: {e}"))?;
        let mut raw = String::new();
        conn.read_to_string(&mut raw)
            .map_err(|e| format!("{addr}: {e}"))?;
        let (head, body) = raw
            .split_once("\r\n\r\n")
            .ok_or_else(|| format!("{addr}: no HTTP response: {raw:?}"))?;
        let code = head
            .split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .ok_or_else(|| format!("{addr}: {head}"))?;
        let body = serde_json::from_str(body).map_err(|e| format!("{addr}: {e}: {body:?}"))?;
        Ok((code, body))
    })
}

/// Two node ports no Service uses (the apiserver does not allocate healthCheckNodePorts: the
/// test sets them).
fn free_node_ports(node: &RealNode) -> (u16, u16) {
    let out = node.kubectl(&["get", "services", "-A", "-o", "json"]);
    let used: BTreeSet<u64> = serde_json::from_str::<Value>(&out).expect("services")["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["spec"]["ports"].as_array().into_iter().flatten())
        .filter_map(|p| p["nodePort"].as_u64())
        .collect();
    let mut free = (30000..32768u16)
        .rev()
        .filter(|p| !used.contains(&u64::from(*p)));
    (free.next().unwrap(), free.next().unwrap())
}

/// A UDP socket of `netns` connected to `addr` (the flow keeps its source port).
fn udp_flow(netns: &str, addr: SocketAddr) -> UdpSocket {
    in_netns(netns, move || {
        let sock = UdpSocket::bind("0.0.0.0:0").expect("udp bind");
        sock.connect(addr).expect("udp connect");
        sock.set_read_timeout(Some(Duration::from_millis(300)))
            .expect("udp timeout");
        sock
    })
}

/// One datagram there and back on `sock`: the name of the pod that answered.
fn udp_ask(sock: &UdpSocket) -> Result<String, String> {
    sock.send(b"?").map_err(|e| format!("send: {e}"))?;
    let mut buf = [0u8; 512];
    let n = sock.recv(&mut buf).map_err(|e| format!("recv: {e}"))?;
    Ok(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// `(pod, client address)` of an answer.
fn answer(body: &str) -> (String, String) {
    let (pod, from) = body
        .split_once(' ')
        .unwrap_or_else(|| panic!("not an answer of a web pod: {body:?}"));
    (pod.to_string(), from.to_string())
}

/// `sh -c script` in the client pod: its stdout.
fn in_client(node: &RealNode, script: &str) -> String {
    node.kubectl(&["exec", "client", "--", "sh", "-c", script])
}

/// `n` requests to `url` from the client pod: how many times each pod answered, and the failures.
fn requests_from_client(node: &RealNode, url: &str, n: usize) -> (BTreeMap<String, usize>, usize) {
    let out = in_client(
        node,
        &format!(
            "for i in $(seq 1 {n}); do timeout 2 wget -qO- {url} || printf FAILED; echo; done"
        ),
    );
    let mut seen = BTreeMap::new();
    let mut failed = 0;
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        if line.contains("FAILED") {
            failed += 1;
        } else {
            *seen.entry(answer(line).0).or_insert(0) += 1;
        }
    }
    (seen, failed)
}

/// The ready endpoints of `service`'s EndpointSlices: pod name -> address.
fn ready_endpoints(node: &RealNode, service: &str) -> BTreeMap<String, String> {
    endpoints_where(node, service, |c| c["ready"] == true)
}

/// The endpoints of `service`'s EndpointSlices whose conditions pass `f`: pod name -> address.
fn endpoints_where(
    node: &RealNode,
    service: &str,
    f: impl Fn(&Value) -> bool,
) -> BTreeMap<String, String> {
    let out = node.kubectl(&[
        "get",
        "endpointslices",
        "-l",
        &format!("kubernetes.io/service-name={service}"),
        "-o",
        "json",
    ]);
    let slices: Value = serde_json::from_str(&out).expect("endpointslices json");
    slices["items"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|s| s["endpoints"].as_array().into_iter().flatten())
        .filter(|e| f(&e["conditions"]))
        .map(|e| {
            (
                e["targetRef"]["name"].as_str().unwrap_or("").to_string(),
                e["addresses"][0].as_str().unwrap_or("").to_string(),
            )
        })
        .collect()
}

fn wait_ready_endpoints(node: &RealNode, service: &str, n: usize) -> BTreeMap<String, String> {
    wait_for(
        &format!("{n} ready endpoints of {service}"),
        Duration::from_secs(120),
        || {
            let eps = ready_endpoints(node, service);
            (eps.len() == n).then_some(eps)
        },
    )
}

fn service_field(node: &RealNode, service: &str, path: &str) -> String {
    node.kubectl(&[
        "get",
        "service",
        service,
        "-o",
        &format!("jsonpath={{{path}}}"),
    ])
}

fn service_addr(node: &RealNode, service: &str) -> SocketAddr {
    let ip = service_field(node, service, ".spec.clusterIP");
    format!("{ip}:80").parse().expect("cluster IP")
}

fn node_port(node: &RealNode, service: &str) -> u16 {
    service_field(node, service, ".spec.ports[0].nodePort")
        .parse()
        .expect("nodePort")
}

fn ip(args: &[&str]) {
    let out = std::process::Command::new("ip")
        .args(args)
        .output()
        .expect("ip");
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The node's address on its pod bridge (the pods' gateway): a node address NodePorts answer on.
fn bridge_address(node: &RealNode) -> Ipv4Addr {
    let out = std::process::Command::new("ip")
        .args(["-n", &node.netns, "-4", "-o", "addr", "show"])
        .output()
        .expect("ip addr");
    let out = String::from_utf8_lossy(&out.stdout);
    out.lines()
        .filter(|l| !l.contains(" lo ") && l.contains("inet "))
        .find_map(|l| {
            let addr = l.split("inet ").nth(1)?.split('/').next()?;
            addr.parse::<Ipv4Addr>()
                .ok()
                .filter(|a| a.octets()[0] == 10)
        })
        .unwrap_or_else(|| panic!("no pod bridge address in {}:\n{out}", node.netns))
}

/// A network namespace outside the node, linked to the node's by a veth pair: a client that is
/// not on the node (its address is neither local nor in the cluster CIDR), and the node's default
/// gateway. Deleted on drop.
struct OutsideClient {
    netns: String,
}

impl OutsideClient {
    fn new(node: &RealNode, mode: &str) -> OutsideClient {
        let netns = format!("rkc-{}-{mode}", std::process::id());
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &netns])
            .output();
        ip(&["netns", "add", &netns]);
        let client = OutsideClient { netns };
        let ns = client.netns.as_str();
        ip(&["-n", ns, "link", "set", "lo", "up"]);
        // Created in the client's namespace, its peer moved into the node's: no name of the
        // host's is used.
        ip(&[
            "-n",
            ns,
            "link",
            "add",
            "eth0",
            "type",
            "veth",
            "peer",
            "name",
            "rkout0",
            "netns",
            &node.netns,
        ]);
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{CLIENT_IP}/30"),
            "dev",
            "eth0",
        ]);
        ip(&["-n", ns, "link", "set", "eth0", "up"]);
        ip(&[
            "-n",
            ns,
            "route",
            "add",
            "198.51.100.0/24",
            "via",
            &NODE_VETH_IP.to_string(),
        ]);
        ip(&[
            "-n",
            &node.netns,
            "addr",
            "add",
            &format!("{NODE_VETH_IP}/30"),
            "dev",
            "rkout0",
        ]);
        ip(&["-n", &node.netns, "link", "set", "rkout0", "up"]);
        // The node's default route goes through its LAN, here the outside client: a node's own
        // connections to a ClusterIP need a route before the proxy's DNAT picks the pod.
        ip(&[
            "-n",
            &node.netns,
            "route",
            "replace",
            "default",
            "via",
            &CLIENT_IP.to_string(),
        ]);
        client
    }
}

impl Drop for OutsideClient {
    fn drop(&mut self) {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &self.netns])
            .output();
    }
}

/// What the node's namespace holds, for failure messages: addresses, routes, the proxy's rules.
fn dump(node: &RealNode) -> String {
    let mut out = String::new();
    for args in [
        &["ip", "-n", &node.netns, "-4", "-o", "addr"][..],
        &["ip", "-n", &node.netns, "route"],
        &[
            "ip",
            "netns",
            "exec",
            &node.netns,
            "nft",
            "list",
            "table",
            "ip",
            "kube-proxy",
        ],
        &["ip", "netns", "exec", &node.netns, "iptables-save"],
    ] {
        if let Ok(o) = std::process::Command::new(args[0])
            .args(&args[1..])
            .output()
        {
            out.push_str(&format!(
                "$ {}\n{}{}",
                args.join(" "),
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
    }
    out
}

/// Retries `f` until it succeeds or `timeout` passed; then fails with its last error and [`dump`].
fn retry<T>(
    node: &RealNode,
    what: &str,
    timeout: Duration,
    mut f: impl FnMut() -> Result<T, String>,
) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let last = match f() {
            Ok(v) => return v,
            Err(e) => e,
        };
        if Instant::now() >= deadline {
            panic!(
                "timed out after {timeout:?} waiting for {what}; last: {last}\n{}",
                dump(node)
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `n` requests from `netns` to `addr`: the answers (failures as `Err`).
fn requests(netns: &str, addr: SocketAddr, n: usize) -> Vec<Result<(String, String), String>> {
    (0..n)
        .map(|_| get(netns, addr).map(|b| answer(&b)))
        .collect()
}

fn service_networking(mode: &str) {
    let started = Instant::now();
    let mut node = RealNode::start_with(&["nginx", "busybox", "python"], &["--proxy-mode", mode]);
    for o in objects() {
        node.apply(&o.to_string());
    }
    let pods = wait_ready_endpoints(&node, "web", 3);
    for svc in ["web-local", "web-sticky"] {
        wait_ready_endpoints(&node, svc, 3);
    }
    node.wait_pod("client", "running", Duration::from_secs(120), |p| {
        p["status"]["phase"] == "Running"
    });
    let outside = OutsideClient::new(&node, mode);
    let web = service_addr(&node, "web");
    let netns = node.netns.clone();
    // The first sync after the endpoints appeared.
    retry(
        &node,
        &format!("{mode}: {web} answers"),
        RESYNC_DEADLINE,
        || get(&netns, web),
    );
    eprintln!("{mode}: node and pods ready after {:?}", started.elapsed());

    // 1. The ClusterIP spreads over the 3 endpoints: each answers within 100 requests.
    let (seen, failed) = requests_from_client(&node, &format!("http://{web}/"), 100);
    let names: BTreeSet<&String> = seen.keys().collect();
    assert_eq!(
        names,
        pods.keys().collect(),
        "{mode}: 100 requests to {web} from a pod: {seen:?} ({failed} failed)"
    );
    assert_eq!(failed, 0, "{mode}: requests to {web} failed: {seen:?}");

    eprintln!("{mode}: spread checked at {:?}", started.elapsed());

    // 2. The NodePort answers at a node address, from the node's namespace and from a pod.
    let bridge = bridge_address(&node);
    let np = SocketAddr::from((bridge, node_port(&node, "web")));
    let body = retry(
        &node,
        &format!("{mode}: NodePort {np} from the node"),
        RESYNC_DEADLINE,
        || get(&netns, np),
    );
    assert!(
        pods.contains_key(&answer(&body).0),
        "{mode}: {np} from the node: {body}"
    );
    // The node's other address too.
    let np_veth = SocketAddr::from((NODE_VETH_IP, np.port()));
    let body = get(&netns, np_veth).unwrap_or_else(|e| panic!("{mode}: {e}\n{}", dump(&node)));
    assert!(
        pods.contains_key(&answer(&body).0),
        "{mode}: {np_veth} from the node: {body}"
    );
    let (seen, failed) = requests_from_client(&node, &format!("http://{np}/"), 5);
    assert!(
        failed == 0 && seen.keys().all(|p| pods.contains_key(p)),
        "{mode}: NodePort {np} from a pod: {seen:?}, {failed} failed"
    );

    eprintln!("{mode}: NodePort checked at {:?}", started.elapsed());

    // Hairpin: a web pod reaches itself through the ClusterIP (masqueraded, or it would answer
    // its own address directly and the client would drop the reply). Up to 60 requests until it
    // is its own endpoint: (2/3)^60 that it never is.
    let me = pods.keys().next().unwrap();
    let out = node.kubectl(&[
        "exec",
        me,
        "--",
        "sh",
        "-c",
        &format!(
            "for i in $(seq 1 60); do r=$(timeout 2 wget -qO- http://{web}/) || r=FAILED; echo \"$r\"; case \"$r\" in {me}*) exit 0;; esac; done"
        ),
    ]);
    let last = out.lines().last().unwrap_or("");
    assert!(
        !out.contains("FAILED") && last.starts_with(me.as_str()),
        "{mode}: {me} through {web}:\n{out}"
    );

    eprintln!("{mode}: hairpin checked at {:?}", started.elapsed());

    // 3. sessionAffinity ClientIP: 20 requests from one client reach the same pod.
    let sticky = service_addr(&node, "web-sticky");
    let (seen, failed) = requests_from_client(&node, &format!("http://{sticky}/"), 20);
    assert!(
        failed == 0 && seen.len() == 1,
        "{mode}: 20 requests to {sticky} (sessionAffinity ClientIP) from one pod: {seen:?}, {failed} failed"
    );
    // ... and from another client (the node), again one pod each time.
    let answers = requests(&netns, sticky, 20);
    let from_node: BTreeSet<String> = answers
        .iter()
        .map(|a| a.clone().map(|a| a.0).unwrap_or_else(|e| e))
        .collect();
    assert_eq!(
        from_node.len(),
        1,
        "{mode}: 20 requests to {sticky} from the node: {answers:?}"
    );

    eprintln!("{mode}: sessionAffinity checked at {:?}", started.elapsed());

    // 5. externalTrafficPolicy: a client outside the node reaches NodePorts at the node's veth
    // address; Local keeps its address, Cluster masquerades it.
    let local_np = SocketAddr::from((NODE_VETH_IP, node_port(&node, "web-local")));
    let cluster_np = SocketAddr::from((NODE_VETH_IP, node_port(&node, "web")));
    let body = retry(
        &node,
        &format!("{mode}: {local_np} from outside the node"),
        RESYNC_DEADLINE,
        || get(&outside.netns, local_np),
    );
    for r in requests(&outside.netns, local_np, 5)
        .into_iter()
        .chain([Ok(answer(&body))])
    {
        let (pod, from) = r.unwrap_or_else(|e| panic!("{mode}: {local_np} from outside: {e}"));
        assert_eq!(
            from,
            CLIENT_IP.to_string(),
            "{mode}: externalTrafficPolicy Local: {pod} saw the client as {from}"
        );
    }
    for r in requests(&outside.netns, cluster_np, 5) {
        let (pod, from) = r.unwrap_or_else(|e| panic!("{mode}: {cluster_np} from outside: {e}"));
        assert_ne!(
            from,
            CLIENT_IP.to_string(),
            "{mode}: externalTrafficPolicy Cluster: {pod} saw the client's own address"
        );
        assert_eq!(
            from,
            bridge.to_string(),
            "{mode}: externalTrafficPolicy Cluster: {pod} saw the client as {from}, not as the node"
        );
    }

    // An external IP (policy Local: the source is kept) and a load balancer IP (Cluster).
    node.kubectl(&[
        "patch",
        "service",
        "web-lb",
        "--subresource=status",
        "--type=merge",
        "-p",
        &json!({"status": {"loadBalancer": {"ingress": [{"ip": LB_IP.to_string()}]}}}).to_string(),
    ]);
    let ext = SocketAddr::from((EXTERNAL_IP, 80));
    let (pod, from) = answer(&retry(
        &node,
        &format!("{mode}: external IP {ext} from outside"),
        RESYNC_DEADLINE,
        || get(&outside.netns, ext),
    ));
    assert_eq!(
        from,
        CLIENT_IP.to_string(),
        "{mode}: external IP {ext} (policy Local): {pod} saw the client as {from}"
    );
    let lb = SocketAddr::from((LB_IP, 80));
    let (pod, from) = answer(&retry(
        &node,
        &format!("{mode}: load balancer IP {lb} from outside"),
        RESYNC_DEADLINE,
        || get(&outside.netns, lb),
    ));
    assert_eq!(
        from,
        bridge.to_string(),
        "{mode}: load balancer IP {lb} (policy Cluster): {pod} saw the client as {from}"
    );
    // Pods reach the external IP too (pod traffic to external addresses is not subject to the
    // Local policy).
    let (seen, failed) = requests_from_client(&node, &format!("http://{ext}/"), 5);
    assert!(
        failed == 0 && seen.keys().all(|p| pods.contains_key(p)),
        "{mode}: external IP {ext} from a pod: {seen:?}, {failed} failed"
    );

    // A NodePort without endpoints refuses at once, from outside the node too (ClusterIPs:
    // service_proxy.rs).
    let nobody = SocketAddr::from((NODE_VETH_IP, node_port(&node, "nobody")));
    assert_eq!(
        connect(&outside.netns, nobody),
        Err(std::io::ErrorKind::ConnectionRefused),
        "{mode}: NodePort {nobody} without endpoints, from outside:\n{}",
        dump(&node)
    );
    // Endpoints elsewhere only: the ClusterIP takes them (internal policy Cluster); external
    // traffic under policy Local is dropped (not refused: there are endpoints), and so is a
    // ClusterIP under internalTrafficPolicy Local.
    let (remote_pod, remote_ip) = pods.iter().next().unwrap();
    for svc in ["remote-local", "remote-itp"] {
        node.apply(&remote_slice(svc, remote_ip).to_string());
    }
    let remote_local = service_addr(&node, "remote-local");
    let body = retry(
        &node,
        &format!("{mode}: {remote_local} (endpoint on another node) from the node"),
        RESYNC_DEADLINE,
        || get(&netns, remote_local),
    );
    assert_eq!(&answer(&body).0, remote_pod, "{mode}: {remote_local}");
    let remote_np = SocketAddr::from((NODE_VETH_IP, node_port(&node, "remote-local")));
    assert_eq!(
        connect(&outside.netns, remote_np),
        Err(std::io::ErrorKind::TimedOut),
        "{mode}: NodePort {remote_np} (policy Local, no local endpoint), from outside:\n{}",
        dump(&node)
    );
    let remote_itp = service_addr(&node, "remote-itp");
    retry(
        &node,
        &format!("{mode}: {remote_itp} (internalTrafficPolicy Local, no local endpoint) dropped"),
        RESYNC_DEADLINE,
        || match connect(&netns, remote_itp) {
            Err(std::io::ErrorKind::TimedOut) => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );

    // Health-check node ports of LoadBalancers with policy Local: 200 with the node's local
    // endpoints, 503 without any (upstream's JSON).
    let (hc_web, hc_remote) = free_node_ports(&node);
    let lb_local = |name: &str, port: u16, selector: Value| {
        json!({
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": name},
            "spec": {"type": "LoadBalancer", "externalTrafficPolicy": "Local",
                     "healthCheckNodePort": port, "selector": selector, "ports": [{"port": 80}]},
        })
    };
    node.apply(&lb_local("web-lb-local", hc_web, json!({"app": "web"})).to_string());
    node.apply(&lb_local("remote-lb-local", hc_remote, Value::Null).to_string());
    node.apply(&remote_slice("remote-lb-local", remote_ip).to_string());
    let hc = SocketAddr::from((NODE_VETH_IP, hc_web));
    let (code, body) = retry(
        &node,
        &format!("{mode}: health check node port {hc} with 3 local endpoints"),
        RESYNC_DEADLINE,
        || match health(&outside.netns, hc)? {
            (200, b) if b["localEndpoints"] == 3 => Ok((200, b)),
            other => Err(format!("{other:?}")),
        },
    );
    assert_eq!(
        body,
        json!({"service": {"namespace": "default", "name": "web-lb-local"},
               "localEndpoints": 3, "serviceProxyHealthy": true}),
        "{mode}: {hc}: {code}"
    );
    let hc_none = SocketAddr::from((NODE_VETH_IP, hc_remote));
    let (code, body) = retry(
        &node,
        &format!("{mode}: health check node port {hc_none} without local endpoints"),
        RESYNC_DEADLINE,
        || health(&outside.netns, hc_none),
    );
    assert!(
        code == 503 && body["localEndpoints"] == 0,
        "{mode}: {hc_none}: {code} {body}"
    );

    eprintln!(
        "{mode}: externalTrafficPolicy checked at {:?}",
        started.elapsed()
    );

    // 6. Scaling: 3 -> 1, then 1 -> 3; requests follow the EndpointSlice within the deadline.
    node.kubectl(&["scale", "deployment", "web", "--replicas=1"]);
    let left = wait_ready_endpoints(&node, "web", 1);
    eprintln!("{mode}: scaled to 1 at {:?}", started.elapsed());
    let changed = Instant::now();
    let remaining = left.keys().next().unwrap().clone();
    retry(
        &node,
        &format!("{mode}: {web} answered only by {remaining} after scaling to 1"),
        RESYNC_DEADLINE,
        || {
            // Stops at the first answer from elsewhere (a removed pod may leave a connect to
            // time out).
            for _ in 0..10 {
                let (pod, _) = answer(&get(&netns, web)?);
                if pod != remaining {
                    return Err(format!("{pod} answered"));
                }
            }
            Ok(())
        },
    );
    eprintln!(
        "{mode}: rules followed the scale-down {:?} after the slice changed",
        changed.elapsed()
    );
    let answers = requests(&netns, web, 20);
    assert!(
        answers
            .iter()
            .all(|r| matches!(r, Ok((p, _)) if *p == remaining)),
        "{mode}: after scaling to 1 ({remaining}): {answers:?}"
    );
    // The health check counts the one local endpoint left.
    retry(
        &node,
        &format!("{mode}: health check node port {hc} with 1 local endpoint"),
        RESYNC_DEADLINE,
        || match health(&outside.netns, hc)? {
            (200, b) if b["localEndpoints"] == 1 => Ok(()),
            other => Err(format!("{other:?}")),
        },
    );
    // The sticky Service too: the node's affinity to a pod that is gone does not hold it.
    retry(
        &node,
        &format!("{mode}: {sticky} answered only by {remaining} after scaling to 1"),
        RESYNC_DEADLINE,
        || {
            for _ in 0..5 {
                let (pod, _) = answer(&get(&netns, sticky)?);
                if pod != remaining {
                    return Err(format!("{pod} answered"));
                }
            }
            Ok(())
        },
    );

    node.kubectl(&["scale", "deployment", "web", "--replicas=3"]);
    let all = wait_ready_endpoints(&node, "web", 3);
    eprintln!("{mode}: scaled to 3 at {:?}", started.elapsed());
    let changed = Instant::now();
    let mut seen = BTreeSet::new();
    retry(
        &node,
        &format!("{mode}: {web} answered by all of {all:?} after scaling to 3"),
        RESYNC_DEADLINE,
        || {
            for (pod, _) in requests(&netns, web, 10).into_iter().flatten() {
                seen.insert(pod);
            }
            if all.keys().all(|p| seen.contains(p)) {
                Ok(())
            } else {
                Err(format!("answered by {seen:?}"))
            }
        },
    );
    eprintln!(
        "{mode}: rules followed the scale-up {:?} after the slice changed",
        changed.elapsed()
    );
    assert!(
        seen.iter().all(|p| all.contains_key(p)),
        "{mode}: answers from pods that are not endpoints: {seen:?} vs {all:?}"
    );

    eprintln!("{mode}: scaling checked at {:?}", started.elapsed());
    // Terminating endpoints as fallback (KEP-1669): the only pod of `drain` is deleted but
    // still serves during its preStop; with no ready endpoint left, the Service keeps sending to
    // it rather than refusing.
    let drain = service_addr(&node, "drain");
    let (draining, _) = wait_ready_endpoints(&node, "drain", 1)
        .into_iter()
        .next()
        .unwrap();
    retry(
        &node,
        &format!("{mode}: {drain} answers"),
        RESYNC_DEADLINE,
        || get(&netns, drain),
    );
    node.kubectl(&["scale", "deployment", "drain", "--replicas=0"]);
    wait_for(
        &format!("{mode}: {draining} serving while terminating"),
        Duration::from_secs(30),
        || {
            let eps = endpoints_where(&node, "drain", |c| {
                c["ready"] == false && c["serving"] == true && c["terminating"] == true
            });
            eps.contains_key(&draining).then_some(())
        },
    );
    let changed = Instant::now();
    // Past a sync, every request still reaches the terminating pod.
    while changed.elapsed() < Duration::from_millis(2500) {
        let r = get(&netns, drain).map(|b| answer(&b).0);
        assert_eq!(
            r.as_deref(),
            Ok(draining.as_str()),
            "{mode}: {drain} with only a terminating, serving endpoint:\n{}",
            dump(&node)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!(
        "{mode}: terminating fallback checked at {:?}",
        started.elapsed()
    );

    // UDP: a flow keeps its endpoint (conntrack) until that endpoint goes; then the proxy
    // clears the flow's conntrack entry and the next datagram reaches another pod. (Without the
    // cleanup the entry, refreshed by every datagram, keeps sending to the gone pod.)
    wait_ready_endpoints(&node, "udp", 2);
    let udp = SocketAddr::from((service_addr(&node, "udp").ip(), 5353));
    let flow = udp_flow(&netns, udp);
    let first = retry(
        &node,
        &format!("{mode}: UDP {udp} answers"),
        RESYNC_DEADLINE,
        || udp_ask(&flow),
    );
    for _ in 0..5 {
        assert_eq!(
            udp_ask(&flow).as_deref(),
            Ok(first.as_str()),
            "{mode}: a UDP flow to {udp} changed endpoints by itself"
        );
    }
    node.kubectl(&["delete", "pod", &first, "--wait=false"]);
    // Flows to a terminating endpoint that still serves are kept (upstream): the deadline runs
    // from when it no longer serves.
    wait_for(
        &format!("{mode}: {first} no longer a serving endpoint of udp"),
        Duration::from_secs(30),
        || {
            let serving = endpoints_where(&node, "udp", |c| {
                c["serving"] == true || (c["serving"].is_null() && c["ready"] == true)
            });
            (!serving.contains_key(&first)).then_some(())
        },
    );
    let changed = Instant::now();
    let next = retry(
        &node,
        &format!("{mode}: the UDP flow to {udp} moves off {first}"),
        RESYNC_DEADLINE,
        || match udp_ask(&flow)? {
            p if p == first => Err(format!("{p} still answers")),
            p => Ok(p),
        },
    );
    eprintln!(
        "{mode}: the UDP flow moved from {first} to {next} {:?} after the slice changed",
        changed.elapsed()
    );
    eprintln!("{mode}: UDP checked at {:?}", started.elapsed());

    node.cleanup();
    eprintln!("{mode}: done in {:?}", started.elapsed());
}

#[test]
fn service_networking_nftables() {
    service_networking("nftables");
}

#[test]
fn service_networking_iptables() {
    service_networking("iptables");
}
