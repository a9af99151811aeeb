//! The scheduler's plugins and configuration end to end, with simulated nodes: topology spreading
//! across zones, anti-affinity keeping replicas apart, scheduling gates, a pod pending until a node is
//! added, preemption by a higher PriorityClass, and a second profile from `rkube scheduler --config`
//! (elected on the kube-scheduler Lease) next to pods naming no profile.

mod support;

use std::collections::{HashMap, HashSet};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{ListParams, PostParams};
use kube::Api;
use serde_json::{json, Value};
use support::{Backend, Cluster};

const LIMIT: Duration = Duration::from_secs(90);

async fn eventually<F, Fut, T>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + LIMIT;
    loop {
        match check().await {
            Ok(v) => return v,
            Err(e) if Instant::now() >= deadline => panic!("{what} not within {LIMIT:?}: {e}"),
            Err(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}

/// A process killed when dropped.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn rkube(c: &Cluster, args: &[&str]) -> Process {
    let child = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args(args)
        .arg("--kubeconfig")
        .arg(&c.kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .expect("start rkube");
    Process(child)
}

fn pod(name: &str, labels: Value, spec: Value) -> Pod {
    let mut s = json!({"containers": [{"name": "c", "image": "busybox",
        "resources": {"requests": {"cpu": "100m"}}}], "terminationGracePeriodSeconds": 1});
    if let (Value::Object(s), Value::Object(more)) = (&mut s, spec) {
        s.extend(more);
    }
    serde_json::from_value(json!({"metadata": {"name": name, "labels": labels}, "spec": s}))
        .unwrap()
}

async fn create(pods: &Api<Pod>, p: Pod) {
    pods.create(&PostParams::default(), &p).await.unwrap();
}

async fn bound_node(pods: &Api<Pod>, name: &str) -> Result<String, String> {
    let p = pods.get(name).await.map_err(|e| e.to_string())?;
    p.spec
        .and_then(|s| s.node_name)
        .filter(|n| !n.is_empty())
        .ok_or_else(|| format!("{name} not bound"))
}

async fn condition(pods: &Api<Pod>, name: &str, reason: &str) -> Result<String, String> {
    let p = pods.get(name).await.map_err(|e| e.to_string())?;
    p.status
        .and_then(|s| s.conditions)
        .and_then(|c| {
            c.into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        })
        .filter(|c| c.reason.as_deref() == Some(reason))
        .and_then(|c| c.message)
        .ok_or_else(|| format!("{name}: no PodScheduled=False/{reason}"))
}

async fn wait_nodes(client: &kube::Client, n: usize) -> HashMap<String, String> {
    let nodes: Api<Node> = Api::all(client.clone());
    eventually("the simulated nodes", || {
        let nodes = nodes.clone();
        async move {
            let list = nodes
                .list(&ListParams::default())
                .await
                .map_err(|e| e.to_string())?;
            if list.items.len() < n {
                return Err(format!("{} nodes", list.items.len()));
            }
            Ok(list
                .items
                .into_iter()
                .map(|n| {
                    let zone = n
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get("topology.kubernetes.io/zone").cloned())
                        .unwrap_or_default();
                    (n.metadata.name.unwrap_or_default(), zone)
                })
                .collect())
        }
    })
    .await
}

#[test]
fn spreading_anti_affinity_gates_and_new_nodes() {
    let c = Cluster::start_all(
        Backend::Sqlite,
        &["--sim-nodes", "6", "--sim-cpu", "2", "--sim-zones", "3"],
    );
    support::runtime().block_on(async {
        let client = c.client().await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        let zones = wait_nodes(&client, 6).await;

        // Spreading across zones: a hard zone constraint with maxSkew 1 puts 2 pods in each zone.
        let spread = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "spread"}}}]});
        for i in 0..6 {
            create(&pods, pod(&format!("spread-{i}"), json!({"app": "spread"}), spread.clone())).await;
        }
        let mut per_zone: HashMap<String, usize> = HashMap::new();
        for i in 0..6 {
            let name = format!("spread-{i}");
            let node = eventually("spread pod bound", || bound_node(&pods, &name)).await;
            *per_zone.entry(zones[&node].clone()).or_default() += 1;
        }
        assert_eq!(per_zone.values().copied().collect::<Vec<_>>(), vec![2, 2, 2], "{per_zone:?}");

        // Anti-affinity keeps replicas apart: six nodes take six replicas, the seventh waits.
        let apart = json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "apart"}}, "topologyKey": "kubernetes.io/hostname"}]}}});
        for i in 0..7 {
            create(&pods, pod(&format!("apart-{i}"), json!({"app": "apart"}), apart.clone())).await;
        }
        let message = eventually("a replica reported unschedulable", || {
            let pods = pods.clone();
            async move {
                for i in 0..7 {
                    if let Ok(m) = condition(&pods, &format!("apart-{i}"), "Unschedulable").await {
                        return Ok(m);
                    }
                }
                Err("none yet".to_string())
            }
        })
        .await;
        assert!(message.starts_with("0/6 nodes are available: 6 node(s) didn't match pod anti-affinity rules."), "{message}");
        let mut used = HashSet::new();
        let mut bound = 0;
        for i in 0..7 {
            if let Ok(n) = bound_node(&pods, &format!("apart-{i}")).await {
                bound += 1;
                assert!(used.insert(n.clone()), "two replicas on {n}");
            }
        }
        // Six are bound (possibly still binding): wait for them.
        if bound < 6 {
            eventually("six replicas bound", || {
                let pods = pods.clone();
                async move {
                    let mut n = 0;
                    for i in 0..7 {
                        n += usize::from(bound_node(&pods, &format!("apart-{i}")).await.is_ok());
                    }
                    (n == 6).then_some(()).ok_or(format!("{n} bound"))
                }
            })
            .await;
        }

        // Scheduling gates: the pod waits, shows SchedulingGated, and runs once the gate is gone.
        create(&pods, pod("gated", json!({}), json!({"schedulingGates": [{"name": "example.com/hold"}]}))).await;
        let msg = eventually("gated condition", || condition(&pods, "gated", "SchedulingGated")).await;
        assert_eq!(msg, "Scheduling is blocked due to non-empty scheduling gates");
        let table = c.kubectl(&["get", "pod", "gated", "--no-headers"]);
        assert!(table.contains("SchedulingGated"), "{table}");
        // A pod created after it is scheduled while it still waits.
        create(&pods, pod("after-gated", json!({}), json!({}))).await;
        eventually("the later pod bound", || bound_node(&pods, "after-gated")).await;
        assert!(bound_node(&pods, "gated").await.is_err(), "a gated pod was bound");
        c.kubectl(&["patch", "pod", "gated", "--type=json", "-p", r#"[{"op":"remove","path":"/spec/schedulingGates"}]"#]);
        eventually("the ungated pod bound", || bound_node(&pods, "gated")).await;

        // Pending until a node is added: it asks for a node that does not exist yet.
        create(&pods, pod("waits", json!({}), json!({"nodeSelector": {"kubernetes.io/hostname": "sim-50"}}))).await;
        let msg = eventually("waits reported", || condition(&pods, "waits", "Unschedulable")).await;
        assert!(msg.starts_with("0/6 nodes are available: 6 node(s) didn't match Pod's node affinity/selector."), "{msg}");
        let _extra = rkube(&c, &["sim", "--nodes", "1", "--sim-first-index", "50", "--sim-cpu", "2"]);
        assert_eq!(eventually("waits bound", || bound_node(&pods, "waits")).await, "sim-50");
    });
}

#[test]
fn a_higher_priority_class_preempts() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "2", "--sim-cpu", "1"]);
    support::runtime().block_on(async {
        let client = c.client().await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        wait_nodes(&client, 2).await;
        c.kubectl_in(
            &["apply", "-f", "-"],
            Some(
                "apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: low}\nvalue: 100\n---\n\
                 apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: high}\nvalue: 1000\n---\n\
                 apiVersion: scheduling.k8s.io/v1\nkind: PriorityClass\nmetadata: {name: polite}\nvalue: 1000\npreemptionPolicy: Never\n",
            ),
        );
        let big = |class: &str| json!({"priorityClassName": class,
            "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": "800m"}}}]});
        for i in 0..2 {
            create(&pods, pod(&format!("low-{i}"), json!({"tier": "low"}), big("low"))).await;
        }
        for i in 0..2 {
            let name = format!("low-{i}");
            eventually("low pods bound", || bound_node(&pods, &name)).await;
        }
        let low = pods.get("low-0").await.unwrap();
        assert_eq!(low.spec.as_ref().and_then(|s| s.priority), Some(100), "the Priority admission");

        // preemptionPolicy Never: no victims.
        create(&pods, pod("polite", json!({}), big("polite"))).await;
        let msg = eventually("polite reported", || condition(&pods, "polite", "Unschedulable")).await;
        assert!(msg.ends_with("preemption: not eligible due to preemptionPolicy=Never.."), "{msg}");

        create(&pods, pod("high", json!({}), big("high"))).await;
        let node = eventually("the high-priority pod bound", || bound_node(&pods, "high")).await;
        // One low pod made room and is gone; the other still runs elsewhere.
        let left: Vec<Pod> = pods
            .list(&ListParams::default().labels("tier=low"))
            .await
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        assert_eq!(left.len(), 1, "exactly one victim");
        assert_ne!(left[0].spec.as_ref().and_then(|s| s.node_name.clone()), Some(node));
        let events: Api<Event> = Api::namespaced(client.clone(), "default");
        eventually("a Preempted event", || {
            let events = events.clone();
            async move {
                let list = events.list(&ListParams::default()).await.map_err(|e| e.to_string())?;
                list.items
                    .iter()
                    .any(|e| e.reason.as_deref() == Some("Preempted"))
                    .then_some(())
                    .ok_or_else(|| "none".to_string())
            }
        })
        .await;
        // An unknown class is refused at admission.
        let err = pods.create(&PostParams::default(), &pod("nope", json!({}), big("missing"))).await.unwrap_err();
        assert!(err.to_string().contains("no PriorityClass with name missing was found"), "{err}");
    });
}

const CONFIG: &str = r#"apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
leaderElection:
  leaderElect: true
  leaseDuration: 15s
  renewDeadline: 10s
  retryPeriod: 1s
profiles:
- schedulerName: default-scheduler
- schedulerName: bin-packer
  plugins:
    score:
      disabled:
      - name: NodeResourcesBalancedAllocation
      - name: PodTopologySpread
  pluginConfig:
  - name: NodeResourcesFit
    args:
      scoringStrategy:
        type: MostAllocated
"#;

#[test]
fn a_second_profile_from_the_configuration_file() {
    let c = Cluster::start_all(
        Backend::Sqlite,
        &["--sim-nodes", "3", "--sim-cpu", "4", "--disable-scheduler"],
    );
    let config = c.dir.path().join("scheduler.yaml");
    std::fs::write(&config, CONFIG).unwrap();
    let _scheduler = rkube(&c, &["scheduler", "--config", config.to_str().unwrap()]);
    support::runtime().block_on(async {
        let client = c.client().await;
        let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
        wait_nodes(&client, 3).await;
        // The scheduler leads on the kube-scheduler Lease.
        let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-system");
        eventually("the kube-scheduler Lease", || {
            let leases = leases.clone();
            async move {
                let l = leases
                    .get("kube-scheduler")
                    .await
                    .map_err(|e| e.to_string())?;
                l.spec
                    .and_then(|s| s.holder_identity)
                    .filter(|h| !h.is_empty())
                    .ok_or("no holder".to_string())
            }
        })
        .await;
        create(
            &pods,
            pod("nobody", json!({}), json!({"schedulerName": "nobody"})),
        )
        .await;
        for i in 0..4 {
            create(
                &pods,
                pod(
                    &format!("packed-{i}"),
                    json!({}),
                    json!({"schedulerName": "bin-packer"}),
                ),
            )
            .await;
        }
        let mut nodes = HashSet::new();
        for i in 0..4 {
            let name = format!("packed-{i}");
            nodes.insert(eventually("packed pod bound", || bound_node(&pods, &name)).await);
        }
        assert_eq!(nodes.len(), 1, "MostAllocated packs the pods: {nodes:?}");
        create(&pods, pod("default", json!({}), json!({}))).await;
        eventually("default-profile pod bound", || bound_node(&pods, "default")).await;
        // A pod naming no profile is left alone: not bound, no condition written.
        let p = pods.get("nobody").await.unwrap();
        assert!(p.spec.and_then(|s| s.node_name).is_none());
        let conditions = p.status.and_then(|s| s.conditions).unwrap_or_default();
        assert!(
            conditions.iter().all(|c| c.type_ != "PodScheduled"),
            "{conditions:?}"
        );
    });
    // An invalid file is refused at start.
    std::fs::write(&config, "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nparallelism: 0\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rkube"))
        .args([
            "scheduler",
            "--config",
            config.to_str().unwrap(),
            "--kubeconfig",
        ])
        .arg(&c.kubeconfig)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("parallelism"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
