//! The kubelet's client certificate (upstream `pkg/kubelet/certificate/bootstrap` and client-go's
//! `util/certificate` manager): TLS bootstrapping and rotation.
//!
//! - [`bootstrap::load_or_request`]: with `--bootstrap-kubeconfig`, when `--kubeconfig` is missing or
//!   its certificate has expired, the bootstrap credential (a bootstrap token) asks for a client
//!   certificate through a CertificateSigningRequest for `kubernetes.io/kube-apiserver-client-kubelet`
//!   (`CN=system:node:<name>`, `O=system:nodes`); the controller manager approves and signs it; the
//!   kubelet writes `<cert-dir>/kubelet-client-current.pem` and a kubeconfig that uses it.
//! - [`rotation`]: with `--rotate-certificates`, a new certificate is requested with the current one
//!   at a random point between 70% and 90% of its lifetime, as upstream; the kubelet's client sends
//!   every later request with the new credentials.
//!
//! Left out: the serving certificate's CSR (`--rotate-server-certificates`, kubelet-serving
//! signer); connections opened with the old certificate are not closed on rotation (upstream closes
//! them so that long watches re-authenticate).

pub mod bootstrap;
pub mod csr;
pub mod rotation;
pub mod store;
