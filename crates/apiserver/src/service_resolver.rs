//! Where a Service's port is reached, for everything the API server itself calls through a Service
//! reference: aggregated APIServices, admission webhooks and CRD conversion webhooks (upstream's
//! `proxy.ResolveEndpoint`, the resolver of `--enable-aggregator-routing=true`, which kube-apiserver
//! also hands its webhooks). An ExternalName Service is its external name; another Service is a ready
//! endpoint of its EndpointSlices (without slices, its Endpoints) on the port named like the
//! Service's port.
//!
//! rkube always routes to endpoints: its own process cannot count on reaching ClusterIPs (kube-proxy
//! programs them inside the pods' network, not where the API server runs), so the ClusterIP resolver
//! upstream uses by default would leave most extension servers unreachable.

use rand::Rng;
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

/// The port named `port_name` in a slice's or an Endpoints subset's `ports` (0 is no port).
fn named_port(ports_of: &Value, port_name: &str) -> Option<u16> {
    ports_of
        .get("ports")
        .and_then(Value::as_array)?
        .iter()
        .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name)
        .and_then(|p| p.get("port").and_then(Value::as_i64))
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p > 0)
}

/// Every ready (address, port) of the slices on the port named `port_name`. FQDN slices hold no
/// addresses to dial and are skipped.
pub fn ready_addresses(slices: &[Value], port_name: &str) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for slice in slices {
        if slice.get("addressType").and_then(Value::as_str) == Some("FQDN") {
            continue;
        }
        let Some(port) = named_port(slice, port_name) else {
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

/// Every address of an Endpoints object's subsets on the port named `port_name` (the subsets'
/// `addresses` are the ready ones).
pub fn endpoints_addresses(endpoints: &Value, port_name: &str) -> Vec<(String, u16)> {
    let mut out = Vec::new();
    for subset in endpoints
        .get("subsets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let Some(port) = named_port(subset, port_name) else {
            continue;
        };
        for address in subset
            .get("addresses")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if let Some(ip) = address.get("ip").and_then(Value::as_str) {
                out.push((ip.to_string(), port));
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
    let slices = endpoint_slices(api, namespace, name);
    // Endpoints only matter without slices: read them only then.
    let endpoints = if slices.is_empty() {
        cached(api, "endpoints", "", &format!("{namespace}/{name}"))
    } else {
        None
    };
    resolve_with(&svc, &slices, endpoints.as_ref(), name, port, &mut |n| {
        rand::rng().random_range(0..n)
    })
}

/// [`resolve`] on objects already read; `random(n)` picks an index below `n` among the ready
/// candidates.
pub fn resolve_with(
    svc: &Value,
    slices: &[Value],
    endpoints: Option<&Value>,
    name: &str,
    port: u16,
    random: &mut dyn FnMut(usize) -> usize,
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
    let mut ready = ready_addresses(slices, &port_name);
    if slices.is_empty() {
        if let Some(endpoints) = endpoints {
            ready = endpoints_addresses(endpoints, &port_name);
        }
    }
    if ready.is_empty() {
        return Err(ResolveError::NoEndpoints(name.to_string()));
    }
    let i = random(ready.len()).min(ready.len() - 1);
    let (host, port) = ready.swap_remove(i);
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
        json!({"addressType": "IPv4", "ports": [{"name": port_name, "port": port}], "endpoints": endpoints})
    }

    fn first(_: usize) -> usize {
        0
    }

    fn at(
        s: &Value,
        slices: &[Value],
        eps: Option<&Value>,
        port: u16,
    ) -> Result<Location, ResolveError> {
        resolve_with(s, slices, eps, "api", port, &mut first)
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
                    {"addresses": ["10.0.0.3"]},
                ]),
            ),
        ];
        let got = at(&s, &slices, None, 443).unwrap();
        assert_eq!(
            (got.host.as_str(), got.port, got.endpoint),
            ("10.0.0.2", 8443, true)
        );
        // An unset `ready` is ready, as EndpointSlice defines it.
        let got = resolve_with(&s, &slices, None, "api", 443, &mut |_| 1).unwrap();
        assert_eq!(got.host, "10.0.0.3");
        assert_eq!(
            at(&s, &slices, None, 444),
            Err(ResolveError::NoPort(444, "api".into()))
        );
        assert_eq!(
            at(&s, &slices[..1], None, 443),
            Err(ResolveError::NoEndpoints("api".into()))
        );
    }

    #[test]
    fn unnamed_ports_fqdn_slices_and_external_names() {
        let s = svc(json!([{"port": 443}]));
        let slices = [
            json!({"addressType": "FQDN", "ports": [{"port": 1}], "endpoints": [{"addresses": ["a.example"]}]}),
            json!({"ports": [{"port": 6443}], "endpoints": [{"addresses": ["10.1.1.1"]}]}),
        ];
        let got = at(&s, &slices, None, 443).unwrap();
        assert_eq!((got.host.as_str(), got.port), ("10.1.1.1", 6443));
        let external = json!({"spec": {"type": "ExternalName", "externalName": "api.example.com"}});
        let got = at(&external, &[], None, 8443).unwrap();
        assert_eq!(
            (got.host.as_str(), got.port, got.endpoint),
            ("api.example.com", 8443, false)
        );
    }

    #[test]
    fn endpoints_are_used_without_slices() {
        let s = json!({"spec": {"type": "NodePort", "ports": [{"name": "https", "port": 443}]}});
        let eps = json!({"subsets": [{"addresses": [{"ip": "10.1.0.1"}],
                                       "ports": [{"name": "https", "port": 9443}]}]});
        let got = at(&s, &[], Some(&eps), 443).unwrap();
        assert_eq!((got.host.as_str(), got.port), ("10.1.0.1", 9443));
        // Slices, when there are any, win over Endpoints.
        let slices = [slice("https", 8443, json!([{"addresses": ["10.0.0.5"]}]))];
        assert_eq!(at(&s, &slices, Some(&eps), 443).unwrap().host, "10.0.0.5");
    }

    #[test]
    fn upstreams_messages() {
        let s = json!({"spec": {"type": "Weird", "ports": [{"port": 443}]}});
        assert_eq!(
            at(&s, &[], None, 443).unwrap_err().to_string(),
            "unsupported service type \"Weird\""
        );
        let s = svc(json!([{"name": "https", "port": 443}]));
        assert_eq!(
            at(&s, &[], None, 80).unwrap_err().to_string(),
            "no service port 80 found for service \"api\""
        );
        assert_eq!(
            at(&s, &[], None, 443).unwrap_err().to_string(),
            "no endpoints available for service \"api\""
        );
    }
}
