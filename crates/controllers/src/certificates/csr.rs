//! What the certificate controllers read from a CertificateSigningRequest: its approval conditions
//! (upstream `pkg/controller/certificates/certificate_controller_utils.go`), the PKCS#10 request of
//! `spec.request` parsed as Go's `x509.ParseCertificateRequest` reads it, and the per-signer checks of
//! upstream `pkg/apis/certificates/helpers.go` (`ValidateKubeletClientCSR`,
//! `ValidateKubeletServingCSR`) with their error texts, which end up in `Failed` conditions.

use std::collections::BTreeSet;
use std::net::IpAddr;

use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use x509_parser::certification_request::X509CertificationRequest;
use x509_parser::extensions::{GeneralName, ParsedExtension};
use x509_parser::prelude::FromDer;

pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";
pub const KUBE_APISERVER_CLIENT_KUBELET: &str = "kubernetes.io/kube-apiserver-client-kubelet";
pub const KUBELET_SERVING: &str = "kubernetes.io/kubelet-serving";
pub const LEGACY_UNKNOWN: &str = "kubernetes.io/legacy-unknown";

/// Whether the request carries a condition of `type_` (upstream `GetCertApprovalCondition` looks
/// at the type only; the API admits Approved/Denied only with status True).
fn has_condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == type_))
}

/// Upstream `IsCertificateRequestApproved`: Approved and not Denied.
pub fn is_approved(csr: &CertificateSigningRequest) -> bool {
    has_condition(csr, "Approved") && !has_condition(csr, "Denied")
}

/// Upstream `GetCertApprovalCondition`: either decision taken.
pub fn is_approved_or_denied(csr: &CertificateSigningRequest) -> bool {
    has_condition(csr, "Approved") || has_condition(csr, "Denied")
}

/// Upstream `HasTrueCondition`: a condition of `type_` whose status is True or empty.
pub fn has_true_condition(csr: &CertificateSigningRequest, type_: &str) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.type_ == type_ && (c.status.is_empty() || c.status == "True"))
        })
}

/// Whether `status.certificate` is set (upstream: the request is then left alone).
pub fn is_issued(csr: &CertificateSigningRequest) -> bool {
    csr.status
        .as_ref()
        .and_then(|s| s.certificate.as_ref())
        .is_some_and(|c| !c.0.is_empty())
}

pub fn signer_name(csr: &CertificateSigningRequest) -> &str {
    &csr.spec.signer_name
}

pub fn usages(csr: &CertificateSigningRequest) -> Vec<String> {
    csr.spec.usages.clone().unwrap_or_default()
}

/// The subject of a request as Go's `pkix.Name` keeps it: the attributes it knows, in its fields
/// (repeated ones in order; CommonName and SerialNumber: the last one), unknown ones dropped.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Subject {
    pub country: Vec<String>,
    pub organization: Vec<String>,
    pub organizational_unit: Vec<String>,
    pub locality: Vec<String>,
    pub province: Vec<String>,
    pub street_address: Vec<String>,
    pub postal_code: Vec<String>,
    pub serial_number: String,
    pub common_name: String,
}

impl Subject {
    pub fn is_empty(&self) -> bool {
        *self == Subject::default()
    }
}

/// A parsed, signature-checked certificate request.
#[derive(Clone, Debug)]
pub struct Request {
    pub subject: Subject,
    pub dns_names: Vec<String>,
    pub email_addresses: Vec<String>,
    pub ip_addresses: Vec<IpAddr>,
    pub uris: Vec<String>,
    /// The SubjectPublicKeyInfo as sent (DER), copied into the certificate.
    pub public_key_info: Vec<u8>,
}

/// Parses `spec.request` (upstream `ParseCSR` and the signature check of `authority.Sign`). The
/// PEM's first block must be a `CERTIFICATE REQUEST`.
pub fn parse(pem: &[u8]) -> Result<Request, String> {
    let block = match x509_parser::pem::parse_x509_pem(pem) {
        Ok((_, block)) if block.label == "CERTIFICATE REQUEST" => block,
        _ => return Err("PEM block type must be CERTIFICATE REQUEST".into()),
    };
    let (_, req) = X509CertificationRequest::from_der(&block.contents)
        .map_err(|e| format!("x509: malformed certificate request: {e}"))?;
    req.verify_signature()
        .map_err(|e| format!("unable to verify certificate request signature: {e}"))?;
    let info = &req.certification_request_info;
    let mut subject = Subject::default();
    for rdn in info.subject.iter() {
        for atv in rdn.iter() {
            // Go skips values that are not strings; so do we.
            let Ok(value) = atv.as_str() else { continue };
            let value = value.to_string();
            match atv.attr_type().to_id_string().as_str() {
                "2.5.4.6" => subject.country.push(value),
                "2.5.4.10" => subject.organization.push(value),
                "2.5.4.11" => subject.organizational_unit.push(value),
                "2.5.4.7" => subject.locality.push(value),
                "2.5.4.8" => subject.province.push(value),
                "2.5.4.9" => subject.street_address.push(value),
                "2.5.4.17" => subject.postal_code.push(value),
                "2.5.4.5" => subject.serial_number = value,
                "2.5.4.3" => subject.common_name = value,
                _ => {}
            }
        }
    }
    let mut out = Request {
        subject,
        dns_names: Vec::new(),
        email_addresses: Vec::new(),
        ip_addresses: Vec::new(),
        uris: Vec::new(),
        public_key_info: info.subject_pki.raw.to_vec(),
    };
    for ext in req.requested_extensions().into_iter().flatten() {
        let ParsedExtension::SubjectAlternativeName(san) = ext else {
            continue;
        };
        for name in &san.general_names {
            match name {
                GeneralName::DNSName(n) => out.dns_names.push(n.to_string()),
                GeneralName::RFC822Name(n) => out.email_addresses.push(n.to_string()),
                GeneralName::URI(n) => out.uris.push(n.to_string()),
                GeneralName::IPAddress(ip) => out.ip_addresses.push(parse_ip(ip)?),
                // Go keeps no other kinds of names.
                _ => {}
            }
        }
    }
    Ok(out)
}

fn parse_ip(bytes: &[u8]) -> Result<IpAddr, String> {
    if let Ok(v4) = <[u8; 4]>::try_from(bytes) {
        return Ok(IpAddr::from(v4));
    }
    if let Ok(v6) = <[u8; 16]>::try_from(bytes) {
        return Ok(IpAddr::from(v6));
    }
    Err(format!(
        "x509: cannot parse IP address of length {}",
        bytes.len()
    ))
}

const ERR_ORGANIZATION_NOT_SYSTEM_NODES: &str = "subject organization is not system:nodes";
const ERR_COMMON_NAME_NOT_SYSTEM_NODE: &str =
    "subject common name does not begin with 'system:node:'";
const ERR_DNS_OR_IP_SAN_REQUIRED: &str = "DNS or IP subjectAltName is required";
const ERR_DNS_SAN_NOT_ALLOWED: &str = "DNS subjectAltNames are not allowed";
const ERR_EMAIL_SAN_NOT_ALLOWED: &str = "email subjectAltNames are not allowed";
const ERR_IP_SAN_NOT_ALLOWED: &str = "IP subjectAltNames are not allowed";
const ERR_URI_SAN_NOT_ALLOWED: &str = "URI subjectAltNames are not allowed";

fn usage_set(usages: &[String]) -> BTreeSet<&str> {
    usages.iter().map(String::as_str).collect()
}

/// Whether the usages are exactly `with_rsa` or exactly `without_rsa` (as sets); else upstream's
/// message listing the RSA set, sorted as Go's `sets.String.List`.
fn check_usages(usages: &[String], with_rsa: &[&str], without_rsa: &[&str]) -> Result<(), String> {
    let set = usage_set(usages);
    let a: BTreeSet<&str> = with_rsa.iter().copied().collect();
    let b: BTreeSet<&str> = without_rsa.iter().copied().collect();
    if set == a || set == b {
        return Ok(());
    }
    let list: Vec<&str> = a.into_iter().collect();
    Err(format!("usages did not match [{}]", list.join(" ")))
}

/// Upstream `ValidateKubeletClientCSR`: `O=system:nodes` alone, no SANs, CN `system:node:...`,
/// usages client auth + digital signature (+ key encipherment).
pub fn validate_kubelet_client(req: &Request, usages: &[String]) -> Result<(), String> {
    if req.subject.organization != ["system:nodes"] {
        return Err(ERR_ORGANIZATION_NOT_SYSTEM_NODES.into());
    }
    if !req.dns_names.is_empty() {
        return Err(ERR_DNS_SAN_NOT_ALLOWED.into());
    }
    if !req.email_addresses.is_empty() {
        return Err(ERR_EMAIL_SAN_NOT_ALLOWED.into());
    }
    if !req.ip_addresses.is_empty() {
        return Err(ERR_IP_SAN_NOT_ALLOWED.into());
    }
    if !req.uris.is_empty() {
        return Err(ERR_URI_SAN_NOT_ALLOWED.into());
    }
    if !req.subject.common_name.starts_with("system:node:") {
        return Err(ERR_COMMON_NAME_NOT_SYSTEM_NODE.into());
    }
    check_usages(
        usages,
        &["digital signature", "key encipherment", "client auth"],
        &["digital signature", "client auth"],
    )
}

/// Upstream `ValidateKubeletServingCSR`: `O=system:nodes` alone, at least one DNS or IP SAN and no
/// other kind, usages server auth + digital signature (+ key encipherment), CN `system:node:...`.
pub fn validate_kubelet_serving(req: &Request, usages: &[String]) -> Result<(), String> {
    if req.subject.organization != ["system:nodes"] {
        return Err(ERR_ORGANIZATION_NOT_SYSTEM_NODES.into());
    }
    if req.dns_names.is_empty() && req.ip_addresses.is_empty() {
        return Err(ERR_DNS_OR_IP_SAN_REQUIRED.into());
    }
    if !req.email_addresses.is_empty() {
        return Err(ERR_EMAIL_SAN_NOT_ALLOWED.into());
    }
    if !req.uris.is_empty() {
        return Err(ERR_URI_SAN_NOT_ALLOWED.into());
    }
    check_usages(
        usages,
        &["digital signature", "key encipherment", "server auth"],
        &["digital signature", "server auth"],
    )?;
    if !req.subject.common_name.starts_with("system:node:") {
        return Err(ERR_COMMON_NAME_NOT_SYSTEM_NODE.into());
    }
    Ok(())
}

/// Upstream `validAPIServerClientUsages`: client auth required, digital signature and key
/// encipherment allowed, nothing else.
pub fn validate_apiserver_client_usages(usages: &[String]) -> Result<(), String> {
    let mut client_auth = false;
    for u in usages {
        match u.as_str() {
            "digital signature" | "key encipherment" => {}
            "client auth" => client_auth = true,
            other => return Err(format!("invalid usage for client certificate: {other}")),
        }
    }
    if !client_auth {
        return Err("missing required usage for client certificate: client auth".into());
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use rcgen::{CertificateParams, DnType, KeyPair, SanType};

    /// A PEM CSR with the given subject and SANs (what the tests of all three controllers use).
    pub(crate) fn csr_pem(cn: &str, orgs: &[&str], sans: &[SanType]) -> String {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, cn);
        for o in orgs {
            // rcgen keeps one value per attribute type: a second O needs its raw OID.
            if params
                .distinguished_name
                .get(&DnType::OrganizationName)
                .is_none()
            {
                params.distinguished_name.push(DnType::OrganizationName, *o);
            } else {
                params
                    .distinguished_name
                    .push(DnType::CustomDnType(vec![2, 5, 4, 10]), *o);
            }
        }
        params.subject_alt_names = sans.to_vec();
        params.serialize_request(&key).unwrap().pem().unwrap()
    }

    fn u(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn parses_subject_and_sans_and_refuses_garbage() {
        let pem = csr_pem(
            "system:node:n1",
            &["system:nodes", "other"],
            &[
                SanType::DnsName("n1.example".try_into().unwrap()),
                SanType::IpAddress("10.0.0.1".parse().unwrap()),
            ],
        );
        let req = parse(pem.as_bytes()).unwrap();
        assert_eq!(req.subject.common_name, "system:node:n1");
        assert_eq!(req.subject.organization, ["system:nodes", "other"]);
        assert_eq!(req.dns_names, ["n1.example"]);
        assert_eq!(req.ip_addresses, ["10.0.0.1".parse::<IpAddr>().unwrap()]);

        assert_eq!(
            parse(b"junk").unwrap_err(),
            "PEM block type must be CERTIFICATE REQUEST"
        );
        let cert_label = pem.replace("CERTIFICATE REQUEST", "CERTIFICATE");
        assert!(parse(cert_label.as_bytes()).is_err());
        let truncated =
            "-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n";
        assert!(parse(truncated.as_bytes()).is_err());
    }

    #[test]
    fn a_tampered_request_fails_its_signature_check() {
        let pem = csr_pem("jane", &[], &[]);
        let block = x509_parser::pem::parse_x509_pem(pem.as_bytes()).unwrap().1;
        let mut der = block.contents.clone();
        // Flip a byte inside the subject's CN value ("jane").
        let at = der.windows(4).position(|w| w == b"jane").unwrap();
        der[at] = b'J';
        use base64::Engine;
        let b64 = base64::engine::general_purpose::STANDARD.encode(&der);
        let tampered = format!(
            "-----BEGIN CERTIFICATE REQUEST-----\n{b64}\n-----END CERTIFICATE REQUEST-----\n"
        );
        let err = parse(tampered.as_bytes()).unwrap_err();
        assert!(err.starts_with("unable to verify"), "{err}");
    }

    #[test]
    fn kubelet_client_checks_as_upstream() {
        let ok = parse(csr_pem("system:node:n1", &["system:nodes"], &[]).as_bytes()).unwrap();
        let rsa = u(&["digital signature", "key encipherment", "client auth"]);
        let ec = u(&["client auth", "digital signature"]);
        assert_eq!(validate_kubelet_client(&ok, &rsa), Ok(()));
        assert_eq!(validate_kubelet_client(&ok, &ec), Ok(()));
        assert_eq!(
            validate_kubelet_client(&ok, &u(&["client auth"])).unwrap_err(),
            "usages did not match [client auth digital signature key encipherment]"
        );
        let two_orgs =
            parse(csr_pem("system:node:n1", &["system:nodes", "system:masters"], &[]).as_bytes())
                .unwrap();
        assert_eq!(
            validate_kubelet_client(&two_orgs, &ec).unwrap_err(),
            ERR_ORGANIZATION_NOT_SYSTEM_NODES
        );
        let bad_cn = parse(csr_pem("jane", &["system:nodes"], &[]).as_bytes()).unwrap();
        assert_eq!(
            validate_kubelet_client(&bad_cn, &ec).unwrap_err(),
            ERR_COMMON_NAME_NOT_SYSTEM_NODE
        );
        let dns = parse(
            csr_pem(
                "system:node:n1",
                &["system:nodes"],
                &[SanType::DnsName("x".try_into().unwrap())],
            )
            .as_bytes(),
        )
        .unwrap();
        assert_eq!(
            validate_kubelet_client(&dns, &ec).unwrap_err(),
            ERR_DNS_SAN_NOT_ALLOWED
        );
    }

    #[test]
    fn kubelet_serving_and_apiserver_client_checks_as_upstream() {
        let ip = SanType::IpAddress("10.0.0.1".parse().unwrap());
        let ok = parse(csr_pem("system:node:n1", &["system:nodes"], &[ip]).as_bytes()).unwrap();
        assert_eq!(
            validate_kubelet_serving(&ok, &u(&["server auth", "digital signature"])),
            Ok(())
        );
        assert_eq!(
            validate_kubelet_serving(&ok, &u(&["client auth", "digital signature"])).unwrap_err(),
            "usages did not match [digital signature key encipherment server auth]"
        );
        let no_san = parse(csr_pem("system:node:n1", &["system:nodes"], &[]).as_bytes()).unwrap();
        assert_eq!(
            validate_kubelet_serving(&no_san, &u(&["server auth", "digital signature"]))
                .unwrap_err(),
            ERR_DNS_OR_IP_SAN_REQUIRED
        );
        assert_eq!(
            validate_apiserver_client_usages(&u(&["client auth"])),
            Ok(())
        );
        assert_eq!(
            validate_apiserver_client_usages(&u(&["client auth", "server auth"])).unwrap_err(),
            "invalid usage for client certificate: server auth"
        );
        assert_eq!(
            validate_apiserver_client_usages(&u(&["digital signature"])).unwrap_err(),
            "missing required usage for client certificate: client auth"
        );
    }
}
