//! Small helpers the printers share: reading JSON objects leniently, and the string forms
//! Kubernetes uses for labels, label selectors, containers and int-or-string values.

use serde_json::Value;

/// The value at a path of object keys, if every step exists.
pub fn at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter()
        .try_fold(v, |v, key| v.get(key))
        .filter(|v| !v.is_null())
}

/// A string field; "" when missing or not a string.
pub fn text<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    at(v, path).and_then(Value::as_str).unwrap_or("")
}

/// An optional string field (a Go `*string`).
pub fn opt_text<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    at(v, path).and_then(Value::as_str)
}

/// An integer field; 0 when missing.
pub fn int(v: &Value, path: &[&str]) -> i64 {
    at(v, path).and_then(Value::as_i64).unwrap_or(0)
}

/// An optional integer field (a Go `*int32`).
pub fn opt_int(v: &Value, path: &[&str]) -> Option<i64> {
    at(v, path).and_then(Value::as_i64)
}

/// A boolean field; false when missing.
pub fn flag(v: &Value, path: &[&str]) -> bool {
    at(v, path).and_then(Value::as_bool).unwrap_or(false)
}

/// An array field; empty when missing.
pub fn list<'a>(v: &'a Value, path: &[&str]) -> &'a [Value] {
    at(v, path)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}

/// The number of entries of an object or array field.
pub fn count(v: &Value, path: &[&str]) -> i64 {
    match at(v, path) {
        Some(Value::Object(m)) => m.len() as i64,
        Some(Value::Array(a)) => a.len() as i64,
        _ => 0,
    }
}

pub fn name(obj: &Value) -> &str {
    text(obj, &["metadata", "name"])
}

/// A label or annotation of the object.
pub fn meta_map<'a>(obj: &'a Value, map: &str, key: &str) -> Option<&'a str> {
    at(obj, &["metadata", map, key]).and_then(Value::as_str)
}

/// `labels.FormatLabels`: "k=v" pairs sorted and comma-joined, or `<none>`.
pub fn format_labels(map: Option<&Value>) -> String {
    let mut pairs: Vec<String> = map
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                .collect()
        })
        .unwrap_or_default();
    pairs.sort();
    if pairs.is_empty() {
        "<none>".into()
    } else {
        pairs.join(",")
    }
}

fn valid_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn valid_label_key(key: &str) -> bool {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    let prefix_ok = prefix.is_none_or(|p| {
        !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                let b = l.as_bytes();
                !b.is_empty()
                    && b.len() <= 63
                    && b[0].is_ascii_alphanumeric()
                    && b[b.len() - 1].is_ascii_alphanumeric()
                    && b.iter()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            })
    });
    prefix_ok && valid_name_part(name)
}

fn valid_label_value(v: &str) -> bool {
    v.is_empty() || valid_name_part(v)
}

/// `metav1.LabelSelectorAsSelector(sel).String()`: `Ok("")` for a missing or empty selector,
/// `Err` for one Kubernetes would refuse to convert.
pub fn label_selector(sel: Option<&Value>) -> Result<String, ()> {
    let Some(sel) = sel.filter(|s| s.is_object()) else {
        return Ok(String::new());
    };
    let mut reqs: Vec<(String, String)> = Vec::new();
    if let Some(m) = sel.get("matchLabels").and_then(Value::as_object) {
        for (k, v) in m {
            let v = v.as_str().unwrap_or("");
            if !valid_label_key(k) || !valid_label_value(v) {
                return Err(());
            }
            reqs.push((k.clone(), format!("{k}={v}")));
        }
    }
    for expr in list(sel, &["matchExpressions"]) {
        let key = text(expr, &["key"]);
        let mut values: Vec<&str> = list(expr, &["values"])
            .iter()
            .map(|v| v.as_str().unwrap_or(""))
            .collect();
        if !valid_label_key(key) {
            return Err(());
        }
        let s = match text(expr, &["operator"]) {
            op @ ("In" | "NotIn") => {
                if values.is_empty() || !values.iter().all(|v| valid_label_value(v)) {
                    return Err(());
                }
                values.sort_unstable();
                let word = if op == "In" { "in" } else { "notin" };
                format!("{key} {word} ({})", values.join(","))
            }
            "Exists" if values.is_empty() => key.to_string(),
            "DoesNotExist" if values.is_empty() => format!("!{key}"),
            _ => return Err(()),
        };
        reqs.push((key.to_string(), s));
    }
    reqs.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(reqs
        .into_iter()
        .map(|(_, s)| s)
        .collect::<Vec<_>>()
        .join(","))
}

/// `metav1.FormatLabelSelector`: the selector string, `<none>` when empty, `<error>` when invalid.
pub fn format_label_selector(sel: Option<&Value>) -> String {
    match label_selector(sel) {
        Ok(s) if s.is_empty() => "<none>".into(),
        Ok(s) => s,
        Err(()) => "<error>".into(),
    }
}

/// The comma-joined names and images of a container list.
pub fn containers(list_value: &[Value]) -> (String, String) {
    let names: Vec<&str> = list_value.iter().map(|c| text(c, &["name"])).collect();
    let images: Vec<&str> = list_value.iter().map(|c| text(c, &["image"])).collect();
    (names.join(","), images.join(","))
}

/// An int-or-string field as `IntOrString.String()` prints it.
pub fn int_or_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Number(n) => n.to_string(),
        _ => String::new(),
    }
}

/// "IP:port", bracketing IPv6 addresses as Go's `net.JoinHostPort` does.
pub fn join_host_port(host: &str, port: i64) -> String {
    if host.contains(':') {
        format!("[{host}]:{port}")
    } else {
        format!("{host}:{port}")
    }
}

/// Up to `max` items joined by commas, with " + N more..." for the rest; `<unset>` when empty.
pub fn list_with_more(items: &[String], max: usize) -> String {
    let shown = items
        .iter()
        .take(max)
        .cloned()
        .collect::<Vec<_>>()
        .join(",");
    if items.len() > max {
        format!("{shown} + {} more...", items.len() - max)
    } else if shown.is_empty() {
        "<unset>".into()
    } else {
        shown
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn selectors_print_like_kubernetes() {
        let sel = json!({
            "matchLabels": {"app": "web", "tier": "front"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod", "dev"]},
                {"key": "zone", "operator": "NotIn", "values": ["b"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "team", "operator": "Exists"}
            ]
        });
        assert_eq!(
            label_selector(Some(&sel)).unwrap(),
            "app=web,!canary,env in (dev,prod),team,tier=front,zone notin (b)"
        );
        assert_eq!(format_label_selector(Some(&json!({}))), "<none>");
        assert_eq!(format_label_selector(None), "<none>");
        let bad = json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]});
        assert_eq!(format_label_selector(Some(&bad)), "<error>");
        assert_eq!(format_labels(Some(&json!({"b": "2", "a": "1"}))), "a=1,b=2");
        assert_eq!(format_labels(None), "<none>");
    }

    #[test]
    fn lists_and_ports() {
        let items: Vec<String> = (1..=5).map(|i| format!("10.0.0.{i}")).collect();
        assert_eq!(
            list_with_more(&items, 3),
            "10.0.0.1,10.0.0.2,10.0.0.3 + 2 more..."
        );
        assert_eq!(list_with_more(&[], 3), "<unset>");
        assert_eq!(join_host_port("fd00::1", 80), "[fd00::1]:80");
    }
}
