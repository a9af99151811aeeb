//! Leader election settings (upstream client-go `tools/leaderelection/leaderelection.go`:
//! `LeaderElectionConfig` and the checks in `NewLeaderElector`).
//!
//! Differences from upstream: the lock is named here (namespace, name, identity) rather than passed as
//! an interface value, callbacks live in [`LeaderCallbacks`](super::LeaderCallbacks), and
//! `release_on_cancel` defaults to `true` (upstream's zero value is `false`) because every rkube
//! component wants a graceful shutdown to hand leadership over at once. The watchdog and coordinated
//! leader election options are not implemented.

use std::time::Duration;

/// Upstream's `LeaseDuration` default for core components.
pub const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(15);
/// Upstream's `RenewDeadline` default.
pub const DEFAULT_RENEW_DEADLINE: Duration = Duration::from_secs(10);
/// Upstream's `RetryPeriod` default.
pub const DEFAULT_RETRY_PERIOD: Duration = Duration::from_secs(2);
/// Upstream's `JitterFactor`: a candidate waits `retry * (1 + rand * 1.2)` between acquire attempts.
pub const JITTER_FACTOR: f64 = 1.2;

/// Configuration of one candidate.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaderElectionConfig {
    /// Namespace of the Lease.
    pub lease_namespace: String,
    /// Name of the Lease.
    pub lease_name: String,
    /// This candidate's identity, written to `spec.holderIdentity` while it leads. Must be unique
    /// among the candidates (upstream components use `<hostname>_<uuid>`).
    pub identity: String,
    /// How long non-leaders wait without observing a change of the Lease before they take it over.
    /// Written to the Lease as whole seconds (`leaseDurationSeconds`, truncated as upstream).
    pub lease_duration: Duration,
    /// How long the leader keeps retrying to renew before it gives up leading. Must be shorter than
    /// `lease_duration` so a leader that cannot renew stops before the others may take over.
    pub renew_deadline: Duration,
    /// Interval between attempts (acquire polls are jittered by [`JITTER_FACTOR`], renewals are not).
    pub retry_period: Duration,
    /// On cancellation of [`LeaderElector::run`](super::LeaderElector::run) the leader clears
    /// `holderIdentity` (and sets `leaseDurationSeconds` to 1) so another candidate takes over at once.
    pub release_on_cancel: bool,
}

/// Why a configuration was rejected (the same rules as upstream's `NewLeaderElector`).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("leaseDuration must be greater than renewDeadline")]
    LeaseNotLongerThanRenewDeadline,
    #[error("renewDeadline must be greater than retryPeriod*JitterFactor")]
    RenewDeadlineTooShort,
    #[error("leaseDuration must be at least one second (it is written in whole seconds)")]
    LeaseDurationTooShort,
    #[error("retryPeriod must be greater than zero")]
    RetryPeriodZero,
    #[error("lock identity is empty")]
    EmptyIdentity,
    #[error("lease namespace and name must not be empty")]
    EmptyLeaseName,
    #[error("the lock's identity {lock:?} differs from the configured identity {config:?}")]
    IdentityMismatch { lock: String, config: String },
}

impl LeaderElectionConfig {
    /// A configuration with upstream's default timings (15 s / 10 s / 2 s) and `release_on_cancel`.
    pub fn new(
        lease_namespace: impl Into<String>,
        lease_name: impl Into<String>,
        identity: impl Into<String>,
    ) -> LeaderElectionConfig {
        LeaderElectionConfig {
            lease_namespace: lease_namespace.into(),
            lease_name: lease_name.into(),
            identity: identity.into(),
            lease_duration: DEFAULT_LEASE_DURATION,
            renew_deadline: DEFAULT_RENEW_DEADLINE,
            retry_period: DEFAULT_RETRY_PERIOD,
            release_on_cancel: true,
        }
    }

    /// Sets the three timings.
    pub fn with_timings(
        mut self,
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> LeaderElectionConfig {
        self.lease_duration = lease_duration;
        self.renew_deadline = renew_deadline;
        self.retry_period = retry_period;
        self
    }

    /// The value written to `spec.leaseDurationSeconds` (whole seconds, truncated as upstream's
    /// `int(LeaseDuration / time.Second)`).
    pub fn lease_duration_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }

    /// Checks the rules upstream enforces in `NewLeaderElector`, plus a lease of at least one second
    /// (a shorter one would be written as 0 and expire at once).
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.identity.is_empty() {
            return Err(ConfigError::EmptyIdentity);
        }
        if self.lease_namespace.is_empty() || self.lease_name.is_empty() {
            return Err(ConfigError::EmptyLeaseName);
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(ConfigError::LeaseNotLongerThanRenewDeadline);
        }
        if self.retry_period.is_zero() {
            return Err(ConfigError::RetryPeriodZero);
        }
        if self.renew_deadline <= self.retry_period.mul_f64(JITTER_FACTOR) {
            return Err(ConfigError::RenewDeadlineTooShort);
        }
        if self.lease_duration < Duration::from_secs(1) {
            return Err(ConfigError::LeaseDurationTooShort);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(lease: u64, renew: u64, retry: u64) -> LeaderElectionConfig {
        LeaderElectionConfig::new("ns", "lock", "me").with_timings(
            Duration::from_millis(lease),
            Duration::from_millis(renew),
            Duration::from_millis(retry),
        )
    }

    #[test]
    fn defaults_are_upstreams() {
        let c = LeaderElectionConfig::new("kube-system", "x", "id");
        assert_eq!(c.lease_duration, Duration::from_secs(15));
        assert_eq!(c.renew_deadline, Duration::from_secs(10));
        assert_eq!(c.retry_period, Duration::from_secs(2));
        assert_eq!(c.lease_duration_seconds(), 15);
        assert!(c.release_on_cancel);
        assert_eq!(c.validate(), Ok(()));
    }

    #[test]
    fn validation_table() {
        let cases = [
            (cfg(2000, 1500, 300), Ok(())),
            (cfg(2500, 1500, 300), Ok(())),
            (
                cfg(1500, 1500, 300),
                Err(ConfigError::LeaseNotLongerThanRenewDeadline),
            ),
            (
                cfg(2000, 1200, 1000),
                Err(ConfigError::RenewDeadlineTooShort),
            ),
            (cfg(2000, 1500, 0), Err(ConfigError::RetryPeriodZero)),
            (cfg(900, 500, 100), Err(ConfigError::LeaseDurationTooShort)),
        ];
        for (c, want) in cases {
            assert_eq!(c.validate(), want, "{c:?}");
        }
        let mut c = cfg(2000, 1500, 300);
        c.identity.clear();
        assert_eq!(c.validate(), Err(ConfigError::EmptyIdentity));
        let mut c = cfg(2000, 1500, 300);
        c.lease_name.clear();
        assert_eq!(c.validate(), Err(ConfigError::EmptyLeaseName));
    }

    #[test]
    fn lease_seconds_truncate() {
        assert_eq!(cfg(2999, 1500, 300).lease_duration_seconds(), 2);
    }
}
