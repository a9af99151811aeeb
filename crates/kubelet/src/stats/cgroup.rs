//! What the kernel says about a cgroup (cgroup v1, cgroupfs layout: the kubelet puts a pod at
//! `<cgroup-root>/kubepods[/<qos>]/pod<uid>` and containerd puts each container below it, named by
//! its id) and about the whole machine (`/proc/stat`, `/proc/meminfo`, `/proc/net/dev`).
//!
//! Working set as cadvisor computes it: usage minus the inactive file cache (what the kernel can drop
//! without asking), never below zero.

use std::path::{Path, PathBuf};

/// Where the cgroup v1 controllers this reads are mounted.
#[derive(Clone, Debug)]
pub struct Hierarchies {
    pub cpuacct: PathBuf,
    pub memory: PathBuf,
}

impl Hierarchies {
    /// The usual mount points (`cpuacct` alone or co-mounted as `cpu,cpuacct`).
    pub fn detect() -> Hierarchies {
        let base = Path::new("/sys/fs/cgroup");
        let cpuacct = ["cpuacct", "cpu,cpuacct", "cpuacct,cpu"]
            .iter()
            .map(|d| base.join(d))
            .find(|p| p.join("cpuacct.usage").exists())
            .unwrap_or_else(|| base.join("cpuacct"));
        Hierarchies {
            cpuacct,
            memory: base.join("memory"),
        }
    }
}

/// CPU and memory of one cgroup at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CgroupSample {
    pub usage_core_nano_seconds: Option<u64>,
    pub memory: Option<Memory>,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Memory {
    pub usage_bytes: u64,
    pub working_set_bytes: u64,
    pub rss_bytes: u64,
    pub page_faults: u64,
    pub major_page_faults: u64,
    /// The cgroup's limit, when it has one below "unlimited" (for `availableBytes`).
    pub limit_bytes: Option<u64>,
}

/// Reads the cgroup at `path` (relative to each hierarchy's root, e.g. `/kubepods/podX/<id>`).
/// Missing files give `None` for that part (a container that just exited, another cgroup driver).
pub fn read(h: &Hierarchies, path: &str) -> CgroupSample {
    let rel = path.trim_start_matches('/');
    let cpu = std::fs::read_to_string(h.cpuacct.join(rel).join("cpuacct.usage"))
        .ok()
        .and_then(|s| s.trim().parse().ok());
    let dir = h.memory.join(rel);
    let number = |file: &str| -> Option<u64> {
        std::fs::read_to_string(dir.join(file))
            .ok()
            .and_then(|s| s.trim().parse().ok())
    };
    let memory = match (
        number("memory.usage_in_bytes"),
        std::fs::read_to_string(dir.join("memory.stat")),
    ) {
        (Some(usage), Ok(stat)) => Some(memory_of(usage, &stat, number("memory.limit_in_bytes"))),
        _ => None,
    };
    CgroupSample {
        usage_core_nano_seconds: cpu,
        memory,
    }
}

/// One value of a `key value` file (`memory.stat`, `/proc/meminfo` without the unit).
fn field(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let mut parts = l.split_whitespace();
        (parts.next()?.trim_end_matches(':') == key)
            .then(|| parts.next()?.parse().ok())
            .flatten()
    })
}

/// Memory figures from `memory.usage_in_bytes`, `memory.stat` and `memory.limit_in_bytes`.
pub fn memory_of(usage: u64, stat: &str, limit: Option<u64>) -> Memory {
    let inactive_file = field(stat, "total_inactive_file").unwrap_or(0);
    Memory {
        usage_bytes: usage,
        working_set_bytes: usage.saturating_sub(inactive_file),
        rss_bytes: field(stat, "total_rss").unwrap_or(0),
        page_faults: field(stat, "total_pgfault").unwrap_or(0),
        major_page_faults: field(stat, "total_pgmajfault").unwrap_or(0),
        // An unlimited cgroup reports a page-rounded i64::MAX.
        limit_bytes: limit.filter(|l| *l < (1 << 62)),
    }
}

/// Clock ticks per second of `/proc/stat` (USER_HZ; 100 on every Linux architecture rkube runs on).
const USER_HZ: u64 = 100;

/// The machine's CPU time in use since boot, in nanoseconds: the first `cpu` line of `/proc/stat`
/// without idle and iowait (guest time is already counted in user time).
pub fn node_cpu_nanos(proc_stat: &str) -> Option<u64> {
    let line = proc_stat.lines().find(|l| l.starts_with("cpu "))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let at = |i: usize| v.get(i).copied().unwrap_or(0);
    // user nice system idle iowait irq softirq steal
    let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
    Some(busy.saturating_mul(1_000_000_000 / USER_HZ))
}

/// The machine's memory from `/proc/meminfo` (kB values), as the root cgroup would give it:
/// usage is what is not free, working set leaves out the inactive file cache.
pub fn node_memory(meminfo: &str) -> Option<Memory> {
    let kb = |k: &str| field(meminfo, k).map(|v| v.saturating_mul(1024));
    let total = kb("MemTotal")?;
    let usage = total.saturating_sub(kb("MemFree")?);
    Some(Memory {
        usage_bytes: usage,
        working_set_bytes: usage.saturating_sub(kb("Inactive(file)").unwrap_or(0)),
        rss_bytes: kb("AnonPages").unwrap_or(0),
        page_faults: 0,
        major_page_faults: 0,
        limit_bytes: Some(total),
    })
}

/// One interface of `/proc/net/dev`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub rx_bytes: u64,
    pub rx_errors: u64,
    pub tx_bytes: u64,
    pub tx_errors: u64,
}

/// The interfaces of `/proc/net/dev` but loopback.
pub fn interfaces(net_dev: &str) -> Vec<Interface> {
    net_dev
        .lines()
        .skip(2)
        .filter_map(|l| {
            let (name, rest) = l.split_once(':')?;
            let name = name.trim();
            let v: Vec<u64> = rest
                .split_whitespace()
                .map(|x| x.parse().unwrap_or(0))
                .collect();
            (name != "lo" && v.len() >= 11).then(|| Interface {
                name: name.to_string(),
                rx_bytes: v[0],
                rx_errors: v[2],
                tx_bytes: v[8],
                tx_errors: v[10],
            })
        })
        .collect()
}

/// Capacity, free space and inodes of the file system holding `path` (`statvfs`).
#[derive(Clone, Copy, Debug, Default)]
pub struct FsUsage {
    pub capacity_bytes: u64,
    pub available_bytes: u64,
    pub used_bytes: u64,
    pub inodes: u64,
    pub inodes_free: u64,
}

pub fn fs_usage(path: &Path) -> Option<FsUsage> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    // SAFETY: `c` is a valid NUL-terminated path and `st` a writable statvfs for the call.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let frsize = st.f_frsize as u64;
    let capacity = (st.f_blocks as u64).saturating_mul(frsize);
    let free = (st.f_bfree as u64).saturating_mul(frsize);
    Some(FsUsage {
        capacity_bytes: capacity,
        available_bytes: (st.f_bavail as u64).saturating_mul(frsize),
        used_bytes: capacity.saturating_sub(free),
        inodes: st.f_files as u64,
        inodes_free: st.f_ffree as u64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "cache 4096\nrss 1000\ntotal_cache 8192\ntotal_rss 20480\n\
        total_pgfault 77\ntotal_pgmajfault 3\ntotal_inactive_file 4096\n";

    #[test]
    fn working_set_leaves_out_inactive_files() {
        let m = memory_of(65536, STAT, Some(9223372036854771712));
        assert_eq!(m.usage_bytes, 65536);
        assert_eq!(m.working_set_bytes, 65536 - 4096);
        assert_eq!(m.rss_bytes, 20480);
        assert_eq!((m.page_faults, m.major_page_faults), (77, 3));
        assert_eq!(m.limit_bytes, None, "unlimited");
        // More inactive cache than usage (the counters are read at different moments): zero.
        assert_eq!(memory_of(100, STAT, Some(1 << 20)).working_set_bytes, 0);
        assert_eq!(
            memory_of(100, STAT, Some(1 << 20)).limit_bytes,
            Some(1 << 20)
        );
    }

    #[test]
    fn cgroup_files_are_read_from_both_hierarchies() {
        let dir = tempfile::tempdir().unwrap();
        let h = Hierarchies {
            cpuacct: dir.path().join("cpuacct"),
            memory: dir.path().join("memory"),
        };
        let pod = "kubepods/besteffort/podu1";
        std::fs::create_dir_all(h.cpuacct.join(pod)).unwrap();
        std::fs::create_dir_all(h.memory.join(pod)).unwrap();
        std::fs::write(h.cpuacct.join(pod).join("cpuacct.usage"), "123456789\n").unwrap();
        assert_eq!(
            read(&h, &format!("/{pod}")),
            CgroupSample {
                usage_core_nano_seconds: Some(123456789),
                memory: None
            }
        );
        std::fs::write(h.memory.join(pod).join("memory.usage_in_bytes"), "65536\n").unwrap();
        std::fs::write(h.memory.join(pod).join("memory.stat"), STAT).unwrap();
        let m = read(&h, pod).memory.unwrap();
        assert_eq!(m.working_set_bytes, 61440);
        assert_eq!(read(&h, "/gone"), CgroupSample::default());
    }

    #[test]
    fn node_figures_from_proc() {
        let stat = "cpu  100 20 30 5000 40 5 6 7 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        // user+nice+system+irq+softirq+steal = 168 ticks of 10 ms.
        assert_eq!(node_cpu_nanos(stat), Some(1_680_000_000));
        assert_eq!(node_cpu_nanos("intr 1 2"), None);
        let meminfo = "MemTotal:       16000 kB\nMemFree:         4000 kB\n\
            MemAvailable:    9000 kB\nInactive(file):  2000 kB\nAnonPages:       3000 kB\n";
        let m = node_memory(meminfo).unwrap();
        assert_eq!(m.usage_bytes, 12000 * 1024);
        assert_eq!(m.working_set_bytes, 10000 * 1024);
        assert_eq!(m.rss_bytes, 3000 * 1024);
        assert_eq!(m.limit_bytes, Some(16000 * 1024));
        assert!(node_memory("MemFree: 1 kB").is_none());
    }

    #[test]
    fn interfaces_skip_loopback() {
        let dev = "Inter-|   Receive                                                |  Transmit\n \
            face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
            lo:  500  5 0 0 0 0 0 0  500 5 0 0 0 0 0 0\n  \
            eth0: 1000 10 1 0 0 0 0 0 2000 20 2 0 0 0 0 0\n";
        assert_eq!(
            interfaces(dev),
            [Interface {
                name: "eth0".into(),
                rx_bytes: 1000,
                rx_errors: 1,
                tx_bytes: 2000,
                tx_errors: 2
            }]
        );
    }

    #[test]
    fn statvfs_of_a_directory() {
        let fs = fs_usage(Path::new("/")).unwrap();
        assert!(fs.capacity_bytes > 0 && fs.capacity_bytes >= fs.used_bytes);
        assert!(fs_usage(Path::new("/no/such/dir")).is_none());
    }
}
