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
    let typed: T = T::deserialize(obj).map_err(|e| {
        ApiError::bad_request(format!(
            "{kind} in version {version:?} cannot be handled as a {kind}: {e}"
        ))
    })?;
    let value = serde_json::to_value(&typed).map_err(ApiError::internal)?;
    let mut unknown = Vec::new();
    diff(obj, &value, "", &mut unknown);
    Ok(Decoded { value, unknown })
}

/// Fields present (and not null) in `input` but absent from `typed`.
fn diff(input: &Value, typed: &Value, path: &str, out: &mut Vec<String>) {
    match (input, typed) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let p = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                match b.get(k) {
                    Some(tv) => diff(v, tv, &p, out),
                    None if !v.is_null() => out.push(p),
                    None => {}
                }
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (v, tv)) in a.iter().zip(b).enumerate() {
                diff(v, tv, &format!("{path}[{i}]"), out);
            }
        }
        _ => {}
    }
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
/// value replaces `obj`; returns the warnings to send.
pub fn check_fields(
    group: &str,
    version: &str,
    kind: &str,
    obj: &mut Value,
    field_validation: Option<&str>,
) -> Result<Vec<String>, ApiError> {
    let mode = field_validation.unwrap_or("Warn");
    if !matches!(mode, "Strict" | "Warn" | "Ignore") {
        return Err(ApiError::bad_request(format!(
            "fieldValidation: Unsupported value: {mode:?}: supported values: \"Ignore\", \"Strict\", \"Warn\""
        )));
    }
    let Some(decoded) = decode(group, version, kind, obj) else {
        return Ok(Vec::new());
    };
    let decoded = decoded?;
    let messages: Vec<String> = decoded
        .unknown
        .iter()
        .map(|p| format!("unknown field {p:?}"))
        .collect();
    if mode == "Strict" && !messages.is_empty() {
        return Err(ApiError::bad_request(format!(
            "strict decoding error: {}",
            messages.join(", ")
        )));
    }
    *obj = decoded.value;
    Ok(if mode == "Warn" { messages } else { Vec::new() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unknown_fields_are_found_and_dropped() {
        let mut cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "bogus": 1}, "data": {"k": "v"}, "extra": true});
        let err = check_fields("", "v1", "ConfigMap", &mut cm.clone(), Some("Strict")).unwrap_err();
        assert_eq!(err.code, 400);
        assert_eq!(
            err.message,
            "strict decoding error: unknown field \"metadata.bogus\", unknown field \"extra\""
        );
        let warnings = check_fields("", "v1", "ConfigMap", &mut cm, None).unwrap();
        assert_eq!(warnings.len(), 2);
        assert!(cm.get("extra").is_none());
        assert_eq!(cm["data"]["k"], "v");
        let mut bad = json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": "three"}});
        assert_eq!(
            check_fields("apps", "v1", "Deployment", &mut bad, None)
                .unwrap_err()
                .code,
            400
        );
        let mut custom = json!({"anything": 1});
        assert!(
            check_fields("example.com", "v1", "Widget", &mut custom, Some("Strict"))
                .unwrap()
                .is_empty()
        );
    }
}
