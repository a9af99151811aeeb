//! The in-memory view the answers are computed from: Services and the ready endpoints of their
//! EndpointSlices, indexed by name and by IP. Maps CoreDNS `plugin/kubernetes/object/service.go`
//! (`ToService`), `object/endpoint.go` (`EndpointSliceToEndpoints`) and the reverse indexes of
//! `controller.go`. Differs: CoreDNS keeps client-go indexers and looks objects up per query; here a
//! whole immutable snapshot is rebuilt after changes (debounced) and swapped in, so a query never
//! takes a lock held by the watch.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::Arc;

use hickory_proto::rr::Name;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::api::discovery::v1::EndpointSlice;

/// Label naming the Service an EndpointSlice belongs to.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";

/// A port of a Service or of an EndpointSlice. `port` is `None` for the sentinel CoreDNS adds when
/// an object declares no ports (so A records still exist, but no SRV record does).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Port {
    pub name: String,
    pub protocol: String,
    pub port: Option<u16>,
}

impl Port {
    fn sentinel() -> Port {
        Port {
            name: String::new(),
            protocol: String::new(),
            port: None,
        }
    }
}

/// A ready endpoint address with the name it is published under: the EndpointSlice's hostname, else
/// its IP with dots (or colons) turned into dashes (CoreDNS `endpointHostname`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub ip: IpAddr,
    pub hostname: String,
    pub ports: Vec<Port>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// ClusterIP, NodePort and LoadBalancer Services: their cluster IPs (empty when none is allocated).
    ClusterIp(Vec<IpAddr>),
    /// `clusterIP: None`.
    Headless,
    /// `type: ExternalName`: the name a CNAME points at.
    ExternalName(String),
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceEntry {
    pub name: String,
    pub namespace: String,
    pub kind: Kind,
    pub ports: Vec<Port>,
    pub endpoints: Vec<Endpoint>,
}

/// What the snapshot is built with.
#[derive(Clone, Debug)]
pub struct SnapshotConfig {
    /// The cluster domain, e.g. `cluster.local.`.
    pub zone: Name,
    /// TTL of every answer (CoreDNS `ttl`, default 5).
    pub ttl: u32,
    /// Addresses of this DNS server as clients reach it (the kube-dns ClusterIP): `ns.dns.<zone>`.
    pub ns_addrs: Vec<IpAddr>,
}

/// Everything an answer needs, immutable once built.
#[derive(Clone, Debug)]
pub struct Snapshot {
    pub config: SnapshotConfig,
    /// The zone's labels, lowercase, most specific first (`["cluster", "local"]`).
    pub zone_labels: Vec<String>,
    /// By (namespace, name).
    pub services: HashMap<(String, String), ServiceEntry>,
    /// Cluster IP -> (namespace, name) of the Services that have it.
    pub by_cluster_ip: HashMap<IpAddr, Vec<(String, String)>>,
    /// Endpoint IP -> (hostname, namespace, service name).
    pub by_endpoint_ip: HashMap<IpAddr, Vec<(String, String, String)>>,
    /// SOA serial: when the snapshot was built (seconds since the epoch, as CoreDNS's `Modified`).
    pub serial: u32,
}

impl Snapshot {
    /// An empty snapshot (before the informers have synced).
    pub fn empty(config: SnapshotConfig) -> Snapshot {
        Snapshot::build(config, &[], &[])
    }

    pub fn build(
        config: SnapshotConfig,
        services: &[Arc<Service>],
        slices: &[Arc<EndpointSlice>],
    ) -> Snapshot {
        let zone_labels = labels_of(&config.zone);
        let mut map: HashMap<(String, String), ServiceEntry> = HashMap::new();
        for svc in services {
            if let Some(entry) = service_entry(svc) {
                map.insert((entry.namespace.clone(), entry.name.clone()), entry);
            }
        }
        for slice in slices {
            let Some(ns) = slice.metadata.namespace.as_deref() else {
                continue;
            };
            let Some(owner) = slice
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(LABEL_SERVICE_NAME))
            else {
                continue;
            };
            if let Some(entry) = map.get_mut(&(ns.to_ascii_lowercase(), owner.to_ascii_lowercase()))
            {
                entry.endpoints.extend(slice_endpoints(slice));
            }
        }
        let mut by_cluster_ip: HashMap<IpAddr, Vec<(String, String)>> = HashMap::new();
        let mut by_endpoint_ip: HashMap<IpAddr, Vec<(String, String, String)>> = HashMap::new();
        for entry in map.values_mut() {
            // Slices may list an address twice (during a rollover); one answer per name and IP.
            let mut seen = std::collections::HashSet::new();
            entry
                .endpoints
                .retain(|e| seen.insert((e.ip, e.hostname.clone(), e.ports.clone())));
            if let Kind::ClusterIp(ips) = &entry.kind {
                for ip in ips {
                    by_cluster_ip
                        .entry(*ip)
                        .or_default()
                        .push((entry.namespace.clone(), entry.name.clone()));
                }
            }
            for e in &entry.endpoints {
                let v = by_endpoint_ip.entry(e.ip).or_default();
                let item = (
                    e.hostname.clone(),
                    entry.namespace.clone(),
                    entry.name.clone(),
                );
                if !v.contains(&item) {
                    v.push(item);
                }
            }
        }
        for v in by_cluster_ip.values_mut() {
            v.sort();
        }
        for v in by_endpoint_ip.values_mut() {
            v.sort();
        }
        let serial = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as u32)
            .unwrap_or(0);
        Snapshot {
            config,
            zone_labels,
            services: map,
            by_cluster_ip,
            by_endpoint_ip,
            serial,
        }
    }

    pub fn service(&self, namespace: &str, name: &str) -> Option<&ServiceEntry> {
        self.services
            .get(&(namespace.to_string(), name.to_string()))
    }
}

/// A name's labels, lowercase, as text (non-UTF-8 bytes replaced: such labels match nothing).
pub fn labels_of(name: &Name) -> Vec<String> {
    name.iter()
        .map(|l| String::from_utf8_lossy(l).to_ascii_lowercase())
        .collect()
}

fn service_entry(svc: &Service) -> Option<ServiceEntry> {
    let name = svc.metadata.name.as_deref()?.to_ascii_lowercase();
    let namespace = svc.metadata.namespace.as_deref()?.to_ascii_lowercase();
    let spec = svc.spec.as_ref()?;
    let kind = if spec.type_.as_deref() == Some("ExternalName") {
        Kind::ExternalName(spec.external_name.clone().unwrap_or_default())
    } else if spec.cluster_ip.as_deref() == Some("None") {
        Kind::Headless
    } else {
        let ips: Vec<String> = match &spec.cluster_ips {
            Some(ips) if !ips.is_empty() => ips.clone(),
            _ => spec.cluster_ip.iter().cloned().collect(),
        };
        Kind::ClusterIp(ips.iter().filter_map(|ip| ip.parse().ok()).collect())
    };
    let mut ports: Vec<Port> = spec
        .ports
        .iter()
        .flatten()
        .map(|p| Port {
            name: p.name.clone().unwrap_or_default().to_ascii_lowercase(),
            protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
            port: u16::try_from(p.port).ok(),
        })
        .collect();
    if ports.is_empty() {
        ports.push(Port::sentinel());
    }
    Some(ServiceEntry {
        name,
        namespace,
        kind,
        ports,
        endpoints: Vec::new(),
    })
}

/// The ready endpoint addresses of a slice (a missing `ready` condition means ready, as upstream).
/// FQDN slices carry no addresses DNS could answer with and are skipped.
fn slice_endpoints(slice: &EndpointSlice) -> Vec<Endpoint> {
    if slice.address_type == "FQDN" {
        return Vec::new();
    }
    let mut ports: Vec<Port> = slice
        .ports
        .iter()
        .flatten()
        .map(|p| Port {
            name: p.name.clone().unwrap_or_default().to_ascii_lowercase(),
            protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
            port: p.port.and_then(|p| u16::try_from(p).ok()),
        })
        .collect();
    if ports.is_empty() {
        ports.push(Port::sentinel());
    }
    let mut out = Vec::new();
    for ep in slice.endpoints.iter().flatten() {
        let ready = ep.conditions.as_ref().and_then(|c| c.ready).unwrap_or(true);
        if !ready {
            continue;
        }
        for addr in &ep.addresses {
            let Ok(ip) = addr.parse::<IpAddr>() else {
                continue;
            };
            let hostname = match ep.hostname.as_deref() {
                Some(h) if !h.is_empty() => h.to_ascii_lowercase(),
                _ => dashed(&ip),
            };
            out.push(Endpoint {
                ip,
                hostname,
                ports: ports.clone(),
            });
        }
    }
    out
}

/// `10.0.0.1` -> `10-0-0-1`, `fd00::1` -> `fd00--1` (CoreDNS `endpointHostname` without a hostname).
pub fn dashed(ip: &IpAddr) -> String {
    ip.to_string().replace(['.', ':'], "-")
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub fn config() -> SnapshotConfig {
        SnapshotConfig {
            zone: Name::from_ascii("cluster.local.").expect("name"),
            ttl: 5,
            ns_addrs: vec!["10.96.0.10".parse().expect("ip")],
        }
    }

    pub fn service(v: serde_json::Value) -> Arc<Service> {
        Arc::new(serde_json::from_value(v).expect("service"))
    }

    pub fn slice(v: serde_json::Value) -> Arc<EndpointSlice> {
        Arc::new(serde_json::from_value(v).expect("slice"))
    }

    #[test]
    fn builds_services_and_ready_endpoints() {
        let svcs = [service(serde_json::json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {"clusterIP": "None", "ports": [{"name": "http", "port": 80}]}
        }))];
        let slices = [slice(serde_json::json!({
            "metadata": {"name": "web-x", "namespace": "default",
                         "labels": {"kubernetes.io/service-name": "web"}},
            "addressType": "IPv4",
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            "endpoints": [
                {"addresses": ["10.1.0.5"], "hostname": "web-0", "conditions": {"ready": true}},
                {"addresses": ["10.1.0.6"]},
                {"addresses": ["10.1.0.7"], "conditions": {"ready": false}}
            ]
        }))];
        let s = Snapshot::build(config(), &svcs, &slices);
        let e = s.service("default", "web").expect("service");
        assert_eq!(e.kind, Kind::Headless);
        let names: Vec<_> = e.endpoints.iter().map(|e| e.hostname.as_str()).collect();
        assert_eq!(names, ["web-0", "10-1-0-6"]);
        assert_eq!(e.endpoints[0].ports[0].port, Some(8080));
        assert_eq!(
            s.by_endpoint_ip[&"10.1.0.5".parse::<IpAddr>().expect("ip")],
            [(
                "web-0".to_string(),
                "default".to_string(),
                "web".to_string()
            )]
        );
    }

    #[test]
    fn services_without_ports_get_the_sentinel() {
        let svcs = [service(serde_json::json!({
            "metadata": {"name": "a", "namespace": "n"},
            "spec": {"clusterIP": "10.96.0.20", "clusterIPs": ["10.96.0.20", "fd00::20"]}
        }))];
        let s = Snapshot::build(config(), &svcs, &[]);
        let e = s.service("n", "a").expect("service");
        assert_eq!(e.ports, [Port::sentinel()]);
        assert_eq!(
            e.kind,
            Kind::ClusterIp(vec![
                "10.96.0.20".parse().expect("ip"),
                "fd00::20".parse().expect("ip")
            ])
        );
        assert_eq!(dashed(&"fd00::20".parse().expect("ip")), "fd00--20");
    }
}
