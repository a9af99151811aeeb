//! API server identity (upstream's `start-kube-apiserver-identity-lease-controller` and
//! `start-kube-apiserver-identity-lease-garbage-collector` post-start hooks): each server keeps a
//! Lease `kube-system/apiserver-<hash>` labelled `apiserver.kubernetes.io/identity=kube-apiserver`,
//! renewed every `renew_interval` with `leaseDurationSeconds` of `lease_duration`, and deletes the
//! identity Leases of servers that stopped renewing theirs.
//!
//! Upstream hashes the host name alone, so two servers on one host share (and fight over) one Lease;
//! here the hash also covers the advertised address and port, which stay the same across restarts of
//! one server, so a restarted server takes its Lease back as upstream's does.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use crate::{objects, ApiServer};

/// The label every identity Lease carries, and its value for kube-apiserver.
pub const IDENTITY_LABEL: &str = "apiserver.kubernetes.io/identity";
pub const IDENTITY_VALUE: &str = "kube-apiserver";
const NAMESPACE: &str = "kube-system";

#[derive(Clone, Debug)]
pub struct IdentityConfig {
    /// `--identity-lease-duration-seconds` (upstream 3600).
    pub lease_duration: Duration,
    /// `--identity-lease-renew-interval-seconds` (upstream 10).
    pub renew_interval: Duration,
}

impl Default for IdentityConfig {
    fn default() -> IdentityConfig {
        IdentityConfig {
            lease_duration: Duration::from_secs(3600),
            renew_interval: Duration::from_secs(10),
        }
    }
}

/// This server's Lease name: `apiserver-` and 26 hex digits of a SHA-256, as upstream's names look.
pub fn lease_name(hostname: &str, advertise: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{hostname}/{advertise}").as_bytes(),
    );
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("apiserver-{}", &hex[..26])
}

/// The machine's host name (the `kubernetes.io/hostname` label), as the kernel reports it.
pub fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "localhost".into())
}

/// `metav1.MicroTime` as Leases carry it.
fn micro_time(t: chrono::DateTime<chrono::Utc>) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

/// The Lease this server creates the first time.
fn new_lease(name: &str, holder: &str, hostname: &str, duration: Duration, now: &str) -> Value {
    json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "labels": {IDENTITY_LABEL: IDENTITY_VALUE, "kubernetes.io/hostname": hostname},
        },
        "spec": {
            "holderIdentity": holder,
            "leaseDurationSeconds": duration.as_secs().max(1),
            "renewTime": now,
        },
    })
}

/// Whether an identity Lease's holder stopped renewing it: `renewTime + leaseDurationSeconds` is
/// past (a Lease without either is left alone, as upstream's collector does).
pub fn expired(lease: &Value, now: chrono::DateTime<chrono::Utc>) -> bool {
    let renew = lease
        .pointer("/spec/renewTime")
        .and_then(Value::as_str)
        .and_then(|s| chrono::DateTime::parse_from_rfc3339(s).ok());
    let duration = lease
        .pointer("/spec/leaseDurationSeconds")
        .and_then(Value::as_i64);
    match (renew, duration) {
        (Some(renew), Some(secs)) => renew + chrono::Duration::seconds(secs) < now,
        _ => false,
    }
}

/// Storage key of the Lease `name` in kube-system.
fn key(api: &ApiServer, name: &str) -> Option<String> {
    let leases = api.registry.get("coordination.k8s.io", "v1", "leases")?;
    Some(format!("/{}/{NAMESPACE}/{name}", leases.storage))
}

/// Renews this server's Lease and collects the expired ones of others, forever.
pub async fn run(api: Arc<ApiServer>, config: IdentityConfig, name: String) {
    let host = hostname();
    let holder = format!("{name}_{}", uuid::Uuid::new_v4());
    let mut renew = tokio::time::interval(config.renew_interval);
    renew.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Upstream's collector checks once per lease duration.
    let mut collect = tokio::time::interval(config.lease_duration);
    collect.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = renew.tick() => {
                if let Err(e) = renew_once(&api, &config, &name, &holder, &host).await {
                    tracing::warn!(lease = %name, error = %e, "cannot renew the API server identity Lease");
                }
            }
            _ = collect.tick() => collect_expired(&api, &name).await,
        }
    }
}

async fn renew_once(
    api: &Arc<ApiServer>,
    config: &IdentityConfig,
    name: &str,
    holder: &str,
    host: &str,
) -> Result<(), String> {
    let key = key(api, name).ok_or("no Lease resource")?;
    let now = micro_time(chrono::Utc::now());
    let Some(kv) = api.store.get(&key).await.map_err(|e| e.to_string())? else {
        let lease = new_lease(name, holder, host, config.lease_duration, &now);
        return crate::rest::create_internal(
            api,
            ("coordination.k8s.io", "v1", "leases"),
            Some(NAMESPACE),
            lease,
        )
        .await
        .or_else(|e| {
            if e.code == 409 {
                Ok(())
            } else {
                Err(e.to_string())
            }
        });
    };
    let mut lease: Value = serde_json::from_slice(&kv.value).map_err(|e| e.to_string())?;
    lease["spec"]["holderIdentity"] = json!(holder);
    lease["spec"]["leaseDurationSeconds"] = json!(config.lease_duration.as_secs().max(1));
    lease["spec"]["renewTime"] = json!(now);
    // A conflict means someone else wrote it in between; the next tick tries again.
    match api
        .store
        .update(
            &key,
            objects::encode_for_storage(&lease),
            Some(kv.mod_revision),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.is_conflict() || e.is_not_found() => Ok(()),
        Err(e) => Err(e.to_string()),
    }
}

/// Deletes the identity Leases (never this server's own) whose holders stopped renewing them,
/// each only if it is unchanged since it was read.
async fn collect_expired(api: &Arc<ApiServer>, own: &str) {
    let Some(prefix) = key(api, "") else { return };
    // Bounded: one page of Leases in kube-system is plenty for the API servers of one cluster.
    let page = match api
        .store
        .list(storage::ListOptions {
            prefix: &prefix,
            limit: Some(10_000),
            ..Default::default()
        })
        .await
    {
        Ok(page) => page,
        Err(e) => {
            tracing::warn!(error = %e, "cannot list the API server identity Leases");
            return;
        }
    };
    let now = chrono::Utc::now();
    for kv in page.items {
        let Ok(lease) = serde_json::from_slice::<Value>(&kv.value) else {
            continue;
        };
        let identity = lease
            .pointer(&format!(
                "/metadata/labels/{}",
                IDENTITY_LABEL.replace('/', "~1")
            ))
            .and_then(Value::as_str);
        if identity != Some(IDENTITY_VALUE) || objects::name(&lease) == own || !expired(&lease, now)
        {
            continue;
        }
        match api.store.delete(&kv.key, Some(kv.mod_revision)).await {
            Ok(_) => {
                tracing::info!(lease = %objects::name(&lease), "deleted an expired API server identity Lease")
            }
            Err(e) if e.is_conflict() || e.is_not_found() => {}
            Err(e) => {
                tracing::warn!(key = %kv.key, error = %e, "cannot delete an expired identity Lease")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_look_like_upstream_and_differ_per_server() {
        let a = lease_name("host", "10.0.0.1:6443");
        assert!(a.starts_with("apiserver-"));
        assert_eq!(a.len(), "apiserver-".len() + 26);
        assert_eq!(
            a,
            lease_name("host", "10.0.0.1:6443"),
            "stable across restarts"
        );
        assert_ne!(a, lease_name("host", "10.0.0.2:6443"));
    }

    #[test]
    fn expiry_is_renew_time_plus_duration() {
        let now = chrono::Utc::now();
        let lease = |renewed: chrono::DateTime<chrono::Utc>, secs: i64| json!({"spec": {"renewTime": micro_time(renewed), "leaseDurationSeconds": secs}});
        assert!(!expired(&lease(now, 3600), now));
        assert!(expired(
            &lease(now - chrono::Duration::seconds(3601), 3600),
            now
        ));
        assert!(
            !expired(&json!({"spec": {}}), now),
            "incomplete: left alone"
        );
        let made = new_lease(
            "apiserver-x",
            "apiserver-x_1",
            "h",
            Duration::from_secs(3600),
            &micro_time(now),
        );
        assert_eq!(made["metadata"]["labels"][IDENTITY_LABEL], IDENTITY_VALUE);
        assert_eq!(made["spec"]["leaseDurationSeconds"], 3600);
        assert!(!expired(&made, now));
    }
}
