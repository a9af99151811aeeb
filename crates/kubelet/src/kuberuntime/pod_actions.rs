//! What one sync must do to a pod's containers (upstream `kuberuntime_manager.go`
//! `computePodActions`): a pure function of the pod's spec, what the runtime holds
//! ([`PodRecord`]) and the probes' verdicts. The I/O loop in [`crate::sync`] carries the actions
//! out: it applies CrashLoopBackOff to every restart, kills before restarting, and writes status.
//!
//! Differs from upstream: sandbox changes are handled before this (`ensure_sandbox`, which kills
//! every container of a lost sandbox), so the actions here assume a ready sandbox; init containers
//! are not restartable sidecars yet (`restartPolicy: Always` on an init container is not honoured);
//! ephemeral containers are not started.

use k8s_openapi::api::core::v1::{Container, PodSpec};

use super::config::container_hash;
use super::status::{ContainerRecord, PodRecord, RecordState};
use crate::prober::ProbeKind;

/// Why a running container is killed before its restart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KillReason {
    /// Its liveness probe failed.
    Liveness,
    /// Its startup probe failed.
    Startup,
    /// Its spec changed (another hash than the one it was started with).
    DefinitionChanged,
}

impl KillReason {
    /// The `Killing` event's message, as upstream words it.
    pub fn message(self, container: &str) -> String {
        match self {
            KillReason::Liveness => {
                format!("Container {container} failed liveness probe, will be restarted")
            }
            KillReason::Startup => {
                format!("Container {container} failed startup probe, will be restarted")
            }
            KillReason::DefinitionChanged => {
                format!("Container {container} definition changed, will be restarted")
            }
        }
    }
}

/// What happens to one container in this sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ContainerAction {
    /// Nothing: it runs as it should, or it exited and its restart policy keeps it down.
    Keep,
    /// It never ran: start attempt `attempt` (no backoff).
    Start { attempt: u32 },
    /// Its newest attempt was created but never started (a failed start): remove `old_id` and
    /// start attempt `attempt` (no backoff).
    Replace { old_id: String, attempt: u32 },
    /// It exited and its restart policy restarts it: attempt `attempt`, subject to backoff
    /// counted from `finished_at` (ns since the epoch).
    Restart { attempt: u32, finished_at: i64 },
    /// It runs but must not: kill `id`; once it has exited, [`restart_after_exit`] decides.
    Kill { id: String, reason: KillReason },
}

/// The init containers' part of the sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InitStep {
    /// Every init container succeeded (or the app containers already started): go on.
    Done,
    /// Init container `name` runs: wait for it.
    Running { name: String },
    /// Init container `name` failed and `restartPolicy: Never` keeps it down: the pod fails.
    Failed { name: String },
    /// Run init container `name` next with `action` (`Start`, `Replace`-like start or `Restart`).
    Next {
        name: String,
        action: ContainerAction,
    },
}

/// The whole plan of one sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodActions {
    pub init: InitStep,
    /// One entry per app container, in spec order; empty until `init` is [`InitStep::Done`].
    pub containers: Vec<(String, ContainerAction)>,
}

/// Does `policy` restart a container that exited with `exit_code`?
pub fn restart_after_exit(policy: &str, exit_code: i32) -> bool {
    match policy {
        "Always" => true,
        "OnFailure" => exit_code != 0,
        _ => false,
    }
}

/// Computes the plan. `must_restart` gives a running container's failed liveness/startup probe
/// (by container ID), if any.
pub fn compute_pod_actions(
    spec: &PodSpec,
    record: &PodRecord,
    must_restart: impl Fn(&str) -> Option<ProbeKind>,
) -> PodActions {
    let policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let init = init_step(spec, record, policy);
    let containers = if init == InitStep::Done {
        spec.containers
            .iter()
            .map(|c| {
                let action = container_action(c, record.latest(&c.name), policy, &must_restart);
                (c.name.clone(), action)
            })
            .collect()
    } else {
        Vec::new()
    };
    PodActions { init, containers }
}

/// Init containers run one at a time, in order, each to success, and only before any app
/// container has started (upstream `findNextInitContainerToRun`).
fn init_step(spec: &PodSpec, record: &PodRecord, policy: &str) -> InitStep {
    let app_started = spec
        .containers
        .iter()
        .any(|c| record.latest(&c.name).is_some());
    if app_started {
        return InitStep::Done;
    }
    for c in spec.init_containers.iter().flatten() {
        let name = c.name.clone();
        match record.latest(&c.name) {
            Some(r) if r.state == RecordState::Exited && r.exit_code == 0 => continue,
            Some(r) if r.state == RecordState::Running => return InitStep::Running { name },
            // Init containers are restarted on failure unless the pod's policy is Never.
            Some(r) if r.state == RecordState::Exited => {
                if policy == "Never" {
                    return InitStep::Failed { name };
                }
                let action = ContainerAction::Restart {
                    attempt: r.attempt + 1,
                    finished_at: r.finished_at,
                };
                return InitStep::Next { name, action };
            }
            Some(r) => {
                let action = ContainerAction::Start {
                    attempt: r.attempt + 1,
                };
                return InitStep::Next { name, action };
            }
            None => {
                let action = ContainerAction::Start { attempt: 0 };
                return InitStep::Next { name, action };
            }
        }
    }
    InitStep::Done
}

fn container_action(
    c: &Container,
    latest: Option<&ContainerRecord>,
    policy: &str,
    must_restart: &impl Fn(&str) -> Option<ProbeKind>,
) -> ContainerAction {
    let Some(latest) = latest else {
        return ContainerAction::Start { attempt: 0 };
    };
    match latest.state {
        RecordState::Running => {
            let reason = match must_restart(&latest.id) {
                Some(ProbeKind::Liveness) => Some(KillReason::Liveness),
                Some(ProbeKind::Startup) => Some(KillReason::Startup),
                // Readiness never restarts a container.
                Some(ProbeKind::Readiness) | None => None,
            };
            // An empty hash: a container not started by rkube's kubelet (or before hashes were
            // recorded); it is not restarted for a spec it cannot be compared with.
            let changed = !latest.hash.is_empty() && latest.hash != container_hash(c);
            match reason.or(changed.then_some(KillReason::DefinitionChanged)) {
                Some(reason) => ContainerAction::Kill {
                    id: latest.id.clone(),
                    reason,
                },
                None => ContainerAction::Keep,
            }
        }
        RecordState::Created | RecordState::Unknown => ContainerAction::Replace {
            old_id: latest.id.clone(),
            attempt: latest.attempt + 1,
        },
        RecordState::Exited if restart_after_exit(policy, latest.exit_code) => {
            ContainerAction::Restart {
                attempt: latest.attempt + 1,
                finished_at: latest.finished_at,
            }
        }
        RecordState::Exited => ContainerAction::Keep,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn container(name: &str) -> Container {
        Container {
            name: name.into(),
            image: Some("busybox".into()),
            ..Default::default()
        }
    }

    fn spec(init: &[&str], apps: &[&str], policy: &str) -> PodSpec {
        PodSpec {
            init_containers: (!init.is_empty())
                .then(|| init.iter().map(|n| container(n)).collect()),
            containers: apps.iter().map(|n| container(n)).collect(),
            restart_policy: Some(policy.into()),
            ..Default::default()
        }
    }

    fn rec(name: &str, attempt: u32, state: RecordState, exit_code: i32) -> ContainerRecord {
        ContainerRecord {
            id: format!("{name}-{attempt}"),
            name: name.into(),
            attempt,
            state,
            created_at: 1,
            started_at: 2,
            finished_at: if state == RecordState::Exited { 3 } else { 0 },
            exit_code,
            reason: String::new(),
            message: String::new(),
            image: String::new(),
            image_ref: String::new(),
            hash: container_hash(&container(name)),
        }
    }

    fn record(containers: Vec<ContainerRecord>) -> PodRecord {
        PodRecord {
            sandbox_id: Some("sb".into()),
            sandbox_ready: true,
            pod_ips: vec!["10.0.0.2".into()],
            containers,
        }
    }

    fn no_probe(_: &str) -> Option<ProbeKind> {
        None
    }

    #[test]
    fn a_new_pod_starts_its_first_init_container_only() {
        let a = compute_pod_actions(
            &spec(&["i1", "i2"], &["app"], "Always"),
            &record(vec![]),
            no_probe,
        );
        assert_eq!(
            a.init,
            InitStep::Next {
                name: "i1".into(),
                action: ContainerAction::Start { attempt: 0 }
            }
        );
        assert!(a.containers.is_empty());
    }

    #[test]
    fn init_containers_run_in_order_and_then_the_app_containers_start() {
        let s = spec(&["i1", "i2"], &["a", "b"], "Always");
        let running = record(vec![
            rec("i1", 0, RecordState::Exited, 0),
            rec("i2", 0, RecordState::Running, 0),
        ]);
        assert_eq!(
            compute_pod_actions(&s, &running, no_probe).init,
            InitStep::Running { name: "i2".into() }
        );
        let done = record(vec![
            rec("i1", 0, RecordState::Exited, 0),
            rec("i2", 0, RecordState::Exited, 0),
        ]);
        let a = compute_pod_actions(&s, &done, no_probe);
        assert_eq!(a.init, InitStep::Done);
        assert_eq!(
            a.containers,
            vec![
                ("a".into(), ContainerAction::Start { attempt: 0 }),
                ("b".into(), ContainerAction::Start { attempt: 0 }),
            ]
        );
    }

    #[test]
    fn a_failed_init_container_is_retried_unless_the_policy_is_never() {
        let failed = record(vec![rec("i1", 2, RecordState::Exited, 1)]);
        for policy in ["Always", "OnFailure"] {
            assert_eq!(
                compute_pod_actions(&spec(&["i1"], &["a"], policy), &failed, no_probe).init,
                InitStep::Next {
                    name: "i1".into(),
                    action: ContainerAction::Restart {
                        attempt: 3,
                        finished_at: 3
                    }
                }
            );
        }
        assert_eq!(
            compute_pod_actions(&spec(&["i1"], &["a"], "Never"), &failed, no_probe).init,
            InitStep::Failed { name: "i1".into() }
        );
    }

    #[test]
    fn init_containers_are_not_rerun_once_an_app_container_started() {
        // The init container's record was garbage-collected; the app container ran.
        let r = record(vec![rec("a", 0, RecordState::Running, 0)]);
        let a = compute_pod_actions(&spec(&["i1"], &["a"], "Always"), &r, no_probe);
        assert_eq!(a.init, InitStep::Done);
        assert_eq!(a.containers, vec![("a".into(), ContainerAction::Keep)]);
    }

    #[test]
    fn exited_containers_follow_the_restart_policy() {
        let cases = [
            ("Always", 0, true),
            ("Always", 1, true),
            ("OnFailure", 0, false),
            ("OnFailure", 137, true),
            ("Never", 1, false),
        ];
        for (policy, code, restarts) in cases {
            let r = record(vec![rec("a", 4, RecordState::Exited, code)]);
            let a = compute_pod_actions(&spec(&[], &["a"], policy), &r, no_probe);
            let want = if restarts {
                ContainerAction::Restart {
                    attempt: 5,
                    finished_at: 3,
                }
            } else {
                ContainerAction::Keep
            };
            assert_eq!(
                a.containers,
                vec![("a".into(), want)],
                "{policy} exit {code}"
            );
        }
    }

    #[test]
    fn running_containers_are_killed_for_failed_probes_and_changed_specs() {
        let r = record(vec![rec("a", 0, RecordState::Running, 0)]);
        let s = spec(&[], &["a"], "Always");
        let kill = |reason| ContainerAction::Kill {
            id: "a-0".into(),
            reason,
        };
        let liveness = compute_pod_actions(&s, &r, |_: &str| Some(ProbeKind::Liveness));
        assert_eq!(liveness.containers[0].1, kill(KillReason::Liveness));
        let startup = compute_pod_actions(&s, &r, |_: &str| Some(ProbeKind::Startup));
        assert_eq!(startup.containers[0].1, kill(KillReason::Startup));
        let readiness = compute_pod_actions(&s, &r, |_: &str| Some(ProbeKind::Readiness));
        assert_eq!(readiness.containers[0].1, ContainerAction::Keep);

        let mut changed = s.clone();
        changed.containers[0].image = Some("busybox:2".into());
        let a = compute_pod_actions(&changed, &r, no_probe);
        assert_eq!(a.containers[0].1, kill(KillReason::DefinitionChanged));
        assert_eq!(
            KillReason::DefinitionChanged.message("a"),
            "Container a definition changed, will be restarted"
        );

        // No recorded hash: never restarted for its spec.
        let mut unhashed = rec("a", 0, RecordState::Running, 0);
        unhashed.hash.clear();
        let a = compute_pod_actions(&changed, &record(vec![unhashed]), no_probe);
        assert_eq!(a.containers[0].1, ContainerAction::Keep);
    }

    #[test]
    fn a_container_created_but_never_started_is_replaced() {
        let r = record(vec![rec("a", 1, RecordState::Created, 0)]);
        let a = compute_pod_actions(&spec(&[], &["a"], "Never"), &r, no_probe);
        assert_eq!(
            a.containers[0].1,
            ContainerAction::Replace {
                old_id: "a-1".into(),
                attempt: 2
            }
        );
    }
}
