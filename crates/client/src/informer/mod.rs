//! Informers (upstream client-go `tools/cache` and `informers`): list + watch a collection into an
//! indexed local cache and tell event handlers about every change.
//!
//! - [`reflector`]: list, then watch from the list's resourceVersion; resume after a disconnect, relist
//!   after 410 Gone, follow bookmarks (`reflector.go`).
//! - [`listwatch`]: list and watch requests through the API, decoded into `K` at the edge
//!   (`listwatch.go`).
//! - [`store`] and [`index`]: the thread-safe cache of `Arc<K>` by `namespace/name` with a namespace
//!   index and custom indexers (`store.go`, `thread_safe_store.go`, `index.go`).
//! - [`handlers`]: `on_add` / `on_update` / `on_delete` with `DeletedFinalStateUnknown` tombstones, one
//!   ordered delivery queue per handler (`processorListener`).
//! - [`shared`]: [`SharedInformer`], the reflector + cache + handlers + resync (`shared_informer.go`).
//! - [`factory`]: [`SharedInformerFactory`], one informer per resource per process (`informers/factory.go`).
//! - [`metadata`]: metadata-only informers on `PartialObjectMeta<K>` (`metadata/metadatainformer`).
//!
//! ```no_run
//! # async fn example(client: kube::Client) {
//! use std::time::Duration;
//! use client::informer::{EventHandlerFuncs, InformerConfig, SharedInformerFactory};
//! use k8s_openapi::api::core::v1::Pod;
//!
//! let factory = SharedInformerFactory::new(client, InformerConfig::new().resync(Duration::from_secs(300)));
//! let pods = factory.informer::<Pod>();
//! pods.add_indexer("node", std::sync::Arc::new(|p: &Pod| {
//!     p.spec.as_ref().and_then(|s| s.node_name.clone()).into_iter().collect()
//! })).expect("new index");
//! pods.add_event_handler(EventHandlerFuncs::<Pod>::new()
//!     .on_add(|pod, _| println!("added {:?}", pod.metadata.name))
//!     .on_delete(|gone| println!("deleted {}", gone.key())));
//! factory.start();
//! tokio::time::timeout(Duration::from_secs(30), factory.wait_for_cache_sync()).await.expect("synced");
//! let on_node_a = pods.store().by_index("node", "node-a").expect("index exists");
//! # let _ = on_node_a;
//! # }
//! ```

pub mod factory;
pub mod handlers;
pub mod index;
pub mod listwatch;
pub mod metadata;
pub mod reflector;
pub mod shared;
pub mod store;

pub use factory::SharedInformerFactory;
pub use handlers::{DeletedObject, EventHandlerFuncs, HandlerRegistration, ResourceEventHandler};
pub use index::{
    index_func, label_index_func, namespace_index_func, object_key, split_key, IndexError,
    IndexFunc, NAMESPACE_INDEX,
};
pub use metadata::{metadata_informer, MetadataListerWatcher};
pub use reflector::{
    ApiListerWatcher, Delta, DeltaSink, ListerWatcher, Reflector, ReflectorConfig, ReflectorStats,
    TransformError, TransformFunc,
};
pub use shared::{InformerConfig, SharedInformer, MINIMUM_RESYNC_PERIOD};
pub use store::Store;
