//! Admission (upstream `k8s.io/apiserver/pkg/admission` and the in-tree plugins rkube runs), called by
//! the write handlers between defaulting, validation and storage:
//!
//! - [`mutate`] after defaulting: the LimitRanger's default requests and limits ([`limitranger`]).
//! - [`validate`] after validation, just before the object is stored: the LimitRanger's minimum,
//!   maximum and ratio checks, then ResourceQuota ([`resourcequota`]), which charges the quotas the
//!   object falls under and refuses what would exceed them.
//!
//! NamespaceLifecycle lives in the write handlers (`rest::write`), as before. Upstream's plugin chain
//! is configurable (`--enable-admission-plugins`); here the set is fixed, and there are no webhooks.

pub mod limitranger;
pub mod resourcequota;
pub mod runtimeclass;

use apimachinery::status::{ApiError, Qualified};
use serde_json::Value;

use crate::ApiServer;

pub use apimachinery::quota::Operation;

/// What admission knows about a request besides the objects (upstream `admission.Attributes`).
#[derive(Clone, Copy, Debug)]
pub struct Attributes<'a> {
    pub group: &'a str,
    /// The plural resource.
    pub resource: &'a str,
    pub subresource: Option<&'a str>,
    /// Empty for cluster-scoped resources.
    pub namespace: &'a str,
    pub operation: Operation,
    pub dry_run: bool,
}

impl Attributes<'_> {
    /// A 403 about `object` (upstream `admission.NewForbidden`, which names the object by its
    /// name, else its generateName).
    pub fn forbidden(&self, object: &Value, why: &str) -> ApiError {
        let name = match crate::objects::name(object) {
            "" => crate::objects::meta_str(object, "generateName").unwrap_or(""),
            name => name,
        };
        ApiError::forbidden_about(&Qualified::new(self.group, self.resource), name, why)
    }
}

/// Mutating admission: may change the object (LimitRanger defaults).
pub fn mutate(
    api: &ApiServer,
    attrs: &Attributes<'_>,
    object: &mut Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    limitranger::admit(api, attrs, object, old)
}

/// Validating admission: LimitRanger checks, then quota (which charges the quotas on success).
pub async fn validate(
    api: &ApiServer,
    attrs: &Attributes<'_>,
    object: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    limitranger::validate(api, attrs, object, old)?;
    api.quota.admit(api, attrs, object, old).await
}

/// The typed objects of a namespace in the watch cache, under `/<storage>/<namespace>/`.
fn cached_in_namespace<T: serde::de::DeserializeOwned>(
    api: &ApiServer,
    storage: &str,
    namespace: &str,
) -> Vec<T> {
    let Some(cache) = api.caches.get(storage) else {
        return Vec::new();
    };
    cache
        .list(
            &format!("/{storage}/{namespace}/"),
            &crate::filter::Filter::default(),
        )
        .iter()
        .filter_map(|o| serde_json::from_slice(&o.json).ok())
        .collect()
}
