//! JSON written the way Go's `encoding/json` writes a struct: fields in declaration order
//! (serde_json's maps are sorted, which is Go's order for maps but not for structs). The
//! annotations that carry HPA fields through autoscaling/v1 are such strings, compared byte for
//! byte by clients that diff objects.

use serde_json::Value;

/// A value to encode: a struct with ordered fields, a list, or a plain JSON value (whose maps
/// are Go maps: sorted keys).
pub(crate) enum Go {
    Struct(Vec<(&'static str, Go)>),
    List(Vec<Go>),
    Plain(Value),
}

impl Go {
    pub(crate) fn encode(&self) -> String {
        let mut out = String::new();
        self.write(&mut out);
        out
    }

    fn write(&self, out: &mut String) {
        match self {
            Go::Struct(fields) => {
                out.push('{');
                for (i, (k, v)) in fields.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    out.push_str(&plain(&Value::String((*k).to_string())));
                    out.push(':');
                    v.write(out);
                }
                out.push('}');
            }
            Go::List(items) => {
                out.push('[');
                for (i, v) in items.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    v.write(out);
                }
                out.push(']');
            }
            Go::Plain(v) => out.push_str(&plain(v)),
        }
    }
}

/// Go escapes `<`, `>` and `&` in strings (HTML-safe encoding); serde_json does not.
fn plain(v: &Value) -> String {
    let s = serde_json::to_string(v).unwrap_or_else(|_| "null".into());
    if !s.contains(['<', '>', '&']) {
        return s;
    }
    s.replace('<', "\\u003c")
        .replace('>', "\\u003e")
        .replace('&', "\\u0026")
}

/// Builds a [`Go::Struct`], leaving out the fields given as `None` (`omitempty`).
#[derive(Default)]
pub(crate) struct Fields(Vec<(&'static str, Go)>);

impl Fields {
    pub(crate) fn new() -> Self {
        Fields::default()
    }

    /// A field Go always writes.
    pub(crate) fn put(mut self, k: &'static str, v: impl Into<Go>) -> Self {
        self.0.push((k, v.into()));
        self
    }

    /// An `omitempty` field.
    pub(crate) fn opt(mut self, k: &'static str, v: Option<impl Into<Go>>) -> Self {
        if let Some(v) = v {
            self.0.push((k, v.into()));
        }
        self
    }

    pub(crate) fn done(self) -> Go {
        Go::Struct(self.0)
    }
}

impl From<Value> for Go {
    fn from(v: Value) -> Go {
        Go::Plain(v)
    }
}

impl From<Fields> for Go {
    fn from(f: Fields) -> Go {
        f.done()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn structs_keep_their_order_and_maps_are_sorted() {
        let g = Fields::new()
            .put("type", json!("Pods"))
            .opt("object", None::<Value>)
            .put(
                "pods",
                Fields::new()
                    .put("metricName", json!("qps"))
                    .put("selector", json!({"b": 1, "a": "<&>"})),
            )
            .done();
        assert_eq!(
            g.encode(),
            r#"{"type":"Pods","pods":{"metricName":"qps","selector":{"a":"\u003c\u0026\u003e","b":1}}}"#
        );
        assert_eq!(Go::List(vec![Go::Plain(Value::Null)]).encode(), "[null]");
    }
}
