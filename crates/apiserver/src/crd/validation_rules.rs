//! CRD validation rules (`x-kubernetes-validations`, upstream `apiextensions-apiserver/pkg/apiserver/
//! schema/cel`): compiled once per CRD version into a [`RuleTree`] parallel to the structural schema
//! (kept in the CRD's [`super::info::VersionInfo`]), and checked when a CRD is written, so that a rule
//! that does not compile refuses the CRD with upstream's message. Evaluation on custom resource
//! writes is in [`super::validation_eval`].
//!
//! Differences (see `rkube_cel`'s docs): selected field names are checked against the schema
//! (`undefined field 'x'`, as upstream), but not operand or result types, so a rule that does not
//! return a bool or compares mismatched types fails only when it runs (as a rule error), not when
//! the CRD is written; no estimated-cost refusal at write time (the runtime budgets apply); no
//! `x-kubernetes-validations` inside `allOf`/`anyOf`/`oneOf`.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use apimachinery::schema::{Additional, Schema};
use apimachinery::validation::field::{ErrorList, FieldError, FieldPath};
use rkube_cel::{Env, Program, Shape};
use serde_json::Value;

/// The variables of a rule (with their shapes added per schema node).
static RULE_ENV: LazyLock<Env> = LazyLock::new(|| Env::new().with_variables(["self", "oldSelf"]));

/// A property name as CEL expressions select it (upstream `model.Escape`): reserved words as
/// `__word__`; `__`, `.`, `-`, `/` as `__underscores__`, `__dot__`, `__dash__`, `__slash__`.
/// `None` when the name cannot be selected (a leading digit, other characters).
pub fn escape(name: &str) -> Option<String> {
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return None;
    }
    if apimachinery::validation::admission_policy::CEL_RESERVED.contains(&name) {
        return Some(format!("__{name}__"));
    }
    let mut out = String::with_capacity(name.len());
    let mut chars = name.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '_' if chars.peek() == Some(&'_') => {
                chars.next();
                out.push_str("__underscores__");
            }
            '.' => out.push_str("__dot__"),
            '-' => out.push_str("__dash__"),
            '/' => out.push_str("__slash__"),
            c if c.is_ascii_alphanumeric() || c == '_' => out.push(c),
            _ => return None,
        }
    }
    Some(out)
}

/// What a rule may select on the value of schema `s` (upstream's declared CEL type, reduced to
/// fields): objects with properties have exactly those (escaped), resource roots also
/// `apiVersion`, `kind` and `metadata.name`/`metadata.generateName`; objects with
/// `additionalProperties` are maps; unknown-preserving and int-or-string values are open.
pub fn shape_of(s: &Schema, resource_root: bool) -> Shape {
    if s.int_or_string || s.preserves_unknown() {
        return Shape::Any;
    }
    match s.type_.as_str() {
        "object" => {
            if let Some(a) = s.additional_schema() {
                return Shape::map(shape_of(a, a.embedded_resource));
            }
            if s.properties.is_empty() && !resource_root {
                return Shape::Any;
            }
            let mut fields: BTreeMap<String, Shape> = s
                .properties
                .iter()
                .filter_map(|(k, p)| Some((escape(k)?, shape_of(p, p.embedded_resource))))
                .collect();
            if resource_root {
                fields.insert("apiVersion".into(), Shape::Scalar);
                fields.insert("kind".into(), Shape::Scalar);
                fields.insert(
                    "metadata".into(),
                    Shape::object([
                        ("name".to_owned(), Shape::Scalar),
                        ("generateName".to_owned(), Shape::Scalar),
                    ]),
                );
            }
            Shape::Object(std::sync::Arc::new(fields))
        }
        "array" => Shape::list(
            s.items
                .as_deref()
                .map_or(Shape::Any, |i| shape_of(i, i.embedded_resource)),
        ),
        "" => Shape::Any,
        _ => Shape::Scalar,
    }
}

/// Upstream's supported `reason`s (sorted, as upstream lists them).
const REASONS: &[&str] = &[
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

/// How a failed rule is reported (`reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    Invalid,
    Forbidden,
    Required,
    Duplicate,
}

/// One compiled rule.
#[derive(Clone, Debug)]
pub struct Rule {
    pub rule: String,
    pub message: String,
    pub reason: Reason,
    /// `fieldPath`, normalised (`spec.replicas`), empty when unset or invalid.
    pub field_path: String,
    pub optional_old_self: bool,
    /// The program, or why it does not compile (`compilation failed: ...`).
    pub program: Result<Program, String>,
    /// `messageExpression`, compiled (or why not).
    pub message_expression: Option<Result<Program, String>>,
    /// The rule refers to `oldSelf`: a transition rule.
    pub uses_old_self: bool,
}

impl Rule {
    /// Upstream `ruleErrorString`: the message, else the rule.
    pub fn error_string(&self) -> &str {
        if self.message.is_empty() {
            self.rule.trim()
        } else {
            self.message.trim()
        }
    }

    /// Upstream `ruleMessageOrDefault`.
    pub fn message_or_default(&self) -> String {
        if self.message.is_empty() {
            format!("failed rule: {}", self.error_string())
        } else {
            self.message.trim().to_owned()
        }
    }
}

/// The rules of a schema node and of the nodes below it that have any.
#[derive(Clone, Debug, Default)]
pub struct RuleTree {
    pub rules: Vec<Rule>,
    pub properties: BTreeMap<String, RuleTree>,
    pub items: Option<Box<RuleTree>>,
    pub additional: Option<Box<RuleTree>>,
}

impl RuleTree {
    fn is_empty(&self) -> bool {
        self.rules.is_empty()
            && self.properties.is_empty()
            && self.items.is_none()
            && self.additional.is_none()
    }
}

/// The compiled rules of a schema; `None` when it has none.
pub fn compile(schema: &Schema) -> Option<RuleTree> {
    let tree = compile_node(schema, true);
    (!tree.is_empty()).then_some(tree)
}

/// `root`: the node is a resource root (the schema's root, or an embedded resource).
fn compile_node(s: &Schema, root: bool) -> RuleTree {
    RuleTree {
        rules: s
            .validations
            .iter()
            .filter(|r| !str_of(r, "rule").trim().is_empty())
            .map(|r| compile_rule(r, s, root))
            .collect(),
        properties: s
            .properties
            .iter()
            .map(|(k, p)| (k.clone(), compile_node(p, p.embedded_resource)))
            .filter(|(_, t)| !t.is_empty())
            .collect(),
        items: s
            .items
            .as_deref()
            .map(|i| compile_node(i, i.embedded_resource))
            .filter(|t| !t.is_empty())
            .map(Box::new),
        additional: match &s.additional_properties {
            Some(Additional::Schema(a)) => Some(compile_node(a, a.embedded_resource))
                .filter(|t| !t.is_empty())
                .map(Box::new),
            _ => None,
        },
    }
}

fn str_of<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn compile_rule(raw: &Value, s: &Schema, root: bool) -> Rule {
    let rule = str_of(raw, "rule").to_owned();
    let shape = shape_of(s, root);
    let optional_old_self = raw.get("optionalOldSelf").and_then(Value::as_bool) == Some(true);
    let env = RULE_ENV
        .clone()
        .with_variable_shape("self", shape.clone())
        // With `optionalOldSelf`, `oldSelf` is an optional: its fields are reached through
        // `value()`/`.?`, which the shape check leaves alone.
        .with_variable_shape(
            "oldSelf",
            if optional_old_self { Shape::Any } else { shape },
        );
    let program = Program::compile(&rule, &env).map_err(|e| format!("compilation failed: {e}"));
    let message_expression = Some(str_of(raw, "messageExpression"))
        .filter(|m| !m.trim().is_empty())
        .map(|m| {
            Program::compile(m, &env)
                .map_err(|e| format!("messageExpression compilation failed: {e}"))
        });
    let reason = match str_of(raw, "reason") {
        "FieldValueForbidden" => Reason::Forbidden,
        "FieldValueRequired" => Reason::Required,
        "FieldValueDuplicate" => Reason::Duplicate,
        _ => Reason::Invalid,
    };
    let field_path = Some(str_of(raw, "fieldPath").trim())
        .filter(|p| !p.is_empty())
        .and_then(|p| valid_field_path(p, s).ok())
        .unwrap_or_default();
    Rule {
        uses_old_self: program.as_ref().is_ok_and(|p| p.uses_variable("oldSelf")),
        message: str_of(raw, "message").to_owned(),
        optional_old_self,
        rule,
        reason,
        field_path,
        program,
        message_expression,
    }
}

/// Upstream `ValidFieldPath`: `.a.b`, `['a.b']` steps through properties (or map keys), returned
/// normalised (`a.b`, `a[b.c]`).
pub fn valid_field_path(path: &str, schema: &Schema) -> Result<String, String> {
    let mut out: Option<FieldPath> = None;
    let mut cur = schema.clone();
    let mut rest = path;
    let step =
        |out: &Option<FieldPath>, s: &Schema, name: &str| -> Result<(FieldPath, Schema), String> {
            if !s.properties.is_empty() {
                let next = s
                    .properties
                    .get(name)
                    .ok_or_else(|| "does not refer to a valid field".to_owned())?;
                let p = match out {
                    Some(p) => p.child(name),
                    None => FieldPath::root(name),
                };
                Ok((p, next.clone()))
            } else if let Some(Additional::Schema(a)) = &s.additional_properties {
                let p = match out {
                    Some(p) => p.key(name),
                    None => FieldPath::root(&format!("[{name}]")),
                };
                Ok((p, (**a).clone()))
            } else {
                Err("does not refer to a valid field".to_owned())
            }
        };
    while !rest.is_empty() {
        let (name, after) = if let Some(r) = rest.strip_prefix('.') {
            let end = r.find(['.', '[']).unwrap_or(r.len());
            if end == 0 {
                return Err("unexpected end of JSON path".into());
            }
            (r[..end].to_owned(), &r[end..])
        } else if let Some(r) = rest.strip_prefix("['") {
            let end = r
                .find("']")
                .ok_or_else(|| "unexpected end of JSON path".to_owned())?;
            (
                r[..end].replace("\\'", "'").replace("\\\\", "\\"),
                &r[end + 2..],
            )
        } else {
            let first = rest.chars().next().unwrap_or(' ');
            return Err(format!("expected [ or . but got: {first}"));
        };
        let (p, next) = step(&out, &cur, &name)?;
        out = Some(p);
        cur = next;
        rest = after;
    }
    Ok(out.map(|p| p.as_str().to_owned()).unwrap_or_default())
}

/// Go's `%#v` of upstream's internal `apiextensions.ValidationRule` (how upstream prints a rule as
/// the bad value of an error). Pointers print as an address in Go; a fixed one stands in.
fn go_rule(raw: &Value) -> String {
    let ptr = |key: &str, ty: &str| {
        if raw.get(key).is_some_and(|v| !v.is_null()) {
            format!("(*{ty})(0xc000000000)")
        } else {
            format!("(*{ty})(nil)")
        }
    };
    format!(
        "apiextensions.ValidationRule{{Rule:{:?}, Message:{:?}, MessageExpression:{:?}, Reason:{}, FieldPath:{:?}, OptionalOldSelf:{}}}",
        str_of(raw, "rule"),
        str_of(raw, "message"),
        str_of(raw, "messageExpression"),
        ptr("reason", "apiextensions.FieldValueErrorReason"),
        str_of(raw, "fieldPath"),
        ptr("optionalOldSelf", "bool"),
    )
}

/// The rule errors of a CRD being written (upstream's CEL part of
/// `ValidateCustomResourceDefinitionOpenAPISchema`): rules that do not compile, bad
/// `messageExpression`, `reason`, `fieldPath` and `optionalOldSelf`. Schemas identical in every
/// version are reported under `spec.validation`, as the rest of CRD validation does.
pub fn crd_errors(crd: &Value) -> ErrorList {
    let versions = crd
        .pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let first = versions
        .first()
        .and_then(|v| v.get("schema"))
        .filter(|s| !s.is_null());
    let identical = first.filter(|f| versions.iter().all(|v| v.get("schema") == Some(f)));
    let mut errs = ErrorList::new();
    let mut check = |raw: &Value, path: FieldPath| {
        if raw.is_object() {
            schema_errors(&Schema::parse(raw), true, &path, None, &mut errs);
        }
    };
    match identical.and_then(|s| s.get("openAPIV3Schema")) {
        Some(raw) => check(
            raw,
            FieldPath::root("spec")
                .child("validation")
                .child("openAPIV3Schema"),
        ),
        None => {
            for (i, v) in versions.iter().enumerate() {
                if let Some(raw) = v.pointer("/schema/openAPIV3Schema") {
                    check(
                        raw,
                        FieldPath::root("spec")
                            .child("versions")
                            .index(i)
                            .child("schema")
                            .child("openAPIV3Schema"),
                    );
                }
            }
        }
    }
    errs
}

/// [`crd_errors`] when `group`/`kind` is a CustomResourceDefinition (the hook of the generic write
/// paths); nothing otherwise.
pub fn crd_write_errors(group: &str, kind: &str, obj: &Value) -> ErrorList {
    if (group, kind) == ("apiextensions.k8s.io", "CustomResourceDefinition") {
        crd_errors(obj)
    } else {
        ErrorList::new()
    }
}

/// `uncorrelatable`: the path of the nearest enclosing list whose items cannot be matched with
/// their old values (not `x-kubernetes-list-type: map`), where `oldSelf` is meaningless.
fn schema_errors(
    s: &Schema,
    root: bool,
    path: &FieldPath,
    uncorrelatable: Option<&FieldPath>,
    errs: &mut ErrorList,
) {
    for (k, p) in &s.properties {
        let pp = path.child("properties").key(k);
        schema_errors(p, p.embedded_resource, &pp, uncorrelatable, errs);
    }
    if let Some(items) = &s.items {
        let ip = path.child("items");
        let inner = if s.list_type.as_deref() == Some("map") {
            uncorrelatable.cloned()
        } else {
            Some(uncorrelatable.cloned().unwrap_or_else(|| path.clone()))
        };
        schema_errors(items, items.embedded_resource, &ip, inner.as_ref(), errs);
    }
    if let Some(Additional::Schema(a)) = &s.additional_properties {
        let ap = path.child("additionalProperties");
        schema_errors(a, a.embedded_resource, &ap, uncorrelatable, errs);
    }
    // A node's own rules after those below it, as upstream's recursion reports them.
    for (i, raw) in s.validations.iter().enumerate() {
        let rp = path.child("x-kubernetes-validations").index(i);
        rule_errors(raw, s, root, &rp, uncorrelatable, errs);
    }
}

fn rule_errors(
    raw: &Value,
    s: &Schema,
    root: bool,
    rp: &FieldPath,
    uncorrelatable: Option<&FieldPath>,
    errs: &mut ErrorList,
) {
    let message_expression = str_of(raw, "messageExpression");
    if !message_expression.is_empty() && message_expression.trim().is_empty() {
        errs.push(FieldError::required(
            &rp.child("messageExpression"),
            "messageExpression must be non-empty if specified",
        ));
    }
    if let Some(reason) = raw.get("reason").and_then(Value::as_str) {
        if !REASONS.contains(&reason) {
            errs.push(FieldError::not_supported(
                &rp.child("reason"),
                reason,
                REASONS,
            ));
        }
    }
    let field_path = str_of(raw, "fieldPath");
    if !field_path.is_empty() {
        let fp = rp.child("fieldPath");
        if field_path.trim().is_empty() {
            errs.push(FieldError::invalid(
                &fp,
                field_path,
                "fieldPath must be non-empty if specified",
            ));
        } else if field_path.contains('\n') {
            errs.push(FieldError::invalid(
                &fp,
                field_path,
                "fieldPath must not contain line breaks",
            ));
        } else if valid_field_path(field_path.trim(), s).is_err() {
            errs.push(FieldError::invalid(
                &fp,
                field_path,
                "fieldPath must be a valid path",
            ));
        }
    }
    if str_of(raw, "rule").trim().is_empty() {
        return;
    }
    let compiled = compile_rule(raw, s, root);
    match &compiled.program {
        Err(e) => errs.push(FieldError::with_value_text(
            apimachinery::validation::ErrorType::Invalid,
            &rp.child("rule"),
            go_rule(raw),
            e.clone(),
        )),
        Ok(_) if compiled.uses_old_self => {
            if let Some(list) = uncorrelatable {
                errs.push(FieldError::invalid(
                    &rp.child("rule"),
                    compiled.rule.as_str(),
                    format!(
                        "oldSelf cannot be used on the uncorrelatable portion of the schema within {list}"
                    ),
                ));
            }
        }
        Ok(_) if compiled.optional_old_self => errs.push(FieldError::invalid(
            &rp.child("optionalOldSelf"),
            true,
            "may not be set if oldSelf is not used in rule",
        )),
        Ok(_) => {}
    }
    if let Some(Err(e)) = &compiled.message_expression {
        errs.push(FieldError::with_value_text(
            apimachinery::validation::ErrorType::Invalid,
            &rp.child("messageExpression"),
            go_rule(raw),
            e.clone(),
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd(schema: Value) -> Value {
        json!({"spec": {"versions": [
            {"name": "v1", "schema": {"openAPIV3Schema": schema}},
            {"name": "v2", "schema": {"openAPIV3Schema": schema}}]}})
    }

    #[test]
    fn rules_that_do_not_compile_refuse_the_crd() {
        let c = crd(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "x-kubernetes-validations": [{"rule": "self.replicas <= self.maxReplicas"}, {"rule": "self.a <"},
                {"rule": "foo == 1", "message": "m"}]}}}),
        );
        let errs = crd_errors(&c);
        assert_eq!(errs.len(), 2, "{errs:?}");
        let first = errs[0].to_string();
        assert!(
            first.starts_with("spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[1].rule: Invalid value: apiextensions.ValidationRule{Rule:\"self.a <\", Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(nil), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}: compilation failed: ERROR: <input>:1:"),
            "{first}"
        );
        assert!(errs[1]
            .to_string()
            .ends_with("compilation failed: ERROR: <input>:1:1: undeclared reference to 'foo' (in container '')"));
    }

    #[test]
    fn per_version_schemas_are_reported_per_version() {
        let c = json!({"spec": {"versions": [
            {"name": "v1", "schema": {"openAPIV3Schema": {"type": "object"}}},
            {"name": "v2", "schema": {"openAPIV3Schema": {"type": "object",
                "x-kubernetes-validations": [{"rule": "1 +"}]}}}]}});
        let errs = crd_errors(&c);
        assert_eq!(errs.len(), 1);
        assert!(errs[0]
            .to_string()
            .starts_with("spec.versions[1].schema.openAPIV3Schema.x-kubernetes-validations[0].rule: Invalid value: "));
    }

    #[test]
    fn reasons_field_paths_and_old_self_are_checked() {
        let c = crd(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}},
                "x-kubernetes-validations": [
                    {"rule": "true", "reason": "Nope"},
                    {"rule": "true", "fieldPath": ".nope"},
                    {"rule": "true", "fieldPath": ".replicas"},
                    {"rule": "true", "optionalOldSelf": true},
                    {"rule": "false", "messageExpression": "'x' +"}]},
            "list": {"type": "array", "items": {"type": "string",
                "x-kubernetes-validations": [{"rule": "self == oldSelf"}]}}}}));
        let errs: Vec<String> = crd_errors(&c).iter().map(|e| e.to_string()).collect();
        let base = "spec.validation.openAPIV3Schema.properties";
        assert_eq!(errs[0], format!("{base}[list].items.x-kubernetes-validations[0].rule: Invalid value: \"self == oldSelf\": oldSelf cannot be used on the uncorrelatable portion of the schema within {base}[list]"));
        assert_eq!(errs[1], format!("{base}[spec].x-kubernetes-validations[0].reason: Unsupported value: \"Nope\": supported values: \"FieldValueDuplicate\", \"FieldValueForbidden\", \"FieldValueInvalid\", \"FieldValueRequired\""));
        assert_eq!(errs[2], format!("{base}[spec].x-kubernetes-validations[1].fieldPath: Invalid value: \".nope\": fieldPath must be a valid path"));
        assert_eq!(errs[3], format!("{base}[spec].x-kubernetes-validations[3].optionalOldSelf: Invalid value: true: may not be set if oldSelf is not used in rule"));
        assert!(errs[4].contains("x-kubernetes-validations[4].messageExpression: Invalid value: apiextensions.ValidationRule{Rule:\"false\""), "{}", errs[4]);
        assert!(errs[4].contains("messageExpression compilation failed: ERROR"));
        assert_eq!(errs.len(), 5);
    }

    #[test]
    fn undefined_fields_refuse_the_crd() {
        let c = crd(
            json!({"type": "object", "properties": {"spec": {"type": "object",
            "properties": {"replicas": {"type": "integer"}, "dash-name": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            "x-kubernetes-validations": [
                {"rule": "self.replicas > 0 && self.dash__dash__name != '' && self.labels.any != '' && self.free.x.y == 1"},
                {"rule": "self.replicsa > 0"}]}},
            "x-kubernetes-validations": [{"rule": "self.metadata.name != '' && self.kind != ''"},
                {"rule": "self.metadata.labels.size() > 0"}]}),
        );
        let errs: Vec<String> = crd_errors(&c).iter().map(ToString::to_string).collect();
        assert_eq!(errs.len(), 2, "{errs:?}");
        assert!(errs[0].starts_with(
            "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[1].rule: "
        ));
        assert!(
            errs[0].ends_with("compilation failed: ERROR: <input>:1:5: undefined field 'replicsa'"),
            "{}",
            errs[0]
        );
        assert!(errs[1]
            .starts_with("spec.validation.openAPIV3Schema.x-kubernetes-validations[1].rule: "));
        assert!(errs[1].ends_with("undefined field 'labels'"), "{}", errs[1]);
    }

    #[test]
    fn property_names_escape_as_upstream() {
        assert_eq!(escape("replicas").as_deref(), Some("replicas"));
        assert_eq!(escape("namespace").as_deref(), Some("__namespace__"));
        assert_eq!(
            escape("a.b-c/d").as_deref(),
            Some("a__dot__b__dash__c__slash__d")
        );
        assert_eq!(escape("x__y").as_deref(), Some("x__underscores__y"));
        assert_eq!(escape("9lives"), None);
        assert_eq!(escape("a@b"), None);
    }

    #[test]
    fn field_paths_normalise() {
        let s = Schema::parse(&json!({"type": "object", "properties": {
            "a": {"type": "object", "properties": {"b.c": {"type": "string"}}},
            "m": {"type": "object", "additionalProperties": {"type": "string"}}}}));
        assert_eq!(valid_field_path(".a['b.c']", &s), Ok("a.b.c".to_owned()));
        assert_eq!(valid_field_path(".m.k", &s), Ok("m[k]".to_owned()));
        assert!(valid_field_path(".x", &s).is_err());
        assert!(valid_field_path("a", &s).is_err());
    }

    #[test]
    fn compiled_trees_follow_the_schema() {
        let s = Schema::parse(&json!({"type": "object", "properties": {
            "spec": {"type": "object", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "Value is immutable"}]},
            "plain": {"type": "string"}}}));
        let tree = compile(&s).expect("rules");
        assert!(tree.rules.is_empty());
        assert_eq!(tree.properties.len(), 1);
        let rule = &tree.properties["spec"].rules[0];
        assert!(rule.uses_old_self);
        assert_eq!(rule.message_or_default(), "Value is immutable");
        assert!(compile(&Schema::parse(&json!({"type": "object"}))).is_none());
    }
}
