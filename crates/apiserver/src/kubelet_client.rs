//! How the API server reaches kubelets (upstream `pkg/kubelet/client`): the node's address by
//! `--kubelet-preferred-address-types`, the port from `status.daemonEndpoints.kubeletEndpoint.port`,
//! HTTPS with the API server's kubelet client certificate, and the kubelet's serving certificate
//! verified against `--kubelet-certificate-authority` when one is given (not verified otherwise, as
//! upstream).
//!
//! Differences: the default order of address types prefers `InternalIP` (as k3s does; upstream puts
//! `Hostname` first), because rkube's nodes run where host names rarely resolve.

use std::path::PathBuf;
use std::sync::Arc;

use apimachinery::status::{ApiError, Qualified};
use httpstream::proxy::{Backend, Scheme};
use serde_json::Value;

/// The kubelet's port when the node does not say (upstream `ports.KubeletPort`).
pub const DEFAULT_KUBELET_PORT: u16 = 10250;

/// Address types, most preferred first.
pub const DEFAULT_PREFERRED_ADDRESS_TYPES: &[&str] = &[
    "InternalIP",
    "Hostname",
    "InternalDNS",
    "ExternalDNS",
    "ExternalIP",
];

/// `--kubelet-*` options.
#[derive(Clone, Debug, Default)]
pub struct KubeletClientOptions {
    /// PEM files of the client certificate and key; the generated `apiserver-kubelet-client`
    /// credential when unset.
    pub client_certificate: Option<PathBuf>,
    pub client_key: Option<PathBuf>,
    /// PEM bundle that kubelet serving certificates must chain to; unset: not verified.
    pub certificate_authority: Option<PathBuf>,
    /// Empty: [`DEFAULT_PREFERRED_ADDRESS_TYPES`].
    pub preferred_address_types: Vec<String>,
    /// Dial kubelets from inside this network namespace (`/run/netns/NAME`): the one joining the
    /// nodes of `rkube server --nodes N` (no upstream counterpart).
    pub netns: Option<PathBuf>,
}

/// The API server's client for kubelets.
pub struct KubeletClient {
    verified: Arc<rustls::ClientConfig>,
    insecure: Arc<rustls::ClientConfig>,
    preferred: Vec<String>,
    netns: Option<PathBuf>,
}

/// Where one node's kubelet listens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectionInfo {
    pub host: String,
    pub port: u16,
}

impl KubeletClient {
    /// Builds the TLS settings from the options, falling back to `default_client` (certificate and key
    /// PEM) for the client credential.
    pub fn new(
        options: &KubeletClientOptions,
        default_client: (&str, &str),
    ) -> Result<KubeletClient, String> {
        let read =
            |p: &PathBuf| std::fs::read(p).map_err(|e| format!("cannot read {}: {e}", p.display()));
        let (cert, key) = match (&options.client_certificate, &options.client_key) {
            (Some(c), Some(k)) => (read(c)?, read(k)?),
            (None, None) => (
                default_client.0.as_bytes().to_vec(),
                default_client.1.as_bytes().to_vec(),
            ),
            _ => {
                return Err(
                    "--kubelet-client-certificate and --kubelet-client-key go together".into(),
                )
            }
        };
        let ca = options
            .certificate_authority
            .as_ref()
            .map(read)
            .transpose()?;
        let verified = httpstream::proxy::client_tls(ca.as_deref(), Some((&cert, &key)))
            .map_err(|e| format!("kubelet client TLS: {e}"))?;
        let insecure = httpstream::proxy::client_tls(None, Some((&cert, &key)))
            .map_err(|e| format!("kubelet client TLS: {e}"))?;
        let preferred = if options.preferred_address_types.is_empty() {
            DEFAULT_PREFERRED_ADDRESS_TYPES
                .iter()
                .map(|s| s.to_string())
                .collect()
        } else {
            options.preferred_address_types.clone()
        };
        for t in &preferred {
            if !DEFAULT_PREFERRED_ADDRESS_TYPES.contains(&t.as_str()) {
                return Err(format!(
                    "--kubelet-preferred-address-types: unknown address type {t:?} (known: {})",
                    DEFAULT_PREFERRED_ADDRESS_TYPES.join(", ")
                ));
            }
        }
        Ok(KubeletClient {
            verified: Arc::new(verified),
            insecure: Arc::new(insecure),
            preferred,
            netns: options.netns.clone(),
        })
    }

    /// The kubelet of the node named `node` (upstream `NodeConnectionInfoGetter.GetConnectionInfo`).
    pub async fn connection_info(
        &self,
        api: &crate::ApiServer,
        node: &str,
    ) -> Result<ConnectionInfo, ApiError> {
        let node_obj = crate::connect::get_object(api, "nodes", None, node).await?;
        let host = preferred_address(&node_obj, &self.preferred).map_err(|known| {
            ApiError::internal(format!(
                "no preferred addresses found; known addresses: {known}"
            ))
        })?;
        let port = node_obj
            .pointer("/status/daemonEndpoints/kubeletEndpoint/Port")
            .and_then(Value::as_i64)
            .filter(|p| (1..=65535).contains(p))
            .map_or(DEFAULT_KUBELET_PORT, |p| p as u16);
        Ok(ConnectionInfo { host, port })
    }

    /// The kubelet as a backend; `insecure_skip_verify` as `insecureSkipTLSVerifyBackend` of logs.
    pub fn backend(&self, info: &ConnectionInfo, insecure_skip_verify: bool) -> Backend {
        Backend {
            scheme: Scheme::Https,
            host: info.host.clone(),
            port: info.port,
            tls: Some(if insecure_skip_verify {
                self.insecure.clone()
            } else {
                self.verified.clone()
            }),
            netns: self.netns.clone(),
        }
    }
}

/// The node's address of the first preferred type that it has (upstream
/// `nodeutil.GetPreferredNodeAddress`, with its fallback to the `kubernetes.io/hostname` label for
/// `Hostname`). On failure, the known addresses as upstream prints them.
pub fn preferred_address(node: &Value, preferred: &[String]) -> Result<String, String> {
    let addresses: Vec<(&str, &str)> = node
        .pointer("/status/addresses")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .map(|x| {
                    (
                        x.get("type").and_then(Value::as_str).unwrap_or(""),
                        x.get("address").and_then(Value::as_str).unwrap_or(""),
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    for kind in preferred {
        if let Some((_, addr)) = addresses.iter().find(|(t, _)| t == kind) {
            return Ok(addr.to_string());
        }
        if kind == "Hostname" {
            let label = node
                .pointer("/metadata/labels/kubernetes.io~1hostname")
                .and_then(Value::as_str)
                .unwrap_or("");
            if !label.is_empty() {
                return Ok(label.to_string());
            }
        }
    }
    // Go prints the []NodeAddress with %v: [{InternalIP 10.0.0.1} {Hostname n1}].
    let known: Vec<String> = addresses
        .iter()
        .map(|(t, a)| format!("{{{t} {a}}}"))
        .collect();
    Err(format!("[{}]", known.join(" ")))
}

/// A node that does not exist, as upstream's node getter reports it.
pub fn node_not_found(name: &str) -> ApiError {
    ApiError::not_found(&Qualified::new("", "nodes"), name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn preferred_addresses() {
        let node = json!({
            "metadata": {"labels": {"kubernetes.io/hostname": "labelled"}},
            "status": {"addresses": [
                {"type": "Hostname", "address": "n1"},
                {"type": "InternalIP", "address": "10.0.0.1"},
            ]},
        });
        let types = |t: &[&str]| t.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        let cases = [
            (
                types(&["InternalIP", "Hostname"]),
                Ok("10.0.0.1".to_string()),
            ),
            (types(&["Hostname", "InternalIP"]), Ok("n1".to_string())),
            (
                types(&["ExternalIP"]),
                Err("[{Hostname n1} {InternalIP 10.0.0.1}]".to_string()),
            ),
        ];
        for (t, want) in cases {
            assert_eq!(preferred_address(&node, &t), want, "{t:?}");
        }
        let bare = json!({"metadata": {"labels": {"kubernetes.io/hostname": "labelled"}}});
        assert_eq!(
            preferred_address(&bare, &types(&["InternalIP", "Hostname"])),
            Ok("labelled".to_string())
        );
        assert_eq!(
            preferred_address(&json!({}), &types(&["InternalIP"])),
            Err("[]".into())
        );
    }
}
