//! One pod's sync (upstream `kubelet.go` `SyncPod`/`SyncTerminatingPod`/`SyncTerminatedPod` and
//! `kuberuntime_manager.go` `SyncPod`/`KillPod`): make the runtime match the pod (sandbox, volumes,
//! then the plan of [`compute_pod_actions`]: init containers in order, containers with their restart
//! policy and CrashLoopBackOff, liveness/startup kills), or terminate it gracefully, then report its
//! status. The I/O lives here; what to do is decided by the pure `kuberuntime::pod_actions`.
//! Starting a container is in `start.rs`, killing and terminating in `terminate.rs`.

pub(crate) mod admission;
pub(crate) mod resize;
mod start;
mod terminate;

use std::sync::Arc;
use std::time::{Duration, Instant};

use client::events::EventType;
use k8s_openapi::api::core::v1::{Container, LifecycleHandler, ObjectReference, Pod, Probe};

use crate::cri::logs;
use crate::kubelet::{lock, Backoff, Kubelet, BACKOFF_INITIAL, BACKOFF_MAX};
use crate::kuberuntime::pod_actions::{
    compute_pod_actions, is_sidecar, restart_after_exit, ContainerAction, InitStep, ProbeVerdicts,
};
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

pub(super) fn pod_desc(pod: &Pod) -> String {
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

/// What starting or killing a pod's containers needs beyond the container itself.
struct PodContext<'a> {
    pod: &'a Pod,
    /// The runtime's view at the start of the sync (after the sandbox is ensured).
    record: &'a PodRecord,
    volumes: &'a std::collections::HashMap<String, crate::volumes::MountedVolume>,
    pod_dir: &'a std::path::Path,
    pod_ips: &'a [String],
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
        let mut status = pod_status(pod, record, inputs, jiff::Timestamp::now());
        self.decorate_resize_status(pod, record, &mut status);
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
        self.write_pod_cgroup(pod, kr::pod_cgroup::Direction::All);
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

    /// Stops containers without hooks (a lost sandbox: the processes are gone or going anyway).
    async fn kill_arc_free(&self, _pod: &Pod, record: &PodRecord, ids: &[String]) {
        for c in &record.containers {
            if ids.contains(&c.id) && c.state == RecordState::Running {
                let _ = kr::stop_container(&self.runtime, &c.id, 0).await;
            }
            self.probes.forget(&c.id);
        }
    }

    /// Brings the runtime in line with a pod that should run: the sandbox, volumes and
    /// `/etc/hosts`, then the plan of [`compute_pod_actions`] carried out (upstream
    /// `kuberuntime_manager.go` `SyncPod`), then status and probes.
    async fn sync_running(self: &Arc<Self>, pod: &Pod) -> Result<SyncOutcome, String> {
        // Everything below runs the pod as allocated (a resize waits for its admission).
        let allocated = self.allocate(pod);
        let pod = &allocated;
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
        let ctx = PodContext {
            pod,
            record: &record,
            volumes: &volumes,
            pod_dir: &pod_dir,
            pod_ips: &pod_ips,
        };
        let actions = {
            // Scoped: the verdicts borrow closures that are not Sync, and the future is Send.
            let must_restart = |id: &str| self.probes.must_restart(id);
            let started = |id: &str| self.probes.started(id);
            let verdicts = ProbeVerdicts {
                must_restart: &must_restart,
                started: &started,
            };
            compute_pod_actions(&spec, &record, &verdicts)
        };
        let inits: Vec<&Container> = spec.init_containers.iter().flatten().collect();
        let init_named = |name: &str| inits.iter().copied().find(|c| c.name == name);
        // Ephemeral containers before the rest, as upstream: a pod whose init containers fail
        // can still be debugged. Started once; a failed start leaves no record and is retried.
        for name in &actions.ephemeral {
            if let Some(c) = kr::ephemeral::container(pod, name) {
                let start = ContainerAction::Start { attempt: 0 };
                self.apply_action(&ctx, &c, false, "Never", start, &mut inputs, &mut requeue)
                    .await;
            }
        }
        // Sidecars first: a sidecar that must come back does so before anything else starts.
        for (name, action) in actions.sidecars {
            if let Some(c) = init_named(&name) {
                self.apply_action(&ctx, c, true, "Always", action, &mut inputs, &mut requeue)
                    .await;
            }
        }
        if actions.stop_sidecars {
            self.stop_sidecars(pod, &record).await;
        }
        match actions.init {
            InitStep::Next { name, action } => {
                if let Some(c) = init_named(&name) {
                    self.apply_action(&ctx, c, true, &policy, action, &mut inputs, &mut requeue)
                        .await;
                }
            }
            // A running init container (or a sidecar not started yet) is waited for; a failed
            // one with `restartPolicy: Never` fails the pod through its status.
            InitStep::Waiting { .. } | InitStep::Failed { .. } => {}
            InitStep::Done => {
                for (name, action) in actions.containers {
                    if let Some(c) = spec.containers.iter().find(|c| c.name == name) {
                        self.apply_action(
                            &ctx,
                            c,
                            false,
                            &policy,
                            action,
                            &mut inputs,
                            &mut requeue,
                        )
                        .await;
                    }
                }
            }
        }
        self.actuate_resizes(&ctx, &mut requeue).await;
        let mut record = kr::pod_record(&self.runtime, &uid)
            .await
            .map_err(|e| e.to_string())?;
        // Probe workers first: a new container's readiness starts out false, not unknown.
        let probed = spec
            .containers
            .iter()
            .chain(inits.iter().copied().filter(|c| is_sidecar(c)));
        for c in probed {
            if let Some(r) = record.latest(&c.name) {
                if r.state == RecordState::Running {
                    let ready_before = pod
                        .status
                        .as_ref()
                        .and_then(|s| {
                            let statuses = s.container_statuses.iter().flatten();
                            statuses
                                .chain(s.init_container_statuses.iter().flatten())
                                .find(|s| s.name == c.name)
                        })
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

    /// Carries out one container's action: kills (with the `Killing` event) and then restarts
    /// as the restart policy says, applies CrashLoopBackOff to restarts, starts.
    #[allow(clippy::too_many_arguments)]
    async fn apply_action(
        self: &Arc<Self>,
        ctx: &PodContext<'_>,
        c: &Container,
        is_init: bool,
        policy: &str,
        action: ContainerAction,
        inputs: &mut StatusInputs,
        requeue: &mut Option<Duration>,
    ) {
        let pod = ctx.pod;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let (attempt, finished_at) = match action {
            ContainerAction::Keep => return,
            ContainerAction::Start { attempt } => (attempt, None),
            ContainerAction::Replace { old_id, attempt } => {
                let _ = kr::remove_container(&self.runtime, &old_id).await;
                (attempt, None)
            }
            ContainerAction::Restart {
                attempt,
                finished_at,
            } => (attempt, Some(finished_at)),
            ContainerAction::Kill { id, reason } => {
                self.event(
                    &container_ref(pod, &c.name),
                    EventType::Normal,
                    "Killing",
                    &reason.message(&c.name),
                );
                let grace = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
                    .unwrap_or(30);
                self.kill_pod(pod, ctx.record, grace, Some(std::slice::from_ref(&id)))
                    .await;
                match kr::pod_record(&self.runtime, &uid)
                    .await
                    .ok()
                    .and_then(|r| r.latest(&c.name).cloned())
                {
                    Some(r) if r.state == RecordState::Exited => {
                        if !restart_after_exit(policy, r.exit_code) {
                            return;
                        }
                        (r.attempt + 1, Some(r.finished_at))
                    }
                    _ => {
                        *requeue = min_requeue(*requeue, Duration::from_secs(1));
                        return;
                    }
                }
            }
        };
        if let Some(finished_at) = finished_at {
            let key = format!("{uid}/{}", c.name);
            if let Some((left, delay)) = self.check_backoff(&key, finished_at) {
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
                    &format!(
                        "Back-off restarting failed container {} in pod {}",
                        c.name,
                        pod_desc(pod)
                    ),
                );
                inputs
                    .waiting
                    .insert(c.name.clone(), ("CrashLoopBackOff".into(), msg));
                *requeue = min_requeue(*requeue, left);
                return;
            }
        }
        self.start_container(ctx, c, is_init, attempt, inputs, requeue)
            .await;
    }
}
