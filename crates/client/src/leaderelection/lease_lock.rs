//! The Lease-backed lock (upstream client-go `tools/leaderelection/resourcelock/leaselock.go`, with the
//! `LeaderElectionRecord` and `Interface` of `resourcelock/interface.go`).
//!
//! The lock keeps the Lease it last read or wrote; [`LeaseLock::update`] PUTs that object with the new
//! spec, so the request carries its `resourceVersion` and the server rejects it with 409 Conflict when
//! someone else wrote the Lease in between ([`LockError::Conflict`]): that is how a lost race is
//! detected. Bodies are JSON (the kube crate's default).
//!
//! Differences from upstream: `update` keeps the Lease's `strategy` and `preferredHolder` instead of
//! rewriting the whole spec; the record has no `endOfTerm`/coordinated fields (coordinated leader
//! election is not implemented); events about the lock are recorded by the elector, not the lock.

use std::future::Future;
use std::sync::Mutex;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Resource;

/// The election state stored in the lock (upstream `LeaderElectionRecord`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LeaderElectionRecord {
    /// Who holds the lock; empty when nobody does (never acquired, or released).
    pub holder_identity: String,
    /// How long others must wait, from the moment they observe a change, before taking over.
    pub lease_duration_seconds: i32,
    pub acquire_time: Option<Timestamp>,
    pub renew_time: Option<Timestamp>,
    /// Number of changes of holder (`spec.leaseTransitions`).
    pub leader_transitions: i32,
}

impl LeaderElectionRecord {
    /// Reads a record from a Lease spec (upstream `LeaseSpecToLeaderElectionRecord`).
    pub fn from_spec(spec: &LeaseSpec) -> LeaderElectionRecord {
        LeaderElectionRecord {
            holder_identity: spec.holder_identity.clone().unwrap_or_default(),
            lease_duration_seconds: spec.lease_duration_seconds.unwrap_or_default(),
            acquire_time: spec.acquire_time.as_ref().map(|t| t.0),
            renew_time: spec.renew_time.as_ref().map(|t| t.0),
            leader_transitions: spec.lease_transitions.unwrap_or_default(),
        }
    }

    /// Writes the record into a Lease spec (upstream `LeaderElectionRecordToLeaseSpec`); the other
    /// fields of `spec` are kept.
    pub fn apply_to(&self, spec: &mut LeaseSpec) {
        spec.holder_identity = Some(self.holder_identity.clone());
        spec.lease_duration_seconds = Some(self.lease_duration_seconds);
        spec.acquire_time = self.acquire_time.map(MicroTime);
        spec.renew_time = self.renew_time.map(MicroTime);
        spec.lease_transitions = Some(self.leader_transitions);
    }
}

/// Why a lock operation failed.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// `update` before any successful `get` or `create`.
    #[error("lock not initialized, call get or create first")]
    NotInitialized,
    /// 409 on update: the lock changed since it was read (a lost race).
    #[error("the lock was modified concurrently (409 Conflict)")]
    Conflict,
    /// 409 on create: another candidate created the lock first.
    #[error("the lock already exists (409 AlreadyExists)")]
    AlreadyExists,
    /// Any other API or transport error.
    #[error("lock request failed: {0}")]
    Api(#[source] kube::Error),
}

/// A lock the elector can hold (upstream `resourcelock.Interface`).
pub trait ResourceLock: Send + Sync + 'static {
    /// This candidate's identity.
    fn identity(&self) -> &str;
    /// `namespace/name`, for logs.
    fn describe(&self) -> String;
    /// Reads the lock; `Ok(None)` when it does not exist.
    fn get(&self) -> impl Future<Output = Result<Option<LeaderElectionRecord>, LockError>> + Send;
    /// Creates the lock holding `record`.
    fn create(
        &self,
        record: LeaderElectionRecord,
    ) -> impl Future<Output = Result<(), LockError>> + Send;
    /// Replaces the record, conditional on the lock being unchanged since the last get/create/update.
    fn update(
        &self,
        record: LeaderElectionRecord,
    ) -> impl Future<Output = Result<(), LockError>> + Send;
    /// A reference to the lock object, for events about it (`None` before the first read).
    fn object_reference(&self) -> Option<ObjectReference> {
        None
    }
}

/// A lock on `coordination.k8s.io/v1` Lease `namespace/name`.
pub struct LeaseLock {
    api: Api<Lease>,
    namespace: String,
    name: String,
    identity: String,
    /// The Lease as last read or written; its resourceVersion is the update precondition.
    lease: Mutex<Option<Lease>>,
}

impl LeaseLock {
    pub fn new(client: kube::Client, namespace: &str, name: &str, identity: &str) -> LeaseLock {
        LeaseLock {
            api: Api::namespaced(client, namespace),
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            lease: Mutex::new(None),
        }
    }

    fn cached(&self) -> Option<Lease> {
        self.lease.lock().map(|l| l.clone()).unwrap_or_default()
    }

    fn remember(&self, lease: Option<Lease>) {
        if let Ok(mut slot) = self.lease.lock() {
            *slot = lease;
        }
    }
}

fn api_code(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

impl ResourceLock for LeaseLock {
    fn identity(&self) -> &str {
        &self.identity
    }

    fn describe(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    async fn get(&self) -> Result<Option<LeaderElectionRecord>, LockError> {
        match self.api.get(&self.name).await {
            Ok(lease) => {
                let record =
                    LeaderElectionRecord::from_spec(&lease.spec.clone().unwrap_or_default());
                self.remember(Some(lease));
                Ok(Some(record))
            }
            Err(e) if api_code(&e) == Some(404) => Ok(None),
            Err(e) => Err(LockError::Api(e)),
        }
    }

    async fn create(&self, record: LeaderElectionRecord) -> Result<(), LockError> {
        let mut spec = LeaseSpec::default();
        record.apply_to(&mut spec);
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.name.clone()),
                namespace: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(spec),
        };
        match self.api.create(&PostParams::default(), &lease).await {
            Ok(created) => {
                self.remember(Some(created));
                Ok(())
            }
            Err(e) if api_code(&e) == Some(409) => Err(LockError::AlreadyExists),
            Err(e) => Err(LockError::Api(e)),
        }
    }

    async fn update(&self, record: LeaderElectionRecord) -> Result<(), LockError> {
        let mut lease = self.cached().ok_or(LockError::NotInitialized)?;
        record.apply_to(lease.spec.get_or_insert_with(LeaseSpec::default));
        match self
            .api
            .replace(&self.name, &PostParams::default(), &lease)
            .await
        {
            Ok(updated) => {
                self.remember(Some(updated));
                Ok(())
            }
            Err(e) if api_code(&e) == Some(409) => Err(LockError::Conflict),
            Err(e) => Err(LockError::Api(e)),
        }
    }

    fn object_reference(&self) -> Option<ObjectReference> {
        self.cached().map(|lease| lease.object_ref(&()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_round_trips_through_spec() {
        let t = Timestamp::from_second(1_700_000_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let record = LeaderElectionRecord {
            holder_identity: "a".into(),
            lease_duration_seconds: 15,
            acquire_time: Some(t),
            renew_time: Some(t),
            leader_transitions: 3,
        };
        let mut spec = LeaseSpec {
            strategy: Some("OldestEmulationVersion".into()),
            ..LeaseSpec::default()
        };
        record.apply_to(&mut spec);
        assert_eq!(spec.strategy.as_deref(), Some("OldestEmulationVersion"));
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(LeaderElectionRecord::from_spec(&spec), record);
        assert_eq!(
            LeaderElectionRecord::from_spec(&LeaseSpec::default()),
            LeaderElectionRecord::default()
        );
    }
}
