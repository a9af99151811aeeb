//! Where a Service's port is reached (upstream's `ResolveEndpoint` with EndpointSlices, the resolver
//! of `--enable-aggregator-routing=true`): an ExternalName Service is its external name; another
//! Service is a ready endpoint of its EndpointSlices on the port named like the Service's port.
//!
//! rkube always routes to endpoints: its own process cannot count on reaching ClusterIPs (kube-proxy
//! programs them inside the pods' network, not where the API server runs), so the ClusterIP resolver
//! upstream uses by default would leave most extension servers unreachable.

use rand::seq::IndexedRandom;
use serde_json::Value;

use crate::ApiServer;

/// Why a Service cannot be reached, with upstream's messages.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ResolveError {
    #[error("service {0:?} not found")]
    ServiceNotFound(String),
    #[error("unsupported service type {0:?}")]
    UnsupportedType(String),
    #[error("no service port {0} found for service {1:?}")]
    NoPort(u16, String),
    #[error("no endpoints available for service {0:?}")]
    NoEndpoints(String),
}

/// An address to dial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub host: String,
    pub port: u16,
    /// An endpoint address (a pod's, usually): dialed inside the pods' network namespace when the
    /// server has one. An external name is dialed from the server's own.
    pub endpoint: bool,
}

fn cached(api: &ApiServer, plural: &str, group: &str, key_tail: &str) -> Option<Value> {
    let storage = api
        .registry
        .get(group, "v1", plural)
        .map(|r| r.storage.clone())
        .unwrap_or_else(|| plural.to_string());
    let obj = api
        .caches
        .get(&storage)?
        .get(&format!("/{storage}/{key_tail}"))?;
    serde_json::from_slice(&obj.json).ok()
}

/// The Service `namespace/name` from the watch cache.
pub fn service(api: &ApiServer, namespace: &str, name: &str) -> Option<Value> {
    cached(api, "services", "", &format!("{namespace}/{name}"))
}

/// The EndpointSlices of the Service `namespace/name` (label `kubernetes.io/service-name`).
pub fn endpoint_slices(api: &ApiServer, namespace: &str, name: &str) -> Vec<Value> {
    let storage = api
        .registry
        .get("discovery.k8s.io", "v1", "endpointslices")
        .map(|r| r.storage.clone())
        .unwrap_or_else(|| "endpointslices".to_string());
    let Some(cache) = api.caches.get(&storage) else {
        return Vec::new();
    };
    cache
        .list(&format!("/{storage}/{namespace}/"), &Default::default())
        .iter()
        .filter_map(|o| serde_json::from_slice::<Value>(&o.json).ok())
        .filter(|s| {
            s.pointer("/metadata/labels/kubernetes.io~1service-name")
                .and_then(Value::as_str)
                == Some(name)
        })
        .collect()
}

/// The Service's type (ClusterIP when unset).
pub fn service_type(svc: &Value) -> &str {
    svc.pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
}

/// The name of the Service port numbered `port` ("" for an unnamed one), if it has one.
pub fn port_name(svc: &Value, port: u16) -> Option<String> {
    svc.pointer("/spec/ports")
        .and_then(Value::as_array)?
        .iter()
        .find(|p| p.get("port").and_then(Value::as_i64) == Some(i64::from(port)))
        .map(|p| {
            p.get("name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string()
        })
}

fn is_ready(endpoint: &Value) -> bool {
    endpoint
        .pointer("/conditions/ready")
        .and_then(Value::as_bool)
        .unwrap_or(true)
}

/// The port of the slice named `port_name`.
fn slice_port(slice: &Value, port_name: &str) -> Option<u16> {
    slice
        .get("ports")
        .and_then(Value::as_array)?
        .iter()
        .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name)
        .and_then(|p| p.get("port").and_then(Value::as_i64))
        .and_then(|p| u16::try_from(p).ok())
}

/// Every ready (address, port) of the slices on the port named `port_name`.
pub fn ready_addresses(slices: &[Value], port_name: &str) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for slice in slices {
        let Some(port) = slice_port(slice, port_name) else {
            continue;
        };
        for endpoint in slice
            .get("endpoints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter(|e| is_ready(e))
        {
            if let Some(address) = endpoint.pointer("/addresses/0").and_then(Value::as_str) {
                out.push((address.to_string(), port));
            }
        }
    }
    out
}

/// Where to send a request for the Service `namespace/name` on its port `port`: one ready
/// endpoint picked at random, as upstream spreads requests.
pub fn resolve(
    api: &ApiServer,
    namespace: &str,
    name: &str,
    port: u16,
) -> Result<Location, ResolveError> {
    let svc = service(api, namespace, name)
        .ok_or_else(|| ResolveError::ServiceNotFound(name.to_string()))?;
    resolve_with(&svc, &endpoint_slices(api, namespace, name), name, port)
}

/// [`resolve`] on objects already read.
pub fn resolve_with(
    svc: &Value,
    slices: &[Value],
    name: &str,
    port: u16,
) -> Result<Location, ResolveError> {
    match service_type(svc) {
        "ClusterIP" | "NodePort" | "LoadBalancer" => {}
        "ExternalName" => {
            let host = svc
                .pointer("/spec/externalName")
                .and_then(Value::as_str)
                .unwrap_or("");
            return Ok(Location {
                host: host.to_string(),
                port,
                endpoint: false,
            });
        }
        other => return Err(ResolveError::UnsupportedType(other.to_string())),
    }
    let port_name =
        port_name(svc, port).ok_or_else(|| ResolveError::NoPort(port, name.to_string()))?;
    let ready = ready_addresses(slices, &port_name);
    let (host, port) = ready
        .choose(&mut rand::rng())
        .cloned()
        .ok_or_else(|| ResolveError::NoEndpoints(name.to_string()))?;
    Ok(Location {
        host,
        port,
        endpoint: true,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(ports: Value) -> Value {
        json!({"spec": {"type": "ClusterIP", "ports": ports}})
    }

    fn slice(port_name: &str, port: u16, endpoints: Value) -> Value {
        json!({"ports": [{"name": port_name, "port": port}], "endpoints": endpoints})
    }

    #[test]
    fn picks_a_ready_endpoint_on_the_named_port() {
        let s = svc(json!([{"name": "https", "port": 443, "targetPort": 8443}]));
        let slices = [
            slice("other", 9000, json!([{"addresses": ["10.0.0.9"]}])),
            slice(
                "https",
                8443,
                json!([
                    {"addresses": ["10.0.0.1"], "conditions": {"ready": false}},
                    {"addresses": ["10.0.0.2"], "conditions": {"ready": true}},
                ]),
            ),
        ];
        let at = resolve_with(&s, &slices, "api", 443).unwrap();
        assert_eq!(
            (at.host.as_str(), at.port, at.endpoint),
            ("10.0.0.2", 8443, true)
        );
        assert_eq!(
            resolve_with(&s, &slices, "api", 444),
            Err(ResolveError::NoPort(444, "api".into()))
        );
        assert_eq!(
            resolve_with(&s, &slices[..1], "api", 443),
            Err(ResolveError::NoEndpoints("api".into()))
        );
    }

    #[test]
    fn unnamed_ports_and_external_names() {
        let s = svc(json!([{"port": 443}]));
        let slices =
            [json!({"ports": [{"port": 6443}], "endpoints": [{"addresses": ["10.1.1.1"]}]})];
        assert_eq!(resolve_with(&s, &slices, "api", 443).unwrap().port, 6443);
        let external = json!({"spec": {"type": "ExternalName", "externalName": "api.example.com"}});
        let at = resolve_with(&external, &[], "api", 8443).unwrap();
        assert_eq!(
            (at.host.as_str(), at.port, at.endpoint),
            ("api.example.com", 8443, false)
        );
    }
}
