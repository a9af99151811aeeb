//! The metrics-server half that runs inside the API server: every `--metric-resolution` (15 s, as
//! metrics-server) it fetches each Ready node's `/metrics/resource` through the API server's kubelet
//! client, and turns two successive scrapes of a node into usage: CPU as the rate of the cumulative
//! counters between them (window = the time between the two samples), memory as the latest working
//! set. Simulated nodes (label `sim.rkube.io/managed`) are skipped: they have no kubelet, and their
//! usage is read from pod annotations when asked (see [`super::synthetic`]).
//!
//! A node whose scrape fails loses its metrics until the next success (metrics-server stores each
//! round's batch in place of the last one); a container whose start time changed, or whose counter
//! went backwards, gets no CPU rate from the pair (it restarted in between).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;
use http_body_util::BodyExt;
use serde_json::Value;

use super::{ContainerUsage, NodeUsage, PodUsage, Usage};
use crate::ApiServer;

/// The most `/metrics/resource` bodies read at once, and the largest accepted (a kubelet with
/// hundreds of pods writes well under 1 MiB).
const CONCURRENT_SCRAPES: usize = 16;
const MAX_BODY: usize = 16 * 1024 * 1024;
/// Series kept from one scrape (bounds what a misbehaving kubelet can make us hold).
const MAX_SERIES: usize = 50_000;

/// One cumulative CPU counter and one working set, at the time the kubelet read them.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Point {
    pub cpu_seconds: Option<f64>,
    pub cpu_at_ms: Option<i64>,
    pub memory_bytes: Option<f64>,
    pub start_seconds: Option<f64>,
}

/// What one scrape of a kubelet said.
#[derive(Clone, Debug, Default)]
pub struct Scrape {
    pub node: Point,
    /// (namespace, pod, container) -> point.
    pub containers: HashMap<(String, String, String), Point>,
    pub at_ms: i64,
}

/// The labels of a series line, unescaped.
fn parse_labels(s: &str) -> Option<HashMap<String, String>> {
    let mut out = HashMap::new();
    let mut chars = s.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        if chars.peek().is_none() {
            return Some(out);
        }
        let name: String = std::iter::from_fn(|| chars.next_if(|c| *c != '=')).collect();
        chars.next()?; // '='
        if chars.next()? != '"' {
            return None;
        }
        let mut value = String::new();
        loop {
            match chars.next()? {
                '\\' => match chars.next()? {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                '"' => break,
                c => value.push(c),
            }
        }
        out.insert(name.trim().to_string(), value);
    }
}

/// Parses the series metrics-server reads from `/metrics/resource` text; other series are ignored.
/// Samples without a timestamp are taken as read at `now_ms`.
pub fn parse(text: &str, now_ms: i64) -> Scrape {
    let mut scrape = Scrape {
        at_ms: now_ms,
        ..Default::default()
    };
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (name, labels, rest) = match line.find('{') {
            Some(open) => {
                let Some(close) = line.rfind('}') else {
                    continue;
                };
                if close < open {
                    continue;
                }
                (&line[..open], &line[open + 1..close], &line[close + 1..])
            }
            None => match line.split_once(char::is_whitespace) {
                Some((n, r)) => (n, "", r),
                None => continue,
            },
        };
        let mut fields = rest.split_whitespace();
        let Some(value) = fields.next().and_then(|v| v.parse::<f64>().ok()) else {
            continue;
        };
        let at_ms = fields.next().and_then(|t| t.parse::<i64>().ok());
        let container_key = || -> Option<(String, String, String)> {
            let l = parse_labels(labels)?;
            Some((
                l.get("namespace")?.clone(),
                l.get("pod")?.clone(),
                l.get("container")?.clone(),
            ))
        };
        let room = scrape.containers.len() < MAX_SERIES;
        match name {
            "node_cpu_usage_seconds_total" => {
                scrape.node.cpu_seconds = Some(value);
                scrape.node.cpu_at_ms = Some(at_ms.unwrap_or(now_ms));
            }
            "node_memory_working_set_bytes" => scrape.node.memory_bytes = Some(value),
            "container_cpu_usage_seconds_total" => {
                if let Some(key) = container_key().filter(|_| room) {
                    let p = scrape.containers.entry(key).or_default();
                    p.cpu_seconds = Some(value);
                    p.cpu_at_ms = Some(at_ms.unwrap_or(now_ms));
                }
            }
            "container_memory_working_set_bytes" => {
                if let Some(key) = container_key().filter(|_| room) {
                    scrape.containers.entry(key).or_default().memory_bytes = Some(value);
                }
            }
            "container_start_time_seconds" => {
                if let Some(key) = container_key().filter(|_| room) {
                    scrape.containers.entry(key).or_default().start_seconds = Some(value);
                }
            }
            _ => {}
        }
    }
    scrape
}

/// Usage between two points of the same series: CPU rate in nanocores over the window between
/// the samples, the latest working set. None without two CPU samples in order.
pub fn usage(prev: &Point, last: &Point) -> Option<Usage> {
    let (p_cpu, p_at) = (prev.cpu_seconds?, prev.cpu_at_ms?);
    let (l_cpu, l_at) = (last.cpu_seconds?, last.cpu_at_ms?);
    if l_at <= p_at || l_cpu < p_cpu || prev.start_seconds != last.start_seconds {
        return None;
    }
    let window_ms = l_at - p_at;
    let nanocores = ((l_cpu - p_cpu) * 1e9 * 1000.0 / window_ms as f64).round() as u64;
    Some(Usage {
        cpu_nanocores: nanocores,
        memory_bytes: last.memory_bytes.unwrap_or(0.0).max(0.0) as u64,
        timestamp_ms: l_at,
        window_ms,
    })
}

/// Node and pod usage from a node's two latest scrapes.
pub fn usage_of(node: &str, prev: &Scrape, last: &Scrape) -> (Option<NodeUsage>, Vec<PodUsage>) {
    let node_usage = usage(&prev.node, &last.node).map(|u| NodeUsage {
        name: node.to_string(),
        usage: u,
    });
    let mut pods: HashMap<(String, String), PodUsage> = HashMap::new();
    for (key, point) in &last.containers {
        let Some(u) = prev.containers.get(key).and_then(|p| usage(p, point)) else {
            continue;
        };
        let (ns, pod, container) = key.clone();
        let entry = pods
            .entry((ns.clone(), pod.clone()))
            .or_insert_with(|| PodUsage {
                namespace: ns,
                name: pod,
                timestamp_ms: u.timestamp_ms,
                window_ms: u.window_ms,
                containers: Vec::new(),
            });
        entry.containers.push(ContainerUsage {
            name: container,
            cpu_nanocores: u.cpu_nanocores,
            memory_bytes: u.memory_bytes,
        });
    }
    let mut pods: Vec<PodUsage> = pods.into_values().collect();
    for p in &mut pods {
        p.containers.sort_by(|a, b| a.name.cmp(&b.name));
    }
    (node_usage, pods)
}

fn is_ready(node: &Value) -> bool {
    node.pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// GET `/metrics/resource` of one node's kubelet.
async fn scrape(api: &ApiServer, node: &str, timeout: Duration) -> Result<Scrape, String> {
    let attempt = async {
        let info = api
            .kubelet
            .connection_info(api, node)
            .await
            .map_err(|e| e.message)?;
        let req = http::Request::get("/metrics/resource")
            .body(http_body_util::Empty::<Bytes>::new())
            .map_err(|e| e.to_string())?;
        let resp = api
            .kubelet
            .backend(&info, false)
            .send(req)
            .await
            .map_err(|e| e.to_string())?;
        if !resp.status().is_success() {
            return Err(format!("request failed, status: {}", resp.status()));
        }
        let mut body = resp.into_body();
        let mut buf = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| e.to_string())?;
            if let Ok(data) = frame.into_data() {
                if buf.len() + data.len() > MAX_BODY {
                    return Err(format!("response over {MAX_BODY} bytes"));
                }
                buf.extend_from_slice(&data);
            }
        }
        let now = chrono::Utc::now().timestamp_millis();
        Ok(parse(&String::from_utf8_lossy(&buf), now))
    };
    tokio::time::timeout(timeout, attempt)
        .await
        .unwrap_or_else(|_| Err("timed out".into()))
}

/// One round: scrape every Ready real node, store the usage computed against the previous round.
pub async fn round(api: &Arc<ApiServer>, prev: &mut HashMap<String, Scrape>, timeout: Duration) {
    let nodes: Vec<String> = crate::internal::cached_objects(api, "nodes")
        .into_iter()
        .filter(|n| !super::is_simulated(n) && is_ready(n))
        .map(|n| crate::objects::name(&n).to_string())
        .collect();
    let results: Vec<(String, Result<Scrape, String>)> = futures::stream::iter(nodes)
        .map(|node| async move {
            let r = scrape(api, &node, timeout).await;
            (node, r)
        })
        .buffer_unordered(CONCURRENT_SCRAPES)
        .collect()
        .await;
    let mut batch = super::Batch::default();
    let mut next = HashMap::new();
    for (node, result) in results {
        match result {
            Ok(last) => {
                if let Some(before) = prev.get(&node) {
                    let (n, pods) = usage_of(&node, before, &last);
                    batch.nodes.extend(n.map(|n| (node.clone(), n)));
                    batch.pods.extend(
                        pods.into_iter()
                            .map(|p| ((p.namespace.clone(), p.name.clone()), p)),
                    );
                }
                next.insert(node, last);
            }
            Err(e) => {
                tracing::debug!(%node, error = %e, "resource metrics: cannot scrape the kubelet");
            }
        }
    }
    // Nodes gone or failing drop out: the map never outgrows the cluster's nodes.
    *prev = next;
    api.resource_metrics.store(batch);
}

/// Scrapes every `resolution` until the server stops.
pub async fn run(api: Arc<ApiServer>) {
    // A zero interval would spin (and tokio refuses it).
    let resolution = api.resource_metrics.resolution.max(Duration::from_secs(1));
    // metrics-server's scrape timeout is a fraction of the resolution; at least a few seconds.
    let timeout = (resolution * 9 / 10).max(Duration::from_secs(3));
    let mut prev = HashMap::new();
    let mut tick = tokio::time::interval(resolution);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        round(&api, &mut prev, timeout).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const T1: &str = r#"# HELP container_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the container in core-seconds
# TYPE container_cpu_usage_seconds_total counter
container_cpu_usage_seconds_total{container="app",namespace="default",pod="web"} 10 1700000000000
container_cpu_usage_seconds_total{container="side",namespace="default",pod="web"} 1.5 1700000000000
container_memory_working_set_bytes{container="app",namespace="default",pod="web"} 1.048576e+06 1700000000000
container_start_time_seconds{container="app",namespace="default",pod="web"} 1.6999e+09
node_cpu_usage_seconds_total 1000 1700000000000
node_memory_working_set_bytes 4096 1700000000000
pod_cpu_usage_seconds_total{namespace="default",pod="web"} 11.5 1700000000000
resource_scrape_error 0
"#;

    #[test]
    fn parses_resource_metrics_text() {
        let s = parse(T1, 5);
        assert_eq!(s.node.cpu_seconds, Some(1000.0));
        assert_eq!(s.node.cpu_at_ms, Some(1_700_000_000_000));
        assert_eq!(s.node.memory_bytes, Some(4096.0));
        let app = &s.containers[&("default".into(), "web".into(), "app".into())];
        assert_eq!(app.memory_bytes, Some(1_048_576.0));
        assert_eq!(app.start_seconds, Some(1.6999e9));
        assert_eq!(s.containers.len(), 2);
        // Escaped label values, no timestamp.
        let s = parse(
            "container_cpu_usage_seconds_total{container=\"a\",namespace=\"n\",pod=\"p\\\"q\"} 2\n",
            77,
        );
        let p = &s.containers[&("n".into(), "p\"q".into(), "a".into())];
        assert_eq!((p.cpu_seconds, p.cpu_at_ms), (Some(2.0), Some(77)));
        // Garbage is skipped.
        assert!(parse("node_cpu_usage_seconds_total x\n{}\nfoo{a=b} 1", 0)
            .node
            .cpu_seconds
            .is_none());
    }

    #[test]
    fn usage_is_the_rate_between_two_scrapes() {
        let first = parse(T1, 0);
        let second = parse(
            &T1.replace("1700000000000", "1700000015000")
                .replace("} 10 ", "} 13 ")
                .replace(
                    "node_cpu_usage_seconds_total 1000",
                    "node_cpu_usage_seconds_total 1015",
                ),
            0,
        );
        let (node, pods) = usage_of("n1", &first, &second);
        let node = node.unwrap();
        // 15 core-seconds over 15 s: one core.
        assert_eq!(node.usage.cpu_nanocores, 1_000_000_000);
        assert_eq!(node.usage.window_ms, 15_000);
        assert_eq!(node.usage.memory_bytes, 4096);
        assert_eq!(pods.len(), 1);
        let web = &pods[0];
        assert_eq!(web.containers[0].name, "app");
        // 3 core-seconds over 15 s.
        assert_eq!(web.containers[0].cpu_nanocores, 200_000_000);
        assert_eq!(web.containers[0].memory_bytes, 1_048_576);
        assert_eq!(web.containers[1].cpu_nanocores, 0);
        // A restart in between (new start time) or a counter going back: no rate.
        let restarted = parse(
            &T1.replace("1.6999e+09", "1.7e+09")
                .replace("1700000000000", "1700000015000"),
            0,
        );
        let (_, pods) = usage_of("n1", &first, &restarted);
        assert!(pods[0].containers.iter().all(|c| c.name != "app"));
        assert!(usage_of("n1", &second, &first).0.is_none());
    }
}
