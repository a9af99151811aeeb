//! Field errors of validation (upstream `k8s.io/apimachinery/pkg/util/validation/field`): a path such as
//! `spec.containers[0].image`, an error type, the offending value and a detail. They become the `causes`
//! of a 422 Invalid `Status`, with upstream's wording so clients and users see the same messages.

use std::fmt;

use serde_json::Value;

/// A path to a field: `metadata.name`, `spec.containers[0].ports[1].containerPort`, `metadata.labels[app]`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldPath(String);

impl FieldPath {
    pub fn root(name: &str) -> FieldPath {
        FieldPath(name.to_string())
    }
    /// A child field: `spec` -> `spec.replicas`.
    pub fn child(&self, name: &str) -> FieldPath {
        if self.0.is_empty() {
            FieldPath(name.to_string())
        } else {
            FieldPath(format!("{}.{name}", self.0))
        }
    }
    /// A list element: `spec.containers` -> `spec.containers[0]`.
    pub fn index(&self, i: usize) -> FieldPath {
        FieldPath(format!("{}[{i}]", self.0))
    }
    /// A map entry: `metadata.labels` -> `metadata.labels[app]`.
    pub fn key(&self, k: &str) -> FieldPath {
        FieldPath(format!("{}[{k}]", self.0))
    }
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Upstream's `field.ErrorType`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorType {
    NotFound,
    Required,
    Duplicate,
    Invalid,
    /// A value of the wrong JSON type (upstream's `field.TypeInvalid`, used by schema validation).
    TypeInvalid,
    NotSupported,
    Forbidden,
    TooLong,
    TooMany,
    Internal,
}

impl ErrorType {
    /// The `reason` of a `StatusCause`.
    pub fn cause_reason(self) -> &'static str {
        match self {
            ErrorType::NotFound => "FieldValueNotFound",
            ErrorType::Required => "FieldValueRequired",
            ErrorType::Duplicate => "FieldValueDuplicate",
            ErrorType::Invalid => "FieldValueInvalid",
            ErrorType::TypeInvalid => "FieldValueTypeInvalid",
            ErrorType::NotSupported => "FieldValueNotSupported",
            ErrorType::Forbidden => "FieldValueForbidden",
            ErrorType::TooLong => "FieldValueTooLong",
            ErrorType::TooMany => "FieldValueTooMany",
            ErrorType::Internal => "InternalError",
        }
    }

    /// The human wording upstream prints.
    pub fn text(self) -> &'static str {
        match self {
            ErrorType::NotFound => "Not found",
            ErrorType::Required => "Required value",
            ErrorType::Duplicate => "Duplicate value",
            ErrorType::Invalid | ErrorType::TypeInvalid => "Invalid value",
            ErrorType::NotSupported => "Unsupported value",
            ErrorType::Forbidden => "Forbidden",
            ErrorType::TooLong => "Too long",
            ErrorType::TooMany => "Too many",
            ErrorType::Internal => "Internal error",
        }
    }
}

/// One validation error.
#[derive(Clone, Debug, PartialEq)]
pub struct FieldError {
    pub kind: ErrorType,
    pub field: FieldPath,
    /// The offending value; `None` when upstream omits it from the message.
    pub bad_value: Option<Value>,
    pub detail: String,
    /// The bad value as upstream prints it, when JSON would print it differently (Go's `%#v` of a
    /// map: `map[string]interface {}{"a":1}`).
    pub value_text: Option<String>,
}

impl FieldError {
    fn new(
        kind: ErrorType,
        field: &FieldPath,
        bad_value: Option<Value>,
        detail: impl Into<String>,
    ) -> Self {
        FieldError {
            kind,
            field: field.clone(),
            bad_value,
            detail: detail.into(),
            value_text: None,
        }
    }
    /// An error of any type whose bad value is printed as `text` (already in upstream's form).
    pub fn with_value_text(
        kind: ErrorType,
        field: &FieldPath,
        text: impl Into<String>,
        detail: impl Into<String>,
    ) -> Self {
        let mut e = Self::new(kind, field, Some(Value::Null), detail);
        e.value_text = Some(text.into());
        e
    }
    pub fn type_invalid(
        field: &FieldPath,
        value: impl Into<Value>,
        detail: impl Into<String>,
    ) -> Self {
        Self::new(ErrorType::TypeInvalid, field, Some(value.into()), detail)
    }
    pub fn required(field: &FieldPath, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Required, field, None, detail)
    }
    pub fn invalid(field: &FieldPath, value: impl Into<Value>, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Invalid, field, Some(value.into()), detail)
    }
    pub fn not_supported<S: AsRef<str>>(
        field: &FieldPath,
        value: impl Into<Value>,
        valid: &[S],
    ) -> Self {
        let quoted: Vec<String> = valid.iter().map(|v| format!("{:?}", v.as_ref())).collect();
        Self::new(
            ErrorType::NotSupported,
            field,
            Some(value.into()),
            format!("supported values: {}", quoted.join(", ")),
        )
    }
    pub fn duplicate(field: &FieldPath, value: impl Into<Value>) -> Self {
        Self::new(ErrorType::Duplicate, field, Some(value.into()), "")
    }
    pub fn forbidden(field: &FieldPath, detail: impl Into<String>) -> Self {
        Self::new(ErrorType::Forbidden, field, None, detail)
    }
    pub fn too_long(field: &FieldPath, max: usize) -> Self {
        Self::new(
            ErrorType::TooLong,
            field,
            None,
            format!("may not be more than {max} bytes"),
        )
    }
    pub fn too_many(field: &FieldPath, actual: usize, max: usize) -> Self {
        Self::new(
            ErrorType::TooMany,
            field,
            Some(Value::from(actual)),
            format!("must have at most {max} items"),
        )
    }
    pub fn not_found(field: &FieldPath, value: impl Into<Value>) -> Self {
        Self::new(ErrorType::NotFound, field, Some(value.into()), "")
    }

    /// Upstream's `ErrorBody`: the message without the field path.
    pub fn body(&self) -> String {
        let mut s = match (&self.kind, &self.bad_value) {
            (
                ErrorType::Required
                | ErrorType::Forbidden
                | ErrorType::TooLong
                | ErrorType::Internal,
                _,
            )
            | (_, None) => self.kind.text().to_string(),
            (_, Some(_)) if self.value_text.is_some() => {
                format!(
                    "{}: {}",
                    self.kind.text(),
                    self.value_text.as_deref().unwrap_or("")
                )
            }
            (_, Some(value)) => format!("{}: {}", self.kind.text(), go_value(value)),
        };
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

/// Values are printed as Go's `%#v` would: strings quoted, numbers and booleans bare.
fn go_value(v: &Value) -> String {
    match v {
        Value::String(s) => format!("{s:?}"),
        Value::Null => "null".into(),
        other => other.to_string(),
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

pub type ErrorList = Vec<FieldError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_use_upstream_wording() {
        let p = FieldPath::root("spec")
            .child("containers")
            .index(0)
            .child("image");
        assert_eq!(
            FieldError::required(&p, "").to_string(),
            "spec.containers[0].image: Required value"
        );
        let r = FieldPath::root("spec").child("replicas");
        assert_eq!(
            FieldError::invalid(&r, -1, "must be greater than or equal to 0").to_string(),
            "spec.replicas: Invalid value: -1: must be greater than or equal to 0"
        );
        let n = FieldPath::root("metadata").child("name");
        assert_eq!(
            FieldError::invalid(&n, "A", "bad").to_string(),
            "metadata.name: Invalid value: \"A\": bad"
        );
        let pol = FieldPath::root("spec").child("restartPolicy");
        assert_eq!(
            FieldError::not_supported(&pol, "Sometimes", &["Always", "OnFailure", "Never"]).to_string(),
            "spec.restartPolicy: Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""
        );
        assert_eq!(
            FieldPath::root("metadata")
                .child("labels")
                .key("app")
                .as_str(),
            "metadata.labels[app]"
        );
    }
}
