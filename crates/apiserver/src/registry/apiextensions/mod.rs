//! The `apiextensions.k8s.io` group's kinds with behaviour of their own.

pub mod crd;
