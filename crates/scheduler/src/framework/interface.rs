//! The extension points (upstream `framework/interface.go`). A plugin implements [`Plugin`] and
//! returns itself from the `as_*` accessor of each extension point it implements, the Rust form of
//! upstream's interface type assertions. Binding-cycle points (PreBind, Bind, PostBind) are async:
//! they talk to the API server. PostFilter (preemption) is pure: it returns the victims and the
//! nominated node, and the scheduler does the API writes (see `scheduler::preempt`).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;

use super::{CycleState, Framework, NodeInfo, PodInfo, Status};

/// A resource whose changes can make unschedulable pods schedulable (upstream `EventResource`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventResource {
    Node,
    /// Assigned pods (bound or assumed).
    Pod,
    /// The unschedulable pod itself.
    UnscheduledPod,
    PersistentVolumeClaim,
    PersistentVolume,
    StorageClass,
    /// `storage.k8s.io/v1` CSINode (the per-node CSI drivers and their volume limits).
    CSINode,
    Namespace,
    /// `resource.k8s.io/v1` ResourceClaim, ResourceSlice and DeviceClass (DRA).
    ResourceClaim,
    ResourceSlice,
    DeviceClass,
}

/// Action bits of a [`ClusterEvent`] (upstream `ActionType`).
pub mod action {
    pub const ADD: u32 = 1;
    pub const DELETE: u32 = 1 << 1;
    pub const UPDATE_NODE_LABEL: u32 = 1 << 2;
    pub const UPDATE_NODE_TAINT: u32 = 1 << 3;
    pub const UPDATE_NODE_ALLOCATABLE: u32 = 1 << 4;
    pub const UPDATE_POD_LABEL: u32 = 1 << 5;
    pub const UPDATE_POD_SCALE_DOWN: u32 = 1 << 6;
    pub const UPDATE_POD_TOLERATIONS: u32 = 1 << 7;
    pub const UPDATE_POD_GATES: u32 = 1 << 8;
    /// Any other update (and, for non-node resources, any update).
    pub const UPDATE_OTHER: u32 = 1 << 9;
    pub const UPDATE: u32 = UPDATE_NODE_LABEL
        | UPDATE_NODE_TAINT
        | UPDATE_NODE_ALLOCATABLE
        | UPDATE_POD_LABEL
        | UPDATE_POD_SCALE_DOWN
        | UPDATE_POD_TOLERATIONS
        | UPDATE_POD_GATES
        | UPDATE_OTHER;
    pub const ALL: u32 = ADD | DELETE | UPDATE;
}

/// A cluster change (upstream `ClusterEvent`), and what a plugin registers interest in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ClusterEvent {
    pub resource: EventResource,
    pub action: u32,
}

impl ClusterEvent {
    pub const fn new(resource: EventResource, action: u32) -> ClusterEvent {
        ClusterEvent { resource, action }
    }

    /// Does this event (`self`) fall under the registration `reg`?
    pub fn matches(&self, reg: &ClusterEvent) -> bool {
        self.resource == reg.resource && self.action & reg.action != 0
    }
}

/// A pod in the scheduling queue as QueueSort sees it (upstream `QueuedPodInfo`).
#[derive(Clone, Debug)]
pub struct QueuedPodInfo {
    pub key: String,
    pub priority: i32,
    /// When the pod was first added to the queue.
    pub timestamp: Instant,
    /// Tie-breaker for equal timestamps: insertion order.
    pub seq: u64,
}

/// What PreFilter narrows the nodes to (upstream `PreFilterResult`); `None`: all nodes.
#[derive(Clone, Debug, Default)]
pub struct PreFilterResult {
    pub node_names: Option<HashSet<String>>,
}

impl PreFilterResult {
    pub fn all_nodes(&self) -> bool {
        self.node_names.is_none()
    }

    /// Intersection of two results.
    pub fn merge(self, other: PreFilterResult) -> PreFilterResult {
        match (self.node_names, other.node_names) {
            (None, x) | (x, None) => PreFilterResult { node_names: x },
            (Some(a), Some(b)) => PreFilterResult {
                node_names: Some(a.intersection(&b).cloned().collect()),
            },
        }
    }
}

/// Failed filter statuses per node name, with the plugin that failed (upstream `NodeToStatus`).
pub type NodeToStatus = std::collections::HashMap<String, (Status, &'static str)>;

/// What PostFilter (preemption) decided: the node to nominate, the pods to evict for it and the
/// lower-priority pods whose nomination to that node must be cleared.
#[derive(Clone, Debug, Default)]
pub struct PostFilterResult {
    pub nominated_node: Option<String>,
    pub victims: Vec<Arc<Pod>>,
    pub clear_nominated: Vec<Arc<Pod>>,
}

pub trait Plugin: Send + Sync {
    fn name(&self) -> &'static str;
    /// The cluster events that may make a pod this plugin rejected schedulable
    /// (upstream `EnqueueExtensions.EventsToRegister`).
    fn events_to_register(&self) -> Vec<ClusterEvent> {
        Vec::new()
    }
    fn as_pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        None
    }
    fn as_queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        None
    }
    fn as_pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        None
    }
    fn as_filter(&self) -> Option<&dyn FilterPlugin> {
        None
    }
    fn as_post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        None
    }
    fn as_pre_score(&self) -> Option<&dyn PreScorePlugin> {
        None
    }
    fn as_score(&self) -> Option<&dyn ScorePlugin> {
        None
    }
    fn as_reserve(&self) -> Option<&dyn ReservePlugin> {
        None
    }
    fn as_permit(&self) -> Option<&dyn PermitPlugin> {
        None
    }
    fn as_pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        None
    }
    fn as_bind(&self) -> Option<&dyn BindPlugin> {
        None
    }
    fn as_post_bind(&self) -> Option<&dyn PostBindPlugin> {
        None
    }
}

/// Is the pod ready to enter activeQ? (`Pending` keeps it out, e.g. scheduling gates.)
pub trait PreEnqueuePlugin: Send + Sync {
    fn pre_enqueue(&self, pod: &Pod) -> Status;
}

/// The order of activeQ.
pub trait QueueSortPlugin: Send + Sync {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool;
}

/// Computes per-pod state once per cycle; may narrow the nodes; `Skip` skips the plugin's Filter.
pub trait PreFilterPlugin: Send + Sync {
    fn pre_filter(&self, state: &mut CycleState, pod: &Pod) -> (Option<PreFilterResult>, Status);
    /// The state as if `to_add` ran on `node` too (nominated pods, preemption's reprieves).
    fn add_pod(
        &self,
        _state: &mut CycleState,
        _pod: &Pod,
        _to_add: &Arc<PodInfo>,
        _node: &NodeInfo,
    ) -> Status {
        Status::Success
    }
    /// The state as if `to_remove` were gone from `node` (preemption's victims).
    fn remove_pod(
        &self,
        _state: &mut CycleState,
        _pod: &Pod,
        _to_remove: &Arc<PodInfo>,
        _node: &NodeInfo,
    ) -> Status {
        Status::Success
    }
}

pub trait FilterPlugin: Send + Sync {
    fn filter(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> Status;
}

/// Runs when no node fits (preemption).
pub trait PostFilterPlugin: Send + Sync {
    fn post_filter(
        &self,
        state: &CycleState,
        pod: &Pod,
        statuses: &NodeToStatus,
        framework: &Framework,
    ) -> (PostFilterResult, Status);
}

/// Computes per-pod scoring state over the feasible nodes; `Skip` skips the plugin's Score.
pub trait PreScorePlugin: Send + Sync {
    fn pre_score(&self, state: &mut CycleState, pod: &Pod, nodes: &[Arc<NodeInfo>]) -> Status;
}

pub trait ScorePlugin: Send + Sync {
    fn score(&self, state: &CycleState, pod: &Pod, node: &NodeInfo) -> i64;
    /// Rescales the raw scores of all feasible nodes (upstream `NormalizeScore`); default: none.
    fn normalize(&self, _state: &CycleState, _pod: &Pod, _scores: &mut [i64]) {}
}

/// Reserve resources for the pod on the chosen node; Unreserve undoes it on a later failure.
pub trait ReservePlugin: Send + Sync {
    fn reserve(&self, state: &mut CycleState, pod: &Pod, node: &str) -> Status;
    fn unreserve(&self, state: &mut CycleState, pod: &Pod, node: &str);
}

/// Approve, reject or delay (`Wait` with a timeout) the binding.
pub trait PermitPlugin: Send + Sync {
    fn permit(&self, state: &CycleState, pod: &Pod, node: &str) -> (Status, Duration);
}

pub trait PreBindPlugin: Send + Sync {
    fn pre_bind<'a>(
        &'a self,
        state: &'a CycleState,
        pod: &'a Pod,
        node: &'a str,
    ) -> BoxFuture<'a, Status>;
}

/// Binds the pod; `Skip` passes to the next Bind plugin.
pub trait BindPlugin: Send + Sync {
    fn bind<'a>(
        &'a self,
        state: &'a CycleState,
        pod: &'a Pod,
        node: &'a str,
    ) -> BoxFuture<'a, Status>;
}

pub trait PostBindPlugin: Send + Sync {
    fn post_bind<'a>(
        &'a self,
        state: &'a CycleState,
        pod: &'a Pod,
        node: &'a str,
    ) -> BoxFuture<'a, ()>;
}
