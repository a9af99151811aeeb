//! The Node authorizer (upstream `plugin/pkg/auth/authorizer/node/node_authorizer.go`): a kubelet,
//! user `system:node:<name>` in group `system:nodes`, reads only the secrets, config maps, claims,
//! volumes, service account tokens and resource claims its own pods name, its own Node, Lease and
//! CSINode, and lists pods and ResourceSlices only with a field selector on its name. Everything
//! else a node may do comes from the `system:node` ClusterRole's rules, as upstream's static node
//! rules. Writes that need the object's content (create a mirror pod, update its Node) are allowed
//! here and narrowed by the NodeRestriction admission plugin, as upstream.
//!
//! Upstream's feature gate AuthorizeNodeWithSelectors (on by default since 1.32) is always on.

pub mod graph;
mod populator;

use apimachinery::fields::{self, FieldOperator};

pub use populator::start;

use super::rbac::Rule;
use super::Attributes;
use graph::{Graph, Kind, Target};

/// The node authorizer's answer: upstream's DecisionAllow, or DecisionNoOpinion with a reason (the
/// next authorizer, RBAC, still gets its say).
#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    Allow,
    NoOpinion(String),
}

use Decision::{Allow, NoOpinion};

fn no_opinion(reason: impl Into<String>) -> Decision {
    NoOpinion(reason.into())
}

/// Decides a request of node `node` (the name from its user, possibly empty).
pub fn authorize(
    graph: &Graph,
    node: &str,
    attrs: &Attributes<'_>,
    node_rules: &[Rule],
) -> Decision {
    if node.is_empty() {
        return no_opinion(format!(
            "unknown node for user {}",
            apimachinery::go_format::quote(&attrs.user.name)
        ));
    }
    if attrs.resource_request {
        let decided = match (attrs.group, attrs.resource) {
            ("", "secrets") => Some(read_namespaced(graph, node, Kind::Secret, attrs)),
            ("", "configmaps") => Some(read_namespaced(graph, node, Kind::ConfigMap, attrs)),
            ("", "persistentvolumeclaims") if attrs.subresource == "status" => {
                Some(status_update(graph, node, attrs))
            }
            ("", "persistentvolumeclaims") => Some(get(graph, node, attrs, |ns, name| {
                Target::Object(Kind::PersistentVolumeClaim, ns, name)
            })),
            ("", "persistentvolumes") => Some(get(graph, node, attrs, |_, name| {
                Target::PersistentVolume(name)
            })),
            ("resource.k8s.io", "resourceclaims") => Some(get(graph, node, attrs, |ns, name| {
                Target::Object(Kind::ResourceClaim, ns, name)
            })),
            ("storage.k8s.io", "volumeattachments") => Some(get(graph, node, attrs, |_, name| {
                Target::VolumeAttachment(name)
            })),
            ("", "serviceaccounts") => Some(create_token(graph, node, attrs)),
            ("coordination.k8s.io", "leases") => Some(lease(node, attrs)),
            ("storage.k8s.io", "csinodes") => Some(csi_node(node, attrs)),
            ("resource.k8s.io", "resourceslices") => Some(resource_slice(graph, node, attrs)),
            ("", "nodes") => Some(node_object(node, attrs)),
            ("", "pods") => Some(pod(graph, node, attrs)),
            _ => None,
        };
        if let Some(decision) = decided {
            return decision;
        }
    }
    if node_rules.iter().any(|r| r.allows(attrs)) {
        Allow
    } else {
        no_opinion("")
    }
}

/// Allowed when the graph links the object to the node (upstream `authorize`).
fn related(graph: &Graph, node: &str, attrs: &Attributes<'_>, target: Target<'_>) -> Decision {
    if attrs.name.is_empty() {
        return no_opinion("No Object name found");
    }
    if graph.knows_node(node) && graph.has_path(node, target) {
        Allow
    } else {
        no_opinion(format!(
            "no relationship found between node '{node}' and this object"
        ))
    }
}

/// Secrets and config maps: get, and list/watch of one object (a `metadata.name` field selector).
fn read_namespaced(graph: &Graph, node: &str, kind: Kind, attrs: &Attributes<'_>) -> Decision {
    if !matches!(attrs.verb, "get" | "list" | "watch") {
        return no_opinion("can only read resources of this type");
    }
    if !attrs.subresource.is_empty() {
        return no_opinion("cannot read subresource");
    }
    if attrs.namespace.is_empty() {
        return no_opinion("can only read namespaced object of this type");
    }
    related(
        graph,
        node,
        attrs,
        Target::Object(kind, attrs.namespace, attrs.name),
    )
}

fn get<'a>(
    graph: &Graph,
    node: &str,
    attrs: &Attributes<'a>,
    target: impl FnOnce(&'a str, &'a str) -> Target<'a>,
) -> Decision {
    if attrs.verb != "get" {
        return no_opinion("can only get individual resources of this type");
    }
    if !attrs.subresource.is_empty() {
        return no_opinion("cannot get subresource");
    }
    related(graph, node, attrs, target(attrs.namespace, attrs.name))
}

/// A claim's status: update and patch (the kubelet records an online resize).
fn status_update(graph: &Graph, node: &str, attrs: &Attributes<'_>) -> Decision {
    if !matches!(attrs.verb, "update" | "patch") {
        return no_opinion("can only get/update/patch this type");
    }
    related(
        graph,
        node,
        attrs,
        Target::Object(Kind::PersistentVolumeClaim, attrs.namespace, attrs.name),
    )
}

/// Tokens of the service accounts the node's pods run as.
fn create_token(graph: &Graph, node: &str, attrs: &Attributes<'_>) -> Decision {
    if attrs.verb != "create" || attrs.name.is_empty() {
        return no_opinion("can only create tokens for individual service accounts");
    }
    if attrs.subresource != "token" {
        return no_opinion("can only create token subresource of serviceaccount");
    }
    related(
        graph,
        node,
        attrs,
        Target::Object(Kind::ServiceAccount, attrs.namespace, attrs.name),
    )
}

/// The node's own Lease in `kube-node-lease` (the name is unknown on create: NodeRestriction checks
/// it there).
fn lease(node: &str, attrs: &Attributes<'_>) -> Decision {
    if !matches!(attrs.verb, "get" | "create" | "update" | "patch" | "delete") {
        return no_opinion("can only get, create, update, patch, or delete a node lease");
    }
    if attrs.namespace != "kube-node-lease" {
        return no_opinion("can only access leases in the \"kube-node-lease\" system namespace");
    }
    if attrs.verb != "create" && attrs.name != node {
        return no_opinion("can only access node lease with the same name as the requesting node");
    }
    Allow
}

fn csi_node(node: &str, attrs: &Attributes<'_>) -> Decision {
    if !matches!(attrs.verb, "get" | "create" | "update" | "patch" | "delete") {
        return no_opinion("can only get, create, update, patch, or delete a CSINode");
    }
    if !attrs.subresource.is_empty() {
        return no_opinion("cannot authorize CSINode subresources");
    }
    if attrs.verb != "create" && attrs.name != node {
        return no_opinion("can only access CSINode with the same name as the requesting node");
    }
    Allow
}

/// Whether the request's field selector requires `field=value` (one `=`, as upstream compares
/// `selection.Equals`).
fn selects(attrs: &Attributes<'_>, field: &str, value: &str) -> bool {
    let Ok(selector) = fields::parse(attrs.field_selector) else {
        return false;
    };
    selector
        .requirements()
        .iter()
        .any(|r| r.field == field && r.operator == FieldOperator::Equals && r.value == value)
}

fn resource_slice(graph: &Graph, node: &str, attrs: &Attributes<'_>) -> Decision {
    if !attrs.subresource.is_empty() {
        return no_opinion("cannot authorize ResourceSlice subresources");
    }
    match attrs.verb {
        // NodeRestriction checks the new slice's node.
        "create" => Allow,
        "get" | "update" | "patch" | "delete" => {
            related(graph, node, attrs, Target::ResourceSlice(attrs.name))
        }
        "watch" | "list" | "deletecollection" => {
            if selects(attrs, "spec.nodeName", node) || selects(attrs, "nodeName", node) {
                Allow
            } else {
                no_opinion(
                    "can only list/watch/deletecollection resourceslices with nodeName field selector",
                )
            }
        }
        _ => no_opinion(
            "only the following verbs are allowed for a ResourceSlice: get, watch, list, create, update, patch, delete, deletecollection",
        ),
    }
}

/// The node's own Node object; writes are NodeRestriction's to narrow.
fn node_object(node: &str, attrs: &Attributes<'_>) -> Decision {
    match (attrs.subresource, attrs.verb) {
        ("", "create" | "update" | "patch") | ("status", "update" | "patch") => Allow,
        ("", "get" | "list" | "watch") => {
            if attrs.name == node {
                Allow
            } else if attrs.name.is_empty() {
                no_opinion(format!(
                    "node '{node}' cannot read all nodes, only its own Node object"
                ))
            } else {
                no_opinion(format!(
                    "node '{node}' cannot read '{}', only its own Node object",
                    attrs.name
                ))
            }
        }
        _ => no_opinion(""),
    }
}

fn pod(graph: &Graph, node: &str, attrs: &Attributes<'_>) -> Decision {
    let pod_target = Target::Object(Kind::Pod, attrs.namespace, attrs.name);
    match (attrs.subresource, attrs.verb) {
        ("", "get") => get(graph, node, attrs, |ns, name| {
            Target::Object(Kind::Pod, ns, name)
        }),
        ("", "list" | "watch") => {
            if selects(attrs, "spec.nodeName", node) {
                Allow
            } else if !attrs.name.is_empty() {
                related(graph, node, attrs, pod_target)
            } else {
                no_opinion("can only list/watch pods with spec.nodeName field selector")
            }
        }
        // Mirror pods; NodeRestriction limits them to the node's own.
        ("", "create" | "delete") | ("status", "update" | "patch") | ("eviction", "create") => {
            Allow
        }
        _ => no_opinion(""),
    }
}

#[cfg(test)]
mod tests;
