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

    /// The revision of the last write (1 for an empty store).
    async fn current_revision(&self) -> Result<Revision>;

    /// Discards history older than `revision`: lists at and watches from revisions before it then fail
    /// with [`Error::Compacted`]. The current value of every key is kept.
    async fn compact(&self, revision: Revision) -> Result<()>;

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
