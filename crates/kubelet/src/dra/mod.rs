//! The kubelet's side of Dynamic Resource Allocation (upstream `pkg/kubelet/cm/dra` and the plugin
//! watcher of `pkg/kubelet/pluginmanager`), as far as it is built:
//!
//! - [`Manager::watch`]: DRA drivers register by creating a socket in `<root-dir>/plugins_registry`;
//!   the kubelet calls `GetInfo` on it, checks the plugin (type `DRAPlugin`, a service version it
//!   speaks, an endpoint), connects to the endpoint and answers `NotifyRegistrationStatus`. A
//!   socket that disappears unregisters its driver.
//! - [`Manager::prepare_claims`]: a pod's allocated claims, reserved for it, are prepared by their
//!   drivers (`NodePrepareResources`, one call per driver) and remembered with the CDI device IDs
//!   the drivers return; [`Manager::container_env`] turns a container's share of them into
//!   environment variables through the CDI spec files ([`cdi`]); [`Manager::unprepare_pod`] calls
//!   `NodeUnprepareResources` once no pod on the node uses a claim any more.
//!
//! The pod sync calls these: `sync/start.rs` prepares the pod's claims before a container starts
//! (retrying every 2 s while a claim is not reserved for the pod, with a
//! `FailedPrepareDynamicResources` event) and appends the CDI environment to its config;
//! `Kubelet::remove_pod_runtime` unprepares once the pod's containers and sandbox are gone.
//! The claims and the pods using them are checkpointed in `<root-dir>/dra_manager_state`
//! ([`checkpoint`], upstream's format), so a restarted kubelet does not prepare them again, still
//! gives restarted containers their devices, and [`Manager::reconcile`] unprepares the claims of
//! pods deleted while it was down.
//! Differences: the socket directory is polled every second (upstream: fsnotify); claims restored
//! from the checkpoint count as prepared (upstream calls NodePrepareResources again for them when
//! a pod sandbox is next created).

pub mod cdi;
pub mod checkpoint;
pub mod proto;

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;

use checkpoint::ClaimInfoState;
use proto::{Claim, Client, Device, PluginInfo, RegistrationStatus};

/// The directory under the kubelet's root where plugins put their registration sockets.
pub const REGISTRY_DIR: &str = "plugins_registry";
/// How long registration calls may take.
const REGISTRATION_TIMEOUT: Duration = Duration::from_secs(10);
/// Upstream's timeout of NodePrepareResources / NodeUnprepareResources calls.
const PREPARE_TIMEOUT: Duration = Duration::from_secs(45);
/// At most this many registered plugins (a client-growable set: any local process may create
/// sockets in the registry directory).
const MAX_PLUGINS: usize = 256;

/// Why a pod's claims are not prepared.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PrepareError {
    #[error("pod {pod} is not allowed to use resource claim {claim}")]
    NotReserved { pod: String, claim: String },
    #[error("resource claim {0} is not allocated")]
    NotAllocated(String),
    #[error("plugin name {0} not found in the list of registered DRA plugins")]
    NoPlugin(String),
    #[error("NodePrepareResources failed for ResourceClaim {claim}: {message}")]
    Failed { claim: String, message: String },
    #[error("NodeUnprepareResources failed for ResourceClaim {claim}: {message}")]
    UnprepareFailed { claim: String, message: String },
    /// A call failed as a whole (transport, or an answer that does not fit the request).
    #[error("{0}")]
    Call(String),
    #[error("old ResourceClaim with same name {claim} and different UID {old_uid} still exists (previous pod force-deleted?!)")]
    StaleClaim { claim: String, old_uid: String },
    #[error("checkpoint ResourceClaim state: {0}")]
    Checkpoint(String),
}

/// Checks a plugin's `GetInfo` answer (upstream's watcher and the DRA handler's `ValidatePlugin`);
/// the DRA service version to use.
pub fn validate(info: &PluginInfo) -> Result<&'static str, String> {
    if info.r#type != proto::DRA_PLUGIN_TYPE {
        return Err(format!(
            "no handler registered for plugin type: {}",
            info.r#type
        ));
    }
    if info.name.is_empty() {
        return Err("plugin name is empty".into());
    }
    if !Path::new(&info.endpoint).is_absolute() {
        return Err(format!(
            "plugin {}: endpoint {:?} is not an absolute socket path",
            info.name, info.endpoint
        ));
    }
    proto::DRA_SERVICES
        .iter()
        .copied()
        .find(|s| info.supported_versions.iter().any(|v| v == s))
        .ok_or_else(|| {
            format!(
                "none of the versions specified {:?} are supported, supported versions are {:?}",
                info.supported_versions,
                proto::DRA_SERVICES
            )
        })
}

struct Plugin {
    /// The registration socket it came from.
    socket: PathBuf,
    client: Client,
}

/// The DRA manager of one kubelet.
pub struct Manager {
    registry_dir: PathBuf,
    cdi_dirs: Vec<PathBuf>,
    plugins: Mutex<HashMap<String, Plugin>>,
    /// The claims prepared (or being prepared) on this node, by claim UID; mirrored in the
    /// checkpoint at `checkpoint_path` after every change.
    claims: Mutex<BTreeMap<String, ClaimInfoState>>,
    checkpoint_path: PathBuf,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Manager {
    /// The manager of the kubelet at `root_dir`, with the claims its checkpoint lists. A checkpoint
    /// that cannot be read is logged, kept beside as `dra_manager_state.corrupt` and taken as
    /// empty (upstream refuses to start, asking for the node to be drained and the file removed;
    /// here the pods keep running and their claims are prepared again when they next need it).
    pub fn new(root_dir: &Path, cdi_dirs: Vec<PathBuf>) -> Manager {
        let checkpoint_path = root_dir.join(checkpoint::FILE_NAME);
        let entries = checkpoint::load(&checkpoint_path).unwrap_or_else(|e| {
            tracing::error!(error = %e, "DRA checkpoint unreadable: starting with no prepared claims");
            let _ = std::fs::rename(&checkpoint_path, checkpoint_path.with_extension("corrupt"));
            Vec::new()
        });
        if !entries.is_empty() {
            tracing::info!(
                claims = entries.len(),
                "DRA claims restored from the checkpoint"
            );
        }
        Manager {
            registry_dir: root_dir.join(REGISTRY_DIR),
            cdi_dirs,
            plugins: Mutex::default(),
            claims: Mutex::new(
                entries
                    .into_iter()
                    .map(|e| (e.claim_uid.clone(), e))
                    .collect(),
            ),
            checkpoint_path,
        }
    }

    /// The names of the registered drivers.
    pub fn drivers(&self) -> Vec<String> {
        let mut names: Vec<String> = lock(&self.plugins).keys().cloned().collect();
        names.sort();
        names
    }

    fn client(&self, driver: &str) -> Result<Client, PrepareError> {
        lock(&self.plugins)
            .get(driver)
            .map(|p| p.client.clone())
            .ok_or_else(|| PrepareError::NoPlugin(driver.to_string()))
    }

    /// Writes the checkpoint (the caller holds the claims' lock, so writes keep their order).
    fn save(&self, claims: &BTreeMap<String, ClaimInfoState>) -> Result<(), PrepareError> {
        let entries: Vec<ClaimInfoState> = claims.values().cloned().collect();
        checkpoint::store(&self.checkpoint_path, &entries)
            .map_err(|e| PrepareError::Checkpoint(e.to_string()))
    }

    /// Registers the plugin behind one registration socket and tells it the outcome.
    pub async fn register(&self, socket: &Path) -> Result<String, String> {
        let reg = Client::connect(socket, REGISTRATION_TIMEOUT)
            .await
            .map_err(|e| e.to_string())?;
        let info = reg.get_info().await.map_err(|e| e.to_string())?;
        let outcome = match validate(&info) {
            Ok(_) if lock(&self.plugins).len() >= MAX_PLUGINS => {
                Err(format!("more than {MAX_PLUGINS} plugins registered"))
            }
            Ok(_) => Client::connect(Path::new(&info.endpoint), PREPARE_TIMEOUT)
                .await
                .map_err(|e| e.to_string()),
            Err(e) => Err(e),
        };
        let status = RegistrationStatus {
            plugin_registered: outcome.is_ok(),
            error: outcome.as_ref().err().cloned().unwrap_or_default(),
        };
        if let Ok(client) = outcome {
            lock(&self.plugins).insert(
                info.name.clone(),
                Plugin {
                    socket: socket.to_path_buf(),
                    client,
                },
            );
            tracing::info!(driver = %info.name, socket = %socket.display(), "registered DRA plugin");
        }
        let result = if status.plugin_registered {
            Ok(info.name)
        } else {
            Err(status.error.clone())
        };
        // The plugin learns the outcome either way; a plugin that cannot hear it is still
        // registered (upstream logs the failure too).
        if let Err(e) = reg.notify_registration_status(status).await {
            tracing::warn!(socket = %socket.display(), error = %e, "NotifyRegistrationStatus");
        }
        result
    }

    /// Watches the registry directory until the future is dropped: new sockets are registered,
    /// plugins whose socket went are dropped. The first pass registers the sockets already there,
    /// so drivers that kept running across a kubelet restart come back without doing anything.
    pub async fn watch(self: Arc<Self>) {
        let mut seen: BTreeSet<PathBuf> = BTreeSet::new();
        let _ = std::fs::create_dir_all(&self.registry_dir);
        loop {
            let now = sockets(&self.registry_dir);
            for gone in seen.difference(&now) {
                lock(&self.plugins).retain(|name, p| {
                    let keep = &p.socket != gone;
                    if !keep {
                        tracing::info!(driver = %name, "DRA plugin unregistered");
                    }
                    keep
                });
            }
            for new in now.difference(&seen) {
                if let Err(e) = self.register(new).await {
                    tracing::warn!(socket = %new.display(), error = %e, "DRA plugin registration failed");
                }
            }
            seen = now;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    /// Prepares the pod's claims (fetched by the caller) through their drivers, as upstream's
    /// `prepareResources`: first every claim is checked (reserved for the pod, allocated, its
    /// drivers registered) without changing anything, so a pod that cannot start can be deleted
    /// without driver calls; then the pod's use of each claim is recorded and checkpointed before
    /// any call (a pod deleted, or a kubelet restarted, in the middle is unprepared by
    /// [`Manager::reconcile`]); then one NodePrepareResources per driver for the claims not
    /// prepared yet; then the devices are checkpointed. Claims already prepared only gain the pod.
    pub async fn prepare_claims(
        &self,
        pod: &Pod,
        claims: &[ResourceClaim],
    ) -> Result<(), PrepareError> {
        let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut checked = Vec::with_capacity(claims.len());
        for claim in claims {
            let key = claim_key(claim);
            let reserved = claim
                .status
                .as_ref()
                .and_then(|s| s.reserved_for.as_ref())
                .is_some_and(|r| r.iter().any(|e| e.uid == pod_uid));
            if !reserved {
                return Err(PrepareError::NotReserved {
                    pod: format!(
                        "{}/{}",
                        pod.metadata.namespace.as_deref().unwrap_or(""),
                        pod.metadata.name.as_deref().unwrap_or("")
                    ),
                    claim: key,
                });
            }
            let results = claim
                .status
                .as_ref()
                .and_then(|s| s.allocation.as_ref())
                .and_then(|a| a.devices.as_ref())
                .and_then(|d| d.results.clone())
                .ok_or_else(|| PrepareError::NotAllocated(key.clone()))?;
            let mut clients = BTreeMap::new();
            for r in &results {
                if !clients.contains_key(&r.driver) {
                    clients.insert(r.driver.clone(), self.client(&r.driver)?);
                }
            }
            let info = ClaimInfoState {
                claim_uid: claim.metadata.uid.clone().unwrap_or_default(),
                claim_name: claim.metadata.name.clone().unwrap_or_default(),
                namespace: claim.metadata.namespace.clone().unwrap_or_default(),
                pod_uids: BTreeSet::new(),
                driver_state: clients
                    .keys()
                    .map(|d| (d.clone(), Default::default()))
                    .collect(),
                prepared: false,
            };
            checked.push((info, clients));
        }

        let mut batches: BTreeMap<String, (Client, Vec<Claim>)> = BTreeMap::new();
        {
            let mut cache = lock(&self.claims);
            for (info, clients) in checked {
                if let Some(old) = cache.values().find(|c| {
                    c.namespace == info.namespace
                        && c.claim_name == info.claim_name
                        && c.claim_uid != info.claim_uid
                }) {
                    return Err(PrepareError::StaleClaim {
                        claim: info.claim_name.clone(),
                        old_uid: old.claim_uid.clone(),
                    });
                }
                let entry = cache.entry(info.claim_uid.clone()).or_insert(info);
                entry.pod_uids.insert(pod_uid.clone());
                if entry.prepared {
                    continue;
                }
                let wire = Claim {
                    namespace: entry.namespace.clone(),
                    uid: entry.claim_uid.clone(),
                    name: entry.claim_name.clone(),
                };
                for (driver, client) in clients {
                    batches
                        .entry(driver)
                        .or_insert_with(|| (client, Vec::new()))
                        .1
                        .push(wire.clone());
                }
            }
            self.save(&cache)?;
        }

        let mut done = BTreeSet::new();
        for (driver, (client, wire)) in batches {
            let mut resp = client
                .node_prepare_resources(wire.clone())
                .await
                .map_err(|e| PrepareError::Call(format!("NodePrepareResources: {e}")))?;
            if let Some(unknown) = resp
                .claims
                .keys()
                .find(|uid| !wire.iter().any(|c| &c.uid == *uid))
            {
                return Err(PrepareError::Call(format!(
                    "NodePrepareResources returned result for unknown claim UID {unknown}"
                )));
            }
            let mut skipped = 0;
            for c in &wire {
                let Some(one) = resp.claims.remove(&c.uid) else {
                    skipped += 1;
                    continue;
                };
                if !one.error.is_empty() {
                    return Err(PrepareError::Failed {
                        claim: format!("{}/{}", c.namespace, c.name),
                        message: one.error,
                    });
                }
                let devices = one.devices.into_iter().map(to_state_device).collect();
                if let Some(entry) = lock(&self.claims).get_mut(&c.uid) {
                    // Replaced, not appended: a retry after a partial failure returns them again.
                    entry
                        .driver_state
                        .insert(driver.clone(), checkpoint::DriverState { devices });
                }
                done.insert(c.uid.clone());
            }
            if skipped > 0 {
                return Err(PrepareError::Call(format!(
                    "NodePrepareResources skipped {skipped} ResourceClaims"
                )));
            }
        }
        if !done.is_empty() {
            let mut cache = lock(&self.claims);
            for uid in &done {
                if let Some(entry) = cache.get_mut(uid) {
                    entry.prepared = true;
                }
            }
            self.save(&cache)?;
        }
        Ok(())
    }

    /// The claim of `namespace/name` this node knows.
    pub fn prepared(&self, namespace: &str, name: &str) -> Option<ClaimInfoState> {
        lock(&self.claims)
            .values()
            .find(|p| p.namespace == namespace && p.claim_name == name)
            .cloned()
    }

    /// The CDI device IDs of the container's `resources.claims` (upstream
    /// `GetContainerClaimInfos` + `GetResources`); `claim_names` maps the pod's claim entries to
    /// ResourceClaim names.
    pub fn container_cdi_ids(
        &self,
        namespace: &str,
        container: &Container,
        claim_names: &HashMap<String, String>,
    ) -> Vec<String> {
        let mut ids = Vec::new();
        for rc in container
            .resources
            .as_ref()
            .and_then(|r| r.claims.as_ref())
            .into_iter()
            .flatten()
        {
            let Some(name) = claim_names.get(&rc.name) else {
                continue;
            };
            let Some(prepared) = self.prepared(namespace, name) else {
                continue;
            };
            for dev in prepared.driver_state.values().flat_map(|d| &d.devices) {
                if serves_request(&dev.request_names, rc.request.as_deref()) {
                    ids.extend(dev.cdi_device_ids.iter().cloned());
                }
            }
        }
        ids
    }

    /// The environment the container's devices add, from the CDI specs on this node.
    pub fn container_env(
        &self,
        namespace: &str,
        container: &Container,
        claim_names: &HashMap<String, String>,
    ) -> Result<Vec<(String, String)>, cdi::CdiError> {
        let ids = self.container_cdi_ids(namespace, container, claim_names);
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        cdi::device_env(&cdi::load_specs(&self.cdi_dirs), &ids)
    }

    /// Drops the pod from its claims; claims no pod uses any more are unprepared by their drivers
    /// (kept, and the error returned, if a driver fails: the next call tries again).
    pub async fn unprepare_pod(&self, pod_uid: &str) -> Result<(), PrepareError> {
        self.release(|p| p == pod_uid).await
    }

    /// Upstream's `reconcileLoop`: pods that are not `active` (the pods the kubelet's sources list
    /// or it is still terminating; the caller asks only once every source has been heard from)
    /// are dropped from their claims, which are unprepared once no pod uses them. This is what
    /// unprepares the claims of pods deleted while the kubelet was down, and retries failed
    /// unprepares.
    pub async fn reconcile(&self, active: &HashSet<String>) -> Result<(), PrepareError> {
        self.release(|p| !active.contains(p)).await
    }

    /// Whether the pod uses a claim this node knows (upstream `PodMightNeedToUnprepareResources`).
    pub fn has_pod(&self, pod_uid: &str) -> bool {
        lock(&self.claims)
            .values()
            .any(|c| c.pod_uids.contains(pod_uid))
    }

    async fn release(&self, gone: impl Fn(&str) -> bool) -> Result<(), PrepareError> {
        let unused: Vec<ClaimInfoState> = {
            let mut cache = lock(&self.claims);
            let mut changed = false;
            for c in cache.values_mut() {
                let before = c.pod_uids.len();
                c.pod_uids.retain(|p| !gone(p));
                changed |= c.pod_uids.len() != before;
            }
            if changed {
                self.save(&cache)?;
            }
            cache
                .values()
                .filter(|c| c.pod_uids.is_empty())
                .cloned()
                .collect()
        };
        if unused.is_empty() {
            return Ok(());
        }
        let mut batches: BTreeMap<&str, Vec<Claim>> = BTreeMap::new();
        for c in &unused {
            for driver in c.driver_state.keys() {
                batches.entry(driver).or_default().push(Claim {
                    namespace: c.namespace.clone(),
                    uid: c.claim_uid.clone(),
                    name: c.claim_name.clone(),
                });
            }
        }
        // Every driver is tried even when one fails; a claim goes once all of its drivers
        // unprepared it.
        let mut first_error = None;
        let mut unprepared: BTreeSet<(String, &str)> = BTreeSet::new();
        for (driver, wire) in batches {
            let failed = |claim: &Claim, message: String| PrepareError::UnprepareFailed {
                claim: format!("{}/{}", claim.namespace, claim.name),
                message,
            };
            let resp = match self.client(driver) {
                Ok(client) => client.node_unprepare_resources(wire.clone()).await,
                Err(e) => {
                    first_error.get_or_insert(failed(&wire[0], e.to_string()));
                    continue;
                }
            };
            let resp = match resp {
                Ok(r) => r,
                Err(e) => {
                    first_error.get_or_insert(failed(&wire[0], e.to_string()));
                    continue;
                }
            };
            for c in &wire {
                match resp.claims.get(&c.uid) {
                    Some(r) if r.error.is_empty() => {
                        unprepared.insert((c.uid.clone(), driver));
                    }
                    Some(r) => {
                        first_error.get_or_insert(failed(c, r.error.clone()));
                    }
                    None => {
                        first_error
                            .get_or_insert(failed(c, format!("driver {driver} skipped the claim")));
                    }
                }
            }
        }
        {
            let mut cache = lock(&self.claims);
            for c in &unused {
                let all = c
                    .driver_state
                    .keys()
                    .all(|d| unprepared.contains(&(c.claim_uid.clone(), d.as_str())));
                // A pod that took the claim up meanwhile keeps it (prepared again when it asks).
                match cache.get_mut(&c.claim_uid) {
                    Some(entry) if all && entry.pod_uids.is_empty() => {
                        cache.remove(&c.claim_uid);
                    }
                    Some(entry) if all => entry.prepared = false,
                    _ => {}
                }
            }
            self.save(&cache)?;
        }
        first_error.map_or(Ok(()), Err)
    }
}

fn to_state_device(d: Device) -> checkpoint::Device {
    checkpoint::Device {
        pool_name: d.pool_name,
        device_name: d.device_name,
        share_id: None,
        request_names: d.request_names,
        cdi_device_ids: d.cdi_device_ids,
    }
}

/// Whether a prepared device serves the container's request: a device without request names
/// serves all; `req` also matches the subrequests `req/<sub>` of a prioritized list.
pub fn serves_request(request_names: &[String], request: Option<&str>) -> bool {
    let Some(req) = request.filter(|r| !r.is_empty()) else {
        return true;
    };
    request_names.is_empty()
        || request_names
            .iter()
            .any(|n| n == req || n.split_once('/').is_some_and(|(parent, _)| parent == req))
}

fn claim_key(claim: &ResourceClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or(""),
        claim.metadata.name.as_deref().unwrap_or("")
    )
}

/// The unix sockets in `dir`.
fn sockets(dir: &Path) -> BTreeSet<PathBuf> {
    use std::os::unix::fs::FileTypeExt;
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_socket()))
        .map(|e| e.path())
        .collect()
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
