//! Open watches per user (`--max-watches-per-user`; no upstream counterpart: upstream relies on
//! API Priority and Fairness, which bounds a watch only while it initializes, so one user can hold
//! any number of watches and the memory behind them). A user at the limit gets 429 with
//! `Retry-After` until one of its watches ends; members of `system:masters` are not counted, as
//! with the in-flight limits (`rkube server`'s own components use the admin credential).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use apimachinery::status::ApiError;

use crate::authn::UserInfo;

const SYSTEM_MASTERS: &str = "system:masters";

/// Upstream kube-apiserver has no such flag; this default leaves room for a kubelet's per-object
/// Secret and ConfigMap watches on a full node (110 pods) many times over.
pub const DEFAULT_MAX_WATCHES_PER_USER: usize = 1000;

/// Open watches by user name.
#[derive(Debug, Default)]
pub struct WatchLimits {
    max: usize,
    open: Mutex<HashMap<String, usize>>,
}

/// One open watch; counted until dropped (with the response body that streams it).
#[derive(Debug)]
pub struct WatchSeat {
    limits: Arc<WatchLimits>,
    user: String,
}

impl WatchLimits {
    /// `max` watches per user; 0: no limit.
    pub fn new(max: usize) -> Arc<WatchLimits> {
        Arc::new(WatchLimits {
            max,
            open: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, usize>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A seat for a new watch of `user` (None: not counted).
    pub fn admit(self: &Arc<Self>, user: &UserInfo) -> Result<Option<WatchSeat>, ApiError> {
        if self.max == 0 || user.groups.iter().any(|g| g == SYSTEM_MASTERS) {
            return Ok(None);
        }
        let mut open = self.lock();
        let n = open.entry(user.name.clone()).or_insert(0);
        if *n >= self.max {
            return Err(ApiError::too_many_requests(
                format!(
                    "too many open watches for user {:?} (limit {}); try again later",
                    user.name, self.max
                ),
                1,
            ));
        }
        *n += 1;
        Ok(Some(WatchSeat {
            limits: self.clone(),
            user: user.name.clone(),
        }))
    }

    /// Watches `user` holds open.
    pub fn open(&self, user: &str) -> usize {
        self.lock().get(user).copied().unwrap_or(0)
    }
}

impl Drop for WatchSeat {
    fn drop(&mut self) {
        let mut open = self.limits.lock();
        if let Some(n) = open.get_mut(&self.user) {
            *n -= 1;
            if *n == 0 {
                // Users come and go (service accounts, nodes): no entry outlives its watches.
                open.remove(&self.user);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::authn::test_user as user;

    #[test]
    fn a_user_at_the_limit_waits_for_one_of_its_watches_to_end() {
        let limits = WatchLimits::new(2);
        let alice = user("alice", &["system:authenticated"]);
        let a = limits.admit(&alice).unwrap().expect("counted");
        let _b = limits.admit(&alice).unwrap().expect("counted");
        let e = limits.admit(&alice).unwrap_err();
        assert_eq!(e.code, 429);
        assert_eq!(e.details.as_ref().unwrap().retry_after_seconds, Some(1));
        // Another user is not affected.
        assert!(limits.admit(&user("bob", &[])).unwrap().is_some());
        drop(a);
        assert_eq!(limits.open("alice"), 1);
        assert!(limits.admit(&alice).is_ok());
    }

    #[test]
    fn masters_and_no_limit_are_not_counted() {
        let limits = WatchLimits::new(1);
        let admin = user("admin", &["system:masters"]);
        for _ in 0..5 {
            assert!(limits.admit(&admin).unwrap().is_none());
        }
        let unlimited = WatchLimits::new(0);
        assert!(unlimited.admit(&user("x", &[])).unwrap().is_none());
    }

    #[test]
    fn entries_go_with_their_last_watch() {
        let limits = WatchLimits::new(3);
        let seat = limits.admit(&user("node", &[])).unwrap();
        drop(seat);
        assert!(limits.lock().is_empty());
    }
}
