//! kubectl's JSONPath templates (client-go `util/jsonpath`), as the API server uses them for
//! custom resources' printer columns and selectable fields: `{.status.replicas}`,
//! `{.items[0].name}`, `{.spec.containers[*].image}`, `{.status.conditions[?(@.type=="Ready")].status}`,
//! `{..name}`, unions `[a,b]`, slices `[1:3:2]`, quoted keys `['a']`. Missing keys give no
//! result (`AllowMissingKeys(true)`). `range`/`end` are parsed but not evaluated.

use std::borrow::Cow;

use serde_json::Value;

use super::gofmt;
use crate::patch::gofmt::float;

/// One parsed node of a template.
#[derive(Debug, Clone, PartialEq)]
enum Node {
    /// A `{...}` action: its nodes apply one after the other.
    List(Vec<Node>),
    Text(String),
    Field(String),
    Array([Param; 3]),
    Filter {
        left: Vec<Node>,
        right: Vec<Node>,
        op: String,
    },
    Int(i64),
    Float(f64),
    Bool(bool),
    Wildcard,
    Recursive,
    Union(Vec<Vec<Node>>),
    Identifier(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Default)]
struct Param {
    value: i64,
    known: bool,
    derived: bool,
}

/// A parsed JSONPath template.
#[derive(Debug, Clone)]
pub struct JsonPath {
    nodes: Vec<Node>,
}

type Results<'a> = Vec<Cow<'a, Value>>;

impl JsonPath {
    /// Parse a template such as `{.spec.replicas}` (text outside braces is kept as text).
    pub fn parse(template: &str) -> Result<JsonPath, String> {
        let mut p = Parser {
            input: template,
            pos: 0,
            start: 0,
        };
        let nodes = p.parse_text()?;
        Ok(JsonPath { nodes })
    }

    /// Parse a column's or selectable field's path the way the API server does: `{<path>}`.
    pub fn parse_field(path: &str) -> Result<JsonPath, String> {
        JsonPath::parse(&format!("{{{path}}}"))
    }

    /// Every top-level node's results on `data` (`FindResults`).
    pub fn find_results<'a>(&self, data: &'a Value) -> Result<Vec<Vec<Cow<'a, Value>>>, String> {
        let mut out = Vec::new();
        for node in &self.nodes {
            out.push(walk(vec![Cow::Borrowed(data)], node)?);
        }
        Ok(out)
    }

    /// The first result, as the printer columns and selectable fields take it.
    pub fn first<'a>(&self, data: &'a Value) -> Option<Cow<'a, Value>> {
        let mut results = self.find_results(data).ok()?;
        let first = results.first_mut()?;
        if first.is_empty() {
            return None;
        }
        Some(first.swap_remove(0))
    }
}

struct Parser<'a> {
    input: &'a str,
    pos: usize,
    start: usize,
}

fn is_terminator(c: Option<char>) -> bool {
    match c {
        None => true,
        Some(c) => matches!(
            c,
            ' ' | '\t' | '\r' | '\n' | '.' | ',' | '[' | ']' | '$' | '@' | '{' | '}'
        ),
    }
}

fn is_alphanumeric(c: char) -> bool {
    c == '_' || c.is_alphabetic() || c.is_numeric()
}

/// `%#U` of a rune: `U+0023 '#'`.
fn sharp_u(c: char) -> String {
    format!("U+{:04X} '{c}'", c as u32)
}

/// Parse `{text}` and return the action's list (`parseAction`).
fn parse_action(text: &str) -> Result<Vec<Node>, String> {
    let p = JsonPath::parse(&format!("{{{text}}}"))?;
    match p.nodes.into_iter().next() {
        Some(Node::List(nodes)) => Ok(nodes),
        _ => Ok(Vec::new()),
    }
}

impl<'a> Parser<'a> {
    fn rest(&self) -> &'a str {
        &self.input[self.pos..]
    }

    fn next(&mut self) -> Option<char> {
        let c = self.rest().chars().next()?;
        self.pos += c.len_utf8();
        Some(c)
    }

    fn peek(&self) -> Option<char> {
        self.rest().chars().next()
    }

    fn backup(&mut self, c: char) {
        self.pos -= c.len_utf8();
    }

    fn consume(&mut self) -> &'a str {
        let s = &self.input[self.start..self.pos];
        self.start = self.pos;
        s
    }

    fn parse_text(&mut self) -> Result<Vec<Node>, String> {
        let mut root = Vec::new();
        loop {
            if self.rest().starts_with('{') {
                if self.pos > self.start {
                    root.push(Node::Text(self.consume().to_string()));
                }
                self.pos += 1;
                self.consume();
                let mut action = Vec::new();
                self.parse_inside_action(&mut action)?;
                root.push(Node::List(action));
                continue;
            }
            if self.next().is_none() {
                break;
            }
        }
        if self.pos > self.start {
            root.push(Node::Text(self.consume().to_string()));
        }
        Ok(root)
    }

    fn parse_inside_action(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        loop {
            let rest = self.rest();
            if rest.starts_with('}') {
                self.pos += 1;
                self.consume();
                return Ok(());
            }
            if rest.starts_with("[?(") {
                self.parse_filter(cur)?;
                continue;
            }
            if rest.starts_with("..") {
                if cur.last() == Some(&Node::Recursive) {
                    return Err("invalid multiple recursive descent".into());
                }
                self.pos += 2;
                self.consume();
                cur.push(Node::Recursive);
                if self.peek().is_some_and(is_alphanumeric) {
                    self.parse_field(cur);
                }
                continue;
            }
            let Some(c) = self.next() else {
                return Err("unclosed action".into());
            };
            match c {
                '\r' | '\n' => return Err("unclosed action".into()),
                ' ' | '@' | '$' => {
                    self.consume();
                }
                '[' => self.parse_array(cur)?,
                '"' | '\'' => self.parse_quote(cur, c)?,
                '.' => self.parse_field(cur),
                c if c == '+' || c == '-' || c.is_numeric() => {
                    self.backup(c);
                    self.parse_number(cur)?;
                }
                c if is_alphanumeric(c) => {
                    self.backup(c);
                    self.parse_identifier(cur);
                }
                other => {
                    return Err(format!(
                        "unrecognized character in action: {}",
                        sharp_u(other)
                    ))
                }
            }
        }
    }

    fn parse_identifier(&mut self, cur: &mut Vec<Node>) {
        loop {
            let c = self.next();
            if is_terminator(c) {
                if let Some(c) = c {
                    self.backup(c);
                }
                break;
            }
        }
        let value = self.consume();
        match value {
            "true" => cur.push(Node::Bool(true)),
            "false" => cur.push(Node::Bool(false)),
            other => cur.push(Node::Identifier(other.to_string())),
        }
    }

    fn parse_number(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        if matches!(self.peek(), Some('+' | '-')) {
            self.next();
        }
        while let Some(c) = self.peek() {
            if c != '.' && !c.is_ascii_digit() {
                break;
            }
            self.next();
        }
        let value = self.consume();
        if let Ok(i) = value.parse::<i64>() {
            cur.push(Node::Int(i));
        } else if let Ok(f) = value.parse::<f64>() {
            cur.push(Node::Float(f));
        } else {
            return Err(format!("cannot parse number {value}"));
        }
        Ok(())
    }

    fn parse_array(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        loop {
            match self.next() {
                None | Some('\n') => return Err("unterminated array".into()),
                Some(']') => break,
                _ => {}
            }
        }
        let text = self.consume();
        let mut inner = &text[1..text.len() - 1];
        if inner == "*" {
            inner = ":";
        }
        let parts: Vec<&str> = inner.split(',').collect();
        if parts.len() > 1 {
            let mut union = Vec::new();
            for part in parts {
                union.push(parse_action(&format!("[{}]", part.trim_matches(' ')))?);
            }
            cur.push(Node::Union(union));
            return Ok(());
        }
        if inner.len() >= 2
            && inner.starts_with('\'')
            && inner.ends_with('\'')
            && !inner[1..inner.len() - 1].contains('\'')
        {
            cur.extend(parse_action(&format!(".{}", &inner[1..inner.len() - 1]))?);
            return Ok(());
        }
        let params = slice_params(inner)?;
        cur.push(Node::Array(params));
        Ok(())
    }

    fn parse_filter(&mut self, cur: &mut Vec<Node>) -> Result<(), String> {
        self.pos += 3;
        self.consume();
        let (mut begin, mut end) = (false, false);
        let mut pair = '\0';
        loop {
            let Some(c) = self.next() else {
                return Err("unterminated filter".into());
            };
            match c {
                '\n' => return Err("unterminated filter".into()),
                '"' | '\'' => {
                    if !begin {
                        begin = true;
                        pair = c;
                        continue;
                    }
                    let prev = self.input.as_bytes().get(self.pos.wrapping_sub(2)).copied();
                    if prev != Some(b'\\') && c == pair {
                        end = true;
                    }
                }
                ')' if begin == end => break,
                _ => {}
            }
        }
        if self.next() != Some(']') {
            return Err("unclosed array expect ]".into());
        }
        let text = self.consume();
        let text = &text[..text.len() - 2];
        match split_filter(text) {
            None => cur.push(Node::Filter {
                left: parse_action(text)?,
                right: Vec::new(),
                op: "exists".into(),
            }),
            Some((l, op, r)) => cur.push(Node::Filter {
                left: parse_action(l)?,
                right: parse_action(r)?,
                op: op.to_string(),
            }),
        }
        Ok(())
    }

    fn parse_quote(&mut self, cur: &mut Vec<Node>, end: char) -> Result<(), String> {
        loop {
            match self.next() {
                None | Some('\n') => return Err("unterminated quoted string".into()),
                Some(c) if c == end => {
                    let prev = self.input.as_bytes().get(self.pos.wrapping_sub(2)).copied();
                    if prev != Some(b'\\') {
                        break;
                    }
                }
                _ => {}
            }
        }
        let value = self.consume();
        let text = unquote(value).map_err(|e| format!("unquote string {value} error {e}"))?;
        cur.push(Node::Text(text));
        Ok(())
    }

    fn parse_field(&mut self, cur: &mut Vec<Node>) {
        self.consume();
        loop {
            match self.next() {
                Some('\\') => {
                    self.next();
                }
                c if is_terminator(c) => {
                    if let Some(c) = c {
                        self.backup(c);
                    }
                    break;
                }
                _ => {}
            }
        }
        let value = self.consume();
        if value == "*" {
            cur.push(Node::Wildcard);
        } else {
            cur.push(Node::Field(value.replace('\\', "")));
        }
    }
}

/// `^([^!<>=]+)([!<>=]+)(.+?)$` on a filter's text.
fn split_filter(text: &str) -> Option<(&str, &str, &str)> {
    let is_op = |c: char| matches!(c, '!' | '<' | '>' | '=');
    let op_start = text.find(is_op)?;
    if op_start == 0 {
        return None;
    }
    let op_len = text[op_start..].find(|c: char| !is_op(c))?;
    let right = &text[op_start + op_len..];
    if right.is_empty() {
        return None;
    }
    Some((&text[..op_start], &text[op_start..op_start + op_len], right))
}

/// The `[start:end:step]` parameters (`^(-?[\d]*)(:-?[\d]*)?(:-?[\d]*)?$`).
fn slice_params(text: &str) -> Result<[Param; 3], String> {
    let invalid = || format!("invalid array index {text}");
    let parts: Vec<&str> = text.splitn(3, ':').collect();
    let number_ok = |s: &str| {
        let digits = s.strip_prefix('-').unwrap_or(s);
        digits.bytes().all(|b| b.is_ascii_digit())
    };
    if !parts.iter().all(|p| number_ok(p)) {
        return Err(invalid());
    }
    let mut params = [Param::default(); 3];
    for i in 0..3 {
        match parts.get(i) {
            Some(v) if !v.is_empty() => {
                params[i].known = true;
                params[i].value = v
                    .parse()
                    .map_err(|_| format!("array index {v} is not a number"))?;
            }
            // "a:" — the colon is there, the number is not.
            Some(_) if i > 0 => params[i].known = false,
            _ if i == 1 && parts.len() == 1 => {
                params[1] = Param {
                    value: params[0].value + 1,
                    known: true,
                    derived: true,
                };
            }
            _ => {}
        }
    }
    Ok(params)
}

/// `UnquoteExtend`: a Go string literal in double or single quotes.
fn unquote(s: &str) -> Result<String, String> {
    let b = s.as_bytes();
    if b.len() < 2 || b[0] != b[b.len() - 1] || !matches!(b[0], b'"' | b'\'') {
        return Err("invalid syntax".into());
    }
    let inner = &s[1..s.len() - 1];
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('a') => out.push('\u{7}'),
            Some('b') => out.push('\u{8}'),
            Some('f') => out.push('\u{c}'),
            Some('v') => out.push('\u{b}'),
            Some(c @ ('\\' | '"' | '\'')) => out.push(c),
            _ => return Err("invalid syntax".into()),
        }
    }
    Ok(out)
}

/// Go's `reflect.Type.String()` for a decoded JSON value.
fn type_string(v: &Value) -> &'static str {
    gofmt::type_name(v)
}

fn walk<'a>(input: Results<'a>, node: &Node) -> Result<Results<'a>, String> {
    match node {
        Node::List(nodes) => eval_list(input, nodes),
        Node::Text(t) => Ok(vec![Cow::Owned(Value::String(t.clone()))]),
        Node::Field(name) => Ok(eval_field(input, name)),
        Node::Array(params) => eval_array(input, params),
        Node::Filter { left, right, op } => eval_filter(input, left, right, op),
        Node::Int(i) => Ok(input.iter().map(|_| Cow::Owned(Value::from(*i))).collect()),
        Node::Float(f) => Ok(input.iter().map(|_| Cow::Owned(Value::from(*f))).collect()),
        Node::Bool(b) => Ok(input.iter().map(|_| Cow::Owned(Value::Bool(*b))).collect()),
        Node::Wildcard => Ok(input.into_iter().flat_map(children).collect()),
        Node::Recursive => Ok(eval_recursive(input)),
        Node::Union(lists) => {
            let mut out = Vec::new();
            for l in lists {
                out.extend(eval_list(input.clone(), l)?);
            }
            Ok(out)
        }
        Node::Identifier(name) => Err(match name.as_str() {
            "range" | "end" => format!("{name} is not supported here"),
            other => format!("unrecognized identifier {other}"),
        }),
    }
}

fn eval_list<'a>(input: Results<'a>, nodes: &[Node]) -> Result<Results<'a>, String> {
    let mut cur = input;
    for n in nodes {
        cur = walk(cur, n)?;
    }
    Ok(cur)
}

fn eval_field<'a>(input: Results<'a>, name: &str) -> Results<'a> {
    let mut out = Vec::new();
    for v in input {
        match v {
            Cow::Borrowed(Value::Object(m)) => {
                if let Some(x) = m.get(name) {
                    out.push(Cow::Borrowed(x));
                }
            }
            Cow::Owned(Value::Object(mut m)) => {
                if let Some(x) = m.remove(name) {
                    out.push(Cow::Owned(x));
                }
            }
            _ => {}
        }
    }
    out
}

/// A container's children: map values (in key order), list items, a string's bytes.
fn children(v: Cow<'_, Value>) -> Results<'_> {
    match v {
        Cow::Borrowed(Value::Object(m)) => m.values().map(Cow::Borrowed).collect(),
        Cow::Borrowed(Value::Array(a)) => a.iter().map(Cow::Borrowed).collect(),
        Cow::Owned(Value::Object(m)) => m.into_iter().map(|(_, x)| Cow::Owned(x)).collect(),
        Cow::Owned(Value::Array(a)) => a.into_iter().map(Cow::Owned).collect(),
        Cow::Borrowed(Value::String(s)) => s.bytes().map(|b| Cow::Owned(Value::from(b))).collect(),
        Cow::Owned(Value::String(s)) => s.bytes().map(|b| Cow::Owned(Value::from(b))).collect(),
        _ => Vec::new(),
    }
}

fn eval_recursive(input: Results<'_>) -> Results<'_> {
    let mut out = Vec::new();
    for v in input {
        let kids = children(v.clone());
        if !kids.is_empty() {
            out.push(v);
            out.extend(eval_recursive(kids));
        }
    }
    out
}

fn eval_array<'a>(input: Results<'a>, params: &[Param; 3]) -> Result<Results<'a>, String> {
    let mut out = Vec::new();
    for v in input {
        if v.is_null() {
            continue;
        }
        let len = match v.as_ref() {
            Value::Array(a) => a.len() as i64,
            other => return Err(format!("{} is not array or slice", type_string(other))),
        };
        let mut p = *params;
        if !p[0].known {
            p[0].value = 0;
        }
        if p[0].value < 0 {
            p[0].value += len;
        }
        if !p[1].known {
            p[1].value = len;
        }
        if p[1].value < 0 || (p[1].value == 0 && p[1].derived) {
            p[1].value += len;
        }
        if p[1].value == p[0].value {
            return Ok(out);
        }
        if p[0].value >= len || p[0].value < 0 {
            return Err(format!(
                "array index out of bounds: index {}, length {len}",
                p[0].value
            ));
        }
        if p[1].value > len || p[1].value < 0 {
            return Err(format!(
                "array index out of bounds: index {}, length {len}",
                p[1].value - 1
            ));
        }
        if p[0].value > p[1].value {
            return Err(format!(
                "starting index {} is greater than ending index {}",
                p[0].value, p[1].value
            ));
        }
        let step = if p[2].known {
            if p[2].value <= 0 {
                return Err("step must be > 0".into());
            }
            p[2].value as usize
        } else {
            1
        };
        let (from, to) = (p[0].value as usize, p[1].value as usize);
        match v {
            Cow::Borrowed(Value::Array(a)) => {
                out.extend(a[from..to].iter().step_by(step).map(Cow::Borrowed))
            }
            Cow::Owned(Value::Array(a)) => {
                out.extend(a[from..to].iter().step_by(step).cloned().map(Cow::Owned))
            }
            _ => {}
        }
    }
    Ok(out)
}

fn eval_filter<'a>(
    input: Results<'a>,
    left: &[Node],
    right: &[Node],
    op: &str,
) -> Result<Results<'a>, String> {
    let mut out = Vec::new();
    for v in input {
        let items: Results<'a> = match v {
            Cow::Borrowed(Value::Array(a)) => a.iter().map(Cow::Borrowed).collect(),
            Cow::Owned(Value::Array(a)) => a.into_iter().map(Cow::Owned).collect(),
            other => {
                return Err(format!(
                    "{} is not array or slice and cannot be filtered",
                    gofmt::v(other.as_ref())
                ))
            }
        };
        for item in items {
            let lefts = eval_list(vec![item.clone()], left);
            if op == "exists" {
                if lefts.is_ok_and(|l| !l.is_empty()) {
                    out.push(item);
                }
                continue;
            }
            let lefts = lefts?;
            let l = match lefts.len() {
                0 => continue,
                1 => lefts
                    .into_iter()
                    .next()
                    .map(Cow::into_owned)
                    .unwrap_or(Value::Null),
                _ => return Err("can only compare one element at a time".into()),
            };
            let rights = eval_list(vec![item.clone()], right)?;
            let r = match rights.len() {
                0 => continue,
                1 => rights
                    .into_iter()
                    .next()
                    .map(Cow::into_owned)
                    .unwrap_or(Value::Null),
                _ => return Err("can only compare one element at a time".into()),
            };
            if compare(&l, &r, op)? {
                out.push(item);
            }
        }
    }
    Ok(out)
}

/// Go template comparison kinds.
#[derive(PartialEq)]
enum Kind {
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
}

fn kind(v: &Value) -> Result<Kind, String> {
    match v {
        Value::Bool(b) => Ok(Kind::Bool(*b)),
        Value::Number(n) if gofmt::is_int(n) => Ok(Kind::Int(n.as_i64().unwrap_or(0))),
        Value::Number(n) => Ok(Kind::Float(n.as_f64().unwrap_or(0.0))),
        Value::String(s) => Ok(Kind::Str(s.clone())),
        _ => Err("invalid type for comparison".into()),
    }
}

fn compare(l: &Value, r: &Value, op: &str) -> Result<bool, String> {
    let (a, b) = (kind(l)?, kind(r)?);
    let incompatible = || "incompatible types for comparison".to_string();
    let equal = || -> Result<bool, String> {
        match (&a, &b) {
            (Kind::Bool(x), Kind::Bool(y)) => Ok(x == y),
            (Kind::Int(x), Kind::Int(y)) => Ok(x == y),
            (Kind::Float(x), Kind::Float(y)) => Ok(x == y),
            (Kind::Str(x), Kind::Str(y)) => Ok(x == y),
            _ => Err(incompatible()),
        }
    };
    let less = || -> Result<bool, String> {
        match (&a, &b) {
            (Kind::Int(x), Kind::Int(y)) => Ok(x < y),
            (Kind::Float(x), Kind::Float(y)) => Ok(x < y),
            (Kind::Str(x), Kind::Str(y)) => Ok(x < y),
            (Kind::Bool(_), Kind::Bool(_)) => Err("invalid type for comparison".into()),
            _ => Err(incompatible()),
        }
    };
    match op {
        "==" => equal(),
        "!=" => equal().map(|e| !e),
        "<" => less(),
        "<=" => Ok(less()? || equal()?),
        ">" => Ok(!(less()? || equal()?)),
        ">=" => less().map(|l| !l),
        other => Err(format!("unrecognized filter operator {other}")),
    }
}

/// How `PrintResults` writes one value: containers as JSON (Go's encoding, HTML-escaped),
/// `<no value>` for null, the rest with `fmt.Fprint`.
pub(crate) fn print_value(v: &Value) -> String {
    match v {
        Value::Object(_) | Value::Array(_) => go_json(v),
        Value::Null => "<no value>".into(),
        Value::String(s) => s.clone(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => gofmt::number(n),
    }
}

/// Go's `json.Marshal` of a decoded value: compact, `<`, `>`, `&`, U+2028 and U+2029 escaped.
pub(crate) fn go_json(v: &Value) -> String {
    let s = match v {
        Value::Number(n) if !gofmt::is_int(n) => return go_json_float(n.as_f64().unwrap_or(0.0)),
        _ => v.to_string(),
    };
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '<' => out.push_str("\\u003c"),
            '>' => out.push_str("\\u003e"),
            '&' => out.push_str("\\u0026"),
            '\u{2028}' => out.push_str("\\u2028"),
            '\u{2029}' => out.push_str("\\u2029"),
            c => out.push(c),
        }
    }
    out
}

/// Go's JSON encoding of a float64: `%f`-like between 1e-6 and 1e21, else exponent form.
fn go_json_float(f: f64) -> String {
    let abs = f.abs();
    if abs != 0.0 && !(1e-6..1e21).contains(&abs) {
        let s = float(f);
        // Go writes "1e-07", JSON wants "1e-7".
        return match s.split_once("e-0") {
            Some((m, e)) => format!("{m}e-{e}"),
            None => s,
        };
    }
    float(f)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn eval(path: &str, data: &Value) -> Vec<Value> {
        let p = JsonPath::parse_field(path).unwrap();
        p.find_results(data)
            .unwrap()
            .into_iter()
            .flatten()
            .map(Cow::into_owned)
            .collect()
    }

    #[test]
    fn evaluates_like_kubectl() {
        let data = json!({
            "kind": "List",
            "items": [
                {"name": "a", "labels": {"x": "1"}, "n": 1},
                {"name": "b", "n": 2},
                {"name": "c", "n": 3},
            ],
            "status": {"conditions": [
                {"type": "Ready", "status": "True"},
                {"type": "Synced", "status": "False"},
            ]},
            "spec": {"replicas": 3, "weird.key": "w"},
        });
        assert_eq!(eval(".kind", &data), vec![json!("List")]);
        assert_eq!(eval(".items[0].name", &data), vec![json!("a")]);
        assert_eq!(eval(".items[-1].name", &data), vec![json!("c")]);
        assert_eq!(
            eval(".items[*].name", &data),
            vec![json!("a"), json!("b"), json!("c")]
        );
        assert_eq!(
            eval(".items[0:2].name", &data),
            vec![json!("a"), json!("b")]
        );
        assert_eq!(
            eval(".items[0:3:2].name", &data),
            vec![json!("a"), json!("c")]
        );
        assert_eq!(
            eval(".items[0,2].name", &data),
            vec![json!("a"), json!("c")]
        );
        assert_eq!(
            eval(".status.conditions[?(@.type==\"Ready\")].status", &data),
            vec![json!("True")]
        );
        assert_eq!(
            eval(".items[?(@.n>1)].name", &data),
            vec![json!("b"), json!("c")]
        );
        assert_eq!(eval(".items[?(@.labels)].name", &data), vec![json!("a")]);
        assert_eq!(
            eval("..name", &data),
            vec![json!("a"), json!("b"), json!("c")]
        );
        assert_eq!(eval(".spec['replicas']", &data), vec![json!(3)]);
        assert_eq!(eval(".spec.weird\\.key", &data), vec![json!("w")]);
        assert!(eval(".missing.field", &data).is_empty());
        let p = JsonPath::parse_field(".items[5].name").unwrap();
        assert_eq!(
            p.find_results(&data).unwrap_err(),
            "array index out of bounds: index 5, length 3"
        );
        let p = JsonPath::parse_field(".kind[0]").unwrap();
        assert_eq!(
            p.find_results(&data).unwrap_err(),
            "string is not array or slice"
        );
    }

    #[test]
    fn parse_errors_match_client_go() {
        assert_eq!(JsonPath::parse("{.a").unwrap_err(), "unclosed action");
        assert_eq!(JsonPath::parse("{.a[0}").unwrap_err(), "unterminated array");
        assert_eq!(
            JsonPath::parse("{.a[x]}").unwrap_err(),
            "invalid array index x"
        );
        assert_eq!(
            JsonPath::parse("{#}").unwrap_err(),
            "unrecognized character in action: U+0023 '#'"
        );
        assert_eq!(
            JsonPath::parse("{.a[?(@.b==1}").unwrap_err(),
            "unterminated filter"
        );
        assert_eq!(
            JsonPath::parse("{....a}").unwrap_err(),
            "invalid multiple recursive descent"
        );
    }

    #[test]
    fn values_print_like_go() {
        assert_eq!(
            print_value(&json!({"b": "<x>", "a": 1})),
            "{\"a\":1,\"b\":\"\\u003cx\\u003e\"}"
        );
        assert_eq!(print_value(&json!(null)), "<no value>");
        assert_eq!(print_value(&json!(1.5)), "1.5");
        assert_eq!(print_value(&json!(true)), "true");
        assert_eq!(go_json(&json!(1e21)), "1e+21");
        assert_eq!(go_json(&json!(0.0000001)), "1e-7");
    }
}
