//! The controller-manager flags that configure individual controllers, shared by
//! `rkube controller-manager` and `rkube server` (upstream kube-controller-manager's flags of the same
//! names).

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct ControllerFlags {
    /// CA bundle published in every namespace as the `kube-root-ca.crt` ConfigMap (default: the
    /// certificate authority of the kubeconfig the controllers use).
    #[arg(long)]
    root_ca_file: Option<PathBuf>,
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
}

impl ControllerFlags {
    /// The controllers' options; the root CA comes from `--root-ca-file`, else from the kubeconfig
    /// at `kubeconfig` (or the default kubeconfig when `None`).
    pub fn options(
        &self,
        kubeconfig: Option<&Path>,
    ) -> Result<controllers::ControllerOptions, String> {
        let root_ca_pem = match &self.root_ca_file {
            Some(path) => Some(
                std::fs::read_to_string(path)
                    .map_err(|e| format!("--root-ca-file {}: {e}", path.display()))?,
            ),
            None => kubeconfig_ca(kubeconfig),
        };
        Ok(controllers::ControllerOptions {
            root_ca_pem,
            max_endpoints_per_slice: self.max_endpoints_per_slice,
            mirroring_max_endpoints_per_subset: self.mirroring_max_endpoints_per_subset,
            terminated_pod_gc_threshold: self.terminated_pod_gc_threshold,
            pod_gc_quarantine: self.pod_gc_quarantine,
            pod_gc_period: self.pod_gc_period,
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
