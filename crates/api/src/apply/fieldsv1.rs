//! FieldsV1, the JSON form of a [`FieldSet`] in `metadata.managedFields`: a nested object whose
//! keys are path elements (`f:name`, `k:{"name":"nginx"}`, `v:"value"`, `i:0`), with `"."`
//! marking a node that is itself in the set as well as a prefix of other paths.

use serde_json::{Map, Value};

use super::path::PathElement;
use super::set::{FieldSet, NodeBuilder};
use super::value::{write_go_json, write_go_json_string, Escaper};

/// The FieldsV1 text of one path element (json-iterator's encoding inside `k:` and `v:`).
pub fn element_key(pe: &PathElement) -> String {
    let mut out = String::new();
    match pe {
        PathElement::Field(name) => {
            out.push_str("f:");
            out.push_str(name);
        }
        PathElement::Key(fields) => {
            out.push_str("k:{");
            for (i, (name, value)) in fields.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_go_json_string(&mut out, name, Escaper::JsonIter);
                out.push(':');
                write_go_json(&mut out, value, Escaper::JsonIter);
            }
            out.push('}');
        }
        PathElement::Value(v) => {
            out.push_str("v:");
            write_go_json(&mut out, v, Escaper::JsonIter);
        }
        PathElement::Index(i) => {
            out.push_str("i:");
            out.push_str(&i.to_string());
        }
    }
    out
}

/// Encode a set as FieldsV1 (always a JSON object; `{}` for the empty set).
pub fn encode(set: &FieldSet) -> Value {
    Value::Object(encode_node(set, false))
}

fn encode_node(set: &FieldSet, include_self: bool) -> Map<String, Value> {
    let mut out = Map::new();
    if include_self && !(set.members().is_empty() && set.children().is_empty()) {
        out.insert(".".into(), Value::Object(Map::new()));
    }
    for m in set.members() {
        if set.child(m).is_none() {
            out.insert(element_key(m), Value::Object(Map::new()));
        }
    }
    for (pe, child) in set.children() {
        let is_member = set.has_member(pe);
        out.insert(
            element_key(pe),
            Value::Object(encode_node(child, is_member)),
        );
    }
    out
}

/// Why a FieldsV1 document could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldsError(pub String);

impl std::fmt::Display for FieldsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parse one FieldsV1 key. `Ok(None)` is a well-formed key of a kind this version does not
/// know (`x:...`), which Kubernetes skips.
pub fn parse_element(key: &str) -> Result<Option<PathElement>, FieldsError> {
    let bytes = key.as_bytes();
    if bytes.len() < 2 {
        return Err(FieldsError("key must be 2 characters long:".into()));
    }
    if bytes[1] != b':' {
        return Err(FieldsError(format!("missing colon: {key}")));
    }
    // The first byte is ASCII here, so slicing after two bytes stays on a char boundary
    // unless the first char is multi-byte, which the colon check above already excluded.
    let rest = key.get(2..).unwrap_or("");
    Ok(Some(match bytes[0] {
        b'f' => PathElement::Field(rest.to_string()),
        b'v' => {
            PathElement::Value(serde_json::from_str(rest).map_err(|e| FieldsError(e.to_string()))?)
        }
        b'k' => {
            let fields: Map<String, Value> =
                serde_json::from_str(rest).map_err(|e| FieldsError(e.to_string()))?;
            PathElement::key(fields.into_iter().collect())
        }
        b'i' => PathElement::Index(rest.parse::<i64>().map_err(|e| {
            let why = match e.kind() {
                std::num::IntErrorKind::PosOverflow | std::num::IntErrorKind::NegOverflow => {
                    "value out of range"
                }
                _ => "invalid syntax",
            };
            FieldsError(format!("strconv.Atoi: parsing {rest:?}: {why}"))
        })?),
        _ => return Ok(None),
    }))
}

/// Decode FieldsV1 into a set. Bad input is an error, never a panic.
pub fn decode(fields: &Value) -> Result<FieldSet, FieldsError> {
    match fields {
        Value::Object(m) => Ok(decode_node(m)?.0.unwrap_or_default()),
        Value::Null => Ok(FieldSet::new()),
        other => Err(FieldsError(format!(
            "FieldsV1 must be a JSON object, found {}",
            kind_name(other)
        ))),
    }
}

/// Whether stored FieldsV1 and `set` have a path in common, without decoding the FieldsV1:
/// only the nodes `set` reaches are read (the same answer as decoding and intersecting).
pub(crate) fn intersects(fields: &Map<String, Value>, set: &FieldSet) -> Result<bool, FieldsError> {
    if set.members().is_empty() && set.children().is_empty() {
        return Ok(false);
    }
    for (key, value) in fields {
        if key == "." {
            continue;
        }
        let Some(pe) = parse_element(key)? else {
            continue;
        };
        let member = set.has_member(&pe);
        let below = set.child(&pe);
        if !member && below.is_none() {
            continue;
        }
        match value {
            Value::Null => {
                if member {
                    return Ok(true);
                }
            }
            Value::Object(inner) => {
                if member && node_is_member(inner)? {
                    return Ok(true);
                }
                if let Some(below) = below {
                    if intersects(inner, below)? {
                        return Ok(true);
                    }
                }
            }
            other => {
                return Err(FieldsError(format!(
                    "value of {key:?} must be a JSON object, found {}",
                    kind_name(other)
                )))
            }
        }
    }
    Ok(false)
}

/// Whether a FieldsV1 node is itself in the set: it says so with `"."`, or has no known
/// children (as [`decode_node`] reads it).
fn node_is_member(m: &Map<String, Value>) -> Result<bool, FieldsError> {
    if m.contains_key(".") {
        return Ok(true);
    }
    for key in m.keys() {
        if parse_element(key)?.is_some() {
            return Ok(false);
        }
    }
    Ok(true)
}

fn kind_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// A node's children (None when it has none) and whether the node is itself a member: it is
/// when it says so with `"."`, or when it has no (known) children at all.
fn decode_node(m: &Map<String, Value>) -> Result<(Option<FieldSet>, bool), FieldsError> {
    let mut is_member = false;
    let mut any = false;
    // Keys arrive in string order, which is not element order (k:{"port":10} sorts before
    // k:{"port":9} as text): the builder sorts, and merges an element written twice.
    let mut node = NodeBuilder::default();
    for (key, value) in m {
        if key == "." {
            is_member = true;
            continue;
        }
        let Some(pe) = parse_element(key)? else {
            continue;
        };
        let (grandchildren, child_is_member) = match value {
            Value::Object(inner) => decode_node(inner)?,
            Value::Null => (None, true),
            other => {
                return Err(FieldsError(format!(
                    "value of {key:?} must be a JSON object, found {}",
                    kind_name(other)
                )))
            }
        };
        any = true;
        if child_is_member {
            node.member(pe.clone());
        }
        if let Some(g) = grandchildren {
            node.child(pe, g);
        }
    }
    if !any {
        return Ok((None, true));
    }
    Ok((Some(node.finish()), is_member))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn roundtrip(fields: Value) {
        let set = decode(&fields).expect("decodes");
        assert_eq!(encode(&set), fields);
    }

    #[test]
    fn roundtrips_real_managed_fields() {
        // From Kubernetes' managedfields round-trip tests and a kubectl-created Deployment.
        roundtrip(json!({
            "v:3": {"f:alsoPi": {}},
            "v:3.1415": {"f:pi": {}},
            "v:false": {"f:notTrue": {}}
        }));
        roundtrip(json!({"i:5": {"f:i": {}}}));
        roundtrip(json!({
            "f:apiVersion": {}, "f:kind": {},
            "f:metadata": {"f:labels": {"f:app": {}}, "f:name": {}},
            "f:spec": {
                "f:replicas": {},
                "f:selector": {"f:matchLabels": {"f:app": {}}},
                "f:template": {
                    "f:medatada": {"f:labels": {"f:app": {}}},
                    "f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}": {
                        ".": {}, "f:image": {}, "f:name": {},
                        "f:ports": {"i:0": {"f:containerPort": {}}}
                    }}}
                }
            }
        }));
        roundtrip(json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:template": {"f:spec": {"f:containers": {
                "k:{\"name\":\"nginx\"}": {
                    ".": {}, "f:image": {}, "f:imagePullPolicy": {}, "f:name": {},
                    "f:ports": {"k:{\"containerPort\":80,\"protocol\":\"TCP\"}": {
                        ".": {}, "f:containerPort": {}, "f:protocol": {}
                    }}
                }
            }}}}
        }));
    }

    #[test]
    fn decoded_paths_are_members_and_prefixes() {
        let set = decode(&json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}}}}
        }))
        .unwrap();
        let f = PathElement::field;
        let nginx = PathElement::key(vec![("name".into(), json!("nginx"))]);
        assert!(set.has(&[f("metadata"), f("labels")]));
        assert!(set.has(&[f("metadata"), f("labels"), f("app")]));
        assert!(!set.has(&[f("metadata")]));
        assert!(set.has(&[f("spec"), f("containers"), nginx.clone()]));
        assert!(set.has(&[f("spec"), f("containers"), nginx, f("image")]));
        assert_eq!(set.size(), 4);
    }

    #[test]
    fn keys_are_written_like_go() {
        let pe = PathElement::key(vec![
            ("protocol".into(), json!("TCP")),
            ("containerPort".into(), json!(80)),
        ]);
        assert_eq!(
            element_key(&pe),
            r#"k:{"containerPort":80,"protocol":"TCP"}"#
        );
        assert_eq!(
            element_key(&PathElement::Value(json!("a<b"))),
            r#"v:"a\u003cb""#
        );
        assert_eq!(element_key(&PathElement::Index(3)), "i:3");
        // Numeric keys sort by value, not by their text.
        let set = decode(&json!({"f:p": {"k:{\"port\":10}": {}, "k:{\"port\":9}": {}}})).unwrap();
        let ports: Vec<String> = set
            .child(&PathElement::field("p"))
            .unwrap()
            .members()
            .iter()
            .map(|p| p.to_string())
            .collect();
        assert_eq!(ports, ["[port=9]", "[port=10]"]);
    }

    #[test]
    fn bad_fields_are_errors_not_panics() {
        for bad in [
            json!({"x": {}}),
            json!({"fx": {}}),
            json!({"k:{bad": {}}),
            json!({"k:[1]": {}}),
            json!({"v:": {}}),
            json!({"i:one": {}}),
            json!({"f:a": 1}),
            json!({"f:a": {"f:b": []}}),
            json!("f:a"),
            json!({"\u{e9}x": {}}),
        ] {
            assert!(decode(&bad).is_err(), "{bad} should not decode");
        }
        // Unknown element kinds are skipped, as Kubernetes does.
        let set = decode(&json!({"x:y": {}, "f:a": {}})).unwrap();
        assert_eq!(set.paths(), vec![vec![PathElement::field("a")]]);
        assert_eq!(decode(&Value::Null).unwrap(), FieldSet::new());
    }
}
