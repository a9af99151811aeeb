//! `rkube controller-manager` as its own process against `rkube server`: leader election hands the
//! controllers over when the leader dies and releases the Lease on shutdown, and a Deployment rollout
//! survives the controller manager being killed three times and its connections being cut, ending
//! with exactly the desired pods.

mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use support::{Backend, Cluster};

/// A controller manager process; `acquired` fires when it starts leading.
struct ControllerManager {
    child: Child,
    acquired: mpsc::Receiver<()>,
}

impl ControllerManager {
    fn start(kubeconfig: &Path) -> ControllerManager {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rkube"))
            .args(["controller-manager", "--kubeconfig"])
            .arg(kubeconfig)
            .args([
                // Short enough for quick takeovers, long enough that a loaded machine does not
                // make the leader miss its renew deadline.
                "--leader-elect-lease-duration=4s",
                "--leader-elect-renew-deadline=3s",
                "--leader-elect-retry-period=500ms",
            ])
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start rkube controller-manager");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, acquired) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if line.contains("successfully acquired lease") {
                    let _ = tx.send(());
                }
            }
        });
        ControllerManager { child, acquired }
    }

    fn wait_leading(&self) {
        self.acquired
            .recv_timeout(Duration::from_secs(30))
            .expect("controller manager never acquired the lease");
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for ControllerManager {
    fn drop(&mut self) {
        self.kill();
    }
}

fn lease_holder(c: &Cluster) -> String {
    c.kubectl(&[
        "get",
        "lease",
        "-n",
        "kube-system",
        "kube-controller-manager",
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ])
}

fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn rolled_out(c: &Cluster, deployment: &str) {
    let out = c.kubectl(&["rollout", "status", deployment, "--timeout=120s"]);
    assert!(out.contains("successfully rolled out"), "{out}");
}

#[test]
fn leadership_moves_to_the_standby_and_is_released_on_shutdown() {
    let c = Cluster::start_all(
        Backend::Sqlite,
        &["--disable-controllers", "--sim-nodes", "3"],
    );
    let mut first = ControllerManager::start(&c.kubeconfig);
    first.wait_leading();
    let standby = ControllerManager::start(&c.kubeconfig);
    c.kubectl(&[
        "create",
        "deployment",
        "web",
        "--image=web:1",
        "--replicas=2",
    ]);
    rolled_out(&c, "deployment/web");
    let leader = lease_holder(&c);
    assert!(!leader.is_empty());

    // The leader dies without releasing: the standby takes over once the lease expires.
    first.kill();
    standby.wait_leading();
    let next = lease_holder(&c);
    assert!(!next.is_empty() && next != leader, "{leader} -> {next}");
    c.kubectl(&["scale", "deployment", "web", "--replicas=4"]);
    rolled_out(&c, "deployment/web");

    // Interrupted, the leader gives the lease back at once (upstream ReleaseOnCancel).
    let status = Command::new("kill")
        .args(["-INT", &standby.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success());
    wait_until("the lease's release", Duration::from_secs(10), || {
        lease_holder(&c).is_empty()
    });
}

/// A TCP proxy in front of the API server whose connections the test can cut.
struct Proxy {
    addr: String,
    conns: Arc<Mutex<Vec<TcpStream>>>,
}

impl Proxy {
    fn start(upstream: String) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let conns: Arc<Mutex<Vec<TcpStream>>> = Arc::default();
        let tracked = conns.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(Result::ok) {
                let Ok(server) = TcpStream::connect(&upstream) else {
                    continue;
                };
                let mut list = tracked.lock().unwrap();
                for s in [&client, &server] {
                    list.push(s.try_clone().expect("clone"));
                }
                drop(list);
                for (mut from, mut to) in [
                    (client.try_clone().unwrap(), server.try_clone().unwrap()),
                    (server, client),
                ] {
                    std::thread::spawn(move || {
                        let mut buf = [0u8; 16384];
                        while let Ok(n) = from.read(&mut buf) {
                            if n == 0 || to.write_all(&buf[..n]).is_err() {
                                break;
                            }
                        }
                        let _ = to.shutdown(Shutdown::Both);
                        let _ = from.shutdown(Shutdown::Both);
                    });
                }
            }
        });
        Proxy { addr, conns }
    }

    /// Cuts every connection open now (watches included).
    fn cut(&self) -> usize {
        let conns: Vec<TcpStream> = std::mem::take(&mut *self.conns.lock().unwrap());
        for s in &conns {
            let _ = s.shutdown(Shutdown::Both);
        }
        conns.len() / 2
    }

    /// A kubeconfig like `kubeconfig` that reaches the server through the proxy.
    fn kubeconfig(&self, c: &Cluster) -> PathBuf {
        let text = std::fs::read_to_string(&c.kubeconfig).expect("kubeconfig");
        let upstream = c.url.trim_start_matches("https://");
        let path = c.data_dir().join("proxied.kubeconfig");
        std::fs::write(&path, text.replace(upstream, &self.addr)).expect("write kubeconfig");
        path
    }
}

const DEPLOYMENT: &str = r#"
apiVersion: apps/v1
kind: Deployment
metadata: {name: chaos}
spec:
  replicas: 200
  minReadySeconds: 5
  selector: {matchLabels: {app: chaos}}
  template:
    metadata: {labels: {app: chaos}}
    spec:
      terminationGracePeriodSeconds: 0
      containers: [{name: app, image: "chaos:1"}]
"#;

#[test]
fn a_rollout_survives_controller_manager_kills_and_cut_watches() {
    let c = Cluster::start_all(
        Backend::Sqlite,
        &["--disable-controllers", "--sim-nodes", "10"],
    );
    let proxy = Proxy::start(c.url.trim_start_matches("https://").to_string());
    let kubeconfig = proxy.kubeconfig(&c);
    let mut cm = ControllerManager::start(&kubeconfig);
    c.kubectl_in(&["apply", "-f", "-"], Some(DEPLOYMENT));
    rolled_out(&c, "deployment/chaos");

    // Watch the ReplicaSets' total size while the rollout runs: never above replicas + maxSurge.
    let stop = Arc::new(AtomicBool::new(false));
    let max_total = Arc::new(AtomicI64::new(0));
    let sampler = {
        let (stop, max_total) = (stop.clone(), max_total.clone());
        let kubeconfig = c.kubeconfig.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let out = Command::new("kubectl")
                    .env("KUBECONFIG", &kubeconfig)
                    .args([
                        "get",
                        "rs",
                        "-l",
                        "app=chaos",
                        "-o",
                        "jsonpath={.items[*].spec.replicas}",
                    ])
                    .output()
                    .expect("kubectl");
                let total: i64 = String::from_utf8_lossy(&out.stdout)
                    .split_whitespace()
                    .filter_map(|n| n.parse::<i64>().ok())
                    .sum();
                max_total.fetch_max(total, Ordering::Relaxed);
            }
        })
    };

    c.kubectl(&["set", "image", "deployment/chaos", "app=chaos:2"]);
    for round in 0..3 {
        std::thread::sleep(Duration::from_millis(400));
        // Cut the watches of the running controller manager, then kill it mid-rollout.
        eprintln!(
            "round {round}: {}",
            c.kubectl(&[
                "get",
                "deployment",
                "chaos",
                "-o",
                "jsonpath={.status.updatedReplicas}/{.status.availableReplicas}"
            ])
        );
        assert!(proxy.cut() > 0, "round {round}: no connections to cut");
        std::thread::sleep(Duration::from_millis(300));
        cm.kill();
        proxy.cut();
        cm = ControllerManager::start(&kubeconfig);
        cm.wait_leading();
    }
    rolled_out(&c, "deployment/chaos");
    stop.store(true, Ordering::Relaxed);
    sampler.join().expect("sampler");
    assert!(
        max_total.load(Ordering::Relaxed) <= 250,
        "ReplicaSets summed to {} (> 200 + 25% surge)",
        max_total.load(Ordering::Relaxed)
    );

    // Exactly the desired pods, all of the new template and owned by its ReplicaSet; none orphaned.
    let pods = || {
        c.kubectl(&["get", "pods", "-l", "app=chaos", "-o", "jsonpath={range .items[*]}{.spec.containers[0].image},{.metadata.ownerReferences[0].name},{.metadata.deletionTimestamp}{\"\\n\"}{end}"])
    };
    wait_until("the old pods to go", Duration::from_secs(60), || {
        pods().lines().count() == 200
    });
    let new_rs = c.kubectl(&[
        "get",
        "rs",
        "-l",
        "app=chaos",
        "-o",
        "jsonpath={.items[?(@.spec.replicas==200)].metadata.name}",
    ]);
    let listing = pods();
    let expected = format!("chaos:2,{new_rs},");
    let wrong: Vec<&str> = listing.lines().filter(|l| *l != expected).collect();
    assert!(wrong.is_empty(), "pods not of {new_rs}: {wrong:?}");
    let sets = c.kubectl(&["get", "rs", "-l", "app=chaos", "-o", "jsonpath={range .items[*]}{.spec.template.spec.containers[0].image}={.spec.replicas}/{.status.replicas} {end}"]);
    let mut sets: Vec<&str> = sets.split_whitespace().collect();
    sets.sort();
    assert_eq!(sets, ["chaos:1=0/0", "chaos:2=200/200"]);
}
