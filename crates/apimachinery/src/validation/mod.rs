//! Validation of API objects (upstream `pkg/apis/*/validation` and `apimachinery/pkg/api/validation`),
//! on objects in their served JSON form, after defaulting.
//!
//! The API server calls [`validate_create`] and [`validate_update`]; both return upstream's field errors
//! (path, type, value, wording), which become the causes of a 422 Invalid `Status`.
//!
//! - [`field`]: field paths and errors; [`names`]: string formats (DNS names, label keys and values).
//! - `meta`: object metadata and label selectors, for every kind.
//! - `core_pod`, `core_container`, `core_volume`, `core_scheduling`, `core_service`, `core_quota`, `core`: the core
//!   group; `apps`, `batch` (with `cron`): those
//!   groups; `other`: coordination, scheduling, storage, events, RBAC, networking, discovery, policy,
//!   autoscaling; `crd`: CustomResourceDefinitions (schemas through `crate::schema`);
//!   `networking_ipam` (ServiceCIDR, IPAddress), `storage_vac` (VolumeAttributesClass and the claim/volume
//!   class names), `flowcontrol`, `apiregistration` (APIService) and `admission_policy` (mutating
//!   admission policies), reached through `other`.
//! - `resource` (with `resource_claim`, `resource_slice`): `resource.k8s.io` DeviceClass, ResourceClaim
//!   (spec and status), ResourceClaimTemplate, ResourceSlice.
//!
//! Deliberately different: the server, not these functions, checks namespace presence and scope,
//! `resourceVersion` on update, and allocates cluster IPs and node ports before validation. Kinds not
//! listed get object metadata checks only (DNS-subdomain names), which is what upstream does for
//! custom resources without a schema.

use serde_json::Value;

pub mod field;
pub mod names;

pub mod admission_policy;
mod admission_webhook;
mod apiregistration;
mod apps;
pub(crate) mod b64;
mod batch;
mod core;
mod core_container;
mod core_pod;
mod core_pod_ephemeral;
mod core_pod_resize;
mod core_quota;
mod core_scheduling;
mod core_service;
mod core_sysctl;
mod core_volume;
pub mod crd;
mod cron;
mod flowcontrol;
pub(crate) mod json;
pub mod meta;
mod networking_ipam;
mod other;
mod resource;
mod resource_claim;
mod resource_slice;
mod storage_vac;
mod validating_policy;

#[cfg(test)]
mod tests_apps_batch;
#[cfg(test)]
mod tests_core;
#[cfg(test)]
mod tests_crd;
#[cfg(test)]
mod tests_pod;
#[cfg(test)]
mod tests_resource;

pub(crate) use core_container::parse_quantity;
pub use cron::parse_standard as parse_cron_schedule;
pub use field::{ErrorList, ErrorType, FieldError, FieldPath};
pub use meta::{NameRule, Selector};

/// Kinds that are requests, never stored: no metadata rules.
fn is_review(group: &str, kind: &str) -> bool {
    matches!(
        (group, kind),
        ("authentication.k8s.io", "TokenReview" | "SelfSubjectReview")
            | (
                "authorization.k8s.io",
                "SubjectAccessReview"
                    | "SelfSubjectAccessReview"
                    | "LocalSubjectAccessReview"
                    | "SelfSubjectRulesReview"
            )
    )
}

/// Whether a group is built in (its objects follow core's finalizer-name rule).
fn is_builtin_group(group: &str) -> bool {
    !group.contains('.') || group.ends_with(".k8s.io")
}

/// Validates an object about to be created (after defaulting and name generation).
pub fn validate_create(group: &str, kind: &str, obj: &Value) -> ErrorList {
    if is_review(group, kind) {
        return ErrorList::new();
    }
    if (group, kind) == ("apiextensions.k8s.io", "CustomResourceDefinition") {
        return crd::validate_create(obj);
    }
    let meta_only = |rule| meta::validate_object_meta(obj, rule, true);
    match group {
        "" => match kind {
            "Pod" => core_pod::validate_pod_create(obj),
            "Service" => core_service::validate_service(obj),
            "ConfigMap" => core::validate_config_map(obj),
            "Secret" => core::validate_secret(obj),
            "Namespace" => core::validate_namespace(obj),
            "Node" => core::validate_node(obj),
            "Endpoints" => core::validate_endpoints(obj),
            "Event" => core::validate_core_event(obj),
            "ResourceQuota" => core_quota::validate_resource_quota(obj),
            "ReplicationController" => {
                let mut errs = meta_only(NameRule::Subdomain);
                errs.extend(core::validate_replication_controller(obj));
                errs
            }
            "PodTemplate" => {
                let mut errs = meta_only(NameRule::Subdomain);
                errs.extend(core_pod::validate_pod_template_spec(
                    json::get(obj, &["template"]),
                    &FieldPath::root("template"),
                ));
                errs
            }
            "PersistentVolume" => {
                let mut errs = meta_only(NameRule::Subdomain);
                errs.extend(storage_vac::pv_spec_class_name(obj));
                errs
            }
            "PersistentVolumeClaim" => {
                let mut errs = meta_only(NameRule::Subdomain);
                errs.extend(core::validate_pvc_spec(
                    json::get(obj, &["spec"]),
                    &FieldPath::root("spec"),
                ));
                errs
            }
            _ => meta_only(NameRule::Subdomain),
        },
        "apps" => {
            apps::validate_create(kind, obj).unwrap_or_else(|| meta_only(NameRule::Subdomain))
        }
        "batch" => {
            batch::validate_create(kind, obj).unwrap_or_else(|| meta_only(NameRule::Subdomain))
        }
        "resource.k8s.io" => resource::validate_create(kind, obj)
            .unwrap_or_else(|| meta::validate_object_meta(obj, NameRule::Subdomain, true)),
        _ => other::validate_create(group, kind, obj).unwrap_or_else(|| {
            meta::validate_object_meta(obj, NameRule::Subdomain, is_builtin_group(group))
        }),
    }
}

/// Validates a `pods/resize` update of `old` to `new` (upstream `ValidatePodResize`).
pub fn validate_pod_resize(new: &Value, old: &Value) -> ErrorList {
    core_pod_resize::validate_pod_resize(new, old)
}

/// Validates a `pods/ephemeralcontainers` update of `old` to `new` (upstream
/// `ValidatePodEphemeralContainersUpdate`).
pub fn validate_pod_ephemeral_containers_update(new: &Value, old: &Value) -> ErrorList {
    core_pod_ephemeral::validate_pod_ephemeral_containers_update(new, old)
}

/// Validates an update of `old` to `new` (both defaulted), immutability included.
pub fn validate_update(group: &str, kind: &str, new: &Value, old: &Value) -> ErrorList {
    if is_review(group, kind) {
        return ErrorList::new();
    }
    if (group, kind) == ("apiextensions.k8s.io", "CustomResourceDefinition") {
        return crd::validate_update(new, old);
    }
    let meta_update = || meta::validate_object_meta_update(new, old, true);
    let not_meta = |errs: ErrorList| {
        errs.into_iter()
            .filter(|e| !e.field.as_str().starts_with("metadata."))
    };
    match group {
        "" => match kind {
            "Pod" => core_pod::validate_pod_update(new, old),
            "Service" => core_service::validate_service_update(new, old),
            "ConfigMap" => core::validate_config_map_update(new, old),
            "Secret" => core::validate_secret_update(new, old),
            "Node" => core::validate_node_update(new, old),
            "Event" => core::validate_core_event(new),
            "ResourceQuota" => core_quota::validate_resource_quota_update(new, old),
            "Endpoints" => {
                let mut errs = meta_update();
                errs.extend(not_meta(core::validate_endpoints(new)));
                errs
            }
            "ReplicationController" => {
                let mut errs = meta_update();
                errs.extend(core::validate_replication_controller(new));
                errs
            }
            "PodTemplate" => {
                let mut errs = meta_update();
                errs.extend(core_pod::validate_pod_template_spec(
                    json::get(new, &["template"]),
                    &FieldPath::root("template"),
                ));
                errs
            }
            "PersistentVolume" => {
                let mut errs = meta_update();
                errs.extend(storage_vac::pv_spec_class_name(new));
                errs.extend(storage_vac::pv_update_class_name(new, old));
                errs
            }
            "PersistentVolumeClaim" => {
                let mut errs = meta_update();
                errs.extend(storage_vac::pvc_spec_class_name(
                    json::get(new, &["spec"]).unwrap_or(&Value::Null),
                    &FieldPath::root("spec"),
                ));
                errs.extend(storage_vac::pvc_update_class_name(new, old));
                errs
            }
            _ => meta_update(),
        },
        "apps" => apps::validate_update(kind, new, old).unwrap_or_else(meta_update),
        "batch" => batch::validate_update(kind, new, old).unwrap_or_else(meta_update),
        "resource.k8s.io" => resource::validate_update(kind, new, old).unwrap_or_else(meta_update),
        _ => other::validate_update(group, kind, new, old).unwrap_or_else(|| {
            meta::validate_object_meta_update(new, old, is_builtin_group(group))
        }),
    }
}
