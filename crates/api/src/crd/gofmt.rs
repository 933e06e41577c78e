//! How Go prints decoded JSON values (`interface{}` holding `map[string]interface{}`, `int64`,
//! `float64`, ...) in the messages the apiextensions code builds: `%v`, `%#v`, `%T` and the
//! value part of a `field.Error` (`ErrorBody`).

use std::fmt::Write;

use serde_json::{Map, Value};

use crate::field::go_quote;
use crate::patch::gofmt::float;

/// Whether a JSON number decodes to Go's `int64` (else `float64`), as apimachinery's JSON
/// decoding of unstructured objects does.
pub(crate) fn is_int(n: &serde_json::Number) -> bool {
    n.is_i64()
}

/// `%v` of a number as Go prints the decoded `int64` or `float64`.
pub(crate) fn number(n: &serde_json::Number) -> String {
    match n.as_i64() {
        Some(i) => i.to_string(),
        None => float(n.as_f64().unwrap_or(0.0)),
    }
}

/// `%v` of a decoded JSON value: `map[a:1]`, `[x y]`, `<nil>`, strings bare.
pub(crate) fn v(value: &Value) -> String {
    let mut out = String::new();
    write_v(&mut out, value);
    out
}

fn write_v(out: &mut String, value: &Value) {
    match value {
        Value::Null => out.push_str("<nil>"),
        Value::Bool(b) => {
            let _ = write!(out, "{b}");
        }
        Value::Number(n) => out.push_str(&number(n)),
        Value::String(s) => out.push_str(s),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                write_v(out, x);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push_str("map[");
            for (i, k) in sorted_keys(m).into_iter().enumerate() {
                if i > 0 {
                    out.push(' ');
                }
                out.push_str(k);
                out.push(':');
                write_v(out, &m[k]);
            }
            out.push(']');
        }
    }
}

/// `%#v` of a decoded JSON value held in an `interface{}`: `map[string]interface {}{"a":1}`,
/// `[]interface {}{"x"}`, `"s"`, `5`, `<nil>`.
pub(crate) fn sharp_v(value: &Value) -> String {
    let mut out = String::new();
    match value {
        Value::Null => out.push_str("<nil>"),
        other => write_sharp(&mut out, other),
    }
    out
}

fn write_sharp(out: &mut String, value: &Value) {
    match value {
        // Inside a map or slice, a nil interface prints with its type.
        Value::Null => out.push_str("interface {}(nil)"),
        Value::Bool(b) => {
            let _ = write!(out, "{b}");
        }
        Value::Number(n) => out.push_str(&number(n)),
        Value::String(s) => out.push_str(&go_quote(s)),
        Value::Array(a) => {
            out.push_str("[]interface {}{");
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                write_sharp(out, x);
            }
            out.push('}');
        }
        Value::Object(m) => {
            out.push_str("map[string]interface {}{");
            for (i, k) in sorted_keys(m).into_iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push_str(&go_quote(k));
                out.push(':');
                write_sharp(out, &m[k]);
            }
            out.push('}');
        }
    }
}

fn sorted_keys(m: &Map<String, Value>) -> Vec<&String> {
    let mut keys: Vec<&String> = m.keys().collect();
    keys.sort_unstable();
    keys
}

/// `%T` of a decoded JSON value.
pub(crate) fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if is_int(n) => "int64",
        Value::Number(_) => "float64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// The bad value of a `field.Error` holding a decoded JSON value, as `ErrorBody` prints it:
/// strings quoted, numbers and booleans bare, nil as `"null"`, the rest as `%#v`.
pub(crate) fn shown(value: &Value) -> String {
    match value {
        Value::Null => "\"null\"".to_string(),
        Value::String(s) => go_quote(s),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number(n),
        other => sharp_v(other),
    }
}

/// `[]string{"a", "b"}` for a list of strings (`[]string(nil)` when `None`).
pub(crate) fn string_slice<'a>(items: Option<impl IntoIterator<Item = &'a str>>) -> String {
    match items {
        None => "[]string(nil)".to_string(),
        Some(items) => {
            let body: Vec<String> = items.into_iter().map(go_quote).collect();
            format!("[]string{{{}}}", body.join(", "))
        }
    }
}

/// `%v` of a `[]string`: `[a b]`.
pub(crate) fn v_strings<S: AsRef<str>>(items: &[S]) -> String {
    let body: Vec<&str> = items.iter().map(AsRef::as_ref).collect();
    format!("[{}]", body.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_print_like_go() {
        assert_eq!(
            v(&json!({"b": [1, "x"], "a": null})),
            "map[a:<nil> b:[1 x]]"
        );
        assert_eq!(
            sharp_v(&json!({"b": [1, "x"], "a": null})),
            "map[string]interface {}{\"a\":interface {}(nil), \"b\":[]interface {}{1, \"x\"}}"
        );
        assert_eq!(sharp_v(&json!({})), "map[string]interface {}{}");
        assert_eq!(shown(&json!(null)), "\"null\"");
        assert_eq!(shown(&json!(1.5)), "1.5");
        assert_eq!(shown(&json!(1e6)), "1e+06");
        assert_eq!(shown(&json!("a")), "\"a\"");
        assert_eq!(type_name(&json!(1.0)), "float64");
        assert_eq!(type_name(&json!(1)), "int64");
        assert_eq!(string_slice(Some(["a", "b"])), "[]string{\"a\", \"b\"}");
        assert_eq!(string_slice(None::<[&str; 0]>), "[]string(nil)");
        assert_eq!(v_strings(&["a", "b"]), "[a b]");
    }
}
