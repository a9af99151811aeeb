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

use std::fmt;

use serde_json::{Map, Value};

use crate::validation::field::{FieldError, FieldPath};

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

const BINARY_OPERATORS: &str = "in, notin, =, ==, !=, gt, lt";

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
            let problems = is_valid_label_value(v);
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
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

/// Upstream `SelectorFromSet`: `key=value` for every entry; an empty map selects everything. Non-string
/// values are compared as their JSON text. No validation (as upstream's `SelectorFromValidatedSet`).
pub fn selector_from_set(set: &Map<String, Value>) -> Selector {
    let mut requirements: Vec<Requirement> = set
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
    requirements.sort_by(|a, b| a.key.cmp(&b.key));
    Selector {
        requirements,
        nothing: false,
    }
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

// ---- validation of keys and values (upstream pkg/util/validation) ----

const QUALIFIED_NAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QUALIFIED_NAME_ERR: &str =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_ERR: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str =
    "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_ERR: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";

fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    let ex: Vec<String> = examples.iter().map(|e| format!("'{e}', ")).collect();
    format!(
        "{msg} (e.g. {}regex used for validation is '{fmt}')",
        ex.join(" or ")
    )
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

fn is_qualified_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    let (Some(first), Some(last)) = (b.first(), b.last()) else {
        return false;
    };
    first.is_ascii_alphanumeric()
        && last.is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_dns1123_subdomain_format(s: &str) -> bool {
    !s.is_empty()
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            matches!((b.first(), b.last()), (Some(f), Some(l))
                if (f.is_ascii_lowercase() || f.is_ascii_digit()) && (l.is_ascii_lowercase() || l.is_ascii_digit()))
                && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Upstream `validation.IsDNS1123Subdomain`: the problems found (empty when valid).
fn is_dns1123_subdomain(s: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if s.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !is_dns1123_subdomain_format(s) {
        errs.push(regex_error(
            DNS1123_SUBDOMAIN_ERR,
            DNS1123_SUBDOMAIN_FMT,
            &["example.com"],
        ));
    }
    errs
}

/// Upstream `validation.IsQualifiedName` (label and annotation keys): an optional DNS-subdomain prefix and
/// `/`, then a name of at most 63 characters. Returns the problems found (empty when valid).
fn is_qualified_name(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = value.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(
                    is_dns1123_subdomain(prefix)
                        .into_iter()
                        .map(|m| format!("prefix part {m}")),
                );
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QUALIFIED_NAME_ERR, QUALIFIED_NAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !is_qualified_name_part(name) {
        errs.push(format!(
            "name part {}",
            regex_error(
                QUALIFIED_NAME_ERR,
                QUALIFIED_NAME_FMT,
                &["MyName", "my.name", "123-abc"]
            )
        ));
    }
    errs
}

/// Upstream `validation.IsValidLabelValue`: empty, or at most 63 characters of the qualified-name
/// alphabet. Returns the problems found (empty when valid).
fn is_valid_label_value(value: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if value.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !value.is_empty() && !is_qualified_name_part(value) {
        errs.push(regex_error(
            LABEL_VALUE_ERR,
            &format!("({QUALIFIED_NAME_FMT})?"),
            &["MyValue", "my_value", "12345"],
        ));
    }
    errs
}

fn validate_label_key(key: &str, path: &FieldPath) -> Option<FieldError> {
    let problems = is_qualified_name(key);
    (!problems.is_empty()).then(|| FieldError::invalid(path, key, problems.join("; ")))
}

// ---- the parser (upstream Lexer / Parser in selector.go) ----

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Token {
    Error,
    EndOfString,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &str) -> Option<Token> {
    Some(match s {
        ")" => Token::ClosedPar,
        "," => Token::Comma,
        "!" => Token::DoesNotExist,
        "==" => Token::DoubleEquals,
        "=" => Token::Equals,
        ">" => Token::GreaterThan,
        "in" => Token::In,
        "<" => Token::LessThan,
        "!=" => Token::NotEquals,
        "notin" => Token::NotIn,
        "(" => Token::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(c: u8) -> bool {
    matches!(c, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Splits the input into tokens, ending with `EndOfString`.
fn lex(s: &str) -> Vec<(Token, String)> {
    let b = s.as_bytes();
    let mut pos = 0;
    let mut out = Vec::new();
    loop {
        while pos < b.len() && is_whitespace(b[pos]) {
            pos += 1;
        }
        // Upstream's lexer reads a NUL byte as the end of the input.
        if pos >= b.len() || b[pos] == 0 {
            out.push((Token::EndOfString, String::new()));
            return out;
        }
        let start = pos;
        if is_special(b[pos]) {
            // Longest run of special symbols that is still a token: `!=`, `==`, else one symbol.
            pos += 1;
            if pos < b.len() && is_special(b[pos]) && keyword(&s[start..pos + 1]).is_some() {
                pos += 1;
            }
            let lit = &s[start..pos];
            match keyword(lit) {
                Some(t) => out.push((t, lit.to_string())),
                None => out.push((
                    Token::Error,
                    format!("error expected: keyword found '{lit}'"),
                )),
            }
        } else {
            while pos < b.len() && b[pos] != 0 && !is_special(b[pos]) && !is_whitespace(b[pos]) {
                pos += 1;
            }
            let lit = &s[start..pos];
            let tok = match keyword(lit) {
                Some(t @ (Token::In | Token::NotIn)) => t,
                _ => Token::Identifier,
            };
            out.push((tok, lit.to_string()));
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Context {
    KeyAndOperator,
    Values,
}

struct Parser {
    items: Vec<(Token, String)>,
    pos: usize,
}

impl Parser {
    fn peek(&self, ctx: Context) -> (Token, String) {
        let (tok, lit) = self
            .items
            .get(self.pos)
            .cloned()
            .unwrap_or((Token::EndOfString, String::new()));
        match (ctx, tok) {
            (Context::Values, Token::In | Token::NotIn) => (Token::Identifier, lit),
            _ => (tok, lit),
        }
    }

    fn next(&mut self, ctx: Context) -> (Token, String) {
        let item = self.peek(ctx);
        self.pos = (self.pos + 1).min(self.items.len());
        item
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, String> {
        let mut reqs = Vec::new();
        loop {
            let (tok, lit) = self.peek(Context::Values);
            match tok {
                Token::Identifier | Token::DoesNotExist => {
                    let r = self
                        .requirement()
                        .map_err(|e| format!("unable to parse requirement: {e}"))?;
                    reqs.push(r);
                    let (t, l) = self.next(Context::Values);
                    match t {
                        Token::EndOfString => return Ok(reqs),
                        Token::Comma => {
                            let (t2, l2) = self.peek(Context::Values);
                            if t2 != Token::Identifier && t2 != Token::DoesNotExist {
                                return Err(format!(
                                    "found '{l2}', expected: identifier after ','"
                                ));
                            }
                        }
                        _ => return Err(format!("found '{l}', expected: ',' or 'end of string'")),
                    }
                }
                Token::EndOfString => return Ok(reqs),
                _ => {
                    return Err(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    ))
                }
            }
        }
    }

    fn requirement(&mut self) -> Result<Requirement, String> {
        let (key, op) = self.key_and_inferred_operator()?;
        if let Some(op @ (Operator::Exists | Operator::DoesNotExist)) = op {
            return Requirement::new(&key, op, Vec::new());
        }
        let op = self.operator()?;
        let values = match op {
            Operator::In | Operator::NotIn => self.set_values()?,
            _ => self.exact_value()?,
        };
        let mut values: Vec<String> = values.into_iter().collect();
        values.sort();
        values.dedup();
        Requirement::new(&key, op, values)
    }

    fn key_and_inferred_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let mut op = None;
        let (mut tok, mut lit) = self.next(Context::Values);
        if tok == Token::DoesNotExist {
            op = Some(Operator::DoesNotExist);
            (tok, lit) = self.next(Context::Values);
        }
        if tok != Token::Identifier {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        // Upstream validates with a nil field path here, which prints as `<nil>`.
        if let Some(e) = validate_label_key(&lit, &FieldPath::root("<nil>")) {
            return Err(e.to_string());
        }
        let (t, _) = self.peek(Context::Values);
        if (t == Token::EndOfString || t == Token::Comma) && op.is_none() {
            op = Some(Operator::Exists);
        }
        Ok((lit, op))
    }

    fn operator(&mut self) -> Result<Operator, String> {
        let (tok, lit) = self.next(Context::KeyAndOperator);
        Ok(match tok {
            Token::In => Operator::In,
            Token::Equals => Operator::Equals,
            Token::DoubleEquals => Operator::DoubleEquals,
            Token::GreaterThan => Operator::GreaterThan,
            Token::LessThan => Operator::LessThan,
            Token::NotIn => Operator::NotIn,
            Token::NotEquals => Operator::NotEquals,
            _ => return Err(format!("found '{lit}', expected: {BINARY_OPERATORS}")),
        })
    }

    /// `(a,b,c)`; empty members are the empty string.
    fn set_values(&mut self) -> Result<Vec<String>, String> {
        let (tok, lit) = self.next(Context::Values);
        if tok != Token::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (tok, lit) = self.peek(Context::Values);
        match tok {
            Token::Identifier | Token::Comma => {
                let s = self.identifiers()?;
                if self.next(Context::Values).0 != Token::ClosedPar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(s)
            }
            Token::ClosedPar => {
                self.next(Context::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    fn identifiers(&mut self) -> Result<Vec<String>, String> {
        let mut s: Vec<String> = Vec::new();
        loop {
            let (tok, lit) = self.next(Context::Values);
            match tok {
                Token::Identifier => {
                    s.push(lit);
                    let (t2, l2) = self.peek(Context::Values);
                    match t2 {
                        Token::Comma => continue,
                        Token::ClosedPar => return Ok(s),
                        _ => return Err(format!("found '{l2}', expected: ',' or ')'")),
                    }
                }
                Token::Comma => {
                    if s.is_empty() {
                        s.push(String::new());
                    }
                    match self.peek(Context::Values).0 {
                        Token::ClosedPar => {
                            s.push(String::new());
                            return Ok(s);
                        }
                        Token::Comma => {
                            self.next(Context::Values);
                            s.push(String::new());
                        }
                        _ => {}
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn exact_value(&mut self) -> Result<Vec<String>, String> {
        let (tok, _) = self.peek(Context::Values);
        if tok == Token::EndOfString || tok == Token::Comma {
            return Ok(vec![String::new()]);
        }
        let (tok, lit) = self.next(Context::Values);
        if tok == Token::Identifier {
            Ok(vec![lit])
        } else {
            Err(format!("found '{lit}', expected: identifier"))
        }
    }
}

/// Upstream `labels.Parse`: parses the selector syntax
/// `[!]key [in|notin (v1,v2) | =v | ==v | !=v | >n | <n]`, comma-separated (AND), whitespace tolerant.
/// The empty string selects everything. Requirements come back sorted by key.
pub fn parse(s: &str) -> Result<Selector, String> {
    let mut p = Parser {
        items: lex(s),
        pos: 0,
    };
    let mut requirements = p.parse()?;
    requirements.sort_by(|a, b| a.key.cmp(&b.key));
    Ok(Selector {
        requirements,
        nothing: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn parses_to_canonical_string() {
        let cases = [
            ("", ""),
            ("x=a", "x=a"),
            ("x==a", "x==a"),
            ("x!=a", "x!=a"),
            ("x", "x"),
            ("!x", "!x"),
            ("x>1", "x>1"),
            ("  x  in  ( b , a )  ", "x in (a,b)"),
            ("x notin (a)", "x notin (a)"),
            ("x in (a,a,b)", "x in (a,b)"),
            ("x=", "x="),
            ("x=,y", "x=,y"),
            ("x in ()", "x in ()"),
            ("x in (,a)", "x in (,a)"),
            ("x in (a,)", "x in (,a)"),
            ("x in (in,notin)", "x in (in,notin)"),
            ("z=1,a=2", "a=2,z=1"),
            ("x=a,y!=b,z in (h,i,j),!w", "!w,x=a,y!=b,z in (h,i,j)"),
            ("example.com/app=web", "example.com/app=web"),
            ("a.b-c_d=E.f-G_h", "a.b-c_d=E.f-G_h"),
            ("x\t=\na", "x=a"),
        ];
        for (input, want) in cases {
            let sel = parse(input).unwrap_or_else(|e| panic!("{input:?}: {e}"));
            assert_eq!(sel.to_string(), want, "input {input:?}");
            // The canonical form parses back to the same selector.
            assert_eq!(parse(want).map(|s| s.to_string()), Ok(want.to_string()));
        }
    }

    #[test]
    fn rejects_bad_syntax_with_upstream_messages() {
        let name_part = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
        let cases: Vec<(&str, String)> = vec![
            ("x,", "found '', expected: identifier after ','".into()),
            (",x", "found ',', expected: !, identifier, or 'end of string'".into()),
            ("x in a", "unable to parse requirement: found 'a' expected: '('".into()),
            ("x in (a", "unable to parse requirement: found '', expected: ',' or ')'".into()),
            ("x in (a b)", "unable to parse requirement: found 'b', expected: ',' or ')'".into()),
            ("x in", "unable to parse requirement: found '' expected: '('".into()),
            ("x y", "unable to parse requirement: found 'y', expected: in, notin, =, ==, !=, gt, lt".into()),
            ("x=(a)", "unable to parse requirement: found '(', expected: identifier".into()),
            ("!x=a", "found '=', expected: ',' or 'end of string'".into()),
            ("x=a b", "found 'b', expected: ',' or 'end of string'".into()),
            ("=a", "found '=', expected: !, identifier, or 'end of string'".into()),
            (
                "x>a",
                "unable to parse requirement: values[0]: Invalid value: \"a\": for 'Gt', 'Lt' operators, the value must be an integer".into(),
            ),
            ("-x=a", format!("unable to parse requirement: <nil>: Invalid value: \"-x\": {name_part}")),
            (
                "x=a$",
                "unable to parse requirement: values[0][x]: Invalid value: \"a$\": a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".into(),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                parse(input).map(|s| s.to_string()),
                Err(want),
                "input {input:?}"
            );
        }
        let long = "a".repeat(64);
        let err = parse(&long).err().unwrap_or_default();
        assert!(
            err.contains("name part must be no more than 63 characters"),
            "{err}"
        );
        let err = parse("a/b/c").err().unwrap_or_default();
        assert!(err.contains("a qualified name must consist of"), "{err}");
        let err = parse("Example.com/a").err().unwrap_or_default();
        assert!(
            err.contains("prefix part a lowercase RFC 1123 subdomain"),
            "{err}"
        );
        let err = parse("/a").err().unwrap_or_default();
        assert!(err.contains("prefix part must be non-empty"), "{err}");
        let err = parse(&format!("x={}", "v".repeat(64)))
            .err()
            .unwrap_or_default();
        assert!(err.contains("must be no more than 63 characters"), "{err}");
    }

    #[test]
    fn matches_labels() {
        let l = labels(json!({"x": "a", "y": "b", "n": "5"}));
        let cases = [
            ("", true),
            ("x=a", true),
            ("x==a", true),
            ("x=b", false),
            ("x!=b", true),
            ("x!=a", false),
            ("z!=b", true),
            ("x in (a,c)", true),
            ("x in (c)", false),
            ("z in (a)", false),
            ("x notin (a)", false),
            ("x notin (c)", true),
            ("z notin (a)", true),
            ("x", true),
            ("z", false),
            ("!z", true),
            ("!x", false),
            ("n>4", true),
            ("n>5", false),
            ("n<6", true),
            ("n<5", false),
            ("x>1", false),
            ("z>1", false),
            ("z<1", false),
            ("x=a,y=b", true),
            ("x=a,y=c", false),
            ("x=a,!z,n>1", true),
        ];
        for (sel, want) in cases {
            let s = parse(sel).unwrap_or_else(|e| panic!("{sel:?}: {e}"));
            assert_eq!(s.matches(&l), want, "selector {sel:?}");
        }
        assert!(parse("!x").is_ok_and(|s| s.matches(&Map::new())));
        assert!(parse("x").is_ok_and(|s| !s.matches(&Map::new())));
    }

    #[test]
    fn matches_object_metadata_labels() {
        let pod = json!({"metadata": {"name": "p", "labels": {"app": "web"}}});
        let bare = json!({"metadata": {"name": "q"}});
        let sel = parse("app=web").unwrap_or_default();
        assert!(sel.matches_object(&pod));
        assert!(!sel.matches_object(&bare));
        assert!(parse("!app").is_ok_and(|s| s.matches_object(&bare)));
        assert!(Selector::everything().matches_object(&bare));
        assert!(!Selector::nothing().matches_object(&pod));
    }

    #[test]
    fn everything_nothing_and_exact_match() {
        assert!(Selector::everything().is_empty());
        assert!(!Selector::nothing().is_empty());
        assert!(Selector::nothing().is_nothing());
        assert!(!Selector::nothing().matches(&Map::new()));
        assert!(parse("").is_ok_and(|s| s.is_empty()));
        assert!(parse("a").is_ok_and(|s| !s.is_empty()));
        let s = parse("a=1,b in (2),c in (3,4),d!=5").unwrap_or_default();
        assert_eq!(s.requires_exact_match("a"), Some("1"));
        assert_eq!(s.requires_exact_match("b"), Some("2"));
        assert_eq!(s.requires_exact_match("c"), None);
        assert_eq!(s.requires_exact_match("d"), None);
        assert_eq!(s.requires_exact_match("e"), None);
        assert_eq!(s.requirements().len(), 4);
        assert_eq!(s.requirements()[2].operator(), Operator::In);
        assert_eq!(s.requirements()[2].values(), ["3", "4"]);
    }

    #[test]
    fn label_selector_conversion() {
        let ok = [
            (json!({}), ""),
            (json!({"matchLabels": {}, "matchExpressions": []}), ""),
            (json!({"matchLabels": {"b": "2", "a": "1"}}), "a=1,b=2"),
            (
                json!({"matchLabels": {"app": "web"},
                       "matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe", "be"]},
                                            {"key": "env", "operator": "NotIn", "values": ["prod"]},
                                            {"key": "x", "operator": "Exists"},
                                            {"key": "y", "operator": "DoesNotExist", "values": []}]}),
                "app=web,env notin (prod),tier in (be,fe),x,!y",
            ),
        ];
        for (v, want) in ok {
            let s = selector_from_label_selector(&v).unwrap_or_else(|e| panic!("{v}: {e}"));
            assert_eq!(s.to_string(), want);
        }
        let s = selector_from_label_selector(
            &json!({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["fe"]}]}),
        );
        assert!(s
            .as_ref()
            .is_ok_and(|s| s.matches(&labels(json!({"tier": "fe"})))));
        assert!(s.is_ok_and(|s| !s.matches(&labels(json!({"tier": "be"})))));

        // nil matches nothing, empty matches everything.
        assert!(selector_from_label_selector(&Value::Null).is_ok_and(|s| s.is_nothing()));
        assert!(selector_from_optional_label_selector(None).is_ok_and(|s| !s.matches(&Map::new())));
        assert!(selector_from_label_selector(&json!({})).is_ok_and(|s| s.matches(&Map::new())));

        let bad = [
            (
                json!({"matchExpressions": [{"key": "a", "operator": "Foo"}]}),
                "\"Foo\" is not a valid label selector operator",
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
                "values: Invalid value: []: for 'in', 'notin' operators, values set can't be empty",
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
                "values set must be empty for exists and does not exist",
            ),
            (
                json!({"matchLabels": {"app": "a b"}}),
                "values[0][app]: Invalid value: \"a b\": a valid label must be",
            ),
            (
                json!({"matchLabels": {"-app": "a"}}),
                "key: Invalid value: \"-app\": name part must consist",
            ),
        ];
        for (v, want) in bad {
            let err = selector_from_label_selector(&v).err().unwrap_or_default();
            assert!(err.contains(want), "{v}: {err}");
        }
    }

    #[test]
    fn selector_from_set_matches_exactly() {
        let s = selector_from_set(&labels(json!({"b": "2", "a": "1"})));
        assert_eq!(s.to_string(), "a=1,b=2");
        assert!(s.matches(&labels(json!({"a": "1", "b": "2", "c": "3"}))));
        assert!(!s.matches(&labels(json!({"a": "1"}))));
        assert!(selector_from_set(&Map::new()).is_empty());
    }

    #[test]
    fn requirement_validation() {
        assert!(Requirement::new("a", Operator::Equals, vec![]).is_err());
        assert!(
            Requirement::new("a", Operator::GreaterThan, vec!["1".into(), "2".into()]).is_err()
        );
        let both = Requirement::new("-a", Operator::In, vec![])
            .err()
            .unwrap_or_default();
        assert!(both.starts_with("[key: Invalid value: \"-a\""), "{both}");
        assert!(Requirement::new("a", Operator::LessThan, vec!["10".into()]).is_ok());
    }
}
