//! The resource registry: every API resource the server serves, with what discovery publishes about it
//! (upstream: each group's `RESTStorageProvider` plus `APIResource` in discovery). Built-in resources are
//! entries of [`builtin`]; custom resources are added and removed at run time through [`Registry`], so
//! discovery and routing follow.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

/// One served resource at one group/version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    /// API group; "" for core.
    pub group: String,
    pub version: String,
    pub kind: String,
    /// The URL segment: lowercase plural.
    pub plural: String,
    pub singular: String,
    pub namespaced: bool,
    pub short_names: Vec<String>,
    pub categories: Vec<String>,
    pub verbs: Vec<String>,
    /// Subresources served under `<name>/<subresource>`, e.g. "status", "scale", "binding".
    pub subresources: Vec<String>,
    /// Key prefix in storage, without the leading slash, e.g. "pods", "deployments", "minions" upstream
    /// for nodes (we use the plural). Resources sharing storage across versions share it.
    pub storage: String,
    /// `metadata.generation` is maintained (set to 1 on create, bumped on spec change).
    pub generation: bool,
    /// Served from a CustomResourceDefinition (no typed form; printed as upstream prints custom
    /// resources).
    pub custom: bool,
}

impl Resource {
    /// `apps/v1`, or `v1` for core.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    pub fn has_subresource(&self, name: &str) -> bool {
        self.subresources.iter().any(|s| s == name)
    }

    pub fn has_verb(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }

    /// `pods`, `deployments.apps`: how errors name the resource.
    pub fn group_resource(&self) -> String {
        if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }
}

/// The verbs of an ordinary stored resource.
pub const STANDARD_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

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

/// The resources served now. Cheap to clone (shared); readers see a consistent snapshot.
#[derive(Clone, Default)]
pub struct Registry {
    /// Readers take the current `Arc<Snapshot>`; writers replace it (copy on write), so serving a
    /// request never copies the table.
    inner: Arc<RwLock<Arc<Snapshot>>>,
}

/// All resources by (group, version, plural), plus the preferred version of each group.
#[derive(Clone, Default, Debug)]
pub struct Snapshot {
    pub resources: BTreeMap<(String, String, String), Arc<Resource>>,
    /// Group name -> versions in preference order.
    pub groups: Vec<(String, Vec<String>)>,
}

impl Snapshot {
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Resource>> {
        self.resources
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// The resources of one group/version, in plural order.
    pub fn group_version(&self, group: &str, version: &str) -> Vec<Arc<Resource>> {
        self.resources
            .values()
            .filter(|r| r.group == group && r.version == version)
            .cloned()
            .collect()
    }

    pub fn versions(&self, group: &str) -> Option<&[String]> {
        self.groups
            .iter()
            .find(|(g, _)| g == group)
            .map(|(_, v)| v.as_slice())
    }
}

impl Registry {
    pub fn with_builtin() -> Registry {
        let registry = Registry::default();
        for r in builtin() {
            registry.add(r);
        }
        registry
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<Resource>> {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(group, version, plural)
    }

    /// Adds or replaces a resource (a CRD version being served).
    pub fn add(&self, resource: Resource) {
        let mut guard = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let snap = Arc::make_mut(&mut guard);
        let (group, version) = (resource.group.clone(), resource.version.clone());
        match snap.groups.iter_mut().find(|(g, _)| *g == group) {
            Some((_, versions)) => {
                if !versions.contains(&version) {
                    versions.push(version);
                }
            }
            None => snap.groups.push((group, vec![version])),
        }
        let key = (
            resource.group.clone(),
            resource.version.clone(),
            resource.plural.clone(),
        );
        snap.resources.insert(key, Arc::new(resource));
    }

    /// Removes a resource; its group disappears with its last version.
    pub fn remove(&self, group: &str, version: &str, plural: &str) {
        let mut guard = self.inner.write().unwrap_or_else(|e| e.into_inner());
        let snap = Arc::make_mut(&mut guard);
        snap.resources
            .remove(&(group.to_string(), version.to_string(), plural.to_string()));
        let still_served =
            |g: &str, v: &str| snap.resources.keys().any(|(rg, rv, _)| rg == g && rv == v);
        let mut groups = snap.groups.clone();
        for (g, versions) in &mut groups {
            versions.retain(|v| still_served(g, v));
        }
        groups.retain(|(_, versions)| !versions.is_empty());
        snap.groups = groups;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_table_is_consistent() {
        let reg = Registry::with_builtin();
        let snap = reg.snapshot();
        let pods = snap.get("", "v1", "pods").expect("pods");
        assert!(pods.namespaced && pods.short_names == ["po"] && pods.categories == ["all"]);
        assert_eq!(pods.api_version(), "v1");
        let deploy = snap.get("apps", "v1", "deployments").expect("deployments");
        assert_eq!(deploy.group_resource(), "deployments.apps");
        assert!(deploy.has_subresource("scale") && deploy.generation);
        assert_eq!(snap.versions("autoscaling").unwrap(), ["v2", "v1"]);
        assert_eq!(snap.groups[0].0, "", "core first");
        // Plurals are unique within a group/version.
        let mut seen = std::collections::HashSet::new();
        for r in snap.resources.values() {
            assert!(seen.insert((r.group.clone(), r.version.clone(), r.plural.clone())));
        }
    }

    #[test]
    fn resources_come_and_go() {
        let reg = Registry::with_builtin();
        let mut crd = (*reg.get("", "v1", "configmaps").unwrap()).clone();
        crd.group = "example.com".into();
        crd.kind = "Widget".into();
        crd.plural = "widgets".into();
        reg.add(crd);
        assert!(reg.get("example.com", "v1", "widgets").is_some());
        assert!(reg.snapshot().versions("example.com").is_some());
        reg.remove("example.com", "v1", "widgets");
        assert!(reg.get("example.com", "v1", "widgets").is_none());
        assert!(reg.snapshot().versions("example.com").is_none());
    }
}
