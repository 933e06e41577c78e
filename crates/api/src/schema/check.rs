//! Type checking a body against a schema, with the messages Kubernetes' JSON decoding gives for
//! built-in types: `json: cannot unmarshal string into Go struct field
//! ContainerPort.spec.containers.ports.containerPort of type int32`.
//!
//! Go names the innermost struct holding the field and the field's path by JSON names only
//! (no indices, no map keys); the Go type is derived from the schema (`int32`, `[]v1.Container`,
//! `map[string]string`, `v1.PodSpec`, ...).

use std::fmt::Write;

use serde_json::{Number, Value};

use super::prune::{push_index, push_key};
use super::{AdditionalProperties, Schema, SchemaRef, Special, Type};

/// A value whose JSON type does not fit the schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypeError {
    /// Where: `spec.containers[0].ports[0].containerPort` (map keys as `.key`).
    pub path: String,
    /// What, as Kubernetes' decoder says it.
    pub message: String,
}

impl std::fmt::Display for TypeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

pub(super) fn check(root: SchemaRef<'_>, value: &Value) -> Vec<TypeError> {
    let mut c = Checker {
        path: String::with_capacity(64),
        go_path: String::with_capacity(64),
        errors: Vec::new(),
    };
    let struct_name = root.schema().short_name().unwrap_or("");
    c.value(root, value, struct_name);
    c.errors
}

struct Checker {
    path: String,
    /// Struct field names only, dot-separated, as Go's decoder reports them.
    go_path: String,
    errors: Vec<TypeError>,
}

/// Go's name for a JSON value's kind in decoding errors.
fn kind_of(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The Go type a schema node decodes into, as `reflect.Type.String()` prints it.
fn go_type(at: SchemaRef<'_>, out: &mut String) {
    let s = at.schema();
    if let Some(name) = &s.name {
        // "io.k8s.api.core.v1.PodSpec" → "v1.PodSpec"
        let mut parts = name.rsplitn(3, '.');
        let (last, pkg) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
        if !pkg.is_empty() {
            out.push_str(pkg);
            out.push('.');
        }
        out.push_str(last);
        return;
    }
    scalar_go_type(at, out);
}

/// Like [`go_type`], but a named scalar (Time, IntOrString) is the type its own decoder uses.
fn scalar_go_type(at: SchemaRef<'_>, out: &mut String) {
    let s = at.schema();
    if s.int_or_string {
        out.push_str("int32");
        return;
    }
    match s.ty {
        Some(Type::String) if s.format.as_deref() == Some("byte") => out.push_str("[]uint8"),
        Some(Type::String) => out.push_str("string"),
        Some(Type::Integer) => out.push_str(int_type(s)),
        Some(Type::Number) if s.format.as_deref() == Some("float") => out.push_str("float32"),
        Some(Type::Number) => out.push_str("float64"),
        Some(Type::Boolean) => out.push_str("bool"),
        Some(Type::Array) => {
            out.push_str("[]");
            match at.items() {
                Some(i) => go_type(i, out),
                None => out.push_str("interface {}"),
            }
        }
        Some(Type::Object) => match at.additional_properties() {
            Some(v) if s.properties.is_empty() => {
                out.push_str("map[string]");
                go_type(v, out);
            }
            _ => out.push_str("map[string]interface {}"),
        },
        None => out.push_str("interface {}"),
    }
}

fn int_type(s: &Schema) -> &'static str {
    match s.format.as_deref() {
        Some("int32") => "int32",
        _ => "int64",
    }
}

/// Whether a JSON number fits the integer type (Go parses the literal: no fraction, no exponent,
/// in range).
fn fits_int(n: &Number, int32: bool) -> bool {
    if let Some(i) = n.as_i64() {
        return !int32 || i32::try_from(i).is_ok();
    }
    false
}

impl Checker {
    fn error(&mut self, struct_name: &str, value_desc: &str, at: SchemaRef<'_>) {
        let mut message = format!("json: cannot unmarshal {value_desc} into Go ");
        if self.go_path.is_empty() {
            message.push_str("value of type ");
        } else {
            let _ = write!(
                message,
                "struct field {struct_name}.{} of type ",
                self.go_path
            );
        }
        scalar_go_type_or_named(at, &mut message);
        self.errors.push(TypeError {
            path: self.path.clone(),
            message,
        });
    }

    fn raw_error(&mut self, message: String) {
        self.errors.push(TypeError {
            path: self.path.clone(),
            message,
        });
    }

    fn value(&mut self, at: SchemaRef<'_>, v: &Value, struct_name: &str) {
        if v.is_null() {
            return;
        }
        let s = at.schema();
        if s.special == Special::Quantity {
            return self.quantity(v);
        }
        if s.int_or_string || s.special == Special::IntOrString {
            match v {
                Value::String(_) => {}
                Value::Number(n) if fits_int(n, true) => {}
                Value::Number(n) => self.error(struct_name, &format!("number {n}"), at),
                other => self.error(struct_name, kind_of(other), at),
            }
            return;
        }
        match s.ty {
            None => {
                // Untyped: anything, unless alternatives say which shapes are allowed.
                let set = at.schemas();
                let mut alts = s.one_of.iter().chain(&s.any_of).map(|id| set.get(*id));
                let Some(first) = alts.next() else { return };
                if accepts(first.schema(), v) {
                    return self.value(first, v, struct_name);
                }
                match alts.find(|a| accepts(a.schema(), v)) {
                    Some(alt) => self.value(alt, v, struct_name),
                    None => self.error(struct_name, kind_of(v), first),
                }
            }
            Some(Type::String) => match v {
                Value::String(text) if s.format.as_deref() == Some("byte") => {
                    if let Err(at_byte) = check_base64(text.as_bytes()) {
                        self.raw_error(format!("illegal base64 data at input byte {at_byte}"));
                    }
                }
                Value::String(_) => {}
                other => self.error(struct_name, kind_of(other), at),
            },
            Some(Type::Integer) => match v {
                Value::Number(n) if fits_int(n, int_type(s) == "int32") => {}
                Value::Number(n) => self.error(struct_name, &format!("number {n}"), at),
                other => self.error(struct_name, kind_of(other), at),
            },
            Some(Type::Number) => {
                if !v.is_number() {
                    self.error(struct_name, kind_of(v), at)
                }
            }
            Some(Type::Boolean) => {
                if !v.is_boolean() {
                    self.error(struct_name, kind_of(v), at)
                }
            }
            Some(Type::Array) => {
                let Value::Array(items) = v else {
                    return self.error(struct_name, kind_of(v), at);
                };
                let Some(item_schema) = at.items() else {
                    return;
                };
                let len = self.path.len();
                for (i, item) in items.iter().enumerate() {
                    push_index(&mut self.path, i);
                    self.value(item_schema, item, struct_name);
                    self.path.truncate(len);
                }
            }
            Some(Type::Object) => {
                let Value::Object(map) = v else {
                    return self.error(struct_name, kind_of(v), at);
                };
                let set = at.schemas();
                // Fields of a struct name that struct; map values keep the enclosing one.
                let inner = s.short_name().unwrap_or(struct_name);
                let (len, go_len) = (self.path.len(), self.go_path.len());
                for (key, field) in map {
                    if let Some(id) = s.properties.get(key) {
                        push_key(&mut self.path, key);
                        push_key(&mut self.go_path, key);
                        self.value(set.get(id), field, inner);
                    } else if let AdditionalProperties::Schema(id) = s.additional_properties {
                        push_key(&mut self.path, key);
                        self.value(set.get(id), field, struct_name);
                    } else {
                        continue;
                    }
                    self.path.truncate(len);
                    self.go_path.truncate(go_len);
                }
            }
        }
    }

    fn quantity(&mut self, v: &Value) {
        let ok = match v {
            Value::String(s) => match parse_quantity(s) {
                Ok(()) => true,
                Err(QuantityError::Suffix) => {
                    return self.raw_error("unable to parse quantity's suffix".to_string())
                }
                Err(QuantityError::Format) => false,
            },
            Value::Number(_) => true,
            _ => false,
        };
        if !ok {
            self.raw_error(
                "quantities must match the regular expression \
                 '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
                    .to_string(),
            );
        }
    }
}

/// The type named in a mismatch at a node: named scalars decode as their underlying type.
fn scalar_go_type_or_named(at: SchemaRef<'_>, out: &mut String) {
    let s = at.schema();
    if s.name.is_some() && matches!(s.ty, Some(Type::Object)) {
        go_type(at, out)
    } else {
        scalar_go_type(at, out)
    }
}

fn accepts(s: &Schema, v: &Value) -> bool {
    matches!(
        (s.ty, v),
        (None, _)
            | (Some(Type::String), Value::String(_))
            | (Some(Type::Integer | Type::Number), Value::Number(_))
            | (Some(Type::Boolean), Value::Bool(_))
            | (Some(Type::Array), Value::Array(_))
            | (Some(Type::Object), Value::Object(_))
    )
}

/// Standard base64 with padding, newlines ignored, as Go's `encoding/json` decodes `[]byte`.
/// On failure, the offset of the first offending byte.
pub(crate) fn check_base64(src: &[u8]) -> Result<(), usize> {
    fn is_b64(c: u8) -> bool {
        c.is_ascii_alphanumeric() || c == b'+' || c == b'/'
    }
    let skip_newlines = |mut i: usize| {
        while i < src.len() && (src[i] == b'\n' || src[i] == b'\r') {
            i += 1;
        }
        i
    };
    let mut si = 0;
    loop {
        // One quantum of up to four symbols.
        let mut j = 0;
        while j < 4 {
            if si == src.len() {
                return match j {
                    0 => Ok(()),
                    // A lone symbol, or missing padding.
                    _ => Err(si - j),
                };
            }
            let c = src[si];
            si += 1;
            if is_b64(c) {
                j += 1;
                continue;
            }
            if c == b'\n' || c == b'\r' {
                continue;
            }
            if c != b'=' {
                return Err(si - 1);
            }
            // Padding: only after two or three symbols.
            match j {
                0 | 1 => return Err(si - 1),
                2 => {
                    si = skip_newlines(si);
                    if si == src.len() {
                        return Err(src.len());
                    }
                    if src[si] != b'=' {
                        return Err(si - 1);
                    }
                    si += 1;
                }
                _ => {}
            }
            si = skip_newlines(si);
            return if si < src.len() { Err(si) } else { Ok(()) };
        }
    }
}

enum QuantityError {
    Format,
    Suffix,
}

/// The syntax of a resource quantity: a signed decimal number followed by a binary suffix
/// (Ki..Ei), a decimal suffix (n, u, m, "", k, M, G, T, P, E) or a decimal exponent (e3, E-2).
fn parse_quantity(s: &str) -> Result<(), QuantityError> {
    let b = s.as_bytes();
    let mut i = 0;
    if i < b.len() && (b[i] == b'+' || b[i] == b'-') {
        i += 1;
    }
    let (mut digits, mut dots) = (0, 0);
    while i < b.len() && (b[i].is_ascii_digit() || b[i] == b'.') {
        if b[i] == b'.' {
            dots += 1;
        } else {
            digits += 1;
        }
        i += 1;
    }
    if digits == 0 || dots > 1 {
        return Err(QuantityError::Format);
    }
    let suffix = &s[i..];
    // The suffix must at least fit the loose pattern before it is looked at.
    let sb = suffix.as_bytes();
    let mut k = 0;
    while k < sb.len() && b"eEinumkKMGTP".contains(&sb[k]) {
        k += 1;
    }
    if k < sb.len() && (sb[k] == b'+' || sb[k] == b'-') {
        k += 1;
    }
    while k < sb.len() && sb[k].is_ascii_digit() {
        k += 1;
    }
    if k != sb.len() {
        return Err(QuantityError::Format);
    }
    let known = matches!(
        suffix,
        "" | "n"
            | "u"
            | "m"
            | "k"
            | "M"
            | "G"
            | "T"
            | "P"
            | "E"
            | "Ki"
            | "Mi"
            | "Gi"
            | "Ti"
            | "Pi"
            | "Ei"
    ) || ((suffix.starts_with('e') || suffix.starts_with('E')) && {
        let rest = suffix[1..].trim_start_matches(['+', '-']);
        !rest.is_empty()
            && rest.bytes().all(|c| c.is_ascii_digit())
            && suffix[1..].len() - rest.len() <= 1
    });
    if known {
        Ok(())
    } else {
        Err(QuantityError::Suffix)
    }
}

#[cfg(test)]
mod unit {
    use super::*;

    #[test]
    fn base64_offsets_follow_go() {
        assert_eq!(check_base64(b""), Ok(()));
        assert_eq!(check_base64(b"aGVsbG8="), Ok(()));
        assert_eq!(check_base64(b"aGVs\nbG8="), Ok(()));
        assert_eq!(check_base64(b"aGVsbA=="), Ok(()));
        assert_eq!(check_base64(b"hello!"), Err(5));
        assert_eq!(check_base64(b"abc"), Err(0));
        assert_eq!(check_base64(b"abcde"), Err(4));
        assert_eq!(check_base64(b"ab="), Err(3));
        assert_eq!(check_base64(b"a==="), Err(1));
        assert_eq!(check_base64(b"aGVsbG8=x"), Err(8));
    }

    #[test]
    fn quantity_syntax() {
        for ok in [
            "1",
            "100m",
            "1.5Gi",
            "0.5",
            "+1",
            "-2k",
            "1e3",
            "2E-2",
            "128974848",
            "1Ei",
        ] {
            assert!(parse_quantity(ok).is_ok(), "{ok}");
        }
        assert!(matches!(parse_quantity("abc"), Err(QuantityError::Format)));
        assert!(matches!(
            parse_quantity("1.2.3"),
            Err(QuantityError::Format)
        ));
        assert!(matches!(parse_quantity(""), Err(QuantityError::Format)));
        assert!(matches!(parse_quantity("1Ki1"), Err(QuantityError::Suffix)));
        assert!(matches!(parse_quantity("1mi"), Err(QuantityError::Suffix)));
    }
}
