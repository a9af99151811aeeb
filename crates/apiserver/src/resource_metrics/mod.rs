//! `metrics.k8s.io/v1beta1` NodeMetrics and PodMetrics, served by the API server itself (what
//! metrics-server serves as an aggregated API): `get` and `list` of nodes and of pods (one
//! namespace or all), label and field selectors, and the Table metrics-server prints. Never
//! stored: real nodes' usage comes from the [`scraper`]; simulated nodes' (label
//! `sim.rkube.io/managed`) from their pods' annotations `sim.rkube.io/cpu-usage` and
//! `sim.rkube.io/memory-usage` at the moment of the request (see [`synthetic`]).
//!
//! Why simulated nodes are read directly rather than scraped: they have no kubelet to serve
//! `/metrics/resource` (`rkube sim` runs thousands of them in one process), the annotations are
//! in the API server's own watch cache, and an autoscaler test sees a change of load at once
//! instead of a resolution later.
//!
//! As metrics-server: only Running pods have PodMetrics; a pod or node without metrics is 404 on
//! `get` and left out of lists; lists are sorted (namespace, name); NodeMetrics carry the node's
//! labels, PodMetrics the pod's.

pub mod scraper;
pub mod synthetic;

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::Duration;

use apimachinery::quantity::{Format, Quantity};
use apimachinery::status::{ApiError, Qualified};
use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{json, Value};

use crate::filter::Attrs;
use crate::response::{Body, IncludeObject, Representation};
use crate::rest::Ctx;

pub const GROUP: &str = "metrics.k8s.io";
/// metrics-server's default `--metric-resolution`.
pub const DEFAULT_RESOLUTION: Duration = Duration::from_secs(15);

/// CPU and memory of one series over a window ending at `timestamp_ms`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub cpu_nanocores: u64,
    pub memory_bytes: u64,
    pub timestamp_ms: i64,
    pub window_ms: i64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeUsage {
    pub name: String,
    pub usage: Usage,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ContainerUsage {
    pub name: String,
    pub cpu_nanocores: u64,
    pub memory_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodUsage {
    pub namespace: String,
    pub name: String,
    pub timestamp_ms: i64,
    pub window_ms: i64,
    pub containers: Vec<ContainerUsage>,
}

/// One scrape round's results.
#[derive(Default)]
pub struct Batch {
    pub nodes: HashMap<String, NodeUsage>,
    pub pods: HashMap<(String, String), PodUsage>,
}

/// The latest round's usage, and the resolution it is scraped at.
pub struct Store {
    latest: RwLock<Batch>,
    pub resolution: Duration,
}

impl Store {
    pub fn new(resolution: Duration) -> Store {
        Store {
            latest: Default::default(),
            resolution,
        }
    }

    /// Replaces the stored usage (bounded by what the nodes run).
    pub fn store(&self, batch: Batch) {
        *self.latest.write().unwrap_or_else(|e| e.into_inner()) = batch;
    }

    fn node(&self, name: &str) -> Option<NodeUsage> {
        let latest = self.latest.read().unwrap_or_else(|e| e.into_inner());
        latest.nodes.get(name).cloned()
    }

    fn pod(&self, namespace: &str, name: &str) -> Option<PodUsage> {
        let latest = self.latest.read().unwrap_or_else(|e| e.into_inner());
        latest
            .pods
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
}

/// A node run by `rkube sim`.
pub fn is_simulated(node: &Value) -> bool {
    node.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .is_some_and(|l| l.contains_key(synthetic::MANAGED_LABEL))
}

/// CPU as metrics-server writes it (`NewScaledQuantity(nanocores, -9)`, canonical form).
pub fn cpu_quantity(nanocores: u64) -> String {
    Quantity::parse(&format!("{nanocores}n"))
        .map(|q| q.to_string())
        .unwrap_or_else(|_| "0".into())
}

/// Memory as metrics-server writes it (`NewQuantity(bytes, BinarySI)`).
pub fn memory_quantity(bytes: u64) -> String {
    Quantity::new(i64::try_from(bytes).unwrap_or(i64::MAX), Format::BinarySi).to_string()
}

/// Go's `time.Duration.String()` for the windows written here (whole milliseconds).
pub fn go_duration(ms: i64) -> String {
    if ms <= 0 {
        return "0s".into();
    }
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let (s, frac) = (rest / 1000, rest % 1000);
    let mut out = String::new();
    if h > 0 {
        out.push_str(&format!("{h}h"));
    }
    if h > 0 || m > 0 {
        out.push_str(&format!("{m}m"));
    }
    out.push_str(&s.to_string());
    if frac > 0 {
        out.push_str(format!(".{frac:03}").trim_end_matches('0'));
    }
    out.push('s');
    out
}

fn rfc3339_ms(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

fn now_rfc3339() -> String {
    rfc3339_ms(chrono::Utc::now().timestamp_millis())
}

fn node_metrics(node: &Value, usage: &Usage) -> Value {
    let mut metadata =
        json!({"name": crate::objects::name(node), "creationTimestamp": now_rfc3339()});
    if let Some(labels) = node.pointer("/metadata/labels") {
        metadata["labels"] = labels.clone();
    }
    json!({
        "kind": "NodeMetrics",
        "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": metadata,
        "timestamp": rfc3339_ms(usage.timestamp_ms),
        "window": go_duration(usage.window_ms),
        "usage": {
            "cpu": cpu_quantity(usage.cpu_nanocores),
            "memory": memory_quantity(usage.memory_bytes),
        },
    })
}

fn pod_metrics(pod: &Value, usage: &PodUsage) -> Value {
    let mut metadata = json!({
        "name": crate::objects::name(pod),
        "namespace": crate::objects::namespace(pod),
        "creationTimestamp": now_rfc3339(),
    });
    if let Some(labels) = pod.pointer("/metadata/labels") {
        metadata["labels"] = labels.clone();
    }
    let containers: Vec<Value> = usage
        .containers
        .iter()
        .map(|c| {
            json!({
                "name": c.name,
                "usage": {
                    "cpu": cpu_quantity(c.cpu_nanocores),
                    "memory": memory_quantity(c.memory_bytes),
                },
            })
        })
        .collect();
    json!({
        "kind": "PodMetrics",
        "apiVersion": "metrics.k8s.io/v1beta1",
        "metadata": metadata,
        "timestamp": rfc3339_ms(usage.timestamp_ms),
        "window": go_duration(usage.window_ms),
        "containers": containers,
    })
}

/// Who is simulated among the cached nodes, by name.
fn simulated_nodes(ctx: &Ctx<'_>) -> HashMap<String, Value> {
    crate::internal::cached_objects(ctx.api, "nodes")
        .into_iter()
        .filter(is_simulated)
        .map(|n| (crate::objects::name(&n).to_string(), n))
        .collect()
}

fn usage_of_node(ctx: &Ctx<'_>, node: &Value, pods: &[Value]) -> Option<Usage> {
    let name = crate::objects::name(node);
    if is_simulated(node) {
        let window = ctx.api.resource_metrics.resolution.as_millis() as i64;
        return Some(synthetic::node_usage(name, pods, window));
    }
    ctx.api.resource_metrics.node(name).map(|n| n.usage)
}

fn usage_of_pod(ctx: &Ctx<'_>, pod: &Value, sim: &HashMap<String, Value>) -> Option<PodUsage> {
    if pod.pointer("/status/phase").and_then(Value::as_str) != Some("Running") {
        return None;
    }
    let node = pod.pointer("/spec/nodeName").and_then(Value::as_str)?;
    if sim.contains_key(node) {
        let window = ctx.api.resource_metrics.resolution.as_millis() as i64;
        return Some(synthetic::pod_usage(pod, window));
    }
    ctx.api
        .resource_metrics
        .pod(crate::objects::namespace(pod), crate::objects::name(pod))
}

fn not_found(resource: &str, name: &str) -> ApiError {
    ApiError::not_found(&Qualified::new(GROUP, resource), name)
}

/// The Table metrics-server prints: Name, one column per resource (sorted), Window.
fn table(items: &[Value], include: IncludeObject, pods: bool) -> Value {
    let mut columns = vec![json!({"name": "Name", "type": "string", "format": "name",
        "description": "Name of the resource", "priority": 0})];
    if !items.is_empty() {
        for r in ["cpu", "memory"] {
            columns.push(json!({"name": r, "type": "string", "format": "quantity",
                "description": "", "priority": 0}));
        }
        columns.push(
            json!({"name": "Window", "type": "string", "format": "duration",
            "description": "", "priority": 0}),
        );
    }
    let rows: Vec<Value> = items
        .iter()
        .map(|obj| {
            let (cpu, memory) = if pods {
                let containers = obj["containers"].as_array().cloned().unwrap_or_default();
                let sum = |r: &str| {
                    containers
                        .iter()
                        .filter_map(|c| c["usage"][r].as_str())
                        .filter_map(|q| Quantity::parse(q).ok())
                        .fold(Quantity::zero(), |a, b| a.add(&b))
                        .to_string()
                };
                (sum("cpu"), sum("memory"))
            } else {
                (
                    obj["usage"]["cpu"].as_str().unwrap_or("0").to_string(),
                    obj["usage"]["memory"].as_str().unwrap_or("0").to_string(),
                )
            };
            let mut row = json!({"cells": [crate::objects::name(obj), cpu, memory, obj["window"]]});
            match include {
                IncludeObject::None => {}
                IncludeObject::Metadata => {
                    row["object"] = crate::rest::table::partial_metadata(obj)
                }
                IncludeObject::Object => row["object"] = obj.clone(),
            }
            row
        })
        .collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": {"resourceVersion": ""},
        "columnDefinitions": columns,
        "rows": rows,
    })
}

async fn respond(ctx: &Ctx<'_>, obj: Value, pods: bool) -> Result<Response<Body>, ApiError> {
    match ctx.representation()? {
        Representation::Table { include_object } => {
            let mut t = table(std::slice::from_ref(&obj), include_object, pods);
            crate::rest::table::set_meta_version(
                &mut t,
                crate::rest::table::meta_version(ctx.headers),
            );
            Ok(crate::response::json_response(StatusCode::OK, &t))
        }
        _ => {
            let json = serde_json::to_vec(&obj).map_err(ApiError::internal)?;
            ctx.object_response(StatusCode::OK, Bytes::from(json)).await
        }
    }
}

fn respond_list(ctx: &Ctx<'_>, items: Vec<Value>, pods: bool) -> Result<Response<Body>, ApiError> {
    match ctx.representation()? {
        Representation::Table { include_object } => {
            let mut t = table(&items, include_object, pods);
            crate::rest::table::set_meta_version(
                &mut t,
                crate::rest::table::meta_version(ctx.headers),
            );
            Ok(crate::response::json_response(StatusCode::OK, &t))
        }
        Representation::Metadata => {
            let items: Vec<Value> = items
                .iter()
                .map(crate::rest::table::partial_metadata)
                .collect();
            let mut list = json!({"kind": "PartialObjectMetadataList", "apiVersion": "meta.k8s.io/v1",
                "metadata": {}, "items": items});
            crate::rest::table::set_meta_version(
                &mut list,
                crate::rest::table::meta_version(ctx.headers),
            );
            Ok(crate::response::json_response(StatusCode::OK, &list))
        }
        Representation::Object => {
            let kind = if pods {
                "PodMetricsList"
            } else {
                "NodeMetricsList"
            };
            let list = json!({
                "kind": kind,
                "apiVersion": "metrics.k8s.io/v1beta1",
                "metadata": {},
                "items": items,
            });
            Ok(crate::response::json_response(StatusCode::OK, &list))
        }
    }
}

/// Serves a `get` or `list` of `metrics.k8s.io` nodes or pods.
pub async fn serve(ctx: &Ctx<'_>) -> Result<Response<Body>, ApiError> {
    let pods_resource = ctx.resource.plural == "pods";
    let is_get = ctx.req.verb == crate::request::Verb::Get;
    let all_pods = crate::internal::cached_objects(ctx.api, "pods");
    if !pods_resource {
        let node_pods = |name: &str| -> Vec<Value> {
            all_pods
                .iter()
                .filter(|p| p.pointer("/spec/nodeName").and_then(Value::as_str) == Some(name))
                .cloned()
                .collect()
        };
        if is_get {
            let name = ctx.name();
            let key = format!("/nodes/{name}");
            let node = ctx
                .api
                .caches
                .get("nodes")
                .and_then(|c| c.get(&key))
                .and_then(|o| serde_json::from_slice::<Value>(&o.json).ok())
                .ok_or_else(|| ApiError::not_found(&Qualified::new("", "nodes"), name))?;
            let usage = usage_of_node(ctx, &node, &node_pods(name))
                .ok_or_else(|| not_found("nodes", name))?;
            return respond(ctx, node_metrics(&node, &usage), false).await;
        }
        let filter = crate::rest::list::filter_of(ctx)?;
        let mut nodes: Vec<Value> = crate::internal::cached_objects(ctx.api, "nodes")
            .into_iter()
            .filter(|n| filter.matches(&Attrs::of(GROUP, "nodes", n)))
            .collect();
        nodes.sort_by(|a, b| crate::objects::name(a).cmp(crate::objects::name(b)));
        let items = nodes
            .iter()
            .filter_map(|n| {
                let u = usage_of_node(ctx, n, &node_pods(crate::objects::name(n)))?;
                Some(node_metrics(n, &u))
            })
            .collect();
        return respond_list(ctx, items, false);
    }
    let sim = simulated_nodes(ctx);
    if is_get {
        let (namespace, name) = (ctx.namespace(), ctx.name());
        let pod = all_pods
            .iter()
            .find(|p| crate::objects::namespace(p) == namespace && crate::objects::name(p) == name)
            .ok_or_else(|| ApiError::not_found(&Qualified::new("", "pods"), name))?;
        let usage = usage_of_pod(ctx, pod, &sim)
            .ok_or_else(|| not_found("pods", &format!("{namespace}/{name}")))?;
        return respond(ctx, pod_metrics(pod, &usage), true).await;
    }
    let filter = crate::rest::list::filter_of(ctx)?;
    let mut pods: Vec<&Value> = all_pods
        .iter()
        .filter(|p| filter.matches(&Attrs::of(GROUP, "pods", p)))
        .collect();
    pods.sort_by(|a, b| {
        (crate::objects::namespace(a), crate::objects::name(a))
            .cmp(&(crate::objects::namespace(b), crate::objects::name(b)))
    });
    let items = pods
        .into_iter()
        .filter_map(|p| Some(pod_metrics(p, &usage_of_pod(ctx, p, &sim)?)))
        .collect();
    respond_list(ctx, items, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_and_windows_as_metrics_server_writes_them() {
        assert_eq!(cpu_quantity(250_000_000), "250m");
        assert_eq!(cpu_quantity(329_087_452), "329087452n");
        assert_eq!(cpu_quantity(2_000_000_000), "2");
        assert_eq!(cpu_quantity(0), "0");
        assert_eq!(memory_quantity(64 * 1024 * 1024), "64Mi");
        assert_eq!(memory_quantity(2_814_136_320), "2748180Ki");
        // Under 1024 bytes Go falls back to decimal SI.
        assert_eq!(memory_quantity(1000), "1k");
        assert_eq!(go_duration(15_000), "15s");
        assert_eq!(go_duration(20_064), "20.064s");
        assert_eq!(go_duration(20_500), "20.5s");
        assert_eq!(go_duration(60_000), "1m0s");
        assert_eq!(go_duration(3_661_000), "1h1m1s");
        assert_eq!(go_duration(0), "0s");
    }

    #[test]
    fn the_table_sums_containers() {
        let obj = json!({
            "metadata": {"name": "web"},
            "window": "15s",
            "containers": [
                {"name": "a", "usage": {"cpu": "100m", "memory": "32Mi"}},
                {"name": "b", "usage": {"cpu": "150m", "memory": "32Mi"}},
            ],
        });
        let t = table(&[obj], IncludeObject::Metadata, true);
        assert_eq!(t["rows"][0]["cells"], json!(["web", "250m", "64Mi", "15s"]));
        assert_eq!(t["columnDefinitions"][1]["name"], "cpu");
        assert_eq!(t["columnDefinitions"][3]["name"], "Window");
        assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        assert_eq!(
            table(&[], IncludeObject::None, true)["columnDefinitions"]
                .as_array()
                .unwrap()
                .len(),
            1
        );
    }
}
