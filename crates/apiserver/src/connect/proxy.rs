//! The `proxy` subresources of pods, nodes and services (upstream `ProxyREST` of each, with the
//! `ResourceLocation` functions of their strategies): HTTP requests, upgrades included, passed to the
//! pod's IP, the node's kubelet (or another port of the node), or a ready endpoint of the service.
//!
//! Differences: HTML responses are not rewritten to point back through the API server (upstream
//! rewrites links for pods and services); no `X-Forwarded-*` headers are added.

use std::sync::Arc;

use apimachinery::status::ApiError;
use http::{Request, Response};
use httpstream::proxy::{self, Backend, ProxyError, Scheme};
use hyper::body::Incoming;
use serde_json::Value;

use super::upgrade;
use crate::response::{self, Body};
use crate::ApiServer;

/// `[scheme:]name[:port]` (upstream `utilnet.SplitSchemeNamePort`).
pub fn split_scheme_name_port(id: &str) -> Option<(String, String, String)> {
    let parts: Vec<&str> = id.split(':').collect();
    let (scheme, name, port) = match parts.as_slice() {
        [name] => ("", *name, ""),
        [name, port] => ("", *name, *port),
        [scheme, name, port] => (*scheme, *name, *port),
        _ => return None,
    };
    if name.is_empty() || !(scheme.is_empty() || scheme == "http" || scheme == "https") {
        return None;
    }
    Some((scheme.to_string(), name.to_string(), port.to_string()))
}

fn scheme_of(s: &str) -> Scheme {
    if s == "https" {
        Scheme::Https
    } else {
        Scheme::Http
    }
}

/// Whether an address may be proxied to (upstream requires a global unicast IP for pods).
fn is_global_unicast(ip: &std::net::IpAddr) -> bool {
    match ip {
        std::net::IpAddr::V4(v4) => {
            !(v4.is_loopback()
                || v4.is_link_local()
                || v4.is_multicast()
                || v4.is_unspecified()
                || v4.is_broadcast())
        }
        std::net::IpAddr::V6(v6) => {
            !(v6.is_loopback()
                || v6.is_multicast()
                || v6.is_unspecified()
                || (v6.segments()[0] & 0xffc0) == 0xfe80)
        }
    }
}

/// Proxy TLS to pods and services: their certificates cannot be verified (upstream's proxy transport
/// does not either).
fn insecure_tls() -> Result<Arc<rustls::ClientConfig>, ApiError> {
    proxy::client_tls(None, None)
        .map(Arc::new)
        .map_err(ApiError::internal)
}

/// Sends a request (upgrade or not) to `backend` at `path` plus the client's query.
async fn forward(backend: Backend, path: &str, req: Request<Incoming>) -> Response<Body> {
    let path = if path.is_empty() { "/" } else { path };
    let path_and_query = match req.uri().query() {
        Some(q) => format!("{path}?{q}"),
        None => path.to_string(),
    };
    if proxy::is_upgrade(req.headers()) {
        return upgrade::pass_through(backend, path_and_query, req).await;
    }
    let (parts, body) = req.into_parts();
    let mut upstream = Request::new(body);
    *upstream.method_mut() = parts.method;
    *upstream.uri_mut() = match path_and_query.parse() {
        Ok(u) => u,
        Err(e) => {
            return response::error_response(&ApiError::bad_request(format!(
                "invalid proxy path {path_and_query:?}: {e}"
            )))
        }
    };
    *upstream.headers_mut() = proxy::forwarded_headers(&parts.headers, false);
    match backend.send(upstream).await {
        Ok(resp) => proxy::relay(resp),
        Err(e) => {
            let m = match e {
                ProxyError::Dial(m) | ProxyError::Request(m) => m,
            };
            response::error_response(&ApiError::service_unavailable(format!(
                "error trying to reach service: {m}"
            )))
        }
    }
}

/// `pods/<id>/proxy`: the pod's IP, on the given port or the first declared container port.
pub async fn pod(
    api: &Arc<ApiServer>,
    namespace: &str,
    id: &str,
    path: &str,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let (scheme, name, mut port) = split_scheme_name_port(id)
        .ok_or_else(|| ApiError::bad_request(format!("invalid pod request {id:?}")))?;
    let pod = super::get_object(api, "pods", Some(namespace), &name).await?;
    if port.is_empty() {
        port = pod
            .pointer("/spec/containers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .find_map(|c| c.pointer("/ports/0/containerPort").and_then(Value::as_i64))
            .map(|p| p.to_string())
            .unwrap_or_default();
    }
    let ip = pod
        .pointer("/status/podIPs/0/ip")
        .or_else(|| pod.pointer("/status/podIP"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let addr: std::net::IpAddr = ip
        .parse()
        .ok()
        .filter(is_global_unicast)
        .ok_or_else(|| ApiError::bad_request("address not allowed"))?;
    let scheme = scheme_of(&scheme);
    let port: u16 = if port.is_empty() {
        if scheme == Scheme::Https {
            443
        } else {
            80
        }
    } else {
        port.parse()
            .map_err(|_| ApiError::bad_request(format!("invalid pod request {id:?}")))?
    };
    let backend = Backend {
        scheme,
        host: addr.to_string(),
        port,
        tls: match scheme {
            Scheme::Https => Some(insecure_tls()?),
            Scheme::Http => None,
        },
        netns: api.pod_network_namespace.clone(),
    };
    Ok(forward(backend, path, req).await)
}

/// `nodes/<id>/proxy`: the node's kubelet (with the API server's kubelet credentials), or another
/// port of the node when one is named.
pub async fn node(
    api: &Arc<ApiServer>,
    id: &str,
    path: &str,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let (scheme, name, port) = split_scheme_name_port(id)
        .ok_or_else(|| ApiError::bad_request(format!("invalid node request {id:?}")))?;
    let info = api.kubelet.connection_info(api, &name).await?;
    let backend = if port.is_empty() || port == info.port.to_string() {
        api.kubelet.backend(&info, false)
    } else {
        let scheme = scheme_of(&scheme);
        Backend {
            scheme,
            host: info.host.clone(),
            port: port
                .parse()
                .map_err(|_| ApiError::bad_request(format!("invalid node request {id:?}")))?,
            tls: match scheme {
                Scheme::Https => Some(insecure_tls()?),
                Scheme::Http => None,
            },
            netns: None,
        }
    };
    Ok(forward(backend, path, req).await)
}

/// `services/<id>/proxy`: a ready address of the service's Endpoints on the named (or only) port.
pub async fn service(
    api: &Arc<ApiServer>,
    namespace: &str,
    id: &str,
    path: &str,
    req: Request<Incoming>,
) -> Result<Response<Body>, ApiError> {
    let (scheme, name, port_name) = split_scheme_name_port(id)
        .ok_or_else(|| ApiError::bad_request(format!("invalid service request {id:?}")))?;
    let svc = super::get_object(api, "services", Some(namespace), &name).await?;
    // The service port named (or numbered) in the request, else the only/first one.
    let ports = svc
        .pointer("/spec/ports")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let svc_port = if port_name.is_empty() {
        ports.first().cloned()
    } else {
        ports
            .iter()
            .find(|p| {
                p.get("name").and_then(Value::as_str) == Some(port_name.as_str())
                    || p.get("port").and_then(Value::as_i64).map(|n| n.to_string())
                        == Some(port_name.clone())
            })
            .cloned()
    }
    .ok_or_else(|| {
        ApiError::service_unavailable(format!(
            "no service port {port_name:?} found for service {name:?}"
        ))
    })?;
    let wanted_name = svc_port
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let endpoints = super::get_object(api, "endpoints", Some(namespace), &name)
        .await
        .map_err(|e| {
            if e.code == 404 {
                ApiError::service_unavailable(format!(
                    "no endpoints available for service {name:?}"
                ))
            } else {
                e
            }
        })?;
    let target = endpoints
        .get("subsets")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find_map(|subset| {
            let port = subset
                .get("ports")
                .and_then(Value::as_array)?
                .iter()
                .find(|p| p.get("name").and_then(Value::as_str).unwrap_or("") == wanted_name)?
                .get("port")
                .and_then(Value::as_i64)?;
            let ip = subset
                .pointer("/addresses/0/ip")
                .and_then(Value::as_str)?
                .to_string();
            Some((ip, port))
        })
        .ok_or_else(|| {
            ApiError::service_unavailable(format!("no endpoints available for service {name:?}"))
        })?;
    let scheme = scheme_of(&scheme);
    let backend = Backend {
        scheme,
        host: target.0,
        port: u16::try_from(target.1)
            .map_err(|_| ApiError::internal(format!("invalid endpoint port {}", target.1)))?,
        tls: match scheme {
            Scheme::Https => Some(insecure_tls()?),
            Scheme::Http => None,
        },
        netns: api.pod_network_namespace.clone(),
    };
    Ok(forward(backend, path, req).await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheme_name_port() {
        let s = |a: &str, b: &str, c: &str| Some((a.to_string(), b.to_string(), c.to_string()));
        let cases = [
            ("web", s("", "web", "")),
            ("web:8080", s("", "web", "8080")),
            ("https:web:443", s("https", "web", "443")),
            ("ftp:web:21", None),
            (":80", None),
            ("a:b:c:d", None),
        ];
        for (id, want) in cases {
            assert_eq!(split_scheme_name_port(id), want, "{id}");
        }
    }

    #[test]
    fn only_global_unicast_pod_addresses() {
        for (ip, ok) in [
            ("10.244.0.5", true),
            ("127.0.0.1", false),
            ("169.254.1.1", false),
            ("0.0.0.0", false),
            ("fd00::5", true),
            ("fe80::1", false),
            ("::1", false),
        ] {
            let addr: std::net::IpAddr = ip.parse().unwrap();
            assert_eq!(is_global_unicast(&addr), ok, "{ip}");
        }
    }
}
