//! Building a [`Schemas`] arena from JSON Schema documents: a map of named definitions whose
//! `$ref`s point at each other (the k8s-openapi output, OpenAPI `definitions` or
//! `components.schemas`), or a single structural schema (a CRD's `openAPIV3Schema`).

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::{
    AdditionalProperties, Properties, Schema, SchemaId, Schemas, Special, Type, Validation,
};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    #[error("unresolvable $ref {0:?}")]
    UnresolvedRef(String),
    #[error("unknown definition {0:?}")]
    UnknownDefinition(String),
    #[error("a schema must be a JSON object or boolean, found {0}")]
    NotASchema(&'static str),
}

/// The last segment of a `$ref`: "#/$defs/io.k8s.api.core.v1.Pod" → "io.k8s.api.core.v1.Pod".
pub(crate) fn ref_name(r: &str) -> &str {
    r.rsplit('/').next().unwrap_or(r)
}

pub(crate) struct Builder<'j> {
    nodes: Vec<Schema>,
    names: HashMap<&'j str, SchemaId>,
    /// Built-in mode: objects without properties or additionalProperties hold arbitrary JSON
    /// (RawExtension, FieldsV1, JSON), as their custom Go decoders do.
    builtin: bool,
}

impl<'j> Builder<'j> {
    pub(crate) fn new(builtin: bool) -> Builder<'j> {
        Builder {
            nodes: Vec::new(),
            names: HashMap::new(),
            builtin,
        }
    }

    /// Add named definitions (all of them first, so refs between them resolve in any order).
    pub(crate) fn definitions(
        &mut self,
        defs: impl IntoIterator<Item = (&'j str, &'j Value)> + Clone,
    ) -> Result<(), SchemaError> {
        for (name, _) in defs.clone() {
            let id = self.nodes.len() as SchemaId;
            self.nodes.push(Schema::default());
            self.names.insert(name, id);
        }
        for (name, json) in defs {
            let id = self.names[name];
            let mut node = match json.get("$ref").and_then(Value::as_str) {
                // An alias of another definition: copy it (after it is built, so order matters
                // little in practice: k8s-openapi has no aliases).
                Some(r) => {
                    let target = self.resolve(r)?;
                    self.nodes[target as usize].clone()
                }
                None => self.parse(json)?,
            };
            node.name = Some(name.into());
            node.special = match name {
                "io.k8s.apimachinery.pkg.api.resource.Quantity" => Special::Quantity,
                "io.k8s.apimachinery.pkg.util.intstr.IntOrString" => Special::IntOrString,
                _ => Special::None,
            };
            self.nodes[id as usize] = node;
        }
        Ok(())
    }

    /// Add one anonymous schema tree, returning its root.
    pub(crate) fn tree(&mut self, json: &'j Value) -> Result<SchemaId, SchemaError> {
        self.child(json)
    }

    pub(crate) fn finish(self, root: Option<SchemaId>) -> Schemas {
        Schemas {
            definitions: self
                .names
                .iter()
                .map(|(k, v)| (Box::<str>::from(*k), *v))
                .collect(),
            nodes: self.nodes,
            kinds: HashMap::new(),
            root,
        }
    }

    fn resolve(&self, r: &str) -> Result<SchemaId, SchemaError> {
        self.names
            .get(ref_name(r))
            .copied()
            .ok_or_else(|| SchemaError::UnresolvedRef(r.to_string()))
    }

    fn child(&mut self, json: &'j Value) -> Result<SchemaId, SchemaError> {
        if let Some(r) = json.get("$ref").and_then(Value::as_str) {
            return self.resolve(r);
        }
        let node = self.parse(json)?;
        let id = self.nodes.len() as SchemaId;
        self.nodes.push(node);
        Ok(id)
    }

    fn children(&mut self, json: Option<&'j Value>) -> Result<Vec<SchemaId>, SchemaError> {
        match json {
            Some(Value::Array(items)) => items.iter().map(|s| self.child(s)).collect(),
            Some(other) => Ok(vec![self.child(other)?]),
            None => Ok(Vec::new()),
        }
    }

    fn parse(&mut self, json: &'j Value) -> Result<Schema, SchemaError> {
        let obj = match json {
            Value::Object(m) => m,
            // `true` accepts anything; `false` nothing (treated as anything for pruning).
            Value::Bool(_) => {
                return Ok(Schema {
                    preserve_unknown_fields: true,
                    ..Schema::default()
                })
            }
            Value::Null => return Err(SchemaError::NotASchema("null")),
            Value::String(_) => return Err(SchemaError::NotASchema("a string")),
            Value::Number(_) => return Err(SchemaError::NotASchema("a number")),
            Value::Array(_) => return Err(SchemaError::NotASchema("an array")),
        };
        let mut s = Schema::default();
        match obj.get("type") {
            Some(Value::String(t)) => s.ty = Type::parse(t),
            Some(Value::Array(ts)) => {
                for t in ts.iter().filter_map(Value::as_str) {
                    if t == "null" {
                        s.nullable = true;
                    } else if s.ty.is_none() {
                        s.ty = Type::parse(t);
                    }
                }
            }
            _ => {}
        }
        s.format = str_field(obj, "format");
        s.description = str_field(obj, "description");
        if let Some(Value::Object(props)) = obj.get("properties") {
            let mut entries = Vec::with_capacity(props.len());
            for (k, v) in props {
                entries.push((Box::<str>::from(k.as_str()), self.child(v)?));
            }
            s.properties = Properties::new(entries);
        }
        s.required = strs(obj.get("required"));
        if let Some(items) = obj.get("items") {
            s.items = match items {
                // Tuple form: the first schema stands for all (structural schemas forbid it).
                Value::Array(list) => match list.first() {
                    Some(first) => Some(self.child(first)?),
                    None => None,
                },
                other => Some(self.child(other)?),
            };
        }
        s.additional_properties = match obj.get("additionalProperties") {
            None => AdditionalProperties::Unspecified,
            Some(Value::Bool(true)) => AdditionalProperties::Any,
            Some(Value::Bool(false)) => AdditionalProperties::Forbidden,
            Some(other) => AdditionalProperties::Schema(self.child(other)?),
        };
        if let Some(Value::Array(e)) = obj.get("enum") {
            s.enum_values = e.clone();
        }
        s.default = obj.get("default").cloned();
        s.nullable |= flag(obj, "nullable");
        s.int_or_string = flag(obj, "x-kubernetes-int-or-string");
        s.preserve_unknown_fields = flag(obj, "x-kubernetes-preserve-unknown-fields");
        s.embedded_resource = flag(obj, "x-kubernetes-embedded-resource");
        s.list_type = str_field(obj, "x-kubernetes-list-type");
        s.list_map_keys = strs(obj.get("x-kubernetes-list-map-keys"));
        s.map_type = str_field(obj, "x-kubernetes-map-type");
        s.all_of = self.children(obj.get("allOf"))?;
        s.one_of = self.children(obj.get("oneOf"))?;
        s.any_of = self.children(obj.get("anyOf"))?;
        s.not = match obj.get("not") {
            Some(n) => Some(self.child(n)?),
            None => None,
        };
        let v = Validation {
            maximum: num(obj, "maximum"),
            exclusive_maximum: flag(obj, "exclusiveMaximum"),
            minimum: num(obj, "minimum"),
            exclusive_minimum: flag(obj, "exclusiveMinimum"),
            multiple_of: num(obj, "multipleOf"),
            max_length: uint(obj, "maxLength"),
            min_length: uint(obj, "minLength"),
            pattern: obj.get("pattern").and_then(Value::as_str).map(String::from),
            max_items: uint(obj, "maxItems"),
            min_items: uint(obj, "minItems"),
            unique_items: flag(obj, "uniqueItems"),
            max_properties: uint(obj, "maxProperties"),
            min_properties: uint(obj, "minProperties"),
            rules: match obj.get("x-kubernetes-validations") {
                Some(Value::Array(r)) => r.clone(),
                _ => Vec::new(),
            },
        };
        if !v.is_empty() {
            s.validation = Some(Box::new(v));
        }
        if self.builtin
            && matches!(s.ty, None | Some(Type::Object))
            && s.properties.is_empty()
            && s.additional_properties == AdditionalProperties::Unspecified
            && s.items.is_none()
            && s.one_of.is_empty()
            && s.any_of.is_empty()
            && s.all_of.is_empty()
            && !s.int_or_string
        {
            // Opaque built-in payloads (RawExtension, FieldsV1, JSON, Patch) take any JSON.
            s.ty = None;
            s.preserve_unknown_fields = true;
        }
        Ok(s)
    }
}

fn str_field(obj: &Map<String, Value>, key: &str) -> Option<Box<str>> {
    obj.get(key).and_then(Value::as_str).map(Box::from)
}

fn strs(v: Option<&Value>) -> Vec<Box<str>> {
    match v {
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).map(Box::from).collect(),
        _ => Vec::new(),
    }
}

fn flag(obj: &Map<String, Value>, key: &str) -> bool {
    obj.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn num(obj: &Map<String, Value>, key: &str) -> Option<f64> {
    obj.get(key).and_then(Value::as_f64)
}

fn uint(obj: &Map<String, Value>, key: &str) -> Option<u64> {
    obj.get(key).and_then(Value::as_u64)
}

impl Schemas {
    /// Build from named definitions that refer to each other with `$ref`s ending in the
    /// definition's name (`#/definitions/X`, `#/components/schemas/X`, `#/$defs/X`).
    pub fn from_definitions<'j>(
        defs: impl IntoIterator<Item = (&'j str, &'j Value)> + Clone,
    ) -> Result<Schemas, SchemaError> {
        let mut b = Builder::new(false);
        b.definitions(defs)?;
        Ok(b.finish(None))
    }

    /// Build from one self-contained structural schema (a CRD version's `openAPIV3Schema`);
    /// its root is [`Schemas::root`].
    pub fn from_json_schema(root: &Value) -> Result<Schemas, SchemaError> {
        let mut b = Builder::new(false);
        let id = b.tree(root)?;
        Ok(b.finish(Some(id)))
    }
}
