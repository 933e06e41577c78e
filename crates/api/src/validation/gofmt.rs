//! Values rendered the way Go's `%#v` prints them in field errors (Kubernetes reports the Go
//! value, e.g. `map[string]string{"app":"web"}` or `v1.LabelSelector{...}`).

use serde_json::{Map, Value};

use crate::field::go_quote;

/// `map[string]string{"a":"b"}` (keys sorted, as Go prints maps), `map[string]string(nil)` when
/// absent.
pub fn string_map(v: Option<&Value>) -> String {
    match v.and_then(Value::as_object) {
        None => "map[string]string(nil)".to_string(),
        Some(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let body: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", go_quote(k), go_quote(m[*k].as_str().unwrap_or(""))))
                .collect();
            format!("map[string]string{{{}}}", body.join(", "))
        }
    }
}

/// `[]string{"a", "b"}`, `[]string(nil)` when absent.
pub fn string_slice(v: Option<&Value>) -> String {
    typed_string_slice("string", v)
}

/// A slice of a named string type, e.g. `[]core.ResourceQuotaScope{"BestEffort"}`.
pub fn typed_string_slice(ty: &str, v: Option<&Value>) -> String {
    match v.and_then(Value::as_array) {
        None => format!("[]{ty}(nil)"),
        Some(a) => {
            let body: Vec<String> = a
                .iter()
                .map(|s| go_quote(s.as_str().unwrap_or("")))
                .collect();
            format!("[]{ty}{{{}}}", body.join(", "))
        }
    }
}

fn requirement(r: &Map<String, Value>) -> String {
    let s = |k: &str| go_quote(r.get(k).and_then(Value::as_str).unwrap_or(""));
    format!(
        "v1.LabelSelectorRequirement{{Key:{}, Operator:{}, Values:{}}}",
        s("key"),
        s("operator"),
        string_slice(r.get("values"))
    )
}

/// A `*metav1.LabelSelector` as Go prints it after dereferencing (`"null"` when nil).
pub fn label_selector(v: Option<&Value>) -> String {
    let Some(sel) = v.and_then(Value::as_object) else {
        return "\"null\"".to_string();
    };
    let exprs = match sel.get("matchExpressions").and_then(Value::as_array) {
        None => "[]v1.LabelSelectorRequirement(nil)".to_string(),
        Some(list) => {
            let body: Vec<String> = list
                .iter()
                .filter_map(Value::as_object)
                .map(requirement)
                .collect();
            format!("[]v1.LabelSelectorRequirement{{{}}}", body.join(", "))
        }
    };
    format!(
        "v1.LabelSelector{{MatchLabels:{}, MatchExpressions:{}}}",
        string_map(sel.get("matchLabels")),
        exprs
    )
}

/// An `intstr.IntOrString` as Go's `%#v` prints it.
pub fn int_or_string(v: &Value) -> String {
    match v {
        Value::String(s) => format!(
            "intstr.IntOrString{{Type:1, IntVal:0, StrVal:{}}}",
            go_quote(s)
        ),
        other => format!(
            "intstr.IntOrString{{Type:0, IntVal:{}, StrVal:\"\"}}",
            other.as_i64().unwrap_or(0)
        ),
    }
}

/// A `metav1.Time` as its `String()` prints it (`2024-05-01 10:00:00 +0000 UTC`).
pub fn time(v: Option<&Value>) -> String {
    match v.and_then(Value::as_str) {
        None => "\"null\"".to_string(),
        Some(s) => {
            let t = s.trim_end_matches('Z').replacen('T', " ", 1);
            format!("{t} +0000 UTC")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn go_renderings() {
        assert_eq!(
            string_map(Some(&json!({"tier": "web", "app": "x"}))),
            r#"map[string]string{"app":"x", "tier":"web"}"#
        );
        assert_eq!(string_map(None), "map[string]string(nil)");
        assert_eq!(
            label_selector(Some(&json!({"matchLabels": {"app": "nginx"}}))),
            r#"v1.LabelSelector{MatchLabels:map[string]string{"app":"nginx"}, MatchExpressions:[]v1.LabelSelectorRequirement(nil)}"#
        );
        assert_eq!(
            label_selector(Some(
                &json!({"matchExpressions": [{"key": "a", "operator": "Exists"}]})
            )),
            r#"v1.LabelSelector{MatchLabels:map[string]string(nil), MatchExpressions:[]v1.LabelSelectorRequirement{v1.LabelSelectorRequirement{Key:"a", Operator:"Exists", Values:[]string(nil)}}}"#
        );
        assert_eq!(
            string_slice(Some(&json!(["a", "b"]))),
            r#"[]string{"a", "b"}"#
        );
        assert_eq!(
            time(Some(&json!("2024-05-01T10:00:00Z"))),
            "2024-05-01 10:00:00 +0000 UTC"
        );
    }
}
