//! ControllerRevision history shared by the StatefulSet and DaemonSet controllers (upstream
//! `pkg/controller/history`): a revision holds the patch-able part of its owner (the pod template, as a
//! strategic merge patch that replaces it), is named `<owner>-<hash>`, numbered in sequence, owned by
//! its controller, and old ones beyond `revisionHistoryLimit` are removed unless still in use.
//!
//! Divergence: upstream hashes the bytes Go's encoder produces for the patch; we hash our JSON form of
//! it, so the same template gets a different (but equally stable) name than on upstream.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::Api;
use serde_json::{json, Value};

/// The label a revision carries with its hash (upstream `ControllerRevisionHashLabel`).
pub const HASH_LABEL: &str = "controller.kubernetes.io/hash";

/// Upstream `rand.SafeEncodeString`'s alphabet: no vowels, no look-alike digits.
const SAFE_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// FNV-1 32-bit (Go `fnv.New32`, which `HashControllerRevision` uses).
pub fn fnv32(parts: &[&[u8]]) -> u32 {
    let mut h: u32 = 0x811c9dc5;
    for b in parts.iter().flat_map(|p| p.iter()) {
        h = h.wrapping_mul(0x01000193);
        h ^= u32::from(*b);
    }
    h
}

/// FNV-1a 32-bit (Go `fnv.New32a`, which `controller.ComputeHash` uses).
pub fn fnv32a(parts: &[&[u8]]) -> u32 {
    let mut h: u32 = 0x811c9dc5;
    for b in parts.iter().flat_map(|p| p.iter()) {
        h ^= u32::from(*b);
        h = h.wrapping_mul(0x01000193);
    }
    h
}

/// The decimal form of the hash mapped digit by digit onto the safe alphabet, as upstream does with
/// `SafeEncodeString(fmt.Sprint(sum))`.
pub fn safe_encode(h: u32) -> String {
    h.to_string()
        .bytes()
        .map(|d| SAFE_ALPHABET[d as usize % SAFE_ALPHABET.len()] as char)
        .collect()
}

/// Upstream `HashControllerRevision`: the revision's data, then the collision count in decimal.
pub fn hash_revision(data: &Value, collision_count: Option<i32>) -> String {
    let bytes = serde_json::to_vec(data).unwrap_or_default();
    let probe = collision_count.map(|c| c.to_string()).unwrap_or_default();
    safe_encode(fnv32(&[&bytes, probe.as_bytes()]))
}

/// Upstream `ControllerRevisionName`: the prefix is cut to 223 bytes so the name fits in 253.
pub fn revision_name(prefix: &str, hash: &str) -> String {
    let mut cut = prefix.len().min(223);
    while !prefix.is_char_boundary(cut) {
        cut -= 1;
    }
    format!("{}-{hash}", &prefix[..cut])
}

/// The patch a StatefulSet or DaemonSet revision stores: its template, replacing the owner's whole
/// template when applied (kubectl rollout undo applies it as a strategic merge patch).
pub fn template_patch(template: &Value) -> Value {
    let mut t = template.clone();
    if let Some(obj) = t.as_object_mut() {
        obj.insert("$patch".into(), json!("replace"));
    }
    json!({"spec": {"template": t}})
}

/// The template stored in a revision's patch (`$patch` directive removed).
pub fn template_of(rev: &ControllerRevision) -> Option<Value> {
    let mut t = rev.data.as_ref()?.0.pointer("/spec/template")?.clone();
    t.as_object_mut()?.remove("$patch");
    Some(t)
}

/// The owner reference a controller puts on what it creates (`metav1.NewControllerRef`).
pub fn controller_ref(owner: &ObjectMeta, kind: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": kind, "name": owner.name, "uid": owner.uid,
           "controller": true, "blockOwnerDeletion": true})
}

/// Upstream `NewControllerRevision`: template labels plus the hash label, controlled by the owner.
pub fn new_revision(
    owner: &ObjectMeta,
    kind: &str,
    template_labels: &Value,
    data: Value,
    revision: i64,
    collision_count: Option<i32>,
) -> ControllerRevision {
    let hash = hash_revision(&data, collision_count);
    let mut labels = template_labels.clone();
    if !labels.is_object() {
        labels = json!({});
    }
    labels[HASH_LABEL] = json!(hash);
    serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ControllerRevision",
        "metadata": {
            "name": revision_name(owner.name.as_deref().unwrap_or(""), &hash),
            "namespace": owner.namespace,
            "labels": labels,
            "ownerReferences": [controller_ref(owner, kind)],
        },
        "data": data,
        "revision": revision,
    }))
    .expect("a ControllerRevision from its own fields")
}

/// Revisions controlled by the owner with this uid, oldest first (upstream `SortControllerRevisions`:
/// by revision, then creation time, then name).
pub fn owned_revisions(
    revisions: &[Arc<ControllerRevision>],
    owner_uid: &str,
) -> Vec<Arc<ControllerRevision>> {
    let mut owned: Vec<Arc<ControllerRevision>> = revisions
        .iter()
        .filter(|r| {
            r.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.controller == Some(true) && o.uid == owner_uid)
        })
        .cloned()
        .collect();
    owned.sort_by(|a, b| {
        a.revision
            .cmp(&b.revision)
            .then_with(|| {
                let t =
                    |r: &ControllerRevision| r.metadata.creation_timestamp.as_ref().map(|t| t.0);
                t(a).cmp(&t(b))
            })
            .then_with(|| a.metadata.name.cmp(&b.metadata.name))
    });
    owned
}

/// Upstream `nextRevision`: one past the newest, 1 for the first.
pub fn next_revision(sorted: &[Arc<ControllerRevision>]) -> i64 {
    sorted.last().map_or(1, |r| r.revision + 1)
}

/// Upstream `EqualRevision`: the same data. (Upstream first compares the hash labels parsed as
/// integers, which safe-encoded hashes never are, so in effect only the data counts.)
pub fn equal_revision(a: &ControllerRevision, b: &ControllerRevision) -> bool {
    a.data.as_ref().map(|d| &d.0) == b.data.as_ref().map(|d| &d.0)
}

/// The revisions to delete: those not live, oldest first, beyond `limit` (upstream
/// `truncateHistory`: the current and update revisions, and those of live pods, are never removed).
pub fn to_truncate<'a>(
    sorted: &'a [Arc<ControllerRevision>],
    live: &HashSet<String>,
    limit: i32,
) -> Vec<&'a Arc<ControllerRevision>> {
    let history: Vec<&Arc<ControllerRevision>> = sorted
        .iter()
        .filter(|r| !live.contains(r.metadata.name.as_deref().unwrap_or("")))
        .collect();
    let excess = history.len().saturating_sub(limit.max(0) as usize);
    history.into_iter().take(excess).collect()
}

/// Creates the revision `make(collision_count)` builds (upstream `CreateControllerRevision`): when its
/// name is taken by a revision with other data, bumps the collision count and retries under the new
/// name; an equal existing one is returned as is.
pub async fn create_revision(
    api: &Api<ControllerRevision>,
    make: impl Fn(i32) -> ControllerRevision,
    collision_count: &mut i32,
) -> Result<ControllerRevision, String> {
    loop {
        let rev = make(*collision_count);
        let name = rev.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), &rev).await {
            Ok(created) => return Ok(created),
            Err(kube::Error::Api(e)) if e.code == 409 => {
                let existing = api
                    .get(&name)
                    .await
                    .map_err(|e| format!("get revision {name}: {e}"))?;
                if equal_revision(&existing, &rev) {
                    return Ok(existing);
                }
                *collision_count += 1;
            }
            Err(e) => return Err(format!("create revision {name}: {e}")),
        }
    }
}

/// Renumbers a revision (upstream `UpdateControllerRevision`, used when an old template comes back).
pub async fn update_revision(
    api: &Api<ControllerRevision>,
    rev: &ControllerRevision,
    revision: i64,
) -> Result<ControllerRevision, String> {
    let name = rev.metadata.name.as_deref().unwrap_or("");
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(&json!({"revision": revision})),
    )
    .await
    .map_err(|e| format!("renumber revision {name}: {e}"))
}

/// Deletes the revisions [`to_truncate`] picks.
pub async fn truncate_history(
    api: &Api<ControllerRevision>,
    sorted: &[Arc<ControllerRevision>],
    live: &HashSet<String>,
    limit: i32,
) -> Result<(), String> {
    for rev in to_truncate(sorted, live, limit) {
        let name = rev.metadata.name.as_deref().unwrap_or("");
        match api.delete(name, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(format!("delete revision {name}: {e}")),
        }
    }
    Ok(())
}

/// The status as upstream serializes it: the `omitempty` fields that are zero are left out (set to
/// null, which a merge patch removes).
pub fn omit_zero(status: &mut Value, omitempty: &[&str]) {
    for f in omitempty {
        if status[*f] == json!(0) || status[*f] == json!("") {
            status[*f] = Value::Null;
        }
    }
}

/// Whether `status` differs from the object's current one, a missing field counting as zero.
pub fn status_differs(current: &Value, status: &Value) -> bool {
    let norm = |v: Option<&Value>| match v {
        None | Some(Value::Null) => json!(0),
        Some(v) => v.clone(),
    };
    status
        .as_object()
        .into_iter()
        .flatten()
        .any(|(k, v)| norm(current.get(k)) != norm(Some(v)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> ObjectMeta {
        serde_json::from_value(json!({"name": "web", "namespace": "default", "uid": "u-1"}))
            .unwrap()
    }

    fn template(image: &str) -> Value {
        json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": image}]}})
    }

    #[test]
    fn hashes_and_names_as_upstream() {
        // Go: fnv.New32() and fnv.New32a() of "hello".
        assert_eq!(fnv32(&[b"hello"]), 0xb6fa7167);
        assert_eq!(fnv32a(&[b"hel", b"lo"]), 0x4f9f2cab);
        // SafeEncodeString maps each decimal digit's byte: b'0' = 48, 48 % 27 = 21 -> '4'.
        assert_eq!(safe_encode(0), "4");
        assert_eq!(safe_encode(1234567890), "56789bcdf4");
        assert_eq!(revision_name("web", "abc"), "web-abc");
        assert_eq!(revision_name(&"x".repeat(300), "h").len(), 225);
        let data = template_patch(&template("nginx"));
        assert_ne!(hash_revision(&data, Some(0)), hash_revision(&data, Some(1)));
        assert_eq!(hash_revision(&data, None), hash_revision(&data, None));
    }

    #[test]
    fn new_revisions_carry_labels_owner_and_data() {
        let t = template("nginx");
        let rev = new_revision(
            &owner(),
            "StatefulSet",
            &t["metadata"]["labels"],
            template_patch(&t),
            1,
            Some(0),
        );
        let hash = hash_revision(&template_patch(&t), Some(0));
        assert_eq!(
            rev.metadata.name.as_deref(),
            Some(format!("web-{hash}").as_str())
        );
        let labels = rev.metadata.labels.clone().unwrap();
        assert_eq!(labels["app"], "web");
        assert_eq!(labels[HASH_LABEL], hash);
        let owner_ref = &rev.metadata.owner_references.as_ref().unwrap()[0];
        assert_eq!(
            (owner_ref.kind.as_str(), owner_ref.controller),
            ("StatefulSet", Some(true))
        );
        assert_eq!(rev.revision, 1);
        assert_eq!(
            rev.data.as_ref().unwrap().0["spec"]["template"]["$patch"],
            "replace"
        );
        assert_eq!(template_of(&rev), Some(t));
    }

    #[test]
    fn sorting_equality_next_and_truncation() {
        let mk = |image: &str, n: i64, uid: &str| {
            let t = template(image);
            let mut o = owner();
            o.uid = Some(uid.into());
            Arc::new(new_revision(
                &o,
                "DaemonSet",
                &json!({}),
                template_patch(&t),
                n,
                None,
            ))
        };
        let all = vec![
            mk("c", 3, "u-1"),
            mk("a", 1, "u-1"),
            mk("x", 9, "u-2"),
            mk("b", 2, "u-1"),
        ];
        let owned = owned_revisions(&all, "u-1");
        let revs: Vec<i64> = owned.iter().map(|r| r.revision).collect();
        assert_eq!(revs, [1, 2, 3]);
        assert_eq!(next_revision(&owned), 4);
        assert_eq!(next_revision(&[]), 1);
        assert!(equal_revision(&owned[0], &mk("a", 7, "u-1")));
        assert!(!equal_revision(&owned[0], &owned[1]));
        // Limit 1 with revision 1 live: of 2 and 3, only 2 goes.
        let live: HashSet<String> = [owned[0].metadata.name.clone().unwrap()].into();
        let gone: Vec<i64> = to_truncate(&owned, &live, 1)
            .iter()
            .map(|r| r.revision)
            .collect();
        assert_eq!(gone, [2]);
        assert!(to_truncate(&owned, &live, 10).is_empty());
    }

    #[test]
    fn zero_status_fields_are_omitted_and_compare_as_zero() {
        let mut s = json!({"replicas": 0, "readyReplicas": 0, "currentRevision": "", "updateRevision": "r"});
        omit_zero(
            &mut s,
            &["readyReplicas", "currentRevision", "updateRevision"],
        );
        assert_eq!(
            s,
            json!({"replicas": 0, "readyReplicas": null, "currentRevision": null, "updateRevision": "r"})
        );
        assert!(!status_differs(
            &json!({"replicas": 0, "updateRevision": "r"}),
            &s
        ));
        assert!(status_differs(
            &json!({"replicas": 1, "updateRevision": "r"}),
            &s
        ));
    }
}
