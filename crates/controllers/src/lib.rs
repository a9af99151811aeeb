//! The controllers of `rkube controller-manager` (upstream kube-controller-manager). Each controller is
//! a module built on the client crate's informers, queue and worker pattern.
//!
//! - [`replicaset`]: keeps a ReplicaSet's pods.
//!
//! Not yet: Deployment, StatefulSet, DaemonSet, Job, CronJob and the controllers of issue 9.

pub mod replicaset;

use client::informer::{InformerConfig, SharedInformerFactory};

/// Runs the controllers until the task is dropped.
pub async fn run(client: kube::Client) {
    let factory = SharedInformerFactory::new(client.clone(), InformerConfig::new());
    replicaset::run(client, &factory, 5).await;
}
