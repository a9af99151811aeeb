//! Custom resource schemas (upstream `apiextensions-apiserver/pkg/apiserver/schema` and kube-openapi's
//! `validation/validate`): an `openAPIV3Schema` of a CustomResourceDefinition parsed once into
//! [`Schema`], and the pure functions the API server applies to custom resources with it:
//!
//! - [`prune`]: drops fields the schema does not specify (`x-kubernetes-preserve-unknown-fields`,
//!   embedded resources and the root keep `apiVersion`, `kind`, `metadata`), reporting their paths for
//!   `fieldValidation=Strict|Warn`; and removes non-nullable nulls without a default.
//! - [`defaults`]: applies `default` values, as on create/update and when reading from storage.
//! - [`validate`]: value validation with kube-openapi's rules and error texts, mapped to field errors
//!   as upstream's `ValidateCustomResource` does.
//! - [`listtype`]: uniqueness of `x-kubernetes-list-type: set|map` lists.
//! - [`objectmeta`]: metadata of the root and of embedded resources (coercion and validation).
//! - [`structural`]: whether a schema is structural (required for `apiextensions.k8s.io/v1` CRDs),
//!   and whether its defaults validate and are pruned.
//!
//! Differences: upstream keeps a "structural" and a "value validation" view of the same schema; here
//! one [`Schema`] holds both, and the structural functions look only at `properties`, `items` and
//! `additionalProperties` of the node itself (never inside `allOf`/`anyOf`/`oneOf`/`not`), which is
//! what structurality guarantees. Properties are visited in name order, so errors come in a stable
//! order (upstream's follow Go's random map order). `x-kubernetes-validations` (CEL) rules are parsed
//! but not evaluated.

pub mod defaults;
mod formats;
pub mod listtype;
pub mod objectmeta;
pub mod prune;
pub mod structural;
pub mod validate;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;

use serde_json::{Map, Value};

/// `additionalProperties`: a bool or a schema.
#[derive(Clone, Debug, PartialEq)]
pub enum Additional {
    Bool(bool),
    Schema(Box<Schema>),
}

/// One node of an `openAPIV3Schema` (upstream `JSONSchemaProps`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Schema {
    pub type_: String,
    pub format: String,
    pub description: String,
    pub title: String,
    pub nullable: bool,
    pub default: Option<Value>,
    pub example: Option<Value>,
    pub maximum: Option<f64>,
    pub exclusive_maximum: bool,
    pub minimum: Option<f64>,
    pub exclusive_minimum: bool,
    pub max_length: Option<i64>,
    pub min_length: Option<i64>,
    pub pattern: String,
    pub max_items: Option<i64>,
    pub min_items: Option<i64>,
    pub unique_items: bool,
    pub multiple_of: Option<f64>,
    pub enum_: Option<Vec<Value>>,
    pub max_properties: Option<i64>,
    pub min_properties: Option<i64>,
    pub required: Vec<String>,
    pub items: Option<Box<Schema>>,
    /// `items` given as an array of schemas (not supported by CRDs, kept to report it).
    pub items_array: Vec<Schema>,
    pub properties: BTreeMap<String, Schema>,
    pub additional_properties: Option<Additional>,
    pub all_of: Vec<Schema>,
    pub one_of: Vec<Schema>,
    pub any_of: Vec<Schema>,
    pub not: Option<Box<Schema>>,
    /// `x-kubernetes-preserve-unknown-fields` as written (`Some(false)` is an error in a CRD).
    pub preserve_unknown_fields: Option<bool>,
    pub embedded_resource: bool,
    pub int_or_string: bool,
    pub list_type: Option<String>,
    pub list_map_keys: Vec<String>,
    pub map_type: Option<String>,
    /// `x-kubernetes-validations` rules as written (CEL; not evaluated).
    pub validations: Vec<Value>,
    /// Fields CRDs do not support, kept so that CRD validation can name them.
    pub unsupported: Vec<&'static str>,
    pub external_docs: bool,
}

fn f64_of(v: &Value) -> Option<f64> {
    v.as_f64()
}

fn i64_of(v: &Value) -> Option<i64> {
    v.as_i64()
        .or_else(|| v.as_f64().filter(|f| f.fract() == 0.0).map(|f| f as i64))
}

fn strings(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn schemas(v: Option<&Value>) -> Vec<Schema> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().map(Schema::parse).collect())
        .unwrap_or_default()
}

impl Schema {
    /// Parses a `JSONSchemaProps` in its JSON form. Lenient: fields of the wrong type are ignored (the
    /// CRD itself was decoded into its typed form before, so they do not occur).
    pub fn parse(v: &Value) -> Schema {
        let Some(m) = v.as_object() else {
            return Schema::default();
        };
        let s = |k: &str| m.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        let b = |k: &str| m.get(k).and_then(Value::as_bool).unwrap_or(false);
        let mut unsupported = Vec::new();
        for (field, name) in [
            ("id", "id"),
            ("$ref", "$ref"),
            ("$schema", "$schema"),
            ("additionalItems", "additionalItems"),
            ("patternProperties", "patternProperties"),
            ("definitions", "definitions"),
            ("dependencies", "dependencies"),
        ] {
            if m.get(field).is_some_and(|v| !v.is_null()) {
                unsupported.push(name);
            }
        }
        let (items, items_array) = match m.get("items") {
            Some(Value::Array(a)) => (None, a.iter().map(Schema::parse).collect()),
            Some(v @ Value::Object(_)) => (Some(Box::new(Schema::parse(v))), Vec::new()),
            _ => (None, Vec::new()),
        };
        let properties = m
            .get("properties")
            .and_then(Value::as_object)
            .map(|p| {
                p.iter()
                    .map(|(k, v)| (k.clone(), Schema::parse(v)))
                    .collect()
            })
            .unwrap_or_default();
        let additional_properties = match m.get("additionalProperties") {
            Some(Value::Bool(b)) => Some(Additional::Bool(*b)),
            Some(v @ Value::Object(_)) => Some(Additional::Schema(Box::new(Schema::parse(v)))),
            _ => None,
        };
        Schema {
            type_: s("type"),
            format: s("format"),
            description: s("description"),
            title: s("title"),
            nullable: b("nullable"),
            default: m.get("default").filter(|v| !v.is_null()).cloned(),
            example: m.get("example").filter(|v| !v.is_null()).cloned(),
            maximum: m.get("maximum").and_then(f64_of),
            exclusive_maximum: b("exclusiveMaximum"),
            minimum: m.get("minimum").and_then(f64_of),
            exclusive_minimum: b("exclusiveMinimum"),
            max_length: m.get("maxLength").and_then(i64_of),
            min_length: m.get("minLength").and_then(i64_of),
            pattern: s("pattern"),
            max_items: m.get("maxItems").and_then(i64_of),
            min_items: m.get("minItems").and_then(i64_of),
            unique_items: b("uniqueItems"),
            multiple_of: m.get("multipleOf").and_then(f64_of),
            enum_: m.get("enum").and_then(Value::as_array).cloned(),
            max_properties: m.get("maxProperties").and_then(i64_of),
            min_properties: m.get("minProperties").and_then(i64_of),
            required: strings(m.get("required")),
            items,
            items_array,
            properties,
            additional_properties,
            all_of: schemas(m.get("allOf")),
            one_of: schemas(m.get("oneOf")),
            any_of: schemas(m.get("anyOf")),
            not: m
                .get("not")
                .filter(|v| v.is_object())
                .map(|v| Box::new(Schema::parse(v))),
            preserve_unknown_fields: m
                .get("x-kubernetes-preserve-unknown-fields")
                .and_then(Value::as_bool),
            embedded_resource: b("x-kubernetes-embedded-resource"),
            int_or_string: b("x-kubernetes-int-or-string"),
            list_type: m
                .get("x-kubernetes-list-type")
                .and_then(Value::as_str)
                .map(str::to_string),
            list_map_keys: strings(m.get("x-kubernetes-list-map-keys")),
            map_type: m
                .get("x-kubernetes-map-type")
                .and_then(Value::as_str)
                .map(str::to_string),
            validations: m
                .get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default(),
            unsupported,
            external_docs: m.get("externalDocs").is_some_and(|v| !v.is_null()),
        }
    }

    /// `x-kubernetes-preserve-unknown-fields: true`.
    pub fn preserves_unknown(&self) -> bool {
        self.preserve_unknown_fields == Some(true)
    }

    /// The schema of `additionalProperties`, when it is one.
    pub fn additional_schema(&self) -> Option<&Schema> {
        match &self.additional_properties {
            Some(Additional::Schema(s)) => Some(s),
            _ => None,
        }
    }

    /// The structural schema of a map field `key`: its property, else `additionalProperties`
    /// (`Some(None)` for `additionalProperties: <bool>`); `None` when neither exists (the field is
    /// unknown).
    pub fn field(&self, key: &str) -> Option<Option<&Schema>> {
        if let Some(p) = self.properties.get(key) {
            return Some(Some(p));
        }
        match &self.additional_properties {
            Some(Additional::Schema(s)) => Some(Some(s)),
            Some(Additional::Bool(_)) => Some(None),
            None => None,
        }
    }

    /// Whether this node or any below it satisfies `pred` (upstream `SchemaHas`).
    pub fn has(&self, pred: &dyn Fn(&Schema) -> bool) -> bool {
        if pred(self) {
            return true;
        }
        self.items.as_ref().is_some_and(|s| s.has(pred))
            || self.items_array.iter().any(|s| s.has(pred))
            || self.all_of.iter().any(|s| s.has(pred))
            || self.any_of.iter().any(|s| s.has(pred))
            || self.one_of.iter().any(|s| s.has(pred))
            || self.not.as_ref().is_some_and(|s| s.has(pred))
            || self.properties.values().any(|s| s.has(pred))
            || self.additional_schema().is_some_and(|s| s.has(pred))
    }

    /// The same schema with `x-kubernetes-embedded-resource` set (how upstream treats a resource's root).
    pub fn as_resource_root(&self) -> Schema {
        let mut s = self.clone();
        s.embedded_resource = true;
        s
    }
}

/// A JSON value as Go's `%#v` prints its unstructured form (`map[string]interface {}{"a":1}`), which
/// is how upstream's field errors show map and list values.
pub fn go_sharp_v(v: &Value) -> String {
    match v {
        Value::Null => "interface {}(nil)".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::String(s) => format!("{s:?}"),
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(go_sharp_v).collect();
            format!("[]interface {{}}{{{}}}", items.join(", "))
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .iter()
                .map(|k| format!("{k:?}:{}", go_sharp_v(&m[*k])))
                .collect();
            format!("map[string]interface {{}}{{{}}}", items.join(", "))
        }
    }
}

/// A JSON value as Go's `%v` prints it (`map[a:1]`, `[a b]`, strings bare).
pub fn go_v(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => go_number(n),
        Value::String(s) => s.clone(),
        Value::Array(a) => {
            let items: Vec<String> = a.iter().map(go_v).collect();
            format!("[{}]", items.join(" "))
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let items: Vec<String> = keys
                .iter()
                .map(|k| format!("{k}:{}", go_v(&m[*k])))
                .collect();
            format!("map[{}]", items.join(" "))
        }
    }
}

fn go_number(n: &serde_json::Number) -> String {
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    go_float(n.as_f64().unwrap_or(0.0))
}

/// A float as Go's `%v` prints it: the shortest representation, in exponent form when the exponent
/// is below -4 or at least 6 (`strconv.FormatFloat(f, 'g', -1, 64)`: `1e+06`, `123456`).
pub fn go_float(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return "0".into();
    }
    // Rust's `{:e}` is the shortest round-tripping mantissa, e.g. "1.5e6".
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{mantissa}e{sign}{:02}", exp.abs());
    }
    let negative = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let point = exp + 1; // digits before the decimal point
    let body = if point <= 0 {
        format!("0.{}{digits}", "0".repeat((-point) as usize))
    } else if point as usize >= digits.len() {
        format!("{digits}{}", "0".repeat(point as usize - digits.len()))
    } else {
        format!(
            "{}.{}",
            &digits[..point as usize],
            &digits[point as usize..]
        )
    };
    if negative {
        format!("-{body}")
    } else {
        body
    }
}

/// The name of a JSON value's type as kube-openapi names it (`object`, `array`, `string`, `integer`,
/// `number`, `boolean`, `null`).
pub fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
    }
}

/// An empty JSON object.
pub fn empty_object() -> Value {
    Value::Object(Map::new())
}
