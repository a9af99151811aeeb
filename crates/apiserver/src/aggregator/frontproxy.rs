//! The front-proxy credentials (kubeadm's `front-proxy-ca` and `front-proxy-client`, upstream's
//! `--requestheader-client-ca-file` and `--proxy-client-cert-file`): a CA of its own, apart from the
//! cluster CA so that no ordinary client certificate can pass for the proxy, and the client
//! certificate rkube presents to extension API servers. Both are made once in `<data-dir>/pki`.
//!
//! Extension servers learn how to trust the proxy from the `kube-system/extension-apiserver-
//! authentication` ConfigMap (upstream's `ClusterAuthenticationTrustController` writes it), which
//! [`publish`] keeps.

use std::path::Path;
use std::sync::Arc;

use rcgen::{CertificateParams, DnType, ExtendedKeyUsagePurpose, Issuer, KeyPair};
use serde_json::{json, Value};

use crate::ApiServer;

/// The common name of the proxy's client certificate, and the only name extension servers allow.
pub const CLIENT_NAME: &str = "front-proxy-client";
pub const USER_HEADER: &str = "X-Remote-User";
pub const UID_HEADER: &str = "X-Remote-Uid";
pub const GROUP_HEADER: &str = "X-Remote-Group";
pub const EXTRA_PREFIX: &str = "X-Remote-Extra-";
const CONFIGMAP: &str = "extension-apiserver-authentication";
const NAMESPACE: &str = "kube-system";

/// PEM text of the front-proxy CA and client credential.
#[derive(Clone)]
pub struct FrontProxy {
    pub ca_cert: String,
    pub client_cert: String,
    pub client_key: String,
}

impl FrontProxy {
    /// Loads `front-proxy-ca` and `front-proxy-client` from `<data_dir>/pki`, making them on first
    /// start.
    pub fn ensure(data_dir: &Path) -> Result<FrontProxy, String> {
        let dir = data_dir.join("pki");
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let (ca_cert, ca_key) = crate::certs::load_or_make(&dir, "front-proxy-ca", |_| {
            crate::certs::make_ca("front-proxy-ca")
        })?;
        let ca_key = KeyPair::from_pem(&ca_key).map_err(|e| format!("front-proxy-ca.key: {e}"))?;
        let issuer = Issuer::from_ca_cert_pem(&ca_cert, ca_key)
            .map_err(|e| format!("front-proxy-ca.crt: {e}"))?;
        let (client_cert, client_key) = crate::certs::load_or_make(&dir, CLIENT_NAME, |_| {
            let key = KeyPair::generate()?;
            let mut params = CertificateParams::new(Vec::<String>::new())?;
            params
                .distinguished_name
                .push(DnType::CommonName, CLIENT_NAME);
            params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
            params.not_after = rcgen::date_time_ymd(2036, 1, 1);
            let cert = params.signed_by(&key, &issuer)?;
            Ok((cert.pem(), key.serialize_pem()))
        })?;
        Ok(FrontProxy {
            ca_cert,
            client_cert,
            client_key,
        })
    }

    #[cfg(test)]
    pub(crate) fn for_tests() -> FrontProxy {
        let dir = std::env::temp_dir().join(format!("rkube-fp-{}", uuid::Uuid::new_v4()));
        let fp = FrontProxy::ensure(&dir).expect("front-proxy credentials");
        let _ = std::fs::remove_dir_all(&dir);
        fp
    }
}

/// The ConfigMap's data, as upstream writes it (lists as JSON arrays).
pub fn authentication_data(client_ca: &str, front_proxy: &FrontProxy) -> Value {
    let list = |items: &[&str]| serde_json::to_string(items).unwrap_or_default();
    json!({
        "client-ca-file": client_ca,
        "requestheader-client-ca-file": front_proxy.ca_cert,
        "requestheader-allowed-names": list(&[CLIENT_NAME]),
        "requestheader-username-headers": list(&[USER_HEADER]),
        "requestheader-uid-headers": list(&[UID_HEADER]),
        "requestheader-group-headers": list(&[GROUP_HEADER]),
        "requestheader-extra-headers-prefix": list(&[EXTRA_PREFIX]),
    })
}

/// Upstream's bootstrap Role that lets extension servers read the ConfigMap (bound by their
/// installers to their service accounts).
const READER_ROLE: &str = "extension-apiserver-authentication-reader";

/// Creates or corrects `kube-system/extension-apiserver-authentication`, and creates the Role
/// reading it when missing.
pub async fn publish(api: &Arc<ApiServer>, client_ca: &str) -> Result<(), String> {
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {
            "name": READER_ROLE,
            "namespace": NAMESPACE,
            "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
            "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
        },
        "rules": [{
            "apiGroups": [""],
            "resources": ["configmaps"],
            "resourceNames": [CONFIGMAP],
            "verbs": ["get", "list", "watch"],
        }],
    });
    let gvr = ("rbac.authorization.k8s.io", "v1", "roles");
    match crate::rest::create_internal(api, gvr, Some(NAMESPACE), role).await {
        Ok(()) => {}
        Err(e) if e.code == 409 => {}
        Err(e) => return Err(format!("cannot create role {READER_ROLE}: {}", e.message)),
    }
    let data = authentication_data(client_ca, &api.aggregator.front_proxy);
    let key = format!("/configmaps/{NAMESPACE}/{CONFIGMAP}");
    match api.store.get(&key).await.map_err(|e| e.to_string())? {
        None => {
            let obj = json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": CONFIGMAP, "namespace": NAMESPACE},
                "data": data,
            });
            match crate::rest::create_internal(api, ("", "v1", "configmaps"), Some(NAMESPACE), obj)
                .await
            {
                Ok(()) => Ok(()),
                Err(e) if e.code == 409 => Ok(()),
                Err(e) => Err(format!("cannot create {CONFIGMAP}: {}", e.message)),
            }
        }
        Some(kv) => {
            let mut current: Value =
                serde_json::from_slice(&kv.value).map_err(|e| e.to_string())?;
            if current["data"] == data {
                return Ok(());
            }
            current["data"] = data;
            api.store
                .update(
                    &key,
                    crate::objects::encode_for_storage(&current),
                    Some(kv.mod_revision),
                )
                .await
                .map(|_| ())
                .map_err(|e| format!("cannot update {CONFIGMAP}: {e}"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_are_kept_and_separate_from_the_cluster_ca() {
        let dir = tempfile::tempdir().unwrap();
        let first = FrontProxy::ensure(dir.path()).unwrap();
        let again = FrontProxy::ensure(dir.path()).unwrap();
        assert_eq!(first.client_cert, again.client_cert);
        assert!(dir.path().join("pki/front-proxy-ca.crt").exists());
        let der = rustls::pki_types::CertificateDer::from_pem_slice(first.client_cert.as_bytes())
            .unwrap();
        let (_, cert) = x509_parser::parse_x509_certificate(&der).unwrap();
        let cn = cert.subject().iter_common_name().next().unwrap();
        assert_eq!(cn.as_str().unwrap(), CLIENT_NAME);
        let data = authentication_data("CLUSTER-CA", &first);
        assert_eq!(
            data["requestheader-allowed-names"],
            "[\"front-proxy-client\"]"
        );
        assert_eq!(
            data["requestheader-username-headers"],
            "[\"X-Remote-User\"]"
        );
        assert_eq!(data["client-ca-file"], "CLUSTER-CA");
        assert_eq!(data["requestheader-client-ca-file"], first.ca_cert.as_str());
    }

    use rustls::pki_types::pem::PemObject;
}
