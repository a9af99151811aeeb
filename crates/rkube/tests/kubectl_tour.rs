//! A scripted kubectl tour against `rkube server`: the imperative commands, apply (three rounds of edits),
//! get output formats, wait, describe and events, discovery commands, with the outputs (values, headers,
//! exit codes, error texts) an upstream server gives, and no warning from the server on any command.

mod support;

use serde_json::Value;
use support::{Backend, Cluster};

/// Warnings kubectl prints on its own (not relayed from the server), which upstream shows too.
const CLIENT_SIDE_WARNINGS: &[&str] = &[
    "Warning: deleting Pods that declare no controller",
    "Warning: Immediate deletion does not wait for confirmation",
    "is missing the kubectl.kubernetes.io/last-applied-configuration annotation which is required by kubectl apply",
];

/// Runs kubectl, which must succeed without a server warning; returns stdout.
fn run(c: &Cluster, args: &[&str], stdin: Option<&str>) -> String {
    let out = c.kubectl_output(args, stdin);
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        out.status.success(),
        "kubectl {} failed ({}):\nstdout: {stdout}\nstderr: {stderr}",
        args.join(" "),
        out.status
    );
    for line in stderr.lines().filter(|l| l.starts_with("Warning:")) {
        assert!(
            CLIENT_SIDE_WARNINGS.iter().any(|w| line.contains(w)),
            "kubectl {} printed a server warning: {line}",
            args.join(" ")
        );
    }
    stdout
}

fn json(c: &Cluster, args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&run(c, &all, None)).expect("kubectl -o json")
}

fn imperative_commands(c: &Cluster) {
    let created = [
        (
            vec![
                "create",
                "deployment",
                "web",
                "--image=nginx",
                "--replicas=2",
            ],
            "deployment.apps/web created",
        ),
        (
            vec!["create", "configmap", "c1", "--from-literal=a=b"],
            "configmap/c1 created",
        ),
        (
            vec!["create", "secret", "generic", "s1", "--from-literal=x=y"],
            "secret/s1 created",
        ),
        (
            vec![
                "create",
                "secret",
                "docker-registry",
                "reg",
                "--docker-server=r.example",
                "--docker-username=u",
                "--docker-password=p",
            ],
            "secret/reg created",
        ),
        (vec!["create", "namespace", "n1"], "namespace/n1 created"),
        (
            vec!["create", "serviceaccount", "robot"],
            "serviceaccount/robot created",
        ),
        (
            vec![
                "create",
                "cronjob",
                "cj",
                "--image=busybox",
                "--schedule=*/5 * * * *",
            ],
            "cronjob.batch/cj created",
        ),
        (
            vec!["create", "job", "j1", "--from=cronjob/cj"],
            "job.batch/j1 created",
        ),
        (
            vec!["run", "p1", "--image=busybox", "--labels=tour=yes"],
            "pod/p1 created",
        ),
        (
            vec![
                "expose",
                "deployment",
                "web",
                "--port=80",
                "--target-port=8080",
            ],
            "service/web exposed",
        ),
        (
            vec!["set", "image", "deployment/web", "nginx=nginx:1.25"],
            "deployment.apps/web image updated",
        ),
        (
            vec!["set", "env", "deployment/web", "MODE=tour"],
            "deployment.apps/web env updated",
        ),
        (
            vec![
                "set",
                "resources",
                "deployment/web",
                "--limits=cpu=200m,memory=64Mi",
            ],
            "deployment.apps/web resource requirements updated",
        ),
        (
            vec!["label", "deployment", "web", "tier=front"],
            "deployment.apps/web labeled",
        ),
        (
            vec!["annotate", "deployment", "web", "note=hello"],
            "deployment.apps/web annotated",
        ),
    ];
    for (args, want) in created {
        assert_eq!(
            run(c, &args, None).trim(),
            want,
            "kubectl {}",
            args.join(" ")
        );
    }
    let tls_dir = c.data_dir().join("pki");
    let (cert, key) = (tls_dir.join("apiserver.crt"), tls_dir.join("apiserver.key"));
    let tls = run(
        c,
        &[
            "create",
            "secret",
            "tls",
            "t1",
            &format!("--cert={}", cert.display()),
            &format!("--key={}", key.display()),
        ],
        None,
    );
    assert_eq!(tls.trim(), "secret/t1 created");
    assert_eq!(
        json(c, &["get", "secret", "t1"])["type"],
        "kubernetes.io/tls"
    );
    assert_eq!(
        json(c, &["get", "secret", "reg"])["type"],
        "kubernetes.io/dockerconfigjson"
    );
    assert_eq!(json(c, &["get", "secret", "s1"])["data"]["x"], "eQ==");

    let job = json(c, &["get", "job", "j1"]);
    assert_eq!(
        job["metadata"]["annotations"]["cronjob.kubernetes.io/instantiate"],
        "manual"
    );
    assert_eq!(job["metadata"]["ownerReferences"][0]["kind"], "CronJob");
    let svc = json(c, &["get", "service", "web"]);
    assert_eq!(svc["spec"]["ports"][0]["targetPort"], 8080);
    assert_eq!(svc["spec"]["selector"]["app"], "web");
    assert!(svc["spec"]["clusterIP"]
        .as_str()
        .unwrap()
        .starts_with("10."));
    let web = json(c, &["get", "deployment", "web"]);
    let container = &web["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "nginx:1.25");
    assert_eq!(container["env"][0]["value"], "tour");
    assert_eq!(container["resources"]["limits"]["memory"], "64Mi");
    assert_eq!(web["metadata"]["labels"]["tier"], "front");
    assert_eq!(web["metadata"]["annotations"]["note"], "hello");

    let refused = c.kubectl_fails(&["label", "deployment", "web", "tier=back"], None);
    assert!(
        refused.contains("'tier' already has a value (front), and --overwrite is false"),
        "{refused}"
    );
    assert_eq!(
        run(
            c,
            &["label", "deployment", "web", "tier=back", "--overwrite"],
            None
        )
        .trim(),
        "deployment.apps/web labeled"
    );

    // Patches of the three types, replace, and edit with a scripted editor.
    let patches = [
        (
            vec![
                "patch",
                "configmap",
                "c1",
                "--type=merge",
                "-p",
                r#"{"data":{"m":"1"}}"#,
            ],
            "configmap/c1 patched",
        ),
        (
            vec![
                "patch",
                "configmap",
                "c1",
                "--type=json",
                "-p",
                r#"[{"op":"add","path":"/data/j","value":"2"}]"#,
            ],
            "configmap/c1 patched",
        ),
        (
            vec![
                "patch",
                "deployment",
                "web",
                "--type=strategic",
                "-p",
                r#"{"spec":{"template":{"spec":{"containers":[{"name":"nginx","env":[{"name":"EXTRA","value":"x"}]}]}}}}"#,
            ],
            "deployment.apps/web patched",
        ),
        (
            vec![
                "patch",
                "configmap",
                "c1",
                "--type=merge",
                "-p",
                r#"{"data":{"m":"1"}}"#,
            ],
            "configmap/c1 patched (no change)",
        ),
    ];
    for (args, want) in patches {
        assert_eq!(
            run(c, &args, None).trim(),
            want,
            "kubectl {}",
            args.join(" ")
        );
    }
    let env =
        &json(c, &["get", "deployment", "web"])["spec"]["template"]["spec"]["containers"][0]["env"];
    assert_eq!(env.as_array().map(Vec::len), Some(2), "{env}");
    let data = &json(c, &["get", "configmap", "c1"])["data"];
    assert_eq!(
        (data["a"].as_str(), data["m"].as_str(), data["j"].as_str()),
        (Some("b"), Some("1"), Some("2"))
    );
    let bad = c.kubectl_fails(
        &[
            "patch",
            "configmap",
            "c1",
            "--type=json",
            "-p",
            r#"[{"op":"remove","path":"/data/nope"}]"#,
        ],
        None,
    );
    assert!(
        bad.contains("The request is invalid") && bad.contains("/data/nope"),
        "{bad}"
    );

    let replaced = run(
        c,
        &["replace", "-f", "-"],
        Some("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c1}\ndata: {only: one}\n"),
    );
    assert_eq!(replaced.trim(), "configmap/c1 replaced");
    let editor = c.data_dir().join("editor.sh");
    std::fs::write(
        &editor,
        "#!/bin/sh\nsed -i 's/only: one/only: edited/' \"$1\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let out = c.kubectl_output_env(
        &["edit", "configmap", "c1"],
        &[("EDITOR", editor.to_str().unwrap())],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "configmap/c1 edited"
    );
    assert_eq!(
        json(c, &["get", "configmap", "c1"])["data"]["only"],
        "edited"
    );
}

fn nodes_and_drain(c: &Cluster) {
    run(c, &["create", "-f", "-"], Some("apiVersion: v1\nkind: Node\nmetadata: {name: n1}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: onnode}\nspec: {nodeName: n1, containers: [{name: c, image: busybox}]}\n"));
    assert_eq!(
        run(c, &["taint", "node", "n1", "dedicated=db:NoSchedule"], None).trim(),
        "node/n1 tainted"
    );
    assert_eq!(
        json(c, &["get", "node", "n1"])["spec"]["taints"][0]["effect"],
        "NoSchedule"
    );
    assert_eq!(
        run(c, &["taint", "node", "n1", "dedicated-"], None).trim(),
        "node/n1 untainted"
    );
    assert_eq!(run(c, &["cordon", "n1"], None).trim(), "node/n1 cordoned");
    assert_eq!(
        json(c, &["get", "node", "n1"])["spec"]["unschedulable"],
        true
    );
    assert_eq!(
        run(c, &["uncordon", "n1"], None).trim(),
        "node/n1 uncordoned"
    );
    let drained = run(
        c,
        &[
            "drain",
            "n1",
            "--force",
            "--grace-period=0",
            "--ignore-daemonsets",
        ],
        None,
    );
    assert!(drained.contains("evicting pod default/onnode"), "{drained}");
    assert!(
        drained.contains("pod/onnode evicted") && drained.contains("node/n1 drained"),
        "{drained}"
    );
    let gone = c.kubectl_fails(&["get", "pod", "onnode"], None);
    assert!(
        gone.contains(r#"Error from server (NotFound): pods "onnode" not found"#),
        "{gone}"
    );

    // wait: a condition, a JSONPath value, a deletion.
    run(
        c,
        &[
            "patch",
            "node",
            "n1",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady","message":"ready"}]}}"#,
        ],
        None,
    );
    assert_eq!(
        run(
            c,
            &["wait", "--for=condition=Ready", "node/n1", "--timeout=10s"],
            None
        )
        .trim(),
        "node/n1 condition met"
    );
    assert_eq!(
        run(
            c,
            &[
                "wait",
                "--for=jsonpath={.spec.unschedulable}=true",
                "node/n1",
                "--timeout=10s"
            ],
            None
        )
        .trim(),
        "node/n1 condition met"
    );
    let timed_out = c.kubectl_fails(
        &[
            "wait",
            "--for=condition=DiskPressure",
            "node/n1",
            "--timeout=1s",
        ],
        None,
    );
    assert!(
        timed_out.contains("timed out waiting for the condition on nodes/n1"),
        "{timed_out}"
    );

    // --for=delete returns once another client deletes the object.
    run(c, &["create", "configmap", "doomed"], None);
    let deleter = {
        let kubeconfig = c.kubeconfig.clone();
        std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(500));
            std::process::Command::new("kubectl")
                .args(["delete", "configmap", "doomed"])
                .env("KUBECONFIG", kubeconfig)
                .output()
                .expect("kubectl delete")
        })
    };
    let waited = run(
        c,
        &["wait", "--for=delete", "configmap/doomed", "--timeout=20s"],
        None,
    );
    assert_eq!(waited.trim(), "configmap/doomed condition met");
    assert!(deleter.join().unwrap().status.success());

    // diff: exit 1 and a unified diff for a change, exit 0 once applied.
    let node = "apiVersion: v1\nkind: Node\nmetadata: {name: n1, labels: {zone: a}}\n";
    let diff = c.kubectl_output(&["diff", "-f", "-"], Some(node));
    assert_eq!(
        diff.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&diff.stderr)
    );
    assert!(String::from_utf8_lossy(&diff.stdout).contains("+    zone: a"));
    run(c, &["apply", "-f", "-"], Some(node));
    let same = c.kubectl_output(&["diff", "-f", "-"], Some(node));
    assert_eq!(
        same.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&same.stdout)
    );
}

fn get_formats_and_discovery(c: &Cluster) {
    let columns = run(
        c,
        &[
            "get",
            "deployment",
            "web",
            "-o",
            "custom-columns=NAME:.metadata.name,IMAGE:.spec.template.spec.containers[0].image",
        ],
        None,
    );
    assert_eq!(columns, "NAME   IMAGE\nweb    nginx:1.25\n");
    assert_eq!(
        run(
            c,
            &[
                "get",
                "deployment",
                "web",
                "-o",
                "jsonpath={.spec.replicas}"
            ],
            None
        ),
        "2"
    );
    assert_eq!(
        run(
            c,
            &[
                "get",
                "configmaps",
                "-o",
                "name",
                "--sort-by=.metadata.name",
                "-l",
                "!kubernetes.io/nope"
            ],
            None
        )
        .lines()
        .next(),
        Some("configmap/c1")
    );
    let labels = run(c, &["get", "pods", "--show-labels"], None);
    assert!(
        labels.lines().next().unwrap().ends_with("LABELS"),
        "{labels}"
    );
    assert!(labels.contains("tour=yes"), "{labels}");
    let wide = run(c, &["get", "pods", "-o", "wide"], None);
    let header: Vec<&str> = wide.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "READY",
            "STATUS",
            "RESTARTS",
            "AGE",
            "IP",
            "NODE",
            "NOMINATED",
            "NODE",
            "READINESS",
            "GATES"
        ]
    );
    let sorted = run(
        c,
        &["get", "secrets", "--sort-by=.metadata.name", "-o", "name"],
        None,
    );
    let names: Vec<&str> = sorted.lines().collect();
    let mut expected = names.clone();
    expected.sort();
    assert_eq!(names, expected);

    let namespaced = run(
        c,
        &["api-resources", "--namespaced=true", "-o", "name"],
        None,
    );
    assert!(
        namespaced.lines().any(|l| l == "pods") && !namespaced.lines().any(|l| l == "nodes"),
        "{namespaced}"
    );
    let wide = run(c, &["api-resources", "-o", "wide"], None);
    assert!(wide.lines().next().unwrap().contains("VERBS"), "{wide}");
    let pods_line = wide.lines().find(|l| l.starts_with("pods ")).unwrap();
    assert!(
        pods_line.contains("create,delete,deletecollection,get,list,patch,update,watch"),
        "{pods_line}"
    );
    let versions = run(c, &["api-versions"], None);
    assert!(
        versions.lines().any(|l| l == "apps/v1") && versions.lines().any(|l| l == "v1"),
        "{versions}"
    );
    let info = run(c, &["cluster-info"], None);
    assert!(
        info.contains(&format!("Kubernetes control plane is running at {}", c.url)),
        "{info}"
    );
    let version = run(c, &["version"], None);
    assert!(
        version.contains("Server Version: v1.36.0-rkube"),
        "{version}"
    );
}

fn describe_and_events(c: &Cluster) {
    let uid = run(
        c,
        &["get", "pod", "p1", "-o", "jsonpath={.metadata.uid}"],
        None,
    );
    let event = format!(
        "apiVersion: v1\nkind: Event\nmetadata: {{name: p1.tour, namespace: default}}\ninvolvedObject: {{kind: Pod, name: p1, namespace: default, uid: {uid}, apiVersion: v1}}\nreason: Scheduled\nmessage: Successfully assigned default/p1 to n1\ntype: Normal\nsource: {{component: default-scheduler}}\nfirstTimestamp: \"2026-01-01T00:00:00Z\"\nlastTimestamp: \"2026-01-01T00:00:00Z\"\ncount: 1\n"
    );
    run(c, &["create", "-f", "-"], Some(&event));
    let described = run(c, &["describe", "pod", "p1"], None);
    let first: Vec<Vec<&str>> = described
        .lines()
        .take(2)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        first,
        [vec!["Name:", "p1"], vec!["Namespace:", "default"]],
        "{described}"
    );
    // Column widths depend on the other events (the scheduler's FailedScheduling among them).
    let words = described.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(words.contains("Normal Scheduled"), "{described}");
    assert!(
        words.contains("default-scheduler Successfully assigned default/p1 to n1"),
        "{described}"
    );
    let deployment = run(c, &["describe", "deployment", "web"], None);
    assert!(
        deployment.contains("Replicas:               2 desired"),
        "{deployment}"
    );
    let events = run(c, &["events", "--for", "pod/p1"], None);
    let header: Vec<&str> = events.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        ["LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"]
    );
    assert!(events.contains("Pod/p1"), "{events}");

    // events.k8s.io/v1 and core/v1 Events are the same objects, converted.
    let new_style = "apiVersion: events.k8s.io/v1\nkind: Event\nmetadata: {name: p1.pulled, namespace: default}\neventTime: \"2026-01-01T00:00:01.000000Z\"\nregarding: {apiVersion: v1, kind: Pod, name: p1, namespace: default}\nreason: Pulled\nnote: image pulled\ntype: Normal\naction: Pull\nreportingController: kubelet\nreportingInstance: n1\n";
    assert_eq!(
        run(c, &["create", "-f", "-"], Some(new_style)).trim(),
        "event.events.k8s.io/p1.pulled created"
    );
    assert_eq!(
        run(
            c,
            &[
                "get",
                "event",
                "p1.pulled",
                "-o",
                "jsonpath={.message}/{.involvedObject.name}/{.reportingComponent}"
            ],
            None
        ),
        "image pulled/p1/kubelet"
    );
    assert_eq!(
        run(
            c,
            &[
                "get",
                "events.v1.events.k8s.io",
                "p1.tour",
                "-o",
                "jsonpath={.note}/{.regarding.name}/{.deprecatedCount}"
            ],
            None
        ),
        "Successfully assigned default/p1 to n1/p1/1"
    );
    let both = run(c, &["events", "--for", "pod/p1"], None);
    assert!(
        both.contains("image pulled") && both.contains("Successfully assigned"),
        "{both}"
    );
}

fn deletes(c: &Cluster) {
    assert_eq!(
        run(
            c,
            &[
                "delete",
                "pod",
                "-l",
                "tour=yes",
                "--grace-period=0",
                "--force"
            ],
            None
        )
        .trim(),
        "pod \"p1\" force deleted"
    );
    let all = run(c, &["delete", "configmap", "--all"], None);
    assert!(all.contains("configmap \"c1\" deleted"), "{all}");
    assert_eq!(
        run(c, &["get", "configmaps", "-o", "name"], None)
            .lines()
            .filter(|l| l.contains("c1"))
            .count(),
        0
    );
    assert_eq!(
        run(
            c,
            &["delete", "deployment", "web", "--cascade=background"],
            None
        )
        .trim(),
        "deployment.apps \"web\" deleted"
    );
    // Orphan and foreground deletion: the API marks the object with the finalizer the garbage collector
    // acts on (`--wait=false`: waiting for the removal needs the garbage collector of issue 9).
    for (name, cascade, finalizer) in [
        ("keep-pods", "orphan", "orphan"),
        ("fg", "foreground", "foregroundDeletion"),
    ] {
        run(c, &["create", "deployment", name, "--image=nginx"], None);
        let deleted = run(
            c,
            &[
                "delete",
                "deployment",
                name,
                &format!("--cascade={cascade}"),
                "--wait=false",
            ],
            None,
        );
        assert_eq!(
            deleted.trim(),
            format!("deployment.apps \"{name}\" deleted")
        );
        let marked = json(c, &["get", "deployment", name]);
        assert_eq!(
            marked["metadata"]["finalizers"],
            serde_json::json!([finalizer])
        );
        assert!(marked["metadata"]["deletionTimestamp"].is_string());
    }
    let missing = c.kubectl_fails(&["delete", "deployment", "web"], None);
    assert!(
        missing.contains(r#"Error from server (NotFound): deployments.apps "web" not found"#),
        "{missing}"
    );
}

/// Applies a two-document manifest three times with edits between: a label and a list item removed and
/// a ConfigMap key dropped, then list items reordered and an image changed. Expected objects follow
/// upstream's three-way strategic merge (removed fields go, `$setElementOrder` reorders, unchanged
/// applies are no-ops that do not bump the generation).
fn apply_three_times(c: &Cluster) {
    let first = r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: tour
  labels: {app: tour, tier: web}
spec:
  replicas: 1
  selector: {matchLabels: {app: tour}}
  template:
    metadata: {labels: {app: tour}}
    spec:
      containers:
      - name: main
        image: nginx:1.25
        env:
        - {name: A, value: "1"}
        - {name: B, value: "2"}
        ports:
        - {containerPort: 80, name: http}
        - {containerPort: 443, name: https}
      - name: side
        image: busybox
---
apiVersion: v1
kind: ConfigMap
metadata: {name: tour-cm}
data: {a: "1", b: "2"}
"#;
    let second = first
        .replace("labels: {app: tour, tier: web}", "labels: {app: tour}")
        .replace("        - {name: B, value: \"2\"}\n", "")
        .replace("data: {a: \"1\", b: \"2\"}", "data: {a: \"1\"}");
    let third = second
        .replace(
            "        - {containerPort: 80, name: http}\n        - {containerPort: 443, name: https}\n",
            "        - {containerPort: 443, name: https}\n        - {containerPort: 80, name: http}\n",
        )
        .replace("image: nginx:1.25", "image: nginx:1.26");
    let apply = |manifest: &str| run(c, &["apply", "-f", "-"], Some(manifest));
    assert_eq!(
        apply(first),
        "deployment.apps/tour created\nconfigmap/tour-cm created\n"
    );
    assert_eq!(
        apply(first),
        "deployment.apps/tour unchanged\nconfigmap/tour-cm unchanged\n"
    );
    assert_eq!(
        apply(&second),
        "deployment.apps/tour configured\nconfigmap/tour-cm configured\n"
    );
    let d = json(c, &["get", "deployment", "tour"]);
    assert_eq!(d["metadata"]["labels"], serde_json::json!({"app": "tour"}));
    let main = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        main["env"],
        serde_json::json!([{"name": "A", "value": "1"}])
    );
    assert_eq!(
        json(c, &["get", "configmap", "tour-cm"])["data"],
        serde_json::json!({"a": "1"})
    );
    assert_eq!(d["metadata"]["generation"], 2);
    assert_eq!(
        apply(&third),
        "deployment.apps/tour configured\nconfigmap/tour-cm unchanged\n"
    );
    assert_eq!(
        apply(&third),
        "deployment.apps/tour unchanged\nconfigmap/tour-cm unchanged\n"
    );
    let d = json(c, &["get", "deployment", "tour"]);
    let main = &d["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(main["image"], "nginx:1.26");
    assert_eq!(
        main["ports"],
        serde_json::json!([
            {"containerPort": 443, "name": "https", "protocol": "TCP"},
            {"containerPort": 80, "name": "http", "protocol": "TCP"}
        ])
    );
    assert_eq!(
        d["spec"]["template"]["spec"]["containers"][1]["name"],
        "side"
    );
    assert_eq!(d["metadata"]["generation"], 3);
    let applied: Value = serde_json::from_str(
        d["metadata"]["annotations"]["kubectl.kubernetes.io/last-applied-configuration"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(
        applied["metadata"]["labels"],
        serde_json::json!({"app": "tour"})
    );

    // --prune with a label selector deletes what the manifest no longer has.
    let two = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: pa, labels: {set: prune}}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: pb, labels: {set: prune}}\n";
    run(
        c,
        &["apply", "--prune", "-l", "set=prune", "-f", "-"],
        Some(two),
    );
    let one = two.split("---\n").next().unwrap();
    let pruned = run(
        c,
        &["apply", "--prune", "-l", "set=prune", "-f", "-"],
        Some(one),
    );
    assert_eq!(pruned, "configmap/pa unchanged\nconfigmap/pb pruned\n");
    assert_eq!(
        run(
            c,
            &["get", "configmaps", "-l", "set=prune", "-o", "name"],
            None
        ),
        "configmap/pa\n"
    );
}

fn kubectl_tour(backend: Backend) {
    let c = Cluster::start(backend);
    imperative_commands(&c);
    nodes_and_drain(&c);
    get_formats_and_discovery(&c);
    describe_and_events(&c);
    apply_three_times(&c);
    deletes(&c);
}

on_both_backends!(kubectl_tour);
