//! Allocation on Service updates (upstream `registry/core/service/storage/alloc.go`'s
//! `allocateUpdate`: `updateClusterIPs`, `txnUpdateNodePorts`, `updateHealthCheckNodePort`).
//!
//! A type change takes what the new type needs and frees what only the old one held: ExternalName
//! to another type gets a ClusterIP and the reverse frees it; NodePort/LoadBalancer get node ports
//! for ports that lack one (unless a LoadBalancer opts out) and free ports no longer named; a
//! LoadBalancer with externalTrafficPolicy Local gets a health check node port, freed when it stops
//! needing one. What is taken is given back by [`ServiceAllocator::revert_update`] when the write
//! does not happen; what is freed is freed by [`ServiceAllocator::commit_update`] only after it
//! did, so a failed update never loses the old object's resources.
//!
//! Before this runs, the strategy (`registry::core::service`) has carried allocated values the
//! client left out over from the old object and dropped the ones the new type cannot have.
//!
//! Difference: single-stack, so there is no dual-stack upgrade or downgrade (upstream's cases C and
//! D).

use std::net::IpAddr;
use std::sync::Arc;

use apimachinery::status::ApiError;
use serde_json::{json, Value};

use super::nodeports::{self, needs_health_check, should_allocate_node_ports};
use super::{cidr, cluster_ips, ServiceAllocator};
use crate::ApiServer;

/// What one update took and what it frees once stored.
#[derive(Debug, Default, PartialEq, Eq)]
#[must_use = "an update's allocations are committed or reverted"]
pub struct UpdateTxn {
    took_ip: Option<IpAddr>,
    took_ports: Vec<u16>,
    free_ips: Vec<IpAddr>,
    free_ports: Vec<u16>,
}

fn service_type(svc: &Value) -> &str {
    svc.pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
}

fn has_node_ports(svc: &Value) -> bool {
    matches!(service_type(svc), "NodePort" | "LoadBalancer")
}

/// The node ports an update must take: for each want (0 = any free port), the indices in
/// `spec.ports` it fills. Ports the old object already holds are kept, not taken again; a port
/// named by several entries (TCP and UDP of one number) is taken once.
fn node_port_wants(new: &Value, old_ports: &[u16]) -> (Vec<u16>, Vec<Vec<usize>>) {
    let mut wants: Vec<u16> = Vec::new();
    let mut fills: Vec<Vec<usize>> = Vec::new();
    if !has_node_ports(new) {
        return (wants, fills);
    }
    let allocate_new = should_allocate_node_ports(new);
    let ports = new
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    for (i, port) in ports.iter().enumerate() {
        let node_port = port
            .get("nodePort")
            .and_then(Value::as_u64)
            .filter(|p| *p <= u64::from(u16::MAX))
            .unwrap_or(0) as u16;
        if node_port == 0 && !allocate_new {
            // Upstream: no new ports, but specific requests are honoured.
            continue;
        }
        if node_port != 0 {
            if old_ports.contains(&node_port) {
                continue;
            }
            if let Some(w) = wants.iter().position(|w| *w == node_port) {
                fills[w].push(i);
                continue;
            }
        }
        wants.push(node_port);
        fills.push(vec![i]);
    }
    (wants, fills)
}

impl ServiceAllocator {
    /// Takes what `new` needs beyond `old` (filling the chosen values into `new`) and notes what
    /// only `old` holds. Nothing is taken or freed on a dry run (the values are still filled).
    pub async fn allocate_update(
        &self,
        api: &Arc<ApiServer>,
        new: &mut Value,
        old: &Value,
        dry_run: bool,
    ) -> Result<UpdateTxn, ApiError> {
        let mut txn = UpdateTxn::default();
        let (old_type, new_type) = (service_type(old), service_type(new).to_string());
        // ClusterIPs: upstream's cases A (from ExternalName) and B (to ExternalName).
        if old_type == "ExternalName" && new_type != "ExternalName" {
            txn.took_ip = self.allocate_cluster_ip(api, new, dry_run).await?;
        } else if old_type != "ExternalName" && new_type == "ExternalName" {
            txn.free_ips = cluster_ips(old)
                .iter()
                .filter_map(|ip| cidr::parse_ip(ip))
                .collect();
        }

        // Node ports and the health check node port, in one reservation.
        let old_ports = nodeports::service_node_ports(old);
        let (mut wants, fills) = node_port_wants(new, &old_ports);
        let old_hc = nodeports::health_check_node_port(old);
        let hc = (!needs_health_check(old) && needs_health_check(new)).then(|| {
            new.pointer("/spec/healthCheckNodePort")
                .and_then(Value::as_u64)
                .filter(|p| *p <= u64::from(u16::MAX))
                .unwrap_or(0) as u16
        });
        if let Some(hc) = hc {
            wants.push(hc);
        }
        let chosen = match self.node_ports().reserve(api, &wants, dry_run).await {
            Ok(chosen) => chosen,
            Err(e) => {
                self.revert_update(api, old, txn).await;
                return Err(self.node_ports().reserve_error(new, e, &fills, hc));
            }
        };
        if let Some(list) = new.pointer_mut("/spec/ports").and_then(Value::as_array_mut) {
            for (w, filled) in fills.iter().enumerate() {
                for &i in filled {
                    list[i]["nodePort"] = json!(chosen[w]);
                }
            }
        }
        if hc.is_some() {
            new["spec"]["healthCheckNodePort"] = json!(chosen[fills.len()]);
        }
        if !dry_run {
            txn.took_ports = chosen;
        }

        // What the old object held and the new one does not.
        let kept = nodeports::held_node_ports(new);
        txn.free_ports = old_ports
            .into_iter()
            .chain((old_hc != 0).then_some(old_hc))
            .filter(|p| !kept.contains(p))
            .collect();
        txn.free_ports.dedup();
        if dry_run {
            txn.free_ips.clear();
            txn.free_ports.clear();
        }
        Ok(txn)
    }

    /// The update was stored: frees what only the old object held.
    pub async fn commit_update(&self, api: &Arc<ApiServer>, svc: &Value, txn: UpdateTxn) {
        for ip in txn.free_ips {
            self.release_ip(api, svc, ip).await;
        }
        self.release_ports(api, &txn.free_ports).await;
    }

    /// The update was not stored: gives back what it took.
    pub async fn revert_update(&self, api: &Arc<ApiServer>, svc: &Value, txn: UpdateTxn) {
        if let Some(ip) = txn.took_ip {
            self.release_ip(api, svc, ip).await;
        }
        self.release_ports(api, &txn.took_ports).await;
    }

    async fn release_ports(&self, api: &ApiServer, ports: &[u16]) {
        if ports.is_empty() {
            return;
        }
        if let Err(e) = self.node_ports().release(api, ports).await {
            tracing::warn!(?ports, error = %e, "cannot release node ports");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wants_skip_held_ports_and_share_repeated_ones() {
        let new = json!({"spec": {"type": "NodePort", "ports": [
            {"port": 80, "nodePort": 30080},
            {"port": 81},
            {"port": 53, "protocol": "TCP", "nodePort": 30053},
            {"port": 53, "protocol": "UDP", "nodePort": 30053},
        ]}});
        let (wants, fills) = node_port_wants(&new, &[30080]);
        assert_eq!(wants, vec![0, 30053]);
        assert_eq!(fills, vec![vec![1], vec![2, 3]]);
    }

    #[test]
    fn a_load_balancer_may_opt_out_of_new_ports() {
        let new = json!({"spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false,
            "ports": [{"port": 80}, {"port": 81, "nodePort": 30081}]}});
        let (wants, fills) = node_port_wants(&new, &[]);
        assert_eq!(wants, vec![30081]);
        assert_eq!(fills, vec![vec![1]]);
        let cluster_ip = json!({"spec": {"type": "ClusterIP", "ports": [{"port": 80}]}});
        assert_eq!(node_port_wants(&cluster_ip, &[]), (vec![], vec![]));
    }
}
