//! A webhook's `matchConditions` (upstream `webhook/matchconditions`): CEL expressions over
//! `object`, `oldObject` and `request` (the AdmissionReview request without its objects), compiled
//! with the configuration. The webhook is skipped as soon as one condition is false; when none is
//! false but some failed to evaluate, `failurePolicy` decides: Fail refuses the request, Ignore
//! skips the webhook. All conditions of one webhook share upstream's runtime cost budget.
//!
//! Difference: the `authorizer` variable is not offered (rkube's CEL engine has no authorizer
//! library yet); an expression naming it fails to compile and counts as an evaluation error.

use std::sync::LazyLock;

use rkube_cel::{Activation, Env, Program, Value as CelValue};
use serde_json::Value;

/// Upstream's `RuntimeCELCostBudgetMatchConditions`: the cost all conditions of one webhook may
/// spend on one request.
pub const COST_BUDGET: u64 = 7_000_000;

static ENV: LazyLock<Env> =
    LazyLock::new(|| Env::new().with_variables(["object", "oldObject", "request"]));

/// One condition, compiled (or the reason it does not compile, reported when it is evaluated,
/// as upstream's filter does for expressions that no longer compile).
#[derive(Clone, Debug)]
pub struct Condition {
    pub name: String,
    pub expression: String,
    program: Result<Program, String>,
}

impl Condition {
    pub fn compile(name: &str, expression: &str) -> Condition {
        Condition {
            name: name.to_string(),
            expression: expression.to_string(),
            program: Program::compile(expression, &ENV).map_err(|e| e.to_string()),
        }
    }
}

/// Whether the webhook is to be called; `Err` (under `failurePolicy: Fail`) is the reason the
/// request is refused.
pub fn matches(
    conditions: &[Condition],
    object: &Value,
    old: &Value,
    request: &Value,
    fail_open: bool,
) -> Result<bool, String> {
    if conditions.is_empty() {
        return Ok(true);
    }
    let mut activation = Activation::new();
    activation
        .bind("object", object)
        .bind("oldObject", old)
        .bind("request", request);
    let mut budget = COST_BUDGET;
    let mut errors = Vec::new();
    for c in conditions {
        let program = match &c.program {
            Ok(p) => p,
            Err(e) => {
                errors.push(format!("compilation error: {e}"));
                continue;
            }
        };
        match program.eval_with_budget(&activation, &mut budget) {
            Ok(CelValue::Bool(false)) => return Ok(false),
            Ok(CelValue::Bool(true)) => {}
            Ok(other) => errors.push(format!(
                "expression '{}' resulted in error: expected a bool result, got {other:?}",
                c.expression
            )),
            Err(e) => errors.push(format!(
                "expression '{}' resulted in error: {e}",
                c.expression
            )),
        }
    }
    match errors.len() {
        0 => Ok(true),
        _ if fail_open => Ok(false),
        // Upstream's error aggregate: one error as itself, several in brackets.
        1 => Err(errors.remove(0)),
        _ => Err(format!("[{}]", errors.join(", "))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn conds(list: &[(&str, &str)]) -> Vec<Condition> {
        list.iter().map(|(n, e)| Condition::compile(n, e)).collect()
    }

    #[test]
    fn false_skips_true_calls() {
        let object = json!({"metadata": {"name": "cm", "labels": {"team": "a"}}});
        let request = json!({"operation": "CREATE", "userInfo": {"username": "alice"}});
        let c = conds(&[
            ("is-create", "request.operation == 'CREATE'"),
            ("team-a", "object.metadata.labels.team == 'a'"),
        ]);
        assert_eq!(
            matches(&c, &object, &Value::Null, &request, false),
            Ok(true)
        );
        let c = conds(&[
            ("not-alice", "request.userInfo.username != 'alice'"),
            ("broken", "object.no.such.field"),
        ]);
        // A false condition wins over another's error.
        assert_eq!(
            matches(&c, &object, &Value::Null, &request, false),
            Ok(false)
        );
        assert_eq!(
            matches(&[], &object, &Value::Null, &request, false),
            Ok(true)
        );
    }

    #[test]
    fn errors_follow_the_failure_policy() {
        let object = json!({"metadata": {}});
        let c = conds(&[("a", "object.spec.x == 1"), ("b", "oldObject.y")]);
        let err = matches(&c, &object, &Value::Null, &json!({}), false).unwrap_err();
        assert!(
            err.starts_with("[expression 'object.spec.x == 1' resulted in error: "),
            "{err}"
        );
        assert_eq!(
            matches(&c, &object, &Value::Null, &json!({}), true),
            Ok(false)
        );
        let c = conds(&[("bad", "authorizer.group('') ==")]);
        let err = matches(&c, &object, &Value::Null, &json!({}), false).unwrap_err();
        assert!(err.starts_with("compilation error: "), "{err}");
    }
}
