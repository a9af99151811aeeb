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
//! Differences: the socket directory is polled every second (upstream: fsnotify); prepared claims
//! live in memory only (upstream checkpoints them in `<root-dir>/dra_manager_state`, so a restarted
//! kubelet knows what to unprepare).

pub mod cdi;
pub mod proto;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Pod};
use k8s_openapi::api::resource::v1::ResourceClaim;

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

/// A claim prepared on this node.
#[derive(Debug, Clone, PartialEq)]
pub struct Prepared {
    pub claim: Claim,
    /// Devices by driver, as the drivers returned them.
    pub devices: Vec<(String, Device)>,
    /// The pods (UIDs) using it.
    pub pods: BTreeSet<String>,
}

/// The DRA manager of one kubelet.
pub struct Manager {
    registry_dir: PathBuf,
    cdi_dirs: Vec<PathBuf>,
    plugins: Mutex<HashMap<String, Plugin>>,
    /// By claim UID.
    prepared: Mutex<BTreeMap<String, Prepared>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Manager {
    pub fn new(root_dir: &Path, cdi_dirs: Vec<PathBuf>) -> Manager {
        Manager {
            registry_dir: root_dir.join(REGISTRY_DIR),
            cdi_dirs,
            plugins: Mutex::default(),
            prepared: Mutex::default(),
        }
    }

    /// The names of the registered drivers.
    pub fn drivers(&self) -> Vec<String> {
        let mut names: Vec<String> = lock(&self.plugins).keys().cloned().collect();
        names.sort();
        names
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
    /// plugins whose socket went are dropped.
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

    /// Prepares the pod's claims (fetched by the caller) through their drivers: each must be
    /// allocated and reserved for the pod. Claims already prepared only gain the pod.
    pub async fn prepare_claims(
        &self,
        pod: &Pod,
        claims: &[ResourceClaim],
    ) -> Result<(), PrepareError> {
        let pod_uid = pod.metadata.uid.clone().unwrap_or_default();
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
            let uid = claim.metadata.uid.clone().unwrap_or_default();
            if let Some(p) = lock(&self.prepared).get_mut(&uid) {
                p.pods.insert(pod_uid.clone());
                continue;
            }
            let results = claim
                .status
                .as_ref()
                .and_then(|s| s.allocation.as_ref())
                .and_then(|a| a.devices.as_ref())
                .and_then(|d| d.results.clone())
                .ok_or_else(|| PrepareError::NotAllocated(key.clone()))?;
            let drivers: BTreeSet<String> = results.iter().map(|r| r.driver.clone()).collect();
            let wire = Claim {
                namespace: claim.metadata.namespace.clone().unwrap_or_default(),
                uid: uid.clone(),
                name: claim.metadata.name.clone().unwrap_or_default(),
            };
            let mut devices = Vec::new();
            for driver in drivers {
                let client = lock(&self.plugins)
                    .get(&driver)
                    .map(|p| p.client.clone())
                    .ok_or_else(|| PrepareError::NoPlugin(driver.clone()))?;
                let failed = |message: String| PrepareError::Failed {
                    claim: key.clone(),
                    message,
                };
                let mut resp = client
                    .node_prepare_resources(vec![wire.clone()])
                    .await
                    .map_err(|e| failed(e.to_string()))?;
                let one = resp
                    .claims
                    .remove(&uid)
                    .ok_or_else(|| failed(format!("driver {driver} skipped the claim")))?;
                if !one.error.is_empty() {
                    return Err(failed(one.error));
                }
                devices.extend(one.devices.into_iter().map(|d| (driver.clone(), d)));
            }
            lock(&self.prepared).insert(
                uid,
                Prepared {
                    claim: wire,
                    devices,
                    pods: BTreeSet::from([pod_uid.clone()]),
                },
            );
        }
        Ok(())
    }

    /// The prepared claim of `namespace/name`.
    pub fn prepared(&self, namespace: &str, name: &str) -> Option<Prepared> {
        lock(&self.prepared)
            .values()
            .find(|p| p.claim.namespace == namespace && p.claim.name == name)
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
            for (_, dev) in &prepared.devices {
                if serves_request(dev, rc.request.as_deref()) {
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
        let unused: Vec<Prepared> = {
            let mut prepared = lock(&self.prepared);
            prepared.values_mut().for_each(|p| {
                p.pods.remove(pod_uid);
            });
            prepared
                .values()
                .filter(|p| p.pods.is_empty())
                .cloned()
                .collect()
        };
        for p in unused {
            let drivers: BTreeSet<&String> = p.devices.iter().map(|(d, _)| d).collect();
            for driver in drivers {
                let failed = |message: String| PrepareError::UnprepareFailed {
                    claim: format!("{}/{}", p.claim.namespace, p.claim.name),
                    message,
                };
                let client = lock(&self.plugins)
                    .get(driver)
                    .map(|p| p.client.clone())
                    .ok_or_else(|| failed(PrepareError::NoPlugin(driver.clone()).to_string()))?;
                let resp = client
                    .node_unprepare_resources(vec![p.claim.clone()])
                    .await
                    .map_err(|e| failed(e.to_string()))?;
                if let Some(err) = resp
                    .claims
                    .get(&p.claim.uid)
                    .filter(|r| !r.error.is_empty())
                {
                    return Err(failed(err.error.clone()));
                }
            }
            lock(&self.prepared).remove(&p.claim.uid);
        }
        Ok(())
    }
}

/// Whether a prepared device serves the container's request: a device without request names
/// serves all; `req` also matches the subrequests `req/<sub>` of a prioritized list.
pub fn serves_request(dev: &Device, request: Option<&str>) -> bool {
    let Some(req) = request.filter(|r| !r.is_empty()) else {
        return true;
    };
    dev.request_names.is_empty()
        || dev
            .request_names
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
