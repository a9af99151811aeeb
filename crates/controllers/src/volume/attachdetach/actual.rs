//! The actual state of the world (upstream `attachdetach/cache/actual_state_of_world.go`): which
//! volumes this controller believes attached to which nodes, whether each is confirmed or
//! uncertain (an attach or detach that failed midway, or a VolumeAttachment found at startup),
//! whether the node still has it mounted (its `status.volumesInUse`), when it was first found
//! unwanted, and per node the list to publish as `status.volumesAttached`.
//!
//! Difference: a node's report entry is dropped once an empty list was published, so the map
//! does not keep every node that ever had a volume.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use super::volumes::VolumeSpec;

/// Upstream `AttachState`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachState {
    Attached,
    Uncertain,
    Detached,
}

#[derive(Clone, Debug)]
struct NodeAttachment {
    /// The node still has it in `volumesInUse` (unsafe to detach). Assumed true until a node
    /// status says otherwise.
    mounted_by_node: bool,
    /// The attach succeeded (false: uncertain).
    attached_confirmed: bool,
    /// When the reconciler first found it unwanted (reset when wanted again).
    detach_requested_at: Option<Instant>,
}

#[derive(Clone, Debug)]
struct AttachedVolume {
    /// None for volumes read back from a node's status at startup until a pod names them.
    spec: Option<VolumeSpec>,
    device_path: String,
    nodes: BTreeMap<String, NodeAttachment>,
}

#[derive(Clone, Debug, Default)]
struct NodeReport {
    status_update_needed: bool,
    volumes: BTreeSet<String>,
}

/// One attachment as the reconciler reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct Attachment {
    pub volume: String,
    pub node: String,
    pub spec: Option<VolumeSpec>,
    pub mounted_by_node: bool,
    pub attached_confirmed: bool,
}

/// An entry of a node's `status.volumesAttached`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReportedVolume {
    pub name: String,
    pub device_path: String,
}

#[derive(Debug, Default)]
pub struct ActualState {
    volumes: BTreeMap<String, AttachedVolume>,
    reports: BTreeMap<String, NodeReport>,
}

impl ActualState {
    /// A confirmed attachment (upstream `MarkVolumeAsAttached`); it is reported on the node.
    pub fn mark_attached(
        &mut self,
        volume: &str,
        spec: Option<VolumeSpec>,
        node: &str,
        device_path: &str,
    ) {
        self.add_volume_node(volume, spec, node, device_path, true);
    }

    /// An attachment that may or may not exist (upstream `MarkVolumeAsUncertain`); not reported.
    pub fn mark_uncertain(&mut self, volume: &str, spec: Option<VolumeSpec>, node: &str) {
        self.add_volume_node(volume, spec, node, "", false);
    }

    fn add_volume_node(
        &mut self,
        volume: &str,
        spec: Option<VolumeSpec>,
        node: &str,
        device_path: &str,
        attached: bool,
    ) {
        let entry = self
            .volumes
            .entry(volume.to_string())
            .or_insert_with(|| AttachedVolume {
                spec: None,
                device_path: String::new(),
                nodes: BTreeMap::new(),
            });
        entry.device_path = device_path.to_string();
        // Upstream overwrites the spec even with nil; keeping a known spec loses nothing.
        if spec.is_some() {
            entry.spec = spec;
        }
        entry
            .nodes
            .entry(node.to_string())
            .and_modify(|n| n.attached_confirmed = attached)
            .or_insert(NodeAttachment {
                mounted_by_node: true,
                attached_confirmed: attached,
                detach_requested_at: None,
            });
        if attached {
            self.add_to_report(volume, node);
        }
    }

    /// The volume is gone from the node (upstream `MarkVolumeAsDetached`).
    pub fn mark_detached(&mut self, volume: &str, node: &str) {
        if let Some(entry) = self.volumes.get_mut(volume) {
            entry.nodes.remove(node);
            if entry.nodes.is_empty() {
                self.volumes.remove(volume);
            }
        }
        self.remove_from_report(volume, node);
    }

    /// Upstream `SetVolumesMountedByNode`: the node's `volumesInUse` decides, for every volume
    /// attached to it.
    pub fn set_volumes_mounted_by_node(&mut self, in_use: &[String], node: &str) {
        for (name, entry) in self.volumes.iter_mut() {
            if let Some(n) = entry.nodes.get_mut(node) {
                n.mounted_by_node = in_use.iter().any(|v| v == name);
            }
        }
    }

    /// Records the first time the volume was found unwanted; returns how long ago that was
    /// (None if the attachment is unknown).
    pub fn set_detach_request_time(
        &mut self,
        volume: &str,
        node: &str,
        now: Instant,
    ) -> Option<Duration> {
        let n = self.volumes.get_mut(volume)?.nodes.get_mut(node)?;
        let since = *n.detach_requested_at.get_or_insert(now);
        Some(now.saturating_duration_since(since))
    }

    pub fn reset_detach_request_time(&mut self, volume: &str, node: &str) {
        if let Some(n) = self
            .volumes
            .get_mut(volume)
            .and_then(|v| v.nodes.get_mut(node))
        {
            n.detach_requested_at = None;
        }
    }

    pub fn attach_state(&self, volume: &str, node: &str) -> AttachState {
        match self.volumes.get(volume).and_then(|v| v.nodes.get(node)) {
            Some(n) if n.attached_confirmed => AttachState::Attached,
            Some(_) => AttachState::Uncertain,
            None => AttachState::Detached,
        }
    }

    /// Every attachment, confirmed or uncertain, in volume then node order.
    pub fn attachments(&self) -> Vec<Attachment> {
        let mut out = Vec::new();
        for (volume, entry) in &self.volumes {
            for (node, n) in &entry.nodes {
                out.push(Attachment {
                    volume: volume.clone(),
                    node: node.clone(),
                    spec: entry.spec.clone(),
                    mounted_by_node: n.mounted_by_node,
                    attached_confirmed: n.attached_confirmed,
                });
            }
        }
        out
    }

    /// The nodes the volume is confirmed attached to (upstream `GetNodesForAttachedVolume`).
    pub fn nodes_for_attached_volume(&self, volume: &str) -> Vec<String> {
        self.volumes
            .get(volume)
            .map(|v| {
                v.nodes
                    .iter()
                    .filter(|(_, n)| n.attached_confirmed)
                    .map(|(node, _)| node.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The node's `status.volumesAttached` entry, if the volume is reported there.
    pub fn device_path(&self, volume: &str) -> Option<&str> {
        self.volumes.get(volume).map(|v| v.device_path.as_str())
    }

    /// Stops reporting the volume on the node (before a detach: no longer safe to mount).
    /// Returns whether it was reported.
    pub fn remove_from_report(&mut self, volume: &str, node: &str) -> bool {
        let Some(report) = self.reports.get_mut(node) else {
            return false;
        };
        if !report.volumes.remove(volume) {
            return false;
        }
        report.status_update_needed = true;
        true
    }

    /// Reports the volume on the node again (a detach that could not start), if still attached.
    pub fn add_to_report(&mut self, volume: &str, node: &str) {
        let attached = self
            .volumes
            .get(volume)
            .is_some_and(|v| v.nodes.contains_key(node));
        if !attached {
            return;
        }
        let report = self.reports.entry(node.to_string()).or_default();
        if report.volumes.insert(volume.to_string()) {
            report.status_update_needed = true;
        }
    }

    /// The node's status must be written again (its object was re-created, or a write failed).
    pub fn set_node_status_update_needed(&mut self, node: &str) {
        if let Some(report) = self.reports.get_mut(node) {
            report.status_update_needed = true;
        }
    }

    /// The node's `volumesAttached` if it must be written, clearing the flag (upstream
    /// `GetVolumesToReportAttachedForNode`). A node left with nothing to report is forgotten.
    pub fn take_report(&mut self, node: &str) -> Option<Vec<ReportedVolume>> {
        let report = self.reports.get_mut(node)?;
        if !report.status_update_needed {
            return None;
        }
        report.status_update_needed = false;
        let list: Vec<ReportedVolume> = report
            .volumes
            .iter()
            .map(|name| ReportedVolume {
                name: name.clone(),
                device_path: self
                    .volumes
                    .get(name)
                    .map(|v| v.device_path.clone())
                    .unwrap_or_default(),
            })
            .collect();
        if list.is_empty() {
            self.reports.remove(node);
        }
        Some(list)
    }

    /// The nodes whose `volumesAttached` must be written.
    pub fn nodes_needing_status_update(&self) -> Vec<String> {
        self.reports
            .iter()
            .filter(|(_, r)| r.status_update_needed)
            .map(|(n, _)| n.clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Option<VolumeSpec> {
        Some(VolumeSpec {
            name: "pv1".into(),
            driver: "d".into(),
            handle: "h".into(),
            multi_attach_allowed: false,
        })
    }

    const V: &str = "kubernetes.io/csi/d^h";

    #[test]
    fn attach_report_and_detach() {
        let mut asw = ActualState::default();
        assert_eq!(asw.attach_state(V, "n1"), AttachState::Detached);
        asw.mark_uncertain(V, spec(), "n1");
        assert_eq!(asw.attach_state(V, "n1"), AttachState::Uncertain);
        assert_eq!(
            asw.take_report("n1"),
            None,
            "uncertain volumes are not reported"
        );
        assert!(asw.nodes_for_attached_volume(V).is_empty());

        asw.mark_attached(V, None, "n1", "");
        assert_eq!(asw.attach_state(V, "n1"), AttachState::Attached);
        assert_eq!(asw.attachments()[0].spec, spec(), "a known spec is kept");
        assert_eq!(asw.nodes_needing_status_update(), vec!["n1"]);
        assert_eq!(
            asw.take_report("n1"),
            Some(vec![ReportedVolume {
                name: V.into(),
                device_path: String::new()
            }])
        );
        assert_eq!(asw.take_report("n1"), None, "written once");
        assert_eq!(asw.nodes_for_attached_volume(V), vec!["n1"]);

        assert!(asw.remove_from_report(V, "n1"));
        assert!(!asw.remove_from_report(V, "n1"));
        asw.add_to_report(V, "n1");
        assert_eq!(asw.take_report("n1").unwrap().len(), 1);

        asw.mark_detached(V, "n1");
        assert_eq!(asw.attach_state(V, "n1"), AttachState::Detached);
        assert!(asw.attachments().is_empty());
        assert_eq!(
            asw.take_report("n1"),
            Some(vec![]),
            "the emptied list is written"
        );
        asw.set_node_status_update_needed("n1");
        assert_eq!(asw.take_report("n1"), None, "and the node forgotten");
        asw.add_to_report(V, "n1");
        assert_eq!(
            asw.take_report("n1"),
            None,
            "a detached volume is not reported again"
        );
    }

    #[test]
    fn mounted_by_node_follows_volumes_in_use() {
        let mut asw = ActualState::default();
        asw.mark_attached(V, spec(), "n1", "");
        asw.mark_attached("kubernetes.io/csi/d^other", spec(), "n1", "");
        assert!(
            asw.attachments().iter().all(|a| a.mounted_by_node),
            "assumed mounted"
        );
        asw.set_volumes_mounted_by_node(&[V.to_string()], "n1");
        let mounted: Vec<_> = asw
            .attachments()
            .into_iter()
            .map(|a| (a.volume, a.mounted_by_node))
            .collect();
        assert_eq!(
            mounted,
            vec![
                ("kubernetes.io/csi/d^h".into(), true),
                ("kubernetes.io/csi/d^other".into(), false)
            ]
        );
        asw.set_volumes_mounted_by_node(&[], "n2");
        assert!(
            asw.attachments()[0].mounted_by_node,
            "other nodes untouched"
        );
    }

    #[test]
    fn detach_request_time_is_kept_until_reset() {
        let mut asw = ActualState::default();
        let t0 = Instant::now();
        assert_eq!(asw.set_detach_request_time(V, "n1", t0), None);
        asw.mark_attached(V, spec(), "n1", "");
        assert_eq!(
            asw.set_detach_request_time(V, "n1", t0),
            Some(Duration::ZERO)
        );
        let later = t0 + Duration::from_secs(30);
        assert_eq!(
            asw.set_detach_request_time(V, "n1", later),
            Some(Duration::from_secs(30))
        );
        asw.reset_detach_request_time(V, "n1");
        assert_eq!(
            asw.set_detach_request_time(V, "n1", later),
            Some(Duration::ZERO)
        );
    }
}
