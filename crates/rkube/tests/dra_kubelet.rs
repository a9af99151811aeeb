//! The kubelet's DRA side on a real node, with a small example driver written in Rust in this test
//! (`kubelet::dra::proto::serve`): it registers through the kubelet's `plugins_registry`
//! directory, prepares claims by returning a CDI device ID whose spec (written to a CDI spec
//! directory of the test's own, given to the node with `--containerd-cdi-spec-dirs`; never the
//! machine's /etc/cdi or /var/run/cdi) sets `EXAMPLE_GPU`; a pod bound to the node with a claim
//! allocated to that driver (by the test, as the scheduler would; the resource claim controller
//! reserves it for the pod) gets the variable in its container, and the claim is unprepared when
//! the pod goes. Across kubelet restarts the claim stays prepared (the `dra_manager_state`
//! checkpoint), and a pod deleted while the kubelet is down has its claim unprepared after.
//!
//! Needs root, containerd, runc, the CNI plugins and `scripts/images.sh`'s busybox (as `kubelet.rs`).

#[path = "support/real_node.rs"]
mod real_node;
mod support;

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubelet::dra::proto::*;
use real_node::{container_status, wait_for, RealNode, NODE};

const TIMEOUT: Duration = Duration::from_secs(120);
const DRIVER: &str = "gpu.example.com";

struct ExampleDriver {
    endpoint: String,
    cdi_id: String,
    registered: Mutex<Vec<bool>>,
    prepared: Mutex<Vec<String>>,
    unprepared: Mutex<Vec<String>>,
}

impl Driver for ExampleDriver {
    fn info(&self) -> PluginInfo {
        PluginInfo {
            r#type: DRA_PLUGIN_TYPE.into(),
            name: DRIVER.into(),
            endpoint: self.endpoint.clone(),
            supported_versions: vec!["v1.DRAPlugin".into()],
        }
    }
    fn registration_status(&self, status: RegistrationStatus) {
        self.registered
            .lock()
            .unwrap()
            .push(status.plugin_registered);
    }
    fn prepare(&self, claims: Vec<Claim>) -> NodePrepareResourcesResponse {
        let mut out = NodePrepareResourcesResponse::default();
        for c in claims {
            self.prepared.lock().unwrap().push(c.name.clone());
            let device = Device {
                request_names: vec!["gpu".into()],
                pool_name: NODE.into(),
                device_name: "gpu-0".into(),
                cdi_device_ids: vec![self.cdi_id.clone()],
            };
            out.claims.insert(
                c.uid,
                NodePrepareResourceResponse {
                    devices: vec![device],
                    error: String::new(),
                },
            );
        }
        out
    }
    fn unprepare(&self, claims: Vec<Claim>) -> NodeUnprepareResourcesResponse {
        let mut out = NodeUnprepareResourcesResponse::default();
        for c in claims {
            self.unprepared.lock().unwrap().push(c.name.clone());
            out.claims
                .insert(c.uid, NodeUnprepareResourceResponse::default());
        }
        out
    }
}

/// A real node whose CDI spec directory is `cdi_dir`, with the example driver registered and its
/// spec written there, and the pod `trainer` running with claim `gpu` allocated to the driver.
fn node_with_a_dra_pod(cdi_dir: &Path) -> (RealNode, Arc<ExampleDriver>) {
    let dir = cdi_dir.display().to_string();
    let node = RealNode::start_with(&["busybox"], &["--containerd-cdi-spec-dirs", &dir]);
    let kind = "example.com/gpu";
    std::fs::write(
        cdi_dir.join("example-gpu.json"),
        serde_json::json!({"cdiVersion": "0.6.0", "kind": kind, "devices": [
            {"name": "gpu-0", "containerEdits": {"env": ["EXAMPLE_GPU=gpu-0"]}}]})
        .to_string(),
    )
    .unwrap();

    let registry = node.data.join("kubelet/plugins_registry");
    wait_for("the plugin registry directory", TIMEOUT, || {
        registry.is_dir().then_some(())
    });
    let endpoint = node.data.join("dra-gpu.sock");
    let driver = Arc::new(ExampleDriver {
        endpoint: endpoint.display().to_string(),
        cdi_id: format!("{kind}=gpu-0"),
        registered: Mutex::default(),
        prepared: Mutex::default(),
        unprepared: Mutex::default(),
    });
    node.rt.block_on(async {
        for path in [&endpoint, &registry.join(format!("{DRIVER}-reg.sock"))] {
            let listener = tokio::net::UnixListener::bind(path).unwrap();
            let d: Arc<dyn Driver> = driver.clone();
            tokio::spawn(serve(listener, d));
        }
    });
    wait_for("the kubelet to register the driver", TIMEOUT, || {
        (*driver.registered.lock().unwrap() == [true]).then_some(())
    });

    node.apply(&format!(
        "apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {{name: {DRIVER}}}
spec:
  selectors: [{{cel: {{expression: 'device.driver == \"{DRIVER}\"'}}}}]
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: gpu}}
spec:
  devices:
    requests: [{{name: gpu, exactly: {{deviceClassName: {DRIVER}}}}}]
"
    ));
    node.kubectl(&[
        "patch",
        "resourceclaim",
        "gpu",
        "--subresource=status",
        "--type=merge",
        "-p",
        &serde_json::json!({"status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": "gpu-0"}]}}}})
        .to_string(),
    ]);
    node.apply(&format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: trainer}}
spec:
  nodeName: {NODE}
  terminationGracePeriodSeconds: 0
  resourceClaims: [{{name: gpu, resourceClaimName: gpu}}]
  containers:
  - name: c
    image: busybox
    command: [sh, -c, 'echo \"gpu=$EXAMPLE_GPU\"; sleep 3600']
    resources: {{claims: [{{name: gpu}}]}}
"
    ));
    (node, driver)
}

fn wait_running(node: &RealNode) -> serde_json::Value {
    node.wait_pod("trainer", "running", TIMEOUT, |p| {
        p["status"]["phase"] == "Running" && container_status(p, "c")["ready"] == true
    })
}

fn wait_log(node: &RealNode, pod: &serde_json::Value, attempt: u32) -> String {
    wait_for("the container's output", TIMEOUT, || {
        let log = node.log(pod, "c", attempt);
        log.contains("gpu=").then_some(log)
    })
}

fn wait_node_ready(node: &RealNode) {
    wait_for("the node to be Ready", TIMEOUT, || {
        let out = node.cluster.kubectl_output(
            &[
                "get",
                "node",
                NODE,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
            None,
        );
        (String::from_utf8_lossy(&out.stdout) == "True").then_some(())
    });
}

#[test]
fn the_example_driver_prepares_a_claim_and_its_env_reaches_the_container() {
    let cdi = tempfile::tempdir().unwrap();
    let (node, driver) = node_with_a_dra_pod(cdi.path());
    let pod = wait_running(&node);
    assert_eq!(*driver.prepared.lock().unwrap(), ["gpu"]);
    assert_eq!(wait_log(&node, &pod, 0).trim(), "gpu=gpu-0");
    // The containerd config rkube wrote names the test's directory, not the machine's.
    let config = std::fs::read_to_string(node.data.join("containerd/containerd.toml")).unwrap();
    assert!(
        config.contains(&format!("cdi_spec_dirs = [\"{}\"]", cdi.path().display())),
        "{config}"
    );

    node.kubectl(&["delete", "pod", "trainer", "--wait=false"]);
    wait_for("the claim to be unprepared", TIMEOUT, || {
        (*driver.unprepared.lock().unwrap() == ["gpu"]).then_some(())
    });
}

/// The kubelet restarts while the pod runs: the pod keeps running, the driver registers again
/// from the socket left in the registry directory, the claim is not prepared a second time, and
/// a container restarted afterwards still gets the device's environment (from the checkpoint).
/// Then the pod is deleted while the kubelet is down: once back, the kubelet unprepares its claim.
#[test]
fn prepared_claims_survive_kubelet_restarts() {
    let cdi = tempfile::tempdir().unwrap();
    let (mut node, driver) = node_with_a_dra_pod(cdi.path());
    let before = wait_running(&node);
    assert_eq!(wait_log(&node, &before, 0).trim(), "gpu=gpu-0");
    let checkpoint = node.data.join("kubelet/dra_manager_state");
    assert!(checkpoint.exists());

    node.cluster.restart();
    wait_node_ready(&node);
    wait_for("the driver to register again", TIMEOUT, || {
        (*driver.registered.lock().unwrap() == [true, true]).then_some(())
    });
    let after = wait_running(&node);
    let (b, a) = (
        container_status(&before, "c"),
        container_status(&after, "c"),
    );
    assert_eq!(a["containerID"], b["containerID"], "the same container");
    assert_eq!(a["restartCount"], 0);

    // The container dies; the restarted kubelet starts it again with the device's environment.
    let id = a["containerID"]
        .as_str()
        .unwrap()
        .trim_start_matches("containerd://")
        .to_string();
    let runtime = node.runtime();
    node.rt
        .block_on(
            runtime
                .runtime
                .clone()
                .stop_container(kubelet::cri::api::StopContainerRequest {
                    container_id: id,
                    timeout: 0,
                }),
        )
        .expect("StopContainer");
    let restarted = node.wait_pod("trainer", "restarted once", TIMEOUT, |p| {
        container_status(p, "c")["restartCount"].as_i64() >= Some(1)
            && container_status(p, "c")["state"]["running"].is_object()
    });
    assert_eq!(wait_log(&node, &restarted, 1).trim(), "gpu=gpu-0");
    assert_eq!(
        *driver.prepared.lock().unwrap(),
        ["gpu"],
        "prepared once across the restart"
    );
    assert!(driver.unprepared.lock().unwrap().is_empty());

    // The kubelet goes down; the pod is deleted meanwhile (forced: no kubelet confirms it).
    let with_kubelet = node.cluster.extra_args().to_vec();
    let mut without: Vec<String> = with_kubelet.clone();
    without.push("--disable-kubelet".into());
    node.cluster.restart_with(&without);
    node.kubectl(&["delete", "pod", "trainer", "--force", "--grace-period=0"]);
    assert!(driver.unprepared.lock().unwrap().is_empty());
    node.cluster.restart_with(&with_kubelet);
    wait_node_ready(&node);
    wait_for("the deleted pod's claim to be unprepared", TIMEOUT, || {
        (*driver.unprepared.lock().unwrap() == ["gpu"]).then_some(())
    });
    assert_eq!(*driver.prepared.lock().unwrap(), ["gpu"]);
    let state = std::fs::read_to_string(&checkpoint).unwrap();
    assert!(!state.contains("\\\"ClaimName\\\":\\\"gpu\\\""), "{state}");
    node.cleanup();
}
