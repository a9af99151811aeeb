//! Taints and tolerations (upstream `k8s.io/api/core/v1` `Toleration.ToleratesTaint`), shared by the
//! scheduler, the taint eviction controller and the DaemonSet controller.

use k8s_openapi::api::core::v1::{Taint, Toleration};

/// Upstream `Toleration.ToleratesTaint`: an empty effect or key matches any; operator Exists
/// ignores the value, Equal (or empty) requires it equal.
pub fn tolerates_taint(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("") {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        "Exists" => true,
        _ => false,
    }
}

pub fn tolerations_tolerate_taint(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| tolerates_taint(t, taint))
}
