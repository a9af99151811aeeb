//! A real `rkube server` for integration tests: the built binary on a free loopback port with a
//! temporary data dir, driven with the real kubectl (KUBECONFIG = the kubeconfig it wrote) and with the
//! kube crate. With `RKUBE_TEST_STORAGE=etcd`-style variants, the same tests run on a local etcd.

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use storage::etcd_process::EtcdProcess;

/// How long the server may take to start.
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// Bound on any single kubectl invocation.
const KUBECTL_TIMEOUT: Duration = Duration::from_secs(60);

/// Flags for tests of the API itself: no scheduler or controllers writing to the objects under test,
/// but the ServiceAccount controller, without whose `default` ServiceAccounts no pod is admitted (as
/// upstream).
pub const API_ONLY: &[&str] = &[
    "--disable-scheduler",
    "--controllers=serviceaccount-controller",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    Sqlite,
    Etcd,
}

pub struct Cluster {
    pub backend: Backend,
    pub dir: tempfile::TempDir,
    pub kubeconfig: PathBuf,
    pub url: String,
    extra_args: Vec<String>,
    child: Option<Child>,
    etcd: Option<EtcdProcess>,
}

impl Cluster {
    /// The API server alone (see [`API_ONLY`]).
    pub fn start(backend: Backend) -> Cluster {
        Cluster::start_with(backend, &[])
    }

    /// Every component of `rkube server`, scheduler and controllers included, plus `extra_args`.
    pub fn start_all(backend: Backend, extra_args: &[&str]) -> Cluster {
        Cluster::start_components(backend, extra_args)
    }

    /// The API server alone with `extra_args`.
    pub fn start_with(backend: Backend, extra_args: &[&str]) -> Cluster {
        let mut args = API_ONLY.to_vec();
        args.extend_from_slice(extra_args);
        Cluster::start_components(backend, &args)
    }

    fn start_components(backend: Backend, extra_args: &[&str]) -> Cluster {
        // Tests get a real node (kubelet + containerd) only when they ask for one (see `kubelet.rs`).
        let mut args: Vec<&str> = extra_args.to_vec();
        if !args.contains(&"--pod-network-namespace") && !args.contains(&"--disable-kubelet") {
            args.push("--disable-kubelet");
        }
        // Likewise cluster DNS (its kube-dns Service takes an address of the service range).
        if !args.iter().any(|a| a.starts_with("--dns-")) {
            args.push("--disable-dns");
        }
        // And the local node's kube-proxy (its rules go into the test's pod network namespace).
        if !args.contains(&"--proxy-mode") {
            args.push("--disable-proxy");
        }
        Cluster::start_in(tempfile::tempdir().expect("tempdir"), backend, &args)
    }

    /// Starts `rkube server` with `extra_args` on an existing data dir (files placed there first).
    pub fn start_in(dir: tempfile::TempDir, backend: Backend, extra_args: &[&str]) -> Cluster {
        let etcd = match backend {
            Backend::Sqlite => None,
            Backend::Etcd => Some(EtcdProcess::start().unwrap_or_else(|e| panic!("{e}"))),
        };
        let mut cluster = Cluster {
            backend,
            kubeconfig: dir.path().join("admin.kubeconfig"),
            dir,
            url: String::new(),
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            child: None,
            etcd,
        };
        cluster.launch();
        cluster
    }

    fn launch(&mut self) {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rkube"));
        cmd.arg("server")
            .arg("--data-dir")
            .arg(self.dir.path())
            .arg("--secure-port")
            .arg("0")
            .args(&self.extra_args)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(etcd) = &self.etcd {
            cmd.arg("--storage")
                .arg("etcd")
                .arg("--etcd-servers")
                .arg(&etcd.endpoint);
        }
        let mut child = cmd.spawn().expect("start rkube server");
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !sent {
                    if let Some(rest) = line.strip_prefix("rkube: serving on ") {
                        let url = rest.split(' ').next().unwrap_or("").to_string();
                        let _ = tx.send(Ok(url));
                        sent = true;
                        continue;
                    }
                    let _ = tx.send(Err(line.clone()));
                }
                eprintln!("[rkube] {line}");
            }
        });
        let deadline = std::time::Instant::now() + START_TIMEOUT;
        let mut log = Vec::new();
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match rx.recv_timeout(left) {
                Ok(Ok(url)) => {
                    self.url = url;
                    break;
                }
                Ok(Err(line)) => log.push(line),
                Err(_) => {
                    let _ = child.kill();
                    panic!(
                        "rkube server did not start within {START_TIMEOUT:?}; stderr:\n{}",
                        log.join("\n")
                    );
                }
            }
        }
        self.child = Some(child);
    }

    /// Stops the server (SIGKILL).
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The server's process id (to signal it), while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Waits at most `timeout` for the server to exit by itself; its exit status, or None when it
    /// still runs (or was not running).
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            if let Ok(Some(status)) = self.child.as_mut()?.try_wait() {
                self.child = None;
                return Some(status);
            }
            if std::time::Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the server (SIGKILL when `kill`, else SIGTERM-like kill) and starts it again on the same data.
    pub fn restart(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.launch();
    }

    /// Restarts the server (SIGKILL) with `extra_args` in place of its current ones, which later
    /// restarts keep (e.g. to take the local node down while the control plane runs).
    #[allow(dead_code)] // Not every test binary that includes this module uses it.
    pub fn restart_with(&mut self, extra_args: &[String]) {
        self.extra_args = extra_args.to_vec();
        self.restart();
    }

    /// The `rkube server` flags it runs with (besides the data dir and port).
    #[allow(dead_code)]
    pub fn extra_args(&self) -> &[String] {
        &self.extra_args
    }

    pub fn kubectl_output(&self, args: &[&str], stdin: Option<&str>) -> Output {
        self.kubectl_with(args, stdin, &[])
    }

    /// kubectl as the user of a bearer `token` (no kubeconfig, no client certificate).
    #[allow(dead_code)] // Not every test binary that includes this module uses it.
    pub fn kubectl_as(&self, token: &str, args: &[&str], stdin: Option<&str>) -> Output {
        let mut all = vec![
            "--kubeconfig=/dev/null",
            "--server",
            self.url.as_str(),
            "--insecure-skip-tls-verify",
            "--token",
            token,
        ];
        all.extend_from_slice(args);
        self.kubectl_output(&all, stdin)
    }

    /// kubectl with extra environment variables (e.g. `EDITOR` for `kubectl edit`).
    pub fn kubectl_output_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        self.kubectl_with(args, None, env)
    }

    fn kubectl_with(&self, args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Output {
        let mut cmd = Command::new("kubectl");
        cmd.envs(env.iter().copied());
        cmd.args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.dir.path())
            .env_remove("KUBERNETES_SERVICE_HOST")
            .stdin(if stdin.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("kubectl is installed (v1.32)");
        if let Some(input) = stdin {
            let mut pipe = child.stdin.take().expect("stdin");
            pipe.write_all(input.as_bytes())
                .expect("write kubectl stdin");
        }
        wait_with_timeout(child, kubectl_timeout(args), args)
    }

    /// Runs kubectl and returns stdout; panics with stderr on failure.
    pub fn kubectl(&self, args: &[&str]) -> String {
        self.kubectl_in(args, None)
    }

    pub fn kubectl_in(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.kubectl_output(args, stdin);
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            panic!(
                "kubectl {} failed ({}):\nstdout: {stdout}\nstderr: {}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        stdout
    }

    /// Runs kubectl expecting failure; returns stderr.
    pub fn kubectl_fails(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.kubectl_output(args, stdin);
        assert!(
            !out.status.success(),
            "kubectl {} should have failed",
            args.join(" ")
        );
        String::from_utf8_lossy(&out.stderr).into_owned()
    }

    pub async fn client(&self) -> kube::Client {
        client::kubeconfig::client_from_file(&self.kubeconfig)
            .await
            .expect("kube client")
    }

    pub fn data_dir(&self) -> &Path {
        self.dir.path()
    }

    /// The etcd process of an etcd-backed cluster.
    pub fn etcd_pid(&self) -> Option<u32> {
        self.etcd.as_ref().map(|e| e.pid())
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// How long a kubectl run may take: [`KUBECTL_TIMEOUT`], or a `--timeout=<N>s` it was given plus
/// half a minute (`rollout status`, `wait`).
fn kubectl_timeout(args: &[&str]) -> Duration {
    args.iter()
        .filter_map(|a| {
            a.strip_prefix("--timeout=")?
                .strip_suffix('s')?
                .parse()
                .ok()
        })
        .map(|secs: u64| Duration::from_secs(secs + 30))
        .fold(KUBECTL_TIMEOUT, Duration::max)
}

fn wait_with_timeout(mut child: Child, timeout: Duration, args: &[&str]) -> Output {
    // The pipes are drained while kubectl runs: one holding more than the pipe's buffer (64 KiB)
    // would otherwise block kubectl until the timeout.
    fn drain(
        pipe: Option<impl std::io::Read + Send + 'static>,
    ) -> std::thread::JoinHandle<Vec<u8>> {
        std::thread::spawn(move || {
            let mut buf = Vec::new();
            if let Some(mut p) = pipe {
                let _ = p.read_to_end(&mut buf);
            }
            buf
        })
    }
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    let deadline = std::time::Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(20))
            }
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                let err = stderr.join().unwrap_or_default();
                panic!(
                    "kubectl {} did not finish within {timeout:?}; stderr: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&err)
                );
            }
        }
    };
    Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    }
}

/// A `--token-auth-file` holding `csv` (upstream's `token,user,uid,"group1,group2"` lines); kept
/// while the returned handle lives.
#[allow(dead_code)] // Not every test binary that includes this module uses it.
pub fn token_file(csv: &str) -> tempfile::NamedTempFile {
    let tokens = tempfile::NamedTempFile::new().expect("token file");
    std::fs::write(tokens.path(), csv).expect("write tokens");
    tokens
}

/// A small runtime for a test body (the tests themselves are plain `#[test]` functions).
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Generates a `_sqlite` and an `_etcd` variant of each test body `fn(Backend)`.
#[macro_export]
macro_rules! on_both_backends {
    ($($name:ident),* $(,)?) => {
        mod sqlite {
            $(
                #[test]
                fn $name() {
                    super::$name(super::support::Backend::Sqlite)
                }
            )*
        }
        mod etcd {
            $(
                #[test]
                fn $name() {
                    super::$name(super::support::Backend::Etcd)
                }
            )*
        }
    };
}

/// The 410 a watch of `api` from `rv` gets (an ERROR event first in the stream, as upstream's
/// watch cache answers, or the response's status); `None` when the watch is accepted (no error
/// within its first event or 5 s).
pub async fn watch_expired<K>(api: &kube::Api<K>, rv: &str) -> Option<kube::core::Status>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + 'static,
{
    use futures::StreamExt;
    let params = kube::api::WatchParams::default().timeout(2);
    let stream = match api.watch(&params, rv).await {
        Ok(s) => s,
        Err(kube::Error::Api(e)) if e.code == 410 => return Some(*e),
        Err(e) => panic!("watch from {rv}: {e}"),
    };
    futures::pin_mut!(stream);
    match tokio::time::timeout(Duration::from_secs(5), stream.next()).await {
        Ok(Some(Ok(kube::api::WatchEvent::Error(e)))) if e.code == 410 => Some(*e),
        _ => None,
    }
}
