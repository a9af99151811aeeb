//! Unit tests of the ValidatingAdmissionPolicy evaluation and action handling (no server).

use super::*;
use crate::admission::Outcome;
use crate::authn::UserInfo;
use serde_json::json;

fn policy(spec: Value) -> CompiledValidatingPolicy {
    CompiledValidatingPolicy::compile(&json!({"metadata": {"name": "p"}, "spec": spec}))
}

fn binding(actions: &[&str]) -> Binding {
    <Binding as super::super::source::ParsedBinding>::parse(&json!({"metadata": {"name": "b"},
        "spec": {"policyName": "p", "validationActions": actions}}))
}

fn eval(p: &CompiledValidatingPolicy, object: Value, params: Value) -> Evaluated {
    let input = Input::new(
        &object,
        &Value::Null,
        &json!({"operation": "CREATE"}),
        &params,
        &Value::Null,
        &p.common.variables,
    );
    p.evaluate(&input)
}

fn attrs<'a>(user: &'a UserInfo, outcome: &'a Outcome) -> Attributes<'a> {
    Attributes {
        group: "apps",
        version: "v1",
        kind: "Deployment",
        resource: "deployments",
        subresource: None,
        namespace: "default",
        name: "web",
        operation: Operation::Create,
        dry_run: false,
        user,
        outcome,
    }
}

#[test]
fn failed_validation_messages_fall_back_in_upstreams_order() {
    let p = policy(
        json!({"paramKind": {"apiVersion": "v1", "kind": "ConfigMap"}, "validations": [
            {"expression": "object.spec.replicas <= int(params.data.maxReplicas)",
             "messageExpression": "'replicas ' + string(object.spec.replicas) + ' > ' + params.data.maxReplicas"},
            {"expression": "object.spec.replicas < 3", "message": " too many "},
            {"expression": "object.spec.replicas < 2 "},
            {"expression": "false", "messageExpression": "'two\\nlines'", "message": "fallback", "reason": "Forbidden"}
        ]}),
    );
    let got = eval(
        &p,
        json!({"spec": {"replicas": 5}}),
        json!({"data": {"maxReplicas": "3"}}),
    );
    let messages: Vec<&str> = got.decisions.iter().map(|d| d.message.as_str()).collect();
    assert_eq!(
        messages,
        [
            "replicas 5 > 3",
            "too many",
            "failed expression: object.spec.replicas < 2",
            "fallback"
        ]
    );
    assert!(got.decisions.iter().all(|d| d.deny));
    assert_eq!(got.decisions[0].reason.as_deref(), Some("Invalid"));
    assert_eq!(got.decisions[3].reason.as_deref(), Some("Forbidden"));
    let ok = eval(
        &p,
        json!({"spec": {"replicas": 1}}),
        json!({"data": {"maxReplicas": "3"}}),
    );
    let left: Vec<&str> = ok.decisions.iter().map(|d| d.message.as_str()).collect();
    assert_eq!(left, ["fallback"], "only the validation that always fails");
}

#[test]
fn errors_deny_under_fail_and_admit_under_ignore() {
    let spec = |fp: &str| json!({"failurePolicy": fp, "validations": [{"expression": "object.nope.x > 1"}]});
    let fail = eval(&policy(spec("Fail")), json!({}), Value::Null);
    assert_eq!(fail.decisions.len(), 1);
    assert!(fail.decisions[0].deny);
    assert!(fail.decisions[0]
        .message
        .starts_with("expression 'object.nope.x > 1' resulted in error: "));
    assert_eq!(fail.decisions[0].reason, None);
    let ignore = eval(&policy(spec("Ignore")), json!({}), Value::Null);
    assert!(!ignore.decisions[0].deny);
}

#[test]
fn match_conditions_skip_or_fail() {
    let p = policy(
        json!({"matchConditions": [{"name": "big", "expression": "object.spec.replicas > 10"}],
        "validations": [{"expression": "false"}]}),
    );
    assert!(eval(&p, json!({"spec": {"replicas": 1}}), Value::Null)
        .decisions
        .is_empty());
    assert_eq!(
        eval(&p, json!({"spec": {"replicas": 11}}), Value::Null)
            .decisions
            .len(),
        1
    );
    let err = eval(&p, json!({}), Value::Null);
    assert!(err.decisions[0].deny && err.decisions[0].message.contains("resulted in error"));
}

#[test]
fn audit_annotations_publish_strings_skip_nulls_and_refuse_other_types() {
    let p = policy(
        json!({"validations": [{"expression": "true"}], "auditAnnotations": [
        {"key": "replicas", "valueExpression": "'n=' + string(object.spec.replicas)"},
        {"key": "none", "valueExpression": "null"},
        {"key": "blank", "valueExpression": "'  '"},
        {"key": "bad", "valueExpression": "1"}]}),
    );
    let got = eval(&p, json!({"spec": {"replicas": 2}}), Value::Null);
    assert_eq!(
        got.annotations,
        [("replicas".to_string(), "n=2".to_string())]
    );
    assert_eq!(got.annotation_errors, ["valueExpression '1' resulted in unsupported return type: int. Return type must be either string or null."]);
}

#[test]
fn validation_actions_deny_warn_and_audit() {
    let decision = Decision {
        deny: true,
        message: "too many".into(),
        reason: Some("Invalid".into()),
    };
    let evaluated = Evaluated {
        decisions: vec![
            Decision {
                deny: false,
                ..decision.clone()
            },
            decision,
        ],
        ..Default::default()
    };
    let outcome = Outcome::default();
    let mut denied = Vec::new();
    enforce(
        "p",
        &binding(&["Warn", "Audit"]),
        &evaluated,
        &outcome,
        &mut denied,
    );
    assert!(denied.is_empty());
    assert_eq!(
        outcome.warnings(),
        ["Validation failed for ValidatingAdmissionPolicy 'p' with binding 'b': too many"]
    );
    let (key, value) = &outcome.audit_annotations()[0];
    assert_eq!(key, "validation.policy.admission.k8s.io/validation_failure");
    assert_eq!(
        value,
        r#"[{"message":"too many","policy":"p","binding":"b","expressionIndex":1,"validationActions":["Warn","Audit"]}]"#
    );
    enforce(
        "p",
        &binding(&["Deny"]),
        &evaluated,
        &Outcome::default(),
        &mut denied,
    );
    assert_eq!(denied.len(), 1);
}

#[test]
fn denials_read_as_upstreams() {
    let (user, outcome) = (UserInfo::server().clone(), Outcome::default());
    let a = attrs(&user, &outcome);
    let obj = json!({"metadata": {"name": "web"}});
    let err = denial_error(
        &a,
        &obj,
        &Denial {
            policy: "limit".into(),
            binding: Some("limit-b".into()),
            message: "too many".into(),
            reason: Some("Invalid".into()),
        },
    );
    assert_eq!(err.code, 422);
    assert_eq!(err.reason, "Invalid");
    assert_eq!(
        err.message,
        "deployments.apps \"web\" is forbidden: ValidatingAdmissionPolicy 'limit' with binding 'limit-b' denied request: too many"
    );
    assert_eq!(
        err.details.as_ref().unwrap().causes[0].message,
        "ValidatingAdmissionPolicy 'limit' with binding 'limit-b' denied request: too many"
    );
    let err = denial_error(
        &a,
        &obj,
        &Denial {
            policy: "limit".into(),
            binding: None,
            message: "failed to configure policy: x".into(),
            reason: Some("Forbidden".into()),
        },
    );
    assert_eq!(err.code, 403);
    assert!(err.message.ends_with(
        "ValidatingAdmissionPolicy 'limit' denied request: failed to configure policy: x"
    ));
}

#[test]
fn audit_annotations_are_collected_per_policy() {
    let mut c = AnnotationCollector::default();
    c.add("k", "a");
    c.add("k", "b");
    c.add("k", "a");
    let outcome = Outcome::default();
    c.publish("p", &outcome);
    assert_eq!(
        outcome.audit_annotations(),
        [("p/k".to_string(), "a, b".to_string())]
    );
}
