//! The certificate controllers of kube-controller-manager (upstream `pkg/controller/certificates`):
//! - [`signer`]: issues certificates for approved requests to the `kubernetes.io/` signers;
//! - [`approver`]: approves kubelet client certificate requests its requester may make;
//! - [`cleaner`]: deletes requests that are done with.
//!
//! [`csr`] reads requests as upstream's helpers do; [`authority`] is the CA that signs them.

pub mod approver;
pub mod authority;
pub mod cleaner;
pub mod csr;
pub mod signer;
