//! `rkube sim`: simulated nodes against any API server (rkube or upstream), and the flags `rkube
//! server --sim-nodes` shares. See the `sim` crate for what a simulated node does.

use std::path::PathBuf;

use clap::Args;

#[derive(Args, Clone, Debug)]
pub struct SimFlags {
    /// Capacity (and allocatable) of each node.
    #[arg(long = "sim-cpu", default_value = "32")]
    cpu: String,
    #[arg(long = "sim-memory", default_value = "256Gi")]
    memory: String,
    #[arg(long = "sim-pods", default_value = "110")]
    pods: String,
    #[arg(long = "sim-ephemeral-storage", default_value = "1Ti")]
    ephemeral_storage: String,
    /// Zones the nodes are spread over (topology.kubernetes.io/zone = <region>-a, -b, ...).
    #[arg(long = "sim-zones", default_value_t = 3)]
    zones: usize,
    /// Taints of every node, `key[=value]:Effect`, comma-separated.
    #[arg(long = "sim-taints", value_delimiter = ',')]
    taints: Vec<String>,
    /// Node names are <prefix><index>.
    #[arg(long = "sim-name-prefix", default_value = "sim-")]
    name_prefix: String,
    /// Index of the first node (for several simulators on one cluster).
    #[arg(long = "sim-first-index", default_value_t = 0)]
    first_index: usize,
    /// Pod CIDRs of the nodes are /<mask> subnets of this range.
    #[arg(long = "sim-cluster-cidr", default_value = "10.128.0.0/9")]
    cluster_cidr: String,
    #[arg(long = "sim-node-cidr-mask", default_value_t = 24)]
    node_cidr_mask: u8,
    /// Concurrent API writes of the simulator.
    #[arg(long = "sim-workers", default_value_t = 16)]
    workers: usize,
    /// How often each node renews its Lease (the kubelet's 10 s).
    #[arg(long = "sim-lease-renew-interval", default_value = "10s", value_parser = crate::serve::parse_duration)]
    renew_interval: std::time::Duration,
    /// DRA devices of every node, `DRIVER=COUNT` (e.g. `gpu.example.com=8`), comma-separated:
    /// one ResourceSlice per node and driver, the node's own pool.
    #[arg(long = "sim-devices", value_delimiter = ',', value_parser = sim::devices::DeviceSpec::parse)]
    devices: Vec<sim::devices::DeviceSpec>,
}

impl SimFlags {
    pub fn config(&self, nodes: usize) -> sim::SimConfig {
        sim::SimConfig {
            nodes,
            name_prefix: self.name_prefix.clone(),
            first_index: self.first_index,
            cpu: self.cpu.clone(),
            memory: self.memory.clone(),
            pods: self.pods.clone(),
            ephemeral_storage: self.ephemeral_storage.clone(),
            zones: self.zones,
            taints: self.taints.clone(),
            cluster_cidr: self.cluster_cidr.clone(),
            node_cidr_mask: self.node_cidr_mask,
            workers: self.workers,
            renew_interval: self.renew_interval,
            devices: self.devices.clone(),
            ..Default::default()
        }
    }
}

#[derive(Args)]
pub struct SimArgs {
    /// How many nodes to simulate.
    #[arg(long, default_value_t = 10)]
    nodes: usize,
    /// Kubeconfig of the cluster (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    servers: crate::agent_lb::ServerFlags,
    #[command(flatten)]
    flags: SimFlags,
}

pub async fn run(args: SimArgs) -> Result<(), String> {
    let client = crate::agent_lb::cluster_client(args.kubeconfig.as_deref(), &args.servers).await?;
    let started = std::time::Instant::now();
    let _sim = sim::Simulator::start(client, args.flags.config(args.nodes)).await?;
    eprintln!(
        "rkube sim: {} nodes registered in {:.1}s; running (Ctrl-C or SIGTERM stops)",
        args.nodes,
        started.elapsed().as_secs_f64()
    );
    // Supervisors stop a process with SIGTERM; its default action would kill it mid-write.
    let signal = apiserver::shutdown::signalled().await;
    eprintln!("rkube sim: {signal}: stopping");
    Ok(())
}
