//! Automatic compaction, for either backend (upstream's apiserver `compactor` in
//! `storage/etcd3/compact.go`): every `interval`, compact to the revision seen at the previous tick, so
//! at least one interval of history (default 5 minutes) is always kept for watches to resume from.
//! Each tick is one [`Store::compact_round`]: on etcd the servers sharing the cluster take turns
//! through upstream's `compact_rev_key` record, so one compaction happens per interval however many
//! servers run; SQLite compacts locally.

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
    spawn_auto_compaction_with(store, interval, |_| {})
}

/// As [`spawn_auto_compaction`], calling `on_compacted` with each revision compacted (the API server's
/// watch cache stops serving history older than it).
pub fn spawn_auto_compaction_with(
    store: Arc<dyn Store>,
    interval: Duration,
    on_compacted: impl Fn(crate::Revision) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        // The first round is one interval after the start, as upstream's: it only records the
        // revision the second one compacts to. A round at once would write `compact_rev_key`
        // (outside the watched prefix) as the server starts, moving etcd's revision past its
        // caches' where etcd cannot report progress (before 3.4.31): a consistent LIST read from
        // etcd then names a revision a watch cannot start from for seconds. What was compacted
        // before the start is learnt from the store instead ([`Store::compacted_to`]).
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut state = crate::CompactionState::default();
        loop {
            ticker.tick().await;
            match store.compact_round(state).await {
                Ok(round) => {
                    if let Some(revision) = round.compacted {
                        tracing::debug!(revision, "compacted");
                        on_compacted(revision);
                    }
                    state = round.next;
                }
                Err(crate::Error::Closed) => return,
                // The state stays: on etcd the next round sees the record moved and catches up.
                Err(e) => {
                    tracing::warn!(error = %e, revision = state.revision, "compaction failed")
                }
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sqlite::{SqliteOptions, SqliteStore};
    use crate::ListOptions;

    #[tokio::test]
    async fn compacts_to_the_revision_seen_one_interval_ago() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> =
            Arc::new(SqliteStore::open(dir.path().join("s.db"), SqliteOptions::default()).unwrap());
        store.create("/k/a", "1".into()).await.unwrap();
        let early = store.current_revision().await.unwrap();
        let task = spawn_auto_compaction(store.clone(), Duration::from_millis(100));
        for i in 0..5 {
            store
                .update("/k/a", format!("v{i}").into(), None)
                .await
                .unwrap();
        }
        let latest = store.current_revision().await.unwrap();
        // Two ticks later the revision seen at the first tick (>= latest) is compacted.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            match store.watch("/k/", early).await {
                Err(crate::Error::Compacted { .. }) => break,
                _ if tokio::time::Instant::now() > deadline => {
                    panic!("history was never compacted")
                }
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
        task.abort();
        let list = store
            .list(ListOptions {
                at_revision: Some(latest),
                ..ListOptions::prefix("/k/")
            })
            .await
            .unwrap();
        assert_eq!(list.items.len(), 1);
        assert_eq!(&list.items[0].value[..], b"v4");
    }
}
