//! Starting one container (upstream `kuberuntime_container.go` `startContainer`: image, config,
//! create, start, postStart) and the garbage collection of dead attempts.

use super::*;
use crate::kuberuntime::container::{container_config, ContainerContext};

impl Kubelet {
    /// Image, config, create, start, postStart (upstream `startContainer`); failures become the
    /// container's waiting reason and an event.
    pub(super) async fn start_container(
        self: &Arc<Self>,
        ctx: &PodContext<'_>,
        c: &Container,
        is_init: bool,
        attempt: u32,
        inputs: &mut StatusInputs,
        requeue: &mut Option<Duration>,
    ) {
        let PodContext {
            pod,
            volumes,
            pod_dir,
            pod_ips,
            ..
        } = *ctx;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let cref = container_ref(pod, &c.name);
        let image = c.image.clone().unwrap_or_default();
        let policy = c
            .image_pull_policy
            .clone()
            .unwrap_or_else(|| apimachinery::defaults::default_pull_policy(&image).to_string());
        let image_key = format!("{uid}/image/{image}");
        let image_ref = match kr::ensure_image(&self.runtime, &image, &policy).await {
            Ok(r) => {
                lock(&self.backoff).remove(&image_key);
                self.event(
                    &cref,
                    EventType::Normal,
                    "Pulled",
                    &format!("Container image \"{image}\" already present on machine"),
                );
                r
            }
            Err(ImageError::NeverPull(msg)) => {
                self.event(&cref, EventType::Warning, "ErrImageNeverPull", &msg);
                inputs
                    .waiting
                    .insert(c.name.clone(), ("ErrImageNeverPull".into(), msg));
                *requeue = min_requeue(*requeue, Duration::from_secs(10));
                return;
            }
            Err(ImageError::Pull(msg)) => {
                let backing_off = lock(&self.backoff).contains_key(&image_key);
                if backing_off {
                    self.event(
                        &cref,
                        EventType::Normal,
                        "BackOff",
                        &format!("Back-off pulling image \"{image}\""),
                    );
                    inputs.waiting.insert(
                        c.name.clone(),
                        (
                            "ImagePullBackOff".into(),
                            format!("Back-off pulling image \"{image}\": ErrImagePull: {msg}"),
                        ),
                    );
                } else {
                    self.event(
                        &cref,
                        EventType::Warning,
                        "Failed",
                        &format!("Failed to pull image \"{image}\": {msg}"),
                    );
                    inputs
                        .waiting
                        .insert(c.name.clone(), ("ErrImagePull".into(), msg));
                }
                let delay = {
                    let mut map = lock(&self.backoff);
                    let b = map.entry(image_key).or_insert(Backoff {
                        delay: BACKOFF_INITIAL / 2,
                    });
                    b.delay = (b.delay * 2).min(BACKOFF_MAX);
                    b.delay
                };
                *requeue = min_requeue(*requeue, delay);
                return;
            }
        };
        let image_user = kr::image_user(&self.runtime, &image_ref).await;
        let seccomp_root = self.config.seccomp_root();
        let security = self.security_options(&seccomp_root);
        let ctx = ContainerContext {
            image_user: &image_user,
            security: &security,
            client: self.client.as_ref(),
            pod,
            container: c,
            is_init,
            attempt,
            image_ref: &image_ref,
            volumes,
            pod_dir,
            host_ip: &self.config.node_ip.to_string(),
            pod_ips,
            node_allocatable: &self.node_allocatable,
        };
        // The pod's claims are prepared by their drivers before its first container starts; the
        // devices' CDI environment goes into each container that names the claim.
        let (dra_env, cdi_devices) = match self.prepare_dynamic_resources(pod, c).await {
            Ok(found) => found,
            Err(e) => {
                self.event(
                    &cref,
                    EventType::Warning,
                    "FailedPrepareDynamicResources",
                    &format!("Failed to prepare dynamic resources: {e}"),
                );
                inputs
                    .waiting
                    .insert(c.name.clone(), ("ContainerCreating".into(), e));
                *requeue = min_requeue(*requeue, Duration::from_secs(2));
                return;
            }
        };
        let mut config = match container_config(&ctx).await {
            Ok(mut cfg) => {
                cfg.envs.extend(
                    dra_env
                        .into_iter()
                        .map(|(key, value)| crate::cri::api::KeyValue { key, value }),
                );
                // As upstream: the runtime gets the device IDs (containerd 1.7+ applies the specs).
                cfg.cdi_devices = cdi_devices
                    .into_iter()
                    .map(|name| crate::cri::api::CdiDevice { name })
                    .collect();
                cfg
            }
            Err(e) => {
                self.event(&cref, EventType::Warning, "Failed", &format!("Error: {e}"));
                inputs
                    .waiting
                    .insert(c.name.clone(), ("CreateContainerConfigError".into(), e));
                *requeue = min_requeue(*requeue, Duration::from_secs(10));
                return;
            }
        };
        let record = kr::pod_record(&self.runtime, &uid)
            .await
            .unwrap_or_default();
        if let Err(e) = kr::ephemeral::set_target(pod, &c.name, &record, &mut config) {
            let e = e.to_string();
            self.event(&cref, EventType::Warning, "Failed", &format!("Error: {e}"));
            inputs
                .waiting
                .insert(c.name.clone(), ("CreateContainerConfigError".into(), e));
            *requeue = min_requeue(*requeue, Duration::from_secs(2));
            return;
        }
        let Some(sandbox_id) = record.sandbox_id.filter(|_| record.sandbox_ready) else {
            *requeue = min_requeue(*requeue, Duration::from_secs(1));
            return;
        };
        let sandbox_config = match kr::config::sandbox_config(
            pod,
            0,
            &logs::pod_log_dir(
                &self.config.pod_logs_dir,
                pod.metadata.namespace.as_deref().unwrap_or(""),
                pod.metadata.name.as_deref().unwrap_or(""),
                &uid,
            )
            .display()
            .to_string(),
            &self.config.cgroup_root,
            &self.config.cluster_dns,
            &self.config.cluster_domain,
            &security,
        ) {
            Ok(c) => c,
            Err(e) => {
                inputs
                    .waiting
                    .insert(c.name.clone(), ("CreateContainerConfigError".into(), e));
                *requeue = min_requeue(*requeue, Duration::from_secs(10));
                return;
            }
        };
        let created = self
            .runtime
            .runtime
            .clone()
            .create_container(crate::cri::api::CreateContainerRequest {
                pod_sandbox_id: sandbox_id,
                config: Some(config),
                sandbox_config: Some(sandbox_config),
            })
            .await;
        let id = match created {
            Ok(r) => r.into_inner().container_id,
            Err(s) => {
                let msg = format!("Error: {}", s.message());
                self.event(&cref, EventType::Warning, "Failed", &msg);
                inputs.waiting.insert(
                    c.name.clone(),
                    ("CreateContainerError".into(), s.message().to_string()),
                );
                *requeue = min_requeue(*requeue, Duration::from_secs(10));
                return;
            }
        };
        self.event(
            &cref,
            EventType::Normal,
            "Created",
            &format!("Created container {}", c.name),
        );
        if let Err(s) = self
            .runtime
            .runtime
            .clone()
            .start_container(crate::cri::api::StartContainerRequest {
                container_id: id.clone(),
            })
            .await
        {
            let msg = format!(
                "Error: failed to start container \"{}\": {}",
                c.name,
                s.message()
            );
            self.event(&cref, EventType::Warning, "Failed", &msg);
            inputs.waiting.insert(
                c.name.clone(),
                ("RunContainerError".into(), s.message().to_string()),
            );
            *requeue = min_requeue(*requeue, Duration::from_secs(10));
            return;
        }
        self.event(
            &cref,
            EventType::Normal,
            "Started",
            &format!("Started container {}", c.name),
        );
        if let Some(post) = c.lifecycle.as_ref().and_then(|l| l.post_start.clone()) {
            let grace = pod
                .spec
                .as_ref()
                .and_then(|s| s.termination_grace_period_seconds)
                .unwrap_or(30);
            if let Err(e) = self
                .run_hook(
                    pod,
                    Some(c),
                    &id,
                    &post,
                    Duration::from_secs(grace.max(1) as u64),
                )
                .await
            {
                self.event(
                    &cref,
                    EventType::Warning,
                    "FailedPostStartHook",
                    &format!("PostStartHook failed: {e}"),
                );
                let _ = kr::stop_container(&self.runtime, &id, MIN_GRACE_SECS).await;
            }
        }
    }

    /// Removes exited attempts beyond the newest dead one per container (upstream container GC keeps
    /// `MaxPerPodContainer` = 1), so `kubectl logs --previous` still finds the last one.
    pub(super) async fn gc_dead_containers(&self, record: &PodRecord) {
        let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
        for c in &record.containers {
            if c.state != RecordState::Exited {
                continue;
            }
            let n = seen.entry(c.name.as_str()).or_insert(0);
            *n += 1;
            // The newest attempt (running or exited) plus `max_dead_per_container` dead ones stay.
            let newest_is_this = record.latest(&c.name).is_some_and(|l| l.id == c.id);
            let dead_kept = if newest_is_this {
                0
            } else {
                *n - usize::from(
                    record
                        .latest(&c.name)
                        .is_some_and(|l| l.state == RecordState::Exited),
                )
            };
            if !newest_is_this && dead_kept > self.config.max_dead_per_container {
                let _ = kr::remove_container(&self.runtime, &c.id).await;
            }
        }
    }
}

impl Kubelet {
    /// Prepares the pod's ResourceClaims (read from the API server; each must be reserved for
    /// the pod) and returns the environment the container's devices add and their CDI IDs.
    async fn prepare_dynamic_resources(
        &self,
        pod: &Pod,
        c: &Container,
    ) -> Result<(Vec<(String, String)>, Vec<String>), String> {
        use k8s_openapi::api::resource::v1::ResourceClaim;
        let entries = pod
            .spec
            .as_ref()
            .and_then(|s| s.resource_claims.as_deref())
            .unwrap_or(&[]);
        if entries.is_empty() {
            return Ok(Default::default());
        }
        let client = self
            .client
            .clone()
            .ok_or("no API server to read the pod's ResourceClaims from")?;
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let statuses = pod
            .status
            .as_ref()
            .and_then(|s| s.resource_claim_statuses.as_deref())
            .unwrap_or(&[]);
        let mut names = std::collections::HashMap::new();
        for e in entries {
            let name = match (&e.resource_claim_name, &e.resource_claim_template_name) {
                (Some(n), _) => Some(n.clone()),
                (None, Some(_)) => match statuses.iter().find(|s| s.name == e.name) {
                    Some(s) => s.resource_claim_name.clone(),
                    None => return Err(format!("waiting for the ResourceClaim of {}", e.name)),
                },
                (None, None) => None,
            };
            if let Some(n) = name {
                names.insert(e.name.clone(), n);
            }
        }
        let api: kube::Api<ResourceClaim> = kube::Api::namespaced(client, &ns);
        let mut claims = Vec::new();
        for name in names.values() {
            claims.push(api.get(name).await.map_err(|e| match e {
                kube::Error::Api(s) => s.message,
                other => other.to_string(),
            })?);
        }
        self.dra
            .prepare_claims(pod, &claims)
            .await
            .map_err(|e| e.to_string())?;
        let env = self
            .dra
            .container_env(&ns, c, &names)
            .map_err(|e| e.to_string())?;
        Ok((env, self.dra.container_cdi_ids(&ns, c, &names)))
    }
}
