//! The in-tree plugins (upstream `pkg/scheduler/framework/plugins`) with upstream's names, failure
//! reasons and arguments, and the registry that builds them by name (upstream `registry.go`).
//!
//! A filter that fails for several reasons at once (only `NodeResourcesFit`, e.g. "Insufficient
//! cpu" and "Insufficient memory") joins them with [`REASON_SEPARATOR`] in one [`Status`]; upstream
//! counts each reason separately in `0/N nodes are available: ...`, so split with [`reasons`].

pub mod balanced_allocation;
pub mod default_binder;
pub mod default_preemption;
pub mod dynamic_resources;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod node_volume_limits;
pub mod pod_topology_spread;
pub mod priority_sort;
pub mod scheduling_gates;
pub mod taint_toleration;
#[cfg(test)]
pub(crate) mod testutil;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;

use std::sync::Arc;

pub use balanced_allocation::NodeResourcesBalancedAllocation;
pub use default_binder::DefaultBinder;
pub use default_preemption::DefaultPreemption;
pub use dynamic_resources::DynamicResources;
pub use image_locality::ImageLocality;
pub use inter_pod_affinity::InterPodAffinity;
pub use node_affinity::NodeAffinity;
pub use node_name::NodeName;
pub use node_ports::NodePorts;
pub use node_resources_fit::NodeResourcesFit;
pub use node_unschedulable::NodeUnschedulable;
pub use node_volume_limits::NodeVolumeLimits;
pub use pod_topology_spread::PodTopologySpread;
pub use priority_sort::PrioritySort;
pub use scheduling_gates::SchedulingGates;
pub use taint_toleration::TaintToleration;
pub use volume_binding::VolumeBinding;
pub use volume_restrictions::VolumeRestrictions;
pub use volume_zone::VolumeZone;

use crate::framework::{Handle, Plugin, Status};

/// Separates the reasons of a multi-reason [`Status`].
pub const REASON_SEPARATOR: char = '\n';

/// The individual reasons of a failed status (none for success).
pub fn reasons(status: &Status) -> impl Iterator<Item = &str> {
    status
        .reason()
        .into_iter()
        .flat_map(|r| r.split(REASON_SEPARATOR))
}

/// Upstream's default profile (`getDefaultPlugins`, multiPoint) in order, with score weights.
/// DynamicResources sits before DefaultPreemption as upstream's (its feature gate is on by default
/// since 1.34).
pub const DEFAULT_PLUGINS: &[(&str, i64)] = &[
    ("SchedulingGates", 0),
    ("PrioritySort", 0),
    ("NodeUnschedulable", 0),
    ("NodeName", 0),
    ("TaintToleration", 3),
    ("NodeAffinity", 2),
    ("NodePorts", 0),
    ("NodeResourcesFit", 1),
    ("VolumeRestrictions", 0),
    ("NodeVolumeLimits", 0),
    ("VolumeBinding", 0),
    ("VolumeZone", 0),
    ("PodTopologySpread", 2),
    ("InterPodAffinity", 2),
    ("DynamicResources", 0),
    ("DefaultPreemption", 0),
    ("NodeResourcesBalancedAllocation", 1),
    ("ImageLocality", 1),
    ("DefaultBinder", 0),
];

/// Upstream in-tree plugins that rkube does not implement: they may be disabled, not enabled.
pub const UNIMPLEMENTED: &[&str] = &["NodeDeclaredFeatures"];

/// Reads plugin args (a `*Args` object; `apiVersion`/`kind` are allowed and ignored).
fn args<T: serde::de::DeserializeOwned + Default>(
    name: &str,
    v: Option<&serde_json::Value>,
) -> Result<T, String> {
    let Some(v) = v else {
        return Ok(T::default());
    };
    let mut v = v.clone();
    if let Some(m) = v.as_object_mut() {
        m.remove("apiVersion");
        m.remove("kind");
    }
    serde_json::from_value(v).map_err(|e| format!("{name} args: {e}"))
}

/// Whether a plugin of this name exists.
pub fn known(name: &str) -> bool {
    DEFAULT_PLUGINS.iter().any(|(n, _)| *n == name)
}

/// Builds the plugin `name` with its args.
pub fn new_plugin(
    name: &str,
    a: Option<&serde_json::Value>,
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, String> {
    let h = handle.clone();
    Ok(match name {
        "SchedulingGates" => Arc::new(SchedulingGates),
        "PrioritySort" => Arc::new(PrioritySort),
        "NodeUnschedulable" => Arc::new(NodeUnschedulable),
        "NodeName" => Arc::new(NodeName),
        "TaintToleration" => Arc::new(TaintToleration),
        "NodeAffinity" => Arc::new(NodeAffinity),
        "NodePorts" => Arc::new(NodePorts),
        "NodeResourcesFit" => Arc::new(NodeResourcesFit::from_args(args(name, a)?)?),
        "VolumeRestrictions" => Arc::new(VolumeRestrictions::new(h)),
        "NodeVolumeLimits" => Arc::new(NodeVolumeLimits::new(h)),
        "VolumeBinding" => Arc::new(VolumeBinding::new(h)),
        "VolumeZone" => Arc::new(VolumeZone::new(h)),
        "PodTopologySpread" => Arc::new(PodTopologySpread::new(args(name, a)?, h)?),
        "InterPodAffinity" => Arc::new(InterPodAffinity::new(args(name, a)?, h)?),
        "DynamicResources" => Arc::new(DynamicResources::new(h)),
        "DefaultPreemption" => Arc::new(DefaultPreemption::new(args(name, a)?, h)?),
        "NodeResourcesBalancedAllocation" => Arc::new(NodeResourcesBalancedAllocation),
        "ImageLocality" => Arc::new(ImageLocality),
        "DefaultBinder" => Arc::new(DefaultBinder::new(h.client)),
        other if UNIMPLEMENTED.contains(&other) => {
            return Err(format!("plugin {other:?} is not implemented by rkube"))
        }
        other => return Err(format!("plugin {other:?} does not exist")),
    })
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
    fn every_default_plugin_builds() {
        let h = Handle::default();
        for (name, _) in DEFAULT_PLUGINS {
            let p = new_plugin(name, None, &h).unwrap();
            assert_eq!(p.name(), *name);
        }
        assert!(new_plugin("Nope", None, &h)
            .err()
            .unwrap()
            .contains("does not exist"));
        assert!(new_plugin("NodeDeclaredFeatures", None, &h)
            .err()
            .unwrap()
            .contains("not implemented"));
        let bad = serde_json::json!({"scoringStrategy": {"type": "Bogus"}});
        assert!(new_plugin("NodeResourcesFit", Some(&bad), &h).is_err());
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
