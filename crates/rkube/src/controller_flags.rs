//! The controller-manager flags, shared by `rkube controller-manager` and `rkube server` (upstream
//! kube-controller-manager's flags of the same names): which controllers run, and the settings of
//! individual controllers.

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use clap::Args;

use crate::serve::parse_duration;

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
    /// Concurrent syncs: Deployments (default: upstream's).
    #[arg(long)]
    concurrent_deployment_syncs: Option<usize>,
    /// Concurrent syncs: ReplicaSets (default: upstream's).
    #[arg(long)]
    concurrent_replicaset_syncs: Option<usize>,
    /// Concurrent syncs: ReplicationControllers (default: upstream's).
    #[arg(long)]
    concurrent_rc_syncs: Option<usize>,
    /// Concurrent syncs: StatefulSets (default: upstream's).
    #[arg(long)]
    concurrent_statefulset_syncs: Option<usize>,
    /// Concurrent syncs: DaemonSets (default: upstream's).
    #[arg(long)]
    concurrent_daemonset_syncs: Option<usize>,
    /// Concurrent syncs: Jobs (default: upstream's).
    #[arg(long)]
    concurrent_job_syncs: Option<usize>,
    /// Concurrent syncs: CronJobs (default: upstream's).
    #[arg(long)]
    concurrent_cron_job_syncs: Option<usize>,
    /// Concurrent syncs: finished Jobs checked for their TTL (default: upstream's).
    #[arg(long)]
    concurrent_ttl_after_finished_syncs: Option<usize>,
    /// Concurrent syncs: Services whose Endpoints are synced (default: upstream's).
    #[arg(long)]
    concurrent_endpoint_syncs: Option<usize>,
    /// Concurrent syncs: Services whose EndpointSlices are synced (default: upstream's).
    #[arg(long)]
    concurrent_service_endpoint_syncs: Option<usize>,
    /// Concurrent syncs: Services whose Endpoints are mirrored (default: upstream's).
    #[arg(long)]
    mirroring_concurrent_service_endpoint_syncs: Option<usize>,
    /// Concurrent syncs: garbage collector workers (default: upstream's).
    #[arg(long)]
    concurrent_gc_syncs: Option<usize>,
    /// Concurrent syncs: namespaces being emptied (default: upstream's).
    #[arg(long)]
    concurrent_namespace_syncs: Option<usize>,
    /// Concurrent syncs: ResourceQuotas (default: upstream's).
    #[arg(long)]
    concurrent_resource_quota_syncs: Option<usize>,
    /// How often every ResourceQuota's usage is recomputed in full.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    resource_quota_sync_period: Duration,
    /// CA bundle published in every namespace as the `kube-root-ca.crt` ConfigMap (default: the
    /// certificate authority of the kubeconfig the controllers use).
    #[arg(long)]
    root_ca_file: Option<PathBuf>,
    /// CA certificate (PEM) the CSR signer issues certificates with for the `kubernetes.io/`
    /// signers (`rkube server`: `<data-dir>/pki/ca.crt`); without it and --cluster-signing-key-file
    /// the signer does not run.
    #[arg(long)]
    cluster_signing_cert_file: Option<PathBuf>,
    /// The CA's private key (PEM; `rkube server`: `<data-dir>/pki/ca.key`).
    #[arg(long)]
    cluster_signing_key_file: Option<PathBuf>,
    /// Longest validity of a signed certificate (a request's expirationSeconds may shorten it).
    #[arg(long, default_value = "8760h", value_parser = scheduler::config::parse_duration)]
    cluster_signing_duration: Duration,
    /// CA certificate for kubernetes.io/kubelet-serving only (with any per-signer file, signers
    /// without their own pair are not served; not together with --cluster-signing-cert-file).
    #[arg(long)]
    cluster_signing_kubelet_serving_cert_file: Option<PathBuf>,
    #[arg(long)]
    cluster_signing_kubelet_serving_key_file: Option<PathBuf>,
    /// CA certificate for kubernetes.io/kube-apiserver-client-kubelet only.
    #[arg(long)]
    cluster_signing_kubelet_client_cert_file: Option<PathBuf>,
    #[arg(long)]
    cluster_signing_kubelet_client_key_file: Option<PathBuf>,
    /// CA certificate for kubernetes.io/kube-apiserver-client only.
    #[arg(long)]
    cluster_signing_kube_apiserver_client_cert_file: Option<PathBuf>,
    #[arg(long)]
    cluster_signing_kube_apiserver_client_key_file: Option<PathBuf>,
    /// CA certificate for kubernetes.io/legacy-unknown only.
    #[arg(long)]
    cluster_signing_legacy_unknown_cert_file: Option<PathBuf>,
    #[arg(long)]
    cluster_signing_legacy_unknown_key_file: Option<PathBuf>,
    /// Most endpoints one EndpointSlice holds.
    #[arg(long, default_value_t = 100)]
    max_endpoints_per_slice: usize,
    /// Most addresses mirrored from one subset of a custom Endpoints object.
    #[arg(long, default_value_t = 1000)]
    mirroring_max_endpoints_per_subset: usize,
    /// Terminated pods kept before pod GC deletes the oldest (0: never).
    #[arg(long, default_value_t = 12500)]
    terminated_pod_gc_threshold: usize,
    /// How long pod GC waits before treating a missing node as deleted (upstream: fixed at 40s).
    #[arg(long, default_value = "40s", value_parser = crate::serve::parse_duration, hide = true)]
    pod_gc_quarantine: Duration,
    /// How often pod GC runs (upstream: fixed at 20s).
    #[arg(long, default_value = "20s", value_parser = crate::serve::parse_duration, hide = true)]
    pod_gc_period: Duration,
    /// Run the in-tree `rkube.io/local-path` provisioner, making volume directories here. Only for
    /// a controller manager on the node's own machine (`rkube server` sets it to
    /// `<data-dir>/local-path` unless `--disable-local-path`).
    #[arg(long)]
    pub local_path_dir: Option<PathBuf>,
    /// How often each HorizontalPodAutoscaler is synced.
    #[arg(long, default_value = "15s", value_parser = crate::serve::parse_duration)]
    horizontal_pod_autoscaler_sync_period: Duration,
    /// How far back the autoscaler looks for a higher recommendation before scaling down (an
    /// HPA's behavior.scaleDown.stabilizationWindowSeconds overrides it).
    #[arg(long, default_value = "5m", value_parser = crate::serve::parse_duration)]
    horizontal_pod_autoscaler_downscale_stabilization: Duration,
    /// The usage ratio's distance from 1.0 within which the autoscaler does not scale.
    #[arg(long, default_value_t = 0.1)]
    horizontal_pod_autoscaler_tolerance: f64,
    /// After a pod starts, how long its CPU samples count only once taken a full window after it
    /// became ready.
    #[arg(long, default_value = "5m", value_parser = crate::serve::parse_duration)]
    horizontal_pod_autoscaler_cpu_initialization_period: Duration,
    /// After a pod starts, how long a not-ready pod is taken as still starting.
    #[arg(long, default_value = "30s", value_parser = crate::serve::parse_duration)]
    horizontal_pod_autoscaler_initial_readiness_delay: Duration,
    /// Concurrent syncs: HorizontalPodAutoscalers (default: upstream's).
    #[arg(long)]
    concurrent_horizontal_pod_autoscaler_syncs: Option<usize>,
}

/// The pod range of `rkube server` when none is given (k3s's).
const EMBEDDED_CLUSTER_CIDR: &str = "10.42.0.0/16";

impl ControllerFlags {
    /// The pods' address range of `rkube server` (`--cluster-cidr`, else k3s's default).
    pub fn embedded_cluster_cidr(&self) -> String {
        self.pod_cluster_cidr
            .clone()
            .unwrap_or_else(|| EMBEDDED_CLUSTER_CIDR.to_string())
    }

    pub fn selected(&self) -> Result<Vec<&'static controllers::ControllerDescriptor>, String> {
        controllers::select(&self.controllers)
    }

    /// [`ControllerFlags::selected`] with `also_on` turned on unless `--controllers` names them (as
    /// `-foo` too): what `rkube server` adds for its other flags, as kubeadm adds to `--controllers`.
    pub fn selected_with(
        &self,
        also_on: &[&str],
    ) -> Result<Vec<&'static controllers::ControllerDescriptor>, String> {
        let mut spec = self.controllers.clone();
        spec.extend(also_on.iter().map(|s| s.to_string()));
        controllers::select(&spec)
    }

    /// The controllers' settings; `embedded` (in `rkube server`) allocates node CIDRs by default.
    /// The root CA comes from `--root-ca-file`, else from the kubeconfig at `kubeconfig` (or the
    /// default kubeconfig when `None`).
    pub fn options(
        &self,
        embedded: bool,
        kubeconfig: Option<&Path>,
    ) -> Result<controllers::ControllerOptions, String> {
        let root_ca_pem = match &self.root_ca_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| format!("--root-ca-file {}: {e}", path.display()))?,
            ),
            None => kubeconfig_ca(kubeconfig),
        };
        let concurrent_syncs = [
            ("deployment-controller", self.concurrent_deployment_syncs),
            ("replicaset-controller", self.concurrent_replicaset_syncs),
            ("replicationcontroller-controller", self.concurrent_rc_syncs),
            ("statefulset-controller", self.concurrent_statefulset_syncs),
            ("daemonset-controller", self.concurrent_daemonset_syncs),
            ("job-controller", self.concurrent_job_syncs),
            ("cronjob-controller", self.concurrent_cron_job_syncs),
            (
                "ttl-after-finished-controller",
                self.concurrent_ttl_after_finished_syncs,
            ),
            ("endpoints-controller", self.concurrent_endpoint_syncs),
            (
                "endpointslice-controller",
                self.concurrent_service_endpoint_syncs,
            ),
            (
                "endpointslice-mirroring-controller",
                self.mirroring_concurrent_service_endpoint_syncs,
            ),
            ("garbage-collector-controller", self.concurrent_gc_syncs),
            ("namespace-controller", self.concurrent_namespace_syncs),
            (
                "resourcequota-controller",
                self.concurrent_resource_quota_syncs,
            ),
            (
                "horizontal-pod-autoscaler-controller",
                self.concurrent_horizontal_pod_autoscaler_syncs,
            ),
        ]
        .into_iter()
        .filter_map(|(name, n)| Some((name, n?)))
        .collect();
        Ok(controllers::ControllerOptions {
            concurrent_syncs,
            root_ca_pem,
            csr_signing: controllers::certificates::signer::Options {
                cert_file: self.cluster_signing_cert_file.clone(),
                key_file: self.cluster_signing_key_file.clone(),
                signer_files: [
                    (
                        "kubernetes.io/kubelet-serving",
                        &self.cluster_signing_kubelet_serving_cert_file,
                        &self.cluster_signing_kubelet_serving_key_file,
                    ),
                    (
                        "kubernetes.io/kube-apiserver-client-kubelet",
                        &self.cluster_signing_kubelet_client_cert_file,
                        &self.cluster_signing_kubelet_client_key_file,
                    ),
                    (
                        "kubernetes.io/kube-apiserver-client",
                        &self.cluster_signing_kube_apiserver_client_cert_file,
                        &self.cluster_signing_kube_apiserver_client_key_file,
                    ),
                    (
                        "kubernetes.io/legacy-unknown",
                        &self.cluster_signing_legacy_unknown_cert_file,
                        &self.cluster_signing_legacy_unknown_key_file,
                    ),
                ]
                .into_iter()
                .map(|(signer, c, k)| (signer, (c.clone(), k.clone())))
                .collect(),
                duration: self.cluster_signing_duration,
            },
            max_endpoints_per_slice: self.max_endpoints_per_slice,
            mirroring_max_endpoints_per_subset: self.mirroring_max_endpoints_per_subset,
            terminated_pod_gc_threshold: self.terminated_pod_gc_threshold,
            pod_gc_quarantine: self.pod_gc_quarantine,
            pod_gc_period: self.pod_gc_period,
            resource_quota_sync_period: self.resource_quota_sync_period,
            local_path_dir: self.local_path_dir.clone(),
            hpa: controllers::podautoscaler::Options {
                sync_period: self.horizontal_pod_autoscaler_sync_period,
                downscale_stabilization: self.horizontal_pod_autoscaler_downscale_stabilization,
                tolerance: self.horizontal_pod_autoscaler_tolerance,
                cpu_initialization_period: self.horizontal_pod_autoscaler_cpu_initialization_period,
                initial_readiness_delay: self.horizontal_pod_autoscaler_initial_readiness_delay,
            },
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
        })
    }
}

/// The PEM CA bundle of the kubeconfig's current cluster (inline data or a file), if it has one.
pub fn kubeconfig_ca(path: Option<&Path>) -> Option<String> {
    let kubeconfig = match path {
        Some(p) => kube::config::Kubeconfig::read_from(p).ok()?,
        None => kube::config::Kubeconfig::read().ok()?,
    };
    let context = kubeconfig.current_context.as_ref()?;
    let cluster_name = kubeconfig
        .contexts
        .iter()
        .find(|c| &c.name == context)?
        .context
        .as_ref()?
        .cluster
        .clone();
    let cluster = kubeconfig
        .clusters
        .iter()
        .find(|c| c.name == cluster_name)?
        .cluster
        .as_ref()?;
    if let Some(data) = &cluster.certificate_authority_data {
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .ok()?;
        return String::from_utf8(bytes).ok();
    }
    std::fs::read_to_string(cluster.certificate_authority.as_ref()?).ok()
}
