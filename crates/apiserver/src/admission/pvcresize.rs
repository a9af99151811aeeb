//! PersistentVolumeClaimResize admission (upstream
//! `plugin/pkg/admission/storage/persistentvolume/resize`): a claim's storage request may only grow
//! when the claim is Bound and its StorageClass (the same before and after) says
//! `allowVolumeExpansion: true`. Shrinking, or leaving the size alone, is not this plugin's concern.
//!
//! The class is read from the watch cache, else from storage (a class just created may not be in
//! the cache yet; upstream's lister has the same lag but no fallback).

use apimachinery::quantity::Quantity;
use apimachinery::status::ApiError;
use serde_json::Value;

use super::defaultstorageclass::BETA_CLASS_ANNOTATION;
use super::{Attributes, Operation};
use crate::ApiServer;

/// The plugin (upstream `PersistentVolumeClaimResize`): validating, on claim updates.
pub struct PersistentVolumeClaimResize;

#[async_trait::async_trait]
impl super::Plugin for PersistentVolumeClaimResize {
    fn name(&self) -> &'static str {
        "PersistentVolumeClaimResize"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        attrs.operation == Operation::Update
            && attrs.group.is_empty()
            && attrs.resource == "persistentvolumeclaims"
            && attrs.subresource.is_none()
    }

    async fn validate(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let Some(old) = old else {
            return Ok(());
        };
        // Only a growing claim needs its class, so look it up only then.
        let class = match grows(object, old) {
            true => match claim_class(object) {
                "" => None,
                name => {
                    super::noderestriction::lookup(
                        api,
                        "storageclasses",
                        &format!("/storageclasses/{name}"),
                    )
                    .await?
                }
            },
            false => None,
        };
        check_resize(attrs, object, old, class.as_ref())
    }
}

/// The claim's class (upstream `GetPersistentVolumeClaimClass`): the beta annotation first, then
/// `spec.storageClassName`; `""` for none.
pub fn claim_class(pvc: &Value) -> &str {
    pvc.pointer("/metadata/annotations")
        .and_then(|a| a.get(BETA_CLASS_ANNOTATION))
        .and_then(Value::as_str)
        .or_else(|| {
            pvc.pointer("/spec/storageClassName")
                .and_then(Value::as_str)
        })
        .unwrap_or("")
}

/// The claim's requested storage; a missing or malformed request counts as zero (validation
/// reports malformed ones).
fn requested(pvc: &Value) -> Quantity {
    pvc.pointer("/spec/resources/requests/storage")
        .and_then(Value::as_str)
        .and_then(|s| Quantity::parse(s).ok())
        .unwrap_or_default()
}

/// Whether the update asks for more storage than the claim had.
pub fn grows(new: &Value, old: &Value) -> bool {
    requested(new) > requested(old)
}

/// Refuses growing a claim that is not Bound, or whose class (`class`, the StorageClass the claim
/// names, `None` when it names none or it does not exist) does not allow expansion.
pub fn check_resize(
    attrs: &Attributes<'_>,
    new: &Value,
    old: &Value,
    class: Option<&Value>,
) -> Result<(), ApiError> {
    if !grows(new, old) {
        return Ok(());
    }
    if old.pointer("/status/phase").and_then(Value::as_str) != Some("Bound") {
        return Err(attrs.forbidden(new, "Only bound persistent volume claims can be expanded"));
    }
    let (class_name, old_class_name) = (claim_class(new), claim_class(old));
    let allowed = !class_name.is_empty()
        && class_name == old_class_name
        && class
            .filter(|c| crate::objects::name(c) == class_name)
            .and_then(|c| c.get("allowVolumeExpansion"))
            .and_then(Value::as_bool)
            .unwrap_or(false);
    if !allowed {
        return Err(attrs.forbidden(
            new,
            "only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::Outcome;
    use super::*;
    use crate::authn::UserInfo;
    use serde_json::json;

    fn claim(size: &str, class: &str, phase: &str) -> Value {
        json!({"metadata": {"name": "data", "namespace": "ns"},
               "spec": {"storageClassName": class, "resources": {"requests": {"storage": size}}},
               "status": {"phase": phase}})
    }

    fn run(new: &Value, old: &Value, class: Option<&Value>) -> Result<(), ApiError> {
        let user = UserInfo::server().clone();
        let outcome = Outcome::default();
        let attrs = Attributes {
            group: "",
            version: "v1",
            kind: "PersistentVolumeClaim",
            resource: "persistentvolumeclaims",
            subresource: None,
            namespace: "ns",
            name: "data",
            operation: Operation::Update,
            dry_run: false,
            user: &user,
            outcome: &outcome,
        };
        check_resize(&attrs, new, old, class)
    }

    #[test]
    fn growing_needs_a_class_that_allows_expansion() {
        let expandable = json!({"metadata": {"name": "fast"}, "allowVolumeExpansion": true});
        let fixed = json!({"metadata": {"name": "fast"}, "allowVolumeExpansion": false});
        let unset = json!({"metadata": {"name": "fast"}});
        let old = claim("1Gi", "fast", "Bound");
        let new = claim("2Gi", "fast", "Bound");
        assert!(run(&new, &old, Some(&expandable)).is_ok());
        for class in [Some(&fixed), Some(&unset), None] {
            let err = run(&new, &old, class).unwrap_err();
            assert_eq!(err.code, 403);
            assert_eq!(
                err.message,
                "persistentvolumeclaims \"data\" is forbidden: only dynamically provisioned pvc can be resized and the storageclass that provisions the pvc must support resize"
            );
        }
        // A claim without a class, or changing class, cannot grow.
        assert!(run(&claim("2Gi", "", "Bound"), &claim("1Gi", "", "Bound"), None).is_err());
        assert!(run(&new, &claim("1Gi", "other", "Bound"), Some(&expandable)).is_err());
    }

    #[test]
    fn only_bound_claims_grow() {
        let expandable = json!({"metadata": {"name": "fast"}, "allowVolumeExpansion": true});
        let err = run(
            &claim("2Gi", "fast", "Pending"),
            &claim("1Gi", "fast", "Pending"),
            Some(&expandable),
        )
        .unwrap_err();
        assert_eq!(
            err.message,
            "persistentvolumeclaims \"data\" is forbidden: Only bound persistent volume claims can be expanded"
        );
    }

    #[test]
    fn same_size_or_shrinking_is_not_checked() {
        let old = claim("1Gi", "fast", "Pending");
        assert!(run(&claim("1Gi", "fast", "Pending"), &old, None).is_ok());
        assert!(run(&claim("1024Mi", "fast", "Pending"), &old, None).is_ok());
        assert!(run(&claim("500Mi", "fast", "Pending"), &old, None).is_ok());
    }

    #[test]
    fn the_beta_annotation_names_the_class_first() {
        let mut pvc = claim("1Gi", "spec-class", "Bound");
        assert_eq!(claim_class(&pvc), "spec-class");
        pvc["metadata"]["annotations"] = json!({BETA_CLASS_ANNOTATION: "beta-class"});
        assert_eq!(claim_class(&pvc), "beta-class");
    }
}
