//! CREATE, UPDATE and PATCH (upstream `handlers.CreateResource`/`UpdateResource`/`PatchResource` over
//! `registry.Store.Create`/`Update`): decode, default, validate, then write with optimistic concurrency.
//! An update without a resourceVersion precondition is retried on conflict, as upstream's
//! `GuaranteedUpdate`; one with a precondition gets 409.

use apimachinery::fieldmanager;
use apimachinery::status::ApiError;
use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::Value;

use super::common::{add_warnings, admission_attributes, field_manager, operation, scale_view};
use super::{decode, storage_error, typed, Ctx};
use crate::response::Body;
use crate::{admission, objects};

pub async fn create(ctx: &Ctx<'_>, body: Bytes) -> Result<Response<Body>, ApiError> {
    if ctx.req.name.is_some() {
        return Err(ApiError::method_not_supported(
            &ctx.qualified(),
            "create with a name in the URL",
        ));
    }
    let (mut obj, strict) = decode::parse_request(
        ctx.headers,
        &body,
        ctx.query.get("fieldValidation"),
        ctx.crd.is_none(),
    )?;
    decode::check_type(
        &ctx.resource,
        &ctx.resource.api_version(),
        &ctx.resource.kind,
        &mut obj,
    )?;
    if objects::meta_str(&obj, "resourceVersion").is_some_and(|rv| !rv.is_empty()) {
        return Err(ApiError::bad_request(
            "resourceVersion should not be set on objects to be created",
        ));
    }
    if ctx.crd.as_ref().is_some_and(|i| i.terminating) {
        let mut err = ApiError::method_not_supported(&ctx.qualified(), "create");
        err.message = "create not allowed while custom resource definition is terminating".into();
        return Err(err);
    }
    let warnings = check_body_fields(
        ctx,
        &ctx.resource.group,
        &ctx.resource.version,
        &ctx.resource.kind,
        &mut obj,
        &strict,
    )?;
    prepare_identity(ctx, &mut obj)?;
    let kv = create_object(ctx, obj).await?;
    let mut resp = ctx.object_response(StatusCode::CREATED, kv).await?;
    add_warnings(&mut resp, &warnings);
    Ok(resp)
}

/// Decodes a body's fields: custom resources by their CRD's schema, built-in kinds by their type.
fn check_body_fields(
    ctx: &Ctx<'_>,
    group: &str,
    version: &str,
    kind: &str,
    obj: &mut Value,
    strict: &decode::Strict,
) -> Result<Vec<String>, ApiError> {
    let mode = ctx.query.get("fieldValidation");
    match &ctx.crd {
        Some(info) if kind == info.kind => {
            crate::crd::handler::check_fields(info, version, obj, mode, strict)
        }
        _ => typed::check_fields(group, version, kind, obj, mode, strict),
    }
}

/// Namespace and name of a new object: the URL's namespace, the name or one made from generateName.
fn prepare_identity(ctx: &Ctx<'_>, obj: &mut Value) -> Result<(), ApiError> {
    if ctx.resource.namespaced {
        let body_ns = objects::namespace(obj).to_string();
        if !body_ns.is_empty() && body_ns != ctx.namespace() {
            return Err(ApiError::bad_request(
                "the namespace of the provided object does not match the namespace sent on the request",
            ));
        }
        objects::set_meta(obj, "namespace", ctx.namespace());
    } else {
        objects::remove_meta(obj, "namespace");
    }
    if objects::name(obj).is_empty() {
        let prefix = objects::meta_str(obj, "generateName")
            .unwrap_or("")
            .to_string();
        if !prefix.is_empty() {
            objects::set_meta(obj, "name", objects::generate_name(&prefix));
        }
    }
    Ok(())
}

/// Defaults, validates and stores a new object; returns its served JSON.
pub async fn create_object(ctx: &Ctx<'_>, obj: Value) -> Result<Bytes, ApiError> {
    create_tracked(ctx, obj, true).await
}

/// [`create_object`]; `track` false when the managed fields are already set (a server-side apply).
async fn create_tracked(ctx: &Ctx<'_>, mut obj: Value, track: bool) -> Result<Bytes, ApiError> {
    let (group, kind) = (ctx.resource.group.clone(), ctx.resource.kind.clone());
    let uid = uuid::Uuid::new_v4().to_string();
    let now = objects::now_rfc3339();
    objects::set_meta(&mut obj, "uid", uid.clone());
    objects::set_meta(&mut obj, "creationTimestamp", now.clone());
    let strategy = ctx.strategy();
    strategy.prepare_for_create(&ctx.resource, &mut obj);
    strategy.prepare_for_create_by(ctx.user, &mut obj);
    if (group.as_str(), kind.as_str()) == ("", "Pod") {
        // Before defaulting, which fills in the policy the admission must compare against.
        super::priority::admit_pod(ctx, &mut obj).await?;
    }
    apimachinery::defaults::apply_defaults(&group, &kind, &mut obj);
    if let Some(info) = &ctx.crd {
        crate::crd::handler::default(info, &ctx.resource.version, &mut obj);
    }
    strategy.after_create_defaulting(&mut obj, &uid);
    let name = objects::name(&obj).to_string();
    let attrs = admission_attributes(ctx, None, admission::Operation::Create, &name);
    ctx.api
        .admission
        .admit(ctx.api, &attrs, &mut obj, None)
        .await?;
    strategy.authorize_write(ctx, &obj, None).await?;
    let manager = field_manager(ctx)?;
    if track && !manager.is_empty() {
        // As upstream, a create owns what it set, defaulted fields included.
        fieldmanager::on_create(&operation(ctx, None, &manager, &now), &mut obj);
    }
    let errors = if name.is_empty() {
        vec![apimachinery::validation::field::FieldError::required(
            &apimachinery::validation::field::FieldPath::root("metadata").child("name"),
            "name or generateName is required",
        )]
    } else {
        let mut errs = apimachinery::validation::validate_create(&group, &kind, &obj);
        errs.extend(crate::crd::validation_rules::crd_write_errors(
            &group, &kind, &obj,
        ));
        if let Some(info) = &ctx.crd {
            errs.extend(crate::crd::handler::validate(
                info,
                &ctx.resource.version,
                &obj,
                None,
                false,
            ));
        }
        errs
    };
    if !errors.is_empty() {
        return Err(ApiError::invalid(&ctx.qualified_kind(), &name, &errors));
    }
    if ctx.resource.namespaced {
        admit_namespace(ctx, objects::namespace(&obj)).await?;
    }
    ctx.api
        .admission
        .validate(ctx.api, &attrs, &obj, None)
        .await?;
    if strategy.allocates_addresses() {
        ctx.api
            .services
            .allocate(ctx.api, &mut obj, ctx.dry_run())
            .await?;
    }
    strategy.canonicalize(&mut obj);
    ctx.to_stored(&mut obj).await?;
    if ctx.dry_run() {
        return serde_json::to_vec(&obj)
            .map(Bytes::from)
            .map_err(ApiError::internal);
    }
    let key = ctx.key(objects::namespace(&obj), &name);
    match ctx
        .api
        .store
        .create(&key, objects::encode_for_storage(&obj))
        .await
    {
        Ok(kv) => Ok(objects::with_resource_version(&kv.value, kv.mod_revision)),
        Err(e) => {
            if strategy.allocates_addresses() {
                ctx.api.services.release(ctx.api, &obj).await;
            }
            match e {
                storage::Error::AlreadyExists { .. } => {
                    Err(ApiError::already_exists(&ctx.qualified(), &name))
                }
                e => Err(storage_error(e)),
            }
        }
    }
}

/// Upstream's NamespaceLifecycle admission: the namespace must exist and not be terminating.
async fn admit_namespace(ctx: &Ctx<'_>, namespace: &str) -> Result<(), ApiError> {
    let key = format!("/namespaces/{namespace}");
    let ns = match ctx.api.caches.get("namespaces").and_then(|c| c.get(&key)) {
        Some(cached) => serde_json::from_slice::<Value>(&cached.json).ok(),
        None => ctx
            .api
            .store
            .get(&key)
            .await
            .map_err(storage_error)?
            .and_then(|kv| serde_json::from_slice::<Value>(&kv.value).ok()),
    };
    let Some(ns) = ns else {
        return Err(ApiError::not_found(
            &apimachinery::status::Qualified::new("", "namespaces"),
            namespace,
        ));
    };
    if objects::meta_str(&ns, "deletionTimestamp").is_some() {
        let mut err = ApiError::forbidden(format!(
            "unable to create new content in namespace {namespace} because it is being terminated"
        ));
        err.details = Some(Box::new(apimachinery::status::Details {
            name: namespace.to_string(),
            kind: "namespaces".into(),
            causes: vec![apimachinery::status::Cause {
                reason: "NamespaceTerminating".into(),
                message: format!("namespace {namespace} is being terminated"),
                field: "metadata.namespace".into(),
            }],
            ..Default::default()
        }));
        return Err(err);
    }
    Ok(())
}

/// POST to a subresource: `pods/<name>/binding`, `pods/<name>/eviction`.
pub async fn create_subresource(
    ctx: &Ctx<'_>,
    sub: &str,
    body: Bytes,
) -> Result<Response<Body>, ApiError> {
    admit_subresource_create(ctx, sub, &body).await?;
    match (ctx.resource.plural.as_str(), sub) {
        ("pods", "binding") => crate::registry::core::pod::binding::bind(ctx, body).await,
        ("pods", "eviction") => crate::registry::core::pod::eviction::evict(ctx, body).await,
        ("serviceaccounts", "token") => {
            crate::serviceaccount::token_request::create(ctx, body).await
        }
        _ => Err(ApiError::method_not_supported(
            &ctx.qualified(),
            &format!("create {sub}"),
        )),
    }
}

/// Runs admission on a subresource create (Binding, Eviction, TokenRequest) as upstream's create
/// handler does, so plugins such as NodeRestriction see them. The handlers decode the body again:
/// no plugin mutates these objects, so the mutating phase's changes are not carried over.
async fn admit_subresource_create(ctx: &Ctx<'_>, sub: &str, body: &Bytes) -> Result<(), ApiError> {
    let mut obj = decode::parse_body(ctx.headers, body)?;
    let attrs = admission_attributes(ctx, Some(sub), admission::Operation::Create, ctx.name());
    ctx.api
        .admission
        .admit(ctx.api, &attrs, &mut obj, None)
        .await?;
    ctx.api
        .admission
        .validate(ctx.api, &attrs, &obj, None)
        .await
}

/// PUT: the whole object, its status, or its scale.
pub async fn update(
    ctx: &Ctx<'_>,
    sub: Option<&str>,
    body: Bytes,
) -> Result<Response<Body>, ApiError> {
    let (mut obj, strict) = decode::parse_request(
        ctx.headers,
        &body,
        ctx.query.get("fieldValidation"),
        ctx.crd.is_none() || sub == Some("scale"),
    )?;
    let (expected_version, expected_kind) = match sub {
        Some("scale") => ("autoscaling/v1".to_string(), "Scale".to_string()),
        _ => (ctx.resource.api_version(), ctx.resource.kind.clone()),
    };
    decode::check_type(&ctx.resource, &expected_version, &expected_kind, &mut obj)?;
    let (g, v) = expected_version
        .split_once('/')
        .unwrap_or(("", expected_version.as_str()));
    let warnings = check_body_fields(ctx, g, v, &expected_kind, &mut obj, &strict)?;
    let body_name = objects::name(&obj);
    if !body_name.is_empty() && body_name != ctx.name() {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({})",
            ctx.name()
        )));
    }
    let precondition = objects::meta_str(&obj, "resourceVersion")
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    let precondition = precondition
        .map(|rv| objects::parse_resource_version(&rv).map_err(ApiError::bad_request))
        .transpose()?;
    let mut resp =
        super::update::guaranteed_update(ctx, sub, precondition, true, |_old| Ok(obj.clone()))
            .await?;
    add_warnings(&mut resp, &warnings);
    Ok(resp)
}

/// PATCH: JSON patch, merge patch or strategic merge patch, applied to the current object (re-applied
/// on a conflict with a concurrent writer).
pub async fn patch(
    ctx: &Ctx<'_>,
    sub: Option<&str>,
    body: Bytes,
) -> Result<Response<Body>, ApiError> {
    if body.len() > decode::MAX_BODY {
        return Err(ApiError::request_entity_too_large(
            "the patch is over 3 MiB",
        ));
    }
    let patch_type = decode::patch_type(ctx.headers);
    if patch_type == "application/apply-patch+yaml" {
        return server_side_apply(ctx, sub, &body).await;
    }
    if ctx.query.get("force").is_some() {
        return Err(patch_options_invalid(
            "force",
            "Forbidden: may not be specified for non-apply patch",
        ));
    }
    let patch: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request(format!("error decoding patch: {e}")))?;
    let (group, version, kind) = (
        ctx.resource.group.clone(),
        ctx.resource.version.clone(),
        ctx.resource.kind.clone(),
    );
    let field_validation = ctx.query.get("fieldValidation").map(str::to_string);
    let strict = decode::patch_strict(&patch_type, &body, field_validation.as_deref());
    let warnings = std::sync::Mutex::new(Vec::new());
    let found_warnings = &warnings;
    let scale = sub == Some("scale");
    let crd = ctx.crd.clone();
    let apply = move |old: &Value| -> Result<Value, ApiError> {
        let target = if scale {
            scale_view(crd.as_deref(), &version, old)?
        } else {
            old.clone()
        };
        let result = match patch_type.as_str() {
            "application/json-patch+json" => apimachinery::patch::apply_json_patch(&target, &patch),
            "application/merge-patch+json" => {
                apimachinery::patch::apply_merge_patch(&target, &patch)
            }
            "application/strategic-merge-patch+json" => {
                // Upstream answers 415 for custom resources, which have no Go struct tags to
                // merge by; every built-in kind (and the scale subresource) accepts it.
                let schema = if scale {
                    apimachinery::patch::schema_for("autoscaling", "Scale")
                } else if crd.is_some() {
                    return Err(ApiError::unsupported_media_type(&patch_type));
                } else {
                    apimachinery::patch::builtin_schema_for(&group, &kind)
                };
                apimachinery::patch::apply_strategic_merge_patch(&target, &patch, schema)
            }
            other => return Err(ApiError::unsupported_media_type(other)),
        };
        let mut patched = result.map_err(|e| e.to_api_error())?;
        let (g, v, k) = if scale {
            ("autoscaling", "v1", "Scale")
        } else {
            (group.as_str(), version.as_str(), kind.as_str())
        };
        let found = match crd.as_deref().filter(|_| !scale) {
            Some(info) => crate::crd::handler::check_fields(
                info,
                v,
                &mut patched,
                field_validation.as_deref(),
                &strict,
            )?,
            None => {
                typed::check_fields(g, v, k, &mut patched, field_validation.as_deref(), &strict)?
            }
        };
        *found_warnings.lock().unwrap_or_else(|e| e.into_inner()) = found;
        Ok(patched)
    };
    let mut resp = super::update::guaranteed_update(ctx, sub, None, true, apply).await?;
    add_warnings(
        &mut resp,
        &warnings.lock().unwrap_or_else(|e| e.into_inner()),
    );
    Ok(resp)
}

/// `PatchOptions` validation errors (422), as upstream words them.
fn patch_options_invalid(field: &str, detail: &str) -> ApiError {
    ApiError {
        code: 422,
        reason: "Invalid",
        message: format!("PatchOptions.meta.k8s.io \"\" is invalid: {field}: {detail}"),
        details: None,
    }
}

/// PATCH with `application/apply-patch+yaml`: server-side apply of the configuration in the body,
/// creating the object when it does not exist.
async fn server_side_apply(
    ctx: &Ctx<'_>,
    sub: Option<&str>,
    body: &[u8],
) -> Result<Response<Body>, ApiError> {
    let manager = ctx.query.get("fieldManager").unwrap_or("").to_string();
    if manager.is_empty() {
        return Err(patch_options_invalid(
            "fieldManager",
            "Required value: is required for apply patch",
        ));
    }
    fieldmanager::manager_name(Some(&manager), None)?;
    let force = match ctx.query.get("force") {
        None | Some("false") => false,
        Some("true") => true,
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "invalid force parameter {other:?}"
            )))
        }
    };
    let mut config: Value = serde_yaml_ng::from_slice(body)
        .map_err(|e| ApiError::bad_request(format!("error decoding YAML: {e}")))?;
    if !config.is_object() {
        return Err(ApiError::bad_request(
            "the apply configuration must be an object",
        ));
    }
    for (field, what) in [("apiVersion", "apiVersion"), ("kind", "kind")] {
        if config
            .get(field)
            .and_then(Value::as_str)
            .unwrap_or("")
            .is_empty()
        {
            return Err(ApiError::bad_request(format!("{what} must be set")));
        }
    }
    decode::check_type(
        &ctx.resource,
        &ctx.resource.api_version(),
        &ctx.resource.kind,
        &mut config,
    )?;
    let body_name = objects::name(&config);
    if !body_name.is_empty() && body_name != ctx.name() {
        return Err(ApiError::bad_request(format!(
            "the name of the object ({body_name}) does not match the name on the URL ({})",
            ctx.name()
        )));
    }
    if let Some(info) = ctx.crd.as_deref().filter(|_| sub.is_none()) {
        crate::crd::handler::check_apply(
            info,
            &ctx.resource.version,
            &config,
            objects::namespace(&config),
            ctx.name(),
        )?;
    }
    let warnings = decode::apply_duplicates(body, ctx.query.get("fieldValidation"))?;
    check_body_fields(
        ctx,
        &ctx.resource.group,
        &ctx.resource.version,
        &ctx.resource.kind,
        &mut config,
        &decode::Strict::default(),
    )?;
    let apply = |old: Option<&Value>| -> Result<Value, ApiError> {
        let now = objects::now_rfc3339();
        fieldmanager::apply(&operation(ctx, sub, &manager, &now), old, &config, force)
    };
    match super::update::guaranteed_update(ctx, sub, None, false, |old| apply(Some(old))).await {
        Err(e) if e.code == 404 && sub.is_none() => {
            let mut obj = apply(None)?;
            objects::set_meta(&mut obj, "name", ctx.name());
            prepare_identity(ctx, &mut obj)?;
            let kv = create_tracked(ctx, obj, false).await?;
            let mut resp = ctx.object_response(StatusCode::CREATED, kv).await?;
            add_warnings(&mut resp, &warnings);
            Ok(resp)
        }
        Ok(mut resp) => {
            add_warnings(&mut resp, &warnings);
            Ok(resp)
        }
        other => other,
    }
}
