//! Automatic compaction, for either backend (upstream's apiserver `compactor` in
//! `storage/etcd3/compact.go`): every `interval`, compact to the revision seen at the previous tick, so
//! at least one interval of history (default 5 minutes) is always kept for watches to resume from.

use std::sync::Arc;
use std::time::Duration;

use crate::Store;

/// Upstream's default `--etcd-compaction-interval`.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(300);

/// Spawns the compaction loop; it stops when the returned handle is aborted or the store closes.
pub fn spawn_auto_compaction(
    store: Arc<dyn Store>,
    interval: Duration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        ticker.tick().await;
        let mut previous = match store.current_revision().await {
            Ok(rev) => rev,
            Err(_) => return,
        };
        loop {
            ticker.tick().await;
            let now = match store.current_revision().await {
                Ok(rev) => rev,
                Err(crate::Error::Closed) => return,
                Err(e) => {
                    tracing::warn!(error = %e, "compaction: cannot read revision");
                    continue;
                }
            };
            match store.compact(previous).await {
                Ok(()) => tracing::debug!(revision = previous, "compacted"),
                Err(crate::Error::Closed) => return,
                Err(e) => tracing::warn!(error = %e, revision = previous, "compaction failed"),
            }
            previous = now;
        }
    })
}
