//! Event handlers and their delivery (upstream client-go `tools/cache/shared_informer.go`:
//! `ResourceEventHandler`, `ResourceEventHandlerFuncs`, `processorListener`, `DeletedFinalStateUnknown`,
//! `DeletionHandlingMetaNamespaceKeyFunc`).
//!
//! Each registered handler gets its own listener: an unbounded queue of notifications and one task that
//! calls the handler for them one at a time, in the order the informer saw the changes. So the calls
//! for one object (and for all objects) reach a handler in order, and a slow handler delays only
//! itself. Handlers are plain synchronous callbacks, as upstream: they should only record the change
//! (typically enqueue a key in a work queue) and return.
//!
//! Differences from upstream: the "initial list delivered" marker travels through the same queue as the
//! notifications (so a registration's `has_synced` turns true exactly after its handler returned from
//! the last initial add), and a panicking handler is logged and skipped instead of crashing the process.

use std::fmt;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use kube::Resource;
use tokio::sync::{mpsc, watch};

use super::index::object_key;

/// What `on_delete` receives (upstream: the object, or a `DeletedFinalStateUnknown`).
#[derive(Debug, PartialEq)]
pub enum DeletedObject<K> {
    /// The delete was watched: the object's final state.
    Object(Arc<K>),
    /// The object vanished while the informer was not watching (seen only as missing from a relist):
    /// its key and the last state the cache had, which may be stale.
    DeletedFinalStateUnknown { key: String, last_known: Arc<K> },
}

impl<K> Clone for DeletedObject<K> {
    fn clone(&self) -> Self {
        match self {
            DeletedObject::Object(o) => DeletedObject::Object(o.clone()),
            DeletedObject::DeletedFinalStateUnknown { key, last_known } => {
                DeletedObject::DeletedFinalStateUnknown {
                    key: key.clone(),
                    last_known: last_known.clone(),
                }
            }
        }
    }
}

impl<K> DeletedObject<K> {
    /// The final state, or the last known one for a tombstone.
    pub fn object(&self) -> &Arc<K> {
        match self {
            DeletedObject::Object(o) => o,
            DeletedObject::DeletedFinalStateUnknown { last_known, .. } => last_known,
        }
    }

    pub fn is_tombstone(&self) -> bool {
        matches!(self, DeletedObject::DeletedFinalStateUnknown { .. })
    }
}

impl<K: Resource> DeletedObject<K> {
    /// The object's key, also for a tombstone (upstream `DeletionHandlingMetaNamespaceKeyFunc`).
    pub fn key(&self) -> String {
        match self {
            DeletedObject::Object(o) => object_key(o.as_ref()),
            DeletedObject::DeletedFinalStateUnknown { key, .. } => key.clone(),
        }
    }
}

/// Callbacks for changes of the informer's objects (upstream `ResourceEventHandler`). Every method has
/// an empty default. Calls for one handler never overlap.
pub trait ResourceEventHandler<K>: Send + Sync + 'static {
    /// A new object; `is_in_initial_list` for objects of the first list (and the synthetic adds a
    /// handler registered later gets for what is already cached).
    fn on_add(&self, obj: &Arc<K>, is_in_initial_list: bool) {
        let _ = (obj, is_in_initial_list);
    }
    /// A changed object, or a periodic resync (then `old` and `new` are the same object).
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        let _ = (old, new);
    }
    fn on_delete(&self, obj: &DeletedObject<K>) {
        let _ = obj;
    }
}

type AddFn<K> = Box<dyn Fn(&Arc<K>, bool) + Send + Sync>;
type UpdateFn<K> = Box<dyn Fn(&Arc<K>, &Arc<K>) + Send + Sync>;
type DeleteFn<K> = Box<dyn Fn(&DeletedObject<K>) + Send + Sync>;

/// A handler from closures (upstream `ResourceEventHandlerFuncs`); unset callbacks do nothing.
pub struct EventHandlerFuncs<K> {
    add: Option<AddFn<K>>,
    update: Option<UpdateFn<K>>,
    delete: Option<DeleteFn<K>>,
}

impl<K> Default for EventHandlerFuncs<K> {
    fn default() -> Self {
        EventHandlerFuncs {
            add: None,
            update: None,
            delete: None,
        }
    }
}

impl<K> fmt::Debug for EventHandlerFuncs<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventHandlerFuncs")
            .field("add", &self.add.is_some())
            .field("update", &self.update.is_some())
            .field("delete", &self.delete.is_some())
            .finish()
    }
}

impl<K> EventHandlerFuncs<K> {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn on_add(mut self, f: impl Fn(&Arc<K>, bool) + Send + Sync + 'static) -> Self {
        self.add = Some(Box::new(f));
        self
    }

    pub fn on_update(mut self, f: impl Fn(&Arc<K>, &Arc<K>) + Send + Sync + 'static) -> Self {
        self.update = Some(Box::new(f));
        self
    }

    pub fn on_delete(mut self, f: impl Fn(&DeletedObject<K>) + Send + Sync + 'static) -> Self {
        self.delete = Some(Box::new(f));
        self
    }
}

impl<K: Send + Sync + 'static> ResourceEventHandler<K> for EventHandlerFuncs<K> {
    fn on_add(&self, obj: &Arc<K>, is_in_initial_list: bool) {
        if let Some(f) = &self.add {
            f(obj, is_in_initial_list)
        }
    }
    fn on_update(&self, old: &Arc<K>, new: &Arc<K>) {
        if let Some(f) = &self.update {
            f(old, new)
        }
    }
    fn on_delete(&self, obj: &DeletedObject<K>) {
        if let Some(f) = &self.delete {
            f(obj)
        }
    }
}

/// One entry of a listener's queue.
pub(crate) enum Notification<K> {
    Add {
        obj: Arc<K>,
        initial: bool,
    },
    Update {
        old: Arc<K>,
        new: Arc<K>,
    },
    Delete(DeletedObject<K>),
    /// Everything before this was the initial content: the handler has synced after it.
    Synced,
}

/// The handle returned when a handler is registered (upstream `ResourceEventHandlerRegistration`).
#[derive(Clone, Debug)]
pub struct HandlerRegistration {
    id: u64,
    synced: watch::Receiver<bool>,
}

impl HandlerRegistration {
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Whether this handler has been called for every object of the initial list (or, when it was
    /// registered later, for every object cached at registration).
    pub fn has_synced(&self) -> bool {
        *self.synced.borrow()
    }

    /// Waits until [`has_synced`](Self::has_synced) (or the handler is removed).
    pub async fn wait_synced(&self) {
        let mut rx = self.synced.clone();
        let _ = rx.wait_for(|s| *s).await;
    }
}

type Pending<K> = (
    mpsc::UnboundedReceiver<Notification<K>>,
    Arc<dyn ResourceEventHandler<K>>,
);

/// One handler's queue and delivery task (upstream `processorListener`).
pub(crate) struct Listener<K> {
    pub(crate) id: u64,
    tx: mpsc::UnboundedSender<Notification<K>>,
    pending: Mutex<Option<Pending<K>>>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
    synced: Arc<watch::Sender<bool>>,
    /// 0 = no resyncs for this handler.
    pub(crate) resync_period: Duration,
    /// When the next resync is due (guarded by the informer's delivery lock in practice).
    pub(crate) next_resync: Mutex<Option<Instant>>,
}

impl<K: Send + Sync + 'static> Listener<K> {
    pub(crate) fn new(
        id: u64,
        handler: Arc<dyn ResourceEventHandler<K>>,
        resync_period: Duration,
    ) -> Listener<K> {
        let (tx, rx) = mpsc::unbounded_channel();
        let (synced, _) = watch::channel(false);
        Listener {
            id,
            tx,
            pending: Mutex::new(Some((rx, handler))),
            task: Mutex::new(None),
            synced: Arc::new(synced),
            resync_period,
            next_resync: Mutex::new(
                (!resync_period.is_zero()).then(|| Instant::now() + resync_period),
            ),
        }
    }

    pub(crate) fn registration(&self) -> HandlerRegistration {
        HandlerRegistration {
            id: self.id,
            synced: self.synced.subscribe(),
        }
    }

    pub(crate) fn synced_receiver(&self) -> watch::Receiver<bool> {
        self.synced.subscribe()
    }

    /// Queues a notification; never blocks.
    pub(crate) fn send(&self, n: Notification<K>) {
        // The receiver only goes away when the task is stopped; nothing to deliver to then.
        let _ = self.tx.send(n);
    }

    /// Starts delivering (once). Needs a tokio runtime.
    pub(crate) fn start(&self) {
        let Some((rx, handler)) = self
            .pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        else {
            return;
        };
        let synced = self.synced.clone();
        let task = tokio::spawn(deliver(rx, handler, synced));
        *self.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    }

    /// Stops delivering; queued notifications are dropped.
    pub(crate) fn stop(&self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }

    /// Whether a resync is due at `now`; if so, schedules the next one.
    pub(crate) fn take_resync_due(&self, now: Instant) -> bool {
        let mut next = self.next_resync.lock().unwrap_or_else(|e| e.into_inner());
        match *next {
            Some(at) if at <= now => {
                *next = Some(now + self.resync_period);
                true
            }
            _ => false,
        }
    }

    pub(crate) fn next_resync_at(&self) -> Option<Instant> {
        *self.next_resync.lock().unwrap_or_else(|e| e.into_inner())
    }
}

async fn deliver<K: 'static>(
    mut rx: mpsc::UnboundedReceiver<Notification<K>>,
    handler: Arc<dyn ResourceEventHandler<K>>,
    synced: Arc<watch::Sender<bool>>,
) {
    while let Some(n) = rx.recv().await {
        let result = std::panic::catch_unwind(AssertUnwindSafe(|| match &n {
            Notification::Add { obj, initial } => handler.on_add(obj, *initial),
            Notification::Update { old, new } => handler.on_update(old, new),
            Notification::Delete(d) => handler.on_delete(d),
            Notification::Synced => {
                synced.send_replace(true);
            }
        }));
        if result.is_err() {
            tracing::error!("informer event handler panicked; the notification was skipped");
        }
    }
}
