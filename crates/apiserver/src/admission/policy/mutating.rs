//! The MutatingAdmissionPolicy plugin (upstream `policy/mutating`: `dispatcher.go`,
//! `compilation.go`, `plugin.go`, with `policy/generic`'s dispatcher): the policies and bindings
//! that match the request as it arrives give a list of invocations (one per param); each runs its
//! match conditions on the object as mutated so far, then its mutations in order, every result
//! defaulted again. Errors follow the policy's `failurePolicy`; the first one left is the
//! response (403, reason Invalid for mutation errors, upstream's texts).
//!
//! Reinvocation: rkube's chain runs each mutating plugin once, so `reinvocationPolicy:
//! IfNeeded` is honoured within this plugin: when a later invocation changed the object, the
//! `IfNeeded` invocations before it run once more (upstream also reinvokes them after webhooks'
//! changes).

use std::sync::Arc;

use apimachinery::status::{ApiError, Cause};
use serde_json::Value;

use super::context::{self, ServerContext};
use super::dispatch::{Dispatch, PolicyMatch, Versioned};
use super::expr::Expr;
use super::params::Decoded;
use super::source::{CompiledPolicy, Source};
use super::{Binding, FailurePolicy, PolicyCommon};
use crate::admission::{Attributes, Operation};
use crate::ApiServer;

enum Mutation {
    ApplyConfiguration(Expr),
    JsonPatch(Expr),
}

/// A MutatingAdmissionPolicy compiled once per resourceVersion.
pub struct CompiledMutatingPolicy {
    common: PolicyCommon,
    mutations: Vec<Mutation>,
    reinvoke_if_needed: bool,
}

impl CompiledPolicy for CompiledMutatingPolicy {
    fn compile(policy: &Value) -> CompiledMutatingPolicy {
        let (common, decls) = PolicyCommon::parse(policy, true);
        let spec = policy.get("spec").cloned().unwrap_or(Value::Null);
        let expr_of = |m: &Value, field: &str| {
            let text = m
                .pointer(&format!("/{field}/expression"))
                .and_then(Value::as_str)
                .unwrap_or("");
            Expr::compile(text, decls, &common.variables)
        };
        let mutations =
            spec.get("mutations")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|m| match m.get("patchType").and_then(Value::as_str) {
                            Some("ApplyConfiguration") => Some(Mutation::ApplyConfiguration(
                                expr_of(m, "applyConfiguration"),
                            )),
                            Some("JSONPatch") => Some(Mutation::JsonPatch(expr_of(m, "jsonPatch"))),
                            _ => None,
                        })
                        .collect()
                })
                .unwrap_or_default();
        CompiledMutatingPolicy {
            common,
            mutations,
            reinvoke_if_needed: spec.get("reinvocationPolicy").and_then(Value::as_str)
                == Some("IfNeeded"),
        }
    }
}

/// One policy-binding-param to run (upstream `PolicyInvocation`).
struct Invocation {
    policy: Arc<CompiledMutatingPolicy>,
    binding: Arc<Binding>,
    param: Option<Arc<Value>>,
    matched: PolicyMatch,
}

/// An error to report unless the policy ignores failures (upstream `PolicyError`).
#[derive(Debug, PartialEq, Eq)]
struct PolicyError {
    policy: String,
    binding: Option<String>,
    message: String,
    /// `Some("Invalid")` for mutation errors; configuration errors keep Forbidden.
    invalid: bool,
    failure_policy: FailurePolicy,
}

impl PolicyError {
    fn text(&self) -> String {
        match &self.binding {
            Some(b) => format!(
                "policy '{}' with binding '{b}' denied request: {}",
                self.policy, self.message
            ),
            None => format!("policy {:?} denied request: {}", self.policy, self.message),
        }
    }
}

/// Upstream's response for the errors left after the failure policies: a Forbidden whose
/// message is the first error's (no resource prefix), every error a cause.
fn errors_response(
    attrs: &Attributes<'_>,
    object: &Value,
    errors: &[PolicyError],
) -> Option<ApiError> {
    let kept: Vec<&PolicyError> = errors
        .iter()
        .filter(|e| e.failure_policy == FailurePolicy::Fail)
        .collect();
    let first = kept.first()?;
    let mut err = attrs.forbidden(object, "admission request denied by policy");
    err.message = first.text();
    if first.invalid {
        err.reason = "Invalid";
    }
    if let Some(d) = err.details.as_mut() {
        for e in &kept {
            d.causes.push(Cause {
                reason: String::new(),
                message: e.text(),
                field: String::new(),
            });
        }
    }
    Some(err)
}

/// The plugin (upstream `MutatingAdmissionPolicy`).
pub struct MutatingAdmissionPolicy {
    source: Source<CompiledMutatingPolicy, Binding>,
    decoded: Decoded,
}

impl Default for MutatingAdmissionPolicy {
    fn default() -> Self {
        MutatingAdmissionPolicy {
            source: Source::new(
                "mutatingadmissionpolicies",
                "mutatingadmissionpolicybindings",
            ),
            decoded: Decoded::default(),
        }
    }
}

#[async_trait::async_trait]
impl crate::admission::Plugin for MutatingAdmissionPolicy {
    fn name(&self) -> &'static str {
        "MutatingAdmissionPolicy"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        attrs.operation != Operation::Delete && !super::exempt(attrs)
    }

    async fn admit(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let hooks = self.source.hooks(api);
        if hooks.is_empty() {
            return Ok(());
        }
        let server = ServerContext {
            api,
            decoded: &self.decoded,
        };
        // Matching sees the object as it arrived, before any policy changed it.
        let arrived = object.clone();
        let mut errors = Vec::new();
        let (invocations, namespace) = {
            let dispatch = Dispatch::prepare(&server, attrs, Some(&arrived), old).await?;
            let mut invocations = Vec::new();
            for hook in hooks.iter() {
                let policy = &hook.policy;
                let config_error =
                    |errors: &mut Vec<PolicyError>, binding: Option<&str>, err: String| {
                        let what = if binding.is_some() {
                            "binding"
                        } else {
                            "policy"
                        };
                        errors.push(PolicyError {
                            policy: policy.common.name.clone(),
                            binding: binding.map(str::to_string),
                            message: format!("failed to configure {what}: {err}"),
                            invalid: false,
                            failure_policy: policy.common.failure_policy,
                        });
                    };
                let matched = match dispatch.policy_matches(&policy.common) {
                    Ok(Some(m)) => m,
                    Ok(None) => continue,
                    Err(e) => {
                        config_error(&mut errors, None, e);
                        continue;
                    }
                };
                let param_kind = match dispatch.param_kind(&policy.common) {
                    Ok(k) => k,
                    Err(e) => {
                        config_error(&mut errors, None, e);
                        continue;
                    }
                };
                for binding in &hook.bindings {
                    match dispatch.binding_matches(binding) {
                        Ok(true) => {}
                        Ok(false) => continue,
                        Err(e) => {
                            config_error(&mut errors, Some(&binding.name), e);
                            continue;
                        }
                    }
                    match dispatch.collect_params(param_kind.as_ref(), binding).await {
                        Ok(params) => {
                            for param in params {
                                invocations.push(Invocation {
                                    policy: policy.clone(),
                                    binding: binding.clone(),
                                    param,
                                    matched: PolicyMatch {
                                        matched: matched.matched.clone(),
                                        request: matched.request.clone(),
                                    },
                                });
                            }
                        }
                        Err(e) => config_error(&mut errors, Some(&binding.name), e),
                    }
                }
            }
            let used = invocations
                .iter()
                .any(|i| i.policy.common.uses.namespace_object);
            let namespace = if invocations.is_empty() {
                Value::Null
            } else {
                dispatch.namespace_object(used).await?
            };
            (invocations, namespace)
        };
        let mut last_change = None;
        for (i, inv) in invocations.iter().enumerate() {
            if run(inv, attrs, object, old, &namespace, &mut errors) {
                last_change = Some(i);
            }
        }
        if let Some(last) = last_change {
            for inv in invocations[..last]
                .iter()
                .filter(|i| i.policy.reinvoke_if_needed)
            {
                run(inv, attrs, object, old, &namespace, &mut errors);
            }
        }
        match errors_response(attrs, object, &errors) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Runs one invocation on `object`; returns whether it changed it.
fn run(
    inv: &Invocation,
    attrs: &Attributes<'_>,
    object: &mut Value,
    old: Option<&Value>,
    namespace: &Value,
    errors: &mut Vec<PolicyError>,
) -> bool {
    let policy = &inv.policy;
    let mut fail = |message: String| {
        errors.push(PolicyError {
            policy: policy.common.name.clone(),
            binding: Some(inv.binding.name.clone()),
            message,
            invalid: true,
            failure_policy: policy.common.failure_policy,
        })
    };
    let matched = &inv.matched.matched;
    let served_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .map(str::to_string);
    let versioned = Versioned::new(Some(object), old, matched);
    let mut current = versioned.object().clone();
    let before = current.clone();
    let variables = &policy.common.variables;
    let mut input = versioned.input(
        policy.common.uses,
        &inv.matched.request,
        inv.param.as_deref(),
        namespace,
        variables,
    );
    match super::match_conditions(
        &policy.common.match_conditions,
        policy.common.failure_policy,
        &input,
    ) {
        Ok(true) => {}
        Ok(false) => return false,
        Err(e) => {
            fail(e);
            return false;
        }
    }
    let (group, kind) = (matched.kind.group.as_str(), kind_of(matched, attrs));
    for mutation in &policy.mutations {
        input.reset_budget();
        let result = match mutation {
            Mutation::ApplyConfiguration(expr) => expr
                .eval(&input)
                .map_err(|e| e.to_string())
                .and_then(|out| {
                    if !expr.type_errors().is_empty() {
                        return Err(format!("type mismatch: {}", expr.type_errors().join("\n")));
                    }
                    let config = out.to_json()?;
                    super::patch::apply_configuration(group, kind, &current, &config).map(Some)
                }),
            Mutation::JsonPatch(expr) => expr
                .eval(&input)
                .map_err(|e| e.to_string())
                .and_then(|out| super::patch::json_patch(&current, &out.to_json()?)),
        };
        match result {
            Ok(Some(mut patched)) => {
                apimachinery::defaults::apply_defaults(group, kind, &mut patched);
                current = patched;
                input.rebind_object(&current, variables);
            }
            Ok(None) => {}
            Err(e) => fail(e),
        }
    }
    drop(input);
    if current == before {
        return false;
    }
    if let Some(v) = served_version {
        context::convert(&mut current, &v);
    }
    *object = current;
    true
}

/// The kind the policy matched the request as (a subresource keeps the request's kind).
fn kind_of<'a>(matched: &'a super::matching::Matched, attrs: &'a Attributes<'_>) -> &'a str {
    if matched.kind.kind.is_empty() {
        attrs.kind
    } else {
        &matched.kind.kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::Outcome;
    use crate::authn::UserInfo;
    use serde_json::json;

    fn attrs<'a>(user: &'a UserInfo, outcome: &'a Outcome) -> Attributes<'a> {
        Attributes {
            group: "",
            version: "v1",
            kind: "ConfigMap",
            resource: "configmaps",
            subresource: None,
            namespace: "default",
            name: "cm",
            operation: Operation::Create,
            dry_run: false,
            user,
            outcome,
        }
    }

    fn error(fp: FailurePolicy, binding: Option<&str>, invalid: bool) -> PolicyError {
        PolicyError {
            policy: "p".into(),
            binding: binding.map(str::to_string),
            message: "boom".into(),
            invalid,
            failure_policy: fp,
        }
    }

    #[test]
    fn errors_follow_failure_policy_with_upstreams_texts() {
        let (user, outcome) = (UserInfo::server().clone(), Outcome::default());
        let a = attrs(&user, &outcome);
        let obj = json!({"metadata": {"name": "cm"}});
        assert!(
            errors_response(&a, &obj, &[error(FailurePolicy::Ignore, Some("b"), true)]).is_none()
        );
        let err = errors_response(
            &a,
            &obj,
            &[
                error(FailurePolicy::Ignore, Some("b0"), true),
                error(FailurePolicy::Fail, Some("b"), true),
                error(FailurePolicy::Fail, None, false),
            ],
        )
        .unwrap();
        assert_eq!(err.code, 403);
        assert_eq!(err.reason, "Invalid");
        assert_eq!(
            err.message,
            "policy 'p' with binding 'b' denied request: boom"
        );
        let causes = &err.details.as_ref().unwrap().causes;
        assert_eq!(causes.len(), 2);
        assert_eq!(causes[1].message, "policy \"p\" denied request: boom");
        let err = errors_response(&a, &obj, &[error(FailurePolicy::Fail, None, false)]).unwrap();
        assert_eq!(err.reason, "Forbidden");
    }

    fn policy(mutations: Value, reinvoke: &str) -> Arc<CompiledMutatingPolicy> {
        Arc::new(CompiledMutatingPolicy::compile(
            &json!({"metadata": {"name": "p"}, "spec": {
            "matchConstraints": {}, "failurePolicy": "Fail", "mutations": mutations,
            "reinvocationPolicy": reinvoke}}),
        ))
    }

    fn invocation(policy: Arc<CompiledMutatingPolicy>) -> Invocation {
        let matched = super::super::matching::Matched {
            resource: super::super::matching::Gvr {
                group: String::new(),
                version: "v1".into(),
                resource: "configmaps".into(),
            },
            kind: super::super::matching::Gvk {
                group: String::new(),
                version: "v1".into(),
                kind: "ConfigMap".into(),
            },
        };
        Invocation {
            policy,
            binding: Arc::new(<Binding as super::super::source::ParsedBinding>::parse(
                &json!({"metadata": {"name": "b"}, "spec": {"policyName": "p"}}),
            )),
            param: None,
            matched: PolicyMatch {
                request: json!({"operation": "CREATE"}),
                matched,
            },
        }
    }

    #[test]
    fn mutations_apply_in_order_on_the_mutated_object() {
        let (user, outcome) = (UserInfo::server().clone(), Outcome::default());
        let a = attrs(&user, &outcome);
        let p = policy(
            json!([
                {"patchType": "ApplyConfiguration", "applyConfiguration": {"expression":
                    "Object{metadata: Object.metadata{labels: {'team': 'a'}}}"}},
                {"patchType": "JSONPatch", "jsonPatch": {"expression":
                    "[JSONPatch{op: 'add', path: '/data', value: {'team': object.metadata.labels.team}}]"}}
            ]),
            "Never",
        );
        let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}});
        let mut errors = Vec::new();
        assert!(run(
            &invocation(p),
            &a,
            &mut obj,
            None,
            &Value::Null,
            &mut errors
        ));
        assert!(errors.is_empty(), "{errors:?}");
        assert_eq!(obj["metadata"]["labels"]["team"], "a");
        assert_eq!(obj["data"]["team"], "a");
    }

    #[test]
    fn runtime_errors_are_reported_and_skip_the_mutation() {
        let (user, outcome) = (UserInfo::server().clone(), Outcome::default());
        let a = attrs(&user, &outcome);
        let p = policy(
            json!([{"patchType": "JSONPatch", "jsonPatch": {"expression": "[JSONPatch{op: 'add', path: '/data', value: object.nope.x}]"}}]),
            "Never",
        );
        let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}});
        let mut errors = Vec::new();
        assert!(!run(
            &invocation(p),
            &a,
            &mut obj,
            None,
            &Value::Null,
            &mut errors
        ));
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].message.starts_with("expression '"),
            "{:?}",
            errors[0]
        );
        assert!(obj.get("data").is_none());
    }
}
