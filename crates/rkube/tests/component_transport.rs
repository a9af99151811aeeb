//! rkube's own components talk to their API server over HTTP/2 (issue 25): a component's watches
//! share one connection instead of holding one TLS connection each, in the all-in-one server and
//! as a separate process (as client-go does against upstream). The API server's
//! `rkube_apiserver_open_connections` gauge tells which protocol each open connection speaks.

mod support;

use std::time::{Duration, Instant};

use support::{Backend, Cluster};

#[path = "support/ha.rs"]
mod ha;

/// The value of the sample of `/metrics` named exactly `name{labels}`.
fn sample(text: &str, series: &str) -> i64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{series} not in /metrics:\n{text}"))
}

struct Counts {
    watches: i64,
    h2: i64,
    http1: i64,
    in_process: i64,
}

async fn counts(client: &kube::Client) -> Counts {
    let request = http::Request::get("/metrics").body(Vec::new()).unwrap();
    let text = client.request_text(request).await.expect("/metrics");
    Counts {
        watches: sample(&text, "apiserver_longrunning_requests{verb=\"WATCH\"}"),
        h2: sample(&text, "rkube_apiserver_open_connections{protocol=\"h2\"}"),
        http1: sample(
            &text,
            "rkube_apiserver_open_connections{protocol=\"http/1.1\"}",
        ),
        in_process: sample(
            &text,
            "rkube_apiserver_open_connections{protocol=\"in-process\"}",
        ),
    }
}

/// Polls [`counts`] until `done`, failing after a minute with the last counts.
async fn wait_counts(client: &kube::Client, what: &str, done: impl Fn(&Counts) -> bool) -> Counts {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let c = counts(client).await;
        if done(&c) {
            return c;
        }
        assert!(
            Instant::now() < deadline,
            "{what}: not within 60 s (watches {}, h2 {}, http/1.1 {})",
            c.watches,
            c.h2,
            c.http1
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[test]
fn the_all_in_one_servers_components_connect_in_process() {
    let cluster = Cluster::start_all(Backend::Sqlite, &["--sim-nodes", "2"]);
    support::runtime().block_on(async {
        let client = cluster.client().await;
        // The scheduler's, the controllers' and the simulated nodes' informers: dozens of watches
        // (each was its own TLS connection over HTTP/1.1 before).
        let c = wait_counts(&client, "the components' watches", |c| c.watches >= 40).await;
        eprintln!(
            "{} watches; connections: {} in-process, {} h2, {} http/1.1",
            c.watches, c.in_process, c.h2, c.http1
        );
        assert_eq!(c.http1, 0, "an HTTP/1.1 connection is open");
        // The components connect in-process, a few connections for all their watches; over TLS
        // only this test's client.
        assert!(
            c.in_process >= 1 && c.in_process * 4 <= c.watches,
            "{} in-process connections for {} watches",
            c.in_process,
            c.watches
        );
        assert_eq!(c.h2, 1, "TLS connections besides the test's");
        // Their requests are authorized as the kubeconfig's certificate user (system:masters): a
        // Deployment rolls out, through the controllers, the scheduler and the simulated nodes.
        let out = cluster.kubectl(&[
            "create",
            "deployment",
            "web",
            "--image=registry.k8s.io/pause:3.10",
            "--replicas=2",
        ]);
        assert!(out.contains("created"), "{out}");
        cluster.kubectl(&["rollout", "status", "deploy/web", "--timeout=60s"]);
    });
}

#[test]
fn a_separate_scheduler_speaks_http2() {
    let cluster = Cluster::start(Backend::Sqlite);
    let kubeconfig = cluster.kubeconfig.to_str().expect("utf-8 path");
    support::runtime().block_on(async {
        let client = cluster.client().await;
        let before = wait_counts(&client, "the server's own watches", |c| c.h2 >= 1).await;
        let (_scheduler, _) = ha::spawn(
            "scheduler",
            ha::rkube_cmd(&["scheduler", "--kubeconfig", kubeconfig], "warn"),
            None,
            |_, _| {},
        );
        // The scheduler's informers (pods, nodes, volumes, DRA, ...) are up.
        let after = wait_counts(&client, "the scheduler's watches", |c| {
            c.watches >= before.watches + 10
        })
        .await;
        assert_eq!(after.http1, 0, "the scheduler opened HTTP/1.1 connections");
        assert!(
            after.h2 <= before.h2 + 2,
            "{} more HTTP/2 connections for {} more watches",
            after.h2 - before.h2,
            after.watches - before.watches
        );
    });
}
