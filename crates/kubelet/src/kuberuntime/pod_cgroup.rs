//! The pod-level cgroup's limits (upstream `pkg/kubelet/cm/helpers_linux.go` `ResourceConfigForPod`
//! and the pod container manager): the pod cgroup (`<root>/kubepods[/<qos>]/pod<uid>`, the parent
//! of the sandbox and every container) gets `cpu.shares` from the pod's requests, a CFS quota from
//! its limits and a memory limit, by QoS class: Guaranteed all of them, Burstable the quota and
//! memory only when every container declares that limit, BestEffort the minimum shares only.
//! cgroup v1 with the cgroupfs driver (what this node runs); the kubelet writes the files itself
//! before the sandbox starts (runc then creates the containers' cgroups below it).
//!
//! On an in-place resize upstream orders the writes by direction: a limit that grows is written to
//! the pod before the containers, one that shrinks after them, so the pod cgroup never holds its
//! containers below their own limits. [`write`] takes the direction to write.

use std::path::{Path, PathBuf};

use apimachinery::quota::pods::{pod_limits, pod_requests};
use k8s_openapi::api::core::v1::Pod;

use super::config::qos_class;

const MIN_SHARES: u64 = 2;
const MAX_SHARES: u64 = 262_144;
const PERIOD: u64 = 100_000;
const MIN_QUOTA: i64 = 1000;

/// What the pod cgroup is given; `None`: left as the kernel's default (unlimited).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PodCgroupConfig {
    pub cpu_shares: u64,
    /// `cpu.cfs_quota_us` (with a period of 100 ms).
    pub cpu_quota: Option<i64>,
    pub memory_limit: Option<i64>,
}

/// Upstream `MilliCPUToShares`.
fn shares(milli: i64) -> u64 {
    if milli <= 0 {
        return MIN_SHARES;
    }
    ((milli as u64).saturating_mul(1024) / 1000).clamp(MIN_SHARES, MAX_SHARES)
}

/// Upstream `MilliCPUToQuota` (0 for no limit, at least 1 ms a period otherwise).
fn quota(milli: i64) -> i64 {
    if milli <= 0 {
        return 0;
    }
    (milli.saturating_mul(PERIOD as i64) / 1000).max(MIN_QUOTA)
}

/// Upstream `ResourceConfigForPod` (CFS quota enforced, no hugepages).
pub fn config_for_pod(pod: &Pod) -> PodCgroupConfig {
    let requests = pod_requests(pod).unwrap_or_default();
    let limits = pod_limits(pod).unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let declared = |name: &str| {
        spec.containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .all(|c| {
                c.resources
                    .as_ref()
                    .and_then(|r| r.limits.as_ref())
                    .and_then(|l| l.get(name))
                    .and_then(|q| apimachinery::quantity::Quantity::parse(&q.0).ok())
                    .is_some_and(|q| q.milli_value() != 0)
            })
    };
    let milli = |l: &apimachinery::quota::ResourceList, n: &str| {
        l.get(n).map(|q| q.milli_value()).unwrap_or(0)
    };
    let cpu_shares = shares(milli(&requests, "cpu"));
    let cpu_quota = quota(milli(&limits, "cpu"));
    let memory = limits.get("memory").map(|q| q.value()).unwrap_or(0);
    match qos_class(pod).as_str() {
        "Guaranteed" => PodCgroupConfig {
            cpu_shares,
            cpu_quota: Some(cpu_quota),
            memory_limit: Some(memory),
        },
        "Burstable" => PodCgroupConfig {
            cpu_shares,
            cpu_quota: declared("cpu").then_some(cpu_quota),
            memory_limit: declared("memory").then_some(memory),
        },
        _ => PodCgroupConfig {
            cpu_shares: MIN_SHARES,
            cpu_quota: None,
            memory_limit: None,
        },
    }
}

/// Which writes to make: everything (a new pod), or only the values that grow or shrink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    All,
    Grow,
    Shrink,
}

/// The cgroup v1 mount points of the `cpu` and `memory` controllers.
pub fn hierarchies() -> (PathBuf, PathBuf) {
    let base = Path::new("/sys/fs/cgroup");
    let cpu = ["cpu", "cpu,cpuacct", "cpuacct,cpu"]
        .iter()
        .map(|d| base.join(d))
        .find(|p| p.join("cpu.shares").exists())
        .unwrap_or_else(|| base.join("cpu"));
    (cpu, base.join("memory"))
}

/// Writes `config` to the pod cgroup `parent` (relative to each hierarchy's root), creating it.
/// Values the direction does not cover, or that already hold, are left alone.
pub fn write(parent: &str, config: &PodCgroupConfig, direction: Direction) -> Result<(), String> {
    let (cpu, memory) = hierarchies();
    write_in(&cpu, &memory, parent, config, direction)
}

fn write_in(
    cpu: &Path,
    memory: &Path,
    parent: &str,
    config: &PodCgroupConfig,
    direction: Direction,
) -> Result<(), String> {
    let rel = parent.trim_start_matches('/');
    let files: [(&Path, &str, i64); 4] = [
        (cpu, "cpu.cfs_period_us", PERIOD as i64),
        (cpu, "cpu.shares", config.cpu_shares as i64),
        (
            cpu,
            "cpu.cfs_quota_us",
            config.cpu_quota.filter(|q| *q > 0).unwrap_or(-1),
        ),
        (
            memory,
            "memory.limit_in_bytes",
            config.memory_limit.filter(|m| *m > 0).unwrap_or(-1),
        ),
    ];
    for (root, file, value) in files {
        let dir = root.join(rel);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join(file);
        let current: Option<i64> = std::fs::read_to_string(&path)
            .ok()
            .and_then(|s| s.trim().parse::<i128>().ok())
            .map(|v| v.min(i64::MAX as i128) as i64);
        // -1 (written) and the kernel's page-rounded maximum (read back for memory) both mean
        // "no limit": compare them as the largest value.
        let as_limit = |v: i64| {
            if !(0..1 << 62).contains(&v) {
                i64::MAX
            } else {
                v
            }
        };
        let wanted = as_limit(value);
        let write = match (direction, current.map(as_limit)) {
            (_, Some(c)) if c == wanted => false,
            (Direction::All, _) | (_, None) => true,
            (Direction::Grow, Some(c)) => wanted > c,
            (Direction::Shrink, Some(c)) => wanted < c,
        };
        if write {
            std::fs::write(&path, value.to_string())
                .map_err(|e| format!("{}: {e}", path.display()))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": "p", "uid": "u"},
            "spec": {"containers": containers}}))
        .unwrap()
    }

    #[test]
    fn guaranteed_pods_get_every_limit() {
        let p = pod(json!([
            {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "64Mi"},
                "limits": {"cpu": "500m", "memory": "64Mi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "250m", "memory": "32Mi"},
                "limits": {"cpu": "250m", "memory": "32Mi"}}}]));
        assert_eq!(
            config_for_pod(&p),
            PodCgroupConfig {
                cpu_shares: 768,
                cpu_quota: Some(75_000),
                memory_limit: Some(96 << 20),
            }
        );
    }

    #[test]
    fn burstable_pods_get_only_the_limits_every_container_declares() {
        let p = pod(json!([
            {"name": "a", "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m", "memory": "64Mi"}}},
            {"name": "b", "resources": {"requests": {"cpu": "100m"}, "limits": {"cpu": "200m"}}}]));
        assert_eq!(
            config_for_pod(&p),
            PodCgroupConfig {
                cpu_shares: 204,
                cpu_quota: Some(40_000),
                memory_limit: None,
            }
        );
        let p = pod(json!([
            {"name": "a", "resources": {"requests": {"cpu": "1m", "memory": "1Mi"}}}]));
        assert_eq!(
            config_for_pod(&p),
            PodCgroupConfig {
                cpu_shares: 2,
                cpu_quota: None,
                memory_limit: None,
            }
        );
    }

    #[test]
    fn best_effort_pods_get_the_minimum_shares() {
        let p = pod(json!([{"name": "a"}]));
        assert_eq!(
            config_for_pod(&p),
            PodCgroupConfig {
                cpu_shares: 2,
                cpu_quota: None,
                memory_limit: None,
            }
        );
    }

    #[test]
    fn writes_follow_the_direction() {
        let dir = tempfile::tempdir().unwrap();
        let (cpu, mem) = (dir.path().join("cpu"), dir.path().join("memory"));
        let read = |root: &Path, f: &str| {
            std::fs::read_to_string(root.join("kubepods/podu").join(f)).unwrap()
        };
        let small = PodCgroupConfig {
            cpu_shares: 204,
            cpu_quota: Some(40_000),
            memory_limit: Some(128 << 20),
        };
        write_in(&cpu, &mem, "/kubepods/podu", &small, Direction::All).unwrap();
        assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "40000");
        assert_eq!(read(&cpu, "cpu.cfs_period_us"), "100000");
        assert_eq!(
            read(&mem, "memory.limit_in_bytes"),
            (128u64 << 20).to_string()
        );
        // More cpu, less memory: growing writes the quota only, shrinking the memory only.
        let resized = PodCgroupConfig {
            cpu_quota: Some(50_000),
            memory_limit: Some(96 << 20),
            ..small
        };
        write_in(&cpu, &mem, "/kubepods/podu", &resized, Direction::Grow).unwrap();
        assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "50000");
        assert_eq!(
            read(&mem, "memory.limit_in_bytes"),
            (128u64 << 20).to_string()
        );
        write_in(&cpu, &mem, "/kubepods/podu", &resized, Direction::Shrink).unwrap();
        assert_eq!(
            read(&mem, "memory.limit_in_bytes"),
            (96u64 << 20).to_string()
        );
        // No quota any more counts as growing (to unlimited, -1).
        let unlimited = PodCgroupConfig {
            cpu_quota: None,
            ..resized
        };
        write_in(&cpu, &mem, "/kubepods/podu", &unlimited, Direction::Shrink).unwrap();
        assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "50000");
        write_in(&cpu, &mem, "/kubepods/podu", &unlimited, Direction::Grow).unwrap();
        assert_eq!(read(&cpu, "cpu.cfs_quota_us"), "-1");
    }
}
