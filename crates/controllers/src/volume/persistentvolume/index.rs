//! Matching a claim to a volume (upstream `pkg/controller/volume/persistentvolume/index.go` and
//! `FindMatchingVolume` / `CheckAccessModes` / `CheckVolumeModeMismatches` of
//! `k8s.io/component-helpers/storage/volume/pv_helpers.go`).
//!
//! Upstream keeps the volumes in an indexer keyed by their access-mode set and searches the sets
//! that contain the claim's modes, fewest modes first, taking the smallest volume that fits in
//! the first set that has one. Here the grouping is done per call over the controller's volume
//! cache (a few thousand volumes at most), with ties between equal sizes broken by name rather
//! than by Go map order.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use scheduler::framework::resources::parse_quantity;
use scheduler::framework::selector::Selector;
use scheduler::framework::NodeInfo;
use scheduler::plugins::node_affinity::node_selector_matches;

use crate::volume::{claim_class, key_of, volume_class};

/// A claim whose label selector does not parse (validation normally prevents it).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("error creating internal label selector for claim: {claim}: {reason}")]
pub struct MatchError {
    pub claim: String,
    pub reason: String,
}

/// The `storage` quantity of a resource list, in bytes (0 when missing or unparsable).
fn storage(
    list: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
) -> i64 {
    list.and_then(|l| l.get("storage"))
        .and_then(|q| parse_quantity(&q.0).ok())
        .unwrap_or(0)
}

pub fn requested_storage(claim: &PersistentVolumeClaim) -> i64 {
    storage(
        claim
            .spec
            .as_ref()
            .and_then(|s| s.resources.as_ref())
            .and_then(|r| r.requests.as_ref()),
    )
}

pub fn volume_capacity(volume: &PersistentVolume) -> i64 {
    storage(volume.spec.as_ref().and_then(|s| s.capacity.as_ref()))
}

/// Upstream `CheckVolumeModeMismatches` (an unset mode is `Filesystem`).
pub fn volume_mode_mismatch(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    let mode = |m: Option<&String>| m.map(String::as_str).unwrap_or("Filesystem").to_string();
    mode(claim.spec.as_ref().and_then(|s| s.volume_mode.as_ref()))
        != mode(volume.spec.as_ref().and_then(|s| s.volume_mode.as_ref()))
}

fn volume_modes(volume: &PersistentVolume) -> BTreeSet<String> {
    volume
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.clone())
        .unwrap_or_default()
        .into_iter()
        .collect()
}

fn claim_modes(claim: &PersistentVolumeClaim) -> Vec<String> {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.clone())
        .unwrap_or_default()
}

/// Upstream `CheckAccessModes`: the volume has every mode the claim asks for.
pub fn access_modes_fit(claim: &PersistentVolumeClaim, volume: &PersistentVolume) -> bool {
    let have = volume_modes(volume);
    claim_modes(claim).iter().all(|m| have.contains(m))
}

/// Upstream `IsVolumeBoundToClaim`: the volume's claimRef names the claim (and its UID, if set).
pub fn is_volume_bound_to_claim(volume: &PersistentVolume, claim: &PersistentVolumeClaim) -> bool {
    let Some(r) = volume.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    if r.name != claim.metadata.name || r.namespace != claim.metadata.namespace {
        return false;
    }
    match r.uid.as_deref().filter(|u| !u.is_empty()) {
        Some(uid) => claim.metadata.uid.as_deref() == Some(uid),
        None => true,
    }
}

fn phase(volume: &PersistentVolume) -> &str {
    volume
        .status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or("")
}

/// Upstream `FindMatchingVolume`: a volume pre-bound to the claim if there is one (unless its
/// node affinity rules out `node`), else the smallest `Available` volume that fits. `node` is the
/// scheduler's path (node affinity and access modes checked); `delay_binding` the controller's for
/// `WaitForFirstConsumer` claims, where only pre-bound volumes are taken.
pub fn find_matching_volume(
    claim: &PersistentVolumeClaim,
    volumes: &[Arc<PersistentVolume>],
    node: Option<&NodeInfo>,
    excluded: &HashSet<String>,
    delay_binding: bool,
) -> Result<Option<Arc<PersistentVolume>>, MatchError> {
    let requested = requested_storage(claim);
    let class = claim_class(claim);
    let selector = match claim.spec.as_ref().and_then(|s| s.selector.as_ref()) {
        Some(sel) => {
            Some(
                Selector::from_label_selector(Some(sel)).map_err(|reason| MatchError {
                    claim: key_of(&claim.metadata),
                    reason,
                })?,
            )
        }
        None => None,
    };
    let mut smallest: Option<(&Arc<PersistentVolume>, i64)> = None;
    for volume in volumes {
        if excluded.contains(volume.metadata.name.as_deref().unwrap_or("")) {
            continue;
        }
        let spec = volume.spec.as_ref();
        if spec.and_then(|s| s.claim_ref.as_ref()).is_some()
            && !is_volume_bound_to_claim(volume, claim)
        {
            continue;
        }
        let capacity = volume_capacity(volume);
        if capacity < requested
            || volume_mode_mismatch(claim, volume)
            || volume.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let affinity_ok = match (node, spec.and_then(|s| s.node_affinity.as_ref())) {
            (Some(node), Some(affinity)) => affinity
                .required
                .as_ref()
                .is_none_or(|sel| node_selector_matches(sel, node)),
            _ => true,
        };
        if is_volume_bound_to_claim(volume, claim) {
            // Pre-bound: this volume or, if its node does not fit, none.
            return Ok(affinity_ok.then(|| volume.clone()));
        }
        if node.is_none() && delay_binding {
            // The scheduler binds WaitForFirstConsumer claims to unbound volumes.
            continue;
        }
        if phase(volume) != "Available" {
            // Volumes that fit are made Available first; binding others would likely conflict.
            continue;
        }
        if let Some(sel) = &selector {
            if !sel.matches(volume.metadata.labels.as_ref()) {
                continue;
            }
        }
        if volume_class(volume) != class || !affinity_ok {
            continue;
        }
        if node.is_some() && !access_modes_fit(claim, volume) {
            continue;
        }
        if smallest.is_none_or(|(_, size)| size > capacity) {
            smallest = Some((volume, capacity));
        }
    }
    Ok(smallest.map(|(v, _)| v.clone()))
}

/// Upstream `findBestMatchForClaim` (the controller's path, no node): the access-mode sets that
/// hold every mode the claim asks for, fewest modes first; the first set with a match wins.
pub fn find_best_match(
    claim: &PersistentVolumeClaim,
    volumes: &[Arc<PersistentVolume>],
    delay_binding: bool,
) -> Result<Option<Arc<PersistentVolume>>, MatchError> {
    let wanted = claim_modes(claim);
    let mut groups: BTreeMap<Vec<String>, Vec<Arc<PersistentVolume>>> = BTreeMap::new();
    // Volumes bound to other claims (nearly all of them in a busy cluster) can never match:
    // dropping them before grouping keeps a sync from copying every volume's access modes.
    let candidate = |v: &PersistentVolume| match v.spec.as_ref().and_then(|s| s.claim_ref.as_ref())
    {
        Some(_) => is_volume_bound_to_claim(v, claim),
        None => !delay_binding,
    };
    for v in volumes.iter().filter(|v| candidate(v)) {
        let modes: Vec<String> = volume_modes(v).into_iter().collect();
        if wanted.iter().all(|m| modes.contains(m)) {
            groups.entry(modes).or_default().push(v.clone());
        }
    }
    let mut groups: Vec<(Vec<String>, Vec<Arc<PersistentVolume>>)> = groups.into_iter().collect();
    groups.sort_by_key(|(modes, _)| modes.len());
    if groups.is_empty() {
        // Still refuse a claim whose selector does not parse.
        return find_matching_volume(claim, &[], None, &HashSet::new(), delay_binding);
    }
    for (_, mut group) in groups {
        group.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        if let Some(v) = find_matching_volume(claim, &group, None, &HashSet::new(), delay_binding)?
        {
            return Ok(Some(v));
        }
    }
    Ok(None)
}

/// Upstream `checkVolumeSatisfyClaim`: why a volume the claim names cannot hold it.
pub fn check_volume_satisfies_claim(
    volume: &PersistentVolume,
    claim: &PersistentVolumeClaim,
) -> Result<(), String> {
    let name = volume.metadata.name.as_deref().unwrap_or("");
    if volume.metadata.deletion_timestamp.is_some() {
        return Err(format!("the volume is marked for deletion {name:?}"));
    }
    if volume_capacity(volume) < requested_storage(claim) {
        return Err("requested PV is too small".into());
    }
    if volume_class(volume) != claim_class(claim) {
        return Err("storageClassName does not match".into());
    }
    if volume_mode_mismatch(claim, volume) {
        return Err("incompatible volumeMode".into());
    }
    if !access_modes_fit(claim, volume) {
        return Err("incompatible accessMode".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Node;
    use serde_json::{json, Value};

    fn pv(name: &str, size: &str, modes: &[&str], extra: Value) -> Arc<PersistentVolume> {
        let mut v = json!({"metadata": {"name": name},
            "spec": {"capacity": {"storage": size}, "accessModes": modes, "hostPath": {"path": "/x"}},
            "status": {"phase": "Available"}});
        merge(&mut v, extra);
        Arc::new(serde_json::from_value(v).unwrap())
    }

    fn claim(size: &str, modes: &[&str], extra: Value) -> PersistentVolumeClaim {
        let mut c = json!({"metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
            "spec": {"accessModes": modes, "resources": {"requests": {"storage": size}}}});
        merge(&mut c, extra);
        serde_json::from_value(c).unwrap()
    }

    fn merge(base: &mut Value, extra: Value) {
        if let (Some(b), Value::Object(e)) = (base.as_object_mut(), extra) {
            for (k, v) in e {
                match b.get_mut(&k) {
                    Some(bv) if bv.is_object() && v.is_object() => merge(bv, v),
                    _ => {
                        b.insert(k, v);
                    }
                }
            }
        }
    }

    fn best(
        c: &PersistentVolumeClaim,
        vols: &[Arc<PersistentVolume>],
        delay: bool,
    ) -> Option<String> {
        find_best_match(c, vols, delay)
            .unwrap()
            .and_then(|v| v.metadata.name.clone())
    }

    #[test]
    fn smallest_that_fits_with_fewest_modes() {
        let vols = vec![
            pv("big", "10Gi", &["ReadWriteOnce"], json!({})),
            pv("small", "1Gi", &["ReadWriteOnce"], json!({})),
            pv("medium", "5Gi", &["ReadWriteOnce"], json!({})),
            pv(
                "multi",
                "2Gi",
                &["ReadWriteOnce", "ReadOnlyMany"],
                json!({}),
            ),
            pv("rwx", "20Gi", &["ReadWriteMany"], json!({})),
        ];
        assert_eq!(
            best(&claim("2Gi", &["ReadWriteOnce"], json!({})), &vols, false).as_deref(),
            Some("medium")
        );
        // The set with fewer modes is searched first, even when a larger set has a smaller volume.
        assert_eq!(
            best(&claim("512Mi", &["ReadWriteOnce"], json!({})), &vols, false).as_deref(),
            Some("small")
        );
        assert_eq!(
            best(&claim("1Gi", &["ReadOnlyMany"], json!({})), &vols, false).as_deref(),
            Some("multi")
        );
        assert_eq!(
            best(&claim("30Gi", &["ReadWriteOnce"], json!({})), &vols, false),
            None
        );
        assert_eq!(
            best(&claim("1Gi", &["ReadWriteMany"], json!({})), &vols, false).as_deref(),
            Some("rwx")
        );
    }

    #[test]
    fn class_selector_mode_phase_and_deletion() {
        let vols = vec![
            pv(
                "fast",
                "1Gi",
                &["ReadWriteOnce"],
                json!({"spec": {"storageClassName": "fast"},
                "metadata": {"labels": {"tier": "gold"}}}),
            ),
            pv("plain", "1Gi", &["ReadWriteOnce"], json!({})),
            pv(
                "block",
                "1Gi",
                &["ReadWriteOnce"],
                json!({"spec": {"volumeMode": "Block"}}),
            ),
            pv(
                "released",
                "1Gi",
                &["ReadWriteOnce"],
                json!({"status": {"phase": "Released"}}),
            ),
            pv(
                "gone",
                "1Gi",
                &["ReadWriteOnce"],
                json!({"metadata": {"deletionTimestamp": "2024-01-01T00:00:00Z"}}),
            ),
        ];
        let rwo = &["ReadWriteOnce"];
        // No class: only volumes without class; "" and unset are the same.
        assert_eq!(
            best(&claim("1Gi", rwo, json!({})), &vols, false).as_deref(),
            Some("plain")
        );
        assert_eq!(
            best(
                &claim("1Gi", rwo, json!({"spec": {"storageClassName": ""}})),
                &vols,
                false
            )
            .as_deref(),
            Some("plain")
        );
        assert_eq!(
            best(
                &claim("1Gi", rwo, json!({"spec": {"storageClassName": "fast"}})),
                &vols,
                false
            )
            .as_deref(),
            Some("fast")
        );
        assert_eq!(
            best(
                &claim(
                    "1Gi",
                    rwo,
                    json!({"spec": {"storageClassName": "fast",
            "selector": {"matchLabels": {"tier": "silver"}}}})
                ),
                &vols,
                false
            ),
            None
        );
        assert_eq!(
            best(
                &claim("1Gi", rwo, json!({"spec": {"volumeMode": "Block"}})),
                &vols,
                false
            )
            .as_deref(),
            Some("block")
        );
        let bad = claim(
            "1Gi",
            rwo,
            json!({"spec": {"selector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}}),
        );
        assert!(find_best_match(&bad, &vols, false).is_err());
    }

    #[test]
    fn pre_bound_volumes_and_delayed_binding() {
        let vols = vec![
            pv("free", "1Gi", &["ReadWriteOnce"], json!({})),
            pv(
                "mine",
                "5Gi",
                &["ReadWriteOnce"],
                json!({"spec": {"claimRef": {"name": "c", "namespace": "ns"}}}),
            ),
            pv(
                "theirs",
                "1Gi",
                &["ReadWriteOnce"],
                json!({"spec": {"claimRef": {"name": "d", "namespace": "ns"}}}),
            ),
        ];
        let c = claim("1Gi", &["ReadWriteOnce"], json!({}));
        // The volume reserved for the claim wins over a smaller free one, even in Pending phase.
        assert_eq!(best(&c, &vols, false).as_deref(), Some("mine"));
        assert_eq!(best(&c, &vols, true).as_deref(), Some("mine"));
        // Without it, delayed binding leaves free volumes to the scheduler.
        assert_eq!(best(&c, &vols[..1], true), None);
        assert_eq!(best(&c, &vols[..1], false).as_deref(), Some("free"));
        // A claimRef with another UID is someone else's.
        let other = vec![pv(
            "old",
            "1Gi",
            &["ReadWriteOnce"],
            json!({"spec": {"claimRef":
            {"name": "c", "namespace": "ns", "uid": "u0"}}}),
        )];
        assert_eq!(best(&c, &other, false), None);
    }

    #[test]
    fn node_affinity_on_the_scheduler_path() {
        let node: Node =
            serde_json::from_value(json!({"metadata": {"name": "n1", "labels": {"zone": "a"}}}))
                .unwrap();
        let node = NodeInfo::new(Arc::new(node));
        let affine = |name: &str, zone: &str| {
            pv(
                name,
                "1Gi",
                &["ReadWriteOnce"],
                json!({"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "zone", "operator": "In", "values": [zone]}]}]}}}}),
            )
        };
        let vols = vec![affine("b", "b"), affine("a", "a")];
        let c = claim("1Gi", &["ReadWriteOnce"], json!({}));
        let found = find_matching_volume(&c, &vols, Some(&node), &HashSet::new(), true).unwrap();
        assert_eq!(
            found.and_then(|v| v.metadata.name.clone()).as_deref(),
            Some("a")
        );
        let excluded: HashSet<String> = ["a".to_string()].into();
        assert!(
            find_matching_volume(&c, &vols, Some(&node), &excluded, true)
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn requested_volume_checks() {
        let c = claim("2Gi", &["ReadWriteOnce"], json!({}));
        let small = pv("v", "1Gi", &["ReadWriteOnce"], json!({}));
        assert_eq!(
            check_volume_satisfies_claim(&small, &c),
            Err("requested PV is too small".into())
        );
        let classy = pv(
            "v",
            "2Gi",
            &["ReadWriteOnce"],
            json!({"spec": {"storageClassName": "x"}}),
        );
        assert_eq!(
            check_volume_satisfies_claim(&classy, &c),
            Err("storageClassName does not match".into())
        );
        let rox = pv("v", "2Gi", &["ReadOnlyMany"], json!({}));
        assert_eq!(
            check_volume_satisfies_claim(&rox, &c),
            Err("incompatible accessMode".into())
        );
        let ok = pv("v", "2Gi", &["ReadWriteOnce"], json!({}));
        assert_eq!(check_volume_satisfies_claim(&ok, &c), Ok(()));
    }
}
