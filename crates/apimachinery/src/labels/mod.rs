//! Label selectors (upstream `k8s.io/apimachinery/pkg/labels`, plus `LabelSelectorAsSelector` from
//! `pkg/apis/meta/v1/helpers.go`): the `?labelSelector=` query syntax, its canonical string form, and the
//! conversion of a `metav1.LabelSelector` (`matchLabels` / `matchExpressions`) into the same [`Selector`].
//!
//! The grammar, the lexer's quirks (`in`/`notin` are values inside `(...)`, `!=` vs `!`), validation of keys
//! and values, and the error wording follow upstream, so `kubectl get -l` reports the same errors.
//!
//! Nil versus empty: upstream distinguishes a *nil* `LabelSelector` (matches nothing, [`Selector::nothing`])
//! from an *empty* one (`{}`, matches everything, [`Selector::everything`]). [`selector_from_label_selector`]
//! maps JSON `null` to nothing and `{}` to everything; [`selector_from_optional_label_selector`] does the
//! same for a field that may be absent (absent = nil = nothing). Callers with other conventions (a Service's
//! `spec.selector` map, where empty means "no selector") use [`selector_from_set`] and decide themselves.
//!
//! Layout: this file holds [`Operator`] and [`Requirement`], whose key and value checks are
//! [`crate::validation::names`] (upstream's `util/validation`); `selector` holds [`Selector`] and its
//! constructors; `parser` the lexer and parser behind [`parse`].

mod parser;
mod selector;
#[cfg(test)]
mod tests;

use std::fmt;

use serde_json::{Map, Value};

use crate::validation::field::{FieldError, FieldPath};
use crate::validation::names::{is_label_value, is_qualified_name};

pub use parser::parse;
pub use selector::{
    selector_from_label_selector, selector_from_optional_label_selector, selector_from_set,
    Selector,
};

/// A selector operator (upstream `k8s.io/apimachinery/pkg/selection.Operator`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operator {
    Equals,
    DoubleEquals,
    NotEquals,
    In,
    NotIn,
    Exists,
    DoesNotExist,
    GreaterThan,
    LessThan,
}

impl Operator {
    /// Upstream's string value of the operator (`=`, `==`, `!=`, `in`, `notin`, `exists`, `!`, `gt`, `lt`).
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => "in",
            Operator::NotIn => "notin",
            Operator::Exists => "exists",
            Operator::DoesNotExist => "!",
            Operator::GreaterThan => "gt",
            Operator::LessThan => "lt",
        }
    }
}

/// One requirement of a selector: a key, an operator and (for most operators) values.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    operator: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// Upstream `NewRequirement`: validates the key (a qualified name), the number of values for the
    /// operator, integer values for `Gt`/`Lt`, and every value (a label value). Errors carry upstream's
    /// field paths (`key`, `values[0]`, `values[0][<key>]`) and wording.
    pub fn new(key: &str, operator: Operator, values: Vec<String>) -> Result<Requirement, String> {
        let mut errs: Vec<FieldError> = Vec::new();
        if let Some(e) = validate_label_key(key, &FieldPath::root("key")) {
            errs.push(e);
        }
        let vpath = FieldPath::root("values");
        let n = values.len();
        let count_problem = match operator {
            Operator::In | Operator::NotIn if n == 0 => {
                "for 'in', 'notin' operators, values set can't be empty"
            }
            Operator::Equals | Operator::DoubleEquals | Operator::NotEquals if n != 1 => {
                "exact-match compatibility requires one single value"
            }
            Operator::Exists | Operator::DoesNotExist if n != 0 => {
                "values set must be empty for exists and does not exist"
            }
            Operator::GreaterThan | Operator::LessThan if n != 1 => {
                "for 'Gt', 'Lt' operators, exactly one value is required"
            }
            _ => "",
        };
        if !count_problem.is_empty() {
            errs.push(FieldError::invalid(&vpath, values.clone(), count_problem));
        }
        if matches!(operator, Operator::GreaterThan | Operator::LessThan) {
            for (i, v) in values
                .iter()
                .enumerate()
                .filter(|(_, v)| v.parse::<i64>().is_err())
            {
                let detail = "for 'Gt', 'Lt' operators, the value must be an integer";
                errs.push(FieldError::invalid(&vpath.index(i), v.as_str(), detail));
            }
        }
        for (i, v) in values.iter().enumerate() {
            let problems = is_label_value(v);
            if !problems.is_empty() {
                errs.push(FieldError::invalid(
                    &vpath.index(i).key(key),
                    v.as_str(),
                    problems.join("; "),
                ));
            }
        }
        if !errs.is_empty() {
            return Err(aggregate(&errs));
        }
        Ok(Requirement {
            key: key.to_string(),
            operator,
            values,
        })
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn operator(&self) -> Operator {
        self.operator
    }

    pub fn values(&self) -> &[String] {
        &self.values
    }

    /// Upstream `Requirement.Matches`: `NotIn`/`!=` match when the key is absent; `Gt`/`Lt` need the label
    /// to be present and an integer.
    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        let got = label(labels, &self.key);
        let has_value = |v: &str| self.values.iter().any(|x| x == v);
        match self.operator {
            Operator::In | Operator::Equals | Operator::DoubleEquals => got.is_some_and(has_value),
            Operator::NotIn | Operator::NotEquals => !got.is_some_and(has_value),
            Operator::Exists => got.is_some(),
            Operator::DoesNotExist => got.is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(Ok(have)) = got.map(str::parse::<i64>) else {
                    return false;
                };
                let [want] = self.values.as_slice() else {
                    return false;
                };
                let Ok(want) = want.parse::<i64>() else {
                    return false;
                };
                if self.operator == Operator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    /// Upstream `Requirement.String()`: `!key`, `key`, `key=v`, `key in (a,b)` with sorted values.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.operator == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let op = match self.operator {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::In => " in ",
            Operator::NotIn => " notin ",
            Operator::GreaterThan => ">",
            Operator::LessThan => "<",
        };
        f.write_str(op)?;
        let set = matches!(self.operator, Operator::In | Operator::NotIn);
        if set {
            f.write_str("(")?;
        }
        let mut values: Vec<&str> = self.values.iter().map(String::as_str).collect();
        values.sort_unstable();
        f.write_str(&values.join(","))?;
        if set {
            f.write_str(")")?;
        }
        Ok(())
    }
}

fn label<'a>(labels: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    labels.get(key).and_then(Value::as_str)
}

/// Upstream's `ErrorList.ToAggregate().Error()`: one message alone, several as `[a, b]`.
fn aggregate(errs: &[FieldError]) -> String {
    let mut msgs: Vec<String> = Vec::new();
    for e in errs {
        let m = e.to_string();
        if !msgs.contains(&m) {
            msgs.push(m);
        }
    }
    if msgs.len() == 1 {
        msgs.remove(0)
    } else {
        format!("[{}]", msgs.join(", "))
    }
}

/// Writes `items` joined by `,`: the string form of a label or field selector (upstream's
/// `internalSelector.String()` and `andTerm.String()`).
pub(crate) fn write_comma_separated<T: fmt::Display>(
    f: &mut fmt::Formatter<'_>,
    items: &[T],
) -> fmt::Result {
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            f.write_str(",")?;
        }
        write!(f, "{item}")?;
    }
    Ok(())
}

/// Checks a label key (upstream `validation.IsQualifiedName`), as one field error at `path`.
fn validate_label_key(key: &str, path: &FieldPath) -> Option<FieldError> {
    let problems = is_qualified_name(key);
    (!problems.is_empty()).then(|| FieldError::invalid(path, key, problems.join("; ")))
}
