//! Small accessors for CRD objects and schemas in their JSON form, reading fields the way
//! Go's decoding into the apiextensions types sees them (missing, null and wrong-typed fields
//! are zero values).

use serde_json::{Map, Value};

/// A string field ("" when missing or not a string).
pub(crate) fn text<'a>(m: &'a Map<String, Value>, k: &str) -> &'a str {
    m.get(k).and_then(Value::as_str).unwrap_or("")
}

/// A string field of a value that may not be an object.
pub(crate) fn vtext<'a>(v: &'a Value, k: &str) -> &'a str {
    v.get(k).and_then(Value::as_str).unwrap_or("")
}

/// A boolean field that is `true`.
pub(crate) fn flag(m: &Map<String, Value>, k: &str) -> bool {
    m.get(k).and_then(Value::as_bool) == Some(true)
}

/// A field that is present and not null (a non-nil pointer or slice in Go).
pub(crate) fn present(m: &Map<String, Value>, k: &str) -> bool {
    m.get(k).is_some_and(|v| !v.is_null())
}

/// An array field (empty when missing).
pub(crate) fn arr<'a>(m: &'a Map<String, Value>, k: &str) -> &'a [Value] {
    m.get(k)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// An array field of a value that may not be an object.
pub(crate) fn varr<'a>(v: &'a Value, k: &str) -> &'a [Value] {
    v.get(k)
        .and_then(Value::as_array)
        .map_or(&[], Vec::as_slice)
}

/// An object field.
pub(crate) fn obj<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a Map<String, Value>> {
    m.get(k).and_then(Value::as_object)
}

/// An object field with at least one key.
pub(crate) fn non_empty_map<'a>(
    m: &'a Map<String, Value>,
    k: &str,
) -> Option<&'a Map<String, Value>> {
    obj(m, k).filter(|o| !o.is_empty())
}

/// A map's entries in key order (Go iterates maps in random order; this is one of them).
pub(crate) fn sorted(m: Option<&Map<String, Value>>) -> Vec<(&String, &Value)> {
    let mut entries: Vec<(&String, &Value)> = m.map(|m| m.iter().collect()).unwrap_or_default();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries
}

/// Semantic equality of two optional JSON values the way `apiequality.Semantic.DeepEqual`
/// compares the decoded Go structs: null, missing and empty lists are the same.
pub(crate) fn semantic_eq(a: Option<&Value>, b: Option<&Value>) -> bool {
    fn empty(v: Option<&Value>) -> bool {
        match v {
            None | Some(Value::Null) => true,
            Some(Value::Array(a)) => a.is_empty(),
            _ => false,
        }
    }
    if empty(a) || empty(b) {
        return empty(a) && empty(b);
    }
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => x
            .keys()
            .chain(y.keys())
            .all(|k| semantic_eq(x.get(k), y.get(k))),
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| semantic_eq(Some(p), Some(q)))
        }
        (x, y) => x == y,
    }
}
