//! Which webhooks a request goes to (upstream `webhook/predicates/{rules,namespace,object}` and
//! `generic.Webhook.ShouldCallHook`): a rule matches on operation, group, version, resource and
//! subresource (`*`, `*/*`, `pods/*`, `*/status`) and scope; with `matchPolicy: Equivalent` a rule
//! may match the same objects served at another group/version (same storage), and the webhook then
//! sees the request in that version; the namespace selector is tested against the labels of the
//! request's namespace (a namespace's own labels for namespace writes), the object selector against
//! the labels of the object or of the old object.

use apimachinery::labels::Selector;
use apimachinery::resources::Snapshot;
use apimachinery::status::ApiError;
use serde_json::{Map, Value};

use super::super::{Attributes, Operation};
use super::source::Hook;
use crate::ApiServer;

/// `rules[].scope`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    /// `*` (and the default).
    All,
    Cluster,
    Namespaced,
    /// A value upstream's validation would refuse: matches nothing, as upstream's matcher.
    Unknown,
}

impl Scope {
    pub fn parse(s: Option<&str>) -> Scope {
        match s {
            None | Some("*") => Scope::All,
            Some("Cluster") => Scope::Cluster,
            Some("Namespaced") => Scope::Namespaced,
            Some(_) => Scope::Unknown,
        }
    }
}

/// One `RuleWithOperations`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub operations: Vec<String>,
    pub groups: Vec<String>,
    pub versions: Vec<String>,
    /// `resources` split at the first `/`: (resource, subresource), `""` for no subresource.
    pub resources: Vec<(String, String)>,
    pub scope: Scope,
}

impl Rule {
    /// A rule from its JSON form; missing lists are empty (match nothing).
    pub fn from_json(v: &Value) -> Rule {
        let list = |field: &str| -> Vec<String> {
            v.get(field)
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default()
        };
        Rule {
            operations: list("operations"),
            groups: list("apiGroups"),
            versions: list("apiVersions"),
            resources: list("resources")
                .into_iter()
                .map(|r| match r.split_once('/') {
                    Some((res, sub)) => (res.to_string(), sub.to_string()),
                    None => (r, String::new()),
                })
                .collect(),
            scope: Scope::parse(v.get("scope").and_then(Value::as_str)),
        }
    }
}

/// The resource a rule is tested against: the request's, or an equivalent one.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    pub subresource: &'a str,
    /// The request's namespace; `""` for cluster-scoped resources (namespaces included).
    pub namespace: &'a str,
    pub operation: Operation,
}

fn exact_or_wildcard(items: &[String], requested: &str) -> bool {
    items.iter().any(|i| i == "*" || i == requested)
}

fn is_namespaces(t: &Target<'_>) -> bool {
    t.group.is_empty() && t.version == "v1" && t.resource == "namespaces"
}

/// Upstream `rules.Matcher.Matches`.
pub fn rule_matches(rule: &Rule, t: &Target<'_>) -> bool {
    let scope = match rule.scope {
        Scope::All => true,
        Scope::Namespaced => !is_namespaces(t) && !t.namespace.is_empty(),
        Scope::Cluster => is_namespaces(t) || t.namespace.is_empty(),
        Scope::Unknown => false,
    };
    scope
        && rule
            .operations
            .iter()
            .any(|o| o == "*" || o == t.operation.as_str())
        && exact_or_wildcard(&rule.groups, t.group)
        && exact_or_wildcard(&rule.versions, t.version)
        && rule.resources.iter().any(|(res, sub)| {
            (res == "*" || res == t.resource) && (sub == "*" || sub == t.subresource)
        })
}

/// A group/version/kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gvk {
    pub group: String,
    pub version: String,
    pub kind: String,
}

impl Gvk {
    /// `apps/v1`, or `v1` for core.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// What a webhook is called with: the resource whose rule matched and the kind of the objects at
/// it (upstream `WebhookInvocation`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Invocation {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub subresource: String,
    pub kind: Gvk,
}

/// The kind of the objects of `subresource` of a resource whose own kind is `kind` (upstream's
/// `KindFor`): the subresources with kinds of their own, else the resource's kind (`status`).
pub fn subresource_kind(group: &str, version: &str, kind: &str, subresource: &str) -> Gvk {
    let (g, v, k) = match subresource {
        "scale" => ("autoscaling", "v1", "Scale"),
        "binding" => ("", "v1", "Binding"),
        "eviction" => ("policy", "v1", "Eviction"),
        "token" => ("authentication.k8s.io", "v1", "TokenRequest"),
        _ => (group, version, kind),
    };
    Gvk {
        group: g.to_string(),
        version: v.to_string(),
        kind: k.to_string(),
    }
}

/// The request's own resource and kind, as the AdmissionReview's `requestResource`/`requestKind`.
pub fn request_invocation(attrs: &Attributes<'_>) -> Invocation {
    let sub = attrs.subresource.unwrap_or("");
    Invocation {
        group: attrs.group.to_string(),
        version: attrs.version.to_string(),
        resource: attrs.resource.to_string(),
        subresource: sub.to_string(),
        // `attrs.kind` is already the subresource's kind name; the group/version are its own.
        kind: Gvk {
            kind: attrs.kind.to_string(),
            ..subresource_kind(attrs.group, attrs.version, attrs.kind, sub)
        },
    }
}

/// The same resource served at other group/versions (sharing its storage), that a webhook with
/// `matchPolicy: Equivalent` also matches on (upstream `EquivalentResourcesFor`): the request's
/// group first in its preferred order, then the other groups. A subresource request only has
/// equivalents that serve the subresource too.
pub fn equivalents(snapshot: &Snapshot, attrs: &Attributes<'_>) -> Vec<Invocation> {
    let Some(own) = snapshot.get(attrs.group, attrs.version, attrs.resource) else {
        return Vec::new();
    };
    let sub = attrs.subresource.unwrap_or("");
    let mut out: Vec<(usize, usize, Invocation)> = snapshot
        .resources
        .values()
        .filter(|r| r.storage == own.storage)
        .filter(|r| !(r.group == own.group && r.version == own.version && r.plural == own.plural))
        .filter(|r| sub.is_empty() || r.has_subresource(sub))
        .map(|r| {
            let group_rank = usize::from(r.group != own.group);
            let version_rank = snapshot
                .versions(&r.group)
                .and_then(|vs| vs.iter().position(|v| *v == r.version))
                .unwrap_or(usize::MAX);
            let inv = Invocation {
                group: r.group.clone(),
                version: r.version.clone(),
                resource: r.plural.clone(),
                subresource: sub.to_string(),
                kind: subresource_kind(&r.group, &r.version, &r.kind, sub),
            };
            (group_rank, version_rank, inv)
        })
        .collect();
    out.sort_by(|a, b| (a.0, a.1, &a.2.group).cmp(&(b.0, b.1, &b.2.group)));
    out.into_iter().map(|(_, _, inv)| inv).collect()
}

/// The invocation of a webhook with these rules, if one matches the request's own resource.
pub fn direct_invocation(rules: &[Rule], attrs: &Attributes<'_>) -> Option<Invocation> {
    let target = target_of(attrs);
    rules
        .iter()
        .any(|r| rule_matches(r, &target))
        .then(|| request_invocation(attrs))
}

/// With `matchPolicy: Equivalent`, when no rule matches the request's own resource: the first
/// rule (in order) that matches one of the equivalent resources, with that resource.
pub fn equivalent_invocation(
    rules: &[Rule],
    attrs: &Attributes<'_>,
    equivalents: &[Invocation],
) -> Option<Invocation> {
    let target = target_of(attrs);
    for rule in rules {
        for inv in equivalents {
            let t = Target {
                group: &inv.group,
                version: &inv.version,
                resource: &inv.resource,
                ..target
            };
            if rule_matches(rule, &t) {
                return Some(inv.clone());
            }
        }
    }
    None
}

fn target_of<'a>(attrs: &Attributes<'a>) -> Target<'a> {
    Target {
        group: attrs.group,
        version: attrs.version,
        resource: attrs.resource,
        subresource: attrs.subresource.unwrap_or(""),
        namespace: attrs.namespace,
        operation: attrs.operation,
    }
}

/// Whether a request is about the namespace its namespace selector looks at: every namespaced
/// request, and writes of namespaces themselves. Cluster-scoped requests of other resources are
/// never exempted by a namespace selector.
pub fn namespace_to_check<'a>(attrs: &Attributes<'a>) -> Option<&'a str> {
    if attrs.group.is_empty() && attrs.resource == "namespaces" {
        return Some(attrs.name);
    }
    (!attrs.namespace.is_empty()).then_some(attrs.namespace)
}

/// Where the namespace's labels come from for a namespace write: the object being written (the
/// cache does not have it yet) for creates and updates of the namespace itself.
pub fn namespace_labels_from_object<'v>(
    attrs: &Attributes<'_>,
    object: &'v Value,
) -> Option<&'v Map<String, Value>> {
    let own_write = attrs.group.is_empty()
        && attrs.resource == "namespaces"
        && attrs.subresource.is_none()
        && matches!(attrs.operation, Operation::Create | Operation::Update);
    if !own_write {
        return None;
    }
    static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
    Some(
        object
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .unwrap_or_else(|| EMPTY.get_or_init(Map::new)),
    )
}

/// Upstream `object.Matcher`: the selector matches the object's labels or the old object's; an
/// absent object (DELETE's new object) does not match.
pub fn object_selector_matches(selector: &Selector, object: &Value, old: Option<&Value>) -> bool {
    if selector.is_empty() {
        return true;
    }
    let labelled = |o: &Value| o.is_object() && selector.matches_object(o);
    labelled(object) || old.is_some_and(labelled)
}

/// Decides, for one request, which webhooks to call (upstream `ShouldCallHook`), looking the
/// namespace's labels and the equivalent resources up once per request.
pub struct RequestMatcher<'r> {
    api: &'r ApiServer,
    attrs: &'r Attributes<'r>,
    namespace_labels: Option<Result<Map<String, Value>, ApiError>>,
    equivalents: Option<Vec<Invocation>>,
}

impl<'r> RequestMatcher<'r> {
    pub fn new(api: &'r ApiServer, attrs: &'r Attributes<'r>) -> RequestMatcher<'r> {
        RequestMatcher {
            api,
            attrs,
            namespace_labels: None,
            equivalents: None,
        }
    }

    /// The invocation of `hook` for this request with these objects, `None` when it does not
    /// apply. A selector error or a missing namespace is an error only for a webhook whose rules
    /// match, as upstream's.
    pub async fn should_call(
        &mut self,
        hook: &Hook,
        object: &Value,
        old: Option<&Value>,
    ) -> Result<Option<Invocation>, ApiError> {
        let attrs = self.attrs;
        let ns_match = match namespace_to_check(attrs) {
            None => Ok(true),
            Some(namespace) => match &hook.namespace_selector {
                Err(e) => Err(ApiError::internal(e)),
                Ok(sel) if sel.is_empty() => Ok(true),
                Ok(sel) => match namespace_labels_from_object(attrs, object) {
                    Some(labels) => Ok(sel.matches(labels)),
                    None => self
                        .namespace_labels(namespace)
                        .await
                        .map(|labels| sel.matches(labels)),
                },
            },
        };
        if matches!(ns_match, Ok(false)) {
            return Ok(None);
        }
        let obj_match = match &hook.object_selector {
            Err(e) => Err(ApiError::internal(e)),
            Ok(sel) => Ok(object_selector_matches(sel, object, old)),
        };
        if matches!(obj_match, Ok(false)) {
            return Ok(None);
        }
        let mut invocation = direct_invocation(&hook.rules, attrs);
        if invocation.is_none() && hook.equivalent {
            let others = self
                .equivalents
                .get_or_insert_with(|| equivalents(&self.api.registry.snapshot(), attrs));
            invocation = equivalent_invocation(&hook.rules, attrs, others);
        }
        let Some(invocation) = invocation else {
            return Ok(None);
        };
        ns_match?;
        obj_match?;
        if !hook.match_conditions.is_empty() {
            let request = request_invocation(attrs);
            let versioned =
                |v: &Value| super::call::in_version(v, &invocation, &request).into_owned();
            let review = super::review::request_value(attrs, &invocation, &request);
            super::conditions::matches(
                &hook.match_conditions,
                &versioned(object),
                &old.map(versioned).unwrap_or(Value::Null),
                &review,
                hook.fail_open,
            )
            .map_err(|why| {
                ApiError::forbidden_about(
                    &apimachinery::status::Qualified::new(attrs.group, attrs.resource),
                    attrs.name,
                    &why,
                )
            })
            .map(|called| called.then_some(invocation))
        } else {
            Ok(Some(invocation))
        }
    }

    /// The labels of the namespace, from the watch cache, else storage (a namespace created just
    /// before may not be cached yet, as upstream falls back to a live GET); 404 when it is gone.
    async fn namespace_labels(&mut self, namespace: &str) -> Result<&Map<String, Value>, ApiError> {
        if self.namespace_labels.is_none() {
            let key = format!("/namespaces/{namespace}");
            let cached = self
                .api
                .caches
                .get("namespaces")
                .and_then(|c| c.get(&key))
                .map(|o| o.json.clone());
            let json = match cached {
                Some(json) => Some(json),
                None => self
                    .api
                    .store
                    .get(&key)
                    .await
                    .map_err(ApiError::internal)?
                    .map(|kv| kv.value),
            };
            let labels = match json {
                None => Err(ApiError::not_found(
                    &apimachinery::status::Qualified::new("", "namespaces"),
                    namespace,
                )),
                Some(json) => serde_json::from_slice::<Value>(&json)
                    .map_err(ApiError::internal)
                    .map(|ns| {
                        ns.pointer("/metadata/labels")
                            .and_then(Value::as_object)
                            .cloned()
                            .unwrap_or_default()
                    }),
            };
            self.namespace_labels = Some(labels);
        }
        match self.namespace_labels.as_ref() {
            Some(Ok(labels)) => Ok(labels),
            Some(Err(e)) => Err(e.clone()),
            None => Err(ApiError::internal("namespace labels not looked up")),
        }
    }
}

#[cfg(test)]
#[path = "matching_tests.rs"]
mod tests;
