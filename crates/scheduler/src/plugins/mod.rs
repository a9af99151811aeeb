//! The default in-tree plugins (upstream `pkg/scheduler/framework/plugins`), with upstream's names
//! and failure reasons, and the default profile's order and weights.
//!
//! A filter that fails for several reasons at once (only `NodeResourcesFit`, e.g. "Insufficient
//! cpu" and "Insufficient memory") joins them with [`REASON_SEPARATOR`] in one [`Status`]; upstream
//! counts each reason separately in `0/N nodes are available: ...`, so split with [`reasons`].

pub mod balanced_allocation;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod taint_toleration;
#[cfg(test)]
mod testutil;

pub use balanced_allocation::NodeResourcesBalancedAllocation;
pub use node_affinity::NodeAffinity;
pub use node_name::NodeName;
pub use node_ports::NodePorts;
pub use node_resources_fit::NodeResourcesFit;
pub use node_unschedulable::NodeUnschedulable;
pub use taint_toleration::TaintToleration;

use crate::framework::{FilterPlugin, ScorePlugin, Status};

/// Separates the reasons of a multi-reason [`Status`].
pub const REASON_SEPARATOR: char = '\n';

/// The individual reasons of a failed status (none for success).
pub fn reasons(status: &Status) -> impl Iterator<Item = &str> {
    status
        .reason()
        .into_iter()
        .flat_map(|r| r.split(REASON_SEPARATOR))
}

/// The default profile's filters, in upstream's order.
pub fn default_filters() -> Vec<Box<dyn FilterPlugin>> {
    vec![
        Box::new(NodeUnschedulable),
        Box::new(NodeName),
        Box::new(TaintToleration),
        Box::new(NodeAffinity),
        Box::new(NodePorts),
        Box::new(NodeResourcesFit),
    ]
}

/// The default profile's scorers, in upstream's order (weights: 3, 2, 1, 1).
pub fn default_scores() -> Vec<Box<dyn ScorePlugin>> {
    vec![
        Box::new(TaintToleration),
        Box::new(NodeAffinity),
        Box::new(NodeResourcesFit),
        Box::new(NodeResourcesBalancedAllocation),
    ]
}

/// Upstream `helper.DefaultNormalizeScore`: scales scores so the highest becomes `max`
/// (reversed: `max - scaled`, so the lowest raw score wins); all zeros stay 0 (reversed: `max`).
pub fn default_normalize_score(max: i64, reverse: bool, scores: &mut [i64]) {
    let highest = scores.iter().copied().fold(0, i64::max);
    if highest == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = max);
        }
        return;
    }
    for s in scores.iter_mut() {
        let scaled = max * *s / highest;
        *s = if reverse { max - scaled } else { scaled };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize() {
        let cases: &[(&[i64], bool, &[i64])] = &[
            (&[0, 0, 0], false, &[0, 0, 0]),
            (&[0, 0, 0], true, &[100, 100, 100]),
            (&[1, 2, 4], false, &[25, 50, 100]),
            (&[1, 2, 4], true, &[75, 50, 0]),
            (&[2, 11, 4], false, &[18, 100, 36]),
        ];
        for (input, reverse, want) in cases {
            let mut s = input.to_vec();
            default_normalize_score(100, *reverse, &mut s);
            assert_eq!(&s, want, "{input:?} reverse={reverse}");
        }
    }

    #[test]
    fn defaults_in_upstream_order() {
        let f: Vec<_> = default_filters().iter().map(|p| p.name()).collect();
        assert_eq!(
            f,
            [
                "NodeUnschedulable",
                "NodeName",
                "TaintToleration",
                "NodeAffinity",
                "NodePorts",
                "NodeResourcesFit"
            ]
        );
        let s: Vec<_> = default_scores()
            .iter()
            .map(|p| (p.name(), p.weight()))
            .collect();
        assert_eq!(
            s,
            [
                ("TaintToleration", 3),
                ("NodeAffinity", 2),
                ("NodeResourcesFit", 1),
                ("NodeResourcesBalancedAllocation", 1)
            ]
        );
    }

    #[test]
    fn split_reasons() {
        let st = Status::Unschedulable("Insufficient cpu\nInsufficient memory".into());
        assert_eq!(
            reasons(&st).collect::<Vec<_>>(),
            ["Insufficient cpu", "Insufficient memory"]
        );
        assert_eq!(reasons(&Status::Success).count(), 0);
    }
}
