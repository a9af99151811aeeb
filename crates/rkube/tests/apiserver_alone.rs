//! `rkube apiserver` as upstream runs kube-apiserver: two of them on one etcd, with `rkube
//! controller-manager`, `rkube scheduler` and `rkube sim` as their own processes against the first.
//! The API servers run nothing but the API (no nodes, no cluster DNS); a Deployment created through
//! one is rolled out by the separate components and read through the other; each server keeps its
//! identity Lease, collected by the other once it expires; `default/kubernetes` lists both servers'
//! advertised addresses, a killed server's address drops out once its record's TTL passes, and a
//! server stopped with SIGTERM leaves at once.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use storage::etcd_process::EtcdProcess;

#[path = "support/ha.rs"]
mod ha;

use ha::{rkube_cmd, share_pki, spawn, Proc};

const DEADLINE: Duration = Duration::from_secs(60);

fn rkube(args: &[&str]) -> Command {
    rkube_cmd(args, "warn")
}

/// An `rkube apiserver` on `bind`:`port` advertising `advertise`, with short endpoint and identity
/// timings and `extra` flags; returns the process and its port.
fn apiserver(
    name: &'static str,
    data_dir: &Path,
    etcd: &str,
    (bind, port): (&str, u16),
    advertise: &str,
    extra: &[&str],
) -> (Proc, u16) {
    let dir = data_dir.to_str().expect("utf-8 path");
    let port_arg = port.to_string();
    let mut cmd = rkube(&[
        "apiserver",
        "--data-dir",
        dir,
        "--etcd-servers",
        etcd,
        "--bind-address",
        bind,
        "--secure-port",
        &port_arg,
        "--advertise-address",
        advertise,
        "--endpoint-reconciler-interval=500ms",
        "--endpoint-reconciler-ttl=3s",
        "--identity-lease-renew-interval-seconds=1",
        // Short enough to see a dead server's Lease collected, long enough for a loaded machine.
        "--identity-lease-duration-seconds=4",
    ]);
    cmd.args(extra);
    let (proc, line) = spawn(name, cmd, Some("rkube: serving on https://"), |_, _| {});
    let addr = line.split(' ').next().unwrap_or_default();
    let port = addr
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("{name}: no port in {line:?}"));
    (proc, port)
}

fn kubectl(kubeconfig: &Path, args: &[&str]) -> Output {
    Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .arg("--request-timeout=20s")
        .args(args)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .stdin(Stdio::null())
        .output()
        .expect("kubectl is installed")
}

fn kubectl_ok(kubeconfig: &Path, args: &[&str]) -> String {
    let out = kubectl(kubeconfig, args);
    assert!(
        out.status.success(),
        "kubectl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Waits until kubectl's output (failures count as empty) satisfies `done`; returns it.
fn wait_for(kubeconfig: &Path, args: &[&str], what: &str, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let out = kubectl(kubeconfig, args);
        let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
        if out.status.success() && done(&text) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: still {text:?} after {DEADLINE:?} ({})",
            String::from_utf8_lossy(&out.stderr)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn two_api_servers_on_one_etcd_with_separate_components() {
    let etcd = EtcdProcess::start().unwrap_or_else(|e| panic!("{e}"));
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (mut server_a, port) = apiserver(
        "apiserver-a",
        dir_a.path(),
        &etcd.endpoint,
        ("127.0.0.1", 0),
        "192.0.2.1",
        &[],
    );
    share_pki(dir_a.path(), dir_b.path());
    // B signs service account tokens with a key of its own and accepts A's
    // (--service-account-key-file takes A's private key file: its public half is used).
    let own_key = dir_b.path().join("b-sa.key");
    let a_key = dir_a.path().join("pki/sa.key");
    let b_flags = [
        "--service-account-signing-key-file",
        own_key.to_str().expect("utf-8 path"),
        "--service-account-key-file",
        a_key.to_str().expect("utf-8 path"),
    ];
    // The same port on another loopback address: the `kubernetes` endpoints have one port.
    let (mut server_b, _) = apiserver(
        "apiserver-b",
        dir_b.path(),
        &etcd.endpoint,
        ("127.0.0.2", port),
        "192.0.2.2",
        &b_flags,
    );
    let kubeconfig_a: PathBuf = dir_a.path().join("admin.kubeconfig");
    let kubeconfig_b: PathBuf = dir_b.path().join("admin.kubeconfig");
    assert!(
        std::fs::read_to_string(&kubeconfig_b)
            .expect("B wrote a kubeconfig")
            .contains(&format!("server: https://127.0.0.2:{port}")),
        "B's kubeconfig names B"
    );

    // The API servers alone: no node, no cluster DNS, no component leader.
    assert_eq!(
        kubectl_ok(&kubeconfig_a, &["get", "nodes", "-o", "name"]),
        ""
    );
    assert_eq!(
        kubectl_ok(
            &kubeconfig_b,
            &["get", "services", "-n", "kube-system", "-o", "name"]
        ),
        ""
    );
    // What upstream's post-start hooks make exists, seen through either server.
    kubectl_ok(&kubeconfig_b, &["get", "clusterrole", "cluster-admin"]);
    kubectl_ok(
        &kubeconfig_b,
        &["get", "priorityclass", "system-node-critical"],
    );
    kubectl_ok(&kubeconfig_b, &["get", "flowschema", "exempt"]);
    kubectl_ok(&kubeconfig_a, &["get", "service", "kubernetes"]);

    // Each server's identity Lease.
    let identities = wait_for(
        &kubeconfig_a,
        &[
            "get",
            "leases",
            "-n",
            "kube-system",
            "-l",
            "apiserver.kubernetes.io/identity=kube-apiserver",
            "-o",
            "jsonpath={range .items[*]}{.metadata.name} {.spec.leaseDurationSeconds}{\"\\n\"}{end}",
        ],
        "two identity Leases",
        |t| t.lines().count() == 2,
    );
    for line in identities.lines() {
        assert!(
            line.starts_with("apiserver-") && line.ends_with(" 4"),
            "{line}"
        );
    }

    // Both servers in the kubernetes endpoints, on the shared port.
    let both = "192.0.2.1 192.0.2.2";
    let endpoints = [
        "get",
        "endpoints",
        "kubernetes",
        "-o",
        "jsonpath={.subsets[0].addresses[*].ip} {.subsets[0].ports[0].port}",
    ];
    let expected = format!("{both} {port}");
    wait_for(&kubeconfig_b, &endpoints, "both servers listed", |t| {
        t == expected
    });
    let slice = [
        "get",
        "endpointslice",
        "kubernetes",
        "-o",
        "jsonpath={.endpoints[*].addresses[0]} {.ports[0].port} {.metadata.labels.kubernetes\\.io/service-name}",
    ];
    let expected_slice = format!("{both} {port} kubernetes");
    wait_for(&kubeconfig_a, &slice, "both servers in the slice", |t| {
        t == expected_slice
    });

    // The other components as their own processes, elected, against server A.
    let kubeconfig = kubeconfig_a.to_str().expect("utf-8 path");
    let (controllers, _) = spawn(
        "controller-manager",
        rkube(&["controller-manager", "--kubeconfig", kubeconfig]),
        None,
        |_, _| {},
    );
    let (scheduler, _) = spawn(
        "scheduler",
        rkube(&["scheduler", "--kubeconfig", kubeconfig]),
        None,
        |_, _| {},
    );
    let (sim, _) = spawn(
        "sim",
        rkube(&["sim", "--nodes", "2", "--kubeconfig", kubeconfig]),
        None,
        |_, _| {},
    );
    kubectl_ok(
        &kubeconfig_a,
        &[
            "create",
            "deployment",
            "web",
            "--image=registry.k8s.io/pause:3.10",
            "--replicas=3",
        ],
    );
    wait_for(
        &kubeconfig_b,
        &[
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={range .items[*]}{.spec.nodeName}{\"\\n\"}{end}",
        ],
        "the Deployment's pods bound to nodes, read through B",
        |t| t.lines().filter(|l| l.starts_with("sim-")).count() == 3,
    );
    // A's service account tokens work on B (which has A's key besides its own); B's do not on A.
    let token_a = kubectl_ok(&kubeconfig_a, &["create", "token", "default"]);
    let token_b = kubectl_ok(&kubeconfig_b, &["create", "token", "default"]);
    let raw_api = |server: &str, token: &str| {
        Command::new("kubectl")
            .args([
                "--kubeconfig=/dev/null",
                "--insecure-skip-tls-verify",
                "--server",
            ])
            .arg(format!("https://{server}:{port}"))
            .args(["--token", token, "get", "--raw", "/api"])
            .env_remove("KUBERNETES_SERVICE_HOST")
            .output()
            .expect("kubectl is installed")
    };
    let on_b = raw_api("127.0.0.2", &token_a);
    assert!(
        on_b.status.success(),
        "A's token on B: {}",
        String::from_utf8_lossy(&on_b.stderr)
    );
    assert!(
        raw_api("127.0.0.2", &token_b).status.success(),
        "B's token on B"
    );
    let on_a = raw_api("127.0.0.1", &token_b);
    assert!(
        String::from_utf8_lossy(&on_a.stderr).contains("Unauthorized"),
        "B's token on A: {on_a:?}"
    );
    for lease in ["kube-controller-manager", "kube-scheduler"] {
        let holder = kubectl_ok(
            &kubeconfig_b,
            &[
                "get",
                "lease",
                "-n",
                "kube-system",
                lease,
                "-o",
                "jsonpath={.spec.holderIdentity}",
            ],
        );
        assert!(!holder.is_empty(), "{lease} has a leader");
    }

    // Done with the components: they would only log A's going below.
    drop((controllers, scheduler, sim));

    // A dead server drops out of the endpoints once its record expires; the other one stays.
    let killed = Instant::now();
    let _ = server_b.0.kill();
    let _ = server_b.0.wait();
    let expected = format!("192.0.2.1 {port}");
    wait_for(&kubeconfig_a, &endpoints, "the dead server dropped", |t| {
        t == expected
    });
    eprintln!("dead server dropped after {:?}", killed.elapsed());
    let expected_slice = format!("192.0.2.1 {port} kubernetes");
    wait_for(
        &kubeconfig_a,
        &slice,
        "the dead server dropped from the slice",
        |t| t == expected_slice,
    );
    // Its identity Lease is collected by the survivor once expired (upstream: after an hour).
    wait_for(
        &kubeconfig_a,
        &[
            "get",
            "leases",
            "-n",
            "kube-system",
            "-l",
            "apiserver.kubernetes.io/identity=kube-apiserver",
            "-o",
            "name",
        ],
        "the dead server's identity Lease collected",
        |t| t.lines().count() == 1,
    );
    eprintln!(
        "dead server's identity Lease collected after {:?}",
        killed.elapsed()
    );

    // A server stopped on purpose leaves at once.
    let (_server_b, _) = apiserver(
        "apiserver-b2",
        dir_b.path(),
        &etcd.endpoint,
        ("127.0.0.2", port),
        "192.0.2.2",
        &b_flags,
    );
    let expected = format!("{both} {port}");
    wait_for(&kubeconfig_a, &endpoints, "B back", |t| t == expected);
    let pid = server_a.0.id().to_string();
    let stopped = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(stopped.success());
    let status = server_a.0.wait().expect("wait for A");
    assert!(status.success(), "A exits cleanly on SIGTERM: {status}");
    let expected = format!("192.0.2.2 {port}");
    let left = Instant::now();
    wait_for(&kubeconfig_b, &endpoints, "A left", |t| t == expected);
    assert!(
        left.elapsed() < Duration::from_secs(3),
        "A's address went before its TTL"
    );
}
