//! The rkube scheduler (upstream kube-scheduler): assigns each pending pod to a node through the
//! `pods/binding` subresource, speaking only the Kubernetes API.
//!
//! - [`config`]: the `KubeSchedulerConfiguration` file; [`profile`]: one framework per profile.
//! - [`queue`]: the scheduling queue (activeQ by QueueSort, backoff, unschedulable and gated pods,
//!   queueing hints by event type) and the nominator.
//! - [`cache`]: nodes with their bound and assumed pods, the zone-aware node tree, incremental
//!   snapshots.
//! - [`framework`]: the extension points, the cycle state and the runtime; [`plugins`]: the
//!   default plugins.
//! - [`scheduler`]: the loop: PreFilter, Filter, PostFilter (preemption), PreScore, Score, select,
//!   assume, Reserve, Permit, then PreBind, Bind, PostBind; FailedScheduling reporting.
//!
//! See docs/notes.md for what differs from upstream.

pub mod cache;
pub mod config;
pub mod framework;
mod informers;
pub mod plugins;
mod preempt;
pub mod profile;
pub mod queue;
pub mod scheduler;

pub use config::KubeSchedulerConfiguration;
pub use scheduler::{run, run_checked, run_with_factory, SchedulerConfig};
