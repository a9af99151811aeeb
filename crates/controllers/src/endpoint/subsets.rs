//! The Endpoints a Service should have (pure; upstream `syncService` of
//! `pkg/controller/endpoint` and `RepackSubsets` of `pkg/api/v1/endpoints`): one address per selected
//! pod with an IP of the Service's family, ready or not, ports resolved per pod, then repacked so that
//! addresses offering the same ports share a subset.

use std::collections::{BTreeMap, BTreeSet};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, Endpoints, ObjectReference, Pod, Service,
};

use crate::endpointslice::util::{
    find_port, is_ipv6, is_pod_ready, is_service_ip_set, pod_ips, rfc3339_nano, semantic_eq,
    should_pod_be_in_endpoints, should_set_hostname, LABEL_HEADLESS, LAST_CHANGE_TRIGGER_TIME,
};

/// Endpoints hold at most this many addresses; beyond it they are truncated and annotated.
pub const MAX_CAPACITY: usize = 1000;
pub const OVER_CAPACITY: &str = "endpoints.kubernetes.io/over-capacity";
/// Label marking Endpoints written by this controller (upstream 1.33 `LabelManagedBy`).
pub const LABEL_MANAGED_BY: &str = "endpoints.kubernetes.io/managed-by";
pub const CONTROLLER_NAME: &str = "endpoint-controller";

/// The address of `pod` for the Service: its IP of the Service's first IP family.
fn pod_address(svc: &Service, pod: &Pod) -> Option<EndpointAddress> {
    let spec = svc.spec.as_ref();
    let want_v6 = match spec
        .and_then(|s| s.ip_families.as_ref())
        .and_then(|f| f.first())
    {
        Some(family) => family == "IPv6",
        None if is_service_ip_set(svc) => {
            is_ipv6(spec.and_then(|s| s.cluster_ip.as_deref()).unwrap_or(""))
        }
        None => pod_ips(pod).first().is_some_and(|ip| is_ipv6(ip)),
    };
    let ip = pod_ips(pod).into_iter().find(|ip| is_ipv6(ip) == want_v6)?;
    Some(EndpointAddress {
        ip,
        node_name: Some(
            pod.spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default(),
        ),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        }),
        hostname: should_set_hostname(pod, svc)
            .then(|| pod.spec.as_ref().and_then(|s| s.hostname.clone()))
            .flatten(),
    })
}

/// One single-address subset per pod and port, before repacking.
pub fn pod_subsets(svc: &Service, pods: &[&Pod]) -> Vec<EndpointSubset> {
    let spec = svc.spec.clone().unwrap_or_default();
    let tolerate_unready = spec.publish_not_ready_addresses.unwrap_or(false);
    let service_ports = spec.ports.unwrap_or_default();
    let mut subsets = Vec::new();
    for pod in pods {
        if !should_pod_be_in_endpoints(pod, tolerate_unready) {
            continue;
        }
        let Some(address) = pod_address(svc, pod) else {
            continue;
        };
        let ready = tolerate_unready || is_pod_ready(pod);
        let subset = |ports: Option<Vec<EndpointPort>>| EndpointSubset {
            addresses: ready.then(|| vec![address.clone()]),
            not_ready_addresses: (!ready).then(|| vec![address.clone()]),
            ports,
        };
        if service_ports.is_empty() {
            // A headless Service may have no ports: its addresses alone.
            if spec.cluster_ip.as_deref() == Some("None") {
                subsets.push(subset(None));
            }
            continue;
        }
        for sp in &service_ports {
            let Some(port) = find_port(pod, sp) else {
                continue;
            };
            subsets.push(subset(Some(vec![EndpointPort {
                name: sp.name.clone().filter(|n| !n.is_empty()),
                port,
                protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: sp.app_protocol.clone(),
            }])));
        }
    }
    subsets
}

fn address_key(a: &EndpointAddress) -> AddressKey {
    let uid = a
        .target_ref
        .as_ref()
        .and_then(|r| r.uid.clone())
        .unwrap_or_default();
    (a.ip.clone(), uid)
}

/// A port's identity: name, number, protocol, appProtocol.
type PortKey = (String, i32, String, String);
/// An address's identity (IP, pod UID).
type AddressKey = (String, String);

fn port_key(p: &EndpointPort) -> PortKey {
    (
        p.name.clone().unwrap_or_default(),
        p.port,
        p.protocol.clone().unwrap_or_default(),
        p.app_protocol.clone().unwrap_or_default(),
    )
}

/// Regroups subsets canonically: each distinct set of (address, readiness) gets one subset listing
/// every port those addresses all offer; addresses are sorted by IP then pod UID. Upstream orders
/// ports and subsets by a hash of their Go form; here they are ordered by their fields.
pub fn repack(subsets: &[EndpointSubset]) -> Vec<EndpointSubset> {
    type AddrSet = BTreeMap<AddressKey, bool>;
    let mut all: BTreeMap<AddressKey, EndpointAddress> = BTreeMap::new();
    // Port (None for "no ports") -> the addresses offering it.
    let mut by_port: BTreeMap<Option<PortKey>, (Option<EndpointPort>, AddrSet)> = BTreeMap::new();
    for subset in subsets {
        let ports: Vec<Option<&EndpointPort>> = match subset.ports.as_deref() {
            None | Some([]) => vec![None],
            Some(ports) => ports.iter().map(Some).collect(),
        };
        for port in ports {
            let entry = by_port
                .entry(port.map(port_key))
                .or_insert_with(|| (port.cloned(), AddrSet::new()));
            let ready = subset.addresses.iter().flatten().map(|a| (a, true));
            let not_ready = subset
                .not_ready_addresses
                .iter()
                .flatten()
                .map(|a| (a, false));
            for (addr, is_ready) in ready.chain(not_ready) {
                let key = address_key(addr);
                all.entry(key.clone()).or_insert_with(|| addr.clone());
                // An address ready on any listing counts as ready.
                let r = entry.1.entry(key).or_insert(is_ready);
                *r = *r || is_ready;
            }
        }
    }
    let mut groups: BTreeMap<Vec<(AddressKey, bool)>, Vec<EndpointPort>> = BTreeMap::new();
    for (port, addrs) in by_port.into_values() {
        let key: Vec<(AddressKey, bool)> = addrs.into_iter().collect();
        let ports = groups.entry(key).or_default();
        if let Some(p) = port {
            ports.push(p);
        }
    }
    let mut out: Vec<EndpointSubset> = groups
        .into_iter()
        .map(|(addrs, mut ports)| {
            ports.sort_by_key(port_key);
            let pick = |ready: bool| -> Option<Vec<EndpointAddress>> {
                let v: Vec<EndpointAddress> = addrs
                    .iter()
                    .filter(|(_, r)| *r == ready)
                    .map(|(k, _)| all[k].clone())
                    .collect();
                (!v.is_empty()).then_some(v)
            };
            EndpointSubset {
                addresses: pick(true),
                not_ready_addresses: pick(false),
                ports: (!ports.is_empty()).then_some(ports),
            }
        })
        .collect();
    out.sort_by_key(|s| {
        let first = s
            .addresses
            .iter()
            .chain(s.not_ready_addresses.iter())
            .flatten()
            .map(address_key)
            .next();
        (
            first,
            s.ports.iter().flatten().map(port_key).collect::<Vec<_>>(),
        )
    });
    out
}

fn total(subsets: &[EndpointSubset]) -> (usize, usize) {
    subsets.iter().fold((0, 0), |(r, n), s| {
        (
            r + s.addresses.as_ref().map_or(0, Vec::len),
            n + s.not_ready_addresses.as_ref().map_or(0, Vec::len),
        )
    })
}

/// Cuts the subsets down to [`MAX_CAPACITY`] addresses, ready ones first, each subset keeping its
/// share (rounded up); returns whether anything was cut.
pub fn truncate(subsets: &mut [EndpointSubset]) -> bool {
    let (ready, not_ready) = total(subsets);
    if ready + not_ready <= MAX_CAPACITY {
        return false;
    }
    let truncate_ready = ready > MAX_CAPACITY;
    let (max, num_total) = if truncate_ready {
        (MAX_CAPACITY, ready)
    } else {
        (MAX_CAPACITY - ready, not_ready)
    };
    let mut can_be_added = max;
    for subset in subsets.iter_mut() {
        let in_subset = if truncate_ready {
            subset.addresses.as_ref().map_or(0, Vec::len)
        } else {
            subset.not_ready_addresses.as_ref().map_or(0, Vec::len)
        };
        let share = (in_subset as f64 / num_total as f64 * max as f64).ceil() as usize;
        let to_add = share.min(can_be_added);
        if truncate_ready {
            if let Some(a) = subset.addresses.as_mut() {
                a.truncate(to_add);
                can_be_added -= a.len();
            }
            subset.not_ready_addresses = Some(Vec::new());
        } else if let Some(a) = subset.not_ready_addresses.as_mut() {
            a.truncate(to_add);
            can_be_added -= a.len();
        }
    }
    true
}

/// False when the subsets are over capacity (they need truncating) or the annotation is set though
/// they are not.
pub fn capacity_annotation_correct(
    annotations: Option<&BTreeMap<String, String>>,
    subsets: &[EndpointSubset],
) -> bool {
    let (r, n) = total(subsets);
    r + n <= MAX_CAPACITY && annotations.is_none_or(|a| !a.contains_key(OVER_CAPACITY))
}

/// The Endpoints to write for the Service, or `None` when `current` is already right.
pub fn desired_endpoints(
    svc: &Service,
    pods: &[&Pod],
    current: Option<&Endpoints>,
    trigger_time: Option<Timestamp>,
) -> Option<Endpoints> {
    let subsets = repack(&pod_subsets(svc, pods));
    let svc_labels = svc.metadata.labels.clone().unwrap_or_default();
    if let Some(current) = current {
        let mut compare_labels = current.metadata.labels.clone().unwrap_or_default();
        compare_labels.remove(LABEL_HEADLESS);
        compare_labels.remove(LABEL_MANAGED_BY);
        let current_subsets = current.subsets.clone().unwrap_or_default();
        if semantic_eq(&current_subsets, &subsets)
            && compare_labels == svc_labels
            && capacity_annotation_correct(current.metadata.annotations.as_ref(), &current_subsets)
        {
            return None;
        }
    }
    let mut new = current.cloned().unwrap_or_else(|| Endpoints {
        metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
            name: svc.metadata.name.clone(),
            namespace: svc.metadata.namespace.clone(),
            ..Default::default()
        },
        subsets: None,
    });
    let mut subsets = subsets;
    let mut annotations = new.metadata.annotations.take().unwrap_or_default();
    match trigger_time {
        Some(t) => annotations.insert(LAST_CHANGE_TRIGGER_TIME.into(), rfc3339_nano(t)),
        None => annotations.remove(LAST_CHANGE_TRIGGER_TIME),
    };
    if truncate(&mut subsets) {
        annotations.insert(OVER_CAPACITY.into(), "truncated".into());
    } else {
        annotations.remove(OVER_CAPACITY);
    }
    let mut labels = svc_labels;
    labels.insert(LABEL_MANAGED_BY.into(), CONTROLLER_NAME.into());
    if is_service_ip_set(svc) {
        labels.remove(LABEL_HEADLESS);
    } else {
        labels.insert(LABEL_HEADLESS.into(), String::new());
    }
    new.metadata.annotations = (!annotations.is_empty()).then_some(annotations);
    new.metadata.labels = (!labels.is_empty()).then_some(labels);
    // Empty subsets are left out, as upstream's `omitempty` does.
    new.subsets = (!subsets.is_empty()).then_some(subsets);
    Some(new)
}

/// The IPs of the subsets' ready and not-ready addresses (for tests and logs).
pub fn ips(subsets: &[EndpointSubset]) -> (BTreeSet<String>, BTreeSet<String>) {
    let collect = |f: fn(&EndpointSubset) -> &Option<Vec<EndpointAddress>>| {
        subsets
            .iter()
            .flat_map(|s| f(s).iter().flatten().map(|a| a.ip.clone()))
            .collect()
    };
    (
        collect(|s| &s.addresses),
        collect(|s| &s.not_ready_addresses),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn svc(v: Value) -> Service {
        serde_json::from_value(v).unwrap()
    }

    fn pod(name: &str, ip: &str, ready: bool, http_port: i32) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "d", "uid": format!("uid-{name}"), "labels": {"app": "a"}},
            "spec": {"nodeName": "n1", "hostname": name, "subdomain": "web",
                "containers": [{"name": "c", "ports": [{"name": "http", "containerPort": http_port}]}]},
            "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}],
                "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .unwrap()
    }

    fn web(extra: Value) -> Service {
        let mut v = json!({"metadata": {"name": "web", "namespace": "d", "labels": {"tier": "fe"}},
            "spec": {"selector": {"app": "a"}, "clusterIP": "10.96.0.10", "ipFamilies": ["IPv4"],
                "ports": [{"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}]}});
        if let (Some(spec), Some(extra)) = (v["spec"].as_object_mut(), extra.as_object()) {
            spec.extend(extra.clone());
        }
        svc(v)
    }

    #[test]
    fn ready_and_not_ready_pods_share_a_subset_per_port_set() {
        let s = web(json!({}));
        let (a, b, c) = (
            pod("a", "10.0.0.2", true, 8080),
            pod("b", "10.0.0.1", true, 8080),
            pod("c", "10.0.0.3", false, 8080),
        );
        let ep = desired_endpoints(&s, &[&a, &b, &c], None, None).unwrap();
        let subsets = ep.subsets.clone().unwrap();
        assert_eq!(subsets.len(), 1);
        let ready: Vec<&str> = subsets[0]
            .addresses
            .iter()
            .flatten()
            .map(|a| a.ip.as_str())
            .collect();
        assert_eq!(ready, ["10.0.0.1", "10.0.0.2"]);
        assert_eq!(
            subsets[0].not_ready_addresses.as_ref().unwrap()[0].ip,
            "10.0.0.3"
        );
        assert_eq!(subsets[0].ports.as_ref().unwrap()[0].port, 8080);
        // The pods' subdomain names the Service: their hostnames are published.
        assert_eq!(
            subsets[0].addresses.as_ref().unwrap()[0]
                .hostname
                .as_deref(),
            Some("b")
        );
        let labels = ep.metadata.labels.unwrap();
        assert_eq!(labels["tier"], "fe");
        assert_eq!(labels[LABEL_MANAGED_BY], CONTROLLER_NAME);
        // Writing the same again is a no-op.
        let written = desired_endpoints(&s, &[&a, &b, &c], None, None).unwrap();
        assert!(desired_endpoints(&s, &[&a, &b, &c], Some(&written), None).is_none());
    }

    #[test]
    fn different_target_ports_make_different_subsets() {
        let s = web(json!({}));
        let (a, b) = (
            pod("a", "10.0.0.1", true, 8080),
            pod("b", "10.0.0.2", true, 9090),
        );
        let subsets = repack(&pod_subsets(&s, &[&a, &b]));
        assert_eq!(subsets.len(), 2);
        assert_eq!(subsets[0].ports.as_ref().unwrap()[0].port, 8080);
        assert_eq!(subsets[1].ports.as_ref().unwrap()[0].port, 9090);
    }

    #[test]
    fn publish_not_ready_and_headless_without_ports() {
        let s = web(json!({"publishNotReadyAddresses": true}));
        let c = pod("c", "10.0.0.3", false, 8080);
        let (ready, not_ready) = ips(&repack(&pod_subsets(&s, &[&c])));
        assert!(ready.contains("10.0.0.3") && not_ready.is_empty());
        let h = web(json!({"clusterIP": "None", "ports": []}));
        let ep = desired_endpoints(&h, &[&c], None, None).unwrap();
        assert_eq!(ep.metadata.labels.as_ref().unwrap()[LABEL_HEADLESS], "");
        let subsets = ep.subsets.unwrap();
        assert!(subsets[0].ports.is_none());
        assert_eq!(subsets[0].not_ready_addresses.as_ref().unwrap().len(), 1);
    }

    #[test]
    fn over_capacity_truncates_and_annotates() {
        let s = web(json!({}));
        let pods: Vec<Pod> = (0..1100)
            .map(|i| {
                pod(
                    &format!("p{i}"),
                    &format!("10.1.{}.{}", i / 250, i % 250 + 1),
                    i % 2 == 0,
                    8080,
                )
            })
            .collect();
        let refs: Vec<&Pod> = pods.iter().collect();
        let ep = desired_endpoints(&s, &refs, None, None).unwrap();
        let (r, n) = total(ep.subsets.as_ref().unwrap());
        assert_eq!((r, n), (550, 450));
        assert_eq!(ep.metadata.annotations.unwrap()[OVER_CAPACITY], "truncated");
    }

    #[test]
    fn trigger_time_annotation() {
        let s = web(json!({}));
        let t: Timestamp = "2024-05-01T10:00:00Z".parse().unwrap();
        let ep = desired_endpoints(&s, &[], None, Some(t)).unwrap();
        assert_eq!(
            ep.metadata.annotations.unwrap()[LAST_CHANGE_TRIGGER_TIME],
            "2024-05-01T10:00:00Z"
        );
    }
}
