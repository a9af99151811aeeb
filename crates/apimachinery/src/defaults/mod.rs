//! Defaulting of built-in kinds (upstream `pkg/apis/<group>/<version>/defaults.go` and their generated
//! `zz_generated.defaults.go`), on objects in their served JSON form.
//!
//! [`apply_defaults`] gives an object the fields upstream shows in `kubectl get -o yaml` right after a
//! create: the registered defaults, the create-time additions of upstream's default admission plugins
//! and strategies that need no lookups (Pod tolerations, priority, service account name, status
//! phase and QoS class; Namespace finalizer and phase), the v1 conversion quirks (Secret `stringData`,
//! `serviceAccount`) and the empty structs Go serializes (`resources: {}`, template
//! `metadata.creationTimestamp: null`, `status: {}`). Unknown kinds are left alone.
//!
//! Deliberately different: what needs the server's state (uids, cluster IPs, node ports, the service
//! account token volume, priority class values) is not done here; [`default_job_selector`] is the
//! Job part the server calls once it knows the uid.

use serde_json::Value;

mod apps;
mod batch;
mod core;
mod flowcontrol;
mod other;
mod pod;
mod resource;

#[cfg(test)]
mod tests;

pub use batch::default_job_selector;
pub use pod::{default_pod_spec, default_pod_template, default_pull_policy, pod_qos_class};

/// Applies upstream's defaults for `kind` of `group` (`""` for the core group) to `obj`.
pub fn apply_defaults(group: &str, kind: &str, obj: &mut Value) {
    let Some(o) = obj.as_object_mut() else { return };
    match (group, kind) {
        ("", "Pod") => pod::default_pod(o),
        ("", "PodTemplate") => pod::default_template_at(o, &["template"]),
        ("", "ReplicationController") => core::replication_controller(o),
        ("", "Service") => core::service(o),
        ("", "Namespace") => core::namespace(o),
        ("", "Secret") => core::secret(o),
        ("", "PersistentVolume") => core::persistent_volume(o),
        ("", "PersistentVolumeClaim") => core::persistent_volume_claim(o),
        ("", "Endpoints") => core::endpoints(o),
        ("", "Node") => core::node(o),
        ("", "LimitRange") => core::limit_range(o),
        ("apps", "Deployment") => apps::deployment(o),
        ("apps", "ReplicaSet") => apps::replica_set(o),
        ("apps", "StatefulSet") => apps::stateful_set(o),
        ("apps", "DaemonSet") => apps::daemon_set(o),
        ("batch", "Job") => batch::job(o),
        ("batch", "CronJob") => batch::cron_job(o),
        ("networking.k8s.io", "NetworkPolicy") => other::network_policy(o),
        ("discovery.k8s.io", "EndpointSlice") => other::endpoint_slice(o),
        ("scheduling.k8s.io", "PriorityClass") => other::priority_class(o),
        ("storage.k8s.io", "StorageClass") => other::storage_class(o),
        ("storage.k8s.io", "CSIDriver") => other::csi_driver(o),
        ("rbac.authorization.k8s.io", "RoleBinding" | "ClusterRoleBinding") => {
            other::rbac_binding(o)
        }
        ("autoscaling", "HorizontalPodAutoscaler") => other::hpa(o),
        ("admissionregistration.k8s.io", "ValidatingWebhookConfiguration") => {
            other::webhook_configuration(o, false)
        }
        ("admissionregistration.k8s.io", "MutatingWebhookConfiguration") => {
            other::webhook_configuration(o, true)
        }
        ("apiextensions.k8s.io", "CustomResourceDefinition") => other::crd(o),
        ("flowcontrol.apiserver.k8s.io", "FlowSchema") => flowcontrol::flow_schema(o),
        ("flowcontrol.apiserver.k8s.io", "PriorityLevelConfiguration") => {
            flowcontrol::priority_level(o)
        }
        ("apiregistration.k8s.io", "APIService") => other::api_service(o),
        (
            "admissionregistration.k8s.io",
            "ValidatingAdmissionPolicy" | "MutatingAdmissionPolicy",
        ) => other::admission_policy(o),
        (
            "admissionregistration.k8s.io",
            "ValidatingAdmissionPolicyBinding" | "MutatingAdmissionPolicyBinding",
        ) => other::admission_policy_binding(o),
        ("resource.k8s.io", "ResourceClaim") => resource::resource_claim(o),
        ("resource.k8s.io", "ResourceClaimTemplate") => resource::resource_claim_template(o),
        ("resource.k8s.io", "ResourceSlice") => resource::resource_slice(o),
        _ => {}
    }
}
