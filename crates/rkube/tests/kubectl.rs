//! `rkube server` driven by the real kubectl: the objects of seed 003 read back with upstream's
//! defaults, selectors, paging, watch, patch/label/annotate/scale/delete, and `kubectl get` headers.
//! Every test runs on SQLite and on etcd.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::Value;
use support::{Backend, Cluster};

const SEED_OBJECTS: &str = r#"
apiVersion: batch/v1
kind: Job
metadata:
  name: pi
spec:
  parallelism: 2
  completions: 5
  template:
    spec:
      containers:
      - name: pi
        image: perl
        command: ["perl", "-Mbignum=bpi", "-wle", "print bpi(2000)"]
      restartPolicy: OnFailure
---
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
  clusterIP: None
  selector:
    app: nginx-sts
---
apiVersion: apps/v1
kind: DaemonSet
metadata:
  name: nginx-ds
spec:
  selector:
    matchLabels:
      app: nginx
  template:
    metadata:
      labels:
        app: nginx
    spec:
      containers:
      - name: nginx
        image: nginx
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
spec:
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: web
        image: nginx:1.25
        ports:
        - containerPort: 80
"#;

/// A ConfigMap manifest (kubectl's `create configmap` sends protobuf, which is a later issue).
fn configmap(name: &str, value: &str) -> String {
    format!("apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\ndata:\n  a: \"{value}\"\n")
}

fn create_configmap(c: &Cluster, name: &str, value: &str) {
    c.kubectl_in(&["create", "-f", "-"], Some(&configmap(name, value)));
}

fn get_json(c: &Cluster, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&c.kubectl(&all)).expect("kubectl -o json prints JSON")
}

fn get_yaml(c: &Cluster, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "yaml"]);
    serde_yaml_ng::from_str(&c.kubectl(&all)).expect("kubectl -o yaml prints YAML")
}

fn seed_objects_show_upstream_defaults(backend: Backend) {
    let c = Cluster::start(backend);
    let out = c.kubectl_in(&["create", "-f", "-"], Some(SEED_OBJECTS));
    for line in [
        "job.batch/pi created",
        "statefulset.apps/nginx-sts created",
        "service/nginx-sts created",
        "daemonset.apps/nginx-ds created",
        "deployment.apps/web created",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }

    let job = get_yaml(&c, &["get", "job", "pi"]);
    let uid = job["metadata"]["uid"].as_str().expect("uid").to_string();
    assert_eq!(job["metadata"]["generation"], 1);
    assert_eq!(job["metadata"]["labels"]["job-name"], "pi");
    assert_eq!(job["spec"]["backoffLimit"], 6);
    assert_eq!(job["spec"]["completionMode"], "NonIndexed");
    assert_eq!(job["spec"]["suspend"], false);
    assert_eq!(job["spec"]["parallelism"], 2);
    assert_eq!(
        job["spec"]["selector"]["matchLabels"]["batch.kubernetes.io/controller-uid"],
        uid.as_str()
    );
    let tmpl = &job["spec"]["template"];
    assert_eq!(tmpl["metadata"]["labels"]["job-name"], "pi");
    assert_eq!(tmpl["metadata"]["labels"]["controller-uid"], uid.as_str());
    let pod = &tmpl["spec"];
    assert_eq!(pod["dnsPolicy"], "ClusterFirst");
    assert_eq!(pod["restartPolicy"], "OnFailure");
    assert_eq!(pod["schedulerName"], "default-scheduler");
    assert_eq!(pod["terminationGracePeriodSeconds"], 30);
    assert!(
        pod["securityContext"]
            .as_object()
            .is_some_and(|m| m.is_empty()),
        "{pod:?}"
    );
    let container = &pod["containers"][0];
    assert_eq!(container["imagePullPolicy"], "Always");
    assert_eq!(container["terminationMessagePath"], "/dev/termination-log");
    assert_eq!(container["terminationMessagePolicy"], "File");

    let sts = get_yaml(&c, &["get", "sts", "nginx-sts"]);
    assert_eq!(sts["spec"]["podManagementPolicy"], "OrderedReady");
    assert_eq!(sts["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(sts["spec"]["updateStrategy"]["type"], "RollingUpdate");
    assert_eq!(
        sts["spec"]["updateStrategy"]["rollingUpdate"]["partition"],
        0
    );
    assert_eq!(
        sts["spec"]["persistentVolumeClaimRetentionPolicy"]["whenDeleted"],
        "Retain"
    );

    let svc = get_yaml(&c, &["get", "svc", "nginx-sts"]);
    assert_eq!(svc["spec"]["clusterIP"], "None");
    assert_eq!(svc["spec"]["type"], "ClusterIP");
    assert_eq!(svc["spec"]["sessionAffinity"], "None");
    assert_eq!(svc["spec"]["ports"][0]["protocol"], "TCP");
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 80);

    let ds = get_yaml(&c, &["get", "ds", "nginx-ds"]);
    assert_eq!(ds["spec"]["updateStrategy"]["type"], "RollingUpdate");
    assert_eq!(
        ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"],
        1
    );
    assert_eq!(ds["spec"]["revisionHistoryLimit"], 10);

    let deploy = get_yaml(&c, &["get", "deploy", "web"]);
    assert_eq!(deploy["spec"]["replicas"], 1);
    assert_eq!(deploy["spec"]["progressDeadlineSeconds"], 600);
    assert_eq!(deploy["spec"]["revisionHistoryLimit"], 10);
    assert_eq!(
        deploy["spec"]["strategy"]["rollingUpdate"]["maxSurge"],
        "25%"
    );
    assert_eq!(
        deploy["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"],
        "IfNotPresent"
    );
    assert_eq!(
        deploy["spec"]["template"]["spec"]["containers"][0]["ports"][0]["protocol"],
        "TCP"
    );

    // The system namespaces and the kubernetes Service exist.
    let ns = c.kubectl(&["get", "ns", "-o", "name"]);
    for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
        assert!(ns.contains(&format!("namespace/{name}")), "{ns}");
    }
    let k8s = get_json(&c, &["get", "svc", "kubernetes"]);
    assert_eq!(k8s["spec"]["clusterIP"], "10.96.0.1");
}

/// `kubectl get` prints upstream's columns.
fn get_headers_match_upstream(backend: Backend) {
    let c = Cluster::start(backend);
    c.kubectl_in(&["create", "-f", "-"], Some(SEED_OBJECTS));
    create_configmap(&c, "settings", "1");
    let header = |args: &[&str]| -> Vec<String> {
        let out = c.kubectl(args);
        out.lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .map(str::to_string)
            .collect()
    };
    assert_eq!(
        header(&["get", "deploy"]),
        ["NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"]
    );
    assert_eq!(header(&["get", "sts"]), ["NAME", "READY", "AGE"]);
    assert_eq!(
        header(&["get", "ds"]),
        [
            "NAME",
            "DESIRED",
            "CURRENT",
            "READY",
            "UP-TO-DATE",
            "AVAILABLE",
            "NODE",
            "SELECTOR",
            "AGE"
        ]
    );
    assert_eq!(
        header(&["get", "jobs"]),
        ["NAME", "STATUS", "COMPLETIONS", "DURATION", "AGE"]
    );
    assert_eq!(
        header(&["get", "svc"]),
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE"
        ]
    );
    assert_eq!(
        header(&["get", "svc", "-o", "wide"]),
        [
            "NAME",
            "TYPE",
            "CLUSTER-IP",
            "EXTERNAL-IP",
            "PORT(S)",
            "AGE",
            "SELECTOR"
        ]
    );
    assert_eq!(header(&["get", "cm"]), ["NAME", "DATA", "AGE"]);
    assert_eq!(header(&["get", "ns"]), ["NAME", "STATUS", "AGE"]);
    let svc = c.kubectl(&["get", "svc", "nginx-sts", "--no-headers"]);
    let cells: Vec<&str> = svc.split_whitespace().collect();
    assert_eq!(
        &cells[..5],
        ["nginx-sts", "ClusterIP", "None", "<none>", "80/TCP"],
        "{svc}"
    );
    let all = c.kubectl(&["get", "all"]);
    for name in [
        "service/kubernetes",
        "deployment.apps/web",
        "statefulset.apps/nginx-sts",
        "daemonset.apps/nginx-ds",
        "job.batch/pi",
    ] {
        assert!(all.contains(name), "kubectl get all lacks {name}:\n{all}");
    }
}

fn selectors_and_paging(backend: Backend) {
    let c = Cluster::start(backend);
    for i in 0..7 {
        let tier = if i % 2 == 0 { "web" } else { "db" };
        create_configmap(&c, &format!("cm-{i}"), "v");
        c.kubectl(&[
            "label",
            "configmap",
            &format!("cm-{i}"),
            &format!("tier={tier}"),
            &format!("n={i}"),
        ]);
    }
    let names = |args: &[&str]| -> Vec<String> {
        let mut all = vec!["get", "cm", "-o", "name"];
        all.extend_from_slice(args);
        let mut v: Vec<String> = c.kubectl(&all).lines().map(str::to_string).collect();
        v.sort();
        v
    };
    assert_eq!(
        names(&["-l", "tier=web"]),
        [
            "configmap/cm-0",
            "configmap/cm-2",
            "configmap/cm-4",
            "configmap/cm-6"
        ]
    );
    assert_eq!(
        names(&["-l", "tier!=web,n in (1,3)"]),
        ["configmap/cm-1", "configmap/cm-3"]
    );
    assert_eq!(names(&["-l", "n>4"]), ["configmap/cm-5", "configmap/cm-6"]);
    assert_eq!(
        names(&["--field-selector", "metadata.name=cm-3"]),
        ["configmap/cm-3"]
    );
    assert_eq!(
        names(&["--field-selector", "metadata.name!=cm-3", "-l", "tier=db"]),
        ["configmap/cm-1", "configmap/cm-5"]
    );
    // kube-root-ca.crt is not created here, so exactly our 7.
    let paged = names(&["--chunk-size=2"]);
    assert_eq!(paged.len(), 7, "{paged:?}");
    let err = c.kubectl_fails(&["get", "cm", "--field-selector", "data.a=v"], None);
    assert!(err.contains("field label not supported"), "{err}");
    let err = c.kubectl_fails(&["get", "cm", "-l", "a in (b"], None);
    assert!(!err.is_empty());
}

/// `kubectl get -w` sees creation, change and deletion.
fn watch_follows_changes(backend: Backend) {
    let c = Cluster::start(backend);
    create_configmap(&c, "before", "1");
    let mut child = Command::new("kubectl")
        .args(["get", "cm", "-w", "--output-watch-events", "--no-headers"])
        .env("KUBECONFIG", &c.kubeconfig)
        .env("HOME", c.data_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl get -w");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut lines = Vec::new();
    let expect = |want: &str, lines: &mut Vec<String>| {
        let deadline = Instant::now() + Duration::from_secs(20);
        // Columns: EVENT NAME DATA AGE; compare the first three.
        let first3 = |l: &String| l.split_whitespace().take(3).collect::<Vec<_>>().join(" ");
        while !lines.iter().any(|l| first3(l) == want) {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(line) => lines.push(line),
                Err(_) => panic!("kubectl get -w never printed {want:?}; got {lines:?}"),
            }
        }
    };
    expect("ADDED before 1", &mut lines);
    create_configmap(&c, "later", "2");
    expect("ADDED later 1", &mut lines);
    c.kubectl(&[
        "patch",
        "configmap",
        "later",
        "--type=merge",
        "-p",
        r#"{"data":{"b":"3"}}"#,
    ]);
    expect("MODIFIED later 2", &mut lines);
    c.kubectl(&["delete", "configmap", "later"]);
    expect("DELETED later 2", &mut lines);
    let _ = child.kill();
    let _ = child.wait();
}

fn patch_label_annotate_scale_delete(backend: Backend) {
    let c = Cluster::start(backend);
    c.kubectl_in(&["create", "-f", "-"], Some(SEED_OBJECTS));
    // Strategic merge patch by container name, as `kubectl set image` sends.
    c.kubectl(&["set", "image", "deployment/web", "web=nginx:1.27"]);
    let d = get_json(&c, &["get", "deploy", "web"]);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["image"],
        "nginx:1.27"
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"],
        80
    );
    assert_eq!(
        d["metadata"]["generation"], 2,
        "spec change bumps generation"
    );
    c.kubectl(&[
        "patch",
        "deploy",
        "web",
        "-p",
        r#"{"spec":{"template":{"spec":{"containers":[{"name":"sidecar","image":"busybox"}]}}}}"#,
    ]);
    let d = get_json(&c, &["get", "deploy", "web"]);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"]
            .as_array()
            .map(Vec::len),
        Some(2)
    );
    c.kubectl(&[
        "patch",
        "deploy",
        "web",
        "--type=json",
        "-p",
        r#"[{"op":"remove","path":"/spec/template/spec/containers/1"}]"#,
    ]);
    c.kubectl(&["label", "deploy", "web", "team=blue"]);
    c.kubectl(&["annotate", "deploy", "web", "note=hello"]);
    let d = get_json(&c, &["get", "deploy", "web"]);
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );
    assert_eq!(d["metadata"]["labels"]["team"], "blue");
    assert_eq!(d["metadata"]["annotations"]["note"], "hello");
    c.kubectl(&["label", "deploy", "web", "team-"]);
    let d = get_json(&c, &["get", "deploy", "web"]);
    assert!(d["metadata"]["labels"].get("team").is_none());
    let err = c.kubectl_fails(&["label", "deploy", "web", "app=other"], None);
    assert!(err.contains("already has a value"), "{err}");

    let out = c.kubectl(&["scale", "deploy", "web", "--replicas=3"]);
    assert!(out.contains("deployment.apps/web scaled"), "{out}");
    assert_eq!(
        get_json(&c, &["get", "deploy", "web"])["spec"]["replicas"],
        3
    );
    c.kubectl(&["scale", "sts", "nginx-sts", "--replicas=2"]);
    assert_eq!(
        get_json(&c, &["get", "sts", "nginx-sts"])["spec"]["replicas"],
        2
    );
    let scale = c.kubectl(&[
        "get",
        "--raw",
        "/apis/apps/v1/namespaces/default/deployments/web/scale",
    ]);
    let scale: Value = serde_json::from_str(&scale).expect("Scale JSON");
    assert_eq!(scale["spec"]["replicas"], 3);
    assert_eq!(scale["status"]["selector"], "app=web");

    let out = c.kubectl(&["delete", "deploy", "web"]);
    assert!(out.contains("deployment.apps \"web\" deleted"), "{out}");
    let err = c.kubectl_fails(&["get", "deploy", "web"], None);
    assert!(
        err.contains("NotFound") || err.contains("not found"),
        "{err}"
    );
    c.kubectl_in(
        &["delete", "--ignore-not-found", "-f", "-"],
        Some(SEED_OBJECTS),
    );
    let left = c.kubectl_output(&["get", "sts,ds,jobs"], None);
    assert!(
        String::from_utf8_lossy(&left.stderr).contains("No resources found"),
        "{left:?}"
    );
}

/// Health and version need no credentials; everything else needs a client certificate or a token from
/// `--token-auth-file` (a bad one is 401) and an RBAC grant.
fn authentication_and_health(backend: Backend) {
    let tokens = support::token_file("s3cret,alice,1000,\"dev,ops\"\n");
    let c = Cluster::start_with(
        backend,
        &["--token-auth-file", tokens.path().to_str().unwrap()],
    );
    // Without any credential kubectl prompts for a password, so "no valid credential" is a bad token.
    let anonymous = |extra: &[&str]| {
        let mut args = vec![
            "--kubeconfig=/dev/null",
            "--server",
            c.url.as_str(),
            "--insecure-skip-tls-verify",
        ];
        if !extra.contains(&"--token") {
            args.extend(["--token", "nobody"]);
        }
        args.extend_from_slice(extra);
        c.kubectl_output(&args, None)
    };
    let out = anonymous(&["get", "--raw", "/readyz"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "ok");
    let out = anonymous(&["get", "--raw", "/version"]);
    let version: Value = serde_json::from_slice(&out.stdout).expect("version JSON");
    assert!(
        version["gitVersion"]
            .as_str()
            .unwrap()
            .starts_with("v1.36."),
        "{version}"
    );
    let out = anonymous(&["get", "ns"]);
    assert!(!out.status.success());
    // kubectl's wording for a 401.
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("the server has asked for the client to provide credentials"),
        "{out:?}"
    );
    // A valid token authenticates; RBAC then decides (see tests/rbac.rs): nothing until a binding.
    let out = anonymous(&["--token", "s3cret", "get", "ns", "-o", "name"]);
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("User \"alice\" cannot list resource \"namespaces\""),
        "{out:?}"
    );
    c.kubectl(&[
        "create",
        "clusterrolebinding",
        "ops-view",
        "--clusterrole=view",
        "--group=ops",
    ]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let out = anonymous(&["--token", "s3cret", "get", "ns", "-o", "name"]);
        if String::from_utf8_lossy(&out.stdout).contains("namespace/default") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{out:?}");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    let health = c.kubectl(&["get", "--raw", "/healthz"]);
    assert_eq!(health, "ok");
    // Metrics need credentials, and count what was asked.
    let out = anonymous(&["get", "--raw", "/metrics"]);
    assert!(!out.status.success());
    let metrics = c.kubectl(&["get", "--raw", "/metrics"]);
    assert!(metrics.contains("apiserver_request_total{code=\"200\",group=\"\",resource=\"namespaces\",verb=\"LIST\",version=\"v1\"}"), "{metrics}");
    assert!(metrics.contains("# TYPE apiserver_request_duration_seconds histogram"));
}

const WIDGET_CRD: &str = r#"
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.com
spec:
  group: example.com
  scope: Namespaced
  names: {kind: Widget, plural: widgets, singular: widget, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    subresources: {status: {}}
    schema:
      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}
"#;

/// A CRD is established and served (discovery, CRUD, patch, status, watch cache), survives a restart,
/// and its objects go away with it.
fn custom_resources(backend: Backend) {
    let mut c = Cluster::start(backend);
    c.kubectl_in(&["apply", "-f", "-"], Some(WIDGET_CRD));
    c.kubectl(&[
        "wait",
        "--for=condition=established",
        "crd/widgets.example.com",
        "--timeout=20s",
    ]);
    let resources = c.kubectl(&["api-resources", "--api-group=example.com"]);
    assert!(
        resources.contains("widgets") && resources.contains("wd") && resources.contains("Widget"),
        "{resources}"
    );
    let widget = |name: &str, size: u32| {
        format!("apiVersion: example.com/v1\nkind: Widget\nmetadata:\n  name: {name}\n  labels: {{color: blue}}\nspec:\n  size: {size}\n")
    };
    c.kubectl_in(&["apply", "-f", "-"], Some(&widget("w1", 1)));
    c.kubectl_in(&["create", "-f", "-"], Some(&widget("w2", 2)));
    let header: Vec<String> = c
        .kubectl(&["get", "wd"])
        .lines()
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert_eq!(header, ["NAME", "AGE"]);
    c.kubectl(&[
        "patch",
        "wd",
        "w1",
        "--type=merge",
        "-p",
        r#"{"spec":{"size":5},"status":{"ready":true}}"#,
    ]);
    let w1 = get_json(&c, &["get", "widget", "w1"]);
    assert_eq!(w1["spec"]["size"], 5);
    assert_eq!(w1["metadata"]["generation"], 2);
    assert!(w1.get("status").is_none(), "status is a subresource: {w1}");
    c.kubectl(&[
        "patch",
        "wd",
        "w1",
        "--subresource=status",
        "--type=merge",
        "-p",
        r#"{"status":{"ready":true}}"#,
    ]);
    assert_eq!(
        get_json(&c, &["get", "widget", "w1"])["status"]["ready"],
        true
    );
    c.kubectl(&["label", "wd", "w2", "color=red", "--overwrite"]);
    assert_eq!(
        c.kubectl(&["get", "wd", "-l", "color=red", "-o", "name"])
            .trim(),
        "widget.example.com/w2"
    );

    c.restart();
    c.kubectl(&[
        "wait",
        "--for=condition=established",
        "crd/widgets.example.com",
        "--timeout=20s",
    ]);
    let mut names: Vec<String> = c
        .kubectl(&["get", "wd", "-o", "name"])
        .lines()
        .map(str::to_string)
        .collect();
    names.sort();
    assert_eq!(names, ["widget.example.com/w1", "widget.example.com/w2"]);

    c.kubectl(&["delete", "crd", "widgets.example.com"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let out = c.kubectl_output(
            &[
                "get",
                "--raw",
                "/apis/example.com/v1/namespaces/default/widgets",
            ],
            None,
        );
        if !out.status.success() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the CRD's resource is still served"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Re-creating the CRD brings back no old objects.
    c.kubectl_in(&["apply", "-f", "-"], Some(WIDGET_CRD));
    c.kubectl(&[
        "wait",
        "--for=condition=established",
        "crd/widgets.example.com",
        "--timeout=20s",
    ]);
    let left = c.kubectl_output(&["get", "wd", "-o", "name"], None);
    assert!(
        String::from_utf8_lossy(&left.stdout).trim().is_empty(),
        "{left:?}"
    );
}

on_both_backends!(
    custom_resources,
    authentication_and_health,
    seed_objects_show_upstream_defaults,
    get_headers_match_upstream,
    selectors_and_paging,
    watch_follows_changes,
    patch_label_annotate_scale_delete,
);
