//! The CRI client (upstream `k8s.io/cri-client` `remote_runtime.go` / `remote_image.go`): the gRPC
//! `runtime.v1` RuntimeService and ImageService of a container runtime (containerd) over its unix socket,
//! plus the lookups other parts of the kubelet (and its HTTPS server) need: a pod's sandbox and a
//! container by namespace / pod name / container name.
//!
//! Differences from upstream: no per-call timeouts wrapper object (callers use `tokio::time::timeout`
//! where a call may hang), and no v1alpha2 fallback (containerd 1.6 serves v1).
//!
//! ```no_run
//! # async fn demo() -> Result<(), kubelet::cri::CriError> {
//! let runtime = kubelet::cri::Runtime::connect("unix:///run/containerd/containerd.sock").await?;
//! if let Some(c) = runtime.find_container("default", "web-0", "nginx").await? {
//!     let status = runtime.container_status(&c.id).await?;
//!     println!("logs of {} are in {}", c.id, status.log_path);
//! }
//! # Ok(()) }
//! ```

pub mod labels;
pub mod logs;

use std::path::PathBuf;

use hyper_util::rt::TokioIo;
use tonic::transport::{Channel, Endpoint, Uri};

/// The CRI v1 messages (`runtime.v1`), re-exported so callers need not depend on `k8s-cri` themselves.
pub use k8s_cri::v1 as api;

/// The RuntimeService client over the runtime's socket.
pub type RuntimeServiceClient = api::runtime_service_client::RuntimeServiceClient<Channel>;
/// The ImageService client over the runtime's socket.
pub type ImageServiceClient = api::image_service_client::ImageServiceClient<Channel>;

/// Messages larger than gRPC's default 4 MiB come back from ListContainers/ListImages on busy nodes;
/// upstream's CRI client allows 16 MiB.
const MAX_MESSAGE_SIZE: usize = 16 * 1024 * 1024;

#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("container runtime endpoint {endpoint:?}: {message}")]
    Connect { endpoint: String, message: String },
    #[error("CRI {call}: {status}")]
    Call {
        call: &'static str,
        status: tonic::Status,
    },
    #[error("CRI {call}: the runtime's answer lacks {what}")]
    Incomplete {
        call: &'static str,
        what: &'static str,
    },
}

impl CriError {
    /// The gRPC code of a failed call (NotFound means the object is gone).
    pub fn code(&self) -> Option<tonic::Code> {
        match self {
            CriError::Call { status, .. } => Some(status.code()),
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.code() == Some(tonic::Code::NotFound)
    }
}

fn call(call: &'static str) -> impl FnOnce(tonic::Status) -> CriError {
    move |status| CriError::Call { call, status }
}

/// The socket path of an endpoint given as `unix:///path` or a plain `/path`.
pub fn socket_path(endpoint: &str) -> Result<PathBuf, CriError> {
    let path = endpoint.strip_prefix("unix://").unwrap_or(endpoint);
    if !path.starts_with('/') {
        return Err(CriError::Connect {
            endpoint: endpoint.to_string(),
            message: "only unix sockets are supported (unix:///path/to/socket)".into(),
        });
    }
    Ok(PathBuf::from(path))
}

/// A connected container runtime: both CRI services on one HTTP/2 connection. Cheap to clone (clones
/// share the connection).
#[derive(Clone)]
pub struct Runtime {
    pub runtime: RuntimeServiceClient,
    pub images: ImageServiceClient,
    pub endpoint: String,
}

impl Runtime {
    /// Connects to `endpoint` (`unix:///run/containerd/containerd.sock`) and checks that it speaks
    /// CRI v1 (a `Version` call).
    pub async fn connect(endpoint: &str) -> Result<Runtime, CriError> {
        let path = socket_path(endpoint)?;
        let fail = |message: String| CriError::Connect {
            endpoint: endpoint.to_string(),
            message,
        };
        // The URI is a placeholder: the connector ignores it and dials the socket.
        let channel = Endpoint::try_from("http://[::1]:50051")
            .map_err(|e| fail(e.to_string()))?
            .connect_timeout(std::time::Duration::from_secs(10))
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let path = path.clone();
                async move {
                    let stream = tokio::net::UnixStream::connect(&path).await?;
                    Ok::<_, std::io::Error>(TokioIo::new(stream))
                }
            }))
            .await
            .map_err(|e| fail(format!("{e} ({e:?})")))?;
        let runtime = Runtime {
            runtime: RuntimeServiceClient::new(channel.clone())
                .max_decoding_message_size(MAX_MESSAGE_SIZE)
                .max_encoding_message_size(MAX_MESSAGE_SIZE),
            images: ImageServiceClient::new(channel)
                .max_decoding_message_size(MAX_MESSAGE_SIZE)
                .max_encoding_message_size(MAX_MESSAGE_SIZE),
            endpoint: endpoint.to_string(),
        };
        runtime.version().await?;
        Ok(runtime)
    }

    /// The runtime's name and version (`containerd`, `v1.6.20`) and the CRI version it serves.
    pub async fn version(&self) -> Result<api::VersionResponse, CriError> {
        let resp = self
            .runtime
            .clone()
            .version(api::VersionRequest {
                version: "v1".into(),
            })
            .await
            .map_err(call("Version"))?;
        Ok(resp.into_inner())
    }

    /// The runtime's conditions (RuntimeReady, NetworkReady).
    pub async fn status(&self) -> Result<api::RuntimeStatus, CriError> {
        self.status_response()
            .await?
            .status
            .ok_or(CriError::Incomplete {
                call: "Status",
                what: "status",
            })
    }

    /// The whole `Status` answer: conditions, runtime handlers and the runtime's features.
    pub async fn status_response(&self) -> Result<api::StatusResponse, CriError> {
        let resp = self
            .runtime
            .clone()
            .status(api::StatusRequest { verbose: false })
            .await
            .map_err(call("Status"))?;
        Ok(resp.into_inner())
    }

    /// Every pod sandbox the runtime knows, optionally filtered.
    pub async fn list_pod_sandboxes(
        &self,
        filter: Option<api::PodSandboxFilter>,
    ) -> Result<Vec<api::PodSandbox>, CriError> {
        let resp = self
            .runtime
            .clone()
            .list_pod_sandbox(api::ListPodSandboxRequest { filter })
            .await
            .map_err(call("ListPodSandbox"))?;
        Ok(resp.into_inner().items)
    }

    /// Every container the runtime knows, optionally filtered.
    pub async fn list_containers(
        &self,
        filter: Option<api::ContainerFilter>,
    ) -> Result<Vec<api::Container>, CriError> {
        let resp = self
            .runtime
            .clone()
            .list_containers(api::ListContainersRequest { filter })
            .await
            .map_err(call("ListContainers"))?;
        Ok(resp.into_inner().containers)
    }

    pub async fn pod_sandbox_status(&self, id: &str) -> Result<api::PodSandboxStatus, CriError> {
        let resp = self
            .runtime
            .clone()
            .pod_sandbox_status(api::PodSandboxStatusRequest {
                pod_sandbox_id: id.to_string(),
                verbose: false,
            })
            .await
            .map_err(call("PodSandboxStatus"))?;
        resp.into_inner().status.ok_or(CriError::Incomplete {
            call: "PodSandboxStatus",
            what: "status",
        })
    }

    /// A container's status: state, exit code, reason, times, image, and `log_path` (the CRI log file,
    /// see [`logs`]).
    pub async fn container_status(&self, id: &str) -> Result<api::ContainerStatus, CriError> {
        let resp = self
            .runtime
            .clone()
            .container_status(api::ContainerStatusRequest {
                container_id: id.to_string(),
                verbose: false,
            })
            .await
            .map_err(call("ContainerStatus"))?;
        resp.into_inner().status.ok_or(CriError::Incomplete {
            call: "ContainerStatus",
            what: "status",
        })
    }

    /// The sandbox of pod `namespace/name`: the ready one if any, else the newest. Sandboxes carry the
    /// kubelet's labels (see [`labels`]), so pods of any kubelet on this runtime are found.
    pub async fn find_pod_sandbox(
        &self,
        namespace: &str,
        name: &str,
    ) -> Result<Option<api::PodSandbox>, CriError> {
        let filter = api::PodSandboxFilter {
            label_selector: [
                (labels::POD_NAMESPACE.to_string(), namespace.to_string()),
                (labels::POD_NAME.to_string(), name.to_string()),
            ]
            .into(),
            ..Default::default()
        };
        let sandboxes = self.list_pod_sandboxes(Some(filter)).await?;
        Ok(newest_preferring(
            sandboxes,
            |s| s.state == api::PodSandboxState::SandboxReady as i32,
            |s| s.created_at,
        ))
    }

    /// Container `container` of pod `namespace/pod`: the running one if any, else the newest (the last
    /// one that ran, as `kubectl logs` of a finished pod wants).
    pub async fn find_container(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
    ) -> Result<Option<api::Container>, CriError> {
        let containers = self.pod_containers(namespace, pod, Some(container)).await?;
        Ok(newest_preferring(
            containers,
            |c| c.state == api::ContainerState::ContainerRunning as i32,
            |c| c.created_at,
        ))
    }

    /// Every container (all attempts, any state) of pod `namespace/pod`, optionally only those named
    /// `container`, newest first.
    pub async fn pod_containers(
        &self,
        namespace: &str,
        pod: &str,
        container: Option<&str>,
    ) -> Result<Vec<api::Container>, CriError> {
        let mut selector: std::collections::HashMap<String, String> = [
            (labels::POD_NAMESPACE.to_string(), namespace.to_string()),
            (labels::POD_NAME.to_string(), pod.to_string()),
        ]
        .into();
        if let Some(c) = container {
            selector.insert(labels::CONTAINER_NAME.to_string(), c.to_string());
        }
        let mut containers = self
            .list_containers(Some(api::ContainerFilter {
                label_selector: selector,
                ..Default::default()
            }))
            .await?;
        containers.sort_by_key(|c| std::cmp::Reverse(c.created_at));
        Ok(containers)
    }
}

/// The item for which `preferred` holds, newest first; else the newest.
fn newest_preferring<T>(
    items: Vec<T>,
    preferred: impl Fn(&T) -> bool,
    created: impl Fn(&T) -> i64,
) -> Option<T> {
    items
        .into_iter()
        .max_by_key(|item| (preferred(item), created(item)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn socket_paths() {
        for (endpoint, want) in [
            (
                "unix:///run/containerd/containerd.sock",
                Some("/run/containerd/containerd.sock"),
            ),
            ("/tmp/x.sock", Some("/tmp/x.sock")),
            ("tcp://127.0.0.1:1234", None),
            ("unix://relative.sock", None),
        ] {
            let got = socket_path(endpoint).ok();
            assert_eq!(got.as_deref(), want.map(std::path::Path::new), "{endpoint}");
        }
    }

    #[test]
    fn newest_preferring_picks_preferred_then_newest() {
        let items = vec![(false, 5), (true, 1), (true, 3), (false, 9)];
        assert_eq!(newest_preferring(items, |i| i.0, |i| i.1), Some((true, 3)));
        let items = vec![(false, 5), (false, 9)];
        assert_eq!(newest_preferring(items, |i| i.0, |i| i.1), Some((false, 9)));
        assert_eq!(
            newest_preferring(Vec::<(bool, i64)>::new(), |i| i.0, |i| i.1),
            None
        );
    }

    #[tokio::test]
    async fn connect_to_a_missing_socket_is_a_clear_error() {
        let dir = tempfile::tempdir().unwrap();
        let endpoint = format!("unix://{}/none.sock", dir.path().display());
        let err = Runtime::connect(&endpoint).await.err().expect("must fail");
        assert!(err.to_string().contains("none.sock"), "{err}");
    }
}
