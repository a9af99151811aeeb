//! One pass of upstream's reconciler (`attachdetach/reconciler/reconciler.go` `reconcile`), as a
//! pure function of the two states, the operations in flight and the nodes' health: first the
//! detaches (so a pod moved to another node frees its volume first), then the attaches, with the
//! Multi-Attach error events. It returns steps for the caller to carry out; the node status write
//! that must precede each detach, and the operations themselves, are I/O done there.
//!
//! Detach rules (upstream): a volume attached but no longer wanted is detached once the node no
//! longer lists it in `volumesInUse`; if it still does, it is detached anyway when the node has
//! the `node.kubernetes.io/out-of-service` taint, or when it has been unwanted for longer than
//! `maxWaitForUnmountDuration` (6 min) and the node is not Ready (unless force detach on timeout
//! is disabled). A detach that skips the kubelet's unmount skips the safe-to-detach check too.

use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use super::actual::{ActualState, AttachState};
use super::desired::{DesiredState, VolumeToAttach};
use super::operations::{OpKind, Operations};
use super::volumes::{split_unique_name, VolumeSpec};

/// Upstream `DefaultTimerConfig.ReconcilerMaxWaitForUnmountDuration`.
pub const MAX_WAIT_FOR_UNMOUNT: Duration = Duration::from_secs(6 * 60);

/// Upstream's event reasons (`pkg/kubelet/events`).
pub const FAILED_ATTACH_VOLUME: &str = "FailedAttachVolume";
pub const SUCCESSFUL_ATTACH_VOLUME: &str = "SuccessfulAttachVolume";

#[derive(Clone, Debug)]
pub struct Config {
    pub max_wait_for_unmount: Duration,
    /// Upstream `--disable-force-detach-on-timeout`.
    pub disable_force_detach_on_timeout: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            max_wait_for_unmount: MAX_WAIT_FOR_UNMOUNT,
            disable_force_detach_on_timeout: false,
        }
    }
}

/// What the reconciler reads of a node. A node missing from the cache is unhealthy and untainted
/// (upstream's lookups fail and it goes on with those values).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct NodeHealth {
    pub ready: bool,
    pub out_of_service: bool,
}

/// Why a detach skips waiting for the kubelet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Forced {
    /// `maxWaitForUnmountDuration` passed (metric reason `timeout`).
    Timeout,
    /// The node has the out-of-service taint (metric reason `out-of-service`).
    OutOfService,
}

#[derive(Clone, Debug)]
pub struct DetachStep {
    pub volume: String,
    pub node: String,
    pub spec: Option<VolumeSpec>,
    /// Check the live Node's `volumesInUse` before detaching (upstream `verifySafeToDetach`).
    pub verify_safe: bool,
    pub forced: Option<Forced>,
}

#[derive(Clone, Debug)]
pub struct AttachStep {
    pub volume: String,
    pub node: String,
    pub spec: VolumeSpec,
    /// The pods told of the outcome.
    pub pods: Vec<Arc<Pod>>,
}

#[derive(Clone, Debug)]
pub struct PodEvent {
    pub pod: Arc<Pod>,
    pub warning: bool,
    pub reason: &'static str,
    pub message: String,
}

#[derive(Clone, Debug)]
pub enum Step {
    /// Write the node's status without the volume, then detach it (skip it if the write fails).
    Detach(DetachStep),
    Attach(AttachStep),
    Event(PodEvent),
}

/// The operation key of a volume: the volume alone unless several nodes may have it
/// (upstream: an unknown spec counts as multi-attach allowed).
pub fn op_node<'a>(spec: Option<&VolumeSpec>, node: &'a str) -> Option<&'a str> {
    spec.is_none_or(|s| s.multi_attach_allowed).then_some(node)
}

/// Upstream `generateVolumeMsg`'s event form: `<prefix> for volume "<name>" <suffix>`.
pub fn volume_message(prefix: &str, spec_name: &str, suffix: &str) -> String {
    format!("{prefix} for volume {spec_name:?} {suffix}")
}

/// The reconciler's pass. Mutates the states as upstream's does (detach request times, the
/// report, the multi-attach flag); operations are started by the caller, so operations planned
/// here count as running for the rest of the pass.
pub fn reconcile(
    desired: &mut DesiredState,
    actual: &mut ActualState,
    operations: &Operations,
    health: impl Fn(&str) -> NodeHealth,
    now: Instant,
    config: &Config,
) -> Vec<Step> {
    let mut steps = Vec::new();
    let mut planned: Vec<(String, Option<String>)> = Vec::new();
    let is_planned = |planned: &[(String, Option<String>)], volume: &str, node: Option<&str>| {
        planned
            .iter()
            .any(|(v, n)| v == volume && (n.is_none() || node.is_none() || n.as_deref() == node))
    };

    for attachment in actual.attachments() {
        let (volume, node) = (&attachment.volume, &attachment.node);
        if desired.volume_exists(volume, node) {
            continue;
        }
        // Known only by name (from a node's status) and not a CSI volume: no plugin here can
        // detach it. Upstream fails to start the detach every pass; it is left alone instead.
        if attachment.spec.is_none() && split_unique_name(volume).is_err() {
            continue;
        }
        let key = op_node(attachment.spec.as_ref(), node);
        if is_planned(&planned, volume, key)
            || !operations.is_safe_to_retry(volume, key, OpKind::Detach, now)
        {
            continue;
        }
        if actual.attach_state(volume, node) == AttachState::Detached {
            continue;
        }
        let Some(elapsed) = actual.set_detach_request_time(volume, node, now) else {
            continue;
        };
        let node_health = health(node);
        let timed_out = elapsed > config.max_wait_for_unmount;
        let force_on_timeout = timed_out && !config.disable_force_detach_on_timeout;
        let force = !node_health.ready && force_on_timeout;
        if attachment.mounted_by_node && !force && !node_health.out_of_service {
            continue;
        }
        // No longer safe to mount: the node's status must say so before the detach starts.
        actual.remove_from_report(volume, node);
        let verify_safe = !(force_on_timeout || node_health.out_of_service);
        let forced = match (verify_safe, force_on_timeout) {
            (true, _) => None,
            (false, true) => Some(Forced::Timeout),
            (false, false) => Some(Forced::OutOfService),
        };
        planned.push((volume.clone(), key.map(str::to_string)));
        steps.push(Step::Detach(DetachStep {
            volume: volume.clone(),
            node: node.clone(),
            spec: attachment.spec.clone(),
            verify_safe,
            forced,
        }));
    }

    for want in desired.volumes_to_attach() {
        let key = op_node(Some(&want.spec), &want.node);
        if is_planned(&planned, &want.volume, key) || operations.is_pending(&want.volume, key) {
            continue;
        }
        if actual.attach_state(&want.volume, &want.node) == AttachState::Attached {
            actual.reset_detach_request_time(&want.volume, &want.node);
            continue;
        }
        if !want.spec.multi_attach_allowed {
            let nodes = actual.nodes_for_attached_volume(&want.volume);
            if !nodes.is_empty() {
                if !want.multi_attach_reported {
                    steps.extend(multi_attach_events(desired, &want, &nodes));
                    desired.set_multi_attach_reported(&want.volume, &want.node);
                }
                continue;
            }
        }
        // Upstream's Run refuses silently while the attach backs off.
        if !operations.is_safe_to_retry(&want.volume, key, OpKind::Attach, now) {
            continue;
        }
        planned.push((want.volume.clone(), key.map(str::to_string)));
        steps.push(Step::Attach(AttachStep {
            volume: want.volume,
            node: want.node,
            spec: want.spec,
            pods: want.pods,
        }));
    }
    steps
}

/// Upstream `reportMultiAttachError`: each pod waiting for the volume learns which pods of its
/// own namespace hold it elsewhere, and only how many in other namespaces.
fn multi_attach_events(
    desired: &DesiredState,
    want: &VolumeToAttach,
    attached_to: &[String],
) -> Vec<Step> {
    let others: Vec<String> = attached_to
        .iter()
        .filter(|n| **n != want.node)
        .cloned()
        .collect();
    let holders = desired.pods_on_nodes(&others, &want.volume);
    let event = |pod: &Arc<Pod>, detail: String| {
        Step::Event(PodEvent {
            pod: pod.clone(),
            warning: true,
            reason: FAILED_ATTACH_VOLUME,
            message: volume_message("Multi-Attach error", &want.spec.name, &detail),
        })
    };
    if holders.is_empty() {
        let detail =
            "Volume is already exclusively attached to one node and can't be attached to another";
        return want
            .pods
            .iter()
            .map(|p| event(p, detail.to_string()))
            .collect();
    }
    want.pods
        .iter()
        .map(|pod| {
            let ns = pod.metadata.namespace.as_deref();
            let mut local: Vec<&str> = Vec::new();
            let mut elsewhere = 0;
            for holder in &holders {
                if holder.metadata.namespace.as_deref() == ns {
                    local.push(holder.metadata.name.as_deref().unwrap_or(""));
                } else {
                    elsewhere += 1;
                }
            }
            local.sort_unstable();
            let detail = match (local.is_empty(), elsewhere) {
                (false, 0) => format!("Volume is already used by pod(s) {}", local.join(", ")),
                (false, n) => format!(
                    "Volume is already used by pod(s) {} and {n} pod(s) in different namespaces",
                    local.join(", ")
                ),
                (true, n) => {
                    format!("Volume is already used by {n} pod(s) in different namespaces")
                }
            };
            event(pod, detail)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(multi: bool) -> VolumeSpec {
        VolumeSpec {
            name: "pv1".into(),
            driver: "d".into(),
            handle: "h".into(),
            multi_attach_allowed: multi,
        }
    }

    const V: &str = "kubernetes.io/csi/d^h";

    fn pod(name: &str, ns: &str) -> Arc<Pod> {
        Arc::new(
            serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns}})).unwrap(),
        )
    }

    fn ready(_: &str) -> NodeHealth {
        NodeHealth {
            ready: true,
            out_of_service: false,
        }
    }

    fn kinds(steps: &[Step]) -> Vec<String> {
        steps
            .iter()
            .map(|s| match s {
                Step::Detach(d) => format!("detach {} verify={}", d.node, d.verify_safe),
                Step::Attach(a) => format!("attach {}", a.node),
                Step::Event(e) => format!("event {}", e.message),
            })
            .collect()
    }

    #[test]
    fn wanted_volumes_are_attached_once() {
        let mut dsw = DesiredState::default();
        let mut asw = ActualState::default();
        let mut ops = Operations::default();
        let now = Instant::now();
        dsw.add_node("n1");
        dsw.add_pod("u1", pod("a", "ns"), &spec(false), "n1")
            .unwrap();
        let steps = reconcile(&mut dsw, &mut asw, &ops, ready, now, &Config::default());
        assert_eq!(kinds(&steps), vec!["attach n1"]);
        let Step::Attach(a) = &steps[0] else { panic!() };
        assert_eq!((a.volume.as_str(), a.pods.len()), (V, 1));

        // While the attach runs nothing more is planned; once attached, nothing either.
        ops.start(V, None, OpKind::Attach, now);
        assert!(reconcile(&mut dsw, &mut asw, &ops, ready, now, &Config::default()).is_empty());
        ops.finish(V, None, false, now);
        asw.mark_attached(V, Some(spec(false)), "n1", "");
        assert!(reconcile(&mut dsw, &mut asw, &ops, ready, now, &Config::default()).is_empty());
        // A failed attach leaves it uncertain; it is retried after the backoff.
        asw.mark_uncertain(V, Some(spec(false)), "n1");
        ops.start(V, None, OpKind::Attach, now);
        ops.finish(V, None, true, now);
        assert!(reconcile(&mut dsw, &mut asw, &ops, ready, now, &Config::default()).is_empty());
        let later = now + Duration::from_secs(1);
        assert_eq!(
            kinds(&reconcile(
                &mut dsw,
                &mut asw,
                &ops,
                ready,
                later,
                &Config::default()
            )),
            vec!["attach n1"]
        );
    }

    #[test]
    fn detach_waits_for_the_unmount_then_forces_on_unready_nodes() {
        let mut dsw = DesiredState::default();
        let mut asw = ActualState::default();
        let ops = Operations::default();
        let t0 = Instant::now();
        let config = Config::default();
        asw.mark_attached(V, Some(spec(false)), "n1", "");
        asw.take_report("n1");
        asw.set_volumes_mounted_by_node(&[V.into()], "n1");

        let unready = |_: &str| NodeHealth::default();
        assert!(reconcile(&mut dsw, &mut asw, &ops, unready, t0, &config).is_empty());
        // A Ready node keeps the volume however long the kubelet keeps it mounted.
        let late = t0 + MAX_WAIT_FOR_UNMOUNT + Duration::from_secs(1);
        assert!(reconcile(&mut dsw, &mut asw, &ops, ready, late, &config).is_empty());
        let no_force = Config {
            disable_force_detach_on_timeout: true,
            ..Config::default()
        };
        assert!(reconcile(&mut dsw, &mut asw, &ops, unready, late, &no_force).is_empty());
        // An unready node loses it after 6 minutes, without the safe-to-detach check.
        let steps = reconcile(&mut dsw, &mut asw, &ops, unready, late, &config);
        assert_eq!(kinds(&steps), vec!["detach n1 verify=false"]);
        let Step::Detach(d) = &steps[0] else { panic!() };
        assert_eq!(d.forced, Some(Forced::Timeout));
        assert_eq!(
            asw.take_report("n1"),
            Some(vec![]),
            "unreported before the detach"
        );
    }

    #[test]
    fn unmounted_or_out_of_service_volumes_detach_at_once() {
        let mut dsw = DesiredState::default();
        let mut asw = ActualState::default();
        let ops = Operations::default();
        let now = Instant::now();
        asw.mark_attached(V, Some(spec(false)), "n1", "");
        asw.set_volumes_mounted_by_node(&[V.into()], "n1");
        let tainted = |_: &str| NodeHealth {
            ready: true,
            out_of_service: true,
        };
        let steps = reconcile(&mut dsw, &mut asw, &ops, tainted, now, &Config::default());
        let Step::Detach(d) = &steps[0] else { panic!() };
        assert_eq!(
            (d.verify_safe, d.forced),
            (false, Some(Forced::OutOfService))
        );

        let mut asw = ActualState::default();
        asw.mark_attached(V, None, "n1", "");
        asw.set_volumes_mounted_by_node(&[], "n1");
        asw.mark_attached("kubernetes.io/iscsi/portal:lun", None, "n1", "");
        asw.set_volumes_mounted_by_node(&[], "n1");
        let steps = reconcile(&mut dsw, &mut asw, &ops, ready, now, &Config::default());
        assert_eq!(
            kinds(&steps),
            vec!["detach n1 verify=true"],
            "the iSCSI volume no plugin here handles is left alone"
        );
        // Wanted again before it went: the detach timer is reset.
        dsw.add_node("n1");
        dsw.add_pod("u1", pod("a", "ns"), &spec(false), "n1")
            .unwrap();
        asw.set_detach_request_time(V, "n1", now);
        assert!(reconcile(&mut dsw, &mut asw, &ops, ready, now, &Config::default()).is_empty());
        assert_eq!(
            asw.set_detach_request_time(V, "n1", now + Duration::from_secs(9)),
            Some(Duration::ZERO)
        );
    }

    #[test]
    fn a_moved_pod_detaches_first_and_multi_attach_is_reported_once() {
        let mut dsw = DesiredState::default();
        let mut asw = ActualState::default();
        let ops = Operations::default();
        let now = Instant::now();
        dsw.add_node("n1");
        dsw.add_node("n2");
        asw.mark_attached(V, Some(spec(false)), "n1", "");
        asw.set_volumes_mounted_by_node(&[], "n1");
        dsw.add_pod("u2", pod("new", "ns"), &spec(false), "n2")
            .unwrap();
        // The old pod is gone: detach from n1; the attach to n2 waits for it.
        let steps = reconcile(&mut dsw, &mut asw, &ops, ready, now, &Config::default());
        assert_eq!(kinds(&steps), vec!["detach n1 verify=true"]);

        // Both pods still running: n2's pod is told who holds the volume, once.
        let mut asw = ActualState::default();
        asw.mark_attached(V, Some(spec(false)), "n1", "");
        dsw.add_pod("u1", pod("old", "ns"), &spec(false), "n1")
            .unwrap();
        dsw.add_pod("u3", pod("x", "other"), &spec(false), "n1")
            .unwrap();
        let steps = reconcile(&mut dsw, &mut asw, &ops, ready, now, &Config::default());
        assert_eq!(
            kinds(&steps),
            vec!["event Multi-Attach error for volume \"pv1\" Volume is already used by pod(s) old and 1 pod(s) in different namespaces"]
        );
        assert!(reconcile(&mut dsw, &mut asw, &ops, ready, now, &Config::default()).is_empty());

        // A multi-attach volume goes to both nodes at once.
        let mut dsw = DesiredState::default();
        let mut asw = ActualState::default();
        dsw.add_node("n1");
        dsw.add_node("n2");
        dsw.add_pod("u1", pod("a", "ns"), &spec(true), "n1")
            .unwrap();
        dsw.add_pod("u2", pod("b", "ns"), &spec(true), "n2")
            .unwrap();
        let steps = reconcile(&mut dsw, &mut asw, &ops, ready, now, &Config::default());
        assert_eq!(kinds(&steps), vec!["attach n1", "attach n2"]);
        // A volume only one node may have: one attach at a time.
        let mut dsw = DesiredState::default();
        dsw.add_node("n1");
        dsw.add_node("n2");
        dsw.add_pod("u1", pod("a", "ns"), &spec(false), "n1")
            .unwrap();
        dsw.add_pod("u2", pod("b", "ns"), &spec(false), "n2")
            .unwrap();
        let steps = reconcile(&mut dsw, &mut asw, &ops, ready, now, &Config::default());
        assert_eq!(kinds(&steps), vec!["attach n1"]);
    }

    #[test]
    fn multi_attach_messages() {
        let mut dsw = DesiredState::default();
        dsw.add_node("n1");
        dsw.add_node("n2");
        let want = VolumeToAttach {
            volume: V.into(),
            node: "n2".into(),
            spec: spec(false),
            pods: vec![pod("new", "ns")],
            multi_attach_reported: false,
        };
        let message = |steps: Vec<Step>| match &steps[0] {
            Step::Event(e) => e.message.clone(),
            _ => panic!(),
        };
        assert_eq!(
            message(multi_attach_events(&dsw, &want, &["n1".into()])),
            "Multi-Attach error for volume \"pv1\" Volume is already exclusively attached to one node and can't be attached to another"
        );
        dsw.add_pod("u9", pod("far", "other"), &spec(false), "n1")
            .unwrap();
        assert_eq!(
            message(multi_attach_events(&dsw, &want, &["n1".into()])),
            "Multi-Attach error for volume \"pv1\" Volume is already used by 1 pod(s) in different namespaces"
        );
        dsw.add_pod("u8", pod("b", "ns"), &spec(false), "n1")
            .unwrap();
        dsw.add_pod("u7", pod("a", "ns"), &spec(false), "n1")
            .unwrap();
        assert_eq!(
            message(multi_attach_events(&dsw, &want, &["n1".into()])),
            "Multi-Attach error for volume \"pv1\" Volume is already used by pod(s) a, b and 1 pod(s) in different namespaces"
        );
    }

    #[test]
    fn messages_match_upstream_format() {
        assert_eq!(
            volume_message("AttachVolume.Attach succeeded", "pv1", ""),
            "AttachVolume.Attach succeeded for volume \"pv1\" "
        );
        assert_eq!(
            volume_message("AttachVolume.Attach failed", "pv1", ": rpc error"),
            "AttachVolume.Attach failed for volume \"pv1\" : rpc error"
        );
        assert_eq!(op_node(None, "n1"), Some("n1"));
        assert_eq!(op_node(Some(&spec(false)), "n1"), None);
    }
}
