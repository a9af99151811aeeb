//! The helpers of `ha_failures.rs`: restartable processes and the leadership they log, the client
//! load (writer, watcher) and the checks of the Leases' history and the leading intervals.

use super::*;

pub(crate) struct Proc(pub(crate) Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// When a component logged that it started or stopped leading (or the test stopped it leading
/// by force: kill -9, SIGSTOP), by process name.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Lead {
    /// The test started the process (a new incarnation of the name).
    Spawn,
    Start,
    Stop,
}

pub(crate) type Leading = Arc<Mutex<Vec<(String, Lead, Instant)>>>;

pub(crate) fn rkube_cmd(args: &[String], log: &str) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rkube"));
    cmd.args(args)
        .env("RUST_LOG", log)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    cmd
}

/// Starts `cmd` with its stderr tagged `name` on the test's; with `ready`, waits for a line that
/// starts with it. Leadership lines go to `leading`.
pub(crate) fn spawn(
    name: &str,
    mut cmd: Command,
    ready: Option<&'static str>,
    leading: &Leading,
) -> Proc {
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("start {name}: {e}"));
    let stderr = child.stderr.take().expect("stderr");
    let (tx, rx) = mpsc::channel();
    let (tag, leading) = (name.to_string(), leading.clone());
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let now = Instant::now();
            if line.contains("successfully acquired lease") {
                leading
                    .lock()
                    .unwrap()
                    .push((tag.clone(), Lead::Start, now));
            } else if line.contains("stopped leading") {
                leading.lock().unwrap().push((tag.clone(), Lead::Stop, now));
            }
            if ready.is_some_and(|r| line.starts_with(r)) {
                let _ = tx.send(());
            }
            eprintln!("[{tag}] {line}");
        }
    });
    let mut proc = Proc(child);
    if ready.is_some() && rx.recv_timeout(DEADLINE).is_err() {
        let status = proc.0.try_wait();
        panic!("{name} did not start within {DEADLINE:?} ({status:?})");
    }
    proc
}

/// A restartable process: its name, arguments and the running child.
pub(crate) struct Member {
    pub(crate) name: String,
    pub(crate) args: Vec<String>,
    pub(crate) log: &'static str,
    pub(crate) ready: Option<&'static str>,
    pub(crate) proc: Option<Proc>,
}

impl Member {
    pub(crate) fn new(
        name: &str,
        args: Vec<String>,
        log: &'static str,
        ready: Option<&'static str>,
    ) -> Self {
        Member {
            name: name.to_string(),
            args,
            log,
            ready,
            proc: None,
        }
    }

    pub(crate) fn start(&mut self, leading: &Leading) {
        leading
            .lock()
            .unwrap()
            .push((self.name.clone(), Lead::Spawn, Instant::now()));
        let cmd = rkube_cmd(&self.args, self.log);
        self.proc = Some(spawn(&self.name, cmd, self.ready, leading));
    }

    pub(crate) fn signal(&self, sig: &str) {
        let proc = self.proc.as_ref().expect("running");
        let status = Command::new("kill")
            .args([sig, &proc.0.id().to_string()])
            .status()
            .expect("kill");
        assert!(status.success(), "kill {sig} {}", self.name);
    }

    pub(crate) fn kill9(&mut self) {
        if let Some(mut p) = self.proc.take() {
            p.0.kill().expect("kill -9");
            let _ = p.0.wait();
        }
    }

    /// Sends `sig` and waits (up to 20 s) for the exit.
    pub(crate) fn stop_with(&mut self, sig: &str) {
        self.signal(sig);
        let mut p = self.proc.take().expect("running");
        let give_up = Instant::now() + Duration::from_secs(20);
        while p.0.try_wait().expect("wait").is_none() {
            assert!(
                Instant::now() < give_up,
                "{} did not exit after {sig}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Whether the process has exited (and reaps it).
    pub(crate) fn exited(&mut self) -> bool {
        match self.proc.as_mut().map(|p| p.0.try_wait()) {
            Some(Ok(Some(_))) => {
                self.proc = None;
                true
            }
            Some(_) => false,
            None => true,
        }
    }
}

/// Starts again every member that exited or stopped leading since it was started (a component
/// that loses its lease exits, as upstream's; its supervisor, systemd or the kubelet, starts it
/// again). Returns the names started.
pub(crate) fn revive<'a>(
    members: impl IntoIterator<Item = &'a mut Member>,
    leading: &Leading,
) -> Vec<String> {
    let mut revived = Vec::new();
    for m in members {
        let stopped = leading
            .lock()
            .unwrap()
            .iter()
            .rev()
            .find(|(n, l, _)| *n == m.name && *l != Lead::Start)
            .is_some_and(|(_, l, _)| *l == Lead::Stop);
        if stopped || m.exited() {
            let give_up = Instant::now() + Duration::from_secs(20);
            while !m.exited() {
                assert!(
                    Instant::now() < give_up,
                    "{} did not exit after losing its lease",
                    m.name
                );
                std::thread::sleep(Duration::from_millis(50));
            }
            m.start(leading);
            revived.push(m.name.clone());
        }
    }
    revived
}

pub(crate) fn share_pki(from: &Path, to: &Path) {
    let (src, dst) = (from.join("pki"), to.join("pki"));
    std::fs::create_dir_all(&dst).expect("pki dir");
    for entry in std::fs::read_dir(&src).expect("read pki") {
        let path = entry.expect("entry").path();
        let name = path.file_name().expect("name").to_owned();
        std::fs::copy(&path, dst.join(name)).expect("copy pki file");
    }
}

/// A free TCP port on 127.0.0.1 (the three servers bind it on 127.0.0.1-3).
pub(crate) fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

pub(crate) async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(Instant::now() < deadline, "{what}: not within {DEADLINE:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(crate) fn rv(meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .expect("numeric resourceVersion")
}

/// Acknowledged writes (name, resourceVersion, when) and failures.
#[derive(Default)]
pub(crate) struct Writes {
    pub(crate) acked: Vec<(String, u64, Instant)>,
    pub(crate) failures: usize,
}

impl Writes {
    /// How long after `at` the first write was acknowledged, if one was.
    pub(crate) fn first_after(&self, at: Instant) -> Option<Duration> {
        self.acked
            .iter()
            .rev()
            .take_while(|(_, _, t)| *t > at)
            .last()
            .map(|(_, _, t)| t.duration_since(at))
    }

    /// The longest time without an acknowledged write between `from` and `to`.
    pub(crate) fn longest_gap(&self, from: Instant, to: Instant) -> Duration {
        let mut last = from;
        let mut gap = Duration::ZERO;
        for (_, _, t) in self.acked.iter().filter(|(_, _, t)| *t > from && *t <= to) {
            gap = gap.max(t.duration_since(last));
            last = *t;
        }
        gap.max(to.saturating_duration_since(last))
    }
}

/// Creates `load-<i>` and patches it, over and over, until `stop`.
pub(crate) async fn writer(api: Api<ConfigMap>, writes: Arc<Mutex<Writes>>, stop: Arc<AtomicBool>) {
    let mut i = 0u64;
    while !stop.load(Ordering::Relaxed) {
        i += 1;
        let name = format!("load-{i}");
        let cm: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name}, "data": {"n": "0"}
        }))
        .expect("configmap");
        let ok = match api.create(&PostParams::default(), &cm).await {
            Ok(cm) => {
                let at = Instant::now();
                writes
                    .lock()
                    .unwrap()
                    .acked
                    .push((name.clone(), rv(&cm.metadata), at));
                true
            }
            Err(_) => {
                writes.lock().unwrap().failures += 1;
                false
            }
        };
        if ok {
            let patch = serde_json::json!({"data": {"n": "1"}});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(cm) => {
                    let at = Instant::now();
                    writes
                        .lock()
                        .unwrap()
                        .acked
                        .push((name.clone(), rv(&cm.metadata), at));
                }
                Err(_) => writes.lock().unwrap().failures += 1,
            }
        }
        tokio::time::sleep(Duration::from_millis(if ok { 10 } else { 50 })).await;
    }
}

/// Watches `api` from `from`, resuming from the last resourceVersion whenever the stream ends,
/// until `stop`; records every object it sees. A 410 is a missed event: it panics.
pub(crate) async fn watch_all<K>(
    api: Api<K>,
    from: String,
    seen: Arc<Mutex<Vec<K>>>,
    stop: Arc<AtomicBool>,
) -> usize
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let mut version = from;
    let mut resumes = 0;
    let params = WatchParams::default().timeout(30);
    while !stop.load(Ordering::Relaxed) {
        let stream = match api.watch(&params, &version).await {
            Ok(s) => s,
            Err(e) => {
                eprintln!("watch from {version}: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                resumes += 1;
                continue;
            }
        };
        futures::pin_mut!(stream);
        loop {
            let next = tokio::select! {
                n = stream.next() => n,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {
                    if stop.load(Ordering::Relaxed) { break } else { continue }
                }
            };
            match next {
                Some(Ok(
                    WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o),
                )) => {
                    version = o.meta().resource_version.clone().unwrap_or_default();
                    seen.lock().unwrap().push(o);
                }
                Some(Ok(WatchEvent::Bookmark(b))) => version = b.metadata.resource_version,
                Some(Ok(WatchEvent::Error(e))) => {
                    assert_ne!(e.code, 410, "the watch's resume point is gone: {e:?}");
                    eprintln!("watch error event: {e:?}");
                    break;
                }
                Some(Err(e)) => {
                    eprintln!("watch stream from {version}: {e}");
                    break;
                }
                None => break,
            }
        }
        resumes += 1;
    }
    resumes
}

pub(crate) fn ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The member of `group` that leads now by its own log (started, not stopped since).
pub(crate) fn leader_of(leading: &Leading, group: &[&Member]) -> Option<usize> {
    let log = leading.lock().unwrap();
    let mut current = None;
    for (name, lead, _) in log.iter() {
        let Some(i) = group.iter().position(|m| &m.name == name) else {
            continue;
        };
        match lead {
            Lead::Start => current = Some(i),
            Lead::Stop if current == Some(i) => current = None,
            Lead::Stop | Lead::Spawn => {}
        }
    }
    current.filter(|&i| group[i].proc.is_some())
}

/// The time of the first `Start` of any member of `group` after `at`.
pub(crate) fn started_after(leading: &Leading, group: &[&str], at: Instant) -> Option<Instant> {
    leading
        .lock()
        .unwrap()
        .iter()
        .find(|(n, l, t)| *l == Lead::Start && *t > at && group.contains(&n.as_str()))
        .map(|(_, _, t)| *t)
}

/// A Deployment of `replicas` pods in `ha`; returns once all its pods are bound.
pub(crate) async fn rolled_out(client: &kube::Client, name: &str) -> Duration {
    let t = Instant::now();
    let deployment: Deployment = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "ha"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
            }
        }
    }))
    .unwrap();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "ha");
    wait_for("the Deployment created", || {
        let (deployments, deployment) = (deployments.clone(), deployment.clone());
        async move {
            match deployments
                .create(&PostParams::default(), &deployment)
                .await
            {
                Ok(_) => Some(()),
                Err(kube::Error::Api(e)) if e.code == 409 => Some(()),
                Err(_) => None,
            }
        }
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ha");
    let selector = format!("app={name}");
    wait_for(&format!("Deployment {name}'s pods bound"), || {
        let (pods, selector) = (pods.clone(), selector.clone());
        async move {
            let list = pods
                .list(&ListParams::default().labels(&selector))
                .await
                .ok()?;
            let bound = list
                .items
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                .count();
            (bound == 2).then_some(())
        }
    })
    .await;
    t.elapsed()
}

/// Never two leaders in the Leases' history: one holder per `leaseTransitions` value, the value
/// never goes back, a new holder acquires no earlier than the old one's last renewal.
pub(crate) fn check_lease_history(history: &[Lease]) {
    let mut by_name: HashMap<String, Vec<&Lease>> = HashMap::new();
    for l in history {
        by_name
            .entry(l.metadata.name.clone().unwrap_or_default())
            .or_default()
            .push(l);
    }
    for (name, leases) in by_name {
        let mut holders: HashMap<i32, String> = HashMap::new();
        let mut last_transitions = 0;
        let mut last_renew: Option<jiff::Timestamp> = None;
        let mut current = String::new();
        for l in leases {
            let spec = l.spec.clone().unwrap_or_default();
            let holder = spec.holder_identity.clone().unwrap_or_default();
            let transitions = spec.lease_transitions.unwrap_or(0);
            assert!(
                transitions >= last_transitions,
                "{name}: leaseTransitions went back to {transitions} from {last_transitions}"
            );
            if !holder.is_empty() {
                let previous = holders.entry(transitions).or_insert_with(|| holder.clone());
                assert_eq!(
                    previous, &holder,
                    "{name}: two holders with leaseTransitions {transitions}"
                );
                if holder != current {
                    if let (Some(acquired), Some(renewed)) =
                        (spec.acquire_time.as_ref(), last_renew)
                    {
                        assert!(
                            acquired.0 >= renewed,
                            "{name}: {holder} acquired at {} before the last renewal {renewed}",
                            acquired.0
                        );
                    }
                }
            }
            current = holder;
            last_transitions = transitions;
            last_renew = spec.renew_time.map(|t| t.0).or(last_renew);
        }
    }
}

/// The leading intervals of each group never overlap.
pub(crate) fn check_intervals(leading: &[(String, Lead, Instant)], group: &[&str], end: Instant) {
    let mut open: HashMap<&str, Instant> = HashMap::new();
    let mut intervals = Vec::new();
    for (name, lead, t) in leading {
        if !group.contains(&name.as_str()) {
            continue;
        }
        match lead {
            Lead::Start => {
                open.insert(name, *t);
            }
            Lead::Stop => {
                if let Some(s) = open.remove(name.as_str()) {
                    intervals.push((s, *t, name.clone()));
                }
            }
            Lead::Spawn => {}
        }
    }
    intervals.extend(open.into_iter().map(|(n, s)| (s, end, n.to_string())));
    intervals.sort_by_key(|(s, _, _)| *s);
    for pair in intervals.windows(2) {
        assert!(
            pair[1].0 >= pair[0].1,
            "{} started leading before {} stopped ({:?})",
            pair[1].2,
            pair[0].2,
            pair[0].1.duration_since(pair[1].0)
        );
    }
    assert!(intervals.len() >= 2, "{group:?}: a takeover happened");
}
