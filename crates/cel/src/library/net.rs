//! Kubernetes' IP and CIDR libraries (upstream `library/ip.go`, `library/cidr.go`).
//!
//! `ip(s)`, `isIP(s)`, `ip.isCanonical(s)`, and on an IP `family()`, `isUnspecified()`,
//! `isLoopback()`, `isLinkLocalMulticast()`, `isLinkLocalUnicast()`, `isGlobalUnicast()`;
//! `cidr(s)`, `isCIDR(s)`, and on a CIDR `containsIP(ip|string)`, `containsCIDR(cidr|string)`,
//! `ip()`, `masked()`, `prefixLength()`; `string(ip)`, `string(cidr)`. As upstream, zones
//! (`fe80::1%eth0`) and IPv4-mapped IPv6 addresses are refused, and IPv4 octets with leading
//! zeros do not parse.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use cel::common::types::{Type, STRING_TYPE};
use cel::{ExecutionError, Value};

use super::{error, no_overload, op, opaque_arg, str_arg, Registrar};

/// An IP address (`net.IP`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ip(pub(crate) IpAddr);

const IP_TYPE: &str = "net.IP";
const CIDR_TYPE: &str = "net.CIDR";

impl cel::objects::Opaque for Ip {
    fn runtime_type_name(&self) -> &str {
        IP_TYPE
    }
}

/// A CIDR (`net.CIDR`): an address (not necessarily masked) and a prefix length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cidr {
    pub(crate) addr: IpAddr,
    pub(crate) prefix: u8,
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

impl cel::objects::Opaque for Cidr {
    fn runtime_type_name(&self) -> &str {
        CIDR_TYPE
    }
}

pub(crate) fn register(r: &mut Registrar<'_>) {
    let ip = || Type::new_opaque_type(IP_TYPE);
    let cidr = || Type::new_opaque_type(CIDR_TYPE);
    r.global("ip", "string_to_ip", vec![STRING_TYPE], op!(to_ip));
    r.global("isIP", "is_ip", vec![STRING_TYPE], op!(is_ip));
    r.global(
        "ip.isCanonical",
        "ip_is_canonical",
        vec![STRING_TYPE],
        op!(is_canonical),
    );
    r.member("family", "ip_family", ip(), vec![], op!(family));
    r.member(
        "isUnspecified",
        "ip_is_unspecified",
        ip(),
        vec![],
        op!(is_unspecified),
    );
    r.member(
        "isLoopback",
        "ip_is_loopback",
        ip(),
        vec![],
        op!(is_loopback),
    );
    r.member(
        "isLinkLocalMulticast",
        "ip_is_link_local_multicast",
        ip(),
        vec![],
        op!(is_link_local_multicast),
    );
    r.member(
        "isLinkLocalUnicast",
        "ip_is_link_local_unicast",
        ip(),
        vec![],
        op!(is_link_local_unicast),
    );
    r.member(
        "isGlobalUnicast",
        "ip_is_global_unicast",
        ip(),
        vec![],
        op!(is_global_unicast),
    );
    r.global("string", "ip_to_string", vec![ip()], op!(to_string));
    r.global("cidr", "string_to_cidr", vec![STRING_TYPE], op!(to_cidr));
    r.global("isCIDR", "is_cidr", vec![STRING_TYPE], op!(is_cidr));
    r.member(
        "containsIP",
        "cidr_contains_ip_ip",
        cidr(),
        vec![ip()],
        op!(contains_ip),
    );
    r.member(
        "containsIP",
        "cidr_contains_ip_string",
        cidr(),
        vec![STRING_TYPE],
        op!(contains_ip),
    );
    r.member(
        "containsCIDR",
        "cidr_contains_cidr",
        cidr(),
        vec![cidr()],
        op!(contains_cidr),
    );
    r.member(
        "containsCIDR",
        "cidr_contains_cidr_string",
        cidr(),
        vec![STRING_TYPE],
        op!(contains_cidr),
    );
    r.member("ip", "cidr_ip", cidr(), vec![], op!(cidr_ip));
    r.member("masked", "cidr_masked", cidr(), vec![], op!(masked));
    r.member(
        "prefixLength",
        "cidr_prefix_length",
        cidr(),
        vec![],
        op!(prefix_length),
    );
    r.global("string", "cidr_to_string", vec![cidr()], op!(to_string));
}

/// Parses an address as Go's `netip.ParseAddr`, then refuses zones and IPv4-mapped IPv6
/// addresses (upstream `parseIPAddr`).
pub(crate) fn parse_ip(raw: &str) -> Result<IpAddr, String> {
    if raw.contains(':') && raw.contains('%') {
        return Err(format!("IP address {raw:?} with zone value is not allowed"));
    }
    let addr: IpAddr = raw.parse().map_err(|_| {
        format!(
            "IP Address {raw:?} parse error during conversion from string: ParseAddr({raw:?}): unable to parse IP"
        )
    })?;
    if let IpAddr::V6(v6) = addr {
        if v6.to_ipv4_mapped().is_some() {
            return Err(format!("IPv4-mapped IPv6 address {raw:?} is not allowed"));
        }
    }
    Ok(addr)
}

/// Parses a prefix as Go's `netip.ParsePrefix` (upstream `parseCIDR`).
pub(crate) fn parse_cidr(raw: &str) -> Result<Cidr, String> {
    let bad = |why: &str| {
        format!("network address parse error during conversion from string: netip.ParsePrefix({raw:?}): {why}")
    };
    let (addr, bits) = raw.split_once('/').ok_or_else(|| bad("no '/'"))?;
    if addr.contains('%') {
        return Err(bad("IPv6 zones cannot be present in a prefix"));
    }
    let addr: IpAddr = addr
        .parse()
        .map_err(|_| bad(&format!("ParseAddr({addr:?}): unable to parse IP")))?;
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let valid_digits = !bits.is_empty()
        && bits.bytes().all(|b| b.is_ascii_digit())
        && (bits == "0" || !bits.starts_with('0'));
    let prefix = bits
        .parse::<u8>()
        .ok()
        .filter(|p| valid_digits && *p <= max)
        .ok_or_else(|| bad(&format!("bad bits after slash: {bits:?}")))?;
    if let IpAddr::V6(v6) = addr {
        if v6.to_ipv4_mapped().is_some() {
            return Err(format!("IPv4-mapped IPv6 address {raw:?} is not allowed"));
        }
    }
    Ok(Cidr { addr, prefix })
}

fn ip_value(addr: IpAddr) -> Value {
    Value::Opaque(Arc::new(Ip(addr)))
}

fn cidr_value(c: Cidr) -> Value {
    Value::Opaque(Arc::new(c))
}

fn this_ip(function: &str, args: &[Value]) -> Result<IpAddr, ExecutionError> {
    opaque_arg::<Ip>(function, args, 0).map(|ip| ip.0)
}

fn this_cidr<'a>(function: &str, args: &'a [Value]) -> Result<&'a Cidr, ExecutionError> {
    opaque_arg::<Cidr>(function, args, 0)
}

fn to_ip(args: &[Value]) -> Result<Value, ExecutionError> {
    parse_ip(str_arg("ip", args, 0)?)
        .map(ip_value)
        .map_err(|e| error("ip", e))
}

fn is_ip(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(parse_ip(str_arg("isIP", args, 0)?).is_ok()))
}

fn is_canonical(args: &[Value]) -> Result<Value, ExecutionError> {
    let raw = str_arg("ip.isCanonical", args, 0)?;
    let addr = parse_ip(raw).map_err(|e| error("ip.isCanonical", e))?;
    Ok(Value::Bool(addr.to_string() == raw))
}

fn family(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Int(if this_ip("family", args)?.is_ipv4() {
        4
    } else {
        6
    }))
}

fn is_unspecified(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(
        this_ip("isUnspecified", args)?.is_unspecified(),
    ))
}

fn is_loopback(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(this_ip("isLoopback", args)?.is_loopback()))
}

fn link_local_multicast(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => v4.octets()[..3] == [224, 0, 0],
        IpAddr::V6(v6) => v6.segments()[0] == 0xff02,
    }
}

fn link_local_unicast(addr: IpAddr) -> bool {
    match addr {
        IpAddr::V4(v4) => v4.octets()[..2] == [169, 254],
        IpAddr::V6(v6) => v6.segments()[0] & 0xffc0 == 0xfe80,
    }
}

fn is_link_local_multicast(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(link_local_multicast(this_ip(
        "isLinkLocalMulticast",
        args,
    )?)))
}

fn is_link_local_unicast(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(link_local_unicast(this_ip(
        "isLinkLocalUnicast",
        args,
    )?)))
}

/// Go's `Addr.IsGlobalUnicast`.
fn is_global_unicast(args: &[Value]) -> Result<Value, ExecutionError> {
    let addr = this_ip("isGlobalUnicast", args)?;
    if addr == IpAddr::V4(Ipv4Addr::BROADCAST) {
        return Ok(Value::Bool(false));
    }
    Ok(Value::Bool(
        !addr.is_unspecified()
            && !addr.is_loopback()
            && !addr.is_multicast()
            && !link_local_unicast(addr),
    ))
}

fn to_string(args: &[Value]) -> Result<Value, ExecutionError> {
    match args.first() {
        Some(Value::Opaque(o)) => super::opaque_string(o.as_ref())
            .map(|s| Value::String(Arc::new(s)))
            .ok_or_else(|| no_overload("string", args)),
        _ => Err(no_overload("string", args)),
    }
}

fn to_cidr(args: &[Value]) -> Result<Value, ExecutionError> {
    parse_cidr(str_arg("cidr", args, 0)?)
        .map(cidr_value)
        .map_err(|e| error("cidr", e))
}

fn is_cidr(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Bool(parse_cidr(str_arg("isCIDR", args, 0)?).is_ok()))
}

/// `addr` with all but the first `prefix` bits cleared.
fn mask(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let m = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(prefix))
            };
            IpAddr::V4(Ipv4Addr::from(bits & m))
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let m = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(prefix))
            };
            IpAddr::V6(Ipv6Addr::from(bits & m))
        }
    }
}

fn contains(c: &Cidr, addr: IpAddr) -> bool {
    c.addr.is_ipv4() == addr.is_ipv4() && mask(addr, c.prefix) == mask(c.addr, c.prefix)
}

fn contains_ip(args: &[Value]) -> Result<Value, ExecutionError> {
    let c = this_cidr("containsIP", args)?;
    let addr = match args.get(1) {
        Some(Value::String(s)) => parse_ip(s).map_err(|e| error("containsIP", e))?,
        _ => opaque_arg::<Ip>("containsIP", args, 1)?.0,
    };
    Ok(Value::Bool(contains(c, addr)))
}

fn contains_cidr(args: &[Value]) -> Result<Value, ExecutionError> {
    let c = this_cidr("containsCIDR", args)?;
    let other = match args.get(1) {
        Some(Value::String(s)) => parse_cidr(s).map_err(|e| error("containsCIDR", e))?,
        _ => opaque_arg::<Cidr>("containsCIDR", args, 1)?.clone(),
    };
    Ok(Value::Bool(
        c.prefix <= other.prefix && contains(c, other.addr),
    ))
}

fn cidr_ip(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(ip_value(this_cidr("ip", args)?.addr))
}

fn masked(args: &[Value]) -> Result<Value, ExecutionError> {
    let c = this_cidr("masked", args)?;
    Ok(cidr_value(Cidr {
        addr: mask(c.addr, c.prefix),
        prefix: c.prefix,
    }))
}

fn prefix_length(args: &[Value]) -> Result<Value, ExecutionError> {
    Ok(Value::Int(i64::from(
        this_cidr("prefixLength", args)?.prefix,
    )))
}

#[cfg(test)]
mod tests {
    use crate::library::testing::{assert_true, eval, eval_err};
    use serde_json::json;

    #[test]
    fn ips() {
        assert_true(
            "isIP('192.168.0.1') && isIP('fd00::1') && !isIP('1.2.3') && !isIP('010.0.0.1')",
        );
        assert_true("ip('192.168.0.1').family() == 4 && ip('::1').family() == 6");
        assert_true("ip('127.0.0.1').isLoopback() && ip('::1').isLoopback()");
        assert_true("ip('0.0.0.0').isUnspecified() && ip('::').isUnspecified()");
        assert_true(
            "ip('224.0.0.1').isLinkLocalMulticast() && ip('ff02::1').isLinkLocalMulticast()",
        );
        assert_true("ip('169.254.1.1').isLinkLocalUnicast() && ip('fe80::1').isLinkLocalUnicast()");
        assert_true("ip('8.8.8.8').isGlobalUnicast() && !ip('255.255.255.255').isGlobalUnicast()");
        assert_true("ip('10.0.0.1') == ip('10.0.0.1') && ip('10.0.0.1') != ip('10.0.0.2')");
        assert_true("ip.isCanonical('2001:db8::1') && !ip.isCanonical('2001:DB8::1')");
        assert_eq!(eval("string(ip('fd00:0::1'))"), Ok(json!("fd00::1")));
        assert!(eval_err("ip('::ffff:1.2.3.4')").contains("IPv4-mapped IPv6 address"));
        assert!(eval_err("ip('fe80::1%eth0')").contains("with zone value is not allowed"));
        assert!(eval_err("ip('nope')").contains("parse error during conversion from string"));
    }

    #[test]
    fn cidrs() {
        assert_true("isCIDR('10.0.0.0/8') && !isCIDR('10.0.0.0') && !isCIDR('10.0.0.0/33')");
        assert_true("cidr('10.0.0.0/8').containsIP(ip('10.1.2.3'))");
        assert_true("cidr('10.0.0.0/8').containsIP('10.1.2.3')");
        assert_true(
            "!cidr('10.0.0.0/8').containsIP('11.0.0.1') && !cidr('10.0.0.0/8').containsIP('::1')",
        );
        assert_true("cidr('10.0.0.0/8').containsCIDR('10.1.0.0/16')");
        assert_true("!cidr('10.1.0.0/16').containsCIDR(cidr('10.0.0.0/8'))");
        assert_true("cidr('192.168.1.5/24').prefixLength() == 24");
        assert_true("cidr('192.168.1.5/24').ip() == ip('192.168.1.5')");
        assert_true("cidr('192.168.1.5/24').masked() == cidr('192.168.1.0/24')");
        assert_true("cidr('fd00::/8').containsIP('fd12::1')");
        assert_eq!(
            eval("string(cidr('fd00::1/64').masked())"),
            Ok(json!("fd00::/64"))
        );
        assert!(eval_err("cidr('10.0.0.0')").contains("network address parse error"));
    }
}
