//! Asking the API server for a client certificate (upstream client-go `util/certificate/csr`): a new
//! ECDSA P-256 key, a PKCS#10 request for `CN=system:node:<name>`, `O=system:nodes`, a
//! CertificateSigningRequest for the `kubernetes.io/kube-apiserver-client-kubelet` signer, then a
//! wait until it is issued, denied or failed.

use std::time::Duration;

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestSpec,
};
use k8s_openapi::ByteString;
use kube::api::{Api, ObjectMeta, PostParams};

/// The signer of kubelet client certificates.
pub const KUBELET_CLIENT_SIGNER: &str = "kubernetes.io/kube-apiserver-client-kubelet";

/// How long to wait for the signed certificate (upstream's bootstrap waits an hour).
pub const DEFAULT_WAIT: Duration = Duration::from_secs(3600);

/// A key and its signed certificate, both PEM.
#[derive(Clone, Debug)]
pub struct KeyAndCert {
    pub cert_pem: String,
    pub key_pem: String,
}

#[derive(Debug, thiserror::Error)]
pub enum CsrError {
    #[error("cannot make the certificate request: {0}")]
    Request(String),
    #[error("cannot create the CertificateSigningRequest: {0}")]
    Create(#[source] kube::Error),
    #[error("CertificateSigningRequest {name} was {reason}: {message}")]
    Refused {
        name: String,
        reason: String,
        message: String,
    },
    #[error("CertificateSigningRequest {0} was not signed in time")]
    Timeout(String),
}

/// Makes a key and a PKCS#10 request for the node's client certificate.
pub fn make_request(node_name: &str) -> Result<(rcgen::KeyPair, String), CsrError> {
    let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)
        .map_err(|e| CsrError::Request(e.to_string()))?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())
        .map_err(|e| CsrError::Request(e.to_string()))?;
    params.distinguished_name = rcgen::DistinguishedName::new();
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:nodes");
    params.distinguished_name.push(
        rcgen::DnType::CommonName,
        format!("system:node:{node_name}"),
    );
    let request = params
        .serialize_request(&key)
        .and_then(|r| r.pem())
        .map_err(|e| CsrError::Request(e.to_string()))?;
    Ok((key, request))
}

/// Requests a certificate through `client` and waits for it. The CSR is named from
/// `generate_name` (`node-csr-` when bootstrapping, `csr-` when rotating, as upstream's names start).
pub async fn request_certificate(
    client: &kube::Client,
    node_name: &str,
    generate_name: &str,
    expiration: Option<Duration>,
    wait: Duration,
) -> Result<KeyAndCert, CsrError> {
    let (key, request) = make_request(node_name)?;
    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let csr = CertificateSigningRequest {
        metadata: ObjectMeta {
            generate_name: Some(generate_name.to_string()),
            ..Default::default()
        },
        spec: CertificateSigningRequestSpec {
            request: ByteString(request.into_bytes()),
            signer_name: KUBELET_CLIENT_SIGNER.into(),
            usages: Some(vec!["digital signature".into(), "client auth".into()]),
            expiration_seconds: expiration.map(|d| d.as_secs() as i32),
            ..Default::default()
        },
        status: None,
    };
    let created = csrs
        .create(&PostParams::default(), &csr)
        .await
        .map_err(CsrError::Create)?;
    let name = created.metadata.name.unwrap_or_default();
    let deadline = tokio::time::Instant::now() + wait;
    // Polled rather than watched: the bootstrap credential may get and list CSRs but the request is
    // rare, and a poll survives the API server restarting under it.
    loop {
        if let Ok(csr) = csrs.get(&name).await {
            if let Some(outcome) = outcome(&csr) {
                return outcome.map(|cert_pem| KeyAndCert {
                    cert_pem,
                    key_pem: key.serialize_pem(),
                });
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(CsrError::Timeout(name));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The certificate of an issued CSR, the refusal of a denied or failed one, `None` while pending.
fn outcome(csr: &CertificateSigningRequest) -> Option<Result<String, CsrError>> {
    let status = csr.status.as_ref()?;
    for c in status.conditions.iter().flatten() {
        if (c.type_ == "Denied" || c.type_ == "Failed") && c.status == "True" {
            return Some(Err(CsrError::Refused {
                name: csr.metadata.name.clone().unwrap_or_default(),
                reason: format!(
                    "{} ({})",
                    c.type_.to_lowercase(),
                    c.reason.as_deref().unwrap_or("")
                ),
                message: c.message.clone().unwrap_or_default(),
            }));
        }
    }
    let cert = status.certificate.as_ref().filter(|c| !c.0.is_empty())?;
    Some(Ok(String::from_utf8_lossy(&cert.0).into_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_names_the_node() {
        let (_, pem) = make_request("n1").unwrap();
        let parsed = rcgen::CertificateSigningRequestParams::from_pem(&pem).unwrap();
        let dn: Vec<(rcgen::DnType, String)> = parsed
            .params
            .distinguished_name
            .iter()
            .map(|(t, v)| {
                let v = match v {
                    rcgen::DnValue::Utf8String(s) => s.clone(),
                    rcgen::DnValue::PrintableString(s) => s.to_string(),
                    other => format!("{other:?}"),
                };
                (t.clone(), v)
            })
            .collect();
        assert!(dn.contains(&(rcgen::DnType::CommonName, "system:node:n1".into())));
        assert!(dn.contains(&(rcgen::DnType::OrganizationName, "system:nodes".into())));
        assert!(parsed.params.subject_alt_names.is_empty());
    }
}
