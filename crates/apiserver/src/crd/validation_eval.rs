//! Evaluating a CRD's `x-kubernetes-validations` on a custom resource write (upstream
//! `schema/cel/validation.go`): each rule runs with `self` bound to the value at its schema node,
//! `oldSelf` to the correlated old value on updates (transition rules run only when there is one,
//! unless `optionalOldSelf`, where `oldSelf` is an optional); all rules of one object share
//! upstream's total cost budget, and each evaluation its per-call limit.
//!
//! Ratcheting (upstream 1.30+): on update, a failing rule that does not use `oldSelf` is not an
//! error when its value is unchanged from the old object (or, below a list whose items cannot be
//! correlated, when the nearest correlatable ancestor is unchanged). Upstream returns those as
//! warnings; they are dropped here.
//!
//! Differences: lists of `x-kubernetes-list-type: set`/`map` compare as ordered lists in CEL
//! (upstream: order-insensitive); the root's `metadata` exposes all its fields (upstream: `name`
//! and `generateName` only).

use apimachinery::schema::Schema;
use apimachinery::validation::field::{ErrorList, FieldError, FieldPath};
use apimachinery::validation::ErrorType;
use rkube_cel::{Activation, EvalError, Value as CelValue, PER_CALL_COST_LIMIT};
use serde_json::Value;

use super::validation_rules::{Reason, Rule, RuleTree};

/// Upstream `celconfig.RuntimeCELCostBudget`: the total cost of all rules of one object write.
pub const RUNTIME_COST_BUDGET: u64 = 10_000_000;
/// Upstream `celconfig.MaxEvaluatedMessageExpressionSizeBytes`.
const MAX_MESSAGE_BYTES: usize = 5 * 1024;

/// Validates `new` (and `old` on update) against the rules; the errors in upstream's form.
pub fn validate(tree: &RuleTree, schema: &Schema, new: &Value, old: Option<&Value>) -> ErrorList {
    let mut w = Walker {
        budget: RUNTIME_COST_BUDGET,
        stopped: false,
        errors: ErrorList::new(),
    };
    let ratchet = Ratchet {
        current: old.map(|o| o == new),
        parent_equal: false,
    };
    w.node(tree, schema, None, new, old, ratchet);
    w.errors
}

/// Whether errors at a node are ratcheted (upstream `ratchetingOptions`): `current` is
/// `Some(unchanged)` when the node is correlated with an old value.
#[derive(Clone, Copy)]
struct Ratchet {
    current: Option<bool>,
    parent_equal: bool,
}

impl Ratchet {
    fn applies(self) -> bool {
        self.current.unwrap_or(self.parent_equal)
    }

    fn child(self, new: &Value, old: Option<&Value>) -> Ratchet {
        match self.current {
            None => self,
            Some(equal) => Ratchet {
                current: old.map(|o| o == new),
                parent_equal: equal,
            },
        }
    }
}

struct Walker {
    budget: u64,
    stopped: bool,
    errors: ErrorList,
}

/// `path.name`, the root's child being `name`.
fn child(path: Option<&FieldPath>, name: &str) -> FieldPath {
    match path {
        Some(p) => p.child(name),
        None => FieldPath::root(name),
    }
}

fn key(path: Option<&FieldPath>, k: &str) -> FieldPath {
    match path {
        Some(p) => p.key(k),
        None => FieldPath::root(&format!("[{k}]")),
    }
}

fn index(path: Option<&FieldPath>, i: usize) -> FieldPath {
    match path {
        Some(p) => p.index(i),
        None => FieldPath::root(&format!("[{i}]")),
    }
}

/// The root path prints as Go's nil `*field.Path`.
fn or_root(path: Option<&FieldPath>) -> FieldPath {
    path.cloned().unwrap_or_else(|| FieldPath::root("<nil>"))
}

/// The old item matching `item` by the list's map keys.
fn correlated_item<'a>(schema: &Schema, item: &Value, old: Option<&'a Value>) -> Option<&'a Value> {
    if schema.list_type.as_deref() != Some("map") || schema.list_map_keys.is_empty() {
        return None;
    }
    let keys = |v: &Value| -> Vec<Value> {
        schema
            .list_map_keys
            .iter()
            .map(|k| v.get(k).cloned().unwrap_or(Value::Null))
            .collect()
    };
    let wanted = keys(item);
    old?.as_array()?.iter().find(|o| keys(o) == wanted)
}

impl Walker {
    fn node(
        &mut self,
        tree: &RuleTree,
        schema: &Schema,
        path: Option<&FieldPath>,
        new: &Value,
        old: Option<&Value>,
        ratchet: Ratchet,
    ) {
        if new.is_null() || self.stopped {
            return;
        }
        // A null old value is no old value.
        let old = old.filter(|o| !o.is_null());
        if !tree.rules.is_empty() {
            self.rules(tree, schema, path, new, old, ratchet);
        }
        match new {
            Value::Object(map) => {
                if let (Some(t), Some(s)) = (&tree.additional, schema.additional_schema()) {
                    for (k, v) in map {
                        if self.stopped {
                            return;
                        }
                        let o = old.and_then(|o| o.get(k));
                        self.node(t, s, Some(&key(path, k)), v, o, ratchet.child(v, o));
                    }
                }
                for (k, t) in &tree.properties {
                    let (Some(v), Some(s)) = (map.get(k), schema.properties.get(k)) else {
                        continue;
                    };
                    if self.stopped {
                        return;
                    }
                    let o = old.and_then(|o| o.get(k));
                    self.node(t, s, Some(&child(path, k)), v, o, ratchet.child(v, o));
                }
            }
            Value::Array(items) => {
                if let (Some(t), Some(s)) = (&tree.items, schema.items.as_deref()) {
                    for (i, v) in items.iter().enumerate() {
                        if self.stopped {
                            return;
                        }
                        let o = correlated_item(schema, v, old);
                        let r = match ratchet.current {
                            None => ratchet,
                            Some(equal) => Ratchet {
                                current: o.map(|o| o == v),
                                parent_equal: equal,
                            },
                        };
                        self.node(t, s, Some(&index(path, i)), v, o, r);
                    }
                }
            }
            _ => {}
        }
    }

    fn out_of_budget(&mut self, path: Option<&FieldPath>, schema: &Schema) {
        self.errors.push(FieldError::invalid(
            &or_root(path),
            schema.type_.as_str(),
            "validation failed due to running out of cost budget, no further validation rules will be run",
        ));
        self.stopped = true;
    }

    fn rules(
        &mut self,
        tree: &RuleTree,
        schema: &Schema,
        path: Option<&FieldPath>,
        new: &Value,
        old: Option<&Value>,
        ratchet: Ratchet,
    ) {
        let this = to_cel(new, Some(schema));
        let old_cel = old.map(|o| to_cel(o, Some(schema)));
        let mut plain = Activation::new();
        plain.bind_value("self", this.clone());
        if let Some(o) = &old_cel {
            plain.bind_value("oldSelf", o.clone());
        }
        let mut optional: Option<Activation> = None;
        let type_ = schema.type_.as_str();
        for rule in &tree.rules {
            if self.stopped {
                return;
            }
            let program = match &rule.program {
                Ok(p) => p,
                Err(e) => {
                    self.errors.push(FieldError::invalid(
                        &or_root(path),
                        type_,
                        format!("rule compile error: {e}"),
                    ));
                    continue;
                }
            };
            if rule.uses_old_self && old.is_none() && !rule.optional_old_self {
                continue;
            }
            let activation = if rule.optional_old_self {
                optional.get_or_insert_with(|| {
                    let mut a = Activation::new();
                    a.bind_value("self", this.clone());
                    a.bind_value("oldSelf", rkube_cel::optional_value(old_cel.clone()));
                    a
                })
            } else {
                &plain
            };
            if self.budget == 0 {
                return self.out_of_budget(path, schema);
            }
            let per_call = self.budget >= PER_CALL_COST_LIMIT;
            match program.eval_with_budget(activation, &mut self.budget) {
                Ok(CelValue::Bool(true)) => {}
                Ok(CelValue::Bool(false)) => self.failed(rule, &plain, schema, path, new, ratchet),
                Ok(_) => self.errors.push(FieldError::invalid(
                    &or_root(path),
                    type_,
                    "rule compile error: cel expression must evaluate to a bool",
                )),
                Err(EvalError::CostLimitExceeded) if per_call => {
                    self.errors.push(FieldError::invalid(
                        &or_root(path),
                        type_,
                        format!(
                            "'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: {}",
                            rule.error_string()
                        ),
                    ));
                    self.stopped = true;
                }
                Err(EvalError::CostLimitExceeded) => return self.out_of_budget(path, schema),
                Err(e) => {
                    let text = e.to_string();
                    let detail = if text.starts_with("no such overload") {
                        format!("'{text}': call arguments did not match a supported operator, function or macro signature for rule: {}", rule.error_string())
                    } else {
                        format!("{text} evaluating rule: {}", rule.error_string())
                    };
                    self.errors
                        .push(FieldError::invalid(&or_root(path), type_, detail));
                }
            }
        }
    }

    /// Reports a rule that evaluated to false.
    fn failed(
        &mut self,
        rule: &Rule,
        activation: &Activation,
        schema: &Schema,
        path: Option<&FieldPath>,
        new: &Value,
        ratchet: Ratchet,
    ) {
        let field = if rule.field_path.is_empty() {
            or_root(path)
        } else {
            child(path, &rule.field_path)
        };
        let mut detail = None;
        if let Some(Ok(expr)) = &rule.message_expression {
            let per_call = self.budget >= PER_CALL_COST_LIMIT;
            match expr.eval_with_budget(activation, &mut self.budget) {
                Ok(CelValue::String(s)) => {
                    let s = s.trim();
                    if !s.is_empty() && s.len() <= MAX_MESSAGE_BYTES && !s.contains('\n') {
                        detail = Some(s.to_owned());
                    }
                }
                Err(EvalError::CostLimitExceeded) => {
                    let text = if per_call {
                        format!(
                            "no further validation rules will be run due to call cost exceeds limit for messageExpression: {:?}",
                            expr.source()
                        )
                    } else {
                        "messageExpression evaluation failed due to running out of cost budget, no further validation rules will be run".to_owned()
                    };
                    self.push(
                        rule,
                        ratchet,
                        FieldError::invalid(&field, schema.type_.as_str(), text),
                    );
                    self.stopped = true;
                    return;
                }
                // Not a usable string: upstream logs it and uses the message.
                _ => {}
            }
        }
        let detail = detail.unwrap_or_else(|| rule.message_or_default());
        // Objects and lists are not printed (upstream `field.OmitValueType`).
        let value = (!matches!(new, Value::Object(_) | Value::Array(_))).then(|| new.clone());
        let error = match rule.reason {
            Reason::Forbidden => FieldError::forbidden(&field, detail),
            Reason::Required => FieldError::required(&field, detail),
            Reason::Duplicate => {
                let mut e = FieldError::duplicate(&field, Value::Null);
                e.bad_value = value;
                e
            }
            Reason::Invalid => FieldError {
                kind: ErrorType::Invalid,
                field,
                bad_value: value,
                detail,
                value_text: None,
            },
        };
        self.push(rule, ratchet, error);
    }

    fn push(&mut self, rule: &Rule, ratchet: Ratchet, error: FieldError) {
        if rule.uses_old_self || !ratchet.applies() {
            self.errors.push(error);
        }
    }
}

/// A JSON value as the CEL value its schema gives it: `number`s are doubles, `integer`s ints,
/// `date-time`/`date` strings timestamps, `duration` strings durations, `byte` strings bytes.
pub fn to_cel(v: &Value, schema: Option<&Schema>) -> CelValue {
    match v {
        Value::Number(n) => match schema.map(|s| s.type_.as_str()) {
            Some("number") => CelValue::Float(n.as_f64().unwrap_or(f64::NAN)),
            _ => rkube_cel::json_to_value(v),
        },
        Value::String(s) => {
            let formatted = match schema.map(|s| s.format.as_str()) {
                Some("date-time") | Some("datetime") | Some("date") => {
                    rkube_cel::timestamp_value(s)
                }
                Some("duration") => rkube_cel::duration_value(s),
                Some("byte") => rkube_cel::bytes_value(s),
                _ => None,
            };
            formatted.unwrap_or_else(|| rkube_cel::json_to_value(v))
        }
        Value::Array(items) => {
            let item_schema = schema.and_then(|s| s.items.as_deref());
            rkube_cel::list_value(items.iter().map(|i| to_cel(i, item_schema)).collect())
        }
        Value::Object(map) => rkube_cel::map_value(map.iter().filter_map(|(k, v)| {
            let field = schema.and_then(|s| s.field(k).flatten());
            // Declared properties are selected by their escaped names (`a-b` as `a__dash__b`);
            // map keys and unknown preserved fields keep theirs.
            let name = match schema.and_then(|s| s.properties.get(k)) {
                Some(_) => super::validation_rules::escape(k)?,
                None => k.clone(),
            };
            Some((name, to_cel(v, field)))
        })),
        Value::Null | Value::Bool(_) => rkube_cel::json_to_value(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::validation_rules::compile;
    use serde_json::json;

    fn schema(rules: Value) -> Schema {
        Schema::parse(&json!({"type": "object", "properties": {
            "spec": {"type": "object", "x-kubernetes-validations": rules, "properties": {
                "replicas": {"type": "integer"}, "maxReplicas": {"type": "integer"},
                "ratio": {"type": "number"}, "name": {"type": "string"},
                "when": {"type": "string", "format": "date-time"},
                "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["port"],
                    "items": {"type": "object", "properties": {"port": {"type": "integer"}, "name": {"type": "string"}},
                        "x-kubernetes-validations": [{"rule": "self.name == oldSelf.name", "message": "name is immutable"}]}},
                "tags": {"type": "array", "items": {"type": "string",
                    "x-kubernetes-validations": [{"rule": "self.size() < 4"}]}}}}}}))
    }

    fn check(rules: Value, new: Value, old: Option<Value>) -> Vec<String> {
        let s = schema(rules);
        let tree = compile(&s).expect("rules");
        validate(&tree, &s, &new, old.as_ref())
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn failing_rules_report_upstreams_text() {
        let rules = json!([{"rule": "self.replicas <= self.maxReplicas"}]);
        let bad = json!({"spec": {"replicas": 5, "maxReplicas": 3}});
        assert_eq!(
            check(rules.clone(), bad, None),
            ["spec: Invalid value: failed rule: self.replicas <= self.maxReplicas"]
        );
        assert!(check(
            rules,
            json!({"spec": {"replicas": 1, "maxReplicas": 3}}),
            None
        )
        .is_empty());
    }

    #[test]
    fn messages_reasons_and_field_paths() {
        let new = json!({"spec": {"replicas": 5, "maxReplicas": 3}});
        let r = |rule: Value| check(json!([rule]), new.clone(), None);
        assert_eq!(
            r(json!({"rule": "false", "message": " too many "})),
            ["spec: Invalid value: too many"]
        );
        assert_eq!(
            r(
                json!({"rule": "false", "messageExpression": "'replicas ' + string(self.replicas) + ' > ' + string(self.maxReplicas)"})
            ),
            ["spec: Invalid value: replicas 5 > 3"]
        );
        // a messageExpression that fails falls back to the message
        assert_eq!(
            r(json!({"rule": "false", "message": "m", "messageExpression": "self.nope"})),
            ["spec: Invalid value: m"]
        );
        assert_eq!(
            r(
                json!({"rule": "false", "reason": "FieldValueForbidden", "fieldPath": ".replicas", "message": "no"})
            ),
            ["spec.replicas: Forbidden: no"]
        );
        assert_eq!(
            r(json!({"rule": "false", "reason": "FieldValueRequired", "message": "need"})),
            ["spec: Required value: need"]
        );
        assert_eq!(
            r(json!({"rule": "false", "reason": "FieldValueDuplicate"})),
            ["spec: Duplicate value"]
        );
    }

    #[test]
    fn scalar_values_are_printed_and_types_follow_the_schema() {
        let s = Schema::parse(&json!({"type": "object", "properties": {
            "n": {"type": "integer", "x-kubernetes-validations": [{"rule": "self < 3"}]},
            "s": {"type": "string", "x-kubernetes-validations": [{"rule": "self.startsWith('a')"}]},
            "f": {"type": "number", "x-kubernetes-validations": [{"rule": "self > 1.5"}]},
            "t": {"type": "string", "format": "date-time", "x-kubernetes-validations": [
                {"rule": "self < timestamp('2030-01-01T00:00:00Z')"}]},
            "d": {"type": "string", "format": "duration", "x-kubernetes-validations": [
                {"rule": "self > duration('1m')"}]}}}));
        let tree = compile(&s).unwrap();
        let errs: Vec<String> = validate(
            &tree,
            &s,
            &json!({"n": 5, "s": "b", "f": 1, "t": "2031-01-01T00:00:00Z", "d": "30s"}),
            None,
        )
        .iter()
        .map(ToString::to_string)
        .collect();
        assert_eq!(
            errs,
            [
                "d: Invalid value: \"30s\": failed rule: self > duration('1m')",
                "f: Invalid value: 1: failed rule: self > 1.5",
                "n: Invalid value: 5: failed rule: self < 3",
                "s: Invalid value: \"b\": failed rule: self.startsWith('a')",
                "t: Invalid value: \"2031-01-01T00:00:00Z\": failed rule: self < timestamp('2030-01-01T00:00:00Z')",
            ]
        );
    }

    #[test]
    fn escaped_names_and_root_rules() {
        let s = Schema::parse(&json!({"type": "object",
            "x-kubernetes-validations": [{"rule": "self.metadata.name.startsWith('ok-')", "message": "bad name"}],
            "properties": {"metadata": {"type": "object"},
                "spec": {"type": "object", "properties": {"dash-name": {"type": "string"}, "if": {"type": "integer"}},
                    "x-kubernetes-validations": [{"rule": "self.dash__dash__name == 'x' && self.__if__ == 1"}]}}}));
        let tree = compile(&s).unwrap();
        let good = json!({"metadata": {"name": "ok-1"}, "spec": {"dash-name": "x", "if": 1}});
        assert!(validate(&tree, &s, &good, None).is_empty());
        let bad = json!({"metadata": {"name": "nope"}, "spec": {"dash-name": "y", "if": 1}});
        let errs: Vec<String> = validate(&tree, &s, &bad, None)
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            errs,
            [
                "<nil>: Invalid value: bad name",
                "spec: Invalid value: failed rule: self.dash__dash__name == 'x' && self.__if__ == 1",
            ]
        );
    }

    #[test]
    fn transition_rules_need_an_old_value() {
        let rules = json!([{"rule": "self.name == oldSelf.name", "message": "Value is immutable"}]);
        let new = json!({"spec": {"name": "b"}});
        assert!(check(rules.clone(), new.clone(), None).is_empty());
        assert_eq!(
            check(
                rules.clone(),
                new.clone(),
                Some(json!({"spec": {"name": "a"}}))
            ),
            ["spec: Invalid value: Value is immutable"]
        );
        assert!(check(rules, new.clone(), Some(new)).is_empty());
    }

    #[test]
    fn optional_old_self_runs_on_create_too() {
        let rules = json!([{"rule": "oldSelf.hasValue() || self.name == 'first'", "optionalOldSelf": true}]);
        assert_eq!(
            check(rules.clone(), json!({"spec": {"name": "b"}}), None),
            ["spec: Invalid value: failed rule: oldSelf.hasValue() || self.name == 'first'"]
        );
        assert!(check(rules.clone(), json!({"spec": {"name": "first"}}), None).is_empty());
        assert!(check(
            rules,
            json!({"spec": {"name": "b"}}),
            Some(json!({"spec": {"name": "x"}}))
        )
        .is_empty());
    }

    #[test]
    fn map_list_items_correlate_by_key() {
        let old = json!({"spec": {"ports": [{"port": 80, "name": "http"}, {"port": 443, "name": "https"}]}});
        let new = json!({"spec": {"ports": [{"port": 443, "name": "tls"}, {"port": 80, "name": "http"}, {"port": 8080, "name": "x"}]}});
        assert_eq!(
            check(json!([]), new, Some(old)),
            ["spec.ports[0]: Invalid value: name is immutable"]
        );
    }

    #[test]
    fn unchanged_values_are_ratcheted() {
        let rules = json!([{"rule": "self.replicas <= self.maxReplicas"}]);
        let bad = json!({"spec": {"replicas": 5, "maxReplicas": 3}, "other": 1});
        // unchanged spec: accepted on update even though it fails
        assert!(check(
            rules.clone(),
            bad.clone(),
            Some(json!({"spec": {"replicas": 5, "maxReplicas": 3}, "other": 2}))
        )
        .is_empty());
        // changed spec: refused
        assert_eq!(
            check(
                rules,
                bad,
                Some(json!({"spec": {"replicas": 4, "maxReplicas": 3}}))
            )
            .len(),
            1
        );
        // list items of an atomic list ratchet with their nearest correlatable parent
        let tags = json!({"spec": {"tags": ["toolong"]}});
        assert!(check(json!([]), tags.clone(), Some(tags.clone())).is_empty());
        assert_eq!(
            check(
                json!([]),
                tags,
                Some(json!({"spec": {"tags": ["toolong", "x"]}}))
            ),
            ["spec.tags[0]: Invalid value: \"toolong\": failed rule: self.size() < 4"]
        );
    }

    #[test]
    fn runtime_errors_and_budgets() {
        let new = json!({"spec": {"replicas": 5}});
        assert_eq!(
            check(json!([{"rule": "self.maxReplicas > 1"}]), new.clone(), None),
            ["spec: Invalid value: \"object\": no such key: maxReplicas evaluating rule: self.maxReplicas > 1"]
        );
        assert_eq!(
            check(json!([{"rule": "self.replicas + 'a' == 1"}]), new.clone(), None),
            ["spec: Invalid value: \"object\": 'no such overload': call arguments did not match a supported operator, function or macro signature for rule: self.replicas + 'a' == 1"]
        );
        let heavy = "[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, a + b + c + d + e + f > 0))))))";
        let errs = check(json!([{"rule": heavy}, {"rule": "false"}]), new, None);
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("spec: Invalid value: \"object\": 'operation cancelled: actual cost limit exceeded': no further validation rules will be run due to call cost exceeds limit for rule: [1,2"));
    }
}
