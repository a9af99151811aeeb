//! test/e2e/auth/certificates.go: "should support CSR API operations".

use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::ByteString;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchParams};
use kube::Client;
use serde_json::json;

use super::{annotation, code, discovery, from, get_json, meta, until_modified};

/// A CSR for `e2e.example.com` and a self-signed certificate for it, both PEM (cert.MakeCSR and
/// cert.GenerateSelfSignedCertKey in the e2e test).
fn csr_and_certificate() -> (String, String) {
    let key = rcgen::KeyPair::generate().expect("key");
    let mut params = rcgen::CertificateParams::new(vec!["e2e.example.com".to_string()]).unwrap();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "e2e.example.com");
    let csr = params.serialize_request(&key).unwrap().pem().unwrap();
    let cert = params.self_signed(&key).unwrap().pem();
    (csr, cert)
}

fn condition(type_: &str, reason: &str, message: &str) -> CertificateSigningRequestCondition {
    from(json!({"type": type_, "status": "True", "reason": reason, "message": message}))
}

fn condition_types(csr: &CertificateSigningRequest) -> Vec<String> {
    csr.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .map(|c| c.iter().map(|c| c.type_.clone()).collect())
        .unwrap_or_default()
}

pub async fn csr_api_operations(client: Client, unique: &str) {
    let (csr_pem, cert_pem) = csr_and_certificate();
    let signer = format!("example.com/e2e-{unique}");
    let template: CertificateSigningRequest = from(json!({
        "metadata": {"generateName": "e2e-example-csr-"},
        "spec": {
            "request": ByteString(csr_pem.into_bytes()),
            "signerName": signer,
            "expirationSeconds": 3600,
            "usages": ["digital signature", "key encipherment", "server auth"],
        }
    }));
    discovery(
        &client,
        "certificates.k8s.io",
        "v1",
        &[
            "certificatesigningrequests",
            "certificatesigningrequests/approval",
            "certificatesigningrequests/status",
        ],
    )
    .await;

    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let pp = PostParams::default();
    csrs.create(&pp, &template).await.expect("creating");
    csrs.create(&pp, &template).await.expect("creating");
    let created = csrs.create(&pp, &template).await.expect("creating");
    let name = created.metadata.name.clone().unwrap();

    let gotten = csrs.get(&name).await.expect("getting");
    assert_eq!(gotten.metadata.uid, created.metadata.uid);
    assert_eq!(gotten.spec.expiration_seconds, Some(3600));

    let by_signer = ListParams::default().fields(&format!("spec.signerName={signer}"));
    let list = csrs.list(&by_signer).await.expect("listing");
    assert_eq!(list.items.len(), 3, "filtered list should have 3 items");
    let rv = list.metadata.resource_version.clone().unwrap();
    let watch = csrs
        .watch(
            &WatchParams::default().fields(&format!("metadata.name={name}")),
            &rv,
        )
        .await
        .expect("watching");

    let patched = csrs
        .patch(
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"patched": "true"}}})),
        )
        .await
        .expect("patching");
    assert_eq!(
        annotation(&meta(&patched), "patched").as_deref(),
        Some("true")
    );
    let mut to_update = patched.clone();
    to_update
        .metadata
        .annotations
        .get_or_insert_default()
        .insert("updated".into(), "true".into());
    let updated = csrs
        .replace(&name, &pp, &to_update)
        .await
        .expect("updating");
    assert_eq!(
        annotation(&meta(&updated), "updated").as_deref(),
        Some("true")
    );
    until_modified(watch, "csr watch", |c: &CertificateSigningRequest| {
        annotation(&meta(c), "patched").as_deref() == Some("true")
    })
    .await;

    // /approval
    let path = format!("/apis/certificates.k8s.io/v1/certificatesigningrequests/{name}");
    let approval = get_json(&client, &format!("{path}/approval")).await;
    assert_eq!(approval["apiVersion"], "certificates.k8s.io/v1");
    assert_eq!(approval["kind"], "CertificateSigningRequest");
    assert_eq!(approval["metadata"]["uid"], json!(created.metadata.uid));

    let patched_approval = csrs
        .patch_subresource(
            "approval",
            &name,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {"patchedapproval": "true"}},
                "status": {"conditions": [{"type": "ApprovalPatch", "status": "True", "reason": "e2e"}]}})),
        )
        .await
        .expect("patching /approval");
    assert_eq!(
        condition_types(&patched_approval),
        ["ApprovalPatch"],
        "patched object should have the applied condition"
    );
    assert_eq!(
        annotation(&meta(&patched_approval), "patchedapproval").as_deref(),
        Some("true")
    );

    let mut approval_to_update = patched_approval.clone();
    approval_to_update
        .status
        .get_or_insert_default()
        .conditions
        .get_or_insert_default()
        .push(condition("Approved", "E2E", "Set from an e2e test"));
    let updated_approval = csrs
        .replace_subresource("approval", &name, &pp, &approval_to_update)
        .await
        .expect("updating /approval");
    assert_eq!(
        condition_types(&updated_approval),
        ["ApprovalPatch", "Approved"],
        "updated object should have the approved condition"
    );

    // /status
    let status = get_json(&client, &format!("{path}/status")).await;
    assert_eq!(status["apiVersion"], "certificates.k8s.io/v1");
    assert_eq!(status["kind"], "CertificateSigningRequest");
    assert_eq!(status["metadata"]["uid"], json!(created.metadata.uid));

    let certificate = ByteString(cert_pem.clone().into_bytes());
    let patched_status = csrs
        .patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {"patchedstatus": "true"}},
                "status": {"certificate": certificate}}),
            ),
        )
        .await
        .expect("patching /status");
    let got = patched_status
        .status
        .as_ref()
        .and_then(|s| s.certificate.clone());
    assert_eq!(
        got.map(|b| b.0),
        Some(cert_pem.into_bytes()),
        "patched object should have the applied certificate"
    );
    assert_eq!(
        annotation(&meta(&patched_status), "patchedstatus").as_deref(),
        Some("true")
    );

    let mut status_to_update = patched_status.clone();
    status_to_update
        .status
        .get_or_insert_default()
        .conditions
        .get_or_insert_default()
        .push(condition("StatusUpdate", "E2E", "Set from an e2e test"));
    let want = condition_types(&status_to_update);
    let updated_status = csrs
        .replace_status(&name, &pp, &status_to_update)
        .await
        .expect("updating /status");
    let got = condition_types(&updated_status);
    assert_eq!(
        got.len(),
        want.len(),
        "updated object should have the applied condition, got {got:?}"
    );
    assert_eq!(
        got.last().map(String::as_str),
        Some("StatusUpdate"),
        "{got:?}"
    );

    // delete, deletecollection
    csrs.delete(&name, &DeleteParams::default())
        .await
        .expect("deleting");
    assert_eq!(code(csrs.get(&name).await), 404);
    assert_eq!(
        csrs.list(&by_signer).await.expect("list").items.len(),
        2,
        "filtered list should have 2 items"
    );
    csrs.delete_collection(&DeleteParams::default(), &by_signer)
        .await
        .expect("deleting a collection");
    assert_eq!(
        csrs.list(&by_signer).await.expect("list").items.len(),
        0,
        "filtered list should have 0 items"
    );
}
