//! Usage of pods on simulated nodes, from annotations (the shared convention of rkube's simulated
//! cluster): `sim.rkube.io/cpu-usage` (a CPU quantity, `250m`) and `sim.rkube.io/memory-usage` (a
//! memory quantity, `64Mi`) give the whole pod's usage, split evenly over its containers (the
//! remainder to the first, so the sum is exact); a pod without them uses nothing. A simulated
//! node's usage is the sum of its Running pods'.

use apimachinery::quantity::Quantity;
use serde_json::Value;

use super::{ContainerUsage, PodUsage, Usage};

pub const MANAGED_LABEL: &str = "sim.rkube.io/managed";
pub const CPU_ANNOTATION: &str = "sim.rkube.io/cpu-usage";
pub const MEMORY_ANNOTATION: &str = "sim.rkube.io/memory-usage";

fn annotation<'a>(pod: &'a Value, key: &str) -> Option<&'a str> {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(key))
        .and_then(Value::as_str)
}

/// A pod's (CPU nanocores, memory bytes); a malformed or negative annotation counts as 0.
pub fn pod_totals(pod: &Value) -> (u64, u64) {
    let parse = |key: &str| annotation(pod, key).and_then(|v| Quantity::parse(v.trim()).ok());
    let cpu = parse(CPU_ANNOTATION)
        .map(|q| (q.as_f64() * 1e9).round().max(0.0) as u64)
        .unwrap_or(0);
    let memory = parse(MEMORY_ANNOTATION)
        .map(|q| q.value().max(0) as u64)
        .unwrap_or(0);
    (cpu, memory)
}

fn split(total: u64, n: usize, i: usize) -> u64 {
    let n = n.max(1) as u64;
    total / n + if i == 0 { total % n } else { 0 }
}

fn now_ms() -> i64 {
    chrono::Utc::now().timestamp_millis()
}

pub fn pod_usage(pod: &Value, window_ms: i64) -> PodUsage {
    let (cpu, memory) = pod_totals(pod);
    let names: Vec<&str> = pod
        .pointer("/spec/containers")
        .and_then(Value::as_array)
        .map(|c| c.iter().filter_map(|c| c["name"].as_str()).collect())
        .unwrap_or_default();
    let n = names.len();
    PodUsage {
        namespace: crate::objects::namespace(pod).to_string(),
        name: crate::objects::name(pod).to_string(),
        timestamp_ms: now_ms(),
        window_ms,
        containers: names
            .into_iter()
            .enumerate()
            .map(|(i, name)| ContainerUsage {
                name: name.to_string(),
                cpu_nanocores: split(cpu, n, i),
                memory_bytes: split(memory, n, i),
            })
            .collect(),
    }
}

/// The sum over the Running pods of `pods` bound to `node`.
pub fn node_usage(node: &str, pods: &[Value], window_ms: i64) -> Usage {
    let (mut cpu, mut memory) = (0u64, 0u64);
    for p in pods {
        let running = p.pointer("/status/phase").and_then(Value::as_str) == Some("Running");
        if running && p.pointer("/spec/nodeName").and_then(Value::as_str) == Some(node) {
            let (c, m) = pod_totals(p);
            cpu = cpu.saturating_add(c);
            memory = memory.saturating_add(m);
        }
    }
    Usage {
        cpu_nanocores: cpu,
        memory_bytes: memory,
        timestamp_ms: now_ms(),
        window_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, cpu: Option<&str>, mem: Option<&str>, containers: &[&str]) -> Value {
        let mut annotations = serde_json::Map::new();
        if let Some(c) = cpu {
            annotations.insert(CPU_ANNOTATION.into(), c.into());
        }
        if let Some(m) = mem {
            annotations.insert(MEMORY_ANNOTATION.into(), m.into());
        }
        json!({
            "metadata": {"name": name, "namespace": "default", "annotations": annotations},
            "spec": {"nodeName": "sim-1", "containers": containers.iter().map(|c| json!({"name": c})).collect::<Vec<_>>()},
            "status": {"phase": "Running"},
        })
    }

    #[test]
    fn usage_is_split_over_containers() {
        let u = pod_usage(
            &pod("a", Some("250m"), Some("64Mi"), &["x", "y", "z"]),
            15_000,
        );
        let cpus: Vec<u64> = u.containers.iter().map(|c| c.cpu_nanocores).collect();
        assert_eq!(cpus, [83_333_334, 83_333_333, 83_333_333]);
        assert_eq!(cpus.iter().sum::<u64>(), 250_000_000);
        assert_eq!(u.containers[1].memory_bytes, 64 * 1024 * 1024 / 3);
        assert_eq!(u.window_ms, 15_000);
        let none = pod_usage(&pod("b", None, Some("nonsense"), &["x"]), 15_000);
        assert_eq!(
            (
                none.containers[0].cpu_nanocores,
                none.containers[0].memory_bytes
            ),
            (0, 0)
        );
        assert_eq!(
            pod_totals(&pod("c", Some("1.5"), Some("1G"), &["x"])),
            (1_500_000_000, 1_000_000_000)
        );
    }

    #[test]
    fn nodes_sum_their_running_pods() {
        let mut done = pod("done", Some("1"), Some("1Gi"), &["x"]);
        done["status"]["phase"] = "Succeeded".into();
        let mut elsewhere = pod("far", Some("1"), None, &["x"]);
        elsewhere["spec"]["nodeName"] = "sim-2".into();
        let pods = [
            pod("a", Some("250m"), Some("64Mi"), &["x"]),
            pod("b", Some("500m"), Some("64Mi"), &["x", "y"]),
            done,
            elsewhere,
        ];
        let u = node_usage("sim-1", &pods, 15_000);
        assert_eq!(u.cpu_nanocores, 750_000_000);
        assert_eq!(u.memory_bytes, 128 * 1024 * 1024);
    }
}
