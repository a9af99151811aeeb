//! The `customresourcecleanup.apiextensions.k8s.io` finalizer (upstream `controller/finalizer` and
//! the CRD registry's `Delete`): deleting a CRD marks it terminating (finalizer, `deletionTimestamp`,
//! `Terminating` condition); this task then deletes its custom resources, waits until none is left
//! (those with finalizers of their own stay until their controllers remove them), and removes the
//! finalizer so the CRD goes.
//!
//! Differences: custom resources are deleted through the store (finalizers honoured, no garbage
//! collector propagation policy), and the task polls once a second instead of requeueing.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};
use storage::ListOptions;

use crate::objects;
use crate::ApiServer;

pub const FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// CRDs whose cleanup task is running.
static RUNNING: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Sets (or replaces) the `Terminating` condition.
pub fn set_terminating(crd: &mut Value, reason: &str, message: &str) {
    if !crd["status"].is_object() {
        crd["status"] = json!({});
    }
    let mut conditions: Vec<Value> = crd["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let since = conditions
        .iter()
        .find(|c| c["type"] == "Terminating" && c["status"] == "True")
        .and_then(|c| c["lastTransitionTime"].as_str())
        .map(str::to_string)
        .unwrap_or_else(objects::now_rfc3339);
    conditions.retain(|c| c["type"] != "Terminating");
    conditions.push(json!({"type": "Terminating", "status": "True", "lastTransitionTime": since, "reason": reason, "message": message}));
    crd["status"]["conditions"] = Value::Array(conditions);
}

/// The first delete of a CRD: the finalizer and the condition (upstream's CRD `REST.Delete`).
pub fn mark_for_deletion(crd: &mut Value, finalizers: &mut Vec<String>) {
    if !finalizers.iter().any(|f| f == FINALIZER) {
        finalizers.push(FINALIZER.to_string());
    }
    set_terminating(
        crd,
        "InstanceDeletionPending",
        "CustomResourceDefinition marked for deletion; CustomResource deletion will begin soon",
    );
}

/// Whether a CRD is deleted and waits for its custom resources to go.
pub fn pending(crd: &Value) -> bool {
    objects::meta_str(crd, "deletionTimestamp").is_some()
        && objects::finalizers(crd).iter().any(|f| f == FINALIZER)
}

/// Starts the cleanup of CRD `name` unless it is running already.
pub fn spawn(api: Arc<ApiServer>, name: String) {
    {
        let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
        if !running
            .get_or_insert_with(HashSet::new)
            .insert(name.clone())
        {
            return;
        }
    }
    tokio::spawn(async move {
        cleanup(&api, &name).await;
        if let Some(set) = RUNNING.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            set.remove(&name);
        }
    });
}

/// Updates the CRD with `change`, retrying on conflicts; `false` when it is gone or no longer pending.
async fn update_crd(api: &ApiServer, name: &str, change: impl Fn(&mut Value)) -> bool {
    let key = format!("/customresourcedefinitions/{name}");
    for _ in 0..20 {
        let Ok(Some(kv)) = api.store.get(&key).await else {
            return false;
        };
        let Ok(mut crd) = serde_json::from_slice::<Value>(&kv.value) else {
            return false;
        };
        if !pending(&crd) {
            return false;
        }
        change(&mut crd);
        let finalizers = objects::finalizers(&crd);
        let result = if finalizers.is_empty() {
            api.store
                .delete(&key, Some(kv.mod_revision))
                .await
                .map(|_| ())
        } else {
            api.store
                .update(
                    &key,
                    objects::encode_for_storage(&crd),
                    Some(kv.mod_revision),
                )
                .await
                .map(|_| ())
        };
        match result {
            Ok(()) => return true,
            Err(e) if e.is_conflict() => continue,
            Err(e) => {
                tracing::warn!(crd = %name, error = %e, "cannot update CRD during cleanup");
                return false;
            }
        }
    }
    false
}

async fn cleanup(api: &ApiServer, name: &str) {
    let Some((group, plural)) = name
        .split_once('.')
        .map(|(p, g)| (g.to_string(), p.to_string()))
    else {
        return;
    };
    if !update_crd(api, name, |crd| {
        set_terminating(
            crd,
            "InstanceDeletionInProgress",
            "CustomResource deletion is in progress",
        )
    })
    .await
    {
        return;
    }
    let prefix = format!("/{group}/{plural}/");
    let mut rounds = 0u32;
    loop {
        match delete_round(api, &prefix).await {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                let message = format!("could not list instances: {e}");
                if !update_crd(api, name, |crd| {
                    set_terminating(crd, "InstanceDeletionFailed", &message)
                })
                .await
                {
                    return;
                }
            }
        }
        rounds += 1;
        if rounds == 5
            && !update_crd(api, name, |crd| {
                set_terminating(
                    crd,
                    "InstanceDeletionCheck",
                    "could not confirm zero CustomResources remaining: timed out waiting for the condition",
                )
            })
            .await
        {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    update_crd(api, name, |crd| {
        set_terminating(crd, "InstanceDeletionCompleted", "removed all instances");
        let rest: Vec<String> = objects::finalizers(crd)
            .into_iter()
            .filter(|f| f != FINALIZER)
            .collect();
        crd["metadata"]["finalizers"] = json!(rest);
        if rest.is_empty() {
            objects::remove_meta(crd, "finalizers");
        }
    })
    .await;
}

/// Deletes (or marks deleted, when they have finalizers) every object under `prefix`; returns how
/// many were there.
async fn delete_round(api: &ApiServer, prefix: &str) -> Result<usize, storage::Error> {
    let mut total = 0;
    let mut after: Option<String> = None;
    loop {
        let page = api
            .store
            .list(ListOptions {
                prefix,
                start_after: after.as_deref(),
                limit: Some(500),
                ..Default::default()
            })
            .await?;
        total += page.items.len();
        for kv in &page.items {
            let Ok(mut obj) = serde_json::from_slice::<Value>(&kv.value) else {
                let _ = api.store.delete(&kv.key, Some(kv.mod_revision)).await;
                continue;
            };
            if objects::finalizers(&obj).is_empty() {
                let _ = api.store.delete(&kv.key, Some(kv.mod_revision)).await;
            } else if objects::meta_str(&obj, "deletionTimestamp").is_none() {
                objects::set_meta(&mut obj, "deletionTimestamp", objects::now_rfc3339());
                objects::set_meta(&mut obj, "deletionGracePeriodSeconds", 0);
                let _ = api
                    .store
                    .update(
                        &kv.key,
                        objects::encode_for_storage(&obj),
                        Some(kv.mod_revision),
                    )
                    .await;
            }
        }
        after = page.items.last().map(|kv| kv.key.clone());
        if !page.more || page.items.is_empty() {
            return Ok(total);
        }
    }
}
