//! Ephemeral containers (`kubectl debug`), as upstream's kubelet runs them: the pure decisions.
//!
//! - Started once (upstream `computePodActions`' `EphemeralContainersToStart`: every ephemeral
//!   container the runtime has no record of), even while init containers run or fail; never
//!   restarted, never killed on their own; they go with the pod (its kill stops every container).
//! - Started in the pod's sandbox; with `targetContainerName` the container joins that
//!   container's PID namespace (CRI `NamespaceOption.pid = TARGET`, `target_id`), unless the pod
//!   shares one PID namespace already (upstream only switches a `CONTAINER` mode to `TARGET`). The
//!   target must be running, else the start fails with upstream's "unable to find target
//!   container" and is retried at the next sync.
//! - Reported in `status.ephemeralContainerStatuses`: waiting / running / terminated like other
//!   containers, never ready, without `started` (upstream's prober does not touch them).

use k8s_openapi::api::core::v1::{Container, EphemeralContainer, Pod, PodSpec};
use serde_json::Value;

use super::status::{container_status, PodRecord, RecordState, StatusInputs};
use crate::cri::api;

/// An ephemeral container as the `Container` the rest of the kubelet starts (upstream casts
/// `EphemeralContainerCommon` to `v1.Container`): the same fields without `targetContainerName`.
pub fn as_container(e: &EphemeralContainer) -> Container {
    let mut v = serde_json::to_value(e).unwrap_or(Value::Null);
    if let Some(m) = v.as_object_mut() {
        m.remove("targetContainerName");
    }
    serde_json::from_value(v).unwrap_or_else(|_| Container {
        name: e.name.clone(),
        image: e.image.clone(),
        ..Default::default()
    })
}

fn ephemeral<'a>(spec: &'a PodSpec, name: &str) -> Option<&'a EphemeralContainer> {
    spec.ephemeral_containers
        .iter()
        .flatten()
        .find(|e| e.name == name)
}

/// The pod's ephemeral container `name` as a `Container`.
pub fn container(pod: &Pod, name: &str) -> Option<Container> {
    ephemeral(pod.spec.as_ref()?, name).map(as_container)
}

/// The ephemeral containers to start in this sync, in spec order: those the runtime has no
/// attempt of (upstream `EphemeralContainersToStart`; one attempt ever, whatever became of it).
pub fn to_start(spec: &PodSpec, record: &PodRecord) -> Vec<String> {
    spec.ephemeral_containers
        .iter()
        .flatten()
        .filter(|e| record.latest(&e.name).is_none())
        .map(|e| e.name.clone())
        .collect()
}

/// Why an ephemeral container cannot start yet.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    /// Upstream `getTargetID`'s message: the target has no running attempt.
    #[error("unable to find target container {0}")]
    NotRunning(String),
}

/// Puts container `name` in its target's PID namespace when it is an ephemeral container with
/// `targetContainerName` (upstream `getTargetID` + `generateLinuxContainerConfig`). Other
/// containers' configs are left alone.
pub fn set_target(
    pod: &Pod,
    name: &str,
    record: &PodRecord,
    config: &mut api::ContainerConfig,
) -> Result<(), TargetError> {
    let Some(target) = pod
        .spec
        .as_ref()
        .and_then(|s| ephemeral(s, name))
        .and_then(|e| e.target_container_name.as_deref())
        .filter(|t| !t.is_empty())
    else {
        return Ok(());
    };
    let id = record
        .latest(target)
        .filter(|r| r.state == RecordState::Running)
        .map(|r| r.id.clone())
        .ok_or_else(|| TargetError::NotRunning(target.to_string()))?;
    let ns = config
        .linux
        .get_or_insert_with(Default::default)
        .security_context
        .get_or_insert_with(Default::default)
        .namespace_options
        .get_or_insert_with(Default::default);
    if ns.pid == api::NamespaceMode::Container as i32 {
        ns.pid = api::NamespaceMode::Target as i32;
        ns.target_id = id;
    }
    Ok(())
}

/// `status.ephemeralContainerStatuses`, None when the pod has no ephemeral containers.
pub fn statuses(spec: &PodSpec, record: &PodRecord, inputs: &StatusInputs) -> Option<Value> {
    let list = spec
        .ephemeral_containers
        .as_ref()
        .filter(|l| !l.is_empty())?;
    let out = list
        .iter()
        .map(|e| {
            let mut s = container_status(&as_container(e), record, inputs, false);
            s["ready"] = Value::Bool(false);
            if let Some(m) = s.as_object_mut() {
                m.remove("started");
            }
            s
        })
        .collect();
    Some(Value::Array(out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kuberuntime::status::ContainerRecord;
    use serde_json::json;

    fn pod(pid: Option<&str>) -> Pod {
        let mut spec = json!({
            "containers": [{"name": "app", "image": "busybox"}],
            "ephemeralContainers": [
                {"name": "dbg", "image": "busybox", "targetContainerName": "app",
                 "command": ["sh"], "stdin": true, "tty": true},
                {"name": "plain", "image": "busybox"}
            ]
        });
        match pid {
            Some("share") => spec["shareProcessNamespace"] = json!(true),
            Some("host") => spec["hostPID"] = json!(true),
            _ => {}
        }
        serde_json::from_value(json!({"metadata": {"name": "p", "uid": "u"}, "spec": spec}))
            .unwrap()
    }

    fn rec(name: &str, state: RecordState) -> ContainerRecord {
        ContainerRecord {
            id: format!("{name}-id"),
            name: name.into(),
            attempt: 0,
            state,
            created_at: 1,
            started_at: 2,
            finished_at: if state == RecordState::Exited { 3 } else { 0 },
            exit_code: 0,
            reason: String::new(),
            message: String::new(),
            image: "docker.io/library/busybox:latest".into(),
            image_ref: "sha256:b".into(),
            hash: String::new(),
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

    #[test]
    fn the_container_keeps_every_field_but_the_target() {
        let c = container(&pod(None), "dbg").unwrap();
        assert_eq!(c.name, "dbg");
        assert_eq!(c.command, Some(vec!["sh".to_string()]));
        assert_eq!((c.stdin, c.tty), (Some(true), Some(true)));
        assert!(container(&pod(None), "app").is_none());
    }

    #[test]
    fn each_is_started_once_whatever_became_of_it() {
        let p = pod(None);
        let spec = p.spec.as_ref().unwrap();
        assert_eq!(to_start(spec, &record(vec![])), vec!["dbg", "plain"]);
        // Exited, or created and never started: never started again.
        let r = record(vec![
            rec("dbg", RecordState::Exited),
            rec("plain", RecordState::Created),
        ]);
        assert!(to_start(spec, &r).is_empty());
        let r = record(vec![rec("dbg", RecordState::Running)]);
        assert_eq!(to_start(spec, &r), vec!["plain"]);
        assert!(to_start(&PodSpec::default(), &record(vec![])).is_empty());
    }

    fn config() -> api::ContainerConfig {
        api::ContainerConfig {
            linux: Some(api::LinuxContainerConfig {
                security_context: Some(api::LinuxContainerSecurityContext {
                    namespace_options: Some(api::NamespaceOption {
                        pid: api::NamespaceMode::Container as i32,
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn pid_of(c: &api::ContainerConfig) -> (i32, String) {
        let ns = c
            .linux
            .as_ref()
            .unwrap()
            .security_context
            .as_ref()
            .unwrap()
            .namespace_options
            .as_ref()
            .unwrap();
        (ns.pid, ns.target_id.clone())
    }

    #[test]
    fn a_target_shares_its_running_containers_pid_namespace() {
        let running = record(vec![rec("app", RecordState::Running)]);
        let mut c = config();
        set_target(&pod(None), "dbg", &running, &mut c).unwrap();
        assert_eq!(
            pid_of(&c),
            (api::NamespaceMode::Target as i32, "app-id".to_string())
        );
        // Without a target, or for another container: untouched.
        for name in ["plain", "app"] {
            let mut c = config();
            set_target(&pod(None), name, &running, &mut c).unwrap();
            assert_eq!(pid_of(&c), pid_of(&config()));
        }
        // A pod-wide (or host) PID namespace stays as it is.
        for mode in [api::NamespaceMode::Pod, api::NamespaceMode::Node] {
            let mut c = config();
            let ns = c.linux.as_mut().unwrap().security_context.as_mut().unwrap();
            ns.namespace_options.as_mut().unwrap().pid = mode as i32;
            set_target(&pod(Some("share")), "dbg", &running, &mut c).unwrap();
            assert_eq!(pid_of(&c), (mode as i32, String::new()));
        }
    }

    #[test]
    fn a_target_that_does_not_run_refuses_the_start() {
        for r in [
            record(vec![]),
            record(vec![rec("app", RecordState::Exited)]),
        ] {
            let err = set_target(&pod(None), "dbg", &r, &mut config()).unwrap_err();
            assert_eq!(err.to_string(), "unable to find target container app");
        }
    }

    #[test]
    fn statuses_are_never_ready_and_have_no_started() {
        let p = pod(None);
        let spec = p.spec.as_ref().unwrap();
        let r = record(vec![
            rec("app", RecordState::Running),
            rec("dbg", RecordState::Running),
        ]);
        let s = statuses(spec, &r, &StatusInputs::default()).unwrap();
        assert_eq!(s[0]["name"], "dbg");
        assert_eq!(s[0]["ready"], false);
        assert!(s[0].get("started").is_none());
        assert!(s[0]["state"]["running"]["startedAt"].is_string());
        assert_eq!(s[0]["containerID"], "containerd://dbg-id");
        assert_eq!(s[1]["state"]["waiting"]["reason"], "ContainerCreating");
        let r = record(vec![rec("dbg", RecordState::Exited)]);
        let s = statuses(spec, &r, &StatusInputs::default()).unwrap();
        assert_eq!(s[0]["state"]["terminated"]["reason"], "Completed");
        assert_eq!(s[0]["ready"], false);
        assert!(statuses(&PodSpec::default(), &r, &StatusInputs::default()).is_none());
    }
}
