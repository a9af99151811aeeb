//! The event handler every controller registers on its informers (upstream: the
//! `AddFunc`/`UpdateFunc`/`DeleteFunc` of each controller calling `enqueue`, with
//! `cache.MetaNamespaceKeyFunc` and `cache.DeletionHandlingMetaNamespaceKeyFunc`).
//!
//! It turns every add, update (resyncs included) and delete, tombstones included, into the object's
//! `namespace/name` key in the work queue. Controllers that enqueue something else (an owner's key, the
//! pods of a node) write their own [`ResourceEventHandler`] on the same model.

use std::sync::Arc;

use kube::Resource;

use crate::informer::{object_key, DeletedObject, ResourceEventHandler};
use crate::workqueue::RateLimitingQueue;

/// Enqueues the key of every changed object.
#[derive(Clone, Debug)]
pub struct EnqueueHandler {
    queue: RateLimitingQueue<String>,
}

impl EnqueueHandler {
    pub fn new(queue: RateLimitingQueue<String>) -> Self {
        EnqueueHandler { queue }
    }
}

impl<K: Resource + Send + Sync + 'static> ResourceEventHandler<K> for EnqueueHandler {
    fn on_add(&self, obj: &Arc<K>, _is_in_initial_list: bool) {
        self.queue.add(object_key(obj.as_ref()));
    }

    fn on_update(&self, _old: &Arc<K>, new: &Arc<K>) {
        self.queue.add(object_key(new.as_ref()));
    }

    fn on_delete(&self, obj: &DeletedObject<K>) {
        self.queue.add(obj.key());
    }
}
