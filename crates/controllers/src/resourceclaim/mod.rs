//! The resource claim controller (upstream `pkg/controller/resourceclaim`,
//! `resourceclaim-controller`), for Dynamic Resource Allocation (`resource.k8s.io/v1`):
//!
//! - for each `pod.spec.resourceClaims[]` entry with `resourceClaimTemplateName` it creates a
//!   ResourceClaim from the template (generateName `<pod>-<entry>-`, controlled by the pod,
//!   annotated [`decide::POD_CLAIM_ANNOTATION`]) and records it in
//!   `pod.status.resourceClaimStatuses`; a claim created before the status write is found again by
//!   owner and annotation, so nothing is created twice;
//! - an allocated claim of a pod bound without the scheduler is reserved for it;
//! - `status.reservedFor` loses pods that are gone, replaced or done; when the last one goes the
//!   allocation is cleared (structured parameters: the scheduler allocated, the controller
//!   deallocates) and the scheduler's [`decide::FINALIZER`] removed;
//! - a generated claim of a pod that will not run again is deleted (the garbage collector deletes it
//!   too, but only once the pod object goes).
//!
//! Work items are `pod:<ns>/<name>` and `claim:<ns>/<name>`, as upstream's. Differences: the pod
//! status is written with a strategic merge patch of the new entries (upstream: server-side apply
//! with the field manager `ResourceClaimController`); no metrics; the admin-access feature gate is
//! taken as on (its 1.36 default).

pub mod decide;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use client::controller::Controller;
use client::events::{ApiEventSink, EventBroadcaster, EventType, Recorder};
use client::informer::{index_func, EventHandlerFuncs, SharedInformerFactory, Store};
use client::workqueue::{default_controller_rate_limiter, QueueConfig, RateLimitingQueue};
use k8s_openapi::api::core::v1::{Pod, PodResourceClaim};
use k8s_openapi::api::resource::v1::{
    ResourceClaim, ResourceClaimConsumerReference, ResourceClaimTemplate,
};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Resource};
use serde_json::json;

use decide::{NameError, Verdict};

/// Upstream's canonical controller name.
pub const CONTROLLER_NAME: &str = "resourceclaim-controller";
const POD_CLAIM_INDEX: &str = "pod-resource-claim-index";
const CLAIM_OWNER_INDEX: &str = "claim-pod-owner-index";
const CLAIM_PREFIX: &str = "claim:";
const POD_PREFIX: &str = "pod:";
/// Claims created but perhaps not yet in the informer, kept at most this long and this many
/// (upstream's mutation cache keeps them an hour).
const RECENT_TTL: Duration = Duration::from_secs(3600);
const RECENT_MAX: usize = 10_000;

struct Ctx {
    client: kube::Client,
    pods: Arc<Store<Pod>>,
    claims: Arc<Store<ResourceClaim>>,
    templates: Arc<Store<ResourceClaimTemplate>>,
    queue: RateLimitingQueue<String>,
    recorder: Recorder,
    deleted: Mutex<decide::DeletedUids>,
    /// Claims this controller created, by `ns/name`, until the informer has them: a retry after a
    /// failed pod status write must find the claim, not create another.
    recent: Mutex<HashMap<String, (Instant, Arc<ResourceClaim>)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Ctx {
    fn claim(&self, ns: &str, name: &str) -> Option<Arc<ResourceClaim>> {
        self.claims.get(&format!("{ns}/{name}"))
    }

    /// The claims controlled by the pod of `uid`: the informer's and those created since.
    fn owned_claims(&self, uid: &str) -> Vec<Arc<ResourceClaim>> {
        let mut out = self
            .claims
            .by_index(CLAIM_OWNER_INDEX, uid)
            .unwrap_or_default();
        let mut recent = lock(&self.recent);
        recent.retain(|key, (at, _)| at.elapsed() < RECENT_TTL && self.claims.get(key).is_none());
        out.extend(
            recent
                .values()
                .filter(|(_, c)| decide::owner_index(c).iter().any(|u| u == uid))
                .map(|(_, c)| c.clone()),
        );
        out
    }

    fn remember_created(&self, claim: ResourceClaim) -> Arc<ResourceClaim> {
        let claim = Arc::new(claim);
        let key = format!(
            "{}/{}",
            claim.metadata.namespace.as_deref().unwrap_or(""),
            claim.metadata.name.as_deref().unwrap_or("")
        );
        let mut recent = lock(&self.recent);
        if recent.len() >= RECENT_MAX {
            // Bounded: the oldest is the one most likely in the informer by now.
            if let Some(oldest) = recent
                .iter()
                .min_by_key(|(_, (at, _))| *at)
                .map(|(k, _)| k.clone())
            {
                recent.remove(&oldest);
            }
        }
        recent.insert(key, (Instant::now(), claim.clone()));
        claim
    }

    /// Upstream `enqueuePod`: a pod that no longer needs its claims queues them (their
    /// reservations go), and a pod with something to create or reserve is queued.
    fn enqueue_pod(&self, pod: &Pod, deleted: bool) {
        if decide::pod_claims(pod).is_empty() {
            return;
        }
        if deleted {
            if let Some(uid) = &pod.metadata.uid {
                lock(&self.deleted).add(uid);
            }
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or("");
        if !decide::pod_needs_claims(pod, deleted) {
            for pc in decide::pod_claims(pod) {
                if let Ok((Some(name), _)) = decide::claim_name(pod, pc) {
                    self.queue.add(format!("{CLAIM_PREFIX}{ns}/{name}"));
                }
            }
        }
        if decide::pod_needs_work(pod, |name| self.claim(ns, name)) {
            let name = pod.metadata.name.as_deref().unwrap_or("");
            self.queue.add(format!("{POD_PREFIX}{ns}/{name}"));
        }
    }

    /// Upstream `enqueueResourceClaim`: the claim (unless deleted) and the pods using it.
    fn enqueue_claim(&self, claim: &ResourceClaim, deleted: bool) {
        let key = format!(
            "{}/{}",
            claim.metadata.namespace.as_deref().unwrap_or(""),
            claim.metadata.name.as_deref().unwrap_or("")
        );
        if !deleted {
            self.queue.add(format!("{CLAIM_PREFIX}{key}"));
        }
        for pod in self
            .pods
            .by_index(POD_CLAIM_INDEX, &key)
            .unwrap_or_default()
        {
            self.enqueue_pod(&pod, false);
        }
    }
}

pub async fn run(client: kube::Client, factory: &SharedInformerFactory, workers: usize) {
    let pod_informer = factory.informer::<Pod>();
    let claim_informer = factory.informer::<ResourceClaim>();
    let template_informer = factory.informer::<ResourceClaimTemplate>();
    let _ = pod_informer.add_indexer(POD_CLAIM_INDEX, index_func(decide::pod_claim_index));
    let _ = claim_informer.add_indexer(CLAIM_OWNER_INDEX, index_func(decide::owner_index));
    let broadcaster = EventBroadcaster::new();
    broadcaster.start_recording_to_sink(ApiEventSink::new(client.clone()));
    let ctx = Arc::new(Ctx {
        client,
        pods: pod_informer.store(),
        claims: claim_informer.store(),
        templates: template_informer.store(),
        queue: RateLimitingQueue::with_config(
            default_controller_rate_limiter::<String>(),
            QueueConfig::named("resource_claim"),
        ),
        recorder: broadcaster.new_recorder("resource_claim", ""),
        deleted: Mutex::default(),
        recent: Mutex::default(),
    });
    let (p1, p2, p3) = (ctx.clone(), ctx.clone(), ctx.clone());
    pod_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |p: &Arc<Pod>, _| p1.enqueue_pod(p, false))
            .on_update(move |_, p: &Arc<Pod>| p2.enqueue_pod(p, false))
            .on_delete(move |d| p3.enqueue_pod(d.object(), true)),
    );
    let (c1, c2, c3) = (ctx.clone(), ctx.clone(), ctx.clone());
    claim_informer.add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |c: &Arc<ResourceClaim>, _| c1.enqueue_claim(c, false))
            .on_update(move |_, c: &Arc<ResourceClaim>| c2.enqueue_claim(c, false))
            .on_delete(move |d| c3.enqueue_claim(d.object(), true)),
    );
    factory.start();
    factory.wait_for_cache_sync().await;
    Controller::new(CONTROLLER_NAME, ctx.queue.clone())
        .run(workers, move |key: String| {
            let ctx = ctx.clone();
            async move { sync(&ctx, &key).await }
        })
        .await;
}

async fn sync(ctx: &Ctx, key: &str) -> Result<(), String> {
    let (prefix, object) = if let Some(k) = key.strip_prefix(POD_PREFIX) {
        (POD_PREFIX, k)
    } else if let Some(k) = key.strip_prefix(CLAIM_PREFIX) {
        (CLAIM_PREFIX, k)
    } else {
        return Err(format!("unexpected key: {key}"));
    };
    let (ns, name) = object
        .split_once('/')
        .ok_or_else(|| format!("unexpected key: {key}"))?;
    if prefix == POD_PREFIX {
        sync_pod(ctx, ns, name).await
    } else {
        sync_claim(ctx, ns, name).await
    }
}

async fn sync_pod(ctx: &Ctx, ns: &str, name: &str) -> Result<(), String> {
    let Some(pod) = ctx.pods.get(&format!("{ns}/{name}")) else {
        return Ok(());
    };
    if pod.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let mut created = BTreeMap::new();
    for pc in decide::pod_claims(&pod) {
        if let Err(e) = handle_claim(ctx, &pod, pc, &mut created).await {
            ctx.recorder.event(
                &pod.object_ref(&()),
                EventType::Warning,
                "FailedResourceClaimCreation",
                &format!("PodResourceClaim {}: {e}", pc.name),
            );
            return Err(format!(
                "pod {ns}/{name}, PodResourceClaim {}: {e}",
                pc.name
            ));
        }
    }
    if !created.is_empty() {
        let statuses: Vec<_> = created
            .iter()
            .map(|(pc, claim)| json!({"name": pc, "resourceClaimName": claim}))
            .collect();
        let patch = json!({"status": {"resourceClaimStatuses": statuses}});
        Api::<Pod>::namespaced(ctx.client.clone(), ns)
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            .map_err(|e| {
                format!(
                    "update pod {ns}/{name} ResourceClaimStatuses: {}",
                    crate::api_error_message(&e)
                )
            })?;
    }
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .unwrap_or("")
        .is_empty()
    {
        // The scheduler reserves for the pods it binds.
        return Ok(());
    }
    for pc in decide::pod_claims(&pod) {
        let (Some(claim_name), check_owner) =
            decide::claim_name(&pod, pc).map_err(|e| e.to_string())?
        else {
            continue;
        };
        let Some(claim) = ctx.claim(ns, &claim_name) else {
            return Ok(());
        };
        if check_owner {
            decide::is_for_pod(&pod, &claim)?;
        }
        if decide::needs_reservation(&pod, &claim) {
            reserve_for_pod(ctx, &pod, &claim).await?;
        }
    }
    Ok(())
}

/// Upstream `handleClaim`: the claim of one entry, created from its template if missing; a new one
/// goes into `created` (entry name -> claim name) for the caller's one status write.
async fn handle_claim(
    ctx: &Ctx,
    pod: &Pod,
    pc: &PodResourceClaim,
    created: &mut BTreeMap<String, String>,
) -> Result<(), String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    match decide::claim_name(pod, pc) {
        Err(NameError::NotCreated(_)) => {}
        Err(e) => return Err(format!("checking for claim before creating it: {e}")),
        Ok((None, _)) => return Ok(()),
        Ok((Some(name), check_owner)) if !name.is_empty() => {
            // Recorded in the pod's status; made again only if it was deleted or is not the pod's.
            if let Some(claim) = ctx.claim(ns, &name) {
                match check_owner.then(|| decide::is_for_pod(pod, &claim)) {
                    None | Some(Ok(())) => return Ok(()),
                    Some(Err(e)) => tracing::warn!(
                        pod = %decide::pod_key(pod), claim = %name, error = %e,
                        "the claim made for the pod is no longer owned by it; creating a new one"
                    ),
                }
            }
        }
        Ok(_) => {}
    }
    let Some(template_name) = &pc.resource_claim_template_name else {
        return Ok(());
    };
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let claim = match decide::find_generated(ctx.owned_claims(uid), &pc.name) {
        Some(found) => found,
        None => {
            let template = ctx
                .templates
                .get(&format!("{ns}/{template_name}"))
                .ok_or_else(|| {
                    format!(
                        "resource claim template {template_name:?}: resourceclaimtemplate.resource.k8s.io {template_name:?} not found"
                    )
                })?;
            let claim = decide::claim_from_template(pod, pc, &template);
            let made = Api::<ResourceClaim>::namespaced(ctx.client.clone(), ns)
                .create(&PostParams::default(), &claim)
                .await
                .map_err(|e| {
                    format!(
                        "create ResourceClaim {}: {}",
                        claim.metadata.generate_name.as_deref().unwrap_or(""),
                        crate::api_error_message(&e)
                    )
                })?;
            tracing::debug!(pod = %decide::pod_key(pod), claim = ?made.metadata.name, "created ResourceClaim");
            ctx.remember_created(made)
        }
    };
    created.insert(
        pc.name.clone(),
        claim.metadata.name.clone().unwrap_or_default(),
    );
    Ok(())
}

async fn reserve_for_pod(ctx: &Ctx, pod: &Pod, claim: &ResourceClaim) -> Result<(), String> {
    let mut next = claim.clone();
    next.status
        .get_or_insert_with(Default::default)
        .reserved_for
        .get_or_insert_with(Vec::new)
        .push(ResourceClaimConsumerReference {
            api_group: None,
            resource: "pods".into(),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
        });
    let ns = claim.metadata.namespace.as_deref().unwrap_or("");
    let name = claim.metadata.name.as_deref().unwrap_or("");
    // An update, not a patch: it must fail if the claim changed meanwhile.
    Api::<ResourceClaim>::namespaced(ctx.client.clone(), ns)
        .replace_status(name, &PostParams::default(), &next)
        .await
        .map_err(|e| {
            format!(
                "reserve claim {ns}/{name} for pod: {}",
                crate::api_error_message(&e)
            )
        })?;
    Ok(())
}

async fn sync_claim(ctx: &Ctx, ns: &str, name: &str) -> Result<(), String> {
    let Some(claim) = ctx.claim(ns, name) else {
        return Ok(());
    };
    let pods_api = Api::<Pod>::namespaced(ctx.client.clone(), ns);
    let mut valid = Vec::new();
    for entry in claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .into_iter()
        .flatten()
    {
        let known_deleted = lock(&ctx.deleted).has(&entry.uid);
        let cached = ctx.pods.get(&format!("{ns}/{}", entry.name));
        let verdict = match decide::check_entry(entry, known_deleted, cached.as_deref())? {
            Verdict::AskServer => {
                let server = pods_api
                    .get_opt(&entry.name)
                    .await
                    .map_err(|e| crate::api_error_message(&e))?;
                decide::server_verdict(entry, server.as_ref())
            }
            v => v,
        };
        if verdict == Verdict::Keep {
            valid.push(entry.clone());
        }
    }
    let owner = decide::owner_state(&claim, |pod| ctx.pods.get(&format!("{ns}/{pod}")));
    let plan = decide::plan_claim(&claim, valid, owner);
    let api = Api::<ResourceClaim>::namespaced(ctx.client.clone(), ns);
    let mut latest = (*claim).clone();
    if let Some(status) = &plan.status {
        // Updates, not patches: they must fail if the claim changed meanwhile.
        latest = api
            .replace_status(name, &PostParams::default(), status)
            .await
            .map_err(|e| crate::api_error_message(&e))?;
    }
    let still_allocated = latest
        .status
        .as_ref()
        .is_some_and(|s| s.allocation.is_some());
    let has_finalizer = latest
        .metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == decide::FINALIZER);
    if plan.remove_finalizer && has_finalizer && !still_allocated {
        api.replace(
            name,
            &PostParams::default(),
            &decide::without_finalizer(latest),
        )
        .await
        .map_err(|e| crate::api_error_message(&e))?;
    }
    if plan.delete {
        tracing::debug!(claim = %format!("{ns}/{name}"), "deleting the unused claim of a finished pod");
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                return Err(format!(
                    "delete claim {ns}/{name}: {}",
                    crate::api_error_message(&e)
                ))
            }
        }
    }
    Ok(())
}
