//! The kubelet's main loop (upstream `pkg/kubelet/kubelet.go` `Run`/`syncLoop`/`syncLoopIteration`,
//! `pod_workers.go`, and the PLEG `pleg/generic.go`): updates from [`crate::podconfig`] are
//! dispatched to one worker task per pod (one sync at a time per pod; the latest state of the pod is
//! what the next sync sees), the PLEG relists the runtime every second and wakes the workers of pods
//! whose containers changed state, and housekeeping removes what belongs to no pod (after every source
//! has delivered its first set, so a restarted kubelet never kills pods it has not heard of yet).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client::events::Recorder;
use k8s_openapi::api::core::v1::Pod;
use tokio::sync::Notify;

use crate::config::KubeletConfig;
use crate::cri::{api, labels, Runtime};
use crate::podconfig::{Op, PodConfig, PodUpdate};
use crate::prober::ProbeManager;
use crate::status_manager::{is_mirror, StatusManager};
use crate::volumes::VolumeManager;

/// What the syncLoop knows of one pod.
pub(crate) struct PodEntry {
    pub pod: Arc<Pod>,
    /// Gone from its source: terminate, clean up, forget.
    pub removed: bool,
    pub wake: Arc<Notify>,
}

/// Exponential backoff per key (upstream `flowcontrol.Backoff`): 10 s doubling to 5 minutes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Backoff {
    pub delay: Duration,
}

pub(crate) const BACKOFF_INITIAL: Duration = Duration::from_secs(10);
pub(crate) const BACKOFF_MAX: Duration = Duration::from_secs(300);

pub struct Kubelet {
    pub config: Arc<KubeletConfig>,
    pub client: Option<kube::Client>,
    pub runtime: Runtime,
    pub recorder: Option<Recorder>,
    pub probes: Arc<ProbeManager>,
    pub volumes: VolumeManager,
    pub status: StatusManager,
    /// DRA drivers' registration and the claims they prepared on this node.
    pub dra: Arc<crate::dra::Manager>,
    pub(crate) pods: Mutex<HashMap<String, PodEntry>>,
    pub(crate) wakers: Arc<Mutex<HashMap<String, Arc<Notify>>>>,
    pub(crate) backoff: Mutex<HashMap<String, Backoff>>,
    pub(crate) node_allocatable: BTreeMap<String, String>,
    /// The sysctls pods may set (safe set + `--allowed-unsafe-sysctls`).
    pub(crate) sysctls: crate::kuberuntime::admit::SysctlAllowlist,
    /// The kernel enforces AppArmor (pods that ask for it are refused otherwise).
    pub(crate) apparmor: bool,
    /// The resources admitted to each pod and applied to its containers (in-place resize).
    pub(crate) allocations: crate::sync::resize::Allocations,
    /// The pods admitted to the node (resource-fit admission counts them).
    pub(crate) admitted: crate::sync::admission::Admitted,
    /// Image ID -> when image GC first saw it unused (upstream's `imageMinimumGCAge`).
    unused_since: Mutex<HashMap<String, Instant>>,
    pod_config: PodConfig,
}

/// How often the DRA manager looks for claims of pods gone from the node (the period of
/// upstream's DRA `reconcileLoop`; its value here is rkube's choice).
const DRA_RECONCILE_PERIOD: Duration = Duration::from_secs(60);

/// Upstream's `imageMinimumGCAge`: an image unused for less than this is never collected.
const IMAGE_MINIMUM_GC_AGE: Duration = Duration::from_secs(120);

pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Kubelet {
    pub fn new(
        config: Arc<KubeletConfig>,
        client: Option<kube::Client>,
        runtime: Runtime,
        recorder: Option<Recorder>,
        pod_config: PodConfig,
    ) -> Arc<Kubelet> {
        let wakers: Arc<Mutex<HashMap<String, Arc<Notify>>>> = Arc::default();
        let wake = {
            let wakers = wakers.clone();
            Arc::new(move |uid: &str| {
                if let Some(n) = lock(&wakers).get(uid) {
                    n.notify_one();
                }
            })
        };
        let machine = crate::machine::MachineInfo::read(&config.root_dir);
        let (_, allocatable) = crate::node::resources(&machine, config.max_pods);
        let node_allocatable: BTreeMap<String, String> = allocatable
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
            .collect();
        // The flag is checked when the config is made (`rkube kubelet` refuses a bad list); a config
        // built otherwise falls back to the safe set.
        let sysctls =
            crate::kuberuntime::admit::SysctlAllowlist::new(&config.allowed_unsafe_sysctls)
                .unwrap_or_else(|e| {
                    tracing::error!(error = %e, "--allowed-unsafe-sysctls ignored");
                    crate::kuberuntime::admit::SysctlAllowlist::new(&[]).unwrap_or_default()
                });
        Arc::new(Kubelet {
            sysctls,
            apparmor: crate::kuberuntime::admit::apparmor_enabled(),
            probes: ProbeManager::new(
                runtime.clone(),
                config.pod_network.clone(),
                recorder.clone(),
                wake,
            ),
            volumes: VolumeManager::new(
                client.clone(),
                config.root_dir.clone(),
                node_allocatable.clone(),
            ),
            status: StatusManager::new(client.clone(), &config.node_name),
            dra: Arc::new(crate::dra::Manager::new(
                &config.root_dir,
                config.cdi_spec_dirs.clone(),
            )),
            allocations: crate::sync::resize::Allocations::load(&config.root_dir),
            admitted: Default::default(),
            config,
            client,
            runtime,
            recorder,
            pods: Mutex::default(),
            wakers,
            backoff: Mutex::default(),
            node_allocatable,
            unused_since: Mutex::default(),
            pod_config,
        })
    }

    /// Wakes the worker of pod `uid`.
    pub fn wake(&self, uid: &str) {
        if let Some(n) = lock(&self.wakers).get(uid) {
            n.notify_one();
        }
    }

    /// The syncLoop: dispatches updates until the stream ends.
    pub async fn sync_loop(self: &Arc<Self>, mut updates: tokio::sync::mpsc::Receiver<PodUpdate>) {
        while let Some(update) = updates.recv().await {
            self.handle(update);
        }
    }

    fn handle(self: &Arc<Self>, update: PodUpdate) {
        for pod in update.pods {
            // Mirror pods stand for static pods; they are never run themselves.
            if is_mirror(&pod) {
                continue;
            }
            let uid = crate::podconfig::uid(&pod).to_string();
            let removed = update.op == Op::Remove;
            let mut pods = lock(&self.pods);
            match pods.get_mut(&uid) {
                Some(entry) => {
                    entry.pod = pod;
                    entry.removed |= removed;
                    // A status-only change is mostly our own write coming back: nothing to do now
                    // (upstream's RECONCILE handling only matters for readiness gates, read on the next sync).
                    if update.op != Op::Reconcile {
                        entry.wake.notify_one();
                    }
                }
                None if removed => {}
                None => {
                    let wake = Arc::new(Notify::new());
                    lock(&self.wakers).insert(uid.clone(), wake.clone());
                    pods.insert(
                        uid.clone(),
                        PodEntry {
                            pod,
                            removed: false,
                            wake,
                        },
                    );
                    let this = self.clone();
                    tokio::spawn(async move { this.pod_worker(uid).await });
                }
            }
        }
    }

    /// One pod's worker (upstream `podWorkerLoop`): syncs, then waits for a change, a wake-up, or the
    /// resync period.
    async fn pod_worker(self: Arc<Self>, uid: String) {
        loop {
            let (pod, removed, wake) = {
                let pods = lock(&self.pods);
                let Some(e) = pods.get(&uid) else { return };
                (e.pod.clone(), e.removed, e.wake.clone())
            };
            let outcome = self.sync_pod(&pod, removed).await;
            if outcome.finished {
                let mut pods = lock(&self.pods);
                // A pod re-added meanwhile (same UID) keeps its worker going.
                if pods.get(&uid).is_some_and(|e| e.removed || removed) {
                    pods.remove(&uid);
                    lock(&self.wakers).remove(&uid);
                    return;
                }
            }
            let wait = outcome.requeue.unwrap_or(self.config.sync_frequency);
            tokio::select! {
                _ = wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// The PLEG (upstream `GenericPLEG.Relist`): wakes the workers of pods whose containers or
    /// sandboxes changed state.
    pub async fn pleg(self: Arc<Self>) {
        let mut last: HashMap<String, (i32, String)> = HashMap::new();
        loop {
            tokio::time::sleep(self.config.pleg_period).await;
            let mut now: HashMap<String, (i32, String)> = HashMap::new();
            match self.runtime.list_containers(None).await {
                Ok(cs) => {
                    for c in cs {
                        let uid = c.labels.get(labels::POD_UID).cloned().unwrap_or_default();
                        now.insert(c.id, (c.state, uid));
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "PLEG: cannot list containers");
                    continue;
                }
            }
            if let Ok(ss) = self.runtime.list_pod_sandboxes(None).await {
                for s in ss {
                    let uid = s.labels.get(labels::POD_UID).cloned().unwrap_or_default();
                    now.insert(format!("sandbox/{}", s.id), (s.state, uid));
                }
            }
            let mut woken = std::collections::HashSet::new();
            for (id, (state, uid)) in &now {
                if last.get(id).map(|(s, _)| s) != Some(state) && woken.insert(uid.clone()) {
                    self.wake(uid);
                }
            }
            for (id, (_, uid)) in &last {
                if !now.contains_key(id) && woken.insert(uid.clone()) {
                    self.wake(uid);
                }
            }
            last = now;
        }
    }

    /// Housekeeping (upstream `HandlePodCleanups` and the container GC): every 2 s once all sources
    /// were seen, pods the runtime has but no source knows are killed and removed.
    pub async fn housekeeping(self: Arc<Self>) {
        let mut last_gc = Instant::now();
        loop {
            tokio::time::sleep(Duration::from_secs(2)).await;
            if !self.pod_config.seen_all_sources() {
                continue;
            }
            let Ok(sandboxes) = self.runtime.list_pod_sandboxes(None).await else {
                continue;
            };
            let known: std::collections::HashSet<String> =
                lock(&self.pods).keys().cloned().collect();
            let mut orphans: Vec<String> = sandboxes
                .iter()
                .filter_map(|s| s.labels.get(labels::POD_UID).cloned())
                .filter(|uid| !known.contains(uid))
                .collect();
            orphans.sort();
            orphans.dedup();
            for uid in orphans {
                tracing::info!(pod_uid = %uid, "cleaning up a pod no source knows");
                self.remove_pod_runtime(&uid, 2).await;
                self.volumes.teardown(&uid);
            }
            if last_gc.elapsed() >= self.config.gc_period {
                last_gc = Instant::now();
                self.image_gc().await;
            }
        }
    }

    /// Upstream's DRA `reconcileLoop` (every [`DRA_RECONCILE_PERIOD`], once every source was heard from): claims used
    /// only by pods that no source lists and no worker is terminating are unprepared. Pods deleted
    /// while the kubelet was down, whose claims the checkpoint kept, are released here or by
    /// housekeeping's removal of their sandboxes, whichever comes first; failed unprepares are
    /// retried here.
    pub async fn dra_reconcile(self: Arc<Self>) {
        loop {
            if self.pod_config.seen_all_sources() {
                let mut active = self.pod_config.pod_uids();
                active.extend(lock(&self.pods).keys().cloned());
                if let Err(e) = self.dra.reconcile(&active).await {
                    tracing::info!(error = %e, "unpreparing ResourceClaims of inactive pods failed, will retry");
                }
                tokio::time::sleep(DRA_RECONCILE_PERIOD).await;
            } else {
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
        }
    }

    /// Stops and removes every container and sandbox of pod `uid`.
    pub(crate) async fn remove_pod_runtime(&self, uid: &str, grace_secs: i64) {
        let selector: HashMap<String, String> =
            [(labels::POD_UID.to_string(), uid.to_string())].into();
        if let Ok(cs) = self
            .runtime
            .list_containers(Some(api::ContainerFilter {
                label_selector: selector.clone(),
                ..Default::default()
            }))
            .await
        {
            for c in cs {
                if c.state == api::ContainerState::ContainerRunning as i32 {
                    let _ =
                        crate::kuberuntime::stop_container(&self.runtime, &c.id, grace_secs).await;
                }
                let _ = crate::kuberuntime::remove_container(&self.runtime, &c.id).await;
                self.probes.forget(&c.id);
            }
        }
        if let Ok(ss) = self
            .runtime
            .list_pod_sandboxes(Some(api::PodSandboxFilter {
                label_selector: selector,
                ..Default::default()
            }))
            .await
        {
            for s in ss {
                let _ = crate::kuberuntime::stop_sandbox(&self.runtime, &s.id).await;
                let _ = crate::kuberuntime::remove_sandbox(&self.runtime, &s.id).await;
            }
        }
        // Nothing of the pod runs any more: its claims may be unprepared (a failure is retried
        // with the next pod's removal).
        if let Err(e) = self.dra.unprepare_pod(uid).await {
            tracing::warn!(pod = uid, error = %e, "unpreparing the pod's ResourceClaims");
        }
    }

    /// Unused image garbage collection (upstream `ImageGCManager`): when the image filesystem is above
    /// 85 % full, images no container uses (and unused for at least 2 minutes; never the sandbox
    /// image) are removed until below 80 %.
    async fn image_gc(&self) {
        let Ok(containers) = self.runtime.list_containers(None).await else {
            return;
        };
        let used: std::collections::HashSet<String> =
            containers.iter().map(|c| c.image_ref.clone()).collect();
        let Ok(images) = self
            .runtime
            .images
            .clone()
            .list_images(api::ListImagesRequest { filter: None })
            .await
        else {
            return;
        };
        let images = images.into_inner().images;
        let now = Instant::now();
        {
            let mut unused = lock(&self.unused_since);
            unused.retain(|id, _| !used.contains(id) && images.iter().any(|i| &i.id == id));
            for img in &images {
                if !used.contains(&img.id) {
                    unused.entry(img.id.clone()).or_insert(now);
                }
            }
        }
        let Ok(fs) = self
            .runtime
            .images
            .clone()
            .image_fs_info(api::ImageFsInfoRequest {})
            .await
        else {
            return;
        };
        let Some(usage) = fs.into_inner().image_filesystems.into_iter().next() else {
            return;
        };
        let Some(mount) = usage.fs_id.map(|f| f.mountpoint) else {
            return;
        };
        let Some((total, avail)) = fs_space(&mount) else {
            return;
        };
        if total == 0 || (total - avail) * 100 / total < 85 {
            return;
        }
        let mut freed_target = (total - avail).saturating_sub(total * 80 / 100);
        for img in images {
            if freed_target == 0 {
                break;
            }
            let old_enough = lock(&self.unused_since)
                .get(&img.id)
                .is_some_and(|t| t.elapsed() >= IMAGE_MINIMUM_GC_AGE);
            let sandbox = img
                .repo_tags
                .iter()
                .any(|t| t == &self.config.pod_infra_image);
            if used.contains(&img.id) || img.pinned || sandbox || !old_enough {
                continue;
            }
            tracing::info!(image = %img.id, "image GC: removing an unused image");
            if self
                .runtime
                .images
                .clone()
                .remove_image(api::RemoveImageRequest {
                    image: Some(api::ImageSpec {
                        image: img.id.clone(),
                        ..Default::default()
                    }),
                })
                .await
                .is_ok()
            {
                freed_target = freed_target.saturating_sub(img.size);
            }
        }
    }
}

fn fs_space(path: &str) -> Option<(u64, u64)> {
    let c = std::ffi::CString::new(path).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid C string and out-parameter.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some((
        st.f_blocks as u64 * st.f_frsize as u64,
        st.f_bavail as u64 * st.f_frsize as u64,
    ))
}

/// Runs the kubelet: registers the node (with an API server), starts the pod sources and the loops.
/// Returns only on a start-up error.
pub async fn run(
    config: KubeletConfig,
    client: Option<kube::Client>,
    runtime: Runtime,
) -> Result<(), String> {
    for dir in [&config.root_dir, &config.pod_logs_dir] {
        std::fs::create_dir_all(dir).map_err(|e| format!("create {}: {e}", dir.display()))?;
    }
    // The HTTPS server binds first: the node is registered with the port it got.
    let mut config = config;
    let mut server_config = config.server.clone();
    server_config.port = config.port;
    if server_config.cert_dir.as_os_str().is_empty() {
        server_config.cert_dir = config.root_dir.join("pki");
    }
    if server_config.hostnames.is_empty() {
        server_config.hostnames = vec![config.node_name.clone(), config.node_ip.to_string()];
    }
    server_config.auth.check(client.is_some())?;
    let listener = crate::server::bind(&server_config).await?;
    config.port = listener.addr.port();
    let config = Arc::new(config);
    let broadcaster = client::events::EventBroadcaster::new();
    let recorder = client.as_ref().map(|c| {
        broadcaster.start_recording_to_sink(client::events::ApiEventSink::new(c.clone()));
        broadcaster.new_recorder("kubelet", config.node_name.clone())
    });
    let (pod_config, updates) = PodConfig::new();
    let mut tasks = Vec::new();
    if let Some(client) = &client {
        let node = Arc::new(
            crate::node::NodeStatusManager::new(client.clone(), config.clone(), runtime.clone())
                .await?,
        );
        node.register().await;
        tasks.push(tokio::spawn(node.clone().run_status()));
        tasks.push(tokio::spawn(node.clone().run_lease()));
        tasks.push(tokio::spawn(crate::node::run_cni_config(
            config.clone(),
            runtime.clone(),
            node.pod_cidr.subscribe(),
        )));
        tasks.push(tokio::spawn(crate::podconfig::apiserver::run(
            client.clone(),
            config.node_name.clone(),
            pod_config.channel(crate::podconfig::API_SOURCE),
        )));
    }
    if let Some(path) = config.pod_manifest_path.clone() {
        tasks.push(tokio::spawn(crate::podconfig::file::run(
            path,
            config.node_name.clone(),
            config.file_check_frequency,
            pod_config.channel(crate::podconfig::FILE_SOURCE),
        )));
    }
    if let Some(url) = config.manifest_url.clone() {
        tasks.push(tokio::spawn(crate::podconfig::http::run(
            url,
            config.manifest_url_headers.clone(),
            config.node_name.clone(),
            config.http_check_frequency,
            pod_config.channel(crate::podconfig::HTTP_SOURCE),
        )));
    }
    let kubelet = Kubelet::new(config.clone(), client, runtime, recorder, pod_config);
    tasks.push(tokio::spawn(kubelet.clone().pleg()));
    tasks.push(tokio::spawn(kubelet.clone().housekeeping()));
    tasks.push(tokio::spawn(kubelet.dra.clone().watch()));
    tasks.push(tokio::spawn(kubelet.clone().dra_reconcile()));
    // The kubelet's HTTPS server: logs, exec, attach, port-forward, /pods.
    tasks.push(tokio::spawn(crate::server::serve(
        listener,
        kubelet.clone(),
    )));
    struct AbortAll(Vec<tokio::task::JoinHandle<()>>);
    impl Drop for AbortAll {
        fn drop(&mut self) {
            for t in &self.0 {
                t.abort();
            }
        }
    }
    let _tasks = AbortAll(tasks);
    kubelet.sync_loop(updates).await;
    Ok(())
}
