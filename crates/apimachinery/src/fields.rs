//! Field selectors (upstream `k8s.io/apimachinery/pkg/fields`): the `?fieldSelector=` syntax
//! `field=value`, `field==value`, `field!=value`, comma-separated (AND), with values escaped as upstream
//! does (`\,`, `\=`, `\\`).
//!
//! As upstream, the field name is everything before the first operator and is not trimmed or validated
//! here: which fields a resource supports is the server's business ([`FieldSelector::requirements`] lists
//! them so it can reject unsupported ones with upstream's `field label not supported` error). A field the
//! object does not have compares as the empty string, as upstream's `fields.Set` does.

use std::fmt;

use crate::labels::write_comma_separated;

/// The operator of one field requirement. `==` parses to [`FieldOperator::Equals`], as upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FieldOperator {
    Equals,
    NotEquals,
}

impl FieldOperator {
    /// Upstream's `selection.Operator` string: `=` or `!=`.
    pub fn as_str(self) -> &'static str {
        match self {
            FieldOperator::Equals => "=",
            FieldOperator::NotEquals => "!=",
        }
    }
}

/// One term of a field selector; `value` is unescaped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    pub operator: FieldOperator,
    pub value: String,
}

impl FieldRequirement {
    /// Whether `actual` (the field's value; `""` when absent) satisfies the term.
    pub fn matches(&self, actual: &str) -> bool {
        match self.operator {
            FieldOperator::Equals => actual == self.value,
            FieldOperator::NotEquals => actual != self.value,
        }
    }
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}{}",
            self.field,
            self.operator.as_str(),
            escape_value(&self.value)
        )
    }
}

/// A parsed field selector: the AND of its requirements. The empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// Matches everything (upstream `fields.Everything()`).
    pub fn everything() -> FieldSelector {
        FieldSelector::default()
    }

    /// Upstream `Empty()`: no requirement at all.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// Whether every requirement holds; `get` returns a field's value, `None` (compared as `""`) when the
    /// object has no such field.
    pub fn matches(&self, get: impl Fn(&str) -> Option<String>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches(get(&r.field).as_deref().unwrap_or("")))
    }

    /// The selector with its field names rewritten by `rename` (upstream's field label conversion
    /// functions, from a served version's names to those of the stored object).
    pub fn map_fields(mut self, rename: impl Fn(&str) -> Option<&'static str>) -> FieldSelector {
        for r in &mut self.requirements {
            if let Some(to) = rename(&r.field) {
                r.field = to.to_string();
            }
        }
        self
    }

    /// Upstream `RequiresExactMatch`: the value an `=` term on `field` demands, if there is one.
    pub fn requires_exact_match(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.field == field && r.operator == FieldOperator::Equals)
            .map(|r| r.value.as_str())
    }
}

impl fmt::Display for FieldSelector {
    /// Upstream's `String()`: the terms joined by `,`, values escaped.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_comma_separated(f, &self.requirements)
    }
}

/// Upstream `fields.ParseSelector`: splits on unescaped commas, sorts the terms (as upstream, for a
/// deterministic form), skips empty ones, splits each at the first `!=`, `==` or `=` and unescapes the value.
pub fn parse(selector: &str) -> Result<FieldSelector, String> {
    let mut parts = split_terms(selector);
    parts.sort_unstable();
    let mut requirements = Vec::new();
    for part in parts {
        if part.is_empty() {
            continue;
        }
        let Some((field, op, raw)) = split_term(part) else {
            return Err(format!(
                "invalid selector: '{selector}'; can't understand '{part}'"
            ));
        };
        requirements.push(FieldRequirement {
            field: field.to_string(),
            operator: op,
            value: unescape_value(raw)?,
        });
    }
    Ok(FieldSelector { requirements })
}

/// Upstream `fields.EscapeValue`: escapes `\`, `,` and `=` with a backslash.
pub fn escape_value(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Upstream `fields.UnescapeValue`: `\\`, `\,` and `\=` are the only escapes; an unescaped `,` or `=`, an
/// unknown escape and a trailing lone `\` are errors with upstream's wording.
pub fn unescape_value(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut in_slash = false;
    for c in s.chars() {
        if in_slash {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(format!(
                    "invalid field selector: invalid escape sequence: \\{c}"
                ));
            }
            out.push(c);
            in_slash = false;
            continue;
        }
        match c {
            '\\' => in_slash = true,
            // Upstream prints the rune with %v, i.e. as its code point.
            ',' | '=' => {
                return Err(format!(
                    "invalid field selector: unescaped character in value: {}",
                    c as u32
                ))
            }
            c => out.push(c),
        }
    }
    if in_slash {
        return Err("invalid field selector: invalid escape sequence: \\".to_string());
    }
    Ok(out)
}

/// Splits on commas not preceded by an escaping backslash.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, c) in s.char_indices() {
        if escaped {
            escaped = false;
        } else if c == '\\' {
            escaped = true;
        } else if c == ',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// The field, operator and raw (still escaped) value of one term, split at the first operator.
fn split_term(term: &str) -> Option<(&str, FieldOperator, &str)> {
    for (i, _) in term.char_indices() {
        let rest = &term[i..];
        for (tok, op) in [
            ("!=", FieldOperator::NotEquals),
            ("==", FieldOperator::Equals),
            ("=", FieldOperator::Equals),
        ] {
            if let Some(value) = rest.strip_prefix(tok) {
                return Some((&term[..i], op, value));
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn getter(fields: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = fields
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |f: &str| m.get(f).cloned()
    }

    #[test]
    fn parses_and_prints() {
        let cases = [
            ("", ""),
            ("metadata.name=foo", "metadata.name=foo"),
            ("metadata.name==foo", "metadata.name=foo"),
            ("spec.nodeName!=", "spec.nodeName!="),
            (
                "status.phase!=Running,metadata.name=a",
                "metadata.name=a,status.phase!=Running",
            ),
            ("a=b,", "a=b"),
            (",a=b,,", "a=b"),
            ("a=x\\,y\\=z\\\\", "a=x\\,y\\=z\\\\"),
        ];
        for (input, want) in cases {
            let sel = parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(sel.to_string(), want, "input {input:?}");
        }
        let sel = parse("a=x\\,y\\=z\\\\").unwrap_or_default();
        assert_eq!(sel.requirements()[0].value, "x,y=z\\");
        let sel = parse("spec.nodeName==node-1").unwrap_or_default();
        assert_eq!(
            sel.requirements(),
            [FieldRequirement {
                field: "spec.nodeName".into(),
                operator: FieldOperator::Equals,
                value: "node-1".into()
            }]
        );
        assert_eq!(sel.requires_exact_match("spec.nodeName"), Some("node-1"));
        assert_eq!(sel.requires_exact_match("metadata.name"), None);
        assert!(parse("").is_ok_and(|s| s.is_empty()));
        assert!(FieldSelector::everything().is_empty());
    }

    #[test]
    fn rejects_bad_selectors_with_upstream_messages() {
        let cases = [
            ("a", "invalid selector: 'a'; can't understand 'a'"),
            ("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"),
            (
                "a=b=c",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                "a=b\\",
                "invalid field selector: invalid escape sequence: \\",
            ),
            (
                "a=b\\x",
                "invalid field selector: invalid escape sequence: \\x",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(parse(input), Err(want.to_string()), "input {input:?}");
        }
    }

    #[test]
    fn matches_fields() {
        let pod = getter(&[
            ("metadata.name", "web-0"),
            ("spec.nodeName", "n1"),
            ("status.phase", "Running"),
        ]);
        let cases = [
            ("", true),
            ("metadata.name=web-0", true),
            ("metadata.name=web-1", false),
            ("metadata.name!=web-1", true),
            ("spec.nodeName=n1,status.phase=Running", true),
            ("spec.nodeName=n1,status.phase!=Running", false),
            // A field the object lacks compares as "".
            ("spec.schedulerName=", true),
            ("spec.schedulerName!=", false),
            ("spec.schedulerName=default", false),
        ];
        for (sel, want) in cases {
            let s = parse(sel).unwrap_or_else(|e| panic!("{sel:?}: {e}"));
            assert_eq!(s.matches(&pod), want, "selector {sel:?}");
        }
    }

    #[test]
    fn escape_round_trips() {
        for v in ["", "plain", "a,b", "a=b", "back\\slash", ",=\\"] {
            assert_eq!(unescape_value(&escape_value(v)).as_deref(), Ok(v));
        }
    }
}
