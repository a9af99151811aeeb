//! Attach and detach operations in flight and their backoff (upstream
//! `volume/util/nestedpendingoperations` with `goroutinemap/exponentialbackoff`, as the
//! operation executor uses them): at most one operation per key, where the key is the volume
//! alone for a volume only one node may have (so attaching it elsewhere waits for a detach) and
//! the volume and node for one that allows multi-attach; a key with no node matches every node.
//! A failed operation blocks the same kind of operation on its key for 500 ms, doubling up to
//! 2 min 2 s; a different kind may start at once and resets the backoff.
//!
//! Difference: an entry whose backoff ran out more than the maximum ago is forgotten (upstream
//! keeps it until its key next succeeds), so failed keys that nobody retries do not pile up.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Upstream `initialDurationBeforeRetry`.
pub const INITIAL_DURATION_BEFORE_RETRY: Duration = Duration::from_millis(500);
/// Upstream `maxDurationBeforeRetry`.
pub const MAX_DURATION_BEFORE_RETRY: Duration = Duration::from_secs(122);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// Upstream `volume_attach`.
    Attach,
    /// Upstream `volume_detach`.
    Detach,
}

#[derive(Clone, Debug)]
struct Op {
    node: Option<String>,
    kind: OpKind,
    pending: bool,
    last_error: Option<Instant>,
    duration_before_retry: Duration,
}

impl Op {
    fn in_backoff(&self, now: Instant) -> bool {
        self.last_error
            .is_some_and(|at| now.saturating_duration_since(at) <= self.duration_before_retry)
    }
}

/// Upstream's key match: a missing node matches any node.
fn nodes_match(a: Option<&str>, b: Option<&str>) -> bool {
    a.is_none() || b.is_none() || a == b
}

#[derive(Debug, Default)]
pub struct Operations {
    ops: BTreeMap<String, Vec<Op>>,
}

impl Operations {
    fn find(&self, volume: &str, node: Option<&str>) -> Option<&Op> {
        self.ops
            .get(volume)?
            .iter()
            .find(|op| nodes_match(op.node.as_deref(), node))
    }

    /// Upstream `IsOperationPending`.
    pub fn is_pending(&self, volume: &str, node: Option<&str>) -> bool {
        self.ops.get(volume).is_some_and(|ops| {
            ops.iter()
                .any(|op| op.pending && nodes_match(op.node.as_deref(), node))
        })
    }

    /// Upstream `IsOperationSafeToRetry`: nothing running on the key, and no backoff for this
    /// kind of operation.
    pub fn is_safe_to_retry(
        &self,
        volume: &str,
        node: Option<&str>,
        kind: OpKind,
        now: Instant,
    ) -> bool {
        match self.find(volume, node) {
            None => true,
            Some(op) if op.pending => false,
            Some(op) => !(op.kind == kind && op.in_backoff(now)),
        }
    }

    /// Starts an operation (upstream `Run`); false if one runs on the key or this kind is in
    /// backoff.
    pub fn start(&mut self, volume: &str, node: Option<&str>, kind: OpKind, now: Instant) -> bool {
        let ops = self.ops.entry(volume.to_string()).or_default();
        match ops
            .iter_mut()
            .find(|op| nodes_match(op.node.as_deref(), node))
        {
            Some(op) if op.pending => false,
            Some(op) if op.kind == kind && op.in_backoff(now) => false,
            Some(op) => {
                if op.kind != kind {
                    op.kind = kind;
                    op.last_error = None;
                    op.duration_before_retry = Duration::ZERO;
                }
                op.node = node.map(str::to_string);
                op.pending = true;
                true
            }
            None => {
                ops.push(Op {
                    node: node.map(str::to_string),
                    kind,
                    pending: true,
                    last_error: None,
                    duration_before_retry: Duration::ZERO,
                });
                true
            }
        }
    }

    /// Ends the operation on the key: forgotten on success, backed off on failure.
    pub fn finish(&mut self, volume: &str, node: Option<&str>, failed: bool, now: Instant) {
        let Some(ops) = self.ops.get_mut(volume) else {
            return;
        };
        let Some(i) = ops
            .iter()
            .position(|op| op.pending && nodes_match(op.node.as_deref(), node))
        else {
            return;
        };
        if !failed {
            ops.remove(i);
        } else {
            let op = &mut ops[i];
            op.pending = false;
            op.duration_before_retry = if op.duration_before_retry.is_zero() {
                INITIAL_DURATION_BEFORE_RETRY
            } else {
                (op.duration_before_retry * 2).min(MAX_DURATION_BEFORE_RETRY)
            };
            op.last_error = Some(now);
        }
        if ops.is_empty() {
            self.ops.remove(volume);
        }
    }

    /// Forgets failed operations whose backoff ended more than the maximum backoff ago.
    pub fn forget_stale(&mut self, now: Instant) {
        self.ops.retain(|_, ops| {
            ops.retain(|op| {
                op.pending
                    || op.last_error.is_none_or(|at| {
                        now.saturating_duration_since(at)
                            <= op.duration_before_retry + MAX_DURATION_BEFORE_RETRY
                    })
            });
            !ops.is_empty()
        });
    }

    /// Operations recorded (running or backing off).
    pub fn len(&self) -> usize {
        self.ops.values().map(Vec::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V: &str = "kubernetes.io/csi/d^h";

    #[test]
    fn one_operation_per_volume_without_node() {
        let mut ops = Operations::default();
        let now = Instant::now();
        assert!(ops.start(V, None, OpKind::Attach, now));
        // A node-less key matches every node.
        assert!(ops.is_pending(V, Some("n2")));
        assert!(!ops.start(V, Some("n2"), OpKind::Attach, now));
        assert!(!ops.is_safe_to_retry(V, Some("n1"), OpKind::Detach, now));
        ops.finish(V, None, false, now);
        assert!(ops.is_empty());

        // Multi-attach volumes: one per node.
        assert!(ops.start(V, Some("n1"), OpKind::Attach, now));
        assert!(ops.start(V, Some("n2"), OpKind::Attach, now));
        assert!(ops.is_pending(V, Some("n1")) && ops.is_pending(V, None));
        ops.finish(V, Some("n2"), false, now);
        assert!(!ops.is_pending(V, Some("n2")));
        assert_eq!(ops.len(), 1);
    }

    #[test]
    fn failures_back_off_exponentially_per_kind() {
        let mut ops = Operations::default();
        let t = Instant::now();
        let ms = Duration::from_millis;
        assert!(ops.start(V, None, OpKind::Attach, t));
        ops.finish(V, None, true, t);
        assert!(!ops.is_pending(V, None));
        assert!(!ops.is_safe_to_retry(V, None, OpKind::Attach, t + ms(500)));
        assert!(!ops.start(V, None, OpKind::Attach, t + ms(500)));
        // Another kind of operation is not held back, and resets the backoff.
        assert!(ops.is_safe_to_retry(V, None, OpKind::Detach, t + ms(1)));
        assert!(ops.start(V, None, OpKind::Attach, t + ms(501)));
        ops.finish(V, None, true, t + ms(501));
        // Second failure: 1 s.
        assert!(!ops.start(V, None, OpKind::Attach, t + ms(1501)));
        assert!(ops.start(V, None, OpKind::Attach, t + ms(1502)));
        ops.finish(V, None, true, t + ms(1502));
        assert!(ops.start(V, None, OpKind::Detach, t + ms(1503)));
        ops.finish(V, None, true, t + ms(1503));
        assert!(
            ops.start(V, None, OpKind::Detach, t + ms(2004)),
            "the detach started from a fresh backoff"
        );
    }

    #[test]
    fn backoff_is_capped_and_stale_entries_go() {
        let mut ops = Operations::default();
        let mut t = Instant::now();
        for _ in 0..12 {
            assert!(ops.start(V, None, OpKind::Attach, t));
            ops.finish(V, None, true, t);
            t += MAX_DURATION_BEFORE_RETRY + Duration::from_millis(1);
        }
        let last = t - MAX_DURATION_BEFORE_RETRY - Duration::from_millis(1);
        assert!(!ops.is_safe_to_retry(V, None, OpKind::Attach, last + MAX_DURATION_BEFORE_RETRY));
        let after_cap = last + MAX_DURATION_BEFORE_RETRY + Duration::from_millis(1);
        assert!(
            ops.is_safe_to_retry(V, None, OpKind::Attach, after_cap),
            "capped at 2m2s"
        );
        ops.forget_stale(last + MAX_DURATION_BEFORE_RETRY * 2);
        assert_eq!(ops.len(), 1, "not stale yet");
        ops.forget_stale(last + MAX_DURATION_BEFORE_RETRY * 2 + Duration::from_millis(1));
        assert!(ops.is_empty());
    }
}
