//! Quota evaluators (upstream `quota.Evaluator` implementations: `pkg/quota/v1/evaluator/core` for
//! pods, services and persistent volume claims, `generic.objectCountEvaluator` for everything else):
//! which operations each one charges, which quota resources it tracks, which scopes an object falls
//! in, what an object consumes, and the aggregate usage of a namespace's objects.

use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, ResourceQuota, ScopedResourceSelectorRequirement, Service,
};

use super::{add, intersection, object_count_name, pods, ResourceList};
use crate::quantity::{Format, Quantity};

/// An admission operation, as far as quota cares.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    Create,
    Update,
}

/// An object as an evaluator reads it.
#[derive(Clone, Copy, Debug)]
pub enum Object<'a> {
    Pod(&'a k8s_openapi::api::core::v1::Pod),
    Service(&'a Service),
    PersistentVolumeClaim(&'a PersistentVolumeClaim),
    /// Any other object: only counted.
    Other,
}

/// The old object-count names of four core resources (upstream `legacyObjectCountAliases`).
pub const LEGACY_ALIASES: &[(&str, &str)] = &[
    ("configmaps", "configmaps"),
    ("resourcequotas", "resourcequotas"),
    ("replicationcontrollers", "replicationcontrollers"),
    ("secrets", "secrets"),
];

/// Storage-class scoped PVC quota names end in this, after the class name.
const STORAGE_CLASS_SUFFIX: &str = ".storageclass.storage.k8s.io/";

/// What knows how to charge one resource.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Evaluator {
    Pods,
    Services,
    PersistentVolumeClaims,
    /// Counts objects under `count/<resource>[.<group>]` and, for the legacy kinds, the old name.
    ObjectCount {
        group: String,
        resource: String,
        alias: Option<&'static str>,
    },
}

fn one() -> Quantity {
    Quantity::new(1, Format::DecimalSi)
}

/// The scope selectors a quota declares: `spec.scopes` as `Exists` requirements, then the scope
/// selector's expressions (upstream `getScopeSelectorsFromQuota`).
pub fn scope_selectors(quota: &ResourceQuota) -> Vec<ScopedResourceSelectorRequirement> {
    let spec = quota.spec.as_ref();
    let mut out: Vec<ScopedResourceSelectorRequirement> = spec
        .and_then(|s| s.scopes.as_ref())
        .into_iter()
        .flatten()
        .map(|scope| ScopedResourceSelectorRequirement {
            scope_name: scope.clone(),
            operator: "Exists".into(),
            values: None,
        })
        .collect();
    if let Some(sel) = spec.and_then(|s| s.scope_selector.as_ref()) {
        out.extend(sel.match_expressions.iter().flatten().cloned());
    }
    out
}

/// A PVC's storage class: the beta annotation first, then the spec (upstream
/// `GetPersistentVolumeClaimClass`).
pub fn pvc_class(pvc: &PersistentVolumeClaim) -> String {
    if let Some(class) = pvc
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("volume.beta.kubernetes.io/storage-class"))
    {
        return class.clone();
    }
    pvc.spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone())
        .unwrap_or_default()
}

/// The storage a PVC is charged: its request rounded up to whole bytes, or the allocated size when
/// larger (an expansion in progress).
fn pvc_storage(pvc: &PersistentVolumeClaim) -> Result<Option<Quantity>, String> {
    let requested = pvc
        .spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"));
    let Some(requested) = requested else {
        return Ok(None);
    };
    let mut result = Quantity::parse(&requested.0)
        .map_err(|e| format!("storage: {e}"))?
        .round_up_to_units();
    let allocated = pvc
        .status
        .as_ref()
        .and_then(|s| s.allocated_resources.as_ref())
        .and_then(|r| r.get("storage"));
    if let Some(allocated) = allocated {
        let allocated = Quantity::parse(&allocated.0).map_err(|e| format!("storage: {e}"))?;
        if allocated > result {
            result = allocated.round_up_to_units();
        }
    }
    Ok(Some(result))
}

/// A service's quota type: NodePort and LoadBalancer count, others do not (upstream
/// `GetQuotaServiceType`).
pub fn quota_service_type(svc: &Service) -> &str {
    match svc.spec.as_ref().and_then(|s| s.type_.as_deref()) {
        Some("NodePort") => "NodePort",
        Some("LoadBalancer") => "LoadBalancer",
        _ => "",
    }
}

fn service_usage(svc: &Service) -> ResourceList {
    let spec = svc.spec.as_ref();
    let ports = spec.and_then(|s| s.ports.as_ref()).map_or(0, Vec::len) as i64;
    let mut out = ResourceList::new();
    out.insert("count/services".into(), one());
    out.insert("services".into(), one());
    out.insert("services.loadbalancers".into(), Quantity::zero());
    out.insert("services.nodeports".into(), Quantity::zero());
    match quota_service_type(svc) {
        "NodePort" => {
            out.insert(
                "services.nodeports".into(),
                Quantity::new(ports, Format::DecimalSi),
            );
        }
        "LoadBalancer" => {
            // Without node port allocation only explicitly set node ports count.
            let node_ports =
                if spec.and_then(|s| s.allocate_load_balancer_node_ports) == Some(false) {
                    spec.and_then(|s| s.ports.as_ref())
                        .into_iter()
                        .flatten()
                        .filter(|p| p.node_port.is_some_and(|n| n != 0))
                        .count() as i64
                } else {
                    ports
                };
            out.insert(
                "services.nodeports".into(),
                Quantity::new(node_ports, Format::DecimalSi),
            );
            out.insert("services.loadbalancers".into(), one());
        }
        _ => {}
    }
    out
}

fn pvc_usage(pvc: &PersistentVolumeClaim) -> Result<ResourceList, String> {
    let mut out = ResourceList::new();
    out.insert("persistentvolumeclaims".into(), one());
    out.insert("count/persistentvolumeclaims".into(), one());
    let class = pvc_class(pvc);
    if !class.is_empty() {
        out.insert(
            format!("{class}{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"),
            one(),
        );
    }
    if let Some(storage) = pvc_storage(pvc)? {
        out.insert("requests.storage".into(), storage);
        if !class.is_empty() {
            out.insert(
                format!("{class}{STORAGE_CLASS_SUFFIX}requests.storage"),
                storage,
            );
        }
    }
    Ok(out)
}

impl Evaluator {
    /// The evaluator of a resource (upstream's registry: the three special evaluators, the legacy
    /// aliases, and object counting for the rest).
    pub fn for_resource(group: &str, resource: &str) -> Evaluator {
        match (group, resource) {
            ("", "pods") => Evaluator::Pods,
            ("", "services") => Evaluator::Services,
            ("", "persistentvolumeclaims") => Evaluator::PersistentVolumeClaims,
            _ => Evaluator::ObjectCount {
                group: group.to_string(),
                resource: resource.to_string(),
                alias: if group.is_empty() {
                    LEGACY_ALIASES
                        .iter()
                        .find(|(r, _)| *r == resource)
                        .map(|(_, alias)| *alias)
                } else {
                    None
                },
            },
        }
    }

    /// The evaluators that exist whatever the server serves (upstream `core.NewEvaluators`).
    pub fn core() -> Vec<Evaluator> {
        let mut out = vec![
            Evaluator::Pods,
            Evaluator::Services,
            Evaluator::PersistentVolumeClaims,
        ];
        out.extend(
            LEGACY_ALIASES
                .iter()
                .map(|(r, _)| Evaluator::for_resource("", r)),
        );
        out
    }

    /// `(group, resource)` this evaluator charges.
    pub fn group_resource(&self) -> (&str, &str) {
        match self {
            Evaluator::Pods => ("", "pods"),
            Evaluator::Services => ("", "services"),
            Evaluator::PersistentVolumeClaims => ("", "persistentvolumeclaims"),
            Evaluator::ObjectCount {
                group, resource, ..
            } => (group, resource),
        }
    }

    /// Whether an operation on the main resource can change usage (upstream `Handles`): pods and
    /// object counts on create only (pod resources are immutable), services and claims on update too
    /// (type changes, expansion).
    pub fn handles(&self, op: Operation) -> bool {
        match self {
            Evaluator::Pods | Evaluator::ObjectCount { .. } => op == Operation::Create,
            Evaluator::Services | Evaluator::PersistentVolumeClaims => true,
        }
    }

    /// The quota resources among `input` this evaluator charges (upstream `MatchingResources`).
    pub fn matching_resources(&self, input: &[String]) -> Vec<String> {
        match self {
            Evaluator::Pods => pods::matching_resources(input),
            Evaluator::Services => intersection(
                input,
                &[
                    "count/services",
                    "services",
                    "services.nodeports",
                    "services.loadbalancers",
                ],
            ),
            Evaluator::PersistentVolumeClaims => input
                .iter()
                .filter(|name| {
                    matches!(
                        name.as_str(),
                        "count/persistentvolumeclaims"
                            | "persistentvolumeclaims"
                            | "requests.storage"
                    ) || name.ends_with(&format!("{STORAGE_CLASS_SUFFIX}persistentvolumeclaims"))
                        || name.ends_with(&format!("{STORAGE_CLASS_SUFFIX}requests.storage"))
                })
                .cloned()
                .collect(),
            Evaluator::ObjectCount {
                group,
                resource,
                alias,
            } => {
                let mut names = vec![object_count_name(group, resource)];
                names.extend(alias.map(str::to_string));
                intersection(input, &names)
            }
        }
    }

    /// Whether the object falls in a scope; only pods have scopes (upstream's `MatchesScopeFunc`,
    /// `MatchesNoScopeFunc` for the others).
    pub fn matches_scope(
        &self,
        sel: &ScopedResourceSelectorRequirement,
        obj: Object<'_>,
    ) -> Result<bool, String> {
        match (self, obj) {
            (Evaluator::Pods, Object::Pod(p)) => pods::matches_scope(sel, p),
            _ => Ok(false),
        }
    }

    /// Whether the quota applies to the object: it tracks something this evaluator charges and the
    /// object is in every scope the quota names (upstream `generic.Matches`). The quota's status
    /// (what the controller has acknowledged) decides what it tracks.
    pub fn matches(&self, quota: &ResourceQuota, obj: Object<'_>) -> Result<bool, String> {
        let hard: Vec<String> = quota
            .status
            .as_ref()
            .and_then(|s| s.hard.as_ref())
            .map(|h| h.keys().cloned().collect())
            .unwrap_or_default();
        if self.matching_resources(&hard).is_empty() {
            return Ok(false);
        }
        for sel in scope_selectors(quota) {
            if !self.matches_scope(&sel, obj)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// What the object consumes (upstream `Usage`).
    pub fn usage(&self, obj: Object<'_>, now: jiff::Timestamp) -> Result<ResourceList, String> {
        match (self, obj) {
            (Evaluator::Pods, Object::Pod(p)) => pods::usage(p, now),
            (Evaluator::Services, Object::Service(s)) => Ok(service_usage(s)),
            (Evaluator::PersistentVolumeClaims, Object::PersistentVolumeClaim(p)) => pvc_usage(p),
            (
                Evaluator::ObjectCount {
                    group,
                    resource,
                    alias,
                },
                _,
            ) => {
                let mut out = ResourceList::new();
                out.insert(object_count_name(group, resource), one());
                if let Some(alias) = alias {
                    out.insert(alias.to_string(), one());
                }
                Ok(out)
            }
            (e, _) => Err(format!(
                "quota evaluator for {:?} got an object of another kind",
                e.group_resource()
            )),
        }
    }

    /// Requirements on the object a matching quota imposes (upstream `Constraints`): pods must set
    /// the cpu and memory requests and limits a quota tracks.
    pub fn constraints(&self, required: &[String], obj: Object<'_>) -> Result<(), String> {
        match (self, obj) {
            (Evaluator::Pods, Object::Pod(p)) => pods::constraints(required, p),
            _ => Ok(()),
        }
    }

    /// The usage of `objects` (one namespace's) for `resources`, counting only objects in every scope
    /// (upstream `generic.CalculateUsageStats`); each tracked resource starts at zero.
    pub fn usage_stats<'a>(
        &self,
        objects: impl IntoIterator<Item = Object<'a>>,
        resources: &[String],
        scopes: &[ScopedResourceSelectorRequirement],
        now: jiff::Timestamp,
    ) -> Result<ResourceList, String> {
        let mut used: ResourceList = resources
            .iter()
            .map(|r| (r.clone(), Quantity::zero()))
            .collect();
        'objects: for obj in objects {
            for sel in scopes {
                if !self.matches_scope(sel, obj)? {
                    continue 'objects;
                }
            }
            used = add(&used, &self.usage(obj, now)?);
        }
        Ok(used)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quota::pretty_print;
    use serde_json::json;

    fn svc(v: serde_json::Value) -> Service {
        serde_json::from_value(v).expect("service")
    }

    fn pvc(v: serde_json::Value) -> PersistentVolumeClaim {
        serde_json::from_value(v).expect("pvc")
    }

    fn now() -> jiff::Timestamp {
        jiff::Timestamp::UNIX_EPOCH
    }

    fn names(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn service_usage_by_type() {
        let cases = [
            (
                json!({"spec": {"type": "ClusterIP", "ports": [{"port": 80}]}}),
                "count/services=1,services=1,services.loadbalancers=0,services.nodeports=0",
            ),
            (
                json!({"spec": {"type": "NodePort", "ports": [{"port": 80}, {"port": 443}]}}),
                "count/services=1,services=1,services.loadbalancers=0,services.nodeports=2",
            ),
            (
                json!({"spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}}),
                "count/services=1,services=1,services.loadbalancers=1,services.nodeports=1",
            ),
            (
                json!({"spec": {"type": "LoadBalancer", "allocateLoadBalancerNodePorts": false,
                "ports": [{"port": 80, "nodePort": 30001}, {"port": 81}]}}),
                "count/services=1,services=1,services.loadbalancers=1,services.nodeports=1",
            ),
        ];
        for (s, want) in cases {
            let s = svc(s);
            let got = Evaluator::Services
                .usage(Object::Service(&s), now())
                .expect("usage");
            assert_eq!(pretty_print(&got), want);
        }
    }

    #[test]
    fn pvc_usage_with_storage_classes() {
        let cases = [
            (json!({"spec": {"resources": {"requests": {"storage": "1.5"}}}}),
                "count/persistentvolumeclaims=1,persistentvolumeclaims=1,requests.storage=2"),
            (json!({"spec": {"storageClassName": "gold", "resources": {"requests": {"storage": "1Gi"}}},
                "status": {"allocatedResources": {"storage": "2Gi"}}}),
                "count/persistentvolumeclaims=1,gold.storageclass.storage.k8s.io/persistentvolumeclaims=1,gold.storageclass.storage.k8s.io/requests.storage=2Gi,persistentvolumeclaims=1,requests.storage=2Gi"),
            (json!({"metadata": {"annotations": {"volume.beta.kubernetes.io/storage-class": "beta"}},
                "spec": {"storageClassName": "gold"}}),
                "beta.storageclass.storage.k8s.io/persistentvolumeclaims=1,count/persistentvolumeclaims=1,persistentvolumeclaims=1"),
        ];
        for (p, want) in cases {
            let p = pvc(p);
            let got = Evaluator::PersistentVolumeClaims
                .usage(Object::PersistentVolumeClaim(&p), now())
                .expect("usage");
            assert_eq!(pretty_print(&got), want);
        }
    }

    #[test]
    fn registry_and_matching_resources() {
        let hard = names(&[
            "pods",
            "configmaps",
            "count/configmaps",
            "count/deployments.apps",
            "services.nodeports",
            "gold.storageclass.storage.k8s.io/requests.storage",
            "requests.storage",
        ]);
        let cases = [
            (
                Evaluator::for_resource("", "configmaps"),
                vec!["configmaps", "count/configmaps"],
            ),
            (
                Evaluator::for_resource("apps", "deployments"),
                vec!["count/deployments.apps"],
            ),
            (Evaluator::for_resource("", "pods"), vec!["pods"]),
            (
                Evaluator::for_resource("", "services"),
                vec!["services.nodeports"],
            ),
            (
                Evaluator::for_resource("", "persistentvolumeclaims"),
                vec![
                    "gold.storageclass.storage.k8s.io/requests.storage",
                    "requests.storage",
                ],
            ),
            (Evaluator::for_resource("", "secrets"), vec![]),
        ];
        for (e, want) in cases {
            assert_eq!(e.matching_resources(&hard), want, "{e:?}");
        }
        assert!(Evaluator::Services.handles(Operation::Update));
        assert!(!Evaluator::Pods.handles(Operation::Update));
        assert!(!Evaluator::for_resource("", "secrets").handles(Operation::Update));
        assert_eq!(Evaluator::core().len(), 7);
    }

    #[test]
    fn usage_stats_honour_scopes() {
        let pods: Vec<k8s_openapi::api::core::v1::Pod> = [
            json!({"spec": {"containers": [{"name": "a"}]}}),
            json!({"spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}}]}}),
            json!({"spec": {"containers": [{"name": "a"}]}, "status": {"phase": "Failed"}}),
        ]
        .into_iter()
        .map(|v| serde_json::from_value(v).expect("pod"))
        .collect();
        let best_effort = [ScopedResourceSelectorRequirement {
            scope_name: "BestEffort".into(),
            operator: "Exists".into(),
            values: None,
        }];
        let all = Evaluator::Pods
            .usage_stats(
                pods.iter().map(Object::Pod),
                &names(&["pods", "cpu"]),
                &[],
                now(),
            )
            .expect("stats");
        assert_eq!(
            pretty_print(&crate::quota::mask(&all, &["pods", "cpu"])),
            "cpu=1,pods=2"
        );
        let scoped = Evaluator::Pods
            .usage_stats(
                pods.iter().map(Object::Pod),
                &names(&["pods"]),
                &best_effort,
                now(),
            )
            .expect("stats");
        assert_eq!(
            pretty_print(&crate::quota::mask(&scoped, &["pods"])),
            "pods=1"
        );
        let none = Evaluator::Pods
            .usage_stats(std::iter::empty(), &names(&["pods"]), &[], now())
            .expect("stats");
        assert_eq!(pretty_print(&none), "pods=0");
    }
}
