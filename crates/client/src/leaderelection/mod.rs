//! Leader election on a `coordination.k8s.io/v1` Lease (upstream client-go `tools/leaderelection`).
//!
//! A set of candidates share one Lease. Whoever holds it (`spec.holderIdentity`) leads and renews it
//! every retry period; the others poll it and take over once it has not changed for
//! `leaseDurationSeconds`, measured on their own clock from the moment they *observed* the change, never
//! from the timestamps written in the Lease (so clock offsets between machines do not matter, only clock
//! rates). Writes are optimistic: an update carries the `resourceVersion` that was read, so when two
//! candidates race for an expired lease exactly one update succeeds and the other gets 409 Conflict.
//!
//! - [`config`]: [`LeaderElectionConfig`] (lease 15 s, renew deadline 10 s, retry 2 s by default) and
//!   its validation, as upstream's `NewLeaderElector`.
//! - [`lease_lock`]: [`LeaseLock`], the Lease-backed lock (upstream `resourcelock/leaselock.go`) and
//!   the [`ResourceLock`] trait it implements, so the elector can be tested on an in-memory lock.
//! - [`elector`]: [`LeaderElector`] with the acquire / renew / release loop (upstream
//!   `leaderelection.go`) and [`LeaderCallbacks`].
//!
//! ```no_run
//! # async fn demo(client: kube::Client) -> Result<(), Box<dyn std::error::Error>> {
//! use client::leaderelection::{LeaderCallbacks, LeaderElectionConfig, LeaderElector, LeaseLock};
//! use tokio_util::sync::CancellationToken;
//!
//! let config = LeaderElectionConfig::new("kube-system", "rkube-controller-manager", "host-1_abc");
//! let lock = LeaseLock::new(client, &config.lease_namespace, &config.lease_name, &config.identity);
//! let callbacks = LeaderCallbacks::default()
//!     .on_started_leading(|leading: CancellationToken| {
//!         tokio::spawn(async move {
//!             // run the controllers until `leading` is cancelled
//!             leading.cancelled().await;
//!         });
//!     })
//!     .on_stopped_leading(|| tracing::warn!("leadership lost"));
//! let elector = LeaderElector::new(config, lock, callbacks)?;
//! let shutdown = CancellationToken::new();
//! elector.run(shutdown.clone()).await;
//! # Ok(()) }
//! ```

pub mod config;
pub mod elector;
pub mod lease_lock;

#[cfg(test)]
mod tests;

pub use config::{ConfigError, LeaderElectionConfig};
pub use elector::{LeaderCallbacks, LeaderElector, RunOutcome};
pub use lease_lock::{LeaderElectionRecord, LeaseLock, LockError, ResourceLock};
