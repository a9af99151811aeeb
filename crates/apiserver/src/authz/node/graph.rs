//! Which node may reach which object (upstream `plugin/pkg/auth/authorizer/node/graph.go` and
//! `graph_populator.go`). Upstream keeps a general graph (pod -> node, secret -> pod, pvc -> pod,
//! pv -> pvc, secret -> pv, ...) and walks it per request, with an index of the direct "destination"
//! edges. rkube keeps the same relations flattened: for every object a pod names, how many pods on
//! each node name it, so the common question ("is this secret used by a pod on node n?") is two hash
//! lookups; the one two-step path (node <- pod <- pvc <- pv <- secret) is resolved at query time
//! through the persistent volumes that name a secret.
//!
//! Pods enter when they are bound (`spec.nodeName` set) and leave when deleted, as upstream.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use apimachinery::podrefs;

/// The kinds a pod's references reach (upstream's vertex types).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Pod,
    Secret,
    ConfigMap,
    PersistentVolumeClaim,
    ServiceAccount,
    ResourceClaim,
}

type ObjectKey = (Kind, String, String);

/// What one bound pod contributed, kept to undo it on update or delete.
#[derive(Debug, PartialEq)]
struct PodEntry {
    node: String,
    refs: Vec<ObjectKey>,
    /// The status fields that name ResourceClaims (see [`claim_statuses`]): with the node, the only
    /// parts of a bound pod that may change what it reaches.
    claims: Value,
}

#[derive(Debug, Default)]
struct VolumeEntry {
    /// The claim the volume is bound to (`spec.claimRef`), as (namespace, name).
    claim: Option<(String, String)>,
    secrets: Vec<(String, String)>,
}

#[derive(Debug, Default)]
pub struct Graph {
    pods: HashMap<(String, String), PodEntry>,
    /// Object -> node -> how many of the node's pods name it.
    reach: HashMap<ObjectKey, HashMap<String, u32>>,
    volumes: HashMap<String, VolumeEntry>,
    /// Secret (namespace, name) -> the persistent volumes that name it.
    volume_secrets: HashMap<(String, String), HashSet<String>>,
    /// VolumeAttachment name -> node.
    attachments: HashMap<String, String>,
    /// ResourceSlice name -> node.
    slices: HashMap<String, String>,
    /// Node -> how many pods, attachments and slices name it: a node nothing names is unknown.
    nodes: HashMap<String, u32>,
}

impl Graph {
    /// Whether a pod on `node` with these claim statuses would change nothing: the same bound pod
    /// (its references are immutable once bound, as upstream's populator relies on), or still an
    /// unbound one. Lets most pod updates (status) skip parsing the spec.
    pub fn pod_unchanged(&self, namespace: &str, name: &str, node: &str, claims: &Value) -> bool {
        match self.pods.get(&(namespace.to_string(), name.to_string())) {
            Some(entry) => entry.node == node && entry.claims == *claims,
            None => node.is_empty(),
        }
    }

    /// Records a pod's current state (`None`: deleted). Unbound pods are not in the graph.
    pub fn set_pod(&mut self, namespace: &str, name: &str, pod: Option<&Value>) {
        let key = (namespace.to_string(), name.to_string());
        let entry = pod.and_then(|pod| pod_entry(namespace, name, pod));
        if self.pods.get(&key) == entry.as_ref() {
            return;
        }
        if let Some(old) = self.pods.remove(&key) {
            for object in &old.refs {
                self.unreach(object, &old.node);
            }
            self.forget_node(&old.node);
        }
        if let Some(new) = entry {
            for object in &new.refs {
                *self
                    .reach
                    .entry(object.clone())
                    .or_default()
                    .entry(new.node.clone())
                    .or_default() += 1;
            }
            *self.nodes.entry(new.node.clone()).or_default() += 1;
            self.pods.insert(key, new);
        }
    }

    fn unreach(&mut self, object: &ObjectKey, node: &str) {
        if let Some(by_node) = self.reach.get_mut(object) {
            if let Some(count) = by_node.get_mut(node) {
                *count -= 1;
                if *count == 0 {
                    by_node.remove(node);
                }
            }
            if by_node.is_empty() {
                self.reach.remove(object);
            }
        }
    }

    fn forget_node(&mut self, node: &str) {
        if let Some(count) = self.nodes.get_mut(node) {
            *count -= 1;
            if *count == 0 {
                self.nodes.remove(node);
            }
        }
    }

    /// Records a persistent volume (`None`: deleted).
    pub fn set_volume(&mut self, name: &str, pv: Option<&Value>) {
        if let Some(old) = self.volumes.remove(name) {
            for secret in old.secrets {
                if let Some(set) = self.volume_secrets.get_mut(&secret) {
                    set.remove(name);
                    if set.is_empty() {
                        self.volume_secrets.remove(&secret);
                    }
                }
            }
        }
        let Some(pv) = pv else { return };
        let claim = pv.pointer("/spec/claimRef").and_then(|c| {
            Some((
                c["namespace"].as_str()?.to_string(),
                c["name"].as_str()?.to_string(),
            ))
        });
        let secrets = podrefs::pv_secret_refs(pv);
        for secret in &secrets {
            self.volume_secrets
                .entry(secret.clone())
                .or_default()
                .insert(name.to_string());
        }
        self.volumes
            .insert(name.to_string(), VolumeEntry { claim, secrets });
    }

    /// Records a VolumeAttachment's or ResourceSlice's node (`None`: deleted or no node).
    pub fn set_attachment(&mut self, name: &str, node: Option<&str>) {
        Self::set_owned(&mut self.attachments, &mut self.nodes, name, node);
    }

    pub fn set_slice(&mut self, name: &str, node: Option<&str>) {
        Self::set_owned(&mut self.slices, &mut self.nodes, name, node);
    }

    fn set_owned(
        map: &mut HashMap<String, String>,
        nodes: &mut HashMap<String, u32>,
        name: &str,
        node: Option<&str>,
    ) {
        let node = node.filter(|n| !n.is_empty());
        if map.get(name).map(String::as_str) == node {
            return;
        }
        if let Some(old) = map.remove(name) {
            if let Some(count) = nodes.get_mut(&old) {
                *count -= 1;
                if *count == 0 {
                    nodes.remove(&old);
                }
            }
        }
        if let Some(node) = node {
            map.insert(name.to_string(), node.to_string());
            *nodes.entry(node.to_string()).or_default() += 1;
        }
    }

    /// Drops every object of one source before it is loaded again.
    pub fn clear_pods(&mut self) {
        self.pods.clear();
        self.reach.clear();
        self.recount_nodes();
    }

    pub fn clear_volumes(&mut self) {
        self.volumes.clear();
        self.volume_secrets.clear();
    }

    pub fn clear_attachments(&mut self) {
        self.attachments.clear();
        self.recount_nodes();
    }

    pub fn clear_slices(&mut self) {
        self.slices.clear();
        self.recount_nodes();
    }

    fn recount_nodes(&mut self) {
        self.nodes.clear();
        let owners = self
            .pods
            .values()
            .map(|p| &p.node)
            .chain(self.attachments.values())
            .chain(self.slices.values());
        for node in owners {
            *self.nodes.entry(node.clone()).or_default() += 1;
        }
    }

    pub fn knows_node(&self, node: &str) -> bool {
        self.nodes.contains_key(node)
    }

    fn reaches(&self, kind: Kind, namespace: &str, name: &str, node: &str) -> bool {
        self.reach
            .get(&(kind, namespace.to_string(), name.to_string()))
            .is_some_and(|by_node| by_node.contains_key(node))
    }

    /// Whether `node` reaches the object through the pods bound to it (upstream `hasPathFrom`).
    pub fn has_path(&self, node: &str, target: Target<'_>) -> bool {
        match target {
            Target::Object(Kind::Secret, namespace, name) => {
                self.reaches(Kind::Secret, namespace, name, node)
                    || self
                        .volume_secrets
                        .get(&(namespace.to_string(), name.to_string()))
                        .is_some_and(|pvs| pvs.iter().any(|pv| self.volume_reaches(pv, node)))
            }
            Target::Object(kind, namespace, name) => self.reaches(kind, namespace, name, node),
            Target::PersistentVolume(name) => self.volume_reaches(name, node),
            Target::VolumeAttachment(name) => self.attachments.get(name).is_some_and(|n| n == node),
            Target::ResourceSlice(name) => self.slices.get(name).is_some_and(|n| n == node),
        }
    }

    fn volume_reaches(&self, pv: &str, node: &str) -> bool {
        self.volumes
            .get(pv)
            .and_then(|v| v.claim.as_ref())
            .is_some_and(|(namespace, claim)| {
                self.reaches(Kind::PersistentVolumeClaim, namespace, claim, node)
            })
    }
}

/// An object a node asks for.
#[derive(Clone, Copy, Debug)]
pub enum Target<'a> {
    /// A namespaced object a pod names (or the pod itself): kind, namespace, name.
    Object(Kind, &'a str, &'a str),
    PersistentVolume(&'a str),
    VolumeAttachment(&'a str),
    ResourceSlice(&'a str),
}

/// What a bound pod names; `None` for a pod not bound to a node.
fn pod_entry(namespace: &str, name: &str, pod: &Value) -> Option<PodEntry> {
    let node = pod
        .pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())?;
    let spec = &pod["spec"];
    let object = |kind, n: &str| (kind, namespace.to_string(), n.to_string());
    let mut refs = vec![object(Kind::Pod, name)];
    refs.extend(
        podrefs::pod_secret_names(spec)
            .into_iter()
            .filter(|n| !n.is_empty())
            .map(|n| object(Kind::Secret, n)),
    );
    refs.extend(
        podrefs::pod_config_map_names(spec)
            .into_iter()
            .filter(|n| !n.is_empty())
            .map(|n| object(Kind::ConfigMap, n)),
    );
    refs.extend(
        podrefs::pod_claim_names(name, spec)
            .iter()
            .filter(|n| !n.is_empty())
            .map(|n| object(Kind::PersistentVolumeClaim, n)),
    );
    refs.extend(
        podrefs::pod_resource_claim_names(pod)
            .into_iter()
            .filter(|n| !n.is_empty())
            .map(|n| object(Kind::ResourceClaim, n)),
    );
    if let Some(sa) = spec["serviceAccountName"]
        .as_str()
        .filter(|s| !s.is_empty())
    {
        refs.push(object(Kind::ServiceAccount, sa));
    }
    // A pod naming the same secret twice still reaches it once; counts stay per pod.
    refs.sort();
    refs.dedup();
    Some(PodEntry {
        node: node.to_string(),
        refs,
        claims: claim_statuses(
            &pod["status"]["resourceClaimStatuses"],
            &pod["status"]["extendedResourceClaimStatus"],
        ),
    })
}

/// The status fields that name a pod's ResourceClaims, as one value (null when both are absent).
pub fn claim_statuses(resource_claim_statuses: &Value, extended: &Value) -> Value {
    if resource_claim_statuses.is_null() && extended.is_null() {
        Value::Null
    } else {
        Value::Array(vec![resource_claim_statuses.clone(), extended.clone()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(node: &str, secret: &str, claim: &str) -> Value {
        json!({
            "metadata": {"namespace": "ns", "name": "p"},
            "spec": {
                "nodeName": node,
                "serviceAccountName": "default",
                "containers": [{"envFrom": [{"secretRef": {"name": secret}}]}],
                "volumes": [
                    {"name": "a", "secret": {"secretName": secret}},
                    {"name": "b", "persistentVolumeClaim": {"claimName": claim}},
                    {"name": "c", "configMap": {"name": "cm"}}
                ]
            }
        })
    }

    fn secret<'a>(name: &'a str) -> Target<'a> {
        Target::Object(Kind::Secret, "ns", name)
    }

    #[test]
    fn a_node_reaches_what_its_pods_name() {
        let mut g = Graph::default();
        g.set_pod("ns", "p", Some(&pod("n1", "s1", "data")));
        assert!(g.knows_node("n1"));
        assert!(!g.knows_node("n2"));
        assert!(g.has_path("n1", secret("s1")));
        assert!(!g.has_path("n2", secret("s1")));
        assert!(!g.has_path("n1", Target::Object(Kind::Secret, "other", "s1")));
        assert!(g.has_path("n1", Target::Object(Kind::ConfigMap, "ns", "cm")));
        assert!(g.has_path("n1", Target::Object(Kind::Pod, "ns", "p")));
        assert!(g.has_path("n1", Target::Object(Kind::ServiceAccount, "ns", "default")));

        // The pod moves to other references: the old ones are gone.
        g.set_pod("ns", "p", Some(&pod("n1", "s2", "data")));
        assert!(!g.has_path("n1", secret("s1")));
        assert!(g.has_path("n1", secret("s2")));

        g.set_pod("ns", "p", None);
        assert!(!g.has_path("n1", secret("s2")));
        assert!(!g.knows_node("n1"));
        assert!(g.reach.is_empty() && g.nodes.is_empty());
    }

    #[test]
    fn only_binding_and_claim_statuses_change_a_bound_pod() {
        let mut g = Graph::default();
        assert!(
            g.pod_unchanged("ns", "p", "", &Value::Null),
            "still unbound"
        );
        assert!(
            !g.pod_unchanged("ns", "p", "n1", &Value::Null),
            "just bound"
        );
        g.set_pod("ns", "p", Some(&pod("n1", "s1", "data")));
        assert!(g.pod_unchanged("ns", "p", "n1", &Value::Null));
        let claims = claim_statuses(
            &json!([{"name": "a", "resourceClaimName": "x"}]),
            &Value::Null,
        );
        assert!(!g.pod_unchanged("ns", "p", "n1", &claims));
        assert!(!g.pod_unchanged("ns", "p", "n2", &Value::Null));
    }

    #[test]
    fn unbound_pods_reach_nothing() {
        let mut g = Graph::default();
        g.set_pod("ns", "p", Some(&pod("", "s1", "data")));
        assert!(g.reach.is_empty());
        g.set_pod("ns", "p", Some(&pod("n1", "s1", "data")));
        assert!(g.has_path("n1", secret("s1")));
    }

    #[test]
    fn two_pods_share_a_secret() {
        let mut g = Graph::default();
        g.set_pod("ns", "a", Some(&pod("n1", "s", "c1")));
        g.set_pod("ns", "b", Some(&pod("n1", "s", "c2")));
        g.set_pod("ns", "a", None);
        assert!(g.has_path("n1", secret("s")), "b still names it");
        g.set_pod("ns", "b", None);
        assert!(!g.has_path("n1", secret("s")));
    }

    #[test]
    fn volumes_reach_through_their_claim() {
        let mut g = Graph::default();
        let pv = json!({"spec": {
            "claimRef": {"namespace": "ns", "name": "data"},
            "csi": {"driver": "d", "nodePublishSecretRef": {"name": "pv-secret"}}
        }});
        g.set_volume("pv1", Some(&pv));
        assert!(!g.has_path("n1", Target::PersistentVolume("pv1")));
        g.set_pod("ns", "p", Some(&pod("n1", "s1", "data")));
        assert!(g.has_path("n1", Target::PersistentVolume("pv1")));
        assert!(g.has_path("n1", secret("pv-secret")));
        assert!(!g.has_path("n2", Target::PersistentVolume("pv1")));
        assert!(g.has_path(
            "n1",
            Target::Object(Kind::PersistentVolumeClaim, "ns", "data")
        ));
        g.set_volume("pv1", None);
        assert!(!g.has_path("n1", secret("pv-secret")));
        assert!(g.volume_secrets.is_empty());
    }

    #[test]
    fn attachments_and_slices_name_their_node() {
        let mut g = Graph::default();
        g.set_attachment("va", Some("n1"));
        g.set_slice("slice", Some("n2"));
        assert!(g.knows_node("n1") && g.knows_node("n2"));
        assert!(g.has_path("n1", Target::VolumeAttachment("va")));
        assert!(!g.has_path("n2", Target::VolumeAttachment("va")));
        assert!(g.has_path("n2", Target::ResourceSlice("slice")));
        g.set_attachment("va", None);
        assert!(!g.knows_node("n1"));
        g.clear_slices();
        assert!(!g.knows_node("n2"));
    }
}
