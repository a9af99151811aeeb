//! Scaling a Deployment whose ReplicaSets are not all its template's (upstream `dc.scale`,
//! `isScalingEvent`, `GetProportion`): when `spec.replicas` changes mid-rollout, or while paused, the
//! difference is spread over the active ReplicaSets in proportion to their size, so a rollout in
//! progress keeps its shape instead of the new ReplicaSet taking everything.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};

use super::rollout::{fenceposts, replicas, rs_replicas};

pub const DESIRED_REPLICAS: &str = "deployment.kubernetes.io/desired-replicas";
pub const MAX_REPLICAS: &str = "deployment.kubernetes.io/max-replicas";

fn annotation(rs: &ReplicaSet, key: &str) -> Option<i32> {
    rs.metadata.annotations.as_ref()?.get(key)?.parse().ok()
}

/// Whether a ReplicaSet's desired/max-replicas annotations already say `desired`/`desired + surge`.
pub fn annotations_current(d: &Deployment, rs: &ReplicaSet) -> bool {
    let desired = replicas(d);
    annotation(rs, DESIRED_REPLICAS) == Some(desired)
        && annotation(rs, MAX_REPLICAS) == Some(desired + fenceposts(d).0)
}

/// Upstream `isScalingEvent`: an active ReplicaSet was sized for a different `spec.replicas`.
pub fn is_scaling_event(d: &Deployment, all: &[&ReplicaSet]) -> bool {
    all.iter()
        .filter(|rs| rs_replicas(rs) > 0)
        .filter_map(|rs| annotation(rs, DESIRED_REPLICAS))
        .any(|desired| desired != replicas(d))
}

/// Upstream `getReplicaSetFraction`: the replicas this ReplicaSet would gain (or lose) if it kept its
/// share of the Deployment's new size.
fn fraction(rs: &ReplicaSet, d: &Deployment) -> i32 {
    let desired = replicas(d);
    if desired == 0 {
        return -rs_replicas(rs);
    }
    let deployment_replicas = desired + fenceposts(d).0;
    let annotated = annotation(rs, MAX_REPLICAS)
        .unwrap_or_else(|| d.status.as_ref().and_then(|s| s.replicas).unwrap_or(0));
    if annotated == 0 {
        return 0;
    }
    let size = f64::from(rs_replicas(rs)) * f64::from(deployment_replicas) / f64::from(annotated);
    size.round() as i32 - rs_replicas(rs)
}

/// Upstream `GetProportion`.
fn proportion(rs: &ReplicaSet, d: &Deployment, to_add: i32, added: i32) -> i32 {
    if rs_replicas(rs) == 0 || to_add == 0 || to_add == added {
        return 0;
    }
    let f = fraction(rs, d);
    let allowed = to_add - added;
    if to_add > 0 {
        f.min(allowed)
    } else {
        f.max(allowed)
    }
}

/// The replicas each ReplicaSet should have after a scaling event, as `(index into all, replicas)`
/// for every active ReplicaSet (upstream `dc.scale` for RollingUpdate; `new_index` is the new
/// ReplicaSet's index in `all`, if it exists). Returns an empty list when nothing is to be resized.
pub fn proportional(
    d: &Deployment,
    all: &[&ReplicaSet],
    new_index: Option<usize>,
) -> Vec<(usize, i32)> {
    let desired = replicas(d);
    let active: Vec<usize> = (0..all.len())
        .filter(|&i| rs_replicas(all[i]) > 0)
        .collect();
    // One active ReplicaSet (or none: the newest) takes the whole size.
    if active.len() <= 1 {
        let target = active.first().copied().or(new_index).or_else(|| {
            (0..all.len()).max_by_key(|&i| all[i].metadata.creation_timestamp.as_ref().map(|t| t.0))
        });
        return target.map(|i| vec![(i, desired)]).unwrap_or_default();
    }
    // Recreate never runs two ReplicaSets at once on purpose: it resizes only after the old are gone.
    let recreate = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.type_.as_deref())
        == Some("Recreate");
    if recreate {
        return Vec::new();
    }
    // A saturated new ReplicaSet: the old ones simply go.
    if let Some(n) = new_index {
        let new = all[n];
        let available = new
            .status
            .as_ref()
            .and_then(|s| s.available_replicas)
            .unwrap_or(0);
        if rs_replicas(new) == desired
            && annotation(new, DESIRED_REPLICAS) == Some(desired)
            && available == desired
        {
            return active
                .iter()
                .filter(|&&i| i != n)
                .map(|&i| (i, 0))
                .collect();
        }
    }
    let total: i32 = active.iter().map(|&i| rs_replicas(all[i])).sum();
    let allowed = if desired > 0 {
        desired + fenceposts(d).0
    } else {
        0
    };
    let to_add = allowed - total;
    let mut order = active.clone();
    // Larger first; on ties newer first when growing, older first when shrinking.
    let created = |i: usize| all[i].metadata.creation_timestamp.as_ref().map(|t| t.0);
    order.sort_by(|&a, &b| {
        rs_replicas(all[b]).cmp(&rs_replicas(all[a])).then_with(|| {
            if to_add > 0 {
                created(b).cmp(&created(a))
            } else {
                created(a).cmp(&created(b))
            }
        })
    });
    let mut added = 0;
    let mut sizes: Vec<(usize, i32)> = order
        .iter()
        .map(|&i| {
            let p = proportion(all[i], d, to_add, added);
            added += p;
            (i, rs_replicas(all[i]) + p)
        })
        .collect();
    if to_add != 0 {
        // Leftovers from rounding go to (or come from) the largest.
        sizes[0].1 = (sizes[0].1 + to_add - added).max(0);
    }
    sizes
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment(replicas: i32) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web"},
            "spec": {"replicas": replicas, "selector": {},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 3, "maxUnavailable": 2}},
                     "template": {}},
        }))
        .unwrap()
    }

    fn rs(replicas: i32, sized_for: i32, created: &str) -> ReplicaSet {
        serde_json::from_value(json!({"metadata": {"creationTimestamp": created,
                "annotations": {DESIRED_REPLICAS: sized_for.to_string(), MAX_REPLICAS: (sized_for + 3).to_string()}},
            "spec": {"replicas": replicas, "selector": {}}}))
        .unwrap()
    }

    #[test]
    fn scaling_mid_rollout_keeps_proportions() {
        // Upstream's documented example: 10 replicas, maxSurge 3, rollout at 8 old + 5 new; scaled to 15.
        let (old, new) = (
            rs(8, 10, "2026-01-01T00:00:00Z"),
            rs(5, 10, "2026-01-02T00:00:00Z"),
        );
        let all = [&old, &new];
        let d = deployment(15);
        assert!(is_scaling_event(&d, &all));
        let mut sizes = proportional(&d, &all, Some(1));
        sizes.sort();
        // 18 allowed (15 + 3) over 13: old 8 -> 11, new 5 -> 7.
        assert_eq!(sizes, [(0, 11), (1, 7)]);
        assert_eq!(sizes.iter().map(|s| s.1).sum::<i32>(), 18);
        let sizes = proportional(&deployment(5), &all, Some(1));
        assert_eq!(sizes.iter().map(|s| s.1).sum::<i32>(), 8);
        assert!(!is_scaling_event(&deployment(10), &all));
    }

    #[test]
    fn one_active_replicaset_takes_everything() {
        let (old, new) = (
            rs(0, 10, "2026-01-01T00:00:00Z"),
            rs(10, 10, "2026-01-02T00:00:00Z"),
        );
        assert_eq!(
            proportional(&deployment(20), &[&old, &new], Some(1)),
            [(1, 20)]
        );
        assert_eq!(
            proportional(&deployment(0), &[&old, &new], Some(1)),
            [(1, 0)]
        );
    }
}
