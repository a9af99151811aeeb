//! Writes and reads the API server makes on its own behalf from its controllers' loops (CRD
//! establishing, local APIServices, FlowSchema conditions, the IP allocator's repair): the objects of
//! a resource as the watch cache holds them, and a status write straight to storage, conditional on
//! the revision the writer read.

use serde_json::Value;

use crate::objects;
use crate::ApiServer;

/// Every object of the resource stored under `storage`, decoded, from the watch cache.
pub fn cached_objects(api: &ApiServer, storage: &str) -> Vec<Value> {
    api.caches
        .get(storage)
        .map(|c| {
            c.list(&format!("/{storage}/"), &Default::default())
                .iter()
                .filter_map(|o| serde_json::from_slice(&o.json).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// Stores `updated` (a changed copy of an object read at its `resourceVersion`) under `key` if the
/// object has not changed since. A conflict or a deletion is not an error: the writer's loop sees
/// the newer version (or the deletion) as an event and decides again.
pub async fn replace_if_unchanged(api: &ApiServer, key: &str, updated: &Value) {
    let rv = objects::meta_str(updated, "resourceVersion").and_then(|r| r.parse().ok());
    if let Err(e) = api
        .store
        .update(key, objects::encode_for_storage(updated), rv)
        .await
    {
        if !e.is_conflict() && !e.is_not_found() {
            tracing::warn!(%key, error = %e, "cannot update the object's status");
        }
    }
}
