//! `rkube proxy`: kube-proxy (upstream `cmd/kube-proxy`), flags with upstream's names, then
//! [`::proxy::run::run`]; and the proxy `rkube server` runs for its local node ([`start_local`]).
//! Both also run the NetworkPolicy agent ([`::proxy::networkpolicy::agent`]) unless told not to.

use std::net::SocketAddr;
use std::time::Duration;

use clap::Args;

#[derive(Args, Debug)]
pub struct ProxyArgs {
    /// Kubeconfig of the cluster (default: $KUBECONFIG, then ~/.kube/config).
    #[arg(long)]
    kubeconfig: Option<std::path::PathBuf>,
    #[command(flatten)]
    servers: crate::agent_lb::ServerFlags,
    /// nftables (default) or iptables. IPVS is deprecated upstream and not built.
    #[arg(long, default_value = "nftables")]
    proxy_mode: ::proxy::Mode,
    /// This node's name, as its Node object and endpoints' nodeName say (default: the host name).
    #[arg(long)]
    hostname_override: Option<String>,
    /// The pods' CIDR: traffic from outside it to a ClusterIP is masqueraded.
    #[arg(long)]
    cluster_cidr: Option<String>,
    /// CIDRs whose node addresses accept NodePort traffic, comma-separated (default: all local
    /// addresses).
    #[arg(long, value_delimiter = ',')]
    nodeport_addresses: Vec<String>,
    /// Masquerade all Service traffic.
    #[arg(long)]
    masquerade_all: bool,
    /// The minimum time between syncs (upstream default 1s).
    #[arg(long, default_value = "1s", value_parser = crate::serve::parse_duration)]
    min_sync_period: Duration,
    /// The longest time between syncs (upstream default 30s).
    #[arg(long, default_value = "30s", value_parser = crate::serve::parse_duration)]
    sync_period: Duration,
    /// Where /healthz answers; empty to disable.
    #[arg(long, default_value = "0.0.0.0:10256")]
    healthz_bind_address: String,
    /// Where /metrics answers; empty to disable.
    #[arg(long, default_value = "127.0.0.1:10249")]
    metrics_bind_address: String,
    /// Put the rules into network namespace /run/netns/NAME instead of the host's.
    #[arg(long)]
    network_namespace: Option<String>,
    /// Remove this mode's rules and exit (upstream --cleanup).
    #[arg(long)]
    cleanup: bool,
    /// Enforce NetworkPolicies on this node with nftables (what a CNI such as kube-router or
    /// Calico does upstream); `--enable-network-policy=false` leaves that to another agent.
    #[arg(long, default_value = "true", num_args = 0..=1, default_missing_value = "true", require_equals = true)]
    enable_network_policy: bool,
}

fn network_policy_options(
    node_name: String,
    exec: ::proxy::Exec,
    min_sync_period: Duration,
    sync_period: Duration,
) -> ::proxy::networkpolicy::agent::Options {
    ::proxy::networkpolicy::agent::Options {
        node_name,
        min_sync_period,
        sync_period,
        exec,
    }
}

fn addr(s: &str, flag: &str) -> Result<Option<SocketAddr>, String> {
    if s.is_empty() {
        return Ok(None);
    }
    s.parse()
        .map(Some)
        .map_err(|e| format!("--{flag} {s:?}: {e}"))
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_lowercase())
        .unwrap_or_else(|_| "localhost".into())
}

pub async fn run(args: ProxyArgs) -> Result<(), String> {
    let exec = match &args.network_namespace {
        Some(ns) => ::proxy::Exec::in_netns(ns),
        None => ::proxy::Exec::host(),
    };
    let hostname = args.hostname_override.clone().unwrap_or_else(hostname);
    if args.cleanup {
        let cfg = ::proxy::nftables::rules::Config {
            masquerade_mark: ::proxy::run::MASQUERADE_MARK,
            masquerade_all: false,
            cluster_cidr: None,
            nodeport_ips: None,
            node_name: hostname,
            node_labels: Default::default(),
        };
        let metrics = std::sync::Arc::new(::proxy::metrics::Metrics::new("cleanup"));
        let mut p = ::proxy::Proxier::new(args.proxy_mode, cfg, exec.clone(), vec![], metrics);
        p.cleanup().map_err(|e| e.to_string())?;
        return ::proxy::networkpolicy::agent::cleanup(&exec).map_err(|e| e.to_string());
    }
    let client = crate::agent_lb::cluster_client(args.kubeconfig.as_deref(), &args.servers).await?;
    if args.enable_network_policy {
        let opts = network_policy_options(
            hostname.clone(),
            exec.clone(),
            args.min_sync_period,
            args.sync_period,
        );
        tokio::spawn(::proxy::networkpolicy::agent::run(client.clone(), opts));
    }
    let opts = ::proxy::run::Options {
        mode: args.proxy_mode,
        hostname,
        cluster_cidr: args.cluster_cidr.clone(),
        nodeport_addresses: args.nodeport_addresses.clone(),
        min_sync_period: args.min_sync_period,
        sync_period: args.sync_period,
        healthz_bind_address: addr(&args.healthz_bind_address, "healthz-bind-address")?,
        metrics_bind_address: addr(&args.metrics_bind_address, "metrics-bind-address")?,
        masquerade_all: args.masquerade_all,
        exec,
    };
    ::proxy::run::run(client, opts)
        .await
        .map_err(|e| e.to_string())
}

/// The proxy flags of `rkube server`.
#[derive(Args, Clone, Debug)]
pub struct ServerProxyFlags {
    /// Do not run kube-proxy for the local node (Service IPs are then not routed on it).
    #[arg(long)]
    pub disable_proxy: bool,
    /// The local node's proxy mode: nftables (default) or iptables.
    #[arg(long = "proxy-mode", default_value = "nftables")]
    pub mode: ::proxy::Mode,
    /// Do not enforce NetworkPolicies on the local node (they are enforced beside its proxy,
    /// with nftables, whatever the proxy mode).
    #[arg(long)]
    pub disable_network_policy: bool,
}

/// Runs kube-proxy for `rkube server`'s local node, with its rules where the node's pods are
/// routed: the pod network namespace when there is one, else the host's. No `/healthz` or
/// `/metrics` listener (their fixed ports would collide between servers on one machine).
/// The NetworkPolicy agent runs in the same task, with its table in the same place.
pub fn start_local(
    client: kube::Client,
    flags: &ServerProxyFlags,
    node_name: String,
    cluster_cidr: String,
    pod_network_namespace: Option<&str>,
) -> tokio::task::JoinHandle<()> {
    let exec = match pod_network_namespace {
        Some(ns) => ::proxy::Exec::in_netns(ns),
        None => ::proxy::Exec::host(),
    };
    let policy = (!flags.disable_network_policy).then(|| {
        network_policy_options(
            node_name.clone(),
            exec.clone(),
            Duration::from_secs(1),
            Duration::from_secs(30),
        )
    });
    let policy_client = client.clone();
    let opts = ::proxy::run::Options {
        mode: flags.mode,
        hostname: node_name,
        cluster_cidr: Some(cluster_cidr),
        nodeport_addresses: Vec::new(),
        min_sync_period: Duration::from_secs(1),
        sync_period: Duration::from_secs(30),
        healthz_bind_address: None,
        metrics_bind_address: None,
        masquerade_all: false,
        exec,
    };
    tokio::spawn(async move {
        let proxy = async {
            if let Err(e) = ::proxy::run::run(client, opts).await {
                eprintln!("rkube: proxy: {e}; Service IPs are not routed on the local node");
            }
        };
        // One task for both, so that aborting it (the server returning) stops both.
        let policy = async {
            if let Some(opts) = policy {
                ::proxy::networkpolicy::agent::run(policy_client, opts).await;
            }
        };
        tokio::join!(proxy, policy);
    })
}
