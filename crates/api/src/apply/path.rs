//! Field paths: the elements structured-merge-diff uses to name a field, a list item or a set
//! member, their total order, and their text form (`.spec.containers[name="nginx"].image`).

use std::cmp::Ordering;
use std::fmt;

use serde_json::Value;

use super::value::{compare, to_go_string};

/// One step of a field path.
#[derive(Debug, Clone)]
pub enum PathElement {
    /// A field of a struct or a key of a map (`f:name` in FieldsV1).
    Field(String),
    /// An item of an associative list, by its key fields sorted by name (`k:{...}`).
    Key(Vec<(String, Value)>),
    /// An item of a set (a list of scalars), by its value (`v:...`).
    Value(Value),
    /// An item of a list by position (`i:N`); only found in managedFields written by others.
    Index(i64),
}

impl PathElement {
    pub fn field(name: impl Into<String>) -> PathElement {
        PathElement::Field(name.into())
    }

    /// A key element; the fields are sorted by name, as SMD keeps them.
    pub fn key(mut fields: Vec<(String, Value)>) -> PathElement {
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        PathElement::Key(fields)
    }

    fn kind_rank(&self) -> u8 {
        match self {
            PathElement::Field(_) => 0,
            PathElement::Key(_) => 1,
            PathElement::Value(_) => 2,
            PathElement::Index(_) => 3,
        }
    }

    /// The field name, for a field element.
    pub fn as_field(&self) -> Option<&str> {
        match self {
            PathElement::Field(f) => Some(f),
            _ => None,
        }
    }
}

/// Key fields compare pairwise by (name, value), the shorter list first on a tie.
fn compare_keys(a: &[(String, Value)], b: &[(String, Value)]) -> Ordering {
    for (x, y) in a.iter().zip(b) {
        let c = x.0.as_bytes().cmp(y.0.as_bytes());
        if c != Ordering::Equal {
            return c;
        }
        let c = compare(&x.1, &y.1);
        if c != Ordering::Equal {
            return c;
        }
    }
    a.len().cmp(&b.len())
}

impl Ord for PathElement {
    /// Fields before keys before values before indexes; within a kind by name, key, value or
    /// position (SMD's `PathElement.Compare`).
    fn cmp(&self, other: &Self) -> Ordering {
        match (self, other) {
            (PathElement::Field(a), PathElement::Field(b)) => a.as_bytes().cmp(b.as_bytes()),
            (PathElement::Key(a), PathElement::Key(b)) => compare_keys(a, b),
            (PathElement::Value(a), PathElement::Value(b)) => compare(a, b),
            (PathElement::Index(a), PathElement::Index(b)) => a.cmp(b),
            _ => self.kind_rank().cmp(&other.kind_rank()),
        }
    }
}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for PathElement {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PathElement {}

impl fmt::Display for PathElement {
    /// `.name`, `[k1=v1,k2=v2]`, `[=value]` or `[3]`, values as Go's `%v` shows them.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(fields) => {
                f.write_str("[")?;
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{name}={}", to_go_string(value))?;
                }
                f.write_str("]")
            }
            PathElement::Value(v) => write!(f, "[={}]", to_go_string(v)),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

/// A whole path, rendered as SMD renders it: its elements one after another.
pub struct PathDisplay<'a>(pub &'a [PathElement]);

impl fmt::Display for PathDisplay<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for pe in self.0 {
            write!(f, "{pe}")?;
        }
        Ok(())
    }
}

/// The text form of a path, e.g. `.spec.replicas`.
pub fn path_string(path: &[PathElement]) -> String {
    PathDisplay(path).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn elements_sort_fields_keys_values_indexes() {
        let mut pes = [
            PathElement::Index(0),
            PathElement::Value(json!("a")),
            PathElement::key(vec![("name".into(), json!("b"))]),
            PathElement::field("b"),
            PathElement::key(vec![("name".into(), json!("a"))]),
            PathElement::field("a"),
        ];
        pes.sort();
        let shown: Vec<String> = pes.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            shown,
            [
                ".a",
                ".b",
                "[name=\"a\"]",
                "[name=\"b\"]",
                "[=\"a\"]",
                "[0]"
            ]
        );
    }

    #[test]
    fn keys_compare_numerically_and_sort_their_fields() {
        let k = |p: i64| {
            PathElement::key(vec![
                ("protocol".into(), json!("TCP")),
                ("containerPort".into(), json!(p)),
            ])
        };
        assert!(k(9) < k(10));
        assert_eq!(k(80).to_string(), "[containerPort=80,protocol=\"TCP\"]");
        assert_eq!(
            PathElement::key(vec![("a".into(), json!(1))]),
            PathElement::key(vec![("a".into(), json!(1.0))])
        );
    }

    #[test]
    fn paths_render_like_smd() {
        let p = [
            PathElement::field("spec"),
            PathElement::field("containers"),
            PathElement::key(vec![("name".into(), json!("nginx"))]),
            PathElement::field("image"),
        ];
        assert_eq!(path_string(&p), ".spec.containers[name=\"nginx\"].image");
        let v = [
            PathElement::field("finalizers"),
            PathElement::Value(json!("x")),
        ];
        assert_eq!(path_string(&v), ".finalizers[=\"x\"]");
    }
}
