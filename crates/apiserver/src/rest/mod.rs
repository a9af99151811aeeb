//! REST handlers for resources (upstream `endpoints/handlers` over `registry/generic/registry.Store`):
//! one generic implementation of every verb, driven by the resource registry and per-kind strategies
//! ([`crate::registry`]), never by hand-written handlers per kind.

pub(crate) mod common;
pub mod componentstatus;
pub(crate) mod decode;
mod delete;
#[doc(hidden)]
pub mod fuzz;
pub(crate) mod list;
mod priority;
mod read;
mod reviews;
pub(crate) mod strict;
pub(crate) mod table;
pub mod typed;
mod update;
#[cfg(test)]
mod update_tests;
mod watch;
mod write;

pub(crate) use delete::delete_one;

use std::sync::Arc;

use apimachinery::resources::Resource;
use apimachinery::status::{ApiError, Qualified};
use bytes::Bytes;
use http::{HeaderMap, Response, StatusCode};
use serde_json::Value;

use crate::objects;
use crate::request::{Query, ResourceRequest, Verb};
use crate::response::{self, Body, Representation};
use crate::watch_cache::WatchCache;
use crate::ApiServer;

/// Everything a handler needs about one request.
pub struct Ctx<'a> {
    pub api: &'a Arc<ApiServer>,
    pub resource: Arc<Resource>,
    /// The CRD serving the resource, for custom resources.
    pub crd: Option<Arc<crate::crd::info::CrdInfo>>,
    pub req: &'a ResourceRequest,
    pub query: &'a Query,
    pub headers: &'a HeaderMap,
    /// Who asked ([`crate::authn::UserInfo::server`] for the server's own writes).
    pub user: &'a crate::authn::UserInfo,
    /// Warnings and audit annotations from admission, sent with the response.
    pub outcome: crate::admission::Outcome,
}

impl Ctx<'_> {
    pub fn qualified(&self) -> Qualified {
        Qualified::new(&self.resource.group, &self.resource.plural)
    }

    pub fn qualified_kind(&self) -> Qualified {
        Qualified::new(&self.resource.group, &self.resource.kind)
    }

    pub fn namespace(&self) -> &str {
        self.req.namespace.as_deref().unwrap_or("")
    }

    pub fn name(&self) -> &str {
        self.req.name.as_deref().unwrap_or("")
    }

    /// The storage key of an object.
    pub fn key(&self, namespace: &str, name: &str) -> String {
        if self.resource.namespaced {
            format!("/{}/{namespace}/{name}", self.resource.storage)
        } else {
            format!("/{}/{name}", self.resource.storage)
        }
    }

    /// The key prefix of a list: one namespace, or all.
    pub fn list_prefix(&self) -> String {
        match (&self.req.namespace, self.resource.namespaced) {
            (Some(ns), true) => format!("/{}/{ns}/", self.resource.storage),
            _ => format!("/{}/", self.resource.storage),
        }
    }

    pub fn cache(&self) -> Arc<WatchCache> {
        self.api.caches.ensure(
            &self.resource.storage,
            &self.resource.group,
            &self.resource.plural,
        )
    }

    pub fn representation(&self) -> Result<Representation, ApiError> {
        Ok(self.negotiated()?.repr)
    }

    /// The representation and wire format the client asked for (custom resources have no protobuf).
    pub fn negotiated(&self) -> Result<response::Negotiated, ApiError> {
        let n = response::negotiate(
            self.headers,
            self.query.get("includeObject"),
            !self.resource.custom,
        )?;
        table::check_negotiated(
            &n,
            &self.resource.group,
            &self.resource.plural,
            self.req.subresource.as_deref(),
            self.query.get("includeObject"),
        )?;
        Ok(n)
    }

    /// The kind's strategy (the generic one, or that of custom resources, for most).
    pub fn strategy(&self) -> &'static dyn crate::registry::Strategy {
        crate::registry::strategy_of(&self.resource)
    }

    pub fn dry_run(&self) -> bool {
        self.query.get("dryRun") == Some("All")
    }

    /// The current stored object, or 404.
    pub async fn current(&self, namespace: &str, name: &str) -> Result<(Value, i64), ApiError> {
        let json = self.current_json(namespace, name).await?;
        let obj: Value = serde_json::from_slice(&json).map_err(|e| {
            ApiError::internal(format!(
                "stored object {namespace}/{name} is not valid JSON: {e}"
            ))
        })?;
        let rv = objects::meta_str(&obj, "resourceVersion")
            .and_then(|rv| rv.parse().ok())
            .unwrap_or(0);
        Ok((obj, rv))
    }

    /// The object an update starts from, its revision, and whether it was read from storage: with
    /// `from_cache`, the watch cache's copy when it has one (upstream's `cachedExistingObject`),
    /// which may be behind storage; see [`update`] for how such a start is confirmed.
    pub async fn current_for_update(
        &self,
        namespace: &str,
        name: &str,
        from_cache: bool,
    ) -> Result<(Value, i64, bool), ApiError> {
        if from_cache {
            if let Some(cached) = self.cache().get(&self.key(namespace, name)) {
                let obj: Value = serde_json::from_slice(&cached.json).map_err(|e| {
                    ApiError::internal(format!(
                        "cached object {namespace}/{name} is not valid JSON: {e}"
                    ))
                })?;
                return Ok((obj, cached.rv, false));
            }
        }
        let (obj, rv) = self.current(namespace, name).await?;
        Ok((obj, rv, true))
    }

    /// Whether storage still holds the object at revision `rv` (404 when it is gone).
    pub async fn still_at(&self, namespace: &str, name: &str, rv: i64) -> Result<bool, ApiError> {
        let kv = self
            .api
            .store
            .get(&self.key(namespace, name))
            .await
            .map_err(storage_error)?
            .ok_or_else(|| ApiError::not_found(&self.qualified(), name))?;
        Ok(kv.mod_revision == rv)
    }

    /// The current stored object as served JSON bytes (no decoding), or 404.
    pub async fn current_json(&self, namespace: &str, name: &str) -> Result<Bytes, ApiError> {
        let key = self.key(namespace, name);
        let kv = self
            .api
            .store
            .get(&key)
            .await
            .map_err(storage_error)?
            .ok_or_else(|| ApiError::not_found(&self.qualified(), name))?;
        Ok(objects::with_resource_version(&kv.value, kv.mod_revision))
    }

    /// The revision the watch cache must reach before serving: the store's current one for a consistent
    /// read (`resourceVersion` unset), else the one asked for.
    pub async fn cache_target(&self, rv: &str, rv_num: i64) -> Result<i64, ApiError> {
        if rv.is_empty() {
            self.api
                .store
                .current_revision()
                .await
                .map_err(storage_error)
        } else {
            Ok(rv_num)
        }
    }

    /// The version objects of this resource are stored in, when it differs from the served one.
    pub fn stored_version(&self) -> Option<&'static str> {
        apimachinery::conversion::stored_version(
            &self.resource.group,
            &self.resource.version,
            &self.resource.kind,
        )
    }

    /// How stored objects become served ones; `None` when they are served as stored.
    pub fn read_conversion(&self) -> Option<ReadConversion> {
        if let Some(info) = &self.crd {
            return info.reads_need_fixup.then(|| ReadConversion {
                api: self.api.clone(),
                api_version: self.resource.api_version(),
                version: self.resource.version.clone(),
                crd: Some(info.clone()),
            });
        }
        self.stored_version().map(|_| ReadConversion {
            api: self.api.clone(),
            api_version: self.resource.api_version(),
            version: self.resource.version.clone(),
            crd: None,
        })
    }

    /// A stored object's JSON in the served version (a custom resource's conversion webhook may
    /// fail).
    pub async fn served(&self, json: Bytes) -> Result<Bytes, ApiError> {
        let Some(conversion) = self.read_conversion() else {
            return Ok(json);
        };
        let Ok(mut obj) = serde_json::from_slice::<Value>(&json) else {
            return Ok(json);
        };
        conversion.apply(&mut obj).await?;
        Ok(serde_json::to_vec(&obj).map(Bytes::from).unwrap_or(json))
    }

    /// Stored objects' JSON in the served version, converted together (one review per batch for
    /// a custom resource's conversion webhook).
    pub async fn served_all(&self, items: Vec<Bytes>) -> Result<Vec<Bytes>, ApiError> {
        let Some(conversion) = self.read_conversion() else {
            return Ok(items);
        };
        let mut objs = Vec::with_capacity(items.len());
        for json in &items {
            match serde_json::from_slice::<Value>(json) {
                Ok(v) => objs.push(v),
                Err(_) => return Ok(items),
            }
        }
        conversion.apply_all(&mut objs).await?;
        Ok(objs
            .iter()
            .zip(items)
            .map(|(o, json)| serde_json::to_vec(o).map(Bytes::from).unwrap_or(json))
            .collect())
    }

    /// A served object in its stored version (a no-op for most resources).
    pub async fn to_stored(&self, obj: &mut Value) -> Result<(), ApiError> {
        if let Some(info) = &self.crd {
            crate::crd::handler::to_stored(self.api, info, obj).await?;
        } else if let Some(stored) = self.stored_version() {
            apimachinery::conversion::to_stored(obj, stored);
        }
        Ok(())
    }

    /// The printer columns of a custom resource's version.
    pub fn custom_columns(&self) -> Option<Vec<apimachinery::printers::custom::CustomColumn>> {
        let info = self.crd.as_ref()?;
        Some(info.version(&self.resource.version)?.columns.clone())
    }

    /// Serves one object in the negotiated representation.
    pub async fn object_response(
        &self,
        code: StatusCode,
        json: Bytes,
    ) -> Result<Response<Body>, ApiError> {
        let json = self.served(json).await?;
        match self.representation()? {
            Representation::Object => Ok(response::bytes_response(code, response::JSON, json)),
            Representation::Table { include_object } => {
                let obj: Value = serde_json::from_slice(&json).map_err(ApiError::internal)?;
                let rv = objects::meta_str(&obj, "resourceVersion")
                    .unwrap_or("")
                    .to_string();
                let columns = self.custom_columns();
                let mut t = table::table(
                    &self.resource,
                    columns.as_deref(),
                    &[obj],
                    include_object,
                    &rv,
                    None,
                );
                table::set_meta_version(&mut t, table::meta_version(self.headers));
                Ok(response::json_response(code, &t))
            }
            Representation::Metadata => {
                let obj: Value = serde_json::from_slice(&json).map_err(ApiError::internal)?;
                let mut partial = table::partial_metadata(&obj);
                table::set_meta_version(&mut partial, table::meta_version(self.headers));
                Ok(response::json_response(code, &partial))
            }
        }
    }
}

/// Turns stored objects into served ones: built-in conversions (events.k8s.io) or a CRD's defaults
/// and version conversion.
#[derive(Clone)]
pub struct ReadConversion {
    api: Arc<ApiServer>,
    api_version: String,
    version: String,
    crd: Option<Arc<crate::crd::info::CrdInfo>>,
}

impl ReadConversion {
    pub async fn apply(&self, obj: &mut Value) -> Result<(), ApiError> {
        self.apply_all(std::slice::from_mut(obj)).await
    }

    pub async fn apply_all(&self, objs: &mut [Value]) -> Result<(), ApiError> {
        match &self.crd {
            Some(info) => {
                crate::crd::handler::to_served(&self.api, info, &self.version, objs).await
            }
            None => {
                for obj in objs {
                    apimachinery::conversion::to_served(obj, &self.api_version);
                }
                Ok(())
            }
        }
    }
}

/// Maps storage errors to API errors where no better context exists.
pub fn storage_error(e: storage::Error) -> ApiError {
    match e {
        storage::Error::Compacted {
            requested,
            compacted,
        } => ApiError::resource_version_too_old(requested, compacted),
        storage::Error::FutureRevision { requested, current } => {
            ApiError::too_large_resource_version(requested, current)
        }
        other => ApiError::internal(other),
    }
}

/// Serves a resource request, answering (errors included) in the wire format the client asked for.
pub async fn handle(
    api: &Arc<ApiServer>,
    user: Option<&crate::authn::UserInfo>,
    req: &ResourceRequest,
    query: &Query,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response<Body>, ApiError> {
    let protobuf_ok = api
        .registry
        .snapshot()
        .get(&req.group, &req.version, &req.resource)
        .is_none_or(|r| !r.custom);
    let format = response::negotiate(headers, None, protobuf_ok)
        .map(|n| n.format)
        .unwrap_or(response::Format::Json);
    let mut resp = match dispatch(api, user, req, query, headers, body).await {
        Ok(resp) => resp,
        Err(e) => response::error_response(&e),
    };
    // A deprecated CRD version warns on every request, as upstream's custom resource handler does.
    if let Some(warning) = api
        .crds
        .get(&req.group, &req.resource)
        .and_then(|info| info.version(&req.version).and_then(|v| v.warning.clone()))
    {
        common::add_warnings(&mut resp, &[warning]);
    }
    // Watches write their own frames; everything else is produced as JSON and re-encoded here.
    if format == response::Format::Json || req.verb == Verb::Watch {
        return Ok(resp);
    }
    Ok(reencode(format, resp).await)
}

async fn reencode(format: response::Format, resp: Response<Body>) -> Response<Body> {
    use http_body_util::BodyExt;
    let is_json = resp
        .headers()
        .get(http::header::CONTENT_TYPE)
        .is_some_and(|v| v == response::JSON);
    if !is_json {
        return resp;
    }
    let (mut parts, body) = resp.into_parts();
    let Ok(collected) = body.collect().await;
    let json = collected.to_bytes();
    match response::transcode(format, &json) {
        Some((bytes, content_type)) => {
            parts.headers.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static(content_type),
            );
            parts.headers.remove(http::header::CONTENT_LENGTH);
            Response::from_parts(parts, response::full(bytes))
        }
        None => Response::from_parts(parts, response::full(json)),
    }
}

async fn dispatch(
    api: &Arc<ApiServer>,
    user: Option<&crate::authn::UserInfo>,
    req: &ResourceRequest,
    query: &Query,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response<Body>, ApiError> {
    // `POST .../bindings` is the older form of `POST .../pods/<name>/binding`.
    if req.group.is_empty()
        && req.resource == "bindings"
        && req.verb == Verb::Create
        && req.name.is_none()
    {
        let binding = decode::parse_body(headers, &body)?;
        let name = binding
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        if name.is_empty() {
            let err = apimachinery::validation::field::FieldError::required(
                &apimachinery::validation::field::FieldPath::root("metadata").child("name"),
                "",
            );
            return Err(ApiError::invalid(
                &Qualified::new("", "Binding"),
                "",
                &[err],
            ));
        }
        let pod_req = ResourceRequest {
            resource: "pods".into(),
            name: Some(name),
            subresource: Some("binding".into()),
            ..req.clone()
        };
        return Box::pin(dispatch(api, user, &pod_req, query, headers, body)).await;
    }
    let snapshot = api.registry.snapshot();
    let Some(resource) = snapshot.get(&req.group, &req.version, &req.resource) else {
        // `namespaces/<name>/status|finalize` first parses as a namespaced resource of that name.
        if let Some(ns_req) = req.as_namespace_subresource() {
            if snapshot.get("", &ns_req.version, "namespaces").is_some() && req.group.is_empty() {
                return Box::pin(dispatch(api, user, &ns_req, query, headers, body)).await;
            }
        }
        return Err(ApiError {
            code: 404,
            reason: "NotFound",
            message: "the server could not find the requested resource".into(),
            details: None,
        });
    };
    if resource.namespaced != req.namespace.is_some()
        && !(req.namespace.is_none() && matches!(req.verb, Verb::List | Verb::Watch))
    {
        return Err(ApiError {
            code: 404,
            reason: "NotFound",
            message: "the server could not find the requested resource".into(),
            details: None,
        });
    }
    if let Some(sub) = &req.subresource {
        if !resource.has_subresource(sub) {
            return Err(ApiError {
                code: 404,
                reason: "NotFound",
                message: "the server could not find the requested resource".into(),
                details: None,
            });
        }
    } else if !resource.has_verb(req.verb.as_str()) {
        return Err(ApiError::method_not_supported(
            &Qualified::new(&resource.group, &resource.plural),
            req.verb.as_str(),
        ));
    }
    let crd = if resource.custom {
        api.crds.get(&resource.group, &resource.plural)
    } else {
        None
    };
    let ctx = Ctx {
        api,
        resource,
        crd,
        req,
        query,
        headers,
        user: user.unwrap_or(crate::authn::UserInfo::server()),
        outcome: Default::default(),
    };
    let result = serve(&ctx, user, body).await;
    let warnings = ctx.outcome.warnings();
    // Admission's audit annotations ride on the response to the audit layer (only when auditing).
    let annotations = match &api.audit {
        Some(_) => ctx.outcome.audit_annotations(),
        None => Vec::new(),
    };
    if warnings.is_empty() && annotations.is_empty() {
        return result;
    }
    // Admission's warnings go with refusals too.
    let mut resp = result.unwrap_or_else(|e| response::error_response(&e));
    common::add_warnings(&mut resp, &warnings);
    if !annotations.is_empty() {
        resp.extensions_mut()
            .insert(crate::audit::AdmissionAnnotations(annotations));
    }
    Ok(resp)
}

/// The verb's handler for a resolved request.
async fn serve(
    ctx: &Ctx<'_>,
    user: Option<&crate::authn::UserInfo>,
    body: Bytes,
) -> Result<Response<Body>, ApiError> {
    let (req, headers) = (ctx.req, ctx.headers);
    // Upstream negotiates the output before acting, so a 406 leaves nothing changed.
    ctx.negotiated()?;
    if ctx.resource.custom && !body.is_empty() && decode::is_protobuf(headers) {
        // Custom resources have no protobuf form, whatever the body holds.
        return Err(ApiError::unsupported_media_type(
            apimachinery::serializer::protobuf::MEDIA_TYPE,
        ));
    }
    if ctx.resource.group == crate::resource_metrics::GROUP {
        // NodeMetrics and PodMetrics: computed, never stored (get and list only).
        return crate::resource_metrics::serve(ctx).await;
    }
    if ctx.resource.group.is_empty() && ctx.resource.plural == "componentstatuses" {
        return match req.verb {
            Verb::Get => componentstatus::get(ctx).await,
            _ => componentstatus::list(ctx).await,
        };
    }
    if req.verb == Verb::Create && reviews::is_review(&ctx.resource.group, &ctx.resource.plural) {
        return reviews::create(ctx, user, body);
    }
    match (req.verb, req.subresource.as_deref()) {
        (Verb::Get, None) => read::get(ctx).await,
        (Verb::Get, Some(sub)) => read::get_subresource(ctx, sub).await,
        (Verb::List, _) => list::list(ctx).await,
        (Verb::Watch, _) => watch::watch(ctx).await,
        (Verb::Create, None) => write::create(ctx, body).await,
        (Verb::Create, Some(sub)) => write::create_subresource(ctx, sub, body).await,
        (Verb::Update, sub) => write::update(ctx, sub, body).await,
        (Verb::Patch, sub) => write::patch(ctx, sub, body).await,
        (Verb::Delete, None) => delete::delete(ctx, body).await,
        (Verb::DeleteCollection, None) => delete::delete_collection(ctx, body).await,
        (verb, Some(sub)) => Err(ApiError::method_not_supported(
            &Qualified::new(
                &ctx.resource.group,
                &format!("{}/{sub}", ctx.resource.plural),
            ),
            verb.as_str(),
        )),
    }
}

/// Creates an object on the server's own behalf (bootstrap objects), through the full create path.
pub async fn create_internal(
    api: &Arc<ApiServer>,
    (group, version, plural): (&str, &str, &str),
    namespace: Option<&str>,
    obj: Value,
) -> Result<(), ApiError> {
    let resource = api
        .registry
        .get(group, version, plural)
        .ok_or_else(|| ApiError::internal(format!("no resource {plural}.{group}/{version}")))?;
    let req = ResourceRequest {
        group: group.to_string(),
        version: version.to_string(),
        namespace: namespace.map(str::to_string),
        resource: plural.to_string(),
        name: None,
        subresource: None,
        verb: Verb::Create,
    };
    let (query, headers) = (Query::default(), HeaderMap::new());
    let ctx = Ctx {
        api,
        resource,
        crd: None,
        req: &req,
        query: &query,
        headers: &headers,
        user: crate::authn::UserInfo::server(),
        outcome: Default::default(),
    };
    write::create_object(&ctx, obj).await.map(|_| ())
}

/// The largest request body accepted (upstream's 3 MiB).
pub fn decode_limit() -> usize {
    decode::MAX_BODY
}
