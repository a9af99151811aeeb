//! Patch metadata of built-in kinds (upstream: the `patchStrategy` / `patchMergeKey` struct tags of
//! `k8s.io/api` types, read by `k8s.io/apimachinery/pkg/util/strategicpatch` through reflection).
//!
//! Upstream walks Go types; here a static table names, per type, only the fields whose patch behaviour
//! differs from the default (maps merge recursively, lists are replaced) or that lead to such fields. A
//! field missing from the table gets the default and no metadata below it. The tags were checked against
//! `k8s.io/api` (core/v1, apps/v1, batch/v1, policy/v1) `types.go`; `retainKeys` is recorded for
//! completeness but, as upstream, applying a patch obeys the `$retainKeys` directive in the patch itself.

/// The root type of the object a strategic merge patch applies to. [`PatchSchema::none`] carries no
/// metadata: maps merge, lists are replaced, directives still apply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PatchSchema {
    ty: Option<&'static str>,
}

impl PatchSchema {
    /// The schema without metadata (unknown kinds).
    pub fn none() -> PatchSchema {
        PatchSchema { ty: None }
    }

    /// The upstream Go type this schema describes (`Pod`, `PodSpec`, ...), if any.
    pub fn type_name(&self) -> Option<&'static str> {
        self.ty
    }

    fn of(ty: &'static str) -> PatchSchema {
        PatchSchema { ty: Some(ty) }
    }
}

/// How a list (or map) field is patched: upstream's `patchStrategy` tag minus `retainKeys`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    /// No tag: maps merge recursively, lists are replaced.
    Default,
    /// `merge`: lists merge (by `patchMergeKey` for lists of objects, as a union for primitives).
    Merge,
    /// `replace`: the field is replaced as a whole.
    Replace,
}

/// What the table says about one field.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FieldMeta {
    /// The schema of the field's value (of its elements, for a list).
    pub schema: PatchSchema,
    pub strategy: Strategy,
    /// The `retainKeys` strategy (as for `volumes` and `Deployment.spec.strategy`).
    pub retain_keys: bool,
    /// `patchMergeKey`, empty when none.
    pub merge_key: &'static str,
}

struct Field {
    name: &'static str,
    ty: Option<&'static str>,
    tag: &'static str,
    key: &'static str,
}

/// A field leading to a type with metadata.
const fn t(name: &'static str, ty: &'static str) -> Field {
    Field {
        name,
        ty: Some(ty),
        tag: "",
        key: "",
    }
}

/// A list of objects with a patch strategy and merge key.
const fn m(name: &'static str, ty: &'static str, tag: &'static str, key: &'static str) -> Field {
    Field {
        name,
        ty: Some(ty),
        tag,
        key,
    }
}

/// A field with a patch strategy but no metadata below it (lists of primitives, `retainKeys` structs).
const fn p(name: &'static str, tag: &'static str) -> Field {
    Field {
        name,
        ty: None,
        tag,
        key: "",
    }
}

const CONTAINER: &[Field] = &[
    m("ports", "ContainerPort", "merge", "containerPort"),
    m("env", "EnvVar", "merge", "name"),
    m("volumeMounts", "VolumeMount", "merge", "mountPath"),
    m("volumeDevices", "VolumeDevice", "merge", "devicePath"),
    // resizePolicy is `+listType=atomic` without a patch strategy: replaced.
];

const CONDITIONS: &[Field] = &[m("conditions", "Condition", "merge", "type")];
const TEMPLATE: &[Field] = &[t("template", "PodTemplateSpec")];
const OBJECT: &[Field] = &[t("metadata", "ObjectMeta")];

fn fields_of(ty: &str) -> &'static [Field] {
    match ty {
        "ObjectMeta" => {
            const {
                &[
                    m("ownerReferences", "OwnerReference", "merge", "uid"),
                    p("finalizers", "merge"),
                ]
            }
        }
        "Object" => OBJECT,
        // core/v1
        "Pod" => {
            const {
                &[
                    t("metadata", "ObjectMeta"),
                    t("spec", "PodSpec"),
                    t("status", "PodStatus"),
                ]
            }
        }
        "PodSpec" => {
            const {
                &[
                    m("volumes", "Volume", "merge,retainKeys", "name"),
                    m("initContainers", "Container", "merge", "name"),
                    m("containers", "Container", "merge", "name"),
                    m("ephemeralContainers", "EphemeralContainer", "merge", "name"),
                    m("imagePullSecrets", "LocalObjectReference", "merge", "name"),
                    m("hostAliases", "HostAlias", "merge", "ip"),
                    m(
                        "topologySpreadConstraints",
                        "TopologySpreadConstraint",
                        "merge",
                        "topologyKey",
                    ),
                    m("schedulingGates", "PodSchedulingGate", "merge", "name"),
                    m(
                        "resourceClaims",
                        "PodResourceClaim",
                        "merge,retainKeys",
                        "name",
                    ),
                    // tolerations, readinessGates: no patch strategy, replaced.
                ]
            }
        }
        "Container" | "EphemeralContainer" => CONTAINER,
        "PodStatus" => {
            const {
                &[
                    m("conditions", "PodCondition", "merge", "type"),
                    m("podIPs", "PodIP", "merge", "ip"),
                    m("hostIPs", "HostIP", "merge", "ip"),
                    m(
                        "resourceClaimStatuses",
                        "PodResourceClaimStatus",
                        "merge,retainKeys",
                        "name",
                    ),
                ]
            }
        }
        "PodTemplateSpec" => const { &[t("metadata", "ObjectMeta"), t("spec", "PodSpec")] },
        "PodTemplate" => {
            const {
                &[
                    t("metadata", "ObjectMeta"),
                    t("template", "PodTemplateSpec"),
                ]
            }
        }
        "ReplicationController" => {
            const {
                &[
                    t("metadata", "ObjectMeta"),
                    t("spec", "ReplicationControllerSpec"),
                    t("status", "ReplicationControllerStatus"),
                ]
            }
        }
        "Service" => {
            const {
                &[
                    t("metadata", "ObjectMeta"),
                    t("spec", "ServiceSpec"),
                    t("status", "ServiceStatus"),
                ]
            }
        }
        "ServiceSpec" => const { &[m("ports", "ServicePort", "merge", "port")] },
        "Node" => {
            const {
                &[
                    t("metadata", "ObjectMeta"),
                    t("spec", "NodeSpec"),
                    t("status", "NodeStatus"),
                ]
            }
        }
        "NodeSpec" => const { &[p("podCIDRs", "merge")] },
        "NodeStatus" => {
            const {
                &[
                    m("conditions", "NodeCondition", "merge", "type"),
                    m("addresses", "NodeAddress", "merge", "type"),
                ]
            }
        }
        "Namespace" => const { &[t("metadata", "ObjectMeta"), t("status", "NamespaceStatus")] },
        "PersistentVolumeClaim" => {
            const {
                &[
                    t("metadata", "ObjectMeta"),
                    t("status", "PersistentVolumeClaimStatus"),
                ]
            }
        }
        "ServiceAccount" => {
            const {
                &[
                    t("metadata", "ObjectMeta"),
                    m("secrets", "ObjectReference", "merge", "name"),
                ]
            }
        }
        // apps/v1
        "Deployment" => {
            const {
                &[
                    t("metadata", "ObjectMeta"),
                    t("spec", "DeploymentSpec"),
                    t("status", "DeploymentStatus"),
                ]
            }
        }
        "DeploymentSpec" => {
            const {
                &[
                    t("template", "PodTemplateSpec"),
                    p("strategy", "retainKeys"),
                ]
            }
        }
        "ReplicaSet" => {
            const {
                &[
                    t("metadata", "ObjectMeta"),
                    t("spec", "ReplicaSetSpec"),
                    t("status", "ReplicaSetStatus"),
                ]
            }
        }
        "StatefulSet" => {
            const {
                &[
                    t("metadata", "ObjectMeta"),
                    t("spec", "StatefulSetSpec"),
                    t("status", "StatefulSetStatus"),
                ]
            }
        }
        // volumeClaimTemplates has no patch strategy: replaced.
        "StatefulSetSpec" => const { &[t("template", "PodTemplateSpec")] },
        "DaemonSet" => {
            const {
                &[
                    t("metadata", "ObjectMeta"),
                    t("spec", "DaemonSetSpec"),
                    t("status", "DaemonSetStatus"),
                ]
            }
        }
        "ReplicationControllerSpec" | "ReplicaSetSpec" | "DaemonSetSpec" | "JobSpec" => TEMPLATE,
        // batch/v1
        "Job" => {
            const {
                &[
                    t("metadata", "ObjectMeta"),
                    t("spec", "JobSpec"),
                    t("status", "JobStatus"),
                ]
            }
        }
        "CronJob" => const { &[t("metadata", "ObjectMeta"), t("spec", "CronJobSpec")] },
        "CronJobSpec" => const { &[t("jobTemplate", "JobTemplateSpec")] },
        "JobTemplateSpec" => const { &[t("metadata", "ObjectMeta"), t("spec", "JobSpec")] },
        // policy/v1
        "PodDisruptionBudget" => {
            const {
                &[
                    t("metadata", "ObjectMeta"),
                    t("status", "PodDisruptionBudgetStatus"),
                ]
            }
        }
        // Statuses whose only tagged field is `conditions` (merge by type).
        "ReplicationControllerStatus"
        | "ServiceStatus"
        | "NamespaceStatus"
        | "PersistentVolumeClaimStatus"
        | "DeploymentStatus"
        | "ReplicaSetStatus"
        | "StatefulSetStatus"
        | "DaemonSetStatus"
        | "JobStatus"
        | "PodDisruptionBudgetStatus" => CONDITIONS,
        // admissionregistration/v1: webhooks merge by name, and so do their match conditions.
        "MutatingWebhookConfiguration" => {
            const {
                &[
                    t("metadata", "ObjectMeta"),
                    m("webhooks", "Webhook", "merge", "name"),
                ]
            }
        }
        "ValidatingWebhookConfiguration" => {
            const {
                &[
                    t("metadata", "ObjectMeta"),
                    m("webhooks", "Webhook", "merge", "name"),
                ]
            }
        }
        "Webhook" | "AdmissionPolicySpec" => {
            const { &[m("matchConditions", "MatchCondition", "merge", "name")] }
        }
        "AdmissionPolicy" => {
            const {
                &[
                    t("metadata", "ObjectMeta"),
                    t("spec", "AdmissionPolicySpec"),
                ]
            }
        }
        _ => const { &[] },
    }
}

/// Built-in kinds that accept strategic merge patch, with their root type. Kinds whose only tagged
/// fields are in `metadata` use the generic `Object`.
const KINDS: &[(&str, &str, &str)] = &[
    ("", "Pod", "Pod"),
    ("", "PodTemplate", "PodTemplate"),
    ("", "ReplicationController", "ReplicationController"),
    ("", "Service", "Service"),
    ("", "Node", "Node"),
    ("", "Namespace", "Namespace"),
    ("", "PersistentVolumeClaim", "PersistentVolumeClaim"),
    ("", "ServiceAccount", "ServiceAccount"),
    ("", "ConfigMap", "Object"),
    ("", "Secret", "Object"),
    ("", "Endpoints", "Object"),
    ("", "Event", "Object"),
    ("", "LimitRange", "Object"),
    ("", "ResourceQuota", "Object"),
    ("", "PersistentVolume", "Object"),
    ("", "Binding", "Object"),
    ("apps", "Deployment", "Deployment"),
    ("apps", "ReplicaSet", "ReplicaSet"),
    ("apps", "StatefulSet", "StatefulSet"),
    ("apps", "DaemonSet", "DaemonSet"),
    ("apps", "ControllerRevision", "Object"),
    ("batch", "Job", "Job"),
    ("batch", "CronJob", "CronJob"),
    ("policy", "PodDisruptionBudget", "PodDisruptionBudget"),
    ("autoscaling", "HorizontalPodAutoscaler", "Object"),
    ("coordination.k8s.io", "Lease", "Object"),
    ("discovery.k8s.io", "EndpointSlice", "Object"),
    ("events.k8s.io", "Event", "Object"),
    ("networking.k8s.io", "Ingress", "Object"),
    ("networking.k8s.io", "IngressClass", "Object"),
    ("networking.k8s.io", "NetworkPolicy", "Object"),
    ("rbac.authorization.k8s.io", "Role", "Object"),
    ("rbac.authorization.k8s.io", "RoleBinding", "Object"),
    ("rbac.authorization.k8s.io", "ClusterRole", "Object"),
    ("rbac.authorization.k8s.io", "ClusterRoleBinding", "Object"),
    ("scheduling.k8s.io", "PriorityClass", "Object"),
    ("storage.k8s.io", "StorageClass", "Object"),
    ("storage.k8s.io", "CSIDriver", "Object"),
    ("storage.k8s.io", "CSINode", "Object"),
    ("storage.k8s.io", "VolumeAttachment", "Object"),
    ("node.k8s.io", "RuntimeClass", "Object"),
    ("certificates.k8s.io", "CertificateSigningRequest", "Object"),
    (
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
        "ValidatingWebhookConfiguration",
    ),
    (
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicy",
        "AdmissionPolicy",
    ),
    (
        "admissionregistration.k8s.io",
        "MutatingAdmissionPolicy",
        "AdmissionPolicy",
    ),
    ("apiextensions.k8s.io", "CustomResourceDefinition", "Object"),
    ("apiregistration.k8s.io", "APIService", "Object"),
    ("flowcontrol.apiserver.k8s.io", "FlowSchema", "Object"),
    (
        "flowcontrol.apiserver.k8s.io",
        "PriorityLevelConfiguration",
        "Object",
    ),
];

/// The patch schema of a kind; [`PatchSchema::none`] for kinds not in the table (custom resources).
pub fn schema_for(group: &str, kind: &str) -> PatchSchema {
    KINDS
        .iter()
        .find(|(g, k, _)| *g == group && *k == kind)
        .map_or(PatchSchema::none(), |(_, _, ty)| PatchSchema::of(ty))
}

/// The patch schema of a built-in kind: its table entry, else the generic `Object` (every built-in
/// kind has `metadata` with its tagged fields; its other fields take the default behaviour).
pub fn builtin_schema_for(group: &str, kind: &str) -> PatchSchema {
    KINDS
        .iter()
        .find(|(g, k, _)| *g == group && *k == kind)
        .map_or(object_schema(), |(_, _, ty)| PatchSchema::of(ty))
}

/// The schema of an object of a kind without a table entry (a custom resource): only `metadata` has
/// metadata (owner references keyed by uid, finalizers a set).
pub fn object_schema() -> PatchSchema {
    PatchSchema::of("Object")
}

/// The metadata of field `name` of a value of `schema` (upstream `LookupPatchMetadata`).
pub fn lookup(schema: PatchSchema, name: &str) -> FieldMeta {
    let field = schema
        .ty
        .and_then(|ty| fields_of(ty).iter().find(|f| f.name == name));
    let Some(field) = field else {
        return FieldMeta {
            schema: PatchSchema::none(),
            strategy: Strategy::Default,
            retain_keys: false,
            merge_key: "",
        };
    };
    let mut retain_keys = false;
    let mut strategy = Strategy::Default;
    for part in field.tag.split(',') {
        match part {
            "retainKeys" => retain_keys = true,
            "merge" => strategy = Strategy::Merge,
            "replace" => strategy = Strategy::Replace,
            _ => {}
        }
    }
    FieldMeta {
        schema: PatchSchema { ty: field.ty },
        strategy,
        retain_keys,
        merge_key: field.key,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(root: PatchSchema, fields: &[&str]) -> FieldMeta {
        let mut meta = lookup(root, fields[0]);
        for f in &fields[1..] {
            meta = lookup(meta.schema, f);
        }
        meta
    }

    #[test]
    fn built_in_tags() {
        let pod = schema_for("", "Pod");
        let cases: &[(PatchSchema, &[&str], Strategy, &str, bool)] = &[
            (pod, &["spec", "containers"], Strategy::Merge, "name", false),
            (
                pod,
                &["spec", "containers", "env"],
                Strategy::Merge,
                "name",
                false,
            ),
            (
                pod,
                &["spec", "containers", "ports"],
                Strategy::Merge,
                "containerPort",
                false,
            ),
            (
                pod,
                &["spec", "initContainers", "volumeMounts"],
                Strategy::Merge,
                "mountPath",
                false,
            ),
            (
                pod,
                &["spec", "ephemeralContainers", "volumeDevices"],
                Strategy::Merge,
                "devicePath",
                false,
            ),
            (
                pod,
                &["spec", "containers", "resizePolicy"],
                Strategy::Default,
                "",
                false,
            ),
            (pod, &["spec", "volumes"], Strategy::Merge, "name", true),
            (pod, &["spec", "tolerations"], Strategy::Default, "", false),
            (pod, &["spec", "hostAliases"], Strategy::Merge, "ip", false),
            (
                pod,
                &["spec", "topologySpreadConstraints"],
                Strategy::Merge,
                "topologyKey",
                false,
            ),
            (
                pod,
                &["spec", "schedulingGates"],
                Strategy::Merge,
                "name",
                false,
            ),
            (
                pod,
                &["spec", "resourceClaims"],
                Strategy::Merge,
                "name",
                true,
            ),
            (
                pod,
                &["status", "conditions"],
                Strategy::Merge,
                "type",
                false,
            ),
            (pod, &["status", "podIPs"], Strategy::Merge, "ip", false),
            (pod, &["metadata", "finalizers"], Strategy::Merge, "", false),
            (
                pod,
                &["metadata", "ownerReferences"],
                Strategy::Merge,
                "uid",
                false,
            ),
            (pod, &["metadata", "labels"], Strategy::Default, "", false),
            (
                schema_for("apps", "Deployment"),
                &["spec", "strategy"],
                Strategy::Default,
                "",
                true,
            ),
            (
                schema_for("apps", "Deployment"),
                &["spec", "template", "spec", "containers"],
                Strategy::Merge,
                "name",
                false,
            ),
            (
                schema_for("apps", "Deployment"),
                &["status", "conditions"],
                Strategy::Merge,
                "type",
                false,
            ),
            (
                schema_for("apps", "StatefulSet"),
                &["spec", "volumeClaimTemplates"],
                Strategy::Default,
                "",
                false,
            ),
            (
                schema_for("batch", "CronJob"),
                &["spec", "jobTemplate", "spec", "template", "spec", "volumes"],
                Strategy::Merge,
                "name",
                true,
            ),
            (
                schema_for("batch", "Job"),
                &["status", "conditions"],
                Strategy::Merge,
                "type",
                false,
            ),
            (
                schema_for("", "Service"),
                &["spec", "ports"],
                Strategy::Merge,
                "port",
                false,
            ),
            (
                schema_for("", "Node"),
                &["status", "addresses"],
                Strategy::Merge,
                "type",
                false,
            ),
            (
                schema_for("", "Node"),
                &["spec", "podCIDRs"],
                Strategy::Merge,
                "",
                false,
            ),
            (
                schema_for("", "ConfigMap"),
                &["metadata", "finalizers"],
                Strategy::Merge,
                "",
                false,
            ),
            (
                schema_for("", "PodTemplate"),
                &["template", "spec", "imagePullSecrets"],
                Strategy::Merge,
                "name",
                false,
            ),
            (
                schema_for("", "ReplicationController"),
                &["spec", "template", "spec", "containers"],
                Strategy::Merge,
                "name",
                false,
            ),
            (
                schema_for("example.com", "Widget"),
                &["metadata", "finalizers"],
                Strategy::Default,
                "",
                false,
            ),
        ];
        for (root, fields, strategy, key, retain) in cases {
            let meta = path(*root, fields);
            assert_eq!(
                (meta.strategy, meta.merge_key, meta.retain_keys),
                (*strategy, *key, *retain),
                "{fields:?}"
            );
        }
    }

    #[test]
    fn smp_schemas() {
        assert_eq!(schema_for("example.com", "Widget"), PatchSchema::none());
        // A built-in kind without tags of its own still merges its metadata's lists.
        let binding = builtin_schema_for(
            "admissionregistration.k8s.io",
            "ValidatingAdmissionPolicyBinding",
        );
        assert_eq!(binding, object_schema());
        let finalizers = path(binding, &["metadata", "finalizers"]);
        assert_eq!(finalizers.strategy, Strategy::Merge);
        // Webhooks merge by name, as do their match conditions.
        let hooks = schema_for(
            "admissionregistration.k8s.io",
            "ValidatingWebhookConfiguration",
        );
        let webhooks = path(hooks, &["webhooks"]);
        assert_eq!(
            (webhooks.strategy, webhooks.merge_key),
            (Strategy::Merge, "name")
        );
        let conditions = path(hooks, &["webhooks", "matchConditions"]);
        assert_eq!(
            (conditions.strategy, conditions.merge_key),
            (Strategy::Merge, "name")
        );
        let vap = schema_for("admissionregistration.k8s.io", "ValidatingAdmissionPolicy");
        let conditions = path(vap, &["spec", "matchConditions"]);
        assert_eq!(
            (conditions.strategy, conditions.merge_key),
            (Strategy::Merge, "name")
        );
        assert_eq!(
            schema_for("apps", "Deployment").type_name(),
            Some("Deployment")
        );
    }
}
