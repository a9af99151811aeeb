//! What the plugins see of pods and nodes (upstream `framework/types.go`): [`PodInfo`] (a pod with
//! its affinity terms parsed once, its requests and host ports summed once) and [`NodeInfo`] (a node
//! with the pods placed on it, what they request, their host ports and which of them carry
//! (anti-)affinity, plus the node's images).

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, PodAffinityTerm, Taint, WeightedPodAffinityTerm};

use super::resources::{pod_host_ports, pod_non_zero_requests, pod_requests, Resources};
use super::selector::{Labels, Selector};
use super::HostPort;

/// A parsed pod (anti-)affinity term (upstream `framework.AffinityTerm`).
#[derive(Clone, Debug)]
pub struct AffinityTerm {
    pub namespaces: rustc_hash::FxHashSet<String>,
    pub selector: Selector,
    pub topology_key: String,
    pub namespace_selector: Selector,
}

impl AffinityTerm {
    /// Upstream `newAffinityTerm`: with neither namespaces nor a namespace selector the term is
    /// about the pod's own namespace.
    pub fn new(pod: &Pod, term: &PodAffinityTerm) -> Result<AffinityTerm, String> {
        let selector = Selector::from_label_selector(term.label_selector.as_ref())?;
        let mut namespaces: rustc_hash::FxHashSet<String> =
            term.namespaces.iter().flatten().cloned().collect();
        if namespaces.is_empty() && term.namespace_selector.is_none() {
            namespaces.insert(pod.metadata.namespace.clone().unwrap_or_default());
        }
        let namespace_selector = Selector::from_label_selector(term.namespace_selector.as_ref())?;
        Ok(AffinityTerm {
            namespaces,
            selector,
            topology_key: term.topology_key.clone(),
            namespace_selector,
        })
    }

    /// Upstream `AffinityTerm.Matches`: the pod is in one of the term's namespaces (listed, or
    /// selected by their labels) and its labels match.
    pub fn matches(&self, pod: &Pod, ns_labels: Option<&Labels>) -> bool {
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        (self.namespaces.contains(ns) || self.namespace_selector.matches(ns_labels))
            && self.selector.matches(pod.metadata.labels.as_ref())
    }
}

#[derive(Clone, Debug)]
pub struct WeightedAffinityTerm {
    pub term: AffinityTerm,
    pub weight: i32,
}

/// A pod with what the plugins derive from it, computed once (upstream `framework.PodInfo`).
#[derive(Clone, Debug)]
pub struct PodInfo {
    pub pod: Arc<Pod>,
    pub required_affinity_terms: Vec<AffinityTerm>,
    pub required_anti_affinity_terms: Vec<AffinityTerm>,
    pub preferred_affinity_terms: Vec<WeightedAffinityTerm>,
    pub preferred_anti_affinity_terms: Vec<WeightedAffinityTerm>,
    /// Errors parsing the terms (the incoming pod then fails InterPodAffinity's PreFilter).
    pub parse_error: Option<String>,
    /// What the pod adds to a node's `requested` and `non_zero_requested`.
    pub requests: Resources,
    pub non_zero_requests: Resources,
    pub host_ports: Vec<HostPort>,
}

fn required(
    pod: &Pod,
    terms: Option<&Vec<PodAffinityTerm>>,
    errs: &mut Vec<String>,
) -> Vec<AffinityTerm> {
    terms
        .into_iter()
        .flatten()
        .filter_map(|t| AffinityTerm::new(pod, t).map_err(|e| errs.push(e)).ok())
        .collect()
}

fn weighted(
    pod: &Pod,
    terms: Option<&Vec<WeightedPodAffinityTerm>>,
    errs: &mut Vec<String>,
) -> Vec<WeightedAffinityTerm> {
    terms
        .into_iter()
        .flatten()
        .filter_map(|t| {
            AffinityTerm::new(pod, &t.pod_affinity_term)
                .map(|term| WeightedAffinityTerm {
                    term,
                    weight: t.weight,
                })
                .map_err(|e| errs.push(e))
                .ok()
        })
        .collect()
}

impl PodInfo {
    pub fn new(pod: Arc<Pod>) -> PodInfo {
        let mut errs = Vec::new();
        let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
        let pa = affinity.and_then(|a| a.pod_affinity.as_ref());
        let paa = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
        let required_affinity_terms = required(
            &pod,
            pa.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
            &mut errs,
        );
        let required_anti_affinity_terms = required(
            &pod,
            paa.and_then(|a| {
                a.required_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
            &mut errs,
        );
        let preferred_affinity_terms = weighted(
            &pod,
            pa.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
            &mut errs,
        );
        let preferred_anti_affinity_terms = weighted(
            &pod,
            paa.and_then(|a| {
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref()
            }),
            &mut errs,
        );
        let mut requests = pod_requests(&pod);
        requests.allowed_pod_number = 1;
        let nz = pod_non_zero_requests(&pod);
        let non_zero_requests = Resources {
            milli_cpu: nz.milli_cpu,
            memory: nz.memory,
            allowed_pod_number: 1,
            ..Default::default()
        };
        let host_ports = pod_host_ports(&pod);
        PodInfo {
            required_affinity_terms,
            required_anti_affinity_terms,
            preferred_affinity_terms,
            preferred_anti_affinity_terms,
            parse_error: (!errs.is_empty()).then(|| errs.join("; ")),
            requests,
            non_zero_requests,
            host_ports,
            pod,
        }
    }

    /// Upstream `podWithAffinity`: the pod has a pod affinity or anti-affinity stanza.
    pub fn has_affinity(&self) -> bool {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.affinity.as_ref())
            .is_some_and(|a| a.pod_affinity.is_some() || a.pod_anti_affinity.is_some())
    }

    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or("")
    }

    pub fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or("")
    }
}

/// One node with the pods placed on it (bound or assumed), as the plugins see it. What every
/// cycle's Filter reads of the node object (name, `spec.unschedulable`, `spec.taints`) is copied
/// here, so filtering a node touches this struct rather than the scattered parts of the `Node`.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub node: Arc<Node>,
    name: String,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// `spec.taints`.
    pub taints: Vec<Taint>,
    /// `status.allocatable` (pods included, as the `pods` resource).
    pub allocatable: Resources,
    /// The sum of the requests of its pods (upstream `Requested`), pod count included.
    pub requested: Resources,
    /// The same with upstream's non-zero defaults for pods that request no cpu/memory
    /// (100m, 200Mi), used by scoring (upstream `NonZeroRequested`).
    pub non_zero_requested: Resources,
    pub pods: Vec<Arc<PodInfo>>,
    /// Pods with any pod affinity or anti-affinity (upstream `PodsWithAffinity`).
    pub pods_with_affinity: Vec<Arc<PodInfo>>,
    /// Pods with required anti-affinity (upstream `PodsWithRequiredAntiAffinity`).
    pub pods_with_required_anti_affinity: Vec<Arc<PodInfo>>,
    pub used_ports: Vec<HostPort>,
    /// Image name (every name of every image in `status.images`) -> size in bytes.
    pub image_sizes: Arc<HashMap<String, i64>>,
    /// `image_sizes` is not empty (read without following the pointer).
    pub has_images: bool,
    /// Bumped by the cache on every change (incremental snapshots).
    pub generation: u64,
}

fn image_sizes(node: &Node) -> HashMap<String, i64> {
    let mut m = HashMap::new();
    for img in node
        .status
        .as_ref()
        .and_then(|s| s.images.as_ref())
        .into_iter()
        .flatten()
    {
        for name in img.names.iter().flatten() {
            m.insert(name.clone(), img.size_bytes.unwrap_or(0));
        }
    }
    m
}

impl NodeInfo {
    /// A node with no pods; allocatable from `status.allocatable`.
    pub fn new(node: Arc<Node>) -> NodeInfo {
        let allocatable = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .map(Resources::from_list)
            .unwrap_or_default();
        let spec = node.spec.as_ref();
        let images = image_sizes(&node);
        NodeInfo {
            has_images: !images.is_empty(),
            image_sizes: Arc::new(images),
            name: node.metadata.name.clone().unwrap_or_default(),
            unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
            taints: spec.and_then(|s| s.taints.clone()).unwrap_or_default(),
            node,
            allocatable,
            requested: Resources::default(),
            non_zero_requested: Resources::default(),
            pods: Vec::new(),
            pods_with_affinity: Vec::new(),
            pods_with_required_anti_affinity: Vec::new(),
            used_ports: Vec::new(),
            generation: 0,
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn labels(&self) -> Option<&Labels> {
        self.node.metadata.labels.as_ref()
    }

    /// Replaces the node object, keeping the pods.
    pub fn set_node(&mut self, node: Arc<Node>) {
        let fresh = NodeInfo::new(node);
        self.allocatable = fresh.allocatable;
        self.image_sizes = fresh.image_sizes;
        self.has_images = fresh.has_images;
        self.name = fresh.name;
        self.unschedulable = fresh.unschedulable;
        self.taints = fresh.taints;
        self.node = fresh.node;
    }

    /// Accounts a pod (bound or assumed) on this node.
    pub fn add_pod(&mut self, pod: Arc<Pod>) {
        self.add_pod_info(Arc::new(PodInfo::new(pod)));
    }

    pub fn add_pod_info(&mut self, pi: Arc<PodInfo>) {
        self.requested.accumulate(&pi.requests, 1);
        self.non_zero_requested.accumulate(&pi.non_zero_requests, 1);
        self.used_ports.extend(pi.host_ports.iter().cloned());
        if pi.has_affinity() {
            self.pods_with_affinity.push(pi.clone());
        }
        if !pi.required_anti_affinity_terms.is_empty() {
            self.pods_with_required_anti_affinity.push(pi.clone());
        }
        self.pods.push(pi);
    }

    /// Forgets a pod; false when it isn't on this node.
    pub fn remove_pod(&mut self, namespace: &str, name: &str) -> bool {
        let is = |p: &Arc<PodInfo>| p.namespace() == namespace && p.name() == name;
        let Some(i) = self.pods.iter().position(is) else {
            return false;
        };
        let pi = self.pods.swap_remove(i);
        self.pods_with_affinity.retain(|p| !is(p));
        self.pods_with_required_anti_affinity.retain(|p| !is(p));
        self.requested.accumulate(&pi.requests, -1);
        self.non_zero_requested
            .accumulate(&pi.non_zero_requests, -1);
        // One entry per port the pod added, so another pod's identical entry survives.
        for hp in &pi.host_ports {
            if let Some(j) = self.used_ports.iter().position(|u| u == hp) {
                self.used_ports.swap_remove(j);
            }
        }
        true
    }
}
