//! Clients from a kubeconfig file (what upstream components do with `--kubeconfig`, through
//! client-go's `clientcmd.BuildConfigFromFlags`): the file's current context, nothing from the
//! environment.

use std::path::Path;

/// The connection settings of the kubeconfig at `path`.
pub async fn config_from_file(path: &Path) -> Result<kube::Config, String> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)
        .map_err(|e| format!("cannot read kubeconfig {}: {e}", path.display()))?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .map_err(|e| format!("kubeconfig {}: {e}", path.display()))
}

/// A client for the kubeconfig at `path`.
pub async fn client_from_file(path: &Path) -> Result<kube::Client, String> {
    let config = config_from_file(path).await?;
    kube::Client::try_from(config).map_err(|e| format!("kubeconfig {}: {e}", path.display()))
}
