//! The certificate admission plugins (upstream `plugin/pkg/admission/certificates/{approval,signing,
//! subjectrestriction}`):
//! - CertificateApproval: approving or denying a CertificateSigningRequest
//!   (`certificatesigningrequests/approval`) needs `approve` on the synthetic resource
//!   `signers.certificates.k8s.io` named by the request's signerName, or by its domain (`<domain>/*`);
//! - CertificateSigning: changing `status.certificate` or the conditions through
//!   `certificatesigningrequests/status` needs `sign` on the signer likewise;
//! - CertificateSubjectRestriction: a request for the `kubernetes.io/kube-apiserver-client` signer may
//!   not ask for the `system:masters` group (an organization of its subject).

use apimachinery::status::ApiError;
use serde_json::Value;

use super::{Attributes, Operation};
use crate::authn::UserInfo;
use crate::authz;
use crate::ApiServer;

const GROUP: &str = "certificates.k8s.io";
const RESOURCE: &str = "certificatesigningrequests";
pub const KUBE_APISERVER_CLIENT: &str = "kubernetes.io/kube-apiserver-client";

fn is_csr(attrs: &Attributes<'_>, subresource: Option<&str>) -> bool {
    attrs.group == GROUP && attrs.resource == RESOURCE && attrs.subresource == subresource
}

fn signer_name(csr: &Value) -> &str {
    csr.pointer("/spec/signerName")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Whether `user` may `verb` the signer `signer_name` (upstream `IsAuthorizedForSignerName`):
/// asked first for the signer itself, then for every signer of its domain (`example.com/*`).
pub fn authorized_for_signer(
    authorize: &dyn Fn(&authz::Attributes<'_>) -> Result<String, String>,
    user: &UserInfo,
    verb: &str,
    signer_name: &str,
) -> bool {
    let ask = |name: &str| {
        authorize(&authz::Attributes {
            user,
            verb,
            resource_request: true,
            group: GROUP,
            version: "*",
            resource: "signers",
            subresource: "",
            namespace: "",
            name,
            path: "",
            field_selector: "",
        })
        .is_ok()
    };
    let domain = signer_name.split('/').next().unwrap_or("");
    ask(signer_name) || ask(&format!("{domain}/*"))
}

/// The plugin (upstream `CertificateApproval`): validating, on approval updates.
pub struct CertificateApproval;

#[async_trait::async_trait]
impl super::Plugin for CertificateApproval {
    fn name(&self) -> &'static str {
        "CertificateApproval"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        attrs.operation == Operation::Update && is_csr(attrs, Some("approval"))
    }

    async fn validate(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        check_approval(attrs, object, old, &|a| api.authorizer.authorize(a))
    }
}

/// CertificateApproval's decision. The signer is the stored request's: an approval that also
/// tries to change the signerName is judged by the signer it had.
pub fn check_approval(
    attrs: &Attributes<'_>,
    object: &Value,
    old: Option<&Value>,
    authorize: &dyn Fn(&authz::Attributes<'_>) -> Result<String, String>,
) -> Result<(), ApiError> {
    let Some(old) = old else {
        return Ok(());
    };
    let signer = signer_name(old);
    if authorized_for_signer(authorize, attrs.user, "approve", signer) {
        return Ok(());
    }
    Err(attrs.forbidden(
        object,
        &format!("user not permitted to approve requests with signerName {signer:?}"),
    ))
}

/// The plugin (upstream `CertificateSigning`): validating, on status updates.
pub struct CertificateSigning;

#[async_trait::async_trait]
impl super::Plugin for CertificateSigning {
    fn name(&self) -> &'static str {
        "CertificateSigning"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        attrs.operation == Operation::Update && is_csr(attrs, Some("status"))
    }

    async fn validate(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        check_signing(attrs, object, old, &|a| api.authorizer.authorize(a))
    }
}

/// CertificateSigning's decision: only a status write that changes the certificate or the
/// conditions is checked.
pub fn check_signing(
    attrs: &Attributes<'_>,
    object: &Value,
    old: Option<&Value>,
    authorize: &dyn Fn(&authz::Attributes<'_>) -> Result<String, String>,
) -> Result<(), ApiError> {
    let Some(old) = old else {
        return Ok(());
    };
    let field = |csr: &Value, f: &str| csr.pointer(&format!("/status/{f}")).cloned();
    let unchanged = field(object, "certificate") == field(old, "certificate")
        && field(object, "conditions") == field(old, "conditions");
    if unchanged {
        return Ok(());
    }
    let signer = signer_name(old);
    if authorized_for_signer(authorize, attrs.user, "sign", signer) {
        return Ok(());
    }
    Err(attrs.forbidden(
        object,
        &format!("user not permitted to sign requests with signerName {signer:?}"),
    ))
}

/// The plugin (upstream `CertificateSubjectRestriction`): validating, on creates.
pub struct CertificateSubjectRestriction;

#[async_trait::async_trait]
impl super::Plugin for CertificateSubjectRestriction {
    fn name(&self) -> &'static str {
        "CertificateSubjectRestriction"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        attrs.operation == Operation::Create && is_csr(attrs, None)
    }

    async fn validate(
        &self,
        _api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        check_subject(attrs, object)
    }
}

/// The organizations (groups) of the PEM certificate request in `spec.request` (base64 in JSON),
/// or upstream `ParseCSR`'s complaint.
pub fn requested_organizations(csr: &Value) -> Result<Vec<String>, String> {
    use base64::Engine;
    let encoded = csr
        .pointer("/spec/request")
        .and_then(Value::as_str)
        .unwrap_or("");
    let pem = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .map_err(|e| e.to_string())?;
    let (_, block) = x509_parser::pem::parse_x509_pem(&pem)
        .map_err(|_| "PEM block type must be CERTIFICATE REQUEST".to_string())?;
    if block.label != "CERTIFICATE REQUEST" {
        return Err("PEM block type must be CERTIFICATE REQUEST".into());
    }
    let (_, request) = <x509_parser::certification_request::X509CertificationRequest as
        x509_parser::prelude::FromDer<_>>::from_der(&block.contents)
    .map_err(|e| format!("x509: malformed certificate request: {e}"))?;
    Ok(request
        .certification_request_info
        .subject
        .iter_organization()
        .filter_map(|o| o.as_str().ok().map(str::to_string))
        .collect())
}

/// CertificateSubjectRestriction's decision.
pub fn check_subject(attrs: &Attributes<'_>, csr: &Value) -> Result<(), ApiError> {
    if signer_name(csr) != KUBE_APISERVER_CLIENT {
        return Ok(());
    }
    let organizations = requested_organizations(csr)
        .map_err(|e| attrs.forbidden(csr, &format!("failed to parse CSR: {e}")))?;
    if organizations.iter().any(|o| o == "system:masters") {
        return Err(attrs.forbidden(
            csr,
            &format!(
                "use of {KUBE_APISERVER_CLIENT} signer with system:masters group is not allowed"
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::Outcome;
    use super::*;
    use serde_json::json;

    fn alice() -> UserInfo {
        UserInfo {
            name: "alice".into(),
            uid: String::new(),
            groups: vec![],
        }
    }

    fn attrs<'a>(
        user: &'a UserInfo,
        outcome: &'a Outcome,
        sub: Option<&'a str>,
        operation: Operation,
    ) -> Attributes<'a> {
        Attributes {
            group: GROUP,
            version: "v1",
            kind: "CertificateSigningRequest",
            resource: RESOURCE,
            subresource: sub,
            namespace: "",
            name: "csr-1",
            operation,
            dry_run: false,
            user,
            outcome,
        }
    }

    /// An authorizer allowing exactly `verb signers/<name>` for each `(verb, name)` in `allowed`.
    fn allowing(
        allowed: &'static [(&'static str, &'static str)],
    ) -> impl Fn(&authz::Attributes<'_>) -> Result<String, String> {
        move |a| {
            let ok = a.group == GROUP
                && a.resource == "signers"
                && allowed.iter().any(|(v, n)| *v == a.verb && *n == a.name);
            if ok {
                Ok(String::new())
            } else {
                Err(String::new())
            }
        }
    }

    fn csr(signer: &str, organizations: &[&str]) -> Value {
        assert!(organizations.len() <= 1, "rcgen keeps one organization");
        use base64::Engine;
        let key = rcgen::KeyPair::generate().expect("key");
        let mut params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "alice");
        for o in organizations {
            params
                .distinguished_name
                .push(rcgen::DnType::OrganizationName, *o);
        }
        let pem = params
            .serialize_request(&key)
            .expect("csr")
            .pem()
            .expect("pem");
        json!({"metadata": {"name": "csr-1"}, "spec": {
            "signerName": signer,
            "request": base64::engine::general_purpose::STANDARD.encode(pem),
            "usages": ["client auth"]}})
    }

    #[test]
    fn approving_needs_approve_on_the_signer_or_its_domain() {
        let (user, outcome) = (alice(), Outcome::default());
        let a = attrs(&user, &outcome, Some("approval"), Operation::Update);
        let old = json!({"metadata": {"name": "csr-1"}, "spec": {"signerName": "example.com/foo"}});
        let mut new = old.clone();
        new["status"] = json!({"conditions": [{"type": "Approved", "status": "True"}]});

        let err = check_approval(&a, &new, Some(&old), &allowing(&[])).unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            "certificatesigningrequests.certificates.k8s.io \"csr-1\" is forbidden: user not permitted to approve requests with signerName \"example.com/foo\""
        );
        assert!(check_approval(
            &a,
            &new,
            Some(&old),
            &allowing(&[("approve", "example.com/foo")])
        )
        .is_ok());
        assert!(check_approval(
            &a,
            &new,
            Some(&old),
            &allowing(&[("approve", "example.com/*")])
        )
        .is_ok());
        // `sign` is not `approve`; another signer's grant does not count.
        assert!(check_approval(
            &a,
            &new,
            Some(&old),
            &allowing(&[("sign", "example.com/foo")])
        )
        .is_err());
        assert!(check_approval(
            &a,
            &new,
            Some(&old),
            &allowing(&[("approve", "other.com/*")])
        )
        .is_err());

        // The stored signer decides, not one the approval tries to write.
        new["spec"]["signerName"] = json!("other.com/x");
        assert!(check_approval(
            &a,
            &new,
            Some(&old),
            &allowing(&[("approve", "other.com/x")])
        )
        .is_err());
    }

    #[test]
    fn signing_needs_sign_when_the_certificate_or_conditions_change() {
        let (user, outcome) = (alice(), Outcome::default());
        let a = attrs(&user, &outcome, Some("status"), Operation::Update);
        let old = json!({"metadata": {"name": "csr-1"}, "spec": {"signerName": "example.com/foo"},
                         "status": {"conditions": [{"type": "Approved", "status": "True"}]}});
        let mut new = old.clone();
        new["status"]["certificate"] = json!("Y2VydA==");
        let err = check_signing(&a, &new, Some(&old), &allowing(&[])).unwrap_err();
        assert_eq!(
            err.message,
            "certificatesigningrequests.certificates.k8s.io \"csr-1\" is forbidden: user not permitted to sign requests with signerName \"example.com/foo\""
        );
        assert!(check_signing(
            &a,
            &new,
            Some(&old),
            &allowing(&[("sign", "example.com/*")])
        )
        .is_ok());
        // Nothing the signer owns changed: no check.
        let mut labelled = old.clone();
        labelled["metadata"]["labels"] = json!({"a": "b"});
        assert!(check_signing(&a, &labelled, Some(&old), &allowing(&[])).is_ok());
    }

    #[test]
    fn the_apiserver_client_signer_may_not_issue_system_masters() {
        let (user, outcome) = (alice(), Outcome::default());
        let a = attrs(&user, &outcome, None, Operation::Create);
        // (rcgen keeps one value per attribute type, so one organization each.)
        let masters = csr(KUBE_APISERVER_CLIENT, &["system:masters"]);
        assert_eq!(
            requested_organizations(&masters).unwrap(),
            ["system:masters"]
        );
        let err = check_subject(&a, &masters).unwrap_err();
        assert_eq!(
            err.message,
            "certificatesigningrequests.certificates.k8s.io \"csr-1\" is forbidden: use of kubernetes.io/kube-apiserver-client signer with system:masters group is not allowed"
        );
        assert!(check_subject(&a, &csr(KUBE_APISERVER_CLIENT, &["dev"])).is_ok());
        // Other signers may carry any subject.
        assert!(check_subject(&a, &csr("example.com/foo", &["system:masters"])).is_ok());
        // A request that is not a CSR.
        let mut bad = csr(KUBE_APISERVER_CLIENT, &[]);
        bad["spec"]["request"] = json!("bm90IHBlbQ==");
        let err = check_subject(&a, &bad).unwrap_err();
        assert!(
            err.message.contains("failed to parse CSR: "),
            "{}",
            err.message
        );
    }
}
