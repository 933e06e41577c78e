//! The name and value rules that label selectors check, with Kubernetes' wording, plus the small
//! pieces of Go formatting (`%q`, field paths, aggregated errors) the messages are built from.
//!
//! These are hand-written matchers: no regular expression is compiled per call.

use std::fmt;

/// Kubernetes' `IsDNS1123Subdomain`: the problems with `value`, empty when it is valid.
pub fn dns1123_subdomain_errors(value: &str) -> Vec<String> {
    crate::validation::names::dns1123_subdomain(value)
}

/// Kubernetes' `IsQualifiedName` (label keys, annotation keys): the problems with `value`,
/// empty when it is valid.
pub fn qualified_name_errors(value: &str) -> Vec<String> {
    crate::validation::names::qualified_name(value)
}

/// Kubernetes' `IsValidLabelValue`: the problems with `value`, empty when it is valid.
pub fn label_value_errors(value: &str) -> Vec<String> {
    crate::validation::names::label_value(value)
}

pub use crate::field::go_quote;

/// The reason a [`FieldError`] reports, as Kubernetes' `field.ErrorType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldErrorType {
    /// `FieldValueInvalid`, "Invalid value".
    Invalid,
    /// `FieldValueRequired`, "Required value".
    Required,
    /// `FieldValueForbidden`, "Forbidden".
    Forbidden,
}

impl FieldErrorType {
    /// The machine-readable reason (a `StatusCause.reason`).
    pub fn reason(self) -> &'static str {
        match self {
            FieldErrorType::Invalid => "FieldValueInvalid",
            FieldErrorType::Required => "FieldValueRequired",
            FieldErrorType::Forbidden => "FieldValueForbidden",
        }
    }

    fn text(self) -> &'static str {
        match self {
            FieldErrorType::Invalid => "Invalid value",
            FieldErrorType::Required => "Required value",
            FieldErrorType::Forbidden => "Forbidden",
        }
    }
}

/// A value as a Kubernetes field error prints it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadValue {
    /// A string, printed quoted (`%q`).
    Str(String),
    /// A list of strings, printed as Go syntax (`[]string{"a"}`); `None` is a nil list.
    Strs(Option<Vec<String>>),
    /// No value printed (Required, Forbidden).
    Omitted,
}

impl fmt::Display for BadValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadValue::Str(s) => f.write_str(&go_quote(s)),
            BadValue::Strs(None) => f.write_str("[]string(nil)"),
            BadValue::Strs(Some(v)) => {
                f.write_str("[]string{")?;
                for (i, s) in v.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    f.write_str(&go_quote(s))?;
                }
                f.write_str("}")
            }
            BadValue::Omitted => Ok(()),
        }
    }
}

/// One field-level validation error, printed as Kubernetes prints a `field.Error`
/// (`spec.selector.matchLabels: Invalid value: "a b": ...`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldError {
    pub error_type: FieldErrorType,
    /// The field path, e.g. `spec.selector.matchExpressions[0].key`.
    pub field: String,
    pub bad_value: BadValue,
    pub detail: String,
}

impl FieldError {
    pub fn invalid(field: impl Into<String>, value: BadValue, detail: impl Into<String>) -> Self {
        FieldError {
            error_type: FieldErrorType::Invalid,
            field: field.into(),
            bad_value: value,
            detail: detail.into(),
        }
    }

    pub fn required(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            error_type: FieldErrorType::Required,
            field: field.into(),
            bad_value: BadValue::Omitted,
            detail: detail.into(),
        }
    }

    pub fn forbidden(field: impl Into<String>, detail: impl Into<String>) -> Self {
        FieldError {
            error_type: FieldErrorType::Forbidden,
            field: field.into(),
            bad_value: BadValue::Omitted,
            detail: detail.into(),
        }
    }

    /// The message without the field name (Kubernetes' `ErrorBody`).
    pub fn body(&self) -> String {
        let mut s = self.error_type.text().to_string();
        if !matches!(self.bad_value, BadValue::Omitted) {
            s.push_str(": ");
            s.push_str(&self.bad_value.to_string());
        }
        if !self.detail.is_empty() {
            s.push_str(": ");
            s.push_str(&self.detail);
        }
        s
    }
}

impl fmt::Display for FieldError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.body())
    }
}

/// Kubernetes' aggregate error text: one message alone, several as `[a, b]`, duplicates dropped.
pub fn aggregate(messages: &[String]) -> String {
    let mut seen: Vec<&str> = Vec::with_capacity(messages.len());
    for m in messages {
        if !seen.contains(&m.as_str()) {
            seen.push(m);
        }
    }
    match seen.len() {
        0 => String::new(),
        1 => seen[0].to_string(),
        _ => format!("[{}]", seen.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NAME_RE: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";

    #[test]
    fn qualified_names_accept_kubernetes_label_keys() {
        for ok in [
            "a",
            "app",
            "App_1.x-y",
            "example.com/name",
            "kubernetes.io/hostname",
            "node-role.kubernetes.io/control-plane",
            "a/b",
            &"x".repeat(63),
        ] {
            assert!(qualified_name_errors(ok).is_empty(), "{ok}");
        }
    }

    #[test]
    fn qualified_name_errors_read_like_kubernetes() {
        let cases: &[(&str, Vec<String>)] = &[
            ("", vec!["name part must be non-empty".into(), NAME_RE.into()]),
            ("-a", vec![NAME_RE.into()]),
            ("a b", vec![NAME_RE.into()]),
            (
                &"x".repeat(64),
                vec!["name part must be no more than 63 characters".into()],
            ),
            ("/a", vec!["prefix part must be non-empty".into()]),
            (
                "Example.com/a",
                vec!["prefix part a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')".into()],
            ),
            (
                "a/b/c",
                vec!["a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')".into()],
            ),
        ];
        for (input, want) in cases {
            assert_eq!(&qualified_name_errors(input), want, "{input:?}");
        }
    }

    #[test]
    fn label_values_may_be_empty_but_not_too_long_or_odd() {
        assert!(label_value_errors("").is_empty());
        assert!(label_value_errors("v1.2_x-y").is_empty());
        assert_eq!(
            label_value_errors("a b"),
            vec!["a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')".to_string()]
        );
        assert_eq!(
            label_value_errors(&"v".repeat(64)),
            vec!["must be no more than 63 characters".to_string()]
        );
    }

    #[test]
    fn go_quote_escapes_like_strconv_quote() {
        assert_eq!(go_quote("a\"b\\c\n\t\u{1}é"), "\"a\\\"b\\\\c\\n\\t\\x01é\"");
    }

    #[test]
    fn field_errors_print_like_kubernetes() {
        let e = FieldError::invalid("key", BadValue::Str("a b".into()), "bad");
        assert_eq!(e.to_string(), "key: Invalid value: \"a b\": bad");
        let e = FieldError::invalid("values", BadValue::Strs(None), "x");
        assert_eq!(e.to_string(), "values: Invalid value: []string(nil): x");
        let e = FieldError::invalid("values", BadValue::Strs(Some(vec!["a".into()])), "x");
        assert_eq!(e.to_string(), "values: Invalid value: []string{\"a\"}: x");
        let e = FieldError::required("s.values", "must be given");
        assert_eq!(e.to_string(), "s.values: Required value: must be given");
        assert_eq!(
            aggregate(&["a".into(), "b".into(), "a".into()]),
            "[a, b]".to_string()
        );
        assert_eq!(aggregate(&["a".into(), "a".into()]), "a".to_string());
    }
}
