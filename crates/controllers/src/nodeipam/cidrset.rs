//! A cluster CIDR cut into equal node subnets, with a bitmap of those in use (upstream
//! `pkg/controller/nodeipam/ipam/cidrset`). Allocation continues after the last subnet handed out,
//! wrapping around, so a released subnet is not handed out again at once.

use std::net::IpAddr;

#[derive(Debug)]
pub struct CidrSet {
    base: u128,
    v6: bool,
    /// Bits of an address (32 or 128).
    width: u8,
    node_mask: u8,
    used: Vec<bool>,
    allocated: usize,
    next: usize,
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(v4) => u128::from(u32::from(v4)),
        IpAddr::V6(v6) => u128::from(v6),
    }
}

/// Parses `a.b.c.d/n` (or IPv6) into (address as an integer, prefix length, is IPv6).
pub fn parse_cidr(cidr: &str) -> Result<(u128, u8, bool), String> {
    let (ip, len) = cidr
        .split_once('/')
        .ok_or_else(|| format!("invalid CIDR {cidr:?}: no prefix length"))?;
    let ip: IpAddr = ip.parse().map_err(|_| format!("invalid CIDR {cidr:?}"))?;
    let len: u8 = len.parse().map_err(|_| format!("invalid CIDR {cidr:?}"))?;
    let width = if ip.is_ipv6() { 128 } else { 32 };
    if len > width {
        return Err(format!(
            "invalid CIDR {cidr:?}: prefix longer than the address"
        ));
    }
    Ok((to_u128(ip), len, ip.is_ipv6()))
}

impl CidrSet {
    /// Upstream `NewCIDRSet`: at most 2^16 subnets (a larger difference of mask sizes is refused).
    pub fn new(cluster_cidr: &str, node_mask: u8) -> Result<CidrSet, String> {
        let (ip, len, v6) = parse_cidr(cluster_cidr)?;
        let width = if v6 { 128 } else { 32 };
        if node_mask < len || node_mask > width {
            return Err(format!(
                "node CIDR mask size {node_mask} does not fit cluster CIDR {cluster_cidr}"
            ));
        }
        if node_mask - len > 16 {
            return Err(format!(
                "cluster CIDR {cluster_cidr} with node mask /{node_mask} makes more than 65536 subnets"
            ));
        }
        let host_bits = u32::from(width - len);
        let base = if host_bits >= 128 {
            0
        } else {
            ip >> host_bits << host_bits
        };
        Ok(CidrSet {
            base,
            v6,
            width,
            node_mask,
            used: vec![false; 1 << (node_mask - len)],
            allocated: 0,
            next: 0,
        })
    }

    fn subnet(&self, index: usize) -> String {
        let step = 1u128 << (self.width - self.node_mask);
        let addr = self.base + step * index as u128;
        let ip: IpAddr = if self.v6 {
            IpAddr::V6(addr.into())
        } else {
            IpAddr::V4((addr as u32).into())
        };
        format!("{ip}/{}", self.node_mask)
    }

    /// The index of a node subnet of this set, if it is one.
    fn index_of(&self, cidr: &str) -> Result<usize, String> {
        let (ip, len, v6) = parse_cidr(cidr)?;
        if v6 != self.v6 || len != self.node_mask {
            return Err(format!(
                "{cidr} is not a /{} of the cluster CIDR",
                self.node_mask
            ));
        }
        let step = 1u128 << (self.width - self.node_mask);
        if ip < self.base || !(ip - self.base).is_multiple_of(step) {
            return Err(format!("{cidr} is outside the cluster CIDR"));
        }
        let index = ((ip - self.base) / step) as usize;
        if index >= self.used.len() {
            return Err(format!("{cidr} is outside the cluster CIDR"));
        }
        Ok(index)
    }

    /// Hands out the next free subnet; `None` when all are in use.
    pub fn allocate(&mut self) -> Option<String> {
        let n = self.used.len();
        let index = (0..n)
            .map(|i| (self.next + i) % n)
            .find(|&i| !self.used[i])?;
        self.used[index] = true;
        self.allocated += 1;
        self.next = (index + 1) % n;
        Some(self.subnet(index))
    }

    /// Marks a subnet in use (a node that already has it).
    pub fn occupy(&mut self, cidr: &str) -> Result<(), String> {
        let i = self.index_of(cidr)?;
        if !self.used[i] {
            self.used[i] = true;
            self.allocated += 1;
        }
        Ok(())
    }

    pub fn release(&mut self, cidr: &str) -> Result<(), String> {
        let i = self.index_of(cidr)?;
        if self.used[i] {
            self.used[i] = false;
            self.allocated -= 1;
        }
        Ok(())
    }

    pub fn free(&self) -> usize {
        self.used.len() - self.allocated
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subnets_are_handed_out_in_order_wrapping_and_reused() {
        let mut set = CidrSet::new("10.42.0.0/22", 24).unwrap();
        assert_eq!(set.allocate().as_deref(), Some("10.42.0.0/24"));
        set.occupy("10.42.2.0/24").unwrap();
        assert_eq!(set.allocate().as_deref(), Some("10.42.1.0/24"));
        assert_eq!(set.allocate().as_deref(), Some("10.42.3.0/24"));
        assert_eq!(set.allocate(), None);
        set.release("10.42.1.0/24").unwrap();
        assert_eq!(set.free(), 1);
        assert_eq!(set.allocate().as_deref(), Some("10.42.1.0/24"));
        assert!(set.occupy("10.43.0.0/24").is_err());
        assert!(set.occupy("10.42.0.0/25").is_err());
        assert!(set.occupy("10.42.0.128/24").is_err());
    }

    #[test]
    fn ipv6_and_limits() {
        let mut set = CidrSet::new("fd00:10:244::/56", 64).unwrap();
        assert_eq!(set.allocate().as_deref(), Some("fd00:10:244::/64"));
        assert_eq!(set.allocate().as_deref(), Some("fd00:10:244:1::/64"));
        assert!(CidrSet::new("10.0.0.0/8", 25).is_err(), "too many subnets");
        assert!(CidrSet::new("10.0.0.0/24", 16).is_err());
        // A host address in the cluster CIDR is normalized to its network.
        let mut set = CidrSet::new("10.42.7.9/16", 24).unwrap();
        assert_eq!(set.allocate().as_deref(), Some("10.42.0.0/24"));
    }
}
