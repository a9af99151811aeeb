//! `v1` ComponentStatuses (upstream `pkg/registry/core/componentstatus`): never stored; each GET or
//! LIST probes the components and storage at that moment. Deprecated upstream since 1.19 but still
//! served, so `kubectl get componentstatuses` and clients listing every resource find it.
//!
//! What is probed: storage (`etcd-0`, whatever the backend, so tools looking for that name find it),
//! and the scheduler and controller manager. Processes embedding the API server with those components
//! (`rkube server`) register in-process probes ([`Components::register`]); otherwise the components
//! are probed where upstream probes them, `https://127.0.0.1:10259/healthz` (scheduler) and
//! `https://127.0.0.1:10257/healthz` (controller manager), without verifying their certificates.
//!
//! Differences: upstream answers in random order (one goroutine per probe); ours are sorted by name.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use apimachinery::status::ApiError;
use bytes::Bytes;
use http::{Response, StatusCode};
use serde_json::{json, Value};

use super::Ctx;
use crate::response::Body;

/// A component's health right now: `Ok(message)` or `Err(error)`.
pub type Probe = Arc<dyn Fn() -> Result<String, String> + Send + Sync>;

/// The components probed besides storage.
#[derive(Default)]
pub struct Components {
    local: RwLock<BTreeMap<String, Probe>>,
}

impl Components {
    /// Probes `name` in-process instead of at upstream's address.
    pub fn register(&self, name: &str, probe: Probe) {
        self.local
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string(), probe);
    }

    fn local(&self, name: &str) -> Option<Probe> {
        self.local
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .cloned()
    }
}

/// The components upstream validates, with the port of their secure `/healthz`.
const REMOTE: &[(&str, u16)] = &[("controller-manager", 10257), ("scheduler", 10259)];
const STORAGE: &str = "etcd-0";
const PROBE_TIMEOUT: Duration = Duration::from_secs(20);

fn names() -> Vec<&'static str> {
    let mut names: Vec<&str> = REMOTE.iter().map(|(n, _)| *n).collect();
    names.push(STORAGE);
    names.sort_unstable();
    names
}

/// One ComponentStatus as upstream's `getComponentStatus` builds it.
fn status_object(name: &str, result: Result<String, String>) -> Value {
    let condition = match result {
        Ok(message) => json!({"type": "Healthy", "status": "True", "message": message}),
        Err(error) => json!({"type": "Healthy", "status": "False", "error": error}),
    };
    json!({
        "kind": "ComponentStatus",
        "apiVersion": "v1",
        "metadata": {"name": name},
        "conditions": [condition],
    })
}

async fn probe(ctx: &Ctx<'_>, name: &str) -> Result<String, String> {
    if name == STORAGE {
        return match ctx.api.store.current_revision().await {
            Ok(_) => Ok("ok".into()),
            Err(e) => Err(e.to_string()),
        };
    }
    if let Some(probe) = ctx.api.components.local(name) {
        return probe();
    }
    let port = REMOTE
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, p)| *p)
        .unwrap_or_default();
    probe_healthz(port).await
}

/// `GET https://127.0.0.1:<port>/healthz`: healthy on 200, with the body as message.
async fn probe_healthz(port: u16) -> Result<String, String> {
    use http_body_util::BodyExt;
    let url = format!("https://127.0.0.1:{port}/healthz");
    let tls = httpstream::proxy::client_tls(None, None).map_err(|e| e.to_string())?;
    let backend = httpstream::proxy::Backend {
        scheme: httpstream::proxy::Scheme::Https,
        host: "127.0.0.1".into(),
        port,
        tls: Some(Arc::new(tls)),
        netns: None,
    };
    let req = http::Request::get("/healthz")
        .body(http_body_util::Empty::<Bytes>::new())
        .map_err(|e| e.to_string())?;
    let attempt = async {
        let resp = backend
            .send(req)
            .await
            .map_err(|e| format!("Get {url:?}: {e}"))?;
        let code = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        let text = String::from_utf8_lossy(&body).into_owned();
        if code == StatusCode::OK {
            Ok(text)
        } else {
            Err(format!(
                "unhealthy: HTTP probe failed with statuscode: {}",
                code.as_u16()
            ))
        }
    };
    tokio::time::timeout(PROBE_TIMEOUT, attempt)
        .await
        .unwrap_or_else(|_| Err(format!("Get {url:?}: context deadline exceeded")))
}

/// `GET /api/v1/componentstatuses/<name>`.
pub async fn get(ctx: &Ctx<'_>) -> Result<Response<Body>, ApiError> {
    let name = ctx.name();
    if !names().contains(&name) {
        // Upstream returns a plain error here, which becomes an internal error.
        return Err(ApiError::internal(format!("Component not found: {name}")));
    }
    let obj = status_object(name, probe(ctx, name).await);
    let json = serde_json::to_vec(&obj).map_err(ApiError::internal)?;
    ctx.object_response(StatusCode::OK, json.into()).await
}

/// `GET /api/v1/componentstatuses`: every component, probed concurrently; label and field
/// selectors apply as to any object (nothing has labels, so a label selector matches none).
pub async fn list(ctx: &Ctx<'_>) -> Result<Response<Body>, ApiError> {
    let filter = super::list::filter_of(ctx)?;
    let probes = names()
        .into_iter()
        .map(|name| async move { status_object(name, probe(ctx, name).await) });
    let items: Vec<Value> = futures::future::join_all(probes)
        .await
        .into_iter()
        .filter(|obj| filter.matches(&crate::filter::Attrs::of("", "componentstatuses", obj)))
        .collect();
    let encoded: Vec<Bytes> = items
        .iter()
        .map(|i| serde_json::to_vec(i).map(Bytes::from))
        .collect::<Result<_, _>>()
        .map_err(ApiError::internal)?;
    match ctx.representation()? {
        crate::response::Representation::Table { include_object } => {
            let t = super::table::table(&ctx.resource, None, &items, include_object, "", None);
            Ok(crate::response::json_response(StatusCode::OK, &t))
        }
        _ => {
            let mut list: Value = serde_json::from_slice(&super::list::list_json(
                "ComponentStatus",
                "v1",
                0,
                None,
                &encoded,
            ))
            .map_err(ApiError::internal)?;
            // Not stored, so there is no revision to report.
            list["metadata"] = json!({});
            Ok(crate::response::json_response(StatusCode::OK, &list))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn objects_as_upstream_builds_them() {
        assert_eq!(names(), ["controller-manager", "etcd-0", "scheduler"]);
        let ok = status_object("etcd-0", Ok("ok".into()));
        assert_eq!(
            ok["conditions"],
            json!([{"type": "Healthy", "status": "True", "message": "ok"}])
        );
        let bad = status_object("scheduler", Err("connection refused".into()));
        assert_eq!(bad["conditions"][0]["status"], "False");
        assert_eq!(bad["conditions"][0]["error"], "connection refused");
        assert!(bad["conditions"][0].get("message").is_none());
    }

    #[tokio::test]
    async fn an_absent_component_is_unhealthy_with_the_dial_error() {
        // Bind and drop to find a port nobody listens on.
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let err = probe_healthz(port).await.unwrap_err();
        assert!(
            err.starts_with(&format!("Get \"https://127.0.0.1:{port}/healthz\": ")),
            "{err}"
        );
        assert!(err.contains(&format!("dial tcp 127.0.0.1:{port}")), "{err}");
    }
}
