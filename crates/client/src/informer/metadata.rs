//! Metadata-only informers (upstream client-go `metadata/metadatainformer` with
//! `metadata/metadatalister`): list and watch `PartialObjectMetadata` instead of whole objects, for
//! controllers that only need names, labels, owner references or finalizers (the garbage collector,
//! namespace deletion). The server sends only `metadata`, which saves memory and bandwidth.
//!
//! The kube crate calls the type `PartialObjectMeta<K>` (`kube::core`); `K` keeps the kind known at
//! compile time although no spec or status is decoded. The informer is an ordinary [`SharedInformer`]
//! over that type, so stores, indexers and handlers work as for full objects.

use std::fmt::Debug;
use std::sync::Arc;

use futures::future::BoxFuture;
use kube::api::{ListParams, ObjectList, WatchParams};
use kube::core::PartialObjectMeta;
use kube::{Api, Resource};
use serde::de::DeserializeOwned;

use super::listwatch::{ApiListerWatcher, RawListWatch};
use super::reflector::{ListerWatcher, WatchStream};
use super::shared::{InformerConfig, SharedInformer};

/// Lists and watches the metadata of `K` (what `Api::list_metadata` / `Api::watch_metadata` ask for).
pub struct MetadataListerWatcher<K> {
    inner: ApiListerWatcher<PartialObjectMeta<K>>,
}

impl<K: Resource> MetadataListerWatcher<K> {
    pub fn new(api: Api<K>) -> Self {
        let url = api.resource_url().to_string();
        MetadataListerWatcher {
            inner: ApiListerWatcher::from_raw(RawListWatch::new(api.into_client(), url, true)),
        }
    }
}

impl<K> ListerWatcher<PartialObjectMeta<K>> for MetadataListerWatcher<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    fn list(
        &self,
        params: ListParams,
    ) -> BoxFuture<'_, Result<ObjectList<PartialObjectMeta<K>>, kube::Error>> {
        self.inner.list(params)
    }

    fn watch(
        &self,
        params: WatchParams,
        resource_version: String,
    ) -> BoxFuture<'_, Result<WatchStream<PartialObjectMeta<K>>, kube::Error>> {
        self.inner.watch(params, resource_version)
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }
}

/// An informer on the metadata of everything `api` can list.
pub fn metadata_informer<K>(
    api: Api<K>,
    config: InformerConfig,
) -> Arc<SharedInformer<PartialObjectMeta<K>>>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
{
    SharedInformer::new(Arc::new(MetadataListerWatcher::new(api)), config)
}
