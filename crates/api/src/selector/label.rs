//! Label selectors: the `labelSelector=` string syntax and `metav1.LabelSelector` objects.
//!
//! The string grammar is Kubernetes': comma-separated requirements, all of which must hold:
//! `key=value`, `key==value`, `key!=value`, `key in (a,b)`, `key notin (a,b)`, `key` (exists),
//! `!key` (does not exist), `key>1`, `key<1` (integers). Whitespace separates tokens; `in` and
//! `notin` are keywords only where an operator is expected. Errors read as Kubernetes' do.

use std::fmt;

use serde_json::{Map, Value};

use super::validation::{
    aggregate, go_quote, label_value_errors, qualified_name_errors, BadValue, FieldError,
};
use super::SelectorError;
use crate::meta::At as _;

/// A requirement's operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Operator {
    /// `in (a,b)`
    In,
    /// `notin (a,b)`
    NotIn,
    /// `=`
    Equals,
    /// `==`
    DoubleEquals,
    /// `!=`
    NotEquals,
    /// `key`
    Exists,
    /// `!key`
    DoesNotExist,
    /// `key>n`
    GreaterThan,
    /// `key<n`
    LessThan,
}

impl Operator {
    /// Kubernetes' `selection.Operator` string.
    pub fn as_str(self) -> &'static str {
        match self {
            Operator::In => "in",
            Operator::NotIn => "notin",
            Operator::Equals => "=",
            Operator::DoubleEquals => "==",
            Operator::NotEquals => "!=",
            Operator::Exists => "exists",
            Operator::DoesNotExist => "!",
            Operator::GreaterThan => "gt",
            Operator::LessThan => "lt",
        }
    }
}

/// One requirement: a key, an operator and (for most operators) values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    key: String,
    op: Operator,
    values: Vec<String>,
}

impl Requirement {
    /// Build a requirement, validating it as Kubernetes' `NewRequirement` does (key syntax,
    /// value count for the operator, value syntax, integers for `>`/`<`).
    pub fn new(
        key: impl Into<String>,
        op: Operator,
        values: Vec<String>,
    ) -> Result<Requirement, SelectorError> {
        let key = key.into();
        let errs = requirement_errors(&key, op, &values, "");
        if errs.is_empty() {
            Ok(Requirement { key, op, values })
        } else {
            let msgs: Vec<String> = errs.iter().map(ToString::to_string).collect();
            Err(SelectorError::new(aggregate(&msgs)))
        }
    }

    pub fn key(&self) -> &str {
        &self.key
    }

    pub fn operator(&self) -> Operator {
        self.op
    }

    /// The values, in the order given (parsed selectors hold them sorted and de-duplicated).
    pub fn values(&self) -> &[String] {
        &self.values
    }

    fn has_value(&self, v: &str) -> bool {
        self.values.iter().any(|x| x == v)
    }

    /// Whether a set of labels, seen through `get`, satisfies this requirement.
    pub fn matches_fn<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        match self.op {
            Operator::In | Operator::Equals | Operator::DoubleEquals => {
                get(&self.key).is_some_and(|v| self.has_value(v))
            }
            Operator::NotIn | Operator::NotEquals => {
                get(&self.key).is_none_or(|v| !self.has_value(v))
            }
            Operator::Exists => get(&self.key).is_some(),
            Operator::DoesNotExist => get(&self.key).is_none(),
            Operator::GreaterThan | Operator::LessThan => {
                let Some(have) = get(&self.key).and_then(|v| v.parse::<i64>().ok()) else {
                    return false;
                };
                let [want] = self.values.as_slice() else {
                    return false;
                };
                let Ok(want) = want.parse::<i64>() else {
                    return false;
                };
                if self.op == Operator::GreaterThan {
                    have > want
                } else {
                    have < want
                }
            }
        }
    }
}

impl fmt::Display for Requirement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.op == Operator::DoesNotExist {
            f.write_str("!")?;
        }
        f.write_str(&self.key)?;
        let (before, after) = match self.op {
            Operator::Exists | Operator::DoesNotExist => return Ok(()),
            Operator::Equals => ("=", ""),
            Operator::DoubleEquals => ("==", ""),
            Operator::NotEquals => ("!=", ""),
            Operator::In => (" in (", ")"),
            Operator::NotIn => (" notin (", ")"),
            Operator::GreaterThan => (">", ""),
            Operator::LessThan => ("<", ""),
        };
        f.write_str(before)?;
        if self.values.is_sorted() {
            f.write_str(&self.values.join(","))?;
        } else {
            let mut sorted: Vec<&str> = self.values.iter().map(String::as_str).collect();
            sorted.sort_unstable();
            f.write_str(&sorted.join(","))?;
        }
        f.write_str(after)
    }
}

/// The checks of Kubernetes' `NewRequirement`, as field errors under `path` ("" for none).
fn requirement_errors(key: &str, op: Operator, values: &[String], path: &str) -> Vec<FieldError> {
    let child = |name: &str| {
        if path.is_empty() {
            name.to_string()
        } else {
            format!("{path}.{name}")
        }
    };
    let mut errs = Vec::new();
    let key_errs = qualified_name_errors(key);
    if !key_errs.is_empty() {
        errs.push(FieldError::invalid(
            child("key"),
            BadValue::Str(key.to_string()),
            key_errs.join("; "),
        ));
    }
    let values_path = child("values");
    let vals = || BadValue::Strs(Some(values.to_vec()));
    match op {
        Operator::In | Operator::NotIn => {
            if values.is_empty() {
                errs.push(FieldError::invalid(
                    &values_path,
                    BadValue::Strs(None),
                    "for 'in', 'notin' operators, values set can't be empty",
                ));
            }
        }
        Operator::Equals | Operator::DoubleEquals | Operator::NotEquals => {
            if values.len() != 1 {
                errs.push(FieldError::invalid(
                    &values_path,
                    vals(),
                    "exact-match compatibility requires one single value",
                ));
            }
        }
        Operator::Exists | Operator::DoesNotExist => {
            if !values.is_empty() {
                errs.push(FieldError::invalid(
                    &values_path,
                    vals(),
                    "values set must be empty for exists and does not exist",
                ));
            }
        }
        Operator::GreaterThan | Operator::LessThan => {
            if values.len() != 1 {
                errs.push(FieldError::invalid(
                    &values_path,
                    vals(),
                    "for 'Gt', 'Lt' operators, exactly one value is required",
                ));
            }
            for (i, v) in values.iter().enumerate() {
                if v.parse::<i64>().is_err() {
                    errs.push(FieldError::invalid(
                        format!("{values_path}[{i}]"),
                        BadValue::Str(v.clone()),
                        "for 'Gt', 'Lt' operators, the value must be an integer",
                    ));
                }
            }
        }
    }
    for (i, v) in values.iter().enumerate() {
        let value_errs = label_value_errors(v);
        if !value_errs.is_empty() {
            errs.push(FieldError::invalid(
                format!("{values_path}[{i}][{key}]"),
                BadValue::Str(v.clone()),
                value_errs.join("; "),
            ));
        }
    }
    errs
}

/// A label selector: requirements that must all hold, or "nothing" (matches no object).
///
/// Kubernetes distinguishes a null `metav1.LabelSelector` (selects nothing) from an empty one
/// (selects everything): [`LabelSelector::nothing`] and [`LabelSelector::everything`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LabelSelector {
    requirements: Vec<Requirement>,
    nothing: bool,
}

impl LabelSelector {
    /// The selector that matches every object (an empty selector string or `{}`).
    pub fn everything() -> Self {
        LabelSelector::default()
    }

    /// The selector that matches no object (a null `metav1.LabelSelector`).
    pub fn nothing() -> Self {
        LabelSelector {
            requirements: Vec::new(),
            nothing: true,
        }
    }

    /// Build from requirements (sorted by key, as Kubernetes does).
    pub fn from_requirements(mut requirements: Vec<Requirement>) -> Self {
        requirements.sort_by(|a, b| a.key.cmp(&b.key));
        LabelSelector {
            requirements,
            nothing: false,
        }
    }

    /// Parse the string form (the `labelSelector` query parameter).
    pub fn parse(input: &str) -> Result<LabelSelector, SelectorError> {
        let tokens = lex(input);
        let mut p = Parser { tokens, pos: 0 };
        let reqs = p.parse()?;
        Ok(LabelSelector::from_requirements(reqs))
    }

    /// Convert a `metav1.LabelSelector` object (`matchLabels` and `matchExpressions`) as
    /// Kubernetes' `LabelSelectorAsSelector` does: `null` (or an absent selector) selects
    /// nothing, `{}` selects everything, and invalid keys, values or operators are errors.
    pub fn from_json(value: &Value) -> Result<LabelSelector, SelectorError> {
        let obj = match value {
            Value::Null => return Ok(LabelSelector::nothing()),
            Value::Object(o) => o,
            other => {
                return Err(SelectorError::new(format!(
                    "json: cannot unmarshal {} into Go value of type v1.LabelSelector",
                    json_kind(other)
                )))
            }
        };
        let match_labels = match obj.get("matchLabels") {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(m),
            Some(other) => {
                return Err(SelectorError::new(format!(
                    "json: cannot unmarshal {} into Go struct field LabelSelector.matchLabels of type map[string]string",
                    json_kind(other)
                )))
            }
        };
        let exprs = match obj.get("matchExpressions") {
            None | Some(Value::Null) => &[][..],
            Some(Value::Array(a)) => a.as_slice(),
            Some(other) => {
                return Err(SelectorError::new(format!(
                    "json: cannot unmarshal {} into Go struct field LabelSelector.matchExpressions of type []v1.LabelSelectorRequirement",
                    json_kind(other)
                )))
            }
        };
        let n_labels = match_labels.map_or(0, Map::len);
        if n_labels + exprs.len() == 0 {
            return Ok(LabelSelector::everything());
        }
        let mut reqs = Vec::with_capacity(n_labels + exprs.len());
        if let Some(m) = match_labels {
            for (k, v) in m {
                let v = v.as_str().ok_or_else(|| {
                    SelectorError::new(format!(
                        "json: cannot unmarshal {} into Go struct field LabelSelector.matchLabels of type string",
                        json_kind(v)
                    ))
                })?;
                reqs.push(Requirement::new(
                    k.clone(),
                    Operator::Equals,
                    vec![v.to_string()],
                )?);
            }
        }
        for expr in exprs {
            let e = parse_expression(expr)?;
            let op = match e.operator {
                "In" => Operator::In,
                "NotIn" => Operator::NotIn,
                "Exists" => Operator::Exists,
                "DoesNotExist" => Operator::DoesNotExist,
                other => {
                    return Err(SelectorError::new(format!(
                        "{} is not a valid label selector operator",
                        go_quote(other)
                    )))
                }
            };
            let errs = requirement_errors(e.key, op, &e.values, "");
            if !errs.is_empty() {
                // A JSON selector's values are a copy that is nil when empty.
                let msgs: Vec<String> = errs.iter().map(ToString::to_string).collect();
                return Err(SelectorError::new(aggregate(&msgs)));
            }
            reqs.push(Requirement {
                key: e.key.to_string(),
                op,
                values: e.values,
            });
        }
        Ok(LabelSelector::from_requirements(reqs))
    }

    /// A selector requiring each `key=value` of a labels map (as a Service's `spec.selector`
    /// or a ReplicationController's); keys and values are validated.
    pub fn from_labels_map(labels: &Map<String, Value>) -> Result<LabelSelector, SelectorError> {
        let mut reqs = Vec::with_capacity(labels.len());
        for (k, v) in labels {
            let v = v.as_str().unwrap_or_default();
            reqs.push(Requirement::new(
                k.clone(),
                Operator::Equals,
                vec![v.to_string()],
            )?);
        }
        Ok(LabelSelector::from_requirements(reqs))
    }

    /// Validate a `metav1.LabelSelector` object as Kubernetes' `ValidateLabelSelector` does,
    /// reporting errors under `path` (e.g. `spec.selector`). A null selector is valid.
    /// `allow_invalid_label_value` skips the value syntax check (Kubernetes allows that when
    /// an existing object already had such values).
    pub fn validate_json(
        value: &Value,
        path: &str,
        allow_invalid_label_value: bool,
    ) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let Value::Object(obj) = value else {
            return errs;
        };
        if let Some(Value::Object(labels)) = obj.get("matchLabels") {
            let p = format!("{path}.matchLabels");
            for (k, v) in labels {
                for msg in qualified_name_errors(k) {
                    errs.push(FieldError::invalid(&p, BadValue::Str(k.clone()), msg));
                }
                let v = v.as_str().unwrap_or_default();
                for msg in label_value_errors(v) {
                    errs.push(FieldError::invalid(&p, BadValue::Str(v.to_string()), msg));
                }
            }
        }
        if let Some(Value::Array(exprs)) = obj.get("matchExpressions") {
            for (i, expr) in exprs.iter().enumerate() {
                let p = format!("{path}.matchExpressions[{i}]");
                let e = parse_expression(expr).unwrap_or_default();
                match e.operator {
                    "In" | "NotIn" => {
                        if e.values.is_empty() {
                            errs.push(FieldError::required(
                                format!("{p}.values"),
                                "must be specified when `operator` is 'In' or 'NotIn'",
                            ));
                        }
                    }
                    "Exists" | "DoesNotExist" => {
                        if !e.values.is_empty() {
                            errs.push(FieldError::forbidden(
                                format!("{p}.values"),
                                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
                            ));
                        }
                    }
                    other => errs.push(FieldError::invalid(
                        format!("{p}.operator"),
                        BadValue::Str(other.to_string()),
                        "not a valid selector operator",
                    )),
                }
                for msg in qualified_name_errors(e.key) {
                    errs.push(FieldError::invalid(
                        format!("{p}.key"),
                        BadValue::Str(e.key.to_string()),
                        msg,
                    ));
                }
                if !allow_invalid_label_value {
                    for (j, v) in e.values.iter().enumerate() {
                        for msg in label_value_errors(v) {
                            errs.push(FieldError::invalid(
                                format!("{p}.values[{j}]"),
                                BadValue::Str(v.clone()),
                                msg,
                            ));
                        }
                    }
                }
            }
        }
        errs
    }

    pub fn requirements(&self) -> &[Requirement] {
        &self.requirements
    }

    /// True when the selector does not restrict the selection (Kubernetes' `Empty()`): the
    /// "everything" selector. The "nothing" selector is not empty.
    pub fn is_empty(&self) -> bool {
        !self.nothing && self.requirements.is_empty()
    }

    /// True for the selector that matches nothing (from a null `metav1.LabelSelector`).
    pub fn is_nothing(&self) -> bool {
        self.nothing
    }

    /// Whether an object's `metadata.labels` object satisfies the selector. Non-string label
    /// values count as absent.
    pub fn matches(&self, labels: &Map<String, Value>) -> bool {
        self.matches_fn(|k| labels.get(k).and_then(Value::as_str))
    }

    /// Whether an object (its `metadata.labels`) satisfies the selector.
    pub fn matches_object(&self, object: &Value) -> bool {
        match object.at("/metadata/labels") {
            Some(Value::Object(labels)) => self.matches(labels),
            _ => self.matches_fn(|_| None),
        }
    }

    /// Whether a set of labels, looked up through `get`, satisfies the selector.
    pub fn matches_fn<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        !self.nothing && self.requirements.iter().all(|r| r.matches_fn(&get))
    }

    /// The value a selector pins `label` to (`label=v`, `label==v` or `label in (v)`), for
    /// indexed lookups. Like Kubernetes, only the first requirement on that key is considered.
    pub fn requires_exact_match(&self, label: &str) -> Option<&str> {
        let r = self.requirements.iter().find(|r| r.key == label)?;
        match (r.op, r.values.as_slice()) {
            (Operator::Equals | Operator::DoubleEquals | Operator::In, [v]) => Some(v),
            _ => None,
        }
    }
}

impl fmt::Display for LabelSelector {
    /// The canonical string form (requirements sorted by key, values sorted); "" for both
    /// everything and nothing.
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

impl std::str::FromStr for LabelSelector {
    type Err = SelectorError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        LabelSelector::parse(s)
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[derive(Default)]
struct Expression<'a> {
    key: &'a str,
    operator: &'a str,
    values: Vec<String>,
}

fn parse_expression(v: &Value) -> Result<Expression<'_>, SelectorError> {
    let type_err = |field: &str, ty: &str, got: &Value| {
        SelectorError::new(format!(
            "json: cannot unmarshal {} into Go struct field LabelSelectorRequirement.matchExpressions.{field} of type {ty}",
            json_kind(got)
        ))
    };
    let Value::Object(o) = v else {
        return Err(SelectorError::new(format!(
            "json: cannot unmarshal {} into Go value of type v1.LabelSelectorRequirement",
            json_kind(v)
        )));
    };
    let str_field = |name: &str| -> Result<&str, SelectorError> {
        match o.get(name) {
            None | Some(Value::Null) => Ok(""),
            Some(Value::String(s)) => Ok(s),
            Some(other) => Err(type_err(name, "string", other)),
        }
    };
    let key = str_field("key")?;
    let operator = str_field("operator")?;
    let values = match o.get("values") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| match x {
                Value::String(s) => Ok(s.clone()),
                other => Err(type_err("values", "string", other)),
            })
            .collect::<Result<_, _>>()?,
        Some(other) => return Err(type_err("values", "[]string", other)),
    };
    Ok(Expression {
        key,
        operator,
        values,
    })
}

// ---- lexer ----

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tok {
    Error,
    End,
    ClosedPar,
    Comma,
    DoesNotExist,
    DoubleEquals,
    Equals,
    GreaterThan,
    Identifier,
    In,
    LessThan,
    NotEquals,
    NotIn,
    OpenPar,
}

fn keyword(s: &str) -> Option<Tok> {
    Some(match s {
        ")" => Tok::ClosedPar,
        "," => Tok::Comma,
        "!" => Tok::DoesNotExist,
        "==" => Tok::DoubleEquals,
        "=" => Tok::Equals,
        ">" => Tok::GreaterThan,
        "in" => Tok::In,
        "<" => Tok::LessThan,
        "!=" => Tok::NotEquals,
        "notin" => Tok::NotIn,
        "(" => Tok::OpenPar,
        _ => return None,
    })
}

fn is_whitespace(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_special(b: u8) -> bool {
    matches!(b, b'=' | b'!' | b'(' | b')' | b',' | b'>' | b'<')
}

/// Tokenize the whole input. Like Kubernetes, a NUL byte ends the input.
fn lex(input: &str) -> Vec<(Tok, String)> {
    let s = input.as_bytes();
    let end = s.iter().position(|&b| b == 0).unwrap_or(s.len());
    let s = &s[..end];
    let text = |a: usize, b: usize| input[a..b].to_string();
    let mut out = Vec::new();
    let mut i = 0;
    loop {
        while i < s.len() && is_whitespace(s[i]) {
            i += 1;
        }
        if i >= s.len() {
            out.push((Tok::End, String::new()));
            return out;
        }
        if is_special(s[i]) {
            // Longest run of special characters that still spells an operator.
            let start = i;
            let mut last: Option<(Tok, usize)> = None;
            let mut j = i;
            while j < s.len() && is_special(s[j]) {
                let candidate = &input[start..=j];
                if let Some(t) = keyword(candidate) {
                    last = Some((t, j + 1));
                } else if last.is_some() {
                    break;
                }
                j += 1;
            }
            match last {
                Some((t, stop)) => {
                    out.push((t, text(start, stop)));
                    i = stop;
                }
                None => {
                    out.push((
                        Tok::Error,
                        format!("error expected: keyword found '{}'", &input[start..j]),
                    ));
                    i = j;
                }
            }
        } else {
            let start = i;
            while i < s.len() && !is_special(s[i]) && !is_whitespace(s[i]) {
                i += 1;
            }
            let word = text(start, i);
            let t = keyword(&word).unwrap_or(Tok::Identifier);
            out.push((t, word));
        }
    }
}

// ---- parser ----

#[derive(Clone, Copy, PartialEq, Eq)]
enum Ctx {
    KeyAndOperator,
    Values,
}

struct Parser {
    tokens: Vec<(Tok, String)>,
    pos: usize,
}

impl Parser {
    fn token(&self, at: usize, ctx: Ctx) -> (Tok, &str) {
        // The token list always ends with End; never read past it.
        let (t, lit) = &self.tokens[at.min(self.tokens.len() - 1)];
        let t = match (ctx, t) {
            (Ctx::Values, Tok::In | Tok::NotIn) => Tok::Identifier,
            _ => *t,
        };
        (t, lit.as_str())
    }

    fn lookahead(&self, ctx: Ctx) -> (Tok, &str) {
        self.token(self.pos, ctx)
    }

    fn consume(&mut self, ctx: Ctx) -> (Tok, String) {
        let at = self.pos;
        self.pos += 1;
        let (t, lit) = self.token(at, ctx);
        (t, lit.to_string())
    }

    fn parse(&mut self) -> Result<Vec<Requirement>, SelectorError> {
        let mut reqs = Vec::new();
        loop {
            let (t, lit) = self.lookahead(Ctx::Values);
            match t {
                Tok::Identifier | Tok::DoesNotExist => {
                    let r = self.parse_requirement().map_err(|e| {
                        SelectorError::new(format!("unable to parse requirement: {e}"))
                    })?;
                    reqs.push(r);
                    let (t, lit) = self.consume(Ctx::Values);
                    match t {
                        Tok::End => return Ok(reqs),
                        Tok::Comma => {
                            let (t2, lit2) = self.lookahead(Ctx::Values);
                            if t2 != Tok::Identifier && t2 != Tok::DoesNotExist {
                                return Err(SelectorError::new(format!(
                                    "found '{lit2}', expected: identifier after ','"
                                )));
                            }
                        }
                        _ => {
                            return Err(SelectorError::new(format!(
                                "found '{lit}', expected: ',' or 'end of string'"
                            )))
                        }
                    }
                }
                Tok::End => return Ok(reqs),
                _ => {
                    return Err(SelectorError::new(format!(
                        "found '{lit}', expected: !, identifier, or 'end of string'"
                    )))
                }
            }
        }
    }

    fn parse_requirement(&mut self) -> Result<Requirement, String> {
        let (key, op) = self.parse_key_and_infer_operator()?;
        let (op, values) = match op {
            Some(op) => (op, Vec::new()),
            None => {
                let op = self.parse_operator()?;
                let values = match op {
                    Operator::In | Operator::NotIn => self.parse_values()?,
                    _ => self.parse_exact_value()?,
                };
                (op, values)
            }
        };
        let errs = requirement_errors(&key, op, &values, "");
        if errs.is_empty() {
            Ok(Requirement { key, op, values })
        } else {
            let msgs: Vec<String> = errs.iter().map(ToString::to_string).collect();
            Err(aggregate(&msgs))
        }
    }

    /// The key, and `Exists`/`DoesNotExist` when no operator follows.
    fn parse_key_and_infer_operator(&mut self) -> Result<(String, Option<Operator>), String> {
        let (mut t, mut lit) = self.consume(Ctx::Values);
        let mut not = false;
        if t == Tok::DoesNotExist {
            not = true;
            (t, lit) = self.consume(Ctx::Values);
        }
        if t != Tok::Identifier {
            return Err(format!("found '{lit}', expected: identifier"));
        }
        let key_errs = qualified_name_errors(&lit);
        if !key_errs.is_empty() {
            // Kubernetes validates the key here with no field path, which prints as "<nil>".
            return Err(FieldError::invalid(
                "<nil>",
                BadValue::Str(lit.clone()),
                key_errs.join("; "),
            )
            .to_string());
        }
        let (next, _) = self.lookahead(Ctx::Values);
        if next == Tok::End || next == Tok::Comma {
            let op = if not {
                Operator::DoesNotExist
            } else {
                Operator::Exists
            };
            return Ok((lit, Some(op)));
        }
        if not {
            // `!key` followed by an operator: Kubernetes keeps the DoesNotExist operator
            // with no values.
            return Ok((lit, Some(Operator::DoesNotExist)));
        }
        Ok((lit, None))
    }

    fn parse_operator(&mut self) -> Result<Operator, String> {
        let (t, lit) = self.consume(Ctx::KeyAndOperator);
        Ok(match t {
            Tok::In => Operator::In,
            Tok::Equals => Operator::Equals,
            Tok::DoubleEquals => Operator::DoubleEquals,
            Tok::GreaterThan => Operator::GreaterThan,
            Tok::LessThan => Operator::LessThan,
            Tok::NotIn => Operator::NotIn,
            Tok::NotEquals => Operator::NotEquals,
            _ => {
                return Err(format!(
                    "found '{lit}', expected: in, notin, =, ==, !=, gt, lt"
                ))
            }
        })
    }

    fn parse_values(&mut self) -> Result<Vec<String>, String> {
        let (t, lit) = self.consume(Ctx::Values);
        if t != Tok::OpenPar {
            return Err(format!("found '{lit}' expected: '('"));
        }
        let (t, lit) = self.lookahead(Ctx::Values);
        let lit = lit.to_string();
        match t {
            Tok::Identifier | Tok::Comma => {
                let set = self.parse_identifiers_list()?;
                let (t, _) = self.consume(Ctx::Values);
                if t != Tok::ClosedPar {
                    return Err(format!("found '{lit}', expected: ')'"));
                }
                Ok(set)
            }
            Tok::ClosedPar => {
                self.consume(Ctx::Values);
                Ok(vec![String::new()])
            }
            _ => Err(format!("found '{lit}', expected: ',', ')' or identifier")),
        }
    }

    /// A (possibly empty) list of comma-separated (possibly empty) values, as a sorted set.
    fn parse_identifiers_list(&mut self) -> Result<Vec<String>, String> {
        let mut set: Vec<String> = Vec::new();
        let insert = |set: &mut Vec<String>, v: String| {
            if let Err(at) = set.binary_search(&v) {
                set.insert(at, v);
            }
        };
        loop {
            let (t, lit) = self.consume(Ctx::Values);
            match t {
                Tok::Identifier => {
                    insert(&mut set, lit);
                    let (t2, lit2) = self.lookahead(Ctx::Values);
                    match t2 {
                        Tok::Comma => continue,
                        Tok::ClosedPar => return Ok(set),
                        _ => return Err(format!("found '{lit2}', expected: ',' or ')'")),
                    }
                }
                Tok::Comma => {
                    if set.is_empty() {
                        insert(&mut set, String::new());
                    }
                    let (t2, _) = self.lookahead(Ctx::Values);
                    if t2 == Tok::ClosedPar {
                        insert(&mut set, String::new());
                        return Ok(set);
                    }
                    if t2 == Tok::Comma {
                        self.consume(Ctx::Values);
                        insert(&mut set, String::new());
                    }
                }
                _ => return Err(format!("found '{lit}', expected: ',', or identifier")),
            }
        }
    }

    fn parse_exact_value(&mut self) -> Result<Vec<String>, String> {
        let (t, _) = self.lookahead(Ctx::Values);
        if t == Tok::End || t == Tok::Comma {
            return Ok(vec![String::new()]);
        }
        let (t, lit) = self.consume(Ctx::Values);
        if t == Tok::Identifier {
            Ok(vec![lit])
        } else {
            Err(format!("found '{lit}', expected: identifier"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const NAME_RE: &str = "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
    const VALUE_RE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";

    fn canonical(s: &str) -> Result<String, String> {
        LabelSelector::parse(s)
            .map(|sel| sel.to_string())
            .map_err(|e| e.to_string())
    }

    #[test]
    fn valid_selectors_parse_to_their_canonical_form() {
        let cases = [
            ("", ""),
            ("x=a", "x=a"),
            ("x==a", "x==a"),
            ("x!=a", "x!=a"),
            ("  x =  a ", "x=a"),
            ("x\t=\na", "x=a"),
            ("x=", "x="),
            ("x=,y=b", "x=,y=b"),
            ("y=b,x=a", "x=a,y=b"),
            ("x in (b,a)", "x in (a,b)"),
            ("x in (a,a)", "x in (a)"),
            ("x in(a)", "x in (a)"),
            ("x notin (a)", "x notin (a)"),
            ("x in ()", "x in ()"),
            ("x in (,a)", "x in (,a)"),
            ("x in (a,)", "x in (,a)"),
            ("x in (a,,b)", "x in (,a,b)"),
            ("x", "x"),
            ("!x", "!x"),
            (" ! x ", "!x"),
            ("x>1", "x>1"),
            ("x<10", "x<10"),
            ("x in (in,notin)", "x in (in,notin)"),
            ("in in (a)", "in in (a)"),
            ("notin notin (a)", "notin notin (a)"),
            ("example.com/app=web", "example.com/app=web"),
            (
                "z in (1,2),x=a,!y,w notin (3)",
                "w notin (3),x=a,!y,z in (1,2)",
            ),
        ];
        for (input, want) in cases {
            assert_eq!(canonical(input), Ok(want.to_string()), "{input:?}");
        }
    }

    #[test]
    fn malformed_selectors_fail_with_kubernetes_messages() {
        let req = |m: &str| format!("unable to parse requirement: {m}");
        let cases: Vec<(&str, String)> = vec![
            (",x", "found ',', expected: !, identifier, or 'end of string'".into()),
            ("=a", "found '=', expected: !, identifier, or 'end of string'".into()),
            ("x,", "found '', expected: identifier after ','".into()),
            ("x,,y", "found ',', expected: identifier after ','".into()),
            ("x=a b", "found 'b', expected: ',' or 'end of string'".into()),
            ("x=a=b", "found '=', expected: ',' or 'end of string'".into()),
            ("!x=a", "found '=', expected: ',' or 'end of string'".into()),
            ("x=a!", "found '!', expected: ',' or 'end of string'".into()),
            ("x in a", req("found 'a' expected: '('")),
            ("x in (a b)", req("found 'b', expected: ',' or ')'")),
            ("x in (a", req("found '', expected: ',' or ')'")),
            ("x in (=)", req("found '=', expected: ',', ')' or identifier")),
            ("x in (a,=)", req("found '=', expected: ',', or identifier")),
            ("x=>a", req("found '>', expected: identifier")),
            ("x=(a)", req("found '(', expected: identifier")),
            ("a b", req("found 'b', expected: in, notin, =, ==, !=, gt, lt")),
            ("x !! y", req("found '!', expected: in, notin, =, ==, !=, gt, lt")),
            ("xin (a)", req("found '(', expected: in, notin, =, ==, !=, gt, lt")),
            ("!", req("found '', expected: identifier")),
            ("!=a", "found '!=', expected: !, identifier, or 'end of string'".into()),
            ("-a=b", req(&format!("<nil>: Invalid value: \"-a\": {NAME_RE}"))),
            (
                "a/b/c",
                req("<nil>: Invalid value: \"a/b/c\": a qualified name must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]') with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"),
            ),
            ("a>b", req("values[0]: Invalid value: \"b\": for 'Gt', 'Lt' operators, the value must be an integer")),
            ("a<-1", req(&format!("values[0][a]: Invalid value: \"-1\": {VALUE_RE}"))),
            ("a=-b", req(&format!("values[0][a]: Invalid value: \"-b\": {VALUE_RE}"))),
            (
                "a>x-",
                req(&format!("[values[0]: Invalid value: \"x-\": for 'Gt', 'Lt' operators, the value must be an integer, values[0][a]: Invalid value: \"x-\": {VALUE_RE}]")),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(canonical(input), Err(want.clone()), "{input:?}");
        }
        let long = format!("a={}", "v".repeat(64));
        assert_eq!(
            canonical(&long),
            Err(req(&format!(
                "values[0][a]: Invalid value: \"{}\": must be no more than 63 characters",
                "v".repeat(64)
            )))
        );
    }

    #[test]
    fn a_nul_byte_ends_the_selector_like_kubernetes() {
        assert_eq!(canonical("x=a\0,junk("), Ok("x=a".to_string()));
    }

    #[test]
    fn requirements_match_labels_per_operator() {
        let labels = json!({"app": "web", "tier": "frontend", "n": "5", "empty": ""});
        let labels = labels.as_object().unwrap();
        let cases = [
            ("", true),
            ("app=web", true),
            ("app==web", true),
            ("app=db", false),
            ("missing=x", false),
            ("app!=db", true),
            ("app!=web", false),
            ("missing!=x", true),
            ("app in (web,db)", true),
            ("app in (db)", false),
            ("missing in (x)", false),
            ("app notin (web)", false),
            ("app notin (db)", true),
            ("missing notin (x)", true),
            ("app", true),
            ("missing", false),
            ("!app", false),
            ("!missing", true),
            ("empty=", true),
            ("empty", true),
            ("n>4", true),
            ("n>5", false),
            ("n<6", true),
            ("n<5", false),
            ("app>1", false),
            ("missing>1", false),
            ("missing<1", false),
            ("app=web,tier=frontend", true),
            ("app=web,tier=backend", false),
            ("app,!missing,n>1", true),
        ];
        for (sel, want) in cases {
            let s = LabelSelector::parse(sel).unwrap();
            assert_eq!(s.matches(labels), want, "{sel:?}");
            assert_eq!(
                s.matches_fn(|k| labels.get(k).and_then(Value::as_str)),
                want,
                "{sel:?}"
            );
        }
    }

    #[test]
    fn matching_an_object_reads_metadata_labels() {
        let sel = LabelSelector::parse("app=web").unwrap();
        assert!(sel.matches_object(&json!({"metadata": {"labels": {"app": "web"}}})));
        assert!(!sel.matches_object(&json!({"metadata": {}})));
        let sel = LabelSelector::parse("!app").unwrap();
        assert!(sel.matches_object(&json!({"metadata": {}})));
    }

    #[test]
    fn null_selector_matches_nothing_and_empty_selector_matches_everything() {
        let labels = json!({"a": "b"});
        let labels = labels.as_object().unwrap();

        let nothing = LabelSelector::from_json(&Value::Null).unwrap();
        assert!(nothing.is_nothing());
        assert!(!nothing.is_empty());
        assert!(!nothing.matches(labels));
        assert!(!nothing.matches(&Map::new()));
        assert_eq!(nothing.to_string(), "");

        for empty in [
            json!({}),
            json!({"matchLabels": {}, "matchExpressions": []}),
        ] {
            let everything = LabelSelector::from_json(&empty).unwrap();
            assert!(everything.is_empty());
            assert!(!everything.is_nothing());
            assert!(everything.matches(labels));
            assert!(everything.matches(&Map::new()));
        }
        assert_eq!(
            LabelSelector::everything(),
            LabelSelector::parse("").unwrap()
        );
    }

    #[test]
    fn json_selectors_convert_match_labels_and_expressions() {
        let sel = LabelSelector::from_json(&json!({
            "matchLabels": {"app": "web"},
            "matchExpressions": [
                {"key": "tier", "operator": "In", "values": ["b", "a"]},
                {"key": "env", "operator": "NotIn", "values": ["prod"]},
                {"key": "canary", "operator": "DoesNotExist"},
                {"key": "zone", "operator": "Exists"}
            ]
        }))
        .unwrap();
        assert_eq!(
            sel.to_string(),
            "app=web,!canary,env notin (prod),tier in (a,b),zone"
        );
        // Values keep their given order; only the string form sorts them.
        let tier = sel
            .requirements()
            .iter()
            .find(|r| r.key() == "tier")
            .unwrap();
        assert_eq!(tier.values(), ["b", "a"]);
        let labels = json!({"app": "web", "tier": "a", "zone": "z1"});
        assert!(sel.matches(labels.as_object().unwrap()));
        let labels = json!({"app": "web", "tier": "a", "zone": "z1", "canary": "1"});
        assert!(!sel.matches(labels.as_object().unwrap()));
    }

    #[test]
    fn json_selectors_reject_what_kubernetes_rejects() {
        let cases: Vec<(Value, String)> = vec![
            (
                json!({"matchExpressions": [{"key": "a", "operator": "Foo", "values": ["x"]}]}),
                "\"Foo\" is not a valid label selector operator".into(),
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
                "\"Gt\" is not a valid label selector operator".into(),
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "In"}]}),
                "values: Invalid value: []string(nil): for 'in', 'notin' operators, values set can't be empty".into(),
            ),
            (
                json!({"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]}),
                "values: Invalid value: []string{\"x\"}: values set must be empty for exists and does not exist".into(),
            ),
            (
                json!({"matchLabels": {"a b": "x"}}),
                format!("key: Invalid value: \"a b\": {NAME_RE}"),
            ),
            (
                json!({"matchLabels": {"a": "x y"}}),
                format!("values[0][a]: Invalid value: \"x y\": {VALUE_RE}"),
            ),
            (
                json!({"matchLabels": {"-a": "-"}}),
                format!("[key: Invalid value: \"-a\": {NAME_RE}, values[0][-a]: Invalid value: \"-\": {VALUE_RE}]"),
            ),
        ];
        for (input, want) in cases {
            assert_eq!(
                LabelSelector::from_json(&input).map_err(|e| e.to_string()),
                Err(want),
                "{input}"
            );
        }
    }

    #[test]
    fn json_selector_validation_reports_field_errors() {
        let errs = LabelSelector::validate_json(
            &json!({
                "matchLabels": {"a b": "ok"},
                "matchExpressions": [
                    {"key": "a", "operator": "In"},
                    {"key": "b", "operator": "Exists", "values": ["x"]},
                    {"key": "c", "operator": "Foo"},
                    {"key": "d", "operator": "In", "values": ["x y"]}
                ]
            }),
            "spec.selector",
            false,
        );
        let msgs: Vec<String> = errs.iter().map(ToString::to_string).collect();
        assert_eq!(
            msgs,
            vec![
                format!("spec.selector.matchLabels: Invalid value: \"a b\": {NAME_RE}"),
                "spec.selector.matchExpressions[0].values: Required value: must be specified when `operator` is 'In' or 'NotIn'".to_string(),
                "spec.selector.matchExpressions[1].values: Forbidden: may not be specified when `operator` is 'Exists' or 'DoesNotExist'".to_string(),
                "spec.selector.matchExpressions[2].operator: Invalid value: \"Foo\": not a valid selector operator".to_string(),
                format!("spec.selector.matchExpressions[3].values[0]: Invalid value: \"x y\": {VALUE_RE}"),
            ]
        );
        assert_eq!(errs[2].error_type.reason(), "FieldValueForbidden");
        let lenient = LabelSelector::validate_json(
            &json!({"matchExpressions": [{"key": "d", "operator": "In", "values": ["x y"]}]}),
            "spec.selector",
            true,
        );
        assert!(lenient.is_empty());
        assert!(LabelSelector::validate_json(&Value::Null, "spec.selector", false).is_empty());
    }

    #[test]
    fn exact_matches_are_reported_for_indexing() {
        let cases = [
            ("a=b", Some("b")),
            ("a==b", Some("b")),
            ("a in (b)", Some("b")),
            ("a in (b,c)", None),
            ("a!=b", None),
            ("a", None),
            ("c=d", None),
        ];
        for (sel, want) in cases {
            let s = LabelSelector::parse(sel).unwrap();
            assert_eq!(s.requires_exact_match("a"), want, "{sel:?}");
        }
    }

    #[test]
    fn requirements_built_in_code_are_validated() {
        assert!(Requirement::new("a", Operator::In, vec!["x".into()]).is_ok());
        assert_eq!(
            Requirement::new("a", Operator::Equals, vec![]).unwrap_err().message(),
            "values: Invalid value: []string{}: exact-match compatibility requires one single value"
        );
        assert_eq!(
            Requirement::new("a", Operator::GreaterThan, vec!["1".into(), "2".into()])
                .unwrap_err()
                .message(),
            "values: Invalid value: []string{\"1\", \"2\"}: for 'Gt', 'Lt' operators, exactly one value is required"
        );
        let sel = LabelSelector::from_labels_map(json!({"b": "2", "a": "1"}).as_object().unwrap())
            .unwrap();
        assert_eq!(sel.to_string(), "a=1,b=2");
        assert_eq!(
            "x in (b,a)".parse::<LabelSelector>().unwrap().to_string(),
            "x in (a,b)"
        );
    }
}
