//! The EndpointSlices mirroring one custom Endpoints object (pure; upstream
//! `pkg/controller/endpointslicemirroring/reconciler.go`): the repacked subsets are mirrored one slice
//! group per (port set, address type), at most `max_per_subset` addresses per subset, addresses that
//! are not IPs skipped. Slices carry the Endpoints' labels and annotations (less the trigger time and
//! kubectl's last-applied configuration) and are owned by the Endpoints.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{EndpointAddress, Endpoints};
use k8s_openapi::api::discovery::v1::{Endpoint, EndpointConditions, EndpointPort, EndpointSlice};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::endpoint::subsets::repack;
use crate::endpointslice::reconciler::{
    endpoint_key, endpoints_equal_beyond_hash, ports_key, Plan,
};
use crate::endpointslice::util::{
    endpoint_slice_prefix, LABEL_MANAGED_BY, LABEL_SERVICE_NAME, LAST_CHANGE_TRIGGER_TIME,
};

pub const CONTROLLER_NAME: &str = "endpointslicemirroring-controller.k8s.io";
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Labels and annotations the slices of `ep` should carry.
fn desired_meta(ep: &Endpoints) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut labels = ep.metadata.labels.clone().unwrap_or_default();
    labels.insert(
        LABEL_SERVICE_NAME.into(),
        ep.metadata.name.clone().unwrap_or_default(),
    );
    labels.insert(LABEL_MANAGED_BY.into(), CONTROLLER_NAME.into());
    let annotations = ep
        .metadata
        .annotations
        .iter()
        .flatten()
        .filter(|(k, _)| k.as_str() != LAST_CHANGE_TRIGGER_TIME && k.as_str() != LAST_APPLIED)
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    (labels, annotations)
}

fn new_slice(ep: &Endpoints, ports: &[EndpointPort], address_type: &str) -> EndpointSlice {
    let (labels, annotations) = desired_meta(ep);
    EndpointSlice {
        metadata: ObjectMeta {
            generate_name: Some(endpoint_slice_prefix(
                ep.metadata.name.as_deref().unwrap_or(""),
            )),
            namespace: ep.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Endpoints".into(),
                name: ep.metadata.name.clone().unwrap_or_default(),
                uid: ep.metadata.uid.clone().unwrap_or_default(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }]),
            ..Default::default()
        },
        address_type: address_type.into(),
        endpoints: Some(Vec::new()),
        ports: Some(ports.to_vec()),
    }
}

fn address_to_endpoint(a: &EndpointAddress, ready: bool) -> Endpoint {
    Endpoint {
        addresses: vec![a.ip.clone()],
        conditions: Some(EndpointConditions {
            ready: Some(ready),
            ..Default::default()
        }),
        target_ref: a.target_ref.clone(),
        node_name: a.node_name.clone().filter(|n| !n.is_empty()),
        hostname: a.hostname.clone().filter(|h| !h.is_empty()),
        ..Default::default()
    }
}

/// Addresses left out of the mirror.
#[derive(Debug, Default, PartialEq)]
pub struct Skipped {
    /// Not an IP address.
    pub invalid: usize,
    /// Beyond `max_per_subset` in their subset.
    pub over_capacity: usize,
}

/// What mirroring `ep` needs, given the slices it already has, and what was left out.
pub fn reconcile(
    ep: &Endpoints,
    existing: &[EndpointSlice],
    max_per_subset: usize,
) -> (Plan, Skipped) {
    // (port set key, address type) -> (ports, endpoints by identity)
    type Desired = BTreeMap<(String, String), (Vec<EndpointPort>, BTreeMap<String, Endpoint>)>;
    let mut desired: Desired = BTreeMap::new();
    let mut skipped = Skipped::default();
    for subset in repack(ep.subsets.as_deref().unwrap_or(&[])) {
        let ports: Vec<EndpointPort> = subset
            .ports
            .iter()
            .flatten()
            .map(|p| EndpointPort {
                name: Some(p.name.clone().unwrap_or_default()),
                port: Some(p.port),
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: p.app_protocol.clone(),
            })
            .collect();
        let key = ports_key(&ports);
        let mut added = 0;
        let ready = subset.addresses.iter().flatten().map(|a| (a, true));
        let not_ready = subset
            .not_ready_addresses
            .iter()
            .flatten()
            .map(|a| (a, false));
        for (address, is_ready) in ready.chain(not_ready) {
            if added >= max_per_subset {
                skipped.over_capacity += 1;
                continue;
            }
            let address_type = match address.ip.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V4(_)) => "IPv4",
                Ok(std::net::IpAddr::V6(_)) => "IPv6",
                Err(_) => {
                    skipped.invalid += 1;
                    continue;
                }
            };
            let endpoint = address_to_endpoint(address, is_ready);
            desired
                .entry((key.clone(), address_type.into()))
                .or_insert_with(|| (ports.clone(), BTreeMap::new()))
                .1
                .insert(endpoint_key(&endpoint), endpoint);
            added += 1;
        }
    }
    let (labels, annotations) = desired_meta(ep);
    let mut existing_by_key: BTreeMap<(String, String), Vec<&EndpointSlice>> = BTreeMap::new();
    for s in existing {
        let key = ports_key(s.ports.as_deref().unwrap_or(&[]));
        existing_by_key
            .entry((key, s.address_type.clone()))
            .or_default()
            .push(s);
    }
    let mut plan = Plan::default();
    for (key, (ports, mut want)) in desired.clone() {
        for slice in existing_by_key.get(&key).into_iter().flatten() {
            let mut kept = Vec::new();
            let mut updated = false;
            for e in slice.endpoints.iter().flatten() {
                if let Some(w) = want.remove(&endpoint_key(e)) {
                    updated |= !endpoints_equal_beyond_hash(&w, e);
                    kept.push(w);
                }
            }
            let meta_changed = slice.metadata.labels.clone().unwrap_or_default() != labels
                || slice.metadata.annotations.clone().unwrap_or_default() != annotations;
            if updated || meta_changed || kept.len() != slice.endpoints.as_ref().map_or(0, Vec::len)
            {
                if kept.is_empty() {
                    plan.delete.push((*slice).clone());
                } else {
                    let mut s = (*slice).clone();
                    s.endpoints = Some(kept);
                    s.metadata.labels = Some(labels.clone());
                    s.metadata.annotations = (!annotations.is_empty()).then(|| annotations.clone());
                    plan.update.push(s);
                }
            }
        }
        while !want.is_empty() {
            let mut slice = new_slice(ep, &ports, &key.1);
            while slice.endpoints.as_ref().map_or(0, Vec::len) < max_per_subset.max(1) {
                let Some((_, e)) = want.pop_first() else {
                    break;
                };
                slice.endpoints.get_or_insert_with(Vec::new).push(e);
            }
            plan.create.push(slice);
        }
    }
    for (key, slices) in &existing_by_key {
        if !desired.contains_key(key) {
            plan.delete.extend(slices.iter().map(|s| (*s).clone()));
        }
    }
    // Reuse slices about to be deleted for slices about to be created.
    let mut i = 0;
    while i < plan.delete.len() && !plan.create.is_empty() {
        if plan.create.last().map(|s| &s.address_type) == Some(&plan.delete[i].address_type) {
            let doomed = plan.delete.remove(i);
            let mut slice = plan.create.pop().unwrap_or_default();
            slice.metadata.name = doomed.metadata.name.clone();
            slice.metadata.resource_version = doomed.metadata.resource_version.clone();
            slice.metadata.uid = doomed.metadata.uid.clone();
            plan.update.push(slice);
        } else {
            i += 1;
        }
    }
    (plan, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn endpoints(v: serde_json::Value) -> Endpoints {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn custom_endpoints_are_mirrored() {
        let ep = endpoints(
            json!({"metadata": {"name": "ext", "namespace": "d", "uid": "ep-uid",
            "labels": {"team": "x"}, "annotations": {"note": "n", LAST_APPLIED: "{}"}},
            "subsets": [{"addresses": [{"ip": "192.0.2.1"}, {"ip": "192.0.2.2"}, {"ip": "not-an-ip"}],
                "notReadyAddresses": [{"ip": "2001:db8::1"}],
                "ports": [{"name": "http", "port": 80, "protocol": "TCP"}]}]}),
        );
        let (plan, skipped) = reconcile(&ep, &[], 1000);
        assert_eq!(
            skipped,
            Skipped {
                invalid: 1,
                over_capacity: 0
            }
        );
        assert_eq!(plan.create.len(), 2);
        let v4 = plan
            .create
            .iter()
            .find(|s| s.address_type == "IPv4")
            .unwrap();
        assert_eq!(v4.endpoints.as_ref().map_or(0, Vec::len), 2);
        let labels = v4.metadata.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_MANAGED_BY], CONTROLLER_NAME);
        assert_eq!(labels[LABEL_SERVICE_NAME], "ext");
        assert_eq!(labels["team"], "x");
        let annotations = v4.metadata.annotations.as_ref().unwrap();
        assert!(annotations.contains_key("note") && !annotations.contains_key(LAST_APPLIED));
        assert_eq!(
            v4.metadata.owner_references.as_ref().unwrap()[0].kind,
            "Endpoints"
        );
        let v6 = plan
            .create
            .iter()
            .find(|s| s.address_type == "IPv6")
            .unwrap();
        assert_eq!(
            v6.endpoints.as_ref().unwrap()[0]
                .conditions
                .as_ref()
                .unwrap()
                .ready,
            Some(false)
        );
        // Mirrored again: nothing to do.
        let mut existing = plan.create.clone();
        for (i, s) in existing.iter_mut().enumerate() {
            s.metadata.name = Some(format!("ext-{i}"));
        }
        let (plan, _) = reconcile(&ep, &existing, 1000);
        assert!(plan.create.is_empty() && plan.update.is_empty() && plan.delete.is_empty());
    }

    #[test]
    fn subset_capacity_limits_mirrored_addresses() {
        let addresses: Vec<serde_json::Value> = (1..=5)
            .map(|i| json!({"ip": format!("192.0.2.{i}")}))
            .collect();
        let ep = endpoints(json!({"metadata": {"name": "ext", "namespace": "d"},
            "subsets": [{"addresses": addresses, "ports": [{"port": 80}]}]}));
        let (plan, skipped) = reconcile(&ep, &[], 3);
        assert_eq!(
            skipped,
            Skipped {
                invalid: 0,
                over_capacity: 2
            }
        );
        assert_eq!(plan.create[0].endpoints.as_ref().map_or(0, Vec::len), 3);
    }
}
