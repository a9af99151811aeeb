//! A local single-member etcd server, for tests and benchmarks: the real `etcd` binary (Debian's
//! `etcd-server` package) on free loopback ports with its own data directory, killed when dropped.
//! Never the default ports 2379/2380: something else on the machine may hold them.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long etcd gets to elect itself leader and report healthy.
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// Another process can take a port between our probe releasing it and etcd binding it; retry then.
const START_ATTEMPTS: usize = 3;

/// A running etcd server. `endpoint` is its client URL, e.g. `http://127.0.0.1:40123`.
pub struct EtcdProcess {
    pub endpoint: String,
    child: Child,
    log_path: PathBuf,
    // Removed after the process is killed (fields drop after `Drop::drop`).
    _dir: tempfile::TempDir,
}

impl EtcdProcess {
    /// Starts etcd (fsync on, as in production) and waits until it answers its health check.
    pub fn start() -> Result<EtcdProcess, String> {
        let mut last_log = String::new();
        for _ in 0..START_ATTEMPTS {
            match try_start()? {
                Ok(server) => return Ok(server),
                Err(log) => last_log = log,
            }
        }
        Err(format!(
            "etcd could not bind its ports after {START_ATTEMPTS} attempts; last log:\n{last_log}"
        ))
    }

    /// The value of a Prometheus gauge or counter from etcd's `/metrics`.
    pub fn metric(&self, name: &str) -> Option<f64> {
        let body = http_get(&self.endpoint, "/metrics").ok()?;
        body.lines()
            .filter(|line| !line.starts_with('#'))
            .find_map(|line| {
                let (metric, value) = line.split_once(' ')?;
                (metric == name).then(|| value.trim().parse().ok())?
            })
    }

    /// What etcd has logged so far (for failure messages).
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log_path).unwrap_or_default()
    }

    /// The process id, e.g. to read its memory use.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    pub fn data_dir(&self) -> &Path {
        self._dir.path()
    }
}

impl Drop for EtcdProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `Ok(Err(log))`: the start failed because a port was taken (retry); `Err`: it cannot work.
fn try_start() -> Result<Result<EtcdProcess, String>, String> {
    let dir =
        tempfile::tempdir().map_err(|e| format!("cannot create a directory for etcd: {e}"))?;
    let data_dir = dir.path().join("data");
    let log_path = dir.path().join("etcd.log");
    let log =
        std::fs::File::create(&log_path).map_err(|e| format!("cannot create etcd's log: {e}"))?;

    // Hold both listeners at once so the two ports differ, then release them for etcd.
    let (client_port, peer_port) = {
        let bind = || {
            TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .map_err(|e| format!("cannot bind a loopback port: {e}"))
        };
        let (client, peer) = (bind()?, bind()?);
        (client.port(), peer.port())
    };
    let client_url = format!("http://127.0.0.1:{client_port}");
    let peer_url = format!("http://127.0.0.1:{peer_port}");

    let member = MemberSpec {
        name: "rkube-local",
        data_dir: &data_dir,
        client_url: &client_url,
        peer_url: &peer_url,
        initial_cluster: &format!("rkube-local={peer_url}"),
    };
    // A lone member need not wait the default 1-2 s before electing itself.
    let child = spawn_member(
        &member,
        &["--heartbeat-interval=50", "--election-timeout=250"],
        log,
    )?;
    let mut server = EtcdProcess {
        endpoint: client_url,
        child,
        log_path,
        _dir: dir,
    };

    let deadline = Instant::now() + START_TIMEOUT;
    loop {
        if let Ok(Some(status)) = server.child.try_wait() {
            let log = server.log();
            if log.contains("address already in use") {
                return Ok(Err(log));
            }
            return Err(format!(
                "etcd exited during startup ({status}); its log:\n{log}"
            ));
        }
        if let Ok(body) = http_get(&server.endpoint, "/health") {
            if body.contains("\"health\":\"true\"") {
                return Ok(Ok(server));
            }
        }
        if Instant::now() > deadline {
            return Err(format!(
                "etcd at {} did not become healthy within {START_TIMEOUT:?}; its log:\n{}",
                server.endpoint,
                server.log()
            ));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// What one etcd member is called and where it listens.
struct MemberSpec<'a> {
    name: &'a str,
    data_dir: &'a Path,
    client_url: &'a str,
    peer_url: &'a str,
    /// etcd's `--initial-cluster`: `name=peer-url,...` of every member.
    initial_cluster: &'a str,
}

/// Starts one etcd member (the single server and each cluster member alike) with its output in
/// `log`, plus `extra` flags.
fn spawn_member(m: &MemberSpec, extra: &[&str], log: std::fs::File) -> Result<Child, String> {
    let log_err = log.try_clone().map_err(|e| e.to_string())?;
    let mut command = Command::new("etcd");
    // Stray ETCD_* variables would override or conflict with our flags.
    for (name, _) in std::env::vars_os() {
        if name.to_string_lossy().starts_with("ETCD_") {
            command.env_remove(name);
        }
    }
    if std::env::consts::ARCH == "aarch64" {
        // etcd 3.4 refuses to start on arm64 without this.
        command.env("ETCD_UNSUPPORTED_ARCH", "arm64");
    }
    command
        .arg(format!("--name={}", m.name))
        .arg(format!("--data-dir={}", m.data_dir.display()))
        .arg(format!("--listen-client-urls={}", m.client_url))
        .arg(format!("--advertise-client-urls={}", m.client_url))
        .arg(format!("--listen-peer-urls={}", m.peer_url))
        .arg(format!("--initial-advertise-peer-urls={}", m.peer_url))
        .arg(format!("--initial-cluster={}", m.initial_cluster))
        // Ignored by a member restarted on its data directory, as in production.
        .arg("--initial-cluster-state=new")
        .arg("--logger=zap")
        .arg("--log-outputs=stderr")
        .args(extra)
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    command.spawn().map_err(|e| {
        if e.kind() == std::io::ErrorKind::NotFound {
            "the `etcd` binary is not on PATH; scripts/test.sh installs it \
             (Debian package etcd-server)"
                .to_string()
        } else {
            format!("cannot start etcd: {e}")
        }
    })
}

/// A minimal HTTP/1.0 GET (no client dependency): the response body.
fn http_get(endpoint: &str, path: &str) -> std::io::Result<String> {
    let address = endpoint.trim_start_matches("http://");
    let mut stream = TcpStream::connect(address)?;
    stream.set_read_timeout(Some(Duration::from_secs(2)))?;
    stream.set_write_timeout(Some(Duration::from_secs(2)))?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: {address}\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    match response.split_once("\r\n\r\n") {
        Some((head, body)) if head.starts_with("HTTP/1.") && head.contains(" 200 ") => {
            Ok(body.to_string())
        }
        _ => Err(std::io::Error::other(format!(
            "unexpected response from {endpoint}{path}"
        ))),
    }
}

/// A local etcd cluster of several members on loopback (issue 22's failure tests): each member can
/// be killed and started again on its data directory, and the leader is found from `/metrics`.
pub struct EtcdCluster {
    members: Vec<Member>,
    _dir: tempfile::TempDir,
}

struct Member {
    name: String,
    client_url: String,
    peer_url: String,
    data_dir: PathBuf,
    log_path: PathBuf,
    child: Option<Child>,
}

impl EtcdCluster {
    /// Starts `size` members (etcd's default timings: 100 ms heartbeats, 1 s election timeout) and
    /// waits until every one answers its health check (which needs a leader).
    pub fn start(size: usize) -> Result<EtcdCluster, String> {
        let dir = tempfile::tempdir().map_err(|e| format!("cannot create a directory: {e}"))?;
        // Hold every listener at once so the ports differ, then release them for etcd.
        let ports = {
            let listeners = (0..size * 2)
                .map(|_| TcpListener::bind("127.0.0.1:0"))
                .collect::<std::io::Result<Vec<_>>>()
                .map_err(|e| format!("cannot bind a loopback port: {e}"))?;
            listeners
                .iter()
                .map(|l| l.local_addr().map(|a| a.port()))
                .collect::<std::io::Result<Vec<_>>>()
                .map_err(|e| e.to_string())?
        };
        let members: Vec<Member> = (0..size)
            .map(|i| Member {
                name: format!("m{}", i + 1),
                client_url: format!("http://127.0.0.1:{}", ports[2 * i]),
                peer_url: format!("http://127.0.0.1:{}", ports[2 * i + 1]),
                data_dir: dir.path().join(format!("m{}", i + 1)),
                log_path: dir.path().join(format!("m{}.log", i + 1)),
                child: None,
            })
            .collect();
        let mut cluster = EtcdCluster { members, _dir: dir };
        for i in 0..size {
            cluster.spawn(i)?;
        }
        for i in 0..size {
            cluster.wait_healthy(i)?;
        }
        Ok(cluster)
    }

    /// Every member's client URL.
    pub fn endpoints(&self) -> Vec<String> {
        self.members.iter().map(|m| m.client_url.clone()).collect()
    }

    /// SIGKILL of member `i` (no-op if it is not running).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut child) = self.members[i].child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts member `i` again on its data directory and waits until it is healthy.
    pub fn restart(&mut self, i: usize) -> Result<(), String> {
        self.kill(i);
        self.spawn(i)?;
        self.wait_healthy(i)
    }

    /// The member that reports itself leader, if exactly one running member does.
    pub fn leader(&self) -> Option<usize> {
        let leaders: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].child.is_some())
            .filter(|&i| {
                http_get(&self.members[i].client_url, "/metrics")
                    .is_ok_and(|body| body.lines().any(|l| l.trim() == "etcd_server_is_leader 1"))
            })
            .collect();
        match leaders[..] {
            [one] => Some(one),
            _ => None,
        }
    }

    pub fn pid(&self, i: usize) -> Option<u32> {
        self.members[i].child.as_ref().map(Child::id)
    }

    /// Member `i`'s log so far (for failure messages).
    pub fn log(&self, i: usize) -> String {
        std::fs::read_to_string(&self.members[i].log_path).unwrap_or_default()
    }

    fn spawn(&mut self, i: usize) -> Result<(), String> {
        let initial_cluster = self
            .members
            .iter()
            .map(|m| format!("{}={}", m.name, m.peer_url))
            .collect::<Vec<_>>()
            .join(",");
        let m = &mut self.members[i];
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&m.log_path)
            .map_err(|e| format!("cannot open etcd's log: {e}"))?;
        let spec = MemberSpec {
            name: &m.name,
            data_dir: &m.data_dir,
            client_url: &m.client_url,
            peer_url: &m.peer_url,
            initial_cluster: &initial_cluster,
        };
        m.child = Some(spawn_member(
            &spec,
            &["--initial-cluster-token=rkube-test"],
            log,
        )?);
        Ok(())
    }

    fn wait_healthy(&mut self, i: usize) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            let exited = self.members[i]
                .child
                .as_mut()
                .and_then(|c| c.try_wait().ok().flatten());
            let m = &self.members[i];
            if let Some(status) = exited {
                return Err(format!(
                    "etcd {} exited ({status}): {}",
                    m.name,
                    self.log(i)
                ));
            }
            if http_get(&m.client_url, "/health").is_ok_and(|b| b.contains("\"health\":\"true\"")) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "etcd {} not healthy within {START_TIMEOUT:?}: {}",
                    m.name,
                    self.log(i)
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for EtcdCluster {
    fn drop(&mut self) {
        for i in 0..self.members.len() {
            self.kill(i);
        }
    }
}
