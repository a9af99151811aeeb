//! Parameter resources of admission policies (upstream `policy/generic` `CollectParams` and the
//! param informers of `policy_source.go`): a policy's `paramKind` names a resource; a binding's
//! `paramRef` picks objects of it by name or by label selector, in the request's namespace unless
//! it names one; the policy is evaluated once per object picked.
//!
//! Params are read from the watch cache (decoded once per object version, see [`Decoded`]); a
//! param named but not yet in the cache is looked up in storage, as upstream falls back to a live
//! GET for params created just before the request.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use apimachinery::labels::{selector_from_label_selector, Selector};
use apimachinery::resources::Snapshot;
use serde_json::Value;

/// The most params one binding evaluates a policy with (upstream has no bound; a selector over a
/// large resource would otherwise evaluate without end).
pub const MAX_PARAMS: usize = 1_000;

/// The resource a `paramKind` names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParamResource {
    pub api_version: String,
    pub kind: String,
    pub storage: String,
    pub namespaced: bool,
}

/// Resolves `spec.paramKind` against the served resources. The error is upstream's
/// configuration error text (its `%v` of a GroupVersionKind prints `{group version Kind}`).
pub fn resolve(registry: &Snapshot, param_kind: &Value) -> Result<ParamResource, String> {
    let api_version = param_kind
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or("");
    let kind = param_kind.get("kind").and_then(Value::as_str).unwrap_or("");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    registry
        .resources
        .values()
        .find(|r| r.group == group && r.version == version && r.kind == kind)
        .map(|r| ParamResource {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
            storage: r.storage.clone(),
            namespaced: r.namespaced,
        })
        .ok_or_else(|| {
            format!(
                "failed to find resource referenced by paramKind: '{{{group} {version} {kind}}}'"
            )
        })
}

/// A binding's `paramRef`, parsed.
#[derive(Clone, Debug)]
pub struct ParamRef {
    name: String,
    namespace: String,
    /// `Err` when the selector does not parse (a configuration error at use).
    selector: Option<Result<Selector, String>>,
    deny_when_missing: bool,
}

impl ParamRef {
    pub fn parse(v: &Value) -> ParamRef {
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        ParamRef {
            name: s("name"),
            namespace: s("namespace"),
            selector: v
                .get("selector")
                .filter(|s| !s.is_null())
                .map(selector_from_label_selector),
            deny_when_missing: s("parameterNotFoundAction") == "Deny",
        }
    }
}

impl ParamRef {
    /// `(namespace, name)` of the param this ref names, when it names one (`""` namespace for
    /// cluster-scoped params); the checks are [`collect`]'s.
    pub fn named<'a>(
        &'a self,
        kind: &ParamResource,
        request_namespace: &'a str,
    ) -> Option<(&'a str, &'a str)> {
        if self.name.is_empty() || self.selector.is_some() {
            return None;
        }
        let ns = match (kind.namespaced, self.namespace.is_empty()) {
            (false, _) => "",
            (true, true) => request_namespace,
            (true, false) => &self.namespace,
        };
        (!kind.namespaced || !ns.is_empty()).then_some((ns, self.name.as_str()))
    }
}

/// Where params are read from.
pub trait ParamStore {
    /// The object `name` (in `namespace` for namespaced resources).
    fn get(&self, res: &ParamResource, namespace: &str, name: &str) -> Option<Arc<Value>>;
    /// The objects the selector picks, of one namespace (`Some`) or of all (`None`).
    fn list(
        &self,
        res: &ParamResource,
        namespace: Option<&str>,
        selector: &Selector,
    ) -> Vec<Arc<Value>>;
}

/// Upstream `CollectParams`: the params to evaluate a policy with; `[None]` when the policy takes
/// none or the binding gives no `paramRef`; empty when none are found and the binding allows that.
pub fn collect(
    kind: Option<&ParamResource>,
    param_ref: Option<&ParamRef>,
    request_namespace: &str,
    store: &dyn ParamStore,
) -> Result<Vec<Option<Arc<Value>>>, String> {
    let (Some(kind), Some(pref)) = (kind, param_ref) else {
        return Ok(vec![None]);
    };
    let namespace = if kind.namespaced {
        let ns = if pref.namespace.is_empty() {
            request_namespace
        } else {
            &pref.namespace
        };
        if ns.is_empty() {
            return Err(
                "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources"
                    .into(),
            );
        }
        Some(ns)
    } else {
        if !pref.namespace.is_empty() {
            return Err(
                "paramRef.namespace must not be provided for a cluster-scoped `paramKind`".into(),
            );
        }
        None
    };
    let params: Vec<Arc<Value>> = match (&pref.name, &pref.selector) {
        (name, Some(_)) if !name.is_empty() => {
            return Err("paramRef.name and paramRef.selector are mutually exclusive".into())
        }
        (name, None) if !name.is_empty() => store
            .get(kind, namespace.unwrap_or(""), name)
            .into_iter()
            .collect(),
        (_, Some(Ok(selector))) => store.list(kind, namespace, selector),
        (_, Some(Err(e))) => return Err(e.clone()),
        _ => return Err("one of name or selector must be provided".into()),
    };
    if params.is_empty() && pref.deny_when_missing {
        return Err(
            "no params found for policy binding with `Deny` parameterNotFoundAction".into(),
        );
    }
    if params.len() > MAX_PARAMS {
        return Err(format!(
            "paramRef selects {} objects, more than the {MAX_PARAMS} one binding may use",
            params.len()
        ));
    }
    Ok(params.into_iter().map(Some).collect())
}

/// Decoded objects by key and revision, so that a param or namespace read on every request is
/// parsed once per version. Bounded: cleared when full.
#[derive(Default)]
pub struct Decoded {
    map: Mutex<HashMap<String, (i64, Arc<Value>)>>,
}

const MAX_DECODED: usize = 4_096;

impl Decoded {
    /// The object at `key` whose version `rv` has JSON `json`.
    pub fn get(&self, key: &str, rv: i64, json: &[u8]) -> Option<Arc<Value>> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((r, v)) = map.get(key) {
            if *r == rv {
                return Some(v.clone());
            }
        }
        let value: Arc<Value> = Arc::new(serde_json::from_slice(json).ok()?);
        if map.len() >= MAX_DECODED {
            map.clear();
        }
        map.insert(key.to_string(), (rv, value.clone()));
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Store(Vec<(String, Value)>);

    impl ParamStore for Store {
        fn get(&self, _res: &ParamResource, namespace: &str, name: &str) -> Option<Arc<Value>> {
            self.0
                .iter()
                .find(|(ns, o)| ns == namespace && o["metadata"]["name"] == name)
                .map(|(_, o)| Arc::new(o.clone()))
        }

        fn list(
            &self,
            _res: &ParamResource,
            namespace: Option<&str>,
            sel: &Selector,
        ) -> Vec<Arc<Value>> {
            self.0
                .iter()
                .filter(|(ns, o)| namespace.is_none_or(|n| n == ns) && sel.matches_object(o))
                .map(|(_, o)| Arc::new(o.clone()))
                .collect()
        }
    }

    fn store() -> Store {
        let cm = |ns: &str, name: &str, tier: &str| {
            (
                ns.to_string(),
                json!({"metadata": {"name": name, "namespace": ns, "labels": {"tier": tier}}}),
            )
        };
        Store(vec![
            cm("a", "limits", "gold"),
            cm("a", "other", "silver"),
            cm("b", "limits", "gold"),
        ])
    }

    fn configmaps() -> ParamResource {
        ParamResource {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            storage: "configmaps".into(),
            namespaced: true,
        }
    }

    fn names(params: &[Option<Arc<Value>>]) -> Vec<String> {
        params
            .iter()
            .map(|p| match p {
                Some(p) => format!(
                    "{}/{}",
                    p["metadata"]["namespace"].as_str().unwrap(),
                    p["metadata"]["name"].as_str().unwrap()
                ),
                None => "-".into(),
            })
            .collect()
    }

    #[test]
    fn param_kind_resolves_to_a_served_resource() {
        let registry = apimachinery::resources::Registry::with_builtin().snapshot();
        let r = resolve(&registry, &json!({"apiVersion": "v1", "kind": "ConfigMap"})).unwrap();
        assert_eq!((r.storage.as_str(), r.namespaced), ("configmaps", true));
        let r = resolve(
            &registry,
            &json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole"}),
        )
        .unwrap();
        assert!(!r.namespaced);
        let err = resolve(
            &registry,
            &json!({"apiVersion": "example.com/v1", "kind": "Limits"}),
        )
        .unwrap_err();
        assert_eq!(
            err,
            "failed to find resource referenced by paramKind: '{example.com v1 Limits}'"
        );
    }

    #[test]
    fn no_param_kind_or_no_param_ref_evaluates_once_without_params() {
        let s = store();
        assert_eq!(names(&collect(None, None, "a", &s).unwrap()), ["-"]);
        assert_eq!(
            names(&collect(Some(&configmaps()), None, "a", &s).unwrap()),
            ["-"]
        );
    }

    #[test]
    fn by_name_in_the_request_namespace_or_the_named_one() {
        let s = store();
        let r = ParamRef::parse(&json!({"name": "limits", "parameterNotFoundAction": "Deny"}));
        assert_eq!(
            names(&collect(Some(&configmaps()), Some(&r), "b", &s).unwrap()),
            ["b/limits"]
        );
        let r = ParamRef::parse(&json!({"name": "limits", "namespace": "a"}));
        assert_eq!(
            names(&collect(Some(&configmaps()), Some(&r), "b", &s).unwrap()),
            ["a/limits"]
        );
        let err = collect(Some(&configmaps()), Some(&r), "", &s);
        assert!(
            err.is_ok(),
            "an explicit namespace serves cluster-scoped requests"
        );
        let r = ParamRef::parse(&json!({"name": "limits"}));
        let err = collect(Some(&configmaps()), Some(&r), "", &s).unwrap_err();
        assert_eq!(err, "cannot use namespaced paramRef in policy binding that matches cluster-scoped resources");
    }

    #[test]
    fn not_found_allows_or_denies() {
        let s = store();
        let allow = ParamRef::parse(&json!({"name": "nope", "parameterNotFoundAction": "Allow"}));
        assert!(collect(Some(&configmaps()), Some(&allow), "a", &s)
            .unwrap()
            .is_empty());
        let deny = ParamRef::parse(&json!({"name": "nope", "parameterNotFoundAction": "Deny"}));
        let err = collect(Some(&configmaps()), Some(&deny), "a", &s).unwrap_err();
        assert_eq!(
            err,
            "no params found for policy binding with `Deny` parameterNotFoundAction"
        );
    }

    #[test]
    fn by_selector_one_evaluation_per_object() {
        let s = store();
        let r = ParamRef::parse(&json!({"selector": {}, "parameterNotFoundAction": "Deny"}));
        assert_eq!(
            names(&collect(Some(&configmaps()), Some(&r), "a", &s).unwrap()),
            ["a/limits", "a/other"]
        );
        let r = ParamRef::parse(&json!({"selector": {"matchLabels": {"tier": "gold"}}}));
        assert_eq!(
            names(&collect(Some(&configmaps()), Some(&r), "a", &s).unwrap()),
            ["a/limits"]
        );
        let cluster = ParamResource {
            namespaced: false,
            ..configmaps()
        };
        assert_eq!(
            names(&collect(Some(&cluster), Some(&r), "a", &s).unwrap()),
            ["a/limits", "b/limits"]
        );
        let r = ParamRef::parse(&json!({"selector": {}, "namespace": "a"}));
        let err = collect(Some(&cluster), Some(&r), "a", &s).unwrap_err();
        assert_eq!(
            err,
            "paramRef.namespace must not be provided for a cluster-scoped `paramKind`"
        );
    }

    #[test]
    fn decoded_objects_are_reused_per_version() {
        let d = Decoded::default();
        let a = d.get("/k", 1, br#"{"a":1}"#).unwrap();
        let b = d.get("/k", 1, br#"{"ignored":true}"#).unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        let c = d.get("/k", 2, br#"{"a":2}"#).unwrap();
        assert_eq!(c["a"], 2);
    }
}
