//! The helpers of `ha_failures.rs`: restartable processes and the leadership they log, the client
//! load (writer, watcher) and the checks of the Leases' history and the leading intervals.

use super::*;

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

/// Starts `cmd` with its stderr tagged `name`; with `ready`, waits for a line that starts with it.
/// Leadership lines go to `leading`.
fn spawn_leading(name: &str, cmd: Command, ready: Option<&'static str>, leading: &Leading) -> Proc {
    let (tag, leading) = (name.to_string(), leading.clone());
    let on_line = move |line: &str, now: Instant| {
        if line.contains("successfully acquired lease") {
            leading
                .lock()
                .unwrap()
                .push((tag.clone(), Lead::Start, now));
        } else if line.contains("stopped leading") {
            leading.lock().unwrap().push((tag.clone(), Lead::Stop, now));
        }
    };
    ha::spawn(name, cmd, ready, on_line).0
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
        self.proc = Some(spawn_leading(&self.name, cmd, self.ready, leading));
    }

    pub(crate) fn signal(&self, sig: &str) {
        self.proc.as_ref().expect("running").signal(sig);
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
/// never goes back, a new holder acquires no earlier than the old one's last renewal (unless the old
/// one released the lease).
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
            // A released lease (no holder) may be taken at once, and the taker's acquireTime can
            // precede the release's renewTime: upstream's tryAcquireOrRenew reads the clock before
            // it GETs the Lease. Only a holder's own renewals bound the next acquisition.
            last_renew = if holder.is_empty() {
                None
            } else {
                spec.renew_time.map(|t| t.0).or(last_renew)
            };
            current = holder;
            last_transitions = transitions;
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

/// SIGSTOP of the leader of `group` past its lease, then SIGCONT. `meanwhile` runs right after the
/// SIGSTOP (its work needs the standby, which must take over within [`RECOVERY_BOUND`]) and returns
/// a figure; after SIGCONT the woken leader must log "stopped leading" within 3 s and exit. The
/// member is started again. Returns the figures.
pub(crate) async fn freeze_leader<F, Fut>(
    group: &mut [Member; 2],
    leading: &Leading,
    meanwhile: F,
) -> String
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = String>,
{
    let names = [group[0].name.clone(), group[1].name.clone()];
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let i = wait_for(&format!("a leader of {names:?}"), || async {
        leader_of(leading, &[&group[0], &group[1]])
    })
    .await;
    let t = Instant::now();
    group[i].signal("-STOP");
    // A frozen process does nothing: it stops leading now, whatever it will log later.
    leading
        .lock()
        .unwrap()
        .push((group[i].name.clone(), Lead::Stop, t));
    let done = meanwhile().await;
    let took = wait_for(&format!("the standby of {names:?} leads"), || async {
        started_after(leading, &names, t)
    })
    .await
    .duration_since(t);
    assert!(took < RECOVERY_BOUND, "takeover after {took:?}");
    let cont = Instant::now();
    group[i].signal("-CONT");
    let name = group[i].name.clone();
    let noticed = wait_for(&format!("the woken {name} stops leading"), || {
        let log = leading.lock().unwrap();
        let at = log
            .iter()
            .find(|(n, l, at)| *n == name && *l == Lead::Stop && *at > cont)
            .map(|(_, _, at)| at.duration_since(cont));
        async move { at }
    })
    .await;
    assert!(
        noticed < Duration::from_secs(3),
        "{name} led on for {noticed:?} after SIGCONT"
    );
    let member = &mut group[i];
    wait_for(&format!("the woken {name} exits"), || {
        let gone = member.exited();
        async move { gone.then_some(()) }
    })
    .await;
    let exited = cont.elapsed();
    group[i].start(leading);
    format!(
        "{name} SIGSTOP: standby leads after {took:?}, {done}; after SIGCONT the old one logged \
         'stopped leading' in {noticed:?} and exited in {exited:?}"
    )
}

/// A bare pod in `ha` created now; returns once it is bound, then (after the scheduler that was
/// frozen meanwhile has exited, which the caller waits for) [`bound_once`] checks it.
pub(crate) async fn pod_bound(client: &kube::Client, name: &str) -> Duration {
    let t = Instant::now();
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "ha"},
        "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
    }))
    .unwrap();
    let pods: Api<Pod> = Api::namespaced(client.clone(), "ha");
    wait_for("the pod created", || {
        let (pods, pod) = (pods.clone(), pod.clone());
        async move {
            match pods.create(&PostParams::default(), &pod).await {
                Ok(_) => Some(()),
                Err(kube::Error::Api(e)) if e.code == 409 => Some(()),
                Err(_) => None,
            }
        }
    })
    .await;
    wait_for(&format!("pod {name} bound"), || {
        let pods = pods.clone();
        async move {
            let p = pods.get(name).await.ok()?;
            p.spec?.node_name.map(|_| ())
        }
    })
    .await;
    t.elapsed()
}

/// The pod was bound exactly once: one `Scheduled` event names it (the woken scheduler, had it
/// bound it again, would have recorded a second one or a failed binding), and its node is the one
/// that event names.
pub(crate) async fn bound_once(client: &kube::Client, name: &str) {
    let events: Api<Event> = Api::namespaced(client.clone(), "ha");
    let scheduled = wait_for(&format!("pod {name}'s Scheduled event"), || {
        let events = events.clone();
        async move {
            let list = events.list(&ListParams::default()).await.ok()?;
            let scheduled: Vec<Event> = list
                .items
                .into_iter()
                .filter(|e| {
                    e.involved_object.name.as_deref() == Some(name)
                        && e.involved_object.kind.as_deref() == Some("Pod")
                        && e.reason.as_deref() == Some("Scheduled")
                })
                .collect();
            (!scheduled.is_empty()).then_some(scheduled)
        }
    })
    .await;
    let node = Api::<Pod>::namespaced(client.clone(), "ha")
        .get(name)
        .await
        .expect("pod")
        .spec
        .and_then(|s| s.node_name)
        .expect("bound");
    let counts: Vec<i32> = scheduled.iter().map(|e| e.count.unwrap_or(1)).collect();
    assert_eq!(counts, [1], "pod {name} bound once: {scheduled:?}");
    let message = scheduled[0].message.clone().unwrap_or_default();
    assert!(
        message.contains(&format!("to {node}")),
        "Scheduled event {message:?} names node {node}"
    );
}
