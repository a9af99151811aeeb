//! CEL admission policies (upstream `k8s.io/apiserver/pkg/admission/plugin/policy/{generic,
//! matching,validating,mutating}`): ValidatingAdmissionPolicy and MutatingAdmissionPolicy with
//! their bindings, as `admissionregistration.k8s.io/v1` serves them.
//!
//! - [`source`]: the policies and bindings in force, compiled once per resourceVersion from the
//!   watch cache.
//! - [`matching`]: `matchConstraints` / `matchResources` (rules, selectors, matchPolicy).
//! - [`params`]: `paramKind` / `paramRef`.
//! - [`context`]: what expressions see (`request`, `namespaceObject`) and the server reads.
//! - [`expr`]: the expressions, compiled for an environment with the policy's variables.
//! - [`validating`] and [`mutating`]: the two plugins; [`patch`] applies mutations.
//!
//! The policies' own resources are never subject to API policies (upstream excludes them to
//! avoid a policy locking itself in), nor are the review kinds, which are not stored.

pub mod context;
pub mod dispatch;
pub mod expr;
mod lower;
pub mod matching;
pub mod mutating;
pub mod params;
pub mod patch;
pub mod source;
pub mod typecheck;
pub mod validating;

use serde_json::Value;

use self::expr::{Decls, Expr, Uses, Variables};
use self::matching::MatchResources;
use self::params::ParamRef;
use crate::admission::Attributes;

/// `failurePolicy`: how errors (configuration, compilation, evaluation) are handled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailurePolicy {
    Fail,
    Ignore,
}

impl FailurePolicy {
    fn parse(spec: &Value) -> FailurePolicy {
        match spec.get("failurePolicy").and_then(Value::as_str) {
            Some("Ignore") => FailurePolicy::Ignore,
            _ => FailurePolicy::Fail,
        }
    }
}

/// Whether API policies may apply to requests about this resource at all (upstream's
/// `admissionResources` and the excluded, non-persisted review resources).
pub fn exempt(attrs: &Attributes<'_>) -> bool {
    match attrs.group {
        "admissionregistration.k8s.io" => matches!(
            attrs.resource,
            "validatingadmissionpolicies"
                | "validatingadmissionpolicybindings"
                | "mutatingadmissionpolicies"
                | "mutatingadmissionpolicybindings"
        ),
        "authentication.k8s.io" => matches!(attrs.resource, "tokenreviews" | "selfsubjectreviews"),
        "authorization.k8s.io" => {
            attrs.resource.ends_with("accessreviews") || attrs.resource == "selfsubjectrulesreviews"
        }
        _ => false,
    }
}

/// What both kinds of policy have: name, failure policy, match constraints, params, match
/// conditions and variables.
pub struct PolicyCommon {
    pub name: String,
    pub failure_policy: FailurePolicy,
    /// `None` when the policy has none (upstream: "policy contained no match constraints").
    pub match_constraints: Option<MatchResources>,
    /// `spec.paramKind` as stored, resolved per request (a CRD may appear after the policy).
    pub param_kind: Option<Value>,
    pub variables: Variables,
    /// Which request values the expressions name.
    pub uses: Uses,
    /// `(name, expression)` of each match condition.
    pub match_conditions: Vec<(String, Expr)>,
}

impl PolicyCommon {
    /// Parses the parts common to both kinds; `decls` says which optional variables the
    /// policy's expressions may use.
    pub fn parse(policy: &Value, mutation: bool) -> (PolicyCommon, Decls) {
        let spec = policy.get("spec").cloned().unwrap_or(Value::Null);
        let name = crate::objects::name(policy).to_string();
        let param_kind = spec.get("paramKind").filter(|p| !p.is_null()).cloned();
        let decls = Decls {
            params: param_kind.is_some(),
            mutation,
        };
        let variables = Variables::compile(
            spec.get("variables")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .map(|v| (str_of(v, "name"), str_of(v, "expression")))
                        .collect()
                })
                .unwrap_or_default(),
            decls,
        );
        let match_conditions = spec
            .get("matchConditions")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|c| {
                        (
                            str_of(c, "name"),
                            Expr::compile(&str_of(c, "expression"), decls, &variables),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        let common = PolicyCommon {
            name,
            failure_policy: FailurePolicy::parse(&spec),
            match_constraints: spec
                .get("matchConstraints")
                .filter(|m| !m.is_null())
                .map(MatchResources::parse),
            param_kind,
            variables,
            uses: Uses::of_spec(&spec),
            match_conditions,
        };
        (common, decls)
    }
}

/// A binding of either kind (upstream's binding accessors).
pub struct Binding {
    pub name: String,
    pub policy_name: String,
    pub match_resources: Option<MatchResources>,
    pub param_ref: Option<ParamRef>,
    /// `validationActions` of a ValidatingAdmissionPolicyBinding, as stored.
    pub validation_actions: Vec<String>,
}

impl source::ParsedBinding for Binding {
    fn parse(binding: &Value) -> Binding {
        let spec = binding.get("spec").cloned().unwrap_or(Value::Null);
        Binding {
            name: crate::objects::name(binding).to_string(),
            policy_name: str_of(&spec, "policyName"),
            match_resources: spec
                .get("matchResources")
                .filter(|m| !m.is_null())
                .map(MatchResources::parse),
            param_ref: spec
                .get("paramRef")
                .filter(|p| !p.is_null())
                .map(ParamRef::parse),
            validation_actions: spec
                .get("validationActions")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default(),
        }
    }

    fn policy_name(&self) -> &str {
        &self.policy_name
    }

    fn name(&self) -> &str {
        &self.name
    }
}

fn str_of(v: &Value, key: &str) -> String {
    v.get(key).and_then(Value::as_str).unwrap_or("").to_string()
}

/// The reason of a denial as a static string, for [`apimachinery::status::ApiError`].
fn static_reason(reason: &str) -> &'static str {
    match reason {
        "Forbidden" => "Forbidden",
        "Unauthorized" => "Unauthorized",
        "RequestEntityTooLarge" => "RequestEntityTooLarge",
        _ => "Invalid",
    }
}

/// Upstream `reasonToCode`.
fn reason_code(reason: &str) -> u16 {
    match reason {
        "Forbidden" => 403,
        "Unauthorized" => 401,
        "RequestEntityTooLarge" => 413,
        _ => 422,
    }
}

/// Upstream's match conditions (`webhook/matchconditions`): any false skips the policy; errors
/// (when none is false) fail it under `Fail` and skip it under `Ignore`. `Ok(false)`: skip.
pub fn match_conditions(
    conditions: &[(String, Expr)],
    failure_policy: FailurePolicy,
    input: &expr::Input<'_>,
) -> Result<bool, String> {
    let mut errors = Vec::new();
    input.reset_budget();
    for (_, condition) in conditions {
        match condition.eval(input) {
            // Only `false` skips: any other result counts as a match, as upstream's.
            Ok(v) if v.as_bool() == Some(false) => return Ok(false),
            Ok(_) => {}
            Err(e) => errors.push(e.to_string()),
        }
    }
    input.reset_budget();
    match (errors.len(), failure_policy) {
        (0, _) => Ok(true),
        (_, FailurePolicy::Ignore) => Ok(false),
        (1, FailurePolicy::Fail) => Err(errors.remove(0)),
        (_, FailurePolicy::Fail) => Err(format!("[{}]", errors.join(", "))),
    }
}
