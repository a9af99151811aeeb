//! The shared informer factory (upstream client-go `informers/factory.go`, `sharedInformerFactory`, and
//! `dynamic/dynamicinformer`): every component asks it for the informer of a resource, and all of them
//! get the same one, so a resource is listed and watched once and cached once per process however many
//! controllers use it.
//!
//! Informers are keyed by object type, collection URL (group, version, resource and namespace), label
//! and field selector, and whether only metadata is fetched. The first request creates the informer with
//! the factory's defaults (or the configuration passed with it); later requests get the same `Arc`.
//! [`start`](SharedInformerFactory::start) starts every informer not yet started, and must be called
//! again for informers requested after it, as upstream.
//!
//! Differences from upstream: there is no generated typed accessor per kind (`Core().V1().Pods()`);
//! `informer::<Pod>()` plays that role for every k8s-openapi kind, `dynamic_informer` for any
//! `ApiResource`. The factory-wide namespace option of upstream is the per-call
//! `namespaced_informer`, because the kube crate's `Api` constructors are typed by scope.

use std::any::{Any, TypeId};
use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex, MutexGuard};

use futures::future::BoxFuture;
use futures::FutureExt;
use kube::api::{ApiResource, DynamicObject};
use kube::core::{NamespaceScope, PartialObjectMeta};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;

use super::metadata::MetadataListerWatcher;
use super::reflector::{ApiListerWatcher, ListerWatcher};
use super::shared::{InformerConfig, SharedInformer};

#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct InformerKey {
    type_id: TypeId,
    url: String,
    label_selector: Option<String>,
    field_selector: Option<String>,
    metadata_only: bool,
}

/// What the factory does with an informer without knowing its type.
trait Control: Send + Sync {
    fn start(&self) -> bool;
    fn stop(&self);
    fn has_synced(&self) -> bool;
    fn wait_for_sync(&self) -> BoxFuture<'_, ()>;
}

struct Typed<K: Clone>(Arc<SharedInformer<K>>);

impl<K: Resource + Clone + Send + Sync + 'static> Control for Typed<K> {
    fn start(&self) -> bool {
        self.0.start()
    }
    fn stop(&self) {
        self.0.stop()
    }
    fn has_synced(&self) -> bool {
        self.0.has_synced()
    }
    fn wait_for_sync(&self) -> BoxFuture<'_, ()> {
        self.0.wait_for_sync().boxed()
    }
}

struct Entry {
    informer: Arc<dyn Any + Send + Sync>,
    control: Arc<dyn Control>,
}

/// Hands out one shared informer per resource (upstream `SharedInformerFactory`).
pub struct SharedInformerFactory {
    client: Client,
    defaults: InformerConfig,
    informers: Mutex<BTreeMap<InformerKey, Entry>>,
}

impl Debug for SharedInformerFactory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<String> = self.lock().keys().map(|k| k.url.clone()).collect();
        f.debug_struct("SharedInformerFactory")
            .field("defaults", &self.defaults)
            .field("informers", &urls)
            .finish()
    }
}

impl SharedInformerFactory {
    /// A factory whose informers use `defaults` (resync period, selectors, backoff) unless a request
    /// passes its own configuration.
    pub fn new(client: Client, defaults: InformerConfig) -> SharedInformerFactory {
        SharedInformerFactory {
            client,
            defaults,
            informers: Mutex::new(BTreeMap::new()),
        }
    }

    pub fn client(&self) -> &Client {
        &self.client
    }

    pub fn defaults(&self) -> &InformerConfig {
        &self.defaults
    }

    fn lock(&self) -> MutexGuard<'_, BTreeMap<InformerKey, Entry>> {
        self.informers.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The informer of `T` for this key, made by `make` on first request.
    fn get_or_create<T: Resource + Clone + Send + Sync + 'static>(
        &self,
        url: String,
        metadata_only: bool,
        config: InformerConfig,
        make: impl FnOnce() -> Arc<dyn ListerWatcher<T>>,
    ) -> Arc<SharedInformer<T>> {
        let key = InformerKey {
            type_id: TypeId::of::<T>(),
            url,
            label_selector: config.reflector.label_selector.clone(),
            field_selector: config.reflector.field_selector.clone(),
            metadata_only,
        };
        let mut informers = self.lock();
        if let Some(entry) = informers.get(&key) {
            if let Ok(informer) = entry.informer.clone().downcast::<SharedInformer<T>>() {
                return informer;
            }
        }
        let lw = make();
        let informer = SharedInformer::new(lw, config);
        informers.insert(
            key,
            Entry {
                informer: informer.clone(),
                control: Arc::new(Typed(informer.clone())),
            },
        );
        informer
    }

    /// The informer for everything `api` can list, with `config` (the factory's defaults when `None`).
    /// Requests for the same collection, selectors and type share one informer; the configuration of
    /// the first request is the one used.
    pub fn informer_for_api<K>(
        &self,
        api: Api<K>,
        config: Option<InformerConfig>,
    ) -> Arc<SharedInformer<K>>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let config = config.unwrap_or_else(|| self.defaults.clone());
        let url = api.resource_url().to_string();
        self.get_or_create(url, false, config, move || {
            Arc::new(ApiListerWatcher::new(api))
        })
    }

    /// The informer of kind `K` in all namespaces (or of the cluster-scoped kind `K`).
    pub fn informer<K>(&self) -> Arc<SharedInformer<K>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        self.informer_for_api(Api::<K>::all(self.client.clone()), None)
    }

    /// The informer of the namespaced kind `K` in namespace `ns` only.
    pub fn namespaced_informer<K>(&self, ns: &str) -> Arc<SharedInformer<K>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
        K::Scope: NamespaceScope,
    {
        self.informer_for_api(Api::<K>::all(self.client.clone()).constrain(ns), None)
    }

    /// The informer of any resource as `DynamicObject` (custom resources; upstream
    /// `dynamicinformer`), in namespace `ns` or everywhere.
    pub fn dynamic_informer(
        &self,
        resource: &ApiResource,
        ns: Option<&str>,
    ) -> Arc<SharedInformer<DynamicObject>> {
        let api = Api::<DynamicObject>::all_with(self.client.clone(), resource);
        let api = match ns {
            Some(ns) => api.constrain(ns),
            None => api,
        };
        self.informer_for_api(api, None)
    }

    /// The metadata-only informer for everything `api` can list.
    pub fn metadata_informer_for_api<K>(
        &self,
        api: Api<K>,
        config: Option<InformerConfig>,
    ) -> Arc<SharedInformer<PartialObjectMeta<K>>>
    where
        K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        let config = config.unwrap_or_else(|| self.defaults.clone());
        let url = api.resource_url().to_string();
        self.get_or_create(url, true, config, move || {
            Arc::new(MetadataListerWatcher::new(api))
        })
    }

    /// The metadata-only informer of kind `K` in all namespaces.
    pub fn metadata_informer<K>(&self) -> Arc<SharedInformer<PartialObjectMeta<K>>>
    where
        K: Resource<DynamicType = ()> + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    {
        self.metadata_informer_for_api(Api::<K>::all(self.client.clone()), None)
    }

    /// Starts every informer requested so far that is not running yet (on the current tokio runtime);
    /// returns how many were started by this call.
    pub fn start(&self) -> usize {
        let controls: Vec<Arc<dyn Control>> =
            self.lock().values().map(|e| e.control.clone()).collect();
        controls.iter().filter(|c| c.start()).count()
    }

    /// Whether every informer requested so far has synced.
    pub fn has_synced(&self) -> bool {
        let controls: Vec<Arc<dyn Control>> =
            self.lock().values().map(|e| e.control.clone()).collect();
        controls.iter().all(|c| c.has_synced())
    }

    /// Waits until every informer requested so far has synced (upstream `WaitForCacheSync`). Bound it
    /// with a timeout: an informer that was not started or cannot list never syncs.
    pub async fn wait_for_cache_sync(&self) {
        let controls: Vec<Arc<dyn Control>> =
            self.lock().values().map(|e| e.control.clone()).collect();
        futures::future::join_all(controls.iter().map(|c| c.wait_for_sync())).await;
    }

    /// Stops every informer (upstream `Shutdown`).
    pub fn shutdown(&self) {
        let controls: Vec<Arc<dyn Control>> =
            self.lock().values().map(|e| e.control.clone()).collect();
        for c in controls {
            c.stop();
        }
    }

    /// How many distinct informers were requested.
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }
}
