//! The scheduling framework's shapes (upstream `pkg/scheduler/framework`): what a node looks like to the
//! plugins ([`NodeInfo`]: the node, what its pods request, their host ports), the result of a filter
//! ([`Status`]), and the filter and score plugin interfaces.

pub mod resources;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};

pub use resources::Resources;

/// The highest score a score plugin gives a node (upstream `MaxNodeScore`).
pub const MAX_NODE_SCORE: i64 = 100;

/// A host port in use on a node: protocol, host IP ("0.0.0.0" when unset) and port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub protocol: String,
    pub ip: String,
    pub port: i32,
}

/// One node with the pods placed on it (bound or assumed), as the plugins see it.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub node: Arc<Node>,
    /// `status.allocatable` (pods included, as the `pods` resource).
    pub allocatable: Resources,
    /// The sum of the requests of its pods (upstream `Requested`), pod count included.
    pub requested: Resources,
    /// The same with upstream's non-zero defaults for pods that request no cpu/memory
    /// (100m, 200Mi), used by scoring (upstream `NonZeroRequested`).
    pub non_zero_requested: Resources,
    pub pods: Vec<Arc<Pod>>,
    pub used_ports: Vec<HostPort>,
}

/// The outcome of a filter (upstream `framework.Status` codes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Success,
    /// The pod does not fit now, but could after a change (or preemption).
    Unschedulable(String),
    /// The pod can never fit this node as it is (preemption cannot help).
    UnschedulableAndUnresolvable(String),
}

impl Status {
    pub fn is_success(&self) -> bool {
        matches!(self, Status::Success)
    }

    /// The reason, as counted in `0/N nodes are available: ...`.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Status::Success => None,
            Status::Unschedulable(r) | Status::UnschedulableAndUnresolvable(r) => Some(r),
        }
    }
}

/// A Filter plugin: may the pod run on this node?
pub trait FilterPlugin: Send + Sync {
    fn name(&self) -> &'static str;
    fn filter(&self, pod: &Pod, node: &NodeInfo) -> Status;
}

/// A Score plugin: how good is this node for the pod (0..=MAX_NODE_SCORE after normalization)?
pub trait ScorePlugin: Send + Sync {
    fn name(&self) -> &'static str;
    fn score(&self, pod: &Pod, node: &NodeInfo) -> i64;
    /// Rescales the raw scores of all feasible nodes (upstream `NormalizeScore`); default: none.
    fn normalize(&self, _pod: &Pod, _scores: &mut [i64]) {}
    /// The plugin's weight in the default profile.
    fn weight(&self) -> i64 {
        1
    }
}
