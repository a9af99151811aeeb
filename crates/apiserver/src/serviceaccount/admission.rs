//! The ServiceAccount admission plugin for pods (upstream `plugin/pkg/admission/serviceaccount`):
//! a new pod's service account must exist, and unless token automounting is off (on the pod, else on
//! the service account) the pod gets the `kube-api-access-<random>` projected volume (a bound token,
//! the cluster CA from `kube-root-ca.crt`, the namespace) mounted read-only at
//! `/var/run/secrets/kubernetes.io/serviceaccount` in every container and init container that does not
//! mount something there already. Mirror pods are left alone.
//!
//! Different from upstream on purpose: a missing service account is waited for briefly (up to two
//! seconds) before the pod is refused, so that a pod created right after its namespace does not lose
//! the race with the service account controller.

use std::time::Duration;

use apimachinery::status::ApiError;
use serde_json::{json, Map, Value};

use crate::objects;
use crate::ApiServer;

const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Upstream's token lifetime for these volumes (an hour and seven minutes, so it stands out).
const TOKEN_EXPIRATION: i64 = 3607;
/// How long a pod waits for its missing service account.
const SERVICE_ACCOUNT_WAIT: Duration = Duration::from_secs(2);

/// The plugin (upstream `ServiceAccount`): mutating on pod creates.
pub struct ServiceAccount;

#[async_trait::async_trait]
impl crate::admission::Plugin for ServiceAccount {
    fn name(&self) -> &'static str {
        "ServiceAccount"
    }

    fn handles(&self, attrs: &crate::admission::Attributes<'_>) -> bool {
        attrs.operation == crate::admission::Operation::Create
            && attrs.group.is_empty()
            && attrs.resource == "pods"
            && attrs.subresource.is_none()
            && !attrs.name.is_empty()
    }

    async fn admit(
        &self,
        api: &ApiServer,
        _attrs: &crate::admission::Attributes<'_>,
        object: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        admit_pod(api, object).await
    }
}

/// Admits a pod being created (already defaulted, so `spec.serviceAccountName` is set).
pub async fn admit_pod(api: &ApiServer, pod: &mut Value) -> Result<(), ApiError> {
    let is_mirror = pod
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .is_some_and(|a| a.contains_key(MIRROR_ANNOTATION));
    if is_mirror {
        return Ok(());
    }
    let namespace = objects::namespace(pod).to_string();
    let sa_name = pod
        .pointer("/spec/serviceAccountName")
        .and_then(Value::as_str)
        .unwrap_or("default")
        .to_string();
    let key = format!("/serviceaccounts/{namespace}/{sa_name}");
    let deadline = tokio::time::Instant::now() + SERVICE_ACCOUNT_WAIT;
    let sa = loop {
        if let Some(sa) = super::cached(api, "serviceaccounts", &key) {
            break sa;
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(ApiError::forbidden(format!(
                "pods \"{}\" is forbidden: error looking up service account {namespace}/{sa_name}: serviceaccount \"{sa_name}\" not found",
                objects::name(pod)
            )));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let automount = pod
        .pointer("/spec/automountServiceAccountToken")
        .and_then(Value::as_bool)
        .or_else(|| sa["automountServiceAccountToken"].as_bool())
        .unwrap_or(true);
    if automount {
        mount_token(pod);
    }
    Ok(())
}

/// Adds the projected token volume and its mounts (unless a volume of that kind is already there).
fn mount_token(pod: &mut Value) {
    let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
        return;
    };
    let already = spec
        .get("volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|v| {
            v["name"]
                .as_str()
                .is_some_and(|n| n.starts_with("kube-api-access-"))
        })
        .and_then(|v| v["name"].as_str().map(str::to_string));
    let name = already.unwrap_or_else(|| {
        let name = format!("kube-api-access-{}", random_suffix());
        let volume = json!({
            "name": name,
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": TOKEN_EXPIRATION, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ],
            },
        });
        let volumes = spec
            .entry("volumes")
            .or_insert_with(|| Value::Array(Vec::new()));
        if let Some(list) = volumes.as_array_mut() {
            list.push(volume);
        } else {
            *volumes = json!([volume]);
        }
        name
    });
    for list in ["initContainers", "containers"] {
        for c in spec
            .get_mut(list)
            .and_then(Value::as_array_mut)
            .into_iter()
            .flatten()
        {
            let Some(c) = c.as_object_mut() else { continue };
            add_mount(c, &name);
        }
    }
}

fn add_mount(container: &mut Map<String, Value>, volume: &str) {
    let mounts = container
        .entry("volumeMounts")
        .or_insert_with(|| Value::Array(Vec::new()));
    let Some(mounts) = mounts.as_array_mut() else {
        return;
    };
    if mounts.iter().any(|m| m["mountPath"] == MOUNT_PATH) {
        return;
    }
    mounts.push(json!({"name": volume, "readOnly": true, "mountPath": MOUNT_PATH}));
}

/// Five characters from upstream's `utilrand` alphabet (no vowels, no confusable digits).
fn random_suffix() -> String {
    use rand::Rng;
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_container_mounts_the_token_once() {
        let mut pod = json!({"spec": {
            "initContainers": [{"name": "init"}],
            "containers": [
                {"name": "a"},
                {"name": "b", "volumeMounts": [{"name": "own", "mountPath": MOUNT_PATH}]},
            ],
            "volumes": [{"name": "own", "emptyDir": {}}],
        }});
        mount_token(&mut pod);
        let volumes = pod["spec"]["volumes"].as_array().unwrap();
        assert_eq!(volumes.len(), 2);
        let name = volumes[1]["name"].as_str().unwrap().to_string();
        assert!(
            name.starts_with("kube-api-access-") && name.len() == 21,
            "{name}"
        );
        assert_eq!(
            volumes[1]["projected"]["sources"][0]["serviceAccountToken"]["expirationSeconds"],
            3607
        );
        assert_eq!(
            pod["spec"]["initContainers"][0]["volumeMounts"],
            json!([{"name": name, "readOnly": true, "mountPath": MOUNT_PATH}])
        );
        assert_eq!(
            pod["spec"]["containers"][0]["volumeMounts"][0]["name"],
            name.as_str()
        );
        // A container that mounts something at the path keeps its own.
        assert_eq!(
            pod["spec"]["containers"][1]["volumeMounts"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
        // Admitting again (an update of a created pod never is, but be safe) adds nothing.
        let before = pod.clone();
        mount_token(&mut pod);
        assert_eq!(pod, before);
    }
}
