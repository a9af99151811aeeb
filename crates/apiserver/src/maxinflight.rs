//! `--max-requests-inflight` and `--max-mutating-requests-inflight`: upstream's
//! `WithMaxInFlightLimit` filter, the limit it applies when API Priority and Fairness
//! ([`crate::flowcontrol`]) is off (`--enable-priority-and-fairness=false`). Reads (GET, HEAD,
//! OPTIONS) and writes each have a number of seats; a request finding none answers 429 with `Retry-After: 1`,
//! which client-go and kube-rs retry. Long-running requests (watches; exec, attach, port-forward
//! and proxying never get here) take no seat, and members of `system:masters` are served even when
//! the seats are gone ("a super-admin should always get an answer", as upstream puts it), which also
//! keeps `rkube server`'s own components, using the admin kubeconfig, unthrottled.

use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Upstream's privileged group.
const SYSTEM_MASTERS: &str = "system:masters";

/// The two pools of seats; `None` is unlimited (a flag of 0).
#[derive(Debug)]
pub struct MaxInFlight {
    readonly: Option<Arc<Semaphore>>,
    mutating: Option<Arc<Semaphore>>,
}

/// Why a request got no seat.
#[derive(Debug, PartialEq, Eq)]
pub struct TooManyRequests;

impl Default for MaxInFlight {
    /// Upstream's defaults: 400 reads, 200 writes.
    fn default() -> Self {
        MaxInFlight::new(400, 200)
    }
}

impl MaxInFlight {
    pub fn new(readonly: usize, mutating: usize) -> MaxInFlight {
        let pool = |n: usize| (n > 0).then(|| Arc::new(Semaphore::new(n)));
        MaxInFlight {
            readonly: pool(readonly),
            mutating: pool(mutating),
        }
    }

    /// A seat for a request: held until the permit is dropped (None: no seat needed or unlimited).
    pub fn admit(
        &self,
        method: &http::Method,
        long_running: bool,
        groups: &[String],
    ) -> Result<Option<OwnedSemaphorePermit>, TooManyRequests> {
        if long_running {
            return Ok(None);
        }
        let readonly = matches!(
            *method,
            http::Method::GET | http::Method::HEAD | http::Method::OPTIONS
        );
        let pool = if readonly {
            &self.readonly
        } else {
            &self.mutating
        };
        let Some(pool) = pool else {
            return Ok(None);
        };
        match pool.clone().try_acquire_owned() {
            Ok(permit) => Ok(Some(permit)),
            Err(_) if groups.iter().any(|g| g == SYSTEM_MASTERS) => Ok(None),
            Err(_) => Err(TooManyRequests),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seats_per_kind_and_exemptions() {
        let limits = MaxInFlight::new(1, 1);
        let user: Vec<String> = vec!["system:authenticated".into()];
        let admin: Vec<String> = vec!["system:masters".into()];
        let read = limits.admit(&http::Method::GET, false, &user).unwrap();
        assert!(read.is_some());
        // Reads are full; writes are not.
        assert_eq!(
            limits.admit(&http::Method::GET, false, &user).unwrap_err(),
            TooManyRequests
        );
        let write = limits.admit(&http::Method::POST, false, &user).unwrap();
        assert!(write.is_some());
        assert!(limits.admit(&http::Method::PATCH, false, &user).is_err());
        // Watches take no seat; system:masters gets in anyway.
        assert!(limits
            .admit(&http::Method::GET, true, &user)
            .unwrap()
            .is_none());
        assert!(limits.admit(&http::Method::GET, false, &admin).is_ok());
        // A seat comes back when its request ends.
        drop(read);
        assert!(limits
            .admit(&http::Method::GET, false, &user)
            .unwrap()
            .is_some());
        drop(write);
        // 0 is unlimited.
        let open = MaxInFlight::new(0, 0);
        for _ in 0..1000 {
            assert!(open.admit(&http::Method::POST, false, &user).is_ok());
        }
    }
}
