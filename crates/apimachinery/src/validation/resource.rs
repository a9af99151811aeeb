//! `resource.k8s.io/v1` (dynamic resource allocation), following upstream's
//! `pkg/apis/resource/validation/validation.go`: DeviceClass here, with the pieces the kinds share
//! (driver, pool, device and request names, qualified names, opaque configuration, tolerations,
//! node selectors, list limits); ResourceClaim and ResourceClaimTemplate in `resource_claim`;
//! ResourceSlice in `resource_slice`.
//!
//! Deliberately different: CEL selector expressions are not compiled (only "non-empty" and the
//! 10 Ki length limit are checked; an empty one gets the parser's message upstream shows), so
//! their syntax, types and cost are not checked. Rules that upstream enforces only declaratively
//! (`+k8s:` tags) follow the handwritten wording, as the two agree on paths and types.

use std::collections::HashSet;

use serde_json::Value;

use super::core_scheduling::validate_node_selector_term;
use super::field::{ErrorList, ErrorType, FieldError, FieldPath};
use super::json::{get, get_arr, get_obj, get_str, semantic_eq, str_or_empty};
use super::meta::{self, validate_label_name, NameRule};
use super::names;
use super::{resource_claim, resource_slice};

/// `DeviceSelectorsMaxSize`.
pub(super) const DEVICE_SELECTORS_MAX: usize = 32;
/// `DeviceConfigMaxSize`.
pub(super) const DEVICE_CONFIG_MAX: usize = 32;
/// `DeviceRequestsMaxSize` (= `AllocationResultsMaxSize`).
pub(super) const DEVICE_REQUESTS_MAX: usize = 32;
/// `DeviceTolerationsMaxLength`.
pub(super) const DEVICE_TOLERATIONS_MAX: usize = 16;
/// `CELSelectorExpressionMaxLength`.
const CEL_EXPRESSION_MAX_LEN: usize = 10 * 1024;
/// `OpaqueParametersMaxLength`.
const OPAQUE_PARAMETERS_MAX_LEN: usize = 10 * 1024;
/// `DriverNameMaxLength` (the CSI driver name limit).
const DRIVER_NAME_MAX_LEN: usize = 63;
/// `PoolNameMaxLength`.
const POOL_NAME_MAX_LEN: usize = 253;
/// `DeviceMaxIDLength`.
const DEVICE_MAX_ID_LEN: usize = 32;

/// What cel-go reports for an empty expression (upstream's compile error for `""`).
const EMPTY_CEL_MESSAGE: &str = "compilation failed: ERROR: <input>:1:1: Syntax error: mismatched input '<EOF>' expecting {'[', '{', '(', '.', '-', '!', 'true', 'false', 'null', NUM_FLOAT, NUM_INT, NUM_UINT, STRING, BYTES, IDENTIFIER}\n | \n | ^";

fn invalid_all(msgs: Vec<String>, path: &FieldPath, value: &str) -> ErrorList {
    msgs.into_iter()
        .map(|m| FieldError::invalid(path, value, m))
        .collect()
}

/// `validateDriverName` (upstream's `ValidateCSIDriverName`).
pub(super) fn validate_driver_name(name: &str, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    if name.is_empty() {
        errs.push(FieldError::required(path, ""));
    }
    if name.len() > DRIVER_NAME_MAX_LEN {
        errs.push(FieldError::too_long(path, DRIVER_NAME_MAX_LEN));
    }
    errs.extend(invalid_all(
        names::is_dns1123_subdomain(&name.to_lowercase()),
        path,
        name,
    ));
    errs
}

/// `validatePoolName`: one or more DNS subdomains separated by slashes, at most 253 bytes.
pub(super) fn validate_pool_name(name: &str, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    if name.is_empty() {
        errs.push(FieldError::required(path, ""));
        return errs;
    }
    if name.len() > POOL_NAME_MAX_LEN {
        errs.push(FieldError::too_long(path, POOL_NAME_MAX_LEN));
    }
    for part in name.split('/') {
        errs.extend(invalid_all(names::is_dns1123_subdomain(part), path, part));
    }
    errs
}

/// `validateDeviceName`, `validateRequestName`, `validateCounterName`: DNS labels.
pub(super) fn validate_dns_label(name: &str, path: &FieldPath) -> ErrorList {
    invalid_all(names::is_dns1123_label(name), path, name)
}

/// `validateDeviceClass`: required, a DNS subdomain.
pub(super) fn validate_device_class_ref(name: &str, path: &FieldPath) -> ErrorList {
    if name.is_empty() {
        return vec![FieldError::required(path, "")];
    }
    invalid_all(names::is_dns1123_subdomain(name), path, name)
}

/// `validateCIdentifier`: at most 32 bytes, a C identifier.
fn validate_c_identifier(id: &str, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    if id.len() > DEVICE_MAX_ID_LEN {
        errs.push(FieldError::too_long(path, DEVICE_MAX_ID_LEN));
    }
    let b = id.as_bytes();
    let ok = !b.is_empty()
        && (b[0].is_ascii_alphabetic() || b[0] == b'_')
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_');
    if !ok {
        errs.push(FieldError::invalid(
            path,
            id,
            names::regex_error(
                "a valid C identifier must start with alphabetic character or '_', followed by a string of alphanumeric characters or '_'",
                "[A-Za-z_][A-Za-z0-9_]*",
                &["my_name", "MY_NAME", "MyName"],
            ),
        ));
    }
    errs
}

/// `validateQualifiedName`: `<C identifier>` or `<driver name>/<C identifier>`.
pub(super) fn validate_qualified_name(name: &str, path: &FieldPath) -> ErrorList {
    let parts: Vec<&str> = name.split('/').collect();
    let mut errs = ErrorList::new();
    match parts.as_slice() {
        [id] => errs.extend(validate_c_identifier(id, path)),
        [domain, id] => {
            if domain.is_empty() {
                errs.push(FieldError::invalid(
                    path,
                    "",
                    "the domain must not be empty",
                ));
            } else {
                errs.extend(validate_driver_name(domain, path));
            }
            if id.is_empty() {
                errs.push(FieldError::invalid(path, "", "the name must not be empty"));
            } else {
                errs.extend(validate_c_identifier(id, path));
            }
        }
        _ => errs.push(FieldError::invalid(
            path,
            name,
            "must not contain more than one slash",
        )),
    }
    errs
}

/// `validateFullyQualifiedName`: a qualified name with a domain.
pub(super) fn validate_fully_qualified_name(name: &str, path: &FieldPath) -> ErrorList {
    let mut errs = validate_qualified_name(name, path);
    if !name.contains('/') {
        errs.push(FieldError::invalid(
            path,
            name,
            "a fully qualified name must be a domain and a name separated by a slash",
        ));
    }
    errs
}

/// `truncateIfTooLong`: long map keys are shortened in the middle in field paths.
pub(super) fn truncate_key(key: &str, max: usize) -> String {
    let max = max.max(16);
    if key.len() <= max {
        return key.to_string();
    }
    let remaining = max - 3;
    let head = remaining.div_ceil(2);
    let tail = remaining / 2;
    // Keys are validated separately; cut on byte positions as upstream, but stay on char bounds.
    let start = (0..=head)
        .rev()
        .find(|i| key.is_char_boundary(*i))
        .unwrap_or(0);
    let end = (key.len() - tail..=key.len())
        .find(|i| key.is_char_boundary(*i))
        .unwrap_or(key.len());
    format!("{}...{}", &key[..start], &key[end..])
}

/// The length check of upstream's `validateSlice`/`validateSet`: one `TooMany`, which also stops
/// validating the items.
pub(super) fn too_many(items: &[Value], max: usize, path: &FieldPath) -> Option<ErrorList> {
    (items.len() > max).then(|| vec![FieldError::too_many(path, items.len(), max)])
}

/// The uniqueness check of upstream's `validateSet` on string keys: `Duplicate` at the later index.
pub(super) fn duplicates<'a>(keys: impl Iterator<Item = &'a str>, path: &FieldPath) -> ErrorList {
    let mut seen = HashSet::new();
    let mut errs = ErrorList::new();
    for (i, k) in keys.enumerate() {
        if !seen.insert(k) {
            errs.push(FieldError::duplicate(&path.index(i), k));
        }
    }
    errs
}

/// Upstream's `ValidateNodeSelector`: at least one term, each valid.
pub(super) fn validate_node_selector(sel: &Value, path: &FieldPath) -> ErrorList {
    let tp = path.child("nodeSelectorTerms");
    let terms = get_arr(sel, &["nodeSelectorTerms"]);
    if terms.is_empty() {
        return vec![FieldError::required(
            &tp,
            "must have at least one node selector term",
        )];
    }
    terms
        .iter()
        .enumerate()
        .flat_map(|(i, t)| validate_node_selector_term(t, &tp.index(i)))
        .collect()
}

/// `validateSelector`: a CEL selector with a non-empty expression of at most 10 Ki. `stored`
/// expressions (unchanged on update) are not re-checked.
fn validate_selector(sel: &Value, path: &FieldPath, stored: bool) -> ErrorList {
    let Some(cel) = get(sel, &["cel"]) else {
        return vec![FieldError::required(&path.child("cel"), "")];
    };
    if stored {
        return ErrorList::new();
    }
    let ep = path.child("cel").child("expression");
    let expr = str_or_empty(cel, &["expression"]);
    if expr.len() > CEL_EXPRESSION_MAX_LEN {
        vec![FieldError::too_long(&ep, CEL_EXPRESSION_MAX_LEN)]
    } else if expr.is_empty() {
        vec![FieldError::invalid(&ep, expr, EMPTY_CEL_MESSAGE)]
    } else {
        ErrorList::new()
    }
}

/// `validateSelectorSlice`.
pub(super) fn validate_selectors(selectors: &[Value], path: &FieldPath, stored: bool) -> ErrorList {
    if let Some(e) = too_many(selectors, DEVICE_SELECTORS_MAX, path) {
        return e;
    }
    selectors
        .iter()
        .enumerate()
        .flat_map(|(i, s)| validate_selector(s, &path.index(i), stored))
        .collect()
}

/// `validateRawExtension`: a JSON object of at most `max` bytes (the limit only for new data).
pub(super) fn validate_raw_extension(
    raw: Option<&Value>,
    path: &FieldPath,
    stored: bool,
    max: usize,
) -> ErrorList {
    match raw {
        None => vec![FieldError::required(path, "")],
        Some(v) if !stored && v.to_string().len() > max => vec![FieldError::too_long(path, max)],
        Some(Value::Object(_)) => ErrorList::new(),
        Some(_) => vec![FieldError::invalid(
            path,
            "<value omitted>",
            "must be a valid JSON object",
        )],
    }
}

/// `validateDeviceConfiguration`: an `opaque` entry with a driver name and parameters.
pub(super) fn validate_device_configuration(
    config: &Value,
    path: &FieldPath,
    stored: bool,
) -> ErrorList {
    let op = path.child("opaque");
    let Some(opaque) = get(config, &["opaque"]) else {
        return vec![FieldError::required(&op, "")];
    };
    let mut errs = validate_driver_name(str_or_empty(opaque, &["driver"]), &op.child("driver"));
    errs.extend(validate_raw_extension(
        get(opaque, &["parameters"]),
        &op.child("parameters"),
        stored,
        OPAQUE_PARAMETERS_MAX_LEN,
    ));
    errs
}

/// Upstream's `validateLabelValue`.
pub(super) fn validate_label_value(value: &str, path: &FieldPath) -> ErrorList {
    invalid_all(names::is_label_value(value), path, value)
}

/// `validDeviceTaintEffects`, sorted as upstream lists them.
pub(super) const DEVICE_TAINT_EFFECTS: [&str; 3] = ["NoExecute", "NoSchedule", "None"];

/// `validateDeviceToleration`.
pub(super) fn validate_device_toleration(t: &Value, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let key = str_or_empty(t, &["key"]);
    if !key.is_empty() {
        errs.extend(validate_label_name(key, &path.child("key")));
    }
    let value = str_or_empty(t, &["value"]);
    match str_or_empty(t, &["operator"]) {
        "Exists" => {
            if !value.is_empty() {
                errs.push(FieldError::invalid(
                    &path.child("value"),
                    value,
                    "must be empty for operator `Exists`",
                ));
            }
        }
        "Equal" => errs.extend(validate_label_value(value, &path.child("value"))),
        "" => errs.push(FieldError::required(&path.child("operator"), "")),
        other => errs.push(FieldError::not_supported(
            &path.child("operator"),
            other,
            &["Equal", "Exists"],
        )),
    }
    let effect = str_or_empty(t, &["effect"]);
    if !effect.is_empty() && !DEVICE_TAINT_EFFECTS.contains(&effect) {
        errs.push(FieldError::not_supported(
            &path.child("effect"),
            effect,
            &DEVICE_TAINT_EFFECTS,
        ));
    }
    errs
}

/// Tolerations of a request or an allocation result (at most 16).
pub(super) fn validate_device_tolerations(tolerations: &[Value], path: &FieldPath) -> ErrorList {
    if let Some(e) = too_many(tolerations, DEVICE_TOLERATIONS_MAX, path) {
        return e;
    }
    tolerations
        .iter()
        .enumerate()
        .flat_map(|(i, t)| validate_device_toleration(t, &path.index(i)))
        .collect()
}

/// `validateDeviceBindingParameters`: at most 4 of each, label names, unique, not overlapping,
/// and both lists or neither.
pub(super) fn validate_binding_parameters(obj: &Value, path: &FieldPath) -> ErrorList {
    const MAX: usize = 4;
    let mut errs = ErrorList::new();
    let conds = get_arr(obj, &["bindingConditions"]);
    let failures = get_arr(obj, &["bindingFailureConditions"]);
    let cp = path.child("bindingConditions");
    let fp = path.child("bindingFailureConditions");
    for (list, p) in [(conds, &cp), (failures, &fp)] {
        match too_many(list, MAX, p) {
            Some(e) => errs.extend(e),
            None => {
                for (i, c) in list.iter().enumerate() {
                    errs.extend(validate_label_name(c.as_str().unwrap_or(""), &p.index(i)));
                }
            }
        }
    }
    let strs = |l: &[Value]| -> Vec<String> {
        l.iter()
            .map(|v| v.as_str().unwrap_or("").to_string())
            .collect()
    };
    let (conds, failures) = (strs(conds), strs(failures));
    errs.extend(duplicates(conds.iter().map(String::as_str), &cp));
    let mut seen = HashSet::new();
    for (i, f) in failures.iter().enumerate() {
        if !seen.insert(f.as_str()) {
            errs.push(FieldError::duplicate(&fp.index(i), f.as_str()));
        }
        if conds.contains(f) {
            errs.push(FieldError::invalid(
                &fp.index(i),
                f.as_str(),
                "bindingFailureConditions must not overlap with bindingConditions",
            ));
        }
    }
    if conds.is_empty() && !failures.is_empty() {
        errs.push(FieldError::invalid(
            &cp,
            Value::Array(Vec::new()),
            "bindingConditions are required to use bindingFailureConditions",
        ));
    }
    if failures.is_empty() && !conds.is_empty() {
        errs.push(FieldError::invalid(
            &fp,
            Value::Array(Vec::new()),
            "bindingFailureConditions are required to use bindingConditions",
        ));
    }
    errs
}

/// An error whose bad value upstream prints through `String()` (unquoted).
pub(super) fn stringer_error(
    kind: ErrorType,
    path: &FieldPath,
    text: impl Into<String>,
    detail: &str,
) -> FieldError {
    FieldError::with_value_text(kind, path, text, detail)
}

/// `validateDeviceClassSpec`; selectors and configs unchanged from `old` count as stored.
fn device_class_spec(spec: &Value, old: Option<&Value>, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let unchanged = |key: &str| old.is_some_and(|o| semantic_eq(get(spec, &[key]), get(o, &[key])));
    errs.extend(validate_selectors(
        get_arr(spec, &["selectors"]),
        &path.child("selectors"),
        unchanged("selectors"),
    ));
    let configs = get_arr(spec, &["config"]);
    let cp = path.child("config");
    match too_many(configs, DEVICE_CONFIG_MAX, &cp) {
        Some(e) => errs.extend(e),
        None => {
            let stored = unchanged("config");
            for (i, c) in configs.iter().enumerate() {
                errs.extend(validate_device_configuration(c, &cp.index(i), stored));
            }
        }
    }
    if let Some(name) = get_str(spec, &["extendedResourceName"]) {
        if !crate::quota::pods::is_extended_resource_name(name) {
            errs.push(FieldError::invalid(
                &path.child("extendedResourceName"),
                name,
                "must be a valid extended resource name",
            ));
        }
    }
    errs
}

fn spec_of(obj: &Value) -> &Value {
    static EMPTY: Value = Value::Null;
    get(obj, &["spec"]).unwrap_or(&EMPTY)
}

/// `ValidateDeviceClass`.
fn device_class(obj: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta(obj, NameRule::Subdomain, true);
    errs.extend(device_class_spec(
        spec_of(obj),
        None,
        &FieldPath::root("spec"),
    ));
    errs
}

/// `ValidateDeviceClassUpdate`.
fn device_class_update(new: &Value, old: &Value) -> ErrorList {
    let mut errs = meta::validate_object_meta_update(new, old, true);
    errs.extend(device_class_spec(
        spec_of(new),
        Some(spec_of(old)),
        &FieldPath::root("spec"),
    ));
    errs
}

/// `validate_create` for `resource.k8s.io`; `None` for kinds not covered.
pub(crate) fn validate_create(kind: &str, obj: &Value) -> Option<ErrorList> {
    Some(match kind {
        "DeviceClass" => device_class(obj),
        "ResourceClaim" => resource_claim::validate_claim(obj),
        "ResourceClaimTemplate" => resource_claim::validate_template(obj),
        "ResourceSlice" => resource_slice::validate_slice(obj),
        _ => return None,
    })
}

/// `validate_update` for `resource.k8s.io`; `None` for kinds not covered. The whole object is
/// validated: for a ResourceClaim both the spec (immutable) and the status (upstream's
/// `ValidateResourceClaimStatusUpdate`), since a main-resource update keeps the stored status and
/// a status update the stored spec, so each half passes unchanged in the other's update.
pub(crate) fn validate_update(kind: &str, new: &Value, old: &Value) -> Option<ErrorList> {
    Some(match kind {
        "DeviceClass" => device_class_update(new, old),
        "ResourceClaim" => resource_claim::validate_claim_update(new, old),
        "ResourceClaimTemplate" => resource_claim::validate_template_update(new, old),
        "ResourceSlice" => resource_slice::validate_slice_update(new, old),
        _ => return None,
    })
}

/// A map field's entries (absent or not an object: none).
pub(super) fn entries<'a>(obj: &'a Value, key: &str) -> Vec<(&'a String, &'a Value)> {
    get_obj(obj, &[key])
        .map(|m| m.iter().collect())
        .unwrap_or_default()
}
