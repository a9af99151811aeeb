//! `rkube server`: every component in one process (the API server with the flags of `rkube
//! apiserver`, the scheduler, the controllers, a local kubelet and kube-proxy, cluster DNS,
//! simulated nodes), like k3s.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use clap::Args;

#[derive(Args, Debug)]
pub struct ServeArgs {
    #[command(flatten)]
    api: crate::apiserver::ApiServerFlags,
    /// Do not run the scheduler in this process (see `rkube scheduler`).
    #[arg(long)]
    disable_scheduler: bool,
    /// The in-process scheduler's KubeSchedulerConfiguration file (like `rkube scheduler --config`;
    /// its leaderElection and clientConnection sections do not apply in-process).
    #[arg(long)]
    scheduler_config: Option<PathBuf>,
    /// Do not run the controllers in this process (see `rkube controller-manager`).
    #[arg(long)]
    disable_controllers: bool,
    #[command(flatten)]
    controllers: crate::controller_flags::ControllerFlags,
    /// Do not run the local node (the kubelet and its containerd) in this process.
    #[arg(long)]
    disable_kubelet: bool,
    /// Port of the local kubelet's HTTPS server (0 picks a free one).
    #[arg(long, default_value_t = 10250)]
    kubelet_port: u16,
    /// Address the local kubelet's HTTPS server listens on.
    #[arg(long, default_value = "0.0.0.0")]
    kubelet_address: IpAddr,
    #[command(flatten)]
    kubelet: crate::kubelet::KubeletFlags,
    /// Run N real nodes in this process, each a kubelet with its own containerd in a network
    /// namespace of its own (`<ns>`, `<ns>-1`, ...; `<ns>` is --pod-network-namespace, else
    /// `rkube`), joined by `<ns>-fabric` and routed host-gw style; the nodes are named --node-name
    /// (else the host name), then `<name>-1`, ... Without it, one node shares the host's network.
    #[arg(long)]
    nodes: Option<usize>,
    /// The nodes' addresses with --nodes: the first for the control plane (the cluster DNS listens
    /// there), then one per node.
    #[arg(long, default_value = "172.31.0.0/24")]
    node_network_cidr: String,
    /// Simulated nodes to run in this process (see `rkube sim`).
    #[arg(long, default_value_t = 0)]
    sim_nodes: usize,
    #[command(flatten)]
    sim: crate::sim::SimFlags,
    #[command(flatten)]
    dns: crate::dns::DnsFlags,
    #[command(flatten)]
    proxy: crate::proxy::ServerProxyFlags,
    #[command(flatten)]
    local_path: crate::local_path::LocalPathFlags,
}

/// "300ms", "5s", "5m", "1h".
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s
        .find(|c: char| !c.is_ascii_digit())
        .map_or((s, "s"), |i| s.split_at(i));
    let n: u64 = num.parse().map_err(|_| format!("invalid duration {s:?}"))?;
    Ok(match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => {
            return Err(format!(
                "invalid duration unit in {s:?} (use ms, s, m or h)"
            ))
        }
    })
}

impl ServeArgs {
    fn config(&self) -> Result<apiserver::Config, String> {
        let mut config = self.api.config()?;
        // Pods kept in a network namespace of their own are proxied to from inside it.
        config.pod_network_namespace = self
            .kubelet
            .pod_network_namespace
            .as_ref()
            .filter(|_| !self.disable_kubelet)
            .map(|name| PathBuf::from("/run/netns").join(name));
        // Several nodes: kubelets and pods are reached from the namespace that joins them.
        if let Some(fabric) = self.fabric()? {
            config.pod_network_namespace = Some(fabric.fabric_ns_path());
            config.kubelet.netns = Some(fabric.fabric_ns_path());
            // Pods reach the API server through the `kubernetes` Service: it also listens at the
            // control plane's fabric address, which the endpoints name.
            config.serve_in_namespace = Some((fabric.fabric_ns_path(), fabric.gateway().into()));
        } else if let Some((ns, ip)) = self.local_node_api_address()? {
            // One node in a namespace of its own: the same, at an address inside that namespace.
            config.serve_in_namespace = Some((PathBuf::from("/run/netns").join(ns), ip.into()));
        }
        Ok(config)
    }

    /// Without --nodes, the one local node in a network namespace of its own
    /// (--pod-network-namespace) cannot reach the server's 127.0.0.1: the server also listens in
    /// that namespace at the control plane's address of --node-network-cidr (its first, as with
    /// --nodes), put on the namespace's loopback, and the `kubernetes` endpoints name it, so pods
    /// reach the API server through the `kubernetes` Service. `None` when the local node shares
    /// the host's network (the server's --bind-address and --advertise-address decide there, as
    /// upstream's) or no local node runs.
    fn local_node_api_address(&self) -> Result<Option<(String, std::net::Ipv4Addr)>, String> {
        let Some(ns) = self.kubelet.pod_network_namespace.as_deref() else {
            return Ok(None);
        };
        let runtime = self.kubelet.container_runtime_endpoint.is_some()
            || kubelet::containerd::find_binary("containerd").is_some();
        if self.nodes.is_some() || self.disable_kubelet || !runtime {
            return Ok(None);
        }
        let fabric = crate::nodes::Fabric::new(ns, &self.node_network_cidr, 1)?;
        Ok(Some((ns.to_string(), fabric.gateway())))
    }

    /// The nodes' network with --nodes (and a local node at all).
    fn fabric(&self) -> Result<Option<crate::nodes::Fabric>, String> {
        match self.nodes {
            Some(n) if !self.disable_kubelet => {
                let prefix = self
                    .kubelet
                    .pod_network_namespace
                    .as_deref()
                    .unwrap_or("rkube");
                crate::nodes::Fabric::new(prefix, &self.node_network_cidr, n).map(Some)
            }
            _ => Ok(None),
        }
    }
}

pub async fn run(args: ServeArgs) -> Result<(), String> {
    let fabric = args.fabric()?;
    if let Some(f) = &fabric {
        f.setup()
            .map_err(|e| format!("--nodes: setting up the nodes' network: {e}"))?;
    }
    if let Some((ns, ip)) = args.local_node_api_address()? {
        crate::nodes::add_local_address(&ns, ip)
            .map_err(|e| format!("the API server's address in {ns}: {e}"))?;
    }
    // The components' work queue metrics are served on the API server's /metrics.
    let queues: apiserver::metrics::ExtraMetrics =
        std::sync::Arc::new(|| client::workqueue::MetricsRegistry::global().render());
    // With --nodes the server runs the endpoint reconciler for the nodes' pods: kept, to leave the
    // `kubernetes` endpoints first when stopping.
    let (running, reconciler) = apiserver::start_member(args.config()?, Some(queues)).await?;
    eprintln!(
        "rkube: serving on https://{} ; kubeconfig: {}",
        running.addr,
        args.api.data_dir.join("admin.kubeconfig").display()
    );
    if args.api.enable_bootstrap_token_auth {
        // As kubeadm's bootstrap-token phase: cluster-info for joining machines to read.
        let kubeconfig = args.api.data_dir.join("admin.kubeconfig");
        let client = in_process_client(&running, &kubeconfig).await?;
        crate::cluster_info::ensure(client, &kubeconfig).await?;
    }
    // The scheduler and the controllers share one informer factory: every pod, node, ReplicaSet...
    // is listed, watched and cached once in this process rather than once per component (with
    // thousands of pods the pod caches are most of the process's memory).
    let shared_informers = if !args.disable_scheduler && !args.disable_controllers {
        let kubeconfig = args.api.data_dir.join("admin.kubeconfig");
        let client = in_process_client(&running, &kubeconfig).await?;
        Some(controllers::informer_factory(client))
    } else {
        None
    };
    let _scheduler = if !args.disable_scheduler {
        let config =
            crate::scheduler_config(args.scheduler_config.as_deref(), "default-scheduler", 0)?;
        let kubeconfig = args.api.data_dir.join("admin.kubeconfig");
        let client = in_process_client(&running, &kubeconfig).await?;
        let task = match shared_informers.clone() {
            Some(factory) => AbortOnDrop(tokio::spawn(async move {
                if let Err(e) = scheduler::run_with_factory(client, factory, config).await {
                    tracing::error!(error = %e, "scheduler stopped");
                }
            })),
            None => AbortOnDrop(tokio::spawn(scheduler::run(client, config))),
        };
        running.register_component("scheduler", task.probe("the scheduler stopped"));
        Some(task)
    } else {
        None
    };
    let _controllers = if !args.disable_controllers {
        // Bootstrap tokens come with kubeadm's two token controllers.
        let token_controllers: &[&str] = if args.api.enable_bootstrap_token_auth {
            &["tokencleaner", "bootstrapsigner"]
        } else {
            &[]
        };
        let selected = args.controllers.selected_with(token_controllers)?;
        let kubeconfig = args.api.data_dir.join("admin.kubeconfig");
        let client = in_process_client(&running, &kubeconfig).await?;
        let mut options = args.controllers.options(true, Some(&kubeconfig))?;
        if options.local_path_dir.is_none() {
            options.local_path_dir = args.local_path.dir(&args.api.data_dir);
        }
        // The CSR signer issues with the cluster CA unless told otherwise (as kubeadm configures).
        let signing = &mut options.csr_signing;
        if signing.is_unset() {
            signing.cert_file = Some(args.api.data_dir.join("pki/ca.crt"));
            signing.key_file = Some(args.api.data_dir.join("pki/ca.key"));
        }
        if options.local_path_dir.is_some() {
            let client = client.clone();
            tokio::spawn(async move {
                if let Err(e) = crate::local_path::ensure_default_class(client).await {
                    eprintln!("rkube: {e}");
                }
            });
        }
        let task = match shared_informers {
            Some(factory) => AbortOnDrop(tokio::spawn(controllers::run_selected_with_factory(
                client, factory, selected, options,
            ))),
            None => AbortOnDrop(tokio::spawn(controllers::run_selected(
                client, selected, options,
            ))),
        };
        running.register_component(
            "controller-manager",
            task.probe("the controller manager stopped"),
        );
        Some(task)
    } else {
        None
    };
    let _simulator = if args.sim_nodes > 0 {
        let kubeconfig = args.api.data_dir.join("admin.kubeconfig");
        let client = in_process_client(&running, &kubeconfig).await?;
        let sim = sim::Simulator::start(client, args.sim.config(args.sim_nodes)).await?;
        eprintln!("rkube: {} simulated nodes running", args.sim_nodes);
        Some(sim)
    } else {
        None
    };
    // Cluster DNS (kube-system/kube-dns), named in the local kubelet's pods' resolv.conf. With
    // several nodes it listens on the fabric, where every node's pods reach it.
    let cluster_dns = crate::dns::start_in_server(
        &args.dns,
        &args.kubelet.cluster_domain,
        &args.api.service_cluster_ip_range,
        args.kubelet.node_ip,
        (!args.disable_kubelet && fabric.is_none())
            .then(|| args.kubelet.node_name.clone())
            .flatten()
            .as_deref(),
        fabric
            .as_ref()
            .map(|f| (f.fabric_ns_path(), f.gateway().into())),
        &args.api.data_dir.join("admin.kubeconfig"),
    )
    .await
    .unwrap_or_else(|e| {
        eprintln!("rkube: cluster DNS not started: {e}");
        None
    });
    let mut kubelet_flags = args.kubelet.clone();
    let proxied = !args.disable_kubelet && !args.proxy.disable_proxy;
    if let Some(ns) = cluster_dns.as_ref().and_then(|d| d.pod_nameserver(proxied)) {
        if kubelet_flags.cluster_dns.is_empty() {
            kubelet_flags.cluster_dns = vec![ns.to_string()];
        }
    }
    if let Some(fabric) = &fabric {
        return run_nodes(&args, fabric, &kubelet_flags, proxied, running, reconciler).await;
    }
    let _local_node = if !args.disable_kubelet {
        let kubeconfig = args.api.data_dir.join("admin.kubeconfig");
        crate::kubelet::start_local_node(
            &kubelet_flags,
            &args.api.data_dir,
            &kubeconfig,
            args.kubelet_port,
            args.kubelet_address,
        )
        .await?
    } else {
        None
    };
    // kube-proxy for the local node, where its pods are routed.
    let _proxy = match &_local_node {
        Some(node) if proxied => {
            let kubeconfig = args.api.data_dir.join("admin.kubeconfig");
            let client = client::kubeconfig::client_from_file(&kubeconfig).await?;
            Some(AbortOnDrop(crate::proxy::start_local(
                client,
                &args.proxy,
                node.node_name().to_string(),
                args.controllers.embedded_cluster_cidr(),
                args.kubelet.pod_network_namespace.as_deref(),
            )))
        }
        _ => None,
    };
    // The API server's graceful shutdown first; the components go when this returns.
    running
        .run_until_signalled_with(async move {
            if let Some(r) = reconciler {
                r.leave().await;
            }
        })
        .await;
    Ok(())
}

/// A client for a component running in this process: in-process connections to `running`
/// ([`apiserver::serving::InProcess`], no TCP or TLS on loopback) as the user `kubeconfig`'s client
/// certificate names; over the network when it has none (a token kubeconfig).
async fn in_process_client(
    running: &apiserver::Running,
    kubeconfig: &Path,
) -> Result<kube::Client, String> {
    let config = client::kubeconfig::config_from_file(kubeconfig).await?;
    let in_file = |e: String| format!("kubeconfig {}: {e}", kubeconfig.display());
    let auth = &config.auth_info;
    let pem = match (&auth.client_certificate_data, &auth.client_certificate) {
        (Some(data), _) => base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map_err(|e| in_file(format!("client-certificate-data: {e}")))?,
        (None, Some(path)) => std::fs::read(path).map_err(|e| in_file(format!("{path}: {e}")))?,
        (None, None) => {
            return client::transport::client_from_config(&config)
                .map_err(|e| in_file(e.to_string()))
        }
    };
    let user = apiserver::authn::user_from_certificate_pem(&pem)
        .ok_or_else(|| in_file("the client certificate does not parse".into()))?;
    let in_process = running.in_process();
    let dial: client::transport::Dial = std::sync::Arc::new(move || in_process.dial(&user));
    client::transport::client_in_process(&config, dial).map_err(|e| in_file(e.to_string()))
}

/// The nodes of --nodes, each with its kube-proxy, and the routes between them; then runs until the
/// server stops.
async fn run_nodes(
    args: &ServeArgs,
    fabric: &crate::nodes::Fabric,
    kubelet_flags: &crate::kubelet::KubeletFlags,
    proxied: bool,
    running: apiserver::Running,
    reconciler: Option<apiserver::endpoint_reconciler::Handle>,
) -> Result<(), String> {
    let kubeconfig = args.api.data_dir.join("admin.kubeconfig");
    let mut nodes = Vec::new();
    let mut proxies = Vec::new();
    for i in 0..fabric.nodes {
        let Some(node) = crate::kubelet::start_fabric_node(
            kubelet_flags,
            &args.api.data_dir,
            &kubeconfig,
            fabric,
            i,
        )
        .await?
        else {
            break;
        };
        if proxied {
            let client = client::kubeconfig::client_from_file(&kubeconfig).await?;
            proxies.push(AbortOnDrop(crate::proxy::start_local(
                client,
                &args.proxy,
                node.node_name().to_string(),
                args.controllers.embedded_cluster_cidr(),
                Some(&fabric.node_ns(i)),
            )));
        }
        nodes.push(node);
    }
    let names = nodes.iter().map(|n| n.node_name().to_string()).collect();
    let client = client::kubeconfig::client_from_file(&kubeconfig).await?;
    let _routes = AbortOnDrop(tokio::spawn(crate::nodes::run_routes(
        client,
        fabric.clone(),
        names,
    )));
    // The API server's graceful shutdown first; the components go when this returns.
    running
        .run_until_signalled_with(async move {
            if let Some(r) = reconciler {
                r.leave().await;
            }
        })
        .await;
    Ok(())
}

/// Stops a component's task when the server returns.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl AbortOnDrop {
    /// Healthy ("ok") while the component's task runs, as its `/healthz` would answer.
    fn probe(&self, stopped: &'static str) -> apiserver::rest::componentstatus::Probe {
        let handle = self.0.abort_handle();
        std::sync::Arc::new(move || {
            if handle.is_finished() {
                Err(stopped.to_string())
            } else {
                Ok("ok".to_string())
            }
        })
    }
}

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("7").unwrap(), Duration::from_secs(7));
        assert!(parse_duration("5 parsecs").is_err());
    }
}
