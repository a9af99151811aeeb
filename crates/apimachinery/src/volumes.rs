//! Which PersistentVolumeClaims a pod uses (upstream `k8s.io/component-helpers/storage/ephemeral`),
//! shared by the scheduler's VolumeBinding plugin and the volume controllers.

use k8s_openapi::api::core::v1::Pod;

/// The name of the claim a generic ephemeral volume gets: `<pod>-<volume>` (upstream
/// `ephemeral.VolumeClaimName`).
pub fn ephemeral_claim_name(pod_name: &str, volume_name: &str) -> String {
    format!("{pod_name}-{volume_name}")
}

/// The claims the pod's volumes name, in volume order, each with whether it is a generic
/// ephemeral volume's (owned by the pod) rather than a `persistentVolumeClaim` reference.
pub fn pod_claims(pod: &Pod) -> Vec<(String, bool)> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or("");
    pod.spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|v| {
            if let Some(c) = &v.persistent_volume_claim {
                Some((c.claim_name.clone(), false))
            } else {
                v.ephemeral
                    .as_ref()
                    .map(|_| (ephemeral_claim_name(pod_name, &v.name), true))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_of_a_pod() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-0"},
            "spec": {"containers": [], "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
                {"name": "config", "configMap": {"name": "c"}},
                {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
            ]},
        }))
        .unwrap();
        assert_eq!(
            pod_claims(&pod),
            vec![
                ("data-web-0".to_string(), false),
                ("web-0-scratch".to_string(), true)
            ]
        );
    }
}
