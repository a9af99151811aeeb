//! The rkube kubelet (upstream `pkg/kubelet`): registers its Node, keeps it alive, and runs the pods bound
//! to it through a CRI runtime (containerd).
//!
//! API for other parts of rkube (the kubelet's HTTPS server in [`server`] included):
//! - [`cri::Runtime::connect`] gives the CRI clients (`runtime`: `RuntimeServiceClient`, `images`:
//!   `ImageServiceClient`) over the runtime's unix socket; clones share the connection.
//! - [`cri::Runtime::find_pod_sandbox`] / [`cri::Runtime::find_container`] /
//!   [`cri::Runtime::pod_containers`] find a pod's sandbox and containers by namespace, pod name and
//!   container name (the labels in [`cri::labels`]).
//! - [`cri::logs`]: where container log files are and their CRI format; `ContainerStatus.log_path`
//!   (from [`cri::Runtime::container_status`]) is a container's file.

pub mod certificate;
pub mod config;
pub mod containerd;
pub mod cri;
pub mod dra;
pub mod envvars;
pub mod hash;
pub mod kubelet;
pub mod kuberuntime;
pub mod machine;
pub mod netns;
pub mod node;
pub mod podconfig;
pub mod prober;
pub mod server;
pub mod stats;
pub mod status_manager;
pub mod sync;
pub mod volumes;

pub use config::KubeletConfig;
pub use kubelet::run;
