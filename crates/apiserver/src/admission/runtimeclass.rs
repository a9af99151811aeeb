//! Upstream's RuntimeClass admission plugin (`plugin/pkg/admission/runtimeclass`), on pod creates:
//! a pod naming a RuntimeClass that does not exist is Forbidden; the class's `overhead.podFixed`
//! becomes the pod's `spec.overhead` (a different overhead given by the pod is Forbidden, and so is
//! an overhead without a class that defines one); the class's `scheduling.nodeSelector` is merged
//! into the pod's (a conflicting key is Forbidden) and its tolerations are added.
//!
//! Difference: tolerations are merged by dropping exact duplicates; upstream's `MergeTolerations`
//! also drops tolerations another one already covers.

use apimachinery::quantity::Quantity;
use apimachinery::status::ApiError;
use serde_json::{Map, Value};

use super::Attributes;
use crate::ApiServer;

/// The RuntimeClass named `name`: from the watch cache, else storage (the cache may lag a class
/// created just before the pod, as upstream's lister does; it falls back to a live GET too).
async fn runtime_class(api: &ApiServer, name: &str) -> Result<Option<Value>, ApiError> {
    let key = format!("/runtimeclasses/{name}");
    if let Some(cached) = api.caches.get("runtimeclasses").and_then(|c| c.get(&key)) {
        return serde_json::from_slice(&cached.json)
            .map(Some)
            .map_err(ApiError::internal);
    }
    match api.store.get(&key).await {
        Ok(Some(kv)) => serde_json::from_slice(&kv.value)
            .map(Some)
            .map_err(ApiError::internal),
        Ok(None) => Ok(None),
        Err(e) => Err(ApiError::internal(e)),
    }
}

/// Resource lists equal as quantities (`1000m` equals `1`), as upstream's semantic equality.
fn same_resources(a: &Map<String, Value>, b: &Map<String, Value>) -> bool {
    let parse = |v: &Value| v.as_str().and_then(|s| Quantity::parse(s).ok());
    a.len() == b.len()
        && a.iter()
            .all(|(k, v)| match (parse(v), b.get(k).and_then(parse)) {
                (Some(x), Some(y)) => x == y,
                _ => b.get(k) == Some(v),
            })
}

/// The plugin (upstream `RuntimeClass`): mutating on pod creates.
pub struct RuntimeClass;

#[async_trait::async_trait]
impl super::Plugin for RuntimeClass {
    fn name(&self) -> &'static str {
        "RuntimeClass"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        attrs.operation == super::Operation::Create
    }

    async fn admit(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        admit(api, attrs, object).await
    }
}

/// Applies the pod's RuntimeClass to a new pod, or refuses the pod.
pub async fn admit(
    api: &ApiServer,
    attrs: &Attributes<'_>,
    pod: &mut Value,
) -> Result<(), ApiError> {
    if attrs.resource != "pods" || attrs.subresource.is_some() || !attrs.group.is_empty() {
        return Ok(());
    }
    let class_name = pod
        .pointer("/spec/runtimeClassName")
        .and_then(Value::as_str)
        .map(str::to_string);
    let class = match &class_name {
        Some(name) => match runtime_class(api, name).await? {
            Some(class) => Some(class),
            None => {
                return Err(attrs.forbidden(
                    pod,
                    &format!("pod rejected: RuntimeClass {name:?} not found"),
                ))
            }
        },
        None => None,
    };
    let class_overhead = class
        .as_ref()
        .and_then(|c| c.pointer("/overhead/podFixed"))
        .and_then(Value::as_object)
        .cloned();
    let pod_overhead = pod
        .pointer("/spec/overhead")
        .and_then(Value::as_object)
        .filter(|o| !o.is_empty())
        .cloned();
    match (&class_overhead, &pod_overhead) {
        (Some(want), Some(have)) if !same_resources(want, have) => {
            return Err(attrs.forbidden(
                pod,
                "pod rejected: Pod's Overhead doesn't match RuntimeClass's defined Overhead",
            ))
        }
        (None, Some(_)) => return Err(attrs.forbidden(
            pod,
            "pod rejected: Pod Overhead set without corresponding RuntimeClass defined Overhead",
        )),
        _ => {}
    }
    // Errors name the pod; its spec is borrowed below.
    let named = serde_json::json!({"metadata": pod.get("metadata").cloned().unwrap_or_default()});
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return Ok(());
    };
    if let Some(overhead) = class_overhead {
        spec.insert("overhead".into(), Value::Object(overhead));
    }
    let Some(scheduling) = class.as_ref().and_then(|c| c.get("scheduling")) else {
        return Ok(());
    };
    if let Some(wanted) = scheduling.get("nodeSelector").and_then(Value::as_object) {
        let mut selector = spec
            .get("nodeSelector")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        for (key, want) in wanted {
            if let Some(have) = selector.get(key).filter(|have| *have != want) {
                let (want, have) = (want.as_str().unwrap_or(""), have.as_str().unwrap_or(""));
                let why = format!("conflict: runtimeClass.scheduling.nodeSelector[{key}] = {want}; pod.spec.nodeSelector[{key}] = {have}");
                return Err(attrs.forbidden(&named, &why));
            }
            selector.insert(key.clone(), want.clone());
        }
        spec.insert("nodeSelector".into(), Value::Object(selector));
    }
    if let Some(extra) = scheduling.get("tolerations").and_then(Value::as_array) {
        let mut tolerations = spec
            .get("tolerations")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        for t in extra {
            if !tolerations.contains(t) {
                tolerations.push(t.clone());
            }
        }
        spec.insert("tolerations".into(), Value::Array(tolerations));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn overheads_compare_as_quantities() {
        let a = json!({"cpu": "1", "memory": "128Mi"});
        let b = json!({"cpu": "1000m", "memory": "128Mi"});
        let c = json!({"cpu": "2", "memory": "128Mi"});
        let m = |v: &Value| v.as_object().unwrap().clone();
        assert!(same_resources(&m(&a), &m(&b)));
        assert!(!same_resources(&m(&a), &m(&c)));
        assert!(!same_resources(&m(&a), &m(&json!({"cpu": "1"}))));
    }
}
