//! The controllers of `rkube controller-manager` (upstream kube-controller-manager). Each controller is
//! a module built on the client crate's informers, queue and worker pattern, and is listed in
//! [`CONTROLLERS`] under upstream's canonical name (and the short alias older releases used), so
//! `--controllers` reads as upstream's.
//!
//! - [`cronjob`]: creates Jobs on a cron schedule.
//! - [`deployment`]: rolls Deployments out through ReplicaSets.
//! - [`job`]: runs Jobs' pods to completion.
//! - [`replicaset`]: keeps a ReplicaSet's pods.
//! - [`ttlafterfinished`]: deletes finished Jobs after their TTL.

pub mod cronjob;
pub mod deployment;
pub mod job;
pub mod replicaset;
pub mod ttlafterfinished;

use client::informer::{InformerConfig, SharedInformerFactory};
use futures::future::BoxFuture;
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

/// What every controller is started with: one client and one informer factory, shared so each
/// resource is listed and watched once however many controllers read it.
pub struct ControllerContext {
    pub client: kube::Client,
    pub factory: SharedInformerFactory,
    /// Concurrent syncs per controller (upstream `--concurrent-*-syncs`, 5 by default).
    pub workers: usize,
}

/// One controller of the manager.
pub struct ControllerDescriptor {
    /// Upstream's canonical name (`cmd/kube-controller-manager/names`).
    pub name: &'static str,
    /// The short name older releases accepted in `--controllers`.
    pub alias: &'static str,
    /// Whether `*` includes it.
    pub enabled_by_default: bool,
    /// Runs the controller until the future is dropped.
    pub run: for<'a> fn(&'a ControllerContext) -> BoxFuture<'a, ()>,
}

/// Every controller rkube has, in start order.
pub const CONTROLLERS: &[ControllerDescriptor] = &[
    ControllerDescriptor {
        name: "replicaset-controller",
        alias: "replicaset",
        enabled_by_default: true,
        run: |c| Box::pin(replicaset::run(c.client.clone(), &c.factory, c.workers)),
    },
    ControllerDescriptor {
        name: "deployment-controller",
        alias: "deployment",
        enabled_by_default: true,
        run: |c| Box::pin(deployment::run(c.client.clone(), &c.factory, c.workers)),
    },
    ControllerDescriptor {
        name: "job-controller",
        alias: "job",
        enabled_by_default: true,
        run: |c| Box::pin(job::run(c.client.clone(), &c.factory, c.workers)),
    },
    ControllerDescriptor {
        name: "cronjob-controller",
        alias: "cronjob",
        enabled_by_default: true,
        run: |c| Box::pin(cronjob::run(c.client.clone(), &c.factory, c.workers)),
    },
    ControllerDescriptor {
        name: "ttl-after-finished-controller",
        alias: "ttl-after-finished",
        enabled_by_default: true,
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

/// Runs the chosen controllers until the future is dropped.
pub async fn run_selected(client: kube::Client, selected: Vec<&'static ControllerDescriptor>) {
    let ctx = ControllerContext {
        factory: SharedInformerFactory::new(client.clone(), InformerConfig::new()),
        client,
        workers: 5,
    };
    for c in &selected {
        tracing::info!(controller = c.name, "starting controller");
    }
    futures::future::join_all(selected.iter().map(|c| (c.run)(&ctx))).await;
}

/// Runs every controller that is on by default until the future is dropped.
pub async fn run(client: kube::Client) {
    let selected = select(&["*".to_string()]).unwrap_or_default();
    run_selected(client, selected).await;
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
