//! The device taint eviction controller's decisions (upstream `devicetainteviction`'s
//! `claimEvictionTime` and `podEvictionTime`), pure so they are testable without a server.

use std::collections::BTreeSet;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::{Device, DeviceTaint, ResourceClaim, ResourceSlice};

use crate::resourceclaim::decide::{claim_name, is_for_pod, is_reserved_for_pod, pod_claims};

/// When the pods of a claim (or a pod) must be evicted, and the taints why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eviction {
    pub when: Timestamp,
    /// `driver/pool/device: key=value:NoExecute`, sorted.
    pub reasons: BTreeSet<String>,
}

impl Eviction {
    fn merge(self, other: Eviction) -> Eviction {
        let mut reasons = self.reasons;
        reasons.extend(other.reasons);
        Eviction {
            when: self.when.min(other.when),
            reasons,
        }
    }
}

/// The device `driver/pool/name` as the pool's slices of its highest generation describe it
/// (older slices are ignored, as upstream's `pool.getDevice`).
pub fn find_device<'a>(
    slices: &'a [&'a ResourceSlice],
    driver: &str,
    pool: &str,
    name: &str,
) -> Option<&'a Device> {
    let in_pool = || {
        slices
            .iter()
            .filter(move |s| s.spec.driver == driver && s.spec.pool.name == pool)
    };
    let generation = in_pool().map(|s| s.spec.pool.generation).max()?;
    in_pool()
        .filter(|s| s.spec.pool.generation == generation)
        .flat_map(|s| s.spec.devices.iter().flatten())
        .find(|d| d.name == name)
}

fn describe(driver: &str, pool: &str, device: &str, t: &DeviceTaint) -> String {
    match t.value.as_deref() {
        Some(v) => format!("{driver}/{pool}/{device}: {}={v}:{}", t.key, t.effect),
        None => format!("{driver}/{pool}/{device}: {}:{}", t.key, t.effect),
    }
}

/// Upstream `claimEvictionTime`: the earliest time any NoExecute taint of an allocated device
/// requires eviction: the taint's `timeAdded`, plus the smallest `tolerationSeconds` of the
/// result's NoExecute tolerations of it (negative counts as 0); a NoExecute toleration without
/// seconds tolerates the taint forever. Only tolerations with effect NoExecute count, as
/// upstream's. `None`: nothing to evict for. `slices` are all the ResourceSlices known.
pub fn claim_eviction(claim: &ResourceClaim, slices: &[&ResourceSlice]) -> Option<Eviction> {
    let results = claim
        .status
        .as_ref()?
        .allocation
        .as_ref()?
        .devices
        .as_ref()?
        .results
        .as_ref()?;
    let mut eviction: Option<Eviction> = None;
    for r in results {
        let Some(device) = find_device(slices, &r.driver, &r.pool, &r.device) else {
            continue;
        };
        'taints: for taint in device.taints.iter().flatten() {
            if taint.effect != "NoExecute" {
                continue;
            }
            // Defaulted by the API server; a taint without it is treated as added long ago.
            let added = taint
                .time_added
                .as_ref()
                .map_or(Timestamp::UNIX_EPOCH, |t| t.0);
            let mut seconds: Option<i64> = None;
            for t in r.tolerations.iter().flatten() {
                if t.effect.as_deref() != Some("NoExecute")
                    || !scheduler::plugins::dynamic_resources::allocator::tolerates(t, taint)
                {
                    continue;
                }
                let Some(s) = t.toleration_seconds else {
                    continue 'taints;
                };
                seconds = Some(seconds.map_or(s.max(0), |m| m.min(s.max(0))));
            }
            let when = match seconds {
                Some(s) => added
                    .checked_add(SignedDuration::from_secs(s))
                    .unwrap_or(Timestamp::MAX),
                None => added,
            };
            let this = Eviction {
                when,
                reasons: BTreeSet::from([describe(&r.driver, &r.pool, &r.device, taint)]),
            };
            eviction = Some(match eviction {
                Some(e) => e.merge(this),
                None => this,
            });
        }
    }
    eviction
}

/// Upstream `podEvictionTime`: a scheduled pod is evicted at the earliest eviction time of the
/// claims it uses that are allocated and reserved for it (generated claims must be its own).
/// `claim` looks a claim up by name in the pod's namespace, with its eviction.
pub fn pod_eviction(
    pod: &Pod,
    claim: impl Fn(&str) -> Option<(std::sync::Arc<ResourceClaim>, Option<Eviction>)>,
) -> Option<Eviction> {
    let scheduled = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    if !scheduled {
        return None;
    }
    let mut eviction: Option<Eviction> = None;
    for pc in pod_claims(pod) {
        let Ok((Some(name), must_own)) = claim_name(pod, pc) else {
            continue;
        };
        let Some((claim, Some(this))) = claim(&name) else {
            continue;
        };
        if (must_own && is_for_pod(pod, &claim).is_err()) || !is_reserved_for_pod(pod, &claim) {
            continue;
        }
        eviction = Some(match eviction {
            Some(e) => e.merge(this),
            None => this,
        });
    }
    eviction
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::sync::Arc;

    const T0: &str = "2026-11-30T01:00:00Z";

    fn slice(generation: i64, devices: serde_json::Value) -> ResourceSlice {
        serde_json::from_value(json!({
            "metadata": {"name": format!("s-{generation}")},
            "spec": {"driver": "gpu.example.com", "nodeName": "n1",
                     "pool": {"name": "n1", "generation": generation, "resourceSliceCount": 1},
                     "devices": devices}}))
        .unwrap()
    }

    fn taint(key: &str, effect: &str) -> serde_json::Value {
        json!({"key": key, "value": "v", "effect": effect, "timeAdded": T0})
    }

    fn claim(tolerations: serde_json::Value) -> ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "c", "namespace": "ns", "uid": "claim-1"},
            "spec": {"devices": {"requests": []}},
            "status": {
                "allocation": {"devices": {"results": [{"request": "gpu",
                    "driver": "gpu.example.com", "pool": "n1", "device": "gpu-0",
                    "tolerations": tolerations}]}},
                "reservedFor": [{"resource": "pods", "name": "p", "uid": "pod-1"}]}}))
        .unwrap()
    }

    fn at(secs: i64) -> Timestamp {
        T0.parse::<Timestamp>().unwrap() + SignedDuration::from_secs(secs)
    }

    #[test]
    fn claims_are_evicted_when_taints_are_not_tolerated() {
        let tainted = slice(
            1,
            json!([{"name": "gpu-0", "taints": [taint("broken", "NoExecute"), taint("slow", "NoSchedule")]},
                   {"name": "gpu-1"}]),
        );
        let slices = [&tainted];
        let e = claim_eviction(&claim(json!([])), &slices).unwrap();
        assert_eq!(e.when, at(0));
        assert_eq!(
            e.reasons,
            BTreeSet::from(["gpu.example.com/n1/gpu-0: broken=v:NoExecute".to_string()])
        );
        // Tolerated for 30 s (the smaller of two), forever, or by a toleration of another effect.
        let secs = json!([
            {"key": "broken", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 60},
            {"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30}]);
        assert_eq!(claim_eviction(&claim(secs), &slices).unwrap().when, at(30));
        let forever =
            json!([{"key": "broken", "operator": "Equal", "value": "v", "effect": "NoExecute"}]);
        assert_eq!(claim_eviction(&claim(forever), &slices), None);
        let any_effect = json!([{"operator": "Exists"}]);
        assert_eq!(
            claim_eviction(&claim(any_effect), &slices).unwrap().when,
            at(0),
            "only NoExecute tolerations count, as upstream's"
        );
        let negative =
            json!([{"operator": "Exists", "effect": "NoExecute", "tolerationSeconds": -5}]);
        assert_eq!(
            claim_eviction(&claim(negative), &slices).unwrap().when,
            at(0)
        );
        let wrong_value = json!([{"key": "broken", "value": "w", "effect": "NoExecute"}]);
        assert_eq!(
            claim_eviction(&claim(wrong_value), &slices).unwrap().when,
            at(0)
        );
    }

    #[test]
    fn only_the_pools_newest_slices_count() {
        let old = slice(
            1,
            json!([{"name": "gpu-0", "taints": [taint("broken", "NoExecute")]}]),
        );
        let new = slice(2, json!([{"name": "gpu-0"}]));
        assert_eq!(claim_eviction(&claim(json!([])), &[&old, &new]), None);
        assert!(claim_eviction(&claim(json!([])), &[&old]).is_some());
        // A device no slice lists, or an unallocated claim: nothing.
        assert_eq!(claim_eviction(&claim(json!([])), &[]), None);
        let mut unallocated = claim(json!([]));
        unallocated.status = None;
        assert_eq!(claim_eviction(&unallocated, &[&old]), None);
    }

    #[test]
    fn pods_using_evicting_claims() {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": "p", "namespace": "ns", "uid": "pod-1"},
            "spec": {"nodeName": "n1", "containers": [],
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": "c"},
                                        {"name": "other", "resourceClaimName": "d"}]}}))
        .unwrap();
        let c = Arc::new(claim(json!([])));
        let soon = Eviction {
            when: at(10),
            reasons: BTreeSet::from(["a".to_string()]),
        };
        let later = Eviction {
            when: at(20),
            reasons: BTreeSet::from(["b".to_string()]),
        };
        let both = |name: &str| match name {
            "c" => Some((c.clone(), Some(later.clone()))),
            "d" => Some((c.clone(), Some(soon.clone()))),
            _ => None,
        };
        let e = pod_eviction(&pod, both).unwrap();
        assert_eq!(e.when, at(10));
        assert_eq!(e.reasons.len(), 2);
        // Untainted claims, a claim not reserved for the pod, an unscheduled pod: no eviction.
        assert_eq!(pod_eviction(&pod, |_| Some((c.clone(), None))), None);
        let mut other = (*c).clone();
        other.status.as_mut().unwrap().reserved_for = None;
        let other = Arc::new(other);
        assert_eq!(
            pod_eviction(&pod, |_| Some((other.clone(), Some(soon.clone())))),
            None
        );
        let mut pending = pod.clone();
        pending.spec.as_mut().unwrap().node_name = None;
        assert_eq!(pod_eviction(&pending, both), None);
    }
}
