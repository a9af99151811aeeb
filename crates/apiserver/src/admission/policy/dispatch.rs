//! What both policy plugins do per request before evaluating (upstream `policy/generic`
//! `policyDispatcher.Dispatch`): match each policy's constraints and each binding's resources
//! against the request, resolve the `paramKind` and collect the binding's params, read the
//! request's namespace once, and present the objects in the version the policy matched.

use std::sync::Arc;

use apimachinery::status::{ApiError, Qualified};
use serde_json::Value;

use super::context::{self, NamespaceLabels, ServerContext};
use super::expr::Input;
use super::matching;
use super::params::{self, ParamStore};
use super::{Binding, PolicyCommon};
use crate::admission::Attributes;

/// A matched policy: how it sees the request.
pub struct PolicyMatch {
    pub matched: matching::Matched,
    pub request: Value,
}

/// Per-request state shared by the policies of one plugin call: the request as matching sees
/// it, and the request's namespace when the watch cache does not have it yet.
pub struct Dispatch<'a> {
    server: &'a ServerContext<'a>,
    attrs: &'a Attributes<'a>,
    request: matching::MatchRequest<'a>,
    /// `Some` when the namespace was read from storage (a cache miss): `Some(None)` if it does
    /// not exist. Namespaces in the cache are read from there when needed.
    fetched: Option<Option<Arc<Value>>>,
    registry: Arc<apimachinery::resources::Snapshot>,
}

impl<'a> Dispatch<'a> {
    /// Checks that the cache has the request's namespace, else reads it from storage once.
    pub async fn prepare(
        server: &'a ServerContext<'a>,
        attrs: &'a Attributes<'a>,
        new: Option<&'a Value>,
        old: Option<&'a Value>,
    ) -> Result<Dispatch<'a>, ApiError> {
        let ns_name = if attrs.group.is_empty() && attrs.kind == "Namespace" {
            ""
        } else {
            attrs.namespace
        };
        let fetched = if ns_name.is_empty() || server.namespace_cached(ns_name) {
            None
        } else {
            Some(server.namespace(ns_name).await?)
        };
        Ok(Dispatch {
            server,
            attrs,
            request: context::match_request(attrs, new, old),
            fetched,
            registry: server.api.registry.snapshot(),
        })
    }

    fn labels(&self) -> NamespaceLabels<'_> {
        NamespaceLabels {
            api: self.server.api,
            fetched: self
                .fetched
                .as_ref()
                .map(|ns| (self.attrs.namespace, ns.as_deref())),
        }
    }

    /// Upstream `DefinitionMatches`; the error is a configuration error's text.
    pub fn policy_matches(&self, common: &PolicyCommon) -> Result<Option<PolicyMatch>, String> {
        let Some(mc) = &common.match_constraints else {
            return Err("policy contained no match constraints, a required field".into());
        };
        let matched =
            matching::matches(mc, &self.request, &self.labels()).map_err(|e| e.message)?;
        Ok(matched.map(|matched| PolicyMatch {
            request: if common.uses.request {
                context::admission_request(self.attrs, &matched)
            } else {
                Value::Null
            },
            matched,
        }))
    }

    /// Upstream `BindingMatches`: a binding without `matchResources` matches what its policy does.
    pub fn binding_matches(&self, binding: &Binding) -> Result<bool, String> {
        match &binding.match_resources {
            None => Ok(true),
            Some(mr) => matching::matches(mr, &self.request, &self.labels())
                .map(|m| m.is_some())
                .map_err(|e| e.message),
        }
    }

    pub fn param_kind(
        &self,
        common: &PolicyCommon,
    ) -> Result<Option<params::ParamResource>, String> {
        common
            .param_kind
            .as_ref()
            .map(|pk| params::resolve(&self.registry, pk))
            .transpose()
    }

    /// The params of a binding; a param named but missing from the cache is looked up in storage.
    pub async fn collect_params(
        &self,
        kind: Option<&params::ParamResource>,
        binding: &Binding,
    ) -> Result<Vec<Option<Arc<Value>>>, String> {
        let pref = binding.param_ref.as_ref();
        let mut fetched = None;
        if let (Some(kind), Some(pref)) = (kind, pref) {
            if let Some((ns, name)) = pref.named(kind, self.attrs.namespace) {
                if self.server.get(kind, ns, name).is_none() {
                    fetched = context::param_from_storage(self.server.api, kind, ns, name).await;
                }
            }
        }
        let store = Fetched {
            inner: self.server,
            fetched,
        };
        params::collect(kind, pref, self.attrs.namespace, &store)
    }

    /// `namespaceObject` (null for cluster-scoped requests and namespaces themselves, and when
    /// no expression uses it); a missing namespace is upstream's NotFound.
    pub async fn namespace_object(&self, used: bool) -> Result<Value, ApiError> {
        let is_namespace = self.attrs.group.is_empty() && self.attrs.kind == "Namespace";
        if self.attrs.namespace.is_empty() || is_namespace {
            return Ok(Value::Null);
        }
        let ns = match (&self.fetched, used) {
            (Some(fetched), _) => fetched.clone(),
            // Only whether it exists matters: no need to decode it.
            (None, false) if self.server.namespace_cached(self.attrs.namespace) => {
                return Ok(Value::Null)
            }
            (None, _) => self.server.namespace(self.attrs.namespace).await?,
        };
        match ns {
            Some(_) if !used => Ok(Value::Null),
            Some(ns) => Ok(context::namespace_object(Some(&ns))),
            None => Err(ApiError::not_found(
                &Qualified::new("", "namespaces"),
                self.attrs.namespace,
            )),
        }
    }
}

/// The cache, plus one param read from storage.
struct Fetched<'a> {
    inner: &'a ServerContext<'a>,
    fetched: Option<Arc<Value>>,
}

impl ParamStore for Fetched<'_> {
    fn get(&self, res: &params::ParamResource, namespace: &str, name: &str) -> Option<Arc<Value>> {
        self.inner
            .get(res, namespace, name)
            .or_else(|| self.fetched.clone())
    }

    fn list(
        &self,
        res: &params::ParamResource,
        namespace: Option<&str>,
        selector: &apimachinery::labels::Selector,
    ) -> Vec<Arc<Value>> {
        self.inner.list(res, namespace, selector)
    }
}

/// The objects in the version a policy matched.
pub struct Versioned<'a> {
    object: std::borrow::Cow<'a, Value>,
    old: std::borrow::Cow<'a, Value>,
}

impl<'a> Versioned<'a> {
    pub fn new(
        new: Option<&'a Value>,
        old: Option<&'a Value>,
        matched: &matching::Matched,
    ) -> Versioned<'a> {
        let convert = |o: Option<&'a Value>| match o {
            None => std::borrow::Cow::Owned(Value::Null),
            Some(v) => match context::in_version(v, matched) {
                Some(converted) => std::borrow::Cow::Owned(converted),
                None => std::borrow::Cow::Borrowed(v),
            },
        };
        Versioned {
            object: convert(new),
            old: convert(old),
        }
    }

    pub fn input<'i>(
        &self,
        uses: super::expr::Uses,
        request: &Value,
        params: Option<&Value>,
        namespace: &Value,
        variables: &'i super::expr::Variables,
    ) -> Input<'i> {
        Input::with_uses(
            uses,
            &self.object,
            &self.old,
            request,
            params.unwrap_or(&Value::Null),
            namespace,
            variables,
        )
    }

    /// The object as matched (null for DELETE).
    pub fn object(&self) -> &Value {
        &self.object
    }
}
