//! The kubelet's use of CRI (upstream `pkg/kubelet/kuberuntime`): reading a pod's sandbox and container
//! attempts back from the runtime ([`pod_record`]), images ([`ensure_image`]), creating sandboxes and
//! containers, stopping and removing them. The decisions (what to start, kill, or wait for) are in
//! [`crate::sync`].

pub mod admit;
pub mod admit_fit;
pub mod config;
pub mod container;
pub mod ephemeral;
pub mod etc_hosts;
pub mod pod_actions;
pub mod pod_cgroup;
pub mod resize;
pub mod security_context;
pub mod status;

use std::collections::HashMap;

use crate::cri::{api, labels, CriError, Runtime};
use status::{ContainerRecord, PodRecord, RecordState};

/// Reads a pod's newest sandbox and all its container attempts (newest first) from the runtime.
pub async fn pod_record(runtime: &Runtime, uid: &str) -> Result<PodRecord, CriError> {
    let selector: HashMap<String, String> = [(labels::POD_UID.to_string(), uid.to_string())].into();
    let mut sandboxes = runtime
        .list_pod_sandboxes(Some(api::PodSandboxFilter {
            label_selector: selector.clone(),
            ..Default::default()
        }))
        .await?;
    sandboxes.sort_by_key(|s| std::cmp::Reverse(s.created_at));
    let mut record = PodRecord::default();
    if let Some(s) = sandboxes.first() {
        record.sandbox_id = Some(s.id.clone());
        record.sandbox_ready = s.state == api::PodSandboxState::SandboxReady as i32;
        if record.sandbox_ready {
            if let Ok(st) = runtime.pod_sandbox_status(&s.id).await {
                if let Some(net) = st.network {
                    if !net.ip.is_empty() {
                        record.pod_ips.push(net.ip);
                    }
                    record
                        .pod_ips
                        .extend(net.additional_ips.into_iter().map(|i| i.ip));
                }
            }
        }
    }
    let containers = runtime
        .list_containers(Some(api::ContainerFilter {
            label_selector: selector,
            ..Default::default()
        }))
        .await?;
    for c in containers {
        let st = match runtime.container_status(&c.id).await {
            Ok(st) => st,
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e),
        };
        record.containers.push(record_of(&c, &st));
    }
    record
        .containers
        .sort_by_key(|c| std::cmp::Reverse((c.attempt, c.created_at)));
    Ok(record)
}

fn record_of(c: &api::Container, st: &api::ContainerStatus) -> ContainerRecord {
    let state = match api::ContainerState::try_from(st.state) {
        Ok(api::ContainerState::ContainerCreated) => RecordState::Created,
        Ok(api::ContainerState::ContainerRunning) => RecordState::Running,
        Ok(api::ContainerState::ContainerExited) => RecordState::Exited,
        _ => RecordState::Unknown,
    };
    let ann = &c.annotations;
    ContainerRecord {
        id: c.id.clone(),
        name: c
            .labels
            .get(labels::CONTAINER_NAME)
            .cloned()
            .or_else(|| c.metadata.as_ref().map(|m| m.name.clone()))
            .unwrap_or_default(),
        attempt: ann
            .get(labels::CONTAINER_RESTART_COUNT)
            .and_then(|v| v.parse().ok())
            .or_else(|| c.metadata.as_ref().map(|m| m.attempt))
            .unwrap_or(0),
        state,
        created_at: st.created_at,
        started_at: st.started_at,
        finished_at: st.finished_at,
        exit_code: st.exit_code,
        reason: st.reason.clone(),
        message: termination_message(st, ann),
        image: c
            .image
            .as_ref()
            .map(|i| i.user_specified_image.clone())
            .filter(|i| !i.is_empty())
            .or_else(|| st.image.as_ref().map(|i| i.image.clone()))
            .unwrap_or_default(),
        image_ref: st.image_ref.clone(),
        hash: ann.get(labels::CONTAINER_HASH).cloned().unwrap_or_default(),
    }
}

/// upstream `MaxContainerTerminationMessageLength`: the file's last 4 KiB are the message.
const MAX_TERMINATION_MESSAGE: u64 = 4096;
/// upstream `MaxContainerTerminationMessageLogLength` / `...LogLines`: the log fallback's limits.
const MAX_TERMINATION_LOG_BYTES: usize = 2048;
const MAX_TERMINATION_LOG_LINES: usize = 80;
/// How much of a CRI log file the fallback reads: 80 lines of at most 2048 bytes of content plus
/// their CRI prefixes fit.
const MAX_TERMINATION_LOG_READ: u64 = 256 * 1024;

/// The last `max` bytes of a file (upstream `tail.ReadAtMost`), without reading the whole file.
fn read_at_most(path: &str, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path)?;
    let len = f.metadata()?.len();
    if len > max {
        f.seek(SeekFrom::Start(len - max))?;
    }
    let mut buf = Vec::with_capacity(len.min(max) as usize);
    f.take(max).read_to_end(&mut buf)?;
    Ok(buf)
}

/// The log fallback of a termination message (upstream `readLastStringFromContainerLogs`): the
/// last 80 lines of the container's output, of which the last 2048 bytes, newlines kept.
pub fn termination_log_tail(content: &[u8]) -> String {
    let mut starts: Vec<usize> = vec![0];
    for (i, b) in content.iter().enumerate() {
        if *b == b'\n' && i + 1 < content.len() {
            starts.push(i + 1);
        }
    }
    let first = starts[starts.len().saturating_sub(MAX_TERMINATION_LOG_LINES)];
    let tail = &content[first..];
    let tail = &tail[tail.len().saturating_sub(MAX_TERMINATION_LOG_BYTES)..];
    String::from_utf8_lossy(tail).into_owned()
}

/// The termination message of an exited container (upstream `getTerminationMessage` and the
/// `FallbackToLogsOnError` policy in `toKubeContainerStatus`): the file at `terminationMessagePath`
/// (read through its host-side mount), its last 4096 bytes; with the fallback policy, a failure
/// (not `ContainerCannotRun`) and an empty or missing file, the log's tail. A message is appended to
/// the runtime's own (`<runtime message>: <message>`).
fn termination_message(st: &api::ContainerStatus, ann: &HashMap<String, String>) -> String {
    if st.state != api::ContainerState::ContainerExited as i32 {
        return String::new();
    }
    let path = ann
        .get(labels::CONTAINER_TERMINATION_MESSAGE_PATH)
        .cloned()
        .unwrap_or_default();
    let policy = ann
        .get(labels::CONTAINER_TERMINATION_MESSAGE_POLICY)
        .map(String::as_str)
        .unwrap_or("File");
    let fallback =
        policy == "FallbackToLogsOnError" && st.exit_code != 0 && st.reason != "ContainerCannotRun";
    let mut check_logs = fallback;
    let mut message = String::new();
    if let Some(m) = st
        .mounts
        .iter()
        .find(|m| !path.is_empty() && m.container_path == path)
    {
        match read_at_most(&m.host_path, MAX_TERMINATION_MESSAGE) {
            Ok(bytes) => {
                check_logs = fallback && bytes.is_empty();
                message = String::from_utf8_lossy(&bytes).into_owned();
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                check_logs = false;
                message = format!("Error on reading termination log {}: {e}", m.host_path);
            }
        }
    }
    if check_logs {
        message = match read_at_most(&st.log_path, MAX_TERMINATION_LOG_READ)
            .map_err(|e| e.to_string())
            .and_then(|log| {
                // A read that starts inside the file drops its first, partial, line.
                let whole = std::fs::metadata(&st.log_path)
                    .map(|m| m.len() <= MAX_TERMINATION_LOG_READ)
                    .unwrap_or(true);
                let start = if whole {
                    0
                } else {
                    log.iter()
                        .position(|b| *b == b'\n')
                        .map_or(log.len(), |i| i + 1)
                };
                crate::cri::logs::content(&log[start..]).map_err(|e| e.to_string())
            }) {
            Ok(text) => termination_log_tail(&text),
            Err(e) => format!("Error on reading termination message from logs: {e}"),
        };
    }
    match (st.message.is_empty(), message.is_empty()) {
        (_, true) => st.message.clone(),
        (true, false) => message,
        (false, false) => format!("{}: {message}", st.message),
    }
}

/// The user an image runs as, from the runtime (upstream `getImageUser`); an image the runtime
/// cannot describe counts as root, as upstream's.
pub async fn image_user(runtime: &Runtime, image: &str) -> security_context::ImageUser {
    let status = runtime
        .images
        .clone()
        .image_status(api::ImageStatusRequest {
            image: Some(api::ImageSpec {
                image: image.to_string(),
                ..Default::default()
            }),
            verbose: false,
        })
        .await
        .ok()
        .and_then(|r| r.into_inner().image);
    security_context::ImageUser::from_image(status.as_ref())
}

/// Why an image cannot be used (the container's waiting reason and the event message).
#[derive(Debug, PartialEq)]
pub enum ImageError {
    NeverPull(String),
    Pull(String),
}

/// The image reference to create a container from: present locally, else pulled (upstream
/// `EnsureImageExists`). `IfNotPresent` and `Always` both use a present image: with no registry in
/// reach (the images are imported), an `Always` pull would only fail.
pub async fn ensure_image(
    runtime: &Runtime,
    image: &str,
    policy: &str,
) -> Result<String, ImageError> {
    let spec = api::ImageSpec {
        image: image.to_string(),
        ..Default::default()
    };
    let present = runtime
        .images
        .clone()
        .image_status(api::ImageStatusRequest {
            image: Some(spec.clone()),
            verbose: false,
        })
        .await
        .ok()
        .and_then(|r| r.into_inner().image);
    if let Some(img) = present {
        return Ok(img.id);
    }
    if policy == "Never" {
        return Err(ImageError::NeverPull(format!(
            "Container image \"{image}\" is not present with pull policy of Never"
        )));
    }
    let mut images = runtime.images.clone();
    let pull = images.pull_image(api::PullImageRequest {
        image: Some(spec),
        auth: None,
        sandbox_config: None,
    });
    match tokio::time::timeout(std::time::Duration::from_secs(60), pull).await {
        Ok(Ok(r)) => Ok(r.into_inner().image_ref),
        Ok(Err(status)) => Err(ImageError::Pull(format!(
            "failed to pull and unpack image \"{image}\": {}",
            status.message()
        ))),
        Err(_) => Err(ImageError::Pull(format!(
            "failed to pull image \"{image}\": timed out"
        ))),
    }
}

pub async fn run_sandbox(
    runtime: &Runtime,
    config: api::PodSandboxConfig,
) -> Result<String, CriError> {
    let resp = runtime
        .runtime
        .clone()
        .run_pod_sandbox(api::RunPodSandboxRequest {
            config: Some(config),
            runtime_handler: String::new(),
        })
        .await
        .map_err(|status| CriError::Call {
            call: "RunPodSandbox",
            status,
        })?;
    Ok(resp.into_inner().pod_sandbox_id)
}

pub async fn stop_sandbox(runtime: &Runtime, id: &str) -> Result<(), CriError> {
    match runtime
        .runtime
        .clone()
        .stop_pod_sandbox(api::StopPodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await
    {
        Ok(_) => Ok(()),
        Err(s) if s.code() == tonic::Code::NotFound => Ok(()),
        Err(status) => Err(CriError::Call {
            call: "StopPodSandbox",
            status,
        }),
    }
}

pub async fn remove_sandbox(runtime: &Runtime, id: &str) -> Result<(), CriError> {
    match runtime
        .runtime
        .clone()
        .remove_pod_sandbox(api::RemovePodSandboxRequest {
            pod_sandbox_id: id.to_string(),
        })
        .await
    {
        Ok(_) => Ok(()),
        Err(s) if s.code() == tonic::Code::NotFound => Ok(()),
        Err(status) => Err(CriError::Call {
            call: "RemovePodSandbox",
            status,
        }),
    }
}

/// Stops a container, giving it `timeout_secs` after its stop signal before SIGKILL.
pub async fn stop_container(
    runtime: &Runtime,
    id: &str,
    timeout_secs: i64,
) -> Result<(), CriError> {
    match runtime
        .runtime
        .clone()
        .stop_container(api::StopContainerRequest {
            container_id: id.to_string(),
            timeout: timeout_secs,
        })
        .await
    {
        Ok(_) => Ok(()),
        Err(s) if s.code() == tonic::Code::NotFound => Ok(()),
        Err(status) => Err(CriError::Call {
            call: "StopContainer",
            status,
        }),
    }
}

pub async fn remove_container(runtime: &Runtime, id: &str) -> Result<(), CriError> {
    match runtime
        .runtime
        .clone()
        .remove_container(api::RemoveContainerRequest {
            container_id: id.to_string(),
        })
        .await
    {
        Ok(_) => Ok(()),
        Err(s) if s.code() == tonic::Code::NotFound => Ok(()),
        Err(status) => Err(CriError::Call {
            call: "RemoveContainer",
            status,
        }),
    }
}

/// Runs `cmd` in a container and returns (exit code, stdout+stderr), within `timeout`.
pub async fn exec_sync(
    runtime: &Runtime,
    id: &str,
    cmd: Vec<String>,
    timeout: std::time::Duration,
) -> Result<(i32, Vec<u8>), CriError> {
    let mut client = runtime.runtime.clone();
    let call = client.exec_sync(api::ExecSyncRequest {
        container_id: id.to_string(),
        cmd,
        timeout: timeout.as_secs().max(1) as i64,
    });
    let resp = tokio::time::timeout(timeout + std::time::Duration::from_secs(2), call)
        .await
        .map_err(|_| CriError::Call {
            call: "ExecSync",
            status: tonic::Status::deadline_exceeded("command timed out"),
        })?
        .map_err(|status| CriError::Call {
            call: "ExecSync",
            status,
        })?
        .into_inner();
    let mut out = resp.stdout;
    out.extend_from_slice(&resp.stderr);
    Ok((resp.exit_code, out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn termination_log_tail_keeps_80_lines_and_2048_bytes() {
        assert_eq!(termination_log_tail(b"one\ntwo\n"), "one\ntwo\n");
        assert_eq!(termination_log_tail(b"no newline"), "no newline");
        let many: String = (0..100).map(|i| format!("{i}\n")).collect();
        let tail = termination_log_tail(many.as_bytes());
        assert!(
            tail.starts_with("20\n21\n") && tail.ends_with("99\n"),
            "{tail}"
        );
        let long = format!("{}\n{}\n", "a".repeat(3000), "b".repeat(100));
        let tail = termination_log_tail(long.as_bytes());
        assert_eq!(tail.len(), 2048);
        assert!(tail.ends_with(&format!("a\n{}\n", "b".repeat(100))));
    }

    #[test]
    fn termination_message_file_tail_and_fallback() {
        let dir = tempfile::tempdir().unwrap();
        let msg = dir.path().join("msg");
        std::fs::write(&msg, format!("{}end", "x".repeat(5000))).unwrap();
        let log = dir.path().join("0.log");
        std::fs::write(
            &log,
            "2026-01-01T00:00:00.000000000Z stdout F from the log\n",
        )
        .unwrap();
        let mut ann = HashMap::new();
        ann.insert(
            labels::CONTAINER_TERMINATION_MESSAGE_PATH.to_string(),
            "/dev/termination-log".to_string(),
        );
        let mut st = api::ContainerStatus {
            state: api::ContainerState::ContainerExited as i32,
            exit_code: 1,
            log_path: log.display().to_string(),
            mounts: vec![api::Mount {
                container_path: "/dev/termination-log".into(),
                host_path: msg.display().to_string(),
                ..Default::default()
            }],
            ..Default::default()
        };
        let m = termination_message(&st, &ann);
        assert_eq!(m.len(), 4096);
        assert!(m.ends_with("xend"));
        std::fs::write(&msg, "").unwrap();
        assert_eq!(termination_message(&st, &ann), "");
        ann.insert(
            labels::CONTAINER_TERMINATION_MESSAGE_POLICY.to_string(),
            "FallbackToLogsOnError".to_string(),
        );
        assert_eq!(termination_message(&st, &ann), "from the log\n");
        st.exit_code = 0;
        assert_eq!(termination_message(&st, &ann), "");
        st.exit_code = 1;
        st.message = "OOMKilled".into();
        assert_eq!(termination_message(&st, &ann), "OOMKilled: from the log\n");
    }
}
