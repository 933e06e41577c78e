//! Field selectors (the `fieldSelector=` query parameter): comma-separated `field=value`,
//! `field==value` and `field!=value` terms, all of which must hold. In values, `\` escapes
//! `\`, `,` and `=`. Which fields a kind supports is decided elsewhere.

use std::fmt;

use super::SelectorError;

/// A term's operator. `==` parses to [`FieldOp::Equals`], as in Kubernetes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FieldOp {
    Equals,
    NotEquals,
}

impl FieldOp {
    pub fn as_str(self) -> &'static str {
        match self {
            FieldOp::Equals => "=",
            FieldOp::NotEquals => "!=",
        }
    }
}

/// One term of a field selector, with its value unescaped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldRequirement {
    pub field: String,
    pub op: FieldOp,
    pub value: String,
}

impl FieldRequirement {
    fn matches(&self, actual: Option<&str>) -> bool {
        // Kubernetes reads a missing field as "".
        let actual = actual.unwrap_or("");
        match self.op {
            FieldOp::Equals => actual == self.value,
            FieldOp::NotEquals => actual != self.value,
        }
    }
}

impl fmt::Display for FieldRequirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}{}{}",
            self.field,
            self.op.as_str(),
            escape_value(&self.value)
        )
    }
}

/// A parsed field selector; empty selects everything.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldSelector {
    requirements: Vec<FieldRequirement>,
}

impl FieldSelector {
    /// The selector that matches everything.
    pub fn everything() -> Self {
        FieldSelector::default()
    }

    /// Parse a field selector string. Terms are ordered as Kubernetes orders them (by their
    /// text), so [`Display`](fmt::Display) gives the canonical form.
    pub fn parse(selector: &str) -> Result<FieldSelector, SelectorError> {
        let mut terms = split_terms(selector);
        terms.sort_unstable();
        let mut requirements = Vec::with_capacity(terms.len());
        for term in terms {
            if term.is_empty() {
                continue;
            }
            let Some((field, op, raw)) = split_term(term) else {
                return Err(SelectorError::new(format!(
                    "invalid selector: '{selector}'; can't understand '{term}'"
                )));
            };
            requirements.push(FieldRequirement {
                field: field.to_string(),
                op,
                value: unescape_value(raw)?,
            });
        }
        Ok(FieldSelector { requirements })
    }

    /// The terms as (field, operator, value).
    pub fn requirements(&self) -> &[FieldRequirement] {
        &self.requirements
    }

    /// True when the selector does not restrict anything.
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }

    /// Whether an object satisfies every term. `get` returns a field's value (a missing
    /// field compares as "", as in Kubernetes); it may return `String` or `&str`.
    pub fn matches<S: AsRef<str>>(&self, mut get: impl FnMut(&str) -> Option<S>) -> bool {
        self.requirements.iter().all(|r| {
            let v = get(&r.field);
            r.matches(v.as_ref().map(AsRef::as_ref))
        })
    }

    /// The value a term `field=value` pins the field to, if any (for indexed lookups such as
    /// `spec.nodeName=X`).
    pub fn exact_match(&self, field: &str) -> Option<&str> {
        self.requirements
            .iter()
            .find(|r| r.op == FieldOp::Equals && r.field == field)
            .map(|r| r.value.as_str())
    }
}

impl fmt::Display for FieldSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, r) in self.requirements.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{r}")?;
        }
        Ok(())
    }
}

impl std::str::FromStr for FieldSelector {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        FieldSelector::parse(s)
    }
}

/// Escape `\`, `,` and `=` in a value so that it parses back unchanged.
pub fn escape_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for c in v.chars() {
        if matches!(c, '\\' | ',' | '=') {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Split on commas that are not escaped.
fn split_terms(s: &str) -> Vec<&str> {
    if s.is_empty() {
        return Vec::new();
    }
    let mut terms = Vec::new();
    let mut start = 0;
    let mut escaped = false;
    for (i, b) in s.bytes().enumerate() {
        if escaped {
            escaped = false;
        } else if b == b'\\' {
            escaped = true;
        } else if b == b',' {
            terms.push(&s[start..i]);
            start = i + 1;
        }
    }
    terms.push(&s[start..]);
    terms
}

/// The first operator (`!=`, `==`, `=`, tried in that order at each position) splits a term.
fn split_term(term: &str) -> Option<(&str, FieldOp, &str)> {
    let b = term.as_bytes();
    for i in 0..b.len() {
        let rest = &b[i..];
        if rest.starts_with(b"!=") {
            return Some((&term[..i], FieldOp::NotEquals, &term[i + 2..]));
        }
        if rest.starts_with(b"==") {
            return Some((&term[..i], FieldOp::Equals, &term[i + 2..]));
        }
        if rest.starts_with(b"=") {
            return Some((&term[..i], FieldOp::Equals, &term[i + 1..]));
        }
    }
    None
}

fn unescape_value(s: &str) -> Result<String, SelectorError> {
    if !s.contains(['\\', ',', '=']) {
        return Ok(s.to_string());
    }
    let mut out = String::with_capacity(s.len());
    let mut escaped = false;
    for c in s.chars() {
        if escaped {
            if !matches!(c, '\\' | ',' | '=') {
                return Err(SelectorError::new(format!(
                    "invalid field selector: invalid escape sequence: \\{c}"
                )));
            }
            out.push(c);
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            // Go prints the rune as a number here.
            ',' | '=' => {
                return Err(SelectorError::new(format!(
                    "invalid field selector: unescaped character in value: {}",
                    c as u32
                )))
            }
            c => out.push(c),
        }
    }
    if escaped {
        return Err(SelectorError::new(
            "invalid field selector: invalid escape sequence: \\",
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn field_selectors_parse_to_sorted_canonical_terms() {
        let cases = [
            ("", ""),
            ("a=b", "a=b"),
            ("a==b", "a=b"),
            ("a!=b", "a!=b"),
            ("b=2,a=1", "a=1,b=2"),
            ("a=1,,b=2", "a=1,b=2"),
            (",", ""),
            ("a=", "a="),
            ("=b", "=b"),
            ("spec.nodeName=node-1", "spec.nodeName=node-1"),
            ("a=x\\,y", "a=x\\,y"),
            ("a=x\\=y", "a=x\\=y"),
            ("a=x\\\\y", "a=x\\\\y"),
            ("metadata.name!=a b", "metadata.name!=a b"),
        ];
        for (input, want) in cases {
            let sel = FieldSelector::parse(input).unwrap();
            assert_eq!(sel.to_string(), want, "{input:?}");
        }
    }

    #[test]
    fn field_selector_terms_expose_unescaped_values() {
        let sel = FieldSelector::parse("status.phase!=Running,a==x\\,y\\=z\\\\").unwrap();
        let terms: Vec<(&str, FieldOp, &str)> = sel
            .requirements()
            .iter()
            .map(|r| (r.field.as_str(), r.op, r.value.as_str()))
            .collect();
        assert_eq!(
            terms,
            vec![
                ("a", FieldOp::Equals, "x,y=z\\"),
                ("status.phase", FieldOp::NotEquals, "Running"),
            ]
        );
    }

    #[test]
    fn malformed_field_selectors_fail_with_kubernetes_messages() {
        let cases = [
            ("a", "invalid selector: 'a'; can't understand 'a'"),
            ("a=b,c", "invalid selector: 'a=b,c'; can't understand 'c'"),
            ("a!b", "invalid selector: 'a!b'; can't understand 'a!b'"),
            (
                "a=b=c",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                "a==b=c",
                "invalid field selector: unescaped character in value: 61",
            ),
            (
                "a=b\\x",
                "invalid field selector: invalid escape sequence: \\x",
            ),
            (
                "a=b\\",
                "invalid field selector: invalid escape sequence: \\",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                FieldSelector::parse(input).map_err(|e| e.to_string()),
                Err(want.to_string()),
                "{input:?}"
            );
        }
    }

    #[test]
    fn field_selectors_match_with_missing_fields_as_empty() {
        let get = |f: &str| -> Option<String> {
            match f {
                "metadata.name" => Some("web".to_string()),
                "spec.nodeName" => Some("n1".to_string()),
                _ => None,
            }
        };
        let cases = [
            ("", true),
            ("metadata.name=web", true),
            ("metadata.name=db", false),
            ("metadata.name!=db", true),
            ("metadata.name!=web", false),
            ("spec.nodeName=", false),
            ("status.phase=", true),
            ("status.phase!=Running", true),
            ("metadata.name=web,spec.nodeName=n1", true),
            ("metadata.name=web,spec.nodeName=n2", false),
        ];
        for (sel, want) in cases {
            let s = FieldSelector::parse(sel).unwrap();
            assert_eq!(s.matches(get), want, "{sel:?}");
            assert_eq!(
                s.matches(|f| get(f).map(|_| "web")),
                s.matches(|f| get(f).map(|_| "web".to_string()))
            );
        }
    }

    #[test]
    fn exact_matches_index_equality_terms_only() {
        let sel = FieldSelector::parse("spec.nodeName=n1,metadata.name!=x").unwrap();
        assert_eq!(sel.exact_match("spec.nodeName"), Some("n1"));
        assert_eq!(sel.exact_match("metadata.name"), None);
        assert_eq!(sel.exact_match("status.phase"), None);
        let sel = FieldSelector::parse("spec.nodeName==").unwrap();
        assert_eq!(sel.exact_match("spec.nodeName"), Some(""));
        assert!(FieldSelector::parse("").unwrap().is_empty());
        assert_eq!(escape_value("a,b=c\\"), "a\\,b\\=c\\\\");
    }
}
