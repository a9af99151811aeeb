//! Proxy sync benchmark (docs/benchmarks.md, "kube-proxy (issue 19)"): N Services x M endpoints,
//! full sync (generation + `nft -f`/`iptables-restore` inside a fresh network namespace), then
//! syncs after one endpoint of one Service changes. Needs root, `ip`, `nft`, `iptables-restore`.
//!
//! cargo run --release -p proxy --example sync -- [services] [endpoints] [nftables|iptables|both]
//!
//! nftables transactions go over netlink unless `RKUBE_NFT_NETLINK=off` (then all with `nft -f`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use proxy::metrics::Metrics;
use proxy::netns::NetNs;
use proxy::nftables::rules::Config;
use proxy::objects::{service, slice};
use proxy::{Exec, Mode, Proxier};

/// This thread's time on a CPU and waiting for one, in ns (`/proc/thread-self/schedstat`): the
/// machine is shared, and time on the CPU does not grow with other processes' load as wall time
/// does. Zeros where the file is missing.
fn sched() -> (u64, u64) {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    let mut f = s.split_whitespace().map(|v| v.parse().unwrap_or(0));
    (f.next().unwrap_or(0), f.next().unwrap_or(0))
}

fn ips(svc: usize, n: usize) -> Vec<String> {
    (0..n)
        .map(|e| {
            let i = svc * n + e;
            format!("10.{}.{}.{}", 100 + i / 65536, (i / 256) % 256, i % 256)
        })
        .collect()
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let services: usize = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(10_000);
    let per: usize = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(5);
    let modes = match args.get(3).map(|s| s.as_str()).unwrap_or("both") {
        "nftables" => vec![Mode::Nftables],
        "iptables" => vec![Mode::Iptables],
        _ => vec![Mode::Nftables, Mode::Iptables],
    };
    if let Ok(path) = std::env::var("RKP_DUMP") {
        // Writes the full-sync scripts of both modes to PATH.nft / PATH.ipt and exits.
        let mut services_map = proxy::servicechangetracker::ServicePortMap::new();
        let mut st = proxy::servicechangetracker::ServiceChangeTracker::default();
        let mut et = proxy::endpointschangetracker::EndpointsChangeTracker::new("node-a");
        for i in 0..services {
            let name = format!("svc-{i}");
            let ip = format!("10.96.{}.{}", i / 256, i % 256);
            st.update(None, Some(&service("bench", &name, &ip, 80)));
            et.endpoint_slice_update(&slice("bench", &name, 8080, &ips(i, per), "node-b"), false);
        }
        let mut eps = proxy::endpointschangetracker::EndpointsMap::new();
        proxy::servicechangetracker::apply_service_changes(&mut services_map, &mut st);
        proxy::endpointschangetracker::apply_endpoints_changes(&mut eps, &mut et);
        let cfg = Config {
            masquerade_mark: 0x4000,
            masquerade_all: false,
            cluster_cidr: Some("10.64.0.0/10".into()),
            nodeport_ips: None,
            node_name: "node-a".into(),
            node_labels: HashMap::new(),
        };
        let none = std::collections::HashSet::new();
        let no_chains = std::collections::HashSet::new();
        let t = Instant::now();
        let n = proxy::nftables::rules::generate(
            &cfg,
            &services_map,
            &eps,
            true,
            &none,
            &Default::default(),
            &no_chains,
        );
        println!("nft generate {:?}", t.elapsed());
        let t = Instant::now();
        let i = proxy::iptables::rules::generate(
            &cfg,
            &services_map,
            &eps,
            true,
            &none,
            &Default::default(),
            &no_chains,
        );
        println!("ipt generate {:?}", t.elapsed());
        // Generation alone for a partial sync after one endpoint change.
        et.endpoint_slice_update(
            &slice("bench", "svc-0", 8080, &ips(0, per)[1..], "node-b"),
            false,
        );
        let updated = proxy::endpointschangetracker::apply_endpoints_changes(&mut eps, &mut et)
            .updated_services;
        // In place over the last sync's state, as the backend does (no copy of the state).
        let mut state = n.state;
        let t = Instant::now();
        let _ = proxy::nftables::rules::update(
            &cfg,
            &services_map,
            &eps,
            false,
            &updated,
            &mut state,
            &no_chains,
        );
        println!("nft partial generate {:?}", t.elapsed());
        let t = Instant::now();
        let _ = proxy::iptables::rules::generate(
            &cfg,
            &services_map,
            &eps,
            false,
            &updated,
            &i.state,
            &no_chains,
        );
        println!("ipt partial generate {:?}", t.elapsed());
        std::fs::write(format!("{path}.nft"), n.script)?;
        std::fs::write(format!("{path}.ipt"), i.script)?;
        return Ok(());
    }
    for mode in modes {
        let ns = NetNs::create("rkp-bench")?;
        let cfg = Config {
            masquerade_mark: 0x4000,
            masquerade_all: false,
            cluster_cidr: Some("10.64.0.0/10".into()),
            nodeport_ips: None,
            node_name: "node-a".into(),
            node_labels: HashMap::new(),
        };
        let mut p = Proxier::new(
            mode,
            cfg,
            Exec::in_netns(ns.name()),
            vec![],
            Arc::new(Metrics::new("bench")),
        );
        for i in 0..services {
            let name = format!("svc-{i}");
            let ip = format!("10.96.{}.{}", i / 256, i % 256);
            p.on_service(None, Some(&service("bench", &name, &ip, 80)));
            p.on_endpoint_slice(&slice("bench", &name, 8080, &ips(i, per), "node-b"), false);
        }
        let t = Instant::now();
        let full = p.sync()?;
        let full_wall = t.elapsed();
        let mut partial = Vec::new();
        let mut on_cpu = Vec::new();
        // RKP_ROUNDS: more one-endpoint changes (for profiling them); the median is over all.
        let rounds: usize = std::env::var("RKP_ROUNDS")
            .ok()
            .and_then(|r| r.parse().ok())
            .unwrap_or(5);
        for round in 0..rounds {
            // Service 0 loses its last endpoint, then gets it back.
            let mut list = ips(0, per);
            if round % 2 == 0 {
                list.pop();
            }
            p.on_endpoint_slice(&slice("bench", "svc-0", 8080, &list, "node-b"), false);
            let (cpu0, _) = sched();
            let t = Instant::now();
            let s = p.sync()?;
            partial.push((t.elapsed(), s.rules_written));
            on_cpu.push(sched().0 - cpu0);
        }
        partial.sort();
        on_cpu.sort();
        println!(
            "{mode:?}: {services} services x {per} endpoints: full sync {:.0} ms ({} rules), one-endpoint change: median {:.1} ms, max {:.1} ms ({} rules written), on a CPU: median {:.1} ms",
            full_wall.as_secs_f64() * 1000.0,
            full.rules_total,
            partial[partial.len() / 2].0.as_secs_f64() * 1000.0,
            partial[partial.len() - 1].0.as_secs_f64() * 1000.0,
            partial[0].1,
            on_cpu[on_cpu.len() / 2] as f64 / 1e6,
        );
        let t = Instant::now();
        p.force_full_sync();
        p.sync()?;
        println!(
            "{mode:?}: second full sync (table exists) {:.0} ms",
            t.elapsed().as_secs_f64() * 1000.0
        );
        if mode == Mode::Nftables && std::env::var("RKUBE_NFT_NETLINK").as_deref() != Ok("off") {
            breakdown(&ns, services, per)?;
        }
    }
    Ok(())
}

/// Where a one-endpoint change's time goes: generation (`rules::update`) and the netlink
/// transaction, on the table the proxier left (Service 0 with one endpoint fewer).
fn breakdown(ns: &NetNs, services: usize, per: usize) -> Result<(), Box<dyn std::error::Error>> {
    use proxy::endpointschangetracker::{apply_endpoints_changes, EndpointsChangeTracker};
    use proxy::servicechangetracker::{apply_service_changes, ServiceChangeTracker};
    let mut svcs = proxy::servicechangetracker::ServicePortMap::new();
    let mut eps = proxy::endpointschangetracker::EndpointsMap::new();
    let mut st = ServiceChangeTracker::default();
    let mut et = EndpointsChangeTracker::new("node-a");
    for i in 0..services {
        let name = format!("svc-{i}");
        let ip = format!("10.96.{}.{}", i / 256, i % 256);
        st.update(None, Some(&service("bench", &name, &ip, 80)));
        let mut list = ips(i, per);
        if i == 0 {
            list.pop();
        }
        et.endpoint_slice_update(&slice("bench", &name, 8080, &list, "node-b"), false);
    }
    apply_service_changes(&mut svcs, &mut st);
    apply_endpoints_changes(&mut eps, &mut et);
    let cfg = Config {
        masquerade_mark: 0x4000,
        masquerade_all: false,
        cluster_cidr: Some("10.64.0.0/10".into()),
        nodeport_ips: None,
        node_name: "node-a".into(),
        node_labels: HashMap::new(),
    };
    let none = std::collections::HashSet::new();
    let no_chains = std::collections::HashSet::new();
    let mut state = proxy::nftables::rules::generate(
        &cfg,
        &svcs,
        &eps,
        true,
        &none,
        &Default::default(),
        &no_chains,
    )
    .state;
    full_breakdown(&cfg, &svcs, &eps)?;
    let mut sock = proxy::nftables::netlink::Socket::open(Some(ns.name()))?;
    let (mut gen, mut kernel, mut kernel_cpu) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..5 {
        let mut list = ips(0, per);
        if round % 2 == 1 {
            list.pop();
        }
        et.endpoint_slice_update(&slice("bench", "svc-0", 8080, &list, "node-b"), false);
        let updated = apply_endpoints_changes(&mut eps, &mut et).updated_services;
        let t = Instant::now();
        let d = proxy::nftables::rules::update(
            &cfg, &svcs, &eps, false, &updated, &mut state, &no_chains,
        );
        gen.push(t.elapsed());
        let (cpu0, wait0) = sched();
        let t = Instant::now();
        proxy::nftables::netlink::apply(&mut sock, &d.changes)?;
        kernel.push(t.elapsed());
        let (cpu1, wait1) = sched();
        kernel_cpu.push((cpu1 - cpu0, wait1 - wait0));
    }
    gen.sort();
    kernel.sort();
    kernel_cpu.sort();
    println!(
        "Nftables: one-endpoint change, medians: generation {:.2} ms, netlink transaction {:.1} ms (on a CPU {:.1} ms, waiting for one {:.1} ms)",
        gen[2].as_secs_f64() * 1000.0,
        kernel[2].as_secs_f64() * 1000.0,
        kernel_cpu[2].0 as f64 / 1e6,
        kernel_cpu[2].1 as f64 / 1e6,
    );
    Ok(())
}

/// Where a full sync into an empty namespace spends its time: generation, building the netlink
/// batch, `nft -f` of the fixed part of the table, the kernel's transaction.
fn full_breakdown(
    cfg: &Config,
    svcs: &proxy::servicechangetracker::ServicePortMap,
    eps: &proxy::endpointschangetracker::EndpointsMap,
) -> Result<(), Box<dyn std::error::Error>> {
    let ns = NetNs::create("rkp-bench-full")?;
    let none = std::collections::HashSet::new();
    let t = Instant::now();
    let mut state = proxy::nftables::rules::TableState::default();
    let no_chains = std::collections::HashSet::new();
    let d = proxy::nftables::rules::update(cfg, svcs, eps, true, &none, &mut state, &no_chains);
    let gen = t.elapsed();
    let mut sock = proxy::nftables::netlink::Socket::open(Some(ns.name()))?;
    let t = Instant::now();
    let batch = proxy::nftables::netlink::prepare(&sock, &d.changes)?;
    let encode = t.elapsed();
    let t = Instant::now();
    let setup = proxy::nftables::rules::Changes {
        full: true,
        ..Default::default()
    };
    Exec::in_netns(ns.name()).run("nft", &["-f", "-"], Some(&setup.script(cfg)))?;
    let fixed = t.elapsed();
    let (cpu0, _) = sched();
    let t = Instant::now();
    if let Some(b) = batch {
        sock.transact(&b)?;
    }
    let kernel = t.elapsed();
    let kernel_cpu = sched().0 - cpu0;
    println!(
        "Nftables: full sync: generation {:.0} ms, batch {:.0} ms, fixed part {:.0} ms, kernel {:.0} ms (on a CPU {:.0} ms)",
        gen.as_secs_f64() * 1000.0,
        encode.as_secs_f64() * 1000.0,
        fixed.as_secs_f64() * 1000.0,
        kernel.as_secs_f64() * 1000.0,
        kernel_cpu as f64 / 1e6,
    );
    Ok(())
}
