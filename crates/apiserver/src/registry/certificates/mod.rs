//! The `certificates.k8s.io` group's kinds with behaviour of their own.

pub mod csr;
