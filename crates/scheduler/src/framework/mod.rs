//! The scheduling framework (upstream `pkg/scheduler/framework`): what a node and a pod look like to
//! the plugins ([`NodeInfo`], [`PodInfo`]), the result of an extension point ([`Status`]), the
//! per-cycle state, the extension-point interfaces and the runtime that runs a profile's plugins.

pub mod cycle_state;
pub mod interface;
pub mod parallelize;
pub mod resources;
pub mod runtime;
pub mod selector;
pub mod types;

pub use cycle_state::CycleState;
pub use interface::*;
pub use resources::Resources;
pub use runtime::{Framework, Handle, Listers};
pub use types::{AffinityTerm, NodeInfo, PodInfo, WeightedAffinityTerm};

/// The highest score a score plugin gives a node (upstream `MaxNodeScore`).
pub const MAX_NODE_SCORE: i64 = 100;

/// A host port in use on a node: protocol, host IP ("0.0.0.0" when unset) and port.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct HostPort {
    pub protocol: String,
    pub ip: String,
    pub port: i32,
}

/// The outcome of an extension point (upstream `framework.Status` codes).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Status {
    Success,
    /// The pod does not fit now, but could after a change (or preemption).
    Unschedulable(String),
    /// The pod can never fit this node as it is (preemption cannot help).
    UnschedulableAndUnresolvable(String),
    /// PreFilter/PreScore: the plugin has nothing to do for this pod; its Filter/Score is skipped.
    /// Bind: the plugin does not bind this pod.
    Skip,
    /// Permit: the pod waits for an allow or reject.
    Wait,
    /// PreEnqueue: the pod is not ready for scheduling (e.g. scheduling gates).
    Pending(String),
    /// An unexpected failure (the pod is retried after a backoff).
    Error(String),
}

impl Status {
    pub fn is_success(&self) -> bool {
        matches!(self, Status::Success)
    }

    /// Success or Skip.
    pub fn is_ok(&self) -> bool {
        matches!(self, Status::Success | Status::Skip)
    }

    pub fn is_rejected(&self) -> bool {
        matches!(
            self,
            Status::Unschedulable(_) | Status::UnschedulableAndUnresolvable(_) | Status::Pending(_)
        )
    }

    /// The reason, as counted in `0/N nodes are available: ...`.
    pub fn reason(&self) -> Option<&str> {
        match self {
            Status::Success | Status::Skip | Status::Wait => None,
            Status::Unschedulable(r)
            | Status::UnschedulableAndUnresolvable(r)
            | Status::Pending(r)
            | Status::Error(r) => Some(r),
        }
    }
}
