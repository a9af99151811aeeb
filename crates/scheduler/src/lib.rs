//! The rkube scheduler (upstream kube-scheduler): assigns each pending pod to a node through the
//! `pods/binding` subresource, speaking only the Kubernetes API.
//!
//! - [`queue`]: the scheduling queue (activeQ by priority, backoff, unschedulable pods).
//! - [`cache`]: nodes with their bound and assumed pods; snapshots per cycle.
//! - [`framework`]: what plugins see and implement; [`plugins`]: the default plugins.
//! - [`scheduler`]: the loop: filter, score, select, assume, bind; FailedScheduling reporting.
//!
//! Not yet (see docs/notes.md): the configuration file and profiles, leader election, PreFilter/
//! PreScore/Permit/Reserve extension points, parallel filtering, the zone-aware node tree,
//! PodTopologySpread, InterPodAffinity, ImageLocality, VolumeBinding and preemption.

pub mod cache;
pub mod framework;
pub mod plugins;
pub mod queue;
pub mod scheduler;

pub use scheduler::{run, SchedulerConfig};
