//! The kubelet's resource statistics (upstream `pkg/kubelet/stats` and `server/stats`): the
//! `stats/v1alpha1` Summary served at `/stats/summary`, and the same figures as Prometheus text at
//! `/metrics/resource` ([`prometheus`]), which metrics-server (here: the API server's scraper)
//! reads.
//!
//! Sources: containers from CRI `ListContainerStats` (containerd 1.6 answers it with CPU time,
//! memory and the writable layer), completed from the container's cgroup v1 files where the runtime
//! leaves a figure out; pods from their cgroup (`<cgroup-root>/kubepods/<qos>/pod<uid>`, which holds
//! the sandbox and every container, as cadvisor reports pods); the node from `/proc`. CPU rates
//! (`usageNanoCores`) come from the last sample kept per container ([`rate`]).
//!
//! Volume figures come from a cache a background task refreshes ([`volume`]).
//!
//! Differences: no `systemContainers`, no per-pod network (it lives in the pod's namespace), no
//! `imageFs`/`containerFs`; `ListPodSandboxStats` is not used (the pod cgroup gives
//! the same figures without a round trip).

pub mod cgroup;
pub mod prometheus;
pub mod rate;
pub mod volume;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Map, Value};

use crate::kubelet::Kubelet;

/// How long the runtime may take to answer `ListContainerStats`.
const CRI_TIMEOUT: Duration = Duration::from_secs(5);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Cpu {
    pub time_nanos: i64,
    pub usage_core_nano_seconds: u64,
    pub usage_nano_cores: Option<u64>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    pub time_nanos: i64,
    pub figures: cgroup::Memory,
}

#[derive(Clone, Debug, Default)]
pub struct ContainerStats {
    pub name: String,
    pub start_time: Option<String>,
    pub cpu: Option<Cpu>,
    pub memory: Option<Memory>,
    /// The writable layer's size (CRI), and the log files' total size.
    pub rootfs_used_bytes: Option<u64>,
    pub logs_used_bytes: Option<u64>,
}

#[derive(Clone, Debug, Default)]
pub struct PodStats {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub start_time: Option<String>,
    pub containers: Vec<ContainerStats>,
    pub cpu: Option<Cpu>,
    pub memory: Option<Memory>,
    /// The pod's volumes as last measured.
    pub volumes: Option<Arc<Vec<volume::VolumeStats>>>,
}

#[derive(Clone, Debug, Default)]
pub struct NodeStats {
    pub name: String,
    pub start_time: Option<String>,
    pub cpu: Option<Cpu>,
    pub memory: Option<Memory>,
    pub fs: Option<cgroup::FsUsage>,
    pub interfaces: Vec<cgroup::Interface>,
    pub time_nanos: i64,
}

#[derive(Clone, Debug, Default)]
pub struct Summary {
    pub node: NodeStats,
    pub pods: Vec<PodStats>,
    /// Some source failed (the runtime did not answer): `resource_scrape_error 1`.
    pub errors: bool,
}

/// Collects statistics; one per kubelet server (it keeps the CPU samples).
pub struct Provider {
    pub hierarchies: cgroup::Hierarchies,
    pub rates: rate::CpuRates,
    pub proc_root: PathBuf,
    /// Refreshed by [`volume::Cache::run`], which the kubelet server starts.
    pub volumes: Arc<volume::Cache>,
}

impl Default for Provider {
    fn default() -> Self {
        Provider {
            hierarchies: cgroup::Hierarchies::detect(),
            rates: Default::default(),
            proc_root: PathBuf::from("/proc"),
            volumes: Default::default(),
        }
    }
}

fn now_nanos() -> i64 {
    jiff::Timestamp::now().as_nanosecond() as i64
}

/// `metav1.Time` as upstream writes it (seconds, UTC).
pub fn rfc3339(nanos: i64) -> String {
    jiff::Timestamp::from_nanosecond(nanos as i128)
        .map(|t| t.strftime("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// The id in a status's `containerID` (`containerd://<id>`).
fn container_id(status: &Value) -> Option<&str> {
    status
        .get("containerID")
        .and_then(Value::as_str)
        .and_then(|s| s.split_once("://").map(|(_, id)| id))
        .filter(|id| !id.is_empty())
}

/// Total size of the files directly in `dir` (a container's log files).
fn dir_size(dir: &Path) -> Option<u64> {
    let entries = std::fs::read_dir(dir).ok()?;
    Some(
        entries
            .filter_map(Result::ok)
            .filter_map(|e| e.metadata().ok())
            .filter(|m| m.is_file())
            .map(|m| m.len())
            .sum(),
    )
}

impl Provider {
    fn cpu(&self, key: &str, at: i64, usage: Option<u64>) -> Option<Cpu> {
        let usage = usage?;
        Some(Cpu {
            time_nanos: at,
            usage_core_nano_seconds: usage,
            usage_nano_cores: self.rates.observe(key, at, usage),
        })
    }

    /// The node's figures from `/proc` and the kubelet's root directory.
    fn node(&self, kubelet: &Kubelet, live: &mut HashSet<String>) -> NodeStats {
        let at = now_nanos();
        let read = |f: &str| std::fs::read_to_string(self.proc_root.join(f)).unwrap_or_default();
        let stat = read("stat");
        let boot = stat
            .lines()
            .find_map(|l| l.strip_prefix("btime "))
            .and_then(|s| s.trim().parse::<i64>().ok());
        live.insert("node".into());
        NodeStats {
            name: kubelet.config.node_name.clone(),
            start_time: boot.map(|b| rfc3339(b * 1_000_000_000)),
            cpu: self.cpu("node", at, cgroup::node_cpu_nanos(&stat)),
            memory: cgroup::node_memory(&read("meminfo")).map(|figures| Memory {
                time_nanos: at,
                figures,
            }),
            fs: cgroup::fs_usage(&kubelet.config.root_dir),
            interfaces: cgroup::interfaces(&read("net/dev")),
            time_nanos: at,
        }
    }

    /// Everything at this moment. `ListContainerStats` failing is not fatal: the cgroup files
    /// still give CPU and memory, and the summary says an error happened.
    pub async fn collect(&self, kubelet: &Kubelet) -> Summary {
        let mut errors = false;
        let cri: HashMap<String, crate::cri::api::ContainerStats> = {
            let mut client = kubelet.runtime.runtime.clone();
            let call = client
                .list_container_stats(crate::cri::api::ListContainerStatsRequest { filter: None });
            match tokio::time::timeout(CRI_TIMEOUT, call).await {
                Ok(Ok(resp)) => resp
                    .into_inner()
                    .stats
                    .into_iter()
                    .filter_map(|s| Some((s.attributes.as_ref()?.id.clone(), s)))
                    .collect(),
                Ok(Err(e)) => {
                    tracing::debug!(error = %e, "CRI ListContainerStats");
                    errors = true;
                    HashMap::new()
                }
                Err(_) => {
                    errors = true;
                    HashMap::new()
                }
            }
        };
        let mut live = HashSet::new();
        let node = self.node(kubelet, &mut live);
        let mut pods = Vec::new();
        for view in kubelet.pod_views() {
            let statuses: Vec<&Value> = view
                .status
                .get("containerStatuses")
                .and_then(Value::as_array)
                .map(|a| a.iter().collect())
                .unwrap_or_default();
            let running: Vec<&Value> = statuses
                .into_iter()
                .filter(|s| s.pointer("/state/running").is_some() && container_id(s).is_some())
                .collect();
            if running.is_empty() {
                continue;
            }
            let parent = crate::kuberuntime::config::pod_cgroup_parent(
                &kubelet.config.cgroup_root,
                &view.pod,
            );
            let log_dir = crate::cri::logs::pod_log_dir(
                &kubelet.config.pod_logs_dir,
                &view.namespace,
                &view.name,
                &view.uid,
            );
            let mut containers = Vec::new();
            for status in running {
                let (Some(id), Some(name)) = (
                    container_id(status),
                    status.get("name").and_then(Value::as_str),
                ) else {
                    continue;
                };
                let at = now_nanos();
                let files = cgroup::read(&self.hierarchies, &format!("{parent}/{id}"));
                let from_cri = cri.get(id);
                let u64_of = |v: &Option<crate::cri::api::UInt64Value>| v.as_ref().map(|v| v.value);
                let cpu_usage = from_cri
                    .and_then(|s| s.cpu.as_ref())
                    .and_then(|c| u64_of(&c.usage_core_nano_seconds))
                    .or(files.usage_core_nano_seconds);
                let memory = match (files.memory, from_cri.and_then(|s| s.memory.as_ref())) {
                    (Some(mut m), Some(c)) => {
                        // The runtime's working set is the one the runtime's users see.
                        if let Some(ws) = u64_of(&c.working_set_bytes) {
                            m.working_set_bytes = ws;
                        }
                        Some(m)
                    }
                    (Some(m), None) => Some(m),
                    (None, Some(c)) => u64_of(&c.working_set_bytes).map(|ws| cgroup::Memory {
                        working_set_bytes: ws,
                        usage_bytes: u64_of(&c.usage_bytes).unwrap_or(ws),
                        rss_bytes: u64_of(&c.rss_bytes).unwrap_or(0),
                        page_faults: u64_of(&c.page_faults).unwrap_or(0),
                        major_page_faults: u64_of(&c.major_page_faults).unwrap_or(0),
                        limit_bytes: None,
                    }),
                    (None, None) => None,
                };
                live.insert(id.to_string());
                containers.push(ContainerStats {
                    name: name.to_string(),
                    start_time: status
                        .pointer("/state/running/startedAt")
                        .and_then(Value::as_str)
                        .map(str::to_string),
                    cpu: self.cpu(id, at, cpu_usage),
                    memory: memory.map(|figures| Memory {
                        time_nanos: at,
                        figures,
                    }),
                    rootfs_used_bytes: from_cri
                        .and_then(|s| s.writable_layer.as_ref())
                        .and_then(|w| u64_of(&w.used_bytes)),
                    logs_used_bytes: dir_size(&log_dir.join(name)),
                });
            }
            let at = now_nanos();
            let files = cgroup::read(&self.hierarchies, &parent);
            let key = format!("pod/{}", view.uid);
            live.insert(key.clone());
            pods.push(PodStats {
                start_time: view
                    .status
                    .get("startTime")
                    .and_then(Value::as_str)
                    .map(str::to_string),
                cpu: self.cpu(&key, at, files.usage_core_nano_seconds),
                memory: files.memory.map(|figures| Memory {
                    time_nanos: at,
                    figures,
                }),
                volumes: self.volumes.get(&view.uid),
                name: view.name,
                namespace: view.namespace,
                uid: view.uid,
                containers,
            });
        }
        self.rates.retain(&live);
        pods.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
        Summary { node, pods, errors }
    }
}

fn cpu_json(c: &Cpu) -> Value {
    let mut m = Map::new();
    m.insert("time".into(), json!(rfc3339(c.time_nanos)));
    if let Some(rate) = c.usage_nano_cores {
        m.insert("usageNanoCores".into(), json!(rate));
    }
    m.insert(
        "usageCoreNanoSeconds".into(),
        json!(c.usage_core_nano_seconds),
    );
    Value::Object(m)
}

fn memory_json(m: &Memory) -> Value {
    let f = &m.figures;
    let mut out = json!({
        "time": rfc3339(m.time_nanos),
        "usageBytes": f.usage_bytes,
        "workingSetBytes": f.working_set_bytes,
        "rssBytes": f.rss_bytes,
        "pageFaults": f.page_faults,
        "majorPageFaults": f.major_page_faults,
    });
    // Upstream: available = limit - working set, only when there is a limit.
    if let Some(limit) = f.limit_bytes {
        out["availableBytes"] = json!(limit.saturating_sub(f.working_set_bytes));
    }
    out
}

fn used_json(time: &str, used: u64) -> Value {
    json!({"time": time, "usedBytes": used})
}

/// Upstream `VolumeStats`: the `FsStats` figures, the volume's name and its claim.
fn volume_json(v: &volume::VolumeStats) -> Value {
    let mut out = json!({
        "time": rfc3339(v.time_nanos),
        "availableBytes": v.available_bytes,
        "capacityBytes": v.capacity_bytes,
        "usedBytes": v.used_bytes,
        "inodesFree": v.inodes_free,
        "inodes": v.inodes,
        "inodesUsed": v.inodes_used,
        "name": v.name,
    });
    if let Some((namespace, name)) = &v.pvc {
        out["pvcRef"] = json!({"name": name, "namespace": namespace});
    }
    out
}

fn insert_some(obj: &mut Value, key: &str, v: Option<Value>) {
    if let Some(v) = v {
        obj[key] = v;
    }
}

impl Summary {
    /// The `stats/v1alpha1` Summary; `only_cpu_and_memory` as upstream's query parameter.
    pub fn to_json(&self, only_cpu_and_memory: bool) -> Value {
        let n = &self.node;
        let time = rfc3339(n.time_nanos);
        let mut node = json!({"nodeName": n.name});
        insert_some(
            &mut node,
            "startTime",
            n.start_time.clone().map(Value::from),
        );
        insert_some(&mut node, "cpu", n.cpu.as_ref().map(cpu_json));
        insert_some(&mut node, "memory", n.memory.as_ref().map(memory_json));
        if !only_cpu_and_memory {
            if let Some(first) = n.interfaces.first() {
                let iface = |i: &cgroup::Interface| {
                    json!({"name": i.name, "rxBytes": i.rx_bytes, "rxErrors": i.rx_errors,
                           "txBytes": i.tx_bytes, "txErrors": i.tx_errors})
                };
                let mut net = iface(first);
                net["time"] = json!(time);
                net["interfaces"] = n.interfaces.iter().map(iface).collect();
                node["network"] = net;
            }
            if let Some(fs) = &n.fs {
                node["fs"] = json!({
                    "time": time,
                    "availableBytes": fs.available_bytes,
                    "capacityBytes": fs.capacity_bytes,
                    "usedBytes": fs.used_bytes,
                    "inodesFree": fs.inodes_free,
                    "inodes": fs.inodes,
                    "inodesUsed": fs.inodes.saturating_sub(fs.inodes_free),
                });
            }
        }
        let pods: Vec<Value> = self
            .pods
            .iter()
            .map(|p| {
                let mut ephemeral = 0u64;
                let containers: Vec<Value> = p
                    .containers
                    .iter()
                    .map(|c| {
                        let mut v = json!({"name": c.name});
                        insert_some(&mut v, "startTime", c.start_time.clone().map(Value::from));
                        insert_some(&mut v, "cpu", c.cpu.as_ref().map(cpu_json));
                        insert_some(&mut v, "memory", c.memory.as_ref().map(memory_json));
                        if !only_cpu_and_memory {
                            ephemeral += c.rootfs_used_bytes.unwrap_or(0);
                            ephemeral += c.logs_used_bytes.unwrap_or(0);
                            insert_some(
                                &mut v,
                                "rootfs",
                                c.rootfs_used_bytes.map(|u| used_json(&time, u)),
                            );
                            insert_some(
                                &mut v,
                                "logs",
                                c.logs_used_bytes.map(|u| used_json(&time, u)),
                            );
                        }
                        v
                    })
                    .collect();
                let mut v = json!({
                    "podRef": {"name": p.name, "namespace": p.namespace, "uid": p.uid},
                    "containers": containers,
                });
                insert_some(&mut v, "startTime", p.start_time.clone().map(Value::from));
                insert_some(&mut v, "cpu", p.cpu.as_ref().map(cpu_json));
                insert_some(&mut v, "memory", p.memory.as_ref().map(memory_json));
                if !only_cpu_and_memory {
                    let volumes = p.volumes.as_deref().map(Vec::as_slice).unwrap_or(&[]);
                    // Upstream: a pod's ephemeral storage counts its non-claim volumes too.
                    ephemeral += volumes
                        .iter()
                        .filter(|v| v.pvc.is_none())
                        .map(|v| v.used_bytes)
                        .sum::<u64>();
                    v["ephemeral-storage"] = used_json(&time, ephemeral);
                    if !volumes.is_empty() {
                        v["volume"] = volumes.iter().map(volume_json).collect();
                    }
                }
                v
            })
            .collect();
        json!({"node": node, "pods": pods})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Summary {
        let mem = cgroup::Memory {
            usage_bytes: 100,
            working_set_bytes: 80,
            rss_bytes: 50,
            page_faults: 1,
            major_page_faults: 0,
            limit_bytes: Some(1000),
        };
        Summary {
            node: NodeStats {
                name: "n1".into(),
                cpu: Some(Cpu {
                    time_nanos: 1_700_000_000_000_000_000,
                    usage_core_nano_seconds: 5_000_000_000,
                    usage_nano_cores: Some(1_500_000_000),
                }),
                memory: Some(Memory {
                    time_nanos: 1_700_000_000_000_000_000,
                    figures: mem,
                }),
                time_nanos: 1_700_000_000_000_000_000,
                ..Default::default()
            },
            pods: vec![PodStats {
                name: "web".into(),
                namespace: "default".into(),
                uid: "u1".into(),
                containers: vec![ContainerStats {
                    name: "app".into(),
                    cpu: Some(Cpu {
                        time_nanos: 1_700_000_000_000_000_000,
                        usage_core_nano_seconds: 2_500_000_000,
                        usage_nano_cores: None,
                    }),
                    memory: Some(Memory {
                        time_nanos: 1_700_000_000_000_000_000,
                        figures: cgroup::Memory {
                            limit_bytes: None,
                            ..mem
                        },
                    }),
                    rootfs_used_bytes: Some(4096),
                    logs_used_bytes: Some(10),
                    ..Default::default()
                }],
                volumes: Some(Arc::new(vec![
                    volume::VolumeStats {
                        name: "cache".into(),
                        used_bytes: 100,
                        ..Default::default()
                    },
                    volume::VolumeStats {
                        name: "data".into(),
                        pvc: Some(("default".into(), "data-web-0".into())),
                        used_bytes: 5000,
                        capacity_bytes: 9000,
                        inodes_used: 3,
                        time_nanos: 1_700_000_000_000_000_000,
                        ..Default::default()
                    },
                ])),
                ..Default::default()
            }],
            errors: false,
        }
    }

    #[test]
    fn summary_as_upstream_writes_it() {
        let s = sample().to_json(false);
        assert_eq!(s["node"]["nodeName"], "n1");
        assert_eq!(s["node"]["cpu"]["time"], "2023-11-14T22:13:20Z");
        assert_eq!(s["node"]["cpu"]["usageNanoCores"], 1_500_000_000u64);
        assert_eq!(s["node"]["memory"]["availableBytes"], 920);
        let c = &s["pods"][0]["containers"][0];
        assert_eq!(c["cpu"]["usageCoreNanoSeconds"], 2_500_000_000u64);
        assert!(
            c["cpu"].get("usageNanoCores").is_none(),
            "one sample: no rate"
        );
        assert!(c["memory"].get("availableBytes").is_none(), "no limit");
        assert_eq!(c["rootfs"]["usedBytes"], 4096);
        assert_eq!(
            s["pods"][0]["ephemeral-storage"]["usedBytes"], 4206,
            "rootfs, logs and the non-claim volume"
        );
        let volumes = &s["pods"][0]["volume"];
        assert_eq!(volumes[0]["name"], "cache");
        assert!(volumes[0].get("pvcRef").is_none());
        assert_eq!(volumes[1]["pvcRef"]["name"], "data-web-0");
        assert_eq!(volumes[1]["pvcRef"]["namespace"], "default");
        assert_eq!(volumes[1]["usedBytes"], 5000);
        assert_eq!(volumes[1]["capacityBytes"], 9000);
        assert_eq!(volumes[1]["inodesUsed"], 3);
        assert_eq!(volumes[1]["time"], "2023-11-14T22:13:20Z");
        assert_eq!(s["pods"][0]["podRef"]["uid"], "u1");
        let only = sample().to_json(true);
        assert!(only["pods"][0]["containers"][0].get("rootfs").is_none());
        assert!(only["pods"][0].get("ephemeral-storage").is_none());
        assert!(only["pods"][0].get("volume").is_none());
    }

    #[test]
    fn container_ids_come_from_the_status() {
        assert_eq!(
            container_id(&json!({"containerID": "containerd://abc"})),
            Some("abc")
        );
        assert_eq!(container_id(&json!({"containerID": "containerd://"})), None);
        assert_eq!(container_id(&json!({})), None);
    }
}
