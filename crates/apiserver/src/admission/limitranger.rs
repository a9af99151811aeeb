//! LimitRanger admission (upstream `plugin/pkg/admission/limitranger`): the LimitRanges of a namespace
//! give new pods' containers default requests and limits (recorded in the `kubernetes.io/limit-ranger`
//! annotation), then bound containers, pods and claims by their `min`, `max` and
//! `maxLimitRequestRatio`, with upstream's messages.
//!
//! As upstream: pods are handled on create and on `pods/resize` (the only way their resources
//! change), claims on create and update, other subresources and objects already being deleted never. LimitRanges are read from the watch
//! cache (upstream: an informer plus a live lookup when it is empty).

use apimachinery::quantity::Quantity;
use apimachinery::quota::{self, ResourceList};
use apimachinery::status::ApiError;
use k8s_openapi::api::core::v1::{LimitRange, PersistentVolumeClaim, Pod};
use serde_json::{json, Map, Value};

use super::{Attributes, Operation};
use crate::ApiServer;

const ANNOTATION: &str = "kubernetes.io/limit-ranger";

/// Whether the LimitRanger looks at this request (upstream `SupportsAttributes` plus the
/// being-deleted check).
fn supports(attrs: &Attributes<'_>, old: Option<&Value>) -> bool {
    if !attrs.group.is_empty() {
        return false;
    }
    // In-place resize changes a pod's resources through `pods/resize` (upstream 1.33+): defaulted
    // and bounded as a new pod's.
    if attrs.subresource == Some("resize") {
        return attrs.resource == "pods" && attrs.operation == Operation::Update;
    }
    if attrs.subresource.is_some() {
        return false;
    }
    if !matches!(attrs.operation, Operation::Create | Operation::Update) {
        return false;
    }
    let old_deleting =
        old.is_some_and(|o| crate::objects::meta_str(o, "deletionTimestamp").is_some());
    match attrs.resource {
        "pods" => attrs.operation == Operation::Create,
        "persistentvolumeclaims" => !old_deleting,
        _ => false,
    }
}

fn ranges(api: &ApiServer, namespace: &str) -> Vec<LimitRange> {
    super::cached_in_namespace(api, "limitranges", namespace)
}

/// The plugin (upstream `LimitRanger`).
pub struct LimitRanger;

#[async_trait::async_trait]
impl super::Plugin for LimitRanger {
    fn name(&self) -> &'static str {
        "LimitRanger"
    }

    async fn admit(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        admit(api, attrs, object, old)
    }

    async fn validate(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        validate(api, attrs, object, old)
    }
}

/// Mutating phase: default requests and limits on a new pod's containers.
pub fn admit(
    api: &ApiServer,
    attrs: &Attributes<'_>,
    object: &mut Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if !supports(attrs, old) || attrs.resource != "pods" {
        return Ok(());
    }
    for lr in ranges(api, attrs.namespace) {
        default_pod_resources(&lr, object);
    }
    Ok(())
}

/// Validating phase: min, max and ratio bounds.
pub fn validate(
    api: &ApiServer,
    attrs: &Attributes<'_>,
    object: &Value,
    old: Option<&Value>,
) -> Result<(), ApiError> {
    if !supports(attrs, old) {
        return Ok(());
    }
    let ranges = ranges(api, attrs.namespace);
    if ranges.is_empty() {
        return Ok(());
    }
    let bad = |e: serde_json::Error| ApiError::internal(format!("limit ranger: {e}"));
    for lr in &ranges {
        let result = match attrs.resource {
            "pods" => {
                let pod: Pod = serde_json::from_value(object.clone()).map_err(bad)?;
                validate_pod(lr, &pod)
            }
            _ => {
                let pvc: PersistentVolumeClaim =
                    serde_json::from_value(object.clone()).map_err(bad)?;
                validate_claim(lr, &pvc)
            }
        };
        result.map_err(|why| attrs.forbidden(object, &why))?;
    }
    Ok(())
}

/// The defaults of a LimitRange's Container items: (requests, limits) (upstream
/// `defaultContainerResourceRequirements`).
pub fn container_defaults(lr: &LimitRange) -> (ResourceList, ResourceList) {
    let (mut requests, mut limits) = (ResourceList::new(), ResourceList::new());
    for item in lr
        .spec
        .as_ref()
        .map(|s| s.limits.as_slice())
        .unwrap_or_default()
    {
        if item.type_ != "Container" {
            continue;
        }
        requests.extend(parsed(item.default_request.as_ref()));
        limits.extend(parsed(item.default.as_ref()));
    }
    (requests, limits)
}

/// Fills in the defaults a container lacks; returns the annotation parts for what it set (upstream
/// `mergeContainerResources`).
fn default_container(
    container: &mut Value,
    requests: &ResourceList,
    limits: &ResourceList,
    what: &str,
) -> Vec<String> {
    let name = container
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let mut notes = Vec::new();
    let Some(c) = container.as_object_mut() else {
        return notes;
    };
    let resources = c
        .entry("resources")
        .or_insert_with(|| Value::Object(Map::new()));
    if !resources.is_object() {
        *resources = Value::Object(Map::new());
    }
    let mut set = |field: &str, defaults: &ResourceList| -> Vec<String> {
        if defaults.is_empty() {
            return Vec::new();
        }
        let list = resources
            .as_object_mut()
            .map(|r| r.entry(field).or_insert_with(|| Value::Object(Map::new())));
        let Some(Value::Object(list)) = list else {
            return Vec::new();
        };
        let mut set = Vec::new();
        for (k, v) in defaults {
            if !list.contains_key(k) {
                list.insert(k.clone(), Value::String(v.to_string()));
                set.push(k.clone());
            }
        }
        set
    };
    let set_limits = set("limits", limits);
    let set_requests = set("requests", requests);
    // Requests are noted before limits, as upstream.
    for (set, label) in [(set_requests, "request"), (set_limits, "limit")] {
        if !set.is_empty() {
            notes.push(format!("{} {label} for {what} {name}", set.join(", ")));
        }
    }
    // Empty maps are omitted, as upstream's JSON omits them.
    if let Some(r) = resources.as_object_mut() {
        r.retain(|_, v| v.as_object().is_none_or(|m| !m.is_empty()));
    }
    if resources.as_object().is_some_and(Map::is_empty) {
        c.remove("resources");
    }
    notes
}

/// Applies a LimitRange's container defaults to a pod (upstream `PodMutateLimitFunc`).
pub fn default_pod_resources(lr: &LimitRange, pod: &mut Value) {
    let (requests, limits) = container_defaults(lr);
    if requests.is_empty() && limits.is_empty() {
        return;
    }
    let mut notes = Vec::new();
    for (field, what) in [
        ("containers", "container"),
        ("initContainers", "init container"),
    ] {
        if let Some(Value::Array(list)) = pod.pointer_mut(&format!("/spec/{field}")) {
            for c in list.iter_mut() {
                notes.extend(default_container(c, &requests, &limits, what));
            }
        }
    }
    if notes.is_empty() {
        return;
    }
    let value = format!("LimitRanger plugin set: {}", notes.join("; "));
    let meta = crate::objects::meta_mut(pod);
    let annotations = meta.entry("annotations").or_insert_with(|| json!({}));
    if !annotations.is_object() {
        *annotations = json!({});
    }
    annotations[ANNOTATION] = Value::String(value);
}

/// Request, limit and bound at a common precision: thousandths unless that could overflow
/// (upstream `requestLimitEnforcedValues`).
fn comparable(
    req: Option<&Quantity>,
    lim: Option<&Quantity>,
    enforced: &Quantity,
) -> (i64, i64, i64) {
    let zero = Quantity::zero();
    let (req, lim) = (req.unwrap_or(&zero), lim.unwrap_or(&zero));
    const MAX_MILLI: i64 = i64::MAX / 1000;
    if req.value() <= MAX_MILLI && lim.value() <= MAX_MILLI && enforced.value() <= MAX_MILLI {
        (req.milli_value(), lim.milli_value(), enforced.milli_value())
    } else {
        (req.value(), lim.value(), enforced.value())
    }
}

fn min_constraint(
    kind: &str,
    res: &str,
    enforced: &Quantity,
    requests: &ResourceList,
    limits: &ResourceList,
) -> Option<String> {
    let (req, lim) = (requests.get(res), limits.get(res));
    let (r, l, e) = comparable(req, lim, enforced);
    match (req, lim) {
        (None, _) => Some(format!(
            "minimum {res} usage per {kind} is {enforced}.  No request is specified"
        )),
        (Some(q), _) if r < e => Some(format!(
            "minimum {res} usage per {kind} is {enforced}, but request is {q}"
        )),
        (_, Some(q)) if l < e => Some(format!(
            "minimum {res} usage per {kind} is {enforced}, but limit is {q}"
        )),
        _ => None,
    }
}

fn max_constraint(
    kind: &str,
    res: &str,
    enforced: &Quantity,
    requests: &ResourceList,
    limits: &ResourceList,
) -> Option<String> {
    let (req, lim) = (requests.get(res), limits.get(res));
    let (r, l, e) = comparable(req, lim, enforced);
    match (lim, req) {
        (None, _) => Some(format!(
            "maximum {res} usage per {kind} is {enforced}.  No limit is specified"
        )),
        (Some(q), _) if l > e => Some(format!(
            "maximum {res} usage per {kind} is {enforced}, but limit is {q}"
        )),
        (_, Some(q)) if r > e => Some(format!(
            "maximum {res} usage per {kind} is {enforced}, but request is {q}"
        )),
        _ => None,
    }
}

/// Upstream `maxRequestConstraint`: for claims, whose limits mean nothing.
fn max_request_constraint(
    kind: &str,
    res: &str,
    enforced: &Quantity,
    requests: &ResourceList,
) -> Option<String> {
    let req = requests.get(res);
    let (r, _, e) = comparable(req, None, enforced);
    match req {
        None => Some(format!(
            "maximum {res} usage per {kind} is {enforced}.  No request is specified"
        )),
        Some(q) if r > e => Some(format!(
            "maximum {res} usage per {kind} is {enforced}, but request is {q}"
        )),
        _ => None,
    }
}

fn ratio_constraint(
    kind: &str,
    res: &str,
    enforced: &Quantity,
    requests: &ResourceList,
    limits: &ResourceList,
) -> Option<String> {
    let (r, l, _) = comparable(requests.get(res), limits.get(res), enforced);
    if r == 0 {
        return Some(format!("{res} max limit to request ratio per {kind} is {enforced}, but no request is specified or request is 0"));
    }
    if l == 0 {
        return Some(format!("{res} max limit to request ratio per {kind} is {enforced}, but no limit is specified or limit is 0"));
    }
    let shown = l as f64 / r as f64;
    let (observed, allowed) = if enforced.value() <= i64::MAX / 1000 {
        (shown * 1000.0, enforced.milli_value() as f64)
    } else {
        (shown, enforced.value() as f64)
    };
    (observed > allowed).then(|| {
        format!("{res} max limit to request ratio per {kind} is {enforced}, but provided ratio is {shown:.6}")
    })
}

/// Upstream's error aggregate: one message alone, several (deduplicated) in brackets.
fn aggregate(errors: Vec<String>) -> Result<(), String> {
    let mut unique: Vec<String> = Vec::new();
    for e in errors {
        if !unique.contains(&e) {
            unique.push(e);
        }
    }
    match unique.len() {
        0 => Ok(()),
        1 => Err(unique.remove(0)),
        _ => Err(format!("[{}]", unique.join(", "))),
    }
}

fn parsed(
    list: Option<
        &std::collections::BTreeMap<
            String,
            k8s_openapi::apimachinery::pkg::api::resource::Quantity,
        >,
    >,
) -> ResourceList {
    quota::parse_list(list).unwrap_or_default()
}

/// Checks a pod against one LimitRange (upstream `PodValidateLimitFunc`).
pub fn validate_pod(lr: &LimitRange, pod: &Pod) -> Result<(), String> {
    let mut errors = Vec::new();
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(());
    };
    for item in lr
        .spec
        .as_ref()
        .map(|s| s.limits.as_slice())
        .unwrap_or_default()
    {
        let (min, max, ratio) = (
            parsed(item.min.as_ref()),
            parsed(item.max.as_ref()),
            parsed(item.max_limit_request_ratio.as_ref()),
        );
        let mut check = |kind: &str, requests: &ResourceList, limits: &ResourceList| {
            for (res, v) in &min {
                errors.extend(min_constraint(kind, res, v, requests, limits));
            }
            for (res, v) in &max {
                errors.extend(max_constraint(kind, res, v, requests, limits));
            }
            for (res, v) in &ratio {
                errors.extend(ratio_constraint(kind, res, v, requests, limits));
            }
        };
        match item.type_.as_str() {
            "Container" => {
                for c in spec
                    .containers
                    .iter()
                    .chain(spec.init_containers.iter().flatten())
                {
                    let requests = quota::pods::container_list(c, false)?;
                    let limits = quota::pods::container_list(c, true)?;
                    check("Container", &requests, &limits);
                }
            }
            "Pod" => {
                let (requests, limits) =
                    quota::pods::pod_requests_and_limits_without_overhead(pod)?;
                check("Pod", &requests, &limits);
            }
            _ => {}
        }
    }
    aggregate(errors)
}

/// Checks a claim's storage request against one LimitRange (upstream
/// `PersistentVolumeClaimValidateLimitFunc`).
pub fn validate_claim(lr: &LimitRange, pvc: &PersistentVolumeClaim) -> Result<(), String> {
    let requests = parsed(
        pvc.spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref()),
    );
    let mut errors = Vec::new();
    for item in lr
        .spec
        .as_ref()
        .map(|s| s.limits.as_slice())
        .unwrap_or_default()
    {
        if item.type_ != "PersistentVolumeClaim" {
            continue;
        }
        for (res, v) in &parsed(item.min.as_ref()) {
            errors.extend(min_constraint(
                "PersistentVolumeClaim",
                res,
                v,
                &requests,
                &ResourceList::new(),
            ));
        }
        for (res, v) in &parsed(item.max.as_ref()) {
            errors.extend(max_request_constraint(
                "PersistentVolumeClaim",
                res,
                v,
                &requests,
            ));
        }
    }
    aggregate(errors)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lr(limits: Value) -> LimitRange {
        serde_json::from_value(json!({"metadata": {"name": "lr"}, "spec": {"limits": limits}}))
            .expect("limit range")
    }

    #[test]
    fn defaults_fill_only_what_is_missing() {
        let range = lr(json!([{"type": "Container",
            "default": {"cpu": "500m", "memory": "256Mi"},
            "defaultRequest": {"cpu": "0.25", "memory": "128Mi"}}]));
        let mut pod = json!({"metadata": {"name": "p"}, "spec": {
            "initContainers": [{"name": "init"}],
            "containers": [
                {"name": "a", "resources": {"limits": {"cpu": "1"}, "requests": {"cpu": "1"}}},
                {"name": "b"}]}});
        default_pod_resources(&range, &mut pod);
        assert_eq!(
            pod["spec"]["containers"][0]["resources"],
            json!({"limits": {"cpu": "1", "memory": "256Mi"}, "requests": {"cpu": "1", "memory": "128Mi"}})
        );
        assert_eq!(
            pod["spec"]["containers"][1]["resources"],
            json!({"limits": {"cpu": "500m", "memory": "256Mi"}, "requests": {"cpu": "250m", "memory": "128Mi"}})
        );
        assert_eq!(
            pod["metadata"]["annotations"][ANNOTATION],
            "LimitRanger plugin set: memory request for container a; memory limit for container a; \
             cpu, memory request for container b; cpu, memory limit for container b; \
             cpu, memory request for init container init; cpu, memory limit for init container init"
        );
        // Nothing to default: no annotation, no empty maps.
        let mut full = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a",
            "resources": {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "1", "memory": "1Gi"}}}]}});
        let before = full.clone();
        default_pod_resources(&range, &mut full);
        assert_eq!(full, before);
        let mut bare = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}]}});
        default_pod_resources(
            &lr(json!([{"type": "Pod", "max": {"cpu": "1"}}])),
            &mut bare,
        );
        assert_eq!(bare["spec"]["containers"][0], json!({"name": "a"}));
    }

    #[test]
    fn bounds_with_upstream_messages() {
        let pod = |resources: Value| -> Pod {
            serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a", "resources": resources}]}}))
                .expect("pod")
        };
        let range = lr(json!([
            {"type": "Container", "min": {"cpu": "100m"}, "max": {"cpu": "1", "memory": "1Gi"}, "maxLimitRequestRatio": {"cpu": "2"}},
            {"type": "Pod", "max": {"memory": "2Gi"}}]));
        let cases = [
            (json!({"requests": {"cpu": "200m"}, "limits": {"cpu": "400m", "memory": "512Mi"}}), Ok(())),
            (json!({"requests": {"cpu": "50m"}, "limits": {"cpu": "100m", "memory": "512Mi"}}),
                Err("minimum cpu usage per Container is 100m, but request is 50m".to_string())),
            (json!({"requests": {"cpu": "200m"}, "limits": {"cpu": "2", "memory": "512Mi"}}),
                Err("[maximum cpu usage per Container is 1, but limit is 2, cpu max limit to request ratio per Container is 2, but provided ratio is 10.000000]".to_string())),
            (json!({"requests": {"cpu": "200m"}, "limits": {"cpu": "200m"}}),
                Err("[maximum memory usage per Container is 1Gi.  No limit is specified, maximum memory usage per Pod is 2Gi.  No limit is specified]".to_string())),
            (json!({"limits": {"cpu": "200m", "memory": "1Gi"}}),
                Err("[minimum cpu usage per Container is 100m.  No request is specified, cpu max limit to request ratio per Container is 2, but no request is specified or request is 0]".to_string())),
        ];
        for (resources, want) in cases {
            assert_eq!(
                validate_pod(&range, &pod(resources.clone())),
                want,
                "{resources}"
            );
        }
        let claim = |size: &str| -> PersistentVolumeClaim {
            serde_json::from_value(json!({"metadata": {"name": "c"}, "spec": {"resources": {"requests": {"storage": size}}}}))
                .expect("claim")
        };
        let storage = lr(
            json!([{"type": "PersistentVolumeClaim", "min": {"storage": "1Gi"}, "max": {"storage": "10Gi"}}]),
        );
        assert_eq!(validate_claim(&storage, &claim("5Gi")), Ok(()));
        assert_eq!(
            validate_claim(&storage, &claim("500Mi")),
            Err(
                "minimum storage usage per PersistentVolumeClaim is 1Gi, but request is 500Mi"
                    .into()
            )
        );
        assert_eq!(
            validate_claim(&storage, &claim("20Gi")),
            Err(
                "maximum storage usage per PersistentVolumeClaim is 10Gi, but request is 20Gi"
                    .into()
            )
        );
    }

    /// Upstream `SupportsAttributes`: pods on create and on `pods/resize` updates, not on plain
    /// updates or other subresources.
    #[test]
    fn pods_are_checked_on_create_and_resize() {
        let user = crate::authn::UserInfo::server().clone();
        let outcome = crate::admission::Outcome::default();
        let attrs = |subresource, operation| Attributes {
            group: "",
            version: "v1",
            kind: "Pod",
            resource: "pods",
            subresource,
            namespace: "default",
            name: "p",
            operation,
            dry_run: false,
            user: &user,
            outcome: &outcome,
        };
        assert!(supports(&attrs(None, Operation::Create), None));
        assert!(!supports(&attrs(None, Operation::Update), None));
        assert!(supports(&attrs(Some("resize"), Operation::Update), None));
        assert!(!supports(&attrs(Some("status"), Operation::Update), None));
        assert!(!supports(
            &attrs(Some("ephemeralcontainers"), Operation::Update),
            None
        ));
    }
}
