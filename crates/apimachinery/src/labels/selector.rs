//! The [`Selector`] type (upstream `labels.Selector` / `internalSelector`) and its construction from a
//! label set (`SelectorFromSet`) and from a `metav1.LabelSelector` (`LabelSelectorAsSelector`).

use std::fmt;

use serde_json::{Map, Value};

use super::{write_comma_separated, Operator, Requirement};

/// A label selector: the AND of its requirements (sorted by key, as upstream keeps them), or the special
/// selector that matches nothing (upstream `labels.Nothing()`, what a nil `LabelSelector` converts to).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl Selector {
    /// Matches every set of labels (upstream `labels.Everything()`).
    pub fn everything() -> Selector {
        Selector::default()
    }

    /// Matches no set of labels (upstream `labels.Nothing()`).
    pub fn nothing() -> Selector {
        Selector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// The AND of `requirements`, sorted by key (stable, so equal keys keep their order).
    pub(super) fn from_requirements(mut requirements: Vec<Requirement>) -> Selector {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        Selector {
            requirements,
            nothing: false,
        }
    }

    /// True when the selector does not restrict anything (upstream `Empty()`); false for [`Self::nothing`].
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// True for [`Self::nothing`].
    pub fn is_nothing(&self) -> bool {
        self.nothing
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// Adds a requirement, keeping them sorted by key (upstream `Add`).
    pub fn with(mut self, requirement: Requirement) -> Selector {
        self.requirements.push(requirement);
        self.requirements.sort_by(|a, b| a.key.cmp(&b.key));
        self
    }

    /// Whether the labels (an object's `metadata.labels`) satisfy every requirement.
    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches(labels))
    }

    /// [`Self::matches`] on an object's `metadata.labels` (a missing map counts as empty).
    pub fn matches_object(&self, object: &Value) -> bool {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        let labels = object
            .pointer("/metadata/labels")
            .and_then(Value::as_object)
            .unwrap_or_else(|| EMPTY.get_or_init(Map::new));
        self.matches(labels)
    }

    /// Upstream `RequiresExactMatch`: the value a `=`, `==` or single-valued `in` requirement on `label`
    /// demands, if any (used to narrow lists by an indexed label).
    pub fn requires_exact_match(&self, label: &str) -> Option<&str> {
        let r = self.requirements.iter().find(|r| r.key == label)?;
        match (r.operator, r.values.as_slice()) {
            (Operator::Equals | Operator::DoubleEquals | Operator::In, [v]) => Some(v),
            _ => None,
        }
    }
}

impl fmt::Display for Selector {
    /// The canonical form: requirements joined by `,` (empty for everything and for nothing).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_comma_separated(f, &self.requirements)
    }
}

/// Upstream `SelectorFromSet`: `key=value` for every entry; an empty map selects everything. Non-string
/// values are compared as their JSON text. No validation (as upstream's `SelectorFromValidatedSet`).
pub fn selector_from_set(set: &Map<String, Value>) -> Selector {
    let requirements: Vec<Requirement> = set
        .iter()
        .map(|(k, v)| Requirement {
            key: k.clone(),
            operator: Operator::Equals,
            values: vec![v
                .as_str()
                .map(str::to_string)
                .unwrap_or_else(|| v.to_string())],
        })
        .collect();
    Selector::from_requirements(requirements)
}

/// Upstream `metav1.LabelSelectorAsSelector` on a `LabelSelector` in JSON form:
/// `null` (a nil selector) matches nothing; `{}` (no `matchLabels`, no `matchExpressions`) matches
/// everything; otherwise every `matchLabels` entry is `key=value` and every `matchExpressions` entry uses
/// `In`, `NotIn`, `Exists` or `DoesNotExist`.
pub fn selector_from_label_selector(v: &Value) -> Result<Selector, String> {
    let obj = match v {
        Value::Null => return Ok(Selector::nothing()),
        Value::Object(o) => o,
        other => return Err(format!("label selector must be an object, got {other}")),
    };
    let match_labels = match obj.get("matchLabels") {
        None | Some(Value::Null) => None,
        Some(Value::Object(m)) => Some(m),
        Some(_) => return Err("matchLabels must be an object".to_string()),
    };
    let expressions = match obj.get("matchExpressions") {
        None | Some(Value::Null) => &[][..],
        Some(Value::Array(a)) => a.as_slice(),
        Some(_) => return Err("matchExpressions must be a list".to_string()),
    };
    if match_labels.is_none_or(|m| m.is_empty()) && expressions.is_empty() {
        return Ok(Selector::everything());
    }
    let mut selector = Selector::everything();
    for (k, v) in match_labels.into_iter().flatten() {
        let value = v
            .as_str()
            .ok_or_else(|| format!("matchLabels[{k}] must be a string"))?;
        selector = selector.with(Requirement::new(
            k,
            Operator::Equals,
            vec![value.to_string()],
        )?);
    }
    for expr in expressions {
        let key = expr.get("key").and_then(Value::as_str).unwrap_or_default();
        let op_name = expr
            .get("operator")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let operator = match op_name {
            "In" => Operator::In,
            "NotIn" => Operator::NotIn,
            "Exists" => Operator::Exists,
            "DoesNotExist" => Operator::DoesNotExist,
            other => return Err(format!("{other:?} is not a valid label selector operator")),
        };
        let mut values = Vec::new();
        for value in expr
            .get("values")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let s = value
                .as_str()
                .ok_or_else(|| format!("values of {key:?} must be strings"))?;
            values.push(s.to_string());
        }
        selector = selector.with(Requirement::new(key, operator, values)?);
    }
    Ok(selector)
}

/// [`selector_from_label_selector`] for a field that may be absent: absent is a nil selector (nothing).
pub fn selector_from_optional_label_selector(v: Option<&Value>) -> Result<Selector, String> {
    selector_from_label_selector(v.unwrap_or(&Value::Null))
}
