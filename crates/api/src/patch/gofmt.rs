//! How Go's `fmt` prints decoded JSON (`map[string]interface{}` and friends), so that error
//! messages that embed values read as Kubernetes' do: `%v` gives `map[a:1 b:[x y]]`.

use std::fmt::Write;

use serde_json::{Map, Number, Value};

/// Go's dynamic type of a decoded JSON value (numbers decoded preserving integers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GoType {
    Nil,
    Bool,
    Int64,
    Float64,
    String,
    Map,
    Slice,
}

impl GoType {
    pub(crate) fn of(v: &Value) -> GoType {
        match v {
            Value::Null => GoType::Nil,
            Value::Bool(_) => GoType::Bool,
            Value::Number(n) if n.is_i64() => GoType::Int64,
            Value::Number(_) => GoType::Float64,
            Value::String(_) => GoType::String,
            Value::Array(_) => GoType::Slice,
            Value::Object(_) => GoType::Map,
        }
    }

    /// `reflect.Type.String()` (`%!s(<nil>)` for a nil type, as `%s` prints it).
    pub(crate) fn name(self) -> &'static str {
        match self {
            GoType::Nil => "%!s(<nil>)",
            GoType::Bool => "bool",
            GoType::Int64 => "int64",
            GoType::Float64 => "float64",
            GoType::String => "string",
            GoType::Map => "map[string]interface {}",
            GoType::Slice => "[]interface {}",
        }
    }
}

/// `%v` of a decoded JSON value.
#[cfg(test)]
pub(crate) fn v(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value, false);
    out
}

/// `%s` of a decoded JSON value (non-strings print as `%!s(int64=5)`).
pub(crate) fn s(value: &Value) -> String {
    let mut out = String::new();
    write_value(&mut out, value, true);
    out
}

/// `%v` of several lists printed as one Go slice of slices (`[[a b] [c]]`).
pub(crate) fn v_lists(lists: &[&[Value]]) -> String {
    let mut out = String::from("[");
    for (i, l) in lists.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        write_slice(&mut out, l, false);
    }
    out.push(']');
    out
}

pub(crate) fn v_slice(list: &[Value]) -> String {
    let mut out = String::new();
    write_slice(&mut out, list, false);
    out
}

fn write_slice(out: &mut String, list: &[Value], verb_s: bool) {
    out.push('[');
    for (i, x) in list.iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        write_value(out, x, verb_s);
    }
    out.push(']');
}

fn write_value(out: &mut String, value: &Value, verb_s: bool) {
    match value {
        Value::Null => out.push_str(if verb_s { "%!s(<nil>)" } else { "<nil>" }),
        Value::Bool(b) => {
            if verb_s {
                let _ = write!(out, "%!s(bool={b})");
            } else {
                let _ = write!(out, "{b}");
            }
        }
        Value::Number(n) => {
            let (ty, text) = number(n);
            if verb_s {
                let _ = write!(out, "%!s({ty}={text})");
            } else {
                out.push_str(&text);
            }
        }
        Value::String(s) => out.push_str(s),
        Value::Array(a) => write_slice(out, a, verb_s),
        Value::Object(o) => write_map(out, o, verb_s),
    }
}

fn write_map(out: &mut String, o: &Map<String, Value>, verb_s: bool) {
    out.push_str("map[");
    let mut keys: Vec<&String> = o.keys().collect();
    keys.sort_unstable();
    for (i, k) in keys.into_iter().enumerate() {
        if i > 0 {
            out.push(' ');
        }
        out.push_str(k);
        out.push(':');
        write_value(out, &o[k], verb_s);
    }
    out.push(']');
}

/// `%v` of a decoded JSON object.
pub(crate) fn v_map(o: &Map<String, Value>) -> String {
    let mut out = String::new();
    write_map(&mut out, o, false);
    out
}

fn number(n: &Number) -> (&'static str, String) {
    if let Some(i) = n.as_i64() {
        ("int64", i.to_string())
    } else {
        ("float64", float(n.as_f64().unwrap_or(0.0)))
    }
}

/// Go's `%v` of a float64 (strconv 'g' with the shortest precision).
pub(crate) fn float(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    // Shortest round-trip digits and exponent from Rust's formatter: "d.ddde±x".
    let sci = format!("{:e}", f.abs());
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let nd = digits.len() as i32;
    let dp = exp + 1;
    let mut eprec = 6;
    if eprec > nd && nd >= dp {
        eprec = nd;
    }
    let mut out = String::new();
    if f < 0.0 {
        out.push('-');
    }
    if exp < -4 || exp >= eprec {
        out.push_str(&digits[..1]);
        if nd > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    } else if dp <= 0 {
        out.push_str("0.");
        out.push_str(&"0".repeat((-dp) as usize));
        out.push_str(&digits);
    } else if dp >= nd {
        out.push_str(&digits);
        out.push_str(&"0".repeat((dp - nd) as usize));
    } else {
        out.push_str(&digits[..dp as usize]);
        out.push('.');
        out.push_str(&digits[dp as usize..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_print_like_go_fmt_v() {
        let cases = [
            (json!(null), "<nil>"),
            (json!(true), "true"),
            (json!(5), "5"),
            (json!(-5), "-5"),
            (json!(1.5), "1.5"),
            (json!("x y"), "x y"),
            (json!(["a", 1, null]), "[a 1 <nil>]"),
            (json!({"b": {"c": [1]}, "a": "x"}), "map[a:x b:map[c:[1]]]"),
            (json!({}), "map[]"),
        ];
        for (value, want) in cases {
            assert_eq!(v(&value), want, "{value}");
        }
        assert_eq!(s(&json!("delete")), "delete");
        assert_eq!(s(&json!(5)), "%!s(int64=5)");
        assert_eq!(s(&json!(true)), "%!s(bool=true)");
        assert_eq!(s(&json!(null)), "%!s(<nil>)");
        assert_eq!(
            v_lists(&[&[json!("a")], &[json!({"x": 1})]]),
            "[[a] [map[x:1]]]"
        );
    }

    #[test]
    fn floats_print_like_go() {
        let cases = [
            (1.5, "1.5"),
            (100000.0, "100000"),
            (1000000.0, "1e+06"),
            (123456789.0, "1.23456789e+08"),
            (1234567.0, "1.234567e+06"),
            (123.0, "123"),
            (0.0001, "0.0001"),
            (0.00001, "1e-05"),
            (-2.5, "-2.5"),
            (1e21, "1e+21"),
            (0.0, "0"),
        ];
        for (f, want) in cases {
            assert_eq!(float(f), want, "{f}");
        }
    }
}
