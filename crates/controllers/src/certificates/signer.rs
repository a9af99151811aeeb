//! The CSR signing controller (upstream `pkg/controller/certificates/signer`, kube-controller-manager's
//! `certificatesigningrequest-signing-controller`): issues certificates with the cluster CA for
//! approved requests to the four `kubernetes.io/` signers it implements, after each signer's checks;
//! a request failing them gets a `Failed` condition (reason `SignerValidationFailure`) instead.
//!
//! Upstream runs one loop per signer; rkube runs one loop for all four, each signer with the CA of
//! `--cluster-signing-cert-file` / `--cluster-signing-key-file` or of its own
//! `--cluster-signing-<signer>-{cert,key}-file` pair (upstream's rules for mixing them). The CA
//! files are re-read when they change, as upstream's dynamic reloader does.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use client::controller::{Controller, EnqueueHandler};
use client::informer::Store;
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use jiff::Timestamp;
use k8s_openapi::api::certificates::v1::{
    CertificateSigningRequest, CertificateSigningRequestCondition,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::ByteString;
use kube::api::PostParams;
use kube::Api;

use super::authority::Authority;
use super::csr::{self, Request};

/// Upstream `--cluster-signing-*` flags.
#[derive(Clone, Debug)]
pub struct Options {
    pub cert_file: Option<PathBuf>,
    pub key_file: Option<PathBuf>,
    /// Upstream's per-signer `--cluster-signing-<signer>-{cert,key}-file`, by signer name.
    pub signer_files: BTreeMap<&'static str, (Option<PathBuf>, Option<PathBuf>)>,
    /// Upstream `--cluster-signing-duration` (default 8760h).
    pub duration: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            cert_file: None,
            key_file: None,
            signer_files: BTreeMap::new(),
            duration: Duration::from_secs(8760 * 3600),
        }
    }
}

impl Options {
    /// No CA file given at all (`rkube server` then uses the cluster CA).
    pub fn is_unset(&self) -> bool {
        self.cert_file.is_none()
            && self.key_file.is_none()
            && self
                .signer_files
                .values()
                .all(|(c, k)| c.is_none() && k.is_none())
    }

    /// The CA files of each signer that has them (upstream `startCSRSigningController`): the
    /// cluster-wide pair for every signer, or, once any per-signer file is given, each signer's own
    /// pair (signers without one are not served). Mixing both, or half a pair, is an error.
    pub fn ca_files(&self) -> Result<Vec<(&'static str, PathBuf, PathBuf)>, String> {
        let specific = !self
            .signer_files
            .values()
            .all(|(c, k)| c.is_none() && k.is_none());
        let single = self.cert_file.is_some() && self.key_file.is_some();
        if single && specific {
            return Err("cannot specify default and per controller certs at the same time".into());
        }
        if !single && !specific {
            return Ok(Vec::new());
        }
        let mut out = Vec::new();
        for signer in SIGNERS {
            let (cert, key) = if specific {
                self.signer_files.get(signer).cloned().unwrap_or_default()
            } else {
                (self.cert_file.clone(), self.key_file.clone())
            };
            match (cert, key) {
                (Some(c), Some(k)) => out.push((*signer, c, k)),
                (None, None) => tracing::info!(
                    controller = signer,
                    "Skipping CSR signer controller because specific files were specified for other signers and not this one"
                ),
                _ => {
                    return Err(format!(
                        "failed to start {signer} certificate controller: both a certificate and a key file are needed"
                    ))
                }
            }
        }
        Ok(out)
    }
}

/// The signers this controller implements.
pub const SIGNERS: &[&str] = &[
    csr::KUBELET_SERVING,
    csr::KUBE_APISERVER_CLIENT_KUBELET,
    csr::KUBE_APISERVER_CLIENT,
    csr::LEGACY_UNKNOWN,
];

/// Whether the signer should look at the request at all: not yet issued, approved, not failed,
/// and for one of [`SIGNERS`] (upstream `handle`'s fast paths).
pub fn wants(csr: &CertificateSigningRequest) -> bool {
    !csr::is_issued(csr)
        && csr::is_approved(csr)
        && !csr::has_true_condition(csr, "Failed")
        && SIGNERS.contains(&csr::signer_name(csr))
}

/// The signer's checks of the request (upstream `isKubeletServing`, `isKubeletClient`,
/// `isKubeAPIServerClient`, `isLegacyUnknown`): the message of the `Failed` condition if it fails.
pub fn validate(signer: &str, req: &Request, usages: &[String]) -> Result<(), String> {
    match signer {
        csr::KUBELET_SERVING => csr::validate_kubelet_serving(req, usages),
        csr::KUBE_APISERVER_CLIENT_KUBELET => csr::validate_kubelet_client(req, usages),
        csr::KUBE_APISERVER_CLIENT => csr::validate_apiserver_client_usages(usages),
        // No restrictions on the usages or content of legacy-unknown certificates.
        _ => Ok(()),
    }
}

/// How long the certificate is valid (upstream `duration`): `spec.expirationSeconds` when below
/// the configured TTL, but at least 10 minutes (twice the backdate).
pub fn duration(cert_ttl: Duration, expiration_seconds: Option<i32>) -> Duration {
    const MIN: Duration = Duration::from_secs(600);
    let Some(seconds) = expiration_seconds else {
        return cert_ttl;
    };
    let requested = Duration::from_secs(u64::try_from(seconds).unwrap_or(0));
    if requested > cert_ttl {
        cert_ttl
    } else if requested < MIN {
        MIN
    } else {
        requested
    }
}

/// The request with the `Failed` condition upstream appends.
pub fn with_failure(
    csr: &CertificateSigningRequest,
    message: String,
    now: Timestamp,
) -> CertificateSigningRequest {
    let mut out = csr.clone();
    out.status
        .get_or_insert_with(Default::default)
        .conditions
        .get_or_insert_with(Vec::new)
        .push(CertificateSigningRequestCondition {
            type_: "Failed".into(),
            status: "True".into(),
            reason: Some("SignerValidationFailure".into()),
            message: Some(message),
            last_update_time: Some(Time(now)),
            last_transition_time: None,
        });
    out
}

/// The CA files and what was loaded from them, reloaded when either file's mtime changes.
struct CaFiles {
    cert: PathBuf,
    key: PathBuf,
    loaded: Mutex<(Option<SystemTime>, Option<SystemTime>, Arc<Authority>)>,
}

fn mtime(p: &PathBuf) -> Option<SystemTime> {
    std::fs::metadata(p).and_then(|m| m.modified()).ok()
}

impl CaFiles {
    fn load(cert: PathBuf, key: PathBuf) -> Result<CaFiles, String> {
        let stamps = (mtime(&cert), mtime(&key));
        let ca = read_ca(&cert, &key)?;
        Ok(CaFiles {
            cert,
            key,
            loaded: Mutex::new((stamps.0, stamps.1, Arc::new(ca))),
        })
    }

    /// The current CA: reloaded if a file changed; a failed reload keeps the last good one.
    fn current(&self) -> Arc<Authority> {
        let stamps = (mtime(&self.cert), mtime(&self.key));
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if (loaded.0, loaded.1) != stamps {
            match read_ca(&self.cert, &self.key) {
                Ok(ca) => {
                    tracing::info!(cert = %self.cert.display(), "reloaded the CSR signing CA");
                    *loaded = (stamps.0, stamps.1, Arc::new(ca));
                }
                Err(e) => {
                    tracing::error!("reloading the CSR signing CA: {e}");
                    // Do not retry on every request until the files change again.
                    loaded.0 = stamps.0;
                    loaded.1 = stamps.1;
                }
            }
        }
        loaded.2.clone()
    }
}

fn read_ca(cert: &PathBuf, key: &PathBuf) -> Result<Authority, String> {
    let read = |p: &PathBuf| {
        std::fs::read_to_string(p).map_err(|e| format!("reading {}: {e}", p.display()))
    };
    Authority::from_pem(&read(cert)?, &read(key)?)
}

struct Ctx {
    client: kube::Client,
    csrs: Arc<Store<CertificateSigningRequest>>,
    /// Each served signer's CA (signers sharing files share one).
    cas: BTreeMap<&'static str, Arc<CaFiles>>,
    cert_ttl: Duration,
}

pub async fn run(c: &crate::ControllerContext) {
    let opts = &c.options.csr_signing;
    let files = match opts.ca_files() {
        Ok(files) if files.is_empty() => {
            tracing::info!("Skipping CSR signer controller because no csr cert/key was specified");
            return;
        }
        Ok(files) => files,
        Err(e) => {
            tracing::error!("the CSR signing controller does not run: {e}");
            return;
        }
    };
    let mut cas: BTreeMap<&'static str, Arc<CaFiles>> = BTreeMap::new();
    let mut loaded: Vec<(PathBuf, PathBuf, Arc<CaFiles>)> = Vec::new();
    for (signer, cert, key) in files {
        let known = loaded
            .iter()
            .find(|(c, k, _)| *c == cert && *k == key)
            .map(|(_, _, ca)| ca.clone());
        let ca = match known {
            Some(ca) => ca,
            None => match CaFiles::load(cert.clone(), key.clone()) {
                Ok(ca) => {
                    let ca = Arc::new(ca);
                    loaded.push((cert, key, ca.clone()));
                    ca
                }
                Err(e) => {
                    tracing::error!("the CSR signing controller does not run: {signer}: {e}");
                    return;
                }
            },
        };
        cas.insert(signer, ca);
    }
    let informer = c.factory.informer::<CertificateSigningRequest>();
    let queue = RateLimitingQueue::with_config(
        default_controller_rate_limiter::<String>(),
        QueueConfig::named("certificate"),
    );
    informer.add_event_handler(EnqueueHandler::new(queue.clone()));
    let ctx = Arc::new(Ctx {
        client: c.client.clone(),
        csrs: informer.store(),
        cas,
        cert_ttl: opts.duration,
    });
    c.factory.start();
    c.factory.wait_for_cache_sync().await;
    Controller::new("csrsigning", queue)
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
    let Some(ca) = ctx.cas.get(csr::signer_name(&csr)).filter(|_| wants(&csr)) else {
        return Ok(());
    };
    // An unparsable request is an error to retry, as upstream (the API server refuses them at
    // creation, so this is a corrupt object).
    let req = csr::parse(&csr.spec.request.0)
        .map_err(|e| format!("unable to parse csr {name:?}: {e}"))?;
    let api: Api<CertificateSigningRequest> = Api::all(ctx.client.clone());
    let usages = csr::usages(&csr);
    let updated = match validate(csr::signer_name(&csr), &req, &usages) {
        Err(message) => with_failure(&csr, message, Timestamp::now()),
        Ok(()) => {
            let ca = ca.current();
            let ttl = duration(ctx.cert_ttl, csr.spec.expiration_seconds);
            let pem = ca
                .sign(&req, &usages, ttl, Timestamp::now())
                .map_err(|e| format!("error auto signing csr: {e}"))?;
            let mut signed = (*csr).clone();
            signed
                .status
                .get_or_insert_with(Default::default)
                .certificate = Some(ByteString(pem.into_bytes()));
            signed
        }
    };
    match api
        .replace_status(name, &PostParams::default(), &updated)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(format!("error updating csr {name}: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::certificates::csr::tests::csr_pem;
    use serde_json::json;

    pub(crate) fn csr_object(
        signer: &str,
        conditions: serde_json::Value,
    ) -> CertificateSigningRequest {
        serde_json::from_value(json!({
            "metadata": {"name": "c"},
            "spec": {"request": "", "signerName": signer, "usages": ["client auth"]},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    #[test]
    fn signs_only_approved_unissued_unfailed_requests_to_its_signers() {
        let approved = json!([{"type": "Approved", "status": "True"}]);
        assert!(wants(&csr_object(
            csr::KUBE_APISERVER_CLIENT,
            approved.clone()
        )));
        assert!(wants(&csr_object(csr::LEGACY_UNKNOWN, approved.clone())));
        assert!(!wants(&csr_object("example.com/other", approved.clone())));
        assert!(!wants(&csr_object(csr::KUBE_APISERVER_CLIENT, json!([]))));
        assert!(!wants(&csr_object(
            csr::KUBE_APISERVER_CLIENT,
            json!([{"type": "Approved", "status": "True"}, {"type": "Denied", "status": "True"}])
        )));
        assert!(!wants(&csr_object(
            csr::KUBE_APISERVER_CLIENT,
            json!([{"type": "Approved", "status": "True"}, {"type": "Failed", "status": "True"}])
        )));
        let mut issued = csr_object(csr::KUBE_APISERVER_CLIENT, approved);
        issued.status.as_mut().unwrap().certificate = Some(ByteString(b"x".to_vec()));
        assert!(!wants(&issued));
    }

    #[test]
    fn ca_files_as_upstream_flags() {
        let p = |s: &str| Some(PathBuf::from(s));
        let mut o = Options::default();
        assert!(o.is_unset());
        assert_eq!(o.ca_files(), Ok(vec![]));
        o.cert_file = p("ca.crt");
        // Half the cluster-wide pair: not served, as upstream.
        assert_eq!(o.ca_files(), Ok(vec![]));
        o.key_file = p("ca.key");
        let all = o.ca_files().unwrap();
        assert_eq!(all.len(), 4);
        assert!(all
            .iter()
            .all(|(_, c, k)| c.ends_with("ca.crt") && k.ends_with("ca.key")));
        o.signer_files
            .insert(csr::KUBELET_SERVING, (p("s.crt"), p("s.key")));
        assert!(o.ca_files().unwrap_err().contains("at the same time"));
        o.cert_file = None;
        o.key_file = None;
        assert_eq!(
            o.ca_files().unwrap(),
            [(
                csr::KUBELET_SERVING,
                PathBuf::from("s.crt"),
                PathBuf::from("s.key")
            )]
        );
        o.signer_files
            .insert(csr::LEGACY_UNKNOWN, (p("l.crt"), None));
        assert!(o.ca_files().unwrap_err().contains("legacy-unknown"));
        assert!(!o.is_unset());
    }

    #[test]
    fn durations_as_upstream() {
        let year = Duration::from_secs(8760 * 3600);
        assert_eq!(duration(year, None), year);
        assert_eq!(duration(year, Some(3600)), Duration::from_secs(3600));
        assert_eq!(duration(year, Some(60)), Duration::from_secs(600));
        assert_eq!(duration(year, Some(-5)), Duration::from_secs(600));
        assert_eq!(
            duration(Duration::from_secs(7200), Some(86400)),
            Duration::from_secs(7200)
        );
    }

    #[test]
    fn per_signer_validation_and_failure_condition() {
        let jane = csr::parse(csr_pem("jane", &["devs"], &[]).as_bytes()).unwrap();
        let client = vec!["client auth".to_string()];
        assert_eq!(validate(csr::KUBE_APISERVER_CLIENT, &jane, &client), Ok(()));
        assert_eq!(validate(csr::LEGACY_UNKNOWN, &jane, &[]), Ok(()));
        let err = validate(csr::KUBE_APISERVER_CLIENT_KUBELET, &jane, &client).unwrap_err();
        assert_eq!(err, "subject organization is not system:nodes");
        let now: Timestamp = "2026-06-01T00:00:00Z".parse().unwrap();
        let failed = with_failure(
            &csr_object(
                csr::KUBE_APISERVER_CLIENT_KUBELET,
                json!([{"type": "Approved", "status": "True"}]),
            ),
            err.clone(),
            now,
        );
        let c = &failed.status.as_ref().unwrap().conditions.as_ref().unwrap()[1];
        assert_eq!((c.type_.as_str(), c.status.as_str()), ("Failed", "True"));
        assert_eq!(c.reason.as_deref(), Some("SignerValidationFailure"));
        assert_eq!(c.message.as_deref(), Some(err.as_str()));
        assert!(!wants(&failed));
    }
}
