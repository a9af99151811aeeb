//! The StatefulSet controller of `rkube server` with the scheduler and simulated nodes, driven by
//! kubectl: seed 003's StatefulSet and headless Service, ordered scale up and down (checked against a
//! watch of its pods), its ControllerRevision, a partitioned rolling update, `rollout status` and
//! `rollout undo`, and claims from `volumeClaimTemplates`.

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, WatchEvent, WatchParams};
use support::{Backend, Cluster};

/// Seed 003's StatefulSet and Service; a 1 s grace period so scale-downs do not wait 30 s per pod.
const STS: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: nginx-sts
spec:
  serviceName: nginx-sts
  replicas: 1
  selector:
    matchLabels:
      app: nginx-sts
  template:
    metadata:
      labels:
        app: nginx-sts
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: nginx
        image: nginx
---
apiVersion: v1
kind: Service
metadata:
  name: nginx-sts
  labels:
    app: nginx-sts
spec:
  ports:
  - port: 80
    name: web
  clusterIP: None
  selector:
    app: nginx-sts
"#;

const DB: &str = r#"
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: db
spec:
  serviceName: db
  replicas: 2
  podManagementPolicy: Parallel
  selector:
    matchLabels:
      app: db
  template:
    metadata:
      labels:
        app: db
    spec:
      terminationGracePeriodSeconds: 1
      containers:
      - name: db
        image: postgres
  volumeClaimTemplates:
  - metadata:
      name: data
    spec:
      accessModes: ["ReadWriteOnce"]
      storageClassName: local
      resources:
        requests:
          storage: 1Gi
"#;

/// Pre-provisioned local volumes for the claims: with no provisioner, an `Immediate` claim would
/// wait for the PV controller; `WaitForFirstConsumer` claims are bound by the scheduler.
const LOCAL_VOLUMES: &str = r#"
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  name: local
provisioner: kubernetes.io/no-provisioner
volumeBindingMode: WaitForFirstConsumer
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: local-a
spec:
  capacity:
    storage: 1Gi
  accessModes: ["ReadWriteOnce"]
  storageClassName: local
  hostPath:
    path: /tmp/local-a
---
apiVersion: v1
kind: PersistentVolume
metadata:
  name: local-b
spec:
  capacity:
    storage: 1Gi
  accessModes: ["ReadWriteOnce"]
  storageClassName: local
  hostPath:
    path: /tmp/local-b
"#;

/// What the watch saw of one pod: event, name, Running and Ready, being deleted.
#[derive(Clone, Debug)]
struct Seen {
    event: &'static str,
    name: String,
    ready: bool,
    deleting: bool,
    /// `uid Kind/name` of the pod and its first owner.
    owned: String,
}

fn seen(event: &'static str, p: &Pod) -> Seen {
    let status = p.status.as_ref();
    let ready = status.and_then(|s| s.phase.as_deref()) == Some("Running")
        && status
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    Seen {
        event,
        name: p.metadata.name.clone().unwrap_or_default(),
        ready,
        deleting: p.metadata.deletion_timestamp.is_some(),
        owned: format!(
            "{} {}",
            p.metadata.uid.as_deref().unwrap_or_default(),
            p.metadata
                .owner_references
                .as_ref()
                .and_then(|o| o.first())
                .map(|o| format!("{}/{}", o.kind, o.name))
                .unwrap_or_default()
        ),
    }
}

/// Records every watch event of the pods matching `selector` from the start.
fn watch_pods(
    rt: &tokio::runtime::Runtime,
    c: &Cluster,
    selector: &'static str,
    resource_version: String,
) -> Arc<Mutex<Vec<Seen>>> {
    let events = Arc::new(Mutex::new(Vec::new()));
    let client = rt.block_on(c.client());
    let sink = events.clone();
    rt.spawn(async move {
        let api: Api<Pod> = Api::namespaced(client, "default");
        let params = WatchParams::default().labels(selector);
        let mut stream = Box::pin(api.watch(&params, &resource_version).await.expect("watch"));
        while let Ok(Some(ev)) = stream.try_next().await {
            let s = match &ev {
                WatchEvent::Added(p) => seen("ADDED", p),
                WatchEvent::Modified(p) => seen("MODIFIED", p),
                WatchEvent::Deleted(p) => seen("DELETED", p),
                _ => continue,
            };
            sink.lock().unwrap().push(s);
        }
    });
    events
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(45);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn rollout(c: &Cluster) -> String {
    c.kubectl(&[
        "rollout",
        "status",
        "statefulset/nginx-sts",
        "--timeout=45s",
    ])
}

fn get(c: &Cluster, what: &[&str], path: &str) -> String {
    let jsonpath = format!("jsonpath={path}");
    let mut args = vec!["get"];
    args.extend_from_slice(what);
    args.extend_from_slice(&["-o", &jsonpath]);
    c.kubectl(&args)
}

#[test]
fn statefulsets_scale_in_order_and_roll_out() {
    let c = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "3"]);
    let rt = support::runtime();
    let events = watch_pods(&rt, &c, "app=nginx-sts", "0".into());
    c.kubectl_in(&["apply", "-f", "-"], Some(STS));
    let out = rollout(&c);
    // kubectl reports any RollingUpdate with a partition (defaulted to 0) as a partitioned roll out.
    assert!(
        out.contains("partitioned roll out complete: 1 new pods have been updated"),
        "{out}"
    );

    // Identity of the pod, the revision and the status as seed 003 shows them.
    let revision = get(&c, &["controllerrevisions"], "{.items[0].metadata.name}");
    let pod = get(
        &c,
        &["pod", "nginx-sts-0"],
        "{.spec.hostname} {.spec.subdomain} {.metadata.labels.controller-revision-hash} {.metadata.labels.statefulset\\.kubernetes\\.io/pod-name} {.metadata.labels.apps\\.kubernetes\\.io/pod-index} {.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name}",
    );
    assert_eq!(
        pod,
        format!("nginx-sts-0 nginx-sts {revision} nginx-sts-0 0 StatefulSet/nginx-sts")
    );
    let rev = get(
        &c,
        &["controllerrevision", &revision],
        "{.revision} {.metadata.ownerReferences[0].kind}/{.metadata.ownerReferences[0].name} {.metadata.ownerReferences[0].controller} {.metadata.labels.app} {.data.spec.template.\\$patch}",
    );
    assert_eq!(rev, "1 StatefulSet/nginx-sts true nginx-sts replace");
    let hash = get(
        &c,
        &["controllerrevision", &revision],
        "{.metadata.labels.controller\\.kubernetes\\.io/hash}",
    );
    assert_eq!(revision, format!("nginx-sts-{hash}"));
    let status = get(
        &c,
        &["sts", "nginx-sts"],
        "{.status.replicas} {.status.readyReplicas} {.status.currentReplicas} {.status.updatedReplicas} {.status.availableReplicas} {.status.currentRevision} {.status.updateRevision} {.status.collisionCount} {.status.observedGeneration}",
    );
    assert_eq!(status, format!("1 1 1 1 1 {revision} {revision} 0 1"));

    // 1 -> 2: nginx-sts-1 appears only once nginx-sts-0 is Running and Ready.
    c.kubectl(&["scale", "statefulset", "nginx-sts", "--replicas=2"]);
    rollout(&c);
    {
        let ev = events.lock().unwrap();
        let added: Vec<&str> = ev
            .iter()
            .filter(|e| e.event == "ADDED")
            .map(|e| e.name.as_str())
            .collect();
        assert_eq!(added, ["nginx-sts-0", "nginx-sts-1"]);
        let first_add_1 = ev
            .iter()
            .position(|e| e.event == "ADDED" && e.name == "nginx-sts-1")
            .unwrap();
        assert!(
            ev[..first_add_1]
                .iter()
                .any(|e| e.name == "nginx-sts-0" && e.ready),
            "{ev:?}"
        );
    }

    // A partitioned rolling update: only ordinals >= 1 move to the new template.
    c.kubectl(&[
        "patch",
        "statefulset",
        "nginx-sts",
        "-p",
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"partition":1}}}}"#,
    ]);
    c.kubectl(&["set", "image", "statefulset/nginx-sts", "nginx=nginx:1.26"]);
    let out = rollout(&c);
    assert!(
        out.contains("partitioned roll out complete: 1 new pods have been updated"),
        "{out}"
    );
    let images = || {
        get(
            &c,
            &["pods", "-l", "app=nginx-sts"],
            "{range .items[*]}{.metadata.name}={.spec.containers[0].image} {end}",
        )
    };
    assert_eq!(images().trim(), "nginx-sts-0=nginx nginx-sts-1=nginx:1.26");
    let (current, update) = {
        let s = get(
            &c,
            &["sts", "nginx-sts"],
            "{.status.currentRevision} {.status.updateRevision}",
        );
        let (a, b) = s.split_once(' ').unwrap();
        (a.to_string(), b.to_string())
    };
    assert_eq!(current, revision);
    assert_ne!(update, revision);
    c.kubectl(&[
        "patch",
        "statefulset",
        "nginx-sts",
        "-p",
        r#"{"spec":{"updateStrategy":{"rollingUpdate":{"partition":0}}}}"#,
    ]);
    let out = rollout(&c);
    assert!(
        out.contains("partitioned roll out complete: 2 new pods have been updated"),
        "{out}"
    );
    assert_eq!(
        images().trim(),
        "nginx-sts-0=nginx:1.26 nginx-sts-1=nginx:1.26"
    );

    // Undo: the first template comes back and its revision becomes number 3.
    assert_eq!(
        c.kubectl(&["rollout", "undo", "statefulset/nginx-sts"])
            .trim(),
        "statefulset.apps/nginx-sts rolled back"
    );
    let out = rollout(&c);
    assert!(
        out.contains("partitioned roll out complete: 2 new pods have been updated"),
        "{out}"
    );
    assert_eq!(images().trim(), "nginx-sts-0=nginx nginx-sts-1=nginx");
    let revisions = get(
        &c,
        &["controllerrevisions"],
        "{range .items[*]}{.metadata.name}={.revision} {end}",
    );
    let mut revisions: Vec<&str> = revisions.split_whitespace().collect();
    revisions.sort();
    let mut want = vec![format!("{revision}=3"), format!("{update}=2")];
    want.sort();
    assert_eq!(revisions, want);

    let history = c.kubectl(&["rollout", "history", "statefulset/nginx-sts"]);
    let numbers: Vec<&str> = history
        .lines()
        .skip(2)
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(numbers, ["2", "3"], "{history}");

    // 2 -> 0: the highest ordinal goes first, the next only once it is gone.
    let before = events.lock().unwrap().len();
    c.kubectl(&["scale", "statefulset", "nginx-sts", "--replicas=0"]);
    wait_for("no pods", || {
        get(
            &c,
            &["pods", "-l", "app=nginx-sts"],
            "{.items[*].metadata.name}",
        )
        .is_empty()
    });
    {
        let ev = events.lock().unwrap();
        let tail = &ev[before..];
        let marked: Vec<&str> = tail
            .iter()
            .filter(|e| e.deleting || e.event == "DELETED")
            .map(|e| e.name.as_str())
            .fold(Vec::new(), |mut v, n| {
                if v.last() != Some(&n) {
                    v.push(n);
                }
                v
            });
        assert_eq!(marked, ["nginx-sts-1", "nginx-sts-0"], "{tail:?}");
    }
    assert_eq!(get(&c, &["sts", "nginx-sts"], "{.status.replicas}"), "0");

    // An orphan named like a member and matching the selector is adopted.
    c.kubectl(&[
        "run",
        "db-0",
        "--image=postgres",
        "--labels=app=db",
        r#"--overrides={"spec":{"terminationGracePeriodSeconds":1}}"#,
    ]);
    let orphan = get(
        &c,
        &["pod", "db-0"],
        "{.metadata.uid} {.metadata.resourceVersion}",
    );
    let (orphan_uid, orphan_rv) = orphan.split_once(' ').expect("uid and resourceVersion");
    // The adopted pod may be replaced by the rolling update at once: watch every change since
    // the orphan was created for the adoption.
    let db_events = watch_pods(&rt, &c, "app=db", orphan_rv.to_string());

    // Claims from volumeClaimTemplates, one per pod, mounted by the pods (Parallel: both at once).
    c.kubectl_in(&["apply", "-f", "-"], Some(LOCAL_VOLUMES));
    c.kubectl_in(&["apply", "-f", "-"], Some(DB));
    let adopted = format!("{orphan_uid} StatefulSet/db");
    wait_for("db-0 adopted", || {
        db_events.lock().unwrap().iter().any(|e| e.owned == adopted)
    });
    // The adopted pod has no revision: the rolling update replaces it with one of the template.
    wait_for("db pods updated and ready", || {
        get(
            &c,
            &["sts", "db"],
            "{.status.readyReplicas} {.status.updatedReplicas}",
        ) == "2 2"
    });
    let claims = get(&c, &["pvc"], "{range .items[*]}{.metadata.name}:{.metadata.labels.app}:{.spec.resources.requests.storage} {end}");
    assert_eq!(claims.trim(), "data-db-0:db:1Gi data-db-1:db:1Gi");
    let volume = get(
        &c,
        &["pod", "db-1"],
        "{.spec.volumes[?(@.name==\"data\")].persistentVolumeClaim.claimName}",
    );
    assert_eq!(volume, "data-db-1");
    // The scheduler bound each claim to one of the local volumes.
    let bound = get(&c, &["pvc"], "{.items[*].spec.volumeName}");
    let mut bound: Vec<&str> = bound.split_whitespace().collect();
    bound.sort();
    assert_eq!(bound, ["local-a", "local-b"]);
}
