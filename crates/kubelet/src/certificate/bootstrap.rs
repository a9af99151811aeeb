//! TLS bootstrapping (upstream `pkg/kubelet/certificate/bootstrap.LoadClientCert`): when the
//! kubeconfig is missing or its client certificate has expired, the bootstrap kubeconfig's credential
//! asks for a certificate and the kubelet writes a kubeconfig that uses it.

use std::path::Path;

use super::csr;
use super::store::{self, CertStore};

/// Makes sure `kubeconfig` holds a usable client certificate, requesting one through
/// `bootstrap_kubeconfig` if not. Returns whether a new certificate was requested.
pub async fn load_or_request(
    kubeconfig: &Path,
    bootstrap_kubeconfig: &Path,
    cert_dir: &Path,
    node_name: &str,
) -> Result<bool, String> {
    if still_valid(kubeconfig) {
        return Ok(false);
    }
    let bootstrap = kube::config::Kubeconfig::read_from(bootstrap_kubeconfig).map_err(|e| {
        format!(
            "cannot read the bootstrap kubeconfig {}: {e}",
            bootstrap_kubeconfig.display()
        )
    })?;
    let client = client::kubeconfig::client_from_file(bootstrap_kubeconfig).await?;
    tracing::info!(
        node = node_name,
        "requesting a client certificate with the bootstrap credential"
    );
    let pair = csr::request_certificate(&client, node_name, "node-csr-", None, csr::DEFAULT_WAIT)
        .await
        .map_err(|e| e.to_string())?;
    let store = CertStore::new(cert_dir);
    let current = store.update(&pair).map_err(|e| e.to_string())?;
    store::write_kubeconfig(kubeconfig, &bootstrap, &current).map_err(|e| e.to_string())?;
    Ok(true)
}

/// Whether the kubeconfig exists and every client certificate it names parses and has not expired
/// (upstream `isClientConfigStillValid`). A kubeconfig with another kind of credential is kept.
fn still_valid(kubeconfig: &Path) -> bool {
    let Ok(config) = kube::config::Kubeconfig::read_from(kubeconfig) else {
        return false;
    };
    let now = jiff::Timestamp::now().as_second();
    config
        .auth_infos
        .iter()
        .filter_map(|a| a.auth_info.as_ref())
        .all(|auth| {
            let pem = match (&auth.client_certificate, &auth.client_certificate_data) {
                (Some(path), _) => std::fs::read_to_string(path).ok(),
                (None, Some(data)) => base64_decode(data),
                (None, None) => return true,
            };
            pem.as_deref()
                .and_then(store::validity)
                .is_some_and(|v| v.not_before <= now && now < v.not_after)
        })
}

fn base64_decode(data: &str) -> Option<String> {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .ok()?;
    String::from_utf8(bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_or_certless_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kubelet.kubeconfig");
        assert!(!still_valid(&path), "missing");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n\
             users: [{name: u, user: {client-certificate: /nonexistent.pem, client-key: /nonexistent.pem}}]\n\
             contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
        )
        .unwrap();
        assert!(!still_valid(&path), "its certificate file is gone");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n\
             users: [{name: u, user: {token: abc}}]\n\
             contexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n",
        )
        .unwrap();
        assert!(still_valid(&path), "a token kubeconfig is kept");
    }
}
