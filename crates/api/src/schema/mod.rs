//! A compact structural schema model, and the two checks the API server runs on every write:
//! pruning unknown fields (`fieldValidation`) and finding type mismatches (the decoding errors
//! Kubernetes reports when a body does not fit the Go types).
//!
//! [`Schemas`] is an arena of [`Schema`] nodes. Nodes refer to each other by [`SchemaId`], so
//! recursive types (JSONSchemaProps) are plain cycles in the arena and cost nothing to walk.
//! [`Schemas::builtin`] holds every built-in kind, built once from the k8s-openapi crate's
//! schemas; [`Schemas::from_json_schema`] builds one from a CRD-style structural schema.

mod build;
mod builtin;
mod check;
mod prune;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::Value;

pub(crate) use build::ref_name;
pub use build::SchemaError;
pub(crate) use builtin::{builtin_definitions, BuiltinDefinitions};
pub use check::TypeError;

/// The index of a node in a [`Schemas`] arena.
pub type SchemaId = u32;

/// The definition name of `metav1.ObjectMeta`.
pub const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// JSON Schema's primitive types, as OpenAPI uses them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Type {
    String,
    Integer,
    Number,
    Boolean,
    Object,
    Array,
}

impl Type {
    pub fn parse(s: &str) -> Option<Type> {
        Some(match s {
            "string" => Type::String,
            "integer" => Type::Integer,
            "number" => Type::Number,
            "boolean" => Type::Boolean,
            "object" => Type::Object,
            "array" => Type::Array,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Type::String => "string",
            Type::Integer => "integer",
            Type::Number => "number",
            Type::Boolean => "boolean",
            Type::Object => "object",
            Type::Array => "array",
        }
    }
}

/// What an object schema says about keys that are not among its `properties`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AdditionalProperties {
    /// Not given.
    #[default]
    Unspecified,
    /// `additionalProperties: true`: any value.
    Any,
    /// `additionalProperties: false`.
    Forbidden,
    /// A map whose values follow this schema.
    Schema(SchemaId),
}

/// An object schema's properties, in declaration order, with a sorted index for lookup.
#[derive(Debug, Clone, Default)]
pub struct Properties {
    entries: Vec<(Box<str>, SchemaId)>,
    sorted: Box<[u32]>,
}

impl Properties {
    pub fn new(entries: Vec<(Box<str>, SchemaId)>) -> Properties {
        let mut sorted: Vec<u32> = (0..entries.len() as u32).collect();
        sorted.sort_by(|a, b| entries[*a as usize].0.cmp(&entries[*b as usize].0));
        Properties {
            entries,
            sorted: sorted.into_boxed_slice(),
        }
    }

    pub fn get(&self, name: &str) -> Option<SchemaId> {
        if self.entries.len() <= 8 {
            return self
                .entries
                .iter()
                .find(|(k, _)| &**k == name)
                .map(|(_, id)| *id);
        }
        self.sorted
            .binary_search_by(|i| (*self.entries[*i as usize].0).cmp(name))
            .ok()
            .map(|i| self.entries[self.sorted[i] as usize].1)
    }

    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, SchemaId)> {
        self.entries.iter().map(|(k, id)| (&**k, *id))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// The value constraints CRD validation uses (none are set on built-in schemas).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Validation {
    pub maximum: Option<f64>,
    pub exclusive_maximum: bool,
    pub minimum: Option<f64>,
    pub exclusive_minimum: bool,
    pub multiple_of: Option<f64>,
    pub max_length: Option<u64>,
    pub min_length: Option<u64>,
    pub pattern: Option<String>,
    pub max_items: Option<u64>,
    pub min_items: Option<u64>,
    pub unique_items: bool,
    pub max_properties: Option<u64>,
    pub min_properties: Option<u64>,
    /// `x-kubernetes-validations` rules, as given.
    pub rules: Vec<Value>,
}

impl Validation {
    pub fn is_empty(&self) -> bool {
        *self == Validation::default()
    }
}

/// Built-in types whose Go decoding is custom, which the type check follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Special {
    #[default]
    None,
    Quantity,
    IntOrString,
}

/// One schema node.
#[derive(Debug, Clone, Default)]
pub struct Schema {
    /// The definition name ("io.k8s.api.core.v1.Pod") when this node is a named definition.
    pub name: Option<Box<str>>,
    pub ty: Option<Type>,
    pub format: Option<Box<str>>,
    pub description: Option<Box<str>>,
    pub properties: Properties,
    pub required: Vec<Box<str>>,
    pub items: Option<SchemaId>,
    pub additional_properties: AdditionalProperties,
    pub enum_values: Vec<Value>,
    pub default: Option<Value>,
    pub nullable: bool,
    pub int_or_string: bool,
    pub preserve_unknown_fields: bool,
    pub embedded_resource: bool,
    pub list_type: Option<Box<str>>,
    pub list_map_keys: Vec<Box<str>>,
    pub map_type: Option<Box<str>>,
    pub all_of: Vec<SchemaId>,
    pub one_of: Vec<SchemaId>,
    pub any_of: Vec<SchemaId>,
    pub not: Option<SchemaId>,
    /// Value constraints, boxed: most nodes have none.
    pub validation: Option<Box<Validation>>,
    pub(crate) special: Special,
}

impl Schema {
    /// The Go-ish short name of a named definition: "io.k8s.api.core.v1.PodSpec" → "PodSpec".
    pub fn short_name(&self) -> Option<&str> {
        self.name
            .as_deref()
            .map(|n| n.rsplit('.').next().unwrap_or(n))
    }
}

/// One registration of a kind: (group, version, schema).
type KindEntry = (Box<str>, Box<str>, SchemaId);

/// An arena of schema nodes, with named definitions and kinds (kind → registrations).
#[derive(Debug, Default)]
pub struct Schemas {
    nodes: Vec<Schema>,
    definitions: HashMap<Box<str>, SchemaId>,
    kinds: HashMap<Box<str>, Vec<KindEntry>>,
    root: Option<SchemaId>,
}

/// A node together with the arena it lives in: cheap to copy, the handle everything walks with.
#[derive(Clone, Copy)]
pub struct SchemaRef<'a> {
    set: &'a Schemas,
    id: SchemaId,
}

impl std::fmt::Debug for SchemaRef<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SchemaRef")
            .field("id", &self.id)
            .field("name", &self.schema().name)
            .field("type", &self.schema().ty)
            .finish()
    }
}

/// Kinds every group-version accepts, all defined in meta/v1.
const META_KINDS: &[&str] = &["DeleteOptions", "Status", "WatchEvent"];

impl Schemas {
    /// The schemas of every built-in kind (and its list kind), built once on first use.
    pub fn builtin() -> &'static Schemas {
        static BUILTIN: OnceLock<Schemas> = OnceLock::new();
        BUILTIN.get_or_init(builtin::build_schemas)
    }

    /// A kind's schema. `DeleteOptions`, `Status` and `WatchEvent` are found under any group.
    pub fn for_kind(&self, group: &str, version: &str, kind: &str) -> Option<SchemaRef<'_>> {
        let entries = self.kinds.get(kind)?;
        let exact = entries
            .iter()
            .find(|(g, v, _)| &**g == group && &**v == version);
        let found = exact.or_else(|| {
            if META_KINDS.contains(&kind) {
                entries.first()
            } else {
                None
            }
        })?;
        Some(self.get(found.2))
    }

    /// A named definition, e.g. "io.k8s.api.core.v1.PodSpec".
    pub fn definition(&self, name: &str) -> Option<SchemaRef<'_>> {
        self.definitions.get(name).map(|id| self.get(*id))
    }

    /// The root of a schema built by [`Schemas::from_json_schema`].
    pub fn root(&self) -> Option<SchemaRef<'_>> {
        self.root.map(|id| self.get(id))
    }

    /// A node by id. Panics when the id is not from this arena.
    pub fn get(&self, id: SchemaId) -> SchemaRef<'_> {
        assert!(
            (id as usize) < self.nodes.len(),
            "schema id {id} out of range"
        );
        SchemaRef { set: self, id }
    }

    /// Every registered kind: (group, version, kind, schema).
    pub fn kinds(&self) -> impl Iterator<Item = (&str, &str, &str, SchemaRef<'_>)> {
        self.kinds.iter().flat_map(move |(kind, entries)| {
            entries
                .iter()
                .map(move |(g, v, id)| (&**g, &**v, &**kind, self.get(*id)))
        })
    }

    /// Register `definition` as the schema of group/version/kind.
    pub fn add_kind(
        &mut self,
        group: &str,
        version: &str,
        kind: &str,
        definition: &str,
    ) -> Result<(), SchemaError> {
        let id = *self
            .definitions
            .get(definition)
            .ok_or_else(|| SchemaError::UnknownDefinition(definition.to_string()))?;
        let entries = self.kinds.entry(kind.into()).or_default();
        entries.retain(|(g, v, _)| !(&**g == group && &**v == version));
        entries.push((group.into(), version.into(), id));
        Ok(())
    }

    /// How many nodes the arena holds.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }
}

impl<'a> SchemaRef<'a> {
    pub fn id(&self) -> SchemaId {
        self.id
    }

    /// Whether the schema is one of the built-in kinds' (not a custom resource's).
    pub fn is_builtin(&self) -> bool {
        std::ptr::eq(self.set, Schemas::builtin())
    }

    pub fn schemas(&self) -> &'a Schemas {
        self.set
    }

    pub fn schema(&self) -> &'a Schema {
        &self.set.nodes[self.id as usize]
    }

    /// The definition name, when this node is a named definition.
    pub fn name(&self) -> Option<&'a str> {
        self.schema().name.as_deref()
    }

    pub fn property(&self, name: &str) -> Option<SchemaRef<'a>> {
        self.schema()
            .properties
            .get(name)
            .map(|id| self.set.get(id))
    }

    pub fn items(&self) -> Option<SchemaRef<'a>> {
        self.schema().items.map(|id| self.set.get(id))
    }

    /// The schema of a map's values (`additionalProperties` given as a schema).
    pub fn additional_properties(&self) -> Option<SchemaRef<'a>> {
        match self.schema().additional_properties {
            AdditionalProperties::Schema(id) => Some(self.set.get(id)),
            _ => None,
        }
    }

    /// Follow a dotted field path ("spec.template.spec"), through arrays' items and maps'
    /// values where a segment is not a property.
    pub fn lookup(&self, path: &str) -> Option<SchemaRef<'a>> {
        let mut at = *self;
        for seg in path.split('.').filter(|s| !s.is_empty()) {
            loop {
                if let Some(p) = at.property(seg) {
                    at = p;
                    break;
                }
                if let Some(i) = at.items() {
                    at = i;
                    continue;
                }
                at = at.additional_properties()?;
                break;
            }
        }
        Some(at)
    }

    /// Remove every field the schema does not know, returning their paths as Kubernetes reports
    /// them for `fieldValidation=Strict` (`spec.foo`, `spec.containers[0].bogus`, map keys as
    /// `.key`). At the top level `apiVersion` and `kind` are always known and `metadata` is
    /// checked against ObjectMeta; `x-kubernetes-preserve-unknown-fields`, maps and
    /// `x-kubernetes-embedded-resource` are honoured.
    pub fn prune(&self, value: &mut Value) -> Vec<String> {
        prune::prune(*self, value)
    }

    /// Type mismatches, with messages in the shape of Kubernetes' decoding errors. `null` is
    /// accepted everywhere (Go treats it as unset); integer fields reject fractions.
    pub fn check_types(&self, value: &Value) -> Vec<TypeError> {
        check::check(*self, value)
    }
}
