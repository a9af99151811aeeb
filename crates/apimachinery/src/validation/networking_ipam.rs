//! `networking.k8s.io/v1` ServiceCIDR and IPAddress (upstream `pkg/apis/networking/validation`,
//! `ValidateServiceCIDR*` and `ValidateIPAddress*`), with the strict IP/CIDR rules of
//! `k8s.io/apimachinery/pkg/util/validation/ip.go` (`IsValidIP`, `IsValidCIDR`: no leading zeros,
//! no IPv4-mapped IPv6, no bits past the prefix, canonical form).
//!
//! Both kinds are cluster-scoped; IPAddress names are IP addresses, not DNS names.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use serde_json::Value;

use super::field::{ErrorList, ErrorType, FieldError, FieldPath};
use super::json::{get, get_arr, str_or_empty};
use super::meta::{self, NameRule, FIELD_IMMUTABLE};
use super::names;

/// Go's `%#v` of a `[]string` (upstream prints slices of strings that way in error values).
pub(super) fn go_strings(values: &[Value]) -> String {
    let items: Vec<String> = values
        .iter()
        .map(|v| format!("{:?}", v.as_str().unwrap_or("")))
        .collect();
    format!("[]string{{{}}}", items.join(", "))
}

/// Go's `parseIPv4` as forked in `k8s.io/utils/net` (`ParseIPSloppy`): four decimal fields,
/// leading zeros allowed (and ignored).
fn parse_ipv4_sloppy(s: &str) -> Option<Ipv4Addr> {
    let mut octets = [0u8; 4];
    let mut n = 0;
    for part in s.split('.') {
        if n == 4 || part.is_empty() || !part.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let mut v: u32 = 0;
        for b in part.bytes() {
            v = v * 10 + u32::from(b - b'0');
            if v > 0xFF {
                return None;
            }
        }
        octets[n] = v as u8;
        n += 1;
    }
    (n == 4).then(|| Ipv4Addr::from(octets))
}

/// `netutils.ParseIPSloppy`: an address, tolerating IPv4 fields with leading zeros (also in the
/// dotted tail of an IPv6 address). Zones are rejected, as Go's `net.ParseIP` does.
fn parse_ip_sloppy(s: &str) -> Option<IpAddr> {
    if let Ok(ip) = s.parse::<IpAddr>() {
        return Some(ip);
    }
    if !s.contains(':') {
        return parse_ipv4_sloppy(s).map(IpAddr::V4);
    }
    let (head, tail) = s.rsplit_once(':')?;
    if !tail.contains('.') {
        return None;
    }
    let v4 = parse_ipv4_sloppy(tail)?;
    format!("{head}:{v4}")
        .parse::<Ipv6Addr>()
        .ok()
        .map(IpAddr::V6)
}

/// Whether `ip` is an IPv4-mapped IPv6 address (Go's `netip.Addr.Is4In6`).
fn is_4in6(ip: &IpAddr) -> bool {
    matches!(ip, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some())
}

/// Go's `net.IP.String()`: dotted for IPv4 (and IPv4-mapped IPv6), RFC 5952 for IPv6.
fn go_ip_string(ip: &IpAddr) -> String {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => v4.to_string(),
            None => v6.to_string(),
        },
        IpAddr::V4(v4) => v4.to_string(),
    }
}

/// Upstream's `IsValidIP` (strict, canonical form required): the messages, without a path.
pub(crate) fn ip_messages(value: &str) -> Vec<String> {
    let Some(ip) = parse_ip_sloppy(value) else {
        return vec!["must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)".into()];
    };
    let mut msgs = Vec::new();
    // Strict parsing (Go's netip.ParseAddr) rejects what only the sloppy parser takes: leading 0s.
    if value.parse::<IpAddr>().is_err() {
        msgs.push("must not have leading 0s".to_string());
    }
    if is_4in6(&ip) {
        msgs.push("must not be an IPv4-mapped IPv6 address".to_string());
    }
    if msgs.is_empty() {
        let canonical = go_ip_string(&ip);
        if value != canonical {
            msgs.push(format!("must be in canonical form ({canonical:?})"));
        }
    }
    msgs
}

/// A CIDR as `netutils.ParseCIDRSloppy` reads it: address, prefix length, and whether the address
/// part was written as IPv4 (Go's `iplen`).
struct SloppyCidr {
    ip: IpAddr,
    bits: u8,
}

fn parse_cidr_sloppy(s: &str) -> Option<SloppyCidr> {
    let (addr, mask) = s.split_once('/')?;
    let ip = match parse_ipv4_sloppy(addr) {
        Some(v4) => IpAddr::V4(v4),
        None if addr.contains(':') => parse_ip_sloppy(addr).filter(IpAddr::is_ipv6)?,
        None => return None,
    };
    if mask.is_empty() || !mask.bytes().all(|b| b.is_ascii_digit()) || mask.len() > 8 {
        return None;
    }
    let n: u32 = mask.parse().ok()?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    (n <= max).then_some(SloppyCidr { ip, bits: n as u8 })
}

/// The network address of `ip/bits` (the address with the bits past the prefix cleared).
fn masked(ip: &IpAddr, bits: u8) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => {
            let mask = if bits == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(bits))
            };
            IpAddr::V4(Ipv4Addr::from(u32::from(*v4) & mask))
        }
        IpAddr::V6(v6) => {
            let mask = if bits == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(bits))
            };
            IpAddr::V6(Ipv6Addr::from(u128::from(*v6) & mask))
        }
    }
}

/// Upstream's `IsValidCIDR` (strict, subnet form, canonical): the messages, without a path.
pub(crate) fn cidr_messages(value: &str) -> Vec<String> {
    let Some(c) = parse_cidr_sloppy(value) else {
        return vec!["must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)".into()];
    };
    let (addr, mask) = value.split_once('/').unwrap_or((value, ""));
    let strict_ok = addr.parse::<IpAddr>().is_ok() && (mask == "0" || !mask.starts_with('0'));
    let network = masked(&c.ip, c.bits);
    if !strict_ok {
        return vec!["must not have leading 0s in IP or prefix length".into()];
    }
    if is_4in6(&c.ip) {
        return vec!["must not have an IPv4-mapped IPv6 address".into()];
    }
    if network != c.ip {
        return vec!["must not have bits set beyond the prefix length".into()];
    }
    let canonical = format!("{}/{}", go_ip_string(&network), c.bits);
    if value != canonical {
        return vec![format!("must be in canonical form ({canonical:?})")];
    }
    Vec::new()
}

/// `netutils.IPFamilyOfCIDRString`: `Some(true)` for IPv4, `Some(false)` for IPv6.
fn cidr_is_ipv4(value: &str) -> Option<bool> {
    parse_cidr_sloppy(value).map(|c| c.ip.is_ipv4() || is_4in6(&c.ip))
}

fn cidrs_path() -> FieldPath {
    FieldPath::root("spec").child("cidrs")
}

/// `validateServiceCIDRSpec`.
fn service_cidr_spec(obj: &Value) -> ErrorList {
    let path = cidrs_path();
    let cidrs = get_arr(obj, &["spec", "cidrs"]);
    if cidrs.is_empty() {
        return vec![FieldError::required(&path, "at least one CIDR required")];
    }
    if cidrs.len() > 2 {
        return vec![FieldError::with_value_text(
            ErrorType::Invalid,
            &path,
            format!("networking.ServiceCIDRSpec{{CIDRs:{}}}", go_strings(cidrs)),
            "may only hold up to 2 values",
        )];
    }
    let mut errs = ErrorList::new();
    for (i, c) in cidrs.iter().enumerate() {
        let c = c.as_str().unwrap_or("");
        for m in cidr_messages(c) {
            errs.push(FieldError::invalid(&path.index(i), c, m));
        }
    }
    if cidrs.len() == 2 {
        let fam = |v: &Value| cidr_is_ipv4(v.as_str().unwrap_or(""));
        if let (Some(a), Some(b)) = (fam(&cidrs[0]), fam(&cidrs[1])) {
            if a == b {
                errs.push(FieldError::with_value_text(
                    ErrorType::Invalid,
                    &path,
                    go_strings(cidrs),
                    "may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64",
                ));
            }
        }
    }
    errs
}

/// `ValidateServiceCIDR`.
pub(crate) fn validate_service_cidr(obj: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta(obj, NameRule::Subdomain, true);
    errs.extend(service_cidr_spec(obj));
    errs
}

/// `ValidateServiceCIDRUpdate`: the CIDRs are immutable, except that a single-stack ServiceCIDR may
/// gain a second CIDR (of the other family) to become dual-stack.
pub(crate) fn validate_service_cidr_update(new: &Value, old: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta_update(new, old, true);
    let path = cidrs_path();
    let (n, o) = (
        get_arr(new, &["spec", "cidrs"]),
        get_arr(old, &["spec", "cidrs"]),
    );
    let s = |v: &Value| v.as_str().unwrap_or("").to_string();
    if n.len() == o.len() {
        for (i, (nv, ov)) in n.iter().zip(o).enumerate() {
            if s(nv) != s(ov) {
                errs.push(FieldError::invalid(&path.index(i), s(nv), FIELD_IMMUTABLE));
            }
        }
    } else if o.len() == 1 && n.len() == 2 {
        if s(&n[0]) != s(&o[0]) {
            errs.push(FieldError::invalid(
                &path.index(0),
                s(&n[0]),
                FIELD_IMMUTABLE,
            ));
        }
        errs.extend(service_cidr_spec(new));
    } else {
        errs.push(FieldError::with_value_text(
            ErrorType::Invalid,
            &path,
            go_strings(n),
            FIELD_IMMUTABLE,
        ));
    }
    errs
}

/// `validateIPAddressParentReference`.
fn ip_address_parent_ref(obj: &Value) -> ErrorList {
    let spec = FieldPath::root("spec");
    let Some(pr) = get(obj, &["spec", "parentRef"]) else {
        return vec![FieldError::required(&spec.child("parentRef"), "")];
    };
    let path = spec.child("parentRef");
    let mut errs = ErrorList::new();
    let group = str_or_empty(pr, &["group"]);
    if !group.is_empty() {
        for m in names::is_dns1123_subdomain(group) {
            errs.push(FieldError::invalid(&path.child("group"), group, m));
        }
    }
    for (key, required) in [("resource", true), ("name", true), ("namespace", false)] {
        let v = str_or_empty(pr, &[key]);
        if v.is_empty() {
            if required {
                errs.push(FieldError::required(&path.child(key), ""));
            }
            continue;
        }
        for m in names::is_valid_path_segment_name(v) {
            errs.push(FieldError::invalid(&path.child(key), v, m));
        }
    }
    errs
}

/// Object meta of an IPAddress: `ValidateIPAddressName` (the name must be an IP address in
/// canonical form) in place of the DNS-name rule; a `generateName` fails it the same way, since
/// upstream validates the prefix with that function too.
fn ip_address_meta(obj: &Value) -> ErrorList {
    let name_path = FieldPath::root("metadata").child("name");
    let gen_path = FieldPath::root("metadata").child("generateName");
    let mut errs = ErrorList::new();
    let generate_name = str_or_empty(obj, &["metadata", "generateName"]);
    if !generate_name.is_empty() {
        for m in ip_messages(generate_name) {
            errs.push(FieldError::invalid(&gen_path, generate_name, m));
        }
    }
    let name = str_or_empty(obj, &["metadata", "name"]);
    if !name.is_empty() {
        for m in ip_messages(name) {
            errs.push(FieldError::invalid(&name_path, name, m));
        }
    }
    errs.extend(
        meta::validate_object_meta(obj, NameRule::Subdomain, true)
            .into_iter()
            .filter(|e| {
                !(e.kind == ErrorType::Invalid && (e.field == name_path || e.field == gen_path))
            }),
    );
    errs
}

/// `ValidateIPAddress`.
pub(crate) fn validate_ip_address(obj: &Value) -> ErrorList {
    let mut errs = ip_address_meta(obj);
    errs.extend(ip_address_parent_ref(obj));
    errs
}

/// Go's `%#v` of `networking.ParentReference` (after the pointer is dereferenced).
fn parent_ref_text(pr: Option<&Value>) -> String {
    let Some(pr) = pr else {
        return "null".into();
    };
    let f = |k: &str| format!("{:?}", str_or_empty(pr, &[k]));
    format!(
        "networking.ParentReference{{Group:{}, Resource:{}, Namespace:{}, Name:{}}}",
        f("group"),
        f("resource"),
        f("namespace"),
        f("name")
    )
}

/// `ValidateIPAddressUpdate`: the spec (its parentRef) is immutable.
pub(crate) fn validate_ip_address_update(new: &Value, old: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta_update(new, old, true);
    let (n, o) = (
        get(new, &["spec", "parentRef"]),
        get(old, &["spec", "parentRef"]),
    );
    if !super::json::semantic_eq(n, o) {
        errs.push(FieldError::with_value_text(
            ErrorType::Invalid,
            &FieldPath::root("spec").child("parentRef"),
            parent_ref_text(n),
            FIELD_IMMUTABLE,
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn strings(errs: ErrorList) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    #[test]
    fn ip_and_cidr_rules() {
        for ok in ["10.0.0.1", "2001:db8::1", "::", "fd00::"] {
            assert!(ip_messages(ok).is_empty(), "{ok}");
        }
        let cases = [
            (
                "bad",
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ),
            ("010.0.0.1", "must not have leading 0s"),
            ("::ffff:1.2.3.4", "must not be an IPv4-mapped IPv6 address"),
            ("2001:DB8::1", "must be in canonical form (\"2001:db8::1\")"),
            (
                "2001:db8:0:0:0:0:0:1",
                "must be in canonical form (\"2001:db8::1\")",
            ),
            (
                "fe80::1%eth0",
                "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
            ),
        ];
        for (v, want) in cases {
            assert_eq!(ip_messages(v), vec![want.to_string()], "{v}");
        }
        for ok in ["10.0.0.0/8", "0.0.0.0/0", "fd00::/108", "2001:db8::/64"] {
            assert!(cidr_messages(ok).is_empty(), "{ok}");
        }
        let cases = [
            (
                "10.0.0.0",
                "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ),
            (
                "10.0.0.0/33",
                "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)",
            ),
            (
                "010.0.0.0/8",
                "must not have leading 0s in IP or prefix length",
            ),
            (
                "10.0.0.0/08",
                "must not have leading 0s in IP or prefix length",
            ),
            (
                "::ffff:10.0.0.0/104",
                "must not have an IPv4-mapped IPv6 address",
            ),
            (
                "10.0.0.1/8",
                "must not have bits set beyond the prefix length",
            ),
            (
                "2001:DB8::/64",
                "must be in canonical form (\"2001:db8::/64\")",
            ),
        ];
        for (v, want) in cases {
            assert_eq!(cidr_messages(v), vec![want.to_string()], "{v}");
        }
    }

    fn cidr(cidrs: Value) -> Value {
        json!({"metadata": {"name": "kubernetes"}, "spec": {"cidrs": cidrs}})
    }

    #[test]
    fn service_cidr_create() {
        assert_eq!(
            strings(validate_service_cidr(&cidr(json!(["10.96.0.0/12"])))),
            Vec::<String>::new()
        );
        assert_eq!(
            strings(validate_service_cidr(&cidr(json!([
                "10.96.0.0/12",
                "fd00::/108"
            ])))),
            Vec::<String>::new()
        );
        let cases = [
            (json!([]), "spec.cidrs: Required value: at least one CIDR required"),
            (json!(["10.0.0.0/8", "fd00::/64", "10.1.0.0/16"]),
                "spec.cidrs: Invalid value: networking.ServiceCIDRSpec{CIDRs:[]string{\"10.0.0.0/8\", \"fd00::/64\", \"10.1.0.0/16\"}}: may only hold up to 2 values"),
            (json!(["10.0.0.0/8", "10.1.0.0/16"]),
                "spec.cidrs: Invalid value: []string{\"10.0.0.0/8\", \"10.1.0.0/16\"}: may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64"),
            (json!(["10.0.0.1/8"]),
                "spec.cidrs[0]: Invalid value: \"10.0.0.1/8\": must not have bits set beyond the prefix length"),
            (json!(["10.0.0.0/8", "bad"]),
                "spec.cidrs[1]: Invalid value: \"bad\": must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)"),
        ];
        for (c, want) in cases {
            assert_eq!(
                strings(validate_service_cidr(&cidr(c))),
                vec![want.to_string()]
            );
        }
    }

    #[test]
    fn service_cidr_update() {
        let one = cidr(json!(["10.96.0.0/12"]));
        let dual = cidr(json!(["10.96.0.0/12", "fd00::/108"]));
        assert!(validate_service_cidr_update(&dual, &one).is_empty());
        assert!(validate_service_cidr_update(&one, &one).is_empty());
        assert_eq!(
            strings(validate_service_cidr_update(
                &cidr(json!(["10.0.0.0/8"])),
                &one
            )),
            vec!["spec.cidrs[0]: Invalid value: \"10.0.0.0/8\": field is immutable"]
        );
        assert_eq!(
            strings(validate_service_cidr_update(&one, &dual)),
            vec!["spec.cidrs: Invalid value: []string{\"10.96.0.0/12\"}: field is immutable"]
        );
        assert_eq!(
            strings(validate_service_cidr_update(
                &cidr(json!(["10.96.0.0/12", "10.1.0.0/16"])),
                &one
            )),
            vec!["spec.cidrs: Invalid value: []string{\"10.96.0.0/12\", \"10.1.0.0/16\"}: may specify no more than one IP for each IP family, i.e 192.168.0.0/24 and 2001:db8::/64"]
        );
    }

    fn ip(name: &str, parent: Value) -> Value {
        json!({"metadata": {"name": name}, "spec": {"parentRef": parent}})
    }

    #[test]
    fn ip_address_rules() {
        let svc =
            json!({"group": "", "resource": "services", "namespace": "default", "name": "web"});
        assert!(validate_ip_address(&ip("10.96.0.10", svc.clone())).is_empty());
        assert!(validate_ip_address(&ip("fd00::a", svc.clone())).is_empty());
        let cases = [
            (ip("my-ip", svc.clone()), "metadata.name: Invalid value: \"my-ip\": must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)"),
            (ip("fd00:0::a", svc.clone()), "metadata.name: Invalid value: \"fd00:0::a\": must be in canonical form (\"fd00::a\")"),
            (ip("10.0.0.01", svc.clone()), "metadata.name: Invalid value: \"10.0.0.01\": must not have leading 0s"),
            (json!({"metadata": {"name": "10.0.0.1"}, "spec": {}}), "spec.parentRef: Required value"),
            (ip("10.0.0.1", json!({"name": "web"})), "spec.parentRef.resource: Required value"),
            (ip("10.0.0.1", json!({"resource": "services"})), "spec.parentRef.name: Required value"),
            (ip("10.0.0.1", json!({"resource": "services", "name": "a/b"})), "spec.parentRef.name: Invalid value: \"a/b\": may not contain '/'"),
            (ip("10.0.0.1", json!({"resource": "services", "name": "a", "namespace": ".."})), "spec.parentRef.namespace: Invalid value: \"..\": may not be '..'"),
            (ip("10.0.0.1", json!({"group": "Bad_Group", "resource": "services", "name": "a"})),
                "spec.parentRef.group: Invalid value: \"Bad_Group\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"),
        ];
        for (obj, want) in cases {
            assert_eq!(strings(validate_ip_address(&obj)), vec![want.to_string()]);
        }
        let old = ip("10.0.0.1", svc);
        let new = ip(
            "10.0.0.1",
            json!({"resource": "services", "namespace": "default", "name": "other"}),
        );
        assert_eq!(
            strings(validate_ip_address_update(&new, &old)),
            vec!["spec.parentRef: Invalid value: networking.ParentReference{Group:\"\", Resource:\"services\", Namespace:\"default\", Name:\"other\"}: field is immutable"]
        );
        assert!(validate_ip_address_update(&old, &old).is_empty());
    }
}
