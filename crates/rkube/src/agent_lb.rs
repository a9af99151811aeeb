//! `--server` of the components that talk to the API (kubelet, proxy, controller manager,
//! scheduler, sim): one or several API server URLs overriding the kubeconfig's. With several, the
//! process runs one client-side load balancer ([`client::loadbalancer`], k3s's agent load
//! balancer) on a loopback port and every client of the process goes through it, so the component
//! keeps working when its API server dies.

use std::path::Path;

use client::loadbalancer::{readyz_check, server_addresses, LoadBalancer, Options};
use tokio::sync::OnceCell;

#[derive(clap::Args, Clone, Debug, Default)]
pub struct ServerFlags {
    /// API server URLs (`https://host:port`), comma-separated, overriding the kubeconfig's server
    /// (its credentials and CA still apply). With more than one, a load balancer on a loopback port
    /// forwards to the last server that answered and fails over to the others; the servers'
    /// certificates must then carry 127.0.0.1 (rkube's do).
    #[arg(long = "server", value_delimiter = ',')]
    pub servers: Vec<String>,
}

/// The process's balancer: started by the first client asking for several servers.
static BALANCER: OnceCell<LoadBalancer> = OnceCell::const_new();

/// The URL clients of this process use for `servers`: the only one, or the balancer's.
async fn cluster_url(servers: &[String], config: &kube::Config) -> Result<String, String> {
    let addrs = server_addresses(servers).map_err(|e| format!("--server: {e}"))?;
    if let [only] = servers {
        return Ok(only.trim().trim_end_matches('/').to_string());
    }
    let lb = BALANCER
        .get_or_try_init(|| async {
            let options = Options {
                health_check: Some(readyz_check(config)),
                ..Options::default()
            };
            let lb = LoadBalancer::start(addrs.clone(), options)
                .await
                .map_err(|e| format!("cannot start the API server load balancer: {e}"))?;
            eprintln!(
                "rkube: API server load balancer on {} for {}",
                lb.local_addr(),
                addrs.join(",")
            );
            Ok::<_, String>(lb)
        })
        .await?;
    if lb.servers() != addrs {
        return Err("--server: one process balances one list of API servers".into());
    }
    Ok(lb.url())
}

/// A client for the cluster of `kubeconfig` (else $KUBECONFIG, ~/.kube/config or in-cluster), sent
/// to `flags.servers` when given.
pub async fn cluster_client(
    kubeconfig: Option<&Path>,
    flags: &ServerFlags,
) -> Result<kube::Client, String> {
    if flags.servers.is_empty() {
        return crate::cluster_client(kubeconfig).await;
    }
    let mut config = match kubeconfig {
        Some(path) => client::kubeconfig::config_from_file(path).await?,
        None => {
            let mut config = kube::Config::infer()
                .await
                .map_err(|e| format!("no cluster: {e}"))?;
            config.default_retry = false;
            config
        }
    };
    let url = cluster_url(&flags.servers, &config).await?;
    config.cluster_url = url.parse().map_err(|e| format!("--server {url:?}: {e}"))?;
    client::transport::client_from_config(&config).map_err(|e| format!("--server {url}: {e}"))
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn one_server_is_used_as_is_several_go_through_one_balancer() {
        let config = kube::Config::new("https://127.0.0.1:1".parse().unwrap());
        let cluster_url = |servers: Vec<String>| {
            let config = config.clone();
            async move { super::cluster_url(&servers, &config).await }
        };
        assert_eq!(
            cluster_url(vec!["https://10.0.0.1:6443/".into()])
                .await
                .unwrap(),
            "https://10.0.0.1:6443"
        );
        assert!(cluster_url(vec!["http://a:1".into()]).await.is_err());
        let two = vec![
            "https://127.0.0.1:1".to_string(),
            "https://127.0.0.2:1".into(),
        ];
        let url = cluster_url(two.clone()).await.unwrap();
        assert!(url.starts_with("https://127.0.0.1:"), "{url}");
        assert_eq!(cluster_url(two.clone()).await.unwrap(), url, "one balancer");
        let other = vec![
            "https://127.0.0.3:1".to_string(),
            "https://127.0.0.4:1".into(),
        ];
        assert!(cluster_url(other).await.is_err());
    }
}
