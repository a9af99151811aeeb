//! The etcd v3 backend: upstream's `k8s.io/apiserver/pkg/storage/etcd3` store, for users who outgrow the
//! embedded SQLite store and want a replicated, highly available one.
//!
//! Every key is stored as the configured prefix (default [`DEFAULT_PREFIX`], as upstream's
//! `--etcd-prefix`) followed by the key, so an rkube cluster and an upstream one keep their objects at
//! the same etcd paths. Revisions are etcd's own: a key's `mod_revision` is the object's
//! `resourceVersion`.
//!
//! Differences from upstream's store:
//! - This layer moves bytes. Encoding, encryption at rest (transformers), the versioner and the
//!   `GuaranteedUpdate` retry loop live above it, in the registry.
//! - Updates and deletes take an optional expected mod revision instead of a precondition callback, and
//!   report `NotFound` / `Conflict` by re-reading the key inside the same transaction (one round trip).
//! - Pagination is by `start_after` key rather than an opaque continue token; the caller pins later pages
//!   to the first page's revision with `at_revision`, which is what upstream's token encodes.
//! - Watch follows the Kubernetes storage contract: events strictly after `from_revision`, with the
//!   previous value filled for updates and deletes; a compacted start revision is an error item, not a
//!   silently cancelled etcd watcher. Bookmarks are the watch cache's.
//! - Progress notifications: [`Store::watch_progress`] gives a requester whose requests become etcd
//!   `WatchProgressRequest`s on that watch's own gRPC stream, and etcd's answers become
//!   [`WatchItem::Progress`] items; the watch cache asks only while a consistent read waits for it
//!   (upstream's cacher `progress` requester). Only when every member runs 3.4.31+/3.5.13+ (checked
//!   at connect, as upstream's feature-support checker): older members may answer ahead of events
//!   still in flight, so there the requester is `None` and the cache does without.
//! - Compaction is explicit ([`Store::compact`]), scheduled by [`crate::compaction`] for either backend;
//!   upstream's store starts its own compactor. The rounds ([`Store::compact_round`]) are upstream's
//!   `etcd3/compact.go`: a transaction on [`COMPACT_REV_KEY`] lets one server per interval compact,
//!   the others see the record's version moved and skip.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use etcd_client::{
    Client, CompactionOptions, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType,
    GetOptions, KvClient, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse, WatchClient,
    WatchOptions,
};
use futures::StreamExt;

#[path = "etcd_progress.rs"]
mod progress;
#[path = "etcd_watch.rs"]
mod watch;

use watch::WatchState;

use crate::{
    prefix_range_end, CompactionRound, CompactionState, Deleted, Error, Event, EventKind, KeyValue,
    ListOptions, ListResult, ProgressRequester, ProgressWatch, Result, Revision, Store, WatchItem,
    WatchStream,
};

/// The default key prefix, as upstream's `--etcd-prefix`.
pub const DEFAULT_PREFIX: &str = "/registry";

/// How long to wait for a connection, and for the cluster to answer the first request. Upstream's
/// apiserver uses the same 20 s dial timeout.
const DIAL_TIMEOUT: Duration = Duration::from_secs(20);
/// HTTP/2 keepalive, as upstream's apiserver (30 s interval, 10 s timeout): detects a dead member under
/// an idle watch.
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(30);
const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on discovering the compaction revision after etcd reported "compacted" (see
/// [`EtcdStore::compacted_revision`]). etcd checks unsynced watchers every 100 ms.
const COMPACTED_PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// Largest response accepted. gRPC's default of 4 MiB fails lists of a few thousand objects and watch
/// replays (etcd batches up to 1000 revisions per response); upstream's apiserver allows `MaxInt32`.
const MAX_RESPONSE_BYTES: usize = i32::MAX as usize;

/// The key the servers sharing an etcd cluster coordinate compaction through: upstream's
/// `compactRevKey`, outside any `--etcd-prefix`, so rkube and kube-apiservers on one cluster take turns
/// with each other too. Its version counts the rounds; its value is the revision last compacted to.
pub const COMPACT_REV_KEY: &str = "compact_rev_key";

/// A [`Store`] on an etcd v3 cluster.
#[derive(Clone)]
pub struct EtcdStore {
    /// etcd-client's clients are handles on one shared (balanced) channel; cloning one per call is cheap
    /// and lets calls run concurrently, since their methods take `&mut self`.
    kv: KvClient,
    watch: WatchClient,
    prefix: Arc<str>,
    /// Whether progress requests are answered reliably by every member (see
    /// [`progress::members_report_progress`]); decided at connect.
    progress: bool,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("prefix", &self.prefix)
            .finish_non_exhaustive()
    }
}

impl EtcdStore {
    /// Connects to the etcd cluster at `endpoints` (URLs such as `http://127.0.0.1:2379`) and checks it
    /// answers, so a wrong address fails at startup rather than on the first request. Keys are stored
    /// under `prefix` (a trailing `/` is ignored, since keys already start with one).
    pub async fn connect(endpoints: &[String], prefix: &str) -> Result<EtcdStore> {
        let options = ConnectOptions::new()
            .with_connect_timeout(DIAL_TIMEOUT)
            .with_keep_alive(KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT)
            // As upstream does for watches: a member cut off from the leader cancels our watches and fails
            // requests at once, so callers can retry (on another member) instead of waiting silently.
            .with_require_leader(true);
        let client = Client::connect(endpoints, Some(options)).await?;
        let store = EtcdStore {
            kv: client
                .kv_client()
                .max_decoding_message_size(MAX_RESPONSE_BYTES),
            watch: client
                .watch_client()
                .max_decoding_message_size(MAX_RESPONSE_BYTES),
            prefix: Arc::from(prefix.trim_end_matches('/')),
            progress: false,
        };
        match tokio::time::timeout(DIAL_TIMEOUT, store.current_revision()).await {
            Ok(Ok(_)) => {
                let mut store = store;
                store.progress = progress::members_report_progress(endpoints).await;
                Ok(store)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(Error::Backend(format!(
                "etcd: no answer from {endpoints:?} within {DIAL_TIMEOUT:?}"
            ))),
        }
    }

    /// The prefix every key is stored under.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether [`Store::watch_progress`] hands out a requester: every member answered the version
    /// check with a version whose progress responses are ordered with the events.
    pub fn reports_progress(&self) -> bool {
        self.progress
    }

    /// Overrides the version check, for tests on etcd releases older than the fix (progress answers
    /// there are right whenever no event is in flight, which is the case a test of a quiet watch
    /// checks).
    pub fn set_reports_progress(&mut self, progress: bool) {
        self.progress = progress;
    }

    /// Opens an etcd watch and waits for its creation; the state delivers its items.
    async fn open_watch(
        &self,
        prefix: &str,
        from_revision: Revision,
        requester: Option<ProgressRequester>,
    ) -> Result<WatchState> {
        let (start, end) = self.range(prefix);
        WatchState::open(
            self.watch.clone(),
            (start, end),
            self.prefix.clone(),
            from_revision,
            requester,
        )
        .await
    }

    fn kv(&self) -> KvClient {
        self.kv.clone()
    }

    fn full_key(&self, key: &str) -> Vec<u8> {
        full_key(&self.prefix, key)
    }

    /// The etcd range `[start, end)` holding every key under `prefix`.
    fn range(&self, prefix: &str) -> (Vec<u8>, Vec<u8>) {
        let start = self.full_key(prefix);
        let mut end = prefix_range_end(&start);
        if end.is_empty() {
            // etcd reads an empty range end as "this key only"; "\0" means "every key from start".
            end = vec![0];
        }
        (non_empty_key(start), end)
    }

    /// Maps an error of a read at `requested` to `Compacted` / `FutureRevision` where etcd says so.
    async fn revision_error(&self, e: etcd_client::Error, requested: Revision) -> Error {
        match classify(&e) {
            EtcdErrorKind::Compacted => Error::Compacted {
                requested,
                compacted: self.compacted_revision(requested).await,
            },
            EtcdErrorKind::FutureRevision => match self.current_revision().await {
                Ok(current) => Error::FutureRevision { requested, current },
                Err(e) => e,
            },
            EtcdErrorKind::Other => e.into(),
        }
    }

    /// The oldest revision still available, after etcd said `requested` was compacted. etcd's range
    /// error does not carry it (and 3.4's Status RPC does not report it), but a watch from a compacted
    /// revision is cancelled with it, so one short-lived watch on a single key finds it. If that fails,
    /// `requested + 1` is a true lower bound.
    async fn compacted_revision(&self, requested: Revision) -> Revision {
        let key = non_empty_key(self.full_key(""));
        let options = WatchOptions::new().with_start_revision(requested.max(1));
        let mut watch_client = self.watch.clone();
        let probe = async move {
            let mut stream = watch_client.watch(key, Some(options)).await.ok()?;
            while let Some(resp) = stream.message().await.ok()? {
                if resp.compact_revision() > 0 {
                    return Some(resp.compact_revision());
                }
                if resp.canceled() {
                    return None;
                }
            }
            None
        };
        match tokio::time::timeout(COMPACTED_PROBE_TIMEOUT, probe).await {
            Ok(Some(compacted)) => compacted,
            _ => requested + 1,
        }
    }

    /// The error for a failed update/delete precondition, from the key's current value read in the
    /// transaction's else branch.
    fn precondition_error(
        &self,
        key: &str,
        expected: Option<Revision>,
        resp: &TxnResponse,
    ) -> Error {
        let current = match resp.op_responses().into_iter().next() {
            Some(TxnOpResponse::Get(get)) => get.kvs().first().map(|kv| kv.mod_revision()),
            _ => return Error::Backend("etcd: transaction failed without reading the key".into()),
        };
        match (current, expected) {
            (None, _) => Error::NotFound { key: key.into() },
            (Some(actual), Some(expected)) => Error::Conflict {
                key: key.into(),
                expected,
                actual,
            },
            // Unreachable: without an expected revision the only compare is "the key exists".
            (Some(_), None) => {
                Error::Backend(format!("etcd: update of existing key {key:?} was refused"))
            }
        }
    }

    /// The compares of an update/delete: the key exists and, if given, has the expected mod revision.
    /// "Exists" is checked even with an expected revision, so an expected revision of 0 cannot create
    /// the key (etcd reports mod_revision 0 for an absent key).
    fn preconditions(full: &[u8], expected: Option<Revision>) -> Vec<Compare> {
        let mut compares = vec![Compare::create_revision(full, CompareOp::Greater, 0)];
        if let Some(expected) = expected {
            compares.push(Compare::mod_revision(full, CompareOp::Equal, expected));
        }
        compares
    }
}

#[async_trait]
impl Store for EtcdStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let mut resp = self.kv().get(self.full_key(key), None).await?;
        resp.take_kvs()
            .into_iter()
            .next()
            .map(|kv| into_key_value(&self.prefix, kv))
            .transpose()
    }

    async fn list(&self, opts: ListOptions<'_>) -> Result<ListResult> {
        let (mut start, end) = self.range(opts.prefix);
        if let Some(after) = opts.start_after {
            // The smallest key greater than `after`.
            let mut next = self.full_key(after);
            next.push(0);
            // A `start_after` before the prefix must not widen the range.
            if next > start {
                start = next;
            }
        }
        let mut get_options = GetOptions::new().with_range(end);
        if let Some(limit) = opts.limit.filter(|&limit| limit > 0) {
            get_options = get_options.with_limit(i64::try_from(limit).unwrap_or(i64::MAX));
        }
        let at_revision = opts.at_revision.filter(|&revision| revision > 0);
        if let Some(revision) = at_revision {
            get_options = get_options.with_revision(revision);
        }
        let mut resp = match self.kv().get(start, Some(get_options)).await {
            Ok(resp) => resp,
            Err(e) => return Err(self.revision_error(e, at_revision.unwrap_or(0)).await),
        };
        let revision = match at_revision {
            Some(revision) => revision,
            None => header_revision(resp.header())?,
        };
        let more = resp.more();
        let count = resp.count();
        let items = resp
            .take_kvs()
            .into_iter()
            .map(|kv| into_key_value(&self.prefix, kv))
            .collect::<Result<Vec<_>>>()?;
        Ok(ListResult {
            items,
            revision,
            more,
            count,
        })
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let full = self.full_key(key);
        let txn = Txn::new()
            .when([Compare::create_revision(
                full.as_slice(),
                CompareOp::Equal,
                0,
            )])
            .and_then([TxnOp::put(full, value.to_vec(), None)]);
        let resp = self.kv().txn(txn).await?;
        if !resp.succeeded() {
            return Err(Error::AlreadyExists { key: key.into() });
        }
        // The txn wrote once, so the store revision after it is the revision of the put.
        let revision = header_revision(resp.header())?;
        Ok(KeyValue {
            key: key.into(),
            value,
            create_revision: revision,
            mod_revision: revision,
        })
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected_mod_revision: Option<Revision>,
    ) -> Result<KeyValue> {
        let full = self.full_key(key);
        let txn = Txn::new()
            .when(Self::preconditions(&full, expected_mod_revision))
            .and_then([TxnOp::put(
                full.as_slice(),
                value.to_vec(),
                // The previous value carries the create revision to return.
                Some(PutOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(full, None)]);
        let resp = self.kv().txn(txn).await?;
        if !resp.succeeded() {
            return Err(self.precondition_error(key, expected_mod_revision, &resp));
        }
        let revision = header_revision(resp.header())?;
        let create_revision = match resp.op_responses().into_iter().next() {
            Some(TxnOpResponse::Put(put)) => put.prev_key().map(|prev| prev.create_revision()),
            _ => None,
        }
        .ok_or_else(|| Error::Backend("etcd: update returned no previous value".into()))?;
        Ok(KeyValue {
            key: key.into(),
            value,
            create_revision,
            mod_revision: revision,
        })
    }

    async fn delete(&self, key: &str, expected_mod_revision: Option<Revision>) -> Result<Deleted> {
        let full = self.full_key(key);
        let txn = Txn::new()
            .when(Self::preconditions(&full, expected_mod_revision))
            .and_then([TxnOp::delete(
                full.as_slice(),
                Some(DeleteOptions::new().with_prev_key()),
            )])
            .or_else([TxnOp::get(full, None)]);
        let resp = self.kv().txn(txn).await?;
        if !resp.succeeded() {
            return Err(self.precondition_error(key, expected_mod_revision, &resp));
        }
        let revision = header_revision(resp.header())?;
        let prev = match resp.op_responses().into_iter().next() {
            Some(TxnOpResponse::Delete(mut delete)) => delete.take_prev_kvs().into_iter().next(),
            _ => None,
        }
        .ok_or_else(|| Error::Backend("etcd: delete returned no previous value".into()))?;
        Ok(Deleted {
            prev: into_key_value(&self.prefix, prev)?,
            revision,
        })
    }

    async fn watch(&self, prefix: &str, from_revision: Revision) -> Result<WatchStream> {
        let state = self.open_watch(prefix, from_revision, None).await?;
        // Dropping the returned stream drops etcd-client's stream, which resets the HTTP/2 stream; etcd
        // then cancels the watcher.
        let items = futures::stream::unfold(state, |mut state| async move {
            let item = state.next().await?;
            Some((item, state))
        });
        // Without a requester the only progress items are etcd's own (none are asked for); drop them.
        Ok(Box::pin(items.filter_map(|item| async move {
            match item {
                Ok(WatchItem::Event(event)) => Some(Ok(event)),
                Ok(WatchItem::Progress(_)) => None,
                Err(e) => Some(Err(e)),
            }
        })))
    }

    async fn watch_progress(&self, prefix: &str, from_revision: Revision) -> Result<ProgressWatch> {
        let requester = self.progress.then(ProgressRequester::new);
        let state = self
            .open_watch(prefix, from_revision, requester.clone())
            .await?;
        Ok(ProgressWatch {
            stream: Box::pin(futures::stream::unfold(state, |mut state| async move {
                let item = state.next().await?;
                Some((item, state))
            })),
            requester,
        })
    }

    async fn compacted_to(&self) -> Result<Revision> {
        // etcd names its compacted revision only in errors (3.4's Status has no field for it): a
        // read at revision 1 fails once anything was compacted, and the probe then finds it.
        let key = non_empty_key(self.full_key(""));
        let options = GetOptions::new().with_count_only().with_revision(1);
        match self.kv().get(key, Some(options)).await {
            Ok(_) => Ok(0),
            Err(e) => match self.revision_error(e, 1).await {
                Error::Compacted { compacted, .. } => Ok(compacted),
                e => Err(e),
            },
        }
    }

    async fn current_revision(&self) -> Result<Revision> {
        // A count of one key is the cheapest read; its header carries the store revision.
        let key = non_empty_key(self.full_key(""));
        let resp = self
            .kv()
            .get(key, Some(GetOptions::new().with_count_only()))
            .await?;
        header_revision(resp.header())
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        if revision <= 0 {
            // Nothing is older than the first revision.
            return Ok(());
        }
        // Physical: wait until the compaction is applied, so reads at older revisions fail from now on.
        let options = CompactionOptions::new().with_physical();
        match self.kv().compact(revision, Some(options)).await {
            Ok(_) => Ok(()),
            Err(e) => match classify(&e) {
                // Someone (another apiserver, or we before a retry) compacted this far already.
                EtcdErrorKind::Compacted => Ok(()),
                EtcdErrorKind::FutureRevision => Err(Error::FutureRevision {
                    requested: revision,
                    current: self.current_revision().await?,
                }),
                EtcdErrorKind::Other => Err(e.into()),
            },
        }
    }

    async fn compact_round(&self, state: CompactionState) -> Result<CompactionRound> {
        // Take the round only if nobody took it since we last looked (the record's version is the
        // round count we know), recording the revision we are about to compact to.
        let txn = Txn::new()
            .when([Compare::version(
                COMPACT_REV_KEY,
                CompareOp::Equal,
                state.epoch,
            )])
            .and_then([TxnOp::put(
                COMPACT_REV_KEY,
                state.revision.to_string(),
                None,
            )])
            .or_else([TxnOp::get(COMPACT_REV_KEY, None)]);
        let resp = self.kv().txn(txn).await?;
        let current = header_revision(resp.header())?;
        if !resp.succeeded() {
            // Another server took this round: catch up with its count and the revision it compacts to.
            let (epoch, compacted) = match resp.op_responses().into_iter().next() {
                Some(TxnOpResponse::Get(get)) => get
                    .kvs()
                    .first()
                    .map(|kv| (kv.version(), parse_compacted(kv.value())))
                    .unwrap_or((0, None)),
                _ => (0, None),
            };
            return Ok(CompactionRound {
                next: CompactionState {
                    epoch,
                    revision: current,
                },
                compacted,
            });
        }
        let next = CompactionState {
            epoch: state.epoch + 1,
            revision: current,
        };
        if state.revision <= 0 {
            // The first round only records where the next one compacts to, as upstream's bootstrap.
            return Ok(CompactionRound {
                next,
                compacted: None,
            });
        }
        self.compact(state.revision).await?;
        Ok(CompactionRound {
            next,
            compacted: Some(state.revision),
        })
    }

    async fn count(&self, prefix: &str) -> Result<i64> {
        let (start, end) = self.range(prefix);
        let resp = self
            .kv()
            .get(
                start,
                Some(GetOptions::new().with_range(end).with_count_only()),
            )
            .await?;
        Ok(resp.count())
    }
}

/// The revision a `compact_rev_key` record holds (the last compaction's target), if it parses and is
/// positive.
fn parse_compacted(value: &[u8]) -> Option<Revision> {
    std::str::from_utf8(value)
        .ok()?
        .parse::<Revision>()
        .ok()
        .filter(|&revision| revision > 0)
}

/// An etcd watch event as a storage [`Event`].
fn convert_event(prefix: &str, event: &etcd_client::Event) -> Result<Event> {
    let kv = event
        .kv()
        .ok_or_else(|| Error::Backend("etcd: watch event without a key".into()))?;
    let prev = event
        .prev_kv()
        .map(|prev| borrowed_key_value(prefix, prev))
        .transpose()?;
    Ok(match event.event_type() {
        EventType::Put => {
            // A creation has no previous value, whatever etcd found at the revision before.
            let prev = if kv.create_revision() == kv.mod_revision() {
                None
            } else {
                prev
            };
            Event {
                kind: EventKind::Put,
                kv: borrowed_key_value(prefix, kv)?,
                prev,
            }
        }
        EventType::Delete => Event {
            kind: EventKind::Delete,
            // etcd's delete event holds only the key and the delete revision; the create revision is the
            // deleted value's.
            kv: KeyValue {
                key: strip_prefix(prefix, kv.key().to_vec())?,
                value: Bytes::new(),
                create_revision: prev.as_ref().map_or(0, |prev| prev.create_revision),
                mod_revision: kv.mod_revision(),
            },
            prev,
        },
    })
}

/// What kind of etcd error, for the few that the contract names. etcd reports them only as gRPC status
/// messages (`rpctypes.ErrGRPCCompacted`, `ErrGRPCFutureRev`), stable since etcd 3.0.
enum EtcdErrorKind {
    Compacted,
    FutureRevision,
    Other,
}

fn classify(e: &etcd_client::Error) -> EtcdErrorKind {
    if let etcd_client::Error::GRpcStatus(status) = e {
        let message = status.message();
        if message.contains("required revision has been compacted") {
            return EtcdErrorKind::Compacted;
        }
        if message.contains("required revision is a future revision") {
            return EtcdErrorKind::FutureRevision;
        }
    }
    EtcdErrorKind::Other
}

fn header_revision(header: Option<&etcd_client::ResponseHeader>) -> Result<Revision> {
    header
        .map(|header| header.revision())
        .ok_or_else(|| Error::Backend("etcd: response without a header".into()))
}

fn full_key(prefix: &str, key: &str) -> Vec<u8> {
    let mut full = Vec::with_capacity(prefix.len() + key.len());
    full.extend_from_slice(prefix.as_bytes());
    full.extend_from_slice(key.as_bytes());
    full
}

/// etcd rejects an empty key; "\0" is the smallest non-empty one (only reachable with an empty prefix).
fn non_empty_key(key: Vec<u8>) -> Vec<u8> {
    if key.is_empty() {
        vec![0]
    } else {
        key
    }
}

fn strip_prefix(prefix: &str, mut key: Vec<u8>) -> Result<String> {
    if !key.starts_with(prefix.as_bytes()) {
        return Err(Error::Backend(format!(
            "etcd: key {:?} is outside prefix {prefix:?}",
            String::from_utf8_lossy(&key)
        )));
    }
    key.drain(..prefix.len());
    String::from_utf8(key).map_err(|e| Error::Backend(format!("etcd: key is not UTF-8: {e}")))
}

fn into_key_value(prefix: &str, kv: etcd_client::KeyValue) -> Result<KeyValue> {
    let (create_revision, mod_revision) = (kv.create_revision(), kv.mod_revision());
    let (key, value) = kv.into_key_value();
    Ok(KeyValue {
        key: strip_prefix(prefix, key)?,
        value: Bytes::from(value),
        create_revision,
        mod_revision,
    })
}

/// Watch responses lend their events, so their keys and values are copied.
fn borrowed_key_value(prefix: &str, kv: &etcd_client::KeyValue) -> Result<KeyValue> {
    Ok(KeyValue {
        key: strip_prefix(prefix, kv.key().to_vec())?,
        value: Bytes::copy_from_slice(kv.value()),
        create_revision: kv.create_revision(),
        mod_revision: kv.mod_revision(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_prefixed_and_stripped() {
        assert_eq!(
            full_key("/registry", "/pods/a"),
            b"/registry/pods/a".to_vec()
        );
        assert_eq!(
            strip_prefix("/registry", b"/registry/pods/a".to_vec()).ok(),
            Some("/pods/a".to_string())
        );
        assert!(strip_prefix("/registry", b"/other/pods/a".to_vec()).is_err());
    }

    #[test]
    fn compaction_record_values() {
        assert_eq!(parse_compacted(b"1234"), Some(1234));
        assert_eq!(parse_compacted(b"0"), None);
        assert_eq!(parse_compacted(b"x"), None);
    }

    #[test]
    fn empty_keys_become_nul() {
        assert_eq!(non_empty_key(Vec::new()), vec![0]);
        assert_eq!(non_empty_key(b"/a".to_vec()), b"/a".to_vec());
    }
}
