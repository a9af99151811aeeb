//! `rkube controller-manager`: the controllers (upstream kube-controller-manager) against any API
//! server, elected on the `kube-controller-manager` Lease in `kube-system` as upstream.

use std::time::Duration;

use clap::Args;

use crate::leader::LeaderElectionFlags;
use crate::serve::parse_duration;

/// The controller flags `rkube controller-manager` and `rkube server` share (upstream's names).
#[derive(Args, Clone, Debug)]
pub struct ControllerFlags {
    /// Controllers to run, upstream's syntax: `*` every controller on by default, `foo` turns foo on,
    /// `-foo` turns it off (canonical names such as `job-controller`, or short ones such as `job`).
    #[arg(long, value_delimiter = ',', default_value = "*")]
    controllers: Vec<String>,
    /// How often node health is checked.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    node_monitor_period: Duration,
    /// How long a node may go without a heartbeat before it is marked Unknown.
    #[arg(long, default_value = "40s", value_parser = parse_duration)]
    node_monitor_grace_period: Duration,
    /// The same for a node that never posted a Ready condition.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    node_startup_grace_period: Duration,
    /// Nodes per second whose pods may be evicted (NoExecute-tainted) in a healthy zone.
    #[arg(long, default_value_t = 0.1)]
    node_eviction_rate: f64,
    /// The same in a partially disrupted zone larger than --large-cluster-size-threshold.
    #[arg(long, default_value_t = 0.01)]
    secondary_node_eviction_rate: f64,
    #[arg(long, default_value_t = 50)]
    large_cluster_size_threshold: usize,
    /// Fraction of not-Ready nodes (at least 3) that makes a zone partially disrupted.
    #[arg(long, default_value_t = 0.55)]
    unhealthy_zone_threshold: f64,
    /// Give each node a pod CIDR from --cluster-cidr (default: on in `rkube server`, off in
    /// `rkube controller-manager`, as upstream).
    #[arg(long, num_args = 0..=1, default_missing_value = "true")]
    allocate_node_cidrs: Option<bool>,
    /// The pods' address range (default in `rkube server`: 10.42.0.0/16).
    #[arg(long = "cluster-cidr")]
    pod_cluster_cidr: Option<String>,
    /// Prefix length of each node's pod CIDR (default 24 for IPv4, 64 for IPv6).
    #[arg(long)]
    node_cidr_mask_size: Option<u8>,
}

/// The pod range of `rkube server` when none is given (k3s's).
const EMBEDDED_CLUSTER_CIDR: &str = "10.42.0.0/16";

impl ControllerFlags {
    pub fn selected(&self) -> Result<Vec<&'static controllers::ControllerDescriptor>, String> {
        controllers::select(&self.controllers)
    }

    /// The controllers' settings; `embedded` (in `rkube server`) allocates node CIDRs by default.
    pub fn options(&self, embedded: bool) -> controllers::ControllerOptions {
        controllers::ControllerOptions {
            node_ipam: controllers::nodeipam::Options {
                allocate_node_cidrs: self.allocate_node_cidrs.unwrap_or(embedded),
                cluster_cidr: self
                    .pod_cluster_cidr
                    .clone()
                    .or_else(|| embedded.then(|| EMBEDDED_CLUSTER_CIDR.to_string())),
                node_cidr_mask_size: self.node_cidr_mask_size,
            },
            node_lifecycle: controllers::nodelifecycle::Options {
                monitor_period: self.node_monitor_period,
                grace_period: self.node_monitor_grace_period,
                startup_grace_period: self.node_startup_grace_period,
                rates: controllers::nodelifecycle::Rates {
                    eviction: self.node_eviction_rate,
                    secondary: self.secondary_node_eviction_rate,
                    large_cluster_threshold: self.large_cluster_size_threshold,
                },
                unhealthy_zone_threshold: self.unhealthy_zone_threshold,
            },
        }
    }
}

#[derive(Args)]
pub struct ControllerManagerArgs {
    /// Kubeconfig of the cluster (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
    #[command(flatten)]
    controllers: ControllerFlags,
    #[command(flatten)]
    leader_election: LeaderElectionFlags,
}

pub async fn run(args: ControllerManagerArgs) -> Result<(), String> {
    let selected = args.controllers.selected()?;
    let options = args.controllers.options(false);
    let client = crate::cluster_client(args.kubeconfig.as_deref()).await?;
    let elected = client.clone();
    crate::leader::run_elected(
        elected,
        &args.leader_election,
        "kube-controller-manager",
        move || controllers::run_selected(client, selected, options),
    )
    .await
}
