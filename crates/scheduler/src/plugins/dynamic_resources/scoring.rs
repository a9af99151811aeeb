//! Score (upstream `computeScore`, prioritized list): a claim's `firstAvailable` request scores
//! more where an earlier subrequest could be allocated, `8 - position` per request (8 being the
//! most subrequests a request may have), summed over the claims (`allocator::Picks::score`);
//! then upstream's `DefaultNormalizeScore` scales the node scores to 0..100.

use k8s_openapi::api::resource::v1::ResourceClaim;

use crate::framework::MAX_NODE_SCORE;

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

    #[test]
    fn earlier_subrequests_score_higher() {
        let c = claim();
        assert!(has_first_available(&c));
        let mut scores = [8, 7, 0];
        normalize(&mut scores);
        assert_eq!(scores, [100, 87, 0]);
        let mut zeros = [0, 0];
        normalize(&mut zeros);
        assert_eq!(zeros, [0, 0]);
    }
}
