//! What exists after start (upstream's `bootstrap-controller`, system namespaces and the
//! `rbac/bootstrap-roles` post-start hook): the `default`, `kube-system`, `kube-public` and
//! `kube-node-lease` namespaces, the `kubernetes` Service in `default`, the two system PriorityClasses
//! (`scheduling/bootstrap-system-priority-classes`), and the default ClusterRoles and
//! ClusterRoleBindings ([`rbac`]), created through the same REST path as any client's objects, so they
//! get the same defaults.

pub mod flowcontrol;
pub mod rbac;

use std::sync::Arc;

use serde_json::json;

use crate::ApiServer;

pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

/// Upstream's `scheduling.SystemPriorityClasses`: name, value, description.
const SYSTEM_PRIORITY_CLASSES: &[(&str, i64, &str)] = &[
    (
        "system-node-critical",
        2_000_001_000,
        "Used for system critical pods that must not be moved from their current node.",
    ),
    (
        "system-cluster-critical",
        2_000_000_000,
        "Used for system critical pods that must run in the cluster, but can be moved to another node if necessary.",
    ),
];

pub async fn ensure_defaults(api: &Arc<ApiServer>) -> Result<(), String> {
    for ns in SYSTEM_NAMESPACES {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        create_if_missing(api, ("", "v1", "namespaces"), None, obj).await?;
    }
    for (name, value, description) in SYSTEM_PRIORITY_CLASSES {
        let obj = json!({
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "description": description,
        });
        create_if_missing(
            api,
            ("scheduling.k8s.io", "v1", "priorityclasses"),
            None,
            obj,
        )
        .await?;
    }
    crate::allocator::default_cidr::start(api).await?;
    let svc = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "kubernetes", "namespace": "default", "labels": {"component": "apiserver", "provider": "kubernetes"}},
        "spec": {
            "clusterIP": api.services.first_ip(),
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": api.secure_port}],
            "sessionAffinity": "None",
            "type": "ClusterIP",
            "internalTrafficPolicy": "Cluster",
        },
    });
    create_if_missing(api, ("", "v1", "services"), Some("default"), svc).await?;
    flowcontrol::ensure(api).await?;
    rbac::ensure(api).await
}

/// The storage key of an object of `(group, version, plural)`.
fn key_of(
    api: &ApiServer,
    (group, version, plural): (&str, &str, &str),
    namespace: Option<&str>,
    name: &str,
) -> Result<String, String> {
    let resource = api
        .registry
        .get(group, version, plural)
        .ok_or_else(|| format!("no resource {plural}.{group}/{version}"))?;
    Ok(match namespace {
        Some(ns) => format!("/{}/{ns}/{name}", resource.storage),
        None => format!("/{}/{name}", resource.storage),
    })
}

async fn create_if_missing(
    api: &Arc<ApiServer>,
    gvr: (&str, &str, &str),
    namespace: Option<&str>,
    obj: serde_json::Value,
) -> Result<(), String> {
    let name = crate::objects::name(&obj).to_string();
    let key = key_of(api, gvr, namespace, &name)?;
    if api
        .store
        .get(&key)
        .await
        .map_err(|e| e.to_string())?
        .is_some()
    {
        return Ok(());
    }
    match crate::rest::create_internal(api, gvr, namespace, obj).await {
        Ok(()) => Ok(()),
        Err(e) if e.code == 409 => Ok(()),
        Err(e) => Err(format!("cannot create {}/{name}: {e}", gvr.2)),
    }
}
