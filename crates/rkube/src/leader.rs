//! Leader election for the components that must run once per cluster (controller manager, scheduler),
//! with upstream's flags: `--leader-elect` (on by default), the lease timings and the Lease's namespace
//! and name. Like upstream, a component that loses its lease exits rather than risk two leaders.

use std::future::Future;
use std::time::Duration;

use clap::Args;
use client::leaderelection::{LeaderCallbacks, LeaderElectionConfig, LeaderElector, LeaseLock};
use tokio_util::sync::CancellationToken;

#[derive(Args, Clone, Debug)]
pub struct LeaderElectionFlags {
    /// Elect a leader among the replicas of this component before running (upstream default: true).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true")]
    pub leader_elect: bool,
    /// How long non-leaders wait after the last observed renewal before taking over.
    #[arg(long, default_value = "15s", value_parser = crate::serve::parse_duration)]
    pub leader_elect_lease_duration: Duration,
    /// How long the leader retries renewing before it gives up leading.
    #[arg(long, default_value = "10s", value_parser = crate::serve::parse_duration)]
    pub leader_elect_renew_deadline: Duration,
    /// Interval between acquire and renew attempts.
    #[arg(long, default_value = "2s", value_parser = crate::serve::parse_duration)]
    pub leader_elect_retry_period: Duration,
    /// Namespace of the Lease.
    #[arg(long, default_value = "kube-system")]
    pub leader_elect_resource_namespace: String,
    /// Name of the Lease (default: the upstream component's name).
    #[arg(long)]
    pub leader_elect_resource_name: Option<String>,
}

/// Applies a component configuration's `leaderElection` section over the flags (upstream: the
/// configuration file wins).
pub fn apply_configuration(
    flags: &mut LeaderElectionFlags,
    le: &scheduler::config::LeaderElection,
) -> Result<(), String> {
    let dur = |v: &Option<String>| {
        v.as_deref()
            .map(scheduler::config::parse_duration)
            .transpose()
    };
    if let Some(v) = le.leader_elect {
        flags.leader_elect = v;
    }
    if let Some(d) = dur(&le.lease_duration)? {
        flags.leader_elect_lease_duration = d;
    }
    if let Some(d) = dur(&le.renew_deadline)? {
        flags.leader_elect_renew_deadline = d;
    }
    if let Some(d) = dur(&le.retry_period)? {
        flags.leader_elect_retry_period = d;
    }
    if let Some(n) = le.resource_namespace.clone().filter(|n| !n.is_empty()) {
        flags.leader_elect_resource_namespace = n;
    }
    if let Some(n) = le.resource_name.clone().filter(|n| !n.is_empty()) {
        flags.leader_elect_resource_name = Some(n);
    }
    Ok(())
}

/// Upstream's identity: `<hostname>_<uuid>`, unique per process.
fn identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "localhost".into());
    format!("{host}_{}", uuid::Uuid::new_v4())
}

/// SIGINT or SIGTERM. Supervisors (systemd, the kubelet for static pods) stop a component with
/// SIGTERM; upstream's components treat both alike, so the lease is given back either way.
async fn stop_signal() -> Result<(), String> {
    apiserver::shutdown::signalled().await;
    Ok(())
}

/// Runs `component` while this process leads (or at once with `--leader-elect=false`). Returns when
/// the component returns, on SIGINT or SIGTERM, or with an error when leadership is lost.
pub async fn run_elected<F, Fut>(
    client: kube::Client,
    flags: &LeaderElectionFlags,
    default_lease_name: &str,
    component: F,
) -> Result<(), String>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    if !flags.leader_elect {
        tokio::select! {
            _ = component() => return Ok(()),
            r = stop_signal() => return r,
        }
    }
    let name = flags
        .leader_elect_resource_name
        .clone()
        .unwrap_or_else(|| default_lease_name.to_string());
    let config = LeaderElectionConfig::new(
        flags.leader_elect_resource_namespace.clone(),
        name.clone(),
        identity(),
    )
    .with_timings(
        flags.leader_elect_lease_duration,
        flags.leader_elect_renew_deadline,
        flags.leader_elect_retry_period,
    );
    let lock = LeaseLock::new(
        client,
        &config.lease_namespace,
        &config.lease_name,
        &config.identity,
    );
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let component = std::sync::Mutex::new(Some((component, done_tx)));
    let callbacks =
        LeaderCallbacks::default().on_started_leading(move |leading: CancellationToken| {
            // A term starts at most once per process: a lost lease ends the process.
            let Some((component, done)) = component.lock().ok().and_then(|mut c| c.take()) else {
                return;
            };
            tokio::spawn(async move {
                tokio::select! {
                    _ = component() => { let _ = done.send(()); }
                    _ = leading.cancelled() => {}
                }
            });
        });
    let elector = LeaderElector::new(config, lock, callbacks).map_err(|e| e.to_string())?;
    let shutdown = CancellationToken::new();
    let elect = elector.run(shutdown.clone());
    tokio::pin!(elect);
    tokio::select! {
        outcome = &mut elect => Err(format!("leader election lost ({outcome:?}) on Lease {}/{name}",
            flags.leader_elect_resource_namespace)),
        finished = done_rx => {
            shutdown.cancel();
            let outcome = elect.await;
            // The sender is dropped unsent only when the term ended under the component.
            finished.map_err(|_| format!("leader election lost ({outcome:?}) on Lease {}/{name}",
                flags.leader_elect_resource_namespace))
        }
        r = stop_signal() => {
            // Give the lease back so a standby takes over at once (upstream ReleaseOnCancel).
            shutdown.cancel();
            elect.await;
            r
        }
    }
}
