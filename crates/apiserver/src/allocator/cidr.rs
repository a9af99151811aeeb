//! Prefix arithmetic for Service CIDRs (upstream `pkg/api/servicecidr` and the range math of
//! `registry/core/service/ipallocator`): addresses as `u128` with their family, the usable range of a
//! prefix (IPv4 skips the network and broadcast addresses, IPv6 only the network address) and
//! KEP-3070's split into a lower range kept for static addresses and an upper range dynamic allocation
//! prefers.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// `"IPv4"` / `"IPv6"`, the `ipFamilies` values.
pub fn family(ip: &IpAddr) -> &'static str {
    if ip.is_ipv6() {
        "IPv6"
    } else {
        "IPv4"
    }
}

/// An address as a number; IPv4 addresses are below 2^32.
pub fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

pub fn from_u128(v: u128, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(Ipv6Addr::from(v))
    } else {
        IpAddr::V4(Ipv4Addr::from(v as u32))
    }
}

/// Parses an address in any accepted form; IPv4-mapped IPv6 addresses count as IPv4 (Go's
/// `ParseIPSloppy` then `To4`).
pub fn parse_ip(s: &str) -> Option<IpAddr> {
    let ip: IpAddr = s.trim().parse().ok()?;
    Some(match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    })
}

/// One prefix, masked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Cidr {
    pub base: u128,
    pub bits: u8,
    pub v6: bool,
}

impl Cidr {
    /// `"10.96.0.0/12"`, `"fd00::/108"`; host bits are masked off.
    pub fn parse(s: &str) -> Option<Cidr> {
        let (addr, bits) = s.trim().split_once('/')?;
        let ip: IpAddr = addr.parse().ok()?;
        let bits: u8 = bits.parse().ok()?;
        let v6 = ip.is_ipv6();
        let width = if v6 { 128 } else { 32 };
        if bits > width {
            return None;
        }
        let mut c = Cidr {
            base: to_u128(ip),
            bits,
            v6,
        };
        c.base &= c.mask();
        Some(c)
    }

    fn width(&self) -> u8 {
        if self.v6 {
            128
        } else {
            32
        }
    }

    fn host_bits(&self) -> u32 {
        u32::from(self.width() - self.bits)
    }

    fn mask(&self) -> u128 {
        let all = if self.v6 {
            u128::MAX
        } else {
            u128::from(u32::MAX)
        };
        match self.host_bits() {
            128 => 0,
            h => all & !((1u128 << h) - 1),
        }
    }

    pub fn family(&self) -> &'static str {
        if self.v6 {
            "IPv6"
        } else {
            "IPv4"
        }
    }

    /// The highest address of the prefix (the broadcast address for IPv4).
    fn broadcast(&self) -> u128 {
        match self.host_bits() {
            128 => u128::MAX,
            h => self.base | ((1u128 << h) - 1),
        }
    }

    /// Whether `ip` is inside the prefix at all.
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv6() == self.v6 && to_u128(ip) & self.mask() == self.base
    }

    /// Whether `other` lies inside this prefix (it may be the same prefix).
    pub fn contains_prefix(&self, other: &Cidr) -> bool {
        other.v6 == self.v6 && other.bits >= self.bits && other.base & self.mask() == self.base
    }

    /// The first and last address handed out: the network address is never used, nor IPv4's
    /// broadcast address. `None` when the prefix has no usable address.
    pub fn usable(&self) -> Option<(u128, u128)> {
        let first = self.base.checked_add(1)?;
        let last = if self.v6 {
            self.broadcast()
        } else {
            self.broadcast().checked_sub(1)?
        };
        (first <= last).then_some((first, last))
    }

    /// Whether `ip` may be allocated from this prefix.
    pub fn in_range(&self, ip: IpAddr) -> bool {
        let v = to_u128(ip);
        self.contains(ip) && self.usable().is_some_and(|(f, l)| v >= f && v <= l)
    }

    /// How many addresses may be allocated.
    pub fn size(&self) -> u128 {
        self.usable().map(|(f, l)| l - f + 1).unwrap_or(0)
    }

    /// KEP-3070's offset: the first `offset` usable addresses are left for static allocation while
    /// the upper range has free ones (`min(max(16, size/16), 256)`, none below 16 addresses).
    pub fn range_offset(&self) -> u128 {
        let size = self.size();
        if size < 16 {
            0
        } else {
            (size / 16).clamp(16, 256)
        }
    }

    pub fn first_ip(&self) -> Option<IpAddr> {
        self.usable().map(|(f, _)| from_u128(f, self.v6))
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", from_u128(self.base, self.v6), self.bits)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv4_ranges() {
        let c = Cidr::parse("10.96.0.5/12").unwrap();
        assert_eq!(c.to_string(), "10.96.0.0/12");
        assert!(c.contains(ip("10.111.255.255")));
        assert!(!c.contains(ip("10.112.0.0")));
        assert!(!c.in_range(ip("10.96.0.0")), "network address");
        assert!(!c.in_range(ip("10.111.255.255")), "broadcast address");
        assert!(c.in_range(ip("10.96.0.1")));
        assert_eq!(c.size(), (1 << 20) - 2);
        assert_eq!(c.range_offset(), 256);
        assert_eq!(c.first_ip(), Some(ip("10.96.0.1")));
        let small = Cidr::parse("10.96.0.0/28").unwrap();
        assert_eq!(small.size(), 14);
        assert_eq!(small.range_offset(), 0);
        assert_eq!(Cidr::parse("10.0.0.0/24").unwrap().range_offset(), 16);
        assert_eq!(Cidr::parse("10.0.0.0/32").unwrap().usable(), None);
        assert!(c.contains_prefix(&Cidr::parse("10.96.1.0/24").unwrap()));
        assert!(!small.contains_prefix(&c));
        assert!(Cidr::parse("10.0.0.0/33").is_none());
        assert!(Cidr::parse("nonsense").is_none());
    }

    #[test]
    fn ipv6_ranges() {
        let c = Cidr::parse("fd00::/120").unwrap();
        assert!(c.v6);
        assert!(c.in_range(ip("fd00::ff")), "IPv6 uses the last address");
        assert!(!c.in_range(ip("fd00::")));
        assert!(!c.contains(ip("10.0.0.1")));
        assert_eq!(c.size(), 255);
        assert_eq!(Cidr::parse("::/0").unwrap().usable().unwrap().1, u128::MAX);
        assert_eq!(parse_ip("::ffff:10.0.0.1"), Some(ip("10.0.0.1")));
    }
}
