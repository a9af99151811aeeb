//! The node agent (kube-router's `NetworkPolicyController`, Calico's Felix policy sync):
//! informers for NetworkPolicies, Pods and Namespaces ask a bounded-frequency runner for a sync;
//! a sync snapshots the informers' stores, computes the table ([`super::table`]) and, when it
//! changed or the periodic resync is due, replaces it with one `nft -f -` transaction in the
//! node's network namespace ([`Exec`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use client::informer::{EventHandlerFuncs, InformerConfig, SharedInformerFactory};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::networking::v1::NetworkPolicy;

use super::model::{NamespaceInfo, PodInfo, Policy};
use super::rules;
use crate::exec::{Exec, ExecError};
use crate::runner::{BoundedFrequencyRunner, StopOnDrop};

#[derive(Clone, Debug)]
pub struct Options {
    /// This node's name: only its pods get chains.
    pub node_name: String,
    pub min_sync_period: Duration,
    pub sync_period: Duration,
    /// Where the table goes: the host, or the node's network namespace.
    pub exec: Exec,
}

/// Pods on one bridge reach each other without routing; only `br_netfilter` hands such frames
/// to the forward hook. Turned on when the module is there but the namespace has it off; a
/// warning when the module is missing (then only routed traffic is filtered).
fn ensure_bridge_netfilter(exec: &Exec) {
    const KEY: &str = "net.bridge.bridge-nf-call-iptables";
    match exec.run("sysctl", &["-n", KEY], None) {
        Ok(v) if v.trim() == "1" => {}
        Ok(_) => {
            if let Err(e) = exec.run("sysctl", &["-qw", &format!("{KEY}=1")], None) {
                tracing::warn!(error = %e, "cannot turn on {KEY}: NetworkPolicies do not filter traffic between pods on one bridge");
            }
        }
        Err(e) => {
            tracing::warn!(error = %e, "br_netfilter is not loaded: NetworkPolicies do not filter traffic between pods on one bridge")
        }
    }
}

/// Removes the table (the agent's cleanup).
pub fn cleanup(exec: &Exec) -> Result<(), ExecError> {
    exec.run("nft", &["-f", "-"], Some(&rules::cleanup_script()))
        .map(|_| ())
}

/// Runs until the future is dropped.
pub async fn run(client: kube::Client, opts: Options) {
    let runner = Arc::new(BoundedFrequencyRunner::new(
        opts.min_sync_period,
        opts.sync_period,
        2,
    ));
    let initialized = Arc::new(AtomicBool::new(false));
    let factory = Arc::new(SharedInformerFactory::new(
        client,
        InformerConfig::new().trim_managed_fields(),
    ));
    let notify = {
        let (runner, initialized) = (runner.clone(), initialized.clone());
        move || {
            if initialized.load(Ordering::SeqCst) {
                runner.run();
            }
        }
    };
    // Every change may change the table (a label, an IP, a node); the runner coalesces them.
    fn handlers<K: Send + Sync + 'static>(
        notify: impl Fn() + Clone + Send + Sync + 'static,
    ) -> EventHandlerFuncs<K> {
        let (n1, n2, n3) = (notify.clone(), notify.clone(), notify);
        EventHandlerFuncs::new()
            .on_add(move |_: &Arc<K>, _| n1())
            .on_update(move |_: &Arc<K>, _: &Arc<K>| n2())
            .on_delete(move |_| n3())
    }
    let policies = factory.informer::<NetworkPolicy>();
    let pods = factory.informer::<Pod>();
    let namespaces = factory.informer::<Namespace>();
    policies.add_event_handler(handlers::<NetworkPolicy>(notify.clone()));
    pods.add_event_handler(handlers::<Pod>(notify.clone()));
    namespaces.add_event_handler(handlers::<Namespace>(notify));
    let stop = Arc::new(AtomicBool::new(false));
    // Stops the sync loop and the informers when the agent's future is dropped (its task aborted).
    let _guard = StopOnDrop::new(runner.clone(), stop.clone()).also({
        let factory = factory.clone();
        move || factory.shutdown()
    });
    factory.start();
    factory.wait_for_cache_sync().await;
    // As kube-proxy: no table from a partial view (a pod seen before the policy isolating it,
    // or a policy before the peers it allows, would briefly drop or allow too much).
    initialized.store(true, Ordering::SeqCst);

    let (policies, pods, namespaces) = (policies.store(), pods.store(), namespaces.store());
    let (r, s) = (runner.clone(), stop.clone());
    let exec = opts.exec.clone();
    let node = opts.node_name.clone();
    let resync = opts.sync_period;
    let loop_thread = tokio::task::spawn_blocking(move || {
        ensure_bridge_netfilter(&exec);
        let mut last: Option<(String, Instant)> = None;
        r.run_loop(&s, || {
            let policies: Vec<Policy> = policies
                .list()
                .iter()
                .filter_map(|np| match Policy::from_network_policy(np) {
                    Ok(p) => Some(p),
                    Err(e) => {
                        // The API server validates policies; one that fails here is skipped
                        // rather than failing every other policy's enforcement.
                        tracing::warn!(
                            namespace = np.metadata.namespace.as_deref().unwrap_or(""),
                            name = np.metadata.name.as_deref().unwrap_or(""),
                            error = %e,
                            "NetworkPolicy ignored"
                        );
                        None
                    }
                })
                .collect();
            let pods: Vec<PodInfo> = pods
                .list()
                .iter()
                .filter_map(|p| PodInfo::from_pod(p))
                .collect();
            let namespaces: Vec<NamespaceInfo> = namespaces
                .list()
                .iter()
                .map(|n| NamespaceInfo::from_namespace(n))
                .collect();
            let script = super::table(&policies, &pods, &namespaces, &node);
            // Unchanged: rewritten only at the periodic resync (repairs a table someone removed).
            if let Some((prev, at)) = &last {
                if *prev == script && at.elapsed() < resync {
                    return;
                }
            }
            let started = Instant::now();
            match exec.run("nft", &["-f", "-"], Some(&script)) {
                Ok(_) => {
                    tracing::debug!(elapsed = ?started.elapsed(), policies = policies.len(), "synced NetworkPolicy rules");
                    last = Some((script, Instant::now()));
                }
                Err(e) => {
                    tracing::error!(error = %e, "NetworkPolicy rules sync failed");
                    last = None;
                    r.retry_after(Duration::from_secs(1).min(resync));
                }
            }
        })
    });
    runner.run();
    let _ = loop_thread.await;
}
