//! Label selectors over pod and namespace labels (upstream `metav1.LabelSelectorAsSelector` and
//! `labels.Selector`), compiled once per pod so that matching in the hot path allocates nothing.
//! Differs from `apimachinery::labels`: that one matches JSON label maps, this one the typed
//! `BTreeMap<String, String>` the scheduler holds.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
}

/// A compiled selector: all requirements must hold. `Nothing` matches no labels (upstream
/// `labels.Nothing()`, e.g. a nil selector in an affinity term).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Selector {
    Nothing,
    Requirements(Vec<(String, OpBox)>),
}

/// Requirement operator (boxed name kept private).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OpBox(Op);

pub type Labels = BTreeMap<String, String>;

impl Selector {
    /// Matches everything (an empty `LabelSelector`).
    pub fn everything() -> Selector {
        Selector::Requirements(Vec::new())
    }

    /// Upstream `LabelSelectorAsSelector`: nil -> Nothing, empty -> Everything. An invalid
    /// operator or an In/NotIn without values is an error.
    pub fn from_label_selector(sel: Option<&LabelSelector>) -> Result<Selector, String> {
        let Some(sel) = sel else {
            return Ok(Selector::Nothing);
        };
        let mut reqs = Vec::new();
        for (k, v) in sel.match_labels.iter().flatten() {
            reqs.push((k.clone(), OpBox(Op::In(vec![v.clone()]))));
        }
        for e in sel.match_expressions.iter().flatten() {
            let values = e.values.clone().unwrap_or_default();
            let op = match e.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(format!(
                        "{}: for 'in', 'notin' operators, values set can't be empty",
                        e.key
                    ))
                }
                "In" => Op::In(values),
                "NotIn" => Op::NotIn(values),
                "Exists" | "DoesNotExist" if !values.is_empty() => {
                    return Err(format!(
                        "{}: values set must be empty for exists and does not exist",
                        e.key
                    ))
                }
                "Exists" => Op::Exists,
                "DoesNotExist" => Op::DoesNotExist,
                other => return Err(format!("{other:?} is not a valid label selector operator")),
            };
            reqs.push((e.key.clone(), OpBox(op)));
        }
        Ok(Selector::Requirements(reqs))
    }

    /// Like [`Selector::from_label_selector`], but an invalid selector matches nothing.
    pub fn lenient(sel: Option<&LabelSelector>) -> Selector {
        Selector::from_label_selector(sel).unwrap_or(Selector::Nothing)
    }

    /// From `matchLabels`-style pairs.
    pub fn from_set(set: &Labels) -> Selector {
        Selector::Requirements(
            set.iter()
                .map(|(k, v)| (k.clone(), OpBox(Op::In(vec![v.clone()]))))
                .collect(),
        )
    }

    pub fn is_empty(&self) -> bool {
        matches!(self, Selector::Requirements(r) if r.is_empty())
    }

    pub fn matches(&self, labels: Option<&Labels>) -> bool {
        let reqs = match self {
            Selector::Nothing => return false,
            Selector::Requirements(r) => r,
        };
        reqs.iter().all(|(key, OpBox(op))| {
            let v = labels.and_then(|l| l.get(key));
            match op {
                Op::In(vals) => v.is_some_and(|v| vals.contains(v)),
                Op::NotIn(vals) => !v.is_some_and(|v| vals.contains(v)),
                Op::Exists => v.is_some(),
                Op::DoesNotExist => v.is_none(),
            }
        })
    }

    /// ANDs the requirements of `other` (Nothing absorbs).
    pub fn and(&mut self, other: &Selector) {
        match (&mut *self, other) {
            (Selector::Nothing, _) => {}
            (_, Selector::Nothing) => *self = Selector::Nothing,
            (Selector::Requirements(a), Selector::Requirements(b)) => a.extend(b.iter().cloned()),
        }
    }

    /// Adds `key in (value)` (for matchLabelKeys); Nothing stays Nothing.
    pub fn and_equals(&mut self, key: &str, value: &str) {
        if let Selector::Requirements(r) = self {
            r.push((key.to_string(), OpBox(Op::In(vec![value.to_string()]))));
        }
    }

    /// Adds `key notin (value)` (for mismatchLabelKeys); Nothing stays Nothing.
    pub fn and_not_equals(&mut self, key: &str, value: &str) {
        if let Selector::Requirements(r) = self {
            r.push((key.to_string(), OpBox(Op::NotIn(vec![value.to_string()]))));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sel(v: serde_json::Value) -> Result<Selector, String> {
        let s: LabelSelector = serde_json::from_value(v).unwrap();
        Selector::from_label_selector(Some(&s))
    }

    fn labels(v: serde_json::Value) -> Labels {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn matching() {
        let l = labels(json!({"app": "web", "tier": "fe"}));
        let cases = [
            (json!({}), true),
            (json!({"matchLabels": {"app": "web"}}), true),
            (json!({"matchLabels": {"app": "db"}}), false),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["db", "web"]}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "app", "operator": "NotIn", "values": ["web"]}]}),
                false,
            ),
            (
                json!({"matchExpressions": [{"key": "x", "operator": "NotIn", "values": ["web"]}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "Exists"}]}),
                true,
            ),
            (
                json!({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}),
                false,
            ),
            (
                json!({"matchLabels": {"app": "web"}, "matchExpressions": [{"key": "x", "operator": "Exists"}]}),
                false,
            ),
        ];
        for (s, want) in cases {
            assert_eq!(sel(s.clone()).unwrap().matches(Some(&l)), want, "{s}");
        }
        assert!(!Selector::Nothing.matches(Some(&l)));
        assert!(Selector::from_label_selector(None).unwrap() == Selector::Nothing);
        assert!(sel(json!({"matchExpressions": [{"key": "a", "operator": "In"}]})).is_err());
        assert!(sel(json!({"matchExpressions": [{"key": "a", "operator": "Bad"}]})).is_err());
        assert!(sel(json!({})).unwrap().matches(None));
    }
}
