//! DELETE and DELETECOLLECTION (upstream `registry.Store.Delete` with `BeforeDelete`): preconditions,
//! graceful deletion of pods (the object stays, with `deletionTimestamp`, until the kubelet confirms
//! with grace 0), finalizers (the object stays until they are gone), `propagationPolicy` as the garbage
//! collector's `orphan` / `foregroundDeletion` finalizers, and namespaces waiting for `spec.finalizers`.
//! Also the pod `binding` subresource (eviction is in [`super::eviction`]).

use apimachinery::status::{success_status, ApiError};
use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::{decode, storage_error, Ctx};
use crate::objects;
use crate::response::{self, Body};

pub(super) const MAX_RETRIES: usize = 20;

/// The parts of `DeleteOptions` that matter here, from the body or the query.
pub(super) struct DeleteOptions {
    pub grace_period: Option<i64>,
    pub propagation: Option<String>,
    /// `orphanDependents` as sent (deprecated; wins over `propagationPolicy` when set).
    pub orphan: Option<bool>,
    pub precondition_uid: Option<String>,
    pub precondition_rv: Option<String>,
}

fn delete_options(ctx: &Ctx<'_>, body: &Bytes) -> Result<DeleteOptions, ApiError> {
    let body: Value = if body.iter().all(|b| b.is_ascii_whitespace()) {
        json!({})
    } else {
        decode::parse_body(ctx.headers, body)?
    };
    let grace_period =
        match body.get("gracePeriodSeconds").and_then(Value::as_i64) {
            Some(g) => Some(g),
            None => match ctx.query.value("gracePeriodSeconds") {
                Some(g) => Some(g.parse().map_err(|_| {
                    ApiError::bad_request(format!("invalid gracePeriodSeconds {g:?}"))
                })?),
                None => None,
            },
        };
    let orphan = body
        .get("orphanDependents")
        .and_then(Value::as_bool)
        .or_else(|| ctx.query.value("orphanDependents").map(|v| v == "true"));
    let propagation = body
        .get("propagationPolicy")
        .and_then(Value::as_str)
        .or(ctx.query.value("propagationPolicy"))
        .map(str::to_string)
        .or_else(|| {
            orphan.map(|o| {
                if o {
                    "Orphan".into()
                } else {
                    "Background".into()
                }
            })
        });
    if let Some(p) = &propagation {
        if !matches!(p.as_str(), "Orphan" | "Background" | "Foreground") {
            return Err(ApiError::bad_request(format!(
                "propagationPolicy: Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
            )));
        }
    }
    Ok(DeleteOptions {
        grace_period,
        propagation,
        orphan,
        precondition_uid: body
            .pointer("/preconditions/uid")
            .and_then(Value::as_str)
            .map(str::to_string),
        precondition_rv: body
            .pointer("/preconditions/resourceVersion")
            .and_then(Value::as_str)
            .map(str::to_string),
    })
}

pub async fn delete(ctx: &Ctx<'_>, body: Bytes) -> Result<Response<Body>, ApiError> {
    let options = delete_options(ctx, &body)?;
    let (code, obj) = delete_one(ctx, ctx.namespace(), ctx.name(), &options).await?;
    match obj {
        Some(json) => ctx.object_response(code, json),
        None => Ok(response::json_response(code, &success_status(None))),
    }
}

/// Deletes one object; returns the object still there (graceful or finalizing) or the deleted one.
pub(super) async fn delete_one(
    ctx: &Ctx<'_>,
    namespace: &str,
    name: &str,
    options: &DeleteOptions,
) -> Result<(StatusCode, Option<Bytes>), ApiError> {
    for _ in 0..MAX_RETRIES {
        let (old, old_rv) = ctx.current(namespace, name).await?;
        if let Some(uid) = &options.precondition_uid {
            let actual = objects::meta_str(&old, "uid").unwrap_or("");
            if uid != actual {
                return Err(ApiError::conflict(
                    &ctx.qualified(),
                    name,
                    &format!("Precondition failed: UID in precondition: {uid}, UID in object meta: {actual}"),
                ));
            }
        }
        if let Some(rv) = &options.precondition_rv {
            if *rv != old_rv.to_string() {
                return Err(ApiError::conflict(
                    &ctx.qualified(),
                    name,
                    &format!("Precondition failed: ResourceVersion in precondition: {rv}, ResourceVersion in object meta: {old_rv}"),
                ));
            }
        }
        // Admission sees the object being deleted as the old object, and no new one.
        let attrs =
            super::write::admission_attributes(ctx, None, crate::admission::Operation::Delete, name);
        let mut nothing = Value::Null;
        ctx.api
            .admission
            .admit(ctx.api, &attrs, &mut nothing, Some(&old))
            .await?;
        ctx.api
            .admission
            .validate(ctx.api, &attrs, &Value::Null, Some(&old))
            .await?;
        let mut new = old.clone();
        let mut finalizers = gc_finalizers(
            default_gc_policy(&ctx.resource.group, &ctx.resource.plural, &ctx.req.version),
            objects::finalizers(&new),
            options,
        );
        let is_crd = ctx.resource.group == "apiextensions.k8s.io"
            && ctx.resource.plural == "customresourcedefinitions";
        if is_crd && objects::meta_str(&old, "deletionTimestamp").is_none() {
            // A CRD's custom resources are deleted first (the customresourcecleanup finalizer).
            crate::crd::finalizer::mark_for_deletion(&mut new, &mut finalizers);
        }
        let grace = grace_period(ctx, &old, options);
        let is_namespace = ctx.resource.group.is_empty() && ctx.resource.plural == "namespaces";
        let ns_pending = is_namespace
            && new
                .pointer("/spec/finalizers")
                .and_then(Value::as_array)
                .is_some_and(|f| !f.is_empty());
        let already = objects::meta_str(&old, "deletionTimestamp").is_some();
        if finalizers.is_empty() && grace == 0 && !ns_pending {
            let json = delete_now_raw(ctx, &old, old_rv).await;
            match json {
                Err(Retry) => continue,
                Ok(result) => return result.map(|b| (StatusCode::OK, Some(b))),
            }
        }
        // The object stays: mark it (once) and keep the shortest grace period asked for.
        if !finalizers.is_empty() {
            new["metadata"]["finalizers"] = json!(finalizers);
        }
        let current_grace = objects::meta(&old)
            .and_then(|m| m.get("deletionGracePeriodSeconds"))
            .and_then(Value::as_i64);
        if !already || current_grace.is_some_and(|g| grace < g) {
            objects::set_meta(&mut new, "deletionTimestamp", objects::rfc3339_in(grace));
            objects::set_meta(&mut new, "deletionGracePeriodSeconds", grace);
        }
        if is_namespace {
            new["status"]["phase"] = "Terminating".into();
        }
        if new == old || ctx.dry_run() {
            let json = serde_json::to_vec(&new).map_err(ApiError::internal)?;
            return Ok((StatusCode::OK, Some(json.into())));
        }
        let key = ctx.key(namespace, name);
        match ctx
            .api
            .store
            .update(&key, objects::encode_for_storage(&new), Some(old_rv))
            .await
        {
            Ok(kv) => {
                return Ok((
                    StatusCode::OK,
                    Some(objects::with_resource_version(&kv.value, kv.mod_revision)),
                ))
            }
            Err(storage::Error::Conflict { .. }) => continue,
            Err(storage::Error::NotFound { .. }) => {
                return Err(ApiError::not_found(&ctx.qualified(), name))
            }
            Err(e) => return Err(storage_error(e)),
        }
    }
    Err(ApiError::conflict(
        &ctx.qualified(),
        name,
        "too many concurrent updates; try again",
    ))
}

/// What the API does with dependents when a delete request says nothing (upstream
/// `rest.GarbageCollectionPolicy` of each strategy).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GcPolicy {
    /// Background cascading deletion: the default of the generic store.
    DeleteDependents,
    /// Dependents are orphaned: kept for backward compatibility by `v1` ReplicationControllers and
    /// `batch/v1` Jobs.
    OrphanDependents,
    /// No garbage collection finalizers at all (Events).
    Unsupported,
}

fn default_gc_policy(group: &str, plural: &str, version: &str) -> GcPolicy {
    match (group, plural, version) {
        ("", "replicationcontrollers", "v1") | ("batch", "jobs", "v1") => {
            GcPolicy::OrphanDependents
        }
        ("", "events", _) | ("events.k8s.io", "events", _) => GcPolicy::Unsupported,
        _ => GcPolicy::DeleteDependents,
    }
}

/// The object's finalizers after a delete request (upstream `deletionFinalizersForGarbageCollection`
/// with `shouldOrphanDependents` / `shouldDeleteDependents`): an explicit `orphanDependents` wins, then
/// `propagationPolicy`, then a GC finalizer already on the object, then the resource's default. The
/// two GC finalizers are replaced, never both kept.
fn gc_finalizers(
    policy: GcPolicy,
    mut finalizers: Vec<String>,
    options: &DeleteOptions,
) -> Vec<String> {
    if policy == GcPolicy::Unsupported {
        return finalizers;
    }
    let has = |f: &str| finalizers.iter().any(|x| x == f);
    let explicit = match (options.orphan, options.propagation.as_deref()) {
        (Some(o), _) => Some((o, false)),
        (None, Some("Orphan")) => Some((true, false)),
        (None, Some("Foreground")) => Some((false, true)),
        (None, Some(_)) => Some((false, false)),
        (None, None) => None,
    };
    let (orphan, foreground) = explicit.unwrap_or_else(|| {
        if has("orphan") {
            (true, false)
        } else if has("foregroundDeletion") {
            (false, true)
        } else {
            (policy == GcPolicy::OrphanDependents, false)
        }
    });
    finalizers.retain(|f| f != "orphan" && f != "foregroundDeletion");
    if orphan {
        finalizers.push("orphan".into());
    }
    if foreground {
        finalizers.push("foregroundDeletion".into());
    }
    finalizers
}

/// Upstream's graceful deletion: only pods have a grace period, and only once scheduled and not
/// finished; an explicit `gracePeriodSeconds` wins over the pod's `terminationGracePeriodSeconds`.
fn grace_period(ctx: &Ctx<'_>, obj: &Value, options: &DeleteOptions) -> i64 {
    if !(ctx.resource.group.is_empty() && ctx.resource.plural == "pods") {
        return 0;
    }
    let scheduled = obj
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .is_some_and(|n| !n.is_empty());
    let finished = matches!(
        obj.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded" | "Failed")
    );
    if !scheduled || finished {
        return 0;
    }
    let grace = options
        .grace_period
        .or_else(|| {
            obj.pointer("/spec/terminationGracePeriodSeconds")
                .and_then(Value::as_i64)
        })
        .unwrap_or(30);
    // 0 deletes at once (`kubectl delete --grace-period=0 --force`).
    grace.max(0)
}

struct Retry;

/// Removes the object from the store; `Err(Retry)` when it changed meanwhile.
async fn delete_now_raw(
    ctx: &Ctx<'_>,
    obj: &Value,
    rv: i64,
) -> Result<Result<Bytes, ApiError>, Retry> {
    if ctx.dry_run() {
        return Ok(serde_json::to_vec(obj)
            .map(Bytes::from)
            .map_err(ApiError::internal));
    }
    let key = ctx.key(objects::namespace(obj), objects::name(obj));
    match ctx.api.store.delete(&key, Some(rv)).await {
        Ok(deleted) => {
            if ctx.resource.group.is_empty() && ctx.resource.plural == "services" {
                ctx.api.services.release(ctx.api, obj).await;
            }
            Ok(Ok(objects::with_resource_version(
                &deleted.prev.value,
                deleted.revision,
            )))
        }
        Err(storage::Error::Conflict { .. }) => Err(Retry),
        Err(storage::Error::NotFound { .. }) => Ok(Err(ApiError::not_found(
            &ctx.qualified(),
            objects::name(obj),
        ))),
        Err(e) => Ok(Err(storage_error(e))),
    }
}

/// An update that leaves a deleted object with no finalizers and no grace period left removes it
/// (upstream's `ShouldDeleteDuringUpdate`).
pub fn should_delete_after_update(ctx: &Ctx<'_>, new: &Value) -> bool {
    let Some(meta) = objects::meta(new) else {
        return false;
    };
    if !meta.contains_key("deletionTimestamp") || !objects::finalizers(new).is_empty() {
        return false;
    }
    let grace = meta
        .get("deletionGracePeriodSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let ns_pending = ctx.resource.group.is_empty()
        && ctx.resource.plural == "namespaces"
        && new
            .pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|f| !f.is_empty());
    grace == 0 && !ns_pending
}

pub async fn delete_now(ctx: &Ctx<'_>, obj: &Value, rv: i64) -> Result<Response<Body>, ApiError> {
    match delete_now_raw(ctx, obj, rv).await {
        Ok(result) => ctx.object_response(StatusCode::OK, result?),
        Err(Retry) => Err(ApiError::conflict_modified(
            &ctx.qualified(),
            objects::name(obj),
        )),
    }
}

pub async fn delete_collection(ctx: &Ctx<'_>, body: Bytes) -> Result<Response<Body>, ApiError> {
    let options = delete_options(ctx, &body)?;
    let filter = super::list::filter_of(ctx)?;
    let current = ctx
        .api
        .store
        .current_revision()
        .await
        .map_err(storage_error)?;
    ctx.api
        .caches
        .wait_for(current, super::list::CACHE_WAIT)
        .await;
    let targets = ctx.cache().list(&ctx.list_prefix(), &filter);
    let mut items = Vec::new();
    for obj in targets {
        let (ns, name) = (obj.attrs.namespace.clone(), obj.attrs.name.clone());
        match delete_one(ctx, &ns, &name, &options).await {
            // In the served version (events.k8s.io Events, custom resources' versions).
            Ok((_, Some(json))) => items.push(ctx.served(json)),
            Ok((_, None)) => {}
            Err(e) if e.code == 404 => {}
            Err(e) => return Err(e),
        }
    }
    let revision = ctx
        .api
        .store
        .current_revision()
        .await
        .map_err(storage_error)?;
    Ok(response::bytes_response(
        StatusCode::OK,
        response::JSON,
        super::list::list_json(
            &ctx.resource.kind,
            &ctx.resource.api_version(),
            revision,
            None,
            &items,
        ),
    ))
}

/// `POST pods/<name>/binding`: sets `spec.nodeName` once (upstream `BindingREST`).
pub async fn bind_pod(ctx: &Ctx<'_>, body: Bytes) -> Result<Response<Body>, ApiError> {
    let binding = decode::parse_body(ctx.headers, &body)?;
    let node = binding
        .pointer("/target/name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    if node.is_empty() {
        let err = apimachinery::validation::field::FieldError::required(
            &apimachinery::validation::field::FieldPath::root("target").child("name"),
            "",
        );
        return Err(ApiError::invalid(
            &apimachinery::status::Qualified::new("", "Binding"),
            ctx.name(),
            &[err],
        ));
    }
    // As other updates, the first attempt starts from the watch cache's copy (see `rest::update`):
    // the write is conditional on its revision, and a refusal is confirmed against storage.
    let mut from_cache = true;
    for _ in 0..MAX_RETRIES {
        let (mut pod, rv, is_current) = ctx
            .current_for_update(ctx.namespace(), ctx.name(), from_cache)
            .await?;
        from_cache = false;
        if let Err(e) = check_bindable(ctx, &binding, &pod) {
            if is_current || ctx.still_at(ctx.namespace(), ctx.name(), rv).await? {
                return Err(e);
            }
            continue;
        }
        pod["spec"]["nodeName"] = node.clone().into();
        add_condition(
            &mut pod,
            json!({"type": "PodScheduled", "status": "True", "lastProbeTime": null, "lastTransitionTime": objects::now_rfc3339()}),
        );
        if let Some(annotations) = binding
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
        {
            for (k, v) in annotations {
                pod["metadata"]["annotations"][k] = v.clone();
            }
        }
        let key = ctx.key(ctx.namespace(), ctx.name());
        match ctx
            .api
            .store
            .update(&key, objects::encode_for_storage(&pod), Some(rv))
            .await
        {
            Ok(_) => {
                return Ok(response::json_response(
                    StatusCode::CREATED,
                    &json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201}),
                ))
            }
            Err(storage::Error::Conflict { .. }) => continue,
            Err(e) => return Err(storage_error(e)),
        }
    }
    Err(ApiError::conflict(
        &ctx.qualified(),
        ctx.name(),
        "too many concurrent updates; try again",
    ))
}

/// Why a pod cannot take a binding: another pod (UID), being deleted, or already bound.
fn check_bindable(ctx: &Ctx<'_>, binding: &Value, pod: &Value) -> Result<(), ApiError> {
    if let Some(uid) = binding.pointer("/metadata/uid").and_then(Value::as_str) {
        if objects::meta_str(pod, "uid") != Some(uid) {
            return Err(ApiError::conflict(
                &ctx.qualified(),
                ctx.name(),
                "the UID in the binding does not match the pod",
            ));
        }
    }
    if objects::meta_str(pod, "deletionTimestamp").is_some() {
        return Err(ApiError::conflict(
            &ctx.qualified(),
            ctx.name(),
            "pod is being deleted, cannot be assigned to a host",
        ));
    }
    if let Some(current) = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    {
        return Err(ApiError::conflict(
            &ctx.qualified(),
            ctx.name(),
            &format!("pod {} is already assigned to node {current:?}", ctx.name()),
        ));
    }
    Ok(())
}

pub(super) fn add_condition(pod: &mut Value, condition: Value) {
    let kind = condition["type"].clone();
    let conditions = pod["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    let mut conditions: Vec<Value> = conditions
        .into_iter()
        .filter(|c| c["type"] != kind)
        .collect();
    conditions.push(condition);
    pod["status"]["conditions"] = Value::Array(conditions);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(propagation: Option<&str>, orphan: Option<bool>) -> DeleteOptions {
        DeleteOptions {
            grace_period: None,
            propagation: propagation.map(str::to_string),
            orphan,
            precondition_uid: None,
            precondition_rv: None,
        }
    }

    fn fin(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn gc_finalizers_follow_upstream_precedence() {
        use GcPolicy::*;
        assert_eq!(
            default_gc_policy("apps", "deployments", "v1"),
            DeleteDependents
        );
        assert_eq!(default_gc_policy("batch", "jobs", "v1"), OrphanDependents);
        assert_eq!(
            default_gc_policy("", "replicationcontrollers", "v1"),
            OrphanDependents
        );
        assert_eq!(default_gc_policy("", "events", "v1"), Unsupported);
        // Defaults when the request says nothing.
        assert!(gc_finalizers(DeleteDependents, fin(&[]), &opts(None, None)).is_empty());
        assert_eq!(
            gc_finalizers(OrphanDependents, fin(&[]), &opts(None, None)),
            ["orphan"]
        );
        // An explicit policy wins over the default and replaces the other GC finalizer.
        assert!(
            gc_finalizers(OrphanDependents, fin(&[]), &opts(Some("Background"), None)).is_empty()
        );
        assert_eq!(
            gc_finalizers(
                DeleteDependents,
                fin(&["x", "orphan"]),
                &opts(Some("Foreground"), None)
            ),
            ["x", "foregroundDeletion"]
        );
        // orphanDependents wins over propagationPolicy.
        assert_eq!(
            gc_finalizers(
                DeleteDependents,
                fin(&[]),
                &opts(Some("Foreground"), Some(true))
            ),
            ["orphan"]
        );
        // A finalizer already there wins over the default.
        assert_eq!(
            gc_finalizers(
                OrphanDependents,
                fin(&["foregroundDeletion"]),
                &opts(None, None)
            ),
            ["foregroundDeletion"]
        );
        // Events get none.
        assert!(gc_finalizers(Unsupported, fin(&[]), &opts(Some("Orphan"), None)).is_empty());
    }
}
