//! Running a proxier against a cluster (upstream `cmd/kube-proxy/app/server.go` and
//! `pkg/proxy/config`): Service and EndpointSlice informers feed the change trackers, the node's
//! own Node object its labels; the bounded-frequency runner syncs; `/healthz` and `/metrics` serve,
//! and so do the Services' health-check node ports (`healthcheck`) after each sync.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::informer::{EventHandlerFuncs, InformerConfig, SharedInformerFactory};
use k8s_openapi::api::core::v1::{Node, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;

use crate::exec::Exec;
use crate::healthcheck::{health_check_node_ports, local_ready_endpoints, ServiceHealthServer};
use crate::metrics::Metrics;
use crate::nftables::rules::Config;
use crate::proxier::{Cidr, Mode, Proxier, ProxyError};
use crate::runner::{BoundedFrequencyRunner, StopOnDrop};
use crate::server::{self, Serve};

/// Options of `rkube proxy` (upstream kube-proxy flag names).
#[derive(Clone, Debug)]
pub struct Options {
    pub mode: Mode,
    pub hostname: String,
    pub cluster_cidr: Option<String>,
    pub nodeport_addresses: Vec<String>,
    pub min_sync_period: Duration,
    pub sync_period: Duration,
    pub healthz_bind_address: Option<SocketAddr>,
    pub metrics_bind_address: Option<SocketAddr>,
    pub masquerade_all: bool,
    /// Where the rules go: the host, or a named network namespace.
    pub exec: Exec,
}

/// Upstream's default `--masquerade-bit` 14.
pub const MASQUERADE_MARK: u32 = 0x4000;

fn lock(p: &Mutex<Proxier>) -> std::sync::MutexGuard<'_, Proxier> {
    p.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs until the process ends.
pub async fn run(client: kube::Client, opts: Options) -> Result<(), ProxyError> {
    let cidr = opts.cluster_cidr.as_deref().map(Cidr::parse).transpose()?;
    let nodeport_cidrs = opts
        .nodeport_addresses
        .iter()
        .map(|c| Cidr::parse(c))
        .collect::<Result<Vec<_>, _>>()?;
    let cfg = Config {
        masquerade_mark: MASQUERADE_MARK,
        masquerade_all: opts.masquerade_all,
        cluster_cidr: cidr.map(|c| c.to_string()),
        nodeport_ips: None,
        node_name: opts.hostname.clone(),
        node_labels: HashMap::new(),
    };
    let mode_name = match opts.mode {
        Mode::Nftables => "nftables",
        Mode::Iptables => "iptables",
    };
    let metrics = Arc::new(Metrics::new(mode_name));
    let proxier = Arc::new(Mutex::new(Proxier::new(
        opts.mode,
        cfg,
        opts.exec.clone(),
        nodeport_cidrs,
        metrics.clone(),
    )));
    let runner = Arc::new(BoundedFrequencyRunner::new(
        opts.min_sync_period,
        opts.sync_period,
        2,
    ));
    let initialized = Arc::new(AtomicBool::new(false));

    // Services of another proxy implementation, and headless ones, are not ours (upstream's
    // label selector on the informers).
    let selector = "!service.kubernetes.io/service-proxy-name,!service.kubernetes.io/headless";
    let factory = Arc::new(SharedInformerFactory::new(
        client.clone(),
        InformerConfig::new().labels(selector),
    ));
    let node_factory = Arc::new(SharedInformerFactory::new(
        client,
        InformerConfig::new().fields(format!("metadata.name={}", opts.hostname)),
    ));
    let stop = Arc::new(AtomicBool::new(false));
    // When this future is dropped (rkube server's task aborted at shutdown) the sync loop's
    // blocking thread and the informers stop too; before, the runtime waited on the thread.
    let _guard = StopOnDrop::new(runner.clone(), stop.clone()).also({
        let (f, n) = (factory.clone(), node_factory.clone());
        move || {
            f.shutdown();
            n.shutdown();
        }
    });
    let notify = {
        let (runner, initialized, metrics) = (runner.clone(), initialized.clone(), metrics.clone());
        move |changed: bool| {
            if changed {
                metrics.queued();
                if initialized.load(Ordering::SeqCst) {
                    runner.run();
                }
            }
        }
    };
    let (p1, p2, p3, n1, n2, n3) = (
        proxier.clone(),
        proxier.clone(),
        proxier.clone(),
        notify.clone(),
        notify.clone(),
        notify.clone(),
    );
    factory.informer::<Service>().add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |s: &Arc<Service>, _| n1(lock(&p1).on_service(None, Some(s))))
            .on_update(move |o: &Arc<Service>, s: &Arc<Service>| {
                n2(lock(&p2).on_service(Some(o), Some(s)))
            })
            .on_delete(move |d| n3(lock(&p3).on_service(Some(d.object()), None))),
    );
    let (p1, p2, p3, n1, n2, n3) = (
        proxier.clone(),
        proxier.clone(),
        proxier.clone(),
        notify.clone(),
        notify.clone(),
        notify.clone(),
    );
    factory.informer::<EndpointSlice>().add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |s: &Arc<EndpointSlice>, _| n1(lock(&p1).on_endpoint_slice(s, false)))
            .on_update(move |_, s: &Arc<EndpointSlice>| n2(lock(&p2).on_endpoint_slice(s, false)))
            .on_delete(move |d| n3(lock(&p3).on_endpoint_slice(d.object(), true))),
    );
    let (p1, p2, p3, n1, n2, n3) = (
        proxier.clone(),
        proxier.clone(),
        proxier.clone(),
        notify.clone(),
        notify.clone(),
        notify,
    );
    let labels = |n: &Node| {
        n.metadata
            .labels
            .clone()
            .unwrap_or_default()
            .into_iter()
            .collect::<HashMap<_, _>>()
    };
    node_factory.informer::<Node>().add_event_handler(
        EventHandlerFuncs::new()
            .on_add(move |n: &Arc<Node>, _| n1(lock(&p1).set_node_labels(labels(n))))
            .on_update(move |_, n: &Arc<Node>| n2(lock(&p2).set_node_labels(labels(n))))
            .on_delete(move |_| n3(lock(&p3).set_node_labels(HashMap::new()))),
    );

    let health_timeout = 2 * opts.sync_period;
    for (addr, what) in [
        (opts.healthz_bind_address, Serve::Health),
        (opts.metrics_bind_address, Serve::Metrics),
    ] {
        if let Some(addr) = addr {
            match server::bind(addr).await {
                Ok(l) => {
                    tokio::spawn(server::serve(l, what, metrics.clone(), health_timeout));
                }
                Err(e) => tracing::warn!(%addr, error = %e, "cannot listen"),
            }
        }
    }

    factory.start();
    node_factory.start();
    factory.wait_for_cache_sync().await;
    // Upstream does not sync before Services and EndpointSlices are both known: a partial view
    // would briefly reject traffic to Services whose slices have not arrived.
    initialized.store(true, Ordering::SeqCst);
    let (r, p, s) = (runner.clone(), proxier.clone(), stop.clone());
    let retry = opts.sync_period;
    let healthy = {
        let m = metrics.clone();
        Arc::new(move || m.healthy(health_timeout).0)
    };
    let mut health_checks = ServiceHealthServer::new(
        opts.exec.netns().map(str::to_string),
        tokio::runtime::Handle::current(),
        healthy,
    );
    let loop_thread = tokio::task::spawn_blocking(move || {
        r.run_loop(&s, || {
            let result = lock(&p).sync();
            match result {
                Ok(st) => {
                    tracing::debug!(full = st.full, elapsed = ?st.duration, rules = st.rules_total, "synced proxy rules");
                    // Upstream updates the health-check servers after the rules are written.
                    let (ports, counts) = {
                        let p = lock(&p);
                        let (services, endpoints) = p.maps();
                        (
                            health_check_node_ports(services),
                            local_ready_endpoints(endpoints),
                        )
                    };
                    health_checks.sync_services(&ports);
                    health_checks.sync_endpoints(&counts);
                }
                Err(e) => {
                    tracing::error!(error = %e, "proxy rules sync failed");
                    r.retry_after(retry);
                }
            }
        })
    });
    runner.run();
    let _ = loop_thread.await;
    Ok(())
}
