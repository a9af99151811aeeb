//! Liveness, readiness and startup probes (upstream `pkg/kubelet/prober`: `prober_manager.go`,
//! `worker.go`, `prober.go`, and `pkg/probe/{exec,http,tcp,grpc}`): one task per container and probe
//! kind, started when the container runs; results change after `successThreshold` successes or
//! `failureThreshold` failures in a row, and each change wakes the pod's worker (which kills a container
//! whose liveness or startup probe failed, and reports readiness in the pod's status).
//!
//! Probes dial the pod's IP through [`crate::netns::PodNetwork`]. Difference: `httpGet` with `scheme:
//! HTTPS` is not supported (the probe fails with a message saying so).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use client::events::{EventType, Recorder};
use k8s_openapi::api::core::v1::{Container, ObjectReference, Pod, Probe};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::cri::Runtime;
use crate::netns::PodNetwork;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ProbeKind {
    Liveness,
    Readiness,
    Startup,
}

impl ProbeKind {
    fn name(self) -> &'static str {
        match self {
            ProbeKind::Liveness => "Liveness",
            ProbeKind::Readiness => "Readiness",
            ProbeKind::Startup => "Startup",
        }
    }
}

/// The outcome of one probe run.
#[derive(Debug, PartialEq)]
pub enum Outcome {
    Success,
    Failure(String),
}

type Key = (String, ProbeKind);

pub struct ProbeManager {
    runtime: Runtime,
    network: PodNetwork,
    recorder: Option<Recorder>,
    results: Mutex<HashMap<Key, bool>>,
    /// Containers whose liveness or startup probe failed: the pod worker restarts them.
    failed: Mutex<HashMap<String, ProbeKind>>,
    workers: Mutex<HashMap<Key, tokio::task::JoinHandle<()>>>,
    /// Wakes the worker of the pod with this UID.
    wake: Arc<dyn Fn(&str) + Send + Sync>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ProbeManager {
    pub fn new(
        runtime: Runtime,
        network: PodNetwork,
        recorder: Option<Recorder>,
        wake: Arc<dyn Fn(&str) + Send + Sync>,
    ) -> Arc<ProbeManager> {
        Arc::new(ProbeManager {
            runtime,
            network,
            recorder,
            results: Mutex::default(),
            failed: Mutex::default(),
            workers: Mutex::default(),
            wake,
        })
    }

    /// Readiness of a running container: None without a readiness probe.
    pub fn ready(&self, container_id: &str) -> Option<bool> {
        lock(&self.results)
            .get(&(container_id.to_string(), ProbeKind::Readiness))
            .copied()
    }

    /// Whether the startup probe passed: None without a startup probe.
    pub fn started(&self, container_id: &str) -> Option<bool> {
        lock(&self.results)
            .get(&(container_id.to_string(), ProbeKind::Startup))
            .copied()
    }

    /// The probe that says this container must be restarted, if any.
    pub fn must_restart(&self, container_id: &str) -> Option<ProbeKind> {
        lock(&self.failed).get(container_id).copied()
    }

    /// Starts the probe workers of a running container (once per container ID).
    /// `ready_before`: the readiness reported before a kubelet restart, kept until the first probe.
    pub fn ensure(
        self: &Arc<Self>,
        pod: &Arc<Pod>,
        container: &Container,
        container_id: &str,
        started_at_ns: i64,
        ready_before: bool,
    ) {
        let probes = [
            (ProbeKind::Startup, container.startup_probe.clone()),
            (ProbeKind::Liveness, container.liveness_probe.clone()),
            (ProbeKind::Readiness, container.readiness_probe.clone()),
        ];
        let has_startup = container.startup_probe.is_some();
        for (kind, probe) in probes {
            let Some(probe) = probe else { continue };
            let key = (container_id.to_string(), kind);
            let mut workers = lock(&self.workers);
            // Results outlive finished workers (a passed startup probe): one set of workers per container.
            if workers.contains_key(&key) || lock(&self.results).contains_key(&key) {
                continue;
            }
            let initial = match kind {
                ProbeKind::Liveness => true,
                ProbeKind::Readiness => ready_before,
                ProbeKind::Startup => false,
            };
            lock(&self.results).entry(key.clone()).or_insert(initial);
            let this = self.clone();
            let (pod, container) = (pod.clone(), container.clone());
            let id = container_id.to_string();
            workers.insert(
                key,
                tokio::spawn(async move {
                    this.work(pod, container, id, kind, probe, started_at_ns, has_startup)
                        .await
                }),
            );
        }
    }

    /// Stops the workers and forgets the results of a container that is gone.
    pub fn forget(&self, container_id: &str) {
        let mut workers = lock(&self.workers);
        let mut results = lock(&self.results);
        for kind in [
            ProbeKind::Liveness,
            ProbeKind::Readiness,
            ProbeKind::Startup,
        ] {
            let key = (container_id.to_string(), kind);
            if let Some(h) = workers.remove(&key) {
                h.abort();
            }
            results.remove(&key);
        }
        lock(&self.failed).remove(container_id);
    }

    #[allow(clippy::too_many_arguments)]
    async fn work(
        self: Arc<Self>,
        pod: Arc<Pod>,
        container: Container,
        id: String,
        kind: ProbeKind,
        probe: Probe,
        started_at_ns: i64,
        has_startup: bool,
    ) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let key = (id.clone(), kind);
        let period = Duration::from_secs(probe.period_seconds.unwrap_or(10).max(1) as u64);
        let timeout = Duration::from_secs(probe.timeout_seconds.unwrap_or(1).max(1) as u64);
        let success_threshold = probe.success_threshold.unwrap_or(1).max(1);
        let failure_threshold = probe.failure_threshold.unwrap_or(3).max(1);
        let initial_delay =
            Duration::from_secs(probe.initial_delay_seconds.unwrap_or(0).max(0) as u64);
        // The initial delay counts from the container's start.
        let started = std::time::UNIX_EPOCH + Duration::from_nanos(started_at_ns.max(0) as u64);
        let elapsed = std::time::SystemTime::now()
            .duration_since(started)
            .unwrap_or_default();
        if let Some(wait) = initial_delay.checked_sub(elapsed) {
            tokio::time::sleep(wait).await;
        }
        let (mut successes, mut failures) = (0, 0);
        loop {
            if has_startup && kind != ProbeKind::Startup && self.started(&id) != Some(true) {
                tokio::time::sleep(Duration::from_millis(500)).await;
                continue;
            }
            let pod_ip = pod_ip_now(&self.runtime, &uid).await;
            let outcome = run_probe(
                &self.runtime,
                &self.network,
                &probe,
                &container,
                &id,
                pod_ip.as_deref(),
                timeout,
            )
            .await;
            let current = lock(&self.results).get(&key).copied();
            let mut new = current;
            match &outcome {
                Outcome::Success => {
                    failures = 0;
                    successes += 1;
                    if successes >= success_threshold {
                        new = Some(true);
                    }
                }
                Outcome::Failure(msg) => {
                    successes = 0;
                    failures += 1;
                    if let Some(rec) = &self.recorder {
                        rec.event(
                            &container_ref(&pod, &container.name),
                            EventType::Warning,
                            "Unhealthy",
                            &format!("{} probe failed: {msg}", kind.name()),
                        );
                    }
                    if failures >= failure_threshold {
                        new = Some(false);
                    }
                }
            }
            let failed = kind != ProbeKind::Readiness && failures >= failure_threshold;
            if failed {
                lock(&self.failed).insert(id.clone(), kind);
            }
            if new != current || failed {
                if let Some(v) = new {
                    lock(&self.results).insert(key.clone(), v);
                }
                (self.wake)(&uid);
            }
            // A failed liveness/startup probe ends with the container; a passed startup probe is done.
            let done = failed || (kind == ProbeKind::Startup && new == Some(true));
            if done {
                lock(&self.workers).remove(&key);
                return;
            }
            tokio::time::sleep(period).await;
        }
    }
}

async fn pod_ip_now(runtime: &Runtime, uid: &str) -> Option<String> {
    crate::kuberuntime::pod_record(runtime, uid)
        .await
        .ok()
        .and_then(|r| r.pod_ips.first().cloned())
}

pub fn container_ref(pod: &Pod, container: &str) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        name: pod.metadata.name.clone(),
        namespace: pod.metadata.namespace.clone(),
        uid: pod.metadata.uid.clone(),
        resource_version: pod.metadata.resource_version.clone(),
        field_path: Some(format!(
            "spec.{}{{{container}}}",
            container_list(pod, container)
        )),
    }
}

/// Which list of the pod's spec holds `container` (upstream `fieldPath`).
fn container_list(pod: &Pod, container: &str) -> &'static str {
    let Some(spec) = pod.spec.as_ref() else {
        return "containers";
    };
    if spec
        .init_containers
        .iter()
        .flatten()
        .any(|c| c.name == container)
    {
        "initContainers"
    } else if spec
        .ephemeral_containers
        .iter()
        .flatten()
        .any(|c| c.name == container)
    {
        "ephemeralContainers"
    } else {
        "containers"
    }
}

/// A named or numbered port of the container.
pub fn resolve_port(port: &IntOrString, container: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(p) => u16::try_from(*p).map_err(|_| format!("invalid port {p}")),
        IntOrString::String(name) => {
            if let Ok(n) = name.parse::<u16>() {
                return Ok(n);
            }
            container
                .ports
                .iter()
                .flatten()
                .find(|p| p.name.as_deref() == Some(name))
                .and_then(|p| u16::try_from(p.container_port).ok())
                .ok_or_else(|| {
                    format!(
                        "couldn't find port {name:?} in container {}",
                        container.name
                    )
                })
        }
    }
}

/// Runs one probe (also used for lifecycle hooks' httpGet).
pub async fn run_probe(
    runtime: &Runtime,
    network: &PodNetwork,
    probe: &Probe,
    container: &Container,
    container_id: &str,
    pod_ip: Option<&str>,
    timeout: Duration,
) -> Outcome {
    if let Some(exec) = &probe.exec {
        let cmd = exec.command.clone().unwrap_or_default();
        return match crate::kuberuntime::exec_sync(runtime, container_id, cmd, timeout).await {
            Ok((0, _)) => Outcome::Success,
            Ok((code, out)) => Outcome::Failure(format!(
                "command exited with {code}: {}",
                String::from_utf8_lossy(&out).trim()
            )),
            Err(e) => Outcome::Failure(e.to_string()),
        };
    }
    let target = |host: Option<&str>, port: &IntOrString| -> Result<SocketAddr, String> {
        let port = resolve_port(port, container)?;
        let host = host
            .filter(|h| !h.is_empty())
            .or(pod_ip)
            .ok_or("the pod has no IP yet")?;
        format!("{host}:{port}")
            .parse::<SocketAddr>()
            .or_else(|_| format!("[{host}]:{port}").parse())
            .map_err(|e| format!("{host}:{port}: {e}"))
    };
    if let Some(tcp) = &probe.tcp_socket {
        return match target(tcp.host.as_deref(), &tcp.port) {
            Ok(addr) => match network.connect(addr, timeout).await {
                Ok(_) => Outcome::Success,
                Err(e) => Outcome::Failure(format!("dial tcp {addr}: {e}")),
            },
            Err(e) => Outcome::Failure(e),
        };
    }
    if let Some(h) = &probe.http_get {
        if h.scheme.as_deref() == Some("HTTPS") {
            return Outcome::Failure("HTTPS probes are not supported by the rkube kubelet".into());
        }
        let addr = match target(h.host.as_deref(), &h.port) {
            Ok(a) => a,
            Err(e) => return Outcome::Failure(e),
        };
        let headers: Vec<(String, String)> = h
            .http_headers
            .iter()
            .flatten()
            .map(|x| (x.name.clone(), x.value.clone()))
            .collect();
        let path = h.path.clone().unwrap_or_else(|| "/".into());
        return match tokio::time::timeout(timeout, http_get(network, addr, &path, &headers, timeout)).await {
            Ok(Ok(code)) if (200..400).contains(&code) => Outcome::Success,
            Ok(Ok(code)) => Outcome::Failure(format!("HTTP probe failed with statuscode: {code}")),
            Ok(Err(e)) => Outcome::Failure(format!("Get \"http://{addr}{path}\": {e}")),
            Err(_) => Outcome::Failure(format!(
                "Get \"http://{addr}{path}\": context deadline exceeded (Client.Timeout exceeded while awaiting headers)"
            )),
        };
    }
    if let Some(g) = &probe.grpc {
        let addr = match target(None, &IntOrString::Int(g.port)) {
            Ok(a) => a,
            Err(e) => return Outcome::Failure(e),
        };
        let service = g.service.clone().unwrap_or_default();
        return match tokio::time::timeout(timeout, grpc_health(network, addr, &service, timeout))
            .await
        {
            Ok(Ok(1)) => Outcome::Success,
            Ok(Ok(status)) => Outcome::Failure(format!(
                "service unhealthy (responded with \"{}\")",
                serving_status_name(status)
            )),
            Ok(Err(e)) => Outcome::Failure(format!(
                "failed to connect service \"{addr}\" within {timeout:?}: {e}"
            )),
            Err(_) => Outcome::Failure(format!(
                "timeout: health rpc did not complete within {timeout:?}"
            )),
        };
    }
    Outcome::Failure("probe has no handler".into())
}

fn serving_status_name(s: u64) -> &'static str {
    match s {
        0 => "UNKNOWN",
        1 => "SERVING",
        2 => "NOT_SERVING",
        3 => "SERVICE_UNKNOWN",
        _ => "UNKNOWN",
    }
}

/// An HTTP/1.1 GET; returns the status code.
pub async fn http_get(
    network: &PodNetwork,
    addr: SocketAddr,
    path: &str,
    headers: &[(String, String)],
    timeout: Duration,
) -> Result<u16, String> {
    let stream = network
        .connect(addr, timeout)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, conn) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let mut req = hyper::Request::get(path).header("host", addr.to_string());
    let has = |n: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(n));
    if !has("user-agent") {
        req = req.header("user-agent", "kube-probe/1.36");
    }
    if !has("accept") {
        req = req.header("accept", "*/*");
    }
    for (k, v) in headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let req = req
        .body(http_body_util::Empty::<bytes::Bytes>::new())
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    Ok(resp.status().as_u16())
}

/// `grpc.health.v1.Health/Check` over HTTP/2 cleartext; returns the serving status number.
async fn grpc_health(
    network: &PodNetwork,
    addr: SocketAddr,
    service: &str,
    timeout: Duration,
) -> Result<u64, String> {
    use http_body_util::BodyExt;
    let stream = network
        .connect(addr, timeout)
        .await
        .map_err(|e| e.to_string())?;
    let (mut sender, conn) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    // HealthCheckRequest { string service = 1; } in a gRPC length-prefixed frame.
    let mut msg = Vec::new();
    if !service.is_empty() {
        msg.push(0x0a);
        msg.push(service.len() as u8);
        msg.extend_from_slice(service.as_bytes());
    }
    let mut frame = vec![0u8];
    frame.extend_from_slice(&(msg.len() as u32).to_be_bytes());
    frame.extend_from_slice(&msg);
    let req = hyper::Request::post(format!("http://{addr}/grpc.health.v1.Health/Check"))
        .header("content-type", "application/grpc")
        .header("te", "trailers")
        .header("user-agent", "kube-probe/1.36")
        .body(http_body_util::Full::new(bytes::Bytes::from(frame)))
        .map_err(|e| e.to_string())?;
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let collected = resp
        .into_body()
        .collect()
        .await
        .map_err(|e| e.to_string())?;
    if let Some(t) = collected.trailers() {
        if let Some(code) = t.get("grpc-status").and_then(|v| v.to_str().ok()) {
            if code != "0" {
                let message = t
                    .get("grpc-message")
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                return Err(format!("rpc error: code = {code} desc = {message}"));
            }
        }
    }
    let body = collected.to_bytes();
    // HealthCheckResponse { ServingStatus status = 1; }: 5-byte frame header, then field 1 varint.
    let payload = body.get(5..).unwrap_or(&[]);
    let mut i = 0;
    while i < payload.len() {
        let tag = payload[i];
        i += 1;
        if tag == 0x08 {
            let mut value = 0u64;
            let mut shift = 0;
            while i < payload.len() {
                let b = payload[i];
                i += 1;
                value |= ((b & 0x7f) as u64) << shift;
                if b & 0x80 == 0 {
                    return Ok(value);
                }
                shift += 7;
            }
        } else {
            break;
        }
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_resolve_by_name() {
        let c: Container = serde_json::from_value(serde_json::json!({
            "name": "c", "ports": [{"name": "http", "containerPort": 8080}]
        }))
        .unwrap();
        assert_eq!(resolve_port(&IntOrString::Int(80), &c), Ok(80));
        assert_eq!(
            resolve_port(&IntOrString::String("http".into()), &c),
            Ok(8080)
        );
        assert_eq!(
            resolve_port(&IntOrString::String("9090".into()), &c),
            Ok(9090)
        );
        assert!(resolve_port(&IntOrString::String("nope".into()), &c).is_err());
        assert!(resolve_port(&IntOrString::Int(70000), &c).is_err());
    }

    #[tokio::test]
    async fn http_and_tcp_probes_against_a_local_server() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            loop {
                let Ok((mut s, _)) = listener.accept().await else {
                    return;
                };
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    let n = s.read(&mut buf).await.unwrap_or(0);
                    let req = String::from_utf8_lossy(&buf[..n]).to_string();
                    let code = if req.starts_with("GET /healthz ") {
                        "200 OK"
                    } else {
                        "500 Internal Server Error"
                    };
                    let _ = s
                        .write_all(
                            format!("HTTP/1.1 {code}\r\ncontent-length: 0\r\n\r\n").as_bytes(),
                        )
                        .await;
                });
            }
        });
        let net = PodNetwork::host();
        let t = Duration::from_secs(5);
        assert_eq!(http_get(&net, addr, "/healthz", &[], t).await, Ok(200));
        assert_eq!(http_get(&net, addr, "/other", &[], t).await, Ok(500));
    }
}
