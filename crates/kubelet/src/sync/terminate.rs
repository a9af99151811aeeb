//! Killing a pod's containers (preStop hooks, grace periods) and terminating a pod that is being
//! deleted or left its source (upstream `SyncTerminatingPod`, `SyncTerminatedPod`, `KillPod`).

use std::sync::Arc;

use super::*;

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
        let running: Vec<_> = record
            .containers
            .iter()
            .filter(|c| c.state == RecordState::Running || c.state == RecordState::Created)
            .filter(|c| only.is_none_or(|ids| ids.contains(&c.id)))
            .cloned()
            .collect();
        let kills = running.into_iter().map(|c| {
            let this = self.clone();
            let spec_c = spec
                .containers
                .iter()
                .chain(spec.init_containers.iter().flatten())
                .find(|s| s.name == c.name)
                .cloned();
            let pod = pod.clone();
            async move {
                let started = Instant::now();
                if c.state == RecordState::Running {
                    if let Some(pre_stop) = spec_c
                        .as_ref()
                        .and_then(|s| s.lifecycle.as_ref())
                        .and_then(|l| l.pre_stop.clone())
                    {
                        let timeout = Duration::from_secs(grace.max(0) as u64);
                        if let Err(e) = this
                            .run_hook(&pod, spec_c.as_ref(), &c.id, &pre_stop, timeout)
                            .await
                        {
                            this.event(
                                &container_ref(&pod, &c.name),
                                EventType::Warning,
                                "FailedPreStopHook",
                                &format!("PreStopHook failed: {e}"),
                            );
                        }
                    }
                    this.event(
                        &container_ref(&pod, &c.name),
                        EventType::Normal,
                        "Killing",
                        &format!("Stopping container {}", c.name),
                    );
                }
                let left = (grace - started.elapsed().as_secs() as i64).max(if grace > 0 {
                    MIN_GRACE_SECS
                } else {
                    0
                });
                if let Err(e) = kr::stop_container(&this.runtime, &c.id, left).await {
                    tracing::warn!(container = %c.id, error = %e, "stop container failed");
                }
                this.probes.forget(&c.id);
            }
        });
        futures::future::join_all(kills).await;
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
