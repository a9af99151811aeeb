//! The resource metrics client (upstream `metrics/client.go`, `resourceMetricsClient`): lists
//! `metrics.k8s.io/v1beta1` PodMetrics in the namespace with the target's selector and sums each
//! pod's containers (or takes one container).

use std::time::Duration;

use jiff::Timestamp;
use kube::api::{ApiResource, DynamicObject, ListParams};
use kube::Api;
use serde_json::Value;

use super::replicas::{milli, PodMetric, PodMetricsInfo};

/// Most PodMetrics one list returns; a namespace with more is read in pages.
const PAGE: u32 = 500;
/// Most pods' metrics held for one HPA sync (a selector matching more is refused).
const MAX_PODS: usize = 100_000;

pub(crate) fn pod_metrics_resource() -> ApiResource {
    ApiResource {
        group: "metrics.k8s.io".into(),
        version: "v1beta1".into(),
        api_version: "metrics.k8s.io/v1beta1".into(),
        kind: "PodMetrics".into(),
        plural: "pods".into(),
    }
}

/// Upstream `GetResourceMetric`: usage by pod and the first item's timestamp.
pub(crate) async fn resource_metric(
    client: &kube::Client,
    resource: &str,
    namespace: &str,
    selector: &str,
    container: &str,
) -> Result<(PodMetricsInfo, Timestamp), String> {
    let api: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), namespace, &pod_metrics_resource());
    let mut items = Vec::new();
    let mut params = ListParams::default().labels(selector).limit(PAGE);
    loop {
        let list = api.list(&params).await.map_err(|e| {
            format!(
                "unable to fetch metrics from resource metrics API: {}",
                crate::api_error_message(&e)
            )
        })?;
        items.extend(list.items.into_iter().map(|o| {
            let mut data = o.data;
            data["metadata"] = serde_json::json!({
                "name": o.metadata.name, "namespace": o.metadata.namespace,
            });
            data
        }));
        if items.len() > MAX_PODS {
            return Err(format!(
                "more than {MAX_PODS} pods' metrics for one autoscaler"
            ));
        }
        match list.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => params = params.continue_token(&c),
            None => break,
        }
    }
    parse(items, resource, container)
}

fn timestamp(item: &Value) -> Timestamp {
    item["timestamp"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

fn window(item: &Value) -> Duration {
    item["window"]
        .as_str()
        .and_then(|w| apimachinery::go_duration::parse(w).ok())
        .map(|ns| Duration::from_nanos(ns.max(0) as u64))
        .unwrap_or_default()
}

/// The PodMetrics items (`metadata`, `timestamp`, `window`, `containers`) as usage by pod.
pub(crate) fn parse(
    items: Vec<Value>,
    resource: &str,
    container: &str,
) -> Result<(PodMetricsInfo, Timestamp), String> {
    let Some(first) = items.first() else {
        return Err("no metrics returned from resource metrics API".into());
    };
    let ts = timestamp(first);
    let mut out = PodMetricsInfo::new();
    for item in &items {
        let name = item["metadata"]["name"].as_str().unwrap_or("").to_string();
        let containers = item["containers"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or(&[]);
        let usage = |c: &Value| c["usage"][resource].as_str().map(milli);
        let sample = |value| PodMetric {
            timestamp: timestamp(item),
            window: window(item),
            value,
        };
        if !container.is_empty() {
            let Some(c) = containers.iter().find(|c| c["name"] == container) else {
                return Err(format!(
                    "failed to get container metrics: container {container} not present in metrics for pod {}/{name}",
                    item["metadata"]["namespace"].as_str().unwrap_or("")
                ));
            };
            if let Some(v) = usage(c) {
                out.insert(name, sample(v));
            }
            continue;
        }
        // A pod missing the resource in any container (or without containers) has no sample.
        let values: Option<Vec<i64>> = containers.iter().map(usage).collect();
        if let Some(v) = values.filter(|v| !v.is_empty()) {
            out.insert(
                name,
                sample(v.iter().fold(0i64, |a, b| a.saturating_add(*b))),
            );
        }
    }
    Ok((out, ts))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pm(name: &str, containers: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "ns"}, "timestamp": "2026-11-29T12:00:00Z",
            "window": "30s", "containers": containers})
    }

    #[test]
    fn pods_sum_their_containers() {
        let items = vec![
            pm(
                "a",
                json!([{"name": "x", "usage": {"cpu": "100m", "memory": "1Mi"}},
                           {"name": "y", "usage": {"cpu": "50m", "memory": "1Mi"}}]),
            ),
            pm("b", json!([{"name": "x", "usage": {"memory": "1Mi"}}])),
            pm("c", json!([])),
        ];
        let (m, ts) = parse(items, "cpu", "").unwrap();
        assert_eq!(ts.to_string(), "2026-11-29T12:00:00Z");
        assert_eq!(m.len(), 1);
        assert_eq!(m["a"].value, 150);
        assert_eq!(m["a"].window, Duration::from_secs(30));
    }

    #[test]
    fn one_container() {
        let items = vec![pm(
            "a",
            json!([{"name": "x", "usage": {"cpu": "100m"}},
                                       {"name": "y", "usage": {"cpu": "2"}}]),
        )];
        let (m, _) = parse(items.clone(), "cpu", "y").unwrap();
        assert_eq!(m["a"].value, 2000);
        let err = parse(items, "cpu", "z").unwrap_err();
        assert!(
            err.contains("container z not present in metrics for pod ns/a"),
            "{err}"
        );
        assert_eq!(
            parse(vec![], "cpu", "").unwrap_err(),
            "no metrics returned from resource metrics API"
        );
    }
}
