//! One pod's sync (upstream `kubelet.go` `SyncPod`/`SyncTerminatingPod`/`SyncTerminatedPod` and
//! `kuberuntime_manager.go` `computePodActions`/`SyncPod`/`KillPod`): make the runtime match the pod
//! (sandbox, volumes, init containers in order, containers with their restart policy and
//! CrashLoopBackOff, liveness/startup kills, postStart/preStop hooks), or terminate it gracefully, then
//! report its status.

use std::sync::Arc;
use std::time::{Duration, Instant};

use client::events::EventType;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler, ObjectReference, Pod, Probe};

use crate::cri::logs;
use crate::kubelet::{lock, Backoff, Kubelet, BACKOFF_INITIAL, BACKOFF_MAX};
use crate::kuberuntime::container::{container_config, ContainerContext};
use crate::kuberuntime::security_context::SecurityOptions;
use crate::kuberuntime::status::{pod_status, PodRecord, RecordState, StatusInputs};
use crate::kuberuntime::{self as kr, ImageError};
use crate::prober::{container_ref, run_probe, Outcome};
use crate::status_manager::is_static;

/// What a sync asks of the worker.
#[derive(Debug, Default)]
pub struct SyncOutcome {
    /// The pod is gone and cleaned up: stop the worker.
    pub finished: bool,
    /// Sync again after this long (a backoff ends, a retry is due).
    pub requeue: Option<Duration>,
}

/// Upstream's minimum grace period after a preStop hook.
const MIN_GRACE_SECS: i64 = 2;

fn pod_ref(pod: &Pod) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        namespace: pod.metadata.namespace.clone(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        field_path: None,
    }
}

fn pod_desc(pod: &Pod) -> String {
    format!(
        "{}_{}({})",
        pod.metadata.name.as_deref().unwrap_or(""),
        pod.metadata.namespace.as_deref().unwrap_or(""),
        pod.metadata.uid.as_deref().unwrap_or("")
    )
}

fn min_requeue(a: Option<Duration>, b: Duration) -> Option<Duration> {
    Some(a.map_or(b, |a| a.min(b)))
}

impl Kubelet {
    fn event(&self, obj: &ObjectReference, t: EventType, reason: &str, msg: &str) {
        if let Some(r) = &self.recorder {
            r.event(obj, t, reason, msg);
        }
    }

    /// Syncs pod `pod`; `removed`: it left its source.
    pub(crate) async fn sync_pod(self: &Arc<Self>, pod: &Arc<Pod>, removed: bool) -> SyncOutcome {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut pod = (**pod).clone();
        // Compute against what we wrote last (the source's copy may lag behind our own writes).
        if let Some(last) = self.status.last(&uid) {
            if let Ok(s) = serde_json::from_value(last) {
                pod.status = Some(s);
            }
        }
        let deleting = pod.metadata.deletion_timestamp.is_some();
        if removed || deleting {
            return self.terminate(&pod, removed).await;
        }
        match self.sync_running(&pod).await {
            Ok(o) => o,
            Err(e) => {
                tracing::warn!(pod = %pod_desc(&pod), error = %e, "pod sync failed");
                SyncOutcome {
                    finished: false,
                    requeue: Some(Duration::from_secs(2)),
                }
            }
        }
    }

    async fn write_status(
        &self,
        pod: &Pod,
        record: &PodRecord,
        inputs: &StatusInputs,
    ) -> serde_json::Value {
        let status = pod_status(pod, record, inputs, jiff::Timestamp::now());
        if let Err(e) = self.status.set(pod, status.clone()).await {
            tracing::warn!(pod = %pod_desc(pod), error = %e, "status update failed");
        }
        status
    }

    fn status_inputs(&self, record: &PodRecord) -> StatusInputs {
        let mut inputs = StatusInputs {
            host_ip: self.config.node_ip.to_string(),
            ..Default::default()
        };
        for c in &record.containers {
            if let Some(r) = self.probes.ready(&c.id) {
                inputs.ready.insert(c.id.clone(), r);
            }
            if let Some(s) = self.probes.started(&c.id) {
                inputs.started.insert(c.id.clone(), s);
            }
        }
        inputs
    }

    /// Terminates a pod being deleted or gone from its source (upstream `SyncTerminatingPod` +
    /// `SyncTerminatedPod`), then deletes it from the API (deleted API pods) or cleans up (removed pods).
    async fn terminate(self: &Arc<Self>, pod: &Pod, removed: bool) -> SyncOutcome {
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
    async fn kill_pod(
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
    async fn run_hook(
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

    /// The backoff state of `key` for a container that finished at `finished_ns`: Some(remaining) while
    /// it must wait; otherwise records the restart and returns None (upstream `doBackOff`).
    fn check_backoff(&self, key: &str, finished_ns: i64) -> Option<(Duration, Duration)> {
        let mut map = lock(&self.backoff);
        let finished = std::time::UNIX_EPOCH + Duration::from_nanos(finished_ns.max(0) as u64);
        let since = std::time::SystemTime::now()
            .duration_since(finished)
            .unwrap_or_default();
        match map.get_mut(key) {
            Some(b) if since < b.delay => Some((b.delay - since, b.delay)),
            Some(b) => {
                b.delay = (b.delay * 2).min(BACKOFF_MAX);
                None
            }
            None => {
                map.insert(
                    key.to_string(),
                    Backoff {
                        delay: BACKOFF_INITIAL,
                    },
                );
                None
            }
        }
    }

    async fn ensure_sandbox(&self, pod: &Pod, record: &mut PodRecord) -> Result<(), String> {
        if record.sandbox_ready {
            return Ok(());
        }
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let attempt = u32::from(record.sandbox_id.is_some());
        if record.sandbox_id.is_some() {
            self.event(
                &pod_ref(pod),
                EventType::Normal,
                "SandboxChanged",
                "Pod sandbox changed, it will be killed and re-created.",
            );
            let all: Vec<String> = record.containers.iter().map(|c| c.id.clone()).collect();
            self.kill_arc_free(pod, record, &all).await;
        }
        let log_dir = logs::pod_log_dir(
            &self.config.pod_logs_dir,
            pod.metadata.namespace.as_deref().unwrap_or(""),
            pod.metadata.name.as_deref().unwrap_or(""),
            &uid,
        );
        std::fs::create_dir_all(&log_dir).map_err(|e| format!("{}: {e}", log_dir.display()))?;
        let seccomp_root = self.config.seccomp_root();
        let config = match kr::config::sandbox_config(
            pod,
            attempt,
            &log_dir.display().to_string(),
            &self.config.cgroup_root,
            &self.config.cluster_dns,
            &self.config.cluster_domain,
            &self.security_options(&seccomp_root),
        ) {
            Ok(c) => c,
            Err(e) => {
                let msg = format!(
                    "Failed to generate sandbox config for pod {:?}: {e}",
                    pod_desc(pod)
                );
                self.event(
                    &pod_ref(pod),
                    EventType::Warning,
                    "FailedCreatePodSandBox",
                    &msg,
                );
                return Err(msg);
            }
        };
        if let Err(e) = kr::run_sandbox(&self.runtime, config).await {
            let msg = format!("Failed to create pod sandbox: {e}");
            self.event(
                &pod_ref(pod),
                EventType::Warning,
                "FailedCreatePodSandBox",
                &msg,
            );
            return Err(msg);
        }
        *record = kr::pod_record(&self.runtime, &uid)
            .await
            .map_err(|e| e.to_string())?;
        Ok(())
    }

    fn security_options<'a>(&self, seccomp_root: &'a std::path::Path) -> SecurityOptions<'a> {
        SecurityOptions {
            seccomp_root,
            seccomp_default: self.config.seccomp_default,
        }
    }

    /// The node's admission of a pod that has not started yet (upstream `canAdmitPod` for the
    /// checks that depend on the node: sysctls, AppArmor, `supplementalGroupsPolicy`); a refused
    /// pod fails with the reason and an event, as upstream's `rejectPod`.
    async fn admit(&self, pod: &Pod, record: &PodRecord) -> Result<bool, String> {
        let pending = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            None | Some("Pending") | Some("")
        );
        if record.sandbox_id.is_some() || !pending {
            return Ok(true);
        }
        let node = kr::admit::NodeSupport {
            sysctls: &self.sysctls,
            apparmor: self.apparmor,
            strict_supplemental_groups: false,
        };
        let Err(r) = kr::admit::admit(pod, &node) else {
            return Ok(true);
        };
        self.event(&pod_ref(pod), EventType::Warning, r.reason, &r.message);
        let mut status = serde_json::json!({
            "phase": "Failed",
            "reason": r.reason,
            "message": r.status_message(),
        });
        status["qosClass"] = serde_json::json!(kr::config::qos_class(pod));
        // Not written: the sync fails and is retried, so the rejection is not lost.
        self.status.set(pod, status).await?;
        Ok(false)
    }

    /// Stops containers without hooks (a lost sandbox: the processes are gone or going anyway).
    async fn kill_arc_free(&self, _pod: &Pod, record: &PodRecord, ids: &[String]) {
        for c in &record.containers {
            if ids.contains(&c.id) && c.state == RecordState::Running {
                let _ = kr::stop_container(&self.runtime, &c.id, 0).await;
            }
            self.probes.forget(&c.id);
        }
    }

    /// Brings the runtime in line with a pod that should run.
    async fn sync_running(self: &Arc<Self>, pod: &Pod) -> Result<SyncOutcome, String> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let spec = pod.spec.clone().unwrap_or_default();
        let policy = spec
            .restart_policy
            .clone()
            .unwrap_or_else(|| "Always".into());
        let mut record = kr::pod_record(&self.runtime, &uid)
            .await
            .map_err(|e| e.to_string())?;
        let mut inputs = self.status_inputs(&record);
        let mut requeue = None;
        if is_static(pod) {
            if let Err(e) = self.status.ensure_mirror(pod).await {
                tracing::warn!(error = %e, "mirror pod");
            }
        }
        // A pod that reached a terminal phase never starts again (upstream: terminal pods are not synced).
        let previous_phase = pod
            .status
            .as_ref()
            .and_then(|s| s.phase.clone())
            .unwrap_or_default();
        if matches!(previous_phase.as_str(), "Succeeded" | "Failed") {
            // A pod rejected at admission never had a sandbox: its status says why, keep it.
            if record.sandbox_id.is_none() && record.containers.is_empty() {
                return Ok(SyncOutcome::default());
            }
            if record.sandbox_ready {
                if let Some(id) = &record.sandbox_id {
                    let _ = kr::stop_sandbox(&self.runtime, id).await;
                }
                record = kr::pod_record(&self.runtime, &uid)
                    .await
                    .map_err(|e| e.to_string())?;
            }
            self.write_status(pod, &record, &inputs).await;
            return Ok(SyncOutcome::default());
        }
        if !self.admit(pod, &record).await? {
            return Ok(SyncOutcome::default());
        }
        let pod_dir = self.config.pod_dir(&uid);
        std::fs::create_dir_all(&pod_dir).map_err(|e| format!("{}: {e}", pod_dir.display()))?;
        if let Err(e) = self.ensure_sandbox(pod, &mut record).await {
            self.write_status(pod, &record, &inputs).await;
            return Err(e);
        }
        let host_ip = self.config.node_ip.to_string();
        let pod_ips = if spec.host_network == Some(true) {
            vec![host_ip.clone()]
        } else {
            record.pod_ips.clone()
        };
        let volumes = match self.volumes.setup(pod).await {
            Ok(v) => v,
            Err(e) => {
                self.event(&pod_ref(pod), EventType::Warning, "FailedMount", &e);
                self.write_status(pod, &record, &inputs).await;
                return Ok(SyncOutcome {
                    finished: false,
                    requeue: Some(Duration::from_secs(5)),
                });
            }
        };
        let hosts_path = pod_dir.join("etc-hosts");
        if let Some(hosts) = kr::etc_hosts::hosts_file(pod, &pod_ips, &self.config.cluster_domain) {
            if std::fs::read_to_string(&hosts_path).ok().as_deref() != Some(hosts.as_str()) {
                std::fs::write(&hosts_path, hosts)
                    .map_err(|e| format!("{}: {e}", hosts_path.display()))?;
            }
        }
        // Init containers, in order: each must succeed before the next starts.
        let mut init_done = true;
        let app_started = spec
            .containers
            .iter()
            .any(|c| record.latest(&c.name).is_some());
        if !app_started {
            for c in spec.init_containers.iter().flatten() {
                match record.latest(&c.name).cloned() {
                    Some(r) if r.state == RecordState::Exited && r.exit_code == 0 => continue,
                    Some(r) if r.state == RecordState::Running => {
                        init_done = false;
                        break;
                    }
                    Some(r) if r.state == RecordState::Exited => {
                        init_done = false;
                        if policy == "Never" {
                            break;
                        }
                        let key = format!("{uid}/{}", c.name);
                        if let Some((left, delay)) = self.check_backoff(&key, r.finished_at) {
                            inputs.waiting.insert(
                                c.name.clone(),
                                (
                                    "CrashLoopBackOff".into(),
                                    format!(
                                        "back-off {}s restarting failed container={} pod={}",
                                        delay.as_secs(),
                                        c.name,
                                        pod_desc(pod)
                                    ),
                                ),
                            );
                            requeue = min_requeue(requeue, left);
                        } else {
                            self.start_container(
                                pod,
                                c,
                                true,
                                r.attempt + 1,
                                &volumes,
                                &pod_dir,
                                &pod_ips,
                                &mut inputs,
                                &mut requeue,
                            )
                            .await;
                        }
                        break;
                    }
                    other => {
                        init_done = false;
                        let attempt = other.map_or(0, |r| r.attempt + 1);
                        self.start_container(
                            pod,
                            c,
                            true,
                            attempt,
                            &volumes,
                            &pod_dir,
                            &pod_ips,
                            &mut inputs,
                            &mut requeue,
                        )
                        .await;
                        break;
                    }
                }
            }
        }
        if init_done {
            for c in &spec.containers {
                self.sync_container(
                    pod,
                    c,
                    &policy,
                    &record,
                    &volumes,
                    &pod_dir,
                    &pod_ips,
                    &mut inputs,
                    &mut requeue,
                )
                .await;
            }
        }
        let mut record = kr::pod_record(&self.runtime, &uid)
            .await
            .map_err(|e| e.to_string())?;
        // Probe workers first: a new container's readiness starts out false, not unknown.
        for c in &spec.containers {
            if let Some(r) = record.latest(&c.name) {
                if r.state == RecordState::Running {
                    let ready_before = pod
                        .status
                        .as_ref()
                        .and_then(|s| s.container_statuses.as_ref())
                        .and_then(|cs| cs.iter().find(|s| s.name == c.name))
                        .is_some_and(|s| {
                            s.ready
                                && s.container_id.as_deref()
                                    == Some(&format!("containerd://{}", r.id))
                        });
                    self.probes.ensure(
                        &Arc::new(pod.clone()),
                        c,
                        &r.id,
                        r.started_at,
                        ready_before,
                    );
                }
            }
        }
        let mut fresh = self.status_inputs(&record);
        fresh.waiting = inputs.waiting;
        let status = self.write_status(pod, &record, &fresh).await;
        // A pod that just ended gives back its sandbox (and IP); its containers stay for logs.
        if matches!(status["phase"].as_str(), Some("Succeeded" | "Failed")) && record.sandbox_ready
        {
            if let Some(id) = record.sandbox_id.clone() {
                let _ = kr::stop_sandbox(&self.runtime, &id).await;
                record = kr::pod_record(&self.runtime, &uid)
                    .await
                    .map_err(|e| e.to_string())?;
                self.write_status(pod, &record, &fresh).await;
            }
        }
        self.gc_dead_containers(&record).await;
        Ok(SyncOutcome {
            finished: false,
            requeue,
        })
    }

    #[allow(clippy::too_many_arguments)]
    async fn sync_container(
        self: &Arc<Self>,
        pod: &Pod,
        c: &Container,
        policy: &str,
        record: &PodRecord,
        volumes: &std::collections::HashMap<String, crate::volumes::MountedVolume>,
        pod_dir: &std::path::Path,
        pod_ips: &[String],
        inputs: &mut StatusInputs,
        requeue: &mut Option<Duration>,
    ) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let Some(latest) = record.latest(&c.name).cloned() else {
            self.start_container(pod, c, false, 0, volumes, pod_dir, pod_ips, inputs, requeue)
                .await;
            return;
        };
        let mut exited = latest.clone();
        match latest.state {
            RecordState::Running => {
                let changed =
                    !latest.hash.is_empty() && latest.hash != kr::config::container_hash(c);
                let probe_kill = self.probes.must_restart(&latest.id);
                if !changed && probe_kill.is_none() {
                    return;
                }
                let message = match probe_kill {
                    Some(kind) => format!(
                        "Container {} failed {} probe, will be restarted",
                        c.name,
                        if kind == crate::prober::ProbeKind::Liveness {
                            "liveness"
                        } else {
                            "startup"
                        }
                    ),
                    None => format!("Container {} definition changed, will be restarted", c.name),
                };
                self.event(
                    &container_ref(pod, &c.name),
                    EventType::Normal,
                    "Killing",
                    &message,
                );
                let grace = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
                    .unwrap_or(30);
                self.kill_pod(pod, record, grace, Some(std::slice::from_ref(&latest.id)))
                    .await;
                match kr::pod_record(&self.runtime, &uid)
                    .await
                    .ok()
                    .and_then(|r| r.latest(&c.name).cloned())
                {
                    Some(r) if r.state == RecordState::Exited => exited = r,
                    _ => {
                        *requeue = min_requeue(*requeue, Duration::from_secs(1));
                        return;
                    }
                }
            }
            RecordState::Created | RecordState::Unknown => {
                // Created but never started (a failed start): replace it.
                let _ = kr::remove_container(&self.runtime, &latest.id).await;
                self.start_container(
                    pod,
                    c,
                    false,
                    latest.attempt + 1,
                    volumes,
                    pod_dir,
                    pod_ips,
                    inputs,
                    requeue,
                )
                .await;
                return;
            }
            RecordState::Exited => {}
        }
        let restart = match policy {
            "Always" => true,
            "OnFailure" => exited.exit_code != 0,
            _ => false,
        };
        if !restart {
            return;
        }
        let key = format!("{uid}/{}", c.name);
        if let Some((left, delay)) = self.check_backoff(&key, exited.finished_at) {
            let msg = format!(
                "back-off {}s restarting failed container={} pod={}",
                delay.as_secs(),
                c.name,
                pod_desc(pod)
            );
            self.event(
                &container_ref(pod, &c.name),
                EventType::Warning,
                "BackOff",
                "Back-off restarting failed container",
            );
            inputs
                .waiting
                .insert(c.name.clone(), ("CrashLoopBackOff".into(), msg));
            *requeue = min_requeue(*requeue, left);
            return;
        }
        self.start_container(
            pod,
            c,
            false,
            exited.attempt + 1,
            volumes,
            pod_dir,
            pod_ips,
            inputs,
            requeue,
        )
        .await;
    }

    /// Image, config, create, start, postStart (upstream `startContainer`); failures become the
    /// container's waiting reason and an event.
    #[allow(clippy::too_many_arguments)]
    async fn start_container(
        self: &Arc<Self>,
        pod: &Pod,
        c: &Container,
        is_init: bool,
        attempt: u32,
        volumes: &std::collections::HashMap<String, crate::volumes::MountedVolume>,
        pod_dir: &std::path::Path,
        pod_ips: &[String],
        inputs: &mut StatusInputs,
        requeue: &mut Option<Duration>,
    ) {
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
        let config = match container_config(&ctx).await {
            Ok(cfg) => cfg,
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
    async fn gc_dead_containers(&self, record: &PodRecord) {
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
