//! `rkube kubelet` and the local node of `rkube server` (k3s's agent in the server process): flags,
//! the container runtime (a given CRI endpoint, or containerd started as a child with a config under
//! the data dir), image archives imported at start, then [`kubelet::run`].

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

/// Flags shared by `rkube kubelet` and `rkube server` (upstream kubelet flag names).
#[derive(Args, Debug, Clone)]
pub struct KubeletFlags {
    /// The node's name (default: the host name).
    #[arg(long)]
    pub node_name: Option<String>,
    /// The node's InternalIP (default: the first global IPv4 address of the machine).
    #[arg(long)]
    pub node_ip: Option<std::net::IpAddr>,
    /// Labels to register the node with: key=value,...
    #[arg(long, default_value = "")]
    pub node_labels: String,
    /// CRI endpoint (unix:///path). In `rkube server`, when absent, containerd is started as a child.
    #[arg(long)]
    pub container_runtime_endpoint: Option<String>,
    /// Static pod manifests: a file or a directory.
    #[arg(long)]
    pub pod_manifest_path: Option<PathBuf>,
    /// A URL serving static pod manifests (a Pod or a PodList).
    #[arg(long)]
    pub manifest_url: Option<String>,
    /// HTTP headers for --manifest-url, `Name:Value`, repeatable.
    #[arg(long)]
    pub manifest_url_header: Vec<String>,
    /// The kubelet's state and pod volumes (default /var/lib/kubelet; `<data-dir>/kubelet` in `rkube server`).
    #[arg(long)]
    pub root_dir: Option<PathBuf>,
    /// Container logs (default /var/log/pods; `<data-dir>/kubelet/pod-logs` in `rkube server`).
    #[arg(long)]
    pub pod_logs_dir: Option<PathBuf>,
    /// Parent cgroup of the pods' cgroups (`<root>/kubepods/...`).
    #[arg(long, default_value = "/")]
    pub cgroup_root: String,
    /// Maximum pods on the node.
    #[arg(long, default_value_t = 110)]
    pub max_pods: u32,
    /// Run the container runtime (and so the pod network) in network namespace /run/netns/NAME,
    /// created if missing, instead of the host's (for tests and sandboxes). With an external runtime:
    /// the namespace it runs in.
    #[arg(long)]
    pub pod_network_namespace: Option<String>,
    /// Cluster DNS server IPs, comma-separated (pods use the host's resolv.conf when none).
    #[arg(long, value_delimiter = ',')]
    pub cluster_dns: Vec<String>,
    #[arg(long, default_value = "cluster.local")]
    pub cluster_domain: String,
    /// How often static pod manifests are re-read in full.
    #[arg(long, default_value = "20s", value_parser = crate::serve::parse_duration)]
    pub file_check_frequency: Duration,
    /// How often every pod is synced.
    #[arg(long, default_value = "1m", value_parser = crate::serve::parse_duration)]
    pub sync_frequency: Duration,
    /// How often pod volumes' disk use is measured for `/stats/summary` and `/metrics`; 0 turns
    /// it off.
    #[arg(long, default_value = "1m", value_parser = crate::serve::parse_duration)]
    pub volume_stats_agg_period: Duration,
    /// Sysctls (or `prefix*` patterns) pods may set beyond the safe set, comma-separated; each must
    /// be namespaced (kernel.shm*, kernel.msg*, kernel.sem, fs.mqueue.*, net.*).
    #[arg(long, value_delimiter = ',')]
    pub allowed_unsafe_sysctls: Vec<String>,
    /// Containers without a seccomp profile run with the runtime's default profile, not Unconfined.
    #[arg(long)]
    pub seccomp_default: bool,
    /// The CDI spec directories, comma-separated, later ones overriding earlier ones (default
    /// /etc/cdi,/var/run/cdi): containerd's `cdi_spec_dirs`, written into the config of the
    /// containerd rkube starts, and where the kubelet reads the specs' environment (containerd
    /// 1.6 does not apply CDI devices). Not an upstream kubelet flag: upstream leaves the
    /// directories to the runtime's config; with an external runtime, give its directories here.
    #[arg(long, value_delimiter = ',')]
    pub containerd_cdi_spec_dirs: Vec<PathBuf>,
}

#[derive(Args, Debug)]
pub struct KubeletArgs {
    /// Kubeconfig of the cluster (default: $KUBECONFIG, then ~/.kube/config). Without an API server
    /// (`--standalone`), only static pods run.
    #[arg(long)]
    kubeconfig: Option<PathBuf>,
    #[command(flatten)]
    servers: crate::agent_lb::ServerFlags,
    /// Run without an API server: only static pods (file and URL sources).
    #[arg(long)]
    standalone: bool,
    /// Port of the kubelet's HTTPS server, reported in the Node's daemonEndpoints.
    #[arg(long, default_value_t = 10250)]
    port: u16,
    /// Address the kubelet's HTTPS server listens on.
    #[arg(long, default_value = "0.0.0.0")]
    address: std::net::IpAddr,
    /// Serving certificate (PEM) of the HTTPS server; default: a self-signed one in <root-dir>/pki.
    #[arg(long)]
    tls_cert_file: Option<PathBuf>,
    /// Key of --tls-cert-file.
    #[arg(long)]
    tls_private_key_file: Option<PathBuf>,
    /// CA bundle (PEM) whose client certificates authenticate to the HTTPS server (the API server's
    /// among them); the user is the certificate's CN, its groups the Os.
    #[arg(long)]
    client_ca_file: Option<PathBuf>,
    /// A kubeconfig whose credential (a bootstrap token) may ask for a client certificate: used when
    /// --kubeconfig is missing or its certificate has expired; --kubeconfig is then written.
    #[arg(long)]
    bootstrap_kubeconfig: Option<PathBuf>,
    /// Where the client certificate is kept (default <root-dir>/pki).
    #[arg(long)]
    cert_dir: Option<PathBuf>,
    /// Ask for a new client certificate before the current one expires (at 70-90% of its lifetime).
    #[arg(long)]
    rotate_certificates: bool,
    /// Requests to the HTTPS server without credentials are `system:anonymous`; false: 401.
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    anonymous_auth: bool,
    /// Bearer tokens sent to the HTTPS server are checked with the API server (TokenReview).
    #[arg(long, default_value_t = false, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    authentication_token_webhook: bool,
    /// How long TokenReview answers are kept.
    #[arg(long, default_value = "2m", value_parser = crate::serve::parse_duration)]
    authentication_token_webhook_cache_ttl: Duration,
    /// Authorization of the HTTPS server's requests: AlwaysAllow, or Webhook (SubjectAccessReview).
    #[arg(long, default_value = "AlwaysAllow")]
    authorization_mode: kubelet::server::auth::AuthorizationMode,
    /// How long an allowed SubjectAccessReview answer is kept.
    #[arg(long, default_value = "5m", value_parser = crate::serve::parse_duration)]
    authorization_webhook_cache_authorized_ttl: Duration,
    /// How long a denied SubjectAccessReview answer is kept.
    #[arg(long, default_value = "30s", value_parser = crate::serve::parse_duration)]
    authorization_webhook_cache_unauthorized_ttl: Duration,
    #[command(flatten)]
    flags: KubeletFlags,
}

impl KubeletFlags {
    pub fn config(
        &self,
        endpoint: &str,
        default_root: PathBuf,
        default_logs: PathBuf,
        port: u16,
    ) -> Result<kubelet::KubeletConfig, String> {
        let node_name = self
            .node_name
            .clone()
            .unwrap_or_else(kubelet::machine::hostname);
        let node_ip = match self.node_ip {
            Some(ip) => ip,
            None => kubelet::machine::default_node_ip()
                .ok_or("cannot find the node's IP address: give --node-ip")?,
        };
        let mut c = kubelet::KubeletConfig::new(&node_name, node_ip, endpoint);
        c.node_labels = kubelet::config::parse_labels(&self.node_labels)?;
        c.root_dir = self.root_dir.clone().unwrap_or(default_root);
        c.pod_logs_dir = self.pod_logs_dir.clone().unwrap_or(default_logs);
        c.pod_manifest_path = self.pod_manifest_path.clone();
        c.manifest_url = self.manifest_url.clone();
        c.manifest_url_headers = self
            .manifest_url_header
            .iter()
            .map(|h| {
                h.split_once(':')
                    .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
                    .ok_or_else(|| format!("--manifest-url-header {h:?}: expected Name:Value"))
            })
            .collect::<Result<_, _>>()?;
        c.cgroup_root = self.cgroup_root.clone();
        c.max_pods = self.max_pods;
        c.cluster_dns = self.cluster_dns.clone();
        c.cluster_domain = self.cluster_domain.clone();
        c.file_check_frequency = self.file_check_frequency;
        c.sync_frequency = self.sync_frequency;
        c.volume_stats_agg_period = self.volume_stats_agg_period;
        kubelet::kuberuntime::admit::SysctlAllowlist::new(&self.allowed_unsafe_sysctls)
            .map_err(|e| format!("--allowed-unsafe-sysctls: {e}"))?;
        c.allowed_unsafe_sysctls = self.allowed_unsafe_sysctls.clone();
        c.seccomp_default = self.seccomp_default;
        if !self.containerd_cdi_spec_dirs.is_empty() {
            c.cdi_spec_dirs = self.containerd_cdi_spec_dirs.clone();
        }
        c.port = port;
        Ok(c)
    }
}

/// `rkube kubelet`: a kubelet against a cluster. Its runtime is `--container-runtime-endpoint`, else a
/// system containerd at /run/containerd/containerd.sock, else (as k3s's agent) containerd started as a
/// child under `<root-dir>/containerd`.
pub async fn run(args: KubeletArgs) -> Result<(), String> {
    let root = args
        .flags
        .root_dir
        .clone()
        .unwrap_or_else(|| PathBuf::from("/var/lib/kubelet"));
    let system = "/run/containerd/containerd.sock";
    let mut flags = args.flags.clone();
    if flags.container_runtime_endpoint.is_none() && std::path::Path::new(system).exists() {
        flags.container_runtime_endpoint = Some(format!("unix://{system}"));
    }
    let client = if args.standalone {
        None
    } else {
        Some(client_with_certificates(&args, &root).await?)
    };
    let node = start_node(
        &flags,
        &root,
        root.join("containerd"),
        root.join("images"),
        flags
            .pod_logs_dir
            .clone()
            .unwrap_or_else(|| PathBuf::from("/var/log/pods")),
        client,
        args.port,
        |config| {
            config.server.address = args.address;
            config.server.tls_cert_file = args.tls_cert_file.clone();
            config.server.tls_private_key_file = args.tls_private_key_file.clone();
            config.server.client_ca_file = args.client_ca_file.clone();
            config.server.auth = kubelet::server::auth::AuthConfig {
                anonymous: args.anonymous_auth,
                token_webhook: args.authentication_token_webhook,
                token_webhook_cache_ttl: args.authentication_token_webhook_cache_ttl,
                mode: args.authorization_mode,
                cache_authorized_ttl: args.authorization_webhook_cache_authorized_ttl,
                cache_unauthorized_ttl: args.authorization_webhook_cache_unauthorized_ttl,
            };
            Ok(())
        },
    )
    .await?;
    match node {
        Some(node) => {
            let mut node = node;
            let _ = (&mut node.task).await;
            Ok(())
        }
        None => Err("no container runtime".into()),
    }
}

/// The kubelet's client: TLS bootstrapping first when asked, and a client that follows certificate
/// rotation when asked.
async fn client_with_certificates(
    args: &KubeletArgs,
    root: &std::path::Path,
) -> Result<kube::Client, String> {
    use kubelet::certificate::{bootstrap, rotation, store::CertStore};
    let cert_dir = args.cert_dir.clone().unwrap_or_else(|| root.join("pki"));
    let node_name = args
        .flags
        .node_name
        .clone()
        .unwrap_or_else(kubelet::machine::hostname);
    if let Some(bootstrap_kubeconfig) = &args.bootstrap_kubeconfig {
        let kubeconfig = args
            .kubeconfig
            .as_deref()
            .ok_or("--bootstrap-kubeconfig needs --kubeconfig: the path to write")?;
        bootstrap::load_or_request(kubeconfig, bootstrap_kubeconfig, &cert_dir, &node_name).await?;
    }
    let client = crate::agent_lb::cluster_client(args.kubeconfig.as_deref(), &args.servers).await?;
    if !args.rotate_certificates {
        return Ok(client);
    }
    let (Some(kubeconfig), store) = (args.kubeconfig.clone(), CertStore::new(&cert_dir)) else {
        return Err("--rotate-certificates needs --kubeconfig".into());
    };
    if store.current().is_none() {
        return Err(format!(
            "--rotate-certificates: no client certificate in {} (use --bootstrap-kubeconfig)",
            cert_dir.display()
        ));
    }
    let rotating = rotation::RotatingClient::new(client);
    let rotation = rotation::Rotation {
        kubeconfig,
        store,
        node_name,
        client: rotating.clone(),
    };
    tokio::spawn(rotation.run());
    Ok(rotating.client())
}

/// The local node of `rkube server`: the runtime it uses (and the containerd child it started).
pub struct LocalNode {
    _containerd: Option<kubelet::containerd::Containerd>,
    task: tokio::task::JoinHandle<()>,
    node_name: String,
}

impl LocalNode {
    pub fn node_name(&self) -> &str {
        &self.node_name
    }
}

impl Drop for LocalNode {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts the local node of `rkube server`, or says why there is none (Ok(None)).
pub async fn start_local_node(
    flags: &KubeletFlags,
    data_dir: &std::path::Path,
    kubeconfig: &std::path::Path,
    port: u16,
    address: std::net::IpAddr,
) -> Result<Option<LocalNode>, String> {
    let data_dir = std::path::absolute(data_dir).map_err(|e| e.to_string())?;
    let client = client::kubeconfig::client_from_file(kubeconfig).await?;
    let root = flags
        .root_dir
        .clone()
        .unwrap_or_else(|| data_dir.join("kubelet"));
    let logs = flags
        .pod_logs_dir
        .clone()
        .unwrap_or_else(|| data_dir.join("kubelet").join("pod-logs"));
    start_node(
        flags,
        &root,
        data_dir.join("containerd"),
        data_dir.join("images"),
        logs,
        Some(client),
        port,
        |config| {
            // The HTTPS server trusts the cluster CA for clients (the API server's kubelet client
            // certificate) and serves a certificate from it.
            config.server.address = address;
            config.server.client_ca_file = Some(data_dir.join("pki").join("ca.crt"));
            // As kubeadm and k3s run kubelets: tokens and authorization checked with the API server.
            config.server.auth = kubelet::server::auth::AuthConfig::webhook();
            let mut names = vec![config.node_name.clone(), config.node_ip.to_string()];
            if !address.is_unspecified() && !names.contains(&address.to_string()) {
                names.push(address.to_string());
            }
            config.server.serving_cert = Some(
                apiserver::certs::issue_serving(&data_dir, &config.node_name, &names)
                    .map_err(|e| e.to_string())?,
            );
            Ok(())
        },
    )
    .await
}

/// Node `i` of `rkube server --nodes N`: its own containerd and state under
/// `<data-dir>/nodes/<name>` (node 0 under `<data-dir>`, as a single node), in its own network
/// namespace at its address on the fabric, where its HTTPS server listens too. Static pods run on
/// node 0 only.
pub async fn start_fabric_node(
    flags: &KubeletFlags,
    data_dir: &std::path::Path,
    kubeconfig: &std::path::Path,
    fabric: &crate::nodes::Fabric,
    i: usize,
) -> Result<Option<LocalNode>, String> {
    let data_dir = std::path::absolute(data_dir).map_err(|e| e.to_string())?;
    let client = client::kubeconfig::client_from_file(kubeconfig).await?;
    let base = flags
        .node_name
        .clone()
        .unwrap_or_else(kubelet::machine::hostname);
    let name = crate::nodes::Fabric::node_name(&base, i);
    let home = if i == 0 {
        data_dir.clone()
    } else {
        data_dir.join("nodes").join(&name)
    };
    let mut flags = flags.clone();
    flags.node_name = Some(name.clone());
    flags.node_ip = Some(fabric.node_ip(i).into());
    flags.pod_network_namespace = Some(fabric.node_ns(i));
    if i > 0 {
        flags.root_dir = None;
        flags.pod_logs_dir = None;
        flags.pod_manifest_path = None;
        flags.manifest_url = None;
    }
    // Each kubelet owns the pod cgroups under its root: the nodes' roots must not nest.
    flags.cgroup_root = format!("{}/{name}", flags.cgroup_root.trim_end_matches('/'));
    let root = flags
        .root_dir
        .clone()
        .unwrap_or_else(|| home.join("kubelet"));
    let logs = flags
        .pod_logs_dir
        .clone()
        .unwrap_or_else(|| home.join("kubelet").join("pod-logs"));
    let netns = PathBuf::from("/run/netns").join(fabric.node_ns(i));
    start_node(
        &flags,
        &root,
        home.join("containerd"),
        data_dir.join("images"),
        logs,
        Some(client),
        10250,
        |config| {
            config.server.address = config.node_ip;
            config.server.netns = Some(netns);
            config.server.client_ca_file = Some(data_dir.join("pki").join("ca.crt"));
            config.server.auth = kubelet::server::auth::AuthConfig::webhook();
            let names = vec![config.node_name.clone(), config.node_ip.to_string()];
            config.server.serving_cert = Some(
                apiserver::certs::issue_serving(&data_dir, &config.node_name, &names)
                    .map_err(|e| e.to_string())?,
            );
            Ok(())
        },
    )
    .await
}

/// A kubelet with its runtime: the given endpoint, or containerd started under `containerd_dir`
/// with the image archives of `images` imported; `serve` sets up its HTTPS server.
#[allow(clippy::too_many_arguments)]
async fn start_node(
    flags: &KubeletFlags,
    root_dir: &std::path::Path,
    containerd_dir: PathBuf,
    images: PathBuf,
    pod_logs_dir: PathBuf,
    client: Option<kube::Client>,
    port: u16,
    serve: impl FnOnce(&mut kubelet::KubeletConfig) -> Result<(), String>,
) -> Result<Option<LocalNode>, String> {
    let root_dir = std::path::absolute(root_dir).map_err(|e| e.to_string())?;
    let containerd_dir = std::path::absolute(containerd_dir).map_err(|e| e.to_string())?;
    let (endpoint, containerd) = match &flags.container_runtime_endpoint {
        Some(e) => (e.clone(), None),
        None => {
            if kubelet::containerd::find_binary("containerd").is_none() {
                eprintln!(
                    "rkube: no container runtime: containerd is not installed and --container-runtime-endpoint is not given; \
                     the local node is not started (pods need simulated nodes or another kubelet)"
                );
                return Ok(None);
            }
            let mut options = kubelet::containerd::ContainerdOptions::new(&containerd_dir);
            if let Some(name) = &flags.pod_network_namespace {
                options.netns = Some(kubelet::netns::ensure_named(name)?);
            }
            if !flags.containerd_cdi_spec_dirs.is_empty() {
                options.cdi_spec_dirs = flags.containerd_cdi_spec_dirs.clone();
            }
            std::fs::create_dir_all(&options.dir)
                .map_err(|e| format!("{}: {e}", options.dir.display()))?;
            let c =
                kubelet::containerd::Containerd::start(options, Duration::from_secs(60)).await?;
            let imported = c.import_images(&images).await?;
            if !imported.is_empty() {
                eprintln!(
                    "rkube: imported {} image archive(s) from {}",
                    imported.len(),
                    images.display()
                );
            }
            (c.endpoint(), Some(c))
        }
    };
    let runtime = kubelet::cri::Runtime::connect(&endpoint)
        .await
        .map_err(|e| format!("no container runtime: {e}"))?;
    let mut config = flags.config(&endpoint, root_dir.clone(), pod_logs_dir, port)?;
    serve(&mut config)?;
    if let Some(c) = &containerd {
        config.cni_conf_dir = Some(c.options.cni_conf_dir.clone());
        if let Some(ns) = &c.options.netns {
            config.pod_network = kubelet::netns::PodNetwork::named(ns);
            config.cni_ip_masq = false;
        }
    } else if let Some(name) = &flags.pod_network_namespace {
        // An external runtime in a named network namespace: the kubelet dials pods through it.
        config.pod_network =
            kubelet::netns::PodNetwork::named(&std::path::Path::new("/run/netns").join(name));
    }
    let node_name = config.node_name.clone();
    let task = tokio::spawn(async move {
        if let Err(e) = kubelet::run(config, client, runtime).await {
            eprintln!("rkube: kubelet: {e}");
        }
    });
    eprintln!("rkube: local node {node_name} running (container runtime {endpoint})");
    Ok(Some(LocalNode {
        _containerd: containerd,
        task,
        node_name,
    }))
}
