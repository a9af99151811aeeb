//! What to create, update and delete to make a Service's EndpointSlices match its pods (pure; upstream
//! `staging/src/k8s.io/endpointslice/reconciler.go`). Per address type of the Service, desired
//! endpoints are grouped by their port set; existing slices keep the endpoints still desired (updated
//! in place when they changed), emptied slices are deleted, and leftover endpoints first fill slices
//! that are being updated anyway, then one unchanged slice they fit in, then new slices. Creates are
//! turned into updates of slices about to be deleted, so names are reused and writes minimal. A
//! Service without endpoints gets one empty placeholder slice per address type.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{ObjectReference, Pod, Service};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointHints, EndpointPort, EndpointSlice, ForZone,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::util::{
    endpoint_slice_prefix, find_port, is_ipv6, is_pod_ready, is_service_ip_set, pod_ips, semantic,
    semantic_eq, should_pod_be_in_endpoints, should_set_hostname, LABEL_HEADLESS, LABEL_MANAGED_BY,
    LABEL_SERVICE_NAME,
};

/// The writes one reconciliation needs.
#[derive(Debug, Default)]
pub struct Plan {
    pub create: Vec<EndpointSlice>,
    pub update: Vec<EndpointSlice>,
    pub delete: Vec<EndpointSlice>,
    /// Pods left out because their node is not known (the Service is retried later).
    pub skipped_pods: Vec<String>,
}

/// Where a pod runs: `None` when the node does not exist, else the node's zone label if any.
pub type NodeZone<'a> = &'a dyn Fn(&str) -> Option<Option<String>>;

/// `IPv4`/`IPv6` per the Service's ipFamilies (or its ClusterIP; both for a headless Service
/// without families).
pub fn address_types(svc: &Service) -> BTreeSet<String> {
    let spec = svc.spec.clone().unwrap_or_default();
    let mut types: BTreeSet<String> = spec
        .ip_families
        .iter()
        .flatten()
        .filter(|f| *f == "IPv4" || *f == "IPv6")
        .cloned()
        .collect();
    if types.is_empty() {
        if is_service_ip_set(svc) {
            let v6 = is_ipv6(spec.cluster_ip.as_deref().unwrap_or(""));
            types.insert(if v6 { "IPv6" } else { "IPv4" }.into());
        } else {
            types.insert("IPv4".into());
            types.insert("IPv6".into());
        }
    }
    types
}

fn is_reserved_label(key: &str) -> bool {
    key == LABEL_SERVICE_NAME || key == LABEL_MANAGED_BY || key == LABEL_HEADLESS
}

/// The labels a slice of `svc` should carry, and whether the slice's own (non-reserved) labels
/// differ from the Service's.
pub fn slice_labels(
    slice: &EndpointSlice,
    svc: &Service,
    controller: &str,
) -> (BTreeMap<String, String>, bool) {
    let mut svc_labels: BTreeMap<String, String> = svc
        .metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| !is_reserved_label(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let slice_own: BTreeMap<String, String> = slice
        .metadata
        .labels
        .iter()
        .flatten()
        .filter(|(k, _)| !is_reserved_label(k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let changed = slice_own != svc_labels;
    if is_service_ip_set(svc) {
        svc_labels.remove(LABEL_HEADLESS);
    } else {
        svc_labels.insert(LABEL_HEADLESS.into(), String::new());
    }
    svc_labels.insert(
        LABEL_SERVICE_NAME.into(),
        svc.metadata.name.clone().unwrap_or_default(),
    );
    svc_labels.insert(LABEL_MANAGED_BY.into(), controller.into());
    (svc_labels, changed)
}

/// A new, unnamed slice of `svc` (upstream `newEndpointSlice`).
pub fn new_slice(
    svc: &Service,
    ports: Vec<EndpointPort>,
    address_type: &str,
    controller: &str,
) -> EndpointSlice {
    let mut slice = EndpointSlice {
        metadata: ObjectMeta {
            generate_name: Some(endpoint_slice_prefix(
                svc.metadata.name.as_deref().unwrap_or(""),
            )),
            namespace: svc.metadata.namespace.clone(),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Service".into(),
                name: svc.metadata.name.clone().unwrap_or_default(),
                uid: svc.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        address_type: address_type.into(),
        endpoints: Some(Vec::new()),
        ports: Some(ports),
    };
    slice.metadata.labels = Some(slice_labels(&slice, svc, controller).0);
    slice
}

fn owned_by(slice: &EndpointSlice, svc: &Service) -> bool {
    slice.metadata.owner_references.iter().flatten().any(|r| {
        r.kind == "Service" && r.api_version == "v1" && Some(&r.uid) == svc.metadata.uid.as_ref()
    })
}

/// The identity of an endpoint within a slice (upstream `hashEndpoint`): addresses, hostname and the
/// target's namespace/name.
pub fn endpoint_key(e: &Endpoint) -> String {
    let mut addresses = e.addresses.clone();
    addresses.sort();
    let target = e.target_ref.as_ref();
    serde_json::json!([
        addresses,
        e.hostname.as_deref().unwrap_or(""),
        target.and_then(|t| t.namespace.as_deref()).unwrap_or(""),
        target.and_then(|t| t.name.as_deref()).unwrap_or(""),
    ])
    .to_string()
}

/// Same endpoint, same state (upstream `EndpointsEqualBeyondHash`).
pub fn endpoints_equal_beyond_hash(a: &Endpoint, b: &Endpoint) -> bool {
    let state = |e: &Endpoint| {
        serde_json::json!({
            "conditions": e.conditions, "nodeName": e.node_name, "zone": e.zone,
            "hints": e.hints, "targetRef": e.target_ref,
        })
    };
    semantic_eq(&state(a), &state(b))
}

/// The key of a port set: the same ports in any order give the same key.
pub fn ports_key(ports: &[EndpointPort]) -> String {
    let mut keys: Vec<String> = ports.iter().map(|p| semantic(p).to_string()).collect();
    keys.sort();
    keys.join(",")
}

fn sort_ports(ports: &mut [EndpointPort]) {
    ports.sort_by_key(|p| {
        (
            p.name.clone().unwrap_or_default(),
            p.port.unwrap_or_default(),
            p.protocol.clone().unwrap_or_default(),
        )
    });
}

/// The endpoint ports of `pod` for `svc` (ports a pod does not have are left out).
pub fn endpoint_ports(svc: &Service, pod: &Pod) -> Vec<EndpointPort> {
    let spec = svc.spec.clone().unwrap_or_default();
    let service_ports = spec.ports.unwrap_or_default();
    let mut ports: Vec<EndpointPort> = service_ports
        .iter()
        .filter_map(|sp| {
            let port = find_port(pod, sp)?;
            Some(EndpointPort {
                name: Some(sp.name.clone().unwrap_or_default()),
                port: Some(port),
                protocol: Some(sp.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: sp.app_protocol.clone(),
            })
        })
        .collect();
    sort_ports(&mut ports);
    ports
}

/// The endpoint of `pod` (upstream `podToEndpoint`).
pub fn pod_to_endpoint(
    pod: &Pod,
    zone: Option<String>,
    svc: &Service,
    address_type: &str,
) -> Endpoint {
    let serving = is_pod_ready(pod);
    let terminating = pod.metadata.deletion_timestamp.is_some();
    let publish = svc
        .spec
        .as_ref()
        .and_then(|s| s.publish_not_ready_addresses)
        .unwrap_or(false);
    // A terminating pod is never "ready", unless not-ready addresses are published anyway.
    let ready = publish || (serving && !terminating);
    let node_name = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty());
    Endpoint {
        addresses: pod_ips(pod)
            .into_iter()
            .filter(|ip| is_ipv6(ip) == (address_type == "IPv6"))
            .collect(),
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            serving: Some(serving),
            terminating: Some(terminating),
        }),
        target_ref: Some(ObjectReference {
            kind: Some("Pod".into()),
            namespace: pod.metadata.namespace.clone(),
            name: pod.metadata.name.clone(),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        }),
        node_name,
        zone: zone.filter(|z| !z.is_empty()),
        hostname: should_set_hostname(pod, svc)
            .then(|| pod.spec.as_ref().and_then(|s| s.hostname.clone()))
            .flatten(),
        ..Default::default()
    }
}

/// Desired endpoints of one port set, by identity; popping takes the smallest key.
type EndpointSet = BTreeMap<String, Endpoint>;

/// Reconciles every address type of the Service.
pub fn reconcile(
    svc: &Service,
    pods: &[&Pod],
    node_zone: NodeZone<'_>,
    existing: &[EndpointSlice],
    max_per_slice: usize,
    controller: &str,
) -> Plan {
    let types = address_types(svc);
    let mut plan = Plan::default();
    let mut by_type: BTreeMap<&str, Vec<&EndpointSlice>> = BTreeMap::new();
    for slice in existing {
        if types.contains(&slice.address_type) {
            by_type.entry(&slice.address_type).or_default().push(slice);
        } else {
            plan.delete.push(slice.clone());
        }
    }
    for t in &types {
        let existing = by_type.remove(t.as_str()).unwrap_or_default();
        let p = reconcile_address_type(
            svc,
            pods,
            node_zone,
            &existing,
            t,
            max_per_slice,
            controller,
        );
        plan.create.extend(p.create);
        plan.update.extend(p.update);
        plan.delete.extend(p.delete);
        if plan.skipped_pods.is_empty() {
            plan.skipped_pods = p.skipped_pods;
        }
    }
    plan
}

fn reconcile_address_type(
    svc: &Service,
    pods: &[&Pod],
    node_zone: NodeZone<'_>,
    existing: &[&EndpointSlice],
    address_type: &str,
    max_per_slice: usize,
    controller: &str,
) -> Plan {
    let mut plan = Plan::default();
    let mut existing_by_ports: BTreeMap<String, Vec<&EndpointSlice>> = BTreeMap::new();
    for slice in existing {
        if owned_by(slice, svc) {
            let key = ports_key(slice.ports.as_deref().unwrap_or(&[]));
            existing_by_ports.entry(key).or_default().push(slice);
        } else {
            plan.delete.push((*slice).clone());
        }
    }
    let mut desired: BTreeMap<String, (Vec<EndpointPort>, EndpointSet)> = BTreeMap::new();
    for pod in pods {
        if !should_pod_be_in_endpoints(pod, true) {
            continue;
        }
        let ports = endpoint_ports(svc, pod);
        let entry = desired
            .entry(ports_key(&ports))
            .or_insert_with(|| (ports.clone(), EndpointSet::new()));
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .unwrap_or("");
        let Some(zone) = node_zone(node) else {
            plan.skipped_pods
                .push(pod.metadata.name.clone().unwrap_or_default());
            continue;
        };
        let endpoint = pod_to_endpoint(pod, zone, svc, address_type);
        if !endpoint.addresses.is_empty() {
            entry.1.insert(endpoint_key(&endpoint), endpoint);
        }
    }
    let mut unchanged: Vec<EndpointSlice> = Vec::new();
    for (key, (ports, set)) in desired.iter_mut() {
        let slices = existing_by_ports.get(key).cloned().unwrap_or_default();
        let r = reconcile_port_mapping(
            svc,
            &slices,
            set,
            ports,
            address_type,
            max_per_slice,
            controller,
        );
        plan.create.extend(r.create);
        plan.update.extend(r.update);
        plan.delete.extend(r.delete);
        unchanged.extend(r.unchanged);
    }
    for (key, slices) in &existing_by_ports {
        if !desired.contains_key(key) {
            plan.delete.extend(slices.iter().map(|s| (*s).clone()));
        }
    }
    // No slice would remain: keep (or make) an empty placeholder.
    if existing.len() == plan.delete.len() && plan.create.is_empty() {
        let placeholder = new_slice(svc, Vec::new(), address_type, controller);
        let is_placeholder = |s: &EndpointSlice| {
            s.endpoints.as_ref().is_none_or(Vec::is_empty)
                && s.ports.as_ref().is_none_or(Vec::is_empty)
                && s.address_type == placeholder.address_type
                && s.metadata.namespace == placeholder.metadata.namespace
                && s.metadata.labels.clone().unwrap_or_default()
                    == placeholder.metadata.labels.clone().unwrap_or_default()
        };
        if plan.delete.len() == 1 && is_placeholder(&plan.delete[0]) {
            plan.delete.clear();
        } else {
            plan.create.push(placeholder);
        }
    }
    reconcile_hints(svc, &mut plan, unchanged);
    // Reuse slices about to be deleted for slices about to be created.
    let mut i = 0;
    while i < plan.delete.len() && !plan.create.is_empty() {
        let doomed = &plan.delete[i];
        let candidate = plan.create.last().map(|s| s.address_type.clone());
        if candidate.as_deref() == Some(doomed.address_type.as_str()) && owned_by(doomed, svc) {
            let doomed = plan.delete.remove(i);
            let mut slice = plan.create.pop().unwrap_or_default();
            slice.metadata.name = doomed.metadata.name.clone();
            // The rest of the doomed slice's metadata is replaced, as upstream's update does.
            slice.metadata.generate_name = doomed.metadata.generate_name.clone();
            slice.metadata.resource_version = doomed.metadata.resource_version.clone();
            slice.metadata.uid = doomed.metadata.uid.clone();
            plan.update.push(slice);
        } else {
            i += 1;
        }
    }
    plan
}

struct PortMappingResult {
    create: Vec<EndpointSlice>,
    update: Vec<EndpointSlice>,
    delete: Vec<EndpointSlice>,
    unchanged: Vec<EndpointSlice>,
}

fn reconcile_port_mapping(
    svc: &Service,
    existing: &[&EndpointSlice],
    desired: &mut EndpointSet,
    ports: &[EndpointPort],
    address_type: &str,
    max_per_slice: usize,
    controller: &str,
) -> PortMappingResult {
    let mut to_update: Vec<EndpointSlice> = Vec::new();
    let mut to_delete: Vec<EndpointSlice> = Vec::new();
    let mut unchanged: Vec<EndpointSlice> = Vec::new();
    // 1. Drop endpoints no longer desired, refresh changed ones.
    for slice in existing {
        let mut kept = Vec::new();
        let mut updated = false;
        for ep in slice.endpoints.iter().flatten() {
            if let Some(want) = desired.remove(&endpoint_key(ep)) {
                updated |= !endpoints_equal_beyond_hash(&want, ep);
                kept.push(want);
            }
        }
        let (labels, labels_changed) = slice_labels(slice, svc, controller);
        if updated || kept.len() != slice.endpoints.as_ref().map_or(0, Vec::len) {
            if kept.is_empty() {
                to_delete.push((*slice).clone());
            } else {
                let mut s = (*slice).clone();
                s.endpoints = Some(kept);
                s.metadata.labels = Some(labels);
                to_update.push(s);
            }
        } else if labels_changed {
            let mut s = (*slice).clone();
            s.metadata.labels = Some(labels);
            to_update.push(s);
        } else {
            unchanged.push((*slice).clone());
        }
    }
    // 2. Fill slices being updated anyway, fullest first.
    if !desired.is_empty() && !to_update.is_empty() {
        to_update.sort_by_key(|s| std::cmp::Reverse(s.endpoints.as_ref().map_or(0, Vec::len)));
        for s in to_update.iter_mut() {
            while s.endpoints.as_ref().map_or(0, Vec::len) < max_per_slice {
                let Some((_, ep)) = desired.pop_first() else {
                    break;
                };
                s.endpoints.get_or_insert_with(Vec::new).push(ep);
            }
        }
    }
    // 3. Put the rest in an unchanged slice they fit in, else in new slices.
    let mut to_create = Vec::new();
    while !desired.is_empty() {
        let mut target: Option<EndpointSlice> = None;
        if desired.len() < max_per_slice && !unchanged.is_empty() {
            // The fullest unchanged slice with room for all of them.
            let best = unchanged
                .iter()
                .enumerate()
                .filter(|(_, s)| {
                    s.endpoints.as_ref().map_or(0, Vec::len) + desired.len() <= max_per_slice
                })
                .max_by_key(|(_, s)| s.endpoints.as_ref().map_or(0, Vec::len))
                .map(|(i, _)| i);
            target = best.map(|i| unchanged.remove(i));
        }
        let mut slice =
            target.unwrap_or_else(|| new_slice(svc, ports.to_vec(), address_type, controller));
        while slice.endpoints.as_ref().map_or(0, Vec::len) < max_per_slice {
            let Some((_, ep)) = desired.pop_first() else {
                break;
            };
            slice.endpoints.get_or_insert_with(Vec::new).push(ep);
        }
        if slice.metadata.name.is_some() {
            to_update.push(slice);
        } else {
            to_create.push(slice);
        }
    }
    PortMappingResult {
        create: to_create,
        update: to_update,
        delete: to_delete,
        unchanged,
    }
}

/// Zone hints per `spec.trafficDistribution` (upstream `trafficdist`): with `PreferClose` every
/// endpoint with a zone is hinted for its own zone; otherwise hints are removed. Unchanged slices
/// whose hints change become updates.
fn reconcile_hints(svc: &Service, plan: &mut Plan, unchanged: Vec<EndpointSlice>) {
    let prefer_close = svc
        .spec
        .as_ref()
        .and_then(|s| s.traffic_distribution.as_deref())
        == Some("PreferClose");
    let apply = |slice: &mut EndpointSlice| -> bool {
        let mut changed = false;
        for ep in slice.endpoints.iter_mut().flatten() {
            let want = if prefer_close {
                ep.zone.as_ref().map(|z| EndpointHints {
                    for_zones: Some(vec![ForZone { name: z.clone() }]),
                    for_nodes: None,
                })
            } else {
                None
            };
            if semantic(&ep.hints) != semantic(&want) {
                ep.hints = want;
                changed = true;
            }
        }
        changed
    };
    for s in plan.create.iter_mut().chain(plan.update.iter_mut()) {
        apply(s);
    }
    for mut s in unchanged {
        if apply(&mut s) {
            plan.update.push(s);
        }
    }
}

/// Whether `v` (a slice in JSON form) is managed by `controller`.
pub fn managed_by(labels: Option<&BTreeMap<String, String>>, controller: &str) -> bool {
    labels
        .and_then(|l| l.get(LABEL_MANAGED_BY))
        .map(String::as_str)
        == Some(controller)
}

#[cfg(test)]
#[path = "reconciler_tests.rs"]
mod tests;
