//! Object metadata, labels, annotations and label selectors (upstream
//! `k8s.io/apimachinery/pkg/api/validation/objectmeta.go`, `pkg/apis/meta/v1/validation` and the
//! `ValidateObjectMeta` wrapper of `pkg/apis/core/validation` that adds the finalizer-name rule).
//!
//! Deliberately different: namespace presence and `resourceVersion` on update are the server's business
//! (it knows the scope and does unconditional updates); a `uid`, `creationTimestamp` or
//! `deletionTimestamp` missing from an update is taken as unchanged, as upstream's `BeforeUpdate`
//! copies them from the stored object before validating.

use serde_json::{Map, Value};

use super::field::{ErrorList, FieldError, FieldPath};
use super::json::{as_int, get, get_arr, get_int, get_obj, get_str, semantic_eq, str_or_empty};
use super::names;

/// Upstream's `FieldImmutableErrorMsg`.
pub const FIELD_IMMUTABLE: &str = "field is immutable";
/// Upstream's `IsNegativeErrorMsg`.
pub const IS_NEGATIVE: &str = "must be greater than or equal to 0";
/// Upstream's `TotalAnnotationSizeLimitB`.
pub const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

/// Which rule an object's name follows (upstream's `ValidateNameFunc` per kind).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameRule {
    /// `NameIsDNSSubdomain`: most kinds.
    Subdomain,
    /// `NameIsDNSLabel`: Namespace, StatefulSet.
    Label,
    /// `NameIsDNS1035Label`: Service.
    Dns1035,
    /// `path.IsValidPathSegmentName`: RBAC roles and bindings (`system:controller:...`).
    PathSegment,
}

impl NameRule {
    /// Upstream's name functions: messages for `name` (a `generateName` prefix when `prefix`).
    pub fn check(self, name: &str, prefix: bool) -> Vec<String> {
        let masked;
        let name = if prefix && self != NameRule::PathSegment {
            masked = names::mask_trailing_dash(name);
            masked.as_str()
        } else {
            name
        };
        match self {
            NameRule::Subdomain => names::is_dns1123_subdomain(name),
            NameRule::Label => names::is_dns1123_label(name),
            NameRule::Dns1035 => names::is_dns1035_label(name),
            NameRule::PathSegment => {
                if prefix {
                    names::is_valid_path_segment_name(name)
                        .into_iter()
                        .filter(|m| !m.starts_with("may not be '"))
                        .collect()
                } else {
                    names::is_valid_path_segment_name(name)
                }
            }
        }
    }
}

fn meta_path() -> FieldPath {
    FieldPath::root("metadata")
}

/// A map's entries as (key, value-as-string) pairs; non-string values are shown as JSON.
fn string_map(v: Option<&Value>) -> Vec<(String, String)> {
    match v.and_then(Value::as_object) {
        Some(m) => m
            .iter()
            .map(|(k, v)| {
                let s = match v {
                    Value::String(s) => s.clone(),
                    Value::Null => String::new(),
                    other => other.to_string(),
                };
                (k.clone(), s)
            })
            .collect(),
        None => Vec::new(),
    }
}

/// Upstream's `ValidateLabelName`.
pub fn validate_label_name(key: &str, path: &FieldPath) -> ErrorList {
    names::is_qualified_name(key)
        .into_iter()
        .map(|m| FieldError::invalid(path, key, m))
        .collect()
}

/// Upstream's `ValidateLabels`: keys are qualified names, values label values; errors on the map's path.
pub fn validate_labels(labels: Option<&Value>, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    for (k, v) in string_map(labels) {
        errs.extend(validate_label_name(&k, path));
        for m in names::is_label_value(&v) {
            errs.push(FieldError::invalid(path, v.as_str(), m));
        }
    }
    errs
}

/// Upstream's `ValidateAnnotations`: keys are qualified names (case-insensitive), total size <= 256 KiB.
pub fn validate_annotations(annotations: Option<&Value>, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let mut total = 0usize;
    for (k, v) in string_map(annotations) {
        for m in names::is_qualified_name(&k.to_lowercase()) {
            errs.push(FieldError::invalid(path, k.as_str(), m));
        }
        total += k.len() + v.len();
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        errs.push(FieldError::too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
    errs
}

/// Upstream's `ValidateNonnegativeField`.
pub fn nonnegative(value: Option<i64>, path: &FieldPath) -> ErrorList {
    match value {
        Some(v) if v < 0 => vec![FieldError::invalid(path, v, IS_NEGATIVE)],
        _ => Vec::new(),
    }
}

/// Upstream's `ValidateImmutableField`: Invalid with the new value when it differs semantically.
pub fn immutable(new: Option<&Value>, old: Option<&Value>, path: &FieldPath) -> ErrorList {
    if semantic_eq(new, old) {
        Vec::new()
    } else {
        vec![FieldError::invalid(
            path,
            new.cloned().unwrap_or(Value::Null),
            FIELD_IMMUTABLE,
        )]
    }
}

fn is_standard_finalizer(name: &str) -> bool {
    matches!(name, "kubernetes" | "orphan" | "foregroundDeletion")
}

/// Upstream's core `validateKubeFinalizerName`.
pub fn validate_kube_finalizer_name(name: &str, path: &FieldPath) -> ErrorList {
    if !name.contains('/') && !is_standard_finalizer(name) {
        vec![FieldError::invalid(
            path,
            name,
            "name is neither a standard finalizer name nor is it fully qualified",
        )]
    } else {
        Vec::new()
    }
}

fn validate_finalizers(meta: &Value, kube_rules: bool) -> ErrorList {
    let path = meta_path().child("finalizers");
    let mut errs = ErrorList::new();
    let finalizers: Vec<&str> = get_arr(meta, &["finalizers"])
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for f in &finalizers {
        for m in names::is_qualified_name(f) {
            errs.push(FieldError::invalid(&path, *f, m));
        }
    }
    if finalizers.contains(&"orphan") && finalizers.contains(&"foregroundDeletion") {
        errs.push(FieldError::invalid(
            &path,
            Value::from(finalizers.clone()),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    if kube_rules {
        for (i, f) in finalizers.iter().enumerate() {
            errs.extend(validate_kube_finalizer_name(f, &path.index(i)));
        }
    }
    errs
}

fn validate_owner_references(meta: &Value) -> ErrorList {
    let path = meta_path().child("ownerReferences");
    let mut errs = ErrorList::new();
    let mut first_controller: Option<String> = None;
    for r in get_arr(meta, &["ownerReferences"]) {
        let api_version = str_or_empty(r, &["apiVersion"]);
        let kind = str_or_empty(r, &["kind"]);
        let (group, version) = match api_version.split('/').collect::<Vec<_>>().as_slice() {
            [v] => ("", *v),
            [g, v] => (*g, *v),
            _ => ("", ""),
        };
        if version.is_empty() {
            errs.push(FieldError::invalid(
                &path.child("apiVersion"),
                api_version,
                "version must not be empty",
            ));
        }
        if kind.is_empty() {
            errs.push(FieldError::invalid(
                &path.child("kind"),
                kind,
                "must not be empty",
            ));
        }
        let name = str_or_empty(r, &["name"]);
        if name.is_empty() {
            errs.push(FieldError::invalid(
                &path.child("name"),
                name,
                "must not be empty",
            ));
        }
        let uid = str_or_empty(r, &["uid"]);
        if uid.is_empty() {
            errs.push(FieldError::invalid(
                &path.child("uid"),
                uid,
                "must not be empty",
            ));
        }
        if group.is_empty() && version == "v1" && kind == "Event" {
            errs.push(FieldError::invalid(
                &path,
                r.clone(),
                "/v1, Kind=Event is disallowed from being an owner",
            ));
        }
        if r.get("controller").and_then(Value::as_bool) == Some(true) {
            let current = format!("{kind}/{name}");
            match &first_controller {
                Some(first) => errs.push(FieldError::invalid(
                    &path,
                    Value::from(get_arr(meta, &["ownerReferences"]).to_vec()),
                    format!(
                        "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                    ),
                )),
                None => first_controller = Some(current),
            }
        }
    }
    errs
}

/// Upstream's `ValidateObjectMeta` on create. `kube_rules` adds core's finalizer-name rule (all
/// built-in kinds; not custom resources).
pub fn validate_object_meta(obj: &Value, rule: NameRule, kube_rules: bool) -> ErrorList {
    let empty = Value::Object(Map::new());
    let meta = get(obj, &["metadata"]).unwrap_or(&empty);
    let path = meta_path();
    let mut errs = ErrorList::new();
    let generate_name = str_or_empty(meta, &["generateName"]);
    if !generate_name.is_empty() {
        for m in rule.check(generate_name, true) {
            errs.push(FieldError::invalid(
                &path.child("generateName"),
                generate_name,
                m,
            ));
        }
    }
    let name = str_or_empty(meta, &["name"]);
    if name.is_empty() {
        errs.push(FieldError::required(
            &path.child("name"),
            "name or generateName is required",
        ));
    } else {
        for m in rule.check(name, false) {
            errs.push(FieldError::invalid(&path.child("name"), name, m));
        }
    }
    errs.extend(common_meta(meta, kube_rules));
    errs
}

/// The parts of object meta validated the same way on create and update.
fn common_meta(meta: &Value, kube_rules: bool) -> ErrorList {
    let path = meta_path();
    let mut errs = ErrorList::new();
    if let Some(ns) = get_str(meta, &["namespace"]).filter(|s| !s.is_empty()) {
        for m in names::is_dns1123_label(ns) {
            errs.push(FieldError::invalid(&path.child("namespace"), ns, m));
        }
    }
    errs.extend(nonnegative(
        get_int(meta, &["generation"]),
        &path.child("generation"),
    ));
    errs.extend(validate_labels(
        get(meta, &["labels"]),
        &path.child("labels"),
    ));
    errs.extend(validate_annotations(
        get(meta, &["annotations"]),
        &path.child("annotations"),
    ));
    errs.extend(validate_owner_references(meta));
    errs.extend(validate_finalizers(meta, kube_rules));
    errs
}

/// Upstream's `ValidateObjectMetaUpdate`.
pub fn validate_object_meta_update(new: &Value, old: &Value, kube_rules: bool) -> ErrorList {
    let empty = Value::Object(Map::new());
    let nm = get(new, &["metadata"]).unwrap_or(&empty);
    let om = get(old, &["metadata"]).unwrap_or(&empty);
    let path = meta_path();
    let mut errs = ErrorList::new();

    if get(om, &["deletionTimestamp"]).is_some() {
        let old_f: Vec<&str> = get_arr(om, &["finalizers"])
            .iter()
            .filter_map(Value::as_str)
            .collect();
        let mut extra: Vec<&str> = get_arr(nm, &["finalizers"])
            .iter()
            .filter_map(Value::as_str)
            .filter(|f| !old_f.contains(f))
            .collect();
        extra.sort_unstable();
        extra.dedup();
        if !extra.is_empty() {
            let list: Vec<String> = extra.iter().map(|f| format!("{f:?}")).collect();
            errs.push(FieldError::forbidden(
                &path.child("finalizers"),
                format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers []string{{{}}}",
                    list.join(", ")
                ),
            ));
        }
    }
    let (ng, og) = (
        get_int(nm, &["generation"]).unwrap_or(0),
        get_int(om, &["generation"]).unwrap_or(0),
    );
    if ng < og {
        errs.push(FieldError::invalid(
            &path.child("generation"),
            ng,
            "must not be decremented",
        ));
    }
    for key in ["name", "namespace"] {
        let n = Value::from(str_or_empty(nm, &[key]));
        let o = Value::from(str_or_empty(om, &[key]));
        if n != o {
            errs.push(FieldError::invalid(&path.child(key), n, FIELD_IMMUTABLE));
        }
    }
    for key in [
        "uid",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
    ] {
        if let Some(n) = get(nm, &[key]) {
            errs.extend(immutable(Some(n), get(om, &[key]), &path.child(key)));
        }
    }
    errs.extend(validate_labels(get(nm, &["labels"]), &path.child("labels")));
    errs.extend(validate_annotations(
        get(nm, &["annotations"]),
        &path.child("annotations"),
    ));
    errs.extend(validate_owner_references(nm));
    errs.extend(validate_finalizers(nm, kube_rules));
    errs
}

/// One requirement of a label selector.
#[derive(Clone, Debug, PartialEq)]
pub struct Requirement {
    pub key: String,
    pub op: String,
    pub values: Vec<String>,
}

/// A label selector as upstream's `LabelSelectorAsSelector` makes it: a missing selector selects
/// nothing, an empty one everything.
#[derive(Clone, Debug, PartialEq)]
pub enum Selector {
    Nothing,
    Everything,
    Requirements(Vec<Requirement>),
}

impl Selector {
    /// Converts a `metav1.LabelSelector`; `Err` for what upstream's conversion rejects.
    pub fn parse(sel: Option<&Value>) -> Result<Selector, String> {
        let Some(sel) = sel else {
            return Ok(Selector::Nothing);
        };
        let match_labels = string_map(get(sel, &["matchLabels"]));
        let exprs = get_arr(sel, &["matchExpressions"]);
        if match_labels.is_empty() && exprs.is_empty() {
            return Ok(Selector::Everything);
        }
        let mut reqs = Vec::new();
        for (k, v) in match_labels {
            check_requirement(&k, "In", std::slice::from_ref(&v))?;
            reqs.push(Requirement {
                key: k,
                op: "In".into(),
                values: vec![v],
            });
        }
        for e in exprs {
            let key = str_or_empty(e, &["key"]).to_string();
            let op = str_or_empty(e, &["operator"]).to_string();
            let values: Vec<String> = get_arr(e, &["values"])
                .iter()
                .map(|v| {
                    v.as_str()
                        .map(str::to_string)
                        .unwrap_or_else(|| v.to_string())
                })
                .collect();
            if !matches!(op.as_str(), "In" | "NotIn" | "Exists" | "DoesNotExist") {
                return Err(format!("{op:?} is not a valid label selector operator"));
            }
            check_requirement(&key, &op, &values)?;
            reqs.push(Requirement { key, op, values });
        }
        Ok(Selector::Requirements(reqs))
    }

    pub fn is_empty(&self) -> bool {
        matches!(self, Selector::Everything)
    }

    /// Whether `labels` (a JSON map) satisfies the selector.
    pub fn matches(&self, labels: Option<&Map<String, Value>>) -> bool {
        match self {
            Selector::Nothing => false,
            Selector::Everything => true,
            Selector::Requirements(reqs) => reqs.iter().all(|r| {
                let value = labels.and_then(|l| l.get(&r.key)).and_then(Value::as_str);
                match r.op.as_str() {
                    "In" => value.is_some_and(|v| r.values.iter().any(|x| x == v)),
                    "NotIn" => value.is_none_or(|v| !r.values.iter().any(|x| x == v)),
                    "Exists" => value.is_some(),
                    "DoesNotExist" => value.is_none(),
                    _ => false,
                }
            }),
        }
    }
}

fn check_requirement(key: &str, op: &str, values: &[String]) -> Result<(), String> {
    if let Some(m) = names::is_qualified_name(key).into_iter().next() {
        return Err(format!("key: Invalid value: {key:?}: {m}"));
    }
    match op {
        "In" | "NotIn" if values.is_empty() => {
            return Err("for 'in', 'notin' operators, values set can't be empty".into())
        }
        "Exists" | "DoesNotExist" if !values.is_empty() => {
            return Err("values set must be empty for exists and does not exist".into())
        }
        _ => {}
    }
    for v in values {
        if let Some(m) = names::is_label_value(v).into_iter().next() {
            return Err(format!("values[0]: Invalid value: {v:?}: {m}"));
        }
    }
    Ok(())
}

/// Upstream's `ValidateLabelSelector` (strict: label values in expressions must be valid).
pub fn validate_label_selector(sel: Option<&Value>, path: &FieldPath) -> ErrorList {
    let mut errs = ErrorList::new();
    let Some(sel) = sel else {
        return errs;
    };
    errs.extend(validate_labels(
        get(sel, &["matchLabels"]),
        &path.child("matchLabels"),
    ));
    for (i, e) in get_arr(sel, &["matchExpressions"]).iter().enumerate() {
        let p = path.child("matchExpressions").index(i);
        let op = str_or_empty(e, &["operator"]);
        let values = get_arr(e, &["values"]);
        match op {
            "In" | "NotIn" => {
                if values.is_empty() {
                    errs.push(FieldError::required(
                        &p.child("values"),
                        "must be specified when `operator` is 'In' or 'NotIn'",
                    ));
                }
            }
            "Exists" | "DoesNotExist" => {
                if !values.is_empty() {
                    errs.push(FieldError::forbidden(
                        &p.child("values"),
                        "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                    ));
                }
            }
            _ => errs.push(FieldError::invalid(
                &p.child("operator"),
                op,
                "not a valid selector operator",
            )),
        }
        errs.extend(validate_label_name(
            str_or_empty(e, &["key"]),
            &p.child("key"),
        ));
        for (j, v) in values.iter().enumerate() {
            let v = v.as_str().unwrap_or("");
            for m in names::is_label_value(v) {
                errs.push(FieldError::invalid(&p.child("values").index(j), v, m));
            }
        }
    }
    errs
}

/// Whether a selector has no `matchLabels` and no `matchExpressions`.
pub fn selector_is_empty(sel: &Value) -> bool {
    get_obj(sel, &["matchLabels"]).is_none_or(Map::is_empty)
        && get_arr(sel, &["matchExpressions"]).is_empty()
}

/// An optional integer field that must not be negative.
pub fn nonnegative_at(obj: &Value, path: &[&str], fpath: &FieldPath) -> ErrorList {
    nonnegative(get(obj, path).and_then(as_int), fpath)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selector_matching() {
        let s = Selector::parse(Some(&json!({"matchLabels": {"app": "a"}})))
            .unwrap_or(Selector::Nothing);
        let l = json!({"app": "a", "x": "y"});
        assert!(s.matches(l.as_object()));
        assert!(!s.matches(json!({"app": "b"}).as_object()));
        assert_eq!(Selector::parse(None), Ok(Selector::Nothing));
        assert_eq!(Selector::parse(Some(&json!({}))), Ok(Selector::Everything));
        let e = Selector::parse(Some(
            &json!({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["x"]}]}),
        ))
        .unwrap_or(Selector::Nothing);
        assert!(e.matches(json!({}).as_object()));
        assert!(Selector::parse(Some(
            &json!({"matchExpressions": [{"key": "a", "operator": "In"}]})
        ))
        .is_err());
    }

    #[test]
    fn meta_update_immutables() {
        let old = json!({"metadata": {"name": "a", "namespace": "d", "uid": "1"}});
        let new = json!({"metadata": {"name": "b", "namespace": "d", "uid": "2"}});
        let errs: Vec<String> = validate_object_meta_update(&new, &old, true)
            .iter()
            .map(|e| e.to_string())
            .collect();
        assert_eq!(
            errs,
            vec![
                "metadata.name: Invalid value: \"b\": field is immutable",
                "metadata.uid: Invalid value: \"2\": field is immutable"
            ]
        );
    }
}
