//! The `ipallocator-repair-controller` (upstream `registry/core/service/ipallocator/controller/
//! repairip.go`), run by every API server: keeps the one-to-one relation between Services' cluster
//! IPs and IPAddress objects.
//!
//! - A Service whose cluster IP has no IPAddress gets one (this is how a store written before
//!   IPAddresses existed is migrated: the first pass runs at start).
//! - An IPAddress referencing something else, or another Service that is gone or does not have the
//!   address, is recreated for the Service that has it.
//! - An IPAddress of the allocator (`managed-by: ipallocator.k8s.io`) whose Service is gone or no
//!   longer has the address is deleted once it is older than the grace period (60 s, upstream's),
//!   since a Service being created holds its IPAddress before it is stored.
//! - Node ports Services hold are marked in the stored port map.
//!
//! Decisions come from the watch cache ([`plan`], pure); before each write the Service and the
//! IPAddress are read again from storage, so a lagging cache never removes a live allocation.
//! Difference: upstream reacts to events and resyncs; this is a periodic full pass (see
//! [`super::default_cidr::start`]), and it records log lines rather than Events.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use serde_json::Value;

use super::cidr::{self, Cidr};
use super::{
    cluster_ips, create_ipaddress, ipaddress_key, parent_service, IpError, CONTROLLER_NAME,
    LABEL_IP_FAMILY, LABEL_MANAGED_BY,
};
use crate::{objects, ApiServer};

/// Upstream's grace period for IPAddresses without their Service.
pub const GRACE_SECONDS: i64 = 60;

/// A Service as the repair loop sees it.
#[derive(Clone, Debug)]
pub struct SvcInfo {
    pub namespace: String,
    pub name: String,
    pub ips: Vec<String>,
}

/// An IPAddress as the repair loop sees it.
#[derive(Clone, Debug)]
pub struct IpInfo {
    pub name: String,
    /// `managed-by: ipallocator.k8s.io`.
    pub managed: bool,
    /// The family label matches the address.
    pub family_ok: bool,
    /// The Service its parentRef names, when it names a Service.
    pub parent: Option<(String, String)>,
    /// creationTimestamp, seconds since the epoch.
    pub created: Option<i64>,
}

impl IpInfo {
    pub fn from_json(obj: &Value) -> IpInfo {
        let name = objects::name(obj).to_string();
        let label = |k: &str| {
            obj.pointer("/metadata/labels")
                .and_then(|l| l.get(k))
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        };
        let family_ok =
            cidr::parse_ip(&name).is_some_and(|ip| label(LABEL_IP_FAMILY) == cidr::family(&ip));
        IpInfo {
            managed: label(LABEL_MANAGED_BY) == CONTROLLER_NAME,
            family_ok,
            parent: parent_service(obj),
            created: objects::meta_str(obj, "creationTimestamp")
                .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                .map(|t| t.timestamp()),
            name,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// The Service's address has no IPAddress.
    Create {
        ip: IpAddr,
        namespace: String,
        name: String,
    },
    /// The address's IPAddress is wrong (reference or labels): replace it with the Service's.
    Recreate {
        ip: IpAddr,
        namespace: String,
        name: String,
    },
    /// An IPAddress of the allocator without a Service holding its address.
    Delete { ip: IpAddr },
}

impl Action {
    fn ip(&self) -> IpAddr {
        match self {
            Action::Create { ip, .. } | Action::Recreate { ip, .. } | Action::Delete { ip } => *ip,
        }
    }
}

/// What one pass does, from the Services, the IPAddresses and the ServiceCIDR prefixes.
pub fn plan(services: &[SvcInfo], ips: &[IpInfo], cidrs: &[Cidr], now: i64) -> Vec<Action> {
    let by_name: HashMap<&str, &IpInfo> = ips.iter().map(|i| (i.name.as_str(), i)).collect();
    let svc_ips: HashMap<(&str, &str), Vec<IpAddr>> = services
        .iter()
        .map(|s| {
            (
                (s.namespace.as_str(), s.name.as_str()),
                s.ips.iter().filter_map(|t| cidr::parse_ip(t)).collect(),
            )
        })
        .collect();
    let old = |i: &IpInfo| i.created.is_none_or(|c| now - c > GRACE_SECONDS);
    let mut actions: Vec<Action> = Vec::new();
    for svc in services {
        for text in &svc.ips {
            let Some(ip) = cidr::parse_ip(text) else {
                if text != "None" {
                    tracing::warn!(service = %format!("{}/{}", svc.namespace, svc.name), clusterIP = %text,
                        "the ClusterIP is not a valid IP; please recreate Service");
                }
                continue;
            };
            if !cidrs.iter().any(|c| c.contains(ip)) {
                tracing::warn!(service = %format!("{}/{}", svc.namespace, svc.name), %ip,
                    "the ClusterIP [{}]: {ip} is not within any service CIDR; please recreate", cidr::family(&ip));
                continue;
            }
            let (namespace, name) = (svc.namespace.clone(), svc.name.clone());
            let Some(obj) = by_name.get(ip.to_string().as_str()) else {
                tracing::warn!(service = %format!("{namespace}/{name}"), %ip, "the ClusterIP is not allocated; repairing");
                actions.push(Action::Create {
                    ip,
                    namespace,
                    name,
                });
                continue;
            };
            let recreate = match &obj.parent {
                None => true,
                Some((ns, n))
                    if (ns.as_str(), n.as_str()) != (svc.namespace.as_str(), svc.name.as_str()) =>
                {
                    match svc_ips.get(&(ns.as_str(), n.as_str())) {
                        Some(theirs) if theirs.contains(&ip) => {
                            tracing::warn!(service = %format!("{namespace}/{name}"), %ip, other = %format!("{ns}/{n}"),
                                "the cluster IP was assigned to other services; please recreate");
                            false
                        }
                        _ => old(obj),
                    }
                }
                Some(_) => !obj.family_ok || !obj.managed,
            };
            if recreate && !actions.iter().any(|a| a.ip() == ip) {
                actions.push(Action::Recreate {
                    ip,
                    namespace,
                    name,
                });
            }
        }
    }
    for obj in ips.iter().filter(|i| i.managed) {
        let Some(ip) = cidr::parse_ip(&obj.name) else {
            continue;
        };
        if actions.iter().any(|a| a.ip() == ip) {
            continue;
        }
        let orphan = match &obj.parent {
            None => true,
            Some((ns, n)) => match svc_ips.get(&(ns.as_str(), n.as_str())) {
                Some(theirs) => !theirs.contains(&ip) && old(obj),
                None => old(obj),
            },
        };
        if orphan {
            actions.push(Action::Delete { ip });
        }
    }
    actions
}

/// Whether the stored Service `namespace/name` has `ip` among its cluster IPs.
async fn service_has(
    api: &ApiServer,
    namespace: &str,
    name: &str,
    ip: &IpAddr,
) -> Result<bool, String> {
    let kv = api
        .store
        .get(&format!("/services/{namespace}/{name}"))
        .await
        .map_err(|e| e.to_string())?;
    Ok(kv
        .and_then(|kv| serde_json::from_slice::<Value>(&kv.value).ok())
        .is_some_and(|svc| {
            cluster_ips(&svc)
                .iter()
                .any(|t| cidr::parse_ip(t).as_ref() == Some(ip))
        }))
}

/// One full pass.
pub async fn run_once(api: &Arc<ApiServer>) -> Result<(), String> {
    let services_json = crate::internal::cached_objects(api, "services");
    let services: Vec<SvcInfo> = services_json
        .iter()
        .map(|s| SvcInfo {
            namespace: objects::namespace(s).to_string(),
            name: objects::name(s).to_string(),
            ips: cluster_ips(s),
        })
        .collect();
    let ips: Vec<IpInfo> = crate::internal::cached_objects(api, &super::ipaddress_storage(api))
        .iter()
        .map(IpInfo::from_json)
        .collect();
    let cidrs: Vec<Cidr> = super::service_cidrs(api)
        .into_iter()
        .flat_map(|s| s.cidrs)
        .collect();
    let mut errors = Vec::new();
    for action in plan(&services, &ips, &cidrs, chrono::Utc::now().timestamp()) {
        if let Err(e) = apply(api, &action).await {
            errors.push(format!("{action:?}: {e}"));
        }
    }
    let ports: Vec<u16> = services_json
        .iter()
        .flat_map(super::nodeports::held_node_ports)
        .collect();
    if let Err(e) = api.services.node_ports().ensure(api, &ports).await {
        errors.push(format!("node ports: {e}"));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

async fn apply(api: &Arc<ApiServer>, action: &Action) -> Result<(), String> {
    match action {
        Action::Create {
            ip,
            namespace,
            name,
        } => {
            if !service_has(api, namespace, name, ip).await? {
                return Ok(());
            }
            match create_ipaddress(api, ip, namespace, name).await {
                Ok(()) | Err(IpError::Allocated) => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        }
        Action::Recreate {
            ip,
            namespace,
            name,
        } => {
            if !service_has(api, namespace, name, ip).await? {
                return Ok(());
            }
            tracing::warn!(%ip, service = %format!("{namespace}/{name}"), "the ClusterIP has a wrong reference; repairing");
            super::delete_ipaddress(api, ip, None).await?;
            match create_ipaddress(api, ip, namespace, name).await {
                Ok(()) | Err(IpError::Allocated) => Ok(()),
                Err(e) => Err(e.to_string()),
            }
        }
        Action::Delete { ip } => {
            let key = ipaddress_key(api, ip);
            let Some(kv) = api.store.get(&key).await.map_err(|e| e.to_string())? else {
                return Ok(());
            };
            let obj: Value = serde_json::from_slice(&kv.value).map_err(|e| e.to_string())?;
            if let Some((ns, n)) = parent_service(&obj) {
                if service_has(api, &ns, &n, ip).await? {
                    return Ok(());
                }
            }
            tracing::warn!(%ip, "IPAddress appears to have leaked: cleaning up");
            match api.store.delete(&key, Some(kv.mod_revision)).await {
                Ok(_) | Err(storage::Error::NotFound { .. } | storage::Error::Conflict { .. }) => {
                    Ok(())
                }
                Err(e) => Err(e.to_string()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svc(ns: &str, name: &str, ips: &[&str]) -> SvcInfo {
        SvcInfo {
            namespace: ns.into(),
            name: name.into(),
            ips: ips.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn addr(name: &str, parent: Option<(&str, &str)>, created: i64) -> IpInfo {
        IpInfo {
            name: name.into(),
            managed: true,
            family_ok: true,
            parent: parent.map(|(a, b)| (a.into(), b.into())),
            created: Some(created),
        }
    }

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn plans_upstream_repairs() {
        let cidrs = vec![Cidr::parse("10.96.0.0/12").unwrap()];
        let now = 1_000;
        let services = vec![
            svc("d", "ok", &["10.96.0.10"]),
            svc("d", "missing", &["10.96.0.11"]),
            svc("d", "stolen", &["10.96.0.12"]),
            svc("d", "headless", &["None"]),
            svc("d", "outside", &["192.168.0.1"]),
            svc("d", "dup-a", &["10.96.0.13"]),
            svc("d", "dup-b", &["10.96.0.13"]),
        ];
        let ips = vec![
            addr("10.96.0.10", Some(("d", "ok")), 0),
            addr("10.96.0.12", Some(("d", "gone")), 0),
            addr("10.96.0.13", Some(("d", "dup-a")), 0),
            addr("10.96.0.20", Some(("d", "deleted")), 0),
            addr("10.96.0.21", Some(("d", "deleted")), now - 5),
            addr("10.96.0.22", Some(("d", "ok")), 0),
            addr("10.96.0.23", None, now),
        ];
        let actions = plan(&services, &ips, &cidrs, now);
        assert_eq!(
            actions,
            vec![
                Action::Create {
                    ip: ip("10.96.0.11"),
                    namespace: "d".into(),
                    name: "missing".into()
                },
                Action::Recreate {
                    ip: ip("10.96.0.12"),
                    namespace: "d".into(),
                    name: "stolen".into()
                },
                Action::Delete {
                    ip: ip("10.96.0.20")
                },
                Action::Delete {
                    ip: ip("10.96.0.22")
                },
                Action::Delete {
                    ip: ip("10.96.0.23")
                },
            ],
            "10.96.0.21 is within its grace period; duplicates are only reported"
        );
    }

    #[test]
    fn young_wrong_references_wait() {
        let cidrs = vec![Cidr::parse("10.96.0.0/12").unwrap()];
        let services = vec![svc("d", "a", &["10.96.0.5"])];
        let ips = vec![addr("10.96.0.5", Some(("d", "b")), 100)];
        assert!(plan(&services, &ips, &cidrs, 110).is_empty());
        let mut unlabeled = addr("10.96.0.5", Some(("d", "a")), 0);
        unlabeled.family_ok = false;
        assert_eq!(
            plan(&services, &[unlabeled], &cidrs, 110),
            vec![Action::Recreate {
                ip: ip("10.96.0.5"),
                namespace: "d".into(),
                name: "a".into()
            }]
        );
    }

    #[test]
    fn reads_ipaddress_objects() {
        let obj = super::super::ipaddress_object(&ip("10.96.0.7"), "ns", "web");
        let mut obj = obj;
        obj["metadata"]["creationTimestamp"] = serde_json::json!("1970-01-01T00:01:40Z");
        let info = IpInfo::from_json(&obj);
        assert!(info.managed && info.family_ok);
        assert_eq!(info.parent, Some(("ns".into(), "web".into())));
        assert_eq!(info.created, Some(100));
    }
}
