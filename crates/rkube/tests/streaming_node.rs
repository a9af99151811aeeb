//! Logs, exec (with a terminal too), attach, cp, port-forward and node proxying against a real node:
//! kubectl -> API server -> the kubelet's HTTPS server -> containerd's streaming server, over
//! kubectl's default WebSockets and over its SPDY fallback. Seed 003's StatefulSet at two replicas
//! serves its neighbour's nginx page through `kubectl exec ... wget`, and through the pod and service
//! proxies. Needs what `kubelet.rs` needs
//! (root, containerd, runc, CNI plugins, `scripts/images.sh`).

#[path = "support/real_node.rs"]
mod real_node;
mod support;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use real_node::{wait_for, RealNode, NODE};
use serde_json::Value;

/// Both of kubectl's transports for exec/attach/cp: WebSockets (its default) and SPDY.
const REMOTE_COMMAND_MODES: [&str; 2] = ["true", "false"];

fn run_kubectl(
    node: &RealNode,
    args: &[&str],
    stdin: Option<&[u8]>,
    env: &[(&str, &str)],
) -> std::process::Output {
    let c = &node.cluster;
    let mut child = Command::new("kubectl")
        .args(args)
        .envs(env.iter().copied())
        .env("KUBECONFIG", &c.kubeconfig)
        .env("HOME", c.data_dir())
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl");
    if let Some(input) = stdin {
        let mut pipe = child.stdin.take().expect("stdin");
        pipe.write_all(input).expect("stdin");
    }
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        match child.try_wait() {
            Ok(Some(_)) => return child.wait_with_output().expect("output"),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            _ => {
                let _ = child.kill();
                let out = child.wait_with_output().expect("output");
                panic!(
                    "kubectl {} did not finish; stderr: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr)
                );
            }
        }
    }
}

fn ok(out: &std::process::Output, what: &str) -> String {
    assert!(
        out.status.success(),
        "{what}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn running(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["containerStatuses"]
            .as_array()
            .is_some_and(|cs| cs.iter().all(|c| c["state"]["running"].is_object()))
}

/// kubectl on a pseudo-terminal of `rows` x `cols`, fed `steps`: each waits for its text in the
/// output, then types its input. Returns the whole output and the exit code.
fn kubectl_on_a_terminal(
    node: &RealNode,
    args: &[&str],
    rows: u16,
    cols: u16,
    steps: &[(&str, &str)],
) -> (String, Option<i32>) {
    let (mut master, mut slave) = (0, 0);
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: openpty fills two descriptors that are owned below.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            &size,
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: fresh descriptors from openpty, owned exactly once here.
    let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
    let c = &node.cluster;
    let mut cmd = Command::new("kubectl");
    cmd.args(args)
        .env("KUBECONFIG", &c.kubeconfig)
        .env("HOME", c.data_dir())
        .env("TERM", "xterm")
        .stdin(Stdio::from(slave.try_clone().unwrap()))
        .stdout(Stdio::from(slave.try_clone().unwrap()))
        .stderr(Stdio::from(slave.try_clone().unwrap()));
    // SAFETY: only async-signal-safe calls between fork and exec: a new session whose controlling
    // terminal is the pty (stdin).
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let mut child = cmd.spawn().expect("kubectl on a pty");
    // Every copy of the terminal's slave side must close for reads of the master to end.
    drop(cmd);
    drop(slave);
    let output = Arc::new(Mutex::new(Vec::<u8>::new()));
    let reader = {
        let output = output.clone();
        let mut file = std::fs::File::from(master.try_clone().unwrap());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // EIO once the child side is gone.
            while let Ok(n) = file.read(&mut buf) {
                if n == 0 {
                    break;
                }
                output.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        })
    };
    let mut writer = std::fs::File::from(master);
    let seen = |text: &str| String::from_utf8_lossy(&output.lock().unwrap()).contains(text);
    for (wait, input) in steps {
        wait_for(
            &format!("{wait:?} on the terminal"),
            Duration::from_secs(60),
            || seen(wait).then_some(()),
        );
        writer.write_all(input.as_bytes()).expect("type");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!(
                "kubectl on a terminal did not finish; output: {}",
                String::from_utf8_lossy(&output.lock().unwrap())
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    drop(writer);
    let _ = reader.join();
    let out = String::from_utf8_lossy(&output.lock().unwrap()).into_owned();
    (out, status.code())
}

#[test]
fn logs_exec_attach_and_cp_on_a_real_node() {
    let node = RealNode::start(&["busybox"]);
    node.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: talker}
spec:
  containers:
  - name: talker
    image: busybox
    command: ["sh", "-c", "echo start; i=0; while true; do i=$((i+1)); echo tick $i; sleep 1; done"]
"#,
    );
    node.wait_pod("talker", "running", Duration::from_secs(120), running);
    wait_for("two ticks", Duration::from_secs(60), || {
        node.kubectl(&["logs", "talker"])
            .contains("tick 2")
            .then_some(())
    });

    // Logs: whole, tail, timestamps, limit, and follow (new lines keep coming).
    let all = node.kubectl(&["logs", "talker"]);
    assert!(all.starts_with("start\ntick 1\ntick 2\n"), "{all}");
    let tail = node.kubectl(&["logs", "talker", "--tail=1"]);
    assert_eq!(tail.lines().count(), 1, "{tail}");
    assert!(tail.starts_with("tick "), "{tail}");
    let stamped = node.kubectl(&["logs", "talker", "--timestamps", "--limit-bytes=37"]);
    let first = stamped.lines().next().unwrap_or("");
    let (ts, rest) = first.split_once(' ').unwrap_or(("", ""));
    assert_eq!(rest, "start", "{stamped}");
    assert!(
        ts.len() == 30 && ts.ends_with('Z') && ts.as_bytes()[19] == b'.',
        "RFC 3339 with nine fractional digits: {ts:?}"
    );
    assert_eq!(stamped.len(), 37, "cut at --limit-bytes: {stamped:?}");
    let current: u64 = node
        .kubectl(&["logs", "talker", "--tail=1"])
        .trim()
        .trim_start_matches("tick ")
        .parse()
        .unwrap();
    let mut follow = Command::new("kubectl")
        .args(["logs", "-f", "talker", "--tail=1"])
        .env("KUBECONFIG", &node.cluster.kubeconfig)
        .env("HOME", node.cluster.data_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("kubectl logs -f");
    let (tx, rx) = std::sync::mpsc::channel();
    let stdout = follow.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let wanted = format!("tick {}", current + 3);
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .expect("kubectl logs -f keeps printing");
        if line == wanted {
            break;
        }
    }
    let _ = follow.kill();
    let _ = follow.wait();

    // --previous: the first attempt exits, the second stays up.
    node.apply(
        r#"
apiVersion: v1
kind: Pod
metadata: {name: restarter}
spec:
  containers:
  - name: c
    image: busybox
    command: ["sh", "-c", "n=$(cat /data/n 2>/dev/null || echo 0); n=$((n+1)); echo $n > /data/n; echo attempt $n; if [ $n -ge 2 ]; then exec sleep 3600; fi; exit 1"]
    volumeMounts: [{name: data, mountPath: /data}]
  volumes: [{name: data, emptyDir: {}}]
"#,
    );
    node.wait_pod(
        "restarter",
        "restarted and running",
        Duration::from_secs(120),
        |p| running(p) && p["status"]["containerStatuses"][0]["restartCount"].as_i64() >= Some(1),
    );
    assert_eq!(
        node.kubectl(&["logs", "restarter", "--previous"]),
        "attempt 1\n"
    );
    assert_eq!(node.kubectl(&["logs", "restarter"]), "attempt 2\n");
    let err = node
        .cluster
        .kubectl_fails(&["logs", "talker", "--previous"], None);
    assert!(
        err.contains("previous terminated container \"talker\" in pod \"talker\" not found"),
        "{err}"
    );

    // Exec over both transports: output streams, exit codes, stdin with its end.
    for ws in REMOTE_COMMAND_MODES {
        let env = [("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", ws)];
        let out = run_kubectl(
            &node,
            &[
                "exec",
                "talker",
                "--",
                "sh",
                "-c",
                "echo out; echo err >&2; exit 3",
            ],
            None,
            &env,
        );
        assert_eq!(out.status.code(), Some(3), "websockets={ws}");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "out\n");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("err\ncommand terminated with exit code 3"),
            "{stderr}"
        );
        let out = run_kubectl(
            &node,
            &["exec", "-i", "talker", "--", "sh", "-c", "cat; echo done"],
            Some(b"one\ntwo\n"),
            &env,
        );
        assert_eq!(ok(&out, "exec -i"), "one\ntwo\ndone\n", "websockets={ws}");
        let out = run_kubectl(
            &node,
            &["exec", "talker", "-c", "nope", "--", "true"],
            None,
            &env,
        );
        assert!(
            String::from_utf8_lossy(&out.stderr)
                .contains("container nope is not valid for pod talker"),
            "websockets={ws}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // exec -it on a terminal: the size reaches the container, the shell's exit code comes back.
    let (screen, code) = kubectl_on_a_terminal(
        &node,
        &["exec", "-it", "talker", "--", "sh"],
        33,
        101,
        &[
            ("# ", "stty size; echo marker-$((6*7))\r"),
            ("marker-42", "exit 4\r"),
        ],
    );
    assert!(screen.contains("33 101"), "{screen}");
    assert_eq!(code, Some(4), "{screen}");

    // cp in and out, over both transports.
    let dir = tempfile::tempdir().unwrap();
    let local = dir.path().join("local.txt");
    let content: String = (0..2000).map(|i| format!("line {i}\n")).collect();
    std::fs::write(&local, &content).unwrap();
    for ws in REMOTE_COMMAND_MODES {
        let env = [("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", ws)];
        let inside = format!("talker:/tmp/copied-{ws}.txt");
        ok(
            &run_kubectl(&node, &["cp", local.to_str().unwrap(), &inside], None, &env),
            "cp in",
        );
        let back = dir.path().join(format!("back-{ws}.txt"));
        ok(
            &run_kubectl(&node, &["cp", &inside, back.to_str().unwrap()], None, &env),
            "cp out",
        );
        assert_eq!(
            std::fs::read_to_string(&back).unwrap(),
            content,
            "websockets={ws}"
        );
    }

    // attach: stdin reaches the container's main process, its output comes back.
    for ws in REMOTE_COMMAND_MODES {
        let name = format!("echoer-{ws}");
        node.apply(&format!(
            r#"
apiVersion: v1
kind: Pod
metadata: {{name: {name}}}
spec:
  restartPolicy: Never
  containers:
  - name: echoer
    image: busybox
    stdin: true
    stdinOnce: true
    command: ["sh", "-c", "while read l; do echo echo:$l; done; echo bye"]
"#
        ));
        node.wait_pod(&name, "running", Duration::from_secs(120), running);
        let env = [("KUBECTL_REMOTE_COMMAND_WEBSOCKETS", ws)];
        let out = run_kubectl(&node, &["attach", "-i", &name], Some(b"hi\nthere\n"), &env);
        let stdout = ok(&out, "attach");
        assert!(
            stdout.contains("echo:hi\necho:there\nbye\n"),
            "websockets={ws}: {stdout}"
        );
    }

    // The kubelet's own endpoints through nodes/proxy.
    assert_eq!(
        node.kubectl(&[
            "get",
            "--raw",
            &format!("/api/v1/nodes/{NODE}/proxy/healthz")
        ]),
        "ok"
    );
    let pods: Value = serde_json::from_str(&node.kubectl(&[
        "get",
        "--raw",
        &format!("/api/v1/nodes/{NODE}/proxy/pods"),
    ]))
    .unwrap();
    assert!(pods["items"]
        .as_array()
        .unwrap()
        .iter()
        .any(|p| p["metadata"]["name"] == "talker"));
}

fn port_forward_get(node: &RealNode, pod: &str, websockets: &str) -> String {
    let mut child = Command::new("kubectl")
        .args(["port-forward", &format!("pod/{pod}"), ":80"])
        .env("KUBECTL_PORT_FORWARD_WEBSOCKETS", websockets)
        .env("KUBECONFIG", &node.cluster.kubeconfig)
        .env("HOME", node.cluster.data_dir())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl port-forward");
    let stdout = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let port = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("port-forward prints its local port");
        if let Some(rest) = line.strip_prefix("Forwarding from 127.0.0.1:") {
            break rest.split(' ').next().unwrap().parse::<u16>().unwrap();
        }
    };
    let mut conn = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect");
    conn.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    conn.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut response = String::new();
    let _ = conn.read_to_string(&mut response);
    let _ = child.kill();
    let _ = child.wait();
    response
}

#[test]
fn port_forward_and_the_seed_statefulset_on_a_real_node() {
    let node = RealNode::start(&["busybox", "nginx"]);
    // Seed 003's StatefulSet and headless Service, scaled to two replicas.
    node.apply(
        r#"
apiVersion: apps/v1
kind: StatefulSet
metadata:
  name: nginx-sts
spec:
  serviceName: nginx-sts
  replicas: 2
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
"#,
    );
    node.wait_pod("nginx-sts-0", "running", Duration::from_secs(180), running);
    let sts1 = node.wait_pod(
        "nginx-sts-1",
        "running with an IP",
        Duration::from_secs(180),
        |p| running(p) && p["status"]["podIP"].is_string(),
    );
    let ip = sts1["status"]["podIP"].as_str().unwrap().to_string();
    let page = wait_for("nginx-sts-1 to serve", Duration::from_secs(60), || {
        let out = run_kubectl(
            &node,
            &[
                "exec",
                "nginx-sts-0",
                "--",
                "wget",
                "-qO-",
                &format!("http://{ip}/"),
            ],
            None,
            &[],
        );
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    });
    assert!(page.contains("Welcome to nginx!"), "{page}");

    // The pod and service proxies reach nginx (from inside the pods' network namespace).
    let proxied = node.kubectl(&[
        "get",
        "--raw",
        "/api/v1/namespaces/default/pods/nginx-sts-0/proxy/",
    ]);
    assert!(proxied.contains("Welcome to nginx!"), "{proxied}");
    let proxied = wait_for("the service proxy", Duration::from_secs(60), || {
        let out = node.cluster.kubectl_output(
            &[
                "get",
                "--raw",
                "/api/v1/namespaces/default/services/nginx-sts:80/proxy/",
            ],
            None,
        );
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
    });
    assert!(proxied.contains("Welcome to nginx!"), "{proxied}");

    for ws in ["true", "false"] {
        let response = port_forward_get(&node, "nginx-sts-0", ws);
        assert!(
            response.starts_with("HTTP/1.1 200 OK"),
            "websockets={ws}: {response}"
        );
        assert!(response.contains("Welcome to nginx!"), "websockets={ws}");
    }
}
