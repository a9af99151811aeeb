//! AlwaysPullImages admission (upstream `plugin/pkg/admission/alwayspullimages`, off by default):
//! every container of a new pod, and of an updated pod that names an image it did not before, gets
//! `imagePullPolicy: Always`, so that a node's cached copy of a private image is only used by pods
//! whose pull credentials are checked against the registry. The validating phase refuses such a pod
//! if a later mutating plugin set another policy.

use apimachinery::status::ApiError;
use apimachinery::validation::field::{FieldError, FieldPath};
use serde_json::Value;

use super::{Attributes, Operation};
use crate::ApiServer;

/// The container lists of a pod spec (upstream `VisitContainersWithPath`, in its order).
const CONTAINER_LISTS: [&str; 3] = ["initContainers", "containers", "ephemeralContainers"];

/// The plugin (upstream `AlwaysPullImages`): mutating and validating, on pod creates and updates.
pub struct AlwaysPullImages;

#[async_trait::async_trait]
impl super::Plugin for AlwaysPullImages {
    fn name(&self) -> &'static str {
        "AlwaysPullImages"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        matches!(attrs.operation, Operation::Create | Operation::Update)
            && attrs.group.is_empty()
            && attrs.resource == "pods"
            && attrs.subresource.is_none()
    }

    async fn admit(
        &self,
        _api: &ApiServer,
        _attrs: &Attributes<'_>,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if !is_update_without_new_images(object, old) {
            set_always(object);
        }
        Ok(())
    }

    async fn validate(
        &self,
        _api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if is_update_without_new_images(object, old) {
            return Ok(());
        }
        check_always(attrs, object)
    }
}

/// Every container of the pod, with its path (`spec.containers[0]`).
fn containers(pod: &Value) -> impl Iterator<Item = (FieldPath, &Value)> {
    CONTAINER_LISTS.into_iter().flat_map(move |list| {
        pod.pointer(&format!("/spec/{list}"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
            .map(move |(i, c)| (FieldPath::root("spec").child(list).index(i), c))
    })
}

/// Whether this is an update whose images were all in the old pod already (upstream
/// `isUpdateWithNoNewImages`): such updates are left alone.
pub fn is_update_without_new_images(pod: &Value, old: Option<&Value>) -> bool {
    let Some(old) = old else {
        return false;
    };
    let old_images: Vec<&str> = containers(old)
        .filter_map(|(_, c)| c["image"].as_str())
        .collect();
    containers(pod).all(|(_, c)| old_images.contains(&c["image"].as_str().unwrap_or("")))
}

/// Sets `imagePullPolicy: Always` on every container.
pub fn set_always(pod: &mut Value) {
    for list in CONTAINER_LISTS {
        let Some(items) = pod
            .pointer_mut(&format!("/spec/{list}"))
            .and_then(Value::as_array_mut)
        else {
            continue;
        };
        for c in items.iter_mut().filter_map(Value::as_object_mut) {
            c.insert("imagePullPolicy".into(), "Always".into());
        }
    }
}

/// Refuses a pod with a container whose policy is not Always: one 403 naming every such field, as
/// upstream's aggregate of per-container `NotSupported` errors reads.
pub fn check_always(attrs: &Attributes<'_>, pod: &Value) -> Result<(), ApiError> {
    let refused: Vec<ApiError> = containers(pod)
        .filter_map(|(path, c)| {
            let policy = c["imagePullPolicy"].as_str().unwrap_or("");
            (policy != "Always").then(|| {
                let e =
                    FieldError::not_supported(&path.child("imagePullPolicy"), policy, &["Always"]);
                attrs.forbidden(pod, &e.to_string())
            })
        })
        .collect();
    let mut refused = refused.into_iter();
    let Some(mut first) = refused.next() else {
        return Ok(());
    };
    let rest: Vec<String> = refused.map(|e| e.message).collect();
    if !rest.is_empty() {
        // Upstream's aggregate error prints its members in brackets.
        first.message = format!("[{}, {}]", first.message, rest.join(", "));
    }
    Err(first)
}

#[cfg(test)]
mod tests {
    use super::super::Outcome;
    use super::*;
    use crate::authn::UserInfo;
    use serde_json::json;

    fn pod(images: &[&str]) -> Value {
        let containers: Vec<Value> = images
            .iter()
            .map(|i| json!({"name": i.replace([':', '.'], "-"), "image": i, "imagePullPolicy": "IfNotPresent"}))
            .collect();
        json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "init", "image": "busybox", "imagePullPolicy": "Never"}],
            "containers": containers}})
    }

    fn with_attrs<T>(f: impl FnOnce(&Attributes<'_>) -> T) -> T {
        let user = UserInfo::server().clone();
        let outcome = Outcome::default();
        f(&Attributes {
            group: "",
            version: "v1",
            kind: "Pod",
            resource: "pods",
            subresource: None,
            namespace: "default",
            name: "p",
            operation: Operation::Create,
            dry_run: false,
            user: &user,
            outcome: &outcome,
        })
    }

    #[test]
    fn every_container_is_set_to_always() {
        let mut p = pod(&["nginx:1.25", "redis"]);
        p["spec"]["ephemeralContainers"] = json!([{"name": "debug", "image": "busybox"}]);
        set_always(&mut p);
        for list in CONTAINER_LISTS {
            for c in p["spec"][list].as_array().unwrap() {
                assert_eq!(c["imagePullPolicy"], "Always", "{c}");
            }
        }
        assert!(with_attrs(|a| check_always(a, &p)).is_ok());
    }

    #[test]
    fn updates_without_new_images_are_left_alone() {
        let old = pod(&["nginx:1.25"]);
        assert!(is_update_without_new_images(
            &pod(&["nginx:1.25"]),
            Some(&old)
        ));
        assert!(!is_update_without_new_images(
            &pod(&["nginx:1.26"]),
            Some(&old)
        ));
        assert!(!is_update_without_new_images(&old, None), "creates always");
    }

    #[test]
    fn other_policies_are_refused_with_upstreams_text() {
        let p = pod(&["nginx"]);
        let err = with_attrs(|a| check_always(a, &p)).unwrap_err();
        assert_eq!(err.code, 403);
        assert_eq!(
            err.message,
            "[pods \"p\" is forbidden: spec.initContainers[0].imagePullPolicy: Unsupported value: \"Never\": supported values: \"Always\", \
             pods \"p\" is forbidden: spec.containers[0].imagePullPolicy: Unsupported value: \"IfNotPresent\": supported values: \"Always\"]"
        );
        let mut one = pod(&["nginx"]);
        one["spec"]["initContainers"][0]["imagePullPolicy"] = json!("Always");
        let err = with_attrs(|a| check_always(a, &one)).unwrap_err();
        assert_eq!(
            err.message,
            "pods \"p\" is forbidden: spec.containers[0].imagePullPolicy: Unsupported value: \"IfNotPresent\": supported values: \"Always\""
        );
    }
}
