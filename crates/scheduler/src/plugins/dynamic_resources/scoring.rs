//! Score (upstream `computeScore`, prioritized list): a claim's `firstAvailable` request scores
//! more where an earlier subrequest could be allocated, `8 - position` per request (8 being the
//! most subrequests a request may have), summed over the claims; then upstream's
//! `DefaultNormalizeScore` scales the node scores to 0..100.

use std::collections::HashSet;

use k8s_openapi::api::resource::v1::{AllocationResult, ResourceClaim};

use crate::framework::MAX_NODE_SCORE;

/// Upstream `FirstAvailableDeviceRequestMaxSize`.
const FIRST_AVAILABLE_MAX: i64 = 8;

fn requests(claim: &ResourceClaim) -> &[k8s_openapi::api::resource::v1::DeviceRequest] {
    claim
        .spec
        .devices
        .as_ref()
        .and_then(|d| d.requests.as_deref())
        .unwrap_or_default()
}

pub fn has_first_available(claim: &ResourceClaim) -> bool {
    requests(claim)
        .iter()
        .any(|r| r.first_available.as_ref().is_some_and(|f| !f.is_empty()))
}

/// The node's score for the claims to allocate and Filter's allocations there (same order).
pub fn score<'a>(
    claims: impl Iterator<Item = &'a ResourceClaim>,
    allocations: &[AllocationResult],
) -> i64 {
    let mut total = 0;
    for (claim, allocation) in claims.zip(allocations) {
        // Results of subrequests name them `request/subrequest`.
        let chosen: HashSet<&str> = allocation
            .devices
            .as_ref()
            .and_then(|d| d.results.as_deref())
            .unwrap_or_default()
            .iter()
            .map(|r| r.request.as_str())
            .filter(|r| r.contains('/'))
            .collect();
        for req in requests(claim) {
            if req.exactly.is_some() {
                continue;
            }
            for (i, sub) in req.first_available.iter().flatten().enumerate() {
                if chosen.contains(format!("{}/{}", req.name, sub.name).as_str()) {
                    total += FIRST_AVAILABLE_MAX - i as i64;
                }
            }
        }
    }
    total
}

/// Upstream `helper.DefaultNormalizeScore(MaxNodeScore, false, scores)`.
pub fn normalize(scores: &mut [i64]) {
    let max = scores.iter().copied().max().unwrap_or(0);
    if max == 0 {
        return;
    }
    for s in scores.iter_mut() {
        *s = MAX_NODE_SCORE * *s / max;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn claim() -> ResourceClaim {
        serde_json::from_value(json!({
            "metadata": {"name": "c"},
            "spec": {"devices": {"requests": [
                {"name": "gpu", "firstAvailable": [
                    {"name": "big", "deviceClassName": "g"},
                    {"name": "small", "deviceClassName": "g"}]},
                {"name": "nic", "exactly": {"deviceClassName": "n"}}]}}
        }))
        .unwrap()
    }

    fn allocation(requests: &[&str]) -> AllocationResult {
        let results: Vec<_> = requests
            .iter()
            .map(|r| json!({"request": r, "driver": "d", "pool": "p", "device": "x"}))
            .collect();
        serde_json::from_value(json!({"devices": {"results": results}})).unwrap()
    }

    #[test]
    fn earlier_subrequests_score_higher() {
        let c = claim();
        assert!(has_first_available(&c));
        assert_eq!(
            score([&c].into_iter(), &[allocation(&["gpu/big", "nic"])]),
            8
        );
        assert_eq!(
            score([&c].into_iter(), &[allocation(&["gpu/small", "nic"])]),
            7
        );
        assert_eq!(score([&c].into_iter(), &[]), 0);
        let mut scores = [8, 7, 0];
        normalize(&mut scores);
        assert_eq!(scores, [100, 87, 0]);
        let mut zeros = [0, 0];
        normalize(&mut zeros);
        assert_eq!(zeros, [0, 0]);
    }
}
