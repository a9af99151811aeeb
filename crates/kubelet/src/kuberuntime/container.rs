//! One container's CRI config (upstream `kuberuntime_container.go` `generateContainerConfig` and
//! `kubelet_pods.go` `GenerateRunContainerOptions`: environment, mounts incl. the termination message
//! file and the kubelet-managed /etc/hosts, command and args with `$(VAR)` expansion, the security
//! context of [`super::security_context`]).

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, Secret, Service};
use kube::Api;

use crate::cri::{api, labels, logs};
use crate::envvars;
use crate::volumes::MountedVolume;

use super::security_context::{self as sc, ImageUser, SecurityOptions};

/// Everything needed to build one container's config.
pub struct ContainerContext<'a> {
    pub client: Option<&'a kube::Client>,
    pub pod: &'a Pod,
    pub container: &'a Container,
    pub is_init: bool,
    pub attempt: u32,
    pub image_ref: &'a str,
    pub volumes: &'a HashMap<String, MountedVolume>,
    pub pod_dir: &'a Path,
    pub host_ip: &'a str,
    pub pod_ips: &'a [String],
    pub node_allocatable: &'a BTreeMap<String, String>,
    /// The user the image runs as (for runAsNonRoot and as the default user).
    pub image_user: &'a ImageUser,
    pub security: &'a SecurityOptions<'a>,
}

/// Why a container's config cannot be made (`CreateContainerConfigError`).
pub type ConfigError = String;

async fn config_map_data(
    client: Option<&kube::Client>,
    ns: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, String>>, String> {
    let client = client.ok_or("no API server to read ConfigMaps from")?;
    match Api::<ConfigMap>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
    {
        Ok(cm) => Ok(cm.map(|cm| cm.data.unwrap_or_default())),
        Err(e) => Err(format!("configmap \"{name}\": {e}")),
    }
}

async fn secret_data(
    client: Option<&kube::Client>,
    ns: &str,
    name: &str,
) -> Result<Option<BTreeMap<String, String>>, String> {
    let client = client.ok_or("no API server to read Secrets from")?;
    match Api::<Secret>::namespaced(client.clone(), ns)
        .get_opt(name)
        .await
    {
        Ok(s) => Ok(s.map(|s| {
            let mut data: BTreeMap<String, String> = s
                .data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, String::from_utf8_lossy(&v.0).into_owned()))
                .collect();
            data.extend(s.string_data.unwrap_or_default());
            data
        })),
        Err(e) => Err(format!("secret \"{name}\": {e}")),
    }
}

/// The Service variables of the pod (upstream `getServiceEnvVarMap`), read from the API server:
/// `default/kubernetes`, and the pod namespace's Services with `enableServiceLinks` (default on).
/// Without an API server (a standalone kubelet) there are none.
async fn service_env(
    client: Option<&kube::Client>,
    pod: &Pod,
) -> Result<Vec<(String, String)>, ConfigError> {
    let Some(client) = client else {
        return Ok(Vec::new());
    };
    let ns = pod.metadata.namespace.as_deref().unwrap_or("default");
    let links = pod
        .spec
        .as_ref()
        .and_then(|s| s.enable_service_links)
        .unwrap_or(true);
    let mut services: Vec<Service> = Vec::new();
    match Api::<Service>::namespaced(client.clone(), "default")
        .get_opt("kubernetes")
        .await
    {
        Ok(s) => services.extend(s),
        Err(e) => return Err(format!("failed to get the kubernetes Service: {e}")),
    }
    if links {
        let list = Api::<Service>::namespaced(client.clone(), ns)
            .list(&Default::default())
            .await
            .map_err(|e| format!("failed to list Services of namespace {ns}: {e}"))?;
        services.extend(list.items);
    }
    let chosen = envvars::services_for_pod(&services, ns, links);
    Ok(envvars::service_env(&chosen))
}

/// The container's environment, in upstream's order and precedence: `envFrom`, then `env` (later
/// names replace earlier ones in place), then the Service variables not already defined.
pub async fn environment(ctx: &ContainerContext<'_>) -> Result<Vec<(String, String)>, ConfigError> {
    let ns = ctx.pod.metadata.namespace.as_deref().unwrap_or("default");
    let services: HashMap<String, String> = service_env(ctx.client, ctx.pod)
        .await?
        .into_iter()
        .collect();
    let mut env: Vec<(String, String)> = Vec::new();
    let set = |env: &mut Vec<(String, String)>, k: String, v: String| {
        if let Some(slot) = env.iter_mut().find(|(n, _)| *n == k) {
            slot.1 = v;
        } else {
            env.push((k, v));
        }
    };
    for from in ctx.container.env_from.iter().flatten() {
        let prefix = from.prefix.clone().unwrap_or_default();
        let (data, name, optional) = if let Some(c) = &from.config_map_ref {
            (
                config_map_data(ctx.client, ns, &c.name).await?,
                c.name.clone(),
                c.optional == Some(true),
            )
        } else if let Some(s) = &from.secret_ref {
            (
                secret_data(ctx.client, ns, &s.name).await?,
                s.name.clone(),
                s.optional == Some(true),
            )
        } else {
            continue;
        };
        match data {
            Some(data) => {
                for (k, v) in data {
                    set(&mut env, format!("{prefix}{k}"), v);
                }
            }
            None if optional => {}
            None => {
                let kind = if from.config_map_ref.is_some() {
                    "configmap"
                } else {
                    "secret"
                };
                return Err(format!("{kind} \"{name}\" not found"));
            }
        }
    }
    for var in ctx.container.env.iter().flatten() {
        let value = if let Some(source) = &var.value_from {
            if let Some(f) = &source.field_ref {
                envvars::field_ref(ctx.pod, &f.field_path, ctx.host_ip, ctx.pod_ips)?
            } else if let Some(r) = &source.resource_field_ref {
                crate::volumes::downwardapi::container_resource_value(
                    ctx.container,
                    &r.resource,
                    r.divisor.as_ref().map(|d| d.0.as_str()),
                    ctx.node_allocatable,
                )?
            } else if let Some(k) = &source.config_map_key_ref {
                let data = match config_map_data(ctx.client, ns, &k.name).await? {
                    Some(d) => d,
                    None if k.optional == Some(true) => continue,
                    None => return Err(format!("configmap \"{}\" not found", k.name)),
                };
                match data.get(&k.key).cloned() {
                    Some(v) => v,
                    None if k.optional == Some(true) => continue,
                    None => {
                        return Err(format!(
                            "couldn't find key {} in ConfigMap {ns}/{}",
                            k.key, k.name
                        ))
                    }
                }
            } else if let Some(k) = &source.secret_key_ref {
                let data = match secret_data(ctx.client, ns, &k.name).await? {
                    Some(d) => d,
                    None if k.optional == Some(true) => continue,
                    None => return Err(format!("secret \"{}\" not found", k.name)),
                };
                match data.get(&k.key).cloned() {
                    Some(v) => v,
                    None if k.optional == Some(true) => continue,
                    None => {
                        return Err(format!(
                            "couldn't find key {} in Secret {ns}/{}",
                            k.key, k.name
                        ))
                    }
                }
            } else {
                String::new()
            }
        } else {
            // Literal values may reference variables defined before them, then Service variables
            // (upstream `MappingFuncFor(tmpEnv, serviceEnv)`).
            let defined: HashMap<String, String> = env.iter().cloned().collect();
            envvars::expand(var.value.as_deref().unwrap_or(""), &|n| {
                defined.get(n).or_else(|| services.get(n)).cloned()
            })
        };
        set(&mut env, var.name.clone(), value);
    }
    let mut rest: Vec<(String, String)> = services
        .into_iter()
        .filter(|(k, _)| !env.iter().any(|(n, _)| n == k))
        .collect();
    rest.sort();
    env.extend(rest);
    Ok(env)
}

fn mounts(
    ctx: &ContainerContext<'_>,
    env: &HashMap<String, String>,
) -> Result<Vec<api::Mount>, ConfigError> {
    // Volume mounts with subPath/subPathExpr and read-only handling: see volumes::subpath.
    let mut out: Vec<api::Mount> =
        crate::volumes::subpath::container_mounts(ctx.container, ctx.volumes, env, ctx.pod_dir)?
            .into_iter()
            .map(|m| api::Mount {
                container_path: m.container_path,
                host_path: m.host_path.display().to_string(),
                readonly: m.read_only,
                ..Default::default()
            })
            .collect();
    let mounted = |out: &[api::Mount], path: &str| out.iter().any(|m| m.container_path == path);
    // upstream `makeMounts`: the managed hosts file once the pod has an IP (host-network pods too,
    // with the node's file), unless the container mounts its own.
    let hosts = ctx.pod_dir.join("etc-hosts");
    if !ctx.pod_ips.is_empty() && hosts.exists() && !mounted(&out, "/etc/hosts") {
        out.push(api::Mount {
            container_path: "/etc/hosts".into(),
            host_path: hosts.display().to_string(),
            ..Default::default()
        });
    }
    let tm = ctx
        .container
        .termination_message_path
        .clone()
        .unwrap_or_else(|| "/dev/termination-log".into());
    if !tm.is_empty() && !mounted(&out, &tm) {
        // One file per attempt, so a restart's message never shows the previous one's.
        let dir = ctx.pod_dir.join("containers").join(&ctx.container.name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let file = dir.join(format!("termination-log-{}", ctx.attempt));
        std::fs::write(&file, b"").map_err(|e| format!("{}: {e}", file.display()))?;
        use std::os::unix::fs::PermissionsExt;
        let _ = std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o666));
        out.push(api::Mount {
            container_path: tm,
            host_path: file.display().to_string(),
            ..Default::default()
        });
    }
    Ok(out)
}

/// The container's CRI config.
pub async fn container_config(
    ctx: &ContainerContext<'_>,
) -> Result<api::ContainerConfig, ConfigError> {
    let pod = ctx.pod;
    let c = ctx.container;
    // upstream checks the image's user before anything else of the config.
    sc::verify_run_as_non_root(pod, c, ctx.image_user)?;
    let env = environment(ctx).await?;
    let vars: HashMap<String, String> = env.iter().cloned().collect();
    let lookup = |n: &str| vars.get(n).cloned();
    let expand_all = |v: &Option<Vec<String>>| -> Vec<String> {
        v.iter()
            .flatten()
            .map(|s| envvars::expand(s, &lookup))
            .collect()
    };
    let mut labels_map: HashMap<String, String> = HashMap::new();
    labels_map.insert(
        labels::POD_NAME.into(),
        pod.metadata.name.clone().unwrap_or_default(),
    );
    labels_map.insert(
        labels::POD_NAMESPACE.into(),
        pod.metadata.namespace.clone().unwrap_or_default(),
    );
    labels_map.insert(
        labels::POD_UID.into(),
        pod.metadata.uid.clone().unwrap_or_default(),
    );
    labels_map.insert(labels::CONTAINER_NAME.into(), c.name.clone());
    let mut ann: HashMap<String, String> = HashMap::new();
    ann.insert(
        labels::CONTAINER_HASH.into(),
        super::config::container_hash(c),
    );
    ann.insert(
        labels::CONTAINER_RESTART_COUNT.into(),
        ctx.attempt.to_string(),
    );
    ann.insert(
        labels::CONTAINER_TERMINATION_MESSAGE_PATH.into(),
        c.termination_message_path
            .clone()
            .unwrap_or_else(|| "/dev/termination-log".into()),
    );
    ann.insert(
        labels::CONTAINER_TERMINATION_MESSAGE_POLICY.into(),
        c.termination_message_policy
            .clone()
            .unwrap_or_else(|| "File".into()),
    );
    if let Some(grace) = pod
        .spec
        .as_ref()
        .and_then(|s| s.termination_grace_period_seconds)
    {
        ann.insert(
            labels::POD_TERMINATION_GRACE_PERIOD.into(),
            grace.to_string(),
        );
    }
    if let Some(pre_stop) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) {
        ann.insert(
            labels::CONTAINER_PRE_STOP_HANDLER.into(),
            serde_json::to_string(pre_stop).unwrap_or_default(),
        );
    }
    if let Some(ports) = &c.ports {
        ann.insert(
            labels::CONTAINER_PORTS.into(),
            serde_json::to_string(ports).unwrap_or_default(),
        );
    }
    if ctx.is_init {
        ann.insert(labels::CONTAINER_TYPE.into(), "init".into());
    }
    let qos = super::config::qos_class(pod);
    Ok(api::ContainerConfig {
        metadata: Some(api::ContainerMetadata {
            name: c.name.clone(),
            attempt: ctx.attempt,
        }),
        image: Some(api::ImageSpec {
            image: ctx.image_ref.to_string(),
            user_specified_image: c.image.clone().unwrap_or_default(),
            ..Default::default()
        }),
        command: expand_all(&c.command),
        args: expand_all(&c.args),
        working_dir: c.working_dir.clone().unwrap_or_default(),
        envs: env
            .into_iter()
            .map(|(key, value)| api::KeyValue { key, value })
            .collect(),
        mounts: mounts(ctx, &vars)?,
        labels: labels_map,
        annotations: ann,
        log_path: logs::container_log_relative_path(&c.name, ctx.attempt as i32)
            .display()
            .to_string(),
        stdin: c.stdin == Some(true),
        stdin_once: c.stdin_once == Some(true),
        tty: c.tty == Some(true),
        linux: Some(api::LinuxContainerConfig {
            resources: Some(super::config::linux_resources(c, &qos)),
            security_context: Some(sc::container_security(
                pod,
                c,
                ctx.image_user,
                super::config::namespace_options(pod),
                ctx.security,
            )?),
        }),
        ..Default::default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn environment_order_and_expansion() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "c", "env": [
                {"name": "A", "value": "a"},
                {"name": "B", "value": "$(A)-b"},
                {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
                {"name": "A", "value": "again"},
                {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}
            ]}]}
        }))
        .unwrap();
        let container = pod.spec.as_ref().unwrap().containers[0].clone();
        let volumes = HashMap::new();
        let ips = vec!["10.1.2.3".to_string()];
        let alloc = BTreeMap::new();
        let ctx = ContainerContext {
            client: None,
            pod: &pod,
            container: &container,
            is_init: false,
            attempt: 0,
            image_ref: "sha256:x",
            volumes: &volumes,
            pod_dir: Path::new("/nonexistent"),
            host_ip: "1.2.3.4",
            pod_ips: &ips,
            node_allocatable: &alloc,
            image_user: &ImageUser::default(),
            security: &SecurityOptions {
                seccomp_root: Path::new("/s"),
                seccomp_default: false,
            },
        };
        let env = environment(&ctx).await.unwrap();
        assert_eq!(
            env,
            vec![
                ("A".to_string(), "again".to_string()),
                ("B".to_string(), "a-b".to_string()),
                ("NAME".to_string(), "p".to_string()),
                ("IP".to_string(), "10.1.2.3".to_string()),
            ]
        );
    }
}
