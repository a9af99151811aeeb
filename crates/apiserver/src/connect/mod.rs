//! Connect subresources (upstream `rest.Connecter` and `rest.ResourceStreamer` storages:
//! `pkg/registry/core/pod/rest` log/exec/attach/portforward/proxy, `.../node/rest` and
//! `.../service` proxy): requests the API server does not answer from storage but passes on to a
//! kubelet, a pod or a service endpoint, upgraded connections included.
//!
//! These requests bypass the generic body-reading handler chain: their bodies and responses stream,
//! and exec/attach/port-forward switch protocols.

mod pod;
mod proxy;
mod upgrade;

use std::sync::Arc;

use apimachinery::status::{ApiError, Qualified};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::Value;

use crate::response::{self, Body};
use crate::ApiServer;

/// The streaming subresources of pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodSub {
    Log,
    Exec,
    Attach,
    PortForward,
}

impl PodSub {
    fn as_str(self) -> &'static str {
        match self {
            PodSub::Log => "log",
            PodSub::Exec => "exec",
            PodSub::Attach => "attach",
            PodSub::PortForward => "portforward",
        }
    }
}

/// A request for a connect subresource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    Pod {
        namespace: String,
        name: String,
        sub: PodSub,
    },
    /// `pods/<id>/proxy<path>`; `id` may carry `scheme:` and `:port`.
    PodProxy {
        namespace: String,
        id: String,
        path: String,
    },
    NodeProxy {
        id: String,
        path: String,
    },
    ServiceProxy {
        namespace: String,
        id: String,
        path: String,
    },
}

impl Target {
    /// The resource and subresource, as metrics, errors and authorization name them.
    pub fn resource(&self) -> (&'static str, &'static str) {
        match self {
            Target::Pod { sub, .. } => ("pods", sub.as_str()),
            Target::PodProxy { .. } => ("pods", "proxy"),
            Target::NodeProxy { .. } => ("nodes", "proxy"),
            Target::ServiceProxy { .. } => ("services", "proxy"),
        }
    }

    /// The namespace ("" for nodes) and the name as upstream's RequestInfo has them (a proxy's
    /// `scheme:name:port` whole).
    pub fn namespace_and_name(&self) -> (&str, &str) {
        match self {
            Target::Pod {
                namespace, name, ..
            } => (namespace, name),
            Target::PodProxy { namespace, id, .. } | Target::ServiceProxy { namespace, id, .. } => {
                (namespace, id)
            }
            Target::NodeProxy { id, .. } => ("", id),
        }
    }
}

/// Recognises the paths of connect subresources (core group, v1 only, as upstream serves them).
pub fn target(path: &str) -> Option<Target> {
    let rest = path.strip_prefix("/api/v1/")?;
    // The proxy path is everything after `.../proxy`, trailing slash included.
    let split_proxy = |prefix_segments: usize| -> Option<(Vec<&str>, String)> {
        let mut idx = 0;
        let mut segs = Vec::new();
        for _ in 0..prefix_segments {
            let end = rest[idx..].find('/').map_or(rest.len(), |i| idx + i);
            segs.push(&rest[idx..end]);
            idx = (end + 1).min(rest.len());
            if end == rest.len() {
                break;
            }
        }
        if segs.len() != prefix_segments || segs.iter().any(|s| s.is_empty()) {
            return None;
        }
        let consumed: usize = segs.iter().map(|s| s.len() + 1).sum::<usize>() - 1;
        Some((segs, rest[consumed..].to_string()))
    };
    let segments: Vec<&str> = rest.split('/').collect();
    match segments.as_slice() {
        ["namespaces", ns, "pods", name, sub] if !ns.is_empty() && !name.is_empty() => {
            let sub = match *sub {
                "log" => PodSub::Log,
                "exec" => PodSub::Exec,
                "attach" => PodSub::Attach,
                "portforward" => PodSub::PortForward,
                "proxy" => {
                    return Some(Target::PodProxy {
                        namespace: ns.to_string(),
                        id: name.to_string(),
                        path: String::new(),
                    })
                }
                _ => return None,
            };
            Some(Target::Pod {
                namespace: ns.to_string(),
                name: name.to_string(),
                sub,
            })
        }
        ["namespaces", _, "pods", _, "proxy", ..] => {
            let (segs, path) = split_proxy(5)?;
            Some(Target::PodProxy {
                namespace: segs[1].to_string(),
                id: segs[3].to_string(),
                path,
            })
        }
        ["namespaces", _, "services", _, "proxy", ..] => {
            let (segs, path) = split_proxy(5)?;
            Some(Target::ServiceProxy {
                namespace: segs[1].to_string(),
                id: segs[3].to_string(),
                path,
            })
        }
        ["nodes", _, "proxy", ..] => {
            let (segs, path) = split_proxy(3)?;
            Some(Target::NodeProxy {
                id: segs[1].to_string(),
                path,
            })
        }
        _ => None,
    }
}

/// Serves a connect request.
pub async fn serve(api: &Arc<ApiServer>, target: Target, req: Request<Incoming>) -> Response<Body> {
    let started = std::time::Instant::now();
    let (resource, sub) = target.resource();
    let result = match &target {
        Target::Pod {
            namespace,
            name,
            sub: PodSub::Log,
        } => {
            if req.method() != Method::GET && req.method() != Method::HEAD {
                Err(method_not_allowed(resource, sub))
            } else {
                pod::log(api, namespace, name, req.uri().query()).await
            }
        }
        Target::Pod {
            namespace,
            name,
            sub,
        } => {
            if req.method() != Method::GET && req.method() != Method::POST {
                Err(method_not_allowed(resource, sub.as_str()))
            } else {
                pod::stream(api, namespace, name, *sub, req).await
            }
        }
        Target::PodProxy {
            namespace,
            id,
            path,
        } => proxy::pod(api, namespace, id, path, req).await,
        Target::NodeProxy { id, path } => proxy::node(api, id, path, req).await,
        Target::ServiceProxy {
            namespace,
            id,
            path,
        } => proxy::service(api, namespace, id, path, req).await,
    };
    let resp = result.unwrap_or_else(|e| response::error_response(&e));
    api.metrics.record(
        "CONNECT",
        "",
        "v1",
        &format!("{resource}/{sub}"),
        resp.status().as_u16(),
        started.elapsed(),
    );
    resp
}

fn method_not_allowed(resource: &str, sub: &str) -> ApiError {
    ApiError {
        code: 405,
        reason: "MethodNotAllowed",
        message: "the server does not allow this method on the requested resource".into(),
        details: Some(Box::new(apimachinery::status::Details {
            kind: format!("{resource}/{sub}"),
            ..Default::default()
        })),
    }
}

/// An object from storage, or upstream's NotFound for it.
pub(crate) async fn get_object(
    api: &ApiServer,
    plural: &str,
    namespace: Option<&str>,
    name: &str,
) -> Result<Value, ApiError> {
    let storage = api
        .registry
        .get("", "v1", plural)
        .map(|r| r.storage.clone())
        .unwrap_or_else(|| plural.to_string());
    let key = match namespace {
        Some(ns) => format!("/{storage}/{ns}/{name}"),
        None => format!("/{storage}/{name}"),
    };
    let kv = api
        .store
        .get(&key)
        .await
        .map_err(crate::rest::storage_error)?
        .ok_or_else(|| ApiError::not_found(&Qualified::new("", plural), name))?;
    serde_json::from_slice(&kv.value)
        .map_err(|e| ApiError::internal(format!("stored {plural} {name} is not valid JSON: {e}")))
}

/// An error that is not an API status (upstream `ErrorToAPIStatus` of a plain error): 500 with no
/// reason, shown by kubectl as "Error from server: <message>".
pub(crate) fn unknown_error(message: impl Into<String>) -> ApiError {
    ApiError {
        code: 500,
        reason: "",
        message: message.into(),
        details: None,
    }
}

/// Upstream `errors.NewGenericServerResponse` for an error a backend answered with (no verb).
pub(crate) fn generic_server_response(
    code: u16,
    resource: &str,
    name: &str,
    server_message: &str,
) -> ApiError {
    let (reason, message): (&'static str, String) = match code {
        409 => ("Conflict", "the server reported a conflict".into()),
        404 => (
            "NotFound",
            "the server could not find the requested resource".into(),
        ),
        400 => (
            "BadRequest",
            "the server rejected our request for an unknown reason".into(),
        ),
        401 => (
            "Unauthorized",
            "the server has asked for the client to provide credentials".into(),
        ),
        403 => ("Forbidden", server_message.to_string()),
        406 => (
            "NotAcceptable",
            if server_message.is_empty() || server_message == "unknown" {
                "the server was unable to respond with a content type that the client supports"
                    .into()
            } else {
                server_message.to_string()
            },
        ),
        415 => (
            "UnsupportedMediaType",
            if server_message.is_empty() || server_message == "unknown" {
                "the server was unable to respond with a content type that the client supports"
                    .into()
            } else {
                server_message.to_string()
            },
        ),
        405 => (
            "MethodNotAllowed",
            "the server does not allow this method on the requested resource".into(),
        ),
        422 => (
            "Invalid",
            "the server rejected our request due to an error in our request".into(),
        ),
        503 => (
            "ServiceUnavailable",
            "the server is currently unable to handle the request".into(),
        ),
        504 => ("Timeout", "the server was unable to return a response in the time allotted, but may still be processing the request".into()),
        429 => ("TooManyRequests", "the server has received too many requests and has asked us to try again later".into()),
        c if c >= 500 => (
            "InternalError",
            format!("an error on the server ({server_message:?}) has prevented the request from succeeding"),
        ),
        c => (
            "",
            format!("the server responded with the status code {c} but did not return more information"),
        ),
    };
    ApiError {
        code,
        reason,
        message: format!("{message} ( {resource} {name})"),
        details: Some(Box::new(apimachinery::status::Details {
            name: name.to_string(),
            kind: resource.to_string(),
            ..Default::default()
        })),
    }
}

/// A plain-text response, as Go's `http.Error` writes it.
pub(crate) fn text_response(code: StatusCode, message: &str) -> Response<Body> {
    let mut resp =
        response::bytes_response(code, "text/plain; charset=utf-8", format!("{message}\n"));
    resp.headers_mut().insert(
        "X-Content-Type-Options",
        http::HeaderValue::from_static("nosniff"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_paths() {
        let pod = |sub| Target::Pod {
            namespace: "ns".into(),
            name: "p".into(),
            sub,
        };
        let cases = [
            ("/api/v1/namespaces/ns/pods/p/log", Some(pod(PodSub::Log))),
            ("/api/v1/namespaces/ns/pods/p/exec", Some(pod(PodSub::Exec))),
            (
                "/api/v1/namespaces/ns/pods/p/attach",
                Some(pod(PodSub::Attach)),
            ),
            (
                "/api/v1/namespaces/ns/pods/p/portforward",
                Some(pod(PodSub::PortForward)),
            ),
            (
                "/api/v1/namespaces/ns/pods/p/proxy",
                Some(Target::PodProxy {
                    namespace: "ns".into(),
                    id: "p".into(),
                    path: String::new(),
                }),
            ),
            (
                "/api/v1/namespaces/ns/pods/http:p:8080/proxy/a/b/",
                Some(Target::PodProxy {
                    namespace: "ns".into(),
                    id: "http:p:8080".into(),
                    path: "/a/b/".into(),
                }),
            ),
            (
                "/api/v1/nodes/n1/proxy/metrics",
                Some(Target::NodeProxy {
                    id: "n1".into(),
                    path: "/metrics".into(),
                }),
            ),
            (
                "/api/v1/nodes/n1/proxy",
                Some(Target::NodeProxy {
                    id: "n1".into(),
                    path: String::new(),
                }),
            ),
            (
                "/api/v1/namespaces/default/services/web:http/proxy/",
                Some(Target::ServiceProxy {
                    namespace: "default".into(),
                    id: "web:http".into(),
                    path: "/".into(),
                }),
            ),
            ("/api/v1/namespaces/ns/pods/p/status", None),
            ("/api/v1/namespaces/ns/pods/p", None),
            ("/api/v1/namespaces/ns/pods//log", None),
            ("/apis/apps/v1/namespaces/ns/pods/p/log", None),
            ("/api/v1/nodes/n1/status", None),
        ];
        for (path, want) in cases {
            assert_eq!(target(path), want, "{path}");
        }
    }

    #[test]
    fn generic_server_responses_name_the_resource() {
        let e = generic_server_response(404, "pods/log", "web", "ignored");
        assert_eq!(
            e.message,
            "the server could not find the requested resource ( pods/log web)"
        );
        assert_eq!(e.reason, "NotFound");
        let e = generic_server_response(502, "pods/log", "web", "bad gateway");
        assert_eq!(e.reason, "InternalError");
        assert!(e.message.contains("\"bad gateway\""));
        let e = generic_server_response(418, "pods/log", "web", "");
        assert_eq!(e.reason, "");
    }
}
