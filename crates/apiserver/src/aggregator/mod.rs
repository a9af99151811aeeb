//! API aggregation (upstream `kube-aggregator`): APIServices with a `spec.service` name an extension
//! API server that serves their group version. Requests under `/apis/<group>/<version>` of such an
//! APIService are authenticated, authorized and flow-controlled here, then passed to the service
//! ([`proxy`]) with the user in `X-Remote-*` headers and rkube's front-proxy client certificate
//! ([`frontproxy`]); [`available`] keeps their `Available` condition from periodic discovery checks
//! and keeps the remote resource lists that [`discovery`] merges into `/apis`.
//!
//! The table of remote APIServices is kept from the APIService watch cache (see [`available::run`]),
//! so routing a request costs one map lookup.

pub mod available;
pub mod discovery;
pub mod frontproxy;
pub mod openapi;
pub mod proxy;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use base64::Engine as _;
use serde_json::Value;

pub use frontproxy::FrontProxy;

/// Upstream's default `spec.service.port`.
const DEFAULT_PORT: i64 = 443;

/// What routing and checking need of an APIService backed by a Service.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Remote {
    /// The APIService's name, `<version>.<group>`.
    pub name: String,
    pub group: String,
    pub version: String,
    pub namespace: String,
    pub service: String,
    pub port: u16,
    /// PEM of `spec.caBundle` (empty: none given).
    pub ca_bundle: Vec<u8>,
    pub insecure_skip_tls_verify: bool,
    pub group_priority_minimum: i64,
    pub version_priority: i64,
    /// Its `Available` condition is True (upstream answers 503 for the others).
    pub available: bool,
}

impl Remote {
    /// The remote half of an APIService; None for a local one (no `spec.service`) or one whose
    /// fields cannot be used (validation keeps those out of storage).
    pub fn from_apiservice(obj: &Value) -> Option<Remote> {
        let spec = obj.get("spec")?;
        let service = spec.get("service").filter(|s| !s.is_null())?;
        let text = |v: Option<&Value>| v.and_then(Value::as_str).unwrap_or("").to_string();
        let port = service
            .get("port")
            .and_then(Value::as_i64)
            .unwrap_or(DEFAULT_PORT);
        let ca_bundle = match spec.get("caBundle").and_then(Value::as_str) {
            Some(b64) if !b64.is_empty() => {
                base64::engine::general_purpose::STANDARD.decode(b64).ok()?
            }
            _ => Vec::new(),
        };
        let available = obj
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| c["type"] == "Available" && c["status"] == "True");
        Some(Remote {
            name: text(obj.pointer("/metadata/name")),
            group: text(spec.get("group")),
            version: text(spec.get("version")),
            namespace: text(service.get("namespace")),
            service: text(service.get("name")),
            port: u16::try_from(port).ok()?,
            ca_bundle,
            insecure_skip_tls_verify: spec
                .get("insecureSkipTLSVerify")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            group_priority_minimum: spec
                .get("groupPriorityMinimum")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            version_priority: spec
                .get("versionPriority")
                .and_then(Value::as_i64)
                .unwrap_or(0),
            available,
        })
    }

    /// The DNS name the extension server's certificate must carry (upstream verifies
    /// `<service>.<namespace>.svc` whatever address is dialed).
    pub fn server_name(&self) -> String {
        format!("{}.{}.svc", self.service, self.namespace)
    }
}

/// The aggregator's state: its client credentials, the remote APIServices by name, and the
/// resource lists fetched from them.
pub struct Aggregator {
    pub front_proxy: FrontProxy,
    remotes: RwLock<BTreeMap<String, Arc<Remote>>>,
    /// `APIResourceList` of each remote APIService, by APIService name, from its last passed check.
    resources: RwLock<BTreeMap<String, Value>>,
    /// The OpenAPI v3 document of each remote APIService that serves one, likewise.
    openapi: RwLock<BTreeMap<String, openapi::RemoteSpec>>,
}

impl Aggregator {
    pub fn new(front_proxy: FrontProxy) -> Aggregator {
        Aggregator {
            front_proxy,
            remotes: RwLock::default(),
            resources: RwLock::default(),
            openapi: RwLock::default(),
        }
    }

    /// The remote APIService serving `group`/`version`, if one does.
    pub fn remote(&self, group: &str, version: &str) -> Option<Arc<Remote>> {
        if group.is_empty() {
            // The core group is always local here (upstream lets `v1.` be delegated too).
            return None;
        }
        let remotes = self.remotes.read().unwrap_or_else(|e| e.into_inner());
        remotes.get(&format!("{version}.{group}")).cloned()
    }

    /// Every remote APIService.
    pub fn remotes(&self) -> Vec<Arc<Remote>> {
        let remotes = self.remotes.read().unwrap_or_else(|e| e.into_inner());
        remotes.values().cloned().collect()
    }

    /// Records an APIService as it now is (None: gone or local).
    pub(crate) fn set_remote(&self, name: &str, remote: Option<Remote>) {
        let mut remotes = self.remotes.write().unwrap_or_else(|e| e.into_inner());
        match remote {
            Some(r) => {
                remotes.insert(name.to_string(), Arc::new(r));
            }
            None => {
                remotes.remove(name);
                drop(remotes);
                self.set_resources(name, None);
                self.set_openapi(name, None);
            }
        }
    }

    pub(crate) fn set_resources(&self, name: &str, list: Option<Value>) {
        let mut resources = self.resources.write().unwrap_or_else(|e| e.into_inner());
        match list {
            Some(l) => {
                resources.insert(name.to_string(), l);
            }
            None => {
                resources.remove(name);
            }
        }
    }

    pub(crate) fn set_openapi(&self, name: &str, spec: Option<openapi::RemoteSpec>) {
        let mut specs = self.openapi.write().unwrap_or_else(|e| e.into_inner());
        match spec {
            Some(s) => {
                specs.insert(name.to_string(), s);
            }
            None => {
                specs.remove(name);
            }
        }
    }

    /// The fetched OpenAPI v3 document of the APIService `name`.
    pub fn openapi(&self, name: &str) -> Option<openapi::RemoteSpec> {
        let specs = self.openapi.read().unwrap_or_else(|e| e.into_inner());
        specs.get(name).cloned()
    }

    /// The fetched resource list of the APIService `name`.
    pub fn resources(&self, name: &str) -> Option<Value> {
        let resources = self.resources.read().unwrap_or_else(|e| e.into_inner());
        resources.get(name).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn remote_of_an_apiservice() {
        let local =
            json!({"metadata": {"name": "v1.apps"}, "spec": {"group": "apps", "version": "v1"}});
        assert_eq!(Remote::from_apiservice(&local), None);
        let obj = json!({
            "metadata": {"name": "v1alpha1.wardle.example.com"},
            "spec": {
                "group": "wardle.example.com", "version": "v1alpha1",
                "service": {"namespace": "wardle", "name": "api"},
                "caBundle": base64::engine::general_purpose::STANDARD.encode("PEM"),
                "groupPriorityMinimum": 1000, "versionPriority": 15,
            },
            "status": {"conditions": [{"type": "Available", "status": "True"}]},
        });
        let r = Remote::from_apiservice(&obj).unwrap();
        assert_eq!(r.port, 443);
        assert_eq!(r.ca_bundle, b"PEM");
        assert!(r.available && !r.insecure_skip_tls_verify);
        assert_eq!(r.server_name(), "api.wardle.svc");
        let agg = Aggregator::new(FrontProxy::for_tests());
        agg.set_remote(&r.name, Some(r.clone()));
        assert!(agg.remote("wardle.example.com", "v1alpha1").is_some());
        assert!(agg.remote("wardle.example.com", "v1").is_none());
        agg.set_resources(&r.name, Some(json!({})));
        agg.set_remote(&r.name, None);
        assert!(agg.resources(&r.name).is_none());
    }
}
