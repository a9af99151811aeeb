//! The single writer: one thread owns the write connection, drains every write waiting in its queue and
//! commits them in one transaction (group commit), so one fsync covers a whole batch. Each write still
//! gets its own revision and its own result. Events are published only after the commit is durable.
//!
//! Compaction is done here too, in chunks between batches, so that sweeping a large history never stalls
//! writes for long.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use rusqlite::{params, Connection, OptionalExtension, Transaction};
use tokio::sync::oneshot;

use super::schema::{read_meta, write_meta, META_COMPACTED, META_COMPACT_CURSOR, META_REVISION};
use super::watch::WatchHub;
use crate::{Error, Event, EventKind, KeyValue, Result, Revision};

/// Most writes committed in one transaction: bounds the latency a batch adds to its first write.
const MAX_BATCH: usize = 2048;
/// Log rows (by revision range) examined per compaction chunk.
const COMPACT_CHUNK: i64 = 4096;

pub enum WriteOp {
    Create {
        key: String,
        value: Bytes,
    },
    Update {
        key: String,
        value: Bytes,
        expected: Option<Revision>,
    },
    Delete {
        key: String,
        expected: Option<Revision>,
    },
    Compact {
        revision: Revision,
    },
}

/// What a successful write did: the event it produced (none for a compaction).
pub type WriteResult = Result<Option<Event>>;

pub enum Request {
    Write {
        op: WriteOp,
        reply: oneshot::Sender<WriteResult>,
    },
    /// Finish what is queued, then stop and drop the connection.
    Shutdown { done: oneshot::Sender<()> },
}

/// State shared between the writer and the readers.
pub struct Shared {
    /// Revision of the last durable write.
    pub revision: AtomicI64,
    /// Oldest revision that can still be read or watched from.
    pub compacted: AtomicI64,
    pub hub: WatchHub,
}

pub fn run(mut conn: Connection, requests: Receiver<Request>, shared: Arc<Shared>) {
    let mut compaction = Compaction::load(&conn);
    loop {
        // Block for the next request, but wake to sweep compacted history when idle.
        let first = if compaction.pending() {
            match requests.recv_timeout(Duration::from_millis(5)) {
                Ok(r) => Some(r),
                Err(RecvTimeoutError::Timeout) => None,
                Err(RecvTimeoutError::Disconnected) => return,
            }
        } else {
            match requests.recv() {
                Ok(r) => Some(r),
                Err(_) => return,
            }
        };
        let mut batch = Vec::new();
        let mut shutdown = None;
        if let Some(first) = first {
            let mut next = Some(first);
            while let Some(req) = next {
                match req {
                    Request::Write { op, reply } => batch.push((op, reply)),
                    Request::Shutdown { done } => {
                        shutdown = Some(done);
                        break;
                    }
                }
                next = if batch.len() < MAX_BATCH {
                    requests.try_recv().ok()
                } else {
                    None
                };
            }
        }
        if !batch.is_empty() {
            commit_batch(&mut conn, batch, &shared, &mut compaction);
        } else if compaction.pending() {
            if let Err(e) = compaction.sweep_chunk(&mut conn) {
                tracing::warn!(error = %e, "compaction sweep failed; will retry");
            }
        }
        if let Some(done) = shutdown {
            drop(conn);
            let _ = done.send(());
            return;
        }
    }
}

fn commit_batch(
    conn: &mut Connection,
    batch: Vec<(WriteOp, oneshot::Sender<WriteResult>)>,
    shared: &Shared,
    compaction: &mut Compaction,
) {
    let start_revision = shared.revision.load(Ordering::Acquire);
    let mut revision = start_revision;
    let mut results: Vec<WriteResult> = Vec::with_capacity(batch.len());
    let outcome = (|| -> Result<()> {
        let tx = conn.transaction()?;
        for (op, _) in &batch {
            let result = apply(&tx, op, &mut revision, compaction);
            if let Err(Error::Backend(msg)) = &result {
                // A failing statement leaves the transaction unusable: fail the whole batch.
                return Err(Error::Backend(msg.clone()));
            }
            results.push(result);
        }
        if revision != start_revision {
            write_meta(&tx, META_REVISION, revision)?;
        }
        compaction.persist(&tx)?;
        tx.commit()?;
        Ok(())
    })();
    let mut events = Vec::new();
    match outcome {
        Ok(()) => {
            shared.revision.store(revision, Ordering::Release);
            shared
                .compacted
                .store(compaction.compacted, Ordering::Release);
            for ((_, reply), result) in batch.into_iter().zip(results) {
                if let Ok(Some(event)) = &result {
                    events.push(event.clone());
                }
                let _ = reply.send(result);
            }
        }
        Err(e) => {
            tracing::error!(error = %e, "sqlite commit failed; batch rejected");
            compaction.reload(conn);
            for (_, reply) in batch {
                let _ = reply.send(Err(Error::Backend(e.to_string())));
            }
        }
    }
    if !events.is_empty() {
        shared.hub.publish(events);
    }
}

/// Current row of a live key: (mod revision, create revision, value).
fn current_row(tx: &Transaction, key: &str) -> Result<Option<(Revision, Revision, Vec<u8>)>> {
    Ok(tx
        .prepare_cached(
            "SELECT c.revision, l.create_revision, l.value
             FROM current c JOIN log l ON l.revision = c.revision WHERE c.key = ?1",
        )?
        .query_row([key.as_bytes()], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()?)
}

fn check_precondition(
    key: &str,
    row: &Option<(Revision, Revision, Vec<u8>)>,
    expected: Option<Revision>,
) -> Result<()> {
    match (row, expected) {
        (None, _) => Err(Error::NotFound {
            key: key.to_string(),
        }),
        (Some((actual, _, _)), Some(expected)) if *actual != expected => Err(Error::Conflict {
            key: key.to_string(),
            expected,
            actual: *actual,
        }),
        _ => Ok(()),
    }
}

fn insert_log(
    tx: &Transaction,
    revision: Revision,
    key: &str,
    deleted: bool,
    create_revision: Revision,
    prev_revision: Option<Revision>,
    value: &[u8],
) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO log (revision, key, deleted, create_revision, prev_revision, value)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![
        revision,
        key.as_bytes(),
        deleted,
        create_revision,
        prev_revision,
        value
    ])?;
    Ok(())
}

fn apply(
    tx: &Transaction,
    op: &WriteOp,
    revision: &mut Revision,
    compaction: &mut Compaction,
) -> WriteResult {
    match op {
        WriteOp::Create { key, value } => {
            let exists = tx
                .prepare_cached("SELECT 1 FROM current WHERE key = ?1")?
                .exists([key.as_bytes()])?;
            if exists {
                return Err(Error::AlreadyExists { key: key.clone() });
            }
            let rev = *revision + 1;
            insert_log(tx, rev, key, false, rev, None, value)?;
            tx.prepare_cached("INSERT INTO current (key, revision) VALUES (?1, ?2)")?
                .execute(params![key.as_bytes(), rev])?;
            *revision = rev;
            Ok(Some(Event {
                kind: EventKind::Put,
                kv: kv(key, value.clone(), rev, rev),
                prev: None,
            }))
        }
        WriteOp::Update {
            key,
            value,
            expected,
        } => {
            let row = current_row(tx, key)?;
            check_precondition(key, &row, *expected)?;
            let Some((prev_rev, create_rev, prev_value)) = row else {
                unreachable!("checked by check_precondition")
            };
            let rev = *revision + 1;
            insert_log(tx, rev, key, false, create_rev, Some(prev_rev), value)?;
            tx.prepare_cached("UPDATE current SET revision = ?2 WHERE key = ?1")?
                .execute(params![key.as_bytes(), rev])?;
            *revision = rev;
            Ok(Some(Event {
                kind: EventKind::Put,
                kv: kv(key, value.clone(), create_rev, rev),
                prev: Some(kv(key, prev_value.into(), create_rev, prev_rev)),
            }))
        }
        WriteOp::Delete { key, expected } => {
            let row = current_row(tx, key)?;
            check_precondition(key, &row, *expected)?;
            let Some((prev_rev, create_rev, prev_value)) = row else {
                unreachable!("checked by check_precondition")
            };
            let rev = *revision + 1;
            insert_log(tx, rev, key, true, create_rev, Some(prev_rev), &[])?;
            tx.prepare_cached("DELETE FROM current WHERE key = ?1")?
                .execute([key.as_bytes()])?;
            *revision = rev;
            Ok(Some(Event {
                kind: EventKind::Delete,
                kv: kv(key, Bytes::new(), create_rev, rev),
                prev: Some(kv(key, prev_value.into(), create_rev, prev_rev)),
            }))
        }
        WriteOp::Compact { revision: target } => {
            if *target > *revision {
                return Err(Error::FutureRevision {
                    requested: *target,
                    current: *revision,
                });
            }
            compaction.request(*target);
            Ok(None)
        }
    }
}

fn kv(key: &str, value: Bytes, create_revision: Revision, mod_revision: Revision) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value,
        create_revision,
        mod_revision,
    }
}

/// Compaction state: `compacted` is what readers may no longer ask for (it takes effect at once);
/// `cursor` is how far superseded rows have been deleted, which the writer catches up with in chunks.
struct Compaction {
    compacted: Revision,
    cursor: Revision,
    dirty: bool,
}

impl Compaction {
    fn load(conn: &Connection) -> Compaction {
        let compacted = read_meta(conn, META_COMPACTED).unwrap_or(0);
        let cursor = read_meta(conn, META_COMPACT_CURSOR).unwrap_or(0);
        Compaction {
            compacted,
            cursor,
            dirty: false,
        }
    }

    fn reload(&mut self, conn: &Connection) {
        *self = Compaction::load(conn);
    }

    fn pending(&self) -> bool {
        self.cursor < self.compacted
    }

    fn request(&mut self, revision: Revision) {
        if revision > self.compacted {
            self.compacted = revision;
            self.dirty = true;
        }
    }

    fn persist(&mut self, tx: &Transaction) -> rusqlite::Result<()> {
        if self.dirty {
            write_meta(tx, META_COMPACTED, self.compacted)?;
            self.dirty = false;
        }
        Ok(())
    }

    /// Deletes the superseded rows in the next revision range: rows at or below the compacted revision
    /// that are tombstones or have a newer row for the same key at or below it. The latest version of
    /// each key at the compacted revision stays, so lists at that revision still work.
    fn sweep_chunk(&mut self, conn: &mut Connection) -> Result<()> {
        let lo = self.cursor;
        let hi = (lo + COMPACT_CHUNK).min(self.compacted);
        let tx = conn.transaction()?;
        tx.prepare_cached(
            "DELETE FROM log WHERE revision > ?1 AND revision <= ?2 AND (deleted = 1 OR EXISTS (
                 SELECT 1 FROM log newer WHERE newer.key = log.key
                 AND newer.revision > log.revision AND newer.revision <= ?3))",
        )?
        .execute(params![lo, hi, self.compacted])?;
        write_meta(&tx, META_COMPACT_CURSOR, hi)?;
        tx.commit()?;
        self.cursor = hi;
        Ok(())
    }
}
