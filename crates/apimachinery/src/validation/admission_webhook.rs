//! `admissionregistration.k8s.io/v1` ValidatingWebhookConfiguration and
//! MutatingWebhookConfiguration (upstream `pkg/apis/admissionregistration/validation`:
//! `validateValidatingWebhook`, `validateMutatingWebhook`, `validateAdmissionReviewVersions`, and
//! `k8s.io/apiserver/pkg/util/webhook`'s `ValidateWebhookURL` / `ValidateWebhookService`).
//!
//! As upstream, an update is held only to the rules its old object already met: a configuration
//! stored before a rule existed (side effects `Some`, unknown review versions, duplicate webhook
//! names) stays updatable. Deliberately different: match conditions are checked structurally, not
//! compiled (the webhook plugin reports compile errors when it calls the webhook), and label
//! selectors are always validated strictly (upstream tolerates invalid label values on update
//! when the old object had them).

use serde_json::Value;

use super::admission_policy::{match_conditions, rule_with_operations, strs};
use super::field::{ErrorList, FieldError, FieldPath};
use super::json::{get, get_arr, get_int, get_str, str_or_empty};
use super::meta::{self, validate_label_selector, NameRule};
use super::names;

/// `AcceptedAdmissionReviewVersions`.
const REVIEW_VERSIONS: [&str; 2] = ["v1", "v1beta1"];
const SIDE_EFFECTS: [&str; 4] = ["None", "NoneOnDryRun", "Some", "Unknown"];
const NO_SIDE_EFFECTS: [&str; 2] = ["None", "NoneOnDryRun"];

/// Which of the create-time rules apply (upstream's `validationOptions`).
#[derive(Clone, Copy)]
struct Options {
    require_no_side_effects: bool,
    require_recognized_review_version: bool,
    require_unique_names: bool,
    /// Unchanged match conditions are not re-checked on update.
    ignore_match_conditions: bool,
}

const CREATE: Options = Options {
    require_no_side_effects: true,
    require_recognized_review_version: true,
    require_unique_names: true,
    ignore_match_conditions: false,
};

/// A ValidatingWebhookConfiguration or MutatingWebhookConfiguration about to be created.
pub(crate) fn validate_create(obj: &Value, mutating: bool) -> ErrorList {
    validate(obj, mutating, CREATE)
}

/// An update of one: the create rules the old object met, plus metadata update rules.
pub(crate) fn validate_update(new: &Value, old: &Value, mutating: bool) -> ErrorList {
    let old_hooks = get_arr(old, &["webhooks"]);
    let new_hooks = get_arr(new, &["webhooks"]);
    let conditions = |hooks: &[Value]| -> Vec<Option<Value>> {
        hooks
            .iter()
            .map(|h| h.get("matchConditions").cloned())
            .collect()
    };
    let opts = Options {
        require_no_side_effects: old_hooks
            .iter()
            .all(|h| get_str(h, &["sideEffects"]).is_some_and(|s| NO_SIDE_EFFECTS.contains(&s))),
        require_recognized_review_version: old_hooks.iter().all(|h| {
            let versions = strs(get_arr(h, &["admissionReviewVersions"]));
            versions.is_empty() || versions.iter().any(|v| REVIEW_VERSIONS.contains(v))
        }),
        require_unique_names: {
            let names: Vec<&str> = old_hooks
                .iter()
                .map(|h| str_or_empty(h, &["name"]))
                .collect();
            names
                .iter()
                .enumerate()
                .all(|(i, n)| !names[..i].contains(n))
        },
        ignore_match_conditions: old_hooks.len() == new_hooks.len()
            && conditions(old_hooks) == conditions(new_hooks),
    };
    let mut errs = meta::validate_object_meta_update(new, old, false);
    errs.extend(
        validate(new, mutating, opts)
            .into_iter()
            .filter(|e| !e.field.as_str().starts_with("metadata.")),
    );
    errs
}

fn validate(obj: &Value, mutating: bool, opts: Options) -> ErrorList {
    let mut errs = meta::validate_object_meta(obj, NameRule::Subdomain, false);
    let mut seen: Vec<&str> = Vec::new();
    for (i, hook) in get_arr(obj, &["webhooks"]).iter().enumerate() {
        let path = FieldPath::root("webhooks").index(i);
        errs.extend(webhook(hook, mutating, opts, &path));
        errs.extend(review_versions(
            get_arr(hook, &["admissionReviewVersions"]),
            opts.require_recognized_review_version,
            &path.child("admissionReviewVersions"),
        ));
        let name = str_or_empty(hook, &["name"]);
        if opts.require_unique_names && !name.is_empty() {
            if seen.contains(&name) {
                errs.push(FieldError::duplicate(&path.child("name"), name));
            } else {
                seen.push(name);
            }
        }
    }
    errs
}

/// `validateValidatingWebhook` / `validateMutatingWebhook`.
fn webhook(hook: &Value, mutating: bool, opts: Options, path: &FieldPath) -> ErrorList {
    let mut errs = fully_qualified_name(str_or_empty(hook, &["name"]), &path.child("name"));
    for (i, rule) in get_arr(hook, &["rules"]).iter().enumerate() {
        errs.extend(rule_with_operations(rule, &path.child("rules").index(i)));
    }
    let one_of = |key: &str, value: Option<&str>, allowed: &[&str], errs: &mut ErrorList| {
        if let Some(v) = value.filter(|v| !allowed.contains(v)) {
            errs.push(FieldError::not_supported(&path.child(key), v, allowed));
        }
    };
    one_of(
        "failurePolicy",
        get_str(hook, &["failurePolicy"]),
        &["Fail", "Ignore"],
        &mut errs,
    );
    one_of(
        "matchPolicy",
        get_str(hook, &["matchPolicy"]),
        &["Equivalent", "Exact"],
        &mut errs,
    );
    let allowed: &[&str] = if opts.require_no_side_effects {
        &NO_SIDE_EFFECTS
    } else {
        &SIDE_EFFECTS
    };
    // k8s-openapi types sideEffects as a required string, so a webhook that omitted it reaches
    // validation as "" after the server's typed round trip: both are upstream's nil.
    match get_str(hook, &["sideEffects"]).filter(|s| !s.is_empty()) {
        None => errs.push(FieldError::required(
            &path.child("sideEffects"),
            format!("must specify one of {}", allowed.join(", ")),
        )),
        Some(s) => one_of("sideEffects", Some(s), allowed, &mut errs),
    }
    if let Some(t) = get_int(hook, &["timeoutSeconds"]).filter(|t| !(1..=30).contains(t)) {
        errs.push(FieldError::invalid(
            &path.child("timeoutSeconds"),
            t,
            "the timeout value must be between 1 and 30 seconds",
        ));
    }
    for key in ["namespaceSelector", "objectSelector"] {
        if let Some(sel) = get(hook, &[key]) {
            errs.extend(validate_label_selector(Some(sel), &path.child(key)));
        }
    }
    if mutating {
        one_of(
            "reinvocationPolicy",
            get_str(hook, &["reinvocationPolicy"]),
            &["IfNeeded", "Never"],
            &mut errs,
        );
    }
    let cc = path.child("clientConfig");
    match (
        get_str(hook, &["clientConfig", "url"]),
        get(hook, &["clientConfig", "service"]),
    ) {
        (Some(url), None) => errs.extend(webhook_url(url, &cc.child("url"))),
        (None, Some(svc)) => errs.extend(webhook_service(svc, &cc.child("service"))),
        _ => errs.push(FieldError::required(
            &cc,
            "exactly one of url or service is required",
        )),
    }
    if !opts.ignore_match_conditions {
        errs.extend(match_conditions(
            get_arr(hook, &["matchConditions"]),
            &path.child("matchConditions"),
        ));
    }
    errs
}

/// `utilvalidation.IsFullyQualifiedName`.
fn fully_qualified_name(name: &str, path: &FieldPath) -> ErrorList {
    if name.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    let msgs = names::is_dns1123_subdomain(name);
    if !msgs.is_empty() {
        return vec![FieldError::invalid(path, name, msgs.join(","))];
    }
    if name.split('.').count() < 3 {
        return vec![FieldError::invalid(
            path,
            name,
            "should be a domain with at least three segments separated by dots",
        )];
    }
    Vec::new()
}

/// `validateAdmissionReviewVersions`.
fn review_versions(list: &[Value], require_recognized: bool, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    if list.is_empty() {
        errs.push(FieldError::required(
            path,
            format!("must specify one of {}", REVIEW_VERSIONS.join(", ")),
        ));
        return errs;
    }
    let mut seen: Vec<&str> = Vec::new();
    let mut recognized = false;
    for (i, v) in strs(list).into_iter().enumerate() {
        if seen.contains(&v) {
            errs.push(FieldError::invalid(&path.index(i), v, "duplicate version"));
            continue;
        }
        seen.push(v);
        for m in names::is_dns1035_label(v) {
            errs.push(FieldError::invalid(&path.index(i), v, m));
        }
        recognized |= REVIEW_VERSIONS.contains(&v);
    }
    if require_recognized && !recognized {
        errs.push(super::admission_policy::invalid_list(
            path,
            list,
            format!(
                "must include at least one of {}",
                REVIEW_VERSIONS.join(", ")
            ),
        ));
    }
    errs
}

/// The parts of a URL that `ValidateWebhookURL` looks at, split as Go's `url.Parse` splits them.
#[derive(Debug, Default, PartialEq)]
struct UrlParts<'a> {
    scheme: &'a str,
    user: Option<&'a str>,
    host: &'a str,
    query: &'a str,
    fragment: &'a str,
}

fn split_url(url: &str) -> Result<UrlParts<'_>, String> {
    let (rest, fragment) = url.split_once('#').unwrap_or((url, ""));
    let mut parts = UrlParts {
        fragment,
        ..Default::default()
    };
    let mut rest = rest;
    if let Some((scheme, after)) = rest.split_once(':') {
        let valid = scheme
            .bytes()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
            && scheme
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'+' | b'-' | b'.'));
        if valid {
            parts.scheme = scheme;
            rest = after;
        } else if !scheme.contains('/') {
            if scheme.is_empty() {
                return Err(format!("parse {url:?}: missing protocol scheme"));
            }
            return Err(format!(
                "parse {url:?}: first path segment in URL cannot contain colon"
            ));
        }
    }
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    parts.query = query;
    if let Some(after) = rest.strip_prefix("//") {
        let authority = after.split('/').next().unwrap_or("");
        let (user, host) = match authority.rsplit_once('@') {
            Some((u, h)) => (Some(u), h),
            None => (None, authority),
        };
        parts.user = user;
        // A port must be digits, as Go's parser insists.
        if let Some((_, port)) = host.rsplit_once(':').filter(|_| !host.ends_with(']')) {
            if !port.bytes().all(|c| c.is_ascii_digit()) {
                return Err(format!(
                    "parse {url:?}: invalid port \":{port}\" after host"
                ));
            }
        }
        parts.host = host;
    }
    Ok(parts)
}

/// `ValidateWebhookURL` with https required (also CRD conversion webhooks').
pub(super) fn webhook_url(url: &str, path: &FieldPath) -> ErrorList {
    const FORM: &str = "; desired format: https://host[/path]";
    let mut errs = ErrorList::new();
    let u = match split_url(url) {
        Ok(u) => u,
        Err(e) => {
            errs.push(FieldError::required(
                path,
                format!("url must be a valid URL: {e}{FORM}"),
            ));
            return errs;
        }
    };
    if u.scheme != "https" {
        errs.push(FieldError::invalid(
            path,
            u.scheme,
            format!("'https' is the only allowed URL scheme{FORM}"),
        ));
    }
    if u.host.is_empty() {
        errs.push(FieldError::invalid(
            path,
            u.host,
            format!("host must be provided{FORM}"),
        ));
    }
    if let Some(user) = u.user {
        errs.push(FieldError::invalid(
            path,
            user,
            "user information is not permitted in the URL",
        ));
    }
    if !u.fragment.is_empty() {
        errs.push(FieldError::invalid(
            path,
            u.fragment,
            "fragments are not permitted in the URL",
        ));
    }
    if !u.query.is_empty() {
        errs.push(FieldError::invalid(
            path,
            u.query,
            "query parameters are not permitted in the URL",
        ));
    }
    errs
}

/// `ValidateWebhookService` (the port defaults to 443 before validation).
pub(super) fn webhook_service(svc: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    if str_or_empty(svc, &["name"]).is_empty() {
        errs.push(FieldError::required(
            &path.child("name"),
            "service name is required",
        ));
    }
    if str_or_empty(svc, &["namespace"]).is_empty() {
        errs.push(FieldError::required(
            &path.child("namespace"),
            "service namespace is required",
        ));
    }
    let port = get_int(svc, &["port"]).unwrap_or(443);
    let msgs = names::is_valid_port_num(port);
    if !msgs.is_empty() {
        errs.push(FieldError::invalid(
            &path.child("port"),
            port,
            format!("port is not valid: {}", msgs.join(", ")),
        ));
    }
    let Some(url_path) = get_str(svc, &["path"]) else {
        return errs;
    };
    let pp = path.child("path");
    if url_path.is_empty() || url_path == "/" {
        return errs;
    }
    if url_path == "//" {
        errs.push(FieldError::invalid(
            &pp,
            url_path,
            "segment[0] may not be empty",
        ));
        return errs;
    }
    if !url_path.starts_with('/') {
        errs.push(FieldError::invalid(&pp, url_path, "must start with a '/'"));
    }
    // Go slices off the first byte whatever it is.
    let check = url_path.get(1..).unwrap_or("");
    let check = check.strip_suffix('/').unwrap_or(check);
    for (i, step) in check.split('/').enumerate() {
        if step.is_empty() {
            errs.push(FieldError::invalid(
                &pp,
                url_path,
                format!("segment[{i}] may not be empty"),
            ));
            continue;
        }
        for m in names::is_dns1123_subdomain(step) {
            errs.push(FieldError::invalid(
                &pp,
                url_path,
                format!("segment[{i}]: {m}"),
            ));
        }
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

    /// A configuration as it is after defaulting.
    fn config() -> Value {
        json!({"metadata": {"name": "hooks"}, "webhooks": [{
            "name": "deny.example.com",
            "clientConfig": {"url": "https://127.0.0.1:8443/validate"},
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                "resources": ["configmaps"], "scope": "*"}],
            "failurePolicy": "Fail", "matchPolicy": "Equivalent", "sideEffects": "None",
            "timeoutSeconds": 10, "admissionReviewVersions": ["v1"],
            "namespaceSelector": {}, "objectSelector": {},
            "matchConditions": [{"name": "not-system", "expression": "true"}],
        }]})
    }

    #[test]
    fn valid_configurations_pass() {
        assert_eq!(
            strings(validate_create(&config(), false)),
            Vec::<String>::new()
        );
        let mut m = config();
        m["webhooks"][0]["reinvocationPolicy"] = json!("IfNeeded");
        m["webhooks"][0]["clientConfig"] = json!({"service": {"namespace": "default", "name": "hook", "path": "/mutate/pods", "port": 8443}});
        assert_eq!(strings(validate_create(&m, true)), Vec::<String>::new());
    }

    #[test]
    fn webhook_cases() {
        type Change = fn(&mut Value);
        let cases: Vec<(Change, &str)> = vec![
            (|c| c["webhooks"][0]["name"] = json!("deny"),
                "webhooks[0].name: Invalid value: \"deny\": should be a domain with at least three segments separated by dots"),
            (|c| c["webhooks"][0]["name"] = json!("Deny.example.com"),
                "webhooks[0].name: Invalid value: \"Deny.example.com\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"),
            (|c| { c["webhooks"][0].as_object_mut().unwrap().remove("sideEffects"); },
                "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun"),
            (|c| c["webhooks"][0]["sideEffects"] = json!(""),
                "webhooks[0].sideEffects: Required value: must specify one of None, NoneOnDryRun"),
            (|c| c["webhooks"][0]["sideEffects"] = json!("Some"),
                "webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\""),
            (|c| c["webhooks"][0]["timeoutSeconds"] = json!(31),
                "webhooks[0].timeoutSeconds: Invalid value: 31: the timeout value must be between 1 and 30 seconds"),
            (|c| c["webhooks"][0]["failurePolicy"] = json!("Maybe"),
                "webhooks[0].failurePolicy: Unsupported value: \"Maybe\": supported values: \"Fail\", \"Ignore\""),
            (|c| c["webhooks"][0]["admissionReviewVersions"] = json!([]),
                "webhooks[0].admissionReviewVersions: Required value: must specify one of v1, v1beta1"),
            (|c| c["webhooks"][0]["admissionReviewVersions"] = json!(["v2"]),
                "webhooks[0].admissionReviewVersions: Invalid value: []string{\"v2\"}: must include at least one of v1, v1beta1"),
            (|c| c["webhooks"][0]["clientConfig"] = json!({}),
                "webhooks[0].clientConfig: Required value: exactly one of url or service is required"),
            (|c| c["webhooks"][0]["clientConfig"]["url"] = json!("http://hook.example.com/x"),
                "webhooks[0].clientConfig.url: Invalid value: \"http\": 'https' is the only allowed URL scheme; desired format: https://host[/path]"),
            (|c| c["webhooks"][0]["clientConfig"]["url"] = json!("https://hook.example.com/x?a=b"),
                "webhooks[0].clientConfig.url: Invalid value: \"a=b\": query parameters are not permitted in the URL"),
            (|c| c["webhooks"][0]["clientConfig"]["url"] = json!("https://u:p@hook.example.com/"),
                "webhooks[0].clientConfig.url: Invalid value: \"u:p\": user information is not permitted in the URL"),
            (|c| c["webhooks"][0]["clientConfig"] = json!({"service": {"namespace": "default", "name": "h", "path": "validate"}}),
                "webhooks[0].clientConfig.service.path: Invalid value: \"validate\": must start with a '/'"),
            (|c| c["webhooks"][0]["clientConfig"] = json!({"service": {"namespace": "", "name": "h", "port": 70000}}),
                "webhooks[0].clientConfig.service.namespace: Required value: service namespace is required"),
            (|c| c["webhooks"][0]["matchConditions"] = json!([{"name": "a", "expression": " "}]),
                "webhooks[0].matchConditions[0].expression: Required value"),
            (|c| { let h = c["webhooks"][0].clone(); c["webhooks"].as_array_mut().unwrap().push(h); },
                "webhooks[1].name: Duplicate value: \"deny.example.com\""),
        ];
        for (change, want) in cases {
            let mut c = config();
            change(&mut c);
            let got = strings(validate_create(&c, false));
            assert!(got.iter().any(|e| e == want), "want {want}\ngot {got:?}");
        }
        let mut c = config();
        c["webhooks"][0]["reinvocationPolicy"] = json!("Always");
        assert_eq!(
            strings(validate_create(&c, true)),
            ["webhooks[0].reinvocationPolicy: Unsupported value: \"Always\": supported values: \"IfNeeded\", \"Never\""]
        );
    }

    #[test]
    fn updates_keep_what_the_old_object_was_allowed() {
        let mut old = config();
        old["metadata"]["resourceVersion"] = json!("5");
        old["webhooks"][0]["sideEffects"] = json!("Some");
        let mut new = old.clone();
        new["webhooks"][0]["timeoutSeconds"] = json!(5);
        assert_eq!(
            strings(validate_update(&new, &old, false)),
            Vec::<String>::new()
        );
        // The old object had no side effects: the new one may not add them.
        let mut old = config();
        old["metadata"]["resourceVersion"] = json!("5");
        let mut new = old.clone();
        new["webhooks"][0]["sideEffects"] = json!("Some");
        assert_eq!(
            strings(validate_update(&new, &old, false)),
            ["webhooks[0].sideEffects: Unsupported value: \"Some\": supported values: \"None\", \"NoneOnDryRun\""]
        );
    }

    #[test]
    fn urls_split_as_go_does() {
        let u = split_url("https://user@host:8443/p?q=1#f").unwrap();
        assert_eq!(
            u,
            UrlParts {
                scheme: "https",
                user: Some("user"),
                host: "host:8443",
                query: "q=1",
                fragment: "f"
            }
        );
        assert_eq!(split_url("host/path").unwrap().host, "");
        assert!(split_url("https://host:abc/").is_err());
        assert!(split_url(":nothing").is_err());
        assert_eq!(split_url("https://[::1]:443/").unwrap().host, "[::1]:443");
    }
}
