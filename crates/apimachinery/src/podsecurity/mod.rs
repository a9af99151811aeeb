//! Pod Security Standards (upstream `k8s.io/pod-security-admission`): the `privileged`, `baseline`
//! and `restricted` levels, each check in its revisions per policy version, the evaluation of a pod
//! spec against a level+version with upstream's reasons and messages, and the decisions of the
//! PodSecurity admission plugin (which the API server applies after reading the namespace).
//!
//! - [`api`]: levels, versions, policies and the `pod-security.kubernetes.io/*` namespace labels.
//! - [`registry`]: which checks a level+version runs, and their aggregated verdict.
//! - [`admission`]: pods, pod controllers' templates and namespace label changes.
//!
//! Pods are read in their JSON form; a field that is absent or `null` is Go's nil. Differences
//! from upstream: no metrics, and no emulated older API server version (`latest` is always the
//! newest policy version the checks know, v1.35).

pub mod admission;
pub mod api;
mod baseline;
mod helpers;
pub mod registry;
mod restricted;

pub use admission::{Config, Decision, Exemptions, NamespaceDecision};
pub use api::{Level, LevelVersion, Policy, Version};
pub use helpers::go_quote;
pub use registry::{evaluate_pod, Aggregate, Violation};
