//! The webhooks of one configuration kind, as the watch cache holds them (upstream
//! `configuration.NewMutatingWebhookConfigurationManager` and its validating twin): compiled once
//! per set of resourceVersions (rules split, selectors parsed, TLS settings built), in upstream's
//! order (configurations by name, webhooks in their order), so a request costs one cache listing
//! and no decoding.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use apimachinery::labels::{selector_from_label_selector, Selector};
use serde_json::Value;

use super::client::{Endpoint, TlsCache};
use super::conditions::Condition;
use super::matching::Rule;
use super::review::ReviewVersion;
use crate::ApiServer;

/// `timeoutSeconds` when unset, and its bounds (upstream's default and validation range).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);
const MAX_TIMEOUT_SECONDS: u64 = 30;

/// One webhook, ready to match and call.
pub struct Hook {
    pub name: String,
    /// The configuration's name (audit annotations).
    pub configuration: String,
    /// Identifies the webhook within the request's reinvocation bookkeeping (upstream's
    /// `<configuration>/<webhook>/<index>`).
    pub uid: String,
    pub rules: Vec<Rule>,
    /// `matchPolicy: Equivalent` (the default).
    pub equivalent: bool,
    /// A selector upstream's validation would have refused is an internal error when used.
    pub namespace_selector: Result<Selector, String>,
    pub object_selector: Result<Selector, String>,
    pub match_conditions: Vec<Condition>,
    /// `failurePolicy: Ignore` (default Fail).
    pub fail_open: bool,
    pub side_effects: Option<String>,
    pub timeout: Duration,
    /// The first AdmissionReview version of `admissionReviewVersions` we speak.
    pub review_version: Option<ReviewVersion>,
    /// Where and how to call it; the error is upstream's "could not get REST client" reason.
    pub endpoint: Result<Endpoint, String>,
    /// `reinvocationPolicy: IfNeeded` (mutating webhooks only).
    pub reinvoke: bool,
}

impl std::fmt::Debug for Hook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hook")
            .field("name", &self.name)
            .field("configuration", &self.configuration)
            .finish_non_exhaustive()
    }
}

/// The compiled webhooks of one kind, and the revisions they were compiled from.
#[derive(Default)]
struct Compiled {
    revisions: Vec<i64>,
    hooks: Arc<Vec<Hook>>,
}

/// The webhooks of the configurations stored under `storage`.
pub struct Source {
    storage: &'static str,
    compiled: Mutex<Compiled>,
    tls: TlsCache,
}

impl Source {
    pub fn new(storage: &'static str) -> Source {
        Source {
            storage,
            compiled: Mutex::new(Compiled::default()),
            tls: TlsCache::default(),
        }
    }

    /// The current webhooks: recompiled when any configuration was added, changed or removed
    /// since the last call (every object version has its own revision, so the list of revisions
    /// in key order names the set exactly).
    pub fn hooks(&self, api: &ApiServer) -> Arc<Vec<Hook>> {
        let Some(cache) = api.caches.get(self.storage) else {
            return Arc::default();
        };
        let objects = cache.list(&format!("/{}/", self.storage), &Default::default());
        let mut compiled = self.compiled.lock().unwrap_or_else(|e| e.into_inner());
        if compiled.revisions.len() == objects.len()
            && compiled
                .revisions
                .iter()
                .zip(&objects)
                .all(|(rv, o)| *rv == o.rv)
        {
            return compiled.hooks.clone();
        }
        let configs: Vec<Value> = objects
            .iter()
            .filter_map(|o| serde_json::from_slice(&o.json).ok())
            .collect();
        let hooks = self.compile(&configs);
        *compiled = Compiled {
            revisions: objects.iter().map(|o| o.rv).collect(),
            hooks: Arc::new(hooks),
        };
        compiled.hooks.clone()
    }

    /// Compiles configurations given in name order.
    pub fn compile(&self, configs: &[Value]) -> Vec<Hook> {
        let mut hooks = Vec::new();
        let mut tls_in_use = HashSet::new();
        for config in configs {
            let configuration = crate::objects::name(config).to_string();
            let webhooks = config
                .get("webhooks")
                .and_then(Value::as_array)
                .map(Vec::as_slice)
                .unwrap_or_default();
            for (index, w) in webhooks.iter().enumerate() {
                hooks.push(compile_hook(
                    &configuration,
                    index,
                    w,
                    &self.tls,
                    &mut tls_in_use,
                ));
            }
        }
        // TLS settings of webhooks that are gone are dropped (their pooled connections with them).
        self.tls.retain(&tls_in_use);
        hooks
    }
}

fn compile_hook(
    configuration: &str,
    index: usize,
    w: &Value,
    tls: &TlsCache,
    tls_in_use: &mut HashSet<Vec<u8>>,
) -> Hook {
    let name = w
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let str_of = |field: &str| w.get(field).and_then(Value::as_str);
    let selector = |field: &str| match w.get(field) {
        // Defaulted to `{}` on write; an absent one selects everything as that default would.
        None | Some(Value::Null) => Ok(Selector::everything()),
        Some(v) => selector_from_label_selector(v),
    };
    let timeout = w
        .get("timeoutSeconds")
        .and_then(Value::as_u64)
        .map_or(DEFAULT_TIMEOUT, |s| {
            Duration::from_secs(s.clamp(1, MAX_TIMEOUT_SECONDS))
        });
    let review_version = w
        .get("admissionReviewVersions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .find_map(ReviewVersion::parse);
    let endpoint = super::client::endpoint(w.get("clientConfig"), tls, tls_in_use);
    Hook {
        uid: format!("{configuration}/{name}/{index}"),
        configuration: configuration.to_string(),
        rules: w
            .get("rules")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(Rule::from_json)
            .collect(),
        equivalent: str_of("matchPolicy") != Some("Exact"),
        namespace_selector: selector("namespaceSelector"),
        object_selector: selector("objectSelector"),
        match_conditions: w
            .get("matchConditions")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .map(|c| {
                let field = |f: &str| c.get(f).and_then(Value::as_str).unwrap_or("");
                Condition::compile(field("name"), field("expression"))
            })
            .collect(),
        fail_open: str_of("failurePolicy") == Some("Ignore"),
        side_effects: str_of("sideEffects").map(str::to_string),
        timeout,
        review_version,
        endpoint,
        reinvoke: str_of("reinvocationPolicy") == Some("IfNeeded"),
        name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::webhook::matching::Scope;
    use serde_json::json;

    #[test]
    fn webhooks_compile_in_order_with_upstreams_defaults() {
        let source = Source::new("mutatingwebhookconfigurations");
        let configs = vec![
            json!({"metadata": {"name": "a"}, "webhooks": [
                {"name": "one.example.com",
                 "clientConfig": {"url": "https://127.0.0.1:8443/m"},
                 "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                            "resources": ["pods/*"], "scope": "Namespaced"}],
                 "admissionReviewVersions": ["v2", "v1beta1", "v1"],
                 "sideEffects": "None", "failurePolicy": "Ignore", "matchPolicy": "Exact",
                 "timeoutSeconds": 99, "reinvocationPolicy": "IfNeeded",
                 "matchConditions": [{"name": "c", "expression": "true"}]},
                {"name": "two.example.com", "clientConfig": {}}
            ]}),
            json!({"metadata": {"name": "b"}, "webhooks": [
                {"name": "three.example.com",
                 "objectSelector": {"matchExpressions": [{"key": "a", "operator": "Bogus"}]},
                 "clientConfig": {"service": {"namespace": "ns", "name": "svc"}},
                 "admissionReviewVersions": ["v1"]}
            ]}),
        ];
        let hooks = source.compile(&configs);
        let names: Vec<&str> = hooks.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(
            names,
            ["one.example.com", "two.example.com", "three.example.com"]
        );
        let one = &hooks[0];
        assert_eq!(one.uid, "a/one.example.com/0");
        assert_eq!(one.rules[0].resources, [("pods".into(), "*".into())]);
        assert_eq!(one.rules[0].scope, Scope::Namespaced);
        assert_eq!(one.review_version, Some(ReviewVersion::V1beta1));
        assert!(one.fail_open && !one.equivalent && one.reinvoke);
        assert_eq!(one.timeout, Duration::from_secs(30), "clamped to 30");
        assert_eq!(one.match_conditions.len(), 1);
        assert!(one.endpoint.is_ok());

        let two = &hooks[1];
        assert!(!two.fail_open && two.equivalent && !two.reinvoke);
        assert_eq!(two.timeout, DEFAULT_TIMEOUT);
        assert_eq!(two.review_version, None);
        assert!(two.endpoint.is_err());
        assert!(two.namespace_selector.as_ref().unwrap().is_empty());

        let three = &hooks[2];
        assert_eq!(three.uid, "b/three.example.com/0");
        assert!(three.object_selector.is_err());
        assert!(three.endpoint.is_ok());
    }
}
