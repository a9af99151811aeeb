//! Value validation of custom resources (kube-openapi `validation/validate`'s `SchemaValidator`,
//! mapped to field errors as upstream's `apiserver/validation.ValidateCustomResource` does).
//!
//! Each schema node runs kube-openapi's validators in its order: type, `allOf`/`anyOf`/`oneOf`/`not`,
//! string (`maxLength`, `minLength`, `pattern`), format, number (`multipleOf`, `minimum`,
//! `maximum`), array (`items`, `minItems`, `maxItems`, `uniqueItems`), `enum`, object
//! (`minProperties`, `maxProperties`, `additionalProperties`, `properties`, `required`). Messages are
//! kube-openapi's (`spec.replicas in body must be of type integer: "string"`), the field error types
//! upstream's mapping (Required, NotSupported, TooLong, TooMany, TypeInvalid, else Invalid).
//!
//! Differences: when no alternative of an `anyOf`/`oneOf` matches, the errors shown are those of the
//! alternative that passed the most checks, counted more simply than kube-openapi's `MatchCount`.

use serde_json::Value;

use super::{formats, go_float, go_sharp_v, json_type, Schema};
use crate::validation::field::{ErrorType, FieldError, FieldPath};

/// Validates `obj` (a whole custom resource, or a value below `base`) against `schema`.
pub fn validate(obj: &Value, schema: &Schema, base: Option<&FieldPath>) -> Vec<FieldError> {
    let mut v = Validator {
        base,
        errors: Vec::new(),
        matches: 0,
    };
    v.node(schema, obj, "");
    v.errors
}

struct Validator<'a> {
    base: Option<&'a FieldPath>,
    errors: Vec<FieldError>,
    matches: usize,
}

/// A kube-openapi error before mapping: its code decides the field error type.
enum Code {
    Required,
    Enum(Vec<Value>),
    TooLong(i64),
    TooManyItems(i64, i64),
    TooManyProperties(i64, i64),
    InvalidType,
    Other,
}

impl<'a> Validator<'a> {
    fn child(&self) -> Validator<'a> {
        Validator {
            base: self.base,
            errors: Vec::new(),
            matches: 0,
        }
    }

    /// The field path of an error named `name` (kube-openapi's path, `.spec` or `spec.replicas`).
    fn path(&self, name: &str) -> FieldPath {
        let name = name.strip_prefix('.').unwrap_or(name);
        match (self.base, name.is_empty()) {
            (Some(b), true) => b.clone(),
            (Some(b), false) => b.child(name),
            (None, true) => FieldPath::root("<nil>"),
            (None, false) => FieldPath::root(name),
        }
    }

    fn add(&mut self, code: Code, name: &str, value: Option<&Value>, message: String) {
        let path = self.path(name);
        let value = value.cloned();
        let err = match code {
            Code::Required => FieldError::required(&path, ""),
            Code::Enum(values) => {
                let allowed: Vec<String> = values
                    .iter()
                    .map(|v| match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    })
                    .collect();
                let mut e = FieldError::not_supported(
                    &path,
                    value.clone().unwrap_or(Value::Null),
                    &allowed,
                );
                if let Some(v @ (Value::Object(_) | Value::Array(_) | Value::Null)) = &value {
                    e.value_text = Some(go_sharp_v(v));
                }
                e
            }
            Code::TooLong(max) => {
                let unit = if max == 1 { "byte" } else { "bytes" };
                let mut e = FieldError::too_long(&path, max.max(0) as usize);
                e.detail = format!("may not be more than {max} {unit}");
                e
            }
            Code::TooManyItems(actual, max) | Code::TooManyProperties(actual, max) => {
                let mut e =
                    FieldError::too_many(&path, actual.max(0) as usize, max.max(0) as usize);
                if max == 1 {
                    e.detail = "must have at most 1 item".into();
                }
                e
            }
            Code::InvalidType => {
                FieldError::type_invalid(&path, value.unwrap_or(Value::from("")), message)
            }
            Code::Other => {
                let v = value.unwrap_or(Value::from(""));
                let mut e = FieldError::invalid(&path, v.clone(), message);
                if matches!(v, Value::Object(_) | Value::Array(_) | Value::Null) {
                    e.value_text = Some(go_sharp_v(&v));
                }
                e
            }
        };
        self.errors.push(err);
    }

    /// An error kube-openapi raises with `errors.New` (composite errors): reported at no field.
    fn composite(&mut self, message: String) {
        let path = match self.base {
            Some(b) => b.clone(),
            None => FieldPath::root("<nil>"),
        };
        self.errors
            .push(FieldError::invalid(&path, Value::from(""), message));
    }

    fn node(&mut self, s: &Schema, data: &Value, path: &str) {
        let types = types_of(s);
        let format = formats::effective(&s.type_, &s.format);
        if data.is_null() {
            self.check_type(&types, s.nullable, &format, data, path);
            self.check_enum(s, data, path);
            return;
        }
        if !types.is_empty() || !format.is_empty() {
            self.check_type(&types, s.nullable, &format, data, path);
        }
        self.junctors(s, data, path);
        match data {
            Value::String(text) => {
                self.check_string(s, text, data, path);
                if !format.is_empty() && formats::is_string_format(&format) {
                    if formats::validates(&format, text) {
                        self.matches += 1;
                    } else {
                        let msg = format!("{path} in body must be of type {format}: {text:?}");
                        self.add(Code::InvalidType, path, Some(data), msg);
                    }
                }
            }
            Value::Number(_) => self.check_number(s, data, path),
            Value::Array(items) => self.check_array(s, items, data, path),
            _ => {}
        }
        self.check_enum(s, data, path);
        if let Value::Object(map) = data {
            self.check_object(s, map, data, path);
        }
    }

    fn check_type(
        &mut self,
        types: &[&str],
        nullable: bool,
        format: &str,
        data: &Value,
        path: &str,
    ) {
        if data.is_null() {
            if !types.is_empty() && !types.contains(&"null") && !nullable {
                let msg = format!(
                    "{path} in body must be of type {}: \"null\"",
                    types.join(",")
                );
                self.add(Code::InvalidType, path, Some(&Value::from("null")), msg);
            } else {
                self.matches += 1;
            }
            return;
        }
        let sch_type = json_type(data);
        let data_format = match data {
            Value::Number(n) if n.is_i64() || n.is_u64() => "int64",
            Value::Number(_) => "float64",
            _ => "",
        };
        let is_float_int = sch_type == "number"
            && data.as_f64().is_some_and(|f| f.fract() == 0.0)
            && types.contains(&"integer");
        let is_int_float = sch_type == "integer" && types.contains(&"number");
        let is_lower_int = format == "int64" && data_format == "int32";
        let is_lower_float = format == "float64" && data_format == "float32";
        let stringish = matches!(data, Value::String(_) | Value::Array(_));
        if !stringish
            && !format.is_empty()
            && !(types.contains(&sch_type)
                || data_format == format
                || is_float_int
                || is_int_float
                || is_lower_int
                || is_lower_float)
        {
            let msg = format!("{path} in body must be of type {format}: {data_format:?}");
            self.add(
                Code::InvalidType,
                path,
                Some(&Value::from(data_format)),
                msg,
            );
            return;
        }
        if !(types.contains(&"number") || types.contains(&"integer") || format.is_empty())
            && stringish
        {
            self.matches += 1;
            return;
        }
        if !(types.contains(&sch_type) || is_float_int || is_int_float) {
            let msg = format!(
                "{path} in body must be of type {}: {sch_type:?}",
                types.join(",")
            );
            self.add(Code::InvalidType, path, Some(&Value::from(sch_type)), msg);
            return;
        }
        self.matches += 1;
    }

    fn junctors(&mut self, s: &Schema, data: &Value, path: &str) {
        let quoted = format!("{path:?}");
        if !s.any_of.is_empty() {
            let mut best: Option<Validator<'a>> = None;
            let mut ok = false;
            for alt in &s.any_of {
                let mut v = self.child();
                v.node(alt, data, path);
                if v.errors.is_empty() {
                    ok = true;
                    self.matches += v.matches;
                    break;
                }
                if best.as_ref().is_none_or(|b| v.matches > b.matches) {
                    best = Some(v);
                }
            }
            if !ok {
                self.composite(format!(
                    "{quoted} must validate at least one schema (anyOf)"
                ));
                if let Some(b) = best {
                    self.errors.extend(b.errors);
                }
            }
        }
        if !s.one_of.is_empty() {
            let mut best: Option<Validator<'a>> = None;
            let mut valid = 0;
            for alt in &s.one_of {
                let mut v = self.child();
                v.node(alt, data, path);
                if v.errors.is_empty() {
                    valid += 1;
                    continue;
                }
                if valid == 0 && best.as_ref().is_none_or(|b| v.matches > b.matches) {
                    best = Some(v);
                }
            }
            if valid != 1 {
                let why = if valid == 0 {
                    "Found none valid".to_string()
                } else {
                    format!("Found {valid} valid alternatives")
                };
                self.composite(format!(
                    "{quoted} must validate one and only one schema (oneOf). {why}"
                ));
                if valid == 0 {
                    if let Some(b) = best {
                        self.errors.extend(b.errors);
                    }
                }
            }
        }
        if !s.all_of.is_empty() {
            let mut valid = 0;
            for alt in &s.all_of {
                let mut v = self.child();
                v.node(alt, data, path);
                if v.errors.is_empty() {
                    valid += 1;
                }
                self.matches += v.matches;
                self.errors.extend(v.errors);
            }
            if valid != s.all_of.len() {
                let extra = if valid == 0 { ". None validated" } else { "" };
                self.composite(format!(
                    "{quoted} must validate all the schemas (allOf){extra}"
                ));
            }
        }
        if let Some(not) = &s.not {
            let mut v = self.child();
            v.node(not, data, path);
            if v.errors.is_empty() {
                self.composite(format!("{quoted} must not validate the schema (not)"));
            }
        }
    }

    fn check_string(&mut self, s: &Schema, text: &str, data: &Value, path: &str) {
        let len = text.chars().count() as i64;
        if let Some(max) = s.max_length {
            if len > max {
                let msg = format!("{path} in body should be at most {max} chars long");
                self.add(Code::TooLong(max), path, Some(data), msg);
                return;
            }
        }
        if let Some(min) = s.min_length {
            if len < min {
                let msg = format!("{path} in body should be at least {min} chars long");
                self.add(Code::Other, path, Some(data), msg);
                return;
            }
        }
        if !s.pattern.is_empty() {
            match regex::Regex::new(&s.pattern) {
                Ok(re) if re.is_match(text) => {}
                Ok(_) => {
                    let msg = format!("{path} in body should match '{}'", s.pattern);
                    self.add(Code::Other, path, Some(data), msg);
                    return;
                }
                Err(e) => {
                    let msg = format!(
                        "{path} in body should match '{}, but pattern is invalid: {e}'",
                        s.pattern
                    );
                    self.add(Code::Other, path, Some(data), msg);
                    return;
                }
            }
        }
        self.matches += 1;
    }

    fn check_number(&mut self, s: &Schema, data: &Value, path: &str) {
        let int = data.as_i64();
        let float = data.as_f64().unwrap_or(0.0);
        if let Some(factor) = s.multiple_of {
            let failed = match int {
                _ if factor < 0.0 => Some(format!(
                    "factor MultipleOf declared for {path} must be positive: {}",
                    go_float(factor)
                )),
                Some(i) if factor >= 1.0 || factor == 0.0 => {
                    let f = factor as i64;
                    (f != 0 && i % f != 0)
                        .then(|| format!("{path} in body should be a multiple of {f}"))
                }
                _ => {
                    let mult = if factor < 1.0 {
                        1.0 / factor * float
                    } else {
                        float / factor
                    };
                    (mult.fract() != 0.0 || !mult.is_finite()).then(|| {
                        format!(
                            "{path} in body should be a multiple of {}",
                            go_float(factor)
                        )
                    })
                }
            };
            if let Some(msg) = failed {
                self.add(Code::Other, path, Some(data), msg);
            }
        }
        if let Some(min) = s.minimum {
            let (below, bound) = match int {
                Some(i) => {
                    let m = min as i64;
                    (
                        if s.exclusive_minimum { i <= m } else { i < m },
                        m.to_string(),
                    )
                }
                None => (
                    if s.exclusive_minimum {
                        float <= min
                    } else {
                        float < min
                    },
                    go_float(min),
                ),
            };
            if below {
                let rel = if s.exclusive_minimum {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                self.add(
                    Code::Other,
                    path,
                    Some(data),
                    format!("{path} in body should be {rel} {bound}"),
                );
            }
        }
        if let Some(max) = s.maximum {
            let (above, bound) = match int {
                Some(i) => {
                    let m = max as i64;
                    (
                        if s.exclusive_maximum { i >= m } else { i > m },
                        m.to_string(),
                    )
                }
                None => (
                    if s.exclusive_maximum {
                        float >= max
                    } else {
                        float > max
                    },
                    go_float(max),
                ),
            };
            if above {
                let rel = if s.exclusive_maximum {
                    "less than"
                } else {
                    "less than or equal to"
                };
                self.add(
                    Code::Other,
                    path,
                    Some(data),
                    format!("{path} in body should be {rel} {bound}"),
                );
            }
        }
        self.matches += 1;
    }

    fn check_array(&mut self, s: &Schema, items: &[Value], data: &Value, path: &str) {
        if let Some(item_schema) = &s.items {
            for (i, item) in items.iter().enumerate() {
                self.node(item_schema, item, &format!("{path}[{i}]"));
            }
        }
        let size = items.len() as i64;
        if let Some(min) = s.min_items {
            if size < min {
                let msg = format!("{path} in body should have at least {min} items");
                self.add(Code::Other, path, Some(&Value::from(size)), msg);
            }
        }
        if let Some(max) = s.max_items {
            if size > max {
                let msg = format!("{path} in body should have at most {max} items");
                self.add(Code::TooManyItems(size, max), path, Some(data), msg);
            }
        }
        if s.unique_items {
            let dup = items
                .iter()
                .enumerate()
                .any(|(i, a)| items[..i].iter().any(|b| json_equal(a, b)));
            if dup {
                let msg = format!("{path} in body shouldn't contain duplicates");
                self.add(Code::Other, path, None, msg);
            }
        }
        self.matches += 1;
    }

    fn check_enum(&mut self, s: &Schema, data: &Value, path: &str) {
        let Some(values) = s.enum_.as_ref().filter(|v| !v.is_empty()) else {
            return;
        };
        if !data.is_null() && values.iter().any(|v| json_equal(v, data)) {
            self.matches += 1;
            return;
        }
        let listed: Vec<String> = values.iter().map(super::go_v).collect();
        let msg = format!("{path} in body should be one of [{}]", listed.join(" "));
        self.add(Code::Enum(values.clone()), path, Some(data), msg);
    }

    fn check_object(
        &mut self,
        s: &Schema,
        map: &serde_json::Map<String, Value>,
        data: &Value,
        path: &str,
    ) {
        let n = map.len() as i64;
        if let Some(min) = s.min_properties {
            if n < min {
                let msg = format!("{path} in body should have at least {min} properties");
                self.add(Code::Other, path, Some(&Value::from(n)), msg);
                return;
            }
        }
        if let Some(max) = s.max_properties {
            if n > max {
                let msg = format!("{path} in body should have at most {max} properties");
                self.add(Code::TooManyProperties(n, max), path, Some(data), msg);
                return;
            }
        }
        match &s.additional_properties {
            Some(super::Additional::Bool(false)) => {
                for k in map.keys() {
                    if !s.properties.contains_key(k) {
                        let msg = format!("{path}.{k} in body is a forbidden property");
                        self.add(Code::Other, path, Some(&Value::from(k.as_str())), msg);
                    }
                }
            }
            Some(super::Additional::Schema(extra)) => {
                for (k, v) in map {
                    if !s.properties.contains_key(k) {
                        self.node(extra, v, &format!("{path}.{k}"));
                    }
                }
            }
            _ => {}
        }
        for (name, prop) in &s.properties {
            if let Some(v) = map.get(name) {
                let sub = if path.is_empty() {
                    name.clone()
                } else {
                    format!("{path}.{name}")
                };
                self.node(prop, v, &sub);
            }
        }
        for k in &s.required {
            if !map.contains_key(k) {
                let name = format!("{path}.{k}");
                let msg = format!("{name} in body is required");
                self.add(Code::Required, &name, None, msg);
            }
        }
        self.matches += 1;
    }
}

/// The types a node checks: `type`, or integer and string for `x-kubernetes-int-or-string`.
fn types_of(s: &Schema) -> Vec<&str> {
    if s.int_or_string {
        vec!["integer", "string"]
    } else if s.type_.is_empty() {
        Vec::new()
    } else {
        vec![s.type_.as_str()]
    }
}

/// JSON equality with numbers compared by value (`1` equals `1.0`), as Go's conversion does.
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(i), Some(j)) => i == j,
            _ => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// Whether the errors include one that upstream considers blocking for CEL rules.
pub fn has_blocking(errors: &[FieldError]) -> bool {
    errors.iter().any(|e| {
        matches!(
            e.kind,
            ErrorType::NotSupported
                | ErrorType::Required
                | ErrorType::TooLong
                | ErrorType::TooMany
                | ErrorType::TypeInvalid
        )
    })
}
