//! JSON values as structured-merge-diff sees them: its total order (used to sort set members
//! and list keys), its equality (integers and floats compare numerically), and the three
//! renderings Kubernetes produces from Go: `fmt`'s `%v` (field paths in conflict messages),
//! the JSON inside FieldsV1 keys (json-iterator, HTML-escaped), and `encoding/json` (manager
//! identifiers and the last-applied annotation, with sorted keys).

use std::cmp::Ordering;
use std::fmt::Write;

use serde_json::{Map, Number, Value};

/// SMD's rank of a value's kind: numbers, strings, booleans, lists, maps, null.
fn rank(v: &Value) -> u8 {
    match v {
        Value::Number(_) => 0,
        Value::String(_) => 1,
        Value::Bool(_) => 2,
        Value::Array(_) => 3,
        Value::Object(_) => 4,
        Value::Null => 5,
    }
}

/// An integer as i128 (serde_json holds i64 or u64), or None for a float.
fn int(n: &Number) -> Option<i128> {
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
}

fn float(n: &Number) -> f64 {
    n.as_f64().unwrap_or(0.0)
}

fn compare_numbers(a: &Number, b: &Number) -> Ordering {
    match (int(a), int(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        _ => float(a).partial_cmp(&float(b)).unwrap_or(Ordering::Equal),
    }
}

/// SMD's total order over values (`value.Compare`): kinds in [`rank`] order, numbers
/// numerically, strings bytewise, lists and maps lexically.
pub(crate) fn compare(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y),
        (Value::String(x), Value::String(y)) => x.as_bytes().cmp(y.as_bytes()),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => compare_lists(x, y),
        (Value::Object(x), Value::Object(y)) => compare_maps(x, y),
        _ => rank(a).cmp(&rank(b)),
    }
}

fn compare_lists(a: &[Value], b: &[Value]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let c = compare(x, y);
        if c != Ordering::Equal {
            return c;
        }
    }
    a.len().cmp(&b.len())
}

/// Maps compare key by key over the sorted union of their keys, as SMD's `MapCompare`.
fn compare_maps(a: &Map<String, Value>, b: &Map<String, Value>) -> Ordering {
    let mut keys: Vec<&String> = a.keys().chain(b.keys()).collect();
    keys.sort();
    keys.dedup();
    for (i, k) in keys.into_iter().enumerate() {
        let c = if i == a.len() {
            Ordering::Less
        } else if i == b.len() {
            Ordering::Greater
        } else {
            match (a.get(k), b.get(k)) {
                (None, _) => Ordering::Greater,
                (_, None) => Ordering::Less,
                (Some(x), Some(y)) => compare(x, y),
            }
        };
        if c != Ordering::Equal {
            return c;
        }
    }
    Ordering::Equal
}

/// SMD's equality (`value.Equals`): like JSON equality, except that an integer equals a float
/// of the same value.
pub(crate) fn equals(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (int(x), int(y)) {
            (Some(i), Some(j)) => i == j,
            _ => float(x) == float(y),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| equals(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| equals(v, w)))
        }
        _ => a == b,
    }
}

/// Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`): the shortest digits, in
/// exponent form when the decimal exponent is below -4 or at least 6.
pub(crate) fn go_float_v(f: f64) -> String {
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
        return if f.is_sign_negative() {
            "-0".into()
        } else {
            "0".into()
        };
    }
    let sci = format!("{f:e}");
    let exp: i32 = sci
        .split_once('e')
        .and_then(|(_, e)| e.parse().ok())
        .unwrap_or(0);
    if (-4..6).contains(&exp) {
        format!("{f}")
    } else {
        go_exponent(&sci, true)
    }
}

/// Rewrite Rust's `1.5e-7` as Go writes exponents: a sign always, and at least two digits
/// (`%v`) or the digits as they are (JSON encoders strip a leading zero).
fn go_exponent(rust: &str, two_digits: bool) -> String {
    let Some((mantissa, exp)) = rust.split_once('e') else {
        return rust.to_string();
    };
    let (sign, digits) = match exp.strip_prefix('-') {
        Some(d) => ('-', d),
        None => ('+', exp),
    };
    if two_digits && digits.len() < 2 {
        format!("{mantissa}e{sign}0{digits}")
    } else {
        format!("{mantissa}e{sign}{digits}")
    }
}

/// A float as Go's JSON encoders write it: plain decimal between 1e-6 and 1e21, else the
/// exponent form (`1e+21`, `1e-7`).
pub(crate) fn go_json_float(f: f64) -> String {
    if !f.is_finite() {
        return "null".into();
    }
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        go_exponent(&format!("{f:e}"), false)
    } else {
        format!("{f}")
    }
}

pub(crate) use crate::field::go_quote;

/// SMD's `value.ToString` (Go's `%v` of the value), as conflict paths show key values.
pub(crate) fn to_go_string(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match int(n) {
            Some(i) => i.to_string(),
            None => go_float_v(float(n)),
        },
        Value::String(s) => go_quote(s),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(to_go_string).collect();
            format!("[{}]", parts.join(","))
        }
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{k}={}", to_go_string(v)))
            .collect(),
    }
}

/// How a Go JSON encoder escapes control characters: `encoding/json` (Go 1.22+) writes
/// `\b` and `\f` short; json-iterator writes every control as `\u00XX`.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Escaper {
    EncodingJson,
    JsonIter,
}

/// Write `s` as a JSON string the way Go does: HTML-safe (`<`, `>`, `&` as `\u003c`...) and
/// with U+2028/U+2029 escaped.
pub(crate) fn write_go_json_string(out: &mut String, s: &str, esc: Escaper) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' if esc == Escaper::EncodingJson => out.push_str("\\b"),
            '\u{c}' if esc == Escaper::EncodingJson => out.push_str("\\f"),
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Write a value as Go's JSON encoders do (maps with sorted keys, as Go sorts map keys).
pub(crate) fn write_go_json(out: &mut String, v: &Value, esc: Escaper) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => match int(n) {
            Some(i) => {
                let _ = write!(out, "{i}");
            }
            None => out.push_str(&go_json_float(float(n))),
        },
        Value::String(s) => write_go_json_string(out, s, esc),
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json(out, item, esc);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            for (i, (k, item)) in m.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json_string(out, k, esc);
                out.push(':');
                write_go_json(out, item, esc);
            }
            out.push('}');
        }
    }
}

/// A value encoded by Go's `encoding/json`.
pub(crate) fn go_json(v: &Value) -> String {
    let mut out = String::new();
    write_go_json(&mut out, v, Escaper::EncodingJson);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn order_ranks_kinds_then_values() {
        let sorted = [
            json!(-1.5),
            json!(1),
            json!(1.5),
            json!(2),
            json!("a"),
            json!("b"),
            json!(false),
            json!(true),
            json!([1]),
            json!([1, 2]),
            json!({"a": 1}),
            Value::Null,
        ];
        for w in sorted.windows(2) {
            assert_eq!(compare(&w[0], &w[1]), Ordering::Less, "{} < {}", w[0], w[1]);
            assert_eq!(compare(&w[1], &w[0]), Ordering::Greater);
        }
        assert_eq!(compare(&json!(1), &json!(1.0)), Ordering::Equal);
    }

    #[test]
    fn equality_is_numeric_across_ints_and_floats() {
        assert!(equals(&json!(1), &json!(1.0)));
        assert!(equals(&json!({"a": [1, 2.0]}), &json!({"a": [1.0, 2]})));
        assert!(!equals(&json!({"a": 1}), &json!({"a": 1, "b": 2})));
        assert!(!equals(&json!("1"), &json!(1)));
    }

    #[test]
    fn go_v_formatting() {
        assert_eq!(to_go_string(&json!("nginx")), "\"nginx\"");
        assert_eq!(to_go_string(&json!("a\"b\n")), "\"a\\\"b\\n\"");
        assert_eq!(to_go_string(&json!(80)), "80");
        assert_eq!(to_go_string(&json!(3.5)), "3.5");
        assert_eq!(to_go_string(&json!(1e21)), "1e+21");
        assert_eq!(to_go_string(&json!(0.00001)), "1e-05");
        assert_eq!(to_go_string(&json!(1e6)), "1e+06");
        assert_eq!(to_go_string(&json!(123456.5)), "123456.5");
        assert_eq!(to_go_string(&json!(true)), "true");
        assert_eq!(to_go_string(&Value::Null), "null");
        assert_eq!(to_go_string(&json!([1, "a"])), "[1,\"a\"]");
    }

    #[test]
    fn go_json_escapes_html_and_sorts_keys() {
        assert_eq!(
            go_json(&json!({"b": "<&>", "a": 1.0, "c": 1e-7})),
            r#"{"a":1,"b":"\u003c\u0026\u003e","c":1e-7}"#
        );
        assert_eq!(go_json_float(1e21), "1e+21");
        assert_eq!(go_json_float(2.75), "2.75");
        let mut s = String::new();
        write_go_json_string(&mut s, "\u{8}", Escaper::JsonIter);
        assert_eq!(s, "\"\\u0008\"");
    }
}
