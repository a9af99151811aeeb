//! Revisioned key-value storage: the layer under the API server (upstream `k8s.io/apiserver/pkg/storage`
//! and its `etcd3` implementation).
//!
//! Every write gets the next value of one global revision counter, exactly as in etcd; that revision becomes
//! the object's `resourceVersion`. Two backends implement [`Store`]:
//! - [`sqlite::SqliteStore`], the embedded default: one writer thread with group commit, parallel readers,
//!   an MVCC history table for lists at past revisions and watch replay;
//! - [`etcd::EtcdStore`], etcd v3 for users who outgrow one machine.
//!
//! Keys are byte-ordered strings such as `/pods/default/web-0`. The etcd backend prepends its configured
//! prefix (default `/registry`, as upstream's `--etcd-prefix`); the SQLite file holds only rkube's keys, so
//! it stores them as given.
//!
//! Watch semantics follow the Kubernetes storage interface rather than raw etcd: `watch(prefix, R)` delivers
//! every change with revision strictly greater than `R` (the client has seen state at `R`), in revision
//! order, exactly once.

pub mod compaction;
mod error;
pub mod etcd;
pub mod etcd_process;
pub mod migrate;
pub mod sqlite;

use std::pin::Pin;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;

pub use error::{Error, Result};

/// A store revision. Revisions start at 1 for an empty store; the first write is revision 2 (as etcd).
pub type Revision = i64;

/// One key with its value and the revisions that created and last modified it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KeyValue {
    pub key: String,
    pub value: Bytes,
    /// Revision of the write that created this key (the latest creation, if it was deleted and re-created).
    pub create_revision: Revision,
    /// Revision of the last write to this key: the object's resourceVersion.
    pub mod_revision: Revision,
}

/// Result of a list: the items in key order, the revision of the snapshot they were read at, and whether
/// more items remain after the last one (for pagination with `start_after`).
#[derive(Clone, Debug, Default)]
pub struct ListResult {
    pub items: Vec<KeyValue>,
    pub revision: Revision,
    pub more: bool,
    /// How many keys the range (from `start_after` to the end of the prefix) holds at `revision`,
    /// whatever the limit: etcd's `RangeResponse.count`, which upstream's `remainingItemCount` is
    /// computed from.
    pub count: i64,
}

/// Options of a list: which keys, from where, how many, and at which revision.
#[derive(Clone, Debug, Default)]
pub struct ListOptions<'a> {
    /// Only keys that start with this prefix. Callers end directory prefixes with `/`.
    pub prefix: &'a str,
    /// Only keys strictly greater than this one (the last key of the previous page).
    pub start_after: Option<&'a str>,
    /// At most this many items; `None` or 0 means no limit.
    pub limit: Option<usize>,
    /// Read the snapshot at this revision; `None` means the current one. A compacted revision fails with
    /// [`Error::Compacted`], a future one with [`Error::FutureRevision`].
    pub at_revision: Option<Revision>,
}

impl<'a> ListOptions<'a> {
    pub fn prefix(prefix: &'a str) -> Self {
        ListOptions {
            prefix,
            ..Default::default()
        }
    }
}

/// What a write did to a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change, as delivered to watchers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    /// The key after the change. For a delete, `value` is empty and `mod_revision` is the revision of the
    /// delete.
    pub kv: KeyValue,
    /// The key before the change; `None` for a creation.
    pub prev: Option<KeyValue>,
}

impl Event {
    pub fn revision(&self) -> Revision {
        self.kv.mod_revision
    }
}

/// The result of a delete: the value that was deleted and the revision of the delete.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deleted {
    pub prev: KeyValue,
    pub revision: Revision,
}

/// A stream of watch events. It ends only with an error item (or when the store closes).
pub type WatchStream = Pin<Box<dyn Stream<Item = Result<Event>> + Send>>;

/// One item of a watch that reports its progress ([`Store::watch_progress`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchItem {
    Event(Event),
    /// The watch has delivered every change under its prefix up to and including this revision, and
    /// will deliver none at or below it: etcd's progress notification. A watcher that has seen it may
    /// treat the store's revision as reached even though no event of that revision concerned it (the
    /// write was under another prefix, or by another program sharing the store). Sent only after a
    /// [`ProgressRequester::request`]; several requests may be answered by one item, and a revision
    /// lower than the last event's may come (etcd before 3.4.24): readers keep the maximum.
    Progress(Revision),
}

/// The stream of [`Store::watch_progress`]. It ends only with an error item (or when the store closes).
pub type ProgressWatchStream = Pin<Box<dyn Stream<Item = Result<WatchItem>> + Send>>;

/// Asks a progress-reporting watch to send a [`WatchItem::Progress`] soon (etcd's
/// `WatchProgressRequest`). Requests made while one is outstanding are merged into it, so callers may
/// ask as often as they like; upstream's cacher asks every 100 ms while someone waits.
#[derive(Clone, Debug, Default)]
pub struct ProgressRequester(Arc<tokio::sync::Notify>);

impl ProgressRequester {
    pub fn new() -> ProgressRequester {
        ProgressRequester::default()
    }

    pub fn request(&self) {
        // One stored permit: requests made before the watch takes it are merged.
        self.0.notify_one();
    }

    /// Completes at the next request (for the backend's watch loop).
    pub async fn requested(&self) {
        self.0.notified().await
    }
}

/// A watch that can report its progress: the stream, and the requester when the backend can answer
/// progress requests reliably (`None`: only events come, as from [`Store::watch`]).
pub struct ProgressWatch {
    pub stream: ProgressWatchStream,
    pub requester: Option<ProgressRequester>,
}

/// Where the periodic compactor stands between two rounds ([`Store::compact_round`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CompactionState {
    /// How many rounds the servers sharing the store have recorded (upstream's `compact_rev_key`
    /// version); 0 before the first.
    pub epoch: i64,
    /// The store revision read at the previous round: what the next round compacts to.
    pub revision: Revision,
}

/// What one compaction round did, and the state for the next round.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactionRound {
    pub next: CompactionState,
    /// The revision history is discarded before, by this server or (for a shared store) by another
    /// one that won the round; `None` when no compaction happened.
    pub compacted: Option<Revision>,
}

/// A revisioned key-value store with etcd's semantics.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// The current value of `key`, or `None`.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>>;

    /// A consistent snapshot of the keys under `opts.prefix`, in key order.
    async fn list(&self, opts: ListOptions<'_>) -> Result<ListResult>;

    /// Creates `key`; fails with [`Error::AlreadyExists`] if it exists.
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue>;

    /// Replaces the value of an existing `key`. With `expected_mod_revision`, fails with
    /// [`Error::Conflict`] unless the key's current mod revision equals it. Fails with
    /// [`Error::NotFound`] if the key is absent.
    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected_mod_revision: Option<Revision>,
    ) -> Result<KeyValue>;

    /// Deletes `key`, with the same precondition as [`Store::update`], and returns what was deleted.
    async fn delete(&self, key: &str, expected_mod_revision: Option<Revision>) -> Result<Deleted>;

    /// Every change under `prefix` with a revision greater than `from_revision`, in order. A
    /// `from_revision` of 0 means "from now". A compacted `from_revision` fails with
    /// [`Error::Compacted`] (returned here or as the stream's first item).
    async fn watch(&self, prefix: &str, from_revision: Revision) -> Result<WatchStream>;

    /// As [`Store::watch`], with [`WatchItem::Progress`] items on request through the returned
    /// requester. The default reports no progress (no requester): only events come.
    async fn watch_progress(&self, prefix: &str, from_revision: Revision) -> Result<ProgressWatch> {
        use futures::StreamExt;
        let events = self.watch(prefix, from_revision).await?;
        Ok(ProgressWatch {
            stream: Box::pin(events.map(|item| item.map(WatchItem::Event))),
            requester: None,
        })
    }

    /// The revision of the last write (1 for an empty store).
    async fn current_revision(&self) -> Result<Revision>;

    /// Discards history older than `revision`: lists at and watches from revisions before it then fail
    /// with [`Error::Compacted`]. The current value of every key is kept.
    async fn compact(&self, revision: Revision) -> Result<()>;

    /// The revision history was last compacted to (0 when never): reads at and watches from older
    /// revisions fail with [`Error::Compacted`]. A server starting on the store learns it, to answer
    /// such resourceVersions with 410 before asking the store (whoever compacted: another server, an
    /// operator, `rkube migrate`).
    async fn compacted_to(&self) -> Result<Revision> {
        Ok(0)
    }

    /// One round of the periodic compactor ([`crate::compaction`]): compacts to `state.revision` (the
    /// revision read one round earlier) unless it is 0, and returns the state for the next round. The
    /// default compacts locally every round. A store shared by several servers (etcd) lets only one of
    /// them compact per round, as upstream's `etcd3/compact.go`: the others see the round taken and
    /// skip it.
    async fn compact_round(&self, state: CompactionState) -> Result<CompactionRound> {
        let current = self.current_revision().await?;
        let compacted = if state.revision > 0 {
            self.compact(state.revision).await?;
            Some(state.revision)
        } else {
            None
        };
        Ok(CompactionRound {
            next: CompactionState {
                epoch: state.epoch + 1,
                revision: current,
            },
            compacted,
        })
    }

    /// The number of keys under `prefix`.
    async fn count(&self, prefix: &str) -> Result<i64>;

    /// Finishes pending writes, ends watches and releases files and connections; later calls fail
    /// with [`Error::Closed`] where the backend can tell. The default does nothing.
    async fn close(&self) {}
}

/// The end of the key range that holds every key starting with `prefix` (etcd's `GetPrefixRangeEnd`):
/// the prefix with its last byte that is not 0xff incremented. Empty means "no end".
pub fn prefix_range_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    Vec::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_range_end_increments_last_byte() {
        assert_eq!(prefix_range_end(b"/pods/"), b"/pods0".to_vec());
        assert_eq!(prefix_range_end(b"a\xff"), b"b".to_vec());
        assert_eq!(prefix_range_end(b"\xff\xff"), Vec::<u8>::new());
        assert_eq!(prefix_range_end(b""), Vec::<u8>::new());
    }
}
