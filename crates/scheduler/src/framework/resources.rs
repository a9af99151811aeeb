//! Resource arithmetic for scheduling (upstream `framework.Resource`, `resourcehelper.PodRequests`,
//! `schedutil.GetNonzeroRequests`): Kubernetes quantity parsing, a pod's effective requests and the
//! host ports a pod binds.

use std::collections::BTreeMap;
use std::fmt;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::HostPort;

/// cpu assumed for a container that requests none, when scoring (upstream `DefaultMilliCPURequest`).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Memory assumed for a container that requests none, when scoring (upstream `DefaultMemoryRequest`).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// Amounts of resources: cpu in millicores, memory and ephemeral storage in bytes, scalar
/// (extended, hugepages-*, attachable-volumes-*, *kubernetes.io/*) resources in units.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resources {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    /// For allocatable: the `pods` resource; for requested: the number of pods.
    pub allowed_pod_number: i64,
    pub scalar: BTreeMap<String, i64>,
}

impl Resources {
    /// Builds from a resource list (e.g. `status.allocatable`). Malformed quantities (which the API
    /// server's validation keeps out) are skipped; [`Resources::try_from_list`] reports them.
    pub fn from_list(list: &BTreeMap<String, Quantity>) -> Resources {
        let mut r = Resources::default();
        for (name, q) in list {
            if let Ok(v) = resource_value(name, &q.0) {
                r.set(name, v);
            }
        }
        r
    }

    /// Like [`Resources::from_list`], failing on the first malformed quantity.
    pub fn try_from_list(list: &BTreeMap<String, Quantity>) -> Result<Resources, QuantityError> {
        let mut r = Resources::default();
        for (name, q) in list {
            r.set(name, resource_value(name, &q.0)?);
        }
        Ok(r)
    }

    /// Sets one resource by its API name; names the scheduler doesn't track are ignored.
    fn set(&mut self, name: &str, v: i64) {
        match name {
            "cpu" => self.milli_cpu = v,
            "memory" => self.memory = v,
            "ephemeral-storage" => self.ephemeral_storage = v,
            "pods" => self.allowed_pod_number = v,
            _ if is_scalar_resource_name(name) => {
                self.scalar.insert(name.to_string(), v);
            }
            _ => {}
        }
    }

    /// Adds (`sign` 1) or subtracts (`sign` -1) `other`; scalar entries that reach zero are
    /// dropped so that adding then removing a pod restores an equal value.
    pub(crate) fn accumulate(&mut self, other: &Resources, sign: i64) {
        self.milli_cpu += sign * other.milli_cpu;
        self.memory += sign * other.memory;
        self.ephemeral_storage += sign * other.ephemeral_storage;
        self.allowed_pod_number += sign * other.allowed_pod_number;
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e += sign * v;
            if *e == 0 {
                self.scalar.remove(k);
            }
        }
    }
}

/// Upstream `schedutil.IsScalarResourceName`: extended, hugepages, attachable volumes and
/// `kubernetes.io/`-prefixed native resources.
pub fn is_scalar_resource_name(name: &str) -> bool {
    let prefixed_native = name.contains("kubernetes.io/");
    let extended = !prefixed_native && name.contains('/') && !name.starts_with("requests.");
    extended
        || prefixed_native
        || name.starts_with("hugepages-")
        || name.starts_with("attachable-volumes-")
}

/// A malformed Kubernetes quantity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuantityError {
    Empty,
    /// No digits, or stray characters in the number.
    InvalidNumber(String),
    /// An unknown suffix or a malformed exponent.
    InvalidSuffix(String),
    /// The value does not fit in an i64 at the requested scale.
    OutOfRange(String),
}

impl fmt::Display for QuantityError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            QuantityError::Empty => write!(f, "quantity is empty"),
            QuantityError::InvalidNumber(s) => write!(f, "quantity {s:?}: invalid number"),
            QuantityError::InvalidSuffix(s) => write!(f, "quantity {s:?}: invalid suffix"),
            QuantityError::OutOfRange(s) => write!(f, "quantity {s:?}: out of range"),
        }
    }
}

impl std::error::Error for QuantityError {}

/// The quantity in whole units (upstream `Quantity.Value`), rounded away from zero.
pub fn parse_quantity(s: &str) -> Result<i64, QuantityError> {
    parse_scaled(s, 0)
}

/// The quantity in thousandths (upstream `Quantity.MilliValue`), rounded away from zero.
pub fn parse_milli_quantity(s: &str) -> Result<i64, QuantityError> {
    parse_scaled(s, 3)
}

/// cpu is counted in millicores, everything else in units.
fn resource_value(name: &str, q: &str) -> Result<i64, QuantityError> {
    if name == "cpu" {
        parse_milli_quantity(q)
    } else {
        parse_quantity(q)
    }
}

/// Parses `<sign><digits>[.<digits>]<suffix>` and returns value * 10^scale.
fn parse_scaled(s: &str, scale: i32) -> Result<i64, QuantityError> {
    if s.is_empty() {
        return Err(QuantityError::Empty);
    }
    let bad_number = || QuantityError::InvalidNumber(s.to_string());
    let (negative, rest) = match s.as_bytes()[0] {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let num_len = rest
        .bytes()
        .take_while(|b| b.is_ascii_digit() || *b == b'.')
        .count();
    let (number, suffix) = rest.split_at(num_len);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if (int_part.is_empty() && frac_part.is_empty()) || frac_part.contains('.') {
        return Err(bad_number());
    }
    // value = digits * 2^bin_exp * 10^dec_exp
    let (bin_exp, suffix_exp): (u32, i64) = match suffix {
        "" => (0, 0),
        "m" => (0, -3),
        "k" => (0, 3),
        "M" => (0, 6),
        "G" => (0, 9),
        "T" => (0, 12),
        "P" => (0, 15),
        "E" => (0, 18),
        "Ki" => (10, 0),
        "Mi" => (20, 0),
        "Gi" => (30, 0),
        "Ti" => (40, 0),
        "Pi" => (50, 0),
        "Ei" => (60, 0),
        _ if suffix.len() > 1 && (suffix.starts_with('e') || suffix.starts_with('E')) => {
            let exp = &suffix[1..];
            let digits = exp.strip_prefix(['+', '-']).unwrap_or(exp);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) || digits.len() > 6
            {
                return Err(QuantityError::InvalidSuffix(s.to_string()));
            }
            (
                0,
                exp.parse::<i64>()
                    .map_err(|_| QuantityError::InvalidSuffix(s.to_string()))?,
            )
        }
        _ => return Err(QuantityError::InvalidSuffix(s.to_string())),
    };
    let mut digits = format!("{int_part}{frac_part}");
    let mut dec_exp = suffix_exp + i64::from(scale) - frac_part.len() as i64;
    while digits.ends_with('0') {
        digits.pop();
        dec_exp += 1;
    }
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Ok(0);
    }
    let out_of_range = || QuantityError::OutOfRange(s.to_string());
    if digits.len() > 30 {
        return Err(out_of_range());
    }
    let mut v: i128 = digits.parse().map_err(|_| bad_number())?;
    v = v.checked_mul(1i128 << bin_exp).ok_or_else(out_of_range)?;
    if dec_exp >= 0 {
        let p = u32::try_from(dec_exp)
            .ok()
            .and_then(|e| 10i128.checked_pow(e))
            .ok_or_else(out_of_range)?;
        v = v.checked_mul(p).ok_or_else(out_of_range)?;
    } else if -dec_exp > 38 {
        v = 1; // a positive value below one unit rounds up to one
    } else {
        let p = 10i128.pow((-dec_exp) as u32);
        v = v / p + i128::from(v % p != 0);
    }
    let v = i64::try_from(v).map_err(|_| out_of_range())?;
    Ok(if negative { -v } else { v })
}

/// Resource name -> amount (cpu in millicores), as summed over containers.
type Amounts = BTreeMap<String, i64>;

fn amounts(list: Option<&BTreeMap<String, Quantity>>) -> Amounts {
    // Malformed quantities count as absent (validation keeps them out of stored pods).
    list.into_iter()
        .flatten()
        .filter_map(|(k, q)| resource_value(k, &q.0).ok().map(|v| (k.clone(), v)))
        .collect()
}

fn add_amounts(dst: &mut Amounts, src: &Amounts) {
    for (k, v) in src {
        *dst.entry(k.clone()).or_insert(0) += v;
    }
}

fn max_amounts(dst: &mut Amounts, src: &Amounts) {
    for (k, v) in src {
        let e = dst.entry(k.clone()).or_insert(*v);
        *e = (*e).max(*v);
    }
}

/// A container's requests as the node sees them (upstream `PodRequests` with
/// `UseStatusResources`, InPlacePodVerticalScaling): while a resize is undecided or in progress,
/// the larger of the spec's requests and what the kubelet reports allocated and applied; once the
/// kubelet found the resize infeasible, what it allocated and applied only.
fn container_amounts(pod: &Pod, c: &Container, non_zero: bool) -> Amounts {
    let spec = amounts(c.resources.as_ref().and_then(|r| r.requests.as_ref()));
    let mut a = match container_status(pod, &c.name) {
        Some(cs) => {
            let mut reported = amounts(cs.allocated_resources.as_ref());
            let applied = amounts(cs.resources.as_ref().and_then(|r| r.requests.as_ref()));
            max_amounts(&mut reported, &applied);
            // A status the kubelet filled without allocations (a simulated node): the spec.
            if !resize_infeasible(pod) || reported.is_empty() {
                max_amounts(&mut reported, &spec);
            }
            reported
        }
        None => spec,
    };
    if non_zero {
        // Only missing requests get the defaults; an explicit zero stays zero (upstream applyNonMissing).
        a.entry("cpu".into()).or_insert(DEFAULT_MILLI_CPU_REQUEST);
        a.entry("memory".into()).or_insert(DEFAULT_MEMORY_REQUEST);
    }
    a
}

fn container_status<'a>(
    pod: &'a Pod,
    name: &str,
) -> Option<&'a k8s_openapi::api::core::v1::ContainerStatus> {
    let status = pod.status.as_ref()?;
    status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
        .find(|s| s.name == name)
}

/// Upstream `IsPodResizeInfeasible`: the kubelet's `PodResizePending` condition says
/// `Infeasible`.
fn resize_infeasible(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == "PodResizePending" && c.reason.as_deref() == Some("Infeasible"))
        })
}

pub(crate) fn is_restartable_init_container(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// Upstream `resourcehelper.PodRequests` (pod-level `spec.resources` ignored, as with the
/// PodLevelResources gate off): the sum of the app containers and sidecars (restartable init
/// containers), at least each init container's needs while it runs (it plus the sidecars started
/// before it), plus `spec.overhead`.
fn aggregate(pod: &Pod, non_zero: bool) -> Amounts {
    let Some(spec) = pod.spec.as_ref() else {
        return Amounts::new();
    };
    let mut total = Amounts::new();
    for c in &spec.containers {
        add_amounts(&mut total, &container_amounts(pod, c, non_zero));
    }
    let mut sidecars = Amounts::new();
    let mut init_peak = Amounts::new();
    for c in spec.init_containers.iter().flatten() {
        let own = container_amounts(pod, c, non_zero);
        if is_restartable_init_container(c) {
            add_amounts(&mut total, &own);
            add_amounts(&mut sidecars, &own);
            max_amounts(&mut init_peak, &sidecars);
        } else {
            let mut running = own;
            add_amounts(&mut running, &sidecars);
            max_amounts(&mut init_peak, &running);
        }
    }
    max_amounts(&mut total, &init_peak);
    add_amounts(&mut total, &amounts(spec.overhead.as_ref()));
    total
}

fn to_resources(a: &Amounts) -> Resources {
    let mut r = Resources::default();
    for (k, v) in a {
        if k != "pods" {
            r.set(k, *v);
        }
    }
    r
}

/// What the pod requests of a node (upstream `resourcehelper.PodRequests`); `allowed_pod_number` is 0.
pub fn pod_requests(pod: &Pod) -> Resources {
    to_resources(&aggregate(pod, false))
}

/// The same with 100m cpu / 200Mi memory for each container that requests none (upstream
/// `NonMissingContainerRequests`, used by scoring so that best-effort pods still count).
pub fn pod_non_zero_requests(pod: &Pod) -> Resources {
    to_resources(&aggregate(pod, true))
}

/// The host ports a pod binds: `hostPort` > 0 of app containers and sidecars.
pub fn pod_host_ports(pod: &Pod) -> Vec<HostPort> {
    let Some(spec) = pod.spec.as_ref() else {
        return Vec::new();
    };
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| is_restartable_init_container(c));
    spec.containers
        .iter()
        .chain(sidecars)
        .flat_map(|c| c.ports.iter().flatten())
        .filter_map(|p| {
            let port = p.host_port.filter(|hp| *hp > 0)?;
            Some(HostPort {
                protocol: p
                    .protocol
                    .clone()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "TCP".into()),
                ip: p
                    .host_ip
                    .clone()
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "0.0.0.0".into()),
                port,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::NodeInfo;
    use k8s_openapi::api::core::v1::Node;
    use serde_json::json;
    use std::sync::Arc;

    #[test]
    fn quantities() {
        // (quantity, whole units, milli-units); None: out of range.
        let ok: &[(&str, i64, Option<i64>)] = &[
            ("500m", 1, Some(500)),
            ("2", 2, Some(2000)),
            ("1.5", 2, Some(1500)),
            ("0.1", 1, Some(100)),
            (".5", 1, Some(500)),
            ("5.", 5, Some(5000)),
            ("+3", 3, Some(3000)),
            ("-1.5", -2, Some(-1500)),
            ("000", 0, Some(0)),
            ("1Ki", 1024, Some(1_024_000)),
            ("64Mi", 64 << 20, Some((64 << 20) * 1000)),
            ("1.5Gi", 3 << 29, Some((3 << 29) * 1000)),
            ("1G", 1_000_000_000, Some(1_000_000_000_000)),
            ("1k", 1000, Some(1_000_000)),
            ("1e3", 1000, Some(1_000_000)),
            ("1E3", 1000, Some(1_000_000)),
            ("1e-3", 1, Some(1)),
            ("12e+1", 120, Some(120_000)),
            ("1E", 1_000_000_000_000_000_000, None),
            ("0.1m", 1, Some(1)),
            ("1e-100", 1, Some(1)),
        ];
        for &(s, units, milli) in ok {
            assert_eq!(parse_quantity(s), Ok(units), "units of {s:?}");
            let want_milli = milli.ok_or_else(|| QuantityError::OutOfRange(s.into()));
            assert_eq!(parse_milli_quantity(s), want_milli, "milli of {s:?}");
        }
        type Kind = fn(String) -> QuantityError;
        let bad: &[(&str, Kind)] = &[
            ("abc", QuantityError::InvalidNumber),
            ("m", QuantityError::InvalidNumber),
            (".", QuantityError::InvalidNumber),
            ("1.2.3", QuantityError::InvalidNumber),
            ("1Qi", QuantityError::InvalidSuffix),
            ("1e", QuantityError::InvalidSuffix),
            ("1 Gi", QuantityError::InvalidSuffix),
            ("1e1x", QuantityError::InvalidSuffix),
            ("1e40", QuantityError::OutOfRange),
            (
                "99999999999999999999999999999999",
                QuantityError::OutOfRange,
            ),
        ];
        for &(s, kind) in bad {
            assert_eq!(parse_quantity(s), Err(kind(s.into())), "{s:?}");
            assert_eq!(parse_milli_quantity(s), Err(kind(s.into())), "{s:?}");
        }
        assert_eq!(parse_quantity(""), Err(QuantityError::Empty));
    }

    #[test]
    fn from_list_classifies_resources() {
        let list: BTreeMap<String, Quantity> = serde_json::from_value(json!({
            "cpu": "4", "memory": "8Gi", "ephemeral-storage": "10G", "pods": "110",
            "nvidia.com/gpu": "2", "hugepages-2Mi": "64Mi", "kubernetes.io/something": "1", "bogus": "5",
        }))
        .unwrap();
        let r = Resources::from_list(&list);
        assert_eq!(r.milli_cpu, 4000);
        assert_eq!(r.memory, 8 << 30);
        assert_eq!(r.ephemeral_storage, 10_000_000_000);
        assert_eq!(r.allowed_pod_number, 110);
        let scalar: Vec<_> = r.scalar.keys().map(String::as_str).collect();
        assert_eq!(
            scalar,
            ["hugepages-2Mi", "kubernetes.io/something", "nvidia.com/gpu"]
        );

        let bad: BTreeMap<String, Quantity> =
            serde_json::from_value(json!({"cpu": "x", "memory": "1Gi"})).unwrap();
        assert_eq!(Resources::from_list(&bad).memory, 1 << 30);
        assert_eq!(
            Resources::try_from_list(&bad),
            Err(QuantityError::InvalidNumber("x".into()))
        );
    }

    /// A container from "cpu/memory" requests; a leading "s:" makes it a sidecar.
    fn container(desc: &str) -> serde_json::Value {
        let (sidecar, desc) = desc.strip_prefix("s:").map_or((false, desc), |d| (true, d));
        let req = match desc.split_once('/') {
            Some((cpu, mem)) => json!({"cpu": cpu, "memory": mem}),
            None => json!({}),
        };
        let mut c = json!({"name": desc, "resources": {"requests": req}});
        if sidecar {
            c["restartPolicy"] = json!("Always");
        }
        c
    }

    fn pod(containers: &[&str], inits: &[&str], overhead: serde_json::Value) -> Pod {
        let cs: Vec<_> = containers.iter().map(|d| container(d)).collect();
        let is: Vec<_> = inits.iter().map(|d| container(d)).collect();
        serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": cs, "initContainers": is, "overhead": overhead},
        }))
        .unwrap()
    }

    #[test]
    fn pod_requests_cases() {
        type Case<'a> = (&'a str, &'a [&'a str], &'a [&'a str], i64, i64);
        // (name, containers, init containers, want cpu milli, want memory MB)
        let cases: &[Case] = &[
            ("containers add up", &["1/1G", "500m/1G"], &[], 1500, 2000),
            (
                "upstream's doc example",
                &["2/1G", "1/1G"],
                &["2/1G", "2/3G"],
                3000,
                3000,
            ),
            ("sidecar adds up", &["1/1G"], &["s:500m/1G"], 1500, 2000),
            (
                "init after sidecar",
                &["100m/100M"],
                &["s:1/1G", "2/1G"],
                3000,
                2000,
            ),
            (
                "init before sidecar",
                &["100m/100M"],
                &["2/1G", "s:1/1G"],
                2000,
                1100,
            ),
        ];
        for &(name, containers, inits, cpu, mem) in cases {
            let r = pod_requests(&pod(containers, inits, json!({})));
            assert_eq!((r.milli_cpu, r.memory), (cpu, mem * 1_000_000), "{name}");
        }
        let overhead = json!({"cpu": "250m", "memory": "120M"});
        let r = pod_requests(&pod(&["1/1G"], &["3/1G"], overhead));
        assert_eq!(
            (r.milli_cpu, r.memory),
            (3250, 1_120_000_000),
            "overhead is added"
        );
    }

    #[test]
    fn non_zero_requests_fill_only_missing() {
        let mut p = pod(&["none"], &[], json!({"cpu": "10m"}));
        p.spec.as_mut().unwrap().containers.push(
            serde_json::from_value(json!({"name": "b", "resources": {"requests": {"cpu": "0"}}}))
                .unwrap(),
        );
        let r = pod_requests(&p);
        assert_eq!((r.milli_cpu, r.memory), (10, 0));
        let nz = pod_non_zero_requests(&p);
        assert_eq!(
            (nz.milli_cpu, nz.memory),
            (100 + 10, 2 * DEFAULT_MEMORY_REQUEST)
        );
    }

    #[test]
    fn node_info_add_remove() {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "status": {"allocatable": {"cpu": "2", "memory": "4Gi", "pods": "10", "example.com/foo": "3"}},
        }))
        .unwrap();
        let mut ni = NodeInfo::new(Arc::new(node));
        assert_eq!(ni.name(), "n1");
        assert_eq!(
            (ni.allocatable.milli_cpu, ni.allocatable.allowed_pod_number),
            (2000, 10)
        );
        let mut p1 = pod(&["1/0"], &[], json!({}));
        let c0 = &mut p1.spec.as_mut().unwrap().containers[0];
        let reqs = c0.resources.as_mut().unwrap().requests.as_mut().unwrap();
        reqs.insert("example.com/foo".into(), Quantity("1".into()));
        c0.ports = Some(
            serde_json::from_value(json!([
                {"containerPort": 80, "hostPort": 8080},
                {"containerPort": 81, "hostPort": 0},
                {"containerPort": 53, "hostPort": 53, "protocol": "UDP", "hostIP": "127.0.0.1"},
            ]))
            .unwrap(),
        );
        ni.add_pod(Arc::new(p1));
        let p2: Pod = serde_json::from_value(json!({
            "metadata": {"name": "q", "namespace": "ns"}, "spec": {"containers": [{"name": "c"}]},
        }))
        .unwrap();
        ni.add_pod(Arc::new(p2));
        assert_eq!(ni.requested.milli_cpu, 1000);
        assert_eq!(ni.requested.allowed_pod_number, 2);
        assert_eq!(ni.requested.scalar.get("example.com/foo"), Some(&1));
        assert_eq!(ni.non_zero_requested.milli_cpu, 1100);
        assert_eq!(ni.non_zero_requested.memory, DEFAULT_MEMORY_REQUEST); // p1 asks 0 explicitly
        assert_eq!(
            ni.used_ports,
            vec![
                HostPort {
                    protocol: "TCP".into(),
                    ip: "0.0.0.0".into(),
                    port: 8080
                },
                HostPort {
                    protocol: "UDP".into(),
                    ip: "127.0.0.1".into(),
                    port: 53
                },
            ]
        );
        assert!(!ni.remove_pod("other", "p"));
        assert!(ni.remove_pod("ns", "p"));
        assert!(ni.remove_pod("ns", "q"));
        assert_eq!(ni.requested, Resources::default());
        assert_eq!(ni.non_zero_requested, Resources::default());
        assert!(ni.used_ports.is_empty() && ni.pods.is_empty());
    }

    #[test]
    fn resized_pods_count_the_larger_of_spec_and_allocation_unless_infeasible() {
        let pod = |cpu: &str, reason: &str| -> Pod {
            serde_json::from_value(json!({
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]},
                "status": {
                    "conditions": [{"type": "PodResizePending", "status": "True", "reason": reason}],
                    "containerStatuses": [{"name": "c", "image": "i", "imageID": "", "ready": true,
                        "restartCount": 0, "allocatedResources": {"cpu": "500m"},
                        "resources": {"requests": {"cpu": "500m"}}}]}
            }))
            .unwrap()
        };
        assert_eq!(pod_requests(&pod("2", "Deferred")).milli_cpu, 2000);
        assert_eq!(pod_requests(&pod("100m", "Deferred")).milli_cpu, 500);
        assert_eq!(pod_requests(&pod("2", "Infeasible")).milli_cpu, 500);
        // No status: the spec.
        let mut plain = pod("2", "Infeasible");
        plain.status = None;
        assert_eq!(pod_requests(&plain).milli_cpu, 2000);
    }
}
