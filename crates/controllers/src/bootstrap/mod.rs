//! Bootstrap token controllers (upstream `pkg/controller/bootstrap`), both off by default as
//! upstream (kubeadm turns them on; `rkube server --enable-bootstrap-token-auth` too).
//!
//! - [`tokencleaner`]: deletes bootstrap token Secrets once their `expiration` has passed.
//! - [`bootstrapsigner`]: signs the `kube-public/cluster-info` ConfigMap with every signing token
//!   (the JWS entries `kubeadm join` verifies with its token).

pub mod bootstrapsigner;
pub mod tokencleaner;
