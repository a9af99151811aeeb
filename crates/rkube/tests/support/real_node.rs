//! A cluster whose one node is real, for tests that need running containers: `rkube server` with its
//! local node (containerd started as a child, in a network namespace the test creates, pods in a
//! cgroup tree of their own), images built by `scripts/images.sh` (found in `target/images`, or
//! `$RKUBE_IMAGES_DIR`). Needs root, containerd, runc and the CNI plugins (scripts/test.sh installs
//! them). Nodes of one test binary start one at a time.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::support::{Backend, Cluster};

static SERIAL: Mutex<()> = Mutex::new(());
static COUNTER: AtomicUsize = AtomicUsize::new(0);
pub const NODE: &str = "rkube-node";

pub fn images_dir() -> PathBuf {
    std::env::var_os("RKUBE_IMAGES_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/images"))
}

/// A cluster whose one node is real.
pub struct RealNode {
    pub cluster: Cluster,
    pub netns: String,
    pub cgroup_root: String,
    pub data: PathBuf,
    cleaned: bool,
    pub rt: tokio::runtime::Runtime,
    _serial: std::sync::MutexGuard<'static, ()>,
}

pub fn wait_for<T>(what: &str, timeout: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

impl RealNode {
    pub fn start(images: &[&str]) -> RealNode {
        RealNode::start_with(images, &[])
    }

    /// `n` real nodes (`rkube server --nodes n`), named [`NODE`], `NODE-1`, ..., each in a network
    /// namespace of its own joined by one the server makes (all named after [`RealNode::netns`]).
    pub fn start_nodes(n: usize, images: &[&str], extra_args: &[&str]) -> RealNode {
        let count = n.to_string();
        let mut args = vec!["--nodes", count.as_str()];
        args.extend_from_slice(extra_args);
        let node = RealNode::start_with(images, &args);
        for i in 1..n {
            let name = format!("{NODE}-{i}");
            wait_for(
                &format!("node {name} to be Ready"),
                Duration::from_secs(120),
                || {
                    let out = node.cluster.kubectl_output(
                        &[
                            "get",
                            "node",
                            &name,
                            "-o",
                            "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
                        ],
                        None,
                    );
                    (String::from_utf8_lossy(&out.stdout) == "True").then_some(())
                },
            );
        }
        node
    }

    /// A node with `images` imported, and more `rkube server` flags.
    pub fn start_with(images: &[&str], extra_args: &[&str]) -> RealNode {
        let serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
        assert!(
            kubelet::containerd::find_binary("containerd").is_some(),
            "containerd is not installed (scripts/test.sh installs it)"
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().to_path_buf();
        std::fs::create_dir_all(data.join("images")).unwrap();
        std::fs::create_dir_all(data.join("manifests")).unwrap();
        for image in ["pause"].iter().chain(images) {
            let src = images_dir().join(format!("{image}.tar"));
            assert!(
                src.exists(),
                "{} is missing: run scripts/images.sh",
                src.display()
            );
            let dst = data.join("images").join(format!("{image}.tar"));
            if std::fs::hard_link(&src, &dst).is_err() {
                std::fs::copy(&src, &dst).expect("copy image archive");
            }
        }
        let id = format!(
            "{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        );
        let netns = format!("rkt-{id}");
        let cgroup_root = format!("/rkube-test-{id}");
        let manifests = data.join("manifests").display().to_string();
        let args = [
            "--pod-network-namespace",
            &netns,
            "--node-ip",
            "127.0.0.1",
            "--node-name",
            NODE,
            "--cgroup-root",
            &cgroup_root,
            "--pod-manifest-path",
            &manifests,
            "--file-check-frequency",
            "2s",
            "--kubelet-port",
            "0",
            "--kubelet-address",
            "127.0.0.1",
        ];
        let mut all: Vec<&str> = args.to_vec();
        all.extend_from_slice(extra_args);
        let cluster = Cluster::start_in(dir, Backend::Sqlite, &all);
        let node = RealNode {
            cluster,
            netns,
            cgroup_root,
            data,
            cleaned: false,
            rt: crate::support::runtime(),
            _serial: serial,
        };
        wait_for("the node to be Ready", Duration::from_secs(120), || {
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
        node
    }

    pub fn kubectl(&self, args: &[&str]) -> String {
        self.cluster.kubectl(args)
    }

    pub fn apply(&self, yaml: &str) {
        self.cluster.kubectl_in(&["apply", "-f", "-"], Some(yaml));
    }

    pub fn pod(&self, name: &str) -> Option<Value> {
        let out = self
            .cluster
            .kubectl_output(&["get", "pod", name, "-o", "json"], None);
        out.status
            .success()
            .then(|| serde_json::from_slice(&out.stdout).ok())
            .flatten()
    }

    pub fn wait_pod(
        &self,
        name: &str,
        what: &str,
        timeout: Duration,
        mut f: impl FnMut(&Value) -> bool,
    ) -> Value {
        wait_for(&format!("pod {name}: {what}"), timeout, || {
            self.pod(name).filter(|p| f(p))
        })
    }

    /// The content of a container attempt's CRI log file.
    pub fn log(&self, pod: &Value, container: &str, attempt: u32) -> String {
        let dir = self.data.join("kubelet/pod-logs").join(format!(
            "default_{}_{}",
            pod["metadata"]["name"].as_str().unwrap_or(""),
            pod["metadata"]["uid"].as_str().unwrap_or("")
        ));
        let file = dir.join(container).join(format!("{attempt}.log"));
        let raw = std::fs::read(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        String::from_utf8(kubelet::cri::logs::content(&raw).expect("CRI log format"))
            .expect("utf-8")
    }

    pub fn events(&self) -> String {
        self.kubectl(&[
            "get",
            "events",
            "-o",
            "custom-columns=REASON:.reason,MESSAGE:.message",
        ])
    }

    pub fn runtime(&self) -> kubelet::cri::Runtime {
        let endpoint = format!(
            "unix://{}",
            self.data.join("containerd/containerd.sock").display()
        );
        self.rt
            .block_on(kubelet::cri::Runtime::connect(&endpoint))
            .expect("CRI")
    }

    /// Everything the node left on the machine goes: pods (through the kubelet while it runs), then
    /// whatever remains in its cgroups, shims, mounts, and its network namespace.
    pub fn cleanup(&mut self) {
        if std::mem::replace(&mut self.cleaned, true) {
            return;
        }
        // Workloads first, so their controllers do not make new pods (and sandboxes) while the
        // node is being emptied.
        let _ = self.cluster.kubectl_output(
            &[
                "delete",
                "deployments,daemonsets,statefulsets,replicasets,replicationcontrollers,jobs,cronjobs",
                "--all",
                "-A",
                "--wait=false",
            ],
            None,
        );
        let _ = self.cluster.kubectl_output(
            &[
                "delete",
                "pods",
                "--all",
                "-A",
                "--force",
                "--grace-period=0",
                "--wait=false",
            ],
            None,
        );
        if let Ok(entries) = std::fs::read_dir(self.data.join("manifests")) {
            for e in entries.flatten() {
                let _ = std::fs::remove_file(e.path());
            }
        }
        let sock = self.data.join("containerd/containerd.sock");
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            let out = std::process::Command::new("ctr")
                .arg("--address")
                .arg(&sock)
                // Running tasks, not containers: the kubelet stops a deleted pod's containers at
                // once but removes them later (container GC), so the container list does not empty.
                .args(["-n", "k8s.io", "tasks", "ls", "-q"])
                .output();
            match out {
                Ok(o) if o.status.success() && o.stdout.iter().all(|b| b.is_ascii_whitespace()) => {
                    break
                }
                Ok(o) if !o.status.success() => break,
                _ => std::thread::sleep(Duration::from_millis(300)),
            }
        }
        // Node 0's containerd, and with `--nodes` each other node's (`<data>/nodes/<name>/`).
        let mut sockets = vec![sock];
        if let Ok(nodes) = std::fs::read_dir(self.data.join("nodes")) {
            sockets.extend(
                nodes
                    .flatten()
                    .map(|n| n.path().join("containerd/containerd.sock"))
                    .filter(|s| s.exists()),
            );
        }
        for sock in &sockets {
            self.remove_sandboxes(sock);
        }
        self.cluster.stop();
        sweep(&self.data, &self.cgroup_root, &self.netns);
    }
}

impl RealNode {
    /// Removes every pod sandbox through the CRI, which tears its network down and deletes its
    /// `cni-*` namespace (those live in the machine's `/run/netns`, outside the node's own).
    /// Waiting for the tasks to end is not enough: containerd 1.6 removes the namespace only after
    /// the sandbox's task has ended, so stopping containerd then left one namespace per pod behind
    /// (hundreds after a full test run).
    fn remove_sandboxes(&self, sock: &Path) {
        let endpoint = format!("unix://{}", sock.display());
        self.rt.block_on(async {
            let work = async {
                let runtime = kubelet::cri::Runtime::connect(&endpoint).await.ok()?;
                for sandbox in runtime.list_pod_sandboxes(None).await.ok()? {
                    let request = kubelet::cri::api::RemovePodSandboxRequest {
                        pod_sandbox_id: sandbox.id,
                    };
                    let _ = runtime.runtime.clone().remove_pod_sandbox(request).await;
                }
                Some(())
            };
            let _ = tokio::time::timeout(Duration::from_secs(30), work).await;
        });
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// Kills what a node left: processes in its cgroups and its containerd shims, then unmounts what is
/// mounted under its data dir and deletes its network namespace.
fn sweep(data: &Path, cgroup_root: &str, netns: &str) {
    let data_s = data.display().to_string();
    if let Ok(procs) = std::fs::read_dir("/proc") {
        for p in procs.flatten() {
            let Ok(pid) = p.file_name().to_string_lossy().parse::<i32>() else {
                continue;
            };
            let cmdline = std::fs::read(p.path().join("cmdline")).unwrap_or_default();
            let cmdline = String::from_utf8_lossy(&cmdline);
            if cmdline.contains("containerd-shim") && cmdline.contains(&data_s) {
                unsafe { libc_kill(pid) };
            }
        }
    }
    let mut cgroups = Vec::new();
    if let Ok(hierarchies) = std::fs::read_dir("/sys/fs/cgroup") {
        for h in hierarchies.flatten() {
            collect_dirs(
                &h.path().join(cgroup_root.trim_start_matches('/')),
                &mut cgroups,
            );
        }
    }
    for dir in &cgroups {
        for pid in std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
        {
            if let Ok(pid) = pid.trim().parse::<i32>() {
                unsafe { libc_kill(pid) };
            }
        }
    }
    cgroups.sort_by_key(|d| std::cmp::Reverse(d.components().count()));
    for _ in 0..20 {
        cgroups.retain(|d| std::fs::remove_dir(d).is_err() && d.exists());
        if cgroups.is_empty() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut mounts: Vec<&str> = mountinfo
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|m| m.starts_with(&data_s))
        .collect();
    mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
    for m in mounts {
        let _ = std::process::Command::new("umount")
            .args(["-l", m])
            .output();
    }
    // The node's namespace, and with several nodes theirs and the fabric's (`<netns>-...`).
    let mut namespaces = vec![netns.to_string()];
    if let Ok(entries) = std::fs::read_dir("/run/netns") {
        let prefix = format!("{netns}-");
        namespaces.extend(
            entries
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix)),
        );
    }
    for ns in namespaces {
        let _ = std::process::Command::new("ip")
            .args(["netns", "del", &ns])
            .output();
    }
}

fn collect_dirs(dir: &Path, out: &mut Vec<PathBuf>) {
    if !dir.is_dir() {
        return;
    }
    out.push(dir.to_path_buf());
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            if e.path().is_dir() {
                collect_dirs(&e.path(), out);
            }
        }
    }
}

unsafe fn libc_kill(pid: i32) {
    extern "C" {
        fn kill(pid: i32, sig: i32) -> i32;
    }
    kill(pid, 9);
}

pub fn container_status<'a>(pod: &'a Value, name: &str) -> &'a Value {
    pod["status"]["containerStatuses"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["name"] == name))
        .unwrap_or(&Value::Null)
}

pub fn condition(pod: &Value, type_: &str) -> String {
    pod["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == type_))
        .and_then(|c| c["status"].as_str())
        .unwrap_or("")
        .to_string()
}
