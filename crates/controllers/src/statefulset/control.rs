//! The pure part of the StatefulSet controller (upstream `stateful_set_control.go` and
//! `stateful_set_utils.go`): pod identities, which pods to create, delete or wait for in one sync under
//! OrderedReady or Parallel management and the RollingUpdate/OnDelete strategies, claims from
//! `volumeClaimTemplates` and their retention owner references, and the status.

use std::sync::Arc;

use jiff::Timestamp;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use serde_json::{json, Value};

/// Pod label naming the revision a pod was made from (upstream `StatefulSetRevisionLabel`).
pub const REVISION_LABEL: &str = "controller-revision-hash";
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

pub fn replicas(set: &StatefulSet) -> i32 {
    set.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub fn start_ordinal(set: &StatefulSet) -> i32 {
    set.spec
        .as_ref()
        .and_then(|s| s.ordinals.as_ref())
        .and_then(|o| o.start)
        .unwrap_or(0)
}

fn set_name(set: &StatefulSet) -> &str {
    set.metadata.name.as_deref().unwrap_or("")
}

/// The ordinal of a pod named `<set>-<n>`; None for names the set did not give (upstream
/// `getParentNameAndOrdinal`).
pub fn ordinal(set: &StatefulSet, pod: &Pod) -> Option<i32> {
    let name = pod.metadata.name.as_deref()?;
    let rest = name.strip_prefix(set_name(set))?.strip_prefix('-')?;
    if rest.is_empty() || !rest.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    rest.parse().ok()
}

pub fn in_range(set: &StatefulSet, ord: i32) -> bool {
    let start = start_ordinal(set);
    ord >= start && ord < start + replicas(set)
}

fn phase(pod: &Pod) -> &str {
    pod.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

pub fn is_created(pod: &Pod) -> bool {
    !phase(pod).is_empty()
}

pub fn is_terminating(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_some()
}

fn ready_since(pod: &Pod) -> Option<Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "Ready" && c.status == "True")
        .map(|c| {
            c.last_transition_time
                .as_ref()
                .map_or(Timestamp::UNIX_EPOCH, |t| t.0)
        })
}

pub fn is_running_and_ready(pod: &Pod) -> bool {
    phase(pod) == "Running" && ready_since(pod).is_some()
}

/// Ready for `min_ready` seconds (upstream `IsPodAvailable`); otherwise how long until it is.
pub fn availability(
    pod: &Pod,
    min_ready: i64,
    now: Timestamp,
) -> Result<(), Option<std::time::Duration>> {
    if phase(pod) != "Running" {
        return Err(None);
    }
    let since = ready_since(pod).ok_or(None)?;
    let at = since + jiff::SignedDuration::from_secs(min_ready);
    if min_ready == 0 || at <= now {
        Ok(())
    } else {
        Err(std::time::Duration::try_from(at.duration_since(now)).ok())
    }
}

pub fn is_healthy(pod: &Pod) -> bool {
    is_running_and_ready(pod) && !is_terminating(pod)
}

pub fn pod_revision(pod: &Pod) -> &str {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(REVISION_LABEL))
        .map_or("", String::as_str)
}

/// `<claim>-<set>-<ordinal>` (upstream `getPersistentVolumeClaimName`).
pub fn claim_name(set: &StatefulSet, template: &str, ord: i32) -> String {
    format!("{template}-{}-{ord}", set_name(set))
}

/// The claims a pod of this ordinal uses: each template, named for the pod, labelled with the set's
/// selector (upstream `getPersistentVolumeClaims`).
pub fn claims(set: &StatefulSet, ord: i32) -> Vec<Value> {
    let spec = set.spec.as_ref();
    let match_labels = spec
        .and_then(|s| s.selector.match_labels.clone())
        .unwrap_or_default();
    spec.and_then(|s| s.volume_claim_templates.as_ref())
        .into_iter()
        .flatten()
        .map(|t| {
            let mut claim = serde_json::to_value(t).unwrap_or_default();
            let template = t.metadata.name.as_deref().unwrap_or("");
            let meta = &mut claim["metadata"];
            meta["name"] = json!(claim_name(set, template, ord));
            meta["namespace"] = json!(set.metadata.namespace);
            if !meta["labels"].is_object() {
                meta["labels"] = json!({});
            }
            for (k, v) in &match_labels {
                meta["labels"][k] = json!(v);
            }
            claim["apiVersion"] = json!("v1");
            claim["kind"] = json!("PersistentVolumeClaim");
            if let Some(m) = claim["metadata"].as_object_mut() {
                m.remove("creationTimestamp");
            }
            if let Some(c) = claim.as_object_mut() {
                c.remove("status");
            }
            claim
        })
        .collect()
}

/// The pod of ordinal `ord` from `template` (the template of `revision`): name, hostname and subdomain,
/// identity and revision labels, the set as controller, and a volume per claim template (upstream
/// `newVersionedStatefulSetPod`).
pub fn new_pod(set: &StatefulSet, template: &Value, revision: &str, ord: i32) -> Value {
    let name = format!("{}-{ord}", set_name(set));
    let mut meta = template
        .get("metadata")
        .cloned()
        .unwrap_or_else(|| json!({}));
    if !meta["labels"].is_object() {
        meta["labels"] = json!({});
    }
    meta["labels"][POD_NAME_LABEL] = json!(name);
    meta["labels"][POD_INDEX_LABEL] = json!(ord.to_string());
    meta["labels"][REVISION_LABEL] = json!(revision);
    meta["name"] = json!(name);
    // Upstream builds the pod with `GetPodFromTemplate`, which also leaves a generateName.
    meta["generateName"] = json!(format!("{}-", set_name(set)));
    meta["namespace"] = json!(set.metadata.namespace);
    meta["ownerReferences"] = json!([crate::history::controller_ref(&set.metadata, "StatefulSet")]);
    if let Some(m) = meta.as_object_mut() {
        m.remove("creationTimestamp");
    }
    let mut spec = template.get("spec").cloned().unwrap_or_else(|| json!({}));
    spec["hostname"] = json!(name);
    if let Some(service) = set.spec.as_ref().and_then(|s| s.service_name.as_deref()) {
        if !service.is_empty() {
            spec["subdomain"] = json!(service);
        }
    }
    let templates: Vec<String> = set
        .spec
        .as_ref()
        .and_then(|s| s.volume_claim_templates.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|t| t.metadata.name.clone())
        .collect();
    if !templates.is_empty() {
        let mut volumes: Vec<Value> = templates
            .iter()
            .map(|t| json!({"name": t, "persistentVolumeClaim": {"claimName": claim_name(set, t, ord)}}))
            .collect();
        for v in spec["volumes"].as_array().into_iter().flatten() {
            if !templates.iter().any(|t| v["name"] == json!(t)) {
                volumes.push(v.clone());
            }
        }
        spec["volumes"] = json!(volumes);
    }
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec})
}

/// The owner references a claim should carry for the retention policy (upstream
/// `updateClaimOwnerRefForSetAndPod`), or None when they already do. The set's and pod's references
/// are plain (not controller) references, for the garbage collector.
pub fn claim_owner_refs(
    set: &StatefulSet,
    pod: &Pod,
    claim: &PersistentVolumeClaim,
) -> Option<Value> {
    let policy = set
        .spec
        .as_ref()
        .and_then(|s| s.persistent_volume_claim_retention_policy.as_ref());
    let delete = |v: Option<&String>| v.is_some_and(|p| p == "Delete");
    let when_deleted = delete(policy.and_then(|p| p.when_deleted.as_ref()));
    let when_scaled = delete(policy.and_then(|p| p.when_scaled.as_ref()));
    let scaled_down = ordinal(set, pod).is_none_or(|o| !in_range(set, o));
    let (want_set, want_pod) = match (when_scaled, when_deleted) {
        (false, false) => (false, false),
        (false, true) => (true, false),
        (true, false) => (false, scaled_down),
        (true, true) => (!scaled_down, scaled_down),
    };
    let set_uid = set.metadata.uid.as_deref().unwrap_or("");
    let pod_uid = pod.metadata.uid.as_deref().unwrap_or("");
    let mut refs: Vec<Value> = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .map(|r| serde_json::to_value(r).unwrap_or_default())
        .collect();
    let before = refs.clone();
    let mut ensure = |uid: &str, want: bool, r: Value| {
        let has = refs.iter().any(|x| x["uid"] == json!(uid));
        if want && !has {
            refs.push(r);
        } else if !want && has {
            refs.retain(|x| x["uid"] != json!(uid));
        }
    };
    ensure(
        set_uid,
        want_set,
        json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "name": set_name(set), "uid": set_uid}),
    );
    ensure(
        pod_uid,
        want_pod,
        json!({"apiVersion": "v1", "kind": "Pod", "name": pod.metadata.name, "uid": pod_uid}),
    );
    (refs != before).then(|| json!(refs))
}

/// What one sync does.
#[derive(Debug, Default, PartialEq)]
pub struct Plan {
    /// Pods to create (with their claims first), in order.
    pub create: Vec<Value>,
    /// Pods to delete, by name, in order.
    pub delete: Vec<String>,
    /// Existing pods whose claims' owner references need a look.
    pub check_claims: Vec<String>,
    /// Ordinals of pending pods whose missing claims are to be created.
    pub create_claims: Vec<i32>,
    /// Pods whose identity labels were changed, with the labels to restore (upstream
    /// `updateIdentity`; hostname and subdomain are immutable, so only the labels can be fixed).
    pub relabel: Vec<(String, Value)>,
    /// Look again after this long (a pod becoming available).
    pub requeue: Option<std::time::Duration>,
}

/// The revisions a sync works with: the current one (older pods) and the update one (the set's
/// template), with their templates.
pub struct Revisions<'a> {
    pub current: &'a str,
    pub current_template: &'a Value,
    pub update: &'a str,
    pub update_template: &'a Value,
}

fn strategy(set: &StatefulSet) -> (&str, Option<Value>) {
    let s = set.spec.as_ref().and_then(|s| s.update_strategy.as_ref());
    let kind = s
        .and_then(|s| s.type_.as_deref())
        .unwrap_or("RollingUpdate");
    let ru = s
        .and_then(|s| s.rolling_update.as_ref())
        .map(|r| serde_json::to_value(r).unwrap_or_default());
    (kind, ru)
}

/// `maxUnavailable` of the rolling update against the replicas (int or percent, rounded down, at least 1).
pub fn max_unavailable(set: &StatefulSet) -> i32 {
    let (_, ru) = strategy(set);
    let v = ru.as_ref().and_then(|r| r.get("maxUnavailable")).cloned();
    let n = match v {
        Some(Value::Number(n)) => n.as_i64().unwrap_or(1) as i32,
        Some(Value::String(s)) => {
            let pct: f64 = s.trim_end_matches('%').parse().unwrap_or(0.0);
            (pct * f64::from(replicas(set)) / 100.0).floor() as i32
        }
        _ => 1,
    };
    n.max(1)
}

/// Upstream `updateStatefulSet`: the pods to create or delete this sync, given the owned pods.
pub fn plan(set: &StatefulSet, pods: &[Arc<Pod>], revs: &Revisions, now: Timestamp) -> Plan {
    let mut plan = Plan::default();
    if set.metadata.deletion_timestamp.is_some() {
        return plan;
    }
    let start = start_ordinal(set);
    let count = replicas(set).max(0);
    let monotonic = set
        .spec
        .as_ref()
        .and_then(|s| s.pod_management_policy.as_deref())
        != Some("Parallel");
    let min_ready = set
        .spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0) as i64;
    let (kind, ru) = strategy(set);
    let partition = ru
        .as_ref()
        .and_then(|r| r["partition"].as_i64())
        .unwrap_or(0) as i32;

    let mut slots: Vec<Option<&Arc<Pod>>> = vec![None; count as usize];
    let mut condemned: Vec<(i32, &Arc<Pod>)> = Vec::new();
    for pod in pods {
        match ordinal(set, pod) {
            Some(o) if in_range(set, o) => slots[(o - start) as usize] = Some(pod),
            Some(o) => condemned.push((o, pod)),
            None => {}
        }
    }
    condemned.sort_by_key(|c| std::cmp::Reverse(c.0));
    let healthy_available = |p: &Pod| is_healthy(p) && availability(p, min_ready, now).is_ok();
    let first_unhealthy_condemned = condemned
        .iter()
        .filter(|(_, p)| !healthy_available(p))
        .min_by_key(|(o, _)| *o)
        .map(|(o, _)| *o);
    let first_unhealthy_in_range = slots.iter().flatten().any(|p| !healthy_available(p));

    for (i, slot) in slots.iter().enumerate() {
        let ord = start + i as i32;
        let Some(pod) = slot else {
            // Under a partitioned rolling update, ordinals below the partition keep the current revision.
            let current = kind == "RollingUpdate" && ord < start + partition;
            let (rev, template) = if current {
                (revs.current, revs.current_template)
            } else {
                (revs.update, revs.update_template)
            };
            plan.create.push(new_pod(set, template, rev, ord));
            if monotonic {
                return plan;
            }
            continue;
        };
        let p = phase(pod);
        if p == "Failed" || p == "Succeeded" {
            // Recreated on a later sync, once the old one is gone.
            if !is_terminating(pod) {
                plan.delete
                    .push(pod.metadata.name.clone().unwrap_or_default());
            }
            if monotonic {
                return plan;
            }
            continue;
        }
        if p == "Pending" {
            plan.create_claims.push(ord);
        }
        if monotonic && (is_terminating(pod) || !is_running_and_ready(pod)) {
            return plan;
        }
        if let Err(wait) = availability(pod, min_ready, now) {
            if monotonic {
                plan.requeue = wait;
                return plan;
            }
        }
        let name = pod.metadata.name.clone().unwrap_or_default();
        let label = |k: &str| pod.metadata.labels.as_ref().and_then(|l| l.get(k)).cloned();
        let index = ord.to_string();
        if label(POD_NAME_LABEL).as_ref() != Some(&name)
            || label(POD_INDEX_LABEL) != Some(index.clone())
        {
            plan.relabel.push((
                name.clone(),
                json!({POD_NAME_LABEL: name, POD_INDEX_LABEL: index}),
            ));
        }
        plan.check_claims.push(name);
    }

    // Scale down from the highest ordinal; OrderedReady one at a time and only over healthy pods.
    for (o, pod) in &condemned {
        if is_terminating(pod) {
            if monotonic {
                return plan;
            }
            continue;
        }
        if monotonic && !healthy_available(pod) && Some(*o) != first_unhealthy_condemned {
            return plan;
        }
        if monotonic && first_unhealthy_in_range {
            return plan;
        }
        plan.check_claims
            .push(pod.metadata.name.clone().unwrap_or_default());
        plan.delete
            .push(pod.metadata.name.clone().unwrap_or_default());
        if monotonic {
            return plan;
        }
    }

    if kind != "RollingUpdate" {
        return plan;
    }
    // Rolling update from the highest ordinal down to the partition, at most maxUnavailable pods
    // unavailable at once; deleted pods come back at the update revision.
    let update_min = partition.max(0) as usize;
    let mut unavailable = slots
        .iter()
        .skip(update_min)
        .flatten()
        .filter(|p| !healthy_available(p))
        .count() as i32;
    let budget = max_unavailable(set);
    for slot in slots.iter().skip(update_min).rev() {
        let Some(pod) = slot else { continue };
        if pod_revision(pod) != revs.update && !is_terminating(pod) {
            if unavailable >= budget && healthy_available(pod) {
                break;
            }
            if healthy_available(pod) {
                unavailable += 1;
            }
            plan.delete
                .push(pod.metadata.name.clone().unwrap_or_default());
        }
    }
    plan
}

/// Upstream status computation plus `completeRollingUpdate`.
pub fn status(
    set: &StatefulSet,
    pods: &[Arc<Pod>],
    current: &str,
    update: &str,
    collision_count: i32,
    now: Timestamp,
) -> Value {
    let min_ready = set
        .spec
        .as_ref()
        .and_then(|s| s.min_ready_seconds)
        .unwrap_or(0) as i64;
    let (mut replicas_n, mut ready, mut available, mut cur, mut upd) = (0, 0, 0, 0, 0);
    for pod in pods.iter().filter(|p| ordinal(set, p).is_some()) {
        if is_created(pod) {
            replicas_n += 1;
        }
        if is_running_and_ready(pod) {
            ready += 1;
            if availability(pod, min_ready, now).is_ok() {
                available += 1;
            }
        }
        if is_created(pod) && !is_terminating(pod) {
            let rev = pod_revision(pod);
            if rev == current {
                cur += 1;
            }
            if rev == update {
                upd += 1;
            }
        }
    }
    let (kind, _) = strategy(set);
    let (mut current, mut cur) = (current.to_string(), cur);
    if kind == "RollingUpdate" && upd == replicas_n && ready == replicas_n {
        cur = upd;
        current = update.to_string();
    }
    json!({
        "observedGeneration": set.metadata.generation.unwrap_or(0),
        "replicas": replicas_n,
        "readyReplicas": ready,
        "currentReplicas": cur,
        "updatedReplicas": upd,
        "availableReplicas": available,
        "currentRevision": current,
        "updateRevision": update,
        "collisionCount": collision_count,
    })
}
