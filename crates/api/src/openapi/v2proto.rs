//! `/openapi/v2` as protobuf: the Swagger 2.0 document encoded as gnostic's `openapi.v2.Document`
//! (github.com/google/gnostic-models, openapiv2/OpenAPIv2.proto), the form client-go's
//! discovery client asks for (`Accept: application/com.github.proto-openapi.spec.v2@v1.0+protobuf`).
//! kubectl reads it when the OpenAPI v3 documents do not settle whether a kind supports
//! server-side field validation (kinds without a PATCH operation, e.g. TokenReview), and then
//! validates the object client-side against the definitions found here.
//!
//! The encoding follows how kube-apiserver produces the document: the JSON is read into the
//! gnostic messages field by field, `x-` keys become vendor extensions whose values are carried
//! as YAML text (`Any.yaml`), maps become ordered lists of (name, value) pairs in document
//! order, and proto3 scalars at their zero value are left out. Keys the Swagger 2.0 schema
//! object has no field for (`oneOf`, `anyOf`, `not`) are dropped: protobuf cannot carry them.
//!
//! The writer is a small hand-written protobuf encoder (no code generation).

use std::sync::OnceLock;

use bytes::Bytes;
use serde_json::{Map, Value};

/// The media type kube-apiserver answers with for either protobuf request type.
pub const CONTENT_TYPE: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
/// The media type client-go asks for (the older spelling; still accepted).
pub const CONTENT_TYPE_DEPRECATED: &str =
    "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

static PROTO: OnceLock<Bytes> = OnceLock::new();
static ETAG: OnceLock<String> = OnceLock::new();

/// The `/openapi/v2` document ([`super::v2`]) as an `openapi.v2.Document` message; built once.
pub fn v2_bytes() -> Bytes {
    PROTO
        .get_or_init(|| Bytes::from(encode_document(&super::v2())))
        .clone()
}

/// The `ETag` of `/openapi/v2`, quoted: a hash of the JSON form, shared by the protobuf form
/// (the response varies on `Accept`), as kube-apiserver does.
pub fn etag() -> &'static str {
    ETAG.get_or_init(|| format!("\"{}\"", super::content_hash(&super::v2_bytes())))
}

/// The representations `/openapi/v2` is served in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Json,
    Protobuf,
}

/// Pick the representation for an `Accept` header as kube-apiserver does: clauses by
/// preference (quality, then specificity), the first one that names JSON or one of the two
/// protobuf types (or a wildcard) wins; JSON before protobuf for wildcards. `None`: 406.
pub fn negotiate(accept: &str) -> Option<Format> {
    let accept = if accept.trim().is_empty() {
        "*/*"
    } else {
        accept
    };
    let mut clauses: Vec<(f32, u8, &str, &str)> = Vec::new();
    for clause in accept.split(',') {
        let mut parts = clause.split(';');
        let media = parts.next().unwrap_or("").trim();
        let mut q = 1.0f32;
        for p in parts {
            if let Some((k, v)) = p.split_once('=') {
                if k.trim() == "q" {
                    q = v.trim().parse().unwrap_or(0.0);
                }
            }
        }
        if q <= 0.0 {
            continue;
        }
        let (ty, sub) = match media.split_once('/') {
            Some((t, s)) => (t.trim(), s.trim()),
            None if media == "*" => ("*", "*"),
            None => continue,
        };
        let specificity = match (ty, sub) {
            ("*", _) => 0,
            (_, "*") => 1,
            _ => 2,
        };
        clauses.push((q, specificity, ty, sub));
    }
    // Stable: equal clauses keep their order in the header.
    clauses.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
    let offered = [
        ("application", "json", Format::Json),
        (
            "application",
            &CONTENT_TYPE_DEPRECATED["application/".len()..],
            Format::Protobuf,
        ),
        (
            "application",
            &CONTENT_TYPE["application/".len()..],
            Format::Protobuf,
        ),
    ];
    for (_, _, ty, sub) in clauses {
        for (oty, osub, format) in offered {
            if (ty == "*" || ty.eq_ignore_ascii_case(oty))
                && (sub == "*" || sub.eq_ignore_ascii_case(osub))
            {
                return Some(format);
            }
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Wire format

const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;

/// Append `v` as a base-128 varint.
pub(crate) fn put_varint(buf: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        buf.push((v as u8) | 0x80);
        v >>= 7;
    }
    buf.push(v as u8);
}

/// A protobuf message being written. Scalars at their proto3 default are skipped (implicit
/// presence); messages are always written, empty or not (explicit presence).
#[derive(Default)]
pub(crate) struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub(crate) fn new() -> Self {
        Writer::default()
    }

    pub(crate) fn into_bytes(self) -> Vec<u8> {
        self.buf
    }

    fn key(&mut self, field: u32, wire: u8) {
        put_varint(&mut self.buf, (u64::from(field) << 3) | u64::from(wire));
    }

    /// A length-delimited field, written whatever its length.
    pub(crate) fn bytes(&mut self, field: u32, b: &[u8]) {
        self.key(field, LEN);
        put_varint(&mut self.buf, b.len() as u64);
        self.buf.extend_from_slice(b);
    }

    /// A singular `string`: nothing when empty.
    pub(crate) fn string(&mut self, field: u32, s: &str) {
        if !s.is_empty() {
            self.bytes(field, s.as_bytes());
        }
    }

    /// One element of a `repeated string` (written even when empty).
    pub(crate) fn repeated_string(&mut self, field: u32, s: &str) {
        self.bytes(field, s.as_bytes());
    }

    /// A singular `bool`: nothing when false.
    pub(crate) fn bool(&mut self, field: u32, b: bool) {
        if b {
            self.oneof_bool(field, b);
        }
    }

    /// A `bool` member of a `oneof`: present, so written even when false.
    pub(crate) fn oneof_bool(&mut self, field: u32, b: bool) {
        self.key(field, VARINT);
        self.buf.push(u8::from(b));
    }

    /// A singular `int64`: nothing when zero; negative numbers take ten bytes.
    pub(crate) fn int64(&mut self, field: u32, v: i64) {
        if v != 0 {
            self.key(field, VARINT);
            put_varint(&mut self.buf, v as u64);
        }
    }

    /// A singular `double`: nothing when +0.0.
    pub(crate) fn double(&mut self, field: u32, v: f64) {
        if v.to_bits() != 0 {
            self.key(field, FIXED64);
            self.buf.extend_from_slice(&v.to_le_bytes());
        }
    }

    /// An embedded message, filled by `f`.
    pub(crate) fn message(&mut self, field: u32, f: impl FnOnce(&mut Writer)) {
        let mut inner = Writer::new();
        f(&mut inner);
        self.bytes(field, &inner.buf);
    }
}

// ---------------------------------------------------------------------------------------------
// YAML for `Any` values

/// A JSON value as the YAML text gnostic stores in `Any.yaml`: block style, plain scalars where
/// that reads back as the same string, double-quoted ones elsewhere.
pub(crate) fn to_yaml(v: &Value) -> String {
    let mut out = String::new();
    match v {
        Value::Object(m) if !m.is_empty() => yaml_map(&mut out, m, 0, false),
        Value::Array(a) if !a.is_empty() => yaml_seq(&mut out, a, 0, false),
        other => {
            out.push_str(&yaml_scalar(other));
            out.push('\n');
        }
    }
    out
}

fn pad(out: &mut String, indent: usize) {
    out.extend(std::iter::repeat_n(' ', indent));
}

/// Mapping entries at `indent`; the first one continues the current line when `inline`.
fn yaml_map(out: &mut String, m: &Map<String, Value>, indent: usize, inline: bool) {
    for (i, (k, v)) in m.iter().enumerate() {
        if i > 0 || !inline {
            pad(out, indent);
        }
        out.push_str(&yaml_string(k));
        out.push(':');
        match v {
            Value::Object(m) if !m.is_empty() => {
                out.push('\n');
                yaml_map(out, m, indent + 2, false);
            }
            Value::Array(a) if !a.is_empty() => {
                out.push('\n');
                yaml_seq(out, a, indent, false);
            }
            scalar => {
                out.push(' ');
                out.push_str(&yaml_scalar(scalar));
                out.push('\n');
            }
        }
    }
}

/// Sequence items at `indent`; the first one continues the current line when `inline`.
fn yaml_seq(out: &mut String, a: &[Value], indent: usize, inline: bool) {
    for (i, v) in a.iter().enumerate() {
        if i > 0 || !inline {
            pad(out, indent);
        }
        out.push_str("- ");
        match v {
            Value::Object(m) if !m.is_empty() => yaml_map(out, m, indent + 2, true),
            Value::Array(a) if !a.is_empty() => yaml_seq(out, a, indent + 2, true),
            scalar => {
                out.push_str(&yaml_scalar(scalar));
                out.push('\n');
            }
        }
    }
}

/// A scalar or empty collection, in flow form.
fn yaml_scalar(v: &Value) -> String {
    match v {
        Value::Null => "null".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => yaml_string(s),
        Value::Array(_) => "[]".into(),
        Value::Object(_) => "{}".into(),
    }
}

/// Words YAML 1.1 readers resolve to something other than a string.
const YAML_RESERVED: &[&str] = &[
    "true", "false", "yes", "no", "on", "off", "y", "n", "null", "~",
];

fn yaml_string(s: &str) -> String {
    let plain = s
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '/')
        && !s.ends_with(' ')
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '/' | '-' | ' '))
        && !YAML_RESERVED.iter().any(|w| w.eq_ignore_ascii_case(s));
    if plain {
        return s.to_string();
    }
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            // Control characters, and the ones YAML treats as line breaks or a BOM.
            c if (c as u32) < 0x20
                || c == '\u{7f}'
                || c == '\u{85}'
                || c == '\u{2028}'
                || c == '\u{2029}'
                || c == '\u{feff}' =>
            {
                out.push_str(&format!("\\u{:04x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

// ---------------------------------------------------------------------------------------------
// Document → messages. Field numbers are those of OpenAPIv2.proto.

/// Encode a Swagger 2.0 document (JSON) as an `openapi.v2.Document`.
pub fn encode_document(doc: &Value) -> Vec<u8> {
    let mut w = Writer::new();
    if let Value::Object(m) = doc {
        document(&mut w, m);
    }
    w.into_bytes()
}

fn str_of<'a>(m: &'a Map<String, Value>, key: &str) -> &'a str {
    m.get(key).and_then(Value::as_str).unwrap_or("")
}

fn bool_of(m: &Map<String, Value>, key: &str) -> bool {
    m.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn f64_of(m: &Map<String, Value>, key: &str) -> f64 {
    m.get(key).and_then(Value::as_f64).unwrap_or(0.0)
}

fn i64_of(m: &Map<String, Value>, key: &str) -> i64 {
    match m.get(key) {
        Some(Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .unwrap_or(0),
        _ => 0,
    }
}

fn obj<'a>(m: &'a Map<String, Value>, key: &str) -> Option<&'a Map<String, Value>> {
    m.get(key).and_then(Value::as_object)
}

/// `repeated string`: a JSON array of strings (a lone string counts as one).
fn strings(w: &mut Writer, field: u32, m: &Map<String, Value>, key: &str) {
    match m.get(key) {
        Some(Value::Array(a)) => {
            for s in a.iter().filter_map(Value::as_str) {
                w.repeated_string(field, s);
            }
        }
        Some(Value::String(s)) => w.repeated_string(field, s),
        _ => {}
    }
}

/// An embedded message from the object at `key`, when there is one.
fn sub(
    w: &mut Writer,
    field: u32,
    m: &Map<String, Value>,
    key: &str,
    f: impl FnOnce(&mut Writer, &Map<String, Value>),
) {
    if let Some(o) = obj(m, key) {
        w.message(field, |w| f(w, o));
    }
}

/// `Any { yaml = 2 }`.
fn any(w: &mut Writer, v: &Value) {
    w.string(2, &to_yaml(v));
}

fn any_field(w: &mut Writer, field: u32, m: &Map<String, Value>, key: &str) {
    if let Some(v) = m.get(key) {
        w.message(field, |w| any(w, v));
    }
}

fn repeated_any(w: &mut Writer, field: u32, m: &Map<String, Value>, key: &str) {
    if let Some(Value::Array(a)) = m.get(key) {
        for v in a {
            w.message(field, |w| any(w, v));
        }
    }
}

/// `repeated NamedAny vendor_extension`: the object's `x-` keys, in order.
fn extensions(w: &mut Writer, field: u32, m: &Map<String, Value>) {
    for (k, v) in m.iter().filter(|(k, _)| k.starts_with("x-")) {
        w.message(field, |w| {
            w.string(1, k);
            w.message(2, |w| any(w, v));
        });
    }
}

/// A map-as-list: one `Named*` message (`name = 1`, `value = 2`) per entry that is not an
/// extension (when `skip_extensions`).
fn named(
    w: &mut Writer,
    field: u32,
    m: &Map<String, Value>,
    skip_extensions: bool,
    mut f: impl FnMut(&mut Writer, &Value),
) {
    for (k, v) in m {
        if skip_extensions && k.starts_with("x-") {
            continue;
        }
        w.message(field, |w| {
            w.string(1, k);
            w.message(2, |w| f(w, v));
        });
    }
}

fn with_obj(w: &mut Writer, v: &Value, f: impl FnOnce(&mut Writer, &Map<String, Value>)) {
    if let Value::Object(m) = v {
        f(w, m);
    }
}

fn document(w: &mut Writer, m: &Map<String, Value>) {
    w.string(1, str_of(m, "swagger"));
    sub(w, 2, m, "info", info);
    w.string(3, str_of(m, "host"));
    w.string(4, str_of(m, "basePath"));
    strings(w, 5, m, "schemes");
    strings(w, 6, m, "consumes");
    strings(w, 7, m, "produces");
    sub(w, 8, m, "paths", paths);
    sub(w, 9, m, "definitions", |w, d| {
        named(w, 1, d, false, |w, v| with_obj(w, v, schema));
    });
    sub(w, 10, m, "parameters", |w, d| {
        named(w, 1, d, false, |w, v| with_obj(w, v, parameter));
    });
    sub(w, 11, m, "responses", |w, d| {
        named(w, 1, d, false, |w, v| with_obj(w, v, response));
    });
    security_requirements(w, 12, m);
    sub(w, 13, m, "securityDefinitions", |w, d| {
        named(w, 1, d, false, |w, v| with_obj(w, v, security_definition));
    });
    if let Some(Value::Array(tags)) = m.get("tags") {
        for t in tags {
            w.message(14, |w| with_obj(w, t, tag));
        }
    }
    sub(w, 15, m, "externalDocs", external_docs);
    extensions(w, 16, m);
}

fn info(w: &mut Writer, m: &Map<String, Value>) {
    w.string(1, str_of(m, "title"));
    w.string(2, str_of(m, "version"));
    w.string(3, str_of(m, "description"));
    w.string(4, str_of(m, "termsOfService"));
    sub(w, 5, m, "contact", |w, c| {
        w.string(1, str_of(c, "name"));
        w.string(2, str_of(c, "url"));
        w.string(3, str_of(c, "email"));
        extensions(w, 4, c);
    });
    sub(w, 6, m, "license", |w, l| {
        w.string(1, str_of(l, "name"));
        w.string(2, str_of(l, "url"));
        extensions(w, 3, l);
    });
    extensions(w, 7, m);
}

fn external_docs(w: &mut Writer, m: &Map<String, Value>) {
    w.string(1, str_of(m, "description"));
    w.string(2, str_of(m, "url"));
    extensions(w, 3, m);
}

fn tag(w: &mut Writer, m: &Map<String, Value>) {
    w.string(1, str_of(m, "name"));
    w.string(2, str_of(m, "description"));
    sub(w, 3, m, "externalDocs", external_docs);
    extensions(w, 4, m);
}

/// `repeated SecurityRequirement` from `[{"name": ["scope", …]}, …]`.
fn security_requirements(w: &mut Writer, field: u32, m: &Map<String, Value>) {
    let Some(Value::Array(reqs)) = m.get("security") else {
        return;
    };
    for r in reqs {
        w.message(field, |w| {
            with_obj(w, r, |w, r| {
                named(w, 1, r, false, |w, scopes| {
                    if let Value::Array(a) = scopes {
                        for s in a.iter().filter_map(Value::as_str) {
                            w.repeated_string(1, s);
                        }
                    }
                });
            });
        });
    }
}

/// `SecurityDefinitionsItem`: the member is chosen by `type` (and `flow` for OAuth2).
fn security_definition(w: &mut Writer, m: &Map<String, Value>) {
    let scopes = |w: &mut Writer, m: &Map<String, Value>| {
        sub(w, 3, m, "scopes", |w, s| {
            named(w, 1, s, true, |w, v| {
                if let Value::String(s) = v {
                    w.repeated_string(1, s);
                }
            });
        });
    };
    match (str_of(m, "type"), str_of(m, "flow")) {
        ("basic", _) => w.message(1, |w| {
            w.string(1, str_of(m, "type"));
            w.string(2, str_of(m, "description"));
            extensions(w, 3, m);
        }),
        ("apiKey", _) => w.message(2, |w| {
            w.string(1, str_of(m, "type"));
            w.string(2, str_of(m, "name"));
            w.string(3, str_of(m, "in"));
            w.string(4, str_of(m, "description"));
            extensions(w, 5, m);
        }),
        ("oauth2", "implicit") => w.message(3, |w| {
            w.string(1, str_of(m, "type"));
            w.string(2, str_of(m, "flow"));
            scopes(w, m);
            w.string(4, str_of(m, "authorizationUrl"));
            w.string(5, str_of(m, "description"));
            extensions(w, 6, m);
        }),
        ("oauth2", flow @ ("password" | "application")) => {
            w.message(if flow == "password" { 4 } else { 5 }, |w| {
                w.string(1, str_of(m, "type"));
                w.string(2, str_of(m, "flow"));
                scopes(w, m);
                w.string(4, str_of(m, "tokenUrl"));
                w.string(5, str_of(m, "description"));
                extensions(w, 6, m);
            })
        }
        ("oauth2", "accessCode") => w.message(6, |w| {
            w.string(1, str_of(m, "type"));
            w.string(2, str_of(m, "flow"));
            scopes(w, m);
            w.string(4, str_of(m, "authorizationUrl"));
            w.string(5, str_of(m, "tokenUrl"));
            w.string(6, str_of(m, "description"));
            extensions(w, 7, m);
        }),
        _ => {}
    }
}

fn paths(w: &mut Writer, m: &Map<String, Value>) {
    extensions(w, 1, m);
    named(w, 2, m, true, |w, v| with_obj(w, v, path_item));
}

fn path_item(w: &mut Writer, m: &Map<String, Value>) {
    w.string(1, str_of(m, "$ref"));
    for (field, method) in [
        (2, "get"),
        (3, "put"),
        (4, "post"),
        (5, "delete"),
        (6, "options"),
        (7, "head"),
        (8, "patch"),
    ] {
        sub(w, field, m, method, operation);
    }
    parameters_items(w, 9, m);
    extensions(w, 10, m);
}

fn operation(w: &mut Writer, m: &Map<String, Value>) {
    strings(w, 1, m, "tags");
    w.string(2, str_of(m, "summary"));
    w.string(3, str_of(m, "description"));
    sub(w, 4, m, "externalDocs", external_docs);
    w.string(5, str_of(m, "operationId"));
    strings(w, 6, m, "produces");
    strings(w, 7, m, "consumes");
    parameters_items(w, 8, m);
    sub(w, 9, m, "responses", |w, r| {
        named(w, 1, r, true, |w, v| {
            with_obj(w, v, |w, r| {
                if r.contains_key("$ref") {
                    w.message(2, |w| json_reference(w, r));
                } else {
                    w.message(1, |w| response(w, r));
                }
            })
        });
        extensions(w, 2, r);
    });
    strings(w, 10, m, "schemes");
    w.bool(11, bool_of(m, "deprecated"));
    security_requirements(w, 12, m);
    extensions(w, 13, m);
}

fn json_reference(w: &mut Writer, m: &Map<String, Value>) {
    w.string(1, str_of(m, "$ref"));
    w.string(2, str_of(m, "description"));
}

/// `repeated ParametersItem` from the `parameters` array.
fn parameters_items(w: &mut Writer, field: u32, m: &Map<String, Value>) {
    let Some(Value::Array(params)) = m.get("parameters") else {
        return;
    };
    for p in params {
        w.message(field, |w| {
            with_obj(w, p, |w, p| {
                if p.contains_key("$ref") {
                    w.message(2, |w| json_reference(w, p));
                } else {
                    w.message(1, |w| parameter(w, p));
                }
            })
        });
    }
}

/// `Parameter`: a body parameter, or one of the four non-body kinds by `in`.
fn parameter(w: &mut Writer, m: &Map<String, Value>) {
    let location = str_of(m, "in");
    if location == "body" {
        w.message(1, |w| {
            w.string(1, str_of(m, "description"));
            w.string(2, str_of(m, "name"));
            w.string(3, location);
            w.bool(4, bool_of(m, "required"));
            sub(w, 5, m, "schema", schema);
            extensions(w, 6, m);
        });
        return;
    }
    // (NonBodyParameter member, whether the sub-schema has allowEmptyValue)
    let (member, allow_empty) = match location {
        "header" => (1, false),
        "formData" => (2, true),
        "query" => (3, true),
        "path" => (4, false),
        _ => return,
    };
    w.message(2, |w| {
        w.message(member, |w| {
            w.bool(1, bool_of(m, "required"));
            w.string(2, location);
            w.string(3, str_of(m, "description"));
            w.string(4, str_of(m, "name"));
            let base = if allow_empty {
                w.bool(5, bool_of(m, "allowEmptyValue"));
                6
            } else {
                5
            };
            let next = validations(w, base, m);
            extensions(w, next, m);
        });
    });
}

/// The run of fields (type … multipleOf) that parameter sub-schemas, `PrimitivesItems` and
/// `Header` share, numbered from `base`. Returns the number after the last.
fn validations(w: &mut Writer, base: u32, m: &Map<String, Value>) -> u32 {
    w.string(base, str_of(m, "type"));
    w.string(base + 1, str_of(m, "format"));
    sub(w, base + 2, m, "items", primitives_items);
    w.string(base + 3, str_of(m, "collectionFormat"));
    any_field(w, base + 4, m, "default");
    w.double(base + 5, f64_of(m, "maximum"));
    w.bool(base + 6, bool_of(m, "exclusiveMaximum"));
    w.double(base + 7, f64_of(m, "minimum"));
    w.bool(base + 8, bool_of(m, "exclusiveMinimum"));
    w.int64(base + 9, i64_of(m, "maxLength"));
    w.int64(base + 10, i64_of(m, "minLength"));
    w.string(base + 11, str_of(m, "pattern"));
    w.int64(base + 12, i64_of(m, "maxItems"));
    w.int64(base + 13, i64_of(m, "minItems"));
    w.bool(base + 14, bool_of(m, "uniqueItems"));
    repeated_any(w, base + 15, m, "enum");
    w.double(base + 16, f64_of(m, "multipleOf"));
    base + 17
}

fn primitives_items(w: &mut Writer, m: &Map<String, Value>) {
    let next = validations(w, 1, m);
    extensions(w, next, m);
}

fn response(w: &mut Writer, m: &Map<String, Value>) {
    w.string(1, str_of(m, "description"));
    sub(w, 2, m, "schema", |w, s| {
        if is_file_schema(s) {
            w.message(2, |w| file_schema(w, s));
        } else {
            w.message(1, |w| schema(w, s));
        }
    });
    sub(w, 3, m, "headers", |w, h| {
        named(w, 1, h, false, |w, v| {
            with_obj(w, v, |w, h| {
                let next = validations(w, 1, h);
                w.string(next, str_of(h, "description"));
                extensions(w, next + 1, h);
            })
        });
    });
    sub(w, 4, m, "examples", |w, e| {
        named(w, 1, e, false, any);
    });
    extensions(w, 5, m);
}

/// The keys a `FileSchema` may have.
const FILE_SCHEMA_KEYS: &[&str] = &[
    "default",
    "description",
    "example",
    "externalDocs",
    "format",
    "readOnly",
    "required",
    "title",
    "type",
];

/// gnostic reads a response schema as a `FileSchema` whenever it can: it has a `type` and
/// nothing a `FileSchema` lacks (so `{"type": "string"}` is one).
fn is_file_schema(m: &Map<String, Value>) -> bool {
    m.contains_key("type")
        && m.keys()
            .all(|k| k.starts_with("x-") || FILE_SCHEMA_KEYS.contains(&k.as_str()))
}

fn file_schema(w: &mut Writer, m: &Map<String, Value>) {
    w.string(1, str_of(m, "format"));
    w.string(2, str_of(m, "title"));
    w.string(3, str_of(m, "description"));
    any_field(w, 4, m, "default");
    strings(w, 5, m, "required");
    w.string(6, str_of(m, "type"));
    w.bool(7, bool_of(m, "readOnly"));
    sub(w, 8, m, "externalDocs", external_docs);
    any_field(w, 9, m, "example");
    extensions(w, 10, m);
}

fn schema(w: &mut Writer, m: &Map<String, Value>) {
    w.string(1, str_of(m, "$ref"));
    w.string(2, str_of(m, "format"));
    w.string(3, str_of(m, "title"));
    w.string(4, str_of(m, "description"));
    any_field(w, 5, m, "default");
    w.double(6, f64_of(m, "multipleOf"));
    w.double(7, f64_of(m, "maximum"));
    w.bool(8, bool_of(m, "exclusiveMaximum"));
    w.double(9, f64_of(m, "minimum"));
    w.bool(10, bool_of(m, "exclusiveMinimum"));
    w.int64(11, i64_of(m, "maxLength"));
    w.int64(12, i64_of(m, "minLength"));
    w.string(13, str_of(m, "pattern"));
    w.int64(14, i64_of(m, "maxItems"));
    w.int64(15, i64_of(m, "minItems"));
    w.bool(16, bool_of(m, "uniqueItems"));
    w.int64(17, i64_of(m, "maxProperties"));
    w.int64(18, i64_of(m, "minProperties"));
    strings(w, 19, m, "required");
    repeated_any(w, 20, m, "enum");
    match m.get("additionalProperties") {
        Some(Value::Object(s)) => w.message(21, |w| w.message(1, |w| schema(w, s))),
        Some(Value::Bool(b)) => w.message(21, |w| w.oneof_bool(2, *b)),
        _ => {}
    }
    if m.contains_key("type") {
        w.message(22, |w| strings(w, 1, m, "type"));
    }
    match m.get("items") {
        Some(Value::Object(s)) => w.message(23, |w| w.message(1, |w| schema(w, s))),
        Some(Value::Array(list)) => w.message(23, |w| {
            for s in list {
                w.message(1, |w| with_obj(w, s, schema));
            }
        }),
        _ => {}
    }
    if let Some(Value::Array(list)) = m.get("allOf") {
        for s in list {
            w.message(24, |w| with_obj(w, s, schema));
        }
    }
    sub(w, 25, m, "properties", |w, props| {
        named(w, 1, props, false, |w, v| with_obj(w, v, schema));
    });
    w.string(26, str_of(m, "discriminator"));
    w.bool(27, bool_of(m, "readOnly"));
    sub(w, 28, m, "xml", |w, x| {
        w.string(1, str_of(x, "name"));
        w.string(2, str_of(x, "namespace"));
        w.string(3, str_of(x, "prefix"));
        w.bool(4, bool_of(x, "attribute"));
        w.bool(5, bool_of(x, "wrapped"));
        extensions(w, 6, x);
    });
    sub(w, 29, m, "externalDocs", external_docs);
    any_field(w, 30, m, "example");
    extensions(w, 31, m);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // -- A small protobuf reader, independent of the writer above. --------------------------

    #[derive(Clone, Copy, Debug, PartialEq)]
    enum Field<'a> {
        Varint(u64),
        Fixed64(u64),
        Bytes(&'a [u8]),
    }

    fn read_varint(buf: &[u8], pos: &mut usize) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = *buf.get(*pos).ok_or("truncated varint")?;
            *pos += 1;
            v |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                return Ok(v);
            }
        }
        Err("varint too long".into())
    }

    /// Every (field number, value) of one message, in wire order.
    fn parse(buf: &[u8]) -> Result<Vec<(u32, Field<'_>)>, String> {
        let mut pos = 0;
        let mut out = Vec::new();
        while pos < buf.len() {
            let key = read_varint(buf, &mut pos)?;
            let number = u32::try_from(key >> 3).map_err(|_| "field number too big")?;
            if number == 0 {
                return Err("field number 0".into());
            }
            let field = match key & 7 {
                0 => Field::Varint(read_varint(buf, &mut pos)?),
                1 => {
                    let b = buf.get(pos..pos + 8).ok_or("truncated fixed64")?;
                    pos += 8;
                    Field::Fixed64(u64::from_le_bytes(b.try_into().unwrap()))
                }
                2 => {
                    let len = read_varint(buf, &mut pos)? as usize;
                    let b = buf.get(pos..pos + len).ok_or("truncated bytes")?;
                    pos += len;
                    Field::Bytes(b)
                }
                w => return Err(format!("unexpected wire type {w}")),
            };
            out.push((number, field));
        }
        Ok(out)
    }

    struct Msg<'a>(Vec<(u32, Field<'a>)>);

    impl<'a> Msg<'a> {
        fn new(buf: &'a [u8]) -> Msg<'a> {
            Msg(parse(buf).unwrap())
        }
        fn all(&self, n: u32) -> impl Iterator<Item = Field<'a>> + '_ {
            self.0.iter().filter(move |(f, _)| *f == n).map(|(_, v)| *v)
        }
        fn strs(&self, n: u32) -> Vec<&'a str> {
            self.all(n)
                .map(|f| match f {
                    Field::Bytes(b) => std::str::from_utf8(b).unwrap(),
                    other => panic!("field {n} is {other:?}, not a string"),
                })
                .collect()
        }
        fn str(&self, n: u32) -> &'a str {
            self.strs(n).last().copied().unwrap_or("")
        }
        fn msgs(&self, n: u32) -> Vec<Msg<'a>> {
            self.all(n)
                .map(|f| match f {
                    Field::Bytes(b) => Msg::new(b),
                    other => panic!("field {n} is {other:?}, not a message"),
                })
                .collect()
        }
        fn msg(&self, n: u32) -> Option<Msg<'a>> {
            self.msgs(n).pop()
        }
        fn varint(&self, n: u32) -> Option<u64> {
            self.all(n).last().map(|f| match f {
                Field::Varint(v) => v,
                other => panic!("field {n} is {other:?}, not a varint"),
            })
        }
        fn double(&self, n: u32) -> Option<f64> {
            self.all(n).last().map(|f| match f {
                Field::Fixed64(v) => f64::from_bits(v),
                other => panic!("field {n} is {other:?}, not a double"),
            })
        }
        /// The value of the `Named*` entry called `name` in repeated field `n`.
        fn named(&self, n: u32, name: &str) -> Option<Msg<'a>> {
            self.msgs(n)
                .into_iter()
                .find(|e| e.str(1) == name)
                .and_then(|e| e.msg(2))
        }
        fn names(&self, n: u32) -> Vec<&'a str> {
            self.msgs(n).iter().map(|e| e.str(1)).collect()
        }
    }

    // -- OpenAPIv2.proto, transcribed as a table to check every field of a document. --------

    #[derive(Clone, Copy)]
    enum K {
        S,
        B,
        I,
        F,
        M(&'static str),
    }
    use K::{B, F, I, M, S};

    /// (field, kind, repeated) of each message.
    fn table(msg: &str) -> &'static [(u32, K, bool)] {
        const NON_BODY_SHORT: &[(u32, K, bool)] = &[
            (1, B, false),
            (2, S, false),
            (3, S, false),
            (4, S, false),
            (5, S, false),
            (6, S, false),
            (7, M("PrimitivesItems"), false),
            (8, S, false),
            (9, M("Any"), false),
            (10, F, false),
            (11, B, false),
            (12, F, false),
            (13, B, false),
            (14, I, false),
            (15, I, false),
            (16, S, false),
            (17, I, false),
            (18, I, false),
            (19, B, false),
            (20, M("Any"), true),
            (21, F, false),
            (22, M("NamedAny"), true),
        ];
        const NON_BODY_LONG: &[(u32, K, bool)] = &[
            (1, B, false),
            (2, S, false),
            (3, S, false),
            (4, S, false),
            (5, B, false),
            (6, S, false),
            (7, S, false),
            (8, M("PrimitivesItems"), false),
            (9, S, false),
            (10, M("Any"), false),
            (11, F, false),
            (12, B, false),
            (13, F, false),
            (14, B, false),
            (15, I, false),
            (16, I, false),
            (17, S, false),
            (18, I, false),
            (19, I, false),
            (20, B, false),
            (21, M("Any"), true),
            (22, F, false),
            (23, M("NamedAny"), true),
        ];
        match msg {
            "Document" => &[
                (1, S, false),
                (2, M("Info"), false),
                (3, S, false),
                (4, S, false),
                (5, S, true),
                (6, S, true),
                (7, S, true),
                (8, M("Paths"), false),
                (9, M("Definitions"), false),
                (10, M("ParameterDefinitions"), false),
                (11, M("ResponseDefinitions"), false),
                (12, M("SecurityRequirement"), true),
                (13, M("SecurityDefinitions"), false),
                (14, M("Tag"), true),
                (15, M("ExternalDocs"), false),
                (16, M("NamedAny"), true),
            ],
            "Info" => &[
                (1, S, false),
                (2, S, false),
                (3, S, false),
                (4, S, false),
                (5, M("Contact"), false),
                (6, M("License"), false),
                (7, M("NamedAny"), true),
            ],
            "NamedAny" => &[(1, S, false), (2, M("Any"), false)],
            "Any" => &[(2, S, false)],
            "ExternalDocs" => &[(1, S, false), (2, S, false), (3, M("NamedAny"), true)],
            "Tag" => &[
                (1, S, false),
                (2, S, false),
                (3, M("ExternalDocs"), false),
                (4, M("NamedAny"), true),
            ],
            "Paths" => &[(1, M("NamedAny"), true), (2, M("NamedPathItem"), true)],
            "NamedPathItem" => &[(1, S, false), (2, M("PathItem"), false)],
            "PathItem" => &[
                (1, S, false),
                (2, M("Operation"), false),
                (3, M("Operation"), false),
                (4, M("Operation"), false),
                (5, M("Operation"), false),
                (6, M("Operation"), false),
                (7, M("Operation"), false),
                (8, M("Operation"), false),
                (9, M("ParametersItem"), true),
                (10, M("NamedAny"), true),
            ],
            "Operation" => &[
                (1, S, true),
                (2, S, false),
                (3, S, false),
                (4, M("ExternalDocs"), false),
                (5, S, false),
                (6, S, true),
                (7, S, true),
                (8, M("ParametersItem"), true),
                (9, M("Responses"), false),
                (10, S, true),
                (11, B, false),
                (12, M("SecurityRequirement"), true),
                (13, M("NamedAny"), true),
            ],
            "ParametersItem" => &[(1, M("Parameter"), false), (2, M("JsonReference"), false)],
            "JsonReference" => &[(1, S, false), (2, S, false)],
            "Parameter" => &[
                (1, M("BodyParameter"), false),
                (2, M("NonBodyParameter"), false),
            ],
            "BodyParameter" => &[
                (1, S, false),
                (2, S, false),
                (3, S, false),
                (4, B, false),
                (5, M("Schema"), false),
                (6, M("NamedAny"), true),
            ],
            "NonBodyParameter" => &[
                (1, M("HeaderParameterSubSchema"), false),
                (2, M("FormDataParameterSubSchema"), false),
                (3, M("QueryParameterSubSchema"), false),
                (4, M("PathParameterSubSchema"), false),
            ],
            "HeaderParameterSubSchema" | "PathParameterSubSchema" => NON_BODY_SHORT,
            "FormDataParameterSubSchema" | "QueryParameterSubSchema" => NON_BODY_LONG,
            "PrimitivesItems" => &[
                (1, S, false),
                (2, S, false),
                (3, M("PrimitivesItems"), false),
                (4, S, false),
                (5, M("Any"), false),
                (6, F, false),
                (7, B, false),
                (8, F, false),
                (9, B, false),
                (10, I, false),
                (11, I, false),
                (12, S, false),
                (13, I, false),
                (14, I, false),
                (15, B, false),
                (16, M("Any"), true),
                (17, F, false),
                (18, M("NamedAny"), true),
            ],
            "Header" => &[
                (1, S, false),
                (2, S, false),
                (3, M("PrimitivesItems"), false),
                (4, S, false),
                (5, M("Any"), false),
                (6, F, false),
                (7, B, false),
                (8, F, false),
                (9, B, false),
                (10, I, false),
                (11, I, false),
                (12, S, false),
                (13, I, false),
                (14, I, false),
                (15, B, false),
                (16, M("Any"), true),
                (17, F, false),
                (18, S, false),
                (19, M("NamedAny"), true),
            ],
            "Responses" => &[(1, M("NamedResponseValue"), true), (2, M("NamedAny"), true)],
            "NamedResponseValue" => &[(1, S, false), (2, M("ResponseValue"), false)],
            "ResponseValue" => &[(1, M("Response"), false), (2, M("JsonReference"), false)],
            "Response" => &[
                (1, S, false),
                (2, M("SchemaItem"), false),
                (3, M("Headers"), false),
                (4, M("Examples"), false),
                (5, M("NamedAny"), true),
            ],
            "Headers" => &[(1, M("NamedHeader"), true)],
            "NamedHeader" => &[(1, S, false), (2, M("Header"), false)],
            "Examples" => &[(1, M("NamedAny"), true)],
            "SchemaItem" => &[(1, M("Schema"), false), (2, M("FileSchema"), false)],
            "FileSchema" => &[
                (1, S, false),
                (2, S, false),
                (3, S, false),
                (4, M("Any"), false),
                (5, S, true),
                (6, S, false),
                (7, B, false),
                (8, M("ExternalDocs"), false),
                (9, M("Any"), false),
                (10, M("NamedAny"), true),
            ],
            "Definitions" | "Properties" => &[(1, M("NamedSchema"), true)],
            "NamedSchema" => &[(1, S, false), (2, M("Schema"), false)],
            "Schema" => &[
                (1, S, false),
                (2, S, false),
                (3, S, false),
                (4, S, false),
                (5, M("Any"), false),
                (6, F, false),
                (7, F, false),
                (8, B, false),
                (9, F, false),
                (10, B, false),
                (11, I, false),
                (12, I, false),
                (13, S, false),
                (14, I, false),
                (15, I, false),
                (16, B, false),
                (17, I, false),
                (18, I, false),
                (19, S, true),
                (20, M("Any"), true),
                (21, M("AdditionalPropertiesItem"), false),
                (22, M("TypeItem"), false),
                (23, M("ItemsItem"), false),
                (24, M("Schema"), true),
                (25, M("Properties"), false),
                (26, S, false),
                (27, B, false),
                (28, M("Xml"), false),
                (29, M("ExternalDocs"), false),
                (30, M("Any"), false),
                (31, M("NamedAny"), true),
            ],
            "AdditionalPropertiesItem" => &[(1, M("Schema"), false), (2, B, false)],
            "TypeItem" | "StringArray" => &[(1, S, true)],
            "ItemsItem" => &[(1, M("Schema"), true)],
            "SecurityRequirement" => &[(1, M("NamedStringArray"), true)],
            "NamedStringArray" => &[(1, S, false), (2, M("StringArray"), false)],
            "SecurityDefinitions" => &[(1, M("NamedSecurityDefinitionsItem"), true)],
            "NamedSecurityDefinitionsItem" => {
                &[(1, S, false), (2, M("SecurityDefinitionsItem"), false)]
            }
            "SecurityDefinitionsItem" => &[(2, M("ApiKeySecurity"), false)],
            "ApiKeySecurity" => &[
                (1, S, false),
                (2, S, false),
                (3, S, false),
                (4, S, false),
                (5, M("NamedAny"), true),
            ],
            other => panic!("no table for message {other}"),
        }
    }

    /// Walk `buf` as message `msg`: every field known, of its wire type, singular fields
    /// once, strings UTF-8, bools 0/1, oneofs with one member. Returns how many messages
    /// were checked.
    fn check(msg: &str, buf: &[u8], path: &str) -> usize {
        let fields = parse(buf).unwrap_or_else(|e| panic!("{path}: {e}"));
        let spec = table(msg);
        let mut seen = Vec::new();
        let mut count = 1;
        for (n, f) in fields {
            let Some((_, kind, repeated)) = spec.iter().find(|(num, _, _)| *num == n) else {
                panic!("{path}: {msg} has no field {n}");
            };
            if !repeated {
                assert!(!seen.contains(&n), "{path}: {msg}.{n} written twice");
                seen.push(n);
            }
            match (kind, f) {
                (S, Field::Bytes(b)) => {
                    assert!(
                        std::str::from_utf8(b).is_ok(),
                        "{path}: {msg}.{n} not UTF-8"
                    )
                }
                (B, Field::Varint(v)) => assert!(v <= 1, "{path}: {msg}.{n} bool {v}"),
                (I, Field::Varint(_)) | (F, Field::Fixed64(_)) => {}
                (M(inner), Field::Bytes(b)) => {
                    count += check(inner, b, &format!("{path}.{n}"));
                }
                (_, other) => panic!("{path}: {msg}.{n} has the wrong wire type: {other:?}"),
            }
        }
        let oneof = matches!(
            msg,
            "ParametersItem"
                | "Parameter"
                | "NonBodyParameter"
                | "ResponseValue"
                | "SchemaItem"
                | "AdditionalPropertiesItem"
                | "SecurityDefinitionsItem"
        );
        if oneof {
            assert_eq!(
                seen.len(),
                1,
                "{path}: oneof {msg} has {} members",
                seen.len()
            );
        }
        count
    }

    // -- The writer. ------------------------------------------------------------------------

    fn varint(v: u64) -> Vec<u8> {
        let mut b = Vec::new();
        put_varint(&mut b, v);
        b
    }

    #[test]
    fn varints() {
        assert_eq!(varint(0), [0]);
        assert_eq!(varint(1), [1]);
        assert_eq!(varint(127), [0x7f]);
        assert_eq!(varint(128), [0x80, 0x01]);
        assert_eq!(varint(300), [0xac, 0x02]);
        assert_eq!(varint(16384), [0x80, 0x80, 0x01]);
        assert_eq!(varint(u64::MAX).len(), 10);
        for v in [0, 1, 127, 128, 255, 300, 1 << 35, u64::MAX - 1, u64::MAX] {
            let b = varint(v);
            let mut pos = 0;
            assert_eq!(read_varint(&b, &mut pos).unwrap(), v);
            assert_eq!(pos, b.len());
        }
    }

    #[test]
    fn scalar_fields() {
        let mut w = Writer::new();
        w.string(1, "");
        w.bool(2, false);
        w.int64(3, 0);
        w.double(4, 0.0);
        assert!(w.into_bytes().is_empty(), "proto3 defaults are not written");

        let mut w = Writer::new();
        w.string(1, "2.0");
        w.bool(2, true);
        w.oneof_bool(3, false);
        w.int64(4, 150);
        w.int64(5, -1);
        w.double(6, 1.5);
        w.repeated_string(7, "");
        w.message(8, |_| {});
        w.message(9, |w| w.string(1, "ab"));
        let b = w.into_bytes();
        let mut expected = vec![
            0x0a, 3, b'2', b'.', b'0', 0x10, 1, 0x18, 0, 0x20, 0x96, 0x01,
        ];
        expected.push(0x28);
        expected.extend([0xff; 9]);
        expected.push(0x01);
        expected.push(0x31);
        expected.extend(1.5f64.to_le_bytes());
        expected.extend([0x3a, 0, 0x42, 0, 0x4a, 4, 0x0a, 2, b'a', b'b']);
        assert_eq!(b, expected);
        let m = Msg::new(&b);
        assert_eq!(m.str(1), "2.0");
        assert_eq!(m.varint(5), Some(u64::MAX));
        assert_eq!(m.double(6), Some(1.5));
        assert_eq!(m.msg(9).unwrap().str(1), "ab");
    }

    #[test]
    fn long_fields_and_high_numbers() {
        let long = "x".repeat(300);
        let mut w = Writer::new();
        w.string(31, &long);
        let b = w.into_bytes();
        // Field 31, wire type 2: key 250 = [0xfa, 0x01]; length 300 = [0xac, 0x02].
        assert_eq!(&b[..4], &[0xfa, 0x01, 0xac, 0x02]);
        assert_eq!(b.len(), 4 + 300);
        assert_eq!(Msg::new(&b).str(31), long);
    }

    #[test]
    fn yaml_values() {
        let gvk = json!({"group": "", "kind": "Pod", "version": "v1"});
        assert_eq!(to_yaml(&gvk), "group: \"\"\nkind: Pod\nversion: v1\n");
        assert_eq!(
            to_yaml(&json!([gvk, {"group": "apps", "kind": "Deployment", "version": "v1"}])),
            "- group: \"\"\n  kind: Pod\n  version: v1\n- group: apps\n  kind: Deployment\n  version: v1\n"
        );
        assert_eq!(to_yaml(&json!("patch")), "patch\n");
        assert_eq!(to_yaml(&json!("true")), "\"true\"\n");
        assert_eq!(to_yaml(&json!("123")), "\"123\"\n");
        assert_eq!(to_yaml(&json!("a: b")), "\"a: b\"\n");
        assert_eq!(to_yaml(&json!("say \"hi\"\n")), "\"say \\\"hi\\\"\\n\"\n");
        assert_eq!(to_yaml(&json!(3)), "3\n");
        assert_eq!(to_yaml(&json!(false)), "false\n");
        assert_eq!(to_yaml(&json!(null)), "null\n");
        assert_eq!(to_yaml(&json!({})), "{}\n");
        assert_eq!(
            to_yaml(&json!({"a": {"b": [1, [2, 3]], "c": []}})),
            "a:\n  b:\n  - 1\n  - - 2\n    - 3\n  c: []\n"
        );
    }

    #[test]
    fn negotiation() {
        use Format::{Json, Protobuf};
        assert_eq!(negotiate(CONTENT_TYPE_DEPRECATED), Some(Protobuf));
        assert_eq!(negotiate(CONTENT_TYPE), Some(Protobuf));
        assert_eq!(negotiate("application/json, */*"), Some(Json));
        assert_eq!(negotiate(""), Some(Json));
        assert_eq!(negotiate("*/*"), Some(Json));
        assert_eq!(negotiate("application/*"), Some(Json));
        assert_eq!(negotiate("text/html"), None);
        assert_eq!(negotiate("application/json;q=0"), None);
        assert_eq!(
            negotiate(&format!(
                "application/json;q=0.5, {CONTENT_TYPE_DEPRECATED}"
            )),
            Some(Protobuf)
        );
        assert_eq!(
            negotiate(&format!("*/*, {CONTENT_TYPE_DEPRECATED}")),
            Some(Protobuf),
            "the specific type outranks the wildcard"
        );
    }

    // -- Documents. ---------------------------------------------------------------------------

    fn small() -> Value {
        json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": "unversioned"},
            "paths": {
                "/api/v1/namespaces/{name}": {
                    "patch": {
                        "consumes": ["application/json-patch+json", "application/merge-patch+json"],
                        "description": "partially update the specified Namespace",
                        "operationId": "patchCoreV1Namespace",
                        "parameters": [
                            {"in": "body", "name": "body", "required": true,
                             "schema": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"}},
                            {"in": "query", "name": "fieldValidation", "type": "string",
                             "uniqueItems": true, "description": "how to validate"},
                            {"in": "header", "name": "X-Trace", "type": "integer", "maximum": 10,
                             "enum": [1, 2]},
                            {"$ref": "#/parameters/pretty"}
                        ],
                        "produces": ["application/json"],
                        "responses": {
                            "200": {"description": "OK",
                                    "schema": {"$ref": "#/definitions/io.k8s.api.core.v1.Namespace"},
                                    "headers": {"X-Rate": {"type": "integer", "description": "rate"}}},
                            "401": {"description": "Unauthorized"},
                            "404": {"description": "Text", "schema": {"type": "string"}}
                        },
                        "schemes": ["https"],
                        "tags": ["core_v1"],
                        "x-kubernetes-action": "patch",
                        "x-kubernetes-group-version-kind": {"group": "", "kind": "Namespace", "version": "v1"}
                    },
                    "parameters": [
                        {"in": "path", "name": "name", "required": true, "type": "string", "uniqueItems": true}
                    ]
                }
            },
            "definitions": {
                "io.k8s.api.core.v1.Namespace": {
                    "description": "Namespace provides a scope for Names.",
                    "type": "object",
                    "properties": {
                        "apiVersion": {"type": "string"},
                        "metadata": {"$ref": "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
                                     "description": "Standard object's metadata."},
                        "finalizers": {"type": "array", "items": {"type": "string"}},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "closed": {"type": "object", "additionalProperties": false},
                        "replicas": {"type": "integer", "format": "int32", "default": 1,
                                     "minimum": 0, "maxLength": 5},
                        "phase": {"type": "string", "enum": ["Active", "Terminating"]}
                    },
                    "required": ["apiVersion"],
                    "x-kubernetes-group-version-kind": [{"group": "", "kind": "Namespace", "version": "v1"}]
                },
                "io.k8s.apimachinery.pkg.apis.meta.v1.Patch": {
                    "description": "Patch is provided to give a concrete name and type.",
                    "type": "object"
                },
                "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool": {
                    "description": "either",
                    "oneOf": [{"type": "boolean"}, {"type": "object"}]
                }
            },
            "security": [{"BearerToken": []}],
            "securityDefinitions": {
                "BearerToken": {"description": "Bearer Token authentication", "in": "header",
                                "name": "authorization", "type": "apiKey"}
            }
        })
    }

    #[test]
    fn small_document() {
        let b = encode_document(&small());
        check("Document", &b, "Document");
        let doc = Msg::new(&b);
        assert_eq!(doc.str(1), "2.0");
        let info = doc.msg(2).unwrap();
        assert_eq!((info.str(1), info.str(2)), ("Kubernetes", "unversioned"));

        // The PATCH operation, found the way kubectl's v2 field-validation check finds it.
        let paths = doc.msg(8).unwrap();
        assert_eq!(paths.names(2), ["/api/v1/namespaces/{name}"]);
        let item = paths.named(2, "/api/v1/namespaces/{name}").unwrap();
        assert!(item.msg(2).is_none(), "no GET");
        let patch = item.msg(8).unwrap();
        assert_eq!(patch.strs(1), ["core_v1"]);
        assert_eq!(patch.str(5), "patchCoreV1Namespace");
        assert_eq!(patch.strs(6), ["application/json"]);
        assert_eq!(
            patch.strs(7),
            [
                "application/json-patch+json",
                "application/merge-patch+json"
            ]
        );
        assert_eq!(patch.strs(10), ["https"]);
        let ext = patch.msgs(13);
        assert_eq!(ext.len(), 2);
        assert_eq!(ext[0].str(1), "x-kubernetes-action");
        assert_eq!(ext[0].msg(2).unwrap().str(2), "patch\n");
        assert_eq!(ext[1].str(1), "x-kubernetes-group-version-kind");
        assert_eq!(
            ext[1].msg(2).unwrap().str(2),
            "group: \"\"\nkind: Namespace\nversion: v1\n"
        );

        let params = patch.msgs(8);
        assert_eq!(params.len(), 4);
        let body = params[0].msg(1).unwrap().msg(1).unwrap();
        assert_eq!((body.str(2), body.str(3)), ("body", "body"));
        assert_eq!(body.varint(4), Some(1));
        assert_eq!(
            body.msg(5).unwrap().str(1),
            "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.Patch"
        );
        let query = params[1].msg(1).unwrap().msg(2).unwrap().msg(3).unwrap();
        assert_eq!(query.str(4), "fieldValidation");
        assert_eq!(query.str(2), "query");
        assert_eq!(query.str(3), "how to validate");
        assert_eq!(query.str(6), "string");
        assert_eq!(query.varint(20), Some(1), "uniqueItems");
        let header = params[2].msg(1).unwrap().msg(2).unwrap().msg(1).unwrap();
        assert_eq!((header.str(4), header.str(5)), ("X-Trace", "integer"));
        assert_eq!(header.double(10), Some(10.0));
        let en: Vec<_> = header.msgs(20).iter().map(|a| a.str(2)).collect();
        assert_eq!(en, ["1\n", "2\n"]);
        assert_eq!(params[3].msg(2).unwrap().str(1), "#/parameters/pretty");
        let shared = item.msgs(9);
        let path_param = shared[0].msg(1).unwrap().msg(2).unwrap().msg(4).unwrap();
        assert_eq!(path_param.str(4), "name");
        assert_eq!(path_param.varint(1), Some(1), "required");
        assert_eq!(path_param.str(5), "string");

        let responses = patch.msg(9).unwrap();
        assert_eq!(responses.names(1), ["200", "401", "404"]);
        let ok = responses.named(1, "200").unwrap().msg(1).unwrap();
        assert_eq!(ok.str(1), "OK");
        assert_eq!(
            ok.msg(2).unwrap().msg(1).unwrap().str(1),
            "#/definitions/io.k8s.api.core.v1.Namespace"
        );
        let rate = ok.msg(3).unwrap().named(1, "X-Rate").unwrap();
        assert_eq!((rate.str(1), rate.str(18)), ("integer", "rate"));
        let unauthorized = responses.named(1, "401").unwrap().msg(1).unwrap();
        assert!(unauthorized.msg(2).is_none());
        let text = responses.named(1, "404").unwrap().msg(1).unwrap();
        let file = text
            .msg(2)
            .unwrap()
            .msg(2)
            .expect("a FileSchema, as gnostic reads it");
        assert_eq!(file.str(6), "string");

        // Definitions, in the JSON object's order.
        let defs = doc.msg(9).unwrap();
        assert_eq!(
            defs.names(1),
            [
                "io.k8s.api.core.v1.Namespace",
                "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool",
                "io.k8s.apimachinery.pkg.apis.meta.v1.Patch",
            ]
        );
        let ns = defs.named(1, "io.k8s.api.core.v1.Namespace").unwrap();
        assert_eq!(ns.str(4), "Namespace provides a scope for Names.");
        assert_eq!(ns.msg(22).unwrap().strs(1), ["object"]);
        assert_eq!(ns.strs(19), ["apiVersion"]);
        let gvk = ns.msgs(31);
        assert_eq!(gvk[0].str(1), "x-kubernetes-group-version-kind");
        assert_eq!(
            gvk[0].msg(2).unwrap().str(2),
            "- group: \"\"\n  kind: Namespace\n  version: v1\n"
        );
        let props = ns.msg(25).unwrap();
        assert_eq!(
            props.names(1),
            [
                "apiVersion",
                "closed",
                "finalizers",
                "labels",
                "metadata",
                "phase",
                "replicas",
            ]
        );
        let meta = props.named(1, "metadata").unwrap();
        assert_eq!(
            meta.str(1),
            "#/definitions/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        assert!(meta.msg(22).is_none(), "a reference has no type");
        let fin = props.named(1, "finalizers").unwrap();
        let items = fin.msg(23).unwrap().msgs(1);
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].msg(22).unwrap().strs(1), ["string"]);
        let labels = props.named(1, "labels").unwrap();
        let ap = labels.msg(21).unwrap();
        assert_eq!(ap.msg(1).unwrap().msg(22).unwrap().strs(1), ["string"]);
        let closed = props.named(1, "closed").unwrap().msg(21).unwrap();
        assert_eq!(
            closed.varint(2),
            Some(0),
            "additionalProperties: false is present"
        );
        let replicas = props.named(1, "replicas").unwrap();
        assert_eq!(replicas.str(2), "int32");
        assert_eq!(replicas.msg(5).unwrap().str(2), "1\n");
        assert_eq!(replicas.double(9), None, "minimum 0 is the default");
        assert_eq!(replicas.varint(11), Some(5));
        let phase = props.named(1, "phase").unwrap();
        let en: Vec<_> = phase.msgs(20).iter().map(|a| a.str(2)).collect();
        assert_eq!(en, ["Active\n", "Terminating\n"]);
        let patch_def = defs
            .named(1, "io.k8s.apimachinery.pkg.apis.meta.v1.Patch")
            .unwrap();
        assert!(patch_def.msg(25).is_none(), "no properties: a map");
        let either = defs
            .named(
                1,
                "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool",
            )
            .unwrap();
        assert_eq!(either.0.len(), 1, "oneOf is dropped: {:?}", either.0);

        let sec = doc.msgs(12);
        assert_eq!(sec.len(), 1);
        assert_eq!(sec[0].names(1), ["BearerToken"]);
        let scheme = doc.msg(13).unwrap().named(1, "BearerToken").unwrap();
        let api_key = scheme.msg(2).unwrap();
        assert_eq!(
            (api_key.str(1), api_key.str(2), api_key.str(3)),
            ("apiKey", "authorization", "header")
        );
    }

    /// kubectl's v2 check: the PATCH operation carrying `gvk` lists a `fieldValidation`
    /// query parameter.
    fn patch_supports_field_validation(doc: &Msg, gvk_yaml: &str) -> Option<bool> {
        for entry in doc.msg(8)?.msgs(2) {
            let Some(patch) = entry.msg(2).and_then(|item| item.msg(8)) else {
                continue;
            };
            let carries = patch.msgs(13).iter().any(|e| {
                e.str(1) == "x-kubernetes-group-version-kind"
                    && e.msg(2).is_some_and(|a| a.str(2) == gvk_yaml)
            });
            if !carries {
                continue;
            }
            return Some(patch.msgs(8).iter().any(|p| {
                p.msg(1)
                    .and_then(|p| p.msg(2))
                    .and_then(|p| p.msg(3))
                    .is_some_and(|q| q.str(4) == "fieldValidation")
            }));
        }
        None
    }

    #[test]
    fn served_document() {
        let json = super::super::v2();
        let b = v2_bytes();
        assert_eq!(b.as_ptr(), v2_bytes().as_ptr(), "built once");
        let checked = check("Document", &b, "Document");
        assert!(checked > 10_000, "only {checked} messages");
        let doc = Msg::new(&b);
        assert_eq!(doc.str(1), "2.0");
        assert_eq!(doc.msg(2).unwrap().str(1), "Kubernetes");

        // Every path and definition, in the JSON's order.
        let paths: Vec<&str> = json["paths"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(doc.msg(8).unwrap().names(2), paths);
        let defs: Vec<&str> = json["definitions"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let proto_defs = doc.msg(9).unwrap();
        assert_eq!(proto_defs.names(1), defs);

        // What kubectl looks up before validating a TokenReview client-side.
        assert_eq!(
            patch_supports_field_validation(&doc, "group: \"\"\nkind: Namespace\nversion: v1\n"),
            Some(true)
        );
        assert_eq!(
            patch_supports_field_validation(
                &doc,
                "group: authentication.k8s.io\nkind: TokenReview\nversion: v1\n"
            ),
            None,
            "TokenReview has no PATCH"
        );
        let review = proto_defs
            .named(1, "io.k8s.api.authentication.v1.TokenReview")
            .expect("TokenReview definition");
        let gvk: Vec<_> = review
            .msgs(31)
            .into_iter()
            .filter(|e| e.str(1) == "x-kubernetes-group-version-kind")
            .map(|e| e.msg(2).unwrap().str(2).to_string())
            .collect();
        assert_eq!(
            gvk,
            ["- group: authentication.k8s.io\n  kind: TokenReview\n  version: v1\n"]
        );
        let spec = review.msg(25).unwrap().named(1, "spec").unwrap();
        assert_eq!(
            spec.str(1),
            "#/definitions/io.k8s.api.authentication.v1.TokenReviewSpec"
        );

        let etag = etag();
        assert!(etag.starts_with('"') && etag.ends_with('"') && etag.len() == 34);
    }
}
