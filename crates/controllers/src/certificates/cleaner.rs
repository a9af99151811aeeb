//! The CSR cleaner (upstream `pkg/controller/certificates/cleaner`, kube-controller-manager's
//! `certificatesigningrequest-cleaner-controller`): every hour, deletes requests that are done with:
//! approved and issued, denied or failed for over an hour (by the condition's `lastUpdateTime`),
//! pending for over a day (by creation time), or issued with a certificate past its NotAfter.

use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::DeleteParams;
use kube::Api;
use x509_parser::prelude::FromDer;

use super::csr;

/// Upstream's constants.
pub const POLLING_INTERVAL: Duration = Duration::from_secs(3600);
const APPROVED_EXPIRATION: SignedDuration = SignedDuration::from_hours(1);
const DENIED_EXPIRATION: SignedDuration = SignedDuration::from_hours(1);
const PENDING_EXPIRATION: SignedDuration = SignedDuration::from_hours(24);

/// Upstream `isOlderThan`: a set time more than `d` before `now`.
fn older_than(t: Option<&Time>, d: SignedDuration, now: Timestamp) -> bool {
    t.is_some_and(|t| now.duration_since(t.0) > d)
}

/// The certificate's NotAfter has passed (upstream `isExpired`; an unreadable one has not).
fn certificate_expired(csr: &CertificateSigningRequest, now: Timestamp) -> bool {
    let Some(pem) = csr.status.as_ref().and_then(|s| s.certificate.as_ref()) else {
        return false;
    };
    let Ok((_, block)) = x509_parser::pem::parse_x509_pem(&pem.0) else {
        return false;
    };
    let Ok((_, cert)) = x509_parser::certificate::X509Certificate::from_der(&block.contents) else {
        return false;
    };
    now.as_second() > cert.validity().not_after.timestamp()
}

/// Why the request should be deleted, if it should (upstream `handle`'s checks, their log texts).
pub fn expired(csr: &CertificateSigningRequest, now: Timestamp) -> Option<&'static str> {
    let conditions = csr
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default();
    let issued = csr::is_issued(csr);
    for c in conditions {
        let updated = c.last_update_time.as_ref();
        match c.type_.as_str() {
            "Approved" if issued && older_than(updated, APPROVED_EXPIRATION, now) => {
                return Some(
                    "Cleaning CSR as it is more than approvedExpiration duration old and approved.",
                )
            }
            "Denied" if older_than(updated, DENIED_EXPIRATION, now) => {
                return Some(
                    "Cleaning CSR as it is more than deniedExpiration duration old and denied.",
                )
            }
            "Failed" if older_than(updated, DENIED_EXPIRATION, now) => {
                return Some(
                    "Cleaning CSR as it is more than deniedExpiration duration old and failed.",
                )
            }
            _ => {}
        }
    }
    // Without conditions, kubectl shows the request as Pending.
    if conditions.is_empty()
        && older_than(
            csr.metadata.creation_timestamp.as_ref(),
            PENDING_EXPIRATION,
            now,
        )
    {
        return Some(
            "Cleaning CSR as it is more than pendingExpiration duration old and unhandled.",
        );
    }
    if issued && conditions.iter().any(|c| c.type_ == "Approved") && certificate_expired(csr, now) {
        return Some("Cleaning CSR as the associated certificate is expired.");
    }
    None
}

pub async fn run(c: &crate::ControllerContext) {
    let informer = c.factory.informer::<CertificateSigningRequest>();
    let csrs = informer.store();
    c.factory.start();
    c.factory.wait_for_cache_sync().await;
    let api: Api<CertificateSigningRequest> = Api::all(c.client.clone());
    let mut tick = tokio::time::interval(POLLING_INTERVAL);
    loop {
        tick.tick().await;
        let now = Timestamp::now();
        for csr in csrs.list() {
            let Some(why) = expired(&csr, now) else {
                continue;
            };
            let name = csr.metadata.name.clone().unwrap_or_default();
            tracing::info!(csr = %name, "{why}");
            match api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => tracing::error!(csr = %name, "unable to delete CSR: {e}"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificates::authority::{tests::test_ca, Authority};
    use crate::certificates::csr::tests::csr_pem;
    use serde_json::json;

    fn csr_at(
        created: &str,
        conditions: serde_json::Value,
        cert: Option<&str>,
    ) -> CertificateSigningRequest {
        let mut v = json!({
            "metadata": {"name": "c", "creationTimestamp": created},
            "spec": {"request": "", "signerName": "example.com/s"},
            "status": {"conditions": conditions},
        });
        if let Some(pem) = cert {
            use base64::Engine;
            v["status"]["certificate"] =
                json!(base64::engine::general_purpose::STANDARD.encode(pem));
        }
        serde_json::from_value(v).unwrap()
    }

    fn ts(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    #[test]
    fn deadlines_as_upstream() {
        let now = ts("2026-06-02T12:00:00Z");
        let cond = |t: &str, at: &str| json!([{"type": t, "status": "True", "lastUpdateTime": at}]);
        // Pending: a day from creation.
        assert!(expired(&csr_at("2026-06-01T11:59:00Z", json!([]), None), now).is_some());
        assert!(expired(&csr_at("2026-06-01T12:01:00Z", json!([]), None), now).is_none());
        // Denied and failed: an hour from the condition.
        assert!(expired(
            &csr_at(
                "2026-06-02T10:00:00Z",
                cond("Denied", "2026-06-02T10:59:00Z"),
                None
            ),
            now
        )
        .is_some());
        assert!(expired(
            &csr_at(
                "2026-06-02T10:00:00Z",
                cond("Denied", "2026-06-02T11:01:00Z"),
                None
            ),
            now
        )
        .is_none());
        assert!(expired(
            &csr_at(
                "2026-06-02T10:00:00Z",
                cond("Failed", "2026-06-02T10:00:00Z"),
                None
            ),
            now
        )
        .is_some());
        // Approved: only once issued.
        let approved_long_ago = cond("Approved", "2026-06-02T10:00:00Z");
        assert!(expired(
            &csr_at("2026-06-02T10:00:00Z", approved_long_ago.clone(), None),
            now
        )
        .is_none());
        assert!(expired(
            &csr_at("2026-06-02T10:00:00Z", approved_long_ago, Some("x")),
            now
        )
        .is_some());
        // A condition without lastUpdateTime never ages.
        let no_time = json!([{"type": "Denied", "status": "True"}]);
        assert!(expired(&csr_at("2026-01-01T00:00:00Z", no_time, None), now).is_none());
    }

    #[test]
    fn an_issued_certificate_past_its_not_after_is_cleaned() {
        let (ca_cert, ca_key) = test_ca(2036);
        let ca = Authority::from_pem(&ca_cert, &ca_key).unwrap();
        let req = csr::parse(csr_pem("jane", &[], &[]).as_bytes()).unwrap();
        let signed_at = ts("2026-06-02T11:50:00Z");
        let pem = ca
            .sign(
                &req,
                &["client auth".into()],
                Duration::from_secs(600),
                signed_at,
            )
            .unwrap();
        // Approved a few minutes ago, so only the expiry can clean it.
        let c = csr_at(
            "2026-06-02T11:49:00Z",
            json!([{"type": "Approved", "status": "True", "lastUpdateTime": "2026-06-02T11:50:00Z"}]),
            Some(&pem),
        );
        assert!(expired(&c, ts("2026-06-02T11:55:00Z")).is_none());
        assert_eq!(
            expired(&c, ts("2026-06-02T12:00:01Z")),
            Some("Cleaning CSR as the associated certificate is expired.")
        );
    }
}
