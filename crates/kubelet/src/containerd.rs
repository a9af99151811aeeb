//! containerd as a child process, as k3s runs it (k3s `pkg/agent/containerd`): when `rkube server` is given
//! no `--container-runtime-endpoint` and containerd is installed, it writes a containerd config under its
//! data dir (own root, state and socket, so several instances and a system containerd coexist; the CRI
//! plugin with runc and the cgroupfs driver, `restrict_oom_score_adj` because this machine's root may
//! not lower oom_score_adj, the CNI bin dir of Debian's containernetworking-plugins and a conf dir the
//! kubelet writes), starts containerd, waits until it serves CRI, and imports every image archive found
//! in `<data-dir>/images/`.
//!
//! With a pod network namespace (see [`crate::netns`]), containerd runs inside it (`nsenter --net=`), so
//! the CNI bridge and every pod IP live there and not on the host.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::cri::Runtime;

/// Where Debian's containernetworking-plugins put the CNI plugins (upstream's default is /opt/cni/bin).
pub const DEBIAN_CNI_BIN_DIR: &str = "/usr/lib/cni";
/// The sandbox image of kubelet 1.33 (what `scripts/images.sh` builds).
pub const DEFAULT_SANDBOX_IMAGE: &str = "registry.k8s.io/pause:3.10";
/// The containerd namespace of CRI (Kubernetes) containers and images.
pub const K8S_NAMESPACE: &str = "k8s.io";

#[derive(Clone, Debug)]
pub struct ContainerdOptions {
    /// Root of everything containerd writes (config, root, state, socket).
    pub dir: PathBuf,
    pub cni_bin_dir: PathBuf,
    /// Where the kubelet writes the CNI network config once the node has a pod CIDR.
    pub cni_conf_dir: PathBuf,
    pub sandbox_image: String,
    /// Run containerd inside this network namespace (a file such as /run/netns/NAME).
    pub netns: Option<PathBuf>,
    /// containerd's `cdi_spec_dirs` (later ones override earlier ones).
    pub cdi_spec_dirs: Vec<PathBuf>,
}

impl ContainerdOptions {
    pub fn new(dir: &Path) -> ContainerdOptions {
        ContainerdOptions {
            dir: dir.to_path_buf(),
            cni_bin_dir: cni_bin_dir(),
            cni_conf_dir: dir.join("cni").join("net.d"),
            sandbox_image: DEFAULT_SANDBOX_IMAGE.into(),
            netns: None,
            cdi_spec_dirs: crate::dra::cdi::SPEC_DIRS.iter().map(Into::into).collect(),
        }
    }

    pub fn socket(&self) -> PathBuf {
        self.dir.join("containerd.sock")
    }

    pub fn endpoint(&self) -> String {
        format!("unix://{}", self.socket().display())
    }
}

/// The CNI plugin directory: Debian's, else upstream's /opt/cni/bin.
pub fn cni_bin_dir() -> PathBuf {
    let debian = Path::new(DEBIAN_CNI_BIN_DIR);
    if debian.join("bridge").exists() {
        debian.to_path_buf()
    } else {
        PathBuf::from("/opt/cni/bin")
    }
}

/// The containerd binary on PATH, if installed.
pub fn find_binary(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain([PathBuf::from("/usr/sbin"), PathBuf::from("/usr/bin")])
        .map(|d| d.join(name))
        .find(|p| p.is_file())
}

/// containerd 1.6's config (version 2) for these options.
pub fn config_toml(o: &ContainerdOptions) -> String {
    let q = |p: &Path| toml_string(&p.display().to_string());
    format!(
        r#"# Written by rkube; rewritten at every start.
version = 2
root = {root}
state = {state}

[grpc]
  address = {socket}

[ttrpc]
  address = {ttrpc}

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = {sandbox}
  # Root here may not lower oom_score_adj: keep containers' scores at or above containerd's own.
  restrict_oom_score_adj = true
  enable_selinux = false
  # A free port: several rkube instances may run on one machine.
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  enable_unprivileged_ports = true
  enable_unprivileged_icmp = true
  # CDI devices of DRA drivers (containerd 1.7+ applies them; 1.6 ignores both keys and the
  # kubelet applies the specs' environment itself from the same directories).
  enable_cdi = true
  cdi_spec_dirs = [{cdi_dirs}]

  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false

  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = {cni_bin}
    conf_dir = {cni_conf}
    max_conf_num = 1
"#,
        root = q(&o.dir.join("root")),
        state = q(&o.dir.join("state")),
        socket = q(&o.socket()),
        ttrpc = q(&o.dir.join("containerd.sock.ttrpc")),
        sandbox = toml_string(&o.sandbox_image),
        cni_bin = q(&o.cni_bin_dir),
        cni_conf = q(&o.cni_conf_dir),
        cdi_dirs = o
            .cdi_spec_dirs
            .iter()
            .map(|d| q(d))
            .collect::<Vec<_>>()
            .join(", "),
    )
}

/// A TOML basic string.
fn toml_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if c.is_control() => out.push_str(&format!("\\u{:04X}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A running containerd child. Dropping it stops containerd (the containers keep running in their
/// shims, as with a system containerd, so a restarted server adopts them).
pub struct Containerd {
    child: tokio::process::Child,
    pub options: ContainerdOptions,
}

impl Containerd {
    /// Writes the config and starts containerd; returns once it serves CRI (at most `timeout`).
    pub async fn start(
        options: ContainerdOptions,
        timeout: Duration,
    ) -> Result<Containerd, String> {
        let binary = find_binary("containerd").ok_or_else(|| {
            "containerd is not installed (Debian: apt-get install containerd runc containernetworking-plugins)"
                .to_string()
        })?;
        std::fs::create_dir_all(&options.cni_conf_dir)
            .map_err(|e| format!("create {}: {e}", options.cni_conf_dir.display()))?;
        let config = options.dir.join("containerd.toml");
        std::fs::write(&config, config_toml(&options))
            .map_err(|e| format!("write {}: {e}", config.display()))?;
        // A stale socket from a killed instance would make containerd fail to listen.
        let _ = std::fs::remove_file(options.socket());
        let log_path = options.dir.join("containerd.log");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)
            .map_err(|e| format!("open {}: {e}", log_path.display()))?;
        let log2 = log
            .try_clone()
            .map_err(|e| format!("open {}: {e}", log_path.display()))?;
        let mut cmd = match &options.netns {
            Some(ns) => {
                let mut c = tokio::process::Command::new("nsenter");
                c.arg(format!("--net={}", ns.display()))
                    .arg("--")
                    .arg(&binary);
                c
            }
            None => tokio::process::Command::new(&binary),
        };
        cmd.arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::from(log))
            .stderr(Stdio::from(log2))
            .kill_on_drop(true);
        // containerd dies with us even when we are killed (SIGKILL gives no chance to stop it), so a
        // restarted server does not find a stale one holding the socket.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("start {}: {e}", binary.display()))?;
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!(
                    "containerd exited ({status}) at start; its log: {}\n{}",
                    log_path.display(),
                    tail(&log_path, 20)
                ));
            }
            if options.socket().exists() && Runtime::connect(&options.endpoint()).await.is_ok() {
                return Ok(Containerd { child, options });
            }
            if Instant::now() > deadline {
                let _ = child.start_kill();
                return Err(format!(
                    "containerd did not serve CRI within {timeout:?}; its log: {}\n{}",
                    log_path.display(),
                    tail(&log_path, 20)
                ));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub fn endpoint(&self) -> String {
        self.options.endpoint()
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Imports every `*.tar` image archive in `dir` (OCI or docker archives) into the CRI namespace,
    /// with containerd's own `ctr`. Returns the archives imported; a bad archive is reported, not fatal.
    pub async fn import_images(&self, dir: &Path) -> Result<Vec<PathBuf>, String> {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return Ok(Vec::new());
        };
        let mut archives: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "tar"))
            .collect();
        archives.sort();
        if archives.is_empty() {
            return Ok(archives);
        }
        let ctr = find_binary("ctr").ok_or("ctr (from the containerd package) is not installed")?;
        let mut imported = Vec::new();
        for archive in archives {
            let out = tokio::process::Command::new(&ctr)
                .arg("--address")
                .arg(self.options.socket())
                .args(["--namespace", K8S_NAMESPACE, "images", "import"])
                .arg(&archive)
                .output()
                .await
                .map_err(|e| format!("run {}: {e}", ctr.display()))?;
            if out.status.success() {
                imported.push(archive);
            } else {
                tracing::error!(
                    archive = %archive.display(),
                    error = %String::from_utf8_lossy(&out.stderr).trim(),
                    "image import failed"
                );
            }
        }
        Ok(imported)
    }
}

fn tail(path: &Path, lines: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_names_its_own_paths() {
        let mut o = ContainerdOptions::new(Path::new("/data/x \"y\""));
        o.cni_bin_dir = PathBuf::from("/usr/lib/cni");
        let toml = config_toml(&o);
        for want in [
            r#"address = "/data/x \"y\"/containerd.sock""#,
            r#"root = "/data/x \"y\"/root""#,
            r#"conf_dir = "/data/x \"y\"/cni/net.d""#,
            r#"bin_dir = "/usr/lib/cni""#,
            "restrict_oom_score_adj = true",
            "SystemdCgroup = false",
            r#"sandbox_image = "registry.k8s.io/pause:3.10""#,
            "enable_cdi = true",
            r#"cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]"#,
        ] {
            assert!(toml.contains(want), "missing {want} in\n{toml}");
        }
        o.cdi_spec_dirs = vec![PathBuf::from("/tmp/cdi")];
        assert!(config_toml(&o).contains(r#"cdi_spec_dirs = ["/tmp/cdi"]"#));
    }

    #[test]
    fn toml_strings() {
        assert_eq!(toml_string("a"), "\"a\"");
        assert_eq!(toml_string("a\"b\\c"), "\"a\\\"b\\\\c\"");
        assert_eq!(toml_string("a\nb"), "\"a\\u000Ab\"");
    }
}
