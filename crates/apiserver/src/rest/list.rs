//! LIST (upstream `handlers.ListResource` over the cacher and the etcd3 store):
//! - without `limit`: a consistent read from the watch cache, after it has caught up with the store's
//!   current revision (or the requested one);
//! - with `limit`/`continue`, or `resourceVersionMatch=Exact`: pages read from the store at one
//!   revision, so every page belongs to the same snapshot; a continue token past compaction is 410.

use std::time::Duration;

use apimachinery::status::ApiError;
use base64::Engine;
use bytes::{BufMut, Bytes, BytesMut};
use http::{Response, StatusCode};
use serde_json::{json, Value};
use storage::ListOptions;

use super::{storage_error, table, Ctx};
use crate::filter::{Attrs, Filter};
use crate::objects;
use crate::response::{self, Body, Representation};

/// How long a list waits for the watch cache to reach the revision it needs.
pub const CACHE_WAIT: Duration = Duration::from_secs(3);

pub fn filter_of(ctx: &Ctx<'_>) -> Result<Filter, ApiError> {
    let namespace = if ctx.resource.namespaced {
        ctx.req.namespace.clone()
    } else {
        None
    };
    Filter::new(
        &ctx.resource.group,
        &ctx.resource.plural,
        namespace,
        ctx.query.get("labelSelector"),
        ctx.query.get("fieldSelector"),
    )
    .map_err(ApiError::bad_request)
}

pub async fn list(ctx: &Ctx<'_>) -> Result<Response<Body>, ApiError> {
    let filter = filter_of(ctx)?;
    let limit = match ctx.query.value("limit") {
        Some(l) => Some(
            l.parse::<i64>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        )
        .filter(|l| *l > 0)
        .map(|l| l as usize),
        None => None,
    };
    let rv = ctx.query.get("resourceVersion").unwrap_or("");
    let rv_num = objects::parse_resource_version(rv).map_err(ApiError::bad_request)?;
    let rv_match = ctx.query.value("resourceVersionMatch");
    let continue_token = ctx.query.value("continue");
    if continue_token.is_some() && !rv.is_empty() {
        return Err(ApiError::bad_request(
            "specifying resource version is not allowed when using continue",
        ));
    }
    match rv_match {
        None | Some("NotOlderThan") | Some("Exact") => {}
        Some(other) => {
            return Err(ApiError::bad_request(format!(
                "resourceVersionMatch: Unsupported value: {other:?}: supported values: \"Exact\", \"NotOlderThan\""
            )))
        }
    }
    if rv_match.is_some() && rv.is_empty() {
        return Err(ApiError::bad_request(
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        ));
    }
    let paged =
        continue_token.is_some() || (limit.is_some() && rv != "0") || rv_match == Some("Exact");
    let (items, revision, next) = if paged {
        let at = match continue_token {
            Some(token) => Some(decode_continue(token)?),
            None if rv_match == Some("Exact") => Some((rv_num, String::new())),
            None if rv_num > 0 => Some((rv_num, String::new())),
            None => None,
        };
        from_store(ctx, &filter, limit, at).await?
    } else {
        let target = ctx.cache_target(rv, rv_num).await?;
        if !ctx.api.caches.wait_for(target, CACHE_WAIT).await {
            if rv.is_empty() {
                // The cache is behind: read the store instead of failing.
                return finish(ctx, from_store(ctx, &filter, None, None).await?);
            }
            return Err(ApiError::too_large_resource_version(
                target,
                ctx.api.caches.revision(),
            ));
        }
        let revision = ctx.api.caches.revision();
        let objects: Vec<Bytes> = ctx
            .cache()
            .list(&ctx.list_prefix(), &filter)
            .iter()
            .map(|o| o.json.clone())
            .collect();
        (objects, revision, None)
    };
    finish(ctx, (items, revision, next))
}

type Page = (Vec<Bytes>, i64, Option<String>);

fn finish(ctx: &Ctx<'_>, (items, revision, next): Page) -> Result<Response<Body>, ApiError> {
    let items: Vec<Bytes> = if ctx.read_conversion().is_some() {
        items.into_iter().map(|i| ctx.served(i)).collect()
    } else {
        items
    };
    match ctx.representation()? {
        Representation::Object => Ok(response::bytes_response(
            StatusCode::OK,
            response::JSON,
            list_json(
                &ctx.resource.kind,
                &ctx.resource.api_version(),
                revision,
                next.as_deref(),
                &items,
            ),
        )),
        Representation::Table { include_object } => {
            let objs = decode_all(&items)?;
            let columns = ctx.custom_columns();
            let t = table::table(
                &ctx.resource,
                columns.as_deref(),
                &objs,
                include_object,
                &revision.to_string(),
                next.as_deref(),
            );
            Ok(response::json_response(StatusCode::OK, &t))
        }
        Representation::Metadata => {
            let objs = decode_all(&items)?;
            let mut metadata = json!({"resourceVersion": revision.to_string()});
            if let Some(n) = &next {
                metadata["continue"] = n.clone().into();
            }
            let items: Vec<Value> = objs.iter().map(table::partial_metadata).collect();
            Ok(response::json_response(
                StatusCode::OK,
                &json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "items": items}),
            ))
        }
    }
}

fn decode_all(items: &[Bytes]) -> Result<Vec<Value>, ApiError> {
    items
        .iter()
        .map(|b| serde_json::from_slice(b).map_err(ApiError::internal))
        .collect()
}

/// The list envelope around already-encoded items, without re-encoding them.
pub fn list_json(
    kind: &str,
    api_version: &str,
    revision: i64,
    next: Option<&str>,
    items: &[Bytes],
) -> Bytes {
    let size: usize = items.iter().map(|i| i.len() + 1).sum();
    let mut b = BytesMut::with_capacity(size + 200);
    b.put_slice(b"{\"kind\":\"");
    b.put_slice(kind.as_bytes());
    b.put_slice(b"List\",\"apiVersion\":\"");
    b.put_slice(api_version.as_bytes());
    b.put_slice(b"\",\"metadata\":{\"resourceVersion\":\"");
    b.put_slice(revision.to_string().as_bytes());
    b.put_slice(b"\"");
    if let Some(next) = next {
        b.put_slice(b",\"continue\":");
        b.put_slice(serde_json::to_string(next).unwrap_or_default().as_bytes());
    }
    b.put_slice(b"},\"items\":[");
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            b.put_u8(b',');
        }
        b.put_slice(item);
    }
    b.put_slice(b"]}");
    b.freeze()
}

/// Reads matching objects from the store at one revision, page by page until `limit` match.
async fn from_store(
    ctx: &Ctx<'_>,
    filter: &Filter,
    limit: Option<usize>,
    at: Option<(i64, String)>,
) -> Result<Page, ApiError> {
    let prefix = ctx.list_prefix();
    let (mut at_revision, mut after) = match at {
        Some((rv, start)) => (
            Some(rv).filter(|r| *r > 0),
            (!start.is_empty()).then(|| format!("{prefix}{start}")),
        ),
        None => (None, None),
    };
    let continuing = after.is_some();
    let mut items = Vec::new();
    loop {
        let want = limit.map(|l| l - items.len());
        let page = ctx
            .api
            .store
            .list(ListOptions {
                prefix: &prefix,
                start_after: after.as_deref(),
                limit: want.map(|w| w.max(1)),
                at_revision,
            })
            .await
            .map_err(|e| match e {
                storage::Error::Compacted { .. } if continuing => ApiError::gone(
                    "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.",
                ),
                other => storage_error(other),
            })?;
        at_revision = Some(page.revision);
        after = page.items.last().map(|kv| kv.key.clone());
        for kv in &page.items {
            let json = objects::with_resource_version(&kv.value, kv.mod_revision);
            if !filter.is_everything() {
                let Ok(value) = serde_json::from_slice::<Value>(&json) else {
                    continue;
                };
                if !filter.matches(&Attrs::of(
                    &ctx.resource.group,
                    &ctx.resource.plural,
                    &value,
                )) {
                    continue;
                }
            }
            items.push(json);
        }
        let full = limit.is_some_and(|l| items.len() >= l);
        if !page.more || full {
            let revision = page.revision;
            let next = if page.more {
                after
                    .as_deref()
                    .map(|k| encode_continue(revision, k.strip_prefix(&prefix).unwrap_or(k)))
            } else {
                None
            };
            return Ok((items, revision, next));
        }
    }
}

/// Upstream's continue token: base64 of `{"v":"meta.k8s.io/v1","rv":<rev>,"start":"<key>"}`, where
/// `start` is the last key returned (relative to the list prefix).
fn encode_continue(revision: i64, last_key: &str) -> String {
    let token = json!({"v": "meta.k8s.io/v1", "rv": revision, "start": last_key});
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token.to_string())
}

fn decode_continue(token: &str) -> Result<(i64, String), ApiError> {
    let bad = || {
        ApiError::bad_request("continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)")
    };
    let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token.trim_end_matches('='))
        .map_err(|_| bad())?;
    let v: Value = serde_json::from_slice(&raw).map_err(|_| bad())?;
    if v["v"] != "meta.k8s.io/v1" {
        return Err(bad());
    }
    let rv = v["rv"].as_i64().filter(|r| *r > 0).ok_or_else(bad)?;
    let start = v["start"].as_str().ok_or_else(bad)?;
    if start.contains("..") || start.starts_with('/') {
        return Err(bad());
    }
    Ok((rv, start.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continue_tokens_round_trip() {
        let t = encode_continue(42, "default/web-3");
        assert_eq!(
            decode_continue(&t).unwrap(),
            (42, "default/web-3".to_string())
        );
        assert_eq!(decode_continue("garbage!").unwrap_err().code, 400);
    }

    #[test]
    fn list_envelope_is_valid_json() {
        let items = vec![
            Bytes::from_static(b"{\"a\":1}"),
            Bytes::from_static(b"{\"b\":2}"),
        ];
        let v: Value =
            serde_json::from_slice(&list_json("ConfigMap", "v1", 7, Some("tok"), &items)).unwrap();
        assert_eq!(v["kind"], "ConfigMapList");
        assert_eq!(v["metadata"]["resourceVersion"], "7");
        assert_eq!(v["metadata"]["continue"], "tok");
        assert_eq!(v["items"][1]["b"], 2);
    }
}
