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

use std::collections::HashSet;
use std::path::Path;
use std::time::{Duration, Instant};

use client::loadbalancer::{readyz_check, LoadBalancer, Options};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Node, Pod, Service};
use kube::api::{Api, ListParams, PostParams};
use storage::etcd_process::EtcdProcess;

#[path = "support/ha.rs"]
mod ha;

use ha::{rkube_cmd, share_pki, spawn, wait_for, Load, Proc};

/// The controller manager's and scheduler's lease duration (upstream's default 15 s): writes must
/// be served again within it.
const LEASE_DURATION: Duration = Duration::from_secs(15);

fn rkube(args: &[&str]) -> std::process::Command {
    rkube_cmd(args, "warn")
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
    let (proc, line) = spawn(name, cmd, Some("rkube: serving on https://"), |_, _| {});
    let addr = line.split(' ').next().unwrap_or_default();
    let port = addr
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{name}: no port in {line:?}"));
    (proc, port)
}

fn service(i: usize) -> Service {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("svc-{i}")},
        "spec": {"ports": [{"port": 80}]}
    }))
    .expect("service")
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
    let quiet = |_: &str, _| {};
    let _controllers = spawn(
        "controller-manager",
        component(&["controller-manager"]),
        None,
        quiet,
    );
    let _scheduler = spawn("scheduler", component(&["scheduler"]), None, quiet);
    let _sim = spawn(
        "sim",
        component(&["sim", "--nodes", "3", "--sim-lease-renew-interval", "1s"]),
        None,
        quiet,
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
                (list.items.iter().filter(|n| ha::ready(n)).count() == 3).then_some(())
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
        let load = Load::start(cms).await;
        load.more_writes(40).await;

        // Kill the server the test's clients use (the first unless a slow /readyz moved them).
        let mut servers = [Some(server_a), Some(server_b), Some(server_c)];
        let victim = lb.current().expect("a current server");
        let index = addrs.iter().position(|a| *a == victim).expect("listed");
        eprintln!("killing {victim}");
        let before = load.acked();
        let killed_at = jiff::Timestamp::now();
        let killed = Instant::now();
        let mut dead = servers[index].take().expect("running");
        dead.0.kill().expect("kill -9");
        let _ = dead.0.wait();

        let recovered = wait_for("a write acknowledged after the kill", || {
            let w = load.writes.lock().unwrap();
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
        let before = load.acked();
        let stopped_at = jiff::Timestamp::now();
        let stopped = Instant::now();
        hung.signal("-STOP");
        let resumed = wait_for("a write acknowledged after the SIGSTOP", || {
            let w = load.writes.lock().unwrap();
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
        hung.signal("-CONT");

        // A little more load through the survivors, then stop and compare.
        load.more_writes(20).await;
        eprintln!("{}", load.finish().await);

        // The simulated nodes stayed Ready.
        let list = nodes.list(&ListParams::default()).await.expect("nodes");
        assert_eq!(
            list.items.iter().filter(|n| ha::ready(n)).count(),
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
