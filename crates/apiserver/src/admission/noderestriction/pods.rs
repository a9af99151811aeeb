//! NodeRestriction's rules for pods: mirror pods only, deletes, status and evictions only of pods
//! bound to the node.

use apimachinery::podrefs;
use apimachinery::status::{ApiError, Qualified};
use serde_json::Value;

use super::{forbid, string_map, Lookups};
use crate::admission::{Attributes, Operation};

pub(super) const MIRROR_POD_ANNOTATION: &str = "kubernetes.io/config.mirror";

pub(super) fn node_name_of(pod: &Value) -> &str {
    pod.pointer("/spec/nodeName")
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub(super) fn check_pod(
    node: &str,
    attrs: &Attributes<'_>,
    object: &Value,
    old: &Value,
    lookups: &Lookups,
) -> Result<(), ApiError> {
    match attrs.operation {
        Operation::Create => check_mirror_pod(node, attrs, object, lookups),
        Operation::Delete => {
            if old.is_null() {
                return Err(ApiError::not_found(&Qualified::new("", "pods"), attrs.name));
            }
            if node_name_of(old) != node {
                return Err(forbid(
                    attrs,
                    old,
                    &format!("node {node:?} can only delete pods with spec.nodeName set to itself"),
                ));
            }
            Ok(())
        }
        other => Err(forbid(
            attrs,
            object,
            &format!(
                "unexpected operation {:?}, node {node:?} can only create and delete mirror pods",
                other.as_str()
            ),
        )),
    }
}

fn check_mirror_pod(
    node: &str,
    attrs: &Attributes<'_>,
    pod: &Value,
    lookups: &Lookups,
) -> Result<(), ApiError> {
    let refuse = |why: String| Err(forbid(attrs, pod, &why));
    let annotated = pod
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(MIRROR_POD_ANNOTATION));
    if !annotated {
        return refuse(format!("pod does not have {MIRROR_POD_ANNOTATION:?} annotation, node {node:?} can only create mirror pods"));
    }
    if node_name_of(pod) != node {
        return refuse(format!(
            "node {node:?} can only create pods with spec.nodeName set to itself"
        ));
    }
    let owners = pod
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[]);
    let owner = match owners {
        [] => {
            return refuse(format!(
                "node {node:?} can only create pods with an owner reference set to itself"
            ))
        }
        [one] => one,
        _ => {
            return refuse(format!(
                "node {node:?} can only create pods with a single owner reference set to itself"
            ))
        }
    };
    if owner["apiVersion"] != "v1" || owner["kind"] != "Node" || owner["name"] != node {
        return refuse(format!(
            "node {node:?} can only create pods with an owner reference set to itself"
        ));
    }
    if owner["controller"].as_bool() != Some(true) {
        return refuse(format!(
            "node {node:?} can only create pods with a controller owner reference set to itself"
        ));
    }
    if owner["blockOwnerDeletion"].as_bool() == Some(true) {
        return refuse(format!(
            "node {node:?} must not set blockOwnerDeletion on an owner reference"
        ));
    }
    let Some(node_object) = &lookups.node else {
        return Err(ApiError::not_found(&Qualified::new("", "nodes"), node));
    };
    let owner_uid = owner["uid"].as_str().unwrap_or("");
    let node_uid = crate::objects::meta_str(node_object, "uid").unwrap_or("");
    if owner_uid != node_uid {
        // Upstream's wording, arguments in its order.
        return refuse(format!(
            "node {node} UID mismatch: expected {owner_uid} got {node_uid}"
        ));
    }
    let spec = pod.get("spec").unwrap_or(&Value::Null);
    if spec["serviceAccountName"]
        .as_str()
        .is_some_and(|s| !s.is_empty())
    {
        return refuse(format!(
            "node {node:?} can not create pods that reference a service account"
        ));
    }
    if references_secrets(spec) {
        return refuse(format!(
            "node {node:?} can not create pods that reference secrets"
        ));
    }
    if references_config_maps(spec) {
        return refuse(format!(
            "node {node:?} can not create pods that reference configmaps"
        ));
    }
    let volumes = spec["volumes"].as_array().map(Vec::as_slice).unwrap_or(&[]);
    let trust_bundles = volumes.iter().any(|v| {
        podrefs::projected_sources(v)
            .any(|s| s.get("clusterTrustBundle").is_some_and(|b| !b.is_null()))
    });
    if trust_bundles {
        return refuse(format!(
            "node {node:?} can not create pods that reference clustertrustbundles"
        ));
    }
    if volumes
        .iter()
        .any(|v| v.get("persistentVolumeClaim").is_some_and(|c| !c.is_null()))
    {
        return refuse(format!(
            "node {node:?} can not create pods that reference persistentvolumeclaims"
        ));
    }
    Ok(())
}

/// Whether the spec names any secret (upstream `VisitPodSecretNames`).
pub fn references_secrets(spec: &Value) -> bool {
    !podrefs::pod_secret_names(spec).is_empty()
}

/// Whether the spec names any config map (upstream `VisitPodConfigmapNames`).
pub fn references_config_maps(spec: &Value) -> bool {
    !podrefs::pod_config_map_names(spec).is_empty()
}

pub(super) fn check_pod_status(
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
    if node_name_of(old) != node {
        return Err(forbid(
            attrs,
            object,
            &format!("node {node:?} can only update pod status for pods with spec.nodeName set to itself"),
        ));
    }
    if string_map(object, "/metadata/labels") != string_map(old, "/metadata/labels") {
        return Err(forbid(
            attrs,
            object,
            &format!("node {node:?} cannot update labels through pod status"),
        ));
    }
    let claims = |pod: &Value| -> Vec<(Value, Value)> {
        pod.pointer("/status/resourceClaimStatuses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|s| (s["name"].clone(), s["resourceClaimName"].clone()))
            .collect()
    };
    if claims(object) != claims(old) {
        // Upstream's spelling.
        return Err(forbid(
            attrs,
            object,
            &format!("node {node:?} cannot update resource claim statues"),
        ));
    }
    Ok(())
}

/// The pod an eviction is for: the URL's name, else the Eviction's.
pub(super) fn evicted_pod_name<'a>(attrs: &Attributes<'a>, eviction: &'a Value) -> &'a str {
    match attrs.name {
        "" => crate::objects::name(eviction),
        name => name,
    }
}

pub(super) fn check_pod_eviction(
    node: &str,
    attrs: &Attributes<'_>,
    eviction: &Value,
    lookups: &Lookups,
) -> Result<(), ApiError> {
    if attrs.operation != Operation::Create {
        return Err(forbid(
            attrs,
            eviction,
            &format!("unexpected operation {}", attrs.operation.as_str()),
        ));
    }
    let name = evicted_pod_name(attrs, eviction);
    if name.is_empty() {
        return Err(forbid(
            attrs,
            eviction,
            "could not determine pod from request data",
        ));
    }
    let Some(pod) = &lookups.pod else {
        return Err(ApiError::not_found(&Qualified::new("", "pods"), name));
    };
    if node_name_of(pod) != node {
        return Err(forbid(
            attrs,
            eviction,
            &format!("node {node} can only evict pods with spec.nodeName set to itself"),
        ));
    }
    Ok(())
}
