//! Issue 22's first failure test, the API-server part: three `rkube apiserver`s on one etcd, a
//! leader-elected controller manager and scheduler and `rkube sim`, all given the three servers
//! with `--server` (so each runs the client-side load balancer), and a client load of ConfigMap
//! creates, updates and a watch through a balancer of its own. The server the test's clients use
//! (the first, unless a slow `/readyz` moved them) is killed with SIGKILL; afterwards every
//! acknowledged write reads back, the watch saw every acknowledged write in strictly increasing
//! resourceVersion order, the simulated nodes' Leases renew through another server and the nodes
//! stay Ready, the components still roll out a Deployment, and writes are served again within the
//! components' lease duration. Then the server used next is stopped with SIGSTOP (it still accepts
//! connections): the balancers' `/readyz` check takes it out and the same holds. Before the kill,
//! 1,000 Services created concurrently through the three servers get 1,000 distinct ClusterIPs
//! (issue 22's second item). Recovery times are printed (docs/benchmarks.md).

use std::collections::{HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

use client::loadbalancer::{readyz_check, LoadBalancer, Options};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Service};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use storage::etcd_process::EtcdProcess;

const DEADLINE: Duration = Duration::from_secs(60);
/// The controller manager's and scheduler's lease duration (upstream's default 15 s): writes must
/// be served again within it.
const LEASE_DURATION: Duration = Duration::from_secs(15);

/// A child process killed when dropped.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn rkube(args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rkube"));
    cmd.args(args)
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Starts a process whose stderr goes to the test's, tagged with `name`; with `ready`, waits for a
/// line starting with it and returns the rest of that line.
fn spawn(name: &'static str, mut cmd: Command, ready: Option<&'static str>) -> (Proc, String) {
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("start {name}: {e}"));
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = ready.and_then(|r| line.strip_prefix(r)) {
                let _ = tx.send(rest.to_string());
            }
            eprintln!("[{name}] {line}");
        }
    });
    let mut proc = Proc(child);
    let line = match ready {
        Some(_) => rx.recv_timeout(DEADLINE).unwrap_or_else(|_| {
            let status = proc.0.try_wait();
            panic!("{name} did not start within {DEADLINE:?} ({status:?})")
        }),
        None => String::new(),
    };
    (proc, line)
}

/// An `rkube apiserver` on `bind`:`port` advertising `advertise`; returns it and its port.
fn apiserver(
    name: &'static str,
    data_dir: &Path,
    etcd: &str,
    (bind, port): (&str, u16),
    advertise: &str,
) -> (Proc, u16) {
    let dir = data_dir.to_str().expect("utf-8 path");
    let port_arg = port.to_string();
    let cmd = rkube(&[
        "apiserver",
        "--data-dir",
        dir,
        "--etcd-servers",
        etcd,
        "--bind-address",
        bind,
        "--secure-port",
        &port_arg,
        "--advertise-address",
        advertise,
    ]);
    let (proc, line) = spawn(name, cmd, Some("rkube: serving on https://"));
    let addr = line.split(' ').next().unwrap_or_default();
    let port = addr
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{name}: no port in {line:?}"));
    (proc, port)
}

/// Copies the first server's CA, keys and admin credentials (kubeadm's shared certificates).
fn share_pki(from: &Path, to: &Path) {
    let (src, dst) = (from.join("pki"), to.join("pki"));
    std::fs::create_dir_all(&dst).expect("pki dir");
    for entry in std::fs::read_dir(&src).expect("read pki") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("name").to_owned();
        std::fs::copy(&path, dst.join(name)).expect("copy pki file");
    }
}

/// Polls `check` every 100 ms until it returns `Some`, failing after [`DEADLINE`].
async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn signal(proc: &Proc, sig: &str) {
    let status = Command::new("kill")
        .args([sig, &proc.0.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {sig}");
}

fn rv(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("numeric resourceVersion")
}

/// What the writer saw: acknowledged writes (name, resourceVersion) and when each came back.
#[derive(Default)]
struct Writes {
    acked: Vec<(String, u64, Instant)>,
    failures: usize,
}

/// Creates `load-<i>` and then updates it, over and over, until `stop`.
async fn writer(api: Api<ConfigMap>, writes: Arc<Mutex<Writes>>, stop: Arc<AtomicBool>) {
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let name = format!("load-{i}");
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name}, "data": {"n": "0"}
        }))
        .expect("configmap");
        let created = api.create(&PostParams::default(), &cm).await;
        let ok = match created {
            Ok(cm) => {
                let mut w = writes.lock().unwrap();
                w.acked
                    .push((name.clone(), rv(&cm.metadata), Instant::now()));
                true
            }
            Err(_) => {
                writes.lock().unwrap().failures += 1;
                false
            }
        };
        if ok {
            let patch = serde_json::json!({"data": {"n": "1"}});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(cm) => {
                    let mut w = writes.lock().unwrap();
                    w.acked
                        .push((name.clone(), rv(&cm.metadata), Instant::now()));
                }
                Err(_) => writes.lock().unwrap().failures += 1,
            }
        }
        tokio::time::sleep(Duration::from_millis(if ok { 10 } else { 50 })).await;
    }
}

/// Watches the namespace from `from`, resuming from the last resourceVersion seen whenever the
/// stream ends (its server died), until `stop`; returns (name, resourceVersion) of every event and
/// how often it had to resume. A 410 (the resume point is gone) is a missed event: it panics.
async fn watcher(
    api: Api<ConfigMap>,
    from: String,
    seen: Arc<Mutex<Vec<(String, u64)>>>,
    stop: Arc<AtomicBool>,
) -> usize {
    let mut version = from;
    let mut resumes = 0;
    let params = WatchParams::default().timeout(30);
    while !stop.load(Ordering::Relaxed) {
        let stream = match api.watch(&params, &version).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("watch from {version}: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                resumes += 1;
                continue;
            }
        };
        futures::pin_mut!(stream);
        loop {
            let next = tokio::select! {
                n = stream.next() => n,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    if stop.load(Ordering::Relaxed) { break } else { continue }
                }
            };
            match next {
                Some(Ok(
                    WatchEvent::Added(cm) | WatchEvent::Modified(cm) | WatchEvent::Deleted(cm),
                )) => {
                    let v = rv(&cm.metadata);
                    version = v.to_string();
                    let name = cm.metadata.name.unwrap_or_default();
                    seen.lock().unwrap().push((name, v));
                }
                Some(Ok(WatchEvent::Bookmark(b))) => version = b.metadata.resource_version,
                Some(Ok(WatchEvent::Error(e))) => {
                    assert_ne!(e.code, 410, "the watch's resume point is gone: {e:?}");
                    eprintln!("watch error event: {e:?}");
                    break;
                }
                Some(Err(e)) => {
                    eprintln!("watch stream from {version}: {e}");
                    break;
                }
                None => break,
            }
        }
        resumes += 1;
    }
    resumes
}

fn service(i: usize) -> Service {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("svc-{i}")},
        "spec": {"ports": [{"port": 80}]}
    }))
    .expect("service")
}

fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

#[test]
fn kill_one_of_three_api_servers_under_load() {
    let started = Instant::now();
    let etcd = EtcdProcess::start().unwrap_or_else(|e| panic!("{e}"));
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (server_a, port) = apiserver(
        "apiserver-a",
        dirs[0].path(),
        &etcd.endpoint,
        ("127.0.0.1", 0),
        "192.0.2.1",
    );
    share_pki(dirs[0].path(), dirs[1].path());
    share_pki(dirs[0].path(), dirs[2].path());
    let (server_b, _) = apiserver(
        "apiserver-b",
        dirs[1].path(),
        &etcd.endpoint,
        ("127.0.0.2", port),
        "192.0.2.2",
    );
    let (server_c, _) = apiserver(
        "apiserver-c",
        dirs[2].path(),
        &etcd.endpoint,
        ("127.0.0.3", port),
        "192.0.2.3",
    );
    let urls: Vec<String> = (1..=3)
        .map(|i| format!("https://127.0.0.{i}:{port}"))
        .collect();
    let servers = urls.join(",");
    let kubeconfig = dirs[0].path().join("admin.kubeconfig");
    let kc = kubeconfig.to_str().expect("utf-8 path");
    let component = |args: &[&str]| {
        let mut all = args.to_vec();
        all.extend(["--kubeconfig", kc, "--server", &servers]);
        rkube(&all)
    };
    let _controllers = spawn(
        "controller-manager",
        component(&["controller-manager"]),
        None,
    );
    let _scheduler = spawn("scheduler", component(&["scheduler"]), None);
    let _sim = spawn(
        "sim",
        component(&["sim", "--nodes", "3", "--sim-lease-renew-interval", "1s"]),
        None,
    );
    eprintln!("cluster started in {:?}", started.elapsed());

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    rt.block_on(async move {
        let config = |url: String| {
            let kubeconfig = kubeconfig.clone();
            async move {
                let mut config = client::kubeconfig::config_from_file(&kubeconfig)
                    .await
                    .expect("kubeconfig");
                config.cluster_url = url.parse().expect("url");
                kube::Client::try_from(config).expect("client")
            }
        };
        let addrs = client::loadbalancer::server_addresses(&urls).expect("urls");
        // The components' health check: /readyz through the balancer's name.
        let kubeconfig_config = client::kubeconfig::config_from_file(&kubeconfig)
            .await
            .expect("kubeconfig");
        let options = Options {
            health_check: Some(readyz_check(&kubeconfig_config)),
            ..Options::default()
        };
        let lb = LoadBalancer::start(addrs.clone(), options)
            .await
            .expect("balancer");
        let client = config(lb.url()).await;
        let mut direct = Vec::new();
        for url in &urls {
            direct.push(config(url.clone()).await);
        }

        let nodes: Api<Node> = Api::all(client.clone());
        wait_for("three Ready simulated nodes", || {
            let nodes = nodes.clone();
            async move {
                let list = nodes.list(&ListParams::default()).await.ok()?;
                (list.items.iter().filter(|n| ready(n)).count() == 3).then_some(())
            }
        })
        .await;

        // 1,000 Services at once, spread over the three servers: distinct ClusterIPs.
        let t = Instant::now();
        let ips: Vec<String> = futures::stream::iter(0..1000)
            .map(|i| {
                let api: Api<Service> = Api::namespaced(direct[i % 3].clone(), "default");
                async move {
                    let svc = api.create(&PostParams::default(), &service(i)).await?;
                    Ok::<_, kube::Error>(
                        svc.spec
                            .and_then(|s| s.cluster_ip)
                            .expect("a ClusterIP assigned"),
                    )
                }
            })
            .buffer_unordered(24)
            .try_collect()
            .await
            .expect("every Service created");
        let distinct: HashSet<&String> = ips.iter().collect();
        assert_eq!(distinct.len(), 1000, "1,000 distinct ClusterIPs");
        eprintln!("1,000 Services through three servers in {:?}", t.elapsed());

        // The load, through the balancer.
        let namespaces: Api<Namespace> = Api::all(client.clone());
        let ns: Namespace =
            serde_json::from_value(serde_json::json!({"metadata": {"name": "ha"}})).unwrap();
        namespaces
            .create(&PostParams::default(), &ns)
            .await
            .expect("namespace");
        let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "ha");
        let from = cms
            .list(&ListParams::default())
            .await
            .expect("list")
            .metadata
            .resource_version
            .expect("list resourceVersion");
        let writes = Arc::new(Mutex::new(Writes::default()));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (stop_writes, stop_watch) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicBool::new(false)),
        );
        let watch = tokio::spawn(watcher(cms.clone(), from, seen.clone(), stop_watch.clone()));
        let write = tokio::spawn(writer(cms.clone(), writes.clone(), stop_writes.clone()));
        wait_for("writes acknowledged before the kill", || {
            let n = writes.lock().unwrap().acked.len();
            async move { (n >= 40).then_some(()) }
        })
        .await;

        // Kill the server the test's clients use (the first unless a slow /readyz moved them).
        let mut servers = [Some(server_a), Some(server_b), Some(server_c)];
        let victim = lb.current().expect("a current server");
        let index = addrs.iter().position(|a| *a == victim).expect("listed");
        eprintln!("killing {victim}");
        let before = writes.lock().unwrap().acked.len();
        let killed_at = jiff::Timestamp::now();
        let killed = Instant::now();
        let mut dead = servers[index].take().expect("running");
        dead.0.kill().expect("kill -9");
        let _ = dead.0.wait();

        let recovered = wait_for("a write acknowledged after the kill", || {
            let w = writes.lock().unwrap();
            let after = w.acked.iter().skip(before).find(|(_, _, at)| *at > killed);
            let at = after.map(|(_, _, at)| at.duration_since(killed));
            async move { at }
        })
        .await;
        eprintln!("first write acknowledged {recovered:?} after the kill");
        assert!(
            recovered < LEASE_DURATION,
            "writes served again within {LEASE_DURATION:?}"
        );

        // Every simulated node renews its Lease through another server.
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
        let renewed = wait_for("every sim node's Lease renewed after the kill", || {
            let leases = leases.clone();
            async move {
                let list = leases.list(&ListParams::default()).await.ok()?;
                let after: Vec<jiff::Timestamp> = list
                    .items
                    .iter()
                    .filter(|l| {
                        l.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| n.starts_with("sim-"))
                    })
                    .filter_map(|l| l.spec.as_ref()?.renew_time.as_ref().map(|t| t.0))
                    .filter(|t| *t > killed_at)
                    .collect();
                (after.len() == 3).then(|| after.into_iter().max().expect("three"))
            }
        })
        .await;
        let renew_after = renewed.duration_since(killed_at);
        eprintln!("every sim node renewed its Lease within {renew_after:?} of the kill");

        // The elected components still work: a Deployment created now is rolled out and bound.
        let deployment: Deployment = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "after", "namespace": "ha"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "after"}},
                "template": {
                    "metadata": {"labels": {"app": "after"}},
                    "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
                }
            }
        }))
        .unwrap();
        Api::<Deployment>::namespaced(client.clone(), "ha")
            .create(&PostParams::default(), &deployment)
            .await
            .expect("deployment");
        let pods: Api<Pod> = Api::namespaced(client.clone(), "ha");
        wait_for("the Deployment's pods bound after the kill", || {
            let pods = pods.clone();
            async move {
                let list = pods
                    .list(&ListParams::default().labels("app=after"))
                    .await
                    .ok()?;
                let bound = list
                    .items
                    .iter()
                    .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                    .count();
                (bound == 2).then_some(())
            }
        })
        .await;
        eprintln!(
            "Deployment rolled out {:?} after the kill",
            killed.elapsed()
        );

        // The server now preferred hangs (SIGSTOP: it still accepts connections, answers
        // nothing): the /readyz check takes it out and closes its connections.
        let current = lb.current().expect("a current server");
        assert_ne!(current, victim);
        let index = addrs.iter().position(|a| *a == current).expect("listed");
        let hung = servers[index].as_ref().expect("running");
        let before = writes.lock().unwrap().acked.len();
        let stopped_at = jiff::Timestamp::now();
        let stopped = Instant::now();
        signal(hung, "-STOP");
        let resumed = wait_for("a write acknowledged after the SIGSTOP", || {
            let w = writes.lock().unwrap();
            let after = w.acked.iter().skip(before).find(|(_, _, at)| *at > stopped);
            let at = after.map(|(_, _, at)| at.duration_since(stopped));
            async move { at }
        })
        .await;
        eprintln!("first write acknowledged {resumed:?} after the SIGSTOP of {current}");
        assert!(
            resumed < LEASE_DURATION,
            "writes served again within {LEASE_DURATION:?}"
        );
        let renewed = wait_for("every sim node's Lease renewed after the SIGSTOP", || {
            let leases = leases.clone();
            async move {
                let list = leases.list(&ListParams::default()).await.ok()?;
                let after: Vec<jiff::Timestamp> = list
                    .items
                    .iter()
                    .filter(|l| {
                        l.metadata
                            .name
                            .as_deref()
                            .is_some_and(|n| n.starts_with("sim-"))
                    })
                    .filter_map(|l| l.spec.as_ref()?.renew_time.as_ref().map(|t| t.0))
                    .filter(|t| *t > stopped_at)
                    .collect();
                (after.len() == 3).then(|| after.into_iter().max().expect("three"))
            }
        })
        .await;
        let stop_renew = renewed.duration_since(stopped_at);
        eprintln!("every sim node renewed its Lease within {stop_renew:?} of the SIGSTOP");
        signal(hung, "-CONT");

        // A little more load through the survivors, then stop and compare.
        let more = writes.lock().unwrap().acked.len() + 20;
        wait_for("more writes after the failover", || {
            let n = writes.lock().unwrap().acked.len();
            async move { (n >= more).then_some(()) }
        })
        .await;
        stop_writes.store(true, Ordering::Relaxed);
        write.await.expect("writer");
        let (acked, failures) = {
            let w = writes.lock().unwrap();
            (w.acked.clone(), w.failures)
        };
        let last = acked.iter().map(|(_, v, _)| *v).max().expect("writes");
        wait_for("the watch caught up with the last write", || {
            let done = seen.lock().unwrap().iter().any(|(_, v)| *v >= last);
            async move { done.then_some(()) }
        })
        .await;
        stop_watch.store(true, Ordering::Relaxed);
        let resumes = watch.await.expect("watcher");
        let seen = seen.lock().unwrap().clone();
        eprintln!(
            "{} writes acknowledged, {failures} failed, {} events watched, {resumes} watch resumes",
            acked.len(),
            seen.len()
        );

        // The watch's resourceVersions strictly increase, and it saw every acknowledged write.
        for pair in seen.windows(2) {
            assert!(pair[0].1 < pair[1].1, "watch order: {pair:?}");
        }
        let watched: HashMap<u64, &str> = seen.iter().map(|(n, v)| (*v, n.as_str())).collect();
        for (name, v, _) in &acked {
            assert_eq!(
                watched.get(v),
                Some(&name.as_str()),
                "write {name}@{v} watched"
            );
        }
        // Every acknowledged write reads back (its last acknowledged version or a later one).
        let mut latest: HashMap<&str, u64> = HashMap::new();
        for (name, v, _) in &acked {
            let e = latest.entry(name.as_str()).or_default();
            *e = (*e).max(*v);
        }
        let listed = cms.list(&ListParams::default()).await.expect("list");
        let stored: HashMap<String, u64> = listed
            .items
            .iter()
            .map(|c| (c.metadata.name.clone().unwrap_or_default(), rv(&c.metadata)))
            .collect();
        for (name, v) in &latest {
            let got = stored.get(*name).copied();
            assert!(
                got.is_some_and(|g| g >= *v),
                "{name}@{v} reads back: {got:?}"
            );
        }

        // The simulated nodes stayed Ready.
        let list = nodes.list(&ListParams::default()).await.expect("nodes");
        assert_eq!(
            list.items.iter().filter(|n| ready(n)).count(),
            3,
            "nodes Ready"
        );
        eprintln!(
            "RECOVERY kill: first-write={recovered:?} sim-lease-renew={renew_after:?}; \
             sigstop: first-write={resumed:?} sim-lease-renew={stop_renew:?}"
        );
    });
    eprintln!("test took {:?}", started.elapsed());
}
