//! The labels and annotations the kubelet puts on CRI sandboxes and containers (upstream
//! `pkg/kubelet/types/labels.go` and `pkg/kubelet/kuberuntime/labels.go`). Labels identify the pod and
//! container (and are what `ListPodSandbox`/`ListContainers` filter on); annotations carry what the
//! kubelet must know again after a restart (restart count, hash of the spec, termination message
//! settings, grace period, preStop hook), so a restarted kubelet adopts running containers.
//!
//! The names are upstream's, so `crictl` shows our pods as it shows a kubelet's.

pub const POD_NAME: &str = "io.kubernetes.pod.name";
pub const POD_NAMESPACE: &str = "io.kubernetes.pod.namespace";
pub const POD_UID: &str = "io.kubernetes.pod.uid";
pub const CONTAINER_NAME: &str = "io.kubernetes.container.name";

pub const POD_DELETION_GRACE_PERIOD: &str = "io.kubernetes.pod.deletionGracePeriod";
pub const POD_TERMINATION_GRACE_PERIOD: &str = "io.kubernetes.pod.terminationGracePeriod";
pub const CONTAINER_HASH: &str = "io.kubernetes.container.hash";
pub const CONTAINER_RESTART_COUNT: &str = "io.kubernetes.container.restartCount";
pub const CONTAINER_TERMINATION_MESSAGE_PATH: &str =
    "io.kubernetes.container.terminationMessagePath";
pub const CONTAINER_TERMINATION_MESSAGE_POLICY: &str =
    "io.kubernetes.container.terminationMessagePolicy";
pub const CONTAINER_PRE_STOP_HANDLER: &str = "io.kubernetes.container.preStopHandler";
pub const CONTAINER_PORTS: &str = "io.kubernetes.container.ports";
/// Ours: `init` for init containers, so status can tell them apart after a kubelet restart (upstream
/// reads the pod spec instead; a spec whose init and app containers share a name is invalid anyway).
pub const CONTAINER_TYPE: &str = "io.kubernetes.container.type";
