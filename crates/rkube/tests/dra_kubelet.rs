//! The kubelet's DRA side on a real node, with a small example driver written in Rust in this test
//! (`kubelet::dra::proto::serve`): it registers through the kubelet's `plugins_registry`
//! directory, prepares claims by returning a CDI device ID whose spec (written to `/var/run/cdi`,
//! removed at the end) sets `EXAMPLE_GPU`; a pod bound to the node with a claim allocated to that
//! driver (by the test, as the scheduler would; the resource claim controller reserves it for the
//! pod) gets the variable in its container, and the claim is unprepared when the pod goes.
//!
//! Needs root, containerd, runc, the CNI plugins and `scripts/images.sh`'s busybox (as `kubelet.rs`).

#[path = "support/real_node.rs"]
mod real_node;
mod support;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubelet::dra::proto::*;
use real_node::{wait_for, RealNode};

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
                pool_name: real_node::NODE.into(),
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

/// Removes the CDI spec this test wrote to the machine's CDI directory.
struct SpecFile(PathBuf);

impl Drop for SpecFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[test]
fn the_example_driver_prepares_a_claim_and_its_env_reaches_the_container() {
    let node = RealNode::start(&["busybox"]);
    let pid = std::process::id();
    // A kind and device of this run's own, so parallel runs and real specs do not mix.
    let kind = format!("rkube-test-{pid}.example.com/gpu");
    std::fs::create_dir_all("/var/run/cdi").unwrap();
    let spec = SpecFile(PathBuf::from(format!("/var/run/cdi/rkube-test-{pid}.json")));
    std::fs::write(
        &spec.0,
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
            {"request": "gpu", "driver": DRIVER, "pool": real_node::NODE, "device": "gpu-0"}]}}}})
        .to_string(),
    ]);
    node.apply(&format!(
        "apiVersion: v1
kind: Pod
metadata: {{name: trainer}}
spec:
  nodeName: {}
  terminationGracePeriodSeconds: 0
  resourceClaims: [{{name: gpu, resourceClaimName: gpu}}]
  containers:
  - name: c
    image: busybox
    command: [sh, -c, 'echo \"gpu=$EXAMPLE_GPU\"; sleep 3600']
    resources: {{claims: [{{name: gpu}}]}}
",
        real_node::NODE
    ));
    let pod = node.wait_pod("trainer", "running", TIMEOUT, |p| {
        p["status"]["phase"] == "Running"
    });
    assert_eq!(*driver.prepared.lock().unwrap(), ["gpu"]);
    let log = wait_for("the container's output", TIMEOUT, || {
        let log = node.log(&pod, "c", 0);
        log.contains("gpu=").then_some(log)
    });
    assert_eq!(log.trim(), "gpu=gpu-0");

    node.kubectl(&["delete", "pod", "trainer", "--wait=false"]);
    wait_for("the claim to be unprepared", TIMEOUT, || {
        (*driver.unprepared.lock().unwrap() == ["gpu"]).then_some(())
    });
}
