//! Killing a pod's containers (preStop hooks, grace periods) and terminating a pod that is being
//! deleted or left its source (upstream `SyncTerminatingPod`, `SyncTerminatedPod`, `KillPod`).

use std::sync::Arc;

use super::*;
use crate::kuberuntime::status::ContainerRecord;

impl Kubelet {
    /// Terminates a pod being deleted or gone from its source (upstream `SyncTerminatingPod` +
    /// `SyncTerminatedPod`), then deletes it from the API (deleted API pods) or cleans up (removed pods).
    pub(super) async fn terminate(self: &Arc<Self>, pod: &Pod, removed: bool) -> SyncOutcome {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let spec_grace = pod
            .spec
            .as_ref()
            .and_then(|s| s.termination_grace_period_seconds)
            .unwrap_or(30);
        let grace = pod
            .metadata
            .deletion_grace_period_seconds
            .unwrap_or(spec_grace)
            .max(0);
        let record = match kr::pod_record(&self.runtime, &uid).await {
            Ok(r) => r,
            Err(e) => {
                tracing::warn!(pod = %pod_desc(pod), error = %e, "cannot read the pod's containers");
                return SyncOutcome {
                    finished: false,
                    requeue: Some(Duration::from_secs(2)),
                };
            }
        };
        self.kill_pod(pod, &record, grace, None).await;
        let record = kr::pod_record(&self.runtime, &uid).await.unwrap_or(record);
        if record
            .containers
            .iter()
            .any(|c| c.state == RecordState::Running)
        {
            return SyncOutcome {
                finished: false,
                requeue: Some(Duration::from_secs(1)),
            };
        }
        if let Some(id) = &record.sandbox_id {
            let _ = kr::stop_sandbox(&self.runtime, id).await;
        }
        let mut inputs = self.status_inputs(&record);
        inputs.terminating = true;
        if !is_static(pod) && !removed {
            // A deleted API pod: report the terminal state, then let the API server drop it.
            self.write_status(pod, &record, &inputs).await;
            if let Err(e) = self.status.delete_terminated(pod).await {
                tracing::warn!(error = %e, "pod deletion failed");
                return SyncOutcome {
                    finished: false,
                    requeue: Some(Duration::from_secs(2)),
                };
            }
        }
        if is_static(pod) && removed {
            if let Err(e) = self.status.delete_mirror(pod).await {
                tracing::warn!(error = %e, "mirror pod deletion failed");
            }
        }
        if removed || !is_static(pod) {
            self.remove_pod_runtime(&uid, 0).await;
            self.volumes.teardown(&uid);
            self.status.forget(&uid);
            lock(&self.backoff).retain(|k, _| !k.starts_with(&format!("{uid}/")));
            return SyncOutcome {
                finished: true,
                requeue: None,
            };
        }
        SyncOutcome {
            finished: false,
            requeue: None,
        }
    }

    /// Kills the pod's running containers (preStop hooks first) within `grace` seconds; `only`: just
    /// these container IDs.
    pub(super) async fn kill_pod(
        self: &Arc<Self>,
        pod: &Pod,
        record: &PodRecord,
        grace: i64,
        only: Option<&[String]>,
    ) {
        let spec = pod.spec.clone().unwrap_or_default();
        let deadline = Instant::now() + Duration::from_secs(grace.max(0) as u64);
        let running: Vec<_> = record
            .containers
            .iter()
            .filter(|c| c.state == RecordState::Running || c.state == RecordState::Created)
            .filter(|c| only.is_none_or(|ids| ids.contains(&c.id)))
            .cloned()
            .collect();
        // Upstream's order: app (and regular init) containers together, then sidecars one at a
        // time in reverse spec order, so a sidecar outlives what uses it; all within `grace`.
        let sidecars: Vec<&Container> = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| is_sidecar(c))
            .collect();
        let (mut late, first): (Vec<_>, Vec<_>) = running
            .into_iter()
            .partition(|c| sidecars.iter().any(|s| s.name == c.name));
        late.sort_by_key(|c| std::cmp::Reverse(sidecars.iter().position(|s| s.name == c.name)));
        let spec_of = |name: &str| {
            spec.containers
                .iter()
                .chain(spec.init_containers.iter().flatten())
                .find(|s| s.name == name)
                .cloned()
        };
        let kills = first.into_iter().map(|c| {
            let spec_c = spec_of(&c.name);
            self.kill_container(pod, spec_c, c, grace, deadline)
        });
        futures::future::join_all(kills).await;
        for c in late {
            let spec_c = spec_of(&c.name);
            self.kill_container(pod, spec_c, c, grace, deadline).await;
        }
    }

    /// Stops every running sidecar (the app containers are done for good), in upstream's order.
    pub(super) async fn stop_sidecars(self: &Arc<Self>, pod: &Pod, record: &PodRecord) {
        let spec = pod.spec.clone().unwrap_or_default();
        let ids: Vec<String> = record
            .containers
            .iter()
            .filter(|c| c.state == RecordState::Running)
            .filter(|c| {
                spec.init_containers
                    .iter()
                    .flatten()
                    .any(|s| s.name == c.name && is_sidecar(s))
            })
            .map(|c| c.id.clone())
            .collect();
        if ids.is_empty() {
            return;
        }
        let grace = spec.termination_grace_period_seconds.unwrap_or(30);
        self.kill_pod(pod, record, grace, Some(&ids)).await;
    }

    /// Runs one container's preStop hook and stops it, with what is left of the grace period
    /// (at least upstream's minimum after a hook).
    async fn kill_container(
        self: &Arc<Self>,
        pod: &Pod,
        spec_c: Option<Container>,
        c: ContainerRecord,
        grace: i64,
        deadline: Instant,
    ) {
        if c.state == RecordState::Running {
            if let Some(pre_stop) = spec_c
                .as_ref()
                .and_then(|s| s.lifecycle.as_ref())
                .and_then(|l| l.pre_stop.clone())
            {
                let timeout = deadline.saturating_duration_since(Instant::now());
                if let Err(e) = self
                    .run_hook(pod, spec_c.as_ref(), &c.id, &pre_stop, timeout)
                    .await
                {
                    self.event(
                        &container_ref(pod, &c.name),
                        EventType::Warning,
                        "FailedPreStopHook",
                        &format!("PreStopHook failed: {e}"),
                    );
                }
            }
            self.event(
                &container_ref(pod, &c.name),
                EventType::Normal,
                "Killing",
                &format!("Stopping container {}", c.name),
            );
        }
        let left = deadline.saturating_duration_since(Instant::now()).as_secs() as i64;
        let left = left.max(if grace > 0 { MIN_GRACE_SECS } else { 0 });
        if let Err(e) = kr::stop_container(&self.runtime, &c.id, left).await {
            tracing::warn!(container = %c.id, error = %e, "stop container failed");
        }
        self.probes.forget(&c.id);
    }

    /// Runs a lifecycle hook (exec, httpGet or sleep).
    pub(super) async fn run_hook(
        &self,
        pod: &Pod,
        container: Option<&Container>,
        id: &str,
        h: &LifecycleHandler,
        timeout: Duration,
    ) -> Result<(), String> {
        if let Some(s) = &h.sleep {
            tokio::time::sleep(Duration::from_secs(s.seconds.max(0) as u64).min(timeout)).await;
            return Ok(());
        }
        let probe = Probe {
            exec: h.exec.clone(),
            http_get: h.http_get.clone(),
            tcp_socket: h.tcp_socket.clone(),
            ..Default::default()
        };
        let uid = pod.metadata.uid.as_deref().unwrap_or("");
        let ip = kr::pod_record(&self.runtime, uid)
            .await
            .ok()
            .and_then(|r| r.pod_ips.first().cloned());
        let default_container = Container::default();
        let c = container.unwrap_or(&default_container);
        match run_probe(
            &self.runtime,
            &self.config.pod_network,
            &probe,
            c,
            id,
            ip.as_deref(),
            timeout.max(Duration::from_secs(1)),
        )
        .await
        {
            Outcome::Success => Ok(()),
            Outcome::Failure(m) => Err(m),
        }
    }
}
