//! kubeadm's `bootstrap-token` phase, cluster-info part (`cmd/kubeadm/app/phases/bootstraptoken/
//! clusterinfo`), done by `rkube server --enable-bootstrap-token-auth`: the `kube-public/cluster-info`
//! ConfigMap whose `kubeconfig` entry names the cluster (the admin kubeconfig's server and CA, no
//! user), which the bootstrap signer signs with every signing token; and the Role and RoleBinding
//! `kubeadm:bootstrap-signer-clusterinfo` that let `system:anonymous` get it, so a joining machine
//! reads it before it has a credential and checks it with its token.

use std::path::Path;

use base64::Engine;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
use kube::api::{Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::json;

const NAMESPACE: &str = "kube-public";
const NAME: &str = "cluster-info";
const RBAC_NAME: &str = "kubeadm:bootstrap-signer-clusterinfo";

/// The `kubeconfig` entry: the cluster alone, written as client-go's `clientcmd.Write` writes
/// kubeadm's (an unnamed cluster, no users or contexts).
pub fn kubeconfig(server: &str, ca_pem: &[u8]) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1
clusters:
- cluster:
    certificate-authority-data: {ca}
    server: {server}
  name: \"\"
contexts: null
current-context: \"\"
kind: Config
preferences: {{}}
users: null
"
    )
}

/// The server URL and CA (PEM) of the current context of the kubeconfig at `path`.
fn cluster_of(path: &Path) -> Result<(String, Vec<u8>), String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let config: serde_json::Value = serde_yaml_ng::from_str(&text)
        .map_err(|e| format!("{}: not a kubeconfig: {e}", path.display()))?;
    let current = config["current-context"].as_str().unwrap_or("");
    let find = |list: &str, name: &str| {
        config[list]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["name"].as_str() == Some(name))
            .cloned()
    };
    let cluster_name = find("contexts", current)
        .and_then(|c| c["context"]["cluster"].as_str().map(str::to_string))
        .unwrap_or_default();
    let cluster = find("clusters", &cluster_name).ok_or("no current cluster in the kubeconfig")?;
    let server = cluster["cluster"]["server"]
        .as_str()
        .ok_or("the kubeconfig's cluster has no server")?
        .to_string();
    let ca = cluster["cluster"]["certificate-authority-data"]
        .as_str()
        .ok_or("the kubeconfig's cluster has no certificate-authority-data")?;
    let ca = base64::engine::general_purpose::STANDARD
        .decode(ca)
        .map_err(|e| format!("certificate-authority-data: {e}"))?;
    Ok((server, ca))
}

/// Creates (or brings up to date) cluster-info and the RBAC that exposes it.
pub async fn ensure(client: kube::Client, admin_kubeconfig: &Path) -> Result<(), String> {
    let (server, ca) = cluster_of(admin_kubeconfig)?;
    let wanted = kubeconfig(&server, &ca);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), NAMESPACE);
    match maps.get_opt(NAME).await.map_err(|e| e.to_string())? {
        None => {
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": NAME, "namespace": NAMESPACE},
                "data": {"kubeconfig": wanted},
            }))
            .map_err(|e| e.to_string())?;
            match maps.create(&PostParams::default(), &cm).await {
                Ok(_) => {}
                Err(kube::Error::Api(e)) if e.code == 409 => {}
                Err(e) => return Err(format!("creating {NAMESPACE}/{NAME}: {e}")),
            }
        }
        // The server's address may have changed since (a new port): the signer signs it again.
        Some(cm) if cm.data.as_ref().and_then(|d| d.get("kubeconfig")) != Some(&wanted) => {
            let patch = json!({"data": {"kubeconfig": wanted}});
            maps.patch(NAME, &PatchParams::default(), &Patch::Merge(&patch))
                .await
                .map_err(|e| format!("updating {NAMESPACE}/{NAME}: {e}"))?;
        }
        Some(_) => {}
    }
    let role: Role = serde_json::from_value(json!({
        "metadata": {"name": RBAC_NAME, "namespace": NAMESPACE},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [NAME], "verbs": ["get"]}],
    }))
    .map_err(|e| e.to_string())?;
    let binding: RoleBinding = serde_json::from_value(json!({
        "metadata": {"name": RBAC_NAME, "namespace": NAMESPACE},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RBAC_NAME},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "system:anonymous"}],
    }))
    .map_err(|e| e.to_string())?;
    let roles: Api<Role> = Api::namespaced(client.clone(), NAMESPACE);
    let bindings: Api<RoleBinding> = Api::namespaced(client, NAMESPACE);
    // kubeadm's CreateOrUpdate: the objects are put back as they should be.
    let apply = PatchParams::apply("rkube-server").force();
    roles
        .patch(RBAC_NAME, &apply, &Patch::Apply(&role))
        .await
        .map_err(|e| format!("role {RBAC_NAME}: {e}"))?;
    bindings
        .patch(RBAC_NAME, &apply, &Patch::Apply(&binding))
        .await
        .map_err(|e| format!("rolebinding {RBAC_NAME}: {e}"))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kubeconfig_is_kubeadms() {
        let text = kubeconfig("https://10.0.0.1:6443", b"CA");
        let v: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(
            v["clusters"][0]["cluster"]["server"],
            "https://10.0.0.1:6443"
        );
        assert_eq!(
            v["clusters"][0]["cluster"]["certificate-authority-data"],
            "Q0E="
        );
        assert_eq!(v["clusters"][0]["name"], "");
        assert!(v["users"].is_null());
    }

    #[test]
    fn the_cluster_of_the_admin_kubeconfig() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k");
        std::fs::write(
            &path,
            "apiVersion: v1
kind: Config
clusters:
- {name: other, cluster: {server: 'https://other', certificate-authority-data: Tm8=}}
- {name: rkube, cluster: {server: 'https://127.0.0.1:6443', certificate-authority-data: Q0E=}}
contexts: [{name: c, context: {cluster: rkube, user: u}}]
current-context: c
",
        )
        .unwrap();
        assert_eq!(
            cluster_of(&path).unwrap(),
            ("https://127.0.0.1:6443".to_string(), b"CA".to_vec())
        );
    }
}
