//! The controllers of `rkube controller-manager` (upstream kube-controller-manager). Each controller is
//! a module built on the client crate's informers, queue and worker pattern.
//!
//! - [`deployment`]: rolls Deployments out through ReplicaSets.
//! - [`replicaset`]: keeps a ReplicaSet's pods.
//!
//! Not yet: StatefulSet, DaemonSet, Job, CronJob and the controllers of issue 9.

pub mod deployment;
pub mod replicaset;

use client::informer::{InformerConfig, SharedInformerFactory};
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

/// Runs the controllers until the task is dropped.
pub async fn run(client: kube::Client) {
    let factory = SharedInformerFactory::new(client.clone(), InformerConfig::new());
    tokio::join!(
        replicaset::run(client.clone(), &factory, 5),
        deployment::run(client, &factory, 5),
    );
}
