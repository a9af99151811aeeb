//! The controller pattern every rkube controller follows (upstream: the loop shared by
//! kube-controller-manager's controllers and `k8s.io/sample-controller/controller.go`: event handlers
//! that enqueue keys, `Run` with N `worker`s, `processNextWorkItem`, `handleErr`).
//!
//! ```text
//!   shared informers ──(on_add / on_update / on_delete)──> EnqueueHandler: object -> "namespace/name"
//!                                                              │ add (deduplicated while queued)
//!                                                              v
//!                                                  RateLimitingQueue<String>
//!                                                              │ get (one worker per key at a time)
//!                                                              v
//!                   N workers: sync(key) ── Ok ──> forget(key); done(key)
//!                                        └─ Err ─> add_rate_limited(key) (5 ms doubling to 1000 s,
//!                                                  10 qps overall); done(key)
//! ```
//!
//! `sync(key)` is level-triggered: it reads the current state from the informers' caches (never from
//! the event that enqueued the key), computes what should exist, and writes the difference through the
//! API. A missing object in the cache means it was deleted. Because the queue deduplicates and never
//! hands one key to two workers, `sync` for one key never runs concurrently with itself, and a change
//! that arrives while a key is being synced makes it sync again afterwards.
//!
//! A controller in this project is one module directory: `controller.rs` wires informers, handlers,
//! queue and workers as below; the reconcile logic is a pure function in its own file, unit-tested
//! without a server.
//!
//! ```no_run
//! use std::sync::Arc;
//! use std::time::Duration;
//! use client::controller::{Controller, EnqueueHandler};
//! use client::informer::{split_key, InformerConfig, SharedInformer, SharedInformerFactory};
//! use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
//! use k8s_openapi::api::core::v1::ConfigMap;
//!
//! /// The pure part, unit-tested on its own: the label value a ConfigMap should carry.
//! fn desired_label(cm: &ConfigMap) -> Option<String> {
//!     cm.data.as_ref().and_then(|d| d.get("value").cloned())
//! }
//!
//! /// Copies every ConfigMap's `data.value` into a label `value=...` (a toy reconcile).
//! pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
//!     let configmaps = factory.informer::<ConfigMap>();
//!     let queue = RateLimitingQueue::with_config(
//!         default_controller_rate_limiter::<String>(),
//!         QueueConfig::named("configmap-labeler"),
//!     );
//!     configmaps.add_event_handler(EnqueueHandler::new(queue.clone()));
//!     let controller = Controller::new("configmap-labeler", queue).with_max_retries(15);
//!
//!     factory.start();
//!     tokio::time::timeout(Duration::from_secs(60), factory.wait_for_cache_sync())
//!         .await
//!         .expect("caches synced");
//!
//!     let store = configmaps.store();
//!     controller
//!         .run(workers, move |key: String| {
//!             let (store, client) = (store.clone(), client.clone());
//!             async move {
//!                 let Some(cm) = store.get(&key) else {
//!                     return Ok(()); // deleted: nothing to do
//!                 };
//!                 let wanted = desired_label(&cm); // pure, unit-tested
//!                 if cm.metadata.labels.as_ref().and_then(|l| l.get("value")) == wanted.as_ref() {
//!                     return Ok(());
//!                 }
//!                 let (ns, name) = split_key(&key);
//!                 let api: kube::Api<ConfigMap> = kube::Api::namespaced(client, ns.unwrap_or_default());
//!                 let patch = serde_json::json!({"metadata": {"labels": {"value": wanted}}});
//!                 api.patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(&patch))
//!                     .await
//!                     .map(|_| ())
//!             }
//!         })
//!         .await; // returns after controller.shut_down() once the workers finished
//! }
//! ```

mod enqueue;
mod worker;

pub use enqueue::EnqueueHandler;
pub use worker::{process_next_work_item, Controller};
