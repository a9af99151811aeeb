//! Bootstrap token controllers (upstream `pkg/controller/bootstrap`).
//!
//! - [`tokencleaner`]: deletes bootstrap token Secrets once their `expiration` has passed.
//!
//! Not built: the bootstrap signer (JWS signatures of the `kube-public/cluster-info` ConfigMap that
//! `kubeadm join` verifies with its token).

pub mod tokencleaner;
