//! Pod volume statistics (upstream `pkg/kubelet/server/stats`'s `fsResourceAnalyzer` and
//! `volumeStatCalculator`, with `pkg/volume/metrics_du.go` and `metrics_statfs.go`): for every
//! mounted volume of every pod, the bytes and inodes it uses and what its filesystem holds,
//! computed by a background task every `--volume-stats-agg-period` (upstream's default 1m), so a
//! `/stats/summary` or `/metrics` request only reads the cache and never walks a directory.
//!
//! How a volume is measured, as upstream's plugins choose:
//! - emptyDir, configMap, secret, downward API, projected: `du` (the blocks and inodes under the
//!   directory, one filesystem, hard links once), capacity and free space from `statfs`;
//! - `local` persistent volumes: `statfs` alone (upstream's local plugin: a local volume is a whole
//!   disk or partition);
//! - persistent volumes with a `hostPath` source (what `rkube.io/local-path` makes): `du` as an
//!   emptyDir. Upstream's hostPath plugin reports nothing (`MetricsNil`); a local-path directory is
//!   the claim's alone, so its `du` is the claim's use (k3s's local-path volumes report none).
//! - inline hostPath volumes: nothing, as upstream.
//!
//! Limits: one walk visits at most [`MAX_WALK_ENTRIES`] entries (a larger volume reports what was
//! counted until then, and a warning is logged); at most [`MAX_TRACKED_VOLUMES`] volumes are kept.

use std::collections::{HashMap, HashSet};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::cgroup;

/// At most this many directory entries are visited per volume per period.
pub const MAX_WALK_ENTRIES: u64 = 1_000_000;
/// At most this many volumes are measured (a kubelet has at most `maxPods` pods; this only bounds
/// what a misconfiguration could make it hold).
pub const MAX_TRACKED_VOLUMES: usize = 10_000;

/// How a volume's figures are obtained.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// The directory's own use (`du`), capacity from its filesystem.
    Du,
    /// The whole filesystem's figures (`statfs`).
    StatFs,
}

/// One mounted volume of a pod, as the volume manager set it up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// The pod's volume name.
    pub name: String,
    pub path: PathBuf,
    pub method: Method,
    /// The claim it comes from (PVC and generic ephemeral volumes): (namespace, name).
    pub pvc: Option<(String, String)>,
}

/// Upstream `VolumeStats` (`FsStats` with the volume's name and claim).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VolumeStats {
    pub name: String,
    pub pvc: Option<(String, String)>,
    pub time_nanos: i64,
    pub capacity_bytes: u64,
    pub available_bytes: u64,
    pub used_bytes: u64,
    pub inodes: u64,
    pub inodes_free: u64,
    pub inodes_used: u64,
}

/// What `du -x -s -B1` and `find -xdev | wc -l` print for `root`: bytes of the blocks allocated
/// under it (hard-linked files once) and the number of entries, itself included; `None` when the
/// root cannot be read. `truncated` when the walk stopped at `limit` entries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DiskUsage {
    pub bytes: u64,
    pub inodes: u64,
    pub truncated: bool,
}

pub fn disk_usage(root: &Path, limit: u64) -> Option<DiskUsage> {
    let meta = std::fs::symlink_metadata(root).ok()?;
    let dev = meta.dev();
    let mut usage = DiskUsage {
        bytes: meta.blocks().saturating_mul(512),
        inodes: 1,
        truncated: false,
    };
    // Hard links are counted once, as du does; only files with more than one link are remembered.
    let mut linked: HashSet<(u64, u64)> = HashSet::new();
    let mut dirs = if meta.is_dir() {
        vec![root.to_path_buf()]
    } else {
        Vec::new()
    };
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.filter_map(Result::ok) {
            if usage.inodes >= limit {
                usage.truncated = true;
                return Some(usage);
            }
            let Ok(m) = entry.metadata() else { continue };
            if m.dev() != dev {
                continue; // another filesystem mounted inside (`-x`)
            }
            if m.nlink() > 1 && !m.is_dir() && !linked.insert((m.dev(), m.ino())) {
                continue;
            }
            usage.inodes += 1;
            usage.bytes = usage.bytes.saturating_add(m.blocks().saturating_mul(512));
            if m.is_dir() {
                dirs.push(entry.path());
            }
        }
    }
    Some(usage)
}

/// Measures one volume now (blocking: it may walk a directory).
pub fn measure(source: &Source, now_nanos: i64) -> Option<VolumeStats> {
    let fs = cgroup::fs_usage(&source.path)?;
    let mut stats = VolumeStats {
        name: source.name.clone(),
        pvc: source.pvc.clone(),
        time_nanos: now_nanos,
        capacity_bytes: fs.capacity_bytes,
        available_bytes: fs.available_bytes,
        inodes: fs.inodes,
        inodes_free: fs.inodes_free,
        ..Default::default()
    };
    match source.method {
        Method::StatFs => {
            stats.used_bytes = fs.used_bytes;
            stats.inodes_used = fs.inodes.saturating_sub(fs.inodes_free);
        }
        Method::Du => {
            let du = disk_usage(&source.path, MAX_WALK_ENTRIES)?;
            if du.truncated {
                tracing::warn!(path = %source.path.display(), limit = MAX_WALK_ENTRIES,
                    "volume stats: too many entries, usage counted partly");
            }
            stats.used_bytes = du.bytes;
            stats.inodes_used = du.inodes;
        }
    }
    Some(stats)
}

/// The last figures of every pod's volumes, by pod UID.
#[derive(Default)]
pub struct Cache {
    pods: Mutex<HashMap<String, Arc<Vec<VolumeStats>>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Cache {
    /// The volumes of the pod with this UID, as last measured.
    pub fn get(&self, uid: &str) -> Option<Arc<Vec<VolumeStats>>> {
        lock(&self.pods).get(uid).cloned()
    }

    /// Every pod's volumes, as last measured.
    pub fn all(&self) -> Vec<Arc<Vec<VolumeStats>>> {
        lock(&self.pods).values().cloned().collect()
    }

    /// Measures `pods` (UID and mounted volumes) and replaces the cache with the result: pods no
    /// longer given are forgotten.
    pub fn refresh(&self, pods: &[(String, Arc<Vec<Source>>)], now_nanos: i64) {
        let mut out = HashMap::new();
        let mut budget = MAX_TRACKED_VOLUMES;
        for (uid, sources) in pods {
            let mut stats = Vec::new();
            for s in sources.iter() {
                if budget == 0 {
                    break;
                }
                budget -= 1;
                if let Some(v) = measure(s, now_nanos) {
                    stats.push(v);
                }
            }
            out.insert(uid.clone(), Arc::new(stats));
        }
        *lock(&self.pods) = out;
    }

    /// Refreshes every `period` from what `mounted` returns, until the task is dropped (upstream's
    /// `volumeStatCalculator` loop; the walk runs on the blocking pool).
    pub async fn run<F>(self: Arc<Self>, period: Duration, mounted: F)
    where
        F: Fn() -> Vec<(String, Arc<Vec<Source>>)> + Send + Sync + 'static,
    {
        if period.is_zero() {
            return; // upstream: a zero period turns volume stats off
        }
        let mounted = Arc::new(mounted);
        loop {
            let (cache, mounted) = (self.clone(), mounted.clone());
            let done = tokio::task::spawn_blocking(move || {
                let pods = mounted();
                cache.refresh(&pods, jiff::Timestamp::now().as_nanosecond() as i64);
            })
            .await;
            if let Err(e) = done {
                tracing::warn!(error = %e, "volume stats: measuring failed");
            }
            tokio::time::sleep(period).await;
        }
    }
}

/// A gauge's name, help and value.
type Gauge = (&'static str, &'static str, fn(&VolumeStats) -> u64);

/// `kubelet_volume_stats_*` (upstream `collectors/volume_stats.go`): one sample per claim
/// (namespace, name), the first pod's figures when several pods use one claim.
pub fn prometheus(pods: &[Arc<Vec<VolumeStats>>]) -> String {
    use std::fmt::Write;
    let mut seen = HashSet::new();
    let mut claims: Vec<&VolumeStats> = pods
        .iter()
        .flat_map(|p| p.iter())
        .filter(|v| v.pvc.as_ref().is_some_and(|c| seen.insert(c.clone())))
        .collect();
    claims.sort_by(|a, b| a.pvc.cmp(&b.pvc));
    let metrics: [Gauge; 6] = [
        (
            "kubelet_volume_stats_available_bytes",
            "Number of available bytes in the volume",
            |v| v.available_bytes,
        ),
        (
            "kubelet_volume_stats_capacity_bytes",
            "Capacity in bytes of the volume",
            |v| v.capacity_bytes,
        ),
        (
            "kubelet_volume_stats_inodes",
            "Maximum number of inodes in the volume",
            |v| v.inodes,
        ),
        (
            "kubelet_volume_stats_inodes_free",
            "Number of free inodes in the volume",
            |v| v.inodes_free,
        ),
        (
            "kubelet_volume_stats_inodes_used",
            "Number of used inodes in the volume",
            |v| v.inodes_used,
        ),
        (
            "kubelet_volume_stats_used_bytes",
            "Number of used bytes in the volume",
            |v| v.used_bytes,
        ),
    ];
    let mut out = String::new();
    for (name, help, value) in metrics {
        let _ = writeln!(out, "# HELP {name} [ALPHA] {help}\n# TYPE {name} gauge");
        for v in &claims {
            let Some((ns, claim)) = &v.pvc else { continue };
            let _ = writeln!(
                out,
                "{name}{{namespace=\"{}\",persistentvolumeclaim=\"{}\"}} {}",
                escape(ns),
                escape(claim),
                value(v)
            );
        }
    }
    out
}

/// Prometheus label value escaping (backslash, quote, newline).
fn escape(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp() -> tempfile::TempDir {
        tempfile::tempdir().unwrap()
    }

    #[test]
    fn du_counts_blocks_and_entries_once_per_hard_link() {
        let d = tmp();
        let before = disk_usage(d.path(), MAX_WALK_ENTRIES).unwrap();
        assert_eq!(before.inodes, 1);
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::fs::write(d.path().join("sub/a"), vec![1u8; 1 << 20]).unwrap();
        std::fs::hard_link(d.path().join("sub/a"), d.path().join("b")).unwrap();
        let after = disk_usage(d.path(), MAX_WALK_ENTRIES).unwrap();
        assert_eq!(after.inodes, 3, "root, sub, a (b is the same file)");
        assert!(
            after.bytes >= before.bytes + (1 << 20),
            "{after:?} {before:?}"
        );
        assert!(after.bytes < before.bytes + (3 << 20), "counted once");
        assert!(!after.truncated);
        assert!(disk_usage(&d.path().join("missing"), 10).is_none());
    }

    #[test]
    fn du_stops_at_its_limit() {
        let d = tmp();
        for i in 0..10 {
            std::fs::write(d.path().join(i.to_string()), b"x").unwrap();
        }
        let u = disk_usage(d.path(), 4).unwrap();
        assert!(u.truncated);
        assert_eq!(u.inodes, 4);
    }

    #[test]
    fn measured_by_method_and_cached_per_pod() {
        let d = tmp();
        std::fs::write(d.path().join("f"), vec![0u8; 64 << 10]).unwrap();
        let source = |method| Source {
            name: "data".into(),
            path: d.path().to_path_buf(),
            method,
            pvc: Some(("ns".into(), "data-web-0".into())),
        };
        let du = measure(&source(Method::Du), 7).unwrap();
        assert_eq!(du.inodes_used, 2);
        assert!(du.used_bytes >= 64 << 10);
        assert!(du.capacity_bytes > 0 && du.inodes > 0);
        assert_eq!(du.time_nanos, 7);
        let fs = measure(&source(Method::StatFs), 7).unwrap();
        assert_eq!(fs.inodes_used, fs.inodes - fs.inodes_free);

        let cache = Cache::default();
        cache.refresh(&[("u1".into(), Arc::new(vec![source(Method::Du)]))], 1);
        assert_eq!(cache.get("u1").unwrap()[0].pvc, du.pvc);
        cache.refresh(&[], 2);
        assert!(cache.get("u1").is_none(), "gone pods are forgotten");
    }

    #[test]
    fn metrics_name_each_claim_once() {
        let v = |name: &str, pvc: Option<(&str, &str)>, used| VolumeStats {
            name: name.into(),
            pvc: pvc.map(|(a, b)| (a.into(), b.into())),
            used_bytes: used,
            ..Default::default()
        };
        let text = prometheus(&[
            Arc::new(vec![v("data", Some(("ns", "c1")), 10), v("tmp", None, 99)]),
            Arc::new(vec![v("shared", Some(("ns", "c1")), 10)]),
        ]);
        assert_eq!(
            text.matches("kubelet_volume_stats_used_bytes{").count(),
            1,
            "{text}"
        );
        assert!(text.contains(
            "kubelet_volume_stats_used_bytes{namespace=\"ns\",persistentvolumeclaim=\"c1\"} 10"
        ));
        assert!(text.contains("# TYPE kubelet_volume_stats_inodes_free gauge"));
        assert!(!text.contains("99"));
    }
}
