//! DELETE and DELETECOLLECTION (upstream `registry.Store.Delete` with `BeforeDelete`): preconditions,
//! graceful deletion of pods (the object stays, with `deletionTimestamp`, until the kubelet confirms
//! with grace 0), finalizers (the object stays until they are gone), `propagationPolicy` as the garbage
//! collector's `orphan` / `foregroundDeletion` finalizers, and namespaces waiting for `spec.finalizers`.
//! What differs per kind (grace periods, default GC policy, namespace and CRD finalization) is the
//! kind's [`crate::registry::Strategy`].

use apimachinery::status::{success_status, ApiError};
use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::common::{admission_attributes, DeleteOptions, MAX_RETRIES};
use super::{decode, storage_error, Ctx};
use crate::objects;
use crate::registry::GcPolicy;
use crate::response::{self, Body};

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
        Some(json) => ctx.object_response(code, json).await,
        None => Ok(response::json_response(code, &success_status(None))),
    }
}

/// Deletes one object; returns the object still there (graceful or finalizing) or the deleted one.
pub(crate) async fn delete_one(
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
        let attrs = admission_attributes(ctx, None, crate::admission::Operation::Delete, name);
        let mut nothing = Value::Null;
        ctx.api
            .admission
            .admit(ctx.api, &attrs, &mut nothing, Some(&old))
            .await?;
        ctx.api
            .admission
            .validate(ctx.api, &attrs, &Value::Null, Some(&old))
            .await?;
        let strategy = ctx.strategy();
        let mut new = old.clone();
        let mut finalizers = gc_finalizers(
            strategy.default_gc_policy(&ctx.req.version),
            objects::finalizers(&new),
            options,
        );
        let already = objects::meta_str(&old, "deletionTimestamp").is_some();
        if !already {
            strategy.on_first_delete(&mut new, &mut finalizers);
        }
        let grace = strategy.grace_period(&old, options.grace_period);
        if finalizers.is_empty() && grace == 0 && !strategy.deletion_blocked(&new) {
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
        strategy.mark_terminating(&mut new);
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
            if ctx.strategy().allocates_addresses() {
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
    grace == 0 && !ctx.strategy().deletion_blocked(new)
}

pub async fn delete_now(ctx: &Ctx<'_>, obj: &Value, rv: i64) -> Result<Response<Body>, ApiError> {
    match delete_now_raw(ctx, obj, rv).await {
        Ok(result) => ctx.object_response(StatusCode::OK, result?).await,
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
    let targets = if ctx.cache().keeps_objects()
        && ctx
            .api
            .caches
            .wait_consistent(current, super::list::CACHE_WAIT)
            .await
    {
        ctx.cache().list(&ctx.list_prefix(), &filter)
    } else {
        // No cache (Events), or it is behind or cannot tell: the store's current objects.
        super::list::from_store_now(ctx, &filter).await?.0
    };
    let mut items = Vec::new();
    for obj in targets {
        let (ns, name) = (obj.attrs.namespace.clone(), obj.attrs.name.clone());
        match delete_one(ctx, &ns, &name, &options).await {
            // In the served version (events.k8s.io Events, custom resources' versions).
            Ok((_, Some(json))) => items.push(json),
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
    let items = ctx.served_all(items).await?;
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
