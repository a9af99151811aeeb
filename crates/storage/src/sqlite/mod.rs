//! The embedded store: SQLite in WAL mode, the default backend (as k3s's kine, but with etcd's
//! semantics implemented natively rather than emulated over SQL polling).
//!
//! - Writes go to one writer thread that commits them in batches (group commit, see [`writer`]).
//! - Reads run on a pool of read-only connections in parallel with the writer (WAL snapshots).
//! - Watches are fed by events the writer publishes after each commit, with replay from the `log`
//!   table (see [`watch`]); nothing polls.
//! - A lock file next to the database keeps a second process from opening the same store.

mod reader;
mod schema;
mod watch;
mod writer;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::thread::JoinHandle;

use async_trait::async_trait;
use bytes::Bytes;
use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;

pub use schema::Durability;

use crate::{
    Deleted, Error, Event, EventKind, KeyValue, ListOptions, ListResult, ProgressRequester,
    ProgressWatch, Result, Revision, Store, WatchItem, WatchStream,
};
use futures::StreamExt;
use schema::{read_meta, META_COMPACTED, META_REVISION};
use watch::WatchHub;
use writer::{Request, Shared, WriteOp};

/// Events buffered per watcher between its feeding task and its consumer.
const WATCHER_BUFFER: usize = 1024;

#[derive(Clone, Debug, Default)]
pub struct SqliteOptions {
    pub durability: Durability,
}

/// The SQLite-backed [`Store`]. Cheap to clone; all clones share one database.
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

pub(crate) struct Inner {
    path: PathBuf,
    writer: Mutex<Option<std_mpsc::Sender<Request>>>,
    writer_thread: Mutex<Option<JoinHandle<()>>>,
    readers: Mutex<Vec<Connection>>,
    shared: Arc<Shared>,
    closed: tokio::sync::watch::Sender<bool>,
    lock: Mutex<Option<File>>,
}

impl SqliteStore {
    /// Opens (creating if needed) the store in the SQLite file at `path`.
    pub fn open(path: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteStore> {
        let path = path.as_ref().to_path_buf();
        let open_error = |message: String| Error::Open {
            path: path.clone(),
            message,
        };
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| open_error(format!("cannot create directory: {e}")))?;
        }
        let lock_path = lock_path(&path);
        let lock = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .map_err(|e| open_error(format!("cannot open lock file: {e}")))?;
        lock.try_lock().map_err(|_| {
            open_error(format!(
                "another process holds {}; is an rkube server already running on this data dir?",
                lock_path.display()
            ))
        })?;

        let conn = schema::open_writer(&path, options.durability)?;
        let revision = read_meta(&conn, META_REVISION).map_err(|e| open_error(e.to_string()))?;
        let compacted = read_meta(&conn, META_COMPACTED).map_err(|e| open_error(e.to_string()))?;
        let shared = Arc::new(Shared {
            revision: AtomicI64::new(revision),
            compacted: AtomicI64::new(compacted),
            hub: WatchHub::new(),
        });
        let (sender, requests) = std_mpsc::channel();
        let thread_shared = shared.clone();
        let writer_thread = std::thread::Builder::new()
            .name("sqlite-writer".into())
            .spawn(move || writer::run(conn, requests, thread_shared))
            .map_err(|e| open_error(format!("cannot start writer thread: {e}")))?;
        let (closed, _) = tokio::sync::watch::channel(false);
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                path,
                writer: Mutex::new(Some(sender)),
                writer_thread: Mutex::new(Some(writer_thread)),
                readers: Mutex::new(Vec::new()),
                shared,
                closed,
                lock: Mutex::new(Some(lock)),
            }),
        })
    }

    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Finishes queued writes, stops the writer, ends every watch with [`Error::Closed`] and releases the
    /// file, so that it can be opened again. Later calls fail with [`Error::Closed`].
    pub async fn close(&self) {
        let sender = lock(&self.inner.writer).take();
        if let Some(sender) = sender {
            let (done, wait) = oneshot::channel();
            if sender.send(Request::Shutdown { done }).is_ok() {
                let _ = wait.await;
            }
        }
        let thread = lock(&self.inner.writer_thread).take();
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        self.inner.closed.send_replace(true);
        lock(&self.inner.readers).clear();
        lock(&self.inner.lock).take();
    }

    async fn write(&self, op: WriteOp) -> Result<Option<Event>> {
        let (reply, result) = oneshot::channel();
        {
            let writer = lock(&self.inner.writer);
            let sender = writer.as_ref().ok_or(Error::Closed)?;
            sender
                .send(Request::Write { op, reply })
                .map_err(|_| Error::Closed)?;
        }
        result.await.map_err(|_| Error::Closed)?
    }

    async fn read<T, F>(&self, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    {
        let inner = self.inner.clone();
        tokio::task::spawn_blocking(move || inner.with_reader(f))
            .await
            .map_err(|e| Error::Backend(format!("read task failed: {e}")))?
    }
}

fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Locks a mutex, recovering from poisoning: the data behind these mutexes stays valid after a panic.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Inner {
    fn with_reader<T>(&self, f: impl FnOnce(&mut Connection) -> Result<T>) -> Result<T> {
        if *self.closed.borrow() {
            return Err(Error::Closed);
        }
        let pooled = lock(&self.readers).pop();
        let mut conn = match pooled {
            Some(conn) => conn,
            None => schema::open_reader(&self.path)?,
        };
        let result = f(&mut conn);
        if !*self.closed.borrow() {
            lock(&self.readers).push(conn);
        }
        result
    }

    async fn history(
        self: &Arc<Self>,
        prefix: String,
        after: Revision,
        limit: usize,
    ) -> Result<(Vec<Event>, Revision)> {
        let inner = self.clone();
        tokio::task::spawn_blocking(move || {
            inner.with_reader(|conn| reader::history(conn, &prefix, after, limit))
        })
        .await
        .map_err(|e| Error::Backend(format!("read task failed: {e}")))?
    }
}

impl SqliteStore {
    /// Starts a watcher task and returns its items.
    fn start_watch(
        &self,
        prefix: &str,
        from_revision: Revision,
        requester: Option<ProgressRequester>,
    ) -> Result<ReceiverStream<Result<WatchItem>>> {
        if *self.inner.closed.borrow() {
            return Err(Error::Closed);
        }
        let shared = &self.inner.shared;
        // Subscribe before reading the revision, so nothing committed after "now" can be missed.
        let ring = shared.hub.subscribe();
        let from = if from_revision <= 0 {
            shared.revision.load(Ordering::Acquire)
        } else {
            from_revision
        };
        let compacted = shared.compacted.load(Ordering::Acquire);
        if from < compacted {
            return Err(Error::Compacted {
                requested: from,
                compacted,
            });
        }
        let (out, events) = mpsc::channel(WATCHER_BUFFER);
        tokio::spawn(watch::run_watcher(
            self.inner.clone(),
            prefix.to_string(),
            from,
            ring,
            out,
            requester,
        ));
        Ok(ReceiverStream::new(events))
    }
}

fn expect_event(event: Option<Event>) -> Result<Event> {
    event.ok_or_else(|| Error::Backend("write produced no event".into()))
}

#[async_trait]
impl Store for SqliteStore {
    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        let key = key.to_string();
        self.read(move |conn| reader::get(conn, &key)).await
    }

    async fn list(&self, opts: ListOptions<'_>) -> Result<ListResult> {
        let prefix = opts.prefix.to_string();
        let start_after = opts.start_after.map(str::to_string);
        let (limit, at_revision) = (opts.limit, opts.at_revision);
        self.read(move |conn| {
            let opts = ListOptions {
                prefix: &prefix,
                start_after: start_after.as_deref(),
                limit,
                at_revision,
            };
            reader::list(conn, &opts)
        })
        .await
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        let op = WriteOp::Create {
            key: key.to_string(),
            value,
        };
        Ok(expect_event(self.write(op).await?)?.kv)
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected_mod_revision: Option<Revision>,
    ) -> Result<KeyValue> {
        let op = WriteOp::Update {
            key: key.to_string(),
            value,
            expected: expected_mod_revision,
        };
        Ok(expect_event(self.write(op).await?)?.kv)
    }

    async fn delete(&self, key: &str, expected_mod_revision: Option<Revision>) -> Result<Deleted> {
        let op = WriteOp::Delete {
            key: key.to_string(),
            expected: expected_mod_revision,
        };
        let event = expect_event(self.write(op).await?)?;
        match (event.kind, event.prev) {
            (EventKind::Delete, Some(prev)) => Ok(Deleted {
                prev,
                revision: event.kv.mod_revision,
            }),
            _ => Err(Error::Backend("delete produced no delete event".into())),
        }
    }

    async fn watch(&self, prefix: &str, from_revision: Revision) -> Result<WatchStream> {
        let events = self.start_watch(prefix, from_revision, None)?;
        // No requester: no progress items come.
        Ok(Box::pin(events.filter_map(|item| async move {
            match item {
                Ok(WatchItem::Event(event)) => Some(Ok(event)),
                Ok(WatchItem::Progress(_)) => None,
                Err(e) => Some(Err(e)),
            }
        })))
    }

    async fn watch_progress(&self, prefix: &str, from_revision: Revision) -> Result<ProgressWatch> {
        let requester = ProgressRequester::new();
        let stream = self.start_watch(prefix, from_revision, Some(requester.clone()))?;
        Ok(ProgressWatch {
            stream: Box::pin(stream),
            requester: Some(requester),
        })
    }

    async fn current_revision(&self) -> Result<Revision> {
        if *self.inner.closed.borrow() {
            return Err(Error::Closed);
        }
        Ok(self.inner.shared.revision.load(Ordering::Acquire))
    }

    async fn compacted_to(&self) -> Result<Revision> {
        Ok(self.inner.shared.compacted.load(Ordering::Acquire))
    }

    async fn compact(&self, revision: Revision) -> Result<()> {
        self.write(WriteOp::Compact { revision }).await.map(|_| ())
    }

    async fn count(&self, prefix: &str) -> Result<i64> {
        let prefix = prefix.to_string();
        self.read(move |conn| reader::count(conn, &prefix)).await
    }

    async fn close(&self) {
        SqliteStore::close(self).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open_err(path: &Path) -> String {
        match SqliteStore::open(path, SqliteOptions::default()) {
            Err(e @ Error::Open { .. }) => e.to_string(),
            Err(other) => panic!("expected an Open error, got {other}"),
            Ok(_) => panic!("opened a file that is not an rkube store"),
        }
    }

    #[test]
    fn unreadable_files_give_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let garbage = dir.path().join("garbage.db");
        std::fs::write(&garbage, vec![0x5a; 8192]).unwrap();
        let msg = open_err(&garbage);
        assert!(msg.contains("garbage.db"), "{msg}");

        let foreign = dir.path().join("foreign.db");
        let conn = rusqlite::Connection::open(&foreign).unwrap();
        conn.execute_batch("CREATE TABLE notes (body TEXT);")
            .unwrap();
        drop(conn);
        let msg = open_err(&foreign);
        assert!(
            msg.contains("foreign.db") && msg.contains("not an rkube store"),
            "{msg}"
        );
    }

    #[tokio::test]
    async fn a_store_with_damaged_pages_is_refused_at_open() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("store.db");
        let s = SqliteStore::open(&store, SqliteOptions::default()).unwrap();
        for i in 0..200 {
            s.create(&format!("/k/{i}"), vec![b'v'; 500].into())
                .await
                .unwrap();
        }
        s.close().await;
        // Keep the header page, overwrite the rest: the structure check at open must catch it.
        let mut bytes = std::fs::read(&store).unwrap();
        assert!(
            bytes.len() > 8192,
            "the data was checkpointed into the main file"
        );
        for b in &mut bytes[4096..] {
            *b = 0x5a;
        }
        std::fs::write(&store, &bytes).unwrap();
        let msg = open_err(&store);
        assert!(msg.contains("store.db"), "{msg}");
    }

    #[tokio::test]
    async fn a_second_process_cannot_open_the_same_store() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let first = SqliteStore::open(&path, SqliteOptions::default()).unwrap();
        let msg = open_err(&path);
        assert!(msg.contains("another process"), "{msg}");
        first.close().await;
        SqliteStore::open(&path, SqliteOptions::default()).expect("free again after close");
    }
}
