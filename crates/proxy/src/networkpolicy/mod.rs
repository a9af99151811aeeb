//! NetworkPolicy enforcement (`networking.k8s.io/v1` NetworkPolicy as kube-router's and Calico's
//! policy agents enforce it), with nftables, beside kube-proxy on each node.
//!
//! Layout: `model` reads policies, pods and namespaces into what decides traffic (selectors
//! parsed, `policyTypes` defaulted, named ports); `plan` decides, as a pure function, which
//! (peer, port) combinations each isolated pod of this node allows per direction; `rules` renders
//! the plan as one nftables table (`ip rkube-netpol`, a forward-hook chain and per-pod chains);
//! `agent` runs informers and a bounded-frequency runner that replaces the table in one `nft -f -`
//! transaction per sync.
//!
//! Not built: IPv6, policies on host-network pods, filtering of pods' traffic to their own node
//! (input hook; upstream leaves node-to-pod traffic allowed, and rkube's cluster DNS answers on
//! the node), AdminNetworkPolicy, logging of dropped packets.

pub mod agent;
pub mod model;
pub mod plan;
pub mod rules;

#[cfg(test)]
mod tests;

use model::{NamespaceInfo, PodInfo, Policy};

/// The nftables script for `node_name`'s table: [`plan::build`] then [`rules::script`].
pub fn table(
    policies: &[Policy],
    pods: &[PodInfo],
    namespaces: &[NamespaceInfo],
    node_name: &str,
) -> String {
    rules::script(&plan::build(&plan::Inputs {
        policies,
        pods,
        namespaces,
        node_name,
    }))
}
