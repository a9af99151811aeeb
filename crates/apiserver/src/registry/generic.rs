//! The generic store's behaviour (upstream `registry/generic/registry.Store` with the defaults of
//! `rest.BeforeCreate`/`BeforeUpdate`), shared by every kind's [`Strategy`], and the strategies of
//! kinds without behaviour of their own and of custom resources.

use apimachinery::resources::Resource;
use serde_json::{Map, Value};

use super::Strategy;
use crate::objects;

/// Metadata the server owns: copied from the stored object on every update.
const SERVER_OWNED_META: &[&str] = &[
    "uid",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "generation",
    "namespace",
    "name",
];

/// Kinds without behaviour of their own.
pub struct GenericStrategy;

impl Strategy for GenericStrategy {}

/// Custom resources (upstream `apiextensions-apiserver/pkg/registry/customresource`): a status
/// update takes only the status, metadata included from the stored object.
pub struct CustomResourceStrategy;

impl Strategy for CustomResourceStrategy {
    fn prepare_for_status_update(&self, _resource: &Resource, new: &mut Value, old: &Value) {
        let status = new.get("status").cloned();
        let mut merged = old.clone();
        set_top(&mut merged, "status", status);
        if let Some(rv) = objects::meta_str(new, "resourceVersion").map(str::to_string) {
            objects::set_meta(&mut merged, "resourceVersion", rv);
        }
        *new = merged;
    }
}

/// Resets the metadata a client may not set on create, and sets the first generation.
pub fn prepare_meta_for_create(resource: &Resource, obj: &mut Value) {
    let meta = objects::meta_mut(obj);
    for field in [
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "selfLink",
        "resourceVersion",
    ] {
        meta.remove(field);
    }
    if resource.generation {
        meta.insert("generation".into(), 1.into());
    } else {
        meta.remove("generation");
    }
}

/// The generic create: metadata reset, and no status from the client for resources whose status
/// is a subresource.
pub fn prepare_for_create(resource: &Resource, obj: &mut Value) {
    prepare_meta_for_create(resource, obj);
    if resource.has_subresource("status") {
        set_top(obj, "status", None);
    }
}

/// The generic update of the main resource: server-owned metadata and (for resources with a
/// status subresource) the status come from the stored object; generation moves when the spec
/// changed.
pub fn prepare_for_update(resource: &Resource, new: &mut Value, old: &Value) {
    copy_server_meta(new, old);
    if resource.has_subresource("status") {
        set_top(new, "status", old.get("status").cloned());
    }
    bump_generation(resource, new, old);
}

/// The generic status update of built-in kinds: the status and the metadata from the request
/// (server-owned metadata excepted, as every update), everything else from the stored object.
pub fn prepare_for_status_update(new: &mut Value, old: &Value) {
    let status = new.get("status").cloned();
    let mut merged = old.clone();
    set_top(&mut merged, "status", status);
    copy_server_meta(new, old);
    set_top(&mut merged, "metadata", new.get("metadata").cloned());
    *new = merged;
}

/// Sets (or with `None` removes) one metadata field.
pub fn set_meta_field(obj: &mut Value, field: &str, value: Option<Value>) {
    let meta = objects::meta_mut(obj);
    match value {
        Some(v) => meta.insert(field.to_string(), v),
        None => meta.remove(field),
    };
}

/// A metadata field of the stored object.
pub fn old_meta(old: &Value, field: &str) -> Option<Value> {
    objects::meta(old).and_then(|m| m.get(field)).cloned()
}

pub fn copy_server_meta(new: &mut Value, old: &Value) {
    let old_meta = objects::meta(old).cloned().unwrap_or_default();
    let meta = objects::meta_mut(new);
    for field in SERVER_OWNED_META {
        match old_meta.get(*field) {
            Some(v) => meta.insert(field.to_string(), v.clone()),
            None => meta.remove(*field),
        };
    }
}

/// Sets (or with `None` removes) a top-level field.
pub fn set_top(obj: &mut Value, field: &str, value: Option<Value>) {
    if let Value::Object(map) = obj {
        match value {
            Some(v) => map.insert(field.to_string(), v),
            None => map.remove(field),
        };
    }
}

/// Everything but metadata and status: a change here is a spec change.
fn spec_part(obj: &Value) -> Map<String, Value> {
    obj.as_object()
        .map(|m| {
            m.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect()
        })
        .unwrap_or_default()
}

fn bump_generation(resource: &Resource, new: &mut Value, old: &Value) {
    if !resource.generation {
        return;
    }
    let old_gen = objects::meta(old)
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(1);
    // Custom resources: any change outside metadata moves the generation (upstream's
    // customresource strategy), status included when there is no status subresource.
    let changed = if resource.custom {
        let rest = |o: &Value| -> Map<String, Value> {
            o.as_object()
                .map(|m| {
                    m.iter()
                        .filter(|(k, _)| k.as_str() != "metadata")
                        .map(|(k, v)| (k.clone(), v.clone()))
                        .collect()
                })
                .unwrap_or_default()
        };
        rest(new) != rest(old)
    } else {
        spec_part(new) != spec_part(old)
    };
    objects::set_meta(
        new,
        "generation",
        if changed { old_gen + 1 } else { old_gen },
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::strategy_of;
    use apimachinery::resources::Registry;
    use serde_json::json;

    #[test]
    fn status_and_generation_follow_upstream() {
        let reg = Registry::with_builtin();
        let deploy = reg.get("apps", "v1", "deployments").unwrap();
        let s = strategy_of(&deploy);
        let mut d = json!({"metadata": {"name": "web", "generation": 7}, "spec": {"replicas": 1}, "status": {"replicas": 5}});
        s.prepare_for_create(&deploy, &mut d);
        assert_eq!(d["metadata"]["generation"], 1);
        assert!(d.get("status").is_none());
        let old = json!({"metadata": {"name": "web", "generation": 1, "uid": "u1"}, "spec": {"replicas": 1}, "status": {"replicas": 1}});
        let mut same = json!({"metadata": {"name": "web", "uid": "forged"}, "spec": {"replicas": 1}, "status": {"replicas": 9}});
        s.prepare_for_update(&deploy, &mut same, &old);
        assert_eq!(same["metadata"]["generation"], 1);
        assert_eq!(same["metadata"]["uid"], "u1");
        assert_eq!(
            same["status"]["replicas"], 1,
            "status ignored on the main resource"
        );
        let mut scaled = json!({"metadata": {"name": "web"}, "spec": {"replicas": 3}});
        s.prepare_for_update(&deploy, &mut scaled, &old);
        assert_eq!(scaled["metadata"]["generation"], 2);
        let mut status = json!({"metadata": {"name": "web", "resourceVersion": "5"}, "spec": {"replicas": 100}, "status": {"replicas": 2}});
        s.prepare_for_status_update(&deploy, &mut status, &old);
        assert_eq!(status["spec"]["replicas"], 1, "spec ignored on /status");
        assert_eq!(status["status"]["replicas"], 2);
    }

    /// Upstream's built-in status strategies reset the spec only: metadata (annotations, labels)
    /// sent to /status is kept ("should support CronJob/Ingress/CSR API operations" patch
    /// `metadata.annotations` through /status and expect it); workloads keep their stored labels,
    /// custom resources all their stored metadata.
    #[test]
    fn status_updates_keep_the_requests_metadata_as_upstream() {
        let reg = Registry::with_builtin();
        let cronjobs = reg.get("batch", "v1", "cronjobs").unwrap();
        let old = json!({"metadata": {"name": "c", "uid": "u1", "labels": {"a": "1"}}, "spec": {"schedule": "* * * * *"}});
        let mut new = json!({"metadata": {"name": "c", "uid": "forged", "labels": {"a": "1"}, "annotations": {"patchedstatus": "true"}},
            "spec": {"schedule": "0 0 * * *"}, "status": {"lastScheduleTime": "2026-01-01T00:00:00Z"}});
        strategy_of(&cronjobs).prepare_for_status_update(&cronjobs, &mut new, &old);
        assert_eq!(new["metadata"]["annotations"]["patchedstatus"], "true");
        assert_eq!(new["metadata"]["uid"], "u1");
        assert_eq!(new["spec"]["schedule"], "* * * * *");
        assert_eq!(new["status"]["lastScheduleTime"], "2026-01-01T00:00:00Z");

        let deploy = reg.get("apps", "v1", "deployments").unwrap();
        let mut new = json!({"metadata": {"name": "c", "labels": {"b": "2"}, "annotations": {"x": "y"}}, "status": {}});
        strategy_of(&deploy).prepare_for_status_update(&deploy, &mut new, &old);
        assert_eq!(new["metadata"]["labels"], json!({"a": "1"}));
        assert_eq!(new["metadata"]["annotations"], json!({"x": "y"}));

        let mut new =
            json!({"metadata": {"name": "c", "annotations": {"x": "y"}}, "status": {"s": 1}});
        CustomResourceStrategy.prepare_for_status_update(&cronjobs, &mut new, &old);
        assert_eq!(
            new["metadata"], old["metadata"],
            "custom resources: only the status"
        );
        assert_eq!(new["status"]["s"], 1);
    }

    /// Custom resources: any change outside metadata moves the generation; built-in kinds only a
    /// spec change.
    #[test]
    fn custom_resources_bump_generation_on_any_change() {
        let mut widgets = Resource::clone(
            &Registry::with_builtin()
                .get("apps", "v1", "deployments")
                .unwrap(),
        );
        widgets.custom = true;
        widgets.subresources.clear();
        let old = json!({"metadata": {"name": "w", "generation": 3}, "spec": {"a": 1}});
        let mut new = json!({"metadata": {"name": "w"}, "spec": {"a": 1}, "status": {"x": 1}});
        CustomResourceStrategy.prepare_for_update(&widgets, &mut new, &old);
        assert_eq!(new["metadata"]["generation"], 4);
        let mut same = json!({"metadata": {"name": "w", "labels": {"l": "v"}}, "spec": {"a": 1}});
        CustomResourceStrategy.prepare_for_update(&widgets, &mut same, &old);
        assert_eq!(same["metadata"]["generation"], 3, "metadata alone does not");
    }
}
