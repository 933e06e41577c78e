//! Dropping unknown fields, as Kubernetes does when it decodes a body (and reports for
//! `fieldValidation=Strict`/`Warn`).

use serde_json::Value;

use super::{AdditionalProperties, SchemaRef, Schemas, Type, OBJECT_META};

pub(super) fn prune(root: SchemaRef<'_>, value: &mut Value) -> Vec<String> {
    let mut p = Pruner {
        path: String::with_capacity(64),
        out: Vec::new(),
    };
    p.resource(root, value);
    p.out
}

struct Pruner {
    /// The path of the value being visited, in Kubernetes' strict-decoding format.
    path: String,
    out: Vec<String>,
}

pub(super) fn push_key(path: &mut String, key: &str) {
    if !path.is_empty() {
        path.push('.');
    }
    path.push_str(key);
}

pub(super) fn push_index(path: &mut String, i: usize) {
    use std::fmt::Write;
    let _ = write!(path, "[{i}]");
}

fn object_meta() -> SchemaRef<'static> {
    Schemas::builtin()
        .definition(OBJECT_META)
        .expect("ObjectMeta is a built-in definition")
}

impl Pruner {
    /// A whole object (the top level or an embedded resource): `apiVersion` and `kind` are always
    /// known, `metadata` is an ObjectMeta, the rest follows the schema.
    fn resource(&mut self, at: SchemaRef<'_>, value: &mut Value) {
        self.object(at, value, true);
    }

    fn value(&mut self, at: SchemaRef<'_>, value: &mut Value) {
        let s = at.schema();
        match value {
            Value::Object(_) if s.ty.is_none_or(|t| t == Type::Object) => {
                if let Some(alt) = alternative(at, Type::Object) {
                    return self.value(alt, value);
                }
                self.object(at, value, s.embedded_resource);
            }
            Value::Array(items) => {
                let item_schema = match (s.ty, at.items()) {
                    (None | Some(Type::Array), Some(i)) => i,
                    (None, None) => match alternative(at, Type::Array).and_then(|a| a.items()) {
                        Some(i) => i,
                        None => return,
                    },
                    _ => return,
                };
                let len = self.path.len();
                for (i, item) in items.iter_mut().enumerate() {
                    if matches!(item, Value::Object(_) | Value::Array(_)) {
                        push_index(&mut self.path, i);
                        self.value(item_schema, item);
                        self.path.truncate(len);
                    }
                }
            }
            _ => {}
        }
    }

    fn object(&mut self, at: SchemaRef<'_>, value: &mut Value, resource: bool) {
        let Value::Object(map) = value else { return };
        let s = at.schema();
        let set = at.schemas();
        let additional = s.additional_properties;
        if !resource
            && s.properties.is_empty()
            && (s.preserve_unknown_fields || additional == AdditionalProperties::Any)
        {
            return;
        }
        let len = self.path.len();
        map.retain(|key, field| {
            if resource {
                match key.as_str() {
                    "apiVersion" | "kind" => return true,
                    "metadata" => {
                        // Built-in kinds declare ObjectMeta themselves; CRD schemas may say
                        // just `type: object`: metadata is an ObjectMeta either way.
                        let meta = match at.property("metadata") {
                            Some(m) if m.name() == Some(OBJECT_META) => m,
                            _ => object_meta(),
                        };
                        push_key(&mut self.path, key);
                        self.value(meta, field);
                        self.path.truncate(len);
                        return true;
                    }
                    _ => {}
                }
            }
            let known = match s.properties.get(key) {
                Some(id) => Some(set.get(id)),
                None => match additional {
                    AdditionalProperties::Schema(id) => Some(set.get(id)),
                    AdditionalProperties::Any => return true,
                    _ => None,
                },
            };
            push_key(&mut self.path, key);
            let keep = match known {
                Some(child) => {
                    if matches!(field, Value::Object(_) | Value::Array(_)) {
                        self.value(child, field);
                    }
                    true
                }
                None if s.preserve_unknown_fields => true,
                None => {
                    self.out.push(self.path.clone());
                    false
                }
            };
            self.path.truncate(len);
            keep
        });
    }
}

/// For a node without a type whose `oneOf`/`anyOf` alternatives carry the structure
/// (JSONSchemaPropsOrArray and friends): the first alternative that takes `ty`.
fn alternative(at: SchemaRef<'_>, ty: Type) -> Option<SchemaRef<'_>> {
    let s = at.schema();
    if s.ty.is_some() || (s.one_of.is_empty() && s.any_of.is_empty()) {
        return None;
    }
    let set = at.schemas();
    s.one_of
        .iter()
        .chain(&s.any_of)
        .map(|id| set.get(*id))
        .find(|alt| alt.schema().ty == Some(ty))
}
