//! Emptying a terminating namespace (upstream `namespace/deletion/namespaced_resources_deleter.go`):
//! discover every namespaced resource that supports delete, delete each collection (or list and
//! delete each object), count what remains and why, write the conditions, and remove the
//! `kubernetes` finalizer through `namespaces/<name>/finalize` once nothing is left.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{json, Value};

use super::conditions::ConditionUpdater;
use crate::garbagecollector::discovery::{self, Discovered};

/// The finalizer this controller owns in `spec.finalizers`.
pub const FINALIZER_KUBERNETES: &str = "kubernetes";
/// How long objects held by finalizers are expected to take (upstream `finalizerEstimateSeconds`).
pub const FINALIZER_ESTIMATE_SECONDS: i64 = 15;

/// How a pass ended when it did not finish the namespace.
#[derive(Debug, PartialEq, Eq)]
pub enum Pending {
    /// Content remains; look again after this many seconds' estimate (upstream
    /// `ResourcesRemainingError`).
    Remaining(i64),
    Failed(String),
}

fn is_status(e: &kube::Error, codes: &[u16]) -> bool {
    matches!(e, kube::Error::Api(s) if codes.contains(&s.code))
}

/// The longest grace period among the namespace's pods that are still running (upstream
/// `estimateGracefulTerminationForPods`), or 0 once the namespace has been deleting that long.
pub fn pod_estimate(pods: &[Pod], deleting_for_seconds: i64) -> i64 {
    let estimate = pods
        .iter()
        .filter(|p| {
            !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        })
        .filter_map(|p| p.spec.as_ref()?.termination_grace_period_seconds)
        .max()
        .unwrap_or(0);
    if deleting_for_seconds >= estimate {
        0
    } else {
        estimate
    }
}

/// What one resource left behind.
#[derive(Debug, Default)]
struct ResourceResult {
    estimate: i64,
    remaining: usize,
    finalizers: BTreeMap<String, usize>,
}

pub struct Deleter {
    client: Client,
}

impl Deleter {
    pub fn new(client: Client) -> Deleter {
        Deleter { client }
    }

    /// One pass over a namespace (upstream `namespacedResourcesDeleter.Delete`).
    pub async fn delete(&self, name: &str) -> Result<(), Pending> {
        let api: Api<Namespace> = Api::all(self.client.clone());
        let failed = |e: kube::Error| Pending::Failed(format!("namespace {name}: {e}"));
        let Some(mut ns) = api.get_opt(name).await.map_err(failed)? else {
            return Ok(());
        };
        if ns.metadata.deletion_timestamp.is_none() {
            return Ok(());
        }
        let phase = ns.status.as_ref().and_then(|s| s.phase.as_deref());
        if phase != Some("Terminating") {
            match api
                .patch_status(
                    name,
                    &PatchParams::default(),
                    &Patch::Merge(json!({"status": {"phase": "Terminating"}})),
                )
                .await
            {
                Ok(updated) => ns = updated,
                Err(e) if is_status(&e, &[404]) => return Ok(()),
                Err(e) => return Err(failed(e)),
            }
        }
        let finalizers = ns
            .spec
            .as_ref()
            .and_then(|s| s.finalizers.clone())
            .unwrap_or_default();
        if !finalizers.iter().any(|f| f == FINALIZER_KUBERNETES) {
            return Ok(());
        }
        let estimate = self.delete_all_content(&ns).await?;
        if estimate > 0 {
            return Err(Pending::Remaining(estimate));
        }
        self.finalize(&api, name).await
    }

    /// Removes our finalizer with `PUT .../finalize`, retrying on conflict.
    async fn finalize(&self, api: &Api<Namespace>, name: &str) -> Result<(), Pending> {
        for _ in 0..5 {
            let Some(mut ns) = api
                .get_opt(name)
                .await
                .map_err(|e| Pending::Failed(e.to_string()))?
            else {
                return Ok(());
            };
            if let Some(spec) = ns.spec.as_mut() {
                if let Some(f) = spec.finalizers.as_mut() {
                    f.retain(|f| f != FINALIZER_KUBERNETES);
                }
            }
            match api
                .replace_subresource("finalize", name, &PostParams::default(), &ns)
                .await
            {
                Ok(_) => return Ok(()),
                Err(e) if is_status(&e, &[404]) => return Ok(()),
                Err(e) if is_status(&e, &[409]) => continue,
                Err(e) => return Err(Pending::Failed(format!("finalize {name}: {e}"))),
            }
        }
        Err(Pending::Failed(format!(
            "finalize {name}: too many conflicts"
        )))
    }

    /// Deletes everything in the namespace; returns the estimate of seconds until the rest is gone
    /// (upstream `deleteAllContent`). Conditions are written whatever happened.
    async fn delete_all_content(&self, ns: &Namespace) -> Result<i64, Pending> {
        let name = ns.metadata.name.clone().unwrap_or_default();
        let deleted_at = ns
            .metadata
            .deletion_timestamp
            .as_ref()
            .map(|t| t.0)
            .unwrap_or_else(jiff::Timestamp::now);
        let deleting_for = (jiff::Timestamp::now().as_second() - deleted_at.as_second()).max(0);
        let mut updater = ConditionUpdater::default();
        let mut errors = Vec::new();
        let resources: Vec<Discovered> = match discovery::discover(&self.client).await {
            Ok(d) => {
                if let Some(e) = d.error() {
                    updater.discovery_failed(d.failed.len(), &e);
                    errors.push(e);
                }
                d.preferred
                    .into_iter()
                    .filter(|r| r.namespaced && r.supports(&["delete"]))
                    .collect()
            }
            Err(e) => {
                let e = e.to_string();
                updater.discovery_failed(0, &e);
                errors.push(e);
                Vec::new()
            }
        };
        let mut estimate = 0;
        let mut remaining = BTreeMap::new();
        let mut finalizers: BTreeMap<String, usize> = BTreeMap::new();
        for r in &resources {
            match self.delete_resource(r, &name, deleting_for).await {
                Ok(result) => {
                    estimate = estimate.max(result.estimate);
                    if result.remaining > 0 {
                        remaining.insert(r.group_resource(), result.remaining);
                    }
                    for (f, n) in result.finalizers {
                        *finalizers.entry(f).or_default() += n;
                    }
                }
                Err((result, e)) => {
                    estimate = estimate.max(result.estimate);
                    if result.remaining > 0 {
                        remaining.insert(r.group_resource(), result.remaining);
                    }
                    updater.delete_content_failed(e.clone());
                    errors.push(e);
                }
            }
        }
        updater.content_totals(&remaining, &finalizers);
        let current: Vec<Value> = ns
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .map(|c| {
                c.iter()
                    .filter_map(|c| serde_json::to_value(c).ok())
                    .collect()
            })
            .unwrap_or_default();
        let now = jiff::Timestamp::now()
            .strftime("%Y-%m-%dT%H:%M:%SZ")
            .to_string();
        if let Some(conditions) = updater.update(&current, &now) {
            let api: Api<Namespace> = Api::all(self.client.clone());
            let patch = json!({"status": {"conditions": conditions}});
            if let Err(e) = api
                .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                tracing::warn!(namespace = %name, error = %e, "couldn't update status conditions");
            }
        }
        if errors.is_empty() {
            Ok(estimate)
        } else {
            Err(Pending::Failed(errors.join("; ")))
        }
    }

    /// Deletes one resource's objects in the namespace (upstream
    /// `deleteAllContentForGroupVersionResource`).
    async fn delete_resource(
        &self,
        r: &Discovered,
        ns: &str,
        deleting_for: i64,
    ) -> Result<ResourceResult, (ResourceResult, String)> {
        let mut result = ResourceResult::default();
        let gvr = format!(
            "{}/{}, Resource={}",
            r.resource.group, r.resource.version, r.resource.plural
        );
        if r.resource.group.is_empty() && r.resource.plural == "pods" {
            let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
            if let Ok(list) = pods.list(&ListParams::default()).await {
                result.estimate = pod_estimate(&list.items, deleting_for);
            }
        }
        let api: Api<DynamicObject> = Api::namespaced_with(self.client.clone(), ns, &r.resource);
        let background = DeleteParams::background();
        let mut collected = false;
        if r.supports(&["deletecollection"]) {
            match api
                .delete_collection(&background, &ListParams::default())
                .await
            {
                Ok(_) => collected = true,
                Err(e) if is_status(&e, &[404, 405]) => {}
                Err(e) => return Err((result, format!("{gvr}: {e}"))),
            }
        }
        if !r.supports(&["list"]) {
            return Ok(result);
        }
        if !collected {
            let list = match api.list_metadata(&ListParams::default()).await {
                Ok(l) => l,
                Err(e) if is_status(&e, &[404, 405]) => return Ok(result),
                Err(e) => return Err((result, format!("{gvr}: {e}"))),
            };
            for item in list.items {
                let name = item.metadata.name.unwrap_or_default();
                match api.delete(&name, &background).await {
                    Ok(_) => {}
                    Err(e) if is_status(&e, &[404, 405]) => {}
                    Err(e) => return Err((result, format!("{gvr}: {e}"))),
                }
            }
        }
        // What is left: objects held by finalizers are expected; anything else is not.
        let left = match api.list_metadata(&ListParams::default()).await {
            Ok(l) => l.items,
            Err(e) if is_status(&e, &[404, 405]) => return Ok(result),
            Err(e) => return Err((result, format!("{gvr}: {e}"))),
        };
        if left.is_empty() {
            return Ok(ResourceResult::default());
        }
        result.remaining = left.len();
        for item in &left {
            for f in item.metadata.finalizers.iter().flatten() {
                *result.finalizers.entry(f.clone()).or_default() += 1;
            }
        }
        if result.estimate != 0 {
            return Ok(result);
        }
        if !result.finalizers.is_empty() {
            result.estimate = FINALIZER_ESTIMATE_SECONDS;
            return Ok(result);
        }
        Err((
            result,
            format!("unexpected items still remain in namespace: {ns} for gvr: {gvr}"),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodSpec, PodStatus};

    fn pod(grace: Option<i64>, phase: &str) -> Pod {
        Pod {
            spec: Some(PodSpec {
                termination_grace_period_seconds: grace,
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn pod_estimate_as_upstream() {
        let pods = [
            pod(Some(30), "Running"),
            pod(Some(90), "Succeeded"),
            pod(None, "Pending"),
        ];
        assert_eq!(pod_estimate(&pods, 0), 30);
        assert_eq!(pod_estimate(&pods, 29), 30);
        // The namespace has been deleting longer than any grace period: no more waiting for pods.
        assert_eq!(pod_estimate(&pods, 30), 0);
        assert_eq!(pod_estimate(&[], 0), 0);
    }
}
