//! The CSR approving controller (upstream `pkg/controller/certificates/approver/sarapprove.go`,
//! kube-controller-manager's `certificatesigningrequest-approving-controller`): approves
//! `kubernetes.io/kube-apiserver-client-kubelet` requests for node client certificates when a
//! SubjectAccessReview says the requester may `create` `certificatesigningrequests/selfnodeclient`
//! (a node renewing its own certificate) or `certificatesigningrequests/nodeclient` (a bootstrap
//! credential asking for any node's). Kubelet serving certificates are not approved here, as
//! upstream: that is left to a cluster's own approver.

use std::sync::Arc;

use client::controller::{Controller, EnqueueHandler};
use client::informer::Store;
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use kube::api::PostParams;
use kube::Api;

use super::csr::{self, Request};

/// One kind of request the approver recognizes: the permission that approves it and the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Recognizer {
    pub subresource: &'static str,
    pub message: &'static str,
}

pub const SELF_NODE_CLIENT: Recognizer = Recognizer {
    subresource: "selfnodeclient",
    message: "Auto approving self kubelet client certificate after SubjectAccessReview.",
};

pub const NODE_CLIENT: Recognizer = Recognizer {
    subresource: "nodeclient",
    message: "Auto approving kubelet client certificate after SubjectAccessReview.",
};

/// Upstream `isNodeClientCert`: the kubelet client signer and a valid kubelet client request.
pub fn is_node_client_cert(csr: &CertificateSigningRequest, req: &Request) -> bool {
    csr::signer_name(csr) == csr::KUBE_APISERVER_CLIENT_KUBELET
        && csr::validate_kubelet_client(req, &csr::usages(csr)).is_ok()
}

/// Upstream `isSelfNodeClientCert`: a node client request by the node it names.
pub fn is_self_node_client_cert(csr: &CertificateSigningRequest, req: &Request) -> bool {
    csr.spec.username.as_deref() == Some(req.subject.common_name.as_str())
        && is_node_client_cert(csr, req)
}

/// Whether the approver looks at the request: no certificate and no decision yet.
pub fn wants(csr: &CertificateSigningRequest) -> bool {
    !csr::is_issued(csr) && !csr::is_approved_or_denied(csr)
}

/// The recognizers matching the request, in upstream's order (self first).
pub fn recognize(csr: &CertificateSigningRequest, req: &Request) -> Vec<Recognizer> {
    let mut out = Vec::new();
    if is_self_node_client_cert(csr, req) {
        out.push(SELF_NODE_CLIENT);
    }
    if is_node_client_cert(csr, req) {
        out.push(NODE_CLIENT);
    }
    out
}

/// The SubjectAccessReview for the requester of `csr` and `create` on the recognizer's subresource.
pub fn access_review(csr: &CertificateSigningRequest, r: Recognizer) -> SubjectAccessReview {
    SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: csr.spec.username.clone(),
            uid: csr.spec.uid.clone(),
            groups: csr.spec.groups.clone(),
            extra: csr.spec.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                group: Some("certificates.k8s.io".into()),
                resource: Some("certificatesigningrequests".into()),
                verb: Some("create".into()),
                subresource: Some(r.subresource.into()),
                version: Some("*".into()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// The request with upstream's approval condition appended.
pub fn with_approval(csr: &CertificateSigningRequest, r: Recognizer) -> CertificateSigningRequest {
    let mut out = csr.clone();
    out.status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: "Approved".into(),
            status: "True".into(),
            reason: Some("AutoApproved".into()),
            message: Some(r.message.into()),
            ..Default::default()
        });
    out
}

struct Ctx {
    client: kube::Client,
    csrs: Arc<Store<CertificateSigningRequest>>,
}

pub async fn run(c: &crate::ControllerContext) {
    let informer = c.factory.informer::<CertificateSigningRequest>();
    let queue = RateLimitingQueue::with_config(
        default_controller_rate_limiter::<String>(),
        QueueConfig::named("csrapproving"),
    );
    informer.add_event_handler(EnqueueHandler::new(queue.clone()));
    let ctx = Arc::new(Ctx {
        client: c.client.clone(),
        csrs: informer.store(),
    });
    c.factory.start();
    c.factory.wait_for_cache_sync().await;
    // Refused requests are retried with backoff (up to 1000 s) without limit, as upstream: the
    // requester may be granted the permission later, which no CSR event would tell.
    Controller::new("csrapproving", queue)
        .run(c.workers, move |key: String| {
            let ctx = ctx.clone();
            async move { sync(&ctx, &key).await }
        })
        .await;
}

async fn sync(ctx: &Ctx, name: &str) -> Result<(), String> {
    let Some(csr) = ctx.csrs.get(name) else {
        return Ok(());
    };
    if !wants(&csr) {
        return Ok(());
    }
    let req = csr::parse(&csr.spec.request.0)
        .map_err(|e| format!("unable to parse csr {name:?}: {e}"))?;
    let recognized = recognize(&csr, &req);
    let reviews: Api<SubjectAccessReview> = Api::all(ctx.client.clone());
    for r in &recognized {
        let review = reviews
            .create(&PostParams::default(), &access_review(&csr, *r))
            .await
            .map_err(|e| format!("subject access review for csr {name:?}: {e}"))?;
        if !review.status.is_some_and(|s| s.allowed) {
            continue;
        }
        let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
        return match api
            .replace_subresource(
                "approval",
                name,
                &PostParams::default(),
                &with_approval(&csr, *r),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(format!("error updating approval for csr: {e}")),
        };
    }
    if recognized.is_empty() {
        return Ok(());
    }
    let tried: Vec<&str> = recognized.iter().map(|r| r.subresource).collect();
    Err(format!(
        "recognized csr {name:?} as [{}] but subject access review was not approved",
        tried.join(" ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificates::csr::tests::csr_pem;
    use serde_json::json;

    fn csr_for(username: &str, signer: &str, usages: &[&str]) -> CertificateSigningRequest {
        serde_json::from_value(json!({
            "metadata": {"name": "c"},
            "spec": {"request": "", "signerName": signer, "usages": usages,
                     "username": username, "uid": "u1", "groups": ["system:bootstrappers"],
                     "extra": {"k": ["v"]}},
        }))
        .unwrap()
    }

    fn node_req(cn: &str, orgs: &[&str]) -> Request {
        csr::parse(csr_pem(cn, orgs, &[]).as_bytes()).unwrap()
    }

    const KUBELET: &str = csr::KUBE_APISERVER_CLIENT_KUBELET;
    const USAGES: &[&str] = &["digital signature", "client auth"];

    #[test]
    fn recognizes_node_client_requests_as_upstream() {
        let n1 = node_req("system:node:n1", &["system:nodes"]);
        let bootstrap = csr_for("system:bootstrap:abcdef", KUBELET, USAGES);
        assert_eq!(recognize(&bootstrap, &n1), [NODE_CLIENT]);
        let renewal = csr_for("system:node:n1", KUBELET, USAGES);
        assert_eq!(recognize(&renewal, &n1), [SELF_NODE_CLIENT, NODE_CLIENT]);
        // Another signer, other usages, another subject: nothing to approve.
        let serving = csr_for("system:node:n1", csr::KUBELET_SERVING, USAGES);
        assert!(recognize(&serving, &n1).is_empty());
        let server_usage = csr_for(
            "system:node:n1",
            KUBELET,
            &["server auth", "digital signature"],
        );
        assert!(recognize(&server_usage, &n1).is_empty());
        let masters = node_req("system:node:n1", &["system:nodes", "system:masters"]);
        assert!(recognize(&bootstrap, &masters).is_empty());
        assert!(recognize(&bootstrap, &node_req("jane", &["system:nodes"])).is_empty());
    }

    #[test]
    fn review_and_approval_as_upstream() {
        let c = csr_for("system:node:n1", KUBELET, USAGES);
        let sar = access_review(&c, SELF_NODE_CLIENT);
        assert_eq!(sar.spec.user.as_deref(), Some("system:node:n1"));
        assert_eq!(sar.spec.uid.as_deref(), Some("u1"));
        assert_eq!(
            sar.spec.groups.as_deref(),
            Some(&["system:bootstrappers".to_string()][..])
        );
        assert_eq!(sar.spec.extra.as_ref().unwrap()["k"], ["v"]);
        let ra = sar.spec.resource_attributes.unwrap();
        assert_eq!(ra.group.as_deref(), Some("certificates.k8s.io"));
        assert_eq!(ra.resource.as_deref(), Some("certificatesigningrequests"));
        assert_eq!(ra.subresource.as_deref(), Some("selfnodeclient"));
        assert_eq!(ra.verb.as_deref(), Some("create"));

        assert!(wants(&c));
        let approved = with_approval(&c, NODE_CLIENT);
        let cond = &approved
            .status
            .as_ref()
            .unwrap()
            .conditions
            .as_ref()
            .unwrap()[0];
        assert_eq!(
            (cond.type_.as_str(), cond.status.as_str()),
            ("Approved", "True")
        );
        assert_eq!(cond.reason.as_deref(), Some("AutoApproved"));
        assert_eq!(
            cond.message.as_deref(),
            Some("Auto approving kubelet client certificate after SubjectAccessReview.")
        );
        assert!(!wants(&approved));
        let denied: CertificateSigningRequest = serde_json::from_value(json!({
            "metadata": {"name": "c"}, "spec": {"request": "", "signerName": KUBELET},
            "status": {"conditions": [{"type": "Denied", "status": "True"}]}}))
        .unwrap();
        assert!(!wants(&denied));
    }
}
