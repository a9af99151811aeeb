//! `flowcontrol.apiserver.k8s.io/v1` FlowSchema and PriorityLevelConfiguration (upstream
//! `pkg/apis/flowcontrol/validation`): the spec rules, the status condition rules, and the fixed
//! specs of the mandatory `exempt` and `catch-all` objects (`internalbootstrap`, in their defaulted
//! v1 form). Updates are validated as creates, as upstream does.
//!
//! Deliberately different: v1 requests only, so a limited level's `nominalConcurrencyShares` may be
//! 0 (upstream's `AllowZeroLimitedNominalConcurrencyShares` for v1); the mismatch error of a
//! mandatory object carries the spec as JSON, not Go's `%#v`.

use serde_json::{json, Value};

use super::field::{ErrorList, ErrorType, FieldError, FieldPath};
use super::json::{get, get_arr, get_int, semantic_eq, str_or_empty};
use super::meta::{self, NameRule};
use super::names;
use super::networking_ipam::go_strings;

const SUPPORTED_VERBS: [&str; 9] = [
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "proxy",
    "update",
    "watch",
];
const NS_ERR_INTRO: &str = "each member of this list must be '*' or a DNS-1123 label; ";
const MAX_MATCHING_PRECEDENCE: i64 = 10000;
const MAX_QUEUES: i64 = 10_000_000;
/// `shufflesharding.MaxHashBits`.
const MAX_HASH_BITS: f64 = 60.0;

fn strs(v: &[Value]) -> Vec<&str> {
    v.iter().map(|s| s.as_str().unwrap_or("")).collect()
}

fn invalid_list(path: &FieldPath, list: &[Value], detail: &str) -> FieldError {
    FieldError::with_value_text(ErrorType::Invalid, path, go_strings(list), detail)
}

/// The verbs rule shared by resource and non-resource rules.
fn verbs(rule: &Value, path: &FieldPath) -> ErrorList {
    let list = get_arr(rule, &["verbs"]);
    let v = strs(list);
    if v.is_empty() {
        vec![FieldError::required(
            path,
            "verbs must contain at least one value",
        )]
    } else if v.contains(&"*") {
        if v.len() > 1 {
            vec![invalid_list(
                path,
                list,
                "if '*' is present, must not specify other verbs",
            )]
        } else {
            Vec::new()
        }
    } else if !v.iter().all(|x| SUPPORTED_VERBS.contains(x)) {
        let quoted: Vec<String> = SUPPORTED_VERBS.iter().map(|s| format!("{s:?}")).collect();
        vec![FieldError::with_value_text(
            ErrorType::NotSupported,
            path,
            go_strings(list),
            format!("supported values: {}", quoted.join(", ")),
        )]
    } else {
        Vec::new()
    }
}

/// `ValidateNonResourceURLPath`.
fn non_resource_url(url: &str, path: &FieldPath) -> Option<FieldError> {
    let msg = if url.is_empty() {
        "must not be empty"
    } else if url == "/" {
        return None;
    } else if !url.starts_with('/') {
        "must start with slash"
    } else if url.contains(' ') {
        "must not contain white-space"
    } else if url.contains("//") {
        "must not contain double slash"
    } else {
        let n = url.matches('*').count();
        if n > 1 || (n == 1 && !url.ends_with("/*")) {
            "wildcard can only do suffix matching"
        } else {
            return None;
        }
    };
    Some(FieldError::invalid(path, url, msg))
}

fn non_resource_rule(rule: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = verbs(rule, &path.child("verbs"));
    let up = path.child("nonResourceURLs");
    let list = get_arr(rule, &["nonResourceURLs"]);
    let urls = strs(list);
    if urls.is_empty() {
        errs.push(FieldError::required(
            &up,
            "nonResourceURLs must contain at least one value",
        ));
    } else if urls.contains(&"*") {
        if urls.len() > 1 {
            errs.push(invalid_list(
                &up,
                list,
                "if '*' is present, must not specify other non-resource URLs",
            ));
        }
    } else {
        errs.extend(
            urls.iter()
                .enumerate()
                .filter_map(|(i, u)| non_resource_url(u, &up.index(i))),
        );
    }
    errs
}

fn resource_rule(rule: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = verbs(rule, &path.child("verbs"));
    for (key, what) in [("apiGroups", "api group"), ("resources", "resource")] {
        let list = get_arr(rule, &[key]);
        if list.is_empty() {
            errs.push(FieldError::required(
                &path.child(key),
                format!("resource rules must supply at least one {what}"),
            ));
        } else if list.len() > 1 && strs(list).contains(&"*") {
            let plural = if key == "apiGroups" {
                "api groups"
            } else {
                "resources"
            };
            errs.push(invalid_list(
                &path.child(key),
                list,
                &format!("if '*' is present, must not specify other {plural}"),
            ));
        }
    }
    let np = path.child("namespaces");
    let list = get_arr(rule, &["namespaces"]);
    let ns = strs(list);
    let cluster_scope = rule
        .get("clusterScope")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if ns.is_empty() && !cluster_scope {
        errs.push(FieldError::required(
            &np,
            "resource rules that are not cluster scoped must supply at least one namespace",
        ));
    } else if ns.contains(&"*") {
        if ns.len() > 1 {
            errs.push(invalid_list(
                &np,
                list,
                "if '*' is present, must not specify other namespaces",
            ));
        }
    } else {
        for (i, n) in ns.iter().enumerate() {
            for m in names::is_dns1123_label(n) {
                errs.push(FieldError::invalid(
                    &np.index(i),
                    *n,
                    format!("{NS_ERR_INTRO}{m}"),
                ));
            }
        }
    }
    errs
}

/// `ValidateFlowSchemaSubject`.
fn subject(s: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let kind = str_or_empty(s, &["kind"]);
    let forbid = |errs: &mut ErrorList, key: &str, kind_name: &str| {
        if get(s, &[key]).is_some() {
            errs.push(FieldError::forbidden(
                &path.child(key),
                format!("{key} is forbidden when subject kind is not '{kind_name}'"),
            ));
        }
    };
    match kind {
        "ServiceAccount" => {
            let p = path.child("serviceAccount");
            match get(s, &["serviceAccount"]) {
                None => errs.push(FieldError::required(
                    &p,
                    "serviceAccount is required when subject kind is 'ServiceAccount'",
                )),
                Some(sa) => {
                    let name = str_or_empty(sa, &["name"]);
                    if name.is_empty() {
                        errs.push(FieldError::required(&p.child("name"), ""));
                    } else if name != "*" {
                        for m in names::is_dns1123_subdomain(name) {
                            errs.push(FieldError::invalid(&p.child("name"), name, m));
                        }
                    }
                    let ns = str_or_empty(sa, &["namespace"]);
                    if ns.is_empty() {
                        errs.push(FieldError::required(
                            &p.child("namespace"),
                            "must specify namespace for service account",
                        ));
                    } else {
                        for m in names::is_dns1123_label(ns) {
                            errs.push(FieldError::invalid(&p.child("namespace"), ns, m));
                        }
                    }
                }
            }
            forbid(&mut errs, "user", "User");
            forbid(&mut errs, "group", "Group");
        }
        "User" | "Group" => {
            let key = if kind == "User" { "user" } else { "group" };
            match get(s, &[key]) {
                None => errs.push(FieldError::required(
                    &path.child(key),
                    format!("{key} is required when subject kind is '{kind}'"),
                )),
                Some(v) if str_or_empty(v, &["name"]).is_empty() => {
                    errs.push(FieldError::required(&path.child(key).child("name"), ""))
                }
                Some(_) => {}
            }
            forbid(&mut errs, "serviceAccount", "ServiceAccount");
            if kind == "User" {
                forbid(&mut errs, "group", "Group");
            } else {
                forbid(&mut errs, "user", "User");
            }
        }
        other => errs.push(FieldError::not_supported(
            &path.child("kind"),
            other,
            &["Group", "ServiceAccount", "User"],
        )),
    }
    errs
}

fn policy_rules(rule: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let subjects = get_arr(rule, &["subjects"]);
    if subjects.is_empty() {
        errs.push(FieldError::required(
            &path.child("subjects"),
            "subjects must contain at least one value",
        ));
    }
    for (i, s) in subjects.iter().enumerate() {
        errs.extend(subject(s, &path.child("subjects").index(i)));
    }
    let (rr, nr) = (
        get_arr(rule, &["resourceRules"]),
        get_arr(rule, &["nonResourceRules"]),
    );
    if rr.is_empty() && nr.is_empty() {
        errs.push(FieldError::required(
            path,
            "at least one of resourceRules and nonResourceRules has to be non-empty",
        ));
    }
    for (i, r) in rr.iter().enumerate() {
        errs.extend(resource_rule(r, &path.child("resourceRules").index(i)));
    }
    for (i, r) in nr.iter().enumerate() {
        errs.extend(non_resource_rule(
            r,
            &path.child("nonResourceRules").index(i),
        ));
    }
    errs
}

/// Status conditions: types unique and non-empty.
fn conditions(obj: &Value) -> ErrorList {
    let path = FieldPath::root("status").child("conditions");
    let mut errs = ErrorList::new();
    let mut seen = Vec::new();
    for (i, c) in get_arr(obj, &["status", "conditions"]).iter().enumerate() {
        let ty = str_or_empty(c, &["type"]);
        if seen.contains(&ty) {
            errs.push(FieldError::duplicate(&path.index(i).child("type"), ty));
        }
        seen.push(ty);
        if ty.is_empty() {
            errs.push(FieldError::required(
                &path.index(i).child("type"),
                "must not be empty",
            ));
        }
    }
    errs
}

/// The defaulted v1 specs of the mandatory FlowSchemas.
fn mandatory_flow_schema(name: &str) -> Option<Value> {
    let rules = |groups: &[&str]| {
        let subjects: Vec<Value> = groups
            .iter()
            .map(|g| json!({"kind": "Group", "group": {"name": g}}))
            .collect();
        json!([{
            "subjects": subjects,
            "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                "clusterScope": true, "namespaces": ["*"]}],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
        }])
    };
    match name {
        "exempt" => Some(json!({
            "priorityLevelConfiguration": {"name": "exempt"},
            "matchingPrecedence": 1,
            "rules": rules(&["system:masters"]),
        })),
        "catch-all" => Some(json!({
            "priorityLevelConfiguration": {"name": "catch-all"},
            "matchingPrecedence": 10000,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": rules(&["system:unauthenticated", "system:authenticated"]),
        })),
        _ => None,
    }
}

/// The defaulted v1 specs of the mandatory PriorityLevelConfigurations.
fn mandatory_priority_level(name: &str) -> Option<Value> {
    match name {
        "exempt" => Some(json!({
            "type": "Exempt",
            "exempt": {"nominalConcurrencyShares": 0, "lendablePercent": 0},
        })),
        "catch-all" => Some(json!({
            "type": "Limited",
            "limited": {"nominalConcurrencyShares": 5, "lendablePercent": 0,
                "limitResponse": {"type": "Reject"}},
        })),
        _ => None,
    }
}

/// `ValidateFlowSchema` (also used on update).
pub(crate) fn validate_flow_schema(obj: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta(obj, NameRule::Subdomain, true);
    let sp = FieldPath::root("spec");
    let name = str_or_empty(obj, &["metadata", "name"]);
    let mp = sp.child("matchingPrecedence");
    let prec = get_int(obj, &["spec", "matchingPrecedence"]).unwrap_or(0);
    if prec <= 0 {
        errs.push(FieldError::invalid(&mp, prec, "must be a positive value"));
    }
    if prec > MAX_MATCHING_PRECEDENCE {
        errs.push(FieldError::invalid(
            &mp,
            prec,
            format!("must not be greater than {MAX_MATCHING_PRECEDENCE}"),
        ));
    }
    if prec == 1 && name != "exempt" {
        errs.push(FieldError::invalid(
            &mp,
            prec,
            "only the schema named 'exempt' may have matchingPrecedence 1",
        ));
    }
    if let Some(dm) = get(obj, &["spec", "distinguisherMethod"]) {
        let ty = str_or_empty(dm, &["type"]);
        if ty != "ByNamespace" && ty != "ByUser" {
            errs.push(FieldError::with_value_text(
                ErrorType::NotSupported,
                &sp.child("distinguisherMethod").child("type"),
                format!("flowcontrol.FlowDistinguisherMethod{{Type:{ty:?}}}"),
                "supported values: \"ByNamespace\", \"ByUser\"",
            ));
        }
    }
    let pp = sp.child("priorityLevelConfiguration").child("name");
    let pl = str_or_empty(obj, &["spec", "priorityLevelConfiguration", "name"]);
    if pl.is_empty() {
        errs.push(FieldError::required(&pp, "must reference a priority level"));
    } else {
        for m in names::is_dns1123_subdomain(pl) {
            errs.push(FieldError::invalid(&pp, pl, m));
        }
    }
    for (i, r) in get_arr(obj, &["spec", "rules"]).iter().enumerate() {
        errs.extend(policy_rules(r, &sp.child("rules").index(i)));
    }
    if let Some(want) = mandatory_flow_schema(name) {
        let have = get(obj, &["spec"]);
        if !semantic_eq(have, Some(&want)) {
            errs.push(FieldError::invalid(
                &sp,
                have.cloned().unwrap_or(Value::Null),
                format!("spec of '{name}' must equal the fixed value"),
            ));
        }
    }
    errs.extend(conditions(obj));
    errs
}

/// `shufflesharding.RequiredEntropyBits`: `ceil(log2(deckSize) * handSize)`.
fn required_entropy_bits(deck: i64, hand: i64) -> f64 {
    ((deck as f64).log2() * hand as f64).ceil()
}

fn queuing(q: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let qll = get_int(q, &["queueLengthLimit"]).unwrap_or(0);
    if qll <= 0 {
        errs.push(FieldError::invalid(
            &path.child("queueLengthLimit"),
            qll,
            "must be positive",
        ));
    }
    let queues = get_int(q, &["queues"]).unwrap_or(0);
    if queues <= 0 {
        errs.push(FieldError::invalid(
            &path.child("queues"),
            queues,
            "must be positive",
        ));
    } else if queues > MAX_QUEUES {
        errs.push(FieldError::invalid(
            &path.child("queues"),
            queues,
            format!("must not be greater than {MAX_QUEUES}"),
        ));
    }
    let hand = get_int(q, &["handSize"]).unwrap_or(0);
    let hp = path.child("handSize");
    if hand <= 0 {
        errs.push(FieldError::invalid(&hp, hand, "must be positive"));
    } else if hand > queues {
        errs.push(FieldError::invalid(
            &hp,
            hand,
            format!("should not be greater than queues ({queues})"),
        ));
    } else if required_entropy_bits(queues, hand) > MAX_HASH_BITS {
        errs.push(FieldError::invalid(
            &hp,
            hand,
            format!(
                "required entropy bits of deckSize {queues} and handSize {hand} should not be greater than {}",
                MAX_HASH_BITS as i64
            ),
        ));
    }
    errs
}

fn limit_response(lr: Option<&Value>, path: &FieldPath) -> ErrorList {
    let empty = json!({});
    let lr = lr.unwrap_or(&empty);
    let q = get(lr, &["queuing"]);
    match str_or_empty(lr, &["type"]) {
        "Reject" if q.is_some() => vec![FieldError::forbidden(
            &path.child("queuing"),
            "must be nil if limited.limitResponse.type is not Limited",
        )],
        "Reject" => Vec::new(),
        "Queue" => match q {
            None => vec![FieldError::required(
                &path.child("queuing"),
                "must not be empty if limited.limitResponse.type is Limited",
            )],
            Some(q) => queuing(q, &path.child("queuing")),
        },
        other => vec![FieldError::not_supported(
            &path.child("type"),
            other,
            &["Queue", "Reject"],
        )],
    }
}

fn lendable_percent(cfg: &Value, path: &FieldPath) -> ErrorList {
    match get_int(cfg, &["lendablePercent"]) {
        Some(p) if !(0..=100).contains(&p) => vec![FieldError::invalid(
            &path.child("lendablePercent"),
            p,
            "must be between 0 and 100, inclusive",
        )],
        _ => Vec::new(),
    }
}

fn limited(l: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let ncs = get_int(l, &["nominalConcurrencyShares"]).unwrap_or(0);
    if ncs < 0 {
        errs.push(FieldError::invalid(
            &path.child("nominalConcurrencyShares"),
            ncs,
            "must be a non-negative integer",
        ));
    }
    errs.extend(limit_response(
        get(l, &["limitResponse"]),
        &path.child("limitResponse"),
    ));
    errs.extend(lendable_percent(l, path));
    if let Some(b) = get_int(l, &["borrowingLimitPercent"]).filter(|b| *b < 0) {
        errs.push(FieldError::invalid(
            &path.child("borrowingLimitPercent"),
            b,
            "if specified, must be a non-negative integer",
        ));
    }
    errs
}

fn exempt(e: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    if let Some(n) = get_int(e, &["nominalConcurrencyShares"]).filter(|n| *n < 0) {
        errs.push(FieldError::invalid(
            &path.child("nominalConcurrencyShares"),
            n,
            "must be a non-negative integer",
        ));
    }
    errs.extend(lendable_percent(e, path));
    errs
}

/// `ValidatePriorityLevelConfiguration` (also used on update).
pub(crate) fn validate_priority_level(obj: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta(obj, NameRule::Subdomain, true);
    let sp = FieldPath::root("spec");
    let name = str_or_empty(obj, &["metadata", "name"]);
    let ty = str_or_empty(obj, &["spec", "type"]);
    if (name == "exempt") != (ty == "Exempt") {
        errs.push(FieldError::invalid(
            &sp.child("type"),
            ty,
            "type must be 'Exempt' if and only if name is 'exempt'",
        ));
    }
    let lim = get(obj, &["spec", "limited"]);
    let ex = get(obj, &["spec", "exempt"]);
    match ty {
        "Exempt" => {
            if lim.is_some() {
                errs.push(FieldError::forbidden(
                    &sp.child("limited"),
                    "must be nil if the type is not Limited",
                ));
            }
            if let Some(e) = ex {
                errs.extend(exempt(e, &sp.child("exempt")));
            }
        }
        "Limited" => {
            if ex.is_some() {
                errs.push(FieldError::forbidden(
                    &sp.child("exempt"),
                    "must be nil if the type is Limited",
                ));
            }
            match lim {
                None => errs.push(FieldError::required(
                    &sp.child("limited"),
                    "must not be empty when type is Limited",
                )),
                Some(l) => errs.extend(limited(l, &sp.child("limited"))),
            }
        }
        other => errs.push(FieldError::not_supported(
            &sp.child("type"),
            other,
            &["Exempt", "Limited"],
        )),
    }
    if let Some(want) = mandatory_priority_level(name) {
        let have = get(obj, &["spec"]).cloned().unwrap_or(Value::Null);
        if name == "exempt" {
            // The admin may tune spec.exempt of the 'exempt' level; nothing else.
            let mut cmp = have.clone();
            if let (Some(c), Some(w)) = (cmp.as_object_mut(), want.get("exempt")) {
                c.insert("exempt".into(), w.clone());
            }
            if !semantic_eq(Some(&cmp), Some(&want)) {
                errs.push(FieldError::invalid(
                    &sp,
                    have,
                    format!("spec of '{name}' except the 'spec.exempt' field must equal the fixed value"),
                ));
            }
        } else if !semantic_eq(Some(&have), Some(&want)) {
            errs.push(FieldError::invalid(
                &sp,
                have,
                format!("spec of '{name}' must equal the fixed value"),
            ));
        }
    }
    errs.extend(conditions(obj));
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(errs: ErrorList) -> Vec<String> {
        errs.iter().map(ToString::to_string).collect()
    }

    fn fs() -> Value {
        json!({"metadata": {"name": "web"}, "spec": {
            "priorityLevelConfiguration": {"name": "global-default"},
            "matchingPrecedence": 1000,
            "distinguisherMethod": {"type": "ByUser"},
            "rules": [{
                "subjects": [{"kind": "ServiceAccount", "serviceAccount": {"name": "*", "namespace": "web"}},
                    {"kind": "User", "user": {"name": "alice"}}],
                "resourceRules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["pods"], "namespaces": ["web"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["/healthz", "/api/*"]}],
            }],
        }})
    }

    #[test]
    fn flow_schema_cases() {
        assert_eq!(strings(validate_flow_schema(&fs())), Vec::<String>::new());
        let exempt =
            json!({"metadata": {"name": "exempt"}, "spec": mandatory_flow_schema("exempt")});
        assert_eq!(strings(validate_flow_schema(&exempt)), Vec::<String>::new());
        type Change = fn(&mut Value);
        let cases: Vec<(Change, &str)> = vec![
            (|o| o["spec"]["matchingPrecedence"] = json!(0),
                "spec.matchingPrecedence: Invalid value: 0: must be a positive value"),
            (|o| o["spec"]["matchingPrecedence"] = json!(10001),
                "spec.matchingPrecedence: Invalid value: 10001: must not be greater than 10000"),
            (|o| o["spec"]["matchingPrecedence"] = json!(1),
                "spec.matchingPrecedence: Invalid value: 1: only the schema named 'exempt' may have matchingPrecedence 1"),
            (|o| o["spec"]["distinguisherMethod"]["type"] = json!("ByGroup"),
                "spec.distinguisherMethod.type: Unsupported value: flowcontrol.FlowDistinguisherMethod{Type:\"ByGroup\"}: supported values: \"ByNamespace\", \"ByUser\""),
            (|o| o["spec"]["priorityLevelConfiguration"]["name"] = json!(""),
                "spec.priorityLevelConfiguration.name: Required value: must reference a priority level"),
            (|o| o["spec"]["rules"][0]["subjects"] = json!([]),
                "spec.rules[0].subjects: Required value: subjects must contain at least one value"),
            (|o| o["spec"]["rules"][0]["subjects"][1] = json!({"kind": "User"}),
                "spec.rules[0].subjects[1].user: Required value: user is required when subject kind is 'User'"),
            (|o| o["spec"]["rules"][0]["subjects"][1] = json!({"kind": "User", "user": {"name": "a"}, "group": {"name": "g"}}),
                "spec.rules[0].subjects[1].group: Forbidden: group is forbidden when subject kind is not 'Group'"),
            (|o| o["spec"]["rules"][0]["subjects"][1] = json!({"kind": "Robot"}),
                "spec.rules[0].subjects[1].kind: Unsupported value: \"Robot\": supported values: \"Group\", \"ServiceAccount\", \"User\""),
            (|o| o["spec"]["rules"][0]["subjects"][0]["serviceAccount"]["namespace"] = json!(""),
                "spec.rules[0].subjects[0].serviceAccount.namespace: Required value: must specify namespace for service account"),
            (|o| { o["spec"]["rules"][0]["resourceRules"] = json!([]); o["spec"]["rules"][0]["nonResourceRules"] = json!([]); },
                "spec.rules[0]: Required value: at least one of resourceRules and nonResourceRules has to be non-empty"),
            (|o| o["spec"]["rules"][0]["resourceRules"][0]["verbs"] = json!(["get", "fly"]),
                "spec.rules[0].resourceRules[0].verbs: Unsupported value: []string{\"get\", \"fly\"}: supported values: \"create\", \"delete\", \"deletecollection\", \"get\", \"list\", \"patch\", \"proxy\", \"update\", \"watch\""),
            (|o| o["spec"]["rules"][0]["resourceRules"][0]["verbs"] = json!(["*", "get"]),
                "spec.rules[0].resourceRules[0].verbs: Invalid value: []string{\"*\", \"get\"}: if '*' is present, must not specify other verbs"),
            (|o| o["spec"]["rules"][0]["resourceRules"][0]["apiGroups"] = json!([]),
                "spec.rules[0].resourceRules[0].apiGroups: Required value: resource rules must supply at least one api group"),
            (|o| o["spec"]["rules"][0]["resourceRules"][0]["resources"] = json!(["*", "pods"]),
                "spec.rules[0].resourceRules[0].resources: Invalid value: []string{\"*\", \"pods\"}: if '*' is present, must not specify other resources"),
            (|o| o["spec"]["rules"][0]["resourceRules"][0]["namespaces"] = json!([]),
                "spec.rules[0].resourceRules[0].namespaces: Required value: resource rules that are not cluster scoped must supply at least one namespace"),
            (|o| o["spec"]["rules"][0]["resourceRules"][0]["namespaces"] = json!(["Web"]),
                "spec.rules[0].resourceRules[0].namespaces[0]: Invalid value: \"Web\": each member of this list must be '*' or a DNS-1123 label; a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"),
            (|o| o["spec"]["rules"][0]["nonResourceRules"][0]["nonResourceURLs"] = json!(["healthz"]),
                "spec.rules[0].nonResourceRules[0].nonResourceURLs[0]: Invalid value: \"healthz\": must start with slash"),
            (|o| o["spec"]["rules"][0]["nonResourceRules"][0]["nonResourceURLs"] = json!(["/a*"]),
                "spec.rules[0].nonResourceRules[0].nonResourceURLs[0]: Invalid value: \"/a*\": wildcard can only do suffix matching"),
            (|o| o["spec"]["rules"][0]["nonResourceRules"][0]["nonResourceURLs"] = json!([]),
                "spec.rules[0].nonResourceRules[0].nonResourceURLs: Required value: nonResourceURLs must contain at least one value"),
            (|o| o["status"] = json!({"conditions": [{"type": "Dangling"}, {"type": "Dangling"}]}),
                "status.conditions[1].type: Duplicate value: \"Dangling\""),
        ];
        for (change, want) in cases {
            let mut o = fs();
            change(&mut o);
            assert_eq!(strings(validate_flow_schema(&o)), vec![want.to_string()]);
        }
        let mut changed = exempt.clone();
        changed["spec"]["matchingPrecedence"] = json!(2);
        let errs = strings(validate_flow_schema(&changed));
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].ends_with("spec of 'exempt' must equal the fixed value"),
            "{errs:?}"
        );
    }

    fn plc(name: &str, spec: Value) -> Value {
        json!({"metadata": {"name": name}, "spec": spec})
    }

    fn limited_queue() -> Value {
        json!({"type": "Limited", "limited": {"nominalConcurrencyShares": 30, "lendablePercent": 0,
            "limitResponse": {"type": "Queue", "queuing": {"queues": 64, "handSize": 8, "queueLengthLimit": 50}}}})
    }

    #[test]
    fn priority_level_cases() {
        assert!(validate_priority_level(&plc("workload", limited_queue())).is_empty());
        assert!(validate_priority_level(&plc(
            "exempt",
            mandatory_priority_level("exempt").unwrap()
        ))
        .is_empty());
        assert!(validate_priority_level(&plc(
            "catch-all",
            mandatory_priority_level("catch-all").unwrap()
        ))
        .is_empty());
        let tuned = json!({"type": "Exempt", "exempt": {"nominalConcurrencyShares": 10, "lendablePercent": 50}});
        assert!(validate_priority_level(&plc("exempt", tuned)).is_empty());
        type Change = fn(&mut Value);
        let cases: Vec<(Change, &str)> = vec![
            (|s| { s["type"] = json!("Exempt"); s.as_object_mut().unwrap().remove("limited"); },
                "spec.type: Invalid value: \"Exempt\": type must be 'Exempt' if and only if name is 'exempt'"),
            (|s| s["type"] = json!("Sometimes"),
                "spec.type: Unsupported value: \"Sometimes\": supported values: \"Exempt\", \"Limited\""),
            (|s| { s.as_object_mut().unwrap().remove("limited"); },
                "spec.limited: Required value: must not be empty when type is Limited"),
            (|s| s["exempt"] = json!({}),
                "spec.exempt: Forbidden: must be nil if the type is Limited"),
            (|s| s["limited"]["nominalConcurrencyShares"] = json!(-1),
                "spec.limited.nominalConcurrencyShares: Invalid value: -1: must be a non-negative integer"),
            (|s| s["limited"]["lendablePercent"] = json!(101),
                "spec.limited.lendablePercent: Invalid value: 101: must be between 0 and 100, inclusive"),
            (|s| s["limited"]["borrowingLimitPercent"] = json!(-1),
                "spec.limited.borrowingLimitPercent: Invalid value: -1: if specified, must be a non-negative integer"),
            (|s| s["limited"]["limitResponse"]["type"] = json!("Reject"),
                "spec.limited.limitResponse.queuing: Forbidden: must be nil if limited.limitResponse.type is not Limited"),
            (|s| s["limited"]["limitResponse"] = json!({"type": "Queue"}),
                "spec.limited.limitResponse.queuing: Required value: must not be empty if limited.limitResponse.type is Limited"),
            (|s| s["limited"]["limitResponse"]["type"] = json!("Drop"),
                "spec.limited.limitResponse.type: Unsupported value: \"Drop\": supported values: \"Queue\", \"Reject\""),
            (|s| s["limited"]["limitResponse"]["queuing"]["queueLengthLimit"] = json!(0),
                "spec.limited.limitResponse.queuing.queueLengthLimit: Invalid value: 0: must be positive"),
            (|s| { s["limited"]["limitResponse"]["queuing"]["queues"] = json!(10_000_001); s["limited"]["limitResponse"]["queuing"]["handSize"] = json!(1); },
                "spec.limited.limitResponse.queuing.queues: Invalid value: 10000001: must not be greater than 10000000"),
            (|s| s["limited"]["limitResponse"]["queuing"]["handSize"] = json!(65),
                "spec.limited.limitResponse.queuing.handSize: Invalid value: 65: should not be greater than queues (64)"),
            (|s| { s["limited"]["limitResponse"]["queuing"]["queues"] = json!(128); s["limited"]["limitResponse"]["queuing"]["handSize"] = json!(10); },
                "spec.limited.limitResponse.queuing.handSize: Invalid value: 10: required entropy bits of deckSize 128 and handSize 10 should not be greater than 60"),
        ];
        for (change, want) in cases {
            let mut s = limited_queue();
            change(&mut s);
            assert_eq!(
                strings(validate_priority_level(&plc("workload", s))),
                vec![want.to_string()]
            );
        }
        let mut bad = mandatory_priority_level("exempt").unwrap();
        bad["exempt"]["lendablePercent"] = json!(-1);
        assert_eq!(
            strings(validate_priority_level(&plc("exempt", bad))),
            vec!["spec.exempt.lendablePercent: Invalid value: -1: must be between 0 and 100, inclusive"]
        );
        let errs = strings(validate_priority_level(&plc("catch-all", limited_queue())));
        assert_eq!(errs.len(), 1);
        assert!(
            errs[0].ends_with("spec of 'catch-all' must equal the fixed value"),
            "{errs:?}"
        );
    }
}
