//! `rkube apiserver` and `rkube server`: the API server alone, or every component in one process (for
//! now the API server is the only component; the others join as their issues land).

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum StorageKind {
    Sqlite,
    Etcd,
}

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Where the store, certificates and admin.kubeconfig live.
    #[arg(long, default_value = "./rkube-data")]
    data_dir: PathBuf,
    /// Address to serve HTTPS on.
    #[arg(long, default_value = "127.0.0.1")]
    bind_address: IpAddr,
    /// Port to serve HTTPS on (0 picks a free one; the kubeconfig names it).
    #[arg(long, default_value_t = 6443)]
    secure_port: u16,
    /// Storage backend.
    #[arg(long, value_enum, default_value = "sqlite")]
    storage: StorageKind,
    /// etcd client URLs, comma-separated (with --storage etcd).
    #[arg(long, value_delimiter = ',')]
    etcd_servers: Vec<String>,
    /// Key prefix in etcd.
    #[arg(long, default_value = "/registry")]
    etcd_prefix: String,
    /// Static bearer tokens: CSV lines `token,user,uid[,"group1,group2"]`.
    #[arg(long)]
    token_auth_file: Option<PathBuf>,
    /// Authorizers, comma-separated: RBAC, Node,RBAC (the default) or AlwaysAllow.
    #[arg(long, default_value = "Node,RBAC")]
    authorization_mode: String,
    /// Requests without credentials are user system:anonymous (group system:unauthenticated), left to
    /// the authorizer; with false (the default here, as k3s and hardened clusters run) they get 401.
    /// /healthz, /livez, /readyz and /version answer everyone either way.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    anonymous_auth: bool,
    /// Bootstrap token Secrets (`kube-system/bootstrap-token-<id>`) authenticate as
    /// `system:bootstrap:<id>`, for joining kubelets.
    #[arg(long)]
    enable_bootstrap_token_auth: bool,
    /// Most non-mutating requests in flight at once, past which clients get 429 (0: no limit;
    /// watches do not count, system:masters is never refused).
    #[arg(long, default_value_t = 400)]
    max_requests_inflight: usize,
    /// Most mutating requests in flight at once (0: no limit).
    #[arg(long, default_value_t = 200)]
    max_mutating_requests_inflight: usize,
    /// API Priority and Fairness: requests classified by FlowSchemas, queued fairly within their
    /// PriorityLevelConfigurations, which share the two in-flight limits' sum (then not applied
    /// on their own). `false`: the plain in-flight limits.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    enable_priority_and_fairness: bool,
    /// The longest a request may take, watches and streams aside (a Go duration, as upstream's
    /// `1m0s`); a client's `?timeout=` may ask for less. Past it the client gets 504.
    #[arg(long, default_value = "1m0s", value_parser = parse_go_duration)]
    request_timeout: Duration,
    /// Most watches one user may hold open (0: no limit; system:masters is not counted). No
    /// upstream counterpart: it bounds what one client can make the server keep.
    #[arg(long, default_value_t = apiserver::watchlimit::DEFAULT_MAX_WATCHES_PER_USER)]
    max_watches_per_user: usize,
    /// Admission plugins to run besides the default ones, comma-separated (upstream's names).
    #[arg(long, value_delimiter = ',')]
    enable_admission_plugins: Vec<String>,
    /// Default admission plugins not to run, comma-separated.
    #[arg(long, value_delimiter = ',')]
    disable_admission_plugins: Vec<String>,
    /// EncryptionConfiguration file (apiserver.config.k8s.io/v1) saying which resources are
    /// encrypted in storage and with which providers (identity, aescbc, aesgcm, secretbox).
    #[arg(long)]
    encryption_provider_config: Option<PathBuf>,
    /// Read --encryption-provider-config again every minute and apply a valid change without a
    /// restart (an invalid one is logged and the running providers kept).
    #[arg(long)]
    encryption_provider_config_automatic_reload: bool,
    /// How often the automatic reload reads the file (upstream: fixed at one minute; for tests).
    #[arg(long, default_value = "1m", value_parser = parse_duration, hide = true)]
    encryption_provider_config_automatic_reload_interval: Duration,
    /// Audit policy (audit.k8s.io/v1 Policy, YAML or JSON); with --audit-log-path, the requests it
    /// selects are audited.
    #[arg(long)]
    audit_policy_file: Option<PathBuf>,
    /// File audit events are written to, one JSON object per line ("-": stdout).
    #[arg(long)]
    audit_log_path: Option<PathBuf>,
    /// Size in megabytes past which the audit log is rotated (0: 100, as upstream).
    #[arg(long, default_value_t = 0)]
    audit_log_maxsize: u64,
    /// Rotated audit log files kept (0: all).
    #[arg(long, default_value_t = 0)]
    audit_log_maxbackup: usize,
    /// Kubeconfig naming the server audit events are POSTed to (as `audit.k8s.io/v1` EventLists).
    #[arg(long)]
    audit_webhook_config_file: Option<PathBuf>,
    /// `batch` (buffered, sent off the request path) or `blocking` (each request waits for its
    /// event's POST).
    #[arg(long, default_value = "batch")]
    audit_webhook_mode: apiserver::audit::WebhookMode,
    /// Events the webhook's batch buffer holds; past it events are dropped and counted.
    #[arg(long, default_value_t = 10_000)]
    audit_webhook_batch_buffer_size: usize,
    /// Most events in one POST.
    #[arg(long, default_value_t = 400)]
    audit_webhook_batch_max_size: usize,
    /// Longest an event waits for its batch to fill (a Go duration).
    #[arg(long, default_value = "30s", value_parser = parse_go_duration)]
    audit_webhook_batch_max_wait: Duration,
    /// Whether batches are rate limited.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    audit_webhook_batch_throttle_enable: bool,
    /// Batches a second when throttled.
    #[arg(long, default_value_t = 10.0)]
    audit_webhook_batch_throttle_qps: f64,
    /// Batches sent at once before the throttle applies.
    #[arg(long, default_value_t = 15)]
    audit_webhook_batch_throttle_burst: usize,
    /// First wait before a failed POST is retried (then x1.5, five tries in all).
    #[arg(long, default_value = "10s", value_parser = parse_go_duration)]
    audit_webhook_initial_backoff: Duration,
    /// Issuer (`iss`) of service account tokens.
    #[arg(long, default_value = apiserver::serviceaccount::DEFAULT_ISSUER)]
    service_account_issuer: String,
    /// Audiences of the API, comma-separated (default: the issuer); tokens must carry one of them.
    #[arg(long, value_delimiter = ',')]
    api_audiences: Vec<String>,
    /// PKCS#8 PEM EC P-256 key that signs service account tokens (default: one generated in
    /// <data-dir>/pki/sa.key).
    #[arg(long)]
    service_account_signing_key_file: Option<PathBuf>,
    /// Longest lifetime of a requested service account token (0: no cap).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    service_account_max_token_expiration: Duration,
    /// CIDR that Service ClusterIPs come from.
    #[arg(long, default_value = "10.96.0.0/12")]
    service_cluster_ip_range: String,
    /// How often history older than one interval is compacted.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    compaction_interval: Duration,
    /// How often watches that allow them get a BOOKMARK.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    bookmark_interval: Duration,
    /// Client certificate (PEM) presented to kubelets; the generated
    /// `pki/apiserver-kubelet-client.crt` by default.
    #[arg(long)]
    kubelet_client_certificate: Option<PathBuf>,
    /// Key of --kubelet-client-certificate.
    #[arg(long)]
    kubelet_client_key: Option<PathBuf>,
    /// CA bundle (PEM) that kubelet serving certificates must chain to; without it they are not
    /// verified, as upstream.
    #[arg(long)]
    kubelet_certificate_authority: Option<PathBuf>,
    /// Node address types to reach kubelets at, most preferred first.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "InternalIP,Hostname,InternalDNS,ExternalDNS,ExternalIP"
    )]
    kubelet_preferred_address_types: Vec<String>,
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
    #[command(flatten)]
    serving: crate::serving_flags::ServingFlags,
}

/// A positive Go duration ("1m0s", "90s", "1h30m").
fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let nanos = apimachinery::go_duration::parse(s)?;
    match u64::try_from(nanos) {
        Ok(n) if n > 0 => Ok(Duration::from_nanos(n)),
        _ => Err(format!("{s:?}: must be positive")),
    }
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
    /// Auditing needs a policy and a backend (a log, a webhook or both), as upstream (which
    /// records nothing with one alone).
    fn audit_config(&self) -> Option<apiserver::audit::Config> {
        let webhook =
            self.audit_webhook_config_file
                .as_ref()
                .map(|file| apiserver::audit::WebhookConfig {
                    config_file: file.clone(),
                    mode: self.audit_webhook_mode,
                    batch: apiserver::audit::buffered::BatchConfig {
                        buffer_size: self.audit_webhook_batch_buffer_size,
                        max_batch_size: self.audit_webhook_batch_max_size,
                        max_batch_wait: self.audit_webhook_batch_max_wait,
                        throttle: self.audit_webhook_batch_throttle_enable.then_some((
                            self.audit_webhook_batch_throttle_qps,
                            self.audit_webhook_batch_throttle_burst,
                        )),
                    },
                    initial_backoff: self.audit_webhook_initial_backoff,
                });
        let has_backend = self.audit_log_path.is_some() || webhook.is_some();
        match (&self.audit_policy_file, has_backend) {
            (Some(policy), true) => Some(apiserver::audit::Config {
                policy_file: policy.clone(),
                log_path: self.audit_log_path.clone(),
                log_max_size_mb: self.audit_log_maxsize,
                log_max_backups: self.audit_log_maxbackup,
                webhook,
            }),
            (None, false) => None,
            _ => {
                eprintln!(
                    "rkube: auditing needs --audit-policy-file and --audit-log-path or --audit-webhook-config-file; no audit events will be recorded"
                );
                None
            }
        }
    }

    fn config(&self) -> Result<apiserver::Config, String> {
        let mut config = apiserver::Config::new(&self.data_dir);
        config.bind_address = self.bind_address;
        config.secure_port = self.secure_port;
        config.storage = match self.storage {
            StorageKind::Sqlite => apiserver::StorageConfig::Sqlite,
            StorageKind::Etcd => {
                if self.etcd_servers.is_empty() {
                    return Err("--storage etcd needs --etcd-servers".into());
                }
                apiserver::StorageConfig::Etcd {
                    servers: self.etcd_servers.clone(),
                    prefix: self.etcd_prefix.clone(),
                }
            }
        };
        config.token_auth_file = self.token_auth_file.clone();
        config.authorization_mode = apiserver::authz::Mode::parse(&self.authorization_mode)?;
        config.anonymous_auth = self.anonymous_auth;
        config.enable_bootstrap_token_auth = self.enable_bootstrap_token_auth;
        config.max_requests_inflight = self.max_requests_inflight;
        config.max_mutating_requests_inflight = self.max_mutating_requests_inflight;
        config.enable_priority_and_fairness = self.enable_priority_and_fairness;
        config.request_timeout = self.request_timeout;
        config.max_watches_per_user = self.max_watches_per_user;
        self.serving.apply(&mut config);
        config.enable_admission_plugins = self.enable_admission_plugins.clone();
        config.disable_admission_plugins = self.disable_admission_plugins.clone();
        config.encryption_provider_config = self.encryption_provider_config.clone();
        config.encryption_provider_config_automatic_reload =
            self.encryption_provider_config_automatic_reload;
        config.encryption_reload_interval =
            self.encryption_provider_config_automatic_reload_interval;
        config.audit = self.audit_config();
        config.service_account_issuer = self.service_account_issuer.clone();
        config.api_audiences = self.api_audiences.clone();
        config.service_account_key_file = self.service_account_signing_key_file.clone();
        config.service_account_max_token_expiration = self.service_account_max_token_expiration;
        config.service_cluster_ip_range = self.service_cluster_ip_range.clone();
        config.compaction_interval = self.compaction_interval;
        config.bookmark_interval = self.bookmark_interval;
        config.kubelet = apiserver::kubelet_client::KubeletClientOptions {
            client_certificate: self.kubelet_client_certificate.clone(),
            client_key: self.kubelet_client_key.clone(),
            certificate_authority: self.kubelet_certificate_authority.clone(),
            preferred_address_types: self.kubelet_preferred_address_types.clone(),
            netns: None,
        };
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
        }
        Ok(config)
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
    // The components' work queue metrics are served on the API server's /metrics.
    let queues: apiserver::metrics::ExtraMetrics =
        std::sync::Arc::new(|| client::workqueue::MetricsRegistry::global().render());
    let running = apiserver::start_with_metrics(args.config()?, Some(queues)).await?;
    eprintln!(
        "rkube: serving on https://{} ; kubeconfig: {}",
        running.addr,
        args.data_dir.join("admin.kubeconfig").display()
    );
    if args.enable_bootstrap_token_auth {
        // As kubeadm's bootstrap-token phase: cluster-info for joining machines to read.
        let kubeconfig = args.data_dir.join("admin.kubeconfig");
        let client = client::kubeconfig::client_from_file(&kubeconfig).await?;
        crate::cluster_info::ensure(client, &kubeconfig).await?;
    }
    let _scheduler = if !args.disable_scheduler {
        let config =
            crate::scheduler_config(args.scheduler_config.as_deref(), "default-scheduler", 0)?;
        let kubeconfig = args.data_dir.join("admin.kubeconfig");
        let client = client::kubeconfig::client_from_file(&kubeconfig).await?;
        let task = AbortOnDrop(tokio::spawn(scheduler::run(client, config)));
        running.register_component("scheduler", task.probe("the scheduler stopped"));
        Some(task)
    } else {
        None
    };
    let _controllers = if !args.disable_controllers {
        // Bootstrap tokens come with kubeadm's two token controllers.
        let token_controllers: &[&str] = if args.enable_bootstrap_token_auth {
            &["tokencleaner", "bootstrapsigner"]
        } else {
            &[]
        };
        let selected = args.controllers.selected_with(token_controllers)?;
        let kubeconfig = args.data_dir.join("admin.kubeconfig");
        let client = client::kubeconfig::client_from_file(&kubeconfig).await?;
        let mut options = args.controllers.options(true, Some(&kubeconfig))?;
        if options.local_path_dir.is_none() {
            options.local_path_dir = args.local_path.dir(&args.data_dir);
        }
        // The CSR signer issues with the cluster CA unless told otherwise (as kubeadm configures).
        let signing = &mut options.csr_signing;
        if signing.is_unset() {
            signing.cert_file = Some(args.data_dir.join("pki/ca.crt"));
            signing.key_file = Some(args.data_dir.join("pki/ca.key"));
        }
        if options.local_path_dir.is_some() {
            let client = client.clone();
            tokio::spawn(async move {
                if let Err(e) = crate::local_path::ensure_default_class(client).await {
                    eprintln!("rkube: {e}");
                }
            });
        }
        let task = AbortOnDrop(tokio::spawn(controllers::run_selected(
            client, selected, options,
        )));
        running.register_component(
            "controller-manager",
            task.probe("the controller manager stopped"),
        );
        Some(task)
    } else {
        None
    };
    let _simulator = if args.sim_nodes > 0 {
        let kubeconfig = args.data_dir.join("admin.kubeconfig");
        let client = client::kubeconfig::client_from_file(&kubeconfig).await?;
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
        &args.service_cluster_ip_range,
        args.kubelet.node_ip,
        (!args.disable_kubelet && fabric.is_none())
            .then(|| args.kubelet.node_name.clone())
            .flatten()
            .as_deref(),
        fabric
            .as_ref()
            .map(|f| (f.fabric_ns_path(), f.gateway().into())),
        &args.data_dir.join("admin.kubeconfig"),
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
        return run_nodes(&args, fabric, &kubelet_flags, proxied, running).await;
    }
    let _local_node = if !args.disable_kubelet {
        let kubeconfig = args.data_dir.join("admin.kubeconfig");
        crate::kubelet::start_local_node(
            &kubelet_flags,
            &args.data_dir,
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
            let kubeconfig = args.data_dir.join("admin.kubeconfig");
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
    running.run_until_signalled().await;
    Ok(())
}

/// The nodes of --nodes, each with its kube-proxy, and the routes between them; then runs until the
/// server stops.
async fn run_nodes(
    args: &ServeArgs,
    fabric: &crate::nodes::Fabric,
    kubelet_flags: &crate::kubelet::KubeletFlags,
    proxied: bool,
    running: apiserver::Running,
) -> Result<(), String> {
    let kubeconfig = args.data_dir.join("admin.kubeconfig");
    let mut nodes = Vec::new();
    let mut proxies = Vec::new();
    for i in 0..fabric.nodes {
        let Some(node) = crate::kubelet::start_fabric_node(
            kubelet_flags,
            &args.data_dir,
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
    running.run_until_signalled().await;
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
