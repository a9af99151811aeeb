//! Clients from a kubeconfig file (what upstream components do with `--kubeconfig`, through
//! client-go's `clientcmd.BuildConfigFromFlags`): the file's current context, nothing from the
//! environment.

use std::path::Path;

/// The connection settings of the kubeconfig at `path`.
///
/// kube's built-in retry layer is off: it retries 429/503/504 with exponential backoff of up to
/// 1,000 s, which would stall a worker on one request (an eviction refused by a disruption budget
/// waited minutes). Our components retry through their rate-limited work queues instead, as
/// client-go-based controllers do.
pub async fn config_from_file(path: &Path) -> Result<kube::Config, String> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| format!("cannot read kubeconfig {}: {e}", path.display()))?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| format!("kubeconfig {}: {e}", path.display()))?;
    config.default_retry = false;
    Ok(config)
}

/// A client for the kubeconfig at `path`, over HTTP/2 ([`crate::transport`]).
pub async fn client_from_file(path: &Path) -> Result<kube::Client, String> {
    let config = config_from_file(path).await?;
    crate::transport::client_from_config(&config)
        .map_err(|e| format!("kubeconfig {}: {e}", path.display()))
}
