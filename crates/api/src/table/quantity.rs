//! Resource quantities in their canonical form ("1536Mi", "500m", "1k"), the way the API server
//! prints them in table cells whatever spelling the object was written with.

use serde_json::Value;

/// The canonical spelling of a quantity string; unparsable input is returned as it is.
pub fn canonicalize(s: &str) -> String {
    match crate::validation::quantity::parse(s.trim()) {
        Some(q) => q.canonical(),
        None => s.to_string(),
    }
}

/// A quantity field as `Quantity.String()` prints it: "0" when missing.
pub fn field(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => canonicalize(s),
        Some(Value::Number(n)) => canonicalize(&n.to_string()),
        _ => "0".into(),
    }
}

/// A quantity pointer field: "<nil>" when missing, as Go prints a nil `*Quantity`.
pub fn pointer(v: Option<&Value>) -> String {
    match v {
        None | Some(Value::Null) => "<nil>".into(),
        v => field(v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_forms() {
        let cases = [
            ("0", "0"),
            ("0Mi", "0"),
            ("100Mi", "100Mi"),
            ("1Gi", "1Gi"),
            ("1.5Gi", "1536Mi"),
            ("1024Mi", "1Gi"),
            ("2048", "2048"),
            ("0.5Ki", "512"),
            ("0.3Ki", "307200m"),
            ("1000", "1k"),
            ("1500", "1500"),
            ("1500m", "1500m"),
            ("1000m", "1"),
            ("0.5", "500m"),
            ("0.1", "100m"),
            ("2000000", "2M"),
            ("100k", "100k"),
            ("1e3", "1e3"),
            ("1.5e3", "1500"),
            ("1E", "1E"),
            ("12e6", "12e6"),
            ("-5Gi", "-5Gi"),
            ("+200m", "200m"),
            ("0.0000000001", "1n"),
            ("10G", "10G"),
            ("5Ei", "5Ei"),
        ];
        for (input, want) in cases {
            assert_eq!(canonicalize(input), want, "{input}");
        }
        assert_eq!(canonicalize("bogus"), "bogus");
        assert_eq!(field(None), "0");
        assert_eq!(field(Some(&serde_json::json!(2))), "2");
        assert_eq!(pointer(None), "<nil>");
    }
}
