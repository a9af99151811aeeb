//! The default ServiceCIDR (upstream `pkg/controlplane/controller/defaultservicecidr`, the API
//! server's `kubernetes-service-cidr-controller`): the `kubernetes` ServiceCIDR with
//! `--service-cluster-ip-range` as its `spec.cidrs`, created when missing (at start, and again every
//! 10 s, so a deleted one comes back) and marked `Ready=True` when it has no Ready condition yet and
//! its CIDRs are this server's. An existing one with other CIDRs is left alone, as upstream.
//!
//! Also starts the allocator's background work: [`start`] runs the first repair pass (Services of a
//! store written before IPAddresses existed get theirs) and then the periodic loop.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::{objects, ApiServer};

/// Upstream `DefaultServiceCIDRName`.
pub const DEFAULT_NAME: &str = "kubernetes";
/// How often the default ServiceCIDR is checked (upstream: 10 s).
const INTERVAL: Duration = Duration::from_secs(10);
/// How often the repair loop runs over everything.
const REPAIR_INTERVAL: Duration = Duration::from_secs(30);

/// Creates the default ServiceCIDR (and sets it Ready), then repairs once and starts the loops.
pub async fn start(api: &Arc<ApiServer>) -> Result<(), String> {
    let mut last = String::new();
    for _ in 0..50 {
        match ensure(api).await {
            Ok(()) => {
                last.clear();
                break;
            }
            Err(e) => last = e,
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    if !last.is_empty() {
        return Err(format!("cannot initialize the default ServiceCIDR: {last}"));
    }
    if let Err(e) = super::repair::run_once(api).await {
        tracing::warn!(error = %e, "ipallocator-repair-controller: first pass failed");
    }
    let api = api.clone();
    tokio::spawn(async move {
        let mut since_repair = Duration::ZERO;
        loop {
            tokio::time::sleep(INTERVAL).await;
            if let Err(e) = ensure(&api).await {
                tracing::info!(error = %e, "error trying to sync the default ServiceCIDR");
            }
            since_repair += INTERVAL;
            if since_repair >= REPAIR_INTERVAL {
                since_repair = Duration::ZERO;
                if let Err(e) = super::repair::run_once(&api).await {
                    tracing::warn!(error = %e, "ipallocator-repair-controller");
                }
            }
        }
    });
    Ok(())
}

/// The default ServiceCIDR as created.
pub fn default_object(cidrs: &[String]) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "ServiceCIDR",
        "metadata": {"name": DEFAULT_NAME},
        "spec": {"cidrs": cidrs},
    })
}

/// What the status of an existing default ServiceCIDR becomes: `None` to leave it (being deleted,
/// already judged, or not this server's CIDRs).
pub fn ready_status(obj: &Value, cidrs: &[String], now: &str) -> Option<Value> {
    if objects::meta_str(obj, "deletionTimestamp").is_some() {
        return None;
    }
    let has_ready = obj
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c.get("type").and_then(Value::as_str) == Some("Ready"))
        });
    if has_ready || obj.pointer("/spec/cidrs") != Some(&json!(cidrs)) {
        return None;
    }
    Some(json!({"conditions": [{
        "type": "Ready",
        "status": "True",
        "reason": "",
        "message": "Kubernetes default Service CIDR is ready",
        "lastTransitionTime": now,
    }]}))
}

/// One sync of the default ServiceCIDR; waits until this server's watch cache has seen it.
pub async fn ensure(api: &Arc<ApiServer>) -> Result<(), String> {
    let cidrs = vec![api.services.default_cidr().to_string()];
    let key = super::networking_key(api, "servicecidrs", DEFAULT_NAME);
    let mut kv = api.store.get(&key).await.map_err(|e| e.to_string())?;
    if kv.is_none() {
        tracing::info!(?cidrs, "Creating default ServiceCIDR");
        match crate::rest::create_internal(
            api,
            ("networking.k8s.io", "v1", "servicecidrs"),
            None,
            default_object(&cidrs),
        )
        .await
        {
            Ok(()) => {}
            Err(e) if e.code == 409 => {}
            Err(e) => return Err(format!("the default ServiceCIDR can not be created: {e}")),
        }
        kv = api.store.get(&key).await.map_err(|e| e.to_string())?;
    }
    let Some(kv) = kv else {
        return Err("the default ServiceCIDR vanished after its creation".into());
    };
    let mut revision = kv.mod_revision;
    let mut obj: Value = serde_json::from_slice(&kv.value).map_err(|e| e.to_string())?;
    if let Some(status) = ready_status(&obj, &cidrs, &objects::now_rfc3339()) {
        obj["status"] = status;
        let written = api
            .store
            .update(
                &key,
                objects::encode_for_storage(&obj),
                Some(kv.mod_revision),
            )
            .await
            .map_err(|e| format!("cannot set the default ServiceCIDR Ready: {e}"))?;
        revision = written.mod_revision;
    }
    if !api.caches.wait_for(revision, Duration::from_secs(30)).await {
        return Err("the watch cache did not catch up with the default ServiceCIDR".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_servicecidr_becomes_ready_once() {
        let cidrs = vec!["10.96.0.0/12".to_string()];
        let obj = default_object(&cidrs);
        assert_eq!(obj["metadata"]["name"], "kubernetes");
        let status = ready_status(&obj, &cidrs, "2026-01-01T00:00:00Z").unwrap();
        assert_eq!(status["conditions"][0]["type"], "Ready");
        assert_eq!(status["conditions"][0]["status"], "True");
        assert_eq!(
            status["conditions"][0]["message"],
            "Kubernetes default Service CIDR is ready"
        );
        let mut judged = obj.clone();
        judged["status"] = status;
        assert_eq!(ready_status(&judged, &cidrs, "x"), None);
        assert_eq!(
            ready_status(&obj, &["10.0.0.0/16".to_string()], "x"),
            None,
            "another range"
        );
        let mut deleting = obj.clone();
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        assert_eq!(ready_status(&deleting, &cidrs, "x"), None);
    }
}
