//! kube-proxy (upstream `pkg/proxy` and `cmd/kube-proxy`): routes Service traffic to endpoints with
//! nftables (upstream's `kube-proxy` table) or iptables (upstream's KUBE- chains).
//!
//! Layout: change trackers build the service port map and endpoints map from Services and
//! EndpointSlices; `topology` picks the endpoints per traffic policy; `nftables::rules` and
//! `iptables::rules` generate rules as pure functions; the backends' `proxier` modules apply them
//! (`nft -f -`, `iptables-restore --noflush`), one transaction per sync, partial syncs for changed
//! Services; `runner` bounds the sync rate; `run` wires informers, runner and `/healthz`/`/metrics`.
//!
//! Not built: IPVS and winkernel modes, loadBalancerSourceRanges, IPv6/dual-stack (one IPv4 proxier),
//! health-check node ports' HTTP servers (their iptables ACCEPT rules are written).

pub mod conntrack;
pub mod endpointschangetracker;
pub mod exec;
/// Health-check node ports of Services with externalTrafficPolicy Local.
pub mod healthcheck;
pub mod iptables;
pub mod metrics;
pub mod names;
pub mod netns;
/// NetworkPolicy enforcement (kube-router/Calico's job upstream), run beside the proxier.
pub mod networkpolicy;
pub mod nftables;
pub mod objects;
pub mod proxier;
pub mod run;
pub mod runner;
pub mod server;
pub mod servicechangetracker;
pub mod topology;

#[cfg(test)]
mod testutil;

pub use exec::Exec;
pub use proxier::{Mode, Proxier, ProxyError, SyncStats};
