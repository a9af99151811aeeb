//! The update loop under PUT and PATCH (upstream `etcd3.store.GuaranteedUpdate`): read the object,
//! compute the new one, write it conditionally on the revision read, retry on conflict.
//!
//! As upstream (whose cacher passes the watch cache's copy as `cachedExistingObject`), the first
//! attempt starts from the watch cache's copy when it has one, saving a storage read and decode per
//! update. That copy may be behind storage, so nothing computed from it is final until confirmed: the
//! write is conditional on its revision, and an error, a no-op or a dry-run result computed from it is
//! returned only if storage still holds that revision (`origStateIsCurrent`); otherwise the attempt is
//! redone from storage.

use apimachinery::fieldmanager;
use apimachinery::status::ApiError;
use http::Response;
use serde_json::Value;

use super::common::{admission_attributes, field_manager, operation, respond};
use super::{storage_error, Ctx};
use crate::registry::core::{namespace, pod};
use crate::response::Body;
use crate::{admission, objects};

/// Attempts of an unconditional update before giving up on a hot object.
const MAX_RETRIES: usize = 20;

/// How one attempt ended.
enum Attempt {
    /// Written (or deleted): final.
    Done(Response<Body>),
    /// Nothing written (no change, or a dry run): final if the starting point was current.
    Unchanged(Response<Body>),
    /// Start again from storage.
    Retry,
}

/// Reads the current object, computes the new one with `make`, and writes it with the current
/// revision as precondition; retries on conflict unless the client gave its own precondition.
pub(super) async fn guaranteed_update(
    ctx: &Ctx<'_>,
    sub: Option<&str>,
    precondition: Option<i64>,
    track: bool,
    make: impl Fn(&Value) -> Result<Value, ApiError>,
) -> Result<Response<Body>, ApiError> {
    let manager = if track {
        field_manager(ctx)?
    } else {
        String::new()
    };
    let mut from_cache = true;
    for _ in 0..MAX_RETRIES {
        let (mut old, old_rv, is_current) = ctx
            .current_for_update(ctx.namespace(), ctx.name(), from_cache)
            .await?;
        from_cache = false;
        if let Some(conversion) = ctx.read_conversion() {
            conversion.apply(&mut old).await?;
        }
        let attempt = attempt(
            ctx,
            sub,
            precondition,
            &manager,
            &make,
            (old, old_rv, is_current),
        )
        .await;
        match attempt {
            Ok(Attempt::Done(resp)) => return Ok(resp),
            Ok(Attempt::Retry) => continue,
            Ok(Attempt::Unchanged(resp)) => {
                if is_current || ctx.still_at(ctx.namespace(), ctx.name(), old_rv).await? {
                    return Ok(resp);
                }
            }
            Err(e) => {
                if is_current || ctx.still_at(ctx.namespace(), ctx.name(), old_rv).await? {
                    return Err(e);
                }
            }
        }
    }
    Err(ApiError::conflict(
        &ctx.qualified(),
        ctx.name(),
        "too many concurrent updates; try again",
    ))
}

/// One attempt from `old` (at revision `old_rv`; `is_current` when read from storage).
async fn attempt(
    ctx: &Ctx<'_>,
    sub: Option<&str>,
    precondition: Option<i64>,
    manager: &str,
    make: &impl Fn(&Value) -> Result<Value, ApiError>,
    (old, old_rv, is_current): (Value, i64, bool),
) -> Result<Attempt, ApiError> {
    let strategy = ctx.strategy();
    let mut new = make(&old)?;
    // A resourceVersion in the new object (a PUT body, or one a patch set) is a precondition.
    let body_rv = objects::meta_str(&new, "resourceVersion")
        .and_then(|rv| rv.parse::<i64>().ok())
        .filter(|rv| *rv > 0);
    if let Some(rv) = precondition.or(body_rv) {
        if rv != old_rv {
            return Err(ApiError::conflict_modified(&ctx.qualified(), ctx.name()));
        }
    }
    new = match sub {
        None => {
            // Defaults first, so that fields the client left to defaulting compare equal.
            apimachinery::defaults::apply_defaults(
                &ctx.resource.group,
                &ctx.resource.kind,
                &mut new,
            );
            if let Some(info) = &ctx.crd {
                crate::crd::handler::default(info, &ctx.resource.version, &mut new);
            }
            strategy.prepare_for_update(&ctx.resource, &mut new, &old);
            new
        }
        Some("status") => {
            strategy.prepare_for_status_update(&ctx.resource, &mut new, &old);
            new
        }
        Some("scale") => {
            let replicas = new
                .pointer("/spec/replicas")
                .and_then(Value::as_i64)
                .unwrap_or(0);
            let mut scaled = old.clone();
            match &ctx.crd {
                Some(info) => crate::crd::handler::set_replicas(
                    info,
                    &ctx.resource.version,
                    &mut scaled,
                    replicas,
                )?,
                None => scaled["spec"]["replicas"] = replicas.into(),
            }
            strategy.prepare_for_update(&ctx.resource, &mut scaled, &old);
            scaled
        }
        Some("finalize") => namespace::prepare_for_finalize(&new, &old),
        Some("approval") if strategy.prepare_for_approval_update(&mut new, &old) => new,
        Some("ephemeralcontainers") => pod::ephemeral::prepare_for_update(&new, &old),
        Some("resize") => pod::prepare_for_spec_subresource(&new, &old),
        Some(other) => {
            return Err(ApiError::method_not_supported(
                &ctx.qualified(),
                &format!("update {other}"),
            ))
        }
    };
    let attrs = admission_attributes(ctx, sub, admission::Operation::Update, ctx.name());
    ctx.api
        .admission
        .admit(ctx.api, &attrs, &mut new, Some(&old))
        .await?;
    if sub.is_none() {
        strategy.authorize_write(ctx, &new, Some(&old)).await?;
    }
    if !manager.is_empty() {
        let now = objects::now_rfc3339();
        let tracked = match sub {
            None | Some("status") | Some("scale") => sub,
            // Other subresources write through the main resource's fields.
            Some(_) => None,
        };
        fieldmanager::on_update(&operation(ctx, tracked, manager, &now), &old, &mut new)?;
    }
    let mut errors = if sub == Some("resize") {
        apimachinery::validation::validate_pod_resize(&new, &old)
    } else {
        apimachinery::validation::validate_update(
            &ctx.resource.group,
            &ctx.resource.kind,
            &new,
            &old,
        )
    };
    if sub == Some("ephemeralcontainers") {
        errors = apimachinery::validation::validate_pod_ephemeral_containers_update(&new, &old);
    }
    if sub.is_none() {
        errors.extend(crate::crd::validation_rules::crd_write_errors(
            &ctx.resource.group,
            &ctx.resource.kind,
            &new,
        ));
    }
    if let Some(info) = &ctx.crd {
        errors.extend(crate::crd::handler::validate(
            info,
            &ctx.resource.version,
            &new,
            Some(&old),
            sub == Some("status"),
        ));
    }
    if !errors.is_empty() {
        return Err(ApiError::invalid(
            &ctx.qualified_kind(),
            ctx.name(),
            &errors,
        ));
    }
    ctx.api
        .admission
        .validate(ctx.api, &attrs, &new, Some(&old))
        .await?;
    if sub.is_none() && strategy.allocates_addresses() {
        // A Service's type change takes or frees addresses and ports: what it took is given back
        // unless the write lands; what it frees goes only once it did (upstream's transaction).
        let services = &ctx.api.services;
        let txn = services
            .allocate_update(ctx.api, &mut new, &old, ctx.dry_run())
            .await?;
        let deletes = super::delete::should_delete_after_update(ctx, &new);
        let result = write(ctx, sub, precondition, new, (&old, old_rv, is_current)).await;
        match &result {
            Ok(Attempt::Done(_)) if !deletes => services.commit_update(ctx.api, &old, txn).await,
            _ => services.revert_update(ctx.api, &old, txn).await,
        }
        return result;
    }
    write(ctx, sub, precondition, new, (&old, old_rv, is_current)).await
}

/// Whether a custom resource is stored (at `old_rv`) in a version other than its CRD's storage
/// version: an unchanged update still rewrites it then, so a no-op `kubectl replace` migrates
/// objects after the storage version changed (upstream compares the encoded bytes, which differ).
async fn stored_in_other_version(ctx: &Ctx<'_>, old_rv: i64) -> bool {
    let Some(info) = ctx.crd.as_ref().filter(|i| i.versions.len() > 1) else {
        return false;
    };
    let key = ctx.key(ctx.namespace(), ctx.name());
    let Ok(Some(kv)) = ctx.api.store.get(&key).await else {
        return false;
    };
    if kv.mod_revision != old_rv {
        return false;
    }
    let stored = serde_json::from_slice::<Value>(&kv.value).ok();
    let api_version = stored
        .as_ref()
        .and_then(|v| v.get("apiVersion"))
        .and_then(Value::as_str);
    api_version.is_some_and(|av| av != info.api_version(&info.storage_version))
}

/// The end of an attempt: the validated object is stored (or found unchanged, or deleted when its
/// last finalizer went while it was being deleted).
async fn write(
    ctx: &Ctx<'_>,
    sub: Option<&str>,
    precondition: Option<i64>,
    mut new: Value,
    (old, old_rv, is_current): (&Value, i64, bool),
) -> Result<Attempt, ApiError> {
    let strategy = ctx.strategy();
    strategy.canonicalize(&mut new);
    objects::set_meta(&mut new, "resourceVersion", old_rv.to_string());
    // An unchanged object is still written when its stored bytes are stale for the encryption
    // config (upstream's `stale`), so that `kubectl replace` re-encrypts after a key rotation.
    let unchanged = new == *old
        && !crate::encryption::stale_at_rest(
            ctx.api,
            &ctx.key(ctx.namespace(), ctx.name()),
            old_rv,
        )
        .await
        && !stored_in_other_version(ctx, old_rv).await;
    if unchanged || ctx.dry_run() {
        let json = serde_json::to_vec(&new).map_err(ApiError::internal)?;
        return Ok(Attempt::Unchanged(respond(ctx, sub, json.into()).await?));
    }
    if super::delete::should_delete_after_update(ctx, &new) {
        if !is_current {
            // A delete is decided on the current object only.
            return Ok(Attempt::Retry);
        }
        return super::delete::delete_now(ctx, &new, old_rv)
            .await
            .map(Attempt::Done);
    }
    let key = ctx.key(ctx.namespace(), ctx.name());
    ctx.to_stored(&mut new).await?;
    match ctx
        .api
        .store
        .update(&key, objects::encode_for_storage(&new), Some(old_rv))
        .await
    {
        Ok(kv) => respond(
            ctx,
            sub,
            objects::with_resource_version(&kv.value, kv.mod_revision),
        )
        .await
        .map(Attempt::Done),
        // A stale starting point conflicts too: retry from storage, which decides the precondition.
        Err(storage::Error::Conflict { .. }) if precondition.is_none() || !is_current => {
            Ok(Attempt::Retry)
        }
        Err(storage::Error::Conflict { .. }) => {
            Err(ApiError::conflict_modified(&ctx.qualified(), ctx.name()))
        }
        Err(storage::Error::NotFound { .. }) => {
            Err(ApiError::not_found(&ctx.qualified(), ctx.name()))
        }
        Err(e) => Err(storage_error(e)),
    }
}
