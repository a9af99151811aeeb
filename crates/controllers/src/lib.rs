//! The controllers of `rkube controller-manager` (upstream kube-controller-manager). Each controller is
//! a module built on the client crate's informers, queue and worker pattern, and is listed in
//! [`CONTROLLERS`] under upstream's canonical name (and the short alias older releases used), so
//! `--controllers` reads as upstream's.
//!
//! - [`certificates`]: signs, auto-approves and cleans up CertificateSigningRequests.
//! - [`bootstrap`]: deletes expired bootstrap token Secrets (`tokencleaner`) and signs
//!   `kube-public/cluster-info` with bootstrap tokens (`bootstrapsigner`), off by default as upstream.
//! - [`clusterroleaggregation`]: aggregated ClusterRoles get the rules of the roles they select.
//! - [`cronjob`]: creates Jobs on a cron schedule.
//! - [`daemonset`]: a pod on every eligible node.
//! - [`deployment`]: rolls Deployments out through ReplicaSets.
//! - [`disruption`]: PodDisruptionBudget status, which evictions honour.
//! - [`endpoint`]: a Service's Endpoints from its selected pods.
//! - [`endpointslice`]: a Service's EndpointSlices from its selected pods.
//! - [`endpointslicemirroring`]: EndpointSlices mirroring the custom Endpoints of selectorless Services.
//! - [`garbagecollector`]: cascading deletion by ownerReferences (background, foreground, orphan).
//! - [`history`]: ControllerRevisions, for the StatefulSet and DaemonSet controllers.
//! - [`job`]: runs Jobs' pods to completion.
//! - [`namespace`]: empties a deleted namespace and finalizes it.
//! - [`nodeipam`]: gives each node a pod CIDR.
//! - [`nodelifecycle`]: marks silent nodes Unknown and taints them; [`tainteviction`] evicts the pods
//!   that do not tolerate a node's NoExecute taints.
//! - [`podautoscaler`]: the horizontal pod autoscaler (scales through the scale subresource from
//!   the resource metrics API).
//! - [`podgc`]: deletes terminated pods over a threshold and pods of vanished nodes.
//! - [`replicaset`]: keeps a ReplicaSet's (or ReplicationController's) pods.
//! - [`resourceclaim`]: ResourceClaims from pods' claim templates, reservations and deallocation
//!   (Dynamic Resource Allocation).
//! - [`devicetainteviction`]: evicts pods whose claims' devices have NoExecute taints (DRA).
//! - [`resourcequota`]: ResourceQuota status (hard limits and current usage).
//! - [`rootcacertpublisher`]: the `kube-root-ca.crt` ConfigMap in every namespace.
//! - [`serviceaccount`]: the `default` ServiceAccount in every namespace.
//! - [`servicecidrs`]: ServiceCIDR finalizers and Ready conditions.
//! - [`statefulset`]: ordered pods with stable identities and storage.
//! - [`ttlafterfinished`]: deletes finished Jobs after their TTL.
//! - [`volume`]: binds PersistentVolumeClaims to PersistentVolumes, provisions and reclaims volumes,
//!   and protects claims and volumes in use from deletion.

pub mod bootstrap;
pub mod certificates;
pub(crate) mod claim;
pub mod clusterroleaggregation;
pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod devicetainteviction;
pub mod disruption;
pub mod endpoint;
pub mod endpointslice;
pub mod endpointslicemirroring;
pub mod garbagecollector;
pub mod history;
pub mod job;
pub mod namespace;
pub mod nodeipam;
pub mod nodelifecycle;
pub mod podautoscaler;
pub mod podgc;
pub mod replicaset;
pub mod resourceclaim;
pub mod resourcequota;
pub mod rootcacertpublisher;
pub mod serviceaccount;
pub mod servicecidrs;
pub mod statefulset;
pub mod tainteviction;
pub mod ttlafterfinished;
mod util;
pub mod volume;

use std::sync::Arc;

use client::informer::{InformerConfig, SharedInformer, SharedInformerFactory};
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

/// The `namespace/name` key of the object's controller (the owner reference with `controller: true`)
/// when that controller is of `kind`.
pub(crate) fn controller_key(meta: &ObjectMeta, kind: &str) -> Option<String> {
    let owner = meta
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true) && r.kind == kind)?;
    Some(format!(
        "{}/{}",
        meta.namespace.as_deref().unwrap_or(""),
        owner.name
    ))
}

/// The message of a failed API request: the `Status` message for API errors (what upstream's
/// controllers put in events and conditions), else the error itself.
pub(crate) fn api_error_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(status) if !status.message.is_empty() => status.message.clone(),
        other => other.to_string(),
    }
}

/// The index of pods by `spec.nodeName` several controllers share.
pub const POD_NODE_INDEX: &str = "nodeName";

/// Adds [`POD_NODE_INDEX`] to the shared pod informer (once, whoever asks first).
pub fn index_pods_by_node(informer: &Arc<SharedInformer<Pod>>) {
    let _ = informer.add_indexer(
        POD_NODE_INDEX,
        Arc::new(|p: &Pod| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty())
                .into_iter()
                .collect()
        }),
    );
}

/// What every controller is started with: one client and one informer factory, shared so each
/// resource is listed and watched once however many controllers read it.
pub struct ControllerContext {
    pub client: kube::Client,
    pub factory: Arc<SharedInformerFactory>,
    /// This controller's concurrent syncs (upstream `--concurrent-*-syncs`).
    pub workers: usize,
    /// Settings of individual controllers (upstream's per-controller flags).
    pub options: ControllerOptions,
}

/// The controller-manager flags that individual controllers read.
#[derive(Clone, Debug)]
pub struct ControllerOptions {
    /// Concurrent syncs by controller name, overriding the descriptors' defaults.
    pub concurrent_syncs: std::collections::BTreeMap<&'static str, usize>,
    pub node_lifecycle: nodelifecycle::Options,
    pub node_ipam: nodeipam::Options,
    /// The CA bundle (PEM) published as `kube-root-ca.crt` (upstream `--root-ca-file`); without
    /// one the publisher does not run.
    pub root_ca_pem: Option<String>,
    /// The CA and certificate lifetime of the CSR signer (upstream `--cluster-signing-*`).
    pub csr_signing: certificates::signer::Options,
    /// Upstream `--max-endpoints-per-slice`.
    pub max_endpoints_per_slice: usize,
    /// Upstream `--mirroring-max-endpoints-per-subset`.
    pub mirroring_max_endpoints_per_subset: usize,
    /// Upstream `--terminated-pod-gc-threshold` (0 turns that part of pod GC off).
    pub terminated_pod_gc_threshold: usize,
    /// How long pod GC waits before treating a missing node as deleted (upstream: a 40 s constant).
    pub pod_gc_quarantine: std::time::Duration,
    /// How often pod GC runs (upstream: a 20 s constant).
    pub pod_gc_period: std::time::Duration,
    /// Upstream `--resource-quota-sync-period`: how often every quota is recomputed.
    pub resource_quota_sync_period: std::time::Duration,
    /// Where the in-tree `rkube.io/local-path` provisioner makes its directories; None leaves it
    /// unregistered (it creates them on this machine, so only a controller manager on the node
    /// itself, as in `rkube server`, may run it).
    pub local_path_dir: Option<std::path::PathBuf>,
    /// The horizontal pod autoscaler's `--horizontal-pod-autoscaler-*` flags.
    pub hpa: podautoscaler::Options,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            concurrent_syncs: Default::default(),
            node_lifecycle: nodelifecycle::Options::default(),
            node_ipam: nodeipam::Options::default(),
            root_ca_pem: None,
            csr_signing: Default::default(),
            max_endpoints_per_slice: 100,
            mirroring_max_endpoints_per_subset: 1000,
            terminated_pod_gc_threshold: 12500,
            pod_gc_quarantine: std::time::Duration::from_secs(40),
            pod_gc_period: std::time::Duration::from_secs(20),
            resource_quota_sync_period: std::time::Duration::from_secs(300),
            local_path_dir: None,
            hpa: podautoscaler::Options::default(),
        }
    }
}

/// One controller of the manager.
pub struct ControllerDescriptor {
    /// Upstream's canonical name (`cmd/kube-controller-manager/names`).
    pub name: &'static str,
    /// The short name older releases accepted in `--controllers`.
    pub alias: &'static str,
    /// Whether `*` includes it.
    pub enabled_by_default: bool,
    /// Concurrent syncs unless `ControllerOptions::concurrent_syncs` says otherwise (upstream's
    /// default of its `--concurrent-*-syncs` flag).
    pub workers: usize,
    /// Runs the controller until the future is dropped.
    pub run: for<'a> fn(&'a ControllerContext) -> BoxFuture<'a, ()>,
}

/// Every controller rkube has, in start order.
pub const CONTROLLERS: &[ControllerDescriptor] = &[
    ControllerDescriptor {
        name: "replicaset-controller",
        alias: "replicaset",
        enabled_by_default: true,
        workers: 5,
        run: |c| Box::pin(replicaset::run(c.client.clone(), &c.factory, c.workers)),
    },
    ControllerDescriptor {
        name: "replicationcontroller-controller",
        alias: "replicationcontroller",
        enabled_by_default: true,
        workers: 5,
        run: |c| {
            Box::pin(replicaset::run_replication_controllers(
                c.client.clone(),
                &c.factory,
                c.workers,
            ))
        },
    },
    ControllerDescriptor {
        name: "deployment-controller",
        alias: "deployment",
        enabled_by_default: true,
        workers: 5,
        run: |c| Box::pin(deployment::run(c.client.clone(), &c.factory, c.workers)),
    },
    ControllerDescriptor {
        name: "statefulset-controller",
        alias: "statefulset",
        enabled_by_default: true,
        workers: 5,
        run: |c| Box::pin(statefulset::run(c.client.clone(), &c.factory, c.workers)),
    },
    ControllerDescriptor {
        name: "daemonset-controller",
        alias: "daemonset",
        enabled_by_default: true,
        workers: 2,
        run: |c| Box::pin(daemonset::run(c.client.clone(), &c.factory, c.workers)),
    },
    ControllerDescriptor {
        name: "disruption-controller",
        alias: "disruption",
        enabled_by_default: true,
        workers: 1,
        run: |c| Box::pin(disruption::run(c.client.clone(), &c.factory, c.workers)),
    },
    ControllerDescriptor {
        name: "node-lifecycle-controller",
        alias: "nodelifecycle",
        enabled_by_default: true,
        workers: 1,
        run: |c| {
            Box::pin(nodelifecycle::run(
                c.client.clone(),
                &c.factory,
                c.options.node_lifecycle.clone(),
            ))
        },
    },
    ControllerDescriptor {
        name: "node-ipam-controller",
        alias: "nodeipam",
        enabled_by_default: true,
        workers: 1,
        run: |c| {
            Box::pin(nodeipam::run(
                c.client.clone(),
                &c.factory,
                c.options.node_ipam.clone(),
            ))
        },
    },
    ControllerDescriptor {
        name: "taint-eviction-controller",
        alias: "taint-eviction-controller",
        enabled_by_default: true,
        workers: 8,
        run: |c| Box::pin(tainteviction::run(c.client.clone(), &c.factory, c.workers)),
    },
    ControllerDescriptor {
        name: "garbage-collector-controller",
        alias: "garbagecollector",
        enabled_by_default: true,
        workers: 20,
        run: |c| {
            Box::pin(garbagecollector::run(
                c.client.clone(),
                c.factory.clone(),
                c.workers,
            ))
        },
    },
    ControllerDescriptor {
        name: "namespace-controller",
        alias: "namespace",
        enabled_by_default: true,
        workers: 10,
        run: |c| Box::pin(namespace::run(c.client.clone(), &c.factory, c.workers)),
    },
    ControllerDescriptor {
        name: "serviceaccount-controller",
        alias: "serviceaccount",
        enabled_by_default: true,
        workers: 1,
        run: |c| Box::pin(serviceaccount::run(c.client.clone(), &c.factory)),
    },
    ControllerDescriptor {
        name: "root-ca-certificate-publisher-controller",
        alias: "root-ca-cert-publisher",
        enabled_by_default: true,
        workers: 1,
        run: |c| Box::pin(rootcacertpublisher::run(c)),
    },
    ControllerDescriptor {
        name: "certificatesigningrequest-signing-controller",
        alias: "csrsigning",
        enabled_by_default: true,
        workers: 5,
        run: |c| Box::pin(certificates::signer::run(c)),
    },
    ControllerDescriptor {
        name: "certificatesigningrequest-approving-controller",
        alias: "csrapproving",
        enabled_by_default: true,
        workers: 5,
        run: |c| Box::pin(certificates::approver::run(c)),
    },
    ControllerDescriptor {
        name: "certificatesigningrequest-cleaner-controller",
        alias: "csrcleaner",
        enabled_by_default: true,
        workers: 1,
        run: |c| Box::pin(certificates::cleaner::run(c)),
    },
    ControllerDescriptor {
        name: "endpoints-controller",
        alias: "endpoint",
        enabled_by_default: true,
        workers: 5,
        run: |c| Box::pin(endpoint::run(c.client.clone(), &c.factory, c.workers)),
    },
    ControllerDescriptor {
        name: "endpointslice-controller",
        alias: "endpointslice",
        enabled_by_default: true,
        workers: 5,
        run: |c| Box::pin(endpointslice::run(c)),
    },
    ControllerDescriptor {
        name: "endpointslice-mirroring-controller",
        alias: "endpointslicemirroring",
        enabled_by_default: true,
        workers: 5,
        run: |c| Box::pin(endpointslicemirroring::run(c)),
    },
    ControllerDescriptor {
        name: "pod-garbage-collector-controller",
        alias: "podgc",
        enabled_by_default: true,
        workers: 1,
        run: |c| Box::pin(podgc::run(c)),
    },
    ControllerDescriptor {
        name: "resourcequota-controller",
        alias: "resourcequota",
        enabled_by_default: true,
        workers: 5,
        run: |c| {
            Box::pin(resourcequota::run(
                c.client.clone(),
                c.factory.clone(),
                c.workers,
                c.options.resource_quota_sync_period,
            ))
        },
    },
    ControllerDescriptor {
        name: "resourceclaim-controller",
        alias: "resource-claim-controller",
        enabled_by_default: true,
        workers: 10,
        run: |c| Box::pin(resourceclaim::run(c.client.clone(), &c.factory, c.workers)),
    },
    ControllerDescriptor {
        name: devicetainteviction::CONTROLLER_NAME,
        alias: "device-taint-eviction-controller",
        enabled_by_default: true,
        // Upstream's default ConcurrentSyncs.
        workers: 10,
        run: |c| {
            Box::pin(devicetainteviction::run(
                c.client.clone(),
                &c.factory,
                c.workers,
            ))
        },
    },
    ControllerDescriptor {
        name: "persistentvolume-binder-controller",
        alias: "persistentvolume-binder",
        enabled_by_default: true,
        workers: 1,
        run: |c| {
            Box::pin(volume::persistentvolume::run(
                c.client.clone(),
                &c.factory,
                volume::in_tree_provisioners(&c.options),
            ))
        },
    },
    ControllerDescriptor {
        name: "persistentvolume-expander-controller",
        alias: "persistentvolume-expander",
        enabled_by_default: true,
        workers: 1,
        run: |c| {
            Box::pin(volume::expand::run(
                c.client.clone(),
                &c.factory,
                volume::in_tree_provisioners(&c.options),
                c.workers,
            ))
        },
    },
    ControllerDescriptor {
        name: "ephemeral-volume-controller",
        alias: "ephemeral-volume",
        enabled_by_default: true,
        workers: 5,
        run: |c| {
            Box::pin(volume::ephemeral::run(
                c.client.clone(),
                &c.factory,
                c.workers,
            ))
        },
    },
    ControllerDescriptor {
        name: "attachdetach-controller",
        alias: "attachdetach",
        enabled_by_default: true,
        workers: 1,
        run: |c| {
            Box::pin(volume::attachdetach::run(
                c.client.clone(),
                &c.factory,
                volume::attachdetach::Options::default(),
            ))
        },
    },
    ControllerDescriptor {
        name: "persistentvolumeclaim-protection-controller",
        alias: "pvc-protection",
        enabled_by_default: true,
        workers: 1,
        run: |c| {
            Box::pin(volume::protection::pvc::run(
                c.client.clone(),
                &c.factory,
                c.workers,
            ))
        },
    },
    ControllerDescriptor {
        name: "persistentvolume-protection-controller",
        alias: "pv-protection",
        enabled_by_default: true,
        workers: 1,
        run: |c| {
            Box::pin(volume::protection::pv::run(
                c.client.clone(),
                &c.factory,
                c.workers,
            ))
        },
    },
    ControllerDescriptor {
        name: "clusterrole-aggregation-controller",
        alias: "clusterrole-aggregation",
        enabled_by_default: true,
        workers: 5,
        run: |c| {
            Box::pin(clusterroleaggregation::run(
                c.client.clone(),
                &c.factory,
                c.workers,
            ))
        },
    },
    ControllerDescriptor {
        name: "horizontal-pod-autoscaler-controller",
        alias: "horizontalpodautoscaling",
        enabled_by_default: true,
        // Upstream `--concurrent-horizontal-pod-autoscaler-syncs`.
        workers: 5,
        run: |c| Box::pin(podautoscaler::run(c)),
    },
    ControllerDescriptor {
        name: "job-controller",
        alias: "job",
        enabled_by_default: true,
        workers: 5,
        run: |c| Box::pin(job::run(c.client.clone(), &c.factory, c.workers)),
    },
    ControllerDescriptor {
        name: "cronjob-controller",
        alias: "cronjob",
        enabled_by_default: true,
        workers: 5,
        run: |c| Box::pin(cronjob::run(c.client.clone(), &c.factory, c.workers)),
    },
    ControllerDescriptor {
        name: "service-cidr-controller",
        alias: "service-cidr-controller",
        enabled_by_default: true,
        workers: 5,
        run: |c| Box::pin(servicecidrs::run(c.client.clone(), &c.factory, c.workers)),
    },
    ControllerDescriptor {
        name: "bootstrap-signer-controller",
        alias: "bootstrapsigner",
        enabled_by_default: false,
        workers: 1,
        run: |c| Box::pin(bootstrap::bootstrapsigner::run(c.client.clone(), c.workers)),
    },
    ControllerDescriptor {
        name: "token-cleaner-controller",
        alias: "tokencleaner",
        enabled_by_default: false,
        workers: 1,
        run: |c| Box::pin(bootstrap::tokencleaner::run(c.client.clone(), c.workers)),
    },
    ControllerDescriptor {
        name: "ttl-after-finished-controller",
        alias: "ttl-after-finished",
        enabled_by_default: true,
        workers: 5,
        run: |c| {
            Box::pin(ttlafterfinished::run(
                c.client.clone(),
                &c.factory,
                c.workers,
            ))
        },
    },
];

/// Resolves `--controllers` as upstream does: a comma-separated list where `*` means every
/// controller on by default, `foo` turns foo on and `-foo` turns it off (a name wins over `*`); names
/// may be canonical or aliases; the first item naming a controller decides (upstream
/// `IsControllerEnabled`). Unknown names are an error.
pub fn select(spec: &[String]) -> Result<Vec<&'static ControllerDescriptor>, String> {
    let find = |name: &str| {
        CONTROLLERS
            .iter()
            .find(|c| c.name == name || c.alias == name)
            .ok_or_else(|| {
                let known: Vec<&str> = CONTROLLERS.iter().map(|c| c.name).collect();
                format!(
                    "--controllers: unknown controller {name:?} (known: {})",
                    known.join(", ")
                )
            })
    };
    let items: Vec<&str> = spec
        .iter()
        .flat_map(|s| s.split(','))
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    // Validate every name first, then decide per controller: the first item naming it wins, else `*`.
    let mut resolved: Vec<(bool, &str)> = Vec::new();
    let mut star = false;
    for item in &items {
        match (*item, item.strip_prefix('-')) {
            ("*", _) => star = true,
            (_, Some(name)) => resolved.push((false, find(name)?.name)),
            (name, None) => resolved.push((true, find(name)?.name)),
        }
    }
    Ok(CONTROLLERS
        .iter()
        .filter(|c| {
            resolved
                .iter()
                .find(|(_, name)| *name == c.name)
                .map_or(star && c.enabled_by_default, |(on, _)| *on)
        })
        .collect())
}

/// The controllers' informer factory: managedFields trimmed from every cached object, as upstream's
/// kube-controller-manager does (no controller reads them; writes of a cached object without them
/// keep the server's). Other components of one process may share it ([`run_selected_with_factory`]).
pub fn informer_factory(client: kube::Client) -> Arc<SharedInformerFactory> {
    Arc::new(SharedInformerFactory::new(
        client,
        InformerConfig::new().trim_managed_fields(),
    ))
}

/// Runs the chosen controllers until the future is dropped.
pub async fn run_selected(
    client: kube::Client,
    selected: Vec<&'static ControllerDescriptor>,
    options: ControllerOptions,
) {
    let factory = informer_factory(client.clone());
    run_selected_with_factory(client, factory, selected, options).await;
}

/// Like [`run_selected`], with the informers of `factory` (one made by [`informer_factory`], which
/// `rkube server` shares with its scheduler so every pod is cached once).
pub async fn run_selected_with_factory(
    client: kube::Client,
    factory: Arc<SharedInformerFactory>,
    selected: Vec<&'static ControllerDescriptor>,
    options: ControllerOptions,
) {
    let contexts: Vec<ControllerContext> = selected
        .iter()
        .map(|c| {
            let workers = options
                .concurrent_syncs
                .get(c.name)
                .copied()
                .unwrap_or(c.workers);
            tracing::info!(controller = c.name, workers, "starting controller");
            ControllerContext {
                client: client.clone(),
                factory: factory.clone(),
                workers,
                options: options.clone(),
            }
        })
        .collect();
    futures::future::join_all(selected.iter().zip(&contexts).map(|(c, ctx)| (c.run)(ctx))).await;
}

/// Runs every controller that is on by default until the future is dropped.
pub async fn run(client: kube::Client, options: ControllerOptions) {
    let selected = select(&["*".to_string()]).unwrap_or_default();
    run_selected(client, selected, options).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(spec: &str) -> Result<Vec<&'static str>, String> {
        select(&[spec.to_string()]).map(|v| v.iter().map(|c| c.name).collect())
    }

    #[test]
    fn controllers_flag_as_upstream() {
        let all: Vec<&str> = CONTROLLERS
            .iter()
            .filter(|c| c.enabled_by_default)
            .map(|c| c.name)
            .collect();
        assert_eq!(names("*").unwrap(), all);
        assert_eq!(names("deployment").unwrap(), ["deployment-controller"]);
        assert_eq!(
            names("*,-replicaset").unwrap(),
            all.iter()
                .copied()
                .filter(|n| *n != "replicaset-controller")
                .collect::<Vec<_>>()
        );
        assert!(names("-deployment-controller,deployment")
            .unwrap()
            .is_empty());
        assert_eq!(
            names("deployment,-deployment").unwrap(),
            ["deployment-controller"]
        );
        assert!(names("").unwrap().is_empty());
        assert!(names("frobnicator").unwrap_err().contains("frobnicator"));
    }
}
