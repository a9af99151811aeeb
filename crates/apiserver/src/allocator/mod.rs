//! Service IP and node port allocation (upstream `registry/core/service/ipallocator`'s
//! `MetaAllocator` and `Allocator`, and `portallocator`), with the state in storage so several API
//! servers on one store never hand out the same address or port.
//!
//! ClusterIPs: an address is taken iff an `IPAddress` object named by it exists. A Service's address
//! is reserved by creating that object (labels `ipaddress.kubernetes.io/ip-family` and
//! `ipaddress.kubernetes.io/managed-by: ipallocator.k8s.io`, `spec.parentRef` naming the Service)
//! before the Service is stored; the store's create-if-absent is the arbiter between servers, and a
//! conflict means "taken, try another". Addresses come from the union of the ServiceCIDRs that are
//! ready (no `Ready` condition, or `Ready=True`) and not being deleted, read from the watch cache;
//! [`default_cidr`] keeps the `kubernetes` ServiceCIDR made from `--service-cluster-ip-range`, and
//! [`repair`] is upstream's `ipallocator-repair-controller`. Dynamic allocation picks a random start in
//! the upper part of a range and scans (KEP-3070), so low addresses stay free for static use.
//!
//! Node ports: [`nodeports`], a bitmap stored under `/ranges/servicenodeports` (upstream's key) and
//! written with a compare-and-swap on its revision.
//!
//! Differences: single-stack only (the family of `--service-cluster-ip-range`; ServiceCIDRs of the
//! other family are ignored); a dry-run create returns a free-looking address without reserving it
//! (upstream returns the range's network address).
//!
//! Updates ([`update`]): a type change allocates or frees the ClusterIP, node ports and the
//! health check node port as upstream's `allocateUpdate`, freeing what the old object held only
//! once the new one is stored.

pub mod cidr;
pub mod default_cidr;
pub mod nodeports;
pub mod repair;
pub mod update;

use std::net::IpAddr;
use std::sync::Arc;

use apimachinery::status::{ApiError, Qualified};
use apimachinery::validation::field::{FieldError, FieldPath};
use futures::future::BoxFuture;
use rand::Rng;
use serde_json::{json, Value};

use crate::{objects, ApiServer};
use cidr::Cidr;

/// The label naming an IPAddress's family (upstream `networkingv1.LabelIPAddressFamily`).
pub const LABEL_IP_FAMILY: &str = "ipaddress.kubernetes.io/ip-family";
/// The label naming who manages an IPAddress (upstream `networkingv1.LabelManagedBy`).
pub const LABEL_MANAGED_BY: &str = "ipaddress.kubernetes.io/managed-by";
/// The Service IP allocator's name in that label (upstream `ipallocator.ControllerName`).
pub const CONTROLLER_NAME: &str = "ipallocator.k8s.io";

const NETWORKING: &str = "networking.k8s.io";
/// Candidates a dynamic allocation looks at in one subrange before trying the next.
const MAX_SCAN: u128 = 1 << 21;

/// Why an explicit address cannot be had (upstream's `ipallocator` errors).
#[derive(Debug, PartialEq, Eq)]
pub enum IpError {
    Full,
    Allocated,
    MismatchedNetwork,
    NotInRange { ip: IpAddr, valid: String },
    Other(String),
}

impl std::fmt::Display for IpError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IpError::Full => f.write_str("range is full"),
            IpError::Allocated => f.write_str("provided IP is already allocated"),
            IpError::MismatchedNetwork => {
                f.write_str("the provided network does not match the current range")
            }
            IpError::NotInRange { ip, valid } => write!(
                f,
                "the provided IP ({ip}) is not in the valid range. The range of valid IPs is {valid}"
            ),
            IpError::Other(e) => f.write_str(e),
        }
    }
}

/// A ServiceCIDR as the allocator sees it.
#[derive(Clone, Debug, PartialEq)]
pub struct ServiceCidrInfo {
    pub name: String,
    pub cidrs: Vec<Cidr>,
    /// Ready (or not yet judged) and not being deleted: new addresses may come from it.
    pub allocatable: bool,
}

impl ServiceCidrInfo {
    pub fn from_json(obj: &Value) -> ServiceCidrInfo {
        let cidrs = obj
            .pointer("/spec/cidrs")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
            .filter_map(Cidr::parse)
            .collect();
        let deleting = objects::meta_str(obj, "deletionTimestamp").is_some();
        ServiceCidrInfo {
            name: objects::name(obj).to_string(),
            cidrs,
            allocatable: is_ready(obj) && !deleting,
        }
    }
}

/// Upstream `isReady`: the `Ready` condition, and ready when there is none (so allocation works
/// while no controller manager has judged the ServiceCIDR).
pub fn is_ready(obj: &Value) -> bool {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        .map(|c| c.get("status").and_then(Value::as_str) == Some("True"))
        .unwrap_or(true)
}

/// The storage key of a cluster-scoped networking object.
fn networking_key(api: &ApiServer, plural: &str, name: &str) -> String {
    let storage = api
        .registry
        .get(NETWORKING, "v1", plural)
        .map(|r| r.storage.clone())
        .unwrap_or_else(|| plural.to_string());
    format!("/{storage}/{name}")
}

pub fn ipaddress_key(api: &ApiServer, ip: &IpAddr) -> String {
    networking_key(api, "ipaddresses", &ip.to_string())
}

/// Every ServiceCIDR in the watch cache.
pub fn service_cidrs(api: &ApiServer) -> Vec<ServiceCidrInfo> {
    let storage = api
        .registry
        .get(NETWORKING, "v1", "servicecidrs")
        .map(|r| r.storage.clone())
        .unwrap_or_else(|| "servicecidrs".into());
    let Some(cache) = api.caches.get(&storage) else {
        return Vec::new();
    };
    cache
        .list(&format!("/{storage}/"), &Default::default())
        .iter()
        .filter_map(|o| serde_json::from_slice::<Value>(&o.json).ok())
        .map(|v| ServiceCidrInfo::from_json(&v))
        .collect()
}

/// The IPAddress object upstream's allocator creates for a Service's address.
pub fn ipaddress_object(ip: &IpAddr, namespace: &str, name: &str) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "IPAddress",
        "metadata": {
            "name": ip.to_string(),
            "labels": {LABEL_IP_FAMILY: cidr::family(ip), LABEL_MANAGED_BY: CONTROLLER_NAME},
        },
        "spec": {"parentRef": {"group": "", "resource": "services", "namespace": namespace, "name": name}},
    })
}

/// Creates the IPAddress of `ip` for a Service through the ordinary create path (so it gets normal
/// metadata and is watched). `Err(Allocated)` when it exists.
pub async fn create_ipaddress(
    api: &Arc<ApiServer>,
    ip: &IpAddr,
    namespace: &str,
    name: &str,
) -> Result<(), IpError> {
    let obj = ipaddress_object(ip, namespace, name);
    let create = crate::rest::create_internal(api, (NETWORKING, "v1", "ipaddresses"), None, obj);
    match create.await {
        Ok(()) => Ok(()),
        Err(e) if e.code == 409 => Err(IpError::Allocated),
        Err(e) => Err(IpError::Other(e.message)),
    }
}

/// The `(namespace, name)` an IPAddress's parentRef names when it is a Service.
pub fn parent_service(ipaddress: &Value) -> Option<(String, String)> {
    let r = ipaddress.pointer("/spec/parentRef")?;
    let field = |f: &str| r.get(f).and_then(Value::as_str).unwrap_or("").to_string();
    (field("group").is_empty() && field("resource") == "services")
        .then(|| (field("namespace"), field("name")))
}

/// Deletes the IPAddress of `ip` if it is the given Service's (by its parentRef); with no Service
/// given, whatever it references. Returns whether it deleted one.
pub async fn delete_ipaddress(
    api: &ApiServer,
    ip: &IpAddr,
    owner: Option<(&str, &str)>,
) -> Result<bool, String> {
    let key = ipaddress_key(api, ip);
    for _ in 0..5 {
        let Some(kv) = api.store.get(&key).await.map_err(|e| e.to_string())? else {
            return Ok(false);
        };
        if let Some((ns, name)) = owner {
            let obj: Value = serde_json::from_slice(&kv.value).unwrap_or(Value::Null);
            if parent_service(&obj) != Some((ns.to_string(), name.to_string())) {
                return Ok(false);
            }
        }
        match api.store.delete(&key, Some(kv.mod_revision)).await {
            Ok(_) => return Ok(true),
            Err(storage::Error::NotFound { .. }) => return Ok(false),
            Err(storage::Error::Conflict { .. }) => continue,
            Err(e) => return Err(e.to_string()),
        }
    }
    Err(format!("IPAddress {ip} kept changing"))
}

/// The Service's cluster IPs (`clusterIPs`, else `clusterIP`), as written.
pub fn cluster_ips(svc: &Value) -> Vec<String> {
    let list: Vec<String> = svc
        .pointer("/spec/clusterIPs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    if !list.is_empty() {
        return list;
    }
    svc.pointer("/spec/clusterIP")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(|s| vec![s.to_string()])
        .unwrap_or_default()
}

pub struct ServiceAllocator {
    default_cidr: Cidr,
    node_ports: nodeports::NodePorts,
}

impl ServiceAllocator {
    /// `cidr` like "10.96.0.0/12" (`--service-cluster-ip-range`).
    pub fn new(cidr: &str) -> Result<ServiceAllocator, String> {
        let parsed = Cidr::parse(cidr).ok_or_else(|| format!("invalid service CIDR {cidr:?}"))?;
        if parsed.v6 && parsed.bits < 64 {
            return Err(format!(
                "service CIDR {cidr:?}: shortest allowed prefix length for service CIDR is 64, got {}",
                parsed.bits
            ));
        }
        if !parsed.v6 && !(8..=30).contains(&parsed.bits) {
            return Err(format!(
                "service CIDR {cidr:?}: prefix must be between /8 and /30"
            ));
        }
        Ok(ServiceAllocator {
            default_cidr: parsed,
            node_ports: nodeports::NodePorts::new(30000, 32767),
        })
    }

    /// `--service-node-port-range` (`lo`-`hi`, both included) instead of upstream's default
    /// 30000-32767.
    pub fn with_node_port_range(
        mut self,
        (lo, hi): (u16, u16),
    ) -> Result<ServiceAllocator, String> {
        if lo == 0 || lo > hi {
            return Err(format!("invalid service node port range {lo}-{hi}"));
        }
        self.node_ports = nodeports::NodePorts::new(lo, hi);
        Ok(self)
    }

    /// The first usable address: the `kubernetes` Service's ClusterIP.
    pub fn first_ip(&self) -> String {
        self.default_cidr
            .first_ip()
            .map(|ip| ip.to_string())
            .unwrap_or_default()
    }

    /// `--service-cluster-ip-range`, masked.
    pub fn default_cidr(&self) -> Cidr {
        self.default_cidr
    }

    pub fn node_ports(&self) -> &nodeports::NodePorts {
        &self.node_ports
    }

    /// Fills `spec.clusterIP(s)`, `ipFamilies`, `ipFamilyPolicy` and missing node ports of a new
    /// Service, reserving them in storage (not for a dry run), or rejects addresses and ports that
    /// are taken or out of range (422). On error nothing stays reserved.
    ///
    /// Boxed: reserving an address creates an IPAddress through the create path that calls this.
    pub fn allocate<'a>(
        &'a self,
        api: &'a Arc<ApiServer>,
        svc: &'a mut Value,
        dry_run: bool,
    ) -> BoxFuture<'a, Result<(), ApiError>> {
        Box::pin(self.allocate_unboxed(api, svc, dry_run))
    }

    async fn allocate_unboxed(
        &self,
        api: &Arc<ApiServer>,
        svc: &mut Value,
        dry_run: bool,
    ) -> Result<(), ApiError> {
        let svc_type = svc
            .pointer("/spec/type")
            .and_then(Value::as_str)
            .unwrap_or("ClusterIP")
            .to_string();
        let reserved = if svc_type != "ExternalName" {
            self.allocate_cluster_ip(api, svc, dry_run).await?
        } else {
            None
        };
        if matches!(svc_type.as_str(), "NodePort" | "LoadBalancer") {
            if let Err(e) = self.node_ports.allocate(api, svc, dry_run).await {
                if let Some(ip) = reserved {
                    self.release_ip(api, svc, ip).await;
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Fills `spec.clusterIP(s)`, `ipFamilies` and `ipFamilyPolicy` of a Service that gets a
    /// ClusterIP (or is headless), reserving the address; returns the address reserved (none for
    /// a headless Service or a dry run).
    pub(crate) async fn allocate_cluster_ip(
        &self,
        api: &Arc<ApiServer>,
        svc: &mut Value,
        dry_run: bool,
    ) -> Result<Option<IpAddr>, ApiError> {
        let name = objects::name(svc).to_string();
        let namespace = objects::namespace(svc).to_string();
        let invalid =
            |errs: Vec<FieldError>| ApiError::invalid(&Qualified::new("", "Service"), &name, &errs);
        let requested = cluster_ips(svc).into_iter().next().unwrap_or_default();
        let ip = match requested.as_str() {
            "None" => None,
            "" => {
                let ip = self
                    .allocate_next(api, &namespace, &name, dry_run)
                    .await
                    .map_err(|e| {
                        ApiError::internal(format!("failed to allocate a serviceIP: {e}"))
                    })?;
                Some(ip)
            }
            explicit => {
                let Some(ip) = cidr::parse_ip(explicit) else {
                    let path = FieldPath::root("spec").child("clusterIPs").index(0);
                    return Err(invalid(vec![FieldError::invalid(
                        &path,
                        explicit,
                        "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)",
                    )]));
                };
                if let Err(e) = self
                    .allocate_static(api, ip, &namespace, &name, dry_run)
                    .await
                {
                    let listed = svc
                        .pointer("/spec/clusterIPs")
                        .filter(|v| v.as_array().is_some_and(|a| !a.is_empty()))
                        .cloned()
                        .unwrap_or_else(|| json!([explicit]));
                    let path = FieldPath::root("spec").child("clusterIPs");
                    return Err(invalid(vec![FieldError::invalid(
                        &path,
                        listed,
                        format!("failed to allocate IP {explicit}: {e}"),
                    )]));
                }
                Some(ip)
            }
        };
        let (text, fam) = match ip {
            Some(ip) => (
                if requested.is_empty() {
                    ip.to_string()
                } else {
                    requested.clone()
                },
                cidr::family(&ip),
            ),
            None => ("None".to_string(), self.default_cidr.family()),
        };
        svc["spec"]["clusterIP"] = json!(text);
        svc["spec"]["clusterIPs"] = json!([text]);
        svc["spec"]["ipFamilies"] = json!([fam]);
        svc["spec"]["ipFamilyPolicy"] = json!("SingleStack");
        Ok(if dry_run { None } else { ip })
    }

    /// Frees one address of `svc` (its IPAddress object), logging a failure (the repair loop
    /// frees it later).
    pub(crate) async fn release_ip(&self, api: &Arc<ApiServer>, svc: &Value, ip: IpAddr) {
        let (ns, name) = (objects::namespace(svc), objects::name(svc));
        if let Err(e) = delete_ipaddress(api, &ip, Some((ns, name))).await {
            tracing::warn!(%ip, error = %e, "cannot release a Service's IPAddress; the repair loop will");
        }
    }

    /// Returns a deleted (or never stored) Service's addresses and ports.
    pub async fn release(&self, api: &Arc<ApiServer>, svc: &Value) {
        for text in cluster_ips(svc) {
            if let Some(ip) = cidr::parse_ip(&text) {
                self.release_ip(api, svc, ip).await;
            }
        }
        let ports = nodeports::held_node_ports(svc);
        if !ports.is_empty() {
            if let Err(e) = self.node_ports.release(api, &ports).await {
                tracing::warn!(?ports, error = %e, "cannot release node ports");
            }
        }
    }

    /// The ServiceCIDR prefixes new addresses of the Services' family may come from.
    fn allocatable(&self, api: &ApiServer) -> Vec<Cidr> {
        let mut out: Vec<Cidr> = Vec::new();
        for info in service_cidrs(api) {
            if !info.allocatable {
                continue;
            }
            for c in info.cidrs {
                if c.v6 == self.default_cidr.v6 && !out.contains(&c) {
                    out.push(c);
                }
            }
        }
        out
    }

    /// Upstream `MetaAllocator.AllocateService`: the address must be in a ready ServiceCIDR and free.
    async fn allocate_static(
        &self,
        api: &Arc<ApiServer>,
        ip: IpAddr,
        namespace: &str,
        name: &str,
        dry_run: bool,
    ) -> Result<(), IpError> {
        let containing: Vec<Cidr> = self
            .allocatable(api)
            .into_iter()
            .filter(|c| c.contains(ip))
            .collect();
        let Some(first) = containing.first() else {
            return Err(IpError::MismatchedNetwork);
        };
        if !containing.iter().any(|c| c.in_range(ip)) {
            return Err(IpError::NotInRange {
                ip,
                valid: first.to_string(),
            });
        }
        if dry_run {
            return Ok(());
        }
        create_ipaddress(api, &ip, namespace, name).await
    }

    /// Upstream `AllocateNextService` over every ready prefix: a random start in the upper subrange,
    /// then the lower one; an address whose IPAddress appears meanwhile (another server) is skipped.
    async fn allocate_next(
        &self,
        api: &Arc<ApiServer>,
        namespace: &str,
        name: &str,
        dry_run: bool,
    ) -> Result<IpAddr, IpError> {
        let mut prefixes = self.allocatable(api);
        // Upstream iterates a map: no prefix is preferred.
        let n = prefixes.len();
        for i in 0..n {
            let j = rand::rng().random_range(i..n);
            prefixes.swap(i, j);
        }
        let cache = api.caches.get(&ipaddress_storage(api));
        for prefix in prefixes {
            let Some((first, last)) = prefix.usable() else {
                continue;
            };
            let offset = prefix.range_offset();
            let mut ranges = vec![(first + offset, last)];
            if offset > 0 {
                ranges.push((first, first + offset - 1));
            }
            for (lo, hi) in ranges {
                let size = hi - lo + 1;
                let start = random_below(size);
                for step in 0..size.min(MAX_SCAN) {
                    let ip = cidr::from_u128(lo + (start + step) % size, prefix.v6);
                    let key = ipaddress_key(api, &ip);
                    if cache.as_ref().is_some_and(|c| c.get(&key).is_some()) {
                        continue;
                    }
                    if dry_run {
                        return Ok(ip);
                    }
                    match create_ipaddress(api, &ip, namespace, name).await {
                        Ok(()) => return Ok(ip),
                        Err(IpError::Allocated) => {
                            tracing::debug!(%ip, "mid-air collision allocating a ClusterIP; trying another");
                        }
                        Err(e) => return Err(e),
                    }
                }
            }
        }
        Err(IpError::Full)
    }
}

fn ipaddress_storage(api: &ApiServer) -> String {
    api.registry
        .get(NETWORKING, "v1", "ipaddresses")
        .map(|r| r.storage.clone())
        .unwrap_or_else(|| "ipaddresses".into())
}

fn random_below(n: u128) -> u128 {
    if n <= 1 {
        return 0;
    }
    let mut rng = rand::rng();
    if n <= u128::from(u64::MAX) {
        u128::from(rng.random_range(0..n as u64))
    } else {
        rng.random::<u128>() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_port_range_is_checked() {
        let make = |r| {
            ServiceAllocator::new("10.96.0.0/12")
                .unwrap()
                .with_node_port_range(r)
        };
        assert!(make((31000, 31999)).is_ok());
        assert!(make((32000, 31000)).is_err());
        assert!(make((0, 100)).is_err());
    }

    #[test]
    fn service_cidr_readiness() {
        let ready =
            json!({"metadata": {"name": "a"}, "spec": {"cidrs": ["10.0.0.0/24", "fd00::/120"]}});
        let info = ServiceCidrInfo::from_json(&ready);
        assert!(info.allocatable, "no Ready condition yet counts as ready");
        assert_eq!(info.cidrs.len(), 2);
        let not_ready = json!({"metadata": {"name": "b"}, "spec": {"cidrs": ["10.0.0.0/24"]},
            "status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Terminating"}]}});
        assert!(!ServiceCidrInfo::from_json(&not_ready).allocatable);
        let deleting = json!({"metadata": {"name": "c", "deletionTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"cidrs": ["10.0.0.0/24"]}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}});
        assert!(!ServiceCidrInfo::from_json(&deleting).allocatable);
    }

    #[test]
    fn ipaddress_objects_reference_their_service() {
        let ip: IpAddr = "10.96.0.10".parse().unwrap();
        let obj = ipaddress_object(&ip, "kube-system", "dns");
        assert_eq!(obj["metadata"]["name"], "10.96.0.10");
        assert_eq!(obj["metadata"]["labels"][LABEL_IP_FAMILY], "IPv4");
        assert_eq!(
            obj["metadata"]["labels"][LABEL_MANAGED_BY],
            "ipallocator.k8s.io"
        );
        assert_eq!(
            parent_service(&obj),
            Some(("kube-system".into(), "dns".into()))
        );
        let v6: IpAddr = "fd00::a".parse().unwrap();
        assert_eq!(
            ipaddress_object(&v6, "d", "s")["metadata"]["labels"][LABEL_IP_FAMILY],
            "IPv6"
        );
    }

    #[test]
    fn errors_read_as_upstream() {
        assert_eq!(
            IpError::Allocated.to_string(),
            "provided IP is already allocated"
        );
        assert_eq!(
            IpError::MismatchedNetwork.to_string(),
            "the provided network does not match the current range"
        );
        assert_eq!(
            IpError::NotInRange {
                ip: "10.96.0.0".parse().unwrap(),
                valid: "10.96.0.0/12".into()
            }
            .to_string(),
            "the provided IP (10.96.0.0) is not in the valid range. The range of valid IPs is 10.96.0.0/12"
        );
        let svc = json!({"spec": {"clusterIP": "10.0.0.1"}});
        assert_eq!(cluster_ips(&svc), vec!["10.0.0.1"]);
        let svc = json!({"spec": {"clusterIP": "10.0.0.1", "clusterIPs": ["10.0.0.1", "fd00::1"]}});
        assert_eq!(cluster_ips(&svc).len(), 2);
    }

    #[test]
    fn rejects_bad_ranges() {
        assert!(ServiceAllocator::new("10.96.0.0/12").is_ok());
        assert!(ServiceAllocator::new("10.96.0.0/31").is_err());
        assert!(ServiceAllocator::new("fd00::/48").is_err());
        assert!(ServiceAllocator::new("fd00::/108").is_ok());
        assert_eq!(
            ServiceAllocator::new("10.96.0.0/12").unwrap().first_ip(),
            "10.96.0.1"
        );
    }
}
