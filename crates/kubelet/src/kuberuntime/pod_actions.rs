//! What one sync must do to a pod's containers (upstream `kuberuntime_manager.go`
//! `computePodActions`): a pure function of the pod's spec, what the runtime holds
//! ([`PodRecord`]) and the probes' verdicts. The I/O loop in [`crate::sync`] carries the actions
//! out: it applies CrashLoopBackOff to every restart, kills before restarting, and writes status.
//!
//! Sidecars (init containers with `restartPolicy: Always`) start in their turn among the init
//! containers, are kept running through the pod's life, and are stopped once every app container
//! has exited for good.
//!
//! Differs from upstream: sandbox changes are handled before this (`ensure_sandbox`, which kills
//! every container of a lost sandbox), so the actions here assume a ready sandbox; a sidecar's
//! liveness probe does not hold back the next init container. In-place resize is decided in
//! [`super::resize`] (a container's hash leaves its resources out, so a resize never reads as a
//! changed definition).

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
    /// A resize changed a resource whose `resizePolicy` is `RestartContainer`.
    ResizeRestart,
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
            KillReason::ResizeRestart => format!("Container {container} resize requires restart"),
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
    /// Every regular init container succeeded and every sidecar started (or the app containers
    /// already started): go on to the app containers.
    Done,
    /// Init container `name` runs (or a sidecar has not passed its startup probe): wait for it.
    Waiting { name: String },
    /// Init container `name` failed and `restartPolicy: Never` keeps it down: the pod fails.
    Failed { name: String },
    /// Run regular init container `name` next with `action` (`Start` or `Restart`).
    Next {
        name: String,
        action: ContainerAction,
    },
}

/// The whole plan of one sync.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodActions {
    pub init: InitStep,
    /// Sidecars (init containers with `restartPolicy: Always`) reached so far, in spec order:
    /// started when their turn comes, then kept running (restarted whatever the pod's policy).
    pub sidecars: Vec<(String, ContainerAction)>,
    /// One entry per app container, in spec order; empty until `init` is [`InitStep::Done`].
    pub containers: Vec<(String, ContainerAction)>,
    /// Every app container has exited for good: stop the sidecars, the pod is done (upstream
    /// `KillPod` when nothing is kept and nothing starts).
    pub stop_sidecars: bool,
    /// Ephemeral containers to start, before anything else and whatever the init step
    /// (upstream `EphemeralContainersToStart`; see [`super::ephemeral`]).
    pub ephemeral: Vec<String>,
}

/// Does `policy` restart a container that exited with `exit_code`?
pub fn restart_after_exit(policy: &str, exit_code: i32) -> bool {
    match policy {
        "Always" => true,
        "OnFailure" => exit_code != 0,
        _ => false,
    }
}

/// A sidecar: an init container with `restartPolicy: Always` (upstream
/// `IsRestartableInitContainer`).
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// What the probes say about running containers, by container ID.
pub struct ProbeVerdicts<'a> {
    /// A failed liveness or startup probe: the container must be restarted.
    pub must_restart: &'a dyn Fn(&str) -> Option<ProbeKind>,
    /// The startup probe's result; None while it has not succeeded or failed yet.
    pub started: &'a dyn Fn(&str) -> Option<bool>,
}

/// Computes the plan.
pub fn compute_pod_actions(
    spec: &PodSpec,
    record: &PodRecord,
    probes: &ProbeVerdicts,
) -> PodActions {
    let policy = spec.restart_policy.as_deref().unwrap_or("Always");
    let (init, sidecars) = init_actions(spec, record, policy, probes);
    let mut actions = PodActions {
        init,
        sidecars,
        containers: Vec::new(),
        stop_sidecars: false,
        ephemeral: super::ephemeral::to_start(spec, record),
    };
    if actions.init != InitStep::Done {
        return actions;
    }
    actions.containers = spec
        .containers
        .iter()
        .map(|c| {
            let action = container_action(c, record.latest(&c.name), policy, probes.must_restart);
            (c.name.clone(), action)
        })
        .collect();
    let app_running = spec.containers.iter().any(|c| {
        record
            .latest(&c.name)
            .is_some_and(|r| r.state == RecordState::Running)
    });
    let all_kept = actions
        .containers
        .iter()
        .all(|(_, a)| *a == ContainerAction::Keep);
    if !app_running && all_kept && !spec.containers.is_empty() && !actions.sidecars.is_empty() {
        actions.stop_sidecars = true;
        actions.sidecars.clear();
    }
    actions
}

/// Init containers in order (upstream `computeInitContainerActions`): regular ones run one at a
/// time, each to success; a sidecar's turn ends once it runs and its startup probe (if any)
/// passed, and from then on it is kept running. A container counts as past its turn when a
/// later init container or an app container has a record (the runtime may have removed the
/// records of completed init containers).
fn init_actions(
    spec: &PodSpec,
    record: &PodRecord,
    policy: &str,
    probes: &ProbeVerdicts,
) -> (InitStep, Vec<(String, ContainerAction)>) {
    let inits: Vec<&Container> = spec.init_containers.iter().flatten().collect();
    let app_started = spec
        .containers
        .iter()
        .any(|c| record.latest(&c.name).is_some());
    // past[i]: init container i's turn is over.
    let mut past = vec![app_started; inits.len()];
    for i in (0..inits.len().saturating_sub(1)).rev() {
        past[i] = past[i + 1] || record.latest(&inits[i + 1].name).is_some();
    }
    let mut sidecars = Vec::new();
    let mut step = InitStep::Done;
    for (i, c) in inits.iter().enumerate() {
        let name = c.name.clone();
        let latest = record.latest(&c.name);
        if is_sidecar(c) {
            let action = sidecar_action(c, latest, probes.must_restart);
            let keep = action == ContainerAction::Keep;
            sidecars.push((name.clone(), action));
            if past[i] {
                continue;
            }
            // Its turn: the next init container waits until it runs and has started.
            let started = latest.is_some_and(|r| {
                r.state == RecordState::Running
                    && (c.startup_probe.is_none() || (probes.started)(&r.id) == Some(true))
            });
            if keep && started {
                continue;
            }
            step = InitStep::Waiting { name };
            break;
        }
        if past[i] {
            continue;
        }
        match latest {
            Some(r) if r.state == RecordState::Exited && r.exit_code == 0 => continue,
            Some(r) if r.state == RecordState::Running => {
                step = InitStep::Waiting { name };
            }
            // Init containers are restarted on failure unless the pod's policy is Never.
            Some(r) if r.state == RecordState::Exited => {
                step = if policy == "Never" {
                    InitStep::Failed { name }
                } else {
                    let action = ContainerAction::Restart {
                        attempt: r.attempt + 1,
                        finished_at: r.finished_at,
                    };
                    InitStep::Next { name, action }
                };
            }
            Some(r) => {
                let action = ContainerAction::Start {
                    attempt: r.attempt + 1,
                };
                step = InitStep::Next { name, action };
            }
            None => {
                let action = ContainerAction::Start { attempt: 0 };
                step = InitStep::Next { name, action };
            }
        }
        break;
    }
    (step, sidecars)
}

/// A sidecar is kept running: restarted whenever it exits, whatever the pod's restart policy.
fn sidecar_action(
    c: &Container,
    latest: Option<&ContainerRecord>,
    must_restart: &dyn Fn(&str) -> Option<ProbeKind>,
) -> ContainerAction {
    container_action(c, latest, "Always", must_restart)
}

fn container_action(
    c: &Container,
    latest: Option<&ContainerRecord>,
    policy: &str,
    must_restart: &dyn Fn(&str) -> Option<ProbeKind>,
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

    fn not_started(_: &str) -> Option<bool> {
        None
    }

    /// Probes that found nothing to restart and no startup verdict yet.
    fn quiet() -> ProbeVerdicts<'static> {
        ProbeVerdicts {
            must_restart: &no_probe,
            started: &not_started,
        }
    }

    #[test]
    fn a_new_pod_starts_its_first_init_container_only() {
        let a = compute_pod_actions(
            &spec(&["i1", "i2"], &["app"], "Always"),
            &record(vec![]),
            &quiet(),
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
            compute_pod_actions(&s, &running, &quiet()).init,
            InitStep::Waiting { name: "i2".into() }
        );
        let done = record(vec![
            rec("i1", 0, RecordState::Exited, 0),
            rec("i2", 0, RecordState::Exited, 0),
        ]);
        let a = compute_pod_actions(&s, &done, &quiet());
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
                compute_pod_actions(&spec(&["i1"], &["a"], policy), &failed, &quiet()).init,
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
            compute_pod_actions(&spec(&["i1"], &["a"], "Never"), &failed, &quiet()).init,
            InitStep::Failed { name: "i1".into() }
        );
    }

    #[test]
    fn init_containers_are_not_rerun_once_an_app_container_started() {
        // The init container's record was garbage-collected; the app container ran.
        let r = record(vec![rec("a", 0, RecordState::Running, 0)]);
        let a = compute_pod_actions(&spec(&["i1"], &["a"], "Always"), &r, &quiet());
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
            let a = compute_pod_actions(&spec(&[], &["a"], policy), &r, &quiet());
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
        let verdict = |kind: ProbeKind| {
            let must_restart = move |_: &str| Some(kind);
            let p = ProbeVerdicts {
                must_restart: &must_restart,
                started: &not_started,
            };
            compute_pod_actions(&s, &r, &p)
        };
        let liveness = verdict(ProbeKind::Liveness);
        assert_eq!(liveness.containers[0].1, kill(KillReason::Liveness));
        let startup = verdict(ProbeKind::Startup);
        assert_eq!(startup.containers[0].1, kill(KillReason::Startup));
        let readiness = verdict(ProbeKind::Readiness);
        assert_eq!(readiness.containers[0].1, ContainerAction::Keep);

        let mut changed = s.clone();
        changed.containers[0].image = Some("busybox:2".into());
        let a = compute_pod_actions(&changed, &r, &quiet());
        assert_eq!(a.containers[0].1, kill(KillReason::DefinitionChanged));
        assert_eq!(
            KillReason::DefinitionChanged.message("a"),
            "Container a definition changed, will be restarted"
        );

        // No recorded hash: never restarted for its spec.
        let mut unhashed = rec("a", 0, RecordState::Running, 0);
        unhashed.hash.clear();
        let a = compute_pod_actions(&changed, &record(vec![unhashed]), &quiet());
        assert_eq!(a.containers[0].1, ContainerAction::Keep);
    }

    #[test]
    fn ephemeral_containers_start_once_even_while_init_containers_run() {
        let mut s = spec(&["i1"], &["app"], "Always");
        s.ephemeral_containers = Some(vec![k8s_openapi::api::core::v1::EphemeralContainer {
            name: "dbg".into(),
            image: Some("busybox".into()),
            ..Default::default()
        }]);
        let r = record(vec![rec("i1", 0, RecordState::Running, 0)]);
        let a = compute_pod_actions(&s, &r, &quiet());
        assert_eq!(a.init, InitStep::Waiting { name: "i1".into() });
        assert_eq!(a.ephemeral, vec!["dbg".to_string()]);
        // Exited: never restarted, and the app containers' plan ignores it.
        let r = record(vec![
            rec("app", 0, RecordState::Running, 0),
            rec("dbg", 0, RecordState::Exited, 1),
        ]);
        let a = compute_pod_actions(&s, &r, &quiet());
        assert!(a.ephemeral.is_empty());
        assert_eq!(a.containers, vec![("app".into(), ContainerAction::Keep)]);
    }

    #[test]
    fn a_container_created_but_never_started_is_replaced() {
        let r = record(vec![rec("a", 1, RecordState::Created, 0)]);
        let a = compute_pod_actions(&spec(&[], &["a"], "Never"), &r, &quiet());
        assert_eq!(
            a.containers[0].1,
            ContainerAction::Replace {
                old_id: "a-1".into(),
                attempt: 2
            }
        );
    }

    /// The records as started from `s` (their hashes match the spec).
    fn from_spec(s: &PodSpec, mut r: PodRecord) -> PodRecord {
        let all: Vec<&Container> = s
            .containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .collect();
        for c in &mut r.containers {
            if let Some(spec_c) = all.iter().find(|x| x.name == c.name) {
                c.hash = container_hash(spec_c);
            }
        }
        r
    }

    fn with_sidecars(s: &mut PodSpec, names: &[&str]) {
        for c in s.init_containers.iter_mut().flatten() {
            if names.contains(&c.name.as_str()) {
                c.restart_policy = Some("Always".into());
            }
        }
    }

    #[test]
    fn a_sidecar_starts_in_its_turn_and_the_next_init_container_waits_for_it() {
        let mut s = spec(&["init", "side", "late"], &["app"], "Never");
        with_sidecars(&mut s, &["side"]);
        // The regular init container first.
        let a = compute_pod_actions(&s, &record(vec![]), &quiet());
        assert_eq!(
            a.init,
            InitStep::Next {
                name: "init".into(),
                action: ContainerAction::Start { attempt: 0 }
            }
        );
        assert!(a.sidecars.is_empty());
        // Then the sidecar: started, and waited for.
        let r = from_spec(&s, record(vec![rec("init", 0, RecordState::Exited, 0)]));
        let a = compute_pod_actions(&s, &r, &quiet());
        assert_eq!(
            a.sidecars,
            vec![("side".into(), ContainerAction::Start { attempt: 0 })]
        );
        assert_eq!(
            a.init,
            InitStep::Waiting {
                name: "side".into()
            }
        );
        // Running without a startup probe: its turn is over, the next init container runs.
        let r = from_spec(
            &s,
            record(vec![
                rec("side", 0, RecordState::Running, 0),
                rec("init", 0, RecordState::Exited, 0),
            ]),
        );
        let a = compute_pod_actions(&s, &r, &quiet());
        assert_eq!(a.sidecars, vec![("side".into(), ContainerAction::Keep)]);
        assert_eq!(
            a.init,
            InitStep::Next {
                name: "late".into(),
                action: ContainerAction::Start { attempt: 0 }
            }
        );
    }

    #[test]
    fn a_sidecar_with_a_startup_probe_holds_the_next_container_until_it_passes() {
        let mut s = spec(&["side"], &["app"], "Always");
        with_sidecars(&mut s, &["side"]);
        s.init_containers.as_mut().unwrap()[0].startup_probe = Some(Default::default());
        let r = from_spec(&s, record(vec![rec("side", 0, RecordState::Running, 0)]));
        let a = compute_pod_actions(&s, &r, &quiet());
        assert_eq!(
            a.init,
            InitStep::Waiting {
                name: "side".into()
            }
        );
        assert!(a.containers.is_empty());
        let yes = |_: &str| Some(true);
        let p = ProbeVerdicts {
            must_restart: &no_probe,
            started: &yes,
        };
        let a = compute_pod_actions(&s, &r, &p);
        assert_eq!(a.init, InitStep::Done);
        assert_eq!(
            a.containers,
            vec![("app".into(), ContainerAction::Start { attempt: 0 })]
        );
    }

    #[test]
    fn a_sidecar_is_restarted_whatever_the_pod_policy_while_apps_run() {
        let mut s = spec(&["side"], &["app"], "Never");
        with_sidecars(&mut s, &["side"]);
        let r = from_spec(
            &s,
            record(vec![
                rec("app", 0, RecordState::Running, 0),
                rec("side", 1, RecordState::Exited, 0),
            ]),
        );
        let a = compute_pod_actions(&s, &r, &quiet());
        assert_eq!(a.init, InitStep::Done);
        assert_eq!(
            a.sidecars,
            vec![(
                "side".into(),
                ContainerAction::Restart {
                    attempt: 2,
                    finished_at: 3
                }
            )]
        );
        assert_eq!(a.containers, vec![("app".into(), ContainerAction::Keep)]);
        assert!(!a.stop_sidecars);
        // Its record gone after the pod initialized: started again.
        let r = from_spec(&s, record(vec![rec("app", 0, RecordState::Running, 0)]));
        let a = compute_pod_actions(&s, &r, &quiet());
        assert_eq!(
            a.sidecars,
            vec![("side".into(), ContainerAction::Start { attempt: 0 })]
        );
    }

    #[test]
    fn sidecars_stop_once_every_app_container_is_done_for_good() {
        let mut s = spec(&["side"], &["app"], "OnFailure");
        with_sidecars(&mut s, &["side"]);
        let r = from_spec(
            &s,
            record(vec![
                rec("app", 0, RecordState::Exited, 0),
                rec("side", 0, RecordState::Running, 0),
            ]),
        );
        let a = compute_pod_actions(&s, &r, &quiet());
        assert!(a.stop_sidecars);
        assert!(a.sidecars.is_empty());
        // A failed app container is restarted under OnFailure: the sidecar stays.
        let r = from_spec(
            &s,
            record(vec![
                rec("app", 0, RecordState::Exited, 1),
                rec("side", 0, RecordState::Running, 0),
            ]),
        );
        let a = compute_pod_actions(&s, &r, &quiet());
        assert!(!a.stop_sidecars);
        assert_eq!(a.sidecars, vec![("side".into(), ContainerAction::Keep)]);
        // Without sidecars there is nothing to stop.
        let plain = spec(&[], &["app"], "Never");
        let r = record(vec![rec("app", 0, RecordState::Exited, 0)]);
        assert!(!compute_pod_actions(&plain, &r, &quiet()).stop_sidecars);
    }
}
