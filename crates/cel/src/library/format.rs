//! Kubernetes' format library (upstream `library/format.go`): `format.named(name)` (an optional
//! format), constants `format.dns1123Label()`, `format.dns1123Subdomain()`, `format.dns1035Label()`,
//! `format.qualifiedName()`, `format.dns1123LabelPrefix()`, `format.dns1123SubdomainPrefix()`,
//! `format.dns1035LabelPrefix()`, `format.labelValue()`, `format.uri()`, `format.uuid()`,
//! `format.byte()`, `format.date()`, `format.datetime()`, and `<format>.validate(s)`: `none` when
//! valid, else an optional list of the error messages.

use std::sync::Arc;

use apimachinery::validation::names;
use cel::common::types::{Type, STRING_TYPE};
use cel::objects::OptionalValue;
use cel::{ExecutionError, Value};

use super::{op, opaque_arg, str_arg, Registrar};

const TYPE_NAME: &str = "kubernetes.NamedFormat";

/// A named string format.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    name: &'static str,
}

impl cel::objects::Opaque for Format {
    fn runtime_type_name(&self) -> &str {
        TYPE_NAME
    }
}

/// `format.<key>` names, with upstream's format names.
const FORMATS: &[(&str, &str)] = &[
    ("dns1123Label", "DNS1123Label"),
    ("dns1123Subdomain", "DNS1123Subdomain"),
    ("dns1035Label", "DNS1035Label"),
    ("qualifiedName", "QualifiedName"),
    ("dns1123LabelPrefix", "DNS1123LabelPrefix"),
    ("dns1123SubdomainPrefix", "DNS1123SubdomainPrefix"),
    ("dns1035LabelPrefix", "DNS1035LabelPrefix"),
    ("labelValue", "LabelValue"),
    ("uri", "URI"),
    ("uuid", "uuid"),
    ("byte", "byte"),
    ("date", "date"),
    ("datetime", "datetime"),
];

macro_rules! constant {
    ($r:expr, $key:literal) => {
        $r.global(
            concat!("format.", $key),
            concat!("format.", $key),
            vec![],
            op!(|_: &[Value]| -> Result<Value, ExecutionError> { Ok(format_value($key)) }),
        )
    };
}

pub(crate) fn register(r: &mut Registrar<'_>) {
    constant!(r, "dns1123Label");
    constant!(r, "dns1123Subdomain");
    constant!(r, "dns1035Label");
    constant!(r, "qualifiedName");
    constant!(r, "dns1123LabelPrefix");
    constant!(r, "dns1123SubdomainPrefix");
    constant!(r, "dns1035LabelPrefix");
    constant!(r, "labelValue");
    constant!(r, "uri");
    constant!(r, "uuid");
    constant!(r, "byte");
    constant!(r, "date");
    constant!(r, "datetime");
    r.global(
        "format.named",
        "format-named",
        vec![STRING_TYPE],
        op!(named),
    );
    r.member(
        "validate",
        "format-validate",
        Type::new_opaque_type(TYPE_NAME),
        vec![STRING_TYPE],
        op!(validate),
    );
}

fn format_value(key: &str) -> Value {
    let name = FORMATS
        .iter()
        .find(|(k, _)| *k == key)
        .map_or("", |(k, _)| *k);
    Value::Opaque(Arc::new(Format { name }))
}

fn named(args: &[Value]) -> Result<Value, ExecutionError> {
    let key = str_arg("format.named", args, 0)?;
    let found = FORMATS.iter().any(|(k, _)| *k == key);
    Ok(Value::Opaque(Arc::new(if found {
        OptionalValue::of(format_value(key))
    } else {
        OptionalValue::none()
    })))
}

fn is_uuid(s: &str) -> bool {
    let hex: String = s.chars().filter(|c| *c != '-').collect();
    let dashes_ok = matches!(s.len(), 32 | 36)
        && (s.len() == 32 || [8, 13, 18, 23].iter().all(|&i| s.as_bytes()[i] == b'-'));
    dashes_ok && hex.len() == 32 && hex.chars().all(|c| c.is_ascii_hexdigit())
}

fn is_base64(s: &str) -> bool {
    let body = s.trim_end_matches('=');
    s.len().is_multiple_of(4)
        && s.len() - body.len() <= 2
        && body
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/')
}

/// The messages of validating `s` as format `key`; empty when valid.
fn check(key: &str, s: &str) -> Vec<String> {
    match key {
        "dns1123Label" => names::is_dns1123_label(s),
        "dns1123Subdomain" => names::is_dns1123_subdomain(s),
        "dns1035Label" => names::is_dns1035_label(s),
        "qualifiedName" => names::is_qualified_name(s),
        "dns1123LabelPrefix" => names::is_dns1123_label(&names::mask_trailing_dash(s)),
        "dns1123SubdomainPrefix" => names::is_dns1123_subdomain(&names::mask_trailing_dash(s)),
        "dns1035LabelPrefix" => names::is_dns1035_label(&names::mask_trailing_dash(s)),
        "labelValue" => names::is_label_value(s),
        "uri" => super::urls::parse(s)
            .err()
            .map(|e| {
                e.trim_start_matches("URL parse error during conversion from string: ")
                    .to_owned()
            })
            .into_iter()
            .collect(),
        "uuid" if !is_uuid(s) => vec!["does not match the UUID format".into()],
        "byte" if !is_base64(s) => vec!["invalid base64".into()],
        "date" if chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").is_err() || s.len() != 10 => {
            vec!["invalid date".into()]
        }
        "datetime" if chrono::DateTime::parse_from_rfc3339(s).is_err() => {
            vec!["invalid datetime".into()]
        }
        _ => Vec::new(),
    }
}

fn validate(args: &[Value]) -> Result<Value, ExecutionError> {
    let f = opaque_arg::<Format>("validate", args, 0)?;
    let s = str_arg("validate", args, 1)?;
    crate::cost::charge(s.len() as u64 / 10)?;
    let errors = check(f.name, s);
    Ok(Value::Opaque(Arc::new(if errors.is_empty() {
        OptionalValue::none()
    } else {
        OptionalValue::of(Value::List(Arc::new(
            errors
                .into_iter()
                .map(|e| Value::String(Arc::new(e)))
                .collect(),
        )))
    })))
}

#[cfg(test)]
mod tests {
    use crate::library::testing::{assert_true, eval};
    use serde_json::json;

    #[test]
    fn validates() {
        assert_true("!format.dns1123Label().validate('my-name').hasValue()");
        assert_true("format.dns1123Label().validate('MyName').hasValue()");
        assert_true("format.named('dns1123Subdomain').value().validate('a.b') == optional.none()");
        assert_true("!format.named('nope').hasValue()");
        assert_true("!format.dns1123LabelPrefix().validate('abc-').hasValue()");
        assert_true("format.dns1123Label().validate('abc-').hasValue()");
        assert_true("!format.uuid().validate('123e4567-e89b-12d3-a456-426614174000').hasValue()");
        assert_true("format.uuid().validate('nope').hasValue()");
        assert_true("!format.byte().validate('aGVsbG8=').hasValue() && format.byte().validate('a').hasValue()");
        assert_true("!format.date().validate('2024-02-29').hasValue() && format.date().validate('2023-02-29').hasValue()");
        assert_true("!format.datetime().validate('2024-01-01T00:00:00Z').hasValue()");
        assert_true("!format.uri().validate('https://a/b').hasValue() && format.uri().validate('a').hasValue()");
        assert_eq!(
            eval("format.dns1123Label().validate('A').value()"),
            Ok(json!([
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ]))
        );
        // the strings extension's format still works
        assert_true("'%s-%d'.format(['a', 1]) == 'a-1'");
    }
}
