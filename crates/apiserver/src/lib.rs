//! The rkube API server (upstream `kube-apiserver` / `k8s.io/apiserver`): the Kubernetes REST API over
//! HTTPS on a revisioned store.
//!
//! Request path: TLS ([`server`]) -> authentication ([`authn`]) -> routing ([`request`]) -> discovery
//! ([`discovery`]) or the generic REST handlers ([`rest`]) -> storage, with lists and watches served by
//! the watch cache ([`watch_cache`]); authorization ([`authz`]) after authentication; admission
//! ([`admission`]: the chain of admission plugins) on writes.

pub mod admission;
pub mod aggregator;
pub mod allocator;
pub mod apiservices;
pub mod audit;
pub mod authn;
pub mod authz;
pub mod bootstrap;
pub mod certs;
pub mod conn_limits;
pub mod connect;
pub mod crd;
pub mod discovery;
pub mod encryption;
pub mod endpoint_reconciler;
pub mod filter;
pub mod flowcontrol;
pub mod healthz;
pub mod identity;
pub mod internal;
pub mod kubelet_client;
pub mod maxinflight;
pub mod metrics;
pub mod objects;
pub mod openapi;
pub mod registry;
pub mod request;
pub mod resource_metrics;
pub mod response;
pub mod rest;
pub mod retry_after;
pub mod selectable;
pub mod server;
pub mod service_resolver;
pub mod serviceaccount;
pub mod serving;
pub mod shutdown;
pub mod timeout;
pub mod watch_cache;
pub mod watchlimit;

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use apimachinery::resources::Registry;
use storage::Store;

pub use server::Running;

/// Which store to run on.
#[derive(Clone, Debug)]
pub enum StorageConfig {
    /// The embedded SQLite store at `<data-dir>/state.db`.
    Sqlite,
    /// etcd v3 at these endpoints, keys under `prefix`.
    Etcd {
        servers: Vec<String>,
        prefix: String,
    },
}

#[derive(Clone, Debug)]
pub struct Config {
    pub data_dir: PathBuf,
    pub bind_address: IpAddr,
    /// 0 picks a free port (tests); the kubeconfig names the port actually bound.
    pub secure_port: u16,
    pub storage: StorageConfig,
    pub token_auth_file: Option<PathBuf>,
    /// `--authorization-mode`.
    pub authorization_mode: authz::Mode,
    /// `--anonymous-auth`: requests without credentials are `system:anonymous` rather than 401.
    pub anonymous_auth: bool,
    /// `--enable-bootstrap-token-auth`: bootstrap token Secrets in kube-system authenticate.
    pub enable_bootstrap_token_auth: bool,
    /// `--service-account-issuer`.
    pub service_account_issuer: String,
    /// `--api-audiences` (default: the issuer).
    pub api_audiences: Vec<String>,
    /// `--service-account-key-file`: the PKCS#8 EC P-256 key tokens are signed with (default: one
    /// generated in `<data-dir>/pki/sa.key`).
    pub service_account_key_file: Option<PathBuf>,
    /// `--service-account-key-file`: PEM files of more keys whose tokens are accepted (see
    /// [`serviceaccount::jwt::load_verifying_keys`]).
    pub service_account_public_key_files: Vec<PathBuf>,
    /// `--service-account-max-token-expiration` (zero: no cap).
    pub service_account_max_token_expiration: Duration,
    pub service_cluster_ip_range: String,
    pub compaction_interval: Duration,
    pub bookmark_interval: Duration,
    /// How to reach kubelets (`--kubelet-*`).
    pub kubelet: kubelet_client::KubeletClientOptions,
    /// The network namespace pods live in when it is not this process's (`rkube server
    /// --pod-network-namespace`): pod and service proxies dial pod IPs from inside it.
    pub pod_network_namespace: Option<PathBuf>,
    /// `--enable-admission-plugins`: plugins to run besides the default ones.
    pub enable_admission_plugins: Vec<String>,
    /// `--disable-admission-plugins`.
    pub disable_admission_plugins: Vec<String>,
    /// `--max-requests-inflight` (0: no limit).
    pub max_requests_inflight: usize,
    /// `--max-mutating-requests-inflight` (0: no limit).
    pub max_mutating_requests_inflight: usize,
    /// `--enable-priority-and-fairness`: API Priority and Fairness ([`flowcontrol`]) instead of
    /// the plain in-flight limits, its levels sharing the two limits' sum.
    pub enable_priority_and_fairness: bool,
    /// `--audit-policy-file` and `--audit-log-*`: auditing is off without them.
    pub audit: Option<audit::Config>,
    /// `--encryption-provider-config`: an EncryptionConfiguration saying which resources are
    /// encrypted in storage, and how (see [`encryption`]).
    pub encryption_provider_config: Option<PathBuf>,
    /// `--encryption-provider-config-automatic-reload`: the file is read again every
    /// `encryption_reload_interval` and a valid change applied (see [`encryption::reload`]).
    pub encryption_provider_config_automatic_reload: bool,
    pub encryption_reload_interval: Duration,
    /// `--request-timeout`: the longest a request that is not long-running may take (see
    /// [`timeout`]).
    pub request_timeout: Duration,
    /// `--max-watches-per-user` (0: no limit; see [`watchlimit`]).
    pub max_watches_per_user: usize,
    /// Connection limits and timeouts, HTTP/2 streams (see [`serving`]).
    pub serving: serving::ServingOptions,
    /// `--shutdown-delay-duration` and `--shutdown-watch-termination-grace-period` (see
    /// [`shutdown`]).
    pub shutdown: shutdown::ShutdownOptions,
    /// `--service-node-port-range`: the ports NodePort Services get, both ends included.
    pub service_node_port_range: (u16, u16),
    /// `--advertise-address`: where the other API servers and the cluster reach this one (the
    /// `kubernetes` endpoints, the identity Lease); also named in the serving certificate.
    pub advertise_address: Option<IpAddr>,
    /// `--tls-cert-file` and `--tls-private-key-file`: the serving certificate and key (PEM) instead
    /// of one issued by the generated CA.
    pub tls_cert_file: Option<PathBuf>,
    pub tls_private_key_file: Option<PathBuf>,
    /// `--client-ca-file`: the CA bundle client certificates must chain to, instead of the generated
    /// CA.
    pub client_ca_file: Option<PathBuf>,
    /// The API server identity Lease ([`identity`]); `None`: off.
    pub identity_lease: Option<identity::IdentityConfig>,
    /// The lease endpoint reconciler ([`endpoint_reconciler`]); `None`: upstream's
    /// `--endpoint-reconciler-type=none`.
    pub endpoint_reconciler: Option<endpoint_reconciler::ReconcilerConfig>,
    /// Also serve on this address inside this network namespace, on the same port, and advertise
    /// it as the `kubernetes` endpoints (with the lease reconciler, default timings unless
    /// [`Config::endpoint_reconciler`] says otherwise): `rkube server --nodes` serves the nodes'
    /// pods at the control plane's address on their fabric, so in-cluster clients reach it.
    pub serve_in_namespace: Option<(PathBuf, IpAddr)>,
    /// How often kubelets' resource metrics are scraped for `metrics.k8s.io` (metrics-server's
    /// `--metric-resolution`, 15 s).
    pub metric_resolution: Duration,
}

impl Config {
    pub fn new(data_dir: impl Into<PathBuf>) -> Config {
        Config {
            data_dir: data_dir.into(),
            bind_address: IpAddr::from([127, 0, 0, 1]),
            secure_port: 6443,
            storage: StorageConfig::Sqlite,
            token_auth_file: None,
            authorization_mode: authz::Mode::Rbac { node: true },
            anonymous_auth: true,
            enable_bootstrap_token_auth: false,
            service_account_issuer: serviceaccount::DEFAULT_ISSUER.into(),
            api_audiences: Vec::new(),
            service_account_key_file: None,
            service_account_public_key_files: Vec::new(),
            service_account_max_token_expiration: Duration::ZERO,
            service_cluster_ip_range: "10.96.0.0/12".into(),
            compaction_interval: storage::compaction::DEFAULT_INTERVAL,
            bookmark_interval: Duration::from_secs(60),
            kubelet: Default::default(),
            pod_network_namespace: None,
            enable_admission_plugins: Vec::new(),
            disable_admission_plugins: Vec::new(),
            max_requests_inflight: 400,
            max_mutating_requests_inflight: 200,
            enable_priority_and_fairness: true,
            audit: None,
            encryption_provider_config: None,
            encryption_provider_config_automatic_reload: false,
            encryption_reload_interval: encryption::reload::DEFAULT_INTERVAL,
            request_timeout: timeout::DEFAULT_REQUEST_TIMEOUT,
            max_watches_per_user: watchlimit::DEFAULT_MAX_WATCHES_PER_USER,
            serving: Default::default(),
            shutdown: Default::default(),
            service_node_port_range: (30000, 32767),
            advertise_address: None,
            tls_cert_file: None,
            tls_private_key_file: None,
            client_ca_file: None,
            identity_lease: None,
            endpoint_reconciler: None,
            serve_in_namespace: None,
            metric_resolution: resource_metrics::DEFAULT_RESOLUTION,
        }
    }
}

/// The server's shared state.
pub struct ApiServer {
    pub registry: Registry,
    pub store: Arc<dyn Store>,
    pub caches: Arc<watch_cache::CacheSet>,
    pub tokens: authn::TokenAuthenticator,
    pub anonymous_auth: bool,
    /// See [`Config::enable_bootstrap_token_auth`].
    pub enable_bootstrap_token_auth: bool,
    pub authorizer: authz::Authorizer,
    pub service_accounts: serviceaccount::Issuer,
    pub services: allocator::ServiceAllocator,
    pub secure_port: u16,
    pub server_address: String,
    pub bookmark_interval: Duration,
    pub metrics: Arc<metrics::ApiMetrics>,
    /// The CRDs being served, with what serving their custom resources needs (schemas, versions).
    pub crds: crd::info::CustomResources,
    /// Appended to `/metrics` (the all-in-one server adds its components' metrics).
    pub extra_metrics: Option<metrics::ExtraMetrics>,
    /// The admission plugins writes go through.
    pub admission: admission::Chain,
    /// Logs, exec, attach, port-forward and node proxying go through this to kubelets.
    pub kubelet: kubelet_client::KubeletClient,
    /// See [`Config::pod_network_namespace`].
    pub pod_network_namespace: Option<PathBuf>,
    /// How ComponentStatuses probe the scheduler and controller manager.
    pub components: rest::componentstatus::Components,
    /// What `/livez` and `/readyz` report besides storage.
    pub health: healthz::Health,
    /// Seats for requests in flight (see [`maxinflight`]).
    pub inflight: maxinflight::MaxInFlight,
    /// API Priority and Fairness, when on (then `inflight` is unused).
    pub flowcontrol: Option<Arc<flowcontrol::Apf>>,
    /// The audit policy and log, when auditing is on.
    pub audit: Option<audit::Auditor>,
    /// The store's encryption at rest, when configured (`store` is this wrapper then).
    pub encryption: Option<Arc<encryption::EncryptingStore>>,
    /// See [`Config::request_timeout`].
    pub request_timeout: Duration,
    /// Open watches per user (see [`watchlimit`]).
    pub watches: Arc<watchlimit::WatchLimits>,
    /// Open watches, ended when the server shuts down.
    pub watch_terminator: Arc<shutdown::WatchTerminator>,
    /// See [`Config::shutdown`].
    pub shutdown: shutdown::ShutdownOptions,
    /// `--shutdown-send-retry-after`'s refusals and the requests in flight (see [`retry_after`]).
    pub retry_after: retry_after::Gate,
    /// The latest resource usage of nodes and pods (`metrics.k8s.io`).
    pub resource_metrics: resource_metrics::Store,
    /// Remote APIServices and the credentials to reach them (see [`aggregator`]).
    pub aggregator: aggregator::Aggregator,
}

impl ApiServer {
    /// The user of a bearer token: from `--token-auth-file`, else a service account token for the
    /// API's audiences.
    pub fn authenticate_token(&self, token: &str) -> Option<authn::UserInfo> {
        self.tokens
            .lookup(token)
            .or_else(|| self.authenticate_bootstrap_token(token))
            .or_else(|| {
                serviceaccount::authenticate(self, token, &self.service_accounts.api_audiences)
                    .ok()
                    .map(|(user, _)| user)
            })
    }

    /// A bootstrap token, checked against its Secret in the watch cache.
    fn authenticate_bootstrap_token(&self, token: &str) -> Option<authn::UserInfo> {
        use authn::bootstrap_token;
        if !self.enable_bootstrap_token_auth {
            return None;
        }
        let (id, secret) = bootstrap_token::parse_token(token)?;
        let cached = self
            .caches
            .get("secrets")?
            .get(&bootstrap_token::secret_key(id))?;
        let object: serde_json::Value = serde_json::from_slice(&cached.json).ok()?;
        bootstrap_token::authenticate(id, secret, &object, chrono::Utc::now())
            .map(authn::UserInfo::authenticated)
    }
}

/// Opens the store, loads the caches, creates the bootstrap objects, writes the certificates and
/// `<data-dir>/admin.kubeconfig`, and starts serving. Returns once the server accepts connections.
pub async fn start(config: Config) -> Result<Running, String> {
    start_with_metrics(config, None).await
}

/// As [`start`], with more text for `/metrics` from the embedding process.
pub async fn start_with_metrics(
    config: Config,
    extra_metrics: Option<metrics::ExtraMetrics>,
) -> Result<Running, String> {
    start_member(config, extra_metrics)
        .await
        .map(|(running, _)| running)
}

/// As [`start_with_metrics`], also returning this server's endpoint reconciler when it runs one
/// ([`Config::endpoint_reconciler`]), to leave the `kubernetes` endpoints when stopping.
pub async fn start_member(
    config: Config,
    extra_metrics: Option<metrics::ExtraMetrics>,
) -> Result<(Running, Option<endpoint_reconciler::Handle>), String> {
    std::fs::create_dir_all(&config.data_dir)
        .map_err(|e| format!("cannot create data dir {}: {e}", config.data_dir.display()))?;
    // First, so that a bad policy stops the start before anything else is opened.
    let auditor = config
        .audit
        .as_ref()
        .map(audit::Auditor::start)
        .transpose()?;
    let store: Arc<dyn Store> = match &config.storage {
        StorageConfig::Sqlite => {
            let path = config.data_dir.join("state.db");
            Arc::new(
                storage::sqlite::SqliteStore::open(&path, Default::default())
                    .map_err(|e| e.to_string())?,
            )
        }
        StorageConfig::Etcd { servers, prefix } => Arc::new(
            storage::etcd::EtcdStore::connect(servers, prefix)
                .await
                .map_err(|e| format!("cannot connect to etcd at {}: {e}", servers.join(",")))?,
        ),
    };
    let (store, encryption) = encryption::wrap(store, &config)?;
    let tokens = match &config.token_auth_file {
        Some(path) => authn::TokenAuthenticator::from_file(path)?,
        None => authn::TokenAuthenticator::default(),
    };
    let key_file = config
        .service_account_key_file
        .clone()
        .unwrap_or_else(|| config.data_dir.join("pki").join("sa.key"));
    let service_accounts = serviceaccount::Issuer {
        key: serviceaccount::jwt::SigningKey::load_or_generate(&key_file)?,
        extra_keys: {
            let mut keys = Vec::new();
            for file in &config.service_account_public_key_files {
                keys.extend(serviceaccount::jwt::load_verifying_keys(file)?);
            }
            keys
        },
        issuer: config.service_account_issuer.clone(),
        api_audiences: if config.api_audiences.is_empty() {
            vec![config.service_account_issuer.clone()]
        } else {
            config.api_audiences.clone()
        },
        max_expiration: config.service_account_max_token_expiration.as_secs() as i64,
    };
    let listener =
        tokio::net::TcpListener::bind(SocketAddr::new(config.bind_address, config.secure_port))
            .await
            .map_err(|e| {
                format!(
                    "cannot listen on {}:{}: {e}",
                    config.bind_address, config.secure_port
                )
            })?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let client_host = match config.bind_address {
        IpAddr::V4(a) if a.is_unspecified() => "127.0.0.1".to_string(),
        IpAddr::V6(a) if a.is_unspecified() => "127.0.0.1".to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
        a => a.to_string(),
    };
    let mut listeners = vec![listener];
    if let Some((netns, ip)) = &config.serve_in_namespace {
        let addr = SocketAddr::new(*ip, local.port());
        let inside = httpstream::netns::bind_tcp(Some(netns), addr)
            .map_err(|e| format!("cannot listen on {addr} in {}: {e}", netns.display()))?;
        listeners.push(inside);
    }
    let mut hosts = vec![config.bind_address.to_string()];
    hosts.extend(config.advertise_address.map(|a| a.to_string()));
    hosts.extend(
        config
            .serve_in_namespace
            .as_ref()
            .map(|(_, ip)| ip.to_string()),
    );
    let services = allocator::ServiceAllocator::new(&config.service_cluster_ip_range)?
        .with_node_port_range(config.service_node_port_range)?;
    // In-cluster clients dial the `kubernetes` Service's ClusterIP: the range's first address.
    hosts.push(services.first_ip());
    let mut pki = certs::ensure(&config.data_dir, &hosts).map_err(|e| e.to_string())?;
    // The cluster's own credentials are only known to work when the generated CA issued them.
    let own_credentials = config.client_ca_file.is_none() && config.tls_cert_file.is_none();
    certs::use_files(
        &mut pki,
        config.client_ca_file.as_deref(),
        config.tls_cert_file.as_deref(),
        config.tls_private_key_file.as_deref(),
    )?;
    let kubelet = kubelet_client::KubeletClient::new(
        &config.kubelet,
        (&pki.kubelet_client_cert, &pki.kubelet_client_key),
    )?;
    let front_proxy = aggregator::FrontProxy::ensure(&config.data_dir)?;
    let registry = Registry::with_builtin();
    let caches = watch_cache::CacheSet::new();
    for r in registry.snapshot().resources.values() {
        caches.ensure(&r.storage, &r.group, &r.plural);
    }
    let api = Arc::new(ApiServer {
        registry,
        store: store.clone(),
        caches: caches.clone(),
        tokens,
        anonymous_auth: config.anonymous_auth,
        enable_bootstrap_token_auth: config.enable_bootstrap_token_auth,
        authorizer: authz::Authorizer::new(config.authorization_mode),
        service_accounts,
        services,
        secure_port: local.port(),
        server_address: format!("{client_host}:{}", local.port()),
        bookmark_interval: config.bookmark_interval,
        metrics: Arc::default(),
        crds: Default::default(),
        extra_metrics,
        admission: admission::Chain::from_flags(
            &config.enable_admission_plugins,
            &config.disable_admission_plugins,
        )?,
        kubelet,
        pod_network_namespace: config.pod_network_namespace.clone(),
        components: Default::default(),
        health: Default::default(),
        inflight: maxinflight::MaxInFlight::new(
            config.max_requests_inflight,
            config.max_mutating_requests_inflight,
        ),
        // Both limits 0 (no limit) leave nothing to share: no flow control either.
        flowcontrol: {
            let total = config.max_requests_inflight + config.max_mutating_requests_inflight;
            (config.enable_priority_and_fairness && total > 0)
                .then(|| Arc::new(flowcontrol::Apf::new(total)))
        },
        audit: auditor,
        encryption,
        request_timeout: config.request_timeout,
        watches: watchlimit::WatchLimits::new(config.max_watches_per_user),
        watch_terminator: Default::default(),
        shutdown: config.shutdown,
        retry_after: Default::default(),
        resource_metrics: resource_metrics::Store::new(config.metric_resolution),
        aggregator: aggregator::Aggregator::new(front_proxy),
    });
    let current = store.current_revision().await.map_err(|e| e.to_string())?;
    tokio::spawn(caches.clone().run(store.clone()));
    if !caches.wait_for(current, Duration::from_secs(60)).await {
        return Err("the watch cache did not load within 60 s".into());
    }
    // History compacted before this server started (by another server, an operator, `rkube
    // migrate`) is refused at once: without this the caches knew of no compaction until a round of
    // this server's compactor reported one, and a watch from before it was opened on the store to
    // get its 410 from there.
    match store.compacted_to().await {
        Ok(revision) => caches.set_compacted(revision),
        Err(e) => tracing::warn!(error = %e, "cannot read the store's compacted revision"),
    }
    authz::start(&api);
    authz::node::start(&api);
    bootstrap::ensure_defaults(&api).await?;
    tokio::spawn(crd::run(api.clone()));
    apiservices::sync(&api, false).await;
    tokio::spawn(apiservices::run(api.clone()));
    tokio::spawn(aggregator::available::run(api.clone()));
    if let Err(e) = aggregator::frontproxy::publish(&api, &pki.ca_cert).await {
        tracing::warn!(error = %e, "cannot publish the extension API server authentication");
    }
    tokio::spawn(resource_metrics::scraper::run(api.clone()));
    tokio::spawn(flowcontrol::run(api.clone()));
    tokio::spawn(admission::policy::typecheck::run(api.clone()));
    let compactor = if config.compaction_interval.is_zero() {
        // Upstream's `--etcd-compaction-interval=0`: this server never compacts (another server,
        // or etcd's own auto-compaction, does).
        tokio::spawn(async {})
    } else {
        let caches = caches.clone();
        storage::compaction::spawn_auto_compaction_with(
            store.clone(),
            config.compaction_interval,
            move |rev| caches.set_compacted(rev),
        )
    };

    // What other servers and the cluster know this one by: the advertised address, else the bound
    // one (an unspecified bind address advertises nothing: no identity or endpoint to name).
    let advertised = config
        .advertise_address
        .or(Some(config.bind_address).filter(|a| !a.is_unspecified()));
    if let Some(identity_config) = &config.identity_lease {
        let me = advertised.map_or_else(|| client_host.clone(), |a| a.to_string());
        let name = identity::lease_name(&identity::hostname(), &format!("{me}:{}", local.port()));
        tokio::spawn(identity::run(api.clone(), identity_config.clone(), name));
    }
    // Serving pods in a namespace of their own, the endpoints name the address there.
    let (endpoint_reconciler, advertised) = match &config.serve_in_namespace {
        Some((_, ip)) => (
            Some(config.endpoint_reconciler.clone().unwrap_or_default()),
            Some(*ip),
        ),
        None => (config.endpoint_reconciler.clone(), advertised),
    };
    let reconciler = match (&endpoint_reconciler, advertised) {
        (Some(r), Some(ip)) if !ip.is_loopback() => Some(endpoint_reconciler::start(
            api.clone(),
            r.clone(),
            ip,
            local.port(),
        )),
        (Some(_), _) => {
            // Endpoints validation refuses loopback addresses (as upstream, whose reconciler then
            // fails on every pass): say so once rather than fail every 10 s.
            tracing::warn!(
                "the kubernetes endpoints are not reconciled: set --advertise-address to an address other servers and pods can reach (not loopback)"
            );
            None
        }
        (None, _) => None,
    };

    let url = format!("https://{client_host}:{}", local.port());
    let kubeconfig = config.data_dir.join("admin.kubeconfig");
    if own_credentials {
        certs::write_kubeconfig(&kubeconfig, &certs::admin_kubeconfig(&pki, &url))?;
    }
    let running = server::serve(api, listeners, &pki, compactor, &config.serving).await?;
    tracing::info!(%url, kubeconfig = %kubeconfig.display(), "rkube API server ready");
    Ok((running, reconciler))
}
