//! What the node is made of (upstream cAdvisor's `MachineInfo` and the kubelet's `nodestatus` setters
//! `MachineInfo`/`NodeAddress`/`VersionInfo`): CPUs, memory, the filesystem of the kubelet's root dir,
//! the machine and boot IDs, kernel and OS, the node's IP.
//!
//! Read from /proc and /sys directly (no cAdvisor).

use std::net::IpAddr;
use std::path::Path;

#[derive(Clone, Debug, Default, PartialEq)]
pub struct MachineInfo {
    pub cpus: usize,
    pub memory_bytes: u64,
    /// Size of the filesystem holding the kubelet's root dir.
    pub filesystem_bytes: u64,
    pub machine_id: String,
    pub system_uuid: String,
    pub boot_id: String,
    pub kernel_version: String,
    pub os_image: String,
    pub hostname: String,
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

impl MachineInfo {
    pub fn read(root_dir: &Path) -> MachineInfo {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let os_release = std::fs::read_to_string("/etc/os-release").unwrap_or_default();
        MachineInfo {
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory_bytes: mem_total(&meminfo).unwrap_or(0),
            filesystem_bytes: filesystem_size(root_dir).unwrap_or(0),
            machine_id: read_trimmed("/etc/machine-id"),
            system_uuid: read_trimmed("/sys/class/dmi/id/product_uuid"),
            boot_id: read_trimmed("/proc/sys/kernel/random/boot_id"),
            kernel_version: read_trimmed("/proc/sys/kernel/osrelease"),
            os_image: pretty_name(&os_release).unwrap_or_else(|| "Linux".into()),
            hostname: hostname(),
        }
    }
}

/// `MemTotal` of /proc/meminfo, in bytes.
pub fn mem_total(meminfo: &str) -> Option<u64> {
    meminfo.lines().find_map(|l| {
        let rest = l.strip_prefix("MemTotal:")?;
        let kib: u64 = rest.trim().trim_end_matches("kB").trim().parse().ok()?;
        Some(kib * 1024)
    })
}

/// `PRETTY_NAME` of /etc/os-release.
pub fn pretty_name(os_release: &str) -> Option<String> {
    os_release.lines().find_map(|l| {
        let v = l.strip_prefix("PRETTY_NAME=")?;
        Some(v.trim_matches('"').to_string())
    })
}

fn filesystem_size(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid NUL-terminated path and a zeroed out-parameter.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_blocks as u64 * st.f_frsize as u64)
}

/// The machine's host name, lower-cased as upstream's `nodeutil.GetHostname`.
pub fn hostname() -> String {
    let name = read_trimmed("/proc/sys/kernel/hostname");
    if name.is_empty() {
        "localhost".into()
    } else {
        name.to_lowercase()
    }
}

/// The node's IP when none is given: the first global IPv4 address of an interface that is up (upstream
/// resolves the host name, then falls back to the default route's interface).
pub fn default_node_ip() -> Option<IpAddr> {
    let mut addrs: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs fills a linked list that freeifaddrs releases below.
    if unsafe { libc::getifaddrs(&mut addrs) } != 0 {
        return None;
    }
    let mut found = None;
    let mut cur = addrs;
    while !cur.is_null() {
        // SAFETY: cur is a node of the list getifaddrs returned.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_flags & libc::IFF_UP as u32 == 0 {
            continue;
        }
        // SAFETY: ifa_addr is non-null and its family says which sockaddr it is.
        if unsafe { (*ifa.ifa_addr).sa_family } as i32 != libc::AF_INET {
            continue;
        }
        let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
        let ip = std::net::Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr));
        if !ip.is_loopback() && !ip.is_link_local() && !ip.is_unspecified() {
            found = Some(IpAddr::V4(ip));
            break;
        }
    }
    // SAFETY: addrs came from getifaddrs.
    unsafe { libc::freeifaddrs(addrs) };
    found
}

/// A byte count as a Kubernetes quantity in Ki (how upstream reports memory and storage).
pub fn kibibytes(bytes: u64) -> String {
    format!("{}Ki", bytes / 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn meminfo_and_os_release() {
        assert_eq!(
            mem_total("MemTotal:       24684292 kB\nMemFree: 1 kB\n"),
            Some(24684292 * 1024)
        );
        assert_eq!(mem_total("MemFree: 1 kB\n"), None);
        assert_eq!(
            pretty_name("NAME=\"Debian\"\nPRETTY_NAME=\"Debian GNU/Linux 12 (bookworm)\"\n")
                .as_deref(),
            Some("Debian GNU/Linux 12 (bookworm)")
        );
        assert_eq!(kibibytes(4096), "4Ki");
    }

    #[test]
    fn reads_this_machine() {
        let m = MachineInfo::read(Path::new("/"));
        assert!(m.cpus >= 1);
        assert!(m.memory_bytes > 0);
        assert!(m.filesystem_bytes > 0);
        assert!(!m.hostname.is_empty());
    }
}
