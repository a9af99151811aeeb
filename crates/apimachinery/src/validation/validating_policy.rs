//! `admissionregistration.k8s.io/v1` ValidatingAdmissionPolicy and ValidatingAdmissionPolicyBinding
//! (upstream `pkg/apis/admissionregistration/validation`: `validateValidatingAdmissionPolicySpec`,
//! `validateValidation`, `validateAuditAnnotation`, `validateValidatingAdmissionPolicyBindingSpec`,
//! `validateValidationActions`).
//!
//! Deliberately different, as for the mutating policies: expressions are checked structurally
//! (required, non-blank, length), not compiled; the policy plugin reports compile errors when the
//! policy is used, and the type-checking controller writes them to `status.typeChecking`.

use serde_json::Value;

use super::admission_policy::{binding_common, match_resources, policy_common, strs};
use super::field::{ErrorList, FieldError, FieldPath};
use super::json::{get, get_arr, get_str, str_or_empty};
use super::names;

const MAX_AUDIT_ANNOTATIONS: usize = 20;
const MAX_AUDIT_VALUE_EXPRESSION: usize = 5 * 1024;

/// `ValidateValidatingAdmissionPolicy` (also used on update: upstream only relaxes CEL compile
/// checks there, which rkube does not run).
pub(crate) fn validate_policy(obj: &Value) -> ErrorList {
    let sp = FieldPath::root("spec");
    let empty = Value::Object(Default::default());
    let spec = get(obj, &["spec"]).unwrap_or(&empty);
    let mut errs = policy_common(obj, spec, &sp, |_, _| ErrorList::new());
    let validations = get_arr(spec, &["validations"]);
    let audit = get_arr(spec, &["auditAnnotations"]);
    if validations.is_empty() && audit.is_empty() {
        const DETAIL: &str = "validations or auditAnnotations must contain at least one item";
        errs.push(FieldError::required(&sp.child("validations"), DETAIL));
        errs.push(FieldError::required(&sp.child("auditAnnotations"), DETAIL));
        return errs;
    }
    for (i, v) in validations.iter().enumerate() {
        errs.extend(validation(v, &sp.child("validations").index(i)));
    }
    if audit.len() > MAX_AUDIT_ANNOTATIONS {
        errs.push(FieldError::with_value_text(
            super::field::ErrorType::Invalid,
            &sp.child("auditAnnotations"),
            format!("[{} items]", audit.len()),
            format!("must not have more than {MAX_AUDIT_ANNOTATIONS} auditAnnotations"),
        ));
    }
    let name = str_or_empty(obj, &["metadata", "name"]);
    let mut keys: Vec<&str> = Vec::new();
    for (i, a) in audit.iter().enumerate() {
        let p = sp.child("auditAnnotations").index(i);
        errs.extend(audit_annotation(name, a, &p));
        let key = str_or_empty(a, &["key"]);
        if keys.contains(&key) {
            errs.push(FieldError::duplicate(&p.child("key"), key));
        }
        keys.push(key);
    }
    errs
}

/// `validateValidation` without compiling.
fn validation(v: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    if str_or_empty(v, &["expression"]).trim().is_empty() {
        errs.push(FieldError::required(
            &path.child("expression"),
            "expression is not specified",
        ));
    }
    let message_expression = str_or_empty(v, &["messageExpression"]);
    if !message_expression.is_empty() && message_expression.trim().is_empty() {
        errs.push(FieldError::invalid(
            &path.child("messageExpression"),
            message_expression,
            "must be non-empty if specified",
        ));
    }
    let message = str_or_empty(v, &["message"]);
    if !message.is_empty() && message.trim().is_empty() {
        errs.push(FieldError::invalid(
            &path.child("message"),
            message,
            "message must be non-empty if specified",
        ));
    } else if message.trim().contains(['\n', '\r']) {
        errs.push(FieldError::invalid(
            &path.child("message"),
            message,
            "message must not contain line breaks",
        ));
    }
    if let Some(reason) = get_str(v, &["reason"]) {
        const REASONS: [&str; 3] = ["Forbidden", "Invalid", "RequestEntityTooLarge"];
        if !REASONS.contains(&reason) {
            errs.push(FieldError::not_supported(
                &path.child("reason"),
                reason,
                &REASONS,
            ));
        }
    }
    errs
}

/// `validateAuditAnnotation` without compiling: the key, prefixed with the policy's name, must be
/// a qualified name (it becomes the audit annotation's key).
fn audit_annotation(policy: &str, a: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let key = str_or_empty(a, &["key"]);
    if policy.is_empty() {
        errs.push(FieldError::invalid(
            &path.child("key"),
            key,
            "requires metadata.name be non-empty",
        ));
    } else {
        let full = format!("{policy}/{key}");
        for m in names::is_qualified_name(&full) {
            errs.push(FieldError::invalid(&path.child("key"), full.as_str(), m));
        }
    }
    let value = str_or_empty(a, &["valueExpression"]).trim();
    if value.is_empty() {
        errs.push(FieldError::required(
            &path.child("valueExpression"),
            "valueExpression is not specified",
        ));
    } else if value.len() > MAX_AUDIT_VALUE_EXPRESSION {
        errs.push(FieldError::required(
            &path.child("valueExpression"),
            format!("must not exceed {MAX_AUDIT_VALUE_EXPRESSION} bytes in length"),
        ));
    }
    errs
}

/// `ValidateValidatingAdmissionPolicyBinding` (also used on update).
pub(crate) fn validate_binding(obj: &Value) -> ErrorList {
    let sp = FieldPath::root("spec");
    let mut errs = binding_common(obj, &sp);
    if let Some(mr) = get(obj, &["spec", "matchResources"]) {
        // Upstream's path is spelled `matchResouces`; clients may match on it.
        errs.extend(match_resources(mr, &sp.child("matchResouces")));
    }
    errs.extend(validation_actions(
        get_arr(obj, &["spec", "validationActions"]),
        &sp.child("validationActions"),
    ));
    errs
}

/// `validateValidationActions`.
fn validation_actions(list: &[Value], path: &FieldPath) -> ErrorList {
    const ACTIONS: [&str; 3] = ["Audit", "Deny", "Warn"];
    let mut errs = ErrorList::new();
    let mut seen: Vec<&str> = Vec::new();
    for (i, a) in strs(list).into_iter().enumerate() {
        if !ACTIONS.contains(&a) {
            errs.push(FieldError::not_supported(&path.index(i), a, &ACTIONS));
        }
        if seen.contains(&a) {
            errs.push(FieldError::duplicate(&path.index(i), a));
        }
        seen.push(a);
    }
    if seen.contains(&"Deny") && seen.contains(&"Warn") {
        errs.push(super::admission_policy::invalid_list(
            path,
            list,
            "must not contain both Deny and Warn (repeating the same validation failure \
             information in the API response and headers serves no purpose)"
                .into(),
        ));
    }
    if seen.is_empty() {
        errs.push(FieldError::required(
            path,
            "at least one validation action is required",
        ));
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn strings(errs: ErrorList) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    /// A policy as it is after defaulting.
    fn policy() -> Value {
        json!({"metadata": {"name": "replica-limit"}, "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {},
                "resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE"],
                    "resources": ["deployments"], "scope": "*"}]},
            "validations": [{"expression": "object.spec.replicas <= 5", "message": "too many", "reason": "Invalid"}],
            "auditAnnotations": [{"key": "replicas", "valueExpression": "string(object.spec.replicas)"}],
        }})
    }

    #[test]
    fn policy_cases() {
        assert_eq!(strings(validate_policy(&policy())), Vec::<String>::new());
        type Change = fn(&mut Value);
        let cases: Vec<(Change, &str)> = vec![
            (|p| { p["spec"].as_object_mut().unwrap().remove("failurePolicy"); },
                "spec.failurePolicy: Required value"),
            (|p| p["spec"]["matchConstraints"]["resourceRules"] = json!([]),
                "spec.matchConstraints.resourceRules: Required value"),
            (|p| { p["spec"]["validations"] = json!([]); p["spec"]["auditAnnotations"] = json!([]); },
                "spec.validations: Required value: validations or auditAnnotations must contain at least one item"),
            (|p| p["spec"]["validations"][0]["expression"] = json!("  "),
                "spec.validations[0].expression: Required value: expression is not specified"),
            (|p| p["spec"]["validations"][0]["message"] = json!("two\nlines"),
                "spec.validations[0].message: Invalid value: \"two\\nlines\": message must not contain line breaks"),
            (|p| p["spec"]["validations"][0]["reason"] = json!("Conflict"),
                "spec.validations[0].reason: Unsupported value: \"Conflict\": supported values: \"Forbidden\", \"Invalid\", \"RequestEntityTooLarge\""),
            (|p| p["spec"]["auditAnnotations"][0]["key"] = json!("bad key"),
                "spec.auditAnnotations[0].key: Invalid value: \"replica-limit/bad key\": name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"),
            (|p| { let a = p["spec"]["auditAnnotations"][0].clone(); p["spec"]["auditAnnotations"].as_array_mut().unwrap().push(a); },
                "spec.auditAnnotations[1].key: Duplicate value: \"replicas\""),
        ];
        for (change, want) in cases {
            let mut p = policy();
            change(&mut p);
            let got = strings(validate_policy(&p));
            assert!(got.iter().any(|e| e == want), "want {want}\ngot {got:?}");
        }
    }

    #[test]
    fn binding_cases() {
        let ok = json!({"metadata": {"name": "b"}, "spec": {"policyName": "p", "validationActions": ["Deny"]}});
        assert_eq!(strings(validate_binding(&ok)), Vec::<String>::new());
        let mut b = ok.clone();
        b["spec"]["validationActions"] = json!([]);
        assert_eq!(
            strings(validate_binding(&b)),
            ["spec.validationActions: Required value: at least one validation action is required"]
        );
        b["spec"]["validationActions"] = json!(["Deny", "Warn", "Deny", "Shout"]);
        assert_eq!(
            strings(validate_binding(&b)),
            [
                "spec.validationActions[2]: Duplicate value: \"Deny\"",
                "spec.validationActions[3]: Unsupported value: \"Shout\": supported values: \"Audit\", \"Deny\", \"Warn\"",
                "spec.validationActions: Invalid value: []string{\"Deny\", \"Warn\", \"Deny\", \"Shout\"}: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
            ]
        );
        let mut b = ok;
        b["spec"]["policyName"] = json!("");
        assert_eq!(
            strings(validate_binding(&b)),
            ["spec.policyName: Required value"]
        );
    }
}
