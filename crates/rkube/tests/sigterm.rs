//! `rkube sim` and `rkube dns` stop cleanly on SIGTERM, as on SIGINT: supervisors (systemd, the
//! kubelet for static pods) stop a process with SIGTERM, whose default action would kill it
//! without its exit path (exit status "signal 15" instead of 0).

mod support;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use support::{Backend, Cluster};

#[path = "support/ha.rs"]
mod ha;

/// Starts `rkube <args>`, waits for its `ready` line, sends SIGTERM and returns its exit status
/// and what it logged.
fn run_and_terminate(
    name: &str,
    args: &[&str],
    ready: &'static str,
) -> (std::process::ExitStatus, String) {
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let log = lines.clone();
    let (mut proc, _) = ha::spawn(
        name,
        ha::rkube_cmd(args, "warn"),
        Some(ready),
        move |line, _| log.lock().unwrap().push(line.to_string()),
    );
    proc.signal("-TERM");
    let deadline = Instant::now() + ha::DEADLINE;
    let status = loop {
        if let Some(status) = proc.0.try_wait().expect("wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "{name} still runs after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    // The reader thread gets the last lines when the pipe closes.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !lines.lock().unwrap().iter().any(|l| l.contains("SIGTERM")) && Instant::now() < deadline
    {
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = lines.lock().unwrap().join("\n");
    (status, log)
}

#[test]
fn sim_and_dns_stop_cleanly_on_sigterm() {
    let cluster = Cluster::start(Backend::Sqlite);
    let kubeconfig = cluster.kubeconfig.to_str().expect("utf-8").to_string();

    let (status, log) = run_and_terminate(
        "sim",
        &["sim", "--nodes", "1", "--kubeconfig", &kubeconfig],
        "rkube sim: 1 nodes registered",
    );
    assert!(status.success(), "rkube sim on SIGTERM: {status}\n{log}");
    assert!(log.contains("rkube sim: SIGTERM: stopping"), "{log}");

    let port = ha::free_port().to_string();
    let (status, log) = run_and_terminate(
        "dns",
        &[
            "dns",
            "--kubeconfig",
            &kubeconfig,
            "--dns-bind-address",
            "127.0.0.1",
            "--dns-port",
            &port,
        ],
        "rkube: cluster DNS for",
    );
    assert!(status.success(), "rkube dns on SIGTERM: {status}\n{log}");
    assert!(log.contains("rkube dns: SIGTERM: stopping"), "{log}");
}
