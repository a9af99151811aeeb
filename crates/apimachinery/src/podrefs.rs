//! The objects a pod or a persistent volume names (upstream `pkg/api/v1/pod` `VisitPodSecretNames`
//! and `VisitPodConfigmapNames`, `pkg/api/v1/persistentvolume` `VisitPVSecretNames`), on the JSON
//! form the API server keeps. Shared by the NodeRestriction admission plugin (does a mirror pod name
//! any?) and the Node authorizer (which node may read which object).
//!
//! Names are returned as written, empty ones included, and repeated as often as they are named: the
//! callers that only ask "any?" must see an empty name as a reference, as upstream's visitors do.

use serde_json::Value;

/// Every container of a pod spec: init, regular and ephemeral.
pub fn all_containers(spec: &Value) -> impl Iterator<Item = &Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .into_iter()
        .flat_map(move |list| spec[list].as_array().into_iter().flatten())
}

fn volumes(spec: &Value) -> impl Iterator<Item = &Value> {
    spec["volumes"].as_array().into_iter().flatten()
}

pub fn projected_sources(volume: &Value) -> impl Iterator<Item = &Value> {
    volume
        .pointer("/projected/sources")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

/// A present (non-null) object at `pointer`, with the string at `field` inside it ("" when unset).
fn named_at<'a>(v: &'a Value, pointer: &str, field: &str) -> Option<&'a str> {
    let obj = v.pointer(pointer).filter(|x| !x.is_null())?;
    Some(obj[field].as_str().unwrap_or(""))
}

/// The names every container's `envFrom` (at `env_from`) and `env` (at `env`) take objects from.
fn env_names<'a>(spec: &'a Value, env_from: &str, env: &str, names: &mut Vec<&'a str>) {
    for c in all_containers(spec) {
        for e in c["envFrom"].as_array().into_iter().flatten() {
            names.extend(named_at(e, env_from, "name"));
        }
        for e in c["env"].as_array().into_iter().flatten() {
            names.extend(named_at(e, env, "name"));
        }
    }
}

/// The secrets a pod spec names: image pull secrets, env and envFrom of every container, and every
/// volume source that takes a secret (secret, projected secret, azureFile, cephfs, cinder,
/// flexVolume, rbd, scaleIO, iscsi, storageos, csi's nodePublishSecretRef).
pub fn pod_secret_names(spec: &Value) -> Vec<&str> {
    let mut names = Vec::new();
    for s in spec["imagePullSecrets"].as_array().into_iter().flatten() {
        names.push(s["name"].as_str().unwrap_or(""));
    }
    env_names(spec, "/secretRef", "/valueFrom/secretKeyRef", &mut names);
    for v in volumes(spec) {
        names.extend(named_at(v, "/secret", "secretName"));
        names.extend(named_at(v, "/azureFile", "secretName"));
        for pointer in [
            "/cephfs/secretRef",
            "/cinder/secretRef",
            "/flexVolume/secretRef",
            "/rbd/secretRef",
            "/scaleIO/secretRef",
            "/iscsi/secretRef",
            "/storageos/secretRef",
            "/csi/nodePublishSecretRef",
        ] {
            names.extend(named_at(v, pointer, "name"));
        }
        for s in projected_sources(v) {
            names.extend(named_at(s, "/secret", "name"));
        }
    }
    names
}

/// The config maps a pod spec names: env and envFrom of every container, configMap volumes and
/// projected configMap sources.
pub fn pod_config_map_names(spec: &Value) -> Vec<&str> {
    let mut names = Vec::new();
    env_names(
        spec,
        "/configMapRef",
        "/valueFrom/configMapKeyRef",
        &mut names,
    );
    for v in volumes(spec) {
        names.extend(named_at(v, "/configMap", "name"));
        for s in projected_sources(v) {
            names.extend(named_at(s, "/configMap", "name"));
        }
    }
    names
}

/// The claims a pod's volumes use (JSON form of [`crate::volumes::pod_claims`]): each
/// `persistentVolumeClaim.claimName`, and `<pod>-<volume>` for a generic ephemeral volume.
pub fn pod_claim_names(pod_name: &str, spec: &Value) -> Vec<String> {
    volumes(spec)
        .filter_map(|v| {
            if let Some(name) = named_at(v, "/persistentVolumeClaim", "claimName") {
                Some(name.to_string())
            } else {
                v.get("ephemeral").filter(|e| !e.is_null()).map(|_| {
                    crate::volumes::ephemeral_claim_name(pod_name, v["name"].as_str().unwrap_or(""))
                })
            }
        })
        .collect()
}

/// The ResourceClaims a pod uses (upstream `resourceclaim.Name`): a `resourceClaimName` in the spec,
/// or, for a claim made from a template, the name the controller recorded in
/// `status.resourceClaimStatuses`; plus the extended-resource claim in the status.
pub fn pod_resource_claim_names(pod: &Value) -> Vec<&str> {
    let statuses = pod
        .pointer("/status/resourceClaimStatuses")
        .and_then(Value::as_array);
    let mut names = Vec::new();
    for claim in pod
        .pointer("/spec/resourceClaims")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(name) = claim["resourceClaimName"].as_str() {
            names.push(name);
        } else if claim["resourceClaimTemplateName"].is_string() {
            let entry = claim["name"].as_str().unwrap_or("");
            let recorded = statuses
                .into_iter()
                .flatten()
                .find(|s| s["name"].as_str() == Some(entry))
                .and_then(|s| s["resourceClaimName"].as_str());
            names.extend(recorded);
        }
    }
    names.extend(str_at(
        pod,
        "/status/extendedResourceClaimStatus/resourceClaimName",
    ));
    names
}

/// The secrets a persistent volume names, as (namespace, name): a reference's own namespace, else
/// the bound claim's (azureFile's `secretNamespace`, the `secretRef`s of cephfs, cinder,
/// flexVolume, rbd, scaleIO, iscsi and storageos, and csi's five secret references).
pub fn pv_secret_refs(pv: &Value) -> Vec<(String, String)> {
    let claim_ns = str_at(pv, "/spec/claimRef/namespace").unwrap_or("");
    let spec = &pv["spec"];
    let mut refs = Vec::new();
    let mut push = |namespace: Option<&str>, name: &str| {
        let namespace = namespace.filter(|n| !n.is_empty()).unwrap_or(claim_ns);
        refs.push((namespace.to_string(), name.to_string()));
    };
    if let Some(name) = named_at(spec, "/azureFile", "secretName") {
        push(str_at(spec, "/azureFile/secretNamespace"), name);
    }
    for pointer in [
        "/cephfs/secretRef",
        "/cinder/secretRef",
        "/flexVolume/secretRef",
        "/rbd/secretRef",
        "/scaleIO/secretRef",
        "/iscsi/secretRef",
        "/storageos/secretRef",
        "/csi/controllerPublishSecretRef",
        "/csi/nodeStageSecretRef",
        "/csi/nodePublishSecretRef",
        "/csi/controllerExpandSecretRef",
        "/csi/nodeExpandSecretRef",
    ] {
        if let Some(reference) = spec.pointer(pointer).filter(|r| !r.is_null()) {
            push(
                reference["namespace"].as_str(),
                reference["name"].as_str().unwrap_or(""),
            );
        }
    }
    refs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secrets_and_config_maps_of_a_pod() {
        let spec = json!({
            "imagePullSecrets": [{"name": "pull"}],
            "initContainers": [{"envFrom": [{"secretRef": {"name": "init-env"}}]}],
            "containers": [{
                "env": [
                    {"name": "A", "valueFrom": {"secretKeyRef": {"name": "key", "key": "k"}}},
                    {"name": "B", "valueFrom": {"configMapKeyRef": {"name": "cm-key", "key": "k"}}},
                    {"name": "C", "value": "plain"}
                ],
                "envFrom": [{"configMapRef": {"name": "cm-env"}}]
            }],
            "volumes": [
                {"name": "s", "secret": {"secretName": "vol"}},
                {"name": "c", "configMap": {"name": "cm-vol"}},
                {"name": "p", "projected": {"sources": [
                    {"secret": {"name": "proj"}},
                    {"configMap": {"name": "cm-proj"}},
                    {"serviceAccountToken": {"path": "t"}}
                ]}},
                {"name": "csi", "csi": {"driver": "d", "nodePublishSecretRef": {"name": "csi"}}},
                {"name": "e", "emptyDir": {}}
            ]
        });
        assert_eq!(
            pod_secret_names(&spec),
            ["pull", "init-env", "key", "vol", "proj", "csi"]
        );
        assert_eq!(
            pod_config_map_names(&spec),
            ["cm-env", "cm-key", "cm-vol", "cm-proj"]
        );
        assert!(pod_secret_names(&json!({"containers": [{}]})).is_empty());
        // A secret volume with no name still counts: upstream's visitor sees "".
        assert_eq!(
            pod_secret_names(&json!({"volumes": [{"secret": {}}]})),
            [""]
        );
    }

    #[test]
    fn claims_of_a_pod() {
        let spec = json!({"volumes": [
            {"name": "data", "persistentVolumeClaim": {"claimName": "www"}},
            {"name": "scratch", "ephemeral": {"volumeClaimTemplate": {}}},
            {"name": "tmp", "emptyDir": {}}
        ]});
        assert_eq!(pod_claim_names("web-0", &spec), ["www", "web-0-scratch"]);
        let pod = json!({
            "spec": {"resourceClaims": [
                {"name": "a", "resourceClaimName": "shared"},
                {"name": "b", "resourceClaimTemplateName": "tpl"},
                {"name": "c", "resourceClaimTemplateName": "tpl"}
            ]},
            "status": {"resourceClaimStatuses": [{"name": "b", "resourceClaimName": "pod-b-x"}]}
        });
        // `c` has no claim yet: nothing to name.
        assert_eq!(pod_resource_claim_names(&pod), ["shared", "pod-b-x"]);
    }

    #[test]
    fn secrets_of_a_volume() {
        let pv = json!({"spec": {
            "claimRef": {"namespace": "apps", "name": "data"},
            "azureFile": {"secretName": "az", "shareName": "s"},
            "csi": {
                "driver": "d",
                "nodeStageSecretRef": {"name": "stage", "namespace": "csi-system"},
                "controllerExpandSecretRef": {"name": "expand"}
            }
        }});
        assert_eq!(
            pv_secret_refs(&pv),
            [
                ("apps".to_string(), "az".to_string()),
                ("csi-system".to_string(), "stage".to_string()),
                ("apps".to_string(), "expand".to_string()),
            ]
        );
    }
}
