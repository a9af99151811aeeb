//! The PersistentVolume controller (upstream `pkg/controller/volume/persistentvolume`,
//! `persistentvolume-binder-controller`; `pv_controller_base.go` for this file): binds claims to
//! volumes, keeps both phases, provisions volumes for claims of a class (in-tree through a
//! registered [`provisioner::Provisioner`], else by annotating the claim for an external
//! provisioner), and reclaims the volumes of deleted claims (Retain: Released; Delete: the
//! storage and the PV object go; Recycle: refused).
//!
//! Unlike upstream's one worker per queue, [`WORKERS`] sync claims and volumes at once: binding
//! one claim takes four writes in a row, so one worker bound ~100 claims a second and a thousand
//! StatefulSet pods waited on it. What made upstream's claim sync non-reentrant (two claims
//! choosing one volume) is kept out by choosing under a lock and reserving the chosen volume
//! until its binding is written. As upstream, a resync of everything every 15 s
//! (`--pvclaimbinder-sync-period`), and a cache of its own of claims and volumes that its writes
//! update at once, so a sync never acts on an informer copy older than what it wrote (binding
//! writes four objects, whose events arrive in any order). Provisioning, deletion and recycling
//! run as named operations beside the workers, one at a time per name, with exponential backoff
//! after a failure ([`operations`]). The decisions are in [`binder`], the matching in [`index`].
//!
//! Differences: failed syncs are retried with the queue's rate limiting as well as by the resync;
//! writes are full-object updates as upstream's, without upstream's metrics.

pub mod binder;
pub mod index;
mod operations;
pub mod provisioner;
mod writes;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::controller::Controller;
use client::events::{ApiEventSink, EventBroadcaster, EventType, Recorder};
use client::informer::{object_key, EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::{Api, Resource};

use binder::{ClaimAction, Event, VolumeAction};
use provisioner::Provisioners;
use writes::api_error;

use crate::volume::{index_pods_by_claim, is_pod_terminated, key_of, POD_PVC_INDEX};

/// Upstream's canonical controller name.
pub const CONTROLLER_NAME: &str = "persistentvolume-binder-controller";
/// The component its events come from (upstream's event source).
const COMPONENT: &str = "persistentvolume-controller";
/// Concurrent syncs per queue (see the module's text).
const WORKERS: usize = 8;
/// Upstream `--pvclaimbinder-sync-period`'s default.
pub const SYNC_PERIOD: Duration = Duration::from_secs(15);

pub(crate) struct Ctx {
    client: kube::Client,
    claim_informer: Arc<Store<PersistentVolumeClaim>>,
    volume_informer: Arc<Store<PersistentVolume>>,
    classes: Arc<Store<StorageClass>>,
    pods: Arc<Store<Pod>>,
    nodes: Arc<Store<Node>>,
    /// The controller's own claims and volumes: the newest of the informer's and its writes.
    /// Ordered by key, so the volume list handed to the binder needs no sort per sync.
    claims: Mutex<BTreeMap<String, Arc<PersistentVolumeClaim>>>,
    volumes: Mutex<BTreeMap<String, Arc<PersistentVolume>>>,
    claim_queue: RateLimitingQueue<String>,
    volume_queue: RateLimitingQueue<String>,
    recorder: Recorder,
    provisioners: Provisioners,
    operations: operations::Operations,
    /// Held while a claim sync chooses a volume, so two claims never choose the same one.
    choosing: Mutex<()>,
    /// Volumes chosen for a claim whose binding is being written: no other claim may choose them.
    reserved: Mutex<std::collections::HashSet<String>>,
    /// Claims whose next sync uses the cache even if the informer's copy is older (see
    /// [`Ctx::sync_provisioned`]).
    from_cache: Mutex<std::collections::HashSet<String>>,
}

/// Releases a reserved volume when its binding is done (or its sync was dropped).
struct Reservation<'a> {
    ctx: &'a Ctx,
    volume: String,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        self.ctx
            .reserved
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.volume);
    }
}

/// Runs the controller until the future is dropped. `provisioners` are the in-tree ones.
pub async fn run(
    client: kube::Client,
    factory: &SharedInformerFactory,
    provisioners: Provisioners,
) {
    let claim_informer = factory.informer::<PersistentVolumeClaim>();
    let volume_informer = factory.informer::<PersistentVolume>();
    let class_informer = factory.informer::<StorageClass>();
    let pod_informer = factory.informer::<Pod>();
    let node_informer = factory.informer::<Node>();
    index_pods_by_claim(&pod_informer);
    let broadcaster = EventBroadcaster::new();
    broadcaster.start_recording_to_sink(ApiEventSink::new(client.clone()));
    let (operations, op_runner) = operations::Operations::new();
    let ctx = Arc::new(Ctx {
        client,
        claim_informer: claim_informer.store(),
        volume_informer: volume_informer.store(),
        classes: class_informer.store(),
        pods: pod_informer.store(),
        nodes: node_informer.store(),
        claims: Mutex::new(BTreeMap::new()),
        volumes: Mutex::new(BTreeMap::new()),
        claim_queue: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("claims"),
        ),
        volume_queue: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("volumes"),
        ),
        recorder: broadcaster.new_recorder(COMPONENT, ""),
        provisioners,
        operations,
        choosing: Mutex::new(()),
        reserved: Mutex::new(Default::default()),
        from_cache: Mutex::new(Default::default()),
    });
    let (c1, c2, c3) = (ctx.clone(), ctx.clone(), ctx.clone());
    claim_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |c: &Arc<PersistentVolumeClaim>, _| {
                c1.claim_queue.add(object_key(c.as_ref()))
            })
            .on_update(move |_, c: &Arc<PersistentVolumeClaim>| {
                c2.claim_queue.add(object_key(c.as_ref()))
            })
            .on_delete(move |d| c3.claim_queue.add(d.key())),
    );
    let (v1, v2, v3) = (ctx.clone(), ctx.clone(), ctx.clone());
    volume_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |v: &Arc<PersistentVolume>, _| v1.volume_queue.add(object_key(v.as_ref())))
            .on_update(move |_, v: &Arc<PersistentVolume>| {
                v2.volume_queue.add(object_key(v.as_ref()))
            })
            .on_delete(move |d| v3.volume_queue.add(d.key())),
    );
    factory.start();
    factory.wait_for_cache_sync().await;
    // Upstream `initializeCaches`.
    for c in ctx.claim_informer.list() {
        ctx.store_claim(c);
    }
    for v in ctx.volume_informer.list() {
        ctx.store_volume(v);
    }
    let claims =
        Controller::new("persistentvolume-claims", ctx.claim_queue.clone()).with_max_retries(15);
    let volumes =
        Controller::new("persistentvolume-volumes", ctx.volume_queue.clone()).with_max_retries(15);
    let (cc, vc) = (ctx.clone(), ctx.clone());
    let claim_worker = claims.run(WORKERS, move |key: String| {
        let ctx = cc.clone();
        async move { ctx.sync_claim_key(&key).await }
    });
    let volume_worker = volumes.run(WORKERS, move |key: String| {
        let ctx = vc.clone();
        async move { ctx.sync_volume_key(&key).await }
    });
    let resync = async {
        loop {
            tokio::time::sleep(SYNC_PERIOD).await;
            for c in ctx.claim_informer.list_keys() {
                ctx.claim_queue.add(c);
            }
            for v in ctx.volume_informer.list_keys() {
                ctx.volume_queue.add(v);
            }
        }
    };
    let _broadcaster = broadcaster;
    futures::future::join4(claim_worker, volume_worker, resync, op_runner).await;
}

fn resource_version(rv: Option<&String>) -> Option<u64> {
    rv.and_then(|r| r.parse().ok())
}

/// Upstream `storeObjectUpdate`: keeps `obj` unless the cache holds a newer version (the same
/// version passes: periodic resyncs). Returns whether it was kept.
fn store_newer<K: Resource>(
    cache: &Mutex<BTreeMap<String, Arc<K>>>,
    key: String,
    obj: Arc<K>,
) -> bool {
    let mut cache = cache.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(old) = cache.get(&key) {
        let (old_rv, new_rv) = (
            resource_version(old.meta().resource_version.as_ref()),
            resource_version(obj.meta().resource_version.as_ref()),
        );
        if let (Some(o), Some(n)) = (old_rv, new_rv) {
            if o > n {
                return false;
            }
        }
    }
    cache.insert(key, obj);
    true
}

/// Whether a sync of `claim` may choose or look at `volume` (see [`Ctx::volumes_for`]).
fn may_concern(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let names_claim = match volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) {
        None => true,
        Some(r) => r.name == claim.metadata.name && r.namespace == claim.metadata.namespace,
    };
    let named = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .filter(|n| !n.is_empty());
    names_claim || (named.is_some() && volume.metadata.name.as_deref() == named)
}

pub(crate) fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

impl Ctx {
    fn store_claim(&self, claim: Arc<PersistentVolumeClaim>) -> bool {
        store_newer(&self.claims, key_of(&claim.metadata), claim)
    }

    fn store_volume(&self, volume: Arc<PersistentVolume>) -> bool {
        let name = volume.metadata.name.clone().unwrap_or_default();
        store_newer(&self.volumes, name, volume)
    }

    fn cached_claim(&self, key: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(key)
            .cloned()
    }

    /// The volumes a sync of `claim` may choose or look at, by name: available ones (no claimRef),
    /// those whose claimRef names the claim, and the one its `volumeName` names. The others are
    /// bound to other claims (nearly all volumes in a busy cluster) and [`binder::sync_claim`]
    /// never picks them: copying all of them and hashing each name against the reserved set per
    /// sync showed in `perf` with 1,000 claims.
    fn volumes_for(&self, claim: &PersistentVolumeClaim) -> Vec<Arc<PersistentVolume>> {
        self.volumes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter(|v| may_concern(v, claim))
            .cloned()
            .collect()
    }

    fn registered(&self) -> impl Fn(&str) -> bool + '_ {
        |name| self.provisioners.contains(name)
    }

    fn claim_event(&self, claim: &PersistentVolumeClaim, e: &Event) {
        self.event(&claim.object_ref(&()), e);
    }

    fn volume_event(&self, volume: &PersistentVolume, e: &Event) {
        self.event(&volume.object_ref(&()), e);
    }

    fn event(&self, r: &k8s_openapi::api::core::v1::ObjectReference, e: &Event) {
        let t = if e.warning {
            EventType::Warning
        } else {
            EventType::Normal
        };
        self.recorder.event(r, t, e.reason, &e.message);
    }

    // ---- claims ----

    async fn sync_claim_key(self: &Arc<Self>, key: &str) -> Result<(), String> {
        let from_cache = self
            .from_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        let Some(claim) = self.claim_informer.get(key) else {
            // Deleted (upstream `deleteClaim`): sync its volume now rather than at the resync.
            let gone = self
                .claims
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(key);
            if let Some(name) = gone
                .as_ref()
                .and_then(|c| c.spec.as_ref())
                .and_then(|s| s.volume_name.clone())
                .filter(|n| !n.is_empty())
            {
                self.volume_queue.add(name);
            }
            return Ok(());
        };
        if !self.store_claim(claim) && !from_cache {
            return Ok(());
        }
        // Sync what the cache holds: the informer's copy or a newer one of ours.
        let Some(claim) = self.cached_claim(key) else {
            return Ok(());
        };
        self.sync_claim(claim).await
    }

    /// Binds a claim whose volume was just provisioned, from the cache (which holds the new volume
    /// and our last write of the claim), instead of waiting for the volume's informer event to
    /// queue the claim (upstream's path: `syncVolume` queues the claim). Under load that round trip
    /// through the volume queue was seconds between a volume's creation and its binding, and the
    /// scheduler's PreBind waits for the binding.
    pub(super) fn sync_provisioned(&self, claim_key: String) {
        self.from_cache
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(claim_key.clone());
        self.claim_queue.add(claim_key);
    }

    /// Names of the claim's non-terminated pods not scheduled yet (upstream
    /// `findNonScheduledPodsByPVC`).
    fn unscheduled_pods(&self, claim: &PersistentVolumeClaim) -> Vec<String> {
        let pods = self
            .pods
            .by_index(POD_PVC_INDEX, &key_of(&claim.metadata))
            .unwrap_or_default();
        pods.iter()
            .filter(|p| !is_pod_terminated(p))
            .filter(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_deref())
                    .unwrap_or("")
                    .is_empty()
            })
            .filter_map(|p| p.metadata.name.clone())
            .collect()
    }

    async fn sync_claim(self: &Arc<Self>, claim: Arc<PersistentVolumeClaim>) -> Result<(), String> {
        let unscheduled = self.unscheduled_pods(&claim);
        let classes = self.classes.list();
        let claim_uid = claim.metadata.uid.clone();
        // Choose under the lock, among volumes no other sync is binding, and reserve the choice.
        let (action, _reservation) = {
            let _choosing = self.choosing.lock().unwrap_or_else(|e| e.into_inner());
            let mut volumes = self.volumes_for(&claim);
            {
                // Released before the choice below takes the lock again to reserve.
                let reserved = self.reserved.lock().unwrap_or_else(|e| e.into_inner());
                if !reserved.is_empty() {
                    volumes.retain(|v| {
                        let name = v.metadata.name.as_deref().unwrap_or("");
                        let ours = v
                            .spec
                            .as_ref()
                            .and_then(|s| s.claim_ref.as_ref())
                            .is_some_and(|r| r.uid.is_some() && r.uid == claim_uid);
                        ours || !reserved.contains(name)
                    });
                }
            }
            let view = binder::View {
                volumes: &volumes,
                classes: &classes,
                unscheduled_pods: &unscheduled,
            };
            let action = binder::sync_claim(&claim, &view)?;
            let reservation = match &action {
                ClaimAction::Bind(v) => {
                    let volume = v.metadata.name.clone().unwrap_or_default();
                    self.reserved
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(volume.clone());
                    Some(Reservation { ctx: self, volume })
                }
                _ => None,
            };
            (action, reservation)
        };
        match action {
            ClaimAction::Pending { event } => {
                if let Some(e) = &event {
                    self.claim_event(&claim, e);
                }
                self.update_claim_status(&claim, "Pending", None).await?;
            }
            ClaimAction::Lost { event } => {
                if binder_claim_phase(&claim) != "Lost" {
                    let new = self.update_claim_status(&claim, "Lost", None).await?;
                    self.claim_event(&new, &event);
                }
            }
            ClaimAction::Bind(volume) => self.bind(volume, claim).await?,
            ClaimAction::AssignDefaultClass(class) => {
                let mut new = (*claim).clone();
                new.spec
                    .get_or_insert_with(Default::default)
                    .storage_class_name = Some(class);
                self.put_claim(&new).await?;
            }
            ClaimAction::Provision => self.provision_claim(&claim),
            ClaimAction::Fail { event, error } => {
                self.claim_event(&claim, &event);
                return Err(error);
            }
        }
        Ok(())
    }

    /// Upstream `bind`: the volume's claimRef, its phase, the claim's volumeName and annotations,
    /// its status; each step writes only if needed and a failure leaves the rest to the next sync.
    async fn bind(
        &self,
        volume: Arc<PersistentVolume>,
        claim: Arc<PersistentVolumeClaim>,
    ) -> Result<(), String> {
        let mut volume = volume;
        if let Some(v) = binder::bind_volume_to_claim(&volume, &claim) {
            volume = self.put_volume(&v).await?;
        }
        volume = self.update_volume_phase(&volume, "Bound", "").await?;
        let mut claim = claim;
        if let Some(c) = binder::bind_claim_to_volume(&claim, &volume) {
            claim = self.put_claim(&c).await?;
        }
        self.update_claim_status(&claim, "Bound", Some(&volume))
            .await?;
        tracing::debug!(claim = %key_of(&claim.metadata), volume = ?volume.metadata.name, "bound");
        Ok(())
    }

    // ---- volumes ----

    async fn sync_volume_key(self: &Arc<Self>, name: &str) -> Result<(), String> {
        let Some(volume) = self.volume_informer.get(name) else {
            // Deleted (upstream `deleteVolume`): its claim turns Lost now rather than at the resync.
            let gone = self
                .volumes
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(name);
            if let Some(r) = gone
                .as_ref()
                .and_then(|v| v.spec.as_ref())
                .and_then(|s| s.claim_ref.as_ref())
            {
                self.claim_queue.add(format!(
                    "{}/{}",
                    r.namespace.as_deref().unwrap_or(""),
                    r.name.as_deref().unwrap_or("")
                ));
            }
            return Ok(());
        };
        if !self.store_volume(volume) {
            return Ok(());
        }
        let Some(volume) = self
            .volumes
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
        else {
            return Ok(());
        };
        self.sync_volume(volume).await
    }

    /// The claim a bound volume's claimRef names, as upstream's `syncVolume` finds it: the cache,
    /// then (unless the volume is already Released or Failed) the informer and the API; a claim
    /// with another UID is fetched again and, still different, counts as gone.
    async fn claim_of(
        &self,
        volume: &PersistentVolume,
    ) -> Result<Option<Arc<PersistentVolumeClaim>>, String> {
        let Some(r) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
            return Ok(None);
        };
        let (ns, name) = (
            r.namespace.clone().unwrap_or_default(),
            r.name.clone().unwrap_or_default(),
        );
        let key = format!("{ns}/{name}");
        let mut claim = self.cached_claim(&key);
        let phase = binder::volume_phase(volume);
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), &ns);
        if claim.is_none() && phase != "Released" && phase != "Failed" {
            claim = self.claim_informer.get(&key);
            if claim.is_none() {
                claim = match api.get(&name).await {
                    Ok(c) => Some(Arc::new(c)),
                    Err(e) if is_not_found(&e) => None,
                    Err(e) => return Err(api_error(&format!("getting claim {key}"), e)),
                };
            }
        }
        let uid = r.uid.as_deref().unwrap_or("");
        if let Some(c) = &claim {
            if c.metadata.uid.as_deref().unwrap_or("") != uid {
                // The cache may be behind a claim recreated under the same name.
                claim = match api.get(&name).await {
                    Ok(c) if c.metadata.uid.as_deref().unwrap_or("") == uid => Some(Arc::new(c)),
                    Ok(_) => None,
                    Err(e) if is_not_found(&e) => None,
                    Err(e) => return Err(api_error(&format!("getting claim {key}"), e)),
                };
            }
        }
        Ok(claim)
    }

    async fn sync_volume(self: &Arc<Self>, volume: Arc<PersistentVolume>) -> Result<(), String> {
        let mut volume = volume;
        if let Some(finalizers) = binder::deletion_finalizers(&volume, self.registered()) {
            let mut new = (*volume).clone();
            new.metadata.finalizers = Some(finalizers);
            volume = self.put_volume(&new).await?;
        }
        let claim = self.claim_of(&volume).await?;
        match binder::sync_volume(&volume, claim.as_deref()) {
            VolumeAction::Phase(phase) => {
                self.update_volume_phase(&volume, phase, "").await?;
            }
            VolumeAction::Release => {
                let phase = binder::volume_phase(&volume);
                if phase != "Released" && phase != "Failed" {
                    tracing::info!(volume = ?volume.metadata.name, policy = binder::reclaim_policy(&volume), "volume is released");
                    volume = self.update_volume_phase(&volume, "Released", "").await?;
                }
                self.reclaim(volume).await?;
            }
            VolumeAction::SyncClaim(key) => self.claim_queue.add(key),
            VolumeAction::Mismatch {
                volume_event,
                claim_event,
            } => {
                self.volume_event(&volume, &volume_event);
                if let Some(c) = &claim {
                    self.claim_event(c, &claim_event);
                }
            }
            VolumeAction::Unbind => {
                let new = self.put_volume(&binder::unbind_volume(&volume)).await?;
                self.update_volume_phase(&new, "Available", "").await?;
            }
        }
        Ok(())
    }

    /// Upstream `reclaimVolume`.
    async fn reclaim(self: &Arc<Self>, volume: Arc<PersistentVolume>) -> Result<(), String> {
        let name = volume.metadata.name.clone().unwrap_or_default();
        let uid = volume.metadata.uid.clone().unwrap_or_default();
        match binder::reclaim(&volume) {
            binder::Reclaim::Nothing => {}
            binder::Reclaim::Unknown(event) => {
                self.update_volume_phase_with_event(&volume, "Failed", &event)
                    .await?;
            }
            binder::Reclaim::Recycle => {
                let ctx = self.clone();
                self.operations.schedule(
                    format!("recycle-{name}[{uid}]"),
                    boxed(async move { ctx.recycle_operation(&volume).await }),
                );
            }
            binder::Reclaim::Delete => {
                let ctx = self.clone();
                self.operations.schedule(
                    format!("delete-{name}[{uid}]"),
                    boxed(async move { ctx.delete_operation(&volume).await }),
                );
            }
        }
        Ok(())
    }

    /// Upstream `provisionClaim`.
    fn provision_claim(self: &Arc<Self>, claim: &Arc<PersistentVolumeClaim>) {
        let classes = self.classes.list();
        let op = format!(
            "provision-{}[{}]",
            key_of(&claim.metadata),
            claim.metadata.uid.as_deref().unwrap_or("")
        );
        match binder::find_provisioning(claim, &classes, self.registered()) {
            binder::Provisioning::Failed(message) => {
                self.claim_event(claim, &Event::warning("ProvisioningFailed", message));
            }
            binder::Provisioning::External(class) => {
                let (ctx, claim) = (self.clone(), claim.clone());
                self.operations.schedule(
                    op,
                    boxed(async move { ctx.provision_external(&claim, &class).await }),
                );
            }
            binder::Provisioning::InTree(class) => {
                let (ctx, claim) = (self.clone(), claim.clone());
                self.operations.schedule(
                    op,
                    boxed(async move { ctx.provision_in_tree(&claim, &class).await }),
                );
            }
        }
    }
}

fn binder_claim_phase(claim: &PersistentVolumeClaim) -> &str {
    claim
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

fn boxed<F>(f: F) -> BoxFuture<'static, Result<(), String>>
where
    F: std::future::Future<Output = Result<(), String>> + Send + 'static,
{
    Box::pin(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn volume(rv: &str) -> Arc<PersistentVolume> {
        Arc::new(PersistentVolume {
            metadata: ObjectMeta {
                name: Some("v".into()),
                resource_version: Some(rv.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    #[test]
    fn a_claim_sync_sees_available_volumes_its_own_and_the_named_one() {
        let volume = |name: &str, claim: Option<(&str, &str)>| -> PersistentVolume {
            let r = claim.map(|(ns, n)| serde_json::json!({"namespace": ns, "name": n}));
            serde_json::from_value(serde_json::json!({"metadata": {"name": name},
                "spec": {"claimRef": r}}))
            .unwrap()
        };
        let claim = |volume_name: Option<&str>| -> PersistentVolumeClaim {
            serde_json::from_value(
                serde_json::json!({"metadata": {"name": "c", "namespace": "ns"},
                "spec": {"volumeName": volume_name}}),
            )
            .unwrap()
        };
        let available = volume("a", None);
        let ours = volume("o", Some(("ns", "c")));
        let same_name_elsewhere = volume("x", Some(("other", "c")));
        let others = volume("b", Some(("ns", "d")));
        for v in [&available, &ours] {
            assert!(may_concern(v, &claim(None)));
        }
        for v in [&same_name_elsewhere, &others] {
            assert!(!may_concern(v, &claim(None)));
        }
        // The volume a claim names is looked at even when it is bound to another claim.
        assert!(may_concern(&others, &claim(Some("b"))));
        assert!(!may_concern(&others, &claim(Some(""))));
    }

    #[test]
    fn the_cache_keeps_the_newest_version() {
        let cache = Mutex::new(BTreeMap::new());
        assert!(store_newer(&cache, "v".into(), volume("5")));
        // An informer copy older than our own write is ignored; the same version passes (resync).
        assert!(!store_newer(&cache, "v".into(), volume("4")));
        assert!(store_newer(&cache, "v".into(), volume("5")));
        assert!(store_newer(&cache, "v".into(), volume("12")));
        let kept = cache.lock().unwrap()["v"].metadata.resource_version.clone();
        assert_eq!(kept.as_deref(), Some("12"));
    }
}
