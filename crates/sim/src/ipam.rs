//! Addresses of simulated nodes: each node's pod CIDR carved from the cluster CIDR (as upstream's node
//! IPAM range allocator would), its InternalIP, and pod IPs handed out from its pod CIDR.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// An IPv4 CIDR.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    pub base: u32,
    pub prefix: u8,
}

impl Cidr {
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (addr, prefix) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?} is not a CIDR"))?;
        let addr: Ipv4Addr = addr.parse().map_err(|e| format!("{s:?}: {e}"))?;
        let prefix: u8 = prefix.parse().map_err(|e| format!("{s:?}: {e}"))?;
        if prefix > 32 {
            return Err(format!("{s:?}: prefix over 32"));
        }
        let mask = mask(prefix);
        Ok(Cidr {
            base: u32::from(addr) & mask,
            prefix,
        })
    }

    pub fn size(&self) -> u64 {
        1u64 << (32 - self.prefix)
    }

    /// The `index`-th subnet of `/sub_prefix` inside this CIDR.
    pub fn subnet(&self, sub_prefix: u8, index: u64) -> Option<Cidr> {
        if sub_prefix < self.prefix || sub_prefix > 32 {
            return None;
        }
        let count = 1u64 << (sub_prefix - self.prefix);
        if index >= count {
            return None;
        }
        let step = 1u64 << (32 - sub_prefix);
        Some(Cidr {
            base: self.base + (index * step) as u32,
            prefix: sub_prefix,
        })
    }

    /// The `offset`-th address of the CIDR.
    pub fn address(&self, offset: u64) -> Option<Ipv4Addr> {
        (offset < self.size()).then(|| Ipv4Addr::from(self.base + offset as u32))
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", Ipv4Addr::from(self.base), self.prefix)
    }
}

fn mask(prefix: u8) -> u32 {
    if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    }
}

/// Pod IPs of one node: the network address and the first host (the bridge's gateway) are never used,
/// nor the broadcast address.
#[derive(Debug)]
pub struct PodIps {
    cidr: Cidr,
    used: BTreeSet<u64>,
    next: u64,
}

impl PodIps {
    pub fn new(cidr: Cidr) -> PodIps {
        PodIps {
            cidr,
            used: BTreeSet::new(),
            next: 2,
        }
    }

    fn usable(&self) -> std::ops::Range<u64> {
        2..self.cidr.size().saturating_sub(1)
    }

    /// A free address, round-robin so a released one is not reused at once; `None` when full.
    pub fn allocate(&mut self) -> Option<Ipv4Addr> {
        let usable = self.usable();
        let span = usable.end.saturating_sub(usable.start);
        for i in 0..span {
            let candidate = usable.start + (self.next - usable.start + i) % span;
            if self.used.insert(candidate) {
                self.next = candidate + 1;
                return self.cidr.address(candidate);
            }
        }
        None
    }

    /// Marks an address as used (a pod that already had it, found after a restart).
    pub fn claim(&mut self, ip: Ipv4Addr) -> bool {
        let offset = u32::from(ip).wrapping_sub(self.cidr.base) as u64;
        self.usable().contains(&offset) && self.used.insert(offset)
    }

    pub fn release(&mut self, ip: Ipv4Addr) {
        let offset = u32::from(ip).wrapping_sub(self.cidr.base) as u64;
        self.used.remove(&offset);
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let offset = u32::from(ip).wrapping_sub(self.cidr.base) as u64;
        offset < self.cidr.size()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnets_and_addresses() {
        let cluster = Cidr::parse("10.128.0.0/9").unwrap();
        assert_eq!(cluster.subnet(24, 0).unwrap().to_string(), "10.128.0.0/24");
        assert_eq!(
            cluster.subnet(24, 257).unwrap().to_string(),
            "10.129.1.0/24"
        );
        assert!(cluster.subnet(24, 1 << 15).is_none());
        assert_eq!(
            Cidr::parse("10.1.2.3/16").unwrap().to_string(),
            "10.1.0.0/16"
        );
        assert!(Cidr::parse("10.0.0.0").is_err() && Cidr::parse("10.0.0.0/33").is_err());
    }

    #[test]
    fn pod_ips_skip_reserved_addresses_and_run_out() {
        let mut ips = PodIps::new(Cidr::parse("10.0.0.0/29").unwrap());
        let got: Vec<String> = std::iter::from_fn(|| ips.allocate())
            .map(|ip| ip.to_string())
            .collect();
        assert_eq!(
            got,
            ["10.0.0.2", "10.0.0.3", "10.0.0.4", "10.0.0.5", "10.0.0.6"]
        );
        ips.release("10.0.0.3".parse().unwrap());
        assert_eq!(ips.allocate().unwrap().to_string(), "10.0.0.3");
        assert!(ips.contains("10.0.0.7".parse().unwrap()));
        assert!(!ips.contains("10.0.0.8".parse().unwrap()));
        let mut fresh = PodIps::new(Cidr::parse("10.0.0.0/29").unwrap());
        assert!(fresh.claim("10.0.0.2".parse().unwrap()));
        assert!(!fresh.claim("10.0.0.2".parse().unwrap()));
        assert_eq!(fresh.allocate().unwrap().to_string(), "10.0.0.3");
    }
}
