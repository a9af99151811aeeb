//! The attach/detach controller (upstream `pkg/controller/volume/attachdetach`,
//! `attachdetach-controller`), for CSI volumes: it attaches a CSI persistent volume to a node
//! by creating the VolumeAttachment an external attacher acts on, once a pod scheduled there
//! uses it, publishes it in the node's `status.volumesAttached` once the attacher reports
//! `status.attached`, and detaches it (deletes the VolumeAttachment) once no pod there uses it
//! and the kubelet has unmounted it.
//!
//! As upstream: a desired state (managed nodes, the volumes their pods use) kept by the pod, node
//! and claim handlers and a populator that every minute drops pods gone, terminated or replaced
//! and every 3 minutes re-adds active ones; an actual state (attachments, confirmed or uncertain,
//! whether the node still lists them in `volumesInUse`); a reconciler every 100 ms that detaches
//! before it attaches ([`reconciler`]), one operation per volume at a time with exponential
//! backoff ([`operations`]); a check every minute that attached volumes still have an attached
//! VolumeAttachment. Only nodes with the `volumes.kubernetes.io/controller-managed-attach-detach`
//! annotation (any value; the kubelet sets it) are managed. A volume needs attaching when its
//! driver has no CSIDriver object or one without `attachRequired: false`; inline `csi` pod
//! volumes never do. Pods get `SuccessfulAttachVolume` / `FailedAttachVolume` events with
//! upstream's messages, Multi-Attach errors included. At startup the actual state is read back
//! from the nodes' `volumesAttached` and the VolumeAttachments.
//!
//! Differences: claim changes are handled in the informer callback rather than a queue of their
//! own; volume (PV) and CSIDriver changes are also acted on at once (upstream waits for its
//! populator), as are the pods of a node that becomes managed; volumes in a node's status whose
//! plugin is not CSI are left alone instead of failing to detach every pass; whether a volume
//! is still attached is read from the VolumeAttachment cache only; no metrics; no CSI migration
//! of in-tree volumes (so never an `inlineVolumeSpec` source) and no in-tree attachable plugins.
//!
//! The kubelet side is missing: rkube's kubelet sets the opt-in annotation but mounts no CSI
//! volumes, does not wait for a volume to appear in `volumesAttached` before starting a pod, and
//! never reports `volumesInUse`; so a volume is detached as soon as its last pod is gone (nothing
//! to unmount) and a CSI pod volume is never actually usable on an rkube node.

pub mod actual;
pub mod desired;
pub mod executor;
pub mod operations;
pub mod reconciler;
pub mod volumes;

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use client::events::{ApiEventSink, EventBroadcaster, EventType, Recorder};
use client::informer::{EventHandlerFuncs, SharedInformerFactory, Store};
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::{CSIDriver, VolumeAttachment};
use kube::Resource;
use tokio::sync::Notify;
use tokio::task::JoinSet;

use actual::{ActualState, AttachState};
use desired::DesiredState;
use operations::{OpKind, Operations};
use reconciler::{op_node, volume_message, AttachStep, DetachStep, NodeHealth, Step};
use volumes::{
    is_attachable, is_managed, keeps_volumes, pod_node, pod_volumes, resolve, volumes_in_use,
    Objects, Resolution, VolumeSpec,
};

use crate::volume::{index_pods_by_claim, is_pod_terminated, POD_PVC_INDEX};

/// Upstream's canonical controller name, also its events' source.
pub const CONTROLLER_NAME: &str = "attachdetach-controller";

/// Upstream's `TimerConfig` and the controller's flags, with their defaults.
#[derive(Clone, Debug)]
pub struct Options {
    /// `ReconcilerLoopPeriod`.
    pub reconciler_loop_period: Duration,
    /// `ReconcilerMaxWaitForUnmountDuration`.
    pub max_wait_for_unmount: Duration,
    /// `DesiredStateOfWorldPopulatorLoopSleepPeriod`.
    pub populator_loop_period: Duration,
    /// `DesiredStateOfWorldPopulatorListPodsRetryDuration`.
    pub populator_list_pods_period: Duration,
    /// `--attach-detach-reconcile-sync-period` (under a second turns the check off, as upstream).
    pub reconciler_sync_period: Duration,
    /// `--disable-attach-detach-reconcile-sync`.
    pub disable_reconciliation_sync: bool,
    /// `--disable-force-detach-on-timeout`.
    pub disable_force_detach_on_timeout: bool,
    /// The CSI attacher's wait for the external attacher (upstream `csiTimeout`).
    pub attach_timeout: Duration,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            reconciler_loop_period: Duration::from_millis(100),
            max_wait_for_unmount: reconciler::MAX_WAIT_FOR_UNMOUNT,
            populator_loop_period: Duration::from_secs(60),
            populator_list_pods_period: Duration::from_secs(180),
            reconciler_sync_period: Duration::from_secs(60),
            disable_reconciliation_sync: false,
            disable_force_detach_on_timeout: false,
            attach_timeout: executor::CSI_TIMEOUT,
        }
    }
}

/// Both states and the operations, under one lock (upstream's caches lock separately; one lock
/// keeps a pass of the reconciler consistent).
#[derive(Debug, Default)]
pub struct State {
    pub desired: DesiredState,
    pub actual: ActualState,
    pub operations: Operations,
}

pub struct Ctx {
    client: kube::Client,
    pods: Arc<Store<Pod>>,
    nodes: Arc<Store<Node>>,
    claims: Arc<Store<PersistentVolumeClaim>>,
    volumes: Arc<Store<PersistentVolume>>,
    drivers: Arc<Store<CSIDriver>>,
    attachments: Arc<Store<VolumeAttachment>>,
    state: Mutex<State>,
    recorder: Recorder,
    options: Options,
    /// Wakes operations waiting on a VolumeAttachment.
    attachments_changed: Notify,
    /// Runs the populator now (a CSIDriver changed).
    populate_now: Notify,
}

impl Objects for Ctx {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims.get(&format!("{namespace}/{name}"))
    }
    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.volumes.get(name)
    }
    fn driver(&self, name: &str) -> Option<Arc<CSIDriver>> {
        self.drivers.get(name)
    }
}

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or("")
}

/// Runs the controller until the future is dropped.
pub async fn run(client: kube::Client, factory: &Arc<SharedInformerFactory>, options: Options) {
    let pod_informer = factory.informer::<Pod>();
    let node_informer = factory.informer::<Node>();
    let claim_informer = factory.informer::<PersistentVolumeClaim>();
    let volume_informer = factory.informer::<PersistentVolume>();
    let driver_informer = factory.informer::<CSIDriver>();
    let attachment_informer = factory.informer::<VolumeAttachment>();
    index_pods_by_claim(&pod_informer);
    crate::index_pods_by_node(&pod_informer);
    let broadcaster = EventBroadcaster::new();
    broadcaster.start_recording_to_sink(ApiEventSink::new(client.clone()));
    let ctx = Arc::new(Ctx {
        client,
        pods: pod_informer.store(),
        nodes: node_informer.store(),
        claims: claim_informer.store(),
        volumes: volume_informer.store(),
        drivers: driver_informer.store(),
        attachments: attachment_informer.store(),
        state: Mutex::new(State::default()),
        recorder: broadcaster.new_recorder(CONTROLLER_NAME, ""),
        options,
        attachments_changed: Notify::new(),
        populate_now: Notify::new(),
    });

    let (p1, p2, p3) = (ctx.clone(), ctx.clone(), ctx.clone());
    pod_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |p: &Arc<Pod>, _| p1.pod_changed(p))
            .on_update(move |_, p: &Arc<Pod>| p2.pod_changed(p))
            .on_delete(move |d| p3.pod_deleted(d.object())),
    );
    let (n1, n2, n3) = (ctx.clone(), ctx.clone(), ctx.clone());
    node_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |n: &Arc<Node>, _| n1.node_changed(n, true))
            .on_update(move |_, n: &Arc<Node>| n2.node_changed(n, false))
            .on_delete(move |d| n3.node_deleted(d.object())),
    );
    let (c1, c2) = (ctx.clone(), ctx.clone());
    claim_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |c: &Arc<PersistentVolumeClaim>, _| c1.claim_changed(c))
            .on_update(move |_, c: &Arc<PersistentVolumeClaim>| c2.claim_changed(c)),
    );
    let (v1, v2) = (ctx.clone(), ctx.clone());
    volume_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |v: &Arc<PersistentVolume>, _| v1.volume_changed(v))
            .on_update(move |_, v: &Arc<PersistentVolume>| v2.volume_changed(v)),
    );
    let (d1, d2, d3) = (ctx.clone(), ctx.clone(), ctx.clone());
    driver_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |_: &Arc<CSIDriver>, _| d1.populate_now.notify_one())
            .on_update(move |_, _: &Arc<CSIDriver>| d2.populate_now.notify_one())
            .on_delete(move |_| d3.populate_now.notify_one()),
    );
    let (a1, a2, a3) = (ctx.clone(), ctx.clone(), ctx.clone());
    attachment_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |_: &Arc<VolumeAttachment>, _| a1.attachments_changed.notify_waiters())
            .on_update(move |_, _: &Arc<VolumeAttachment>| a2.attachments_changed.notify_waiters())
            .on_delete(move |_| a3.attachments_changed.notify_waiters()),
    );

    factory.start();
    factory.wait_for_cache_sync().await;
    tracing::info!(controller = CONTROLLER_NAME, "starting controller");
    ctx.populate_actual_state();
    ctx.populate_desired_state();
    let _broadcaster = broadcaster;
    futures::future::join(ctx.reconcile_loop(), ctx.populator_loop()).await;
}

impl Ctx {
    pub fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn record(&self, pod: &Pod, warning: bool, reason: &str, message: &str) {
        let kind = if warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        self.recorder
            .event(&pod.object_ref(&()), kind, reason, message);
    }

    fn node_health(&self, node: &str) -> NodeHealth {
        self.nodes
            .get(node)
            .map(|n| NodeHealth {
                ready: volumes::is_ready(&n),
                out_of_service: volumes::has_out_of_service_taint(&n),
            })
            .unwrap_or_default()
    }

    // ---- the desired state (upstream's handlers and `util.ProcessPodVolumes`) ----

    /// Adds (or removes) the pod's attachable volumes on its node, if the node is managed.
    fn process_pod_volumes(&self, state: &mut State, pod: &Arc<Pod>, add: bool) {
        let node = pod_node(pod);
        if node.is_empty() || !state.desired.node_exists(node) {
            return;
        }
        for volume in pod_volumes(pod) {
            match resolve(pod, volume, self) {
                Resolution::Attachable(spec) if add => {
                    if let Err(e) = state.desired.add_pod(uid(pod), pod.clone(), &spec, node) {
                        tracing::debug!(error = %e, "could not add the pod's volume");
                    }
                }
                Resolution::Attachable(spec) => {
                    state
                        .desired
                        .delete_pod(uid(pod), &spec.unique_name(), node)
                }
                Resolution::NotAttachable => {}
                Resolution::Unresolved(why) => {
                    tracing::trace!(pod = %crate::volume::key_of(&pod.metadata), volume = %volume.name, %why, "volume not resolved")
                }
            }
        }
    }

    /// Upstream `podAdd` / `podUpdate`.
    fn pod_changed(&self, pod: &Arc<Pod>) {
        if pod_node(pod).is_empty() {
            return;
        }
        let add = keeps_volumes(pod);
        self.process_pod_volumes(&mut self.lock(), pod, add);
    }

    /// Upstream `podDelete`.
    fn pod_deleted(&self, pod: &Arc<Pod>) {
        self.process_pod_volumes(&mut self.lock(), pod, false);
    }

    /// Upstream `syncPVCByKey`: a claim just bound may complete its pods' volumes.
    fn claim_changed(&self, claim: &PersistentVolumeClaim) {
        let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
        let has_volume = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.as_deref())
            .is_some_and(|v| !v.is_empty());
        if !bound || !has_volume {
            return;
        }
        let key = crate::volume::key_of(&claim.metadata);
        let pods = self.pods.by_index(POD_PVC_INDEX, &key).unwrap_or_default();
        let mut state = self.lock();
        for pod in pods {
            if pod_node(&pod).is_empty() || is_pod_terminated(&pod) {
                continue;
            }
            let add = keeps_volumes(&pod);
            self.process_pod_volumes(&mut state, &pod, add);
        }
    }

    /// A volume bound (or rebound) after its claim: its claim's pods may resolve now.
    fn volume_changed(&self, volume: &PersistentVolume) {
        let Some(claim_ref) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
            return;
        };
        let (ns, name) = (
            claim_ref.namespace.as_deref().unwrap_or(""),
            claim_ref.name.as_deref().unwrap_or(""),
        );
        if let Some(claim) = self.claim(ns, name) {
            self.claim_changed(&claim);
        }
    }

    /// Upstream `nodeAdd` / `nodeUpdate`.
    fn node_changed(&self, node: &Arc<Node>, added: bool) {
        let name = node.metadata.name.as_deref().unwrap_or("");
        let mut state = self.lock();
        let newly_managed = is_managed(node) && state.desired.add_node(name);
        state
            .actual
            .set_volumes_mounted_by_node(&volumes_in_use(node), name);
        if added {
            // Upstream: a re-created Node object lost its volumesAttached; write it again.
            state.actual.set_node_status_update_needed(name);
        }
        if newly_managed {
            let pods = self
                .pods
                .by_index(crate::POD_NODE_INDEX, name)
                .unwrap_or_default();
            for pod in pods {
                if keeps_volumes(&pod) {
                    self.process_pod_volumes(&mut state, &pod, true);
                }
            }
        }
    }

    /// Upstream `nodeDelete`.
    fn node_deleted(&self, node: &Node) {
        let name = node.metadata.name.as_deref().unwrap_or("");
        let mut state = self.lock();
        if let Err(e) = state.desired.delete_node(name) {
            tracing::info!(node = name, error = %e, "error removing node from desired-state-of-world");
        }
        state
            .actual
            .set_volumes_mounted_by_node(&volumes_in_use(node), name);
    }

    // ---- startup ----

    /// Upstream `populateActualStateOfWorld` and `processVolumeAttachments`.
    fn populate_actual_state(&self) {
        let mut state = self.lock();
        for node in self.nodes.list() {
            let name = node.metadata.name.as_deref().unwrap_or("");
            let attached = node
                .status
                .as_ref()
                .and_then(|s| s.volumes_attached.as_ref());
            for volume in attached.into_iter().flatten() {
                state
                    .actual
                    .mark_attached(&volume.name, None, name, &volume.device_path);
            }
            state
                .actual
                .set_volumes_mounted_by_node(&volumes_in_use(&node), name);
            if is_managed(&node) {
                state.desired.add_node(name);
            }
        }
        // A VolumeAttachment not reflected in any node's status may still be attached.
        for va in self.attachments.list() {
            let node = va.spec.node_name.as_str();
            let Some(pv_name) = va.spec.source.persistent_volume_name.as_deref() else {
                continue;
            };
            let Some(pv) = self.volume(pv_name) else {
                continue;
            };
            let Some(spec) = VolumeSpec::from_persistent_volume(&pv) else {
                continue;
            };
            if !is_attachable(&spec, self) {
                continue;
            }
            let name = spec.unique_name();
            if state.actual.attach_state(&name, node) == AttachState::Detached {
                tracing::info!(%node, volume = %name, "marking volume attachment as uncertain as volume is not attached");
                state.actual.mark_uncertain(&name, Some(spec), node);
            }
        }
    }

    /// Upstream `populateDesiredStateOfWorld`: the pods, and the specs of the volumes read back
    /// from node statuses without one.
    fn populate_desired_state(&self) {
        for pod in self.pods.list() {
            self.pod_changed(&pod);
            let node = pod_node(&pod);
            let mut state = self.lock();
            for volume in pod_volumes(&pod) {
                let Resolution::Attachable(spec) = resolve(&pod, volume, self) else {
                    continue;
                };
                let name = spec.unique_name();
                if state.actual.attach_state(&name, node) != AttachState::Attached {
                    continue;
                }
                let device_path = self.nodes.get(node).and_then(|n| {
                    let attached = n.status.as_ref()?.volumes_attached.as_ref()?;
                    attached
                        .iter()
                        .find(|v| v.name == name)
                        .map(|v| v.device_path.clone())
                });
                if let Some(path) = device_path {
                    state.actual.mark_attached(&name, Some(spec), node, &path);
                }
            }
        }
    }

    // ---- the populator (upstream `desiredStateOfWorldPopulator`) ----

    async fn populator_loop(self: &Arc<Self>) {
        let mut last_list: Option<Instant> = None;
        loop {
            self.find_and_remove_deleted_pods();
            let due =
                last_list.is_none_or(|t| t.elapsed() >= self.options.populator_list_pods_period);
            if due {
                self.find_and_add_active_pods();
                last_list = Some(Instant::now());
            }
            tokio::select! {
                _ = tokio::time::sleep(self.options.populator_loop_period) => {}
                _ = self.populate_now.notified() => last_list = None,
            }
        }
    }

    /// Drops the pods that are gone, terminated or replaced (another UID), and the volumes whose
    /// driver no longer needs attaching.
    fn find_and_remove_deleted_pods(&self) {
        let mut state = self.lock();
        for entry in state.desired.pods() {
            let key = crate::volume::key_of(&entry.pod.metadata);
            let keep = self
                .pods
                .get(&key)
                .is_some_and(|p| keeps_volumes(&p) && uid(&p) == entry.uid);
            if !keep {
                tracing::debug!(pod = %key, uid = %entry.uid, "removing pod from dsw because it does not exist in pod informer");
                state
                    .desired
                    .delete_pod(&entry.uid, &entry.volume, &entry.node);
            }
        }
        for want in state.desired.volumes_to_attach() {
            if is_attachable(&want.spec, self) {
                continue;
            }
            tracing::info!(volume = %want.volume, "volume changes from attachable to non-attachable");
            for pod in &want.pods {
                state.desired.delete_pod(uid(pod), &want.volume, &want.node);
            }
        }
    }

    fn find_and_add_active_pods(&self) {
        let pods = self.pods.list();
        let mut state = self.lock();
        for pod in pods {
            if !is_pod_terminated(&pod) {
                self.process_pod_volumes(&mut state, &pod, true);
            }
        }
    }

    // ---- the reconciler ----

    async fn reconcile_loop(self: &Arc<Self>) {
        let mut tasks = JoinSet::new();
        let mut last_sync = Instant::now();
        let mut tick = tokio::time::interval(self.options.reconciler_loop_period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            while tasks.try_join_next().is_some() {}
            self.reconcile_once(&mut tasks).await;
            let period = self.options.reconciler_sync_period;
            if !self.options.disable_reconciliation_sync
                && period >= Duration::from_secs(1)
                && last_sync.elapsed() > period
            {
                self.sync_states();
                last_sync = Instant::now();
            }
        }
    }

    async fn reconcile_once(self: &Arc<Self>, tasks: &mut JoinSet<()>) {
        let config = reconciler::Config {
            max_wait_for_unmount: self.options.max_wait_for_unmount,
            disable_force_detach_on_timeout: self.options.disable_force_detach_on_timeout,
        };
        let steps = {
            let now = Instant::now();
            let mut guard = self.lock();
            let state = &mut *guard;
            state.operations.forget_stale(now);
            reconciler::reconcile(
                &mut state.desired,
                &mut state.actual,
                &state.operations,
                |n| self.node_health(n),
                now,
                &config,
            )
        };
        for step in steps {
            match step {
                Step::Event(e) => self.record(&e.pod, e.warning, e.reason, &e.message),
                Step::Detach(d) => self.start_detach(d, tasks).await,
                Step::Attach(a) => {
                    let key = op_node(Some(&a.spec), &a.node);
                    let started = self.lock().operations.start(
                        &a.volume,
                        key,
                        OpKind::Attach,
                        Instant::now(),
                    );
                    if started {
                        tracing::info!(volume = %a.volume, node = %a.node, "attacherDetacher.AttachVolume started");
                        let ctx = self.clone();
                        tasks.spawn(async move { ctx.attach(a).await });
                    }
                }
            }
        }
        executor::update_node_statuses(self).await;
    }

    /// Upstream: the node's status loses the volume first; if that write fails the detach waits.
    async fn start_detach(self: &Arc<Self>, d: DetachStep, tasks: &mut JoinSet<()>) {
        if let Err(e) = executor::update_node_status(self, &d.node).await {
            tracing::warn!(error = %e, volume = %d.volume, node = %d.node, "UpdateNodeStatusForNode failed while attempting to report volume as attached");
            self.lock().actual.add_to_report(&d.volume, &d.node);
            return;
        }
        let key = op_node(d.spec.as_ref(), &d.node);
        let started = self
            .lock()
            .operations
            .start(&d.volume, key, OpKind::Detach, Instant::now());
        if !started {
            self.lock().actual.add_to_report(&d.volume, &d.node);
            return;
        }
        match d.forced {
            None => {
                tracing::info!(volume = %d.volume, node = %d.node, "attacherDetacher.DetachVolume started")
            }
            Some(reconciler::Forced::Timeout) => {
                tracing::info!(volume = %d.volume, node = %d.node, duration = ?self.options.max_wait_for_unmount, "attacherDetacher.DetachVolume started: this volume is not safe to detach, but maxWaitForUnmountDuration expired, force detaching")
            }
            Some(reconciler::Forced::OutOfService) => {
                tracing::info!(volume = %d.volume, node = %d.node, "attacherDetacher.DetachVolume started: node has out-of-service taint, force detaching")
            }
        }
        let ctx = self.clone();
        tasks.spawn(async move { ctx.detach(d).await });
    }

    /// Upstream `GenerateAttachVolumeFunc`'s operation.
    async fn attach(self: Arc<Self>, step: AttachStep) {
        let result = executor::attach(&self, &step.spec, &step.node).await;
        {
            let mut state = self.lock();
            match &result {
                Ok(path) => state.actual.mark_attached(
                    &step.volume,
                    Some(step.spec.clone()),
                    &step.node,
                    path,
                ),
                Err(_) => {
                    state
                        .actual
                        .mark_uncertain(&step.volume, Some(step.spec.clone()), &step.node)
                }
            }
            let key = op_node(Some(&step.spec), &step.node);
            state
                .operations
                .finish(&step.volume, key, result.is_err(), Instant::now());
        }
        let (warning, reason, message) = match &result {
            Ok(_) => (
                false,
                reconciler::SUCCESSFUL_ATTACH_VOLUME,
                volume_message("AttachVolume.Attach succeeded", &step.spec.name, ""),
            ),
            Err(e) => (
                true,
                reconciler::FAILED_ATTACH_VOLUME,
                volume_message(
                    "AttachVolume.Attach failed",
                    &step.spec.name,
                    &format!(": {e}"),
                ),
            ),
        };
        if warning {
            tracing::warn!(volume = %step.volume, node = %step.node, "{message}");
        } else {
            tracing::info!(volume = %step.volume, node = %step.node, "{message}");
        }
        for pod in &step.pods {
            self.record(pod, warning, reason, &message);
        }
    }

    /// Upstream `GenerateDetachVolumeFunc`'s operation (no events, as upstream).
    async fn detach(self: Arc<Self>, step: DetachStep) {
        let result = executor::detach(
            &self,
            &step.volume,
            step.spec.as_ref(),
            &step.node,
            step.verify_safe,
        )
        .await;
        let mut state = self.lock();
        match &result {
            Ok(()) => {
                tracing::info!(volume = %step.volume, node = %step.node, "DetachVolume.Detach succeeded");
                state.actual.mark_detached(&step.volume, &step.node);
            }
            Err(e) => {
                tracing::warn!(volume = %step.volume, node = %step.node, error = %e, "DetachVolume.Detach failed");
                // Attach must succeed again before the volume is reported on the node.
                state
                    .actual
                    .mark_uncertain(&step.volume, step.spec.clone(), &step.node);
            }
        }
        let key = op_node(step.spec.as_ref(), &step.node);
        state
            .operations
            .finish(&step.volume, key, result.is_err(), Instant::now());
    }

    /// Upstream `VerifyVolumesAreAttached`: an attachment whose VolumeAttachment is gone or no
    /// longer attached is forgotten (and re-attached if still wanted).
    fn sync_states(&self) {
        let mut state = self.lock();
        for a in state.actual.attachments() {
            let Some(spec) = &a.spec else {
                continue;
            };
            if !is_attachable(spec, self) {
                continue;
            }
            let attached = self
                .attachments
                .get(&spec.attachment_name(&a.node))
                .is_some_and(|va| va.status.as_ref().is_some_and(|s| s.attached));
            if !attached {
                tracing::info!(volume = %a.volume, node = %a.node, "VerifyVolumesAreAttached determined volume is no longer attached to node, therefore it was marked as detached");
                state.actual.mark_detached(&a.volume, &a.node);
            }
        }
    }
}

#[cfg(test)]
mod tests;
