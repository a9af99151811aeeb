//! The pure decisions of the ServiceCIDR controller (upstream `servicecidrs_controller.go`'s `sync`
//! and `canDeleteCIDR`, and `pkg/api/servicecidr`'s prefix lookups).

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::networking::v1::{IPAddress, ServiceCIDR};
use serde_json::{json, Value};

/// Upstream `ServiceCIDRProtectionFinalizer`.
pub const FINALIZER: &str = "networking.k8s.io/service-cidr-finalizer";
/// Upstream `networkingv1.LabelManagedBy` and the API server's allocator name.
pub const LABEL_MANAGED_BY: &str = "ipaddress.kubernetes.io/managed-by";
pub const IPALLOCATOR: &str = "ipallocator.k8s.io";
/// Upstream `deletionGracePeriod`: how long a deleted ServiceCIDR keeps its finalizer after nothing
/// blocks it, so every API server's allocator has stopped using it.
pub const DELETION_GRACE: Duration = Duration::from_secs(10);
pub const READY_MESSAGE: &str = "Kubernetes Service CIDR is ready";
/// Upstream `ServiceCIDRReasonTerminating`.
pub const REASON_TERMINATING: &str = "Terminating";
pub const TERMINATING_MESSAGE: &str =
    "There are still IPAddresses referencing the ServiceCIDR, please remove them or create a new ServiceCIDR";

/// A masked prefix.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prefix {
    base: u128,
    bits: u8,
    v6: bool,
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

impl Prefix {
    pub fn parse(s: &str) -> Option<Prefix> {
        let (ip, bits) = s.split_once('/')?;
        let ip: IpAddr = ip.parse().ok()?;
        let bits: u8 = bits.parse().ok()?;
        let width = if ip.is_ipv6() { 128 } else { 32 };
        if bits > width {
            return None;
        }
        let mut p = Prefix {
            base: to_u128(ip),
            bits,
            v6: ip.is_ipv6(),
        };
        p.base &= p.mask();
        Some(p)
    }

    fn mask(&self) -> u128 {
        let width: u32 = if self.v6 { 128 } else { 32 };
        let host = width - u32::from(self.bits);
        let all = if self.v6 {
            u128::MAX
        } else {
            u128::from(u32::MAX)
        };
        if host == 128 {
            0
        } else {
            all & !((1u128 << host) - 1)
        }
    }

    pub fn contains_addr(&self, ip: IpAddr) -> bool {
        ip.is_ipv6() == self.v6 && to_u128(ip) & self.mask() == self.base
    }

    /// `other` lies inside this prefix (or is it).
    pub fn contains(&self, other: &Prefix) -> bool {
        other.v6 == self.v6 && other.bits >= self.bits && other.base & self.mask() == self.base
    }

    pub fn overlaps(&self, other: &Prefix) -> bool {
        self.contains(other) || other.contains(self)
    }

    pub fn family(&self) -> &'static str {
        if self.v6 {
            "IPv6"
        } else {
            "IPv4"
        }
    }
}

pub fn prefixes(sc: &ServiceCIDR) -> Vec<Prefix> {
    sc.spec
        .as_ref()
        .and_then(|s| s.cidrs.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| Prefix::parse(c))
        .collect()
}

fn name(sc: &ServiceCIDR) -> &str {
    sc.metadata.name.as_deref().unwrap_or("")
}

/// Upstream `OverlapsPrefix` over every prefix of `sc`: the ServiceCIDRs to look at again when it
/// appears.
pub fn overlapping(all: &[Arc<ServiceCIDR>], sc: &ServiceCIDR) -> Vec<String> {
    let mine = prefixes(sc);
    let mut out: Vec<String> = all
        .iter()
        .filter(|o| {
            prefixes(o)
                .iter()
                .any(|p| mine.iter().any(|m| m.overlaps(p)))
        })
        .map(|o| name(o).to_string())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The allocator's address of an IPAddress (others are not this controller's concern).
pub fn managed_address(ip: &IPAddress) -> Option<IpAddr> {
    let managed = ip
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_MANAGED_BY))
        .is_some_and(|v| v == IPALLOCATOR);
    if !managed {
        return None;
    }
    ip.metadata.name.as_deref()?.parse().ok()
}

/// Upstream `ContainsAddress`: the ServiceCIDRs whose prefixes hold `ip`.
pub fn containing_address(all: &[Arc<ServiceCIDR>], ip: IpAddr) -> Vec<String> {
    all.iter()
        .filter(|sc| prefixes(sc).iter().any(|p| p.contains_addr(ip)))
        .map(|sc| name(sc).to_string())
        .collect()
}

/// Upstream `canDeleteCIDR`: a ServiceCIDR may go when another ServiceCIDR holds each of its
/// prefixes, or when no address of the allocator lies only in it.
pub fn can_delete(sc: &ServiceCIDR, all: &[Arc<ServiceCIDR>], ips: &[Arc<IPAddress>]) -> bool {
    let me = name(sc);
    let mine = prefixes(sc);
    let has_parent = mine.iter().all(|p| {
        all.iter()
            .any(|o| name(o) != me && prefixes(o).iter().any(|q| q.contains(p)))
    });
    if has_parent {
        return true;
    }
    for ip in ips.iter().filter_map(|i| managed_address(i)) {
        if !mine.iter().any(|p| p.contains_addr(ip)) {
            continue;
        }
        let holders = containing_address(all, ip);
        if holders.len() == 1 && holders[0] == me {
            return false;
        }
    }
    true
}

/// What the controller does with one ServiceCIDR.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// Deleting, addresses still depend on it: Ready=False, reason Terminating.
    Blocked {
        status: Option<Value>,
    },
    /// Deleting, unblocked, but within the grace period: look again after it.
    Wait(Duration),
    RemoveFinalizer,
    /// Live: the finalizer (if missing) and Ready=True (if not already so).
    Live {
        add_finalizer: bool,
        status: Option<Value>,
    },
}

fn has_finalizer(sc: &ServiceCIDR) -> bool {
    sc.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == FINALIZER)
}

/// The status whose Ready condition is `(status, reason, message)`, or `None` when the current one
/// already says so (upstream `updateConditionIfNeeded`); other conditions are kept.
pub fn ready_condition(
    sc: &ServiceCIDR,
    status: &str,
    reason: &str,
    message: &str,
    now: &str,
) -> Option<Value> {
    let current: Vec<Value> = sc
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|c| serde_json::to_value(c).ok())
        .collect();
    let same = current.iter().any(|c| {
        c["type"] == "Ready"
            && c["status"] == status
            && c["reason"] == reason
            && c["message"] == message
    });
    if same {
        return None;
    }
    let mut conditions: Vec<Value> = current
        .into_iter()
        .filter(|c| c["type"] != "Ready")
        .collect();
    conditions.push(json!({
        "type": "Ready",
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": now,
    }));
    Some(json!({"conditions": conditions}))
}

/// Upstream `sync` for one ServiceCIDR. `deleting_for` is how long ago its deletion started.
pub fn decide(
    sc: &ServiceCIDR,
    all: &[Arc<ServiceCIDR>],
    ips: &[Arc<IPAddress>],
    deleting_for: Option<Duration>,
    now: &str,
) -> Decision {
    match deleting_for {
        Some(elapsed) => {
            if !can_delete(sc, all, ips) {
                return Decision::Blocked {
                    status: ready_condition(
                        sc,
                        "False",
                        REASON_TERMINATING,
                        TERMINATING_MESSAGE,
                        now,
                    ),
                };
            }
            if elapsed < DELETION_GRACE {
                return Decision::Wait(DELETION_GRACE - elapsed);
            }
            if has_finalizer(sc) {
                Decision::RemoveFinalizer
            } else {
                Decision::Wait(Duration::ZERO)
            }
        }
        None => Decision::Live {
            add_finalizer: !has_finalizer(sc),
            status: ready_condition(sc, "True", "", READY_MESSAGE, now),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(name: &str, cidrs: &[&str]) -> Arc<ServiceCIDR> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"cidrs": cidrs}}))
                .unwrap(),
        )
    }

    fn ip(addr: &str, managed: bool) -> Arc<IPAddress> {
        let by = if managed { IPALLOCATOR } else { "someone-else" };
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": addr, "labels": {LABEL_MANAGED_BY: by}},
                "spec": {"parentRef": {"group": "", "resource": "services", "namespace": "d", "name": "s"}},
            }))
            .unwrap(),
        )
    }

    #[test]
    fn prefixes_contain_and_overlap() {
        let big = Prefix::parse("10.96.0.0/12").unwrap();
        let small = Prefix::parse("10.96.1.0/24").unwrap();
        assert!(big.contains(&small) && !small.contains(&big));
        assert!(small.overlaps(&big));
        assert!(big.contains_addr("10.100.0.1".parse().unwrap()));
        assert!(!big.contains_addr("fd00::1".parse().unwrap()));
        assert!(!Prefix::parse("10.97.0.0/16").unwrap().overlaps(&small));
        assert_eq!(Prefix::parse("fd00::/64").unwrap().family(), "IPv6");
    }

    #[test]
    fn deletion_waits_for_addresses_only_it_holds() {
        let default = cidr("kubernetes", &["10.96.0.0/28"]);
        let extra = cidr("extra", &["10.97.0.0/28"]);
        let all = vec![default.clone(), extra.clone()];
        let used = vec![ip("10.97.0.5", true)];
        assert!(!can_delete(&extra, &all, &used));
        assert!(
            can_delete(&extra, &all, &[ip("10.97.0.5", false)]),
            "not the allocator's"
        );
        assert!(
            can_delete(&extra, &all, &[ip("10.96.0.5", true)]),
            "in another range"
        );
        let parent = cidr("parent", &["10.97.0.0/16"]);
        let with_parent = vec![default, extra.clone(), parent];
        assert!(
            can_delete(&extra, &with_parent, &used),
            "a larger ServiceCIDR holds it"
        );
        let same = cidr("same", &["10.97.0.0/28"]);
        assert!(
            can_delete(&extra, &[extra.clone(), same], &used),
            "a twin holds it"
        );
    }

    #[test]
    fn decisions() {
        let now = "2026-01-01T00:00:00Z";
        let sc = cidr("extra", &["10.97.0.0/28"]);
        let all = vec![sc.clone()];
        match decide(&sc, &all, &[], None, now) {
            Decision::Live {
                add_finalizer,
                status,
            } => {
                assert!(add_finalizer);
                let status = status.unwrap();
                assert_eq!(status["conditions"][0]["status"], "True");
                assert_eq!(status["conditions"][0]["message"], READY_MESSAGE);
            }
            other => panic!("{other:?}"),
        }
        let mut ready: ServiceCIDR = (*sc).clone();
        ready.metadata.finalizers = Some(vec![FINALIZER.into()]);
        ready.status =
            serde_json::from_value(json!({"conditions": [{"type": "Ready", "status": "True",
            "reason": "", "message": READY_MESSAGE, "lastTransitionTime": now}]}))
            .unwrap();
        assert_eq!(
            decide(&ready, &all, &[], None, now),
            Decision::Live {
                add_finalizer: false,
                status: None
            }
        );
        let used = vec![ip("10.97.0.3", true)];
        match decide(&ready, &all, &used, Some(Duration::ZERO), now) {
            Decision::Blocked { status: Some(s) } => {
                assert_eq!(s["conditions"][0]["status"], "False");
                assert_eq!(s["conditions"][0]["reason"], "Terminating");
                assert_eq!(s["conditions"][0]["message"], TERMINATING_MESSAGE);
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(
            decide(&ready, &all, &[], Some(Duration::from_secs(4)), now),
            Decision::Wait(Duration::from_secs(6))
        );
        assert_eq!(
            decide(&ready, &all, &[], Some(Duration::from_secs(11)), now),
            Decision::RemoveFinalizer
        );
    }
}
