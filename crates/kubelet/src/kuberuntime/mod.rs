//! The kubelet's use of CRI (upstream `pkg/kubelet/kuberuntime`): reading a pod's sandbox and container
//! attempts back from the runtime ([`pod_record`]), images ([`ensure_image`]), creating sandboxes and
//! containers, stopping and removing them. The decisions (what to start, kill, or wait for) are in
//! [`crate::sync`].

pub mod config;
pub mod container;
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

/// The termination message of an exited container (upstream `getTerminationMessage` + the
/// `FallbackToLogsOnError` policy): the file at `terminationMessagePath` (read through its host-side
/// mount), at most 4096 bytes; else, with the fallback policy and a failure, the log's tail.
fn termination_message(st: &api::ContainerStatus, ann: &HashMap<String, String>) -> String {
    if st.state != api::ContainerState::ContainerExited as i32 {
        return String::new();
    }
    let path = ann
        .get(labels::CONTAINER_TERMINATION_MESSAGE_PATH)
        .cloned()
        .unwrap_or_default();
    let mut message = String::new();
    if let Some(m) = st
        .mounts
        .iter()
        .find(|m| !path.is_empty() && m.container_path == path)
    {
        if let Ok(bytes) = std::fs::read(&m.host_path) {
            let n = bytes.len().min(4096);
            message = String::from_utf8_lossy(&bytes[..n]).into_owned();
        }
    }
    let policy = ann
        .get(labels::CONTAINER_TERMINATION_MESSAGE_POLICY)
        .map(String::as_str)
        .unwrap_or("File");
    if message.is_empty() && policy == "FallbackToLogsOnError" && st.exit_code != 0 {
        if let Ok(log) = std::fs::read(&st.log_path) {
            if let Ok(text) = crate::cri::logs::content(&log) {
                // Upstream: the last 80 lines, at most 2048 bytes.
                let text = String::from_utf8_lossy(&text).into_owned();
                let lines: Vec<&str> = text.lines().collect();
                let tail = lines[lines.len().saturating_sub(80)..].join("\n");
                let start = tail.len().saturating_sub(2048);
                let start = (start..=tail.len())
                    .find(|&i| tail.is_char_boundary(i))
                    .unwrap_or(tail.len());
                message = tail[start..].to_string();
            }
        }
    }
    message
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
