//! Field errors, as Kubernetes' `k8s.io/apimachinery/pkg/util/validation/field`: a path and a
//! message in Kubernetes' exact wording, collected by validation and reported in a 422 Status.

use serde_json::Value;

/// One invalid field, as Kubernetes' `field.Error`.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    /// The field's path, e.g. `spec.containers[0].image`.
    pub field: String,
    /// Kubernetes' cause type, e.g. `FieldValueRequired`, `FieldValueInvalid`.
    pub reason: &'static str,
    /// The full message, e.g. `spec.containers[0].image: Required value`.
    pub message: String,
}

impl FieldError {
    pub fn required(field: impl Into<String>, detail: &str) -> Self {
        let field = field.into();
        let message = if detail.is_empty() {
            format!("{field}: Required value")
        } else {
            format!("{field}: Required value: {detail}")
        };
        FieldError {
            field,
            reason: "FieldValueRequired",
            message,
        }
    }

    pub fn invalid(field: impl Into<String>, value: &Value, detail: &str) -> Self {
        Self::invalid_shown(field, &show(value), detail)
    }

    /// An invalid value already rendered the way Go prints it (e.g. `map[string]string{...}`).
    pub fn invalid_shown(field: impl Into<String>, shown: &str, detail: &str) -> Self {
        let field = field.into();
        let message = if detail.is_empty() {
            format!("{field}: Invalid value: {shown}")
        } else {
            format!("{field}: Invalid value: {shown}: {detail}")
        };
        FieldError {
            message,
            field,
            reason: "FieldValueInvalid",
        }
    }

    pub fn forbidden(field: impl Into<String>, detail: &str) -> Self {
        let field = field.into();
        FieldError {
            message: format!("{field}: Forbidden: {detail}"),
            field,
            reason: "FieldValueForbidden",
        }
    }

    pub fn not_supported(field: impl Into<String>, value: &Value, supported: &[&str]) -> Self {
        Self::not_supported_shown(field, &show(value), supported)
    }

    /// `Unsupported value` with the value already rendered the way Go prints it.
    pub fn not_supported_shown(field: impl Into<String>, shown: &str, supported: &[&str]) -> Self {
        let field = field.into();
        let list = supported
            .iter()
            .map(|s| go_quote(s))
            .collect::<Vec<_>>()
            .join(", ");
        let message = if supported.is_empty() {
            format!("{field}: Unsupported value: {shown}")
        } else {
            format!("{field}: Unsupported value: {shown}: supported values: {list}")
        };
        FieldError {
            message,
            field,
            reason: "FieldValueNotSupported",
        }
    }

    pub fn duplicate(field: impl Into<String>, value: &Value) -> Self {
        Self::duplicate_shown(field, &show(value))
    }

    /// `Duplicate value` with the value already rendered the way Go prints it.
    pub fn duplicate_shown(field: impl Into<String>, shown: &str) -> Self {
        let field = field.into();
        FieldError {
            message: format!("{field}: Duplicate value: {shown}"),
            field,
            reason: "FieldValueDuplicate",
        }
    }

    /// Kubernetes' `field.NotFound`: `...: Not found: "x"`.
    pub fn not_found(field: impl Into<String>, value: &Value) -> Self {
        let field = field.into();
        FieldError {
            message: format!("{field}: Not found: {}", show(value)),
            field,
            reason: "FieldValueNotFound",
        }
    }

    /// Kubernetes' `field.TooLong`: `...: Too long: may not be more than 262144 bytes`.
    pub fn too_long(field: impl Into<String>, max_bytes: usize) -> Self {
        let field = field.into();
        FieldError {
            message: format!("{field}: Too long: may not be more than {max_bytes} bytes"),
            field,
            reason: "FieldValueTooLong",
        }
    }

    /// Kubernetes' `field.TooMany`: `...: Too many: 5: must have at most 3 items`.
    pub fn too_many(field: impl Into<String>, actual: usize, max: usize) -> Self {
        let field = field.into();
        FieldError {
            message: format!("{field}: Too many: {actual}: must have at most {max} items"),
            field,
            reason: "FieldValueTooMany",
        }
    }

    /// `Invalid value: <value>: field is immutable`, as `ValidateImmutableField` reports it,
    /// with the new value rendered the way Go prints it.
    pub fn immutable_shown(field: impl Into<String>, shown: &str) -> Self {
        Self::invalid_shown(field, shown, "field is immutable")
    }

    /// Kubernetes' `field.InternalError`.
    pub fn internal(field: impl Into<String>, detail: &str) -> Self {
        let field = field.into();
        FieldError {
            message: format!("{field}: Internal error: {detail}"),
            field,
            reason: "InternalError",
        }
    }

    pub fn immutable(field: impl Into<String>) -> Self {
        let field = field.into();
        FieldError {
            message: format!("{field}: Invalid value: field is immutable"),
            field,
            reason: "FieldValueInvalid",
        }
    }
}

/// A JSON scalar the way Go's field errors print it: strings quoted as `%q`, numbers and
/// booleans bare, null as `"null"`; arrays and objects as JSON.
pub fn show(value: &Value) -> String {
    match value {
        Value::String(s) => go_quote(s),
        Value::Null => "\"null\"".to_string(),
        other => other.to_string(),
    }
}

/// Go's `strconv.Quote`: double quotes, with `\\`, `\"`, control characters and the
/// characters Go does not consider printable escaped; printable Unicode as is.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            '\u{b}' => out.push_str("\\v"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c if is_go_unprintable(c) => {
                if (c as u32) < 0x10000 {
                    out.push_str(&format!("\\u{:04x}", c as u32));
                } else {
                    out.push_str(&format!("\\U{:08x}", c as u32));
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// The non-control characters Go's `strconv.IsPrint` rejects that JSON text may carry.
fn is_go_unprintable(c: char) -> bool {
    matches!(c as u32, 0x80..=0x9f | 0xad | 0x2028 | 0x2029 | 0xfeff | 0x200b..=0x200f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn messages_follow_kubernetes() {
        assert_eq!(
            FieldError::invalid("metadata.name", &json!("A"), "bad").message,
            "metadata.name: Invalid value: \"A\": bad"
        );
        assert_eq!(
            FieldError::invalid("spec.replicas", &json!(-1), "").message,
            "spec.replicas: Invalid value: -1"
        );
        assert_eq!(
            FieldError::not_supported("spec.type", &json!("X"), &["A", "B"]).message,
            "spec.type: Unsupported value: \"X\": supported values: \"A\", \"B\""
        );
        assert_eq!(
            FieldError::too_long("metadata.annotations", 262144).message,
            "metadata.annotations: Too long: may not be more than 262144 bytes"
        );
        assert_eq!(
            FieldError::not_found("spec.containers[0].volumeMounts[0].name", &json!("v")).message,
            "spec.containers[0].volumeMounts[0].name: Not found: \"v\""
        );
        assert_eq!(go_quote("a\"b\\c\u{1}"), "\"a\\\"b\\\\c\\x01\"");
    }
}
