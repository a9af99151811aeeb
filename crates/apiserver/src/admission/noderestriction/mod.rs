//! NodeRestriction admission (upstream `plugin/pkg/admission/noderestriction`, off by default): a
//! kubelet's credentials (user `system:node:<name>` in group `system:nodes`) only reach what that
//! node needs, whatever RBAC or the Node authorizer grant:
//! - its own Node object (create, update, delete), without changing its taints, its
//!   `spec.configSource`, or labels under `kubernetes.io`/`k8s.io` other than the kubelet's own set
//!   (`kubernetes.io/hostname`, the topology and instance-type labels, `kubelet.kubernetes.io/*`,
//!   `node.kubernetes.io/*`, ...); `node-restriction.kubernetes.io/*` never;
//! - mirror pods bound to itself (create, with only the node as controller owner and no
//!   references to service accounts, secrets, config maps, cluster trust bundles or claims), and
//!   deleting pods bound to itself; the status and eviction of pods bound to itself;
//! - the status of claims (only capacity, conditions and the expansion fields);
//! - its own Lease in `kube-node-lease`, its own CSINode;
//! - service account tokens only when bound to a pod scheduled on itself.
//!
//! Differences: a PVC status refusal lists the differing fields instead of Go's struct diff; the
//! rules newer upstream releases have for ResourceSlices and PodCertificateRequests written by
//! nodes are not implemented.

use apimachinery::status::{ApiError, Qualified};
use serde_json::{Map, Value};

use super::{Attributes, Operation};
use crate::ApiServer;

mod pods;

const NODE_LEASE_NAMESPACE: &str = "kube-node-lease";
/// Labels a kubelet may set on its own Node (upstream `KubeletLabels`).
const KUBELET_LABELS: &[&str] = &[
    "kubernetes.io/hostname",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "beta.kubernetes.io/instance-type",
    "node.kubernetes.io/instance-type",
    "kubernetes.io/os",
    "kubernetes.io/arch",
    "beta.kubernetes.io/os",
    "beta.kubernetes.io/arch",
];
/// Label namespaces (and their subdomains) a kubelet may use (upstream `KubeletLabelNamespaces`).
const KUBELET_LABEL_NAMESPACES: &[&str] = &["kubelet.kubernetes.io", "node.kubernetes.io"];
const NODE_RESTRICTION_NAMESPACE: &str = "node-restriction.kubernetes.io";
/// The most differing fields a PVC status refusal lists.
const MAX_LISTED_DIFFERENCES: usize = 20;

pub use crate::authn::node_identity;

/// The object `key` of the resource stored under `storage`: from the watch cache, else from
/// storage (the cache may lag an object written an instant before).
pub(super) async fn lookup(
    api: &ApiServer,
    storage: &str,
    key: &str,
) -> Result<Option<Value>, ApiError> {
    if let Some(cached) = api.caches.get(storage).and_then(|c| c.get(key)) {
        return serde_json::from_slice(&cached.json)
            .map(Some)
            .map_err(ApiError::internal);
    }
    match api.store.get(key).await {
        Ok(Some(kv)) => serde_json::from_slice(&kv.value)
            .map(Some)
            .map_err(ApiError::internal),
        Ok(None) => Ok(None),
        Err(e) => Err(ApiError::internal(e)),
    }
}

/// What the decision reads besides the request's objects (upstream: its pod and node listers).
#[derive(Debug, Default)]
pub struct Lookups {
    /// The pod an eviction or a token request names; `None` when it does not exist.
    pub pod: Option<Value>,
    /// The requesting node's Node; `None` when it does not exist.
    pub node: Option<Value>,
}

/// The plugin (upstream `NodeRestriction`): mutating phase (as upstream's `Admit`), on creates,
/// updates and deletes by nodes.
pub struct NodeRestriction;

#[async_trait::async_trait]
impl super::Plugin for NodeRestriction {
    fn name(&self) -> &'static str {
        "NodeRestriction"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        matches!(
            attrs.operation,
            Operation::Create | Operation::Update | Operation::Delete
        ) && node_identity(attrs.user).is_some()
    }

    async fn admit(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let lookups = fetch(api, attrs, object).await?;
        check(attrs, object, old, &lookups)
    }
}

/// Reads what [`check`] will need for this request, and nothing else.
async fn fetch(
    api: &ApiServer,
    attrs: &Attributes<'_>,
    object: &Value,
) -> Result<Lookups, ApiError> {
    let mut lookups = Lookups::default();
    let Some(node) = node_identity(attrs.user).filter(|n| !n.is_empty()) else {
        return Ok(lookups);
    };
    if !attrs.group.is_empty() || attrs.operation != Operation::Create {
        return Ok(lookups);
    }
    let ns = attrs.namespace;
    match (attrs.resource, attrs.subresource) {
        ("pods", None) => lookups.node = lookup(api, "nodes", &format!("/nodes/{node}")).await?,
        ("pods", Some("eviction")) => {
            let name = pods::evicted_pod_name(attrs, object);
            if !name.is_empty() {
                lookups.pod = lookup(api, "pods", &format!("/pods/{ns}/{name}")).await?;
            }
        }
        ("serviceaccounts", Some("token")) => {
            let name = object
                .pointer("/spec/boundObjectRef/name")
                .and_then(Value::as_str)
                .unwrap_or("");
            if !name.is_empty() {
                lookups.pod = lookup(api, "pods", &format!("/pods/{ns}/{name}")).await?;
            }
        }
        _ => {}
    }
    Ok(lookups)
}

/// The 403 of this plugin (upstream `admission.NewForbidden`): about the request's resource, named
/// by the request's name, else the object's name or generateName.
fn forbid(attrs: &Attributes<'_>, object: &Value, why: &str) -> ApiError {
    let name = match attrs.name {
        "" => match crate::objects::name(object) {
            "" => crate::objects::meta_str(object, "generateName").unwrap_or(""),
            name => name,
        },
        name => name,
    };
    ApiError::forbidden_about(&Qualified::new(attrs.group, attrs.resource), name, why)
}

/// The decision for a request by a node.
pub fn check(
    attrs: &Attributes<'_>,
    object: &Value,
    old: Option<&Value>,
    lookups: &Lookups,
) -> Result<(), ApiError> {
    let Some(node) = node_identity(attrs.user) else {
        return Ok(());
    };
    if node.is_empty() {
        return Err(forbid(
            attrs,
            object,
            &format!("could not determine node from user {:?}", attrs.user.name),
        ));
    }
    let null = Value::Null;
    let old = old.unwrap_or(&null);
    match (attrs.group, attrs.resource) {
        ("", "pods") => match attrs.subresource {
            None => pods::check_pod(node, attrs, object, old, lookups),
            Some("status") => pods::check_pod_status(node, attrs, object, old),
            Some("eviction") => pods::check_pod_eviction(node, attrs, object, lookups),
            Some(other) => Err(forbid(
                attrs,
                object,
                &format!(
                    "unexpected pod subresource {other:?}, only 'status' and 'eviction' are allowed"
                ),
            )),
        },
        ("", "nodes") => check_node(node, attrs, object, old),
        ("", "persistentvolumeclaims") => match attrs.subresource {
            Some("status") => check_pvc_status(node, attrs, object, old),
            _ => Err(forbid(attrs, object, "may only update PVC status")),
        },
        ("", "serviceaccounts") => check_service_account(attrs, object, lookups),
        ("coordination.k8s.io", "leases") => {
            if attrs.namespace != NODE_LEASE_NAMESPACE {
                return Err(forbid(
                    attrs,
                    object,
                    &format!(
                        "can only access leases in the {NODE_LEASE_NAMESPACE:?} system namespace"
                    ),
                ));
            }
            same_name(node, attrs, object, "node lease")
        }
        ("storage.k8s.io", "csinodes") => same_name(node, attrs, object, "CSINode"),
        _ => Ok(()),
    }
}

/// Leases and CSINodes: only the node's own (on create the object names it).
fn same_name(
    node: &str,
    attrs: &Attributes<'_>,
    object: &Value,
    what: &str,
) -> Result<(), ApiError> {
    let name = match attrs.operation {
        Operation::Create => crate::objects::name(object),
        _ => attrs.name,
    };
    if name != node {
        return Err(forbid(
            attrs,
            object,
            &format!("can only access {what} with the same name as the requesting node"),
        ));
    }
    Ok(())
}

/// A string map at `pointer`; absent, null and empty are the same (Go's semantic equality).
fn string_map<'a>(obj: &'a Value, pointer: &str) -> Option<&'a Map<String, Value>> {
    obj.pointer(pointer)
        .and_then(Value::as_object)
        .filter(|m| !m.is_empty())
}

/// A list at `pointer`; absent, null and empty are the same.
fn list<'a>(obj: &'a Value, pointer: &str) -> &'a [Value] {
    obj.pointer(pointer)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

fn label_namespace(key: &str) -> &str {
    key.split_once('/').map(|(ns, _)| ns).unwrap_or("")
}

fn in_namespace(namespace: &str, domain: &str) -> bool {
    namespace == domain
        || namespace
            .strip_suffix(domain)
            .is_some_and(|p| p.ends_with('.'))
}

/// Whether a node may not set, change or remove this label (upstream `getForbiddenLabels`).
pub fn is_forbidden_label(key: &str) -> bool {
    let namespace = label_namespace(key);
    if in_namespace(namespace, NODE_RESTRICTION_NAMESPACE) {
        return true;
    }
    let kubernetes = in_namespace(namespace, "kubernetes.io") || in_namespace(namespace, "k8s.io");
    let kubelet = KUBELET_LABELS.contains(&key)
        || KUBELET_LABEL_NAMESPACES
            .iter()
            .any(|allowed| in_namespace(namespace, allowed));
    kubernetes && !kubelet
}

/// The forbidden labels among those that differ between `new` and `old`, sorted.
fn forbidden_label_changes(new: &Value, old: &Value) -> Vec<String> {
    let empty = Map::new();
    let new = string_map(new, "/metadata/labels").unwrap_or(&empty);
    let old = string_map(old, "/metadata/labels").unwrap_or(&empty);
    let mut forbidden: Vec<String> = new
        .iter()
        .filter(|(k, v)| old.get(*k) != Some(v))
        .chain(old.iter().filter(|(k, v)| new.get(*k) != Some(v)))
        .map(|(k, _)| k.clone())
        .filter(|k| is_forbidden_label(k))
        .collect();
    forbidden.sort();
    forbidden.dedup();
    forbidden
}

fn check_node(
    node: &str,
    attrs: &Attributes<'_>,
    object: &Value,
    old: &Value,
) -> Result<(), ApiError> {
    let subject = if object.is_null() { old } else { object };
    if attrs.name != node {
        return Err(forbid(
            attrs,
            subject,
            &format!(
                "node {node:?} is not allowed to modify node {:?}",
                attrs.name
            ),
        ));
    }
    let config_source = |n: &Value| {
        n.pointer("/spec/configSource")
            .filter(|c| !c.is_null())
            .cloned()
    };
    match attrs.operation {
        Operation::Create => {
            if config_source(object).is_some() {
                // Upstream's wording ("pods") for a node.
                return Err(forbid(
                    attrs,
                    object,
                    &format!(
                        "node {node:?} is not allowed to create pods with a non-nil configSource"
                    ),
                ));
            }
            let forbidden = forbidden_label_changes(object, &Value::Null);
            if !forbidden.is_empty() {
                return Err(forbid(
                    attrs,
                    object,
                    &format!(
                        "node {node:?} is not allowed to set the following labels: {}",
                        forbidden.join(", ")
                    ),
                ));
            }
        }
        Operation::Update => {
            let new_source = config_source(object);
            if new_source.is_some() && new_source != config_source(old) {
                return Err(forbid(
                    attrs,
                    object,
                    &format!("node {node:?} is not allowed to update configSource to a new non-nil configSource"),
                ));
            }
            if list(object, "/spec/taints") != list(old, "/spec/taints") {
                return Err(forbid(
                    attrs,
                    object,
                    &format!("node {node:?} is not allowed to modify taints"),
                ));
            }
            let forbidden = forbidden_label_changes(object, old);
            if !forbidden.is_empty() {
                // Upstream's message names no node here.
                return Err(forbid(
                    attrs,
                    object,
                    &format!("is not allowed to modify labels: {}", forbidden.join(", ")),
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

/// The claim with what a node may change (resourceVersion, managed fields, status capacity and
/// conditions, and the expansion-recovery fields) taken out.
fn pvc_without_node_fields(pvc: &Value) -> Value {
    let mut pvc = pvc.clone();
    if let Some(meta) = pvc.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        meta.remove("managedFields");
    }
    if let Some(status) = pvc.get_mut("status").and_then(Value::as_object_mut) {
        for field in [
            "capacity",
            "conditions",
            "allocatedResourceStatuses",
            "allocatedResources",
        ] {
            status.remove(field);
        }
    }
    pvc
}

/// Dotted paths where `a` and `b` differ, at most `room` of them.
fn differences(a: &Value, b: &Value, path: &str, room: usize, out: &mut Vec<String>) {
    if out.len() >= room || a == b {
        return;
    }
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let mut keys: Vec<&String> = x.keys().chain(y.keys()).collect();
            keys.sort();
            keys.dedup();
            for k in keys {
                let null = Value::Null;
                let child = if path.is_empty() {
                    k.clone()
                } else {
                    format!("{path}.{k}")
                };
                differences(
                    x.get(k).unwrap_or(&null),
                    y.get(k).unwrap_or(&null),
                    &child,
                    room,
                    out,
                );
            }
        }
        _ => out.push(path.to_string()),
    }
}

fn check_pvc_status(
    node: &str,
    attrs: &Attributes<'_>,
    object: &Value,
    old: &Value,
) -> Result<(), ApiError> {
    if attrs.operation != Operation::Update {
        return Err(forbid(
            attrs,
            object,
            &format!("unexpected operation {:?}", attrs.operation.as_str()),
        ));
    }
    let (new, old) = (
        pvc_without_node_fields(object),
        pvc_without_node_fields(old),
    );
    let mut changed = Vec::new();
    differences(&old, &new, "", MAX_LISTED_DIFFERENCES, &mut changed);
    if !changed.is_empty() {
        return Err(forbid(
            attrs,
            object,
            &format!(
                "node {node:?} is not allowed to update fields other than status.capacity and status.conditions: {}",
                changed.join(", ")
            ),
        ));
    }
    Ok(())
}

fn check_service_account(
    attrs: &Attributes<'_>,
    request: &Value,
    lookups: &Lookups,
) -> Result<(), ApiError> {
    if attrs.operation != Operation::Create || attrs.subresource != Some("token") {
        return Ok(());
    }
    let reference = request
        .pointer("/spec/boundObjectRef")
        .unwrap_or(&Value::Null);
    let field = |f: &str| reference[f].as_str().unwrap_or("");
    if field("apiVersion") != "v1" || field("kind") != "Pod" || field("name").is_empty() {
        return Err(forbid(
            attrs,
            request,
            "node requested token not bound to a pod",
        ));
    }
    let uid = field("uid");
    if uid.is_empty() {
        return Err(forbid(
            attrs,
            request,
            "node requested token with a pod binding without a uid",
        ));
    }
    let Some(pod) = &lookups.pod else {
        return Err(ApiError::not_found(
            &Qualified::new("", "pods"),
            field("name"),
        ));
    };
    if crate::objects::meta_str(pod, "uid") != Some(uid) {
        return Err(forbid(
            attrs,
            request,
            &format!("the UID in the bound object reference ({uid}) does not match the UID in record. The object might have been deleted and then recreated"),
        ));
    }
    let Some(node) = node_identity(attrs.user) else {
        return Ok(());
    };
    if pods::node_name_of(pod) != node {
        return Err(forbid(
            attrs,
            request,
            "node requested token bound to a pod scheduled on a different node",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
