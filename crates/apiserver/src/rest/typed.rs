//! Decoding built-in kinds into their typed form (upstream decodes every request into Go structs): a
//! value of the wrong type is a 400, and fields the type does not have are unknown fields, rejected
//! with `fieldValidation=Strict` (kubectl's default), reported as warnings with `Warn` (the server's
//! default) and dropped in every case, so what is stored is exactly what the type holds.

use apimachinery::status::ApiError;
use k8s_openapi::api::{
    admissionregistration::v1 as admission, apps::v1 as apps, autoscaling::v1 as autoscaling_v1,
    autoscaling::v2 as autoscaling_v2, batch::v1 as batch, certificates::v1 as certificates,
    coordination::v1 as coordination, core::v1 as core, discovery::v1 as discovery,
    events::v1 as events, flowcontrol::v1 as flowcontrol, networking::v1 as networking,
    node::v1 as node, policy::v1 as policy, rbac::v1 as rbac, resource::v1 as resource,
    scheduling::v1 as scheduling, storage::v1 as storage_api,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiextensions;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1 as apiregistration;
use serde_json::Value;
use std::collections::HashSet;
use std::str::FromStr;

use super::decode::{finish, Strict};
use super::strict::{first_ordinals, under_any, Dup, MAX_ERRORS};

/// What typed decoding found.
pub struct Decoded {
    /// The object as its type holds it (unknown fields dropped).
    pub value: Value,
    /// Paths of the unknown fields, e.g. `spec.foo`.
    pub unknown: Vec<String>,
}

fn roundtrip<T: serde::de::DeserializeOwned + serde::Serialize>(
    obj: &Value,
    kind: &str,
    version: &str,
) -> Result<Decoded, ApiError> {
    // Deserializing from `&Value` avoids copying the whole object first.
    let (typed, zero_times): (T, Vec<String>) = match T::deserialize(obj) {
        Ok(typed) => (typed, Vec::new()),
        Err(e) => {
            // Go decodes `null` into a required time field as the zero time (and encodes that as
            // `null` again, e.g. a metav1.Condition sent without lastTransitionTime); k8s-openapi's
            // required `Time` cannot hold it. Decode with a stand-in, and put the nulls back.
            let mut paths = Vec::new();
            null_times(obj, String::new(), &mut paths);
            let retried = (!paths.is_empty())
                .then(|| {
                    let mut filled = obj.clone();
                    for p in &paths {
                        if let Some(v) = filled.pointer_mut(p) {
                            *v = Value::String(ZERO_TIME_STAND_IN.into());
                        }
                    }
                    T::deserialize(&filled).ok()
                })
                .flatten();
            match retried {
                Some(typed) => (typed, paths),
                None => {
                    return Err(ApiError::bad_request(format!(
                        "{kind} in version {version:?} cannot be handled as a {kind}: {e}"
                    )))
                }
            }
        }
    };
    let mut value = serde_json::to_value(&typed).map_err(ApiError::internal)?;
    for p in &zero_times {
        if let Some(v) = value.pointer_mut(p) {
            if v.as_str().is_some_and(is_stand_in) {
                *v = Value::Null;
            }
        }
    }
    let mut unknown = Vec::new();
    diff(obj, &value, "", &mut unknown);
    Ok(Decoded { value, unknown })
}

/// What a `null` time is decoded as before it becomes `null` again (the Unix epoch, which is how
/// the typed form writes it back).
const ZERO_TIME_STAND_IN: &str = "1970-01-01T00:00:00Z";

fn is_stand_in(s: &str) -> bool {
    k8s_openapi::jiff::Timestamp::from_str(s)
        .is_ok_and(|t| t.as_second() == 0 && t.subsec_nanosecond() == 0)
}

/// JSON pointers of the `null` members named like Go's time fields (`*Time`, `*Timestamp`).
fn null_times(v: &Value, at: String, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, child) in m {
                let p = format!("{at}/{}", k.replace('~', "~0").replace('/', "~1"));
                if child.is_null() && (k.ends_with("Time") || k.ends_with("Timestamp")) {
                    out.push(p);
                } else {
                    null_times(child, p, out);
                }
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                null_times(child, format!("{at}/{i}"), out);
            }
        }
        _ => {}
    }
}

/// Fields present (and not null) in `input` but absent from `typed`, in document order.
fn diff(input: &Value, typed: &Value, path: &str, out: &mut Vec<String>) {
    diff_ordered(input, typed, path, false, out)
}

/// [`diff`]; `sorted`: keys in sorted order at every level, as Go decodes JSON re-encoded from a
/// map (YAML bodies, patched objects).
fn diff_ordered(input: &Value, typed: &Value, path: &str, sorted: bool, out: &mut Vec<String>) {
    match (input, typed) {
        (Value::Object(a), Value::Object(b)) => {
            let mut keys: Vec<&String> = a.keys().collect();
            if sorted {
                keys.sort();
            }
            for k in keys {
                let v = &a[k.as_str()];
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match b.get(k.as_str()) {
                    Some(tv) => diff_ordered(v, tv, &p, sorted, out),
                    None if !v.is_null() => out.push(p),
                    None => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (v, tv)) in a.iter().zip(b).enumerate() {
                diff_ordered(v, tv, &format!("{path}[{i}]"), sorted, out);
            }
        }
        _ => {}
    }
}

/// The strict errors of one Go decoding pass over a typed object: unknown fields and duplicates in
/// document order (upstream reports a key that is both unknown and repeated as unknown only, and
/// nothing below an unknown field), at most `MAX_ERRORS`.
fn strict_errors(unknown: Vec<String>, strict: &Strict) -> Vec<String> {
    let unknown_set: HashSet<String> = unknown.iter().cloned().collect();
    let dups: Vec<&Dup> = strict
        .dups
        .iter()
        .filter(|d| !under_any(&d.path, &unknown_set))
        .collect();
    let unknown_msgs = unknown.iter().map(|p| format!("unknown field {p:?}"));
    let dup_msgs = dups.iter().map(|d| format!("duplicate field {:?}", d.path));
    let mut events: Vec<(usize, String)> = match &strict.json {
        Some(body) if !unknown.is_empty() && !dups.is_empty() => {
            let ords = first_ordinals(body, true, &unknown_set);
            let mut events: Vec<(usize, String)> = unknown
                .iter()
                .zip(unknown_msgs)
                .map(|(p, m)| (ords.get(p).copied().unwrap_or(usize::MAX), m))
                .chain(dups.iter().map(|d| d.ordinal).zip(dup_msgs))
                .collect();
            // Stable: unknown fields without an ordinal keep their order, last.
            events.sort_by_key(|(o, _)| *o);
            events
        }
        _ => unknown_msgs.chain(dup_msgs).enumerate().collect(),
    };
    events.truncate(MAX_ERRORS);
    events.into_iter().map(|(_, m)| m).collect()
}

macro_rules! dispatch {
    ($group:expr, $version:expr, $kind:expr, $obj:expr; $($g:literal $v:literal $k:literal => $t:ty),* $(,)?) => {
        match ($group, $version, $kind) {
            $( ($g, $v, $k) => Some(roundtrip::<$t>($obj, $k, $v)), )*
            _ => None,
        }
    };
}

/// Decodes a built-in kind; `None` for kinds without a typed form (custom resources).
pub fn decode(
    group: &str,
    version: &str,
    kind: &str,
    obj: &Value,
) -> Option<Result<Decoded, ApiError>> {
    dispatch!(group, version, kind, obj;
        "" "v1" "Binding" => core::Binding,
        "" "v1" "ConfigMap" => core::ConfigMap,
        "" "v1" "Endpoints" => core::Endpoints,
        "" "v1" "Event" => core::Event,
        "" "v1" "LimitRange" => core::LimitRange,
        "" "v1" "Namespace" => core::Namespace,
        "" "v1" "Node" => core::Node,
        "" "v1" "PersistentVolumeClaim" => core::PersistentVolumeClaim,
        "" "v1" "PersistentVolume" => core::PersistentVolume,
        "" "v1" "Pod" => core::Pod,
        "" "v1" "PodTemplate" => core::PodTemplate,
        "" "v1" "ComponentStatus" => core::ComponentStatus,
        "" "v1" "ReplicationController" => core::ReplicationController,
        "" "v1" "ResourceQuota" => core::ResourceQuota,
        "" "v1" "Secret" => core::Secret,
        "" "v1" "ServiceAccount" => core::ServiceAccount,
        "" "v1" "Service" => core::Service,
        "apps" "v1" "ControllerRevision" => apps::ControllerRevision,
        "apps" "v1" "DaemonSet" => apps::DaemonSet,
        "apps" "v1" "Deployment" => apps::Deployment,
        "apps" "v1" "ReplicaSet" => apps::ReplicaSet,
        "apps" "v1" "StatefulSet" => apps::StatefulSet,
        "batch" "v1" "CronJob" => batch::CronJob,
        "batch" "v1" "Job" => batch::Job,
        "autoscaling" "v1" "HorizontalPodAutoscaler" => autoscaling_v1::HorizontalPodAutoscaler,
        "autoscaling" "v1" "Scale" => autoscaling_v1::Scale,
        "autoscaling" "v2" "HorizontalPodAutoscaler" => autoscaling_v2::HorizontalPodAutoscaler,
        "coordination.k8s.io" "v1" "Lease" => coordination::Lease,
        "discovery.k8s.io" "v1" "EndpointSlice" => discovery::EndpointSlice,
        "events.k8s.io" "v1" "Event" => events::Event,
        "policy" "v1" "PodDisruptionBudget" => policy::PodDisruptionBudget,
        "policy" "v1" "Eviction" => policy::Eviction,
        "networking.k8s.io" "v1" "IngressClass" => networking::IngressClass,
        "networking.k8s.io" "v1" "Ingress" => networking::Ingress,
        "networking.k8s.io" "v1" "NetworkPolicy" => networking::NetworkPolicy,
        "networking.k8s.io" "v1" "IPAddress" => networking::IPAddress,
        "networking.k8s.io" "v1" "ServiceCIDR" => networking::ServiceCIDR,
        "resource.k8s.io" "v1" "DeviceClass" => resource::DeviceClass,
        "resource.k8s.io" "v1" "ResourceClaim" => resource::ResourceClaim,
        "resource.k8s.io" "v1" "ResourceClaimTemplate" => resource::ResourceClaimTemplate,
        "resource.k8s.io" "v1" "ResourceSlice" => resource::ResourceSlice,
        "flowcontrol.apiserver.k8s.io" "v1" "FlowSchema" => flowcontrol::FlowSchema,
        "flowcontrol.apiserver.k8s.io" "v1" "PriorityLevelConfiguration" => flowcontrol::PriorityLevelConfiguration,
        "apiregistration.k8s.io" "v1" "APIService" => apiregistration::APIService,
        "rbac.authorization.k8s.io" "v1" "ClusterRoleBinding" => rbac::ClusterRoleBinding,
        "rbac.authorization.k8s.io" "v1" "ClusterRole" => rbac::ClusterRole,
        "rbac.authorization.k8s.io" "v1" "RoleBinding" => rbac::RoleBinding,
        "rbac.authorization.k8s.io" "v1" "Role" => rbac::Role,
        "scheduling.k8s.io" "v1" "PriorityClass" => scheduling::PriorityClass,
        "storage.k8s.io" "v1" "CSIDriver" => storage_api::CSIDriver,
        "storage.k8s.io" "v1" "CSINode" => storage_api::CSINode,
        "storage.k8s.io" "v1" "CSIStorageCapacity" => storage_api::CSIStorageCapacity,
        "storage.k8s.io" "v1" "StorageClass" => storage_api::StorageClass,
        "storage.k8s.io" "v1" "VolumeAttachment" => storage_api::VolumeAttachment,
        "storage.k8s.io" "v1" "VolumeAttributesClass" => storage_api::VolumeAttributesClass,
        "node.k8s.io" "v1" "RuntimeClass" => node::RuntimeClass,
        "certificates.k8s.io" "v1" "CertificateSigningRequest" => certificates::CertificateSigningRequest,
        "admissionregistration.k8s.io" "v1" "MutatingWebhookConfiguration" => admission::MutatingWebhookConfiguration,
        "admissionregistration.k8s.io" "v1" "ValidatingWebhookConfiguration" => admission::ValidatingWebhookConfiguration,
        "admissionregistration.k8s.io" "v1" "ValidatingAdmissionPolicy" => admission::ValidatingAdmissionPolicy,
        "admissionregistration.k8s.io" "v1" "ValidatingAdmissionPolicyBinding" => admission::ValidatingAdmissionPolicyBinding,
        "admissionregistration.k8s.io" "v1" "MutatingAdmissionPolicy" => admission::MutatingAdmissionPolicy,
        "admissionregistration.k8s.io" "v1" "MutatingAdmissionPolicyBinding" => admission::MutatingAdmissionPolicyBinding,
        "apiextensions.k8s.io" "v1" "CustomResourceDefinition" => apiextensions::CustomResourceDefinition,
    )
}

/// Applies `fieldValidation` (Strict, Warn — the default — or Ignore) to a decoded body: the typed
/// value replaces `obj`; returns the warnings to send. `strict` is what parsing the body found
/// (repeated keys, a YAML error, a patch's own errors), reported with the unknown fields as
/// upstream's strict decoder does: Strict is a 400 (create, update) or 422 (patch).
pub fn check_fields(
    group: &str,
    version: &str,
    kind: &str,
    obj: &mut Value,
    field_validation: Option<&str>,
    strict: &Strict,
) -> Result<Vec<String>, ApiError> {
    let mode = field_validation.unwrap_or("Warn");
    if !matches!(mode, "Strict" | "Warn" | "Ignore") {
        return Err(ApiError::bad_request(format!(
            "fieldValidation: Unsupported value: {mode:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
        )));
    }
    let Some(decoded) = decode(group, version, kind, obj) else {
        let errors = strict_errors(Vec::new(), strict);
        return finish(errors, field_validation, strict, kind, version, obj);
    };
    let decoded = decoded?;
    let unknown = if strict.sorted {
        let mut u = Vec::new();
        diff_ordered(obj, &decoded.value, "", true, &mut u);
        u
    } else {
        decoded.unknown
    };
    let errors = strict_errors(unknown, strict);
    let warnings = finish(errors, field_validation, strict, kind, version, obj)?;
    *obj = decoded.value;
    Ok(warnings)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_found_and_dropped() {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "bogus": 1}, "data": {"k": "v"}, "extra": true});
        let err = check_fields(
            "",
            "v1",
            "ConfigMap",
            &mut cm.clone(),
            Some("Strict"),
            &Strict::default(),
        )
        .unwrap_err();
        assert_eq!(err.code, 400);
        assert_eq!(
            err.message,
            "ConfigMap in version \"v1\" cannot be handled as a ConfigMap: strict decoding error: unknown field \"metadata.bogus\", unknown field \"extra\""
        );
        let warnings =
            check_fields("", "v1", "ConfigMap", &mut cm, None, &Strict::default()).unwrap();
        assert_eq!(warnings.len(), 2);
        assert!(cm.get("extra").is_none());
        assert_eq!(cm["data"]["k"], "v");
        let mut bad = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": "three"}});
        assert_eq!(
            check_fields(
                "apps",
                "v1",
                "Deployment",
                &mut bad,
                None,
                &Strict::default()
            )
            .unwrap_err()
            .code,
            400
        );
        let mut custom = json!({"anything": 1});
        assert!(check_fields(
            "example.com",
            "v1",
            "Widget",
            &mut custom,
            Some("Strict"),
            &Strict::default()
        )
        .unwrap()
        .is_empty());
    }

    fn deployment(spec: &str) -> String {
        format!(
            r#"{{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {{"name": "d", "labels": {{"app": "nginx"}}}},
            "spec": {{{spec}, "selector": {{"matchLabels": {{"app": "nginx"}}}},
            "template": {{"metadata": {{"labels": {{"app": "nginx"}}}}, "spec": {{"containers": [{{"name": "nginx", "image": "nginx"}}]}}}}}}}}"#
        )
    }

    fn check(body: &str, ct: &str, mode: Option<&str>) -> (Result<Vec<String>, ApiError>, Value) {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::CONTENT_TYPE, ct.parse().unwrap());
        let (mut v, strict) = super::super::decode::parse_request(
            &h,
            &bytes::Bytes::from(body.to_string()),
            mode,
            true,
        )
        .unwrap();
        let r = check_fields("apps", "v1", "Deployment", &mut v, mode, &strict);
        (r, v)
    }

    #[test]
    fn duplicate_and_unknown_fields_in_document_order() {
        // The conformance test's body: an unknown field, then `replicas` twice.
        let body = deployment(r#""unknownField": "foo", "replicas": 2, "replicas": 3"#);
        let err = check(&body, "application/json", Some("Strict"))
            .0
            .unwrap_err();
        assert_eq!(err.code, 400);
        assert_eq!(
            err.message,
            r#"Deployment in version "v1" cannot be handled as a Deployment: strict decoding error: unknown field "spec.unknownField", duplicate field "spec.replicas""#
        );
        let (warnings, v) = check(&body, "application/json", None);
        assert_eq!(
            warnings.unwrap(),
            [
                r#"unknown field "spec.unknownField""#,
                r#"duplicate field "spec.replicas""#
            ]
        );
        assert_eq!(v["spec"]["replicas"], 3);
        let (warnings, v) = check(&body, "application/json", Some("Ignore"));
        assert!(warnings.unwrap().is_empty());
        assert_eq!(v["spec"]["replicas"], 3);
        // A duplicate before an unknown field comes first; one both unknown and repeated is only
        // unknown, and nothing below an unknown field is reported.
        let body = deployment(
            r#""paused": true, "paused": false, "unknownDupe": {"a": 1, "a": 2}, "unknownDupe": 1"#,
        );
        let (warnings, v) = check(&body, "application/json", Some("Warn"));
        assert_eq!(
            warnings.unwrap(),
            [
                r#"duplicate field "spec.paused""#,
                r#"unknown field "spec.unknownDupe""#
            ]
        );
        assert_eq!(v["spec"]["paused"], false);
        // Repeated objects merge as Go decodes them into the same struct.
        let body = r#"{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "metadata": {"labels": {"a": "b"}}}"#;
        let (warnings, v) = check(body, "application/json", None);
        assert_eq!(warnings.unwrap(), [r#"duplicate field "metadata""#]);
        assert_eq!(
            v["metadata"],
            serde_json::json!({"name": "d", "labels": {"a": "b"}})
        );
    }

    #[test]
    fn yaml_duplicates_come_first_then_sorted_unknown_fields() {
        let body = "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: d\nspec:\n  unknown1: val1\n  replicas: 2\n  replicas: 3\n  selector:\n    matchLabels: {app: nginx}\n  template:\n    metadata:\n      labels: {app: nginx}\n    spec:\n      containers:\n      - name: nginx\n        image: nginx\n        unknownNested: x\n";
        let err = check(body, "application/yaml", Some("Strict"))
            .0
            .unwrap_err();
        assert_eq!(
            err.message,
            "Deployment in version \"v1\" cannot be handled as a Deployment: strict decoding error: yaml: unmarshal errors:\n  line 8: key \"replicas\" already set in map, unknown field \"spec.template.spec.containers[0].unknownNested\", unknown field \"spec.unknown1\""
        );
        let (warnings, v) = check(body, "application/yaml", None);
        assert_eq!(
            warnings.unwrap(),
            [
                r#"line 8: key "replicas" already set in map"#,
                r#"unknown field "spec.template.spec.containers[0].unknownNested""#,
                r#"unknown field "spec.unknown1""#
            ]
        );
        assert_eq!(v["spec"]["replicas"], 3);
    }
}

#[cfg(test)]
mod zero_time_tests {
    use super::*;
    use serde_json::json;

    /// client-go sends a metav1.Condition without lastTransitionTime as `null` (Go's zero time),
    /// which upstream decodes and stores as such ("should complete a service status lifecycle").
    #[test]
    fn null_required_times_decode_as_go_zero_times() {
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "status": {"conditions": [{"type": "StatusUpdate", "status": "True", "reason": "E2E",
                "message": "m", "lastTransitionTime": null}]}});
        let decoded = decode("", "v1", "Service", &svc).unwrap().unwrap();
        let c = &decoded.value["status"]["conditions"][0];
        assert!(c["lastTransitionTime"].is_null(), "{c}");
        assert_eq!(c["reason"], "E2E");
        assert!(decoded.unknown.is_empty());
        // Anything else that does not fit its type is still a 400.
        let bad = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"},
            "status": {"conditions": [{"type": 1, "lastTransitionTime": null}]}});
        assert_eq!(
            decode("", "v1", "Service", &bad)
                .unwrap()
                .err()
                .unwrap()
                .code,
            400
        );
    }
}
