//! `rkube apiserver`: the API server alone (upstream kube-apiserver), with what upstream runs in the
//! same process (its post-start hooks: system namespaces, the `kubernetes` Service, bootstrap RBAC,
//! priority classes and flow-control objects, the CRD and APIService controllers, the identity
//! Lease and the lease endpoint reconciler) and none of the scheduler, controllers, kubelet, DNS or
//! proxy. Several of them can share one etcd. Also the flags `rkube server` shares with it.

use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, ValueEnum};

use crate::serve::parse_duration;

#[derive(Clone, Copy, Debug, ValueEnum)]
pub enum StorageKind {
    /// The embedded SQLite store, `<data-dir>/state.db` (rkube's addition).
    Sqlite,
    /// etcd v3 at --etcd-servers (upstream's only backend, `etcd3`).
    #[value(alias = "etcd3")]
    Etcd,
}

/// The API server's flags, as `rkube apiserver` and `rkube server` take them.
#[derive(Args, Debug)]
pub struct ApiServerFlags {
    /// Where the store (SQLite), certificates and admin.kubeconfig live.
    #[arg(long, default_value = "./rkube-data")]
    pub data_dir: PathBuf,
    /// Address to serve HTTPS on.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind_address: IpAddr,
    /// Port to serve HTTPS on (0 picks a free one; the kubeconfig names it).
    #[arg(long, default_value_t = 6443)]
    pub secure_port: u16,
    /// Storage backend (default: etcd with --etcd-servers, else SQLite).
    #[arg(long = "storage-backend", visible_alias = "storage", value_enum)]
    pub storage: Option<StorageKind>,
    /// etcd client URLs, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub etcd_servers: Vec<String>,
    /// Key prefix in etcd.
    #[arg(long, default_value = "/registry")]
    pub etcd_prefix: String,
    /// Static bearer tokens: CSV lines `token,user,uid[,"group1,group2"]`.
    #[arg(long)]
    pub token_auth_file: Option<PathBuf>,
    /// Authorizers, comma-separated: RBAC, Node,RBAC (the default) or AlwaysAllow.
    #[arg(long, default_value = "Node,RBAC")]
    pub authorization_mode: String,
    /// Requests without credentials are user system:anonymous (group system:unauthenticated), left to
    /// the authorizer; with false (the default here, as k3s and hardened clusters run) they get 401.
    /// /healthz, /livez, /readyz and /version answer everyone either way.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub anonymous_auth: bool,
    /// Bootstrap token Secrets (`kube-system/bootstrap-token-<id>`) authenticate as
    /// `system:bootstrap:<id>`, for joining kubelets.
    #[arg(long)]
    pub enable_bootstrap_token_auth: bool,
    /// Most non-mutating requests in flight at once, past which clients get 429 (0: no limit;
    /// watches do not count, system:masters is never refused).
    #[arg(long, default_value_t = 400)]
    pub max_requests_inflight: usize,
    /// Most mutating requests in flight at once (0: no limit).
    #[arg(long, default_value_t = 200)]
    pub max_mutating_requests_inflight: usize,
    /// API Priority and Fairness: requests classified by FlowSchemas, queued fairly within their
    /// PriorityLevelConfigurations, which share the two in-flight limits' sum (then not applied
    /// on their own). `false`: the plain in-flight limits.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub enable_priority_and_fairness: bool,
    /// The longest a request may take, watches and streams aside (a Go duration, as upstream's
    /// `1m0s`); a client's `?timeout=` may ask for less. Past it the client gets 504.
    #[arg(long, default_value = "1m0s", value_parser = parse_go_duration)]
    pub request_timeout: Duration,
    /// Most watches one user may hold open (0: no limit; system:masters is not counted). No
    /// upstream counterpart: it bounds what one client can make the server keep.
    #[arg(long, default_value_t = apiserver::watchlimit::DEFAULT_MAX_WATCHES_PER_USER)]
    pub max_watches_per_user: usize,
    /// Admission plugins to run besides the default ones, comma-separated (upstream's names).
    #[arg(long, value_delimiter = ',')]
    pub enable_admission_plugins: Vec<String>,
    /// Default admission plugins not to run, comma-separated.
    #[arg(long, value_delimiter = ',')]
    pub disable_admission_plugins: Vec<String>,
    /// EncryptionConfiguration file (apiserver.config.k8s.io/v1) saying which resources are
    /// encrypted in storage and with which providers (identity, aescbc, aesgcm, secretbox).
    #[arg(long)]
    pub encryption_provider_config: Option<PathBuf>,
    /// Read --encryption-provider-config again every minute and apply a valid change without a
    /// restart (an invalid one is logged and the running providers kept).
    #[arg(long)]
    pub encryption_provider_config_automatic_reload: bool,
    /// How often the automatic reload reads the file (upstream: fixed at one minute; for tests).
    #[arg(long, default_value = "1m", value_parser = parse_duration, hide = true)]
    pub encryption_provider_config_automatic_reload_interval: Duration,
    /// How often kubelets' `/metrics/resource` is scraped for `metrics.k8s.io` (metrics-server's
    /// `--metric-resolution`; shorter for tests).
    #[arg(long, default_value = "15s", value_parser = parse_duration, hide = true)]
    pub metric_resolution: Duration,
    #[command(flatten)]
    pub audit: AuditFlags,
    /// Issuer (`iss`) of service account tokens.
    #[arg(long, default_value = apiserver::serviceaccount::DEFAULT_ISSUER)]
    pub service_account_issuer: String,
    /// Audiences of the API, comma-separated (default: the issuer); tokens must carry one of them.
    #[arg(long, value_delimiter = ',')]
    pub api_audiences: Vec<String>,
    /// PKCS#8 PEM EC P-256 key that signs service account tokens (default: one generated in
    /// <data-dir>/pki/sa.key). API servers of one cluster share it.
    #[arg(long)]
    pub service_account_signing_key_file: Option<PathBuf>,
    /// PEM files (comma-separated or repeated) of more keys whose service account tokens are
    /// accepted: EC P-256 `PUBLIC KEY` or `PRIVATE KEY` blocks (RSA keys are not supported).
    #[arg(long, value_delimiter = ',')]
    pub service_account_key_file: Vec<PathBuf>,
    /// Longest lifetime of a requested service account token (0: no cap).
    #[arg(long, default_value = "0s", value_parser = parse_duration)]
    pub service_account_max_token_expiration: Duration,
    /// CIDR that Service ClusterIPs come from.
    #[arg(long, default_value = "10.96.0.0/12")]
    pub service_cluster_ip_range: String,
    /// Ports NodePort Services get, `low-high` (both included).
    #[arg(long, default_value = "30000-32767", value_parser = parse_port_range)]
    pub service_node_port_range: (u16, u16),
    /// How often history older than one interval is compacted (0: never by this server, as
    /// upstream's `--etcd-compaction-interval=0`).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub compaction_interval: Duration,
    /// How often watches that allow them get a BOOKMARK.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub bookmark_interval: Duration,
    /// Client certificate (PEM) presented to kubelets; the generated
    /// `pki/apiserver-kubelet-client.crt` by default.
    #[arg(long)]
    pub kubelet_client_certificate: Option<PathBuf>,
    /// Key of --kubelet-client-certificate.
    #[arg(long)]
    pub kubelet_client_key: Option<PathBuf>,
    /// CA bundle (PEM) that kubelet serving certificates must chain to; without it they are not
    /// verified, as upstream.
    #[arg(long)]
    pub kubelet_certificate_authority: Option<PathBuf>,
    /// Node address types to reach kubelets at, most preferred first.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "InternalIP,Hostname,InternalDNS,ExternalDNS,ExternalIP"
    )]
    pub kubelet_preferred_address_types: Vec<String>,
    #[command(flatten)]
    pub serving: crate::serving_flags::ServingFlags,
}

/// Auditing: a policy and where its events go (a log file, a webhook or both).
#[derive(Args, Debug)]
pub struct AuditFlags {
    /// Audit policy (audit.k8s.io/v1 Policy, YAML or JSON); with --audit-log-path or
    /// --audit-webhook-config-file, the requests it selects are audited.
    #[arg(long)]
    pub audit_policy_file: Option<PathBuf>,
    /// File audit events are written to, one JSON object per line ("-": stdout).
    #[arg(long)]
    pub audit_log_path: Option<PathBuf>,
    /// Size in megabytes past which the audit log is rotated (0: 100, as upstream).
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxsize: u64,
    /// Rotated audit log files kept (0: all).
    #[arg(long, default_value_t = 0)]
    pub audit_log_maxbackup: usize,
    /// Kubeconfig naming the server audit events are POSTed to (as `audit.k8s.io/v1` EventLists).
    #[arg(long)]
    pub audit_webhook_config_file: Option<PathBuf>,
    /// `batch` (buffered, sent off the request path), `blocking` (each request waits for its
    /// event's POST) or `blocking-strict` (as blocking, and a request whose RequestReceived event
    /// is not delivered fails with 500).
    #[arg(long, default_value = "batch")]
    pub audit_webhook_mode: apiserver::audit::WebhookMode,
    /// Events the webhook's batch buffer holds; past it events are dropped and counted.
    #[arg(long, default_value_t = 10_000)]
    pub audit_webhook_batch_buffer_size: usize,
    /// Most events in one POST.
    #[arg(long, default_value_t = 400)]
    pub audit_webhook_batch_max_size: usize,
    /// Longest an event waits for its batch to fill (a Go duration).
    #[arg(long, default_value = "30s", value_parser = parse_go_duration)]
    pub audit_webhook_batch_max_wait: Duration,
    /// Whether batches are rate limited.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub audit_webhook_batch_throttle_enable: bool,
    /// Batches a second when throttled.
    #[arg(long, default_value_t = 10.0)]
    pub audit_webhook_batch_throttle_qps: f64,
    /// Batches sent at once before the throttle applies.
    #[arg(long, default_value_t = 15)]
    pub audit_webhook_batch_throttle_burst: usize,
    /// First wait before a failed POST is retried (then x1.5, five tries in all).
    #[arg(long, default_value = "10s", value_parser = parse_go_duration)]
    pub audit_webhook_initial_backoff: Duration,
    /// Whether audit log events over --audit-log-truncate-max-event-size lose their request and
    /// response objects (annotated audit.k8s.io/truncated), or are dropped if still too large.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub audit_log_truncate_enabled: bool,
    /// Largest audit log batch in bytes (each event is written alone, so this only bounds the
    /// event size from above).
    #[arg(long, default_value_t = apiserver::audit::truncate::DEFAULT_MAX_BATCH_SIZE)]
    pub audit_log_truncate_max_batch_size: u64,
    /// Largest audit log event in bytes when truncation is enabled.
    #[arg(long, default_value_t = apiserver::audit::truncate::DEFAULT_MAX_EVENT_SIZE)]
    pub audit_log_truncate_max_event_size: u64,
    /// As --audit-log-truncate-enabled, for the webhook.
    #[arg(long, default_value_t = false, action = clap::ArgAction::Set)]
    pub audit_webhook_truncate_enabled: bool,
    /// Largest EventList POSTed, in bytes; larger batches are split.
    #[arg(long, default_value_t = apiserver::audit::truncate::DEFAULT_MAX_BATCH_SIZE)]
    pub audit_webhook_truncate_max_batch_size: u64,
    /// Largest event POSTed, in bytes, when truncation is enabled.
    #[arg(long, default_value_t = apiserver::audit::truncate::DEFAULT_MAX_EVENT_SIZE)]
    pub audit_webhook_truncate_max_event_size: u64,
}

impl AuditFlags {
    /// Auditing needs a policy and a backend (a log, a webhook or both), as upstream (which
    /// records nothing with one alone).
    pub fn config(&self) -> Option<apiserver::audit::Config> {
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
                    truncate: self.audit_webhook_truncate_enabled.then_some(
                        apiserver::audit::truncate::TruncateConfig {
                            max_event_size: self.audit_webhook_truncate_max_event_size,
                            max_batch_size: self.audit_webhook_truncate_max_batch_size,
                        },
                    ),
                });
        let has_backend = self.audit_log_path.is_some() || webhook.is_some();
        match (&self.audit_policy_file, has_backend) {
            (Some(policy), true) => Some(apiserver::audit::Config {
                policy_file: policy.clone(),
                log_path: self.audit_log_path.clone(),
                log_max_size_mb: self.audit_log_maxsize,
                log_max_backups: self.audit_log_maxbackup,
                log_truncate: self.audit_log_truncate_enabled.then_some(
                    apiserver::audit::truncate::TruncateConfig {
                        max_event_size: self.audit_log_truncate_max_event_size,
                        max_batch_size: self.audit_log_truncate_max_batch_size,
                    },
                ),
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
}

/// A positive Go duration ("1m0s", "90s", "1h30m").
pub(crate) fn parse_go_duration(s: &str) -> Result<Duration, String> {
    let nanos = apimachinery::go_duration::parse(s)?;
    match u64::try_from(nanos) {
        Ok(n) if n > 0 => Ok(Duration::from_nanos(n)),
        _ => Err(format!("{s:?}: must be positive")),
    }
}

/// `low-high`, as upstream's `--service-node-port-range` (`30000-32767`).
fn parse_port_range(s: &str) -> Result<(u16, u16), String> {
    let (lo, hi) = s
        .split_once('-')
        .ok_or_else(|| format!("{s:?}: expected low-high"))?;
    let port = |p: &str| {
        p.trim()
            .parse::<u16>()
            .map_err(|_| format!("{s:?}: {p:?} is not a port"))
    };
    let (lo, hi) = (port(lo)?, port(hi)?);
    if lo == 0 || lo > hi {
        return Err(format!("{s:?}: low must be at least 1 and at most high"));
    }
    Ok((lo, hi))
}

impl ApiServerFlags {
    /// The API server's configuration these flags describe.
    pub fn config(&self) -> Result<apiserver::Config, String> {
        let mut config = apiserver::Config::new(&self.data_dir);
        config.bind_address = self.bind_address;
        config.secure_port = self.secure_port;
        let etcd = match self.storage {
            Some(StorageKind::Etcd) => true,
            Some(StorageKind::Sqlite) => false,
            None => !self.etcd_servers.is_empty(),
        };
        config.storage = if etcd {
            if self.etcd_servers.is_empty() {
                return Err("--storage-backend etcd needs --etcd-servers".into());
            }
            apiserver::StorageConfig::Etcd {
                servers: self.etcd_servers.clone(),
                prefix: self.etcd_prefix.clone(),
            }
        } else {
            apiserver::StorageConfig::Sqlite
        };
        config.token_auth_file = self.token_auth_file.clone();
        config.authorization_mode = apiserver::authz::Mode::parse(&self.authorization_mode)?;
        config.anonymous_auth = self.anonymous_auth;
        config.enable_bootstrap_token_auth = self.enable_bootstrap_token_auth;
        config.max_requests_inflight = self.max_requests_inflight;
        config.max_mutating_requests_inflight = self.max_mutating_requests_inflight;
        config.enable_priority_and_fairness = self.enable_priority_and_fairness;
        config.request_timeout = self.request_timeout;
        config.metric_resolution = self.metric_resolution;
        config.max_watches_per_user = self.max_watches_per_user;
        config.enable_admission_plugins = self.enable_admission_plugins.clone();
        config.disable_admission_plugins = self.disable_admission_plugins.clone();
        config.encryption_provider_config = self.encryption_provider_config.clone();
        config.encryption_provider_config_automatic_reload =
            self.encryption_provider_config_automatic_reload;
        config.encryption_reload_interval =
            self.encryption_provider_config_automatic_reload_interval;
        config.audit = self.audit.config();
        config.service_account_issuer = self.service_account_issuer.clone();
        config.api_audiences = self.api_audiences.clone();
        config.service_account_key_file = self.service_account_signing_key_file.clone();
        config.service_account_public_key_files = self.service_account_key_file.clone();
        config.service_account_max_token_expiration = self.service_account_max_token_expiration;
        config.service_cluster_ip_range = self.service_cluster_ip_range.clone();
        config.service_node_port_range = self.service_node_port_range;
        config.compaction_interval = self.compaction_interval;
        config.bookmark_interval = self.bookmark_interval;
        config.kubelet = apiserver::kubelet_client::KubeletClientOptions {
            client_certificate: self.kubelet_client_certificate.clone(),
            client_key: self.kubelet_client_key.clone(),
            certificate_authority: self.kubelet_certificate_authority.clone(),
            preferred_address_types: self.kubelet_preferred_address_types.clone(),
            netns: None,
        };
        self.serving.apply(&mut config);
        Ok(config)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum EndpointReconcilerType {
    /// Each server keeps a record of its address with a TTL; the endpoints list the live ones.
    Lease,
    /// The `kubernetes` endpoints are left to someone else.
    None,
}

#[derive(Args, Debug)]
pub struct ApiserverArgs {
    #[command(flatten)]
    api: ApiServerFlags,
    /// Where other API servers and the cluster reach this one: the `kubernetes` endpoints' address
    /// (default: --bind-address, unless it is unspecified). Loopback addresses are not valid
    /// endpoints, so with one the endpoints are not reconciled.
    #[arg(long)]
    advertise_address: Option<IpAddr>,
    /// CA bundle (PEM) client certificates must chain to (default: the generated CA). With it no
    /// admin.kubeconfig is written.
    #[arg(long)]
    client_ca_file: Option<PathBuf>,
    /// Serving certificate (PEM; default: one issued by the generated CA at every start). With it
    /// no admin.kubeconfig is written.
    #[arg(long, requires = "tls_private_key_file")]
    tls_cert_file: Option<PathBuf>,
    /// Key of --tls-cert-file.
    #[arg(long, requires = "tls_cert_file")]
    tls_private_key_file: Option<PathBuf>,
    /// How the `default/kubernetes` Endpoints and EndpointSlice are kept (`lease`, `none`).
    #[arg(long, value_enum, default_value = "lease")]
    endpoint_reconciler_type: EndpointReconcilerType,
    /// How often this server renews its endpoint record and reconciles the endpoints (upstream
    /// 10 s; for tests).
    #[arg(long, default_value = "10s", value_parser = parse_duration, hide = true)]
    endpoint_reconciler_interval: Duration,
    /// How long an endpoint record lives without renewal (upstream 15 s; for tests).
    #[arg(long, default_value = "15s", value_parser = parse_duration, hide = true)]
    endpoint_reconciler_ttl: Duration,
    /// Duration of this server's identity Lease (upstream's hidden flag, 3600).
    #[arg(long, default_value_t = 3600, hide = true)]
    identity_lease_duration_seconds: u64,
    /// How often the identity Lease is renewed (upstream's hidden flag, 10).
    #[arg(long, default_value_t = 10, hide = true)]
    identity_lease_renew_interval_seconds: u64,
}

impl ApiserverArgs {
    fn config(&self) -> Result<apiserver::Config, String> {
        let mut config = self.api.config()?;
        config.advertise_address = self.advertise_address;
        config.client_ca_file = self.client_ca_file.clone();
        config.tls_cert_file = self.tls_cert_file.clone();
        config.tls_private_key_file = self.tls_private_key_file.clone();
        if self.identity_lease_duration_seconds == 0
            || self.identity_lease_renew_interval_seconds == 0
        {
            return Err("identity lease duration and renew interval must be positive".into());
        }
        config.identity_lease = Some(apiserver::identity::IdentityConfig {
            lease_duration: Duration::from_secs(self.identity_lease_duration_seconds),
            renew_interval: Duration::from_secs(self.identity_lease_renew_interval_seconds),
        });
        config.endpoint_reconciler = match self.endpoint_reconciler_type {
            EndpointReconcilerType::Lease => {
                if self.endpoint_reconciler_interval.is_zero()
                    || self.endpoint_reconciler_ttl < self.endpoint_reconciler_interval
                {
                    return Err(
                        "the endpoint reconciler's TTL must be at least its (positive) interval"
                            .into(),
                    );
                }
                Some(apiserver::endpoint_reconciler::ReconcilerConfig {
                    interval: self.endpoint_reconciler_interval,
                    ttl: self.endpoint_reconciler_ttl,
                })
            }
            EndpointReconcilerType::None => None,
        };
        Ok(config)
    }
}

pub async fn run(args: ApiserverArgs) -> Result<(), String> {
    let config = args.config()?;
    let kubeconfig = args.api.data_dir.join("admin.kubeconfig");
    let own_credentials = args.client_ca_file.is_none() && args.tls_cert_file.is_none();
    let (running, reconciler) = apiserver::start_member(config, None).await?;
    if own_credentials {
        eprintln!(
            "rkube: serving on https://{} ; kubeconfig: {}",
            running.addr,
            kubeconfig.display()
        );
    } else {
        eprintln!("rkube: serving on https://{}", running.addr);
    }
    if args.api.enable_bootstrap_token_auth && own_credentials {
        // As kubeadm's bootstrap-token phase: cluster-info for joining machines to read.
        let client = client::kubeconfig::client_from_file(&kubeconfig).await?;
        crate::cluster_info::ensure(client, &kubeconfig).await?;
    }
    // Upstream's pre-shutdown hook: leave the `kubernetes` endpoints as the shutdown begins, not
    // once the record's TTL has passed.
    running
        .run_until_signalled_with(async move {
            if let Some(reconciler) = reconciler {
                reconciler.leave().await;
            }
        })
        .await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: ApiserverArgs,
    }

    fn parse(args: &[&str]) -> Result<apiserver::Config, String> {
        let mut all = vec!["apiserver"];
        all.extend_from_slice(args);
        Cli::try_parse_from(all)
            .map_err(|e| e.to_string())?
            .args
            .config()
    }

    #[test]
    fn upstream_flags() {
        let c = parse(&[
            "--etcd-servers=http://127.0.0.1:2379",
            "--advertise-address=192.0.2.1",
            "--service-node-port-range=31000-31999",
            "--service-account-key-file=a.pub,b.pub",
            "--service-account-key-file=c.pub",
        ])
        .unwrap();
        assert!(
            matches!(c.storage, apiserver::StorageConfig::Etcd { .. }),
            "etcd with servers"
        );
        assert_eq!(c.service_node_port_range, (31000, 31999));
        assert_eq!(c.service_account_public_key_files.len(), 3);
        assert_eq!(c.advertise_address, Some("192.0.2.1".parse().unwrap()));
        assert!(
            c.endpoint_reconciler.is_some(),
            "lease reconciler by default"
        );
        assert_eq!(
            c.identity_lease.unwrap().lease_duration,
            Duration::from_secs(3600)
        );
        let c = parse(&["--storage-backend=etcd3", "--etcd-servers=http://e:2379"]).unwrap();
        assert!(matches!(c.storage, apiserver::StorageConfig::Etcd { .. }));
        let c = parse(&["--endpoint-reconciler-type=none"]).unwrap();
        assert!(matches!(c.storage, apiserver::StorageConfig::Sqlite));
        assert!(c.endpoint_reconciler.is_none());
        assert!(
            parse(&["--storage-backend=etcd"]).is_err(),
            "etcd needs servers"
        );
        assert!(parse(&["--tls-cert-file=c.pem"]).is_err(), "cert needs key");
        assert!(parse(&["--service-node-port-range=3-2"]).is_err());
        assert!(
            parse(&["--endpoint-reconciler-ttl=1s"]).is_err(),
            "ttl below interval"
        );
    }

    #[test]
    fn port_ranges() {
        assert_eq!(parse_port_range("30000-32767"), Ok((30000, 32767)));
        assert!(parse_port_range("30000").is_err());
        assert!(parse_port_range("0-10").is_err());
        assert!(parse_port_range("a-b").is_err());
    }
}
