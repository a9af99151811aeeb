//! The certificate controllers of the controller manager through kubectl, on one `rkube server`
//! with static tokens for a bootstrap credential (group `system:bootstrappers`) and a user `bob`:
//! - csrsigning: an approved `kube-apiserver-client` request for `jane` gets a certificate from the
//!   cluster CA that authenticates as `jane`; an approved kubelet-client request with a subject that
//!   is not a node's gets `Failed` (SignerValidationFailure) instead;
//! - csrapproving: a node client request by the bootstrap credential is approved (`nodeclient`,
//!   through the `rkube:node-autoapprove-bootstrap` binding) and signed, and the node's renewal with
//!   that certificate too (`selfnodeclient`, through `rkube:node-autoapprove-certificate-rotation`);
//!   the same request by bob, who may create requests but not `nodeclient`, stays pending.

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use base64::Engine;
use rcgen::{CertificateParams, DnType, KeyPair};
use support::{Backend, Cluster};

const BOOTSTRAP_TOKEN: &str = "bootstrap-token";
const BOB_TOKEN: &str = "bob-token";

fn eventually<T>(what: &str, mut probe: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = probe() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// A private key (PEM) and a CSR (PEM) for `cn` in `orgs`.
fn key_and_csr(cn: &str, orgs: &[&str]) -> (String, String) {
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, cn);
    if let Some(o) = orgs.first() {
        params.distinguished_name.push(DnType::OrganizationName, *o);
    }
    let csr = params.serialize_request(&key).expect("csr");
    (key.serialize_pem(), csr.pem().expect("pem"))
}

fn csr_manifest(name: &str, signer: &str, usages: &[&str], request_pem: &str) -> String {
    let request = base64::engine::general_purpose::STANDARD.encode(request_pem);
    format!(
        "apiVersion: certificates.k8s.io/v1
kind: CertificateSigningRequest
metadata: {{name: {name}}}
spec:
  signerName: {signer}
  usages: [{}]
  expirationSeconds: 3600
  request: {request}
",
        usages
            .iter()
            .map(|u| format!("'{u}'"))
            .collect::<Vec<_>>()
            .join(", ")
    )
}

struct Fixture {
    c: Cluster,
    _tokens: tempfile::NamedTempFile,
    work: tempfile::TempDir,
}

impl Fixture {
    fn start() -> Fixture {
        let tokens = support::token_file(&format!(
            "{BOOTSTRAP_TOKEN},system:bootstrap:abcdef,uid-b,\"system:bootstrappers\"\n\
             {BOB_TOKEN},bob,uid-bob\n"
        ));
        let c = Cluster::start_all(
            Backend::Sqlite,
            &["--token-auth-file", tokens.path().to_str().unwrap()],
        );
        Fixture {
            c,
            _tokens: tokens,
            work: tempfile::tempdir().expect("tempdir"),
        }
    }

    fn ca(&self) -> String {
        self.c
            .data_dir()
            .join("pki/ca.crt")
            .to_string_lossy()
            .into_owned()
    }

    /// kubectl with `credentials` (`--token ...` or client certificate flags) and no kubeconfig.
    fn kubectl_as(
        &self,
        credentials: &[&str],
        args: &[&str],
        stdin: Option<&str>,
    ) -> std::process::Output {
        let ca = self.ca();
        let mut all = vec![
            "--kubeconfig=/dev/null",
            "--server",
            self.c.url.as_str(),
            "--certificate-authority",
            ca.as_str(),
        ];
        all.extend_from_slice(credentials);
        all.extend_from_slice(args);
        self.c.kubectl_output(&all, stdin)
    }

    fn create_as(&self, credentials: &[&str], manifest: &str) {
        let out = self.kubectl_as(credentials, &["create", "-f", "-"], Some(manifest));
        assert!(
            out.status.success(),
            "create: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn csr_field(&self, name: &str, jsonpath: &str) -> String {
        self.c
            .kubectl(&["get", "csr", name, "-o", &format!("jsonpath={jsonpath}")])
    }

    /// Waits for the CSR's certificate and writes it and `key` to files: the client flags.
    fn issued_credentials(&self, name: &str, key: &str) -> Vec<String> {
        let cert_b64 = eventually(&format!("a certificate for {name}"), || {
            let c = self.csr_field(name, "{.status.certificate}");
            (!c.trim().is_empty()).then_some(c)
        });
        let cert = base64::engine::general_purpose::STANDARD
            .decode(cert_b64.trim())
            .expect("base64 certificate");
        let (cert_path, key_path) = (
            self.work.path().join(format!("{name}.crt")),
            self.work.path().join(format!("{name}.key")),
        );
        std::fs::write(&cert_path, cert).expect("write cert");
        std::fs::write(&key_path, key).expect("write key");
        vec![
            format!("--client-certificate={}", path(&cert_path)),
            format!("--client-key={}", path(&key_path)),
        ]
    }

    fn whoami(&self, credentials: &[String]) -> String {
        let creds: Vec<&str> = credentials.iter().map(String::as_str).collect();
        let out = self.kubectl_as(
            &creds,
            &[
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username} {.status.userInfo.groups}",
            ],
            None,
        );
        assert!(
            out.status.success(),
            "whoami: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }
}

fn path(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

#[test]
fn csrs_are_approved_signed_and_refused_as_upstream() {
    let f = Fixture::start();

    // (a) An administrator's request for a client certificate, approved by hand.
    let (jane_key, jane_csr) = key_and_csr("jane", &["devs"]);
    f.c.kubectl_in(
        &["create", "-f", "-"],
        Some(&csr_manifest(
            "jane",
            "kubernetes.io/kube-apiserver-client",
            &["client auth"],
            &jane_csr,
        )),
    );
    // Nobody approves it on its own.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(f.csr_field("jane", "{.status.conditions}"), "");
    f.c.kubectl(&["certificate", "approve", "jane"]);
    let jane = f.issued_credentials("jane", &jane_key);
    // expirationSeconds (3600) under the signer's 8760h, and too short to be backdated.
    let pem = std::fs::read_to_string(f.work.path().join("jane.crt")).expect("cert");
    let der = x509_parser::pem::parse_x509_pem(pem.as_bytes())
        .expect("PEM certificate")
        .1;
    let cert = der.parse_x509().expect("parse the certificate");
    let validity = cert.validity();
    assert_eq!(
        validity.not_after.timestamp() - validity.not_before.timestamp(),
        3600
    );
    let who = f.whoami(&jane);
    assert!(who.starts_with("jane ["), "{who}");
    assert!(
        who.contains("devs") && who.contains("system:authenticated"),
        "{who}"
    );

    // (b) Bob may create requests (system:node-bootstrapper) but not have node ones approved.
    f.c.kubectl(&[
        "create",
        "clusterrolebinding",
        "bob-csr",
        "--clusterrole=system:node-bootstrapper",
        "--user=bob",
    ]);
    let (_, bob_csr) = key_and_csr("system:node:n2", &["system:nodes"]);
    let kubelet_usages = ["digital signature", "client auth"];
    f.create_as(
        &["--token", BOB_TOKEN],
        &csr_manifest(
            "bob-n2",
            "kubernetes.io/kube-apiserver-client-kubelet",
            &kubelet_usages,
            &bob_csr,
        ),
    );
    // The bootstrap credential's request for n1 is approved and signed.
    let (n1_key, n1_csr) = key_and_csr("system:node:n1", &["system:nodes"]);
    f.create_as(
        &["--token", BOOTSTRAP_TOKEN],
        &csr_manifest(
            "node-csr-n1",
            "kubernetes.io/kube-apiserver-client-kubelet",
            &kubelet_usages,
            &n1_csr,
        ),
    );
    let n1 = f.issued_credentials("node-csr-n1", &n1_key);
    assert_eq!(
        f.csr_field(
            "node-csr-n1",
            "{.status.conditions[0].reason}/{.status.conditions[0].message}"
        ),
        "AutoApproved/Auto approving kubelet client certificate after SubjectAccessReview."
    );
    let who = f.whoami(&n1);
    assert!(who.starts_with("system:node:n1 ["), "{who}");
    assert!(who.contains("system:nodes"), "{who}");
    // Bob's, created before it, is still pending.
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(f.csr_field("bob-n2", "{.status.conditions}"), "");
    assert_eq!(f.csr_field("bob-n2", "{.status.certificate}"), "");

    // The node renews with its own certificate: approved as selfnodeclient.
    let (renewed_key, renewed_csr) = key_and_csr("system:node:n1", &["system:nodes"]);
    let n1_flags: Vec<&str> = n1.iter().map(String::as_str).collect();
    f.create_as(
        &n1_flags,
        &csr_manifest(
            "node-csr-n1-renewal",
            "kubernetes.io/kube-apiserver-client-kubelet",
            &kubelet_usages,
            &renewed_csr,
        ),
    );
    let renewed = f.issued_credentials("node-csr-n1-renewal", &renewed_key);
    assert_eq!(
        f.csr_field("node-csr-n1-renewal", "{.status.conditions[0].message}"),
        "Auto approving self kubelet client certificate after SubjectAccessReview."
    );
    assert!(f.whoami(&renewed).starts_with("system:node:n1 ["));

    // (c) A kubelet client request whose subject is not a node's fails once approved.
    let (_, bad_csr) = key_and_csr("jane", &["system:nodes"]);
    f.c.kubectl_in(
        &["create", "-f", "-"],
        Some(&csr_manifest(
            "not-a-node",
            "kubernetes.io/kube-apiserver-client-kubelet",
            &kubelet_usages,
            &bad_csr,
        )),
    );
    f.c.kubectl(&["certificate", "approve", "not-a-node"]);
    let failed = eventually("the Failed condition", || {
        let v = f.csr_field(
            "not-a-node",
            "{.status.conditions[?(@.type==\"Failed\")].reason}/{.status.conditions[?(@.type==\"Failed\")].message}",
        );
        (!v.is_empty() && v != "/").then_some(v)
    });
    assert_eq!(
        failed,
        "SignerValidationFailure/subject common name does not begin with 'system:node:'"
    );
    assert_eq!(f.csr_field("not-a-node", "{.status.certificate}"), "");
    let table = f.c.kubectl(&["get", "csr", "not-a-node", "--no-headers"]);
    assert!(table.contains("Approved,Failed"), "{table}");
}
