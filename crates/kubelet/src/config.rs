//! The kubelet's configuration (upstream `KubeletConfiguration` plus the flags of `cmd/kubelet`), with
//! upstream's defaults.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use crate::netns::PodNetwork;

#[derive(Clone, Debug)]
pub struct KubeletConfig {
    pub node_name: String,
    /// The node's InternalIP (pods' hostIP).
    pub node_ip: IpAddr,
    /// Extra labels to register the node with (`--node-labels`).
    pub node_labels: BTreeMap<String, String>,
    /// Pod volumes and the kubelet's own state (`/var/lib/kubelet`).
    pub root_dir: PathBuf,
    /// Container logs (`/var/log/pods`; see [`crate::cri::logs`]).
    pub pod_logs_dir: PathBuf,
    pub runtime_endpoint: String,
    /// Static pod manifests (`--pod-manifest-path`): a file or a directory of them.
    pub pod_manifest_path: Option<PathBuf>,
    pub manifest_url: Option<String>,
    /// `--manifest-url-header` values as (name, value).
    pub manifest_url_headers: Vec<(String, String)>,
    pub file_check_frequency: Duration,
    pub http_check_frequency: Duration,
    /// How often every pod is synced even without a change (`syncFrequency`).
    pub sync_frequency: Duration,
    /// How often pod volumes' use is measured (`volumeStatsAggPeriod`); zero turns it off.
    pub volume_stats_agg_period: Duration,
    pub node_status_update_frequency: Duration,
    pub node_status_report_frequency: Duration,
    pub node_lease_duration_seconds: i32,
    pub max_pods: u32,
    /// Parent of the `kubepods` cgroup tree (`--cgroup-root`).
    pub cgroup_root: String,
    /// The port of the kubelet's HTTPS server (reported in `daemonEndpoints`); 0 picks a free one.
    pub port: u16,
    /// The rest of the HTTPS server's settings (address, certificates, client CA); its `port` is
    /// [`KubeletConfig::port`] and an empty `cert_dir` means `<root_dir>/pki`.
    pub server: crate::server::ServerConfig,
    /// Where pods' network lives (the runtime's network namespace).
    pub pod_network: PodNetwork,
    /// Where to write the CNI bridge config once the node has a pod CIDR (`None`: CNI is set up by
    /// someone else, as with a system containerd).
    pub cni_conf_dir: Option<PathBuf>,
    pub cni_bridge_name: String,
    /// Masquerade pod traffic leaving the node (off in a private pod network namespace).
    pub cni_ip_masq: bool,
    pub cluster_dns: Vec<String>,
    pub cluster_domain: String,
    /// Period of the dead container and unused image garbage collection.
    pub gc_period: Duration,
    /// Dead containers kept per pod container (upstream `MaxPerPodContainer`).
    pub max_dead_per_container: usize,
    /// PLEG relist period.
    pub pleg_period: Duration,
    /// The sandbox image, which image GC never removes.
    pub pod_infra_image: String,
    /// `--allowed-unsafe-sysctls`: sysctls (or `prefix*`) pods may set beyond the safe set; each must
    /// be namespaced.
    pub allowed_unsafe_sysctls: Vec<String>,
    /// `--seccomp-default`: containers without a seccomp profile get RuntimeDefault, not Unconfined.
    pub seccomp_default: bool,
    /// The CDI spec directories of the runtime (containerd's `cdi_spec_dirs`, later ones
    /// overriding earlier ones). Upstream's kubelet has no such setting: it hands CDI device IDs to
    /// the runtime, which reads the specs; rkube's kubelet reads them too, to apply their
    /// environment itself for containerd 1.6, whose CRI ignores CDI devices.
    pub cdi_spec_dirs: Vec<PathBuf>,
}

impl KubeletConfig {
    /// Upstream's defaults for a node named `node_name` on `node_ip`.
    pub fn new(node_name: &str, node_ip: IpAddr, runtime_endpoint: &str) -> KubeletConfig {
        KubeletConfig {
            node_name: node_name.to_string(),
            node_ip,
            node_labels: BTreeMap::new(),
            root_dir: PathBuf::from("/var/lib/kubelet"),
            pod_logs_dir: PathBuf::from("/var/log/pods"),
            runtime_endpoint: runtime_endpoint.to_string(),
            pod_manifest_path: None,
            manifest_url: None,
            manifest_url_headers: Vec::new(),
            file_check_frequency: Duration::from_secs(20),
            http_check_frequency: Duration::from_secs(20),
            sync_frequency: Duration::from_secs(60),
            volume_stats_agg_period: Duration::from_secs(60),
            node_status_update_frequency: Duration::from_secs(10),
            node_status_report_frequency: Duration::from_secs(300),
            node_lease_duration_seconds: 40,
            max_pods: 110,
            cgroup_root: "/".into(),
            port: 10250,
            server: crate::server::ServerConfig::new(PathBuf::new()),
            pod_network: PodNetwork::host(),
            cni_conf_dir: None,
            cni_bridge_name: "cni0".into(),
            cni_ip_masq: true,
            cluster_dns: Vec::new(),
            cluster_domain: "cluster.local".into(),
            gc_period: Duration::from_secs(60),
            max_dead_per_container: 1,
            pleg_period: Duration::from_secs(1),
            pod_infra_image: crate::containerd::DEFAULT_SANDBOX_IMAGE.into(),
            allowed_unsafe_sysctls: Vec::new(),
            seccomp_default: false,
            cdi_spec_dirs: crate::dra::cdi::SPEC_DIRS.iter().map(Into::into).collect(),
        }
    }

    /// Where Localhost seccomp profiles are (`<root>/seccomp`, upstream's `seccompProfileRoot`).
    pub fn seccomp_root(&self) -> PathBuf {
        self.root_dir.join("seccomp")
    }

    /// The directory of a pod's volumes and data (`<root>/pods/<uid>`).
    pub fn pod_dir(&self, uid: &str) -> PathBuf {
        self.root_dir.join("pods").join(uid)
    }
}

/// Parses `k=v,k2=v2` (`--node-labels`).
pub fn parse_labels(s: &str) -> Result<BTreeMap<String, String>, String> {
    s.split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| {
            let (k, v) = p
                .split_once('=')
                .ok_or_else(|| format!("label {p:?} is not key=value"))?;
            Ok((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels() {
        let l = parse_labels("a=1, b=2").unwrap();
        assert_eq!(l.get("a").map(String::as_str), Some("1"));
        assert_eq!(l.get("b").map(String::as_str), Some("2"));
        assert!(parse_labels("a").is_err());
        assert!(parse_labels("").unwrap().is_empty());
    }
}
