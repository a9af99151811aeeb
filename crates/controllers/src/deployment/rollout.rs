//! The pure part of the Deployment controller (upstream `pkg/controller/deployment` and
//! `deployment/util`): the pod-template-hash, max surge / max unavailable, how far the new and old
//! ReplicaSets may be scaled in one step of a rolling update.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use serde_json::{json, Value};

pub const REVISION: &str = "deployment.kubernetes.io/revision";
pub const HASH_LABEL: &str = "pod-template-hash";

/// FNV-1a 32 of the template's JSON form, in upstream's "safe" alphabet (no vowels, no look-alikes).
pub fn template_hash(template: &Value) -> String {
    let mut h: u32 = 0x811c9dc5;
    for b in serde_json::to_vec(template).unwrap_or_default() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x01000193);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    h.to_string()
        .bytes()
        .map(|d| ALPHABET[(d as usize) % ALPHABET.len()] as char)
        .collect()
}

/// A template without the pod-template-hash label, to compare a ReplicaSet's with the Deployment's.
pub fn without_hash(template: &Value) -> Value {
    let mut t = template.clone();
    if let Some(labels) = t
        .pointer_mut("/metadata/labels")
        .and_then(Value::as_object_mut)
    {
        labels.remove(HASH_LABEL);
    }
    t
}

/// An int-or-percent of `total` (`round_up` for surge, down for unavailable), as upstream's
/// `GetScaledValueFromIntOrPercent`.
fn scaled(v: Option<&Value>, total: i32, round_up: bool, default: &str) -> i32 {
    let v = v.cloned().unwrap_or_else(|| json!(default));
    match v {
        Value::Number(n) => n.as_i64().unwrap_or(0) as i32,
        Value::String(s) => {
            let pct: f64 = s.trim_end_matches('%').parse().unwrap_or(0.0);
            let x = pct * f64::from(total) / 100.0;
            (if round_up { x.ceil() } else { x.floor() }) as i32
        }
        _ => 0,
    }
}

/// (maxSurge, maxUnavailable) resolved against the replicas; never both zero (upstream
/// `ResolveFenceposts`).
pub fn fenceposts(d: &Deployment) -> (i32, i32) {
    let replicas = replicas(d);
    let rolling = d
        .spec
        .as_ref()
        .and_then(|s| s.strategy.as_ref())
        .and_then(|s| s.rolling_update.as_ref())
        .map(|r| serde_json::to_value(r).unwrap_or_default())
        .unwrap_or_default();
    let surge = scaled(rolling.get("maxSurge"), replicas, true, "25%");
    let unavailable = scaled(rolling.get("maxUnavailable"), replicas, false, "25%");
    if surge == 0 && unavailable == 0 {
        (0, 1)
    } else {
        (surge, unavailable)
    }
}

pub fn replicas(d: &Deployment) -> i32 {
    d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)
}

pub fn rs_replicas(rs: &ReplicaSet) -> i32 {
    rs.spec.as_ref().and_then(|s| s.replicas).unwrap_or(0)
}

fn available(rs: &ReplicaSet) -> i32 {
    rs.status
        .as_ref()
        .and_then(|s| s.available_replicas)
        .unwrap_or(0)
}

/// The new ReplicaSet's replicas after one rolling step (upstream `NewRSNewReplicas`).
pub fn new_rs_target(d: &Deployment, new_rs: &ReplicaSet, all: &[&ReplicaSet]) -> i32 {
    let desired = replicas(d);
    let current = rs_replicas(new_rs);
    if current >= desired {
        return desired;
    }
    let (surge, _) = fenceposts(d);
    let total: i32 = all.iter().map(|rs| rs_replicas(rs)).sum();
    let allowed = (desired + surge - total).max(0);
    (current + allowed).min(desired)
}

/// How many old replicas may go in one rolling step (upstream `reconcileOldReplicaSets`).
pub fn old_scale_down_budget(d: &Deployment, new_rs: &ReplicaSet, all: &[&ReplicaSet]) -> i32 {
    let (_, unavailable) = fenceposts(d);
    let min_available = replicas(d) - unavailable;
    let total: i32 = all.iter().map(|rs| rs_replicas(rs)).sum();
    let new_unavailable = rs_replicas(new_rs) - available(new_rs);
    (total - min_available - new_unavailable).max(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(replicas: i32, surge: Value, unavailable: Value) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "generation": 2},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": "web"}},
                     "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": surge, "maxUnavailable": unavailable}},
                     "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}
        }))
        .unwrap()
    }

    fn rs(replicas: i32, available: i32) -> ReplicaSet {
        serde_json::from_value(json!({"metadata": {"name": "web-x"}, "spec": {"replicas": replicas, "selector": {}},
            "status": {"replicas": replicas, "readyReplicas": available, "availableReplicas": available}}))
        .unwrap()
    }

    #[test]
    fn fenceposts_round_as_upstream() {
        assert_eq!(
            fenceposts(&deployment(10, json!("25%"), json!("25%"))),
            (3, 2)
        );
        assert_eq!(
            fenceposts(&deployment(1, json!("25%"), json!("25%"))),
            (1, 0)
        );
        assert_eq!(fenceposts(&deployment(3, json!(0), json!(0))), (0, 1));
        assert_eq!(fenceposts(&deployment(4, json!(2), json!("50%"))), (2, 2));
    }

    #[test]
    fn a_rolling_step_surges_then_scales_old_down() {
        let d = deployment(4, json!(1), json!(1));
        let (old, new) = (rs(4, 4), rs(0, 0));
        // First step: one surge pod.
        assert_eq!(new_rs_target(&d, &new, &[&old, &new]), 1);
        let new = rs(1, 0);
        // Old may lose one (4 + 1 - 3 available minimum - 1 unavailable new).
        assert_eq!(old_scale_down_budget(&d, &new, &[&old, &new]), 1);
        let (old, new) = (rs(3, 3), rs(1, 1));
        assert_eq!(new_rs_target(&d, &new, &[&old, &new]), 2);
    }

    #[test]
    fn hashes_are_stable_and_safe() {
        let t = json!({"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c"}]}});
        let h = template_hash(&t);
        assert_eq!(h, template_hash(&t));
        assert!(h.chars().all(|c| "bcdfghjklmnpqrstvwxz2456789".contains(c)));
        let mut with = t.clone();
        with["metadata"]["labels"][HASH_LABEL] = json!(h);
        assert_eq!(without_hash(&with), t);
    }
}
