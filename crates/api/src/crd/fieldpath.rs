//! `cel.ValidFieldPath`: resolving a JSON path like `.spec.foo['bar']` against a structural
//! schema (for `selectableFields` and the `fieldPath` of `x-kubernetes-validations`).

use serde_json::Value;

use super::json::non_empty_map;

/// A resolved field path: its `field.Path` form (`spec.foo[bar]`), its first element and the
/// schema it points at (`None` under `additionalProperties: true`).
#[derive(Debug)]
pub(crate) struct Resolved<'a> {
    pub path: String,
    pub root: String,
    pub schema: Option<&'a Value>,
}

/// Split into `.`, `[`, `]` and the text between them; single-quoted strings are one token.
fn tokens(s: &str) -> Vec<&str> {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\'' {
            let mut j = i + 1;
            while j < b.len() && !(b[j] == b'\'' && b[j - 1] != b'\\') {
                j += 1;
            }
            let end = (j + 1).min(b.len());
            out.push(&s[i..end]);
            i = end;
            continue;
        }
        if matches!(b[i], b'.' | b'[' | b']') {
            out.push(&s[i..i + 1]);
            i += 1;
            continue;
        }
        let mut j = i;
        while j < b.len() && !matches!(b[j], b'.' | b'[' | b']') {
            j += 1;
        }
        out.push(&s[i..j]);
        i = j;
    }
    out
}

fn unescape_single_quote(s: &str) -> Result<String, String> {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        let Some(d) = chars.next() else {
            out.push('\\');
            break;
        };
        out.push(match d {
            'a' => '\u{7}',
            'b' => '\u{8}',
            'f' => '\u{c}',
            'n' => '\n',
            'r' => '\r',
            't' => '\t',
            'v' => '\u{b}',
            '\'' => '\'',
            '\\' => '\\',
            other => return Err(format!("invalid escape char \\{other}")),
        });
    }
    Ok(out)
}

/// Resolve `json_path` against `schema` (a structural schema's JSON).
pub(crate) fn valid_field_path<'a>(
    json_path: &str,
    schema: &'a Value,
    allow_array: bool,
) -> Result<Resolved<'a>, String> {
    let mut current: Option<&'a Value> = Some(schema);
    let mut path = String::new();
    let mut root: Option<String> = None;
    let toks = tokens(json_path);
    let mut it = toks.into_iter();
    while let Some(tok) = it.next() {
        let name = match tok {
            "[" => {
                if !allow_array {
                    return Err("array notation is not allowed".into());
                }
                let t = it.next().ok_or("unexpected end of JSON path")?;
                if t.len() < 2 || !t.starts_with('\'') || !t.ends_with('\'') {
                    return Err(format!("expected single quoted string but got {t}"));
                }
                let name = unescape_single_quote(&t[1..t.len() - 1])
                    .map_err(|e| format!("invalid string literal: {e}"))?;
                step(&mut current, &mut path, &mut root, &name)?;
                let close = it.next().ok_or("unexpected end of JSON path")?;
                if close != "]" {
                    return Err(format!("expected ] but got {close}"));
                }
                continue;
            }
            "." => it.next().ok_or("unexpected end of JSON path")?.to_string(),
            other => return Err(format!("expected [ or . but got: {other}")),
        };
        step(&mut current, &mut path, &mut root, &name)?;
    }
    Ok(Resolved {
        path,
        root: root.unwrap_or_default(),
        schema: current,
    })
}

/// Descend into a property (by name) or a map value (by key).
fn step(
    current: &mut Option<&Value>,
    path: &mut String,
    root: &mut Option<String>,
    name: &str,
) -> Result<(), String> {
    let invalid = || "does not refer to a valid field".to_string();
    let m = current.and_then(Value::as_object).ok_or_else(invalid)?;
    if let Some(props) = non_empty_map(m, "properties") {
        if !path.is_empty() {
            path.push('.');
        }
        path.push_str(name);
        root.get_or_insert_with(|| name.to_string());
        *current = Some(props.get(name).ok_or_else(invalid)?);
    } else if let Some(ap) = m.get("additionalProperties").filter(|v| !v.is_null()) {
        path.push('[');
        path.push_str(name);
        path.push(']');
        root.get_or_insert_with(String::new);
        *current = ap.is_object().then_some(ap);
    } else {
        return Err(invalid());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resolves_properties_and_map_keys() {
        let schema = json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "color": {"type": "string"},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            }},
        }});
        let r = valid_field_path(".spec.color", &schema, false).unwrap();
        assert_eq!((r.path.as_str(), r.root.as_str()), ("spec.color", "spec"));
        assert_eq!(r.schema.unwrap()["type"], "string");
        let r = valid_field_path(".spec.labels['a.b']", &schema, true).unwrap();
        assert_eq!(r.path, "spec.labels[a.b]");
        assert_eq!(
            valid_field_path(".spec.labels['a']", &schema, false).unwrap_err(),
            "array notation is not allowed"
        );
        assert_eq!(
            valid_field_path(".spec.size", &schema, false).unwrap_err(),
            "does not refer to a valid field"
        );
        assert_eq!(
            valid_field_path("spec", &schema, false).unwrap_err(),
            "expected [ or . but got: spec"
        );
        assert_eq!(
            valid_field_path(".spec.", &schema, false).unwrap_err(),
            "unexpected end of JSON path"
        );
    }
}
