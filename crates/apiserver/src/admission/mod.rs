//! Admission (upstream `k8s.io/apiserver/pkg/admission` and the in-tree plugins rkube runs): an
//! ordered [`Chain`] of [`Plugin`]s, called by the write handlers after defaulting (the mutating
//! phase, [`Chain::admit`]) and after validation, just before storage (the validating phase,
//! [`Chain::validate`]). Plugins carry upstream's names and order (`plugins`), and
//! `--enable-admission-plugins` / `--disable-admission-plugins` choose among them as upstream's.
//!
//! Still outside the chain: NamespaceLifecycle (in `rest::write`) and Priority (`rest::priority`,
//! which runs before defaulting because our pod defaults fill in `preemptionPolicy`).

pub mod alwayspullimages;
pub mod certificates;
pub mod chain;
pub mod defaultingressclass;
pub mod defaultstorageclass;
pub mod defaulttolerationseconds;
pub mod gc;
pub mod limitranger;
pub mod noderestriction;
pub mod nodetaint;
pub mod plugins;
pub mod podsecurity;
pub mod policy;
pub mod pvcresize;
pub mod resourcequota;
pub mod runtimeclass;
pub mod storageobjectinuseprotection;
pub mod webhook;

use std::sync::Mutex;

use apimachinery::status::{ApiError, Qualified};
use serde_json::Value;

use crate::authn::UserInfo;
use crate::ApiServer;

pub use chain::{Chain, Plugin};

/// The operation being admitted (upstream `admission.Operation`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    Create,
    Update,
    Delete,
    Connect,
}

impl Operation {
    /// Upstream's spelling, as in AdmissionReview and webhook rules (`CREATE`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Create => "CREATE",
            Operation::Update => "UPDATE",
            Operation::Delete => "DELETE",
            Operation::Connect => "CONNECT",
        }
    }

    /// The quota evaluators' view: only creates and updates are charged.
    pub fn for_quota(self) -> Option<apimachinery::quota::Operation> {
        match self {
            Operation::Create => Some(apimachinery::quota::Operation::Create),
            Operation::Update => Some(apimachinery::quota::Operation::Update),
            _ => None,
        }
    }
}

/// What admission knows about a request besides the objects (upstream `admission.Attributes`).
#[derive(Clone, Copy, Debug)]
pub struct Attributes<'a> {
    pub group: &'a str,
    pub version: &'a str,
    /// The kind of the object admitted: the resource's, or the subresource's (`Scale`, `Binding`,
    /// `Eviction`, ...).
    pub kind: &'a str,
    /// The plural resource.
    pub resource: &'a str,
    pub subresource: Option<&'a str>,
    /// Empty for cluster-scoped resources.
    pub namespace: &'a str,
    /// The object's name (generated already for `generateName` creates).
    pub name: &'a str,
    pub operation: Operation,
    pub dry_run: bool,
    /// Who asked; the server's own writes run as [`UserInfo::server`].
    pub user: &'a UserInfo,
    /// Where plugins leave warnings and audit annotations for the response.
    pub outcome: &'a Outcome,
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

    /// `resource` or `resource/subresource`, as upstream names a request's resource in messages.
    pub fn resource_path(&self) -> String {
        match self.subresource {
            Some(sub) => format!("{}/{sub}", self.resource),
            None => self.resource.to_string(),
        }
    }
}

/// The most warnings one response carries; more are dropped (each is also cut to
/// [`MAX_WARNING_LEN`]), as upstream's warning recorder bounds them.
pub const MAX_WARNINGS: usize = 100;
pub const MAX_WARNING_LEN: usize = 4096;
/// The most audit annotations one request collects.
pub const MAX_AUDIT_ANNOTATIONS: usize = 100;

/// Warnings and audit annotations the plugins of one request produced.
#[derive(Debug, Default)]
pub struct Outcome {
    warnings: Mutex<Vec<String>>,
    audit_annotations: Mutex<Vec<(String, String)>>,
}

impl Outcome {
    /// Adds a `Warning` header text (duplicates are sent once, as upstream's recorder does).
    pub fn warn(&self, text: impl Into<String>) {
        let mut text: String = text.into();
        if text.len() > MAX_WARNING_LEN {
            let mut cut = MAX_WARNING_LEN;
            while !text.is_char_boundary(cut) {
                cut -= 1;
            }
            text.truncate(cut);
        }
        let mut w = self.warnings.lock().unwrap_or_else(|e| e.into_inner());
        if w.len() < MAX_WARNINGS && !w.contains(&text) {
            w.push(text);
        }
    }

    /// Records an audit annotation (kept for the audit log; the first value of a key wins).
    pub fn annotate(&self, key: impl Into<String>, value: impl Into<String>) {
        let key = key.into();
        let mut a = self
            .audit_annotations
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if a.len() < MAX_AUDIT_ANNOTATIONS && !a.iter().any(|(k, _)| *k == key) {
            a.push((key, value.into()));
        }
    }

    pub fn warnings(&self) -> Vec<String> {
        self.warnings
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    pub fn audit_annotations(&self) -> Vec<(String, String)> {
        self.audit_annotations
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
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
