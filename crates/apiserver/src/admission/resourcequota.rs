//! ResourceQuota admission (upstream `staging/src/k8s.io/apiserver/pkg/admission/plugin/resourcequota`):
//! a create (or an update that can change usage: a Service's type, a claim's size) is checked against
//! every quota of its namespace that tracks what it consumes; if it fits, the quotas' `status.used` is
//! raised by its usage before the object is stored, so concurrent creates cannot overshoot; if not,
//! the request gets 403 with upstream's `exceeded quota: ...` message.
//!
//! As upstream: a quota whose status the controller has not computed yet refuses what it would track
//! (`status unknown for quota`), pods must state the cpu/memory requests and limits a quota tracks,
//! dry runs are checked but charge nothing, subresources are not charged (but `pods/resize`, as
//! upstream: the growth of the pod's requests and limits), and a conflicting write of a
//! quota's status is retried (three times) against the quota's latest version.
//!
//! Deliberately different: upstream batches waiting requests per namespace on worker goroutines and
//! reads quotas from an informer (plus a cache of its own recent writes); here one lock per namespace
//! stripe serializes evaluation and the quotas are read from the store itself, so a request always
//! sees the previous one's charge. Whether a namespace has quotas at all is answered from the watch
//! cache, so namespaces without quotas pay nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use apimachinery::quota::{self, Evaluator, Object, Operation, ResourceList};
use apimachinery::status::{ApiError, Qualified};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, ResourceQuota, Service};
use serde_json::Value;

use super::Attributes;
use crate::objects;
use crate::ApiServer;

/// Lock stripes: requests in namespaces of one stripe are evaluated one at a time.
const LOCK_STRIPES: usize = 64;
/// Re-reads of quotas whose status write conflicted (upstream: 3).
const RETRIES: usize = 3;
/// Upstream's evaluation timeout.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The storage name of ResourceQuotas.
const QUOTAS: &str = "resourcequotas";

/// The quota admission state of one API server.
pub struct QuotaAdmission {
    locks: Vec<tokio::sync::Mutex<()>>,
}

impl Default for QuotaAdmission {
    fn default() -> QuotaAdmission {
        QuotaAdmission {
            locks: (0..LOCK_STRIPES)
                .map(|_| tokio::sync::Mutex::new(()))
                .collect(),
        }
    }
}

/// Why a request is refused.
#[derive(Debug, PartialEq, Eq)]
pub enum Denial {
    /// 403 Forbidden with this reason.
    Forbidden(String),
    /// An evaluation error (upstream returns it unwrapped: a 500).
    Error(String),
}

/// The request as quota reads it.
pub struct Request<'a> {
    pub operation: Operation,
    pub object: Object<'a>,
    /// The stored object, on update.
    pub old: Option<Object<'a>>,
}

/// Upstream `hasUsageStats`: the quota has a used value for each resource of interest it limits.
fn has_usage_stats(quota: &ResourceQuota, interesting: &[String]) -> bool {
    let status = quota.status.as_ref();
    let used = status.and_then(|s| s.used.as_ref());
    status
        .and_then(|s| s.hard.as_ref())
        .into_iter()
        .flatten()
        .filter(|(name, _)| interesting.contains(name))
        .all(|(name, _)| used.is_some_and(|u| u.contains_key(name)))
}

fn status_list(quota: &ResourceQuota, hard: bool) -> Result<ResourceList, Denial> {
    let status = quota.status.as_ref();
    let list = if hard {
        status.and_then(|s| s.hard.as_ref())
    } else {
        status.and_then(|s| s.used.as_ref())
    };
    quota::parse_list(list).map_err(|e| {
        Denial::Error(format!(
            "quota {}: {e}",
            quota.metadata.name.as_deref().unwrap_or("")
        ))
    })
}

/// Checks a request against the namespace's quotas (upstream `CheckRequest`). Returns, per quota, the
/// new `status.used` when the request changes it, or why the request is refused.
pub fn check_request(
    quotas: &[ResourceQuota],
    evaluator: &Evaluator,
    req: &Request<'_>,
    now: k8s_openapi::jiff::Timestamp,
) -> Result<Vec<Option<ResourceList>>, Denial> {
    let mut out = vec![None; quotas.len()];
    // A pod update reaches here only from `pods/resize` (`admit` lets no other pod update
    // through), which upstream's pod evaluator handles.
    let resize = matches!(evaluator, Evaluator::Pods) && req.operation == Operation::Update;
    if !evaluator.handles(req.operation) && !resize {
        return Ok(out);
    }
    let mut interesting = Vec::new();
    for (i, q) in quotas.iter().enumerate() {
        if !evaluator.matches(q, req.object).map_err(Denial::Error)? {
            continue;
        }
        let name = q.metadata.name.as_deref().unwrap_or("");
        let hard_names: Vec<String> = status_list(q, true)?.into_keys().collect();
        let restricted = evaluator.matching_resources(&hard_names);
        evaluator
            .constraints(&restricted, req.object)
            .map_err(|e| Denial::Forbidden(format!("failed quota: {name}: {e}")))?;
        if !has_usage_stats(q, &restricted) {
            let mut sorted = restricted.clone();
            sorted.sort();
            return Err(Denial::Forbidden(format!(
                "status unknown for quota: {name}, resources: {}",
                sorted.join(",")
            )));
        }
        interesting.push(i);
    }
    if interesting.is_empty() {
        return Ok(out);
    }
    let input = evaluator.usage(req.object, now).map_err(Denial::Error)?;
    let negative = quota::is_negative(&input);
    if !negative.is_empty() {
        return Err(Denial::Forbidden(format!(
            "quota usage is negative for resource(s): {}",
            negative.join(",")
        )));
    }
    let mut deltas: Vec<(usize, ResourceList)> =
        interesting.iter().map(|i| (*i, input.clone())).collect();
    if req.operation == Operation::Update {
        let Some(old) = req.old else {
            return Err(Denial::Forbidden(
                "unable to get previous usage since prior version of object was not found".into(),
            ));
        };
        // Charge only the growth, for quotas the old object already counted against.
        let previous = evaluator.usage(old, now).map_err(Denial::Error)?;
        let growth = quota::subtract_non_negative(&input, &previous);
        for (i, delta) in deltas.iter_mut() {
            if evaluator.matches(&quotas[*i], old).map_err(Denial::Error)? {
                *delta = growth.clone();
            }
        }
    }
    for (i, delta) in deltas {
        let delta = quota::remove_zeros(&delta);
        if delta.is_empty() {
            continue;
        }
        let q = &quotas[i];
        let hard = status_list(q, true)?;
        let used = status_list(q, false)?;
        let hard_names = quota::names(&hard);
        let requested = quota::mask(&delta, &hard_names);
        let new_used = quota::add(&used, &requested);
        let masked = quota::mask(&new_used, &quota::names(&requested));
        let (fits, exceeded) = quota::less_than_or_equal(&masked, &hard);
        if !fits {
            return Err(Denial::Forbidden(format!(
                "exceeded quota: {}, requested: {}, used: {}, limited: {}",
                q.metadata.name.as_deref().unwrap_or(""),
                quota::pretty_print(&quota::mask(&requested, &exceeded)),
                quota::pretty_print(&quota::mask(&used, &exceeded)),
                quota::pretty_print(&quota::mask(&hard, &exceeded)),
            )));
        }
        if !quota::equals(&new_used, &used) {
            out[i] = Some(new_used);
        }
    }
    Ok(out)
}

/// The object in the evaluator's typed form.
enum Decoded {
    Pod(Box<Pod>),
    Service(Box<Service>),
    Claim(Box<PersistentVolumeClaim>),
    Other,
}

impl Decoded {
    fn new(evaluator: &Evaluator, obj: &Value) -> Result<Decoded, ApiError> {
        let bad = |e: serde_json::Error| ApiError::internal(format!("quota: decoding object: {e}"));
        Ok(match evaluator {
            Evaluator::Pods => Decoded::Pod(serde_json::from_value(obj.clone()).map_err(bad)?),
            Evaluator::Services => {
                Decoded::Service(serde_json::from_value(obj.clone()).map_err(bad)?)
            }
            Evaluator::PersistentVolumeClaims => {
                Decoded::Claim(serde_json::from_value(obj.clone()).map_err(bad)?)
            }
            Evaluator::ObjectCount { .. } => Decoded::Other,
        })
    }

    fn object(&self) -> Object<'_> {
        match self {
            Decoded::Pod(p) => Object::Pod(p),
            Decoded::Service(s) => Object::Service(s),
            Decoded::Claim(c) => Object::PersistentVolumeClaim(c),
            Decoded::Other => Object::Other,
        }
    }
}

/// A quota as stored: its key, JSON, revision and typed form.
struct StoredQuota {
    key: String,
    json: Value,
    revision: i64,
    typed: ResourceQuota,
}

fn stripe(namespace: &str) -> usize {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    namespace.hash(&mut h);
    (h.finish() % LOCK_STRIPES as u64) as usize
}

#[async_trait::async_trait]
impl super::Plugin for QuotaAdmission {
    fn name(&self) -> &'static str {
        "ResourceQuota"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        attrs.operation.for_quota().is_some()
    }

    async fn validate(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        self.admit(api, attrs, object, old).await
    }
}

impl QuotaAdmission {
    /// Admits the request or refuses it; charges the matching quotas when it is admitted.
    pub async fn admit(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        // `pods/resize` is charged as an update of the pod (upstream's pod evaluator handles the
        // resize subresource): only the growth of its requests and limits counts.
        let resize = attrs.group.is_empty()
            && attrs.resource == "pods"
            && attrs.subresource == Some("resize");
        if (attrs.subresource.is_some() && !resize) || attrs.namespace.is_empty() {
            return Ok(());
        }
        if quota::is_ignored(attrs.group, attrs.resource) {
            return Ok(());
        }
        let evaluator = Evaluator::for_resource(attrs.group, attrs.resource);
        let Some(operation) = attrs.operation.for_quota() else {
            return Ok(());
        };
        let handled = evaluator.handles(operation) || (resize && operation == Operation::Update);
        if !handled || !self.has_quotas(api, attrs.namespace) {
            return Ok(());
        }
        let evaluation = self.evaluate(api, attrs, operation, &evaluator, object, old);
        match tokio::time::timeout(TIMEOUT, evaluation).await {
            Ok(result) => result,
            Err(_) => Err(ApiError::internal("resource quota evaluation timed out")),
        }
    }

    /// Whether the watch cache holds any quota in the namespace.
    fn has_quotas(&self, api: &ApiServer, namespace: &str) -> bool {
        api.caches.get(QUOTAS).is_some_and(|c| {
            !c.list(
                &format!("/{QUOTAS}/{namespace}/"),
                &crate::filter::Filter::default(),
            )
            .is_empty()
        })
    }

    async fn evaluate(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        operation: Operation,
        evaluator: &Evaluator,
        raw: &Value,
        raw_old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let object = Decoded::new(evaluator, raw)?;
        let old = raw_old.map(|o| Decoded::new(evaluator, o)).transpose()?;
        let req = Request {
            operation,
            object: object.object(),
            old: old.as_ref().map(Decoded::object),
        };
        let _serialized = self.locks[stripe(attrs.namespace)].lock().await;
        // After a conflicting status write, only the quotas that failed are checked again (the
        // others already carry this request's charge), as upstream's `checkQuotas` retry.
        let mut only: Option<BTreeSet<String>> = None;
        let mut last_error = None;
        for _ in 0..=RETRIES {
            let mut quotas = read_quotas(api, attrs.namespace).await?;
            if let Some(only) = &only {
                quotas.retain(|q| only.contains(q.typed.metadata.name.as_deref().unwrap_or("")));
            }
            let typed: Vec<ResourceQuota> = quotas.iter().map(|q| q.typed.clone()).collect();
            let changes =
                check_request(&typed, evaluator, &req, k8s_openapi::jiff::Timestamp::now())
                    .map_err(|d| match d {
                        Denial::Forbidden(why) => attrs.forbidden(raw, &why),
                        Denial::Error(e) => ApiError::internal(e),
                    })?;
            if attrs.dry_run {
                return Ok(());
            }
            let mut failed = BTreeSet::new();
            for (q, used) in quotas.iter().zip(changes) {
                let Some(used) = used else { continue };
                if let Err(e) = write_used(api, q, &used).await {
                    failed.insert(q.typed.metadata.name.clone().unwrap_or_default());
                    last_error = Some(e);
                }
            }
            if failed.is_empty() {
                return Ok(());
            }
            only = Some(failed);
        }
        Err(last_error.unwrap_or_else(|| ApiError::internal("resource quota update failed")))
    }
}

/// The namespace's quotas, read from the store (not the cache: the previous request's charge must
/// be visible).
async fn read_quotas(api: &ApiServer, namespace: &str) -> Result<Vec<StoredQuota>, ApiError> {
    let prefix = format!("/{QUOTAS}/{namespace}/");
    let list = api
        .store
        .list(storage::ListOptions::prefix(&prefix))
        .await
        .map_err(crate::rest::storage_error)?;
    let mut out = Vec::new();
    for kv in list.items {
        let json: Value = serde_json::from_slice(&kv.value).map_err(|e| {
            ApiError::internal(format!("stored quota {} is not valid JSON: {e}", kv.key))
        })?;
        let typed: ResourceQuota = serde_json::from_value(json.clone()).map_err(|e| {
            ApiError::internal(format!("stored quota {} does not decode: {e}", kv.key))
        })?;
        out.push(StoredQuota {
            key: kv.key,
            json,
            revision: kv.mod_revision,
            typed,
        });
    }
    Ok(out)
}

/// Writes a quota's new `status.used`, if its revision is still the one read (upstream's
/// `UpdateStatus` with the quota's resourceVersion).
async fn write_used(api: &ApiServer, q: &StoredQuota, used: &ResourceList) -> Result<(), ApiError> {
    let mut json = q.json.clone();
    let used = serde_json::to_value(quota::to_k8s_list(used)).map_err(ApiError::internal)?;
    match json.get_mut("status").and_then(Value::as_object_mut) {
        Some(status) => {
            status.insert("used".into(), used);
        }
        None => json["status"] = serde_json::json!({ "used": used }),
    }
    let name = q.typed.metadata.name.as_deref().unwrap_or("");
    match api
        .store
        .update(&q.key, objects::encode_for_storage(&json), Some(q.revision))
        .await
    {
        Ok(_) => Ok(()),
        Err(storage::Error::Conflict { .. }) => Err(ApiError::conflict_modified(
            &Qualified::new("", QUOTAS),
            name,
        )),
        Err(storage::Error::NotFound { .. }) => {
            Err(ApiError::not_found(&Qualified::new("", QUOTAS), name))
        }
        Err(e) => Err(crate::rest::storage_error(e)),
    }
}

#[cfg(test)]
mod tests;
