//! What exists after start (upstream's `bootstrap-controller` and system namespaces): the `default`,
//! `kube-system`, `kube-public` and `kube-node-lease` namespaces and the `kubernetes` Service in
//! `default`, and the default RBAC policy ([`crate::authz::bootstrap_policy`]), created through the same REST path as any client's objects, so they get the same defaults.

use std::sync::Arc;

use serde_json::json;

use crate::ApiServer;

pub const SYSTEM_NAMESPACES: &[&str] =
    &["default", "kube-system", "kube-public", "kube-node-lease"];

pub async fn ensure_defaults(api: &Arc<ApiServer>) -> Result<(), String> {
    for ns in SYSTEM_NAMESPACES {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        create_if_missing(api, "namespaces", None, obj).await?;
    }
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
    create_if_missing(api, "services", Some("default"), svc).await?;
    let (roles, bindings) = crate::authz::bootstrap_policy::objects()?;
    for role in roles {
        create_if_missing(api, "clusterroles", None, role).await?;
    }
    for binding in bindings {
        create_if_missing(api, "clusterrolebindings", None, binding).await?;
    }
    Ok(())
}

async fn create_if_missing(
    api: &Arc<ApiServer>,
    plural: &str,
    namespace: Option<&str>,
    obj: serde_json::Value,
) -> Result<(), String> {
    let name = crate::objects::name(&obj).to_string();
    let key = match namespace {
        Some(ns) => format!("/{plural}/{ns}/{name}"),
        None => format!("/{plural}/{name}"),
    };
    if api
        .store
        .get(&key)
        .await
        .map_err(|e| e.to_string())?
        .is_some()
    {
        return Ok(());
    }
    match crate::rest::create_internal(api, plural, namespace, obj).await {
        Ok(()) => Ok(()),
        Err(e) if e.code == 409 => Ok(()),
        Err(e) => Err(format!("cannot create {plural}/{name}: {e}")),
    }
}
