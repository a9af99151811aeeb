//! Logs, exec, attach, cp, port-forward and node proxying through the API server to a kubelet, with a
//! fake kubelet (`support/fake_kubelet.rs`) instead of a container runtime: kubectl's WebSockets are
//! translated to SPDY (exec/attach) or unwrapped (port-forward), its SPDY fallback is passed through,
//! and the API server authenticates to the kubelet with its client certificate. Runs everywhere.

#[path = "support/fake_kubelet.rs"]
mod fake_kubelet;
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use fake_kubelet::FakeKubelet;
use support::{Backend, Cluster};

const NODE: &str = "fake-node";

/// Registers `NODE` with the fake kubelet's address and port, as a kubelet does.
fn register_node(cluster: &Cluster, kubelet: &FakeKubelet) {
    cluster.kubectl_in(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: v1\nkind: Node\nmetadata:\n  name: {NODE}\n  labels:\n    kubernetes.io/hostname: {NODE}\n"
        )),
    );
    let status = serde_json::json!({"status": {
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}, {"type": "Hostname", "address": NODE}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet.addr.port()}},
    }});
    cluster.kubectl(&[
        "patch",
        "node",
        NODE,
        "--subresource=status",
        "--type=merge",
        "-p",
        &status.to_string(),
    ]);
}

/// A pod bound to `node` (none: unscheduled) with the given containers, optionally marked Running.
fn create_pod(cluster: &Cluster, name: &str, node: Option<&str>, containers: &[&str], port: u16) {
    let containers: Vec<serde_json::Value> = containers
        .iter()
        .map(|c| serde_json::json!({"name": c, "image": "busybox", "ports": [{"containerPort": port}]}))
        .collect();
    let mut pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": containers},
    });
    if let Some(node) = node {
        pod["spec"]["nodeName"] = node.into();
    }
    cluster.kubectl_in(&["apply", "-f", "-"], Some(&pod.to_string()));
    if node.is_some() {
        cluster.kubectl(&[
            "patch",
            "pod",
            name,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status":{"phase":"Running"}}"#,
        ]);
    }
}

struct Setup {
    cluster: Cluster,
    kubelet: FakeKubelet,
    _rt: tokio::runtime::Runtime,
}

/// No local node: the fake kubelet is the only one.
const NO_LOCAL_NODE: &[&str] = &["--disable-kubelet"];

fn setup() -> Setup {
    let cluster = Cluster::start_with(Backend::Sqlite, NO_LOCAL_NODE);
    let rt = support::runtime();
    let kubelet = rt.block_on(FakeKubelet::start(
        &cluster.data_dir().join("pki/ca.crt"),
        fake_kubelet::serving_cert(None),
    ));
    register_node(&cluster, &kubelet);
    Setup {
        cluster,
        kubelet,
        _rt: rt,
    }
}

fn stderr_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn stdout_of(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn logs_reach_the_kubelet_with_upstream_parameters_and_errors() {
    let s = setup();
    let c = &s.cluster;
    create_pod(c, "p", Some(NODE), &["app"], 80);
    create_pod(c, "multi", Some(NODE), &["app", "missing", "waiting"], 80);
    create_pod(c, "pending", None, &["app"], 80);

    assert_eq!(
        c.kubectl(&["logs", "p"]),
        "query: \nline 1\nline 2\nline 3\n"
    );
    let out = c.kubectl(&[
        "logs",
        "p",
        "--tail=2",
        "--timestamps",
        "--since=1h",
        "--limit-bytes=100",
    ]);
    assert_eq!(
        out.lines().next().unwrap(),
        "query: limitBytes=100&sinceSeconds=3600&tailLines=2&timestamps=true"
    );
    assert!(c
        .kubectl(&["logs", "p", "--previous"])
        .starts_with("query: previous=true\n"));
    // Follow streams until the kubelet ends the stream.
    assert_eq!(
        c.kubectl(&["logs", "-f", "p"]),
        "query: follow=true\nline 1\nline 2\nline 3\nline 4\nline 5\n"
    );
    // The API server authenticated to the kubelet with its kubelet client certificate.
    let requests = s.kubelet.requests();
    assert!(
        requests
            .iter()
            .any(|r| r
                .starts_with("kube-apiserver-kubelet-client GET /containerLogs/default/p/app?")),
        "{requests:?}"
    );

    // Errors as upstream words them.
    let err = c.kubectl_fails(
        &["get", "--raw", "/api/v1/namespaces/default/pods/multi/log"],
        None,
    );
    assert!(
        err.contains("a container name must be specified for pod multi, choose one of: [app missing waiting]"),
        "{err}"
    );
    let err = c.kubectl_fails(&["logs", "p", "-c", "nope"], None);
    assert!(
        err.contains("container nope is not valid for pod p"),
        "{err}"
    );
    let err = c.kubectl_fails(&["logs", "multi", "-c", "missing"], None);
    assert!(
        err.contains(
            "(NotFound): the server could not find the requested resource ( pods/log multi)"
        ),
        "{err}"
    );
    let err = c.kubectl_fails(&["logs", "multi", "-c", "waiting"], None);
    assert!(
        err.contains("(BadRequest): container \"waiting\" in pod \"p\" is waiting to start: ContainerCreating"),
        "{err}"
    );
    let err = c.kubectl_fails(
        &[
            "get",
            "--raw",
            "/api/v1/namespaces/default/pods/p/log?tailLines=-1",
        ],
        None,
    );
    assert!(
        err.contains("PodLogOptions \"p\" is invalid: tailLines: Invalid value: -1: must be greater than or equal to 0"),
        "{err}"
    );
    let err = c.kubectl_fails(&["logs", "ghost"], None);
    assert!(err.contains("pods \"ghost\" not found"), "{err}");
    // No node yet: nothing to show, and no error.
    assert_eq!(c.kubectl(&["logs", "pending"]), "");
}

#[test]
fn exec_over_websocket_and_spdy() {
    let s = setup();
    let c = &s.cluster;
    create_pod(c, "p", Some(NODE), &["app"], 80);
    create_pod(c, "pending", None, &["app"], 80);
    for websockets in ["true", "false"] {
        let env = [("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", websockets)];
        let out = c.kubectl_output_env(
            &[
                "exec",
                "p",
                "--",
                "sh",
                "-c",
                "echo out; echo err >&2; exit 3",
            ],
            &env,
        );
        assert_eq!(
            out.status.code(),
            Some(3),
            "websockets={websockets}: {}",
            stderr_of(&out)
        );
        assert_eq!(stdout_of(&out), "out\n");
        let err = stderr_of(&out);
        assert!(err.contains("err\n"), "{err}");
        assert!(err.contains("command terminated with exit code 3"), "{err}");

        // stdin reaches the command and its end closes the command's stdin.
        let out = kubectl_stdin(c, &["exec", "-i", "p", "--", "cat"], "hello\nworld\n", &env);
        assert!(
            out.status.success(),
            "websockets={websockets}: {}",
            stderr_of(&out)
        );
        assert_eq!(stdout_of(&out), "hello\nworld\n");

        let out = c.kubectl_output_env(&["exec", "pending", "--", "true"], &env);
        assert!(
            stderr_of(&out).contains("pod pending does not have a host assigned"),
            "{}",
            stderr_of(&out)
        );
        let out = c.kubectl_output_env(&["exec", "p", "-c", "nope", "--", "true"], &env);
        assert!(
            stderr_of(&out).contains("container nope is not valid for pod p"),
            "{}",
            stderr_of(&out)
        );
    }
    // kubectl's v5 WebSocket was translated (the API server's own SPDY request carries no user
    // agent); its SPDY fallback went through unchanged (kubectl's user agent). Either way the kubelet
    // got its own parameters.
    let requests = s.kubelet.requests();
    let exec = "POST /exec/default/p/app?command=sh&command=-c&command=echo+out%3B+echo+err+%3E%262%3B+exit+3&stderr=1&stdout=1";
    for agent in ["agent=", "agent=kubectl"] {
        assert!(
            requests
                .iter()
                .any(|r| r.ends_with(&format!("{exec} {agent}"))),
            "{agent}: {requests:?}"
        );
    }
}

fn kubectl_stdin(
    c: &Cluster,
    args: &[&str],
    input: &str,
    env: &[(&str, &str)],
) -> std::process::Output {
    let mut child = Command::new("kubectl")
        .args(args)
        .envs(env.iter().copied())
        .env("KUBECONFIG", &c.kubeconfig)
        .env("HOME", c.data_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("write stdin");
    wait_output(child, Duration::from_secs(60))
}

fn wait_output(mut child: std::process::Child, timeout: Duration) -> std::process::Output {
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().expect("output"),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("output");
                panic!(
                    "kubectl did not finish in time; stderr: {}",
                    stderr_of(&out)
                );
            }
        }
    }
}

#[test]
fn cp_in_and_out_and_attach() {
    let s = setup();
    let c = &s.cluster;
    create_pod(c, "p", Some(NODE), &["app"], 80);
    // The fake kubelet's "container" is this machine: copy into a directory of the test.
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local.txt");
    std::fs::write(&local, "copied through exec and tar\n").unwrap();
    let inside = dir.path().join("inside");
    std::fs::create_dir(&inside).unwrap();
    for websockets in ["true", "false"] {
        let env = [("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", websockets)];
        let target = inside.join(format!("in-{websockets}.txt"));
        let out = c.kubectl_output_env(
            &[
                "cp",
                local.to_str().unwrap(),
                &format!("p:{}", target.display()),
            ],
            &env,
        );
        assert!(out.status.success(), "cp in: {}", stderr_of(&out));
        assert_eq!(
            std::fs::read_to_string(&target).unwrap(),
            "copied through exec and tar\n"
        );
        let back = dir.path().join(format!("back-{websockets}.txt"));
        let out = c.kubectl_output_env(
            &[
                "cp",
                &format!("p:{}", target.display()),
                back.to_str().unwrap(),
            ],
            &env,
        );
        assert!(out.status.success(), "cp out: {}", stderr_of(&out));
        assert_eq!(
            std::fs::read_to_string(&back).unwrap(),
            "copied through exec and tar\n"
        );

        // The fake's attached "main process" upper-cases its stdin.
        let out = kubectl_stdin(c, &["attach", "-i", "p"], "attached\n", &env);
        assert!(out.status.success(), "attach: {}", stderr_of(&out));
        assert!(
            stdout_of(&out).contains("ATTACHED\n"),
            "{}",
            stdout_of(&out)
        );
    }
}

/// A one-shot HTTP server on loopback standing in for the pod's application.
fn start_app() -> (u16, std::thread::JoinHandle<()>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        for conn in listener.incoming().take(2) {
            let Ok(mut conn) = conn else { continue };
            let mut buf = [0u8; 1024];
            let _ = conn.read(&mut buf);
            let _ = conn.write_all(
                b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\npong\n",
            );
        }
    });
    (port, handle)
}

fn http_get(port: u16) -> String {
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    conn.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut out = String::new();
    let _ = conn.read_to_string(&mut out);
    out
}

#[test]
fn port_forward_over_websocket_and_spdy() {
    let s = setup();
    let c = &s.cluster;
    let (app_port, app) = start_app();
    create_pod(c, "p", Some(NODE), &["app"], app_port);
    for websockets in ["true", "false"] {
        let mut child = Command::new("kubectl")
            .args(["port-forward", "pod/p", &format!(":{app_port}")])
            .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", websockets)
            .env("KUBECONFIG", &c.kubeconfig)
            .env("HOME", c.data_dir())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("kubectl port-forward");
        // "Forwarding from 127.0.0.1:NNNN -> PORT"
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let local = loop {
            let line = rx
                .recv_timeout(Duration::from_secs(60))
                .expect("port-forward prints its local port");
            if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
                break rest.split(' ').next().unwrap().parse::<u16>().unwrap();
            }
        };
        let response = http_get(local);
        let _ = child.kill();
        let out = child.wait_with_output().unwrap();
        assert!(
            response.ends_with("pong\n"),
            "websockets={websockets}: {response:?}; kubectl: {}",
            stderr_of(&out)
        );
    }
    app.join().unwrap();
    let requests = s.kubelet.requests();
    assert!(
        requests
            .iter()
            .filter(|r| r.contains("POST /portForward/default/p?"))
            .count()
            >= 2,
        "{requests:?}"
    );
}

#[test]
fn node_proxy_and_discovery() {
    let s = setup();
    let c = &s.cluster;
    assert_eq!(
        c.kubectl(&[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{NODE}/proxy/healthz")
        ]),
        "ok /healthz"
    );
    assert_eq!(
        c.kubectl(&[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{NODE}/proxy/configz?x=1")
        ]),
        "ok /configz"
    );
    assert!(s
        .kubelet
        .requests()
        .iter()
        .any(|r| r == "kube-apiserver-kubelet-client GET /configz?x=1 agent=kubectl"));
    let err = c.kubectl_fails(&["get", "--raw", "/api/v1/nodes/ghost/proxy/healthz"], None);
    assert!(err.contains("nodes \"ghost\" not found"), "{err}");

    let discovery: serde_json::Value =
        serde_json::from_str(&c.kubectl(&["get", "--raw", "/api/v1"])).unwrap();
    let find = |name: &str| {
        discovery["resources"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} is listed"))
    };
    for (name, kind, verbs) in [
        ("pods/exec", "PodExecOptions", vec!["create", "get"]),
        ("pods/attach", "PodAttachOptions", vec!["create", "get"]),
        (
            "pods/portforward",
            "PodPortForwardOptions",
            vec!["create", "get"],
        ),
        ("pods/log", "Pod", vec!["get"]),
        (
            "pods/proxy",
            "PodProxyOptions",
            vec!["create", "delete", "get", "patch", "update"],
        ),
        (
            "nodes/proxy",
            "NodeProxyOptions",
            vec!["create", "delete", "get", "patch", "update"],
        ),
        (
            "services/proxy",
            "ServiceProxyOptions",
            vec!["create", "delete", "get", "patch", "update"],
        ),
    ] {
        let r = find(name);
        assert_eq!(r["kind"], kind, "{name}");
        assert_eq!(r["verbs"], serde_json::json!(verbs), "{name}");
    }
}

#[test]
fn kubelet_serving_certificates_are_verified_with_a_ca() {
    let (ca_cert, ca_key) = fake_kubelet::make_ca();
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("kubelet-ca.crt");
    std::fs::write(&ca_file, &ca_cert).unwrap();
    let cluster = Cluster::start_with(
        Backend::Sqlite,
        &[
            "--disable-kubelet",
            "--kubelet-certificate-authority",
            ca_file.to_str().unwrap(),
        ],
    );
    let rt = support::runtime();
    let client_ca = cluster.data_dir().join("pki/ca.crt");
    // Signed by the CA: trusted. Self-signed: refused unless the request skips verification.
    let trusted = rt.block_on(FakeKubelet::start(
        &client_ca,
        fake_kubelet::serving_cert(Some((&ca_cert, &ca_key))),
    ));
    register_node(&cluster, &trusted);
    create_pod(&cluster, "p", Some(NODE), &["app"], 80);
    assert!(cluster.kubectl(&["logs", "p"]).contains("line 3"));

    let untrusted = rt.block_on(FakeKubelet::start(
        &client_ca,
        fake_kubelet::serving_cert(None),
    ));
    register_node(&cluster, &untrusted);
    let err = cluster.kubectl_fails(&["logs", "p"], None);
    assert!(err.contains("certificate"), "{err}");
    assert!(cluster
        .kubectl(&["logs", "p", "--insecure-skip-tls-verify-backend"])
        .contains("line 3"));
}
