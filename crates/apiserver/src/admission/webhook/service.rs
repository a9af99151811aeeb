//! A webhook's `service` reference resolved to one ready endpoint (upstream
//! `proxy.ResolveEndpoint`, as kube-apiserver does with `--enable-aggregator-routing`): rkube has
//! no Service proxy in the API server's network, so the request goes straight to a ready address
//! of the Service's EndpointSlices (or, without slices, its Endpoints), on the endpoint port named
//! as the Service port the reference names. TLS still verifies `<service>.<namespace>.svc`.

use rand::Rng;
use serde_json::Value;

use crate::ApiServer;

/// An address to dial.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub ip: String,
    pub port: u16,
}

/// Resolves from the watch cache.
pub fn resolve(
    api: &ApiServer,
    namespace: &str,
    name: &str,
    port: u16,
) -> Result<Resolved, String> {
    let get = |storage: &str, key: String| -> Option<Value> {
        let cached = api.caches.get(storage)?.get(&key)?;
        serde_json::from_slice(&cached.json).ok()
    };
    let service = get("services", format!("/services/{namespace}/{name}"))
        .ok_or_else(|| format!("services {name:?} not found"))?;
    let slices: Vec<Value> = api
        .caches
        .get("endpointslices")
        .map(|c| {
            c.list(
                &format!("/endpointslices/{namespace}/"),
                &Default::default(),
            )
            .iter()
            .filter_map(|o| serde_json::from_slice::<Value>(&o.json).ok())
            .filter(|s| {
                s.pointer("/metadata/labels/kubernetes.io~1service-name")
                    .and_then(Value::as_str)
                    == Some(name)
            })
            .collect()
        })
        .unwrap_or_default();
    let endpoints = get("endpoints", format!("/endpoints/{namespace}/{name}"));
    pick(&service, &slices, endpoints.as_ref(), port, &mut |n| {
        rand::rng().random_range(0..n)
    })
}

/// The choice itself: `random(n)` picks an index below `n` among the ready candidates.
pub fn pick(
    service: &Value,
    slices: &[Value],
    endpoints: Option<&Value>,
    port: u16,
    random: &mut dyn FnMut(usize) -> usize,
) -> Result<Resolved, String> {
    let name = crate::objects::name(service);
    let svc_port = service
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|p| p.get("port").and_then(Value::as_u64) == Some(u64::from(port)))
        .ok_or_else(|| format!("no service port {port} found for service {name:?}"))?;
    let port_name = svc_port.get("name").and_then(Value::as_str).unwrap_or("");
    match service
        .pointer("/spec/type")
        .and_then(Value::as_str)
        .unwrap_or("ClusterIP")
    {
        "ClusterIP" | "LoadBalancer" | "NodePort" => {}
        other => return Err(format!("unsupported service type {other:?}")),
    }
    let named = |p: &Value| p.get("name").and_then(Value::as_str).unwrap_or("") == port_name;
    let as_port = |p: &Value| {
        p.get("port")
            .and_then(Value::as_u64)
            .and_then(|n| u16::try_from(n).ok())
            .filter(|n| *n > 0)
    };
    let mut candidates: Vec<Resolved> = Vec::new();
    for slice in slices {
        if !matches!(
            slice.get("addressType").and_then(Value::as_str),
            Some("IPv4" | "IPv6")
        ) {
            continue;
        }
        let Some(port) = slice
            .get("ports")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find(|p| named(p))
            .and_then(as_port)
        else {
            continue;
        };
        for ep in slice
            .get("endpoints")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            // An unset `ready` means ready (upstream's EndpointSlice semantics).
            if ep.pointer("/conditions/ready").and_then(Value::as_bool) == Some(false) {
                continue;
            }
            if let Some(ip) = ep.pointer("/addresses/0").and_then(Value::as_str) {
                candidates.push(Resolved {
                    ip: ip.to_string(),
                    port,
                });
            }
        }
    }
    if slices.is_empty() {
        for subset in endpoints
            .and_then(|e| e.get("subsets"))
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let Some(port) = subset
                .get("ports")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .find(|p| named(p))
                .and_then(as_port)
            else {
                continue;
            };
            for addr in subset
                .get("addresses")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                if let Some(ip) = addr.get("ip").and_then(Value::as_str) {
                    candidates.push(Resolved {
                        ip: ip.to_string(),
                        port,
                    });
                }
            }
        }
    }
    if candidates.is_empty() {
        return Err(format!("no endpoints available for service {name:?}"));
    }
    let i = random(candidates.len()).min(candidates.len() - 1);
    Ok(candidates.swap_remove(i))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn service(kind: &str) -> Value {
        json!({"metadata": {"name": "hook", "namespace": "ns"},
               "spec": {"type": kind, "ports": [{"name": "https", "port": 443, "targetPort": 8443}]}})
    }

    fn first(_: usize) -> usize {
        0
    }

    #[test]
    fn ready_slice_endpoints_on_the_named_port() {
        let slices = [json!({
            "addressType": "IPv4",
            "ports": [{"name": "metrics", "port": 9090}, {"name": "https", "port": 8443}],
            "endpoints": [
                {"addresses": ["10.0.0.1"], "conditions": {"ready": false}},
                {"addresses": ["10.0.0.2"], "conditions": {"ready": true}},
                {"addresses": ["10.0.0.3"]}
            ]
        })];
        let got = pick(&service("ClusterIP"), &slices, None, 443, &mut first).unwrap();
        assert_eq!(
            got,
            Resolved {
                ip: "10.0.0.2".into(),
                port: 8443
            }
        );
        let got = pick(&service("ClusterIP"), &slices, None, 443, &mut |_| 1).unwrap();
        assert_eq!(got.ip, "10.0.0.3");
    }

    #[test]
    fn endpoints_are_used_without_slices() {
        let eps = json!({"subsets": [{"addresses": [{"ip": "10.1.0.1"}],
                                       "ports": [{"name": "https", "port": 9443}]}]});
        let got = pick(&service("NodePort"), &[], Some(&eps), 443, &mut first).unwrap();
        assert_eq!(
            got,
            Resolved {
                ip: "10.1.0.1".into(),
                port: 9443
            }
        );
    }

    #[test]
    fn upstreams_errors() {
        let err = pick(&service("ClusterIP"), &[], None, 80, &mut first).unwrap_err();
        assert_eq!(err, "no service port 80 found for service \"hook\"");
        let err = pick(&service("ExternalName"), &[], None, 443, &mut first).unwrap_err();
        assert_eq!(err, "unsupported service type \"ExternalName\"");
        let not_ready = [
            json!({"addressType": "IPv4", "ports": [{"name": "https", "port": 1}],
                                "endpoints": [{"addresses": ["10.0.0.1"], "conditions": {"ready": false}}]}),
        ];
        let err = pick(&service("ClusterIP"), &not_ready, None, 443, &mut first).unwrap_err();
        assert_eq!(err, "no endpoints available for service \"hook\"");
    }
}
