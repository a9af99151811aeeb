//! Exec, attach and port-forward (upstream `pkg/kubelet/server` `getExec`/`getAttach`/
//! `getPortForward` with `proxyStream`): the kubelet asks the runtime (CRI `Exec`, `Attach`,
//! `PortForward`) for a URL on the runtime's own streaming server and passes the client's upgrade
//! request through to it unchanged, so SPDY (and the runtime's own WebSocket protocols) flow end to
//! end between the API server and containerd.
//!
//! The runtime's streaming server listens in the pod network namespace (`127.0.0.1` there), so it is
//! dialed through [`crate::netns::PodNetwork::connect`].

use std::net::SocketAddr;
use std::time::Duration;

use http::{Request, Response, StatusCode};
use httpstream::proxy::{self, ProxyBody};
use hyper::body::Incoming;
use hyper::upgrade::OnUpgrade;

use super::{text, PodView};
use crate::cri::api;
use crate::kubelet::Kubelet;

/// What the runtime is asked to stream (upstream `remotecommandserver.Options`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamOptions {
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

/// Reads `stdin`/`stdout`/`stderr`/`tty` ("1" means yes); a TTY has no separate stderr.
pub fn stream_options(query: &[(String, String)]) -> Result<StreamOptions, String> {
    let on = |k: &str| query.iter().any(|(key, v)| key == k && v == "1");
    let tty = on("tty");
    let opts = StreamOptions {
        stdin: on("stdin"),
        stdout: on("stdout"),
        // Upstream warns and drops stderr with a TTY.
        stderr: on("stderr") && !tty,
        tty,
    };
    if !opts.stdin && !opts.stdout && !opts.stderr {
        return Err("you must specify at least 1 of stdin, stdout, stderr".into());
    }
    Ok(opts)
}

/// A CRI failure as upstream's `streaming.WriteError` answers it: NotFound 404, ResourceExhausted
/// 429, anything else 500, with the gRPC error text.
fn cri_error(status: &tonic::Status) -> Response<ProxyBody> {
    let code = match status.code() {
        tonic::Code::NotFound => StatusCode::NOT_FOUND,
        tonic::Code::ResourceExhausted => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::INTERNAL_SERVER_ERROR,
    };
    text(
        code,
        &format!(
            "rpc error: code = {:?} desc = {}",
            status.code(),
            status.message()
        ),
    )
}

fn take_upgrade(req: Request<Incoming>) -> (http::request::Parts, Option<OnUpgrade>) {
    let (mut parts, _) = req.into_parts();
    let upgrade = parts.extensions.remove::<OnUpgrade>();
    (parts, upgrade)
}

/// Passes the client's upgrade request to the runtime's streaming URL (upstream `proxyStream`).
async fn proxy_stream(kubelet: &Kubelet, url: &str, req: Request<Incoming>) -> Response<ProxyBody> {
    if !proxy::is_upgrade(req.headers()) {
        return text(StatusCode::BAD_REQUEST, "Upgrade request required");
    }
    let uri: http::Uri = match url.parse() {
        Ok(u) => u,
        Err(e) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("the runtime's streaming URL {url:?} is invalid: {e}"),
            )
        }
    };
    let (Some(host), Some(port)) = (uri.host(), uri.port_u16()) else {
        return text(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("the runtime's streaming URL {url:?} has no host and port"),
        );
    };
    let addr: SocketAddr = match format!("{}:{port}", host.trim_matches(['[', ']'])).parse() {
        Ok(a) => a,
        Err(_) => match tokio::net::lookup_host((host, port))
            .await
            .ok()
            .and_then(|mut a| a.next())
        {
            Some(a) => a,
            None => {
                return text(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    &format!("cannot resolve the runtime's streaming server {host}"),
                )
            }
        },
    };
    let path = uri
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let (parts, on_upgrade) = take_upgrade(req);
    let upstream = match proxy::upgrade_request(&parts.method, &parts.headers, &path) {
        Ok(r) => r,
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, &e),
    };
    let conn = match kubelet
        .config
        .pod_network
        .connect(addr, Duration::from_secs(30))
        .await
    {
        Ok(c) => c,
        Err(e) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("error dialing backend: dial tcp {addr}: {e}"),
            )
        }
    };
    let _ = conn.set_nodelay(true);
    match proxy::send_on(Box::new(conn), &addr.to_string(), upstream).await {
        Ok(resp) => proxy::finish_upgrade(resp, on_upgrade),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    }
}

/// `/exec/<ns>/<pod>/<container>` and `/attach/...`.
pub async fn exec_or_attach(
    kubelet: &Kubelet,
    pod: Option<PodView>,
    container: &str,
    query: &[(String, String)],
    attach: bool,
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let opts = match stream_options(query) {
        Ok(o) => o,
        Err(e) => return text(StatusCode::BAD_REQUEST, &e),
    };
    let Some(pod) = pod else {
        return text(StatusCode::NOT_FOUND, "pod does not exist");
    };
    // Only a running container can be exec'ed into or attached to (upstream `findContainer` looks at
    // running pods only).
    let found = kubelet
        .runtime
        .find_container(&pod.namespace, &pod.name, container)
        .await;
    let id = match found {
        Ok(Some(c)) if c.state == api::ContainerState::ContainerRunning as i32 => c.id,
        Ok(_) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!("container not found ({container:?})"),
            )
        }
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    let mut runtime = kubelet.runtime.runtime.clone();
    let url = if attach {
        runtime
            .attach(api::AttachRequest {
                container_id: id,
                stdin: opts.stdin,
                tty: opts.tty,
                stdout: opts.stdout,
                stderr: opts.stderr,
            })
            .await
            .map(|r| r.into_inner().url)
    } else {
        let cmd: Vec<String> = query
            .iter()
            .filter(|(k, _)| k == "command")
            .map(|(_, v)| v.clone())
            .collect();
        runtime
            .exec(api::ExecRequest {
                container_id: id,
                cmd,
                tty: opts.tty,
                stdin: opts.stdin,
                stdout: opts.stdout,
                stderr: opts.stderr,
            })
            .await
            .map(|r| r.into_inner().url)
    };
    match url {
        Ok(url) => proxy_stream(kubelet, &url, req).await,
        Err(status) => cri_error(&status),
    }
}

/// The ports of a port-forward request (upstream `NewV4Options`): a WebSocket client names them in
/// `port`; SPDY clients name them per stream instead.
pub fn forward_ports(query: &[(String, String)], websocket: bool) -> Result<Vec<i32>, String> {
    let values: Vec<&str> = query
        .iter()
        .filter(|(k, _)| k == "port")
        .flat_map(|(_, v)| v.split(','))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .collect();
    if websocket && values.is_empty() {
        return Err("query parameter \"port\" is required".into());
    }
    values
        .iter()
        .map(|v| match v.parse::<u16>() {
            Ok(p) if p > 0 => Ok(i32::from(p)),
            _ => Err(format!("unable to parse {v:?} as a port")),
        })
        .collect()
}

/// `/portForward/<ns>/<pod>`.
pub async fn port_forward(
    kubelet: &Kubelet,
    pod: Option<PodView>,
    query: &[(String, String)],
    req: Request<Incoming>,
) -> Response<ProxyBody> {
    let websocket = httpstream::wsstream::is_websocket_request(req.headers());
    let ports = match forward_ports(query, websocket) {
        Ok(p) => p,
        Err(e) => return text(StatusCode::BAD_REQUEST, &e),
    };
    let Some(pod) = pod else {
        return text(StatusCode::NOT_FOUND, "pod does not exist");
    };
    let sandbox = kubelet
        .runtime
        .find_pod_sandbox(&pod.namespace, &pod.name)
        .await;
    let id = match sandbox {
        Ok(Some(s)) if s.state == api::PodSandboxState::SandboxReady as i32 => s.id,
        Ok(_) => {
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                &format!(
                    "failed to find sandboxID for pod {}_{}({})",
                    pod.name, pod.namespace, pod.uid
                ),
            )
        }
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    };
    let resp = kubelet
        .runtime
        .runtime
        .clone()
        .port_forward(api::PortForwardRequest {
            pod_sandbox_id: id,
            port: ports,
        })
        .await;
    match resp {
        Ok(r) => proxy_stream(kubelet, &r.into_inner().url, req).await,
        Err(status) => cri_error(&status),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn options_as_upstream_reads_them() {
        let o = stream_options(&q(&[("stdin", "1"), ("stderr", "1"), ("tty", "1")])).unwrap();
        assert_eq!(
            o,
            StreamOptions {
                stdin: true,
                stdout: false,
                stderr: false,
                tty: true
            }
        );
        assert_eq!(
            stream_options(&q(&[("stdout", "true")])).unwrap_err(),
            "you must specify at least 1 of stdin, stdout, stderr"
        );
    }

    #[test]
    fn port_forward_ports() {
        assert_eq!(
            forward_ports(&q(&[("port", "80,8080"), ("port", "443")]), true).unwrap(),
            [80, 8080, 443]
        );
        assert!(forward_ports(&[], false).unwrap().is_empty());
        assert!(forward_ports(&[], true).is_err());
        assert!(forward_ports(&q(&[("port", "http")]), false).is_err());
        assert!(forward_ports(&q(&[("port", "0")]), false).is_err());
    }
}
