//! What the Endpoints, EndpointSlice and mirroring controllers share (upstream
//! `staging/src/k8s.io/endpointslice/util`, `pkg/controller/util/endpoint`, `pkg/api/v1/pod`): which
//! pods belong in a Service's endpoints, port lookup, the trigger-time tracker, and a semantic
//! comparison that ignores the difference between absent and empty fields.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use client::informer::Store;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Pod, Service, ServicePort};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use serde::Serialize;
use serde_json::Value;

/// Label naming the Service an EndpointSlice belongs to.
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";
/// Label naming the controller that manages an EndpointSlice.
pub const LABEL_MANAGED_BY: &str = "endpointslice.kubernetes.io/managed-by";
/// Label on the Endpoints and EndpointSlices of headless Services.
pub const LABEL_HEADLESS: &str = "service.kubernetes.io/headless";
/// When the change that led to this Endpoints/EndpointSlice state happened.
pub const LAST_CHANGE_TRIGGER_TIME: &str = "endpoints.kubernetes.io/last-change-trigger-time";
/// Set by leader election on the Endpoints it uses as a lock; such Endpoints are left alone.
pub const LEADER_ANNOTATION: &str = "control-plane.alpha.kubernetes.io/leader";

pub fn is_pod_ready(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// Succeeded or Failed.
pub fn is_pod_terminal(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        Some("Succeeded") | Some("Failed")
    )
}

/// The pod's IPs, `status.podIPs` or else `status.podIP`.
pub fn pod_ips(pod: &Pod) -> Vec<String> {
    let Some(status) = pod.status.as_ref() else {
        return Vec::new();
    };
    let ips: Vec<String> = status
        .pod_ips
        .iter()
        .flatten()
        .map(|ip| ip.ip.clone())
        .filter(|ip| !ip.is_empty())
        .collect();
    if !ips.is_empty() {
        return ips;
    }
    status
        .pod_ip
        .iter()
        .filter(|ip| !ip.is_empty())
        .cloned()
        .collect()
}

/// Whether the pod gets an endpoint at all: not terminal, has an IP, and (unless terminating
/// endpoints are wanted) is not being deleted.
pub fn should_pod_be_in_endpoints(pod: &Pod, include_terminating: bool) -> bool {
    if is_pod_terminal(pod) || pod_ips(pod).is_empty() {
        return false;
    }
    include_terminating || pod.metadata.deletion_timestamp.is_none()
}

/// A pod's hostname is published when it names this Service as its subdomain.
pub fn should_set_hostname(pod: &Pod, svc: &Service) -> bool {
    let spec = pod.spec.as_ref();
    let hostname = spec.and_then(|s| s.hostname.as_deref()).unwrap_or("");
    !hostname.is_empty()
        && spec.and_then(|s| s.subdomain.as_deref()) == svc.metadata.name.as_deref()
        && pod.metadata.namespace == svc.metadata.namespace
}

/// The container port a Service port targets on this pod: a number as is, a name looked up among
/// the containers' (and restartable init containers') ports of the same protocol.
pub fn find_port(pod: &Pod, port: &ServicePort) -> Option<i32> {
    match port
        .target_port
        .clone()
        .unwrap_or(IntOrString::Int(port.port))
    {
        IntOrString::Int(n) => Some(n),
        IntOrString::String(name) => {
            let protocol = port.protocol.as_deref().unwrap_or("TCP");
            let spec = pod.spec.as_ref()?;
            let sidecars = spec
                .init_containers
                .iter()
                .flatten()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"));
            spec.containers
                .iter()
                .chain(sidecars)
                .flat_map(|c| c.ports.iter().flatten())
                .find(|p| {
                    p.name.as_deref() == Some(name.as_str())
                        && p.protocol.as_deref().unwrap_or("TCP") == protocol
                })
                .map(|p| p.container_port)
        }
    }
}

/// A ClusterIP other than "None" (upstream `IsServiceIPSet`).
pub fn is_service_ip_set(svc: &Service) -> bool {
    let ip = svc
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .unwrap_or("");
    !ip.is_empty() && ip != "None"
}

pub fn is_ipv6(ip: &str) -> bool {
    matches!(ip.parse::<std::net::IpAddr>(), Ok(std::net::IpAddr::V6(_)))
}

/// Whether the Service's selector (a present selector; empty selects everything) matches the labels.
pub fn selector_matches(svc: &Service, labels: Option<&BTreeMap<String, String>>) -> bool {
    let Some(selector) = svc.spec.as_ref().and_then(|s| s.selector.as_ref()) else {
        return false;
    };
    selector
        .iter()
        .all(|(k, v)| labels.and_then(|l| l.get(k)) == Some(v))
}

/// Keys of the Services in the pod's namespace that select the pod.
pub fn services_for_pod(services: &Store<Service>, pod: &Pod) -> Vec<String> {
    let ns = pod.metadata.namespace.as_deref().unwrap_or("");
    services
        .list_namespace(ns)
        .iter()
        .filter(|s| selector_matches(s, pod.metadata.labels.as_ref()))
        .map(|s| format!("{ns}/{}", s.metadata.name.as_deref().unwrap_or("")))
        .collect()
}

/// The `generateName` of a Service's EndpointSlices: `<service>-`, or `slice-` when that would not
/// be a valid name prefix.
pub fn endpoint_slice_prefix(service: &str) -> String {
    let prefix = format!("{service}-");
    let valid = prefix.len() <= 253 - 5
        && prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && prefix.starts_with(|c: char| c.is_ascii_alphanumeric());
    if valid {
        prefix
    } else {
        "slice-".to_string()
    }
}

/// `time` as Go's RFC3339Nano in UTC (fraction without trailing zeros).
pub fn rfc3339_nano(time: Timestamp) -> String {
    let s = time.strftime("%Y-%m-%dT%H:%M:%S%.f").to_string();
    let s = if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    };
    format!("{s}Z")
}

/// The JSON form of `v` with empty strings, lists, objects and nulls dropped, and object
/// references' resourceVersion ignored: upstream's semantic equality, where nil and empty match.
pub fn semantic(v: &impl Serialize) -> Value {
    fn clean(v: Value) -> Option<Value> {
        match v {
            Value::Null => None,
            Value::String(s) if s.is_empty() => None,
            Value::Array(a) => {
                let a: Vec<Value> = a
                    .into_iter()
                    .map(|v| clean(v).unwrap_or(Value::Null))
                    .collect();
                (!a.is_empty()).then_some(Value::Array(a))
            }
            Value::Object(o) => {
                let o: serde_json::Map<String, Value> = o
                    .into_iter()
                    .filter(|(k, _)| k != "resourceVersion")
                    .filter_map(|(k, v)| clean(v).map(|v| (k, v)))
                    .collect();
                (!o.is_empty()).then_some(Value::Object(o))
            }
            v => Some(v),
        }
    }
    clean(serde_json::to_value(v).unwrap_or_default()).unwrap_or(Value::Null)
}

/// An event recorder writing to the API as `component` (the broadcaster must be kept alive).
pub fn event_recorder(
    client: &kube::Client,
    component: &str,
) -> (client::events::EventBroadcaster, client::events::Recorder) {
    let broadcaster = client::events::EventBroadcaster::new();
    broadcaster.start_recording_to_sink(client::events::ApiEventSink::new(client.clone()));
    let recorder = broadcaster.new_recorder(component, "");
    (broadcaster, recorder)
}

/// A reference to an object for an event.
pub fn object_ref(
    kind: &str,
    meta: &k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
) -> k8s_openapi::api::core::v1::ObjectReference {
    k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some(kind.into()),
        namespace: meta.namespace.clone(),
        name: meta.name.clone(),
        uid: meta.uid.clone(),
        resource_version: meta.resource_version.clone(),
        ..Default::default()
    }
}

pub fn semantic_eq(a: &impl Serialize, b: &impl Serialize) -> bool {
    semantic(a) == semantic(b)
}

#[derive(Default)]
struct ServiceState {
    pods: HashMap<String, Timestamp>,
    service: Option<Timestamp>,
}

/// When the last change that the next write reflects happened (upstream `TriggerTimeTracker`): a
/// pod's trigger time is the last transition of its Ready condition, a Service's its creation. The
/// first computation for a Service gives its creation time; later ones the earliest trigger time
/// that changed since the previous computation, or none.
#[derive(Default)]
pub struct TriggerTimeTracker {
    states: Mutex<HashMap<String, ServiceState>>,
}

impl TriggerTimeTracker {
    pub fn compute(&self, key: &str, svc: &Service, pods: &[&Pod]) -> Option<Timestamp> {
        let mut states = self.states.lock().unwrap_or_else(|e| e.into_inner());
        let known = states.contains_key(key);
        let state = states.entry(key.to_string()).or_default();
        let mut min: Option<Timestamp> = None;
        let mut pod_times = HashMap::new();
        for pod in pods {
            let ready = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .into_iter()
                .flatten()
                .find(|c| c.type_ == "Ready")
                .and_then(|c| c.last_transition_time.as_ref())
                .map(|t| t.0);
            if let Some(t) = ready {
                let name = pod.metadata.name.clone().unwrap_or_default();
                if state.pods.get(&name).is_none_or(|last| t > *last) {
                    min = Some(min.map_or(t, |m| m.min(t)));
                }
                pod_times.insert(name, t);
            }
        }
        let created = svc.metadata.creation_timestamp.as_ref().map(|t| t.0);
        if let Some(t) = created {
            if state.service.is_none_or(|last| t > last) {
                min = Some(min.map_or(t, |m| m.min(t)));
            }
        }
        state.pods = pod_times;
        state.service = created;
        if known {
            min
        } else {
            created
        }
    }

    pub fn delete(&self, key: &str) {
        self.states
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(v: Value) -> Pod {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn named_ports_resolve_per_pod_and_protocol() {
        let p = pod(
            json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c",
            "ports": [{"name": "http", "containerPort": 8080}, {"name": "dns", "containerPort": 53, "protocol": "UDP"}]}]}}),
        );
        let port = |target: IntOrString, proto: &str| ServicePort {
            port: 80,
            target_port: Some(target),
            protocol: Some(proto.into()),
            ..Default::default()
        };
        assert_eq!(
            find_port(&p, &port(IntOrString::String("http".into()), "TCP")),
            Some(8080)
        );
        assert_eq!(
            find_port(&p, &port(IntOrString::String("dns".into()), "TCP")),
            None
        );
        assert_eq!(
            find_port(&p, &port(IntOrString::String("dns".into()), "UDP")),
            Some(53)
        );
        assert_eq!(find_port(&p, &port(IntOrString::Int(9), "TCP")), Some(9));
    }

    #[test]
    fn which_pods_get_endpoints() {
        let running = pod(
            json!({"metadata": {"name": "p"}, "status": {"phase": "Running", "podIP": "10.0.0.1"}}),
        );
        assert!(should_pod_be_in_endpoints(&running, false));
        let no_ip = pod(json!({"metadata": {"name": "p"}, "status": {"phase": "Pending"}}));
        assert!(!should_pod_be_in_endpoints(&no_ip, true));
        let done = pod(
            json!({"metadata": {"name": "p"}, "status": {"phase": "Succeeded", "podIP": "10.0.0.1"}}),
        );
        assert!(!should_pod_be_in_endpoints(&done, true));
        let deleting = pod(
            json!({"metadata": {"name": "p", "deletionTimestamp": "2024-01-01T00:00:00Z"},
            "status": {"phase": "Running", "podIP": "10.0.0.1"}}),
        );
        assert!(!should_pod_be_in_endpoints(&deleting, false));
        assert!(should_pod_be_in_endpoints(&deleting, true));
    }

    #[test]
    fn trigger_time_is_creation_first_then_earliest_change() {
        let svc: Service =
            serde_json::from_value(json!({"metadata": {"name": "s", "namespace": "d",
            "creationTimestamp": "2024-01-01T00:00:00Z"}}))
            .unwrap();
        let ready = |t: &str| {
            pod(json!({"metadata": {"name": "p"}, "status": {"conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": t}]}}))
        };
        let tracker = TriggerTimeTracker::default();
        let p1 = ready("2024-01-01T00:01:00Z");
        assert_eq!(
            tracker
                .compute("d/s", &svc, &[&p1])
                .map(rfc3339_nano)
                .as_deref(),
            Some("2024-01-01T00:00:00Z")
        );
        assert_eq!(tracker.compute("d/s", &svc, &[&p1]), None);
        let p2 = ready("2024-01-01T00:02:00Z");
        assert_eq!(
            tracker
                .compute("d/s", &svc, &[&p2])
                .map(rfc3339_nano)
                .as_deref(),
            Some("2024-01-01T00:02:00Z")
        );
    }

    #[test]
    fn semantic_equality_ignores_empty_and_resource_version() {
        assert!(semantic_eq(
            &json!({"a": "", "b": [], "ref": {"name": "x", "resourceVersion": "5"}}),
            &json!({"ref": {"name": "x"}})
        ));
        assert!(!semantic_eq(&json!({"a": "1"}), &json!({})));
    }

    #[test]
    fn rfc3339_nano_trims_zeros() {
        let t: Timestamp = "2024-01-01T00:00:00.120Z".parse().unwrap();
        assert_eq!(rfc3339_nano(t), "2024-01-01T00:00:00.12Z");
        let t: Timestamp = "2024-01-01T00:00:00Z".parse().unwrap();
        assert_eq!(rfc3339_nano(t), "2024-01-01T00:00:00Z");
    }
}
