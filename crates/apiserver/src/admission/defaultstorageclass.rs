//! DefaultStorageClass admission (upstream `plugin/pkg/admission/storage/storageclass/setdefault`):
//! a new PersistentVolumeClaim that names no class (no `spec.storageClassName`, not even `""`, and
//! no beta `volume.beta.kubernetes.io/storage-class` annotation) gets the default StorageClass, the
//! one annotated `storageclass.kubernetes.io/is-default-class: "true"` (or the beta annotation).
//! With several defaults the newest wins, ties going to the first name (upstream 1.28+'s
//! `GetDefaultClass`); with none, the claim is left alone.
//!
//! Classes are read from the watch cache, as upstream reads its informer: a class created an
//! instant before the claim may not be seen yet.

use apimachinery::status::ApiError;
use serde_json::Value;

use super::{Attributes, Operation};
use crate::ApiServer;

pub const IS_DEFAULT: &str = "storageclass.kubernetes.io/is-default-class";
pub const BETA_IS_DEFAULT: &str = "storageclass.beta.kubernetes.io/is-default-class";
/// The class annotation that predates `spec.storageClassName`.
pub const BETA_CLASS_ANNOTATION: &str = "volume.beta.kubernetes.io/storage-class";

/// The plugin (upstream `DefaultStorageClass`): mutating, on claim creates.
pub struct DefaultStorageClass;

#[async_trait::async_trait]
impl super::Plugin for DefaultStorageClass {
    fn name(&self) -> &'static str {
        "DefaultStorageClass"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        attrs.operation == Operation::Create
            && attrs.group.is_empty()
            && attrs.resource == "persistentvolumeclaims"
            && attrs.subresource.is_none()
    }

    async fn admit(
        &self,
        api: &ApiServer,
        _attrs: &Attributes<'_>,
        object: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if has_class(object) {
            return Ok(());
        }
        let classes = crate::internal::cached_objects(api, "storageclasses");
        set_default_class(object, &classes);
        Ok(())
    }
}

/// Whether the claim asked for a class (upstream `PersistentVolumeClaimHasClass`): the beta
/// annotation, or `spec.storageClassName` set, even to `""` (which asks for no class).
pub fn has_class(pvc: &Value) -> bool {
    let annotated = pvc
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(BETA_CLASS_ANNOTATION));
    annotated
        || pvc
            .pointer("/spec/storageClassName")
            .is_some_and(|v| !v.is_null())
}

/// Gives a claim without a class the default one among `classes`, if there is one.
pub fn set_default_class(pvc: &mut Value, classes: &[Value]) {
    if has_class(pvc) {
        return;
    }
    let Some(name) = newest_default(classes, &[IS_DEFAULT, BETA_IS_DEFAULT]) else {
        return;
    };
    if let Some(spec) = pvc.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("storageClassName".into(), Value::String(name.to_string()));
    }
}

/// The name of the newest of `classes` with one of `annotations` set to `"true"`; equal creation
/// times go to the first name (upstream's sort: creation time descending, then name ascending).
/// Shared with DefaultIngressClass, which picks the same way.
pub(super) fn newest_default<'a>(classes: &'a [Value], annotations: &[&str]) -> Option<&'a str> {
    let is_default = |c: &Value| {
        annotations.iter().any(|key| {
            c.pointer("/metadata/annotations")
                .and_then(|a| a.get(*key))
                .and_then(Value::as_str)
                == Some("true")
        })
    };
    // Unparseable or missing timestamps sort as the oldest.
    let created = |c: &Value| {
        crate::objects::meta_str(c, "creationTimestamp")
            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.timestamp_nanos_opt().unwrap_or(i64::MIN))
            .unwrap_or(i64::MIN)
    };
    classes
        .iter()
        .filter(|c| is_default(c))
        .map(|c| (created(c), crate::objects::name(c)))
        .min_by(|(ta, na), (tb, nb)| tb.cmp(ta).then_with(|| na.cmp(nb)))
        .map(|(_, name)| name)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn class(name: &str, created: &str, default: Option<&str>) -> Value {
        let mut c =
            json!({"metadata": {"name": name, "creationTimestamp": created}, "provisioner": "p"});
        if let Some(key) = default {
            c["metadata"]["annotations"] = json!({key: "true"});
        }
        c
    }

    fn claim() -> Value {
        json!({"metadata": {"name": "c"}, "spec": {"accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}}})
    }

    #[test]
    fn claims_without_a_class_get_the_default() {
        let classes = [
            class("slow", "2026-01-01T00:00:00Z", None),
            class("fast", "2026-01-01T00:00:00Z", Some(IS_DEFAULT)),
        ];
        let mut pvc = claim();
        set_default_class(&mut pvc, &classes);
        assert_eq!(pvc["spec"]["storageClassName"], "fast");

        // The beta annotation marks a default too.
        let classes = [class("old", "2026-01-01T00:00:00Z", Some(BETA_IS_DEFAULT))];
        let mut pvc = claim();
        set_default_class(&mut pvc, &classes);
        assert_eq!(pvc["spec"]["storageClassName"], "old");
    }

    #[test]
    fn a_chosen_class_or_no_default_leaves_the_claim_alone() {
        let classes = [class("fast", "2026-01-01T00:00:00Z", Some(IS_DEFAULT))];
        for mut pvc in [
            {
                let mut p = claim();
                p["spec"]["storageClassName"] = json!("");
                p
            },
            {
                let mut p = claim();
                p["spec"]["storageClassName"] = json!("slow");
                p
            },
            {
                let mut p = claim();
                p["metadata"]["annotations"] = json!({BETA_CLASS_ANNOTATION: "slow"});
                p
            },
        ] {
            let before = pvc.clone();
            set_default_class(&mut pvc, &classes);
            assert_eq!(pvc, before);
        }
        // An explicit null is no class.
        let mut pvc = claim();
        pvc["spec"]["storageClassName"] = Value::Null;
        set_default_class(&mut pvc, &classes);
        assert_eq!(pvc["spec"]["storageClassName"], "fast");

        // "false" is not a default.
        let mut c = class("fast", "2026-01-01T00:00:00Z", None);
        c["metadata"]["annotations"] = json!({IS_DEFAULT: "false"});
        let mut pvc = claim();
        set_default_class(&mut pvc, &[c]);
        assert!(pvc["spec"].get("storageClassName").is_none());
    }

    #[test]
    fn the_newest_default_wins_then_the_first_name() {
        let classes = [
            class("a-old", "2026-01-01T00:00:00Z", Some(IS_DEFAULT)),
            class("z-new", "2026-03-01T00:00:00Z", Some(IS_DEFAULT)),
            class("b-new", "2026-03-01T00:00:00Z", Some(IS_DEFAULT)),
        ];
        assert_eq!(newest_default(&classes, &[IS_DEFAULT]), Some("b-new"));
        assert_eq!(newest_default(&classes[..2], &[IS_DEFAULT]), Some("z-new"));
        assert_eq!(newest_default(&[], &[IS_DEFAULT]), None);
    }
}
