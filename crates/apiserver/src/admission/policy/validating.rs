//! The ValidatingAdmissionPolicy plugin (upstream `policy/validating`: `dispatcher.go`,
//! `validator.go`, `plugin.go`): for every policy whose constraints match the request and every
//! binding of it that matches too, once per param object, the match conditions, then the
//! validations (with their messages), then the audit annotations; each failed validation is
//! enforced by the binding's `validationActions` (Deny, Warn, Audit). Evaluation errors and
//! misconfiguration follow the policy's `failurePolicy`.

use apimachinery::status::{ApiError, Cause};
use serde_json::Value;

use super::context::ServerContext;
use super::dispatch::{Dispatch, Versioned};
use super::expr::{EvalError, Expr, Input};
use super::params::Decoded;
use super::source::{CompiledPolicy, Source};
use super::{Binding, FailurePolicy, PolicyCommon};
use crate::admission::{Attributes, Operation, Outcome};
use crate::ApiServer;

/// The longest message a `messageExpression` may produce (upstream
/// `MaxEvaluatedMessageExpressionSizeBytes`); a longer one falls back to `message`.
const MAX_MESSAGE_EXPRESSION_LEN: usize = 5 * 1024;
/// The longest audit annotation value kept (upstream `maxAuditAnnotationValueLength`).
const MAX_AUDIT_ANNOTATION_VALUE_LEN: usize = 10 * 1024;

struct Validation {
    expression: Expr,
    message: String,
    reason: Option<String>,
    message_expression: Option<Expr>,
}

/// A ValidatingAdmissionPolicy compiled once per resourceVersion.
pub struct CompiledValidatingPolicy {
    common: PolicyCommon,
    validations: Vec<Validation>,
    audit_annotations: Vec<(String, Expr)>,
}

impl CompiledPolicy for CompiledValidatingPolicy {
    fn compile(policy: &Value) -> CompiledValidatingPolicy {
        let (common, decls) = PolicyCommon::parse(policy, false);
        let spec = policy.get("spec").cloned().unwrap_or(Value::Null);
        let str_of = |v: &Value, k: &str| v.get(k).and_then(Value::as_str).map(str::to_string);
        let validations = spec
            .get("validations")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|v| Validation {
                        expression: Expr::compile(
                            &str_of(v, "expression").unwrap_or_default(),
                            decls,
                            &common.variables,
                        ),
                        message: str_of(v, "message").unwrap_or_default(),
                        reason: str_of(v, "reason"),
                        message_expression: str_of(v, "messageExpression")
                            .filter(|m| !m.is_empty())
                            .map(|m| Expr::compile(&m, decls, &common.variables)),
                    })
                    .collect()
            })
            .unwrap_or_default();
        let audit_annotations = spec
            .get("auditAnnotations")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|v| {
                        (
                            str_of(v, "key").unwrap_or_default(),
                            Expr::compile(
                                &str_of(v, "valueExpression").unwrap_or_default(),
                                decls,
                                &common.variables,
                            ),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        CompiledValidatingPolicy {
            common,
            validations,
            audit_annotations,
        }
    }
}

/// The outcome of one validation (upstream `PolicyDecision`): `deny` for a failed validation,
/// and for an error under `failurePolicy: Fail`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Decision {
    deny: bool,
    message: String,
    /// For denials of a failed validation; errors have none (reported as Invalid).
    reason: Option<String>,
}

impl Decision {
    fn error(failure_policy: FailurePolicy, message: String) -> Decision {
        Decision {
            deny: failure_policy == FailurePolicy::Fail,
            message,
            reason: None,
        }
    }
}

/// What one evaluation (one policy, binding and param) produced.
#[derive(Debug, Default)]
struct Evaluated {
    decisions: Vec<Decision>,
    /// `(key, value)` annotations to publish.
    annotations: Vec<(String, String)>,
    /// Audit annotation errors under `Fail`: denials whatever the binding's actions.
    annotation_errors: Vec<String>,
}

/// A denial to report: the first one collected becomes the response.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Denial {
    policy: String,
    binding: Option<String>,
    message: String,
    reason: Option<String>,
}

impl CompiledValidatingPolicy {
    /// Upstream `validator.Validate` for one param.
    fn evaluate(&self, input: &Input<'_>) -> Evaluated {
        let fp = self.common.failure_policy;
        match super::match_conditions(&self.common.match_conditions, fp, input) {
            Ok(true) => {}
            Ok(false) => return Evaluated::default(),
            Err(message) => {
                return Evaluated {
                    decisions: vec![Decision::error(fp, message)],
                    ..Default::default()
                }
            }
        }
        let mut out = Evaluated::default();
        for v in &self.validations {
            let decision = match v.expression.eval(input) {
                Err(EvalError::OutOfBudget) => {
                    // Upstream stops the whole filter: one error decision stands for all.
                    return Evaluated {
                        decisions: vec![Decision::error(fp, EvalError::OutOfBudget.to_string())],
                        ..Default::default()
                    };
                }
                Err(e) => Decision::error(fp, e.to_string()),
                Ok(v) if v.as_bool() == Some(true) => continue,
                Ok(_) => Decision {
                    deny: true,
                    message: self.message(v, input),
                    reason: Some(v.reason.clone().unwrap_or_else(|| "Invalid".into())),
                },
            };
            out.decisions.push(decision);
        }
        for (key, expr) in &self.audit_annotations {
            match expr.eval(input) {
                Ok(v) if v.as_str().is_some() => {
                    let mut value = v.as_str().unwrap_or("").trim().to_string();
                    if value.is_empty() {
                        continue;
                    }
                    truncate(&mut value, MAX_AUDIT_ANNOTATION_VALUE_LEN);
                    out.annotations.push((key.clone(), value));
                }
                Ok(v) if v.is_null() => {}
                Ok(other) => out.annotation_errors.push(format!(
                    "valueExpression '{}' resulted in unsupported return type: {}. Return type must be either string or null.",
                    expr.text(),
                    other.type_name()
                )),
                Err(e) if fp == FailurePolicy::Fail => out.annotation_errors.push(e.to_string()),
                Err(_) => {}
            }
        }
        out
    }

    /// The message of a failed validation: the messageExpression's (a non-empty single line of at
    /// most 5 KiB), else `message`, else the expression.
    fn message(&self, v: &Validation, input: &Input<'_>) -> String {
        if let Some(m) = &v.message_expression {
            if let Some(s) = m.eval(input).ok().as_ref().and_then(|o| o.as_str()) {
                let s = s.trim();
                if !s.is_empty() && s.len() <= MAX_MESSAGE_EXPRESSION_LEN && !s.contains('\n') {
                    return s.to_string();
                }
            }
        }
        let message = v.message.trim();
        if !message.is_empty() {
            return message.to_string();
        }
        format!("failed expression: {}", v.expression.text().trim())
    }
}

fn truncate(s: &mut String, max: usize) {
    if s.len() > max {
        let mut cut = max;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
}

/// Applies a binding's `validationActions` to the decisions of one evaluation (upstream's
/// dispatcher loop): Deny collects a denial, Warn adds a warning, Audit an audit annotation.
fn enforce(
    policy: &str,
    binding: &Binding,
    evaluated: &Evaluated,
    outcome: &Outcome,
    denied: &mut Vec<Denial>,
) {
    for (index, decision) in evaluated.decisions.iter().enumerate() {
        if !decision.deny {
            continue;
        }
        for action in &binding.validation_actions {
            match action.as_str() {
                "Deny" => denied.push(Denial {
                    policy: policy.to_string(),
                    binding: Some(binding.name.clone()),
                    message: decision.message.clone(),
                    reason: decision.reason.clone(),
                }),
                "Warn" => outcome.warn(format!(
                    "Validation failed for ValidatingAdmissionPolicy '{policy}' with binding '{}': {}",
                    binding.name, decision.message
                )),
                "Audit" => outcome.annotate(
                    "validation.policy.admission.k8s.io/validation_failure",
                    serde_json::json!([{
                        "message": decision.message,
                        "policy": binding.policy_name,
                        "binding": binding.name,
                        "expressionIndex": index,
                        "validationActions": binding.validation_actions,
                    }])
                    .to_string(),
                ),
                _ => {}
            }
        }
    }
    for message in &evaluated.annotation_errors {
        denied.push(Denial {
            policy: policy.to_string(),
            binding: Some(binding.name.clone()),
            message: message.clone(),
            reason: None,
        });
    }
}

/// The response for the first denial (upstream: `admission.NewForbidden` with the decision's
/// reason and code, the message also as the one cause).
fn denial_error(attrs: &Attributes<'_>, object: &Value, denial: &Denial) -> ApiError {
    let message = match &denial.binding {
        Some(b) => format!(
            "ValidatingAdmissionPolicy '{}' with binding '{b}' denied request: {}",
            denial.policy, denial.message
        ),
        None => format!(
            "ValidatingAdmissionPolicy '{}' denied request: {}",
            denial.policy, denial.message
        ),
    };
    let mut err = attrs.forbidden(object, &message);
    let reason = denial.reason.as_deref().unwrap_or("Invalid");
    err.reason = super::static_reason(reason);
    err.code = super::reason_code(reason);
    if let Some(d) = err.details.as_mut() {
        d.causes.push(Cause {
            reason: String::new(),
            message,
            field: String::new(),
        });
    }
    err
}

/// Collects the policy's audit annotations over its bindings and params, then publishes each key
/// once as `<policy>/<key>` (distinct values joined by ", ", as upstream).
#[derive(Default)]
struct AnnotationCollector {
    values: Vec<(String, Vec<String>)>,
}

impl AnnotationCollector {
    fn add(&mut self, key: &str, value: &str) {
        match self.values.iter_mut().find(|(k, _)| k == key) {
            Some((_, vs)) => {
                if !vs.iter().any(|v| v == value) {
                    vs.push(value.to_string());
                }
            }
            None => self.values.push((key.to_string(), vec![value.to_string()])),
        }
    }

    fn publish(self, policy: &str, outcome: &Outcome) {
        for (key, values) in self.values {
            outcome.annotate(format!("{policy}/{key}"), values.join(", "));
        }
    }
}

/// The plugin (upstream `ValidatingAdmissionPolicy`).
pub struct ValidatingAdmissionPolicy {
    source: Source<CompiledValidatingPolicy, Binding>,
    decoded: Decoded,
}

impl Default for ValidatingAdmissionPolicy {
    fn default() -> Self {
        ValidatingAdmissionPolicy {
            source: Source::new(
                "validatingadmissionpolicies",
                "validatingadmissionpolicybindings",
            ),
            decoded: Decoded::default(),
        }
    }
}

#[async_trait::async_trait]
impl crate::admission::Plugin for ValidatingAdmissionPolicy {
    fn name(&self) -> &'static str {
        "ValidatingAdmissionPolicy"
    }

    fn handles(&self, attrs: &Attributes<'_>) -> bool {
        !super::exempt(attrs)
    }

    async fn validate(
        &self,
        api: &ApiServer,
        attrs: &Attributes<'_>,
        object: &Value,
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
        let new = (attrs.operation != Operation::Delete && !object.is_null()).then_some(object);
        let dispatch = Dispatch::prepare(&server, attrs, new, old).await?;
        let mut denied = Vec::new();
        for hook in hooks.iter() {
            let policy = &hook.policy;
            let name = &policy.common.name;
            let config_error = |denied: &mut Vec<Denial>, binding: Option<&str>, err: String| {
                if policy.common.failure_policy == FailurePolicy::Fail {
                    let what = if binding.is_some() {
                        "binding"
                    } else {
                        "policy"
                    };
                    denied.push(Denial {
                        policy: name.clone(),
                        binding: binding.map(str::to_string),
                        message: format!("failed to configure {what}: {err}"),
                        reason: None,
                    });
                }
            };
            let matched = match dispatch.policy_matches(&policy.common) {
                Ok(Some(m)) => m,
                Ok(None) => continue,
                Err(e) => {
                    config_error(&mut denied, None, e);
                    continue;
                }
            };
            let param_kind = match dispatch.param_kind(&policy.common) {
                Ok(k) => k,
                Err(e) => {
                    config_error(&mut denied, None, e);
                    continue;
                }
            };
            let versioned = Versioned::new(new, old, &matched.matched);
            let mut annotations = AnnotationCollector::default();
            for binding in &hook.bindings {
                match dispatch.binding_matches(binding) {
                    Ok(true) => {}
                    Ok(false) => continue,
                    Err(e) => {
                        config_error(&mut denied, Some(&binding.name), e);
                        continue;
                    }
                }
                let params = match dispatch.collect_params(param_kind.as_ref(), binding).await {
                    Ok(p) => p,
                    Err(e) => {
                        config_error(&mut denied, Some(&binding.name), e);
                        continue;
                    }
                };
                let namespace = dispatch
                    .namespace_object(policy.common.uses.namespace_object)
                    .await?;
                for param in &params {
                    let input = versioned.input(
                        policy.common.uses,
                        &matched.request,
                        param.as_deref(),
                        &namespace,
                        &policy.common.variables,
                    );
                    let evaluated = policy.evaluate(&input);
                    enforce(name, binding, &evaluated, attrs.outcome, &mut denied);
                    for (k, v) in &evaluated.annotations {
                        annotations.add(k, v);
                    }
                }
            }
            annotations.publish(name, attrs.outcome);
        }
        match denied.first() {
            Some(d) => Err(denial_error(attrs, new.or(old).unwrap_or(&Value::Null), d)),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
#[path = "validating_tests.rs"]
mod tests;
