//! The table of built-in resources (upstream: each group's `RESTStorageProvider`), kept apart from the
//! registry that serves it because it is most of the lines.

use super::{Resource, STANDARD_VERBS};

/// Compact description of a built-in resource, expanded by [`builtin`].
struct Spec {
    group: &'static str,
    versions: &'static [&'static str],
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    all: bool,
    sub: &'static [&'static str],
    verbs: Option<&'static [&'static str]>,
    storage: Option<&'static str>,
    generation: bool,
}

const fn spec(
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
) -> Spec {
    Spec {
        group,
        versions: &["v1"],
        kind,
        plural,
        namespaced,
        short: &[],
        all: false,
        sub: &[],
        verbs: None,
        storage: None,
        generation: false,
    }
}

const fn s(
    group: &'static str,
    kind: &'static str,
    plural: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    sub: &'static [&'static str],
) -> Spec {
    let mut r = spec(group, kind, plural, namespaced);
    r.short = short;
    r.sub = sub;
    r
}

const fn all(mut r: Spec) -> Spec {
    r.all = true;
    r
}

const fn gen(mut r: Spec) -> Spec {
    r.generation = true;
    r
}

const fn verbs(mut r: Spec, v: &'static [&'static str]) -> Spec {
    r.verbs = Some(v);
    r
}

const fn stored(mut r: Spec, storage: &'static str) -> Spec {
    r.storage = Some(storage);
    r
}

const fn versions(mut r: Spec, v: &'static [&'static str]) -> Spec {
    r.versions = v;
    r
}

const NS: bool = true;
const CLUSTER: bool = false;

const BUILTIN: &[Spec] = &[
    // core/v1
    verbs(s("", "Binding", "bindings", NS, &[], &[]), &["create"]),
    s("", "ConfigMap", "configmaps", NS, &["cm"], &[]),
    s("", "Endpoints", "endpoints", NS, &["ep"], &[]),
    s("", "Event", "events", NS, &["ev"], &[]),
    s("", "LimitRange", "limitranges", NS, &["limits"], &[]),
    // Namespaces are deleted one at a time (no deletecollection), as upstream.
    verbs(
        s(
            "",
            "Namespace",
            "namespaces",
            CLUSTER,
            &["ns"],
            &["status", "finalize"],
        ),
        &[
            "create", "delete", "get", "list", "patch", "update", "watch",
        ],
    ),
    s("", "Node", "nodes", CLUSTER, &["no"], &["proxy", "status"]),
    s(
        "",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        NS,
        &["pvc"],
        &["status"],
    ),
    s(
        "",
        "PersistentVolume",
        "persistentvolumes",
        CLUSTER,
        &["pv"],
        &["status"],
    ),
    // Pods have a generation since 1.33 (PodObservedGenerationTracking, GA in 1.35).
    all(gen(s(
        "",
        "Pod",
        "pods",
        NS,
        &["po"],
        // Sorted, as upstream's discovery lists them.
        &[
            "attach",
            "binding",
            "ephemeralcontainers",
            "eviction",
            "exec",
            "log",
            "portforward",
            "proxy",
            "resize",
            "status",
        ],
    ))),
    s("", "PodTemplate", "podtemplates", NS, &[], &[]),
    // Computed on each read from the health of storage and the components, never stored.
    verbs(
        s(
            "",
            "ComponentStatus",
            "componentstatuses",
            CLUSTER,
            &["cs"],
            &[],
        ),
        &["get", "list"],
    ),
    // metrics.k8s.io (metrics-server's API, served built-in): computed on each read, never stored;
    // storage names of their own so their (empty) caches do not share the core kinds'.
    versions(
        stored(
            verbs(
                s("metrics.k8s.io", "NodeMetrics", "nodes", CLUSTER, &[], &[]),
                &["get", "list"],
            ),
            "nodemetrics",
        ),
        &["v1beta1"],
    ),
    versions(
        stored(
            verbs(
                s("metrics.k8s.io", "PodMetrics", "pods", NS, &[], &[]),
                &["get", "list"],
            ),
            "podmetrics",
        ),
        &["v1beta1"],
    ),
    all(gen(s(
        "",
        "ReplicationController",
        "replicationcontrollers",
        NS,
        &["rc"],
        &["status", "scale"],
    ))),
    s(
        "",
        "ResourceQuota",
        "resourcequotas",
        NS,
        &["quota"],
        &["status"],
    ),
    s("", "Secret", "secrets", NS, &[], &[]),
    s(
        "",
        "ServiceAccount",
        "serviceaccounts",
        NS,
        &["sa"],
        &["token"],
    ),
    all(s(
        "",
        "Service",
        "services",
        NS,
        &["svc"],
        &["proxy", "status"],
    )),
    // apps/v1
    s(
        "apps",
        "ControllerRevision",
        "controllerrevisions",
        NS,
        &[],
        &[],
    ),
    all(gen(s(
        "apps",
        "DaemonSet",
        "daemonsets",
        NS,
        &["ds"],
        &["status"],
    ))),
    all(gen(s(
        "apps",
        "Deployment",
        "deployments",
        NS,
        &["deploy"],
        &["status", "scale"],
    ))),
    all(gen(s(
        "apps",
        "ReplicaSet",
        "replicasets",
        NS,
        &["rs"],
        &["status", "scale"],
    ))),
    all(gen(s(
        "apps",
        "StatefulSet",
        "statefulsets",
        NS,
        &["sts"],
        &["status", "scale"],
    ))),
    // batch/v1
    all(gen(s(
        "batch",
        "CronJob",
        "cronjobs",
        NS,
        &["cj"],
        &["status"],
    ))),
    all(gen(s("batch", "Job", "jobs", NS, &[], &["status"]))),
    // autoscaling: v2 is the stored version; v1 is served from the same storage.
    all(gen(versions(
        stored(
            s(
                "autoscaling",
                "HorizontalPodAutoscaler",
                "horizontalpodautoscalers",
                NS,
                &["hpa"],
                &["status"],
            ),
            "horizontalpodautoscalers",
        ),
        &["v2", "v1"],
    ))),
    s("coordination.k8s.io", "Lease", "leases", NS, &[], &[]),
    s(
        "discovery.k8s.io",
        "EndpointSlice",
        "endpointslices",
        NS,
        &[],
        &[],
    ),
    // The same objects as core/v1 Events, converted (see `conversion`).
    stored(
        s("events.k8s.io", "Event", "events", NS, &["ev"], &[]),
        "events",
    ),
    gen(s(
        "policy",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        NS,
        &["pdb"],
        &["status"],
    )),
    gen(s(
        "networking.k8s.io",
        "IngressClass",
        "ingressclasses",
        CLUSTER,
        &[],
        &[],
    )),
    gen(s(
        "networking.k8s.io",
        "Ingress",
        "ingresses",
        NS,
        &["ing"],
        &["status"],
    )),
    gen(s(
        "networking.k8s.io",
        "NetworkPolicy",
        "networkpolicies",
        NS,
        &["netpol"],
        &[],
    )),
    s(
        "networking.k8s.io",
        "IPAddress",
        "ipaddresses",
        CLUSTER,
        &["ip"],
        &[],
    ),
    s(
        "networking.k8s.io",
        "ServiceCIDR",
        "servicecidrs",
        CLUSTER,
        &[],
        &["status"],
    ),
    s(
        "rbac.authorization.k8s.io",
        "ClusterRoleBinding",
        "clusterrolebindings",
        CLUSTER,
        &[],
        &[],
    ),
    s(
        "rbac.authorization.k8s.io",
        "ClusterRole",
        "clusterroles",
        CLUSTER,
        &[],
        &[],
    ),
    s(
        "rbac.authorization.k8s.io",
        "RoleBinding",
        "rolebindings",
        NS,
        &[],
        &[],
    ),
    s("rbac.authorization.k8s.io", "Role", "roles", NS, &[], &[]),
    s(
        "scheduling.k8s.io",
        "PriorityClass",
        "priorityclasses",
        CLUSTER,
        &["pc"],
        &[],
    ),
    s(
        "storage.k8s.io",
        "CSIDriver",
        "csidrivers",
        CLUSTER,
        &[],
        &[],
    ),
    s("storage.k8s.io", "CSINode", "csinodes", CLUSTER, &[], &[]),
    s(
        "storage.k8s.io",
        "CSIStorageCapacity",
        "csistoragecapacities",
        NS,
        &[],
        &[],
    ),
    s(
        "storage.k8s.io",
        "StorageClass",
        "storageclasses",
        CLUSTER,
        &["sc"],
        &[],
    ),
    s(
        "storage.k8s.io",
        "VolumeAttachment",
        "volumeattachments",
        CLUSTER,
        &[],
        &["status"],
    ),
    gen(s(
        "storage.k8s.io",
        "VolumeAttributesClass",
        "volumeattributesclasses",
        CLUSTER,
        &["vac"],
        &[],
    )),
    s(
        "node.k8s.io",
        "RuntimeClass",
        "runtimeclasses",
        CLUSTER,
        &[],
        &[],
    ),
    // Reviews: created and answered, never stored.
    verbs(
        s(
            "authentication.k8s.io",
            "SelfSubjectReview",
            "selfsubjectreviews",
            CLUSTER,
            &[],
            &[],
        ),
        &["create"],
    ),
    verbs(
        s(
            "authentication.k8s.io",
            "TokenReview",
            "tokenreviews",
            CLUSTER,
            &[],
            &[],
        ),
        &["create"],
    ),
    verbs(
        s(
            "authorization.k8s.io",
            "LocalSubjectAccessReview",
            "localsubjectaccessreviews",
            NS,
            &[],
            &[],
        ),
        &["create"],
    ),
    verbs(
        s(
            "authorization.k8s.io",
            "SelfSubjectAccessReview",
            "selfsubjectaccessreviews",
            CLUSTER,
            &[],
            &[],
        ),
        &["create"],
    ),
    verbs(
        s(
            "authorization.k8s.io",
            "SelfSubjectRulesReview",
            "selfsubjectrulesreviews",
            CLUSTER,
            &[],
            &[],
        ),
        &["create"],
    ),
    verbs(
        s(
            "authorization.k8s.io",
            "SubjectAccessReview",
            "subjectaccessreviews",
            CLUSTER,
            &[],
            &[],
        ),
        &["create"],
    ),
    s(
        "certificates.k8s.io",
        "CertificateSigningRequest",
        "certificatesigningrequests",
        CLUSTER,
        &["csr"],
        &["status", "approval"],
    ),
    gen(s(
        "admissionregistration.k8s.io",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        CLUSTER,
        &[],
        &[],
    )),
    gen(s(
        "admissionregistration.k8s.io",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        CLUSTER,
        &[],
        &[],
    )),
    gen(s(
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        CLUSTER,
        &[],
        &["status"],
    )),
    gen(s(
        "admissionregistration.k8s.io",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        CLUSTER,
        &[],
        &[],
    )),
    gen(s(
        "admissionregistration.k8s.io",
        "MutatingAdmissionPolicy",
        "mutatingadmissionpolicies",
        CLUSTER,
        &[],
        &[],
    )),
    gen(s(
        "admissionregistration.k8s.io",
        "MutatingAdmissionPolicyBinding",
        "mutatingadmissionpolicybindings",
        CLUSTER,
        &[],
        &[],
    )),
    // resource.k8s.io/v1 (dynamic resource allocation).
    gen(s(
        "resource.k8s.io",
        "DeviceClass",
        "deviceclasses",
        CLUSTER,
        &[],
        &[],
    )),
    s(
        "resource.k8s.io",
        "ResourceClaim",
        "resourceclaims",
        NS,
        &[],
        &["status"],
    ),
    s(
        "resource.k8s.io",
        "ResourceClaimTemplate",
        "resourceclaimtemplates",
        NS,
        &[],
        &[],
    ),
    s(
        "resource.k8s.io",
        "ResourceSlice",
        "resourceslices",
        CLUSTER,
        &[],
        &[],
    ),
    // flowcontrol.apiserver.k8s.io/v1 (API priority and fairness configuration).
    gen(s(
        "flowcontrol.apiserver.k8s.io",
        "FlowSchema",
        "flowschemas",
        CLUSTER,
        &[],
        &["status"],
    )),
    gen(s(
        "flowcontrol.apiserver.k8s.io",
        "PriorityLevelConfiguration",
        "prioritylevelconfigurations",
        CLUSTER,
        &[],
        &["status"],
    )),
    // kube-aggregator's APIServices; the local ones are created at start (bootstrap).
    s(
        "apiregistration.k8s.io",
        "APIService",
        "apiservices",
        CLUSTER,
        &[],
        &["status"],
    ),
    gen(s(
        "apiextensions.k8s.io",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        CLUSTER,
        &["crd", "crds"],
        &["status"],
    )),
];

/// Every built-in resource, one entry per served version.
pub fn builtin() -> Vec<Resource> {
    let mut out = Vec::new();
    for spec in BUILTIN {
        for version in spec.versions {
            let mut categories = Vec::new();
            if spec.all {
                categories.push("all".to_string());
            }
            if matches!(
                spec.group,
                "apiextensions.k8s.io" | "admissionregistration.k8s.io" | "apiregistration.k8s.io"
            ) {
                categories.push("api-extensions".to_string());
            }
            out.push(Resource {
                group: spec.group.to_string(),
                version: version.to_string(),
                kind: spec.kind.to_string(),
                plural: spec.plural.to_string(),
                singular: spec.kind.to_lowercase(),
                namespaced: spec.namespaced,
                short_names: spec.short.iter().map(|s| s.to_string()).collect(),
                categories,
                verbs: spec
                    .verbs
                    .unwrap_or(STANDARD_VERBS)
                    .iter()
                    .map(|s| s.to_string())
                    .collect(),
                subresources: spec.sub.iter().map(|s| s.to_string()).collect(),
                storage: spec.storage.unwrap_or(spec.plural).to_string(),
                generation: spec.generation,
                custom: false,
            });
        }
    }
    out
}
