//! Which requests a policy or binding applies to (upstream `admission/plugin/policy/matching` over
//! the webhook predicates `rules`, `namespace` and `object`): the `matchConstraints` of a policy
//! and the `matchResources` of a binding.
//!
//! Order as upstream: the namespace selector, the object selector, the excluded rules, the rules
//! (when there are none, everything matches); a selector that could not be evaluated (the
//! namespace is missing) is an error only once the rules say the request is concerned.
//! With `matchPolicy: Equivalent` a rule that misses the request's own resource is tried against
//! the resources that share its storage (other versions, or `events` in both groups), and the
//! match then names that resource and its kind.

use apimachinery::labels::{selector_from_label_selector, Selector};
use apimachinery::status::ApiError;
use serde_json::{Map, Value};

/// A group/version/resource (`resource` plural), as upstream's `schema.GroupVersionResource`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gvr {
    pub group: String,
    pub version: String,
    pub resource: String,
}

/// A group/version/kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Gvk {
    pub group: String,
    pub version: String,
    pub kind: String,
}

/// `scope` of a rule.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scope {
    All,
    Namespaced,
    Cluster,
}

/// One `NamedRuleWithOperations`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    operations: Vec<String>,
    groups: Vec<String>,
    versions: Vec<String>,
    resources: Vec<String>,
    scope: Scope,
    resource_names: Vec<String>,
}

fn strings(v: &Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

fn exact_or_wildcard(items: &[String], requested: &str) -> bool {
    items.iter().any(|i| i == "*" || i == requested)
}

impl Rule {
    pub fn parse(v: &Value) -> Rule {
        Rule {
            operations: strings(v, "operations"),
            groups: strings(v, "apiGroups"),
            versions: strings(v, "apiVersions"),
            resources: strings(v, "resources"),
            scope: match v.get("scope").and_then(Value::as_str) {
                Some("Namespaced") => Scope::Namespaced,
                Some("Cluster") => Scope::Cluster,
                _ => Scope::All,
            },
            resource_names: strings(v, "resourceNames"),
        }
    }

    /// Upstream `rules.Matcher.Matches` for the request seen as resource `gvr`.
    fn matches(&self, req: &MatchRequest<'_>, gvr: &Gvr) -> bool {
        let is_namespace =
            gvr.group.is_empty() && gvr.version == "v1" && gvr.resource == "namespaces";
        let scope = match self.scope {
            Scope::All => true,
            Scope::Namespaced => !is_namespace && !req.namespace.is_empty(),
            Scope::Cluster => is_namespace || req.namespace.is_empty(),
        };
        let op = req.operation;
        scope
            && self.operations.iter().any(|o| o == "*" || o == op)
            && exact_or_wildcard(&self.groups, &gvr.group)
            && exact_or_wildcard(&self.versions, &gvr.version)
            && self.resources.iter().any(|r| {
                let (res, sub) = r.split_once('/').unwrap_or((r, ""));
                (res == "*" || res == gvr.resource)
                    && (sub == "*" || sub == req.subresource.unwrap_or(""))
            })
    }

    fn names_match(&self, name: &str) -> bool {
        self.resource_names.is_empty() || self.resource_names.iter().any(|n| n == name)
    }
}

/// A parsed `MatchResources`.
#[derive(Clone, Debug)]
pub struct MatchResources {
    namespace_selector: Selector,
    object_selector: Selector,
    rules: Vec<Rule>,
    excluded: Vec<Rule>,
    equivalent: bool,
    /// A selector that does not parse: reported (500, as upstream) for the requests the rules
    /// concern.
    selector_error: Option<String>,
}

impl MatchResources {
    /// Parses `matchConstraints` / `matchResources`. An absent selector selects everything (as
    /// upstream's matcher defaults it); an unparsable one selects nothing and is the error the
    /// requests the rules concern get.
    pub fn parse(v: &Value) -> MatchResources {
        let mut selector_error = None;
        let mut selector = |key: &str| match v.get(key) {
            None | Some(Value::Null) => Selector::everything(),
            Some(s) => selector_from_label_selector(s).unwrap_or_else(|e| {
                selector_error.get_or_insert(e);
                Selector::nothing()
            }),
        };
        let namespace_selector = selector("namespaceSelector");
        let object_selector = selector("objectSelector");
        let rules = |key: &str| -> Vec<Rule> {
            v.get(key)
                .and_then(Value::as_array)
                .map(|a| a.iter().map(Rule::parse).collect())
                .unwrap_or_default()
        };
        MatchResources {
            namespace_selector,
            object_selector,
            rules: rules("resourceRules"),
            excluded: rules("excludeResourceRules"),
            // Stored policies are defaulted to Equivalent; only an explicit Exact turns it off.
            equivalent: v.get("matchPolicy").and_then(Value::as_str) != Some("Exact"),
            selector_error,
        }
    }
}

/// What matching reads of a request.
#[derive(Clone, Copy, Debug)]
pub struct MatchRequest<'a> {
    pub group: &'a str,
    pub version: &'a str,
    pub resource: &'a str,
    pub subresource: Option<&'a str>,
    pub kind: &'a str,
    pub namespace: &'a str,
    pub name: &'a str,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub operation: &'a str,
    /// The new object (`None` for DELETE).
    pub object: Option<&'a Value>,
    pub old: Option<&'a Value>,
}

impl MatchRequest<'_> {
    fn gvr(&self) -> Gvr {
        Gvr {
            group: self.group.into(),
            version: self.version.into(),
            resource: self.resource.into(),
        }
    }

    fn gvk(&self) -> Gvk {
        Gvk {
            group: self.group.into(),
            version: self.version.into(),
            kind: self.kind.into(),
        }
    }
}

/// What matching needs from the server: namespaces' labels and the resources equivalent to one.
pub trait MatchContext {
    /// The labels of a namespace; `Err` a NotFound when it does not exist.
    fn namespace_labels(&self, name: &str) -> Result<Map<String, Value>, ApiError>;
    /// The other resources (with their kinds) sharing the storage of `gvr`, which serve
    /// `subresource` when one is given.
    fn equivalents(&self, gvr: &Gvr, subresource: Option<&str>) -> Vec<(Gvr, Gvk)>;
}

/// How a request matched: the resource and kind the policy sees it as.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Matched {
    pub resource: Gvr,
    pub kind: Gvk,
}

/// Upstream `matching.Matcher.Matches`. `Ok(None)` when the request is not concerned.
pub fn matches(
    mr: &MatchResources,
    req: &MatchRequest<'_>,
    ctx: &dyn MatchContext,
) -> Result<Option<Matched>, ApiError> {
    let (ns_match, mut ns_err) = match_namespace(mr, req, ctx);
    if let Some(e) = &mr.selector_error {
        ns_err.get_or_insert_with(|| ApiError::internal(e));
    } else if (!ns_match && ns_err.is_none()) || !match_object(&mr.object_selector, req) {
        return Ok(None);
    }
    if find_rule(&mr.excluded, mr.equivalent, req, ctx).is_some() {
        return Ok(None);
    }
    let matched = if mr.rules.is_empty() {
        Some(Matched {
            resource: req.gvr(),
            kind: req.gvk(),
        })
    } else {
        find_rule(&mr.rules, mr.equivalent, req, ctx)
    };
    let Some(matched) = matched else {
        return Ok(None);
    };
    match ns_err {
        Some(e) => Err(e),
        None => Ok(Some(matched)),
    }
}

/// Upstream `MatchNamespaceSelector`: requests about cluster-scoped objects other than namespaces
/// always match; a namespace being written is judged by its own (new) labels.
fn match_namespace(
    mr: &MatchResources,
    req: &MatchRequest<'_>,
    ctx: &dyn MatchContext,
) -> (bool, Option<ApiError>) {
    let is_namespaces = req.resource == "namespaces" && req.group.is_empty();
    if req.namespace.is_empty() && !is_namespaces {
        return (true, None);
    }
    if mr.namespace_selector.is_empty() {
        return (true, None);
    }
    if is_namespaces && req.subresource.is_none() && matches!(req.operation, "CREATE" | "UPDATE") {
        return (
            mr.namespace_selector
                .matches_object(req.object.unwrap_or(&Value::Null)),
            None,
        );
    }
    let name = if is_namespaces {
        req.name
    } else {
        req.namespace
    };
    match ctx.namespace_labels(name) {
        Ok(labels) => (mr.namespace_selector.matches(&labels), None),
        Err(e) => (false, Some(e)),
    }
}

/// Upstream `MatchObjectSelector`: the new or the old object's labels; something without
/// metadata (DELETE's missing object, connect options) matches nothing.
fn match_object(selector: &Selector, req: &MatchRequest<'_>) -> bool {
    if selector.is_empty() {
        return true;
    }
    let one = |o: Option<&Value>| {
        o.filter(|o| o.get("metadata").is_some())
            .is_some_and(|o| selector.matches_object(o))
    };
    one(req.object) || one(req.old)
}

/// Upstream `matchesResourceRules`: the request's own resource first, then (Equivalent) the
/// resources sharing its storage.
fn find_rule(
    rules: &[Rule],
    equivalent: bool,
    req: &MatchRequest<'_>,
    ctx: &dyn MatchContext,
) -> Option<Matched> {
    let own = req.gvr();
    if rules
        .iter()
        .any(|r| r.matches(req, &own) && r.names_match(req.name))
    {
        return Some(Matched {
            resource: own,
            kind: req.gvk(),
        });
    }
    if !equivalent || rules.is_empty() {
        return None;
    }
    let equivalents = ctx.equivalents(&own, req.subresource);
    for rule in rules {
        for (gvr, gvk) in &equivalents {
            if *gvr != own && rule.matches(req, gvr) && rule.names_match(req.name) {
                return Some(Matched {
                    resource: gvr.clone(),
                    kind: gvk.clone(),
                });
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Ctx {
        namespaces: Vec<(&'static str, Value)>,
    }

    impl MatchContext for Ctx {
        fn namespace_labels(&self, name: &str) -> Result<Map<String, Value>, ApiError> {
            self.namespaces
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, l)| l.as_object().cloned().unwrap_or_default())
                .ok_or_else(|| {
                    ApiError::not_found(
                        &apimachinery::status::Qualified::new("", "namespaces"),
                        name,
                    )
                })
        }

        fn equivalents(&self, gvr: &Gvr, _sub: Option<&str>) -> Vec<(Gvr, Gvk)> {
            if gvr.resource == "events" {
                let e = |g: &str, v: &str| {
                    (
                        Gvr {
                            group: g.into(),
                            version: v.into(),
                            resource: "events".into(),
                        },
                        Gvk {
                            group: g.into(),
                            version: v.into(),
                            kind: "Event".into(),
                        },
                    )
                };
                vec![e("", "v1"), e("events.k8s.io", "v1")]
            } else {
                Vec::new()
            }
        }
    }

    fn ctx() -> Ctx {
        Ctx {
            namespaces: vec![
                ("prod", json!({"env": "prod"})),
                ("dev", json!({"env": "dev"})),
            ],
        }
    }

    fn req<'a>(
        resource: &'a str,
        ns: &'a str,
        op: &'a str,
        obj: Option<&'a Value>,
    ) -> MatchRequest<'a> {
        MatchRequest {
            group: if resource == "deployments" {
                "apps"
            } else {
                ""
            },
            version: "v1",
            resource,
            subresource: None,
            kind: "Thing",
            namespace: ns,
            name: "x",
            operation: op,
            object: obj,
            old: None,
        }
    }

    fn mr(v: Value) -> MatchResources {
        MatchResources::parse(&v)
    }

    #[test]
    fn rules_match_operation_group_version_resource_and_scope() {
        let m = mr(
            json!({"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
            "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]}),
        );
        let obj = json!({"metadata": {}});
        let got = matches(
            &m,
            &req("deployments", "prod", "CREATE", Some(&obj)),
            &ctx(),
        )
        .unwrap();
        assert_eq!(got.unwrap().resource.resource, "deployments");
        assert!(
            matches(&m, &req("deployments", "prod", "DELETE", None), &ctx())
                .unwrap()
                .is_none()
        );
        assert!(
            matches(&m, &req("pods", "prod", "CREATE", Some(&obj)), &ctx())
                .unwrap()
                .is_none()
        );

        let cluster = mr(
            json!({"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"],
            "operations": ["*"], "resources": ["*"], "scope": "Cluster"}]}),
        );
        assert!(
            matches(&cluster, &req("pods", "prod", "CREATE", Some(&obj)), &ctx())
                .unwrap()
                .is_none()
        );
        assert!(matches(
            &cluster,
            &req("namespaces", "", "CREATE", Some(&obj)),
            &ctx()
        )
        .unwrap()
        .is_some());
        let namespaced = mr(
            json!({"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"],
            "operations": ["*"], "resources": ["*"], "scope": "Namespaced"}]}),
        );
        assert!(matches(
            &namespaced,
            &req("namespaces", "", "CREATE", Some(&obj)),
            &ctx()
        )
        .unwrap()
        .is_none());
    }

    #[test]
    fn subresources_resource_names_and_exclusions() {
        let obj = json!({"metadata": {}});
        let m = mr(
            json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["*"], "resources": ["pods/status"], "resourceNames": ["x"]}]}),
        );
        let mut r = req("pods", "prod", "UPDATE", Some(&obj));
        assert!(matches(&m, &r, &ctx()).unwrap().is_none(), "no subresource");
        r.subresource = Some("status");
        assert!(matches(&m, &r, &ctx()).unwrap().is_some());
        r.name = "y";
        assert!(matches(&m, &r, &ctx()).unwrap().is_none(), "other name");
        // As upstream's `splitResource`, `pods/*` also matches pods themselves.
        let any_sub = mr(
            json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["*"], "resources": ["pods/*"]}]}),
        );
        r.subresource = None;
        assert!(matches(&any_sub, &r, &ctx()).unwrap().is_some());

        let m = mr(
            json!({"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"],
            "operations": ["*"], "resources": ["*"]}],
            "excludeResourceRules": [{"apiGroups": [""], "apiVersions": ["*"],
            "operations": ["*"], "resources": ["configmaps"]}]}),
        );
        assert!(
            matches(&m, &req("configmaps", "prod", "CREATE", Some(&obj)), &ctx())
                .unwrap()
                .is_none()
        );
        assert!(
            matches(&m, &req("secrets", "prod", "CREATE", Some(&obj)), &ctx())
                .unwrap()
                .is_some()
        );
    }

    #[test]
    fn namespace_selector_reads_the_namespace_or_the_namespace_written() {
        let m = mr(json!({"namespaceSelector": {"matchLabels": {"env": "prod"}}}));
        let obj = json!({"metadata": {}});
        assert!(
            matches(&m, &req("pods", "prod", "CREATE", Some(&obj)), &ctx())
                .unwrap()
                .is_some()
        );
        assert!(
            matches(&m, &req("pods", "dev", "CREATE", Some(&obj)), &ctx())
                .unwrap()
                .is_none()
        );
        // Cluster-scoped objects other than namespaces are never exempted by it.
        assert!(matches(&m, &req("nodes", "", "CREATE", Some(&obj)), &ctx())
            .unwrap()
            .is_some());
        // A namespace being created is judged by its own labels.
        let ns = json!({"metadata": {"name": "new", "labels": {"env": "prod"}}});
        let mut r = req("namespaces", "", "CREATE", Some(&ns));
        r.name = "new";
        assert!(matches(&m, &r, &ctx()).unwrap().is_some());
        // A missing namespace is an error only when the rules concern the request.
        let err = matches(&m, &req("pods", "gone", "CREATE", Some(&obj)), &ctx()).unwrap_err();
        assert_eq!(err.code, 404, "{err}");
        let only_secrets = mr(
            json!({"namespaceSelector": {"matchLabels": {"env": "prod"}},
            "resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*"],
            "resources": ["secrets"]}]}),
        );
        assert!(matches(
            &only_secrets,
            &req("pods", "gone", "CREATE", Some(&obj)),
            &ctx()
        )
        .unwrap()
        .is_none());
    }

    #[test]
    fn object_selector_reads_new_or_old_labels() {
        let m = mr(json!({"objectSelector": {"matchExpressions": [
            {"key": "managed", "operator": "In", "values": ["yes"]}]}}));
        let labelled = json!({"metadata": {"labels": {"managed": "yes"}}});
        let plain = json!({"metadata": {}});
        assert!(
            matches(&m, &req("pods", "prod", "CREATE", Some(&labelled)), &ctx())
                .unwrap()
                .is_some()
        );
        assert!(
            matches(&m, &req("pods", "prod", "CREATE", Some(&plain)), &ctx())
                .unwrap()
                .is_none()
        );
        let mut del = req("pods", "prod", "DELETE", None);
        del.old = Some(&labelled);
        assert!(matches(&m, &del, &ctx()).unwrap().is_some());
    }

    #[test]
    fn equivalent_resources_match_unless_exact() {
        let rules = json!([{"apiGroups": ["events.k8s.io"], "apiVersions": ["v1"],
            "operations": ["CREATE"], "resources": ["events"]}]);
        let obj = json!({"metadata": {}});
        let eq = mr(json!({"resourceRules": rules}));
        let got = matches(&eq, &req("events", "prod", "CREATE", Some(&obj)), &ctx())
            .unwrap()
            .expect("matched through the equivalent resource");
        assert_eq!(got.resource.group, "events.k8s.io");
        assert_eq!(got.kind.kind, "Event");
        let exact = mr(json!({"resourceRules": rules, "matchPolicy": "Exact"}));
        assert!(
            matches(&exact, &req("events", "prod", "CREATE", Some(&obj)), &ctx())
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn bad_selectors_are_errors_for_the_requests_the_rules_concern() {
        let m = mr(json!({"objectSelector": {"matchExpressions": [
            {"key": "a", "operator": "Bogus"}]}, "resourceRules": [{"apiGroups": [""],
            "apiVersions": ["v1"], "operations": ["*"], "resources": ["pods"]}]}));
        let obj = json!({"metadata": {}});
        let err = matches(&m, &req("pods", "prod", "CREATE", Some(&obj)), &ctx()).unwrap_err();
        assert_eq!(err.code, 500, "{err}");
        assert!(
            matches(&m, &req("secrets", "prod", "CREATE", Some(&obj)), &ctx())
                .unwrap()
                .is_none()
        );
    }
}
