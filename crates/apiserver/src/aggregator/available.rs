//! The availability of remote APIServices (upstream's `AvailableConditionController` in
//! `controllers/status/remote`): the Service must exist, a ClusterIP Service must have the port and
//! a ready endpoint for it in its EndpointSlices, and a GET of `/apis/<group>/<version>` at the
//! resolved address must answer 2xx within 5 s (five tries at once, one success is enough). The
//! outcome is the `Available` condition: True `Passed`, else False `ServiceNotFound`,
//! `ServicePortError`, `EndpointsNotFound`, `MissingEndpoints` or `FailedDiscoveryCheck` with
//! upstream's messages. An APIService is checked when it, its Service or the Service's
//! EndpointSlices change, and every 30 s. The resource list a passed check read is kept for
//! discovery (upstream's discovery manager fetches it separately).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use super::Remote;
use crate::objects;
use crate::service_resolver as resolve;
use crate::watch_cache::{self, EventType};
use crate::ApiServer;

/// Upstream's resync period of the controller.
const RESYNC: Duration = Duration::from_secs(30);
/// The discovery check's client timeout, and its tries.
const CHECK_TIMEOUT: Duration = Duration::from_secs(5);
const ATTEMPTS: usize = 5;
/// At most this many APIServices checked at once.
const CONCURRENT_CHECKS: usize = 8;

/// One `Available` condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Outcome {
    pub available: bool,
    pub reason: &'static str,
    pub message: String,
}

impl Outcome {
    fn unavailable(reason: &'static str, message: String) -> Outcome {
        Outcome {
            available: false,
            reason,
            message,
        }
    }
}

/// APIService names waiting for a check.
#[derive(Default)]
struct Queue {
    names: Mutex<BTreeSet<String>>,
    wake: tokio::sync::Notify,
}

impl Queue {
    fn add(&self, name: &str) {
        self.names
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(name.to_string());
        self.wake.notify_one();
    }

    fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.names.lock().unwrap_or_else(|e| e.into_inner()))
            .into_iter()
            .collect()
    }
}

fn decode(event: &watch_cache::CacheEvent) -> Option<Value> {
    serde_json::from_slice(&event.object.json).ok()
}

fn storage(api: &ApiServer, group: &str, plural: &str) -> Arc<watch_cache::WatchCache> {
    let storage = api
        .registry
        .get(group, "v1", plural)
        .map(|r| r.storage.clone())
        .unwrap_or_else(|| plural.to_string());
    api.caches.ensure(&storage, group, plural)
}

/// Follows APIServices, Services and EndpointSlices and checks remote APIServices, until the server
/// stops.
pub async fn run(api: Arc<ApiServer>) {
    let queue = Arc::new(Queue::default());
    {
        let (a, q) = (api.clone(), queue.clone());
        let cache = storage(&api, "apiregistration.k8s.io", "apiservices");
        watch_cache::follow(
            &api.caches,
            cache,
            || {},
            move |event, kind| {
                let Some(obj) = decode(event) else { return };
                let name = objects::name(&obj).to_string();
                let remote = (kind != EventType::Deleted)
                    .then(|| Remote::from_apiservice(&obj))
                    .flatten();
                let before = a.aggregator.remote(
                    remote.as_ref().map_or("", |r| r.group.as_str()),
                    remote.as_ref().map_or("", |r| r.version.as_str()),
                );
                // A status write of ours changes only `available`: no new check for it.
                let recheck = match (&before, &remote) {
                    (Some(b), Some(r)) => {
                        Remote {
                            available: b.available,
                            ..r.clone()
                        } != **b
                    }
                    (_, Some(_)) => true,
                    (_, None) => false,
                };
                a.aggregator.set_remote(&name, remote);
                if recheck {
                    q.add(&name);
                }
            },
        );
    }
    for (group, plural) in [("", "services"), ("discovery.k8s.io", "endpointslices")] {
        let (a, q) = (api.clone(), queue.clone());
        let cache = storage(&api, group, plural);
        watch_cache::follow(
            &api.caches,
            cache,
            || {},
            move |event, _| {
                let Some(obj) = decode(event) else { return };
                let namespace = objects::namespace(&obj);
                let service = if plural == "services" {
                    objects::name(&obj)
                } else {
                    obj.pointer("/metadata/labels/kubernetes.io~1service-name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                };
                for r in a.aggregator.remotes() {
                    if r.namespace == namespace && r.service == service {
                        q.add(&r.name);
                    }
                }
            },
        );
    }
    let resync = {
        let (a, q) = (api.clone(), queue.clone());
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(RESYNC).await;
                for r in a.aggregator.remotes() {
                    q.add(&r.name);
                }
            }
        })
    };
    let limit = Arc::new(tokio::sync::Semaphore::new(CONCURRENT_CHECKS));
    loop {
        queue.wake.notified().await;
        for name in queue.take() {
            let Ok(permit) = limit.clone().acquire_owned().await else {
                break;
            };
            let api = api.clone();
            tokio::spawn(async move {
                sync(&api, &name).await;
                drop(permit);
            });
        }
        if api.health.is_shutting_down() {
            resync.abort();
            return;
        }
    }
}

/// Checks the APIService `name` and writes its condition when it changed.
async fn sync(api: &Arc<ApiServer>, name: &str) {
    let Some(remote) = api
        .aggregator
        .remotes()
        .into_iter()
        .find(|r| r.name == name)
    else {
        return;
    };
    let (outcome, resources) = check(api, &remote).await;
    if outcome.available {
        api.aggregator.set_resources(name, resources);
        let spec = fetch_openapi(api, &remote).await;
        api.aggregator.set_openapi(name, spec);
    }
    let cache = storage(api, "apiregistration.k8s.io", "apiservices");
    let key = format!("/apiservices/{name}");
    let Some(current) = cache
        .get(&key)
        .and_then(|o| serde_json::from_slice::<Value>(&o.json).ok())
    else {
        return;
    };
    let status = with_condition(&current, &outcome);
    if current["status"] == status {
        return;
    }
    if available_of(&current) != Some(outcome.available) {
        tracing::info!(apiservice = %name, available = outcome.available, reason = outcome.reason, message = %outcome.message, "changing APIService availability");
    }
    let mut updated = current.clone();
    updated["status"] = status;
    crate::internal::replace_if_unchanged(api, &key, &updated).await;
}

fn available_of(obj: &Value) -> Option<bool> {
    obj.pointer("/status/conditions")
        .and_then(Value::as_array)?
        .iter()
        .find(|c| c["type"] == "Available")
        .map(|c| c["status"] == "True")
}

/// The APIService's status with its `Available` condition set to `outcome`; the transition time is
/// kept while the status stays the same (upstream `SetAPIServiceCondition`).
pub fn with_condition(current: &Value, outcome: &Outcome) -> Value {
    let mut status = current.get("status").cloned().unwrap_or_else(|| json!({}));
    let status_text = if outcome.available { "True" } else { "False" };
    let mut conditions: Vec<Value> = status
        .get("conditions")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let since = conditions
        .iter()
        .find(|c| c["type"] == "Available" && c["status"] == status_text)
        .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_string))
        .unwrap_or_else(objects::now_rfc3339);
    let condition = json!({
        "type": "Available",
        "status": status_text,
        "lastTransitionTime": since,
        "reason": outcome.reason,
        "message": outcome.message,
    });
    match conditions.iter_mut().find(|c| c["type"] == "Available") {
        Some(c) => *c = condition,
        None => conditions.push(condition),
    }
    status["conditions"] = Value::Array(conditions);
    status
}

/// The checks of one APIService, and the resource list its discovery answered with.
pub async fn check(api: &Arc<ApiServer>, remote: &Remote) -> (Outcome, Option<Value>) {
    let (ns, name) = (&remote.namespace, &remote.service);
    let Some(svc) = resolve::service(api, ns, name) else {
        let message = format!("service/{name} in {ns:?} is not present");
        return (Outcome::unavailable("ServiceNotFound", message), None);
    };
    if resolve::service_type(&svc) == "ClusterIP" {
        let Some(port_name) = resolve::port_name(&svc, remote.port) else {
            let message = format!(
                "service/{name} in {ns:?} is not listening on port {}",
                remote.port
            );
            return (Outcome::unavailable("ServicePortError", message), None);
        };
        let slices = resolve::endpoint_slices(api, ns, name);
        if slices.is_empty() {
            let message = format!("cannot find endpointslices for service/{name} in {ns:?}");
            return (Outcome::unavailable("EndpointsNotFound", message), None);
        }
        if resolve::ready_addresses(&slices, &port_name).is_empty() {
            let message = format!(
                "endpointslices for service/{name} in {ns:?} have no addresses with port name {port_name:?}"
            );
            return (Outcome::unavailable("MissingEndpoints", message), None);
        }
    }
    let path = format!("/apis/{}/{}", remote.group, remote.version);
    let attempts = (0..ATTEMPTS).map(|_| {
        let path = path.clone();
        Box::pin(async move { discovery_attempt(api, remote, &path).await })
    });
    match futures::future::select_ok(attempts).await {
        Ok((body, _)) => {
            let list = serde_json::from_slice::<Value>(&body)
                .ok()
                .filter(|l| l.get("resources").is_some_and(Value::is_array));
            let outcome = Outcome {
                available: true,
                reason: "Passed",
                message: "all checks passed".into(),
            };
            (outcome, list)
        }
        Err(message) => (Outcome::unavailable("FailedDiscoveryCheck", message), None),
    }
}

/// The extension server's OpenAPI v3 document of the group version, if it serves one (upstream
/// reads its `/openapi/v3` index first; the path is the same for every server built on
/// k8s.io/apiserver).
async fn fetch_openapi(
    api: &Arc<ApiServer>,
    remote: &Remote,
) -> Option<super::openapi::RemoteSpec> {
    let at = resolve::resolve(api, &remote.namespace, &remote.service, remote.port).ok()?;
    let path = format!("/openapi/v3/apis/{}/{}", remote.group, remote.version);
    let get = super::proxy::get(api, remote, &at, &path, true);
    match tokio::time::timeout(CHECK_TIMEOUT, get).await {
        Ok(Ok((status, body))) if status.is_success() => super::openapi::RemoteSpec::new(body),
        _ => None,
    }
}

/// One try: resolve (each try may pick another endpoint), GET, 2xx wanted.
async fn discovery_attempt(
    api: &Arc<ApiServer>,
    remote: &Remote,
    path: &str,
) -> Result<bytes::Bytes, String> {
    let at = resolve::resolve(api, &remote.namespace, &remote.service, remote.port)
        .map_err(|e| e.to_string())?;
    let url = super::proxy::url(&at, path);
    // Upstream's check does not verify the server (its proxying does).
    let get = super::proxy::get(api, remote, &at, path, false);
    match tokio::time::timeout(CHECK_TIMEOUT, get).await {
        Err(_) => Err(format!("timed out waiting for {url}")),
        Ok(Err(e)) => Err(format!("failing or missing response from {url}: {e}")),
        Ok(Ok((status, _))) if !status.is_success() => Err(format!(
            "failing or missing response from {url}: bad status from {url}: {}",
            status.as_u16()
        )),
        Ok(Ok((_, body))) => Ok(body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_condition_keeps_its_time_while_its_status_stays() {
        let passed = Outcome {
            available: true,
            reason: "Passed",
            message: "all checks passed".into(),
        };
        let first = with_condition(&json!({}), &passed);
        let c = &first["conditions"][0];
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str()),
            (Some("True"), Some("Passed"))
        );
        let mut obj = json!({"status": first.clone()});
        obj["status"]["conditions"][0]["lastTransitionTime"] = "2020-01-01T00:00:00Z".into();
        let again = with_condition(&obj, &passed);
        assert_eq!(
            again["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        let failed = Outcome::unavailable("MissingEndpoints", "none".into());
        let down = with_condition(&obj, &failed);
        assert_eq!(down["conditions"].as_array().unwrap().len(), 1);
        assert_eq!(down["conditions"][0]["status"], "False");
        assert_ne!(
            down["conditions"][0]["lastTransitionTime"],
            "2020-01-01T00:00:00Z"
        );
        assert_eq!(available_of(&json!({"status": down})), Some(false));
    }
}
