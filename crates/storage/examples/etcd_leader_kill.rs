//! Where a write waits when the etcd leader dies (issue 22, docs/benchmarks.md "Failures beyond
//! one API server"): a three-member etcd on loopback, one `EtcdStore` given all three members, one
//! writer updating a key back to back (as the failure test's writer does through an API server).
//! The leader is killed with SIGKILL; every write slower than 100 ms is printed with when it
//! started and ended relative to the kill and how it ended (which member served it the balanced
//! channel does not say: read the times and the errors).
//!
//! Usage: cargo run -p storage --example etcd_leader_kill [rounds]

use std::time::{Duration, Instant};

use storage::etcd::EtcdStore;
use storage::etcd_process::EtcdCluster;
use storage::Store;

#[tokio::main]
async fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(3);
    for round in 1..=rounds {
        run(round).await;
    }
}

async fn run(round: usize) {
    let mut cluster = EtcdCluster::start(3).unwrap_or_else(|e| panic!("{e}"));
    let store = EtcdStore::connect(&cluster.endpoints(), "/registry")
        .await
        .expect("connect");
    store.create("/k", "0".into()).await.expect("create");
    let leader = loop {
        if let Some(l) = cluster.leader() {
            break l;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            let mut i = 0u64;
            loop {
                i += 1;
                let start = Instant::now();
                let result = store.update("/k", i.to_string().into(), None).await;
                let outcome = result.map(|_| ()).map_err(|e| e.to_string());
                if tx.send((start, Instant::now(), outcome)).is_err() {
                    return;
                }
            }
        })
    };
    tokio::time::sleep(Duration::from_secs(2)).await;
    let killed = Instant::now();
    cluster.kill(leader);
    let elected = loop {
        if cluster.leader().is_some() {
            break killed.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    tokio::time::sleep(Duration::from_secs(10)).await;
    writer.abort();
    let rel = |t: Instant| {
        if t >= killed {
            t.duration_since(killed).as_secs_f64()
        } else {
            -killed.duration_since(t).as_secs_f64()
        }
    };
    let mut gap = Duration::ZERO;
    let mut last_ok = killed;
    let mut writes = 0;
    while let Ok((start, end, outcome)) = rx.try_recv() {
        writes += 1;
        if end > killed && outcome.is_ok() {
            gap = gap.max(end.duration_since(last_ok.max(killed)));
            last_ok = end;
        }
        if end.duration_since(start) > Duration::from_millis(100) && end > killed {
            println!(
                "round {round}: write from {:+.3} s to {:+.3} s: {outcome:?}",
                rel(start),
                rel(end)
            );
        }
    }
    println!(
        "round {round}: killed m{}; a new leader after {elected:?}; longest gap between \
         acknowledged writes after the kill {gap:?}; {writes} writes",
        leader + 1
    );
}
