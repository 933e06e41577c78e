//! RFC 6902 JSON Patch, applied as kube-apiserver v1.32 applies it (it uses evanphx/json-patch
//! v4): the same results, quirks and error texts.
//!
//! Behaviours worth knowing (all Kubernetes'):
//! - `replace` of a missing object member adds it; `copy` from a missing member copies `null`;
//! - a negative array index counts from the end (`-1` in `add` appends);
//! - `test` with `"value": null` succeeds for a missing member;
//! - `replace` of the whole document (`""`) with a non-container value is ignored;
//! - more than [`MAX_OPERATIONS`] operations is 413; copies may add at most
//!   [`MAX_COPY_BYTES`] in total; decoding problems are 400 and failed operations 422.

use serde_json::{Map, Value};

use super::{deeper_than, PatchError, PatchErrorKind, MAX_DEPTH};
use crate::selector::validation::go_quote;

/// Kubernetes' limit on operations in one JSON patch.
pub const MAX_OPERATIONS: usize = 10_000;

/// Kubernetes' default limit (`JSONPatchMaxCopyBytes`) on the bytes `copy` operations may add.
pub const MAX_COPY_BYTES: usize = 3 * 1024 * 1024;

const MISSING: &str = "missing value";

/// A decoded JSON patch, borrowing from the patch document.
#[derive(Debug, Clone)]
pub struct JsonPatch<'p> {
    ops: Vec<Option<&'p Map<String, Value>>>,
}

impl<'p> JsonPatch<'p> {
    /// Decode a patch document (a JSON array of operation objects; `null` is an empty patch).
    /// Errors are 400, or 413 for more than [`MAX_OPERATIONS`] operations.
    pub fn decode(patch: &'p Value) -> Result<JsonPatch<'p>, PatchError> {
        let items = match patch {
            Value::Null => return Ok(JsonPatch { ops: Vec::new() }),
            Value::Array(a) => a,
            other => {
                return Err(PatchError::bad_request(format!(
                    "json: cannot unmarshal {} into Go value of type jsonpatch.Patch",
                    json_kind(other)
                )))
            }
        };
        let mut ops = Vec::with_capacity(items.len().min(MAX_OPERATIONS));
        for item in items {
            match item {
                Value::Object(o) => ops.push(Some(o)),
                Value::Null => ops.push(None),
                other => {
                    return Err(PatchError::bad_request(format!(
                        "json: cannot unmarshal {} into Go value of type jsonpatch.Operation",
                        json_kind(other)
                    )))
                }
            }
        }
        if ops.len() > MAX_OPERATIONS {
            return Err(PatchError::new(
                PatchErrorKind::TooLarge,
                format!(
                    "The allowed maximum operations in a JSON patch is {MAX_OPERATIONS}, got {}",
                    ops.len()
                ),
            ));
        }
        if deeper_than(patch, MAX_DEPTH + 2) {
            return Err(PatchError::too_deep());
        }
        Ok(JsonPatch { ops })
    }

    /// The number of operations.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Apply to `doc`, returning the patched document. On error the document is dropped.
    pub fn apply(&self, mut doc: Value) -> Result<Value, PatchError> {
        self.apply_in_place(&mut doc)?;
        Ok(doc)
    }

    /// Apply to `doc` in place. On error `doc` may be partly patched: callers that need the
    /// original must keep a copy (or use [`apply`](JsonPatch::apply)).
    pub fn apply_in_place(&self, doc: &mut Value) -> Result<(), PatchError> {
        let mut copied = 0usize;
        for op in &self.ops {
            let op = Op(*op);
            match op.kind() {
                "add" => add(doc, op),
                "remove" => remove(doc, op),
                "replace" => replace(doc, op),
                "move" => move_op(doc, op),
                "test" => test(doc, op),
                "copy" => copy(doc, op, &mut copied),
                other => Err(format!("Unexpected kind: {other}")),
            }
            .map_err(PatchError::unprocessable)?;
        }
        if deeper_than(doc, MAX_DEPTH) {
            return Err(PatchError::unprocessable(format!(
                "the patched object is nested more than {MAX_DEPTH} levels deep"
            )));
        }
        Ok(())
    }
}

/// Decode `patch` and apply it to a copy of `doc`.
pub fn apply(doc: &Value, patch: &Value) -> Result<Value, PatchError> {
    let p = JsonPatch::decode(patch)?;
    p.apply(doc.clone())
}

/// Decode `patch` and apply it to `doc`, consuming it (no copy of the document is made).
pub fn apply_owned(doc: Value, patch: &Value) -> Result<Value, PatchError> {
    JsonPatch::decode(patch)?.apply(doc)
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

#[derive(Clone, Copy)]
struct Op<'p>(Option<&'p Map<String, Value>>);

impl<'p> Op<'p> {
    fn field(&self, name: &str) -> Option<&'p Value> {
        self.0.and_then(|m| m.get(name))
    }

    fn kind(&self) -> &'p str {
        match self.field("op") {
            Some(Value::String(s)) => s,
            _ => "unknown",
        }
    }

    /// A string member; errors as Go's decoding of it would.
    fn string(&self, name: &str, missing: &str) -> Result<&'p str, String> {
        match self.field(name) {
            None | Some(Value::Null) => Err(format!("{missing}: {MISSING}")),
            Some(Value::String(s)) => Ok(s),
            Some(other) => Err(format!(
                "json: cannot unmarshal {} into Go value of type string",
                json_kind(other)
            )),
        }
    }

    fn path(&self) -> Result<&'p str, String> {
        self.string("path", "operation missing path field")
    }

    fn from(&self) -> Result<&'p str, String> {
        self.string("from", "operation, missing from field")
    }

    /// The `value` member: `None` when absent (Go's nil node), JSON null when null.
    fn value(&self) -> Option<&'p Value> {
        self.field("value")
    }
}

/// RFC 6901 unescaping: `~1` is `/`, then `~0` is `~`.
fn decode_key(k: &str) -> std::borrow::Cow<'_, str> {
    if !k.contains('~') {
        return k.into();
    }
    let mut out = String::with_capacity(k.len());
    let mut chars = k.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '~' {
            match chars.peek() {
                Some('1') => {
                    chars.next();
                    out.push('/');
                    continue;
                }
                Some('0') => {
                    chars.next();
                    out.push('~');
                    continue;
                }
                _ => {}
            }
        }
        out.push(c);
    }
    out.into()
}

/// Go's `strconv.Atoi`, with its error text.
fn atoi(s: &str) -> Result<i64, String> {
    let digits = s.strip_prefix(['+', '-']).unwrap_or(s);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "strconv.Atoi: parsing {}: invalid syntax",
            go_quote(s)
        ));
    }
    s.parse::<i64>()
        .map_err(|_| format!("strconv.Atoi: parsing {}: value out of range", go_quote(s)))
}

fn invalid_index(idx: i64) -> String {
    format!("Unable to access invalid index: {idx}: invalid index referenced")
}

/// The index `key` names in an array of `len` items, for get/set/remove.
fn existing_index(key: &str, len: usize) -> Result<usize, String> {
    let idx = atoi(key)?;
    let len = len as i64;
    let at = if idx < 0 {
        if idx < -len {
            return Err(invalid_index(idx));
        }
        idx + len
    } else {
        idx
    };
    if at >= len {
        return Err(invalid_index(idx));
    }
    Ok(at as usize)
}

/// The value at `key` of a container: `Ok(None)` for a missing object member (and for null,
/// which evanphx/json-patch cannot tell apart), an error for a bad array index.
fn get<'d>(container: &'d Value, key: &str) -> Result<Option<&'d Value>, String> {
    match container {
        Value::Object(m) => Ok(m.get(key).filter(|v| !v.is_null())),
        Value::Array(a) => Ok(Some(&a[existing_index(key, a.len())?])),
        _ => Ok(None),
    }
}

fn add_at(container: &mut Value, key: &str, value: Value) -> Result<(), String> {
    match container {
        Value::Object(m) => {
            m.insert(key.to_string(), value);
            Ok(())
        }
        Value::Array(a) => {
            if key == "-" {
                a.push(value);
                return Ok(());
            }
            let idx = atoi(key)
                .map_err(|e| format!("value was not a proper array index: '{key}': {e}"))?;
            let size = a.len() as i64 + 1;
            if idx >= size {
                return Err(invalid_index(idx));
            }
            let at = if idx < 0 {
                if idx < -size {
                    return Err(invalid_index(idx));
                }
                idx + size
            } else {
                idx
            };
            a.insert(at as usize, value);
            Ok(())
        }
        _ => Ok(()),
    }
}

fn remove_at(container: &mut Value, key: &str) -> Result<Value, String> {
    match container {
        Value::Object(m) => m
            .remove(key)
            .ok_or_else(|| format!("Unable to remove nonexistent key: {key}: {MISSING}")),
        Value::Array(a) => {
            let idx = atoi(key)?;
            let len = a.len() as i64;
            if idx >= len {
                return Err(invalid_index(idx));
            }
            let at = if idx < 0 {
                if idx < -len {
                    return Err(invalid_index(idx));
                }
                idx + len
            } else {
                idx
            };
            Ok(a.remove(at as usize))
        }
        _ => Ok(Value::Null),
    }
}

/// The container holding the last segment of `path`, and that segment decoded, or `None`
/// where evanphx/json-patch reports the path missing (fewer than two segments, a missing or
/// null member on the way, a bad index, or a scalar on the way).
fn parent<'d, 'k>(doc: &'d Value, path: &'k str) -> Option<(&'d Value, std::borrow::Cow<'k, str>)> {
    let (head, last) = path.rsplit_once('/')?;
    let mut cur = doc;
    for part in head.split('/').skip(1) {
        cur = get(cur, &decode_key(part)).ok()??;
        if !matches!(cur, Value::Object(_) | Value::Array(_)) {
            return None;
        }
    }
    Some((cur, decode_key(last)))
}

fn parent_mut<'d, 'k>(
    doc: &'d mut Value,
    path: &'k str,
) -> Option<(&'d mut Value, std::borrow::Cow<'k, str>)> {
    let (head, last) = path.rsplit_once('/')?;
    let mut cur = doc;
    for part in head.split('/').skip(1) {
        let key = decode_key(part);
        cur = match cur {
            Value::Object(m) => m.get_mut(key.as_ref()).filter(|v| !v.is_null())?,
            Value::Array(a) => {
                let at = existing_index(&key, a.len()).ok()?;
                &mut a[at]
            }
            _ => return None,
        };
        if !matches!(cur, Value::Object(_) | Value::Array(_)) {
            return None;
        }
    }
    Some((cur, decode_key(last)))
}

fn add(doc: &mut Value, op: Op) -> Result<(), String> {
    let path = op
        .path()
        .map_err(|_| format!("add operation failed to decode path: {MISSING}"))?;
    let (con, key) = parent_mut(doc, path).ok_or_else(|| {
        format!("add operation does not apply: doc is missing path: \"{path}\": {MISSING}")
    })?;
    let value = op.value().cloned().unwrap_or(Value::Null);
    add_at(con, &key, value).map_err(|e| format!("error in add for path: '{path}': {e}"))
}

fn remove(doc: &mut Value, op: Op) -> Result<(), String> {
    let path = op
        .path()
        .map_err(|_| format!("remove operation failed to decode path: {MISSING}"))?;
    let (con, key) = parent_mut(doc, path).ok_or_else(|| {
        format!("remove operation does not apply: doc is missing path: \"{path}\": {MISSING}")
    })?;
    remove_at(con, &key)
        .map(drop)
        .map_err(|e| format!("error in remove for path: '{path}': {e}"))
}

fn replace(doc: &mut Value, op: Op) -> Result<(), String> {
    let path = op
        .path()
        .map_err(|e| format!("replace operation failed to decode path: {e}"))?;
    if path.is_empty() {
        // The whole document: only an object or array replaces it; anything else is ignored.
        if let Some(v @ (Value::Object(_) | Value::Array(_))) = op.value() {
            *doc = v.clone();
        }
        return Ok(());
    }
    let (con, key) = parent_mut(doc, path).ok_or_else(|| {
        format!("replace operation does not apply: doc is missing path: {path}: {MISSING}")
    })?;
    let value = op.value().cloned().unwrap_or(Value::Null);
    match con {
        Value::Object(m) => {
            m.insert(key.into_owned(), value);
        }
        Value::Array(a) => {
            let at = existing_index(&key, a.len()).map_err(|_| {
                format!("replace operation does not apply: doc is missing key: {path}: {MISSING}")
            })?;
            a[at] = value;
        }
        _ => {}
    }
    Ok(())
}

fn move_op(doc: &mut Value, op: Op) -> Result<(), String> {
    let from = op
        .from()
        .map_err(|e| format!("move operation failed to decode from: {e}"))?;
    let (con, key) = parent_mut(doc, from).ok_or_else(|| {
        format!("move operation does not apply: doc is missing from path: {from}: {MISSING}")
    })?;
    if let Value::Array(a) = &*con {
        existing_index(&key, a.len())
            .map_err(|e| format!("error in move for path: '{key}': {e}"))?;
    }
    let value =
        remove_at(con, &key).map_err(|e| format!("error in move for path: '{key}': {e}"))?;
    let path = op
        .path()
        .map_err(|e| format!("move operation failed to decode path: {e}"))?;
    let (con, key) = parent_mut(doc, path).ok_or_else(|| {
        format!("move operation does not apply: doc is missing destination path: {path}: {MISSING}")
    })?;
    add_at(con, &key, value).map_err(|e| format!("error in move for path: '{path}': {e}"))
}

fn test(doc: &mut Value, op: Op) -> Result<(), String> {
    let path = op
        .path()
        .map_err(|e| format!("test operation failed to decode path: {e}"))?;
    let failed = || format!("testing value {path} failed: test failed");
    if path.is_empty() {
        return match op.value() {
            Some(v) if v == doc => Ok(()),
            _ => Err(failed()),
        };
    }
    let (con, key) = parent(doc, path).ok_or_else(|| {
        format!("test operation does not apply: is missing path: {path}: {MISSING}")
    })?;
    let have = get(con, &key).map_err(|e| format!("error in test for path: '{path}': {e}"))?;
    match (have, op.value()) {
        // A missing (or null) member passes a test for null.
        (None, None | Some(Value::Null)) => Ok(()),
        (Some(h), Some(w)) if h == w => Ok(()),
        _ => Err(failed()),
    }
}

fn copy(doc: &mut Value, op: Op, copied: &mut usize) -> Result<(), String> {
    let from = op
        .from()
        .map_err(|e| format!("copy operation failed to decode from: {e}"))?;
    let (con, key) = parent(doc, from).ok_or_else(|| {
        format!("copy operation does not apply: doc is missing from path: {from}: {MISSING}")
    })?;
    let source = get(con, &key).map_err(|e| format!("error in copy for from: '{from}': {e}"))?;
    let path = op
        .path()
        .map_err(|_| format!("copy operation failed to decode path: {MISSING}"))?;
    if parent(doc, path).is_none() {
        return Err(format!(
            "copy operation does not apply: doc is missing destination path: {path}: {MISSING}"
        ));
    }
    // Size as Go serializes the copied value (a missing source copies null and counts 0).
    let size = source.map_or(0, go_json_len);
    *copied += size;
    if *copied > MAX_COPY_BYTES {
        return Err(format!(
            "Unable to complete the copy, the accumulated size increase of copy is {}, exceeding the limit {MAX_COPY_BYTES}",
            *copied
        ));
    }
    let value = source.cloned().unwrap_or(Value::Null);
    let (con, key) = parent_mut(doc, path).ok_or_else(|| {
        format!("copy operation does not apply: doc is missing destination path: {path}: {MISSING}")
    })?;
    add_at(con, &key, value).map_err(|e| format!("error while adding value during copy: {e}"))
}

/// The length of Go's `json.Marshal` of `v` (HTML-safe escaping).
fn go_json_len(v: &Value) -> usize {
    let mut total = 0usize;
    let mut stack: Vec<&Value> = vec![v];
    while let Some(v) = stack.pop() {
        total += match v {
            Value::Null => 4,
            Value::Bool(true) => 4,
            Value::Bool(false) => 5,
            Value::Number(n) => n.to_string().len(),
            Value::String(s) => go_string_len(s),
            Value::Array(a) => {
                stack.extend(a.iter());
                2 + a.len().saturating_sub(1)
            }
            Value::Object(m) => {
                stack.extend(m.values());
                2 + m.len().saturating_sub(1)
                    + m.keys().map(|k| go_string_len(k) + 1).sum::<usize>()
            }
        };
    }
    total
}

fn go_string_len(s: &str) -> usize {
    2 + s
        .chars()
        .map(|c| match c {
            '"' | '\\' | '\n' | '\r' | '\t' => 2,
            '<' | '>' | '&' | '\u{2028}' | '\u{2029}' => 6,
            c if (c as u32) < 0x20 => 6,
            c => c.len_utf8(),
        })
        .sum::<usize>()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(doc: Value, patch: Value) -> Result<Value, PatchError> {
        let by_ref = apply(&doc, &patch);
        assert_eq!(
            by_ref,
            apply_owned(doc, &patch),
            "apply and apply_owned agree"
        );
        by_ref
    }

    /// (description, document, patch, result)
    #[test]
    fn operations_apply_like_kubernetes() {
        let cases = [
            (
                "add a member",
                json!({"a": 1}),
                json!([{"op": "add", "path": "/b", "value": 2}]),
                json!({"a": 1, "b": 2}),
            ),
            (
                "add over a member",
                json!({"a": 1}),
                json!([{"op": "add", "path": "/a", "value": [3]}]),
                json!({"a": [3]}),
            ),
            (
                "add into an array",
                json!({"a": [1, 2]}),
                json!([{"op": "add", "path": "/a/1", "value": 9}]),
                json!({"a": [1, 9, 2]}),
            ),
            (
                "add at the end with -",
                json!({"a": [1, 2]}),
                json!([{"op": "add", "path": "/a/-", "value": 9}]),
                json!({"a": [1, 2, 9]}),
            ),
            (
                "add at the length",
                json!({"a": [1, 2]}),
                json!([{"op": "add", "path": "/a/2", "value": 9}]),
                json!({"a": [1, 2, 9]}),
            ),
            (
                "add at -1 appends",
                json!({"a": [1, 2]}),
                json!([{"op": "add", "path": "/a/-1", "value": 9}]),
                json!({"a": [1, 2, 9]}),
            ),
            (
                "add without a value adds null",
                json!({}),
                json!([{"op": "add", "path": "/a"}]),
                json!({"a": null}),
            ),
            (
                "escaped pointer tokens",
                json!({"a~b": {}}),
                json!([{"op": "add", "path": "/a~0b/c~1d", "value": 1}]),
                json!({"a~b": {"c/d": 1}}),
            ),
            (
                "~01 is ~1, not /",
                json!({}),
                json!([{"op": "add", "path": "/~01", "value": 1}]),
                json!({"~1": 1}),
            ),
            (
                "the empty key",
                json!({}),
                json!([{"op": "add", "path": "/", "value": 1}]),
                json!({"": 1}),
            ),
            (
                "a path without a leading slash names its last token",
                json!({"x": 1}),
                json!([{"op": "add", "path": "a/b", "value": 2}]),
                json!({"x": 1, "b": 2}),
            ),
            (
                "remove a member",
                json!({"a": 1, "b": 2}),
                json!([{"op": "remove", "path": "/a"}]),
                json!({"b": 2}),
            ),
            (
                "remove an item",
                json!({"a": [1, 2, 3]}),
                json!([{"op": "remove", "path": "/a/1"}]),
                json!({"a": [1, 3]}),
            ),
            (
                "remove the last item with -1",
                json!({"a": [1, 2, 3]}),
                json!([{"op": "remove", "path": "/a/-1"}]),
                json!({"a": [1, 2]}),
            ),
            (
                "replace a member",
                json!({"a": 1}),
                json!([{"op": "replace", "path": "/a", "value": {"x": 1}}]),
                json!({"a": {"x": 1}}),
            ),
            (
                "replace of a missing member adds it",
                json!({}),
                json!([{"op": "replace", "path": "/a", "value": 1}]),
                json!({"a": 1}),
            ),
            (
                "replace an item",
                json!({"a": [1, 2]}),
                json!([{"op": "replace", "path": "/a/0", "value": 5}]),
                json!({"a": [5, 2]}),
            ),
            (
                "replace the document",
                json!({"a": 1}),
                json!([{"op": "replace", "path": "", "value": {"b": 2}}]),
                json!({"b": 2}),
            ),
            (
                "replacing the document with a scalar is ignored",
                json!({"a": 1}),
                json!([{"op": "replace", "path": "", "value": 5}]),
                json!({"a": 1}),
            ),
            (
                "move a member",
                json!({"a": {"b": 1}}),
                json!([{"op": "move", "from": "/a/b", "path": "/c"}]),
                json!({"a": {}, "c": 1}),
            ),
            (
                "move an item",
                json!({"a": [1, 2, 3]}),
                json!([{"op": "move", "from": "/a/0", "path": "/a/-"}]),
                json!({"a": [2, 3, 1]}),
            ),
            (
                "copy a member",
                json!({"a": [1]}),
                json!([{"op": "copy", "from": "/a", "path": "/b"}]),
                json!({"a": [1], "b": [1]}),
            ),
            (
                "copy of a missing member copies null",
                json!({"a": 1}),
                json!([{"op": "copy", "from": "/x", "path": "/y"}]),
                json!({"a": 1, "y": null}),
            ),
            (
                "copy an item into a list",
                json!({"a": [1, 2]}),
                json!([{"op": "copy", "from": "/a/1", "path": "/a/0"}]),
                json!({"a": [2, 1, 2]}),
            ),
            (
                "test passes",
                json!({"a": [1, {"b": "c"}]}),
                json!([{"op": "test", "path": "/a", "value": [1, {"b": "c"}]}]),
                json!({"a": [1, {"b": "c"}]}),
            ),
            (
                "test for null passes on a missing member",
                json!({}),
                json!([{"op": "test", "path": "/x", "value": null}]),
                json!({}),
            ),
            (
                "test of the document",
                json!({"a": 1}),
                json!([{"op": "test", "path": "", "value": {"a": 1}}]),
                json!({"a": 1}),
            ),
            (
                "a null patch changes nothing",
                json!({"a": 1}),
                Value::Null,
                json!({"a": 1}),
            ),
            (
                "an empty patch changes nothing",
                json!({"a": 1}),
                json!([]),
                json!({"a": 1}),
            ),
            (
                "operations run in order",
                json!({"metadata": {"labels": {"a": "1"}}}),
                json!([
                    {"op": "test", "path": "/metadata/labels/a", "value": "1"},
                    {"op": "add", "path": "/metadata/labels/b", "value": "2"},
                    {"op": "remove", "path": "/metadata/labels/a"},
                    {"op": "copy", "from": "/metadata/labels", "path": "/metadata/annotations"}
                ]),
                json!({"metadata": {"labels": {"b": "2"}, "annotations": {"b": "2"}}}),
            ),
        ];
        for (what, doc, patch, want) in cases {
            assert_eq!(run(doc, patch), Ok(want), "{what}");
        }
    }

    /// (description, document, patch, message); every one is a 422.
    #[test]
    fn failing_operations_report_evanphx_json_patch_messages() {
        let cases = [
            ("add under a missing parent", json!({"spec": {}}), json!([{"op": "add", "path": "/spec/x/y", "value": 1}]), "add operation does not apply: doc is missing path: \"/spec/x/y\": missing value"),
            ("add at the document", json!({}), json!([{"op": "add", "path": "", "value": {}}]), "add operation does not apply: doc is missing path: \"\": missing value"),
            ("add under a scalar", json!({"a": 1}), json!([{"op": "add", "path": "/a/b", "value": 1}]), "add operation does not apply: doc is missing path: \"/a/b\": missing value"),
            ("add under null", json!({"a": null}), json!([{"op": "add", "path": "/a/b", "value": 1}]), "add operation does not apply: doc is missing path: \"/a/b\": missing value"),
            ("add past the end", json!({"a": [1]}), json!([{"op": "add", "path": "/a/5", "value": 1}]), "error in add for path: '/a/5': Unable to access invalid index: 5: invalid index referenced"),
            ("add before the start", json!({"a": [1]}), json!([{"op": "add", "path": "/a/-3", "value": 1}]), "error in add for path: '/a/-3': Unable to access invalid index: -3: invalid index referenced"),
            ("add at a non-numeric index", json!({"a": [1]}), json!([{"op": "add", "path": "/a/x", "value": 1}]), "error in add for path: '/a/x': value was not a proper array index: 'x': strconv.Atoi: parsing \"x\": invalid syntax"),
            ("add without a path", json!({}), json!([{"op": "add", "value": 1}]), "add operation failed to decode path: missing value"),
            ("remove a missing member", json!({"spec": {}}), json!([{"op": "remove", "path": "/spec/x"}]), "error in remove for path: '/spec/x': Unable to remove nonexistent key: x: missing value"),
            ("remove under a missing parent", json!({}), json!([{"op": "remove", "path": "/spec/x"}]), "remove operation does not apply: doc is missing path: \"/spec/x\": missing value"),
            ("remove past the end", json!({"a": [1]}), json!([{"op": "remove", "path": "/a/1"}]), "error in remove for path: '/a/1': Unable to access invalid index: 1: invalid index referenced"),
            ("remove before the start", json!({"a": [1]}), json!([{"op": "remove", "path": "/a/-2"}]), "error in remove for path: '/a/-2': Unable to access invalid index: -2: invalid index referenced"),
            ("remove at a non-numeric index", json!({"a": [1]}), json!([{"op": "remove", "path": "/a/-"}]), "error in remove for path: '/a/-': strconv.Atoi: parsing \"-\": invalid syntax"),
            ("remove at a huge index", json!({"a": [1]}), json!([{"op": "remove", "path": "/a/99999999999999999999"}]), "error in remove for path: '/a/99999999999999999999': strconv.Atoi: parsing \"99999999999999999999\": value out of range"),
            ("replace under a missing parent", json!({}), json!([{"op": "replace", "path": "/a/b", "value": 1}]), "replace operation does not apply: doc is missing path: /a/b: missing value"),
            ("replace past the end", json!({"a": [1]}), json!([{"op": "replace", "path": "/a/5", "value": 1}]), "replace operation does not apply: doc is missing key: /a/5: missing value"),
            ("replace without a path", json!({}), json!([{"op": "replace", "value": 1}]), "replace operation failed to decode path: operation missing path field: missing value"),
            ("replace with a numeric path", json!({}), json!([{"op": "replace", "path": 5, "value": 1}]), "replace operation failed to decode path: json: cannot unmarshal number into Go value of type string"),
            ("move without from", json!({}), json!([{"op": "move", "path": "/a"}]), "move operation failed to decode from: operation, missing from field: missing value"),
            ("move from a missing parent", json!({}), json!([{"op": "move", "from": "/x/y", "path": "/a"}]), "move operation does not apply: doc is missing from path: /x/y: missing value"),
            ("move a missing member", json!({"a": {}}), json!([{"op": "move", "from": "/a/b", "path": "/c"}]), "error in move for path: 'b': Unable to remove nonexistent key: b: missing value"),
            ("move to a missing parent", json!({"a": 1}), json!([{"op": "move", "from": "/a", "path": "/x/y"}]), "move operation does not apply: doc is missing destination path: /x/y: missing value"),
            ("move into itself", json!({"a": {"b": 1}}), json!([{"op": "move", "from": "/a", "path": "/a/c"}]), "move operation does not apply: doc is missing destination path: /a/c: missing value"),
            ("copy without from", json!({}), json!([{"op": "copy", "path": "/a"}]), "copy operation failed to decode from: operation, missing from field: missing value"),
            ("copy to a missing parent", json!({"a": 1}), json!([{"op": "copy", "from": "/a", "path": "/x/y"}]), "copy operation does not apply: doc is missing destination path: /x/y: missing value"),
            ("copy from past the end", json!({"a": [1]}), json!([{"op": "copy", "from": "/a/3", "path": "/b"}]), "error in copy for from: '/a/3': Unable to access invalid index: 3: invalid index referenced"),
            ("copy without a path", json!({"a": 1}), json!([{"op": "copy", "from": "/a"}]), "copy operation failed to decode path: missing value"),
            ("test of a different value", json!({"a": 1}), json!([{"op": "test", "path": "/a", "value": 2}]), "testing value /a failed: test failed"),
            ("test of 1 against 1.0", json!({"a": 1}), json!([{"op": "test", "path": "/a", "value": 1.0}]), "testing value /a failed: test failed"),
            ("test of a missing member", json!({}), json!([{"op": "test", "path": "/x", "value": 1}]), "testing value /x failed: test failed"),
            ("test under a missing parent", json!({}), json!([{"op": "test", "path": "/x/y", "value": 1}]), "test operation does not apply: is missing path: /x/y: missing value"),
            ("test of the document", json!({"a": 1}), json!([{"op": "test", "path": "", "value": {}}]), "testing value  failed: test failed"),
            ("an unknown operation", json!({}), json!([{"op": "frob", "path": "/a"}]), "Unexpected kind: frob"),
            ("an operation without op", json!({}), json!([{"path": "/a"}]), "Unexpected kind: unknown"),
            ("a null operation", json!({}), json!([null]), "Unexpected kind: unknown"),
            (
                "a later failure discards earlier operations",
                json!({"a": 1}),
                json!([{"op": "add", "path": "/b", "value": 2}, {"op": "test", "path": "/a", "value": 0}]),
                "testing value /a failed: test failed",
            ),
        ];
        for (what, doc, patch, message) in cases {
            let err = run(doc, patch).expect_err(what);
            assert_eq!(err.kind(), PatchErrorKind::Unprocessable, "{what}");
            assert_eq!(err.message(), message, "{what}");
            assert_eq!(err.http_status(), 422, "{what}");
        }
    }

    #[test]
    fn malformed_patch_documents_are_bad_requests() {
        let cases = [
            (
                json!({"op": "add"}),
                "json: cannot unmarshal object into Go value of type jsonpatch.Patch",
            ),
            (
                json!("x"),
                "json: cannot unmarshal string into Go value of type jsonpatch.Patch",
            ),
            (
                json!([1]),
                "json: cannot unmarshal number into Go value of type jsonpatch.Operation",
            ),
            (
                json!([{"op": "test"}, "x"]),
                "json: cannot unmarshal string into Go value of type jsonpatch.Operation",
            ),
        ];
        for (patch, message) in cases {
            let err = run(json!({}), patch).unwrap_err();
            assert_eq!(
                (err.kind(), err.message()),
                (PatchErrorKind::BadRequest, message)
            );
        }
    }

    #[test]
    fn patches_over_ten_thousand_operations_are_too_large() {
        let op = json!({"op": "test", "path": "/a", "value": 1});
        let ok = Value::Array(vec![op.clone(); MAX_OPERATIONS]);
        assert!(run(json!({"a": 1}), ok).is_ok());
        let too_many = Value::Array(vec![op; MAX_OPERATIONS + 1]);
        let err = run(json!({"a": 1}), too_many).unwrap_err();
        assert_eq!(err.kind(), PatchErrorKind::TooLarge);
        assert_eq!(err.http_status(), 413);
        assert_eq!(
            err.message(),
            "The allowed maximum operations in a JSON patch is 10000, got 10001"
        );
    }

    #[test]
    fn copies_are_limited_in_accumulated_size() {
        let big = "x".repeat(1024 * 1024);
        let doc = json!({ "a": big });
        let copy = |to: &str| json!({"op": "copy", "from": "/a", "path": to});
        assert!(run(doc.clone(), json!([copy("/b"), copy("/c")])).is_ok());
        let err = run(doc, json!([copy("/b"), copy("/c"), copy("/d")])).unwrap_err();
        assert_eq!(err.kind(), PatchErrorKind::Unprocessable);
        assert_eq!(
            err.message(),
            "Unable to complete the copy, the accumulated size increase of copy is 3145734, exceeding the limit 3145728"
        );
    }

    #[test]
    fn go_json_length_counts_html_escapes() {
        assert_eq!(
            go_json_len(&json!({"a": [1, "x<"], "b": null})),
            r#"{"a":[1,"x\u003c"],"b":null}"#.len()
        );
        assert_eq!(go_json_len(&json!("é\n")), "\"é\\n\"".len());
    }

    #[test]
    fn nesting_is_bounded_in_patch_and_result() {
        let mut deep = json!(1);
        for _ in 0..(MAX_DEPTH + 5) {
            deep = json!([deep]);
        }
        let err = run(
            json!({}),
            json!([{"op": "add", "path": "/a", "value": deep}]),
        )
        .unwrap_err();
        assert_eq!(err.kind(), PatchErrorKind::BadRequest);

        // A document 60 deep, given a value 50 deep at its bottom.
        let mut doc = json!({});
        let mut path = String::new();
        for _ in 0..59 {
            doc = json!({ "n": doc });
            path.push_str("/n");
        }
        let mut value = json!(1);
        for _ in 0..50 {
            value = json!({ "v": value });
        }
        path.push_str("/x");
        let err = run(doc, json!([{"op": "add", "path": path, "value": value}])).unwrap_err();
        assert_eq!(err.kind(), PatchErrorKind::Unprocessable);
    }

    #[test]
    fn decoded_patches_can_be_reused() {
        let patch_doc = json!([{"op": "add", "path": "/metadata/labels/x", "value": "1"}]);
        let patch = JsonPatch::decode(&patch_doc).unwrap();
        assert_eq!(patch.len(), 1);
        assert!(!patch.is_empty());
        for name in ["a", "b"] {
            let doc = json!({"metadata": {"name": name, "labels": {}}});
            let got = patch.apply(doc).unwrap();
            assert_eq!(got["metadata"]["labels"], json!({"x": "1"}));
        }
        let mut doc = json!({"metadata": {"labels": {}}});
        patch.apply_in_place(&mut doc).unwrap();
        assert_eq!(doc["metadata"]["labels"]["x"], "1");
    }
}
