//! DefaultIngressClass admission (upstream `plugin/pkg/admission/network/defaultingressclass`): a new
//! Ingress that names no class (no `spec.ingressClassName`, no `kubernetes.io/ingress.class`
//! annotation) gets the default IngressClass, the one annotated
//! `ingressclass.kubernetes.io/is-default-class: "true"`; with several the newest wins, ties going
//! to the first name. Classes are read from the watch cache, as upstream reads its informer.

use apimachinery::status::ApiError;
use serde_json::Value;

use super::{Attributes, Operation};
use crate::ApiServer;

pub const IS_DEFAULT: &str = "ingressclass.kubernetes.io/is-default-class";
/// The class annotation that predates `spec.ingressClassName`.
pub const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

/// The plugin (upstream `DefaultIngressClass`): mutating, on Ingress creates.
pub struct DefaultIngressClass;

#[async_trait::async_trait]
impl super::Plugin for DefaultIngressClass {
    fn name(&self) -> &'static str {
        "DefaultIngressClass"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        attrs.operation == Operation::Create
            && attrs.group == "networking.k8s.io"
            && attrs.resource == "ingresses"
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
        let classes = crate::internal::cached_objects(api, "ingressclasses");
        set_default_class(object, &classes);
        Ok(())
    }
}

/// Whether the Ingress names a class, in its spec or by the old annotation.
pub fn has_class(ingress: &Value) -> bool {
    let annotated = ingress
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(CLASS_ANNOTATION));
    annotated
        || ingress
            .pointer("/spec/ingressClassName")
            .is_some_and(|v| !v.is_null())
}

/// Gives an Ingress without a class the default one among `classes`, if there is one.
pub fn set_default_class(ingress: &mut Value, classes: &[Value]) {
    if has_class(ingress) {
        return;
    }
    let Some(name) = super::defaultstorageclass::newest_default(classes, &[IS_DEFAULT]) else {
        return;
    };
    if let Some(spec) = ingress.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("ingressClassName".into(), Value::String(name.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn class(name: &str, created: &str, default: &str) -> Value {
        json!({"metadata": {"name": name, "creationTimestamp": created,
                            "annotations": {IS_DEFAULT: default}},
               "spec": {"controller": "example.com/ingress"}})
    }

    fn ingress() -> Value {
        json!({"metadata": {"name": "web"}, "spec": {"defaultBackend": {
            "service": {"name": "web", "port": {"number": 80}}}}})
    }

    #[test]
    fn ingresses_without_a_class_get_the_newest_default() {
        let classes = [
            class("old", "2026-01-01T00:00:00Z", "true"),
            class("new", "2026-02-01T00:00:00Z", "true"),
            class("newest-not-default", "2026-03-01T00:00:00Z", "false"),
        ];
        let mut ing = ingress();
        set_default_class(&mut ing, &classes);
        assert_eq!(ing["spec"]["ingressClassName"], "new");

        let mut ing = ingress();
        set_default_class(&mut ing, &classes[2..]);
        assert!(ing["spec"].get("ingressClassName").is_none());
    }

    #[test]
    fn a_named_class_is_kept() {
        let classes = [class("nginx", "2026-01-01T00:00:00Z", "true")];
        let mut ing = ingress();
        ing["spec"]["ingressClassName"] = json!("traefik");
        set_default_class(&mut ing, &classes);
        assert_eq!(ing["spec"]["ingressClassName"], "traefik");

        let mut ing = ingress();
        ing["metadata"]["annotations"] = json!({CLASS_ANNOTATION: "traefik"});
        set_default_class(&mut ing, &classes);
        assert!(ing["spec"].get("ingressClassName").is_none());
    }
}
