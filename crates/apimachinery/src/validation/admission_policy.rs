//! `admissionregistration.k8s.io/v1` MutatingAdmissionPolicy and MutatingAdmissionPolicyBinding
//! (upstream `pkg/apis/admissionregistration/validation`: `ValidateMutatingAdmissionPolicy`,
//! `validateMutation`, `ValidateMutatingAdmissionPolicyBinding` and the helpers they share with
//! the validating policies (`validating_policy.rs`) and the webhook configurations
//! (`admission_webhook.rs`): match resources and rules, param kind and ref, match conditions,
//! variables).
//!
//! Deliberately different: CEL is not compiled, so expressions get the structural rules only
//! (required, non-blank); upstream also reports compile and type errors. Updates are validated as
//! creates (upstream only relaxes CEL checks for unchanged expressions on update).

use serde_json::Value;

use super::field::{ErrorList, ErrorType, FieldError, FieldPath};
use super::json::{get, get_arr, get_str, str_or_empty};
use super::meta::{self, validate_label_selector, NameRule};
use super::names;
use super::networking_ipam::go_strings;

const OPERATIONS: [&str; 5] = ["*", "CONNECT", "CREATE", "DELETE", "UPDATE"];
/// `supportedMutatingOperations`: a mutation cannot apply to a delete.
const MUTATING_OPERATIONS: [&str; 4] = ["*", "CONNECT", "CREATE", "UPDATE"];
const SCOPES: [&str; 3] = ["*", "Cluster", "Namespaced"];
/// CEL's reserved words (also escaped as `__word__` in CRD property names).
pub const CEL_RESERVED: [&str; 21] = [
    "true",
    "false",
    "null",
    "in",
    "as",
    "break",
    "const",
    "continue",
    "else",
    "for",
    "function",
    "if",
    "import",
    "let",
    "loop",
    "package",
    "namespace",
    "return",
    "var",
    "void",
    "while",
];

pub(super) fn strs(v: &[Value]) -> Vec<&str> {
    v.iter().map(|s| s.as_str().unwrap_or("")).collect()
}

pub(super) fn invalid_list(path: &FieldPath, list: &[Value], detail: String) -> FieldError {
    FieldError::with_value_text(ErrorType::Invalid, path, go_strings(list), detail)
}

/// `validateResources` (subresources allowed).
fn resources(list: &[Value], path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    if list.is_empty() {
        errs.push(FieldError::required(path, ""));
    }
    let (mut wild_sub, mut wild_res): (Vec<&str>, Vec<&str>) = (Vec::new(), Vec::new());
    let (mut double, mut single, mut plain) = (false, false, false);
    for (i, rs) in strs(list).into_iter().enumerate() {
        if rs.is_empty() {
            errs.push(FieldError::required(&path.index(i), ""));
            continue;
        }
        double |= rs == "*/*";
        single |= rs == "*";
        let Some((res, sub)) = rs.split_once('/') else {
            plain = rs != "*";
            continue;
        };
        if wild_sub.contains(&res) {
            errs.push(FieldError::invalid(
                &path.index(i),
                rs,
                format!("if '{res}/*' is present, must not specify {rs}"),
            ));
        }
        if wild_res.contains(&sub) {
            errs.push(FieldError::invalid(
                &path.index(i),
                rs,
                format!("if '*/{sub}' is present, must not specify {rs}"),
            ));
        }
        if sub == "*" {
            wild_sub.push(res);
        }
        if res == "*" {
            wild_res.push(sub);
        }
    }
    if list.len() > 1 && double {
        errs.push(invalid_list(
            path,
            list,
            "if '*/*' is present, must not specify other resources".into(),
        ));
    }
    if single && plain {
        errs.push(invalid_list(
            path,
            list,
            "if '*' is present, must not specify other resources without subresources".into(),
        ));
    }
    errs
}

/// `validateRuleWithOperations` and `validateRule`.
pub(super) fn rule_with_operations(rule: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let ops_list = get_arr(rule, &["operations"]);
    let ops = strs(ops_list);
    let op_path = path.child("operations");
    if ops.is_empty() {
        errs.push(FieldError::required(&op_path, ""));
    }
    if ops.len() > 1 && ops.contains(&"*") {
        errs.push(invalid_list(
            &op_path,
            ops_list,
            "if '*' is present, must not specify other operations".into(),
        ));
    }
    for (i, op) in ops.iter().enumerate() {
        if !OPERATIONS.contains(op) {
            errs.push(FieldError::not_supported(
                &op_path.index(i),
                *op,
                &OPERATIONS,
            ));
        }
    }
    for (key, what) in [("apiGroups", "API groups"), ("apiVersions", "API versions")] {
        let list = get_arr(rule, &[key]);
        if list.is_empty() {
            errs.push(FieldError::required(&path.child(key), ""));
        }
        if list.len() > 1 && strs(list).contains(&"*") {
            errs.push(invalid_list(
                &path.child(key),
                list,
                format!("if '*' is present, must not specify other {what}"),
            ));
        }
    }
    for (i, v) in strs(get_arr(rule, &["apiVersions"])).iter().enumerate() {
        if v.is_empty() {
            errs.push(FieldError::required(
                &path.child("apiVersions").index(i),
                "",
            ));
        }
    }
    errs.extend(resources(
        get_arr(rule, &["resources"]),
        &path.child("resources"),
    ));
    if let Some(scope) = get_str(rule, &["scope"]).filter(|s| !SCOPES.contains(s)) {
        errs.push(FieldError::not_supported(
            &path.child("scope"),
            scope,
            &SCOPES,
        ));
    }
    errs
}

/// `validateNamedRuleWithOperations`.
fn named_rule(rule: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let mut seen = Vec::new();
    for (i, name) in strs(get_arr(rule, &["resourceNames"]))
        .into_iter()
        .enumerate()
    {
        let p = path.child("resourceNames").index(i);
        for m in names::is_valid_path_segment_name(name) {
            errs.push(FieldError::invalid(&p, name, m));
        }
        if seen.contains(&name) {
            errs.push(FieldError::duplicate(&p, name));
        } else {
            seen.push(name);
        }
    }
    errs.extend(rule_with_operations(rule, path));
    errs
}

/// `validateMatchResources`, plus the mutating policies' rule that the resource rules only match
/// CREATE, UPDATE and CONNECT (reported on `resourceRules.operations`, without an index, as
/// upstream does).
pub(super) fn match_resources(mr: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    match get_str(mr, &["matchPolicy"]) {
        None => errs.push(FieldError::required(&path.child("matchPolicy"), "")),
        Some("Exact" | "Equivalent") => {}
        Some(p) => errs.push(FieldError::not_supported(
            &path.child("matchPolicy"),
            p,
            &["Equivalent", "Exact"],
        )),
    }
    for key in ["namespaceSelector", "objectSelector"] {
        match get(mr, &[key]) {
            None => errs.push(FieldError::required(&path.child(key), "")),
            Some(sel) => errs.extend(validate_label_selector(Some(sel), &path.child(key))),
        }
    }
    for key in ["resourceRules", "excludeResourceRules"] {
        for (i, r) in get_arr(mr, &[key]).iter().enumerate() {
            errs.extend(named_rule(r, &path.child(key).index(i)));
        }
    }
    errs
}

fn mutating_operations(mr: &Value, path: &FieldPath) -> ErrorList {
    let p = path.child("resourceRules").child("operations");
    get_arr(mr, &["resourceRules"])
        .iter()
        .flat_map(|r| strs(get_arr(r, &["operations"])))
        .filter(|op| !MUTATING_OPERATIONS.contains(op))
        .map(|op| FieldError::not_supported(&p, op, &MUTATING_OPERATIONS))
        .collect()
}

/// `validateParamKind`.
pub(super) fn param_kind(pk: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let ap = path.child("apiVersion");
    let api_version = str_or_empty(pk, &["apiVersion"]);
    if api_version.is_empty() {
        errs.push(FieldError::required(&ap, ""));
    } else if api_version.matches('/').count() > 1 {
        errs.push(FieldError::invalid(
            &ap,
            api_version,
            format!("unexpected GroupVersion string: {api_version}"),
        ));
    } else {
        let (group, version) = match api_version {
            "/" => ("", ""),
            v => v.split_once('/').unwrap_or(("", v)),
        };
        if !group.is_empty() {
            let msgs = names::is_dns1123_subdomain(group);
            if !msgs.is_empty() {
                errs.push(FieldError::invalid(&ap, group, msgs.join(",")));
            }
        }
        if version.is_empty() {
            errs.push(FieldError::invalid(
                &ap,
                api_version,
                "version must be specified",
            ));
        } else {
            let msgs = names::is_dns1035_label(version);
            if !msgs.is_empty() {
                errs.push(FieldError::invalid(&ap, version, msgs.join(",")));
            }
        }
    }
    let kind = str_or_empty(pk, &["kind"]);
    if kind.is_empty() {
        errs.push(FieldError::required(&path.child("kind"), ""));
    } else {
        if let Some(msg) = names::kind_name_error(kind) {
            errs.push(FieldError::invalid(&path.child("kind"), kind, msg));
        }
    }
    errs
}

/// `validateMatchConditions` without compiling the expressions.
pub(super) fn match_conditions(list: &[Value], path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    if list.len() > 64 {
        errs.push(FieldError::too_many(path, list.len(), 64));
    }
    let mut seen = Vec::new();
    for (i, mc) in list.iter().enumerate() {
        let p = path.index(i);
        if str_or_empty(mc, &["expression"]).trim().is_empty() {
            errs.push(FieldError::required(&p.child("expression"), ""));
        }
        let name = str_or_empty(mc, &["name"]);
        if name.is_empty() {
            errs.push(FieldError::required(&p.child("name"), ""));
        } else {
            for m in names::is_qualified_name(name) {
                errs.push(FieldError::invalid(&p.child("name"), name, m));
            }
            if seen.contains(&name) {
                errs.push(FieldError::duplicate(&p.child("name"), name));
            } else {
                seen.push(name);
            }
        }
    }
    errs
}

fn is_cel_identifier(name: &str) -> bool {
    let b = name.as_bytes();
    b.first()
        .is_some_and(|c| c.is_ascii_alphabetic() || *c == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
        && !CEL_RESERVED.contains(&name)
}

/// `validateVariable` without compiling the expression.
pub(super) fn variable(v: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let name = str_or_empty(v, &["name"]);
    if name.trim().is_empty() {
        errs.push(FieldError::required(
            &path.child("name"),
            "name is not specified",
        ));
    } else if !is_cel_identifier(name) {
        errs.push(FieldError::invalid(
            &path.child("name"),
            name,
            "name is not a valid CEL identifier",
        ));
    }
    if str_or_empty(v, &["expression"]).trim().is_empty() {
        errs.push(FieldError::required(
            &path.child("expression"),
            "expression is not specified",
        ));
    }
    errs
}

/// `validateMutation`: the patchType union and a non-blank expression in the chosen member.
fn mutation(m: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let (ac, jp) = (path.child("applyConfiguration"), path.child("jsonPatch"));
    let expression = |member: &Value, p: &FieldPath| {
        if str_or_empty(member, &["expression"]).trim().is_empty() {
            vec![FieldError::required(&p.child("expression"), "")]
        } else {
            Vec::new()
        }
    };
    let (apply, json_patch) = (get(m, &["applyConfiguration"]), get(m, &["jsonPatch"]));
    match str_or_empty(m, &["patchType"]) {
        "" => errs.push(FieldError::required(&path.child("patchType"), "")),
        "JSONPatch" => {
            match json_patch {
                None => errs.push(FieldError::required(
                    &jp,
                    "must be specified when patchType is JSONPatch",
                )),
                Some(j) => errs.extend(expression(j, &jp)),
            }
            if apply.is_some() {
                errs.push(FieldError::invalid(
                    &ac,
                    "{applyConfiguration}",
                    "must not be specified when patchType is JSONPatch",
                ));
            }
        }
        "ApplyConfiguration" => {
            match apply {
                None => errs.push(FieldError::required(
                    &ac,
                    "must be specified when patchType is ApplyConfiguration",
                )),
                Some(a) => errs.extend(expression(a, &ac)),
            }
            if json_patch.is_some() {
                errs.push(FieldError::invalid(
                    &jp,
                    "{jsonPatch}",
                    "must not be specified when patchType is ApplyConfiguration",
                ));
            }
        }
        other => errs.push(FieldError::not_supported(
            &path.child("patchType"),
            other,
            &["ApplyConfiguration", "JSONPatch"],
        )),
    }
    errs
}

/// What validating and mutating policies share: metadata, failurePolicy, paramKind,
/// matchConstraints (`match_extra` adds kind-specific checks on them), matchConditions, variables.
pub(super) fn policy_common(
    obj: &Value,
    spec: &Value,
    sp: &FieldPath,
    match_extra: fn(&Value, &FieldPath) -> ErrorList,
) -> ErrorList {
    let mut errs = meta::validate_object_meta(obj, NameRule::Subdomain, false);
    match get_str(spec, &["failurePolicy"]) {
        None => errs.push(FieldError::required(&sp.child("failurePolicy"), "")),
        Some("Fail" | "Ignore") => {}
        Some(p) => errs.push(FieldError::not_supported(
            &sp.child("failurePolicy"),
            p,
            &["Fail", "Ignore"],
        )),
    }
    if let Some(pk) = get(spec, &["paramKind"]) {
        errs.extend(param_kind(pk, &sp.child("paramKind")));
    }
    let mp = sp.child("matchConstraints");
    match get(spec, &["matchConstraints"]) {
        None => errs.push(FieldError::required(&mp, "")),
        Some(mc) => {
            errs.extend(match_resources(mc, &mp));
            if get_arr(mc, &["resourceRules"]).is_empty() {
                errs.push(FieldError::required(&mp.child("resourceRules"), ""));
            }
            errs.extend(match_extra(mc, &mp));
        }
    }
    errs.extend(match_conditions(
        get_arr(spec, &["matchConditions"]),
        &sp.child("matchConditions"),
    ));
    for (i, v) in get_arr(spec, &["variables"]).iter().enumerate() {
        errs.extend(variable(v, &sp.child("variables").index(i)));
    }
    errs
}

/// What validating and mutating bindings share: metadata, policyName, paramRef.
pub(super) fn binding_common(obj: &Value, sp: &FieldPath) -> ErrorList {
    let mut errs = meta::validate_object_meta(obj, NameRule::Subdomain, false);
    let pn = str_or_empty(obj, &["spec", "policyName"]);
    if pn.is_empty() {
        errs.push(FieldError::required(&sp.child("policyName"), ""));
    } else {
        for m in names::is_dns1123_subdomain(pn) {
            errs.push(FieldError::invalid(&sp.child("policyName"), pn, m));
        }
    }
    if let Some(pr) = get(obj, &["spec", "paramRef"]) {
        errs.extend(param_ref(pr, &sp.child("paramRef")));
    }
    errs
}

/// `ValidateMutatingAdmissionPolicy` (also used on update).
pub(crate) fn validate_mutating_policy(obj: &Value) -> ErrorList {
    let sp = FieldPath::root("spec");
    let empty = Value::Object(Default::default());
    let spec = get(obj, &["spec"]).unwrap_or(&empty);
    let mut errs = policy_common(obj, spec, &sp, mutating_operations);
    let mutations = get_arr(spec, &["mutations"]);
    if mutations.is_empty() {
        errs.push(FieldError::required(
            &sp.child("mutations"),
            "mutations must contain at least one item",
        ));
    }
    for (i, m) in mutations.iter().enumerate() {
        errs.extend(mutation(m, &sp.child("mutations").index(i)));
    }
    match str_or_empty(spec, &["reinvocationPolicy"]) {
        "" => errs.push(FieldError::required(&sp.child("reinvocationPolicy"), "")),
        "Never" | "IfNeeded" => {}
        p => errs.push(FieldError::not_supported(
            &sp.child("reinvocationPolicy"),
            p,
            &["IfNeeded", "Never"],
        )),
    }
    errs
}

/// `validateParamRef`.
pub(super) fn param_ref(pr: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let name = str_or_empty(pr, &["name"]);
    let selector = get(pr, &["selector"]);
    const EXCLUSIVE: &str = "name and selector are mutually exclusive";
    if !name.is_empty() {
        for m in names::is_valid_path_segment_name(name) {
            errs.push(FieldError::invalid(&path.child("name"), name, m));
        }
        if selector.is_some() {
            errs.push(FieldError::forbidden(&path.child("name"), EXCLUSIVE));
        }
    }
    if let Some(sel) = selector {
        errs.extend(validate_label_selector(Some(sel), &path.child("selector")));
        if !name.is_empty() {
            errs.push(FieldError::forbidden(&path.child("selector"), EXCLUSIVE));
        }
    }
    if name.is_empty() && selector.is_none() {
        errs.push(FieldError::required(
            path,
            "one of name or selector must be specified",
        ));
    }
    match str_or_empty(pr, &["parameterNotFoundAction"]) {
        "" => errs.push(FieldError::required(
            &path.child("parameterNotFoundAction"),
            "",
        )),
        "Deny" | "Allow" => {}
        a => errs.push(FieldError::not_supported(
            &path.child("parameterNotFoundAction"),
            a,
            &["Deny", "Allow"],
        )),
    }
    errs
}

/// `ValidateMutatingAdmissionPolicyBinding` (also used on update).
pub(crate) fn validate_mutating_binding(obj: &Value) -> ErrorList {
    let sp = FieldPath::root("spec");
    let mut errs = binding_common(obj, &sp);
    if let Some(mr) = get(obj, &["spec", "matchResources"]) {
        let mp = sp.child("matchResources");
        errs.extend(match_resources(mr, &mp));
        errs.extend(mutating_operations(mr, &mp));
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
        json!({"metadata": {"name": "add-label"}, "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {"matchPolicy": "Equivalent", "namespaceSelector": {}, "objectSelector": {},
                "resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"], "operations": ["CREATE", "UPDATE"],
                    "resources": ["deployments"], "scope": "*"}]},
            "paramKind": {"apiVersion": "v1", "kind": "ConfigMap"},
            "variables": [{"name": "team", "expression": "params.data.team"}],
            "matchConditions": [{"name": "not-system", "expression": "true"}],
            "mutations": [{"patchType": "ApplyConfiguration",
                "applyConfiguration": {"expression": "Object{metadata: Object.metadata{labels: {'team': variables.team}}}"}}],
            "reinvocationPolicy": "Never",
        }})
    }

    #[test]
    fn policy_cases() {
        assert_eq!(
            strings(validate_mutating_policy(&policy())),
            Vec::<String>::new()
        );
        type Change = fn(&mut Value);
        let cases: Vec<(Change, &str)> = vec![
            (|p| p["spec"]["failurePolicy"] = json!("Sometimes"),
                "spec.failurePolicy: Unsupported value: \"Sometimes\": supported values: \"Fail\", \"Ignore\""),
            (|p| { p["spec"].as_object_mut().unwrap().remove("reinvocationPolicy"); },
                "spec.reinvocationPolicy: Required value"),
            (|p| p["spec"]["reinvocationPolicy"] = json!("Always"),
                "spec.reinvocationPolicy: Unsupported value: \"Always\": supported values: \"IfNeeded\", \"Never\""),
            (|p| { p["spec"].as_object_mut().unwrap().remove("matchConstraints"); },
                "spec.matchConstraints: Required value"),
            (|p| p["spec"]["matchConstraints"]["resourceRules"] = json!([]),
                "spec.matchConstraints.resourceRules: Required value"),
            (|p| p["spec"]["matchConstraints"]["resourceRules"][0]["operations"] = json!(["DELETE"]),
                "spec.matchConstraints.resourceRules.operations: Unsupported value: \"DELETE\": supported values: \"*\", \"CONNECT\", \"CREATE\", \"UPDATE\""),
            (|p| p["spec"]["matchConstraints"]["matchPolicy"] = json!("Fuzzy"),
                "spec.matchConstraints.matchPolicy: Unsupported value: \"Fuzzy\": supported values: \"Equivalent\", \"Exact\""),
            (|p| p["spec"]["matchConstraints"]["resourceRules"][0]["resources"] = json!(["*", "pods"]),
                "spec.matchConstraints.resourceRules[0].resources: Invalid value: []string{\"*\", \"pods\"}: if '*' is present, must not specify other resources without subresources"),
            (|p| p["spec"]["matchConstraints"]["resourceRules"][0]["apiVersions"] = json!([]),
                "spec.matchConstraints.resourceRules[0].apiVersions: Required value"),
            (|p| p["spec"]["matchConstraints"]["resourceRules"][0]["scope"] = json!("Global"),
                "spec.matchConstraints.resourceRules[0].scope: Unsupported value: \"Global\": supported values: \"*\", \"Cluster\", \"Namespaced\""),
            (|p| p["spec"]["mutations"] = json!([]),
                "spec.mutations: Required value: mutations must contain at least one item"),
            (|p| p["spec"]["mutations"][0]["patchType"] = json!(""),
                "spec.mutations[0].patchType: Required value"),
            (|p| p["spec"]["mutations"][0]["patchType"] = json!("MergePatch"),
                "spec.mutations[0].patchType: Unsupported value: \"MergePatch\": supported values: \"ApplyConfiguration\", \"JSONPatch\""),
            (|p| p["spec"]["mutations"][0]["applyConfiguration"]["expression"] = json!("  "),
                "spec.mutations[0].applyConfiguration.expression: Required value"),
            (|p| p["spec"]["paramKind"]["kind"] = json!(""),
                "spec.paramKind.kind: Required value"),
            (|p| p["spec"]["paramKind"]["apiVersion"] = json!("a/b/c"),
                "spec.paramKind.apiVersion: Invalid value: \"a/b/c\": unexpected GroupVersion string: a/b/c"),
            (|p| p["spec"]["variables"][0]["name"] = json!("if"),
                "spec.variables[0].name: Invalid value: \"if\": name is not a valid CEL identifier"),
            (|p| p["spec"]["variables"][0]["expression"] = json!(""),
                "spec.variables[0].expression: Required value: expression is not specified"),
            (|p| p["spec"]["matchConditions"][0]["expression"] = json!(""),
                "spec.matchConditions[0].expression: Required value"),
        ];
        for (change, want) in cases {
            let mut p = policy();
            change(&mut p);
            assert_eq!(
                strings(validate_mutating_policy(&p)),
                vec![want.to_string()]
            );
        }
        let mut p = policy();
        p["spec"]["mutations"][0] =
            json!({"patchType": "JSONPatch", "applyConfiguration": {"expression": "x"}});
        assert_eq!(
            strings(validate_mutating_policy(&p)),
            vec![
                "spec.mutations[0].jsonPatch: Required value: must be specified when patchType is JSONPatch",
                "spec.mutations[0].applyConfiguration: Invalid value: \"{applyConfiguration}\": must not be specified when patchType is JSONPatch",
            ]
        );
        p["spec"]["mutations"][0] =
            json!({"patchType": "ApplyConfiguration", "jsonPatch": {"expression": "x"}});
        assert_eq!(
            strings(validate_mutating_policy(&p)),
            vec![
                "spec.mutations[0].applyConfiguration: Required value: must be specified when patchType is ApplyConfiguration",
                "spec.mutations[0].jsonPatch: Invalid value: \"{jsonPatch}\": must not be specified when patchType is ApplyConfiguration",
            ]
        );
    }

    fn binding() -> Value {
        json!({"metadata": {"name": "add-label-binding"}, "spec": {
            "policyName": "add-label",
            "paramRef": {"name": "team-config", "namespace": "default", "parameterNotFoundAction": "Deny"},
            "matchResources": {"matchPolicy": "Equivalent", "namespaceSelector": {"matchLabels": {"env": "test"}},
                "objectSelector": {}},
        }})
    }

    #[test]
    fn binding_cases() {
        assert_eq!(
            strings(validate_mutating_binding(&binding())),
            Vec::<String>::new()
        );
        type Change = fn(&mut Value);
        let cases: Vec<(Change, Vec<&str>)> = vec![
            (|b| b["spec"]["policyName"] = json!(""), vec!["spec.policyName: Required value"]),
            (|b| b["spec"]["policyName"] = json!("Bad_Name"),
                vec!["spec.policyName: Invalid value: \"Bad_Name\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"]),
            (|b| b["spec"]["paramRef"] = json!({"parameterNotFoundAction": "Deny"}),
                vec!["spec.paramRef: Required value: one of name or selector must be specified"]),
            (|b| b["spec"]["paramRef"]["selector"] = json!({}),
                vec!["spec.paramRef.name: Forbidden: name and selector are mutually exclusive",
                     "spec.paramRef.selector: Forbidden: name and selector are mutually exclusive"]),
            (|b| { b["spec"]["paramRef"].as_object_mut().unwrap().remove("parameterNotFoundAction"); },
                vec!["spec.paramRef.parameterNotFoundAction: Required value"]),
            (|b| b["spec"]["paramRef"]["parameterNotFoundAction"] = json!("Ignore"),
                vec!["spec.paramRef.parameterNotFoundAction: Unsupported value: \"Ignore\": supported values: \"Deny\", \"Allow\""]),
            (|b| { b["spec"]["matchResources"].as_object_mut().unwrap().remove("objectSelector"); },
                vec!["spec.matchResources.objectSelector: Required value"]),
            (|b| b["spec"]["matchResources"]["resourceRules"] = json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["*", "DELETE"], "resources": ["pods"]}]),
                vec!["spec.matchResources.resourceRules[0].operations: Invalid value: []string{\"*\", \"DELETE\"}: if '*' is present, must not specify other operations",
                     "spec.matchResources.resourceRules.operations: Unsupported value: \"DELETE\": supported values: \"*\", \"CONNECT\", \"CREATE\", \"UPDATE\""]),
        ];
        for (change, want) in cases {
            let mut b = binding();
            change(&mut b);
            assert_eq!(strings(validate_mutating_binding(&b)), want);
        }
    }
}
