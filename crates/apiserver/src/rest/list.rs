//! LIST (upstream `handlers.ListResource` over the cacher and the etcd3 store):
//! - a read from the watch cache, after it has caught up with the store's current revision (or the
//!   requested one), whole or the first page of `limit` (with `resourceVersion=0` always whole, as
//!   upstream's `computeListLimit`);
//! - continuations and `resourceVersionMatch=Exact` lists from the cache at the token's (the asked)
//!   revision while its events are in memory (upstream 1.33+'s `ListFromCacheSnapshot`;
//!   `watch_cache_pages.rs`), else pages read from the store at that revision (upstream's etcd3
//!   `GetList`), so every page belongs to the same snapshot: the continue token is upstream's (base64
//!   of `{"v":"meta.k8s.io/v1","rv":N,"start":"<last key>\u0000"}`), and `remainingItemCount` is set
//!   when no selector filters the list;
//! - a continue token whose revision was compacted is 410 Expired with a fresh token (revision -1:
//!   "the latest") in the Status' `metadata.continue`, to finish the list inconsistently.

use std::time::Duration;

use apimachinery::status::{ApiError, Qualified};
use apimachinery::validation::field::{FieldError, FieldPath};
use base64::Engine;
use bytes::{BufMut, Bytes, BytesMut};
use http::{Response, StatusCode};
use serde_json::{json, Value};
use storage::{KeyValue, ListOptions};

use super::{storage_error, table, Ctx};
use crate::filter::{Attrs, Filter};
use crate::objects;
use crate::response::{self, Body, Representation};
use crate::watch_cache::{PageError, PageRequest};

/// How long a list waits for the watch cache to reach the revision it needs.
pub const CACHE_WAIT: Duration = Duration::from_secs(3);

/// Upstream etcd3's largest page read while filling a filtered page (`maxLimit`).
const MAX_PAGE: usize = 10_000;

/// Upstream's `inconsistentContinue`.
const INCONSISTENT_CONTINUE: &str = "The provided continue parameter is too old to display a consistent list result. You can start a new list without the continue parameter, or use the continue token in this response to retrieve the remainder of the results. Continuing with the provided token results in an inconsistent list - objects that were created, modified, or deleted between the time the first chunk was returned and now may show up in the list.";

/// Upstream's `expired`: an exact list at a compacted revision.
const LIST_EXPIRED: &str = "The resourceVersion for the provided list is too old.";

/// The current objects `filter` selects, read from the store rather than the watch cache (a resource
/// the cache keeps no objects of, or a cache that is behind), decoded as the cache decodes them, and
/// the revision they were read at.
pub(super) async fn from_store_now(
    ctx: &Ctx<'_>,
    filter: &Filter,
) -> Result<(Vec<std::sync::Arc<crate::watch_cache::CachedObject>>, i64), ApiError> {
    let page = ctx
        .api
        .store
        .list(ListOptions::prefix(&ctx.list_prefix()))
        .await
        .map_err(storage_error)?;
    let cache = ctx.cache();
    let objects = page
        .items
        .iter()
        .filter_map(|kv| cache.make_object(&kv.value, kv.mod_revision))
        .filter(|obj| filter.matches(&obj.attrs))
        .collect();
    Ok((objects, page.revision))
}

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

/// Why a list stops early: an error, or a response already made (the 410 with a continue token).
enum Stop {
    Error(ApiError),
    Respond(Response<Body>),
}

impl From<ApiError> for Stop {
    fn from(e: ApiError) -> Stop {
        Stop::Error(e)
    }
}

/// One page of a list: its items, the revision they were read at, the continue token and
/// `remainingItemCount`.
struct Page {
    items: Vec<Bytes>,
    revision: i64,
    next: Option<String>,
    remaining: Option<i64>,
}

/// Where a store read starts.
struct Start {
    /// Read at this revision; `None` for the current one.
    at: Option<i64>,
    /// The continue token's start key, relative to the list prefix (`""` for the beginning).
    key: String,
    /// Whether the read continues a list (a compacted revision then gets a fresh token).
    continuing: bool,
}

impl Start {
    fn beginning(at: Option<i64>) -> Start {
        Start {
            at,
            key: String::new(),
            continuing: false,
        }
    }
}

pub async fn list(ctx: &Ctx<'_>) -> Result<Response<Body>, ApiError> {
    match run(ctx).await {
        Ok(resp) | Err(Stop::Respond(resp)) => Ok(resp),
        Err(Stop::Error(e)) => Err(e),
    }
}

/// Upstream's `ValidateListOptions` (422, kind `ListOptions.meta.k8s.io`).
fn validate_options(rv: &str, rv_match: Option<&str>, continuing: bool) -> Result<(), ApiError> {
    let Some(m) = rv_match.filter(|m| !m.is_empty()) else {
        return Ok(());
    };
    let path = FieldPath::root("resourceVersionMatch");
    let mut errors = Vec::new();
    if rv.is_empty() {
        errors.push(FieldError::forbidden(
            &path,
            "resourceVersionMatch is forbidden unless resourceVersion is provided",
        ));
    }
    if continuing {
        errors.push(FieldError::forbidden(
            &path,
            "resourceVersionMatch is forbidden when continue is provided",
        ));
    }
    if m != "Exact" && m != "NotOlderThan" {
        errors.push(FieldError::not_supported(
            &path,
            m,
            &["Exact", "NotOlderThan", ""],
        ));
    }
    if m == "Exact" && rv == "0" {
        errors.push(FieldError::forbidden(
            &path,
            "resourceVersionMatch \"exact\" is forbidden for resourceVersion \"0\"",
        ));
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ApiError::invalid(
            &Qualified::new("meta.k8s.io", "ListOptions"),
            "",
            &errors,
        ))
    }
}

async fn run(ctx: &Ctx<'_>) -> Result<Response<Body>, Stop> {
    let filter = filter_of(ctx)?;
    let limit = match ctx.query.value("limit") {
        Some(l) => Some(
            l.parse::<i64>()
                .map_err(|_| ApiError::bad_request(format!("invalid limit {l:?}")))?,
        )
        .filter(|l| *l > 0)
        .map(|l| usize::try_from(l).unwrap_or(usize::MAX)),
        None => None,
    };
    let rv = ctx.query.get("resourceVersion").unwrap_or("");
    let rv_match = ctx
        .query
        .value("resourceVersionMatch")
        .filter(|m| !m.is_empty());
    let continue_token = ctx.query.value("continue").filter(|c| !c.is_empty());
    validate_options(rv, rv_match, continue_token.is_some())?;
    if let Some(token) = continue_token {
        // Upstream's storage `ValidateListOptions`: the token first, then the resourceVersion.
        let (continue_rv, key) = decode_continue(token)
            .map_err(|e| ApiError::bad_request(format!("invalid continue token: {e}")))?;
        if !rv.is_empty() && rv != "0" {
            return Err(ApiError::bad_request(
                "specifying resource version is not allowed when using continue",
            )
            .into());
        }
        let start = Start {
            // A negative revision (the token of a 410) means the latest.
            at: (continue_rv > 0).then_some(continue_rv),
            key,
            continuing: true,
        };
        let page = at_revision(ctx, &filter, limit, start).await?;
        return Ok(finish(ctx, page).await?);
    }
    let rv_num = objects::parse_resource_version(rv).map_err(ApiError::bad_request)?;
    let page = match (rv_match, limit) {
        // Exact: at that revision, whole or paged.
        (Some("Exact"), _) => {
            at_revision(ctx, &filter, limit, Start::beginning(Some(rv_num))).await?
        }
        // resourceVersion=0: the cache, whatever the limit (upstream's `computeListLimit`).
        (_, Some(_)) if rv == "0" => from_cache(ctx, &filter, rv, rv_num, limit).await?,
        // The legacy exact match: a limit with a resourceVersion reads at that revision.
        (None, Some(_)) if !rv.is_empty() => {
            at_revision(ctx, &filter, limit, Start::beginning(Some(rv_num))).await?
        }
        // Not older than the revision asked for (or the current one): the latest state, whole or
        // a first page (upstream 1.33+'s cacher pages from memory too).
        (_, limit) => from_cache(ctx, &filter, rv, rv_num, limit).await?,
    };
    Ok(finish(ctx, page).await?)
}

/// A list (whole with `resourceVersion=0`, as upstream's `computeListLimit`, else up to `limit`)
/// from the watch cache, once it has reached the revision the list needs; for a resource without a
/// cache (Events), the store's latest state, paged by `limit` as upstream's etcd3 store does.
async fn from_cache(
    ctx: &Ctx<'_>,
    filter: &Filter,
    rv: &str,
    rv_num: i64,
    limit: Option<usize>,
) -> Result<Page, Stop> {
    let target = ctx.cache_target(rv, rv_num).await?;
    let caches = &ctx.api.caches;
    let reached = if rv.is_empty() {
        caches.wait_consistent(target, CACHE_WAIT).await
    } else {
        caches.wait_for(target, CACHE_WAIT).await
    };
    if !reached {
        if rv.is_empty() {
            // The cache is behind (or cannot tell, without progress notifications): read the store
            // instead of failing, as upstream falls back to etcd.
            return from_store(ctx, filter, limit, Start::beginning(None)).await;
        }
        return Err(ApiError::too_large_resource_version(target, ctx.api.caches.revision()).into());
    }
    if !ctx.cache().keeps_objects() {
        return from_store(ctx, filter, limit, Start::beginning(None)).await;
    }
    let limit = if rv == "0" { None } else { limit };
    match cache_page(ctx, filter, limit, "", None) {
        Ok(page) => Ok(page),
        // Only a cache that keeps no objects refuses its latest state; handled above.
        Err(_) => from_store(ctx, filter, limit, Start::beginning(None)).await,
    }
}

/// A list at the revision `start` names (an exact list: `resourceVersionMatch=Exact` or the legacy
/// `resourceVersion` with `limit`; or a continuation): from the cache while that revision's events
/// are in its window (upstream's `ShouldDelegateExactRV` with `ListFromCacheSnapshot`), else from the
/// store: when the revision was compacted (the store answers 410), left the window, is not reached
/// yet, or is the latest (a 410's fresh token).
async fn at_revision(
    ctx: &Ctx<'_>,
    filter: &Filter,
    limit: Option<usize>,
    start: Start,
) -> Result<Page, Stop> {
    if let Some(at) = start.at.filter(|at| *at >= ctx.api.caches.compacted()) {
        if let Ok(page) = cache_page(ctx, filter, limit, &start.key, Some(at)) {
            return Ok(page);
        }
    }
    from_store(ctx, filter, limit, start).await
}

/// A page of the cache (upstream's cacher `GetList` over a snapshot): the continue token names the
/// last selected key, and `remainingItemCount` counts the keys left when nothing filters the list.
fn cache_page(
    ctx: &Ctx<'_>,
    filter: &Filter,
    limit: Option<usize>,
    start_key: &str,
    at: Option<i64>,
) -> Result<Page, PageError> {
    let prefix = ctx.list_prefix();
    let page = ctx.cache().page(
        &ctx.api.caches,
        &PageRequest {
            prefix: &prefix,
            start: start_key,
            at,
            filter,
            limit,
        },
    )?;
    let next = page.last_key.as_deref().map(|k| {
        encode_continue(
            page.revision,
            &format!("{}\0", k.strip_prefix(prefix.as_str()).unwrap_or(k)),
        )
    });
    let selective = filter.labels.is_some() || filter.fields.is_some();
    let remaining = match (&next, limit) {
        (Some(_), Some(l)) if !selective => Some(page.count as i64 - l as i64),
        _ => None,
    };
    Ok(Page {
        items: page.items.iter().map(|o| o.json.clone()).collect(),
        revision: page.revision,
        next,
        remaining,
    })
}

async fn finish(ctx: &Ctx<'_>, page: Page) -> Result<Response<Body>, ApiError> {
    let Page {
        items,
        revision,
        next,
        remaining,
    } = page;
    let items: Vec<Bytes> = ctx.served_all(items).await?;
    match ctx.representation()? {
        Representation::Object => Ok(response::bytes_response(
            StatusCode::OK,
            response::JSON,
            list_json_with(
                &ctx.resource.kind,
                &ctx.resource.api_version(),
                revision,
                next.as_deref(),
                remaining,
                &items,
            ),
        )),
        Representation::Table { include_object } => {
            let objs = decode_all(&items)?;
            let columns = ctx.custom_columns();
            let mut t = table::table(
                &ctx.resource,
                columns.as_deref(),
                &objs,
                include_object,
                &revision.to_string(),
                next.as_deref(),
            );
            if let Some(n) = remaining {
                t["metadata"]["remainingItemCount"] = n.into();
            }
            table::set_meta_version(&mut t, table::meta_version(ctx.headers));
            Ok(response::json_response(StatusCode::OK, &t))
        }
        Representation::Metadata => {
            let objs = decode_all(&items)?;
            let mut metadata = json!({"resourceVersion": revision.to_string()});
            if let Some(n) = &next {
                metadata["continue"] = n.clone().into();
            }
            if let Some(n) = remaining {
                metadata["remainingItemCount"] = n.into();
            }
            let items: Vec<Value> = objs.iter().map(table::partial_metadata).collect();
            let mut list = json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1", "metadata": metadata, "items": items});
            table::set_meta_version(&mut list, table::meta_version(ctx.headers));
            Ok(response::json_response(StatusCode::OK, &list))
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
    list_json_with(kind, api_version, revision, next, None, items)
}

/// [`list_json`] with `remainingItemCount`.
pub fn list_json_with(
    kind: &str,
    api_version: &str,
    revision: i64,
    next: Option<&str>,
    remaining: Option<i64>,
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
    if let Some(n) = remaining {
        b.put_slice(b",\"remainingItemCount\":");
        b.put_slice(n.to_string().as_bytes());
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

/// The 410 of a continuation whose revision was compacted: upstream's `handleCompactedErrorForPaging`,
/// a Status whose `metadata.continue` restarts from the same key at the latest revision.
fn expired_continue(start: &str) -> Response<Body> {
    let mut status = ApiError::gone(INCONSISTENT_CONTINUE).to_status();
    status["metadata"] = json!({"continue": encode_continue(-1, start)});
    response::json_response(StatusCode::GONE, &status)
}

/// Reads matching objects from the store at one revision (upstream etcd3 `GetList`): pages of `limit`
/// keys, doubled (up to [`MAX_PAGE`]) while selectors leave the page short, until `limit` match.
async fn from_store(
    ctx: &Ctx<'_>,
    filter: &Filter,
    limit: Option<usize>,
    start: Start,
) -> Result<Page, Stop> {
    let prefix = ctx.list_prefix();
    let mut at_revision = start.at;
    let store_error = |e: storage::Error, at: Option<i64>| -> Stop {
        match e {
            storage::Error::Compacted { .. } if start.continuing => {
                Stop::Respond(expired_continue(&start.key))
            }
            storage::Error::Compacted { .. } if at.is_some() => {
                Stop::Error(ApiError::gone(LIST_EXPIRED))
            }
            other => Stop::Error(storage_error(other)),
        }
    };
    // The token's start key is inclusive; ours end in NUL (the smallest key after the last one
    // returned), which is "strictly after" that key. Any other start is looked up on its own.
    let (mut after, inclusive) = match start.key.strip_suffix('\0') {
        Some(last) => (Some(format!("{prefix}{last}")), None),
        None if start.key.is_empty() => (None, None),
        None => (
            Some(format!("{prefix}{}", start.key)),
            Some(format!("{prefix}{}", start.key)),
        ),
    };
    let mut leading: Vec<KeyValue> = Vec::new();
    if let Some(key) = &inclusive {
        let found = ctx
            .api
            .store
            .list(ListOptions {
                prefix: key,
                start_after: None,
                limit: Some(1),
                at_revision,
            })
            .await
            .map_err(|e| store_error(e, at_revision))?;
        at_revision = Some(found.revision);
        leading.extend(found.items.into_iter().filter(|kv| kv.key == *key));
    }
    let selective = filter.labels.is_some() || filter.fields.is_some();
    let mut page_size = limit;
    let mut items = Vec::new();
    let mut last_key: Option<String> = None;
    loop {
        let page = ctx
            .api
            .store
            .list(ListOptions {
                prefix: &prefix,
                start_after: after.as_deref(),
                limit: page_size,
                at_revision,
            })
            .await
            .map_err(|e| store_error(e, at_revision))?;
        at_revision = Some(page.revision);
        let count = page.count + leading.len() as i64;
        let mut has_more = page.more;
        for kv in leading.drain(..).chain(page.items) {
            if limit.is_some_and(|l| items.len() >= l) {
                has_more = true;
                break;
            }
            let json = objects::with_resource_version(&kv.value, kv.mod_revision);
            last_key = Some(kv.key);
            // The prefix already holds the namespace; only selectors need the object decoded.
            if selective {
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
        let Some(limit) = limit else {
            return Ok(Page {
                items,
                revision: page.revision,
                next: None,
                remaining: None,
            });
        };
        if !has_more || items.len() >= limit {
            let revision = page.revision;
            let next = match (&last_key, has_more) {
                (Some(k), true) => Some(encode_continue(
                    revision,
                    &format!("{}\0", k.strip_prefix(&prefix).unwrap_or(k)),
                )),
                _ => None,
            };
            // Upstream counts keys, not matches: with selectors there is no count.
            let remaining = (next.is_some() && !selective).then(|| count - limit as i64);
            return Ok(Page {
                items,
                revision,
                next,
                remaining,
            });
        }
        page_size = page_size.map(|s| (s.saturating_mul(2)).min(MAX_PAGE.max(limit)));
        after = last_key.clone();
    }
}

/// Upstream's continue token: unpadded URL-safe base64 of `{"v":"meta.k8s.io/v1","rv":<rev>,"start":
/// "<key>"}` (fields in that order, as Go marshals the struct), `start` relative to the list prefix.
fn encode_continue(revision: i64, start: &str) -> String {
    let token = format!(
        "{{\"v\":\"meta.k8s.io/v1\",\"rv\":{revision},\"start\":{}}}",
        serde_json::to_string(start).unwrap_or_default()
    );
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(token)
}

/// Upstream's `storage.DecodeContinue`: the token's revision and start key (relative to the list
/// prefix), or the error text upstream gives.
pub(crate) fn decode_continue(token: &str) -> Result<(i64, String), String> {
    const INVALID: &str = "continue key is not valid";
    let raw = go_raw_url_base64(token).map_err(|e| format!("{INVALID}: {e}"))?;
    let (v, rv, start) = go_unmarshal_token(&raw).map_err(|e| format!("{INVALID}: {e}"))?;
    if v != "meta.k8s.io/v1" {
        return Err(format!(
            "{INVALID}: server does not recognize this encoded version {v}"
        ));
    }
    if rv == 0 {
        return Err(format!(
            "{INVALID}: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        ));
    }
    if start.is_empty() {
        return Err(format!(
            "{INVALID}: encoded start key empty (version meta.k8s.io/v1)"
        ));
    }
    // Upstream's defence against path traversal: the key must be what `path.Clean` leaves it.
    let key = if start.starts_with('/') {
        start.clone()
    } else {
        format!("/{start}")
    };
    if !is_clean_path(&key) {
        return Err(format!("{INVALID}: {start}"));
    }
    Ok((rv, key[1..].to_string()))
}

/// Whether Go's `path.Clean` leaves an absolute path unchanged.
fn is_clean_path(path: &str) -> bool {
    path == "/"
        || path[1..]
            .split('/')
            .all(|segment| !segment.is_empty() && segment != "." && segment != "..")
}

/// Go's `base64.RawURLEncoding.DecodeString`, with its error text.
fn go_raw_url_base64(s: &str) -> Result<Vec<u8>, String> {
    use base64::engine::{
        general_purpose::GeneralPurpose, DecodePaddingMode, GeneralPurposeConfig,
    };
    let corrupt = |at: usize| format!("illegal base64 data at input byte {at}");
    // Go skips line breaks.
    let input: Vec<u8> = s.bytes().filter(|b| *b != b'\r' && *b != b'\n').collect();
    if let Some(at) = s.bytes().position(|b| {
        !(b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'\r' || b == b'\n')
    }) {
        return Err(corrupt(at));
    }
    if input.len() % 4 == 1 {
        return Err(corrupt(s.len() - 1));
    }
    let engine = GeneralPurpose::new(
        &base64::alphabet::URL_SAFE,
        GeneralPurposeConfig::new()
            .with_encode_padding(false)
            .with_decode_allow_trailing_bits(true)
            .with_decode_padding_mode(DecodePaddingMode::RequireNone),
    );
    engine
        .decode(&input)
        .map_err(|_| corrupt(s.len().saturating_sub(1)))
}

/// Go's `json.Unmarshal` of the token into its struct (`v` string, `rv` int64, `start` string), with
/// the error texts of the common failures.
fn go_unmarshal_token(raw: &[u8]) -> Result<(String, i64, String), String> {
    let value: Value = match serde_json::from_slice(raw) {
        Ok(v) => v,
        Err(e) => {
            let first = raw.iter().copied().find(|b| !b.is_ascii_whitespace());
            return Err(match first {
                None => "unexpected end of JSON input".to_string(),
                Some(c)
                    if !matches!(
                        c,
                        b'{' | b'[' | b'"' | b't' | b'f' | b'n' | b'-' | b'0'..=b'9'
                    ) =>
                {
                    format!(
                        "invalid character {} looking for beginning of value",
                        go_quote_char(c)
                    )
                }
                Some(_) if e.is_eof() => "unexpected end of JSON input".to_string(),
                Some(_) => e.to_string(),
            });
        }
    };
    let kind_of = |v: &Value| match v {
        Value::String(_) => "string".to_string(),
        Value::Number(n) => format!("number {n}"),
        Value::Bool(_) => "bool".to_string(),
        Value::Array(_) => "array".to_string(),
        Value::Object(_) => "object".to_string(),
        Value::Null => "null".to_string(),
    };
    let Value::Object(map) = &value else {
        if value.is_null() {
            return Ok((String::new(), 0, String::new()));
        }
        let kind = kind_of(&value);
        let kind = kind.split(' ').next().unwrap_or("");
        return Err(format!(
            "json: cannot unmarshal {kind} into Go value of type storage.continueToken"
        ));
    };
    // Go matches field names exactly, else case-insensitively.
    let field = |name: &str| {
        map.get(name).or_else(|| {
            map.iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        })
    };
    let wrong = |v: &Value, name: &str, ty: &str| {
        format!(
            "json: cannot unmarshal {} into Go struct field continueToken.{name} of type {ty}",
            kind_of(v).split(' ').next().unwrap_or("")
        )
    };
    let string_field = |name: &str| -> Result<String, String> {
        match field(name) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(other) => Err(wrong(other, name, "string")),
        }
    };
    let v = string_field("v")?;
    let start = string_field("start")?;
    let rv = match field("rv") {
        None | Some(Value::Null) => 0,
        Some(Value::Number(n)) => n.as_i64().ok_or_else(|| {
            format!(
                "json: cannot unmarshal number {n} into Go struct field continueToken.rv of type int64"
            )
        })?,
        Some(other) => return Err(wrong(other, "rv", "int64")),
    };
    Ok((v, rv, start))
}

/// Go's `quoteChar` for JSON syntax errors.
fn go_quote_char(c: u8) -> String {
    match c {
        b'\'' => "'\\''".to_string(),
        b'"' => "'\"'".to_string(),
        0x20..=0x7e => format!("'{}'", c as char),
        _ => format!("'\\x{c:02x}'"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
    }

    #[test]
    fn continue_tokens_are_upstreams() {
        let t = encode_continue(42, "default/web-3\0");
        let raw = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(&t)
            .unwrap();
        assert_eq!(
            String::from_utf8(raw).unwrap(),
            r#"{"v":"meta.k8s.io/v1","rv":42,"start":"default/web-3\u0000"}"#
        );
        assert_eq!(
            decode_continue(&t).unwrap(),
            (42, "default/web-3\0".to_string())
        );
        // The token of a 410: the latest revision.
        assert_eq!(decode_continue(&encode_continue(-1, "a\0")).unwrap().0, -1);
        // An upstream token decodes here.
        assert_eq!(
            decode_continue(
                "eyJ2IjoibWV0YS5rOHMuaW8vdjEiLCJydiI6MTAsInN0YXJ0IjoidGVtcGxhdGUtMDAwMVx1MDAwMCJ9"
            )
            .unwrap(),
            (10, "template-0001\0".to_string())
        );
    }

    #[test]
    fn bad_continue_tokens_get_upstreams_messages() {
        let err = |t: &str| decode_continue(t).unwrap_err();
        assert_eq!(
            err("garbage!"),
            "continue key is not valid: illegal base64 data at input byte 7"
        );
        assert_eq!(
            err("abcde"),
            "continue key is not valid: illegal base64 data at input byte 4"
        );
        assert_eq!(
            err(&b64("xyz")),
            "continue key is not valid: invalid character 'x' looking for beginning of value"
        );
        assert_eq!(
            err(&b64(r#"{"v":"meta.k8s.io/v1","rv":0,"start":"a"}"#)),
            "continue key is not valid: incorrect encoded start resourceVersion (version meta.k8s.io/v1)"
        );
        assert_eq!(
            err(&b64(r#"{"v":"meta.k8s.io/v1","rv":3,"start":""}"#)),
            "continue key is not valid: encoded start key empty (version meta.k8s.io/v1)"
        );
        assert_eq!(
            err(&b64(r#"{"v":"v2","rv":3,"start":"a"}"#)),
            "continue key is not valid: server does not recognize this encoded version v2"
        );
        assert_eq!(
            err(&b64(
                r#"{"v":"meta.k8s.io/v1","rv":3,"start":"../secrets/x"}"#
            )),
            "continue key is not valid: ../secrets/x"
        );
        assert_eq!(
            err(&b64(r#"{"v":"meta.k8s.io/v1","rv":"3","start":"a"}"#)),
            "continue key is not valid: json: cannot unmarshal string into Go struct field continueToken.rv of type int64"
        );
        // A leading slash is allowed and dropped.
        assert_eq!(
            decode_continue(&b64(r#"{"v":"meta.k8s.io/v1","rv":3,"start":"/ns/a"}"#)).unwrap(),
            (3, "ns/a".to_string())
        );
    }

    #[test]
    fn list_options_are_validated_as_upstream() {
        let e = validate_options("", Some("Exact"), false).unwrap_err();
        assert_eq!(e.code, 422);
        assert_eq!(
            e.message,
            "ListOptions.meta.k8s.io \"\" is invalid: resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
        );
        let e = validate_options("5", Some("Foo"), false).unwrap_err();
        assert!(e.message.contains(
            "resourceVersionMatch: Unsupported value: \"Foo\": supported values: \"Exact\", \"NotOlderThan\", \"\""
        ));
        assert!(validate_options("5", Some("NotOlderThan"), true).is_err());
        assert!(validate_options("0", Some("Exact"), false).is_err());
        assert!(validate_options("5", Some("Exact"), false).is_ok());
        assert!(validate_options("", None, true).is_ok());
    }

    #[test]
    fn list_envelope_is_valid_json() {
        let items = vec![
            Bytes::from_static(b"{\"a\":1}"),
            Bytes::from_static(b"{\"b\":2}"),
        ];
        let v: Value = serde_json::from_slice(&list_json_with(
            "ConfigMap",
            "v1",
            7,
            Some("tok"),
            Some(3),
            &items,
        ))
        .unwrap();
        assert_eq!(v["kind"], "ConfigMapList");
        assert_eq!(v["metadata"]["resourceVersion"], "7");
        assert_eq!(v["metadata"]["continue"], "tok");
        assert_eq!(v["metadata"]["remainingItemCount"], 3);
        assert_eq!(v["items"][1]["b"], 2);
        let v: Value =
            serde_json::from_slice(&list_json("ConfigMap", "v1", 7, None, &items)).unwrap();
        assert!(v["metadata"].get("remainingItemCount").is_none());
    }

    #[test]
    fn the_expired_status_carries_a_fresh_token() {
        let resp = expired_continue("template-0039\0");
        assert_eq!(resp.status(), StatusCode::GONE);
    }
}
