//! The shape of the strategic-merge-patch table (`strategy_table`) and the lookups the engine
//! makes in it, with the errors Kubernetes' reflection-based lookups give.

use super::strategy_table::{Ty, BY_NAME, KINDS, TYPES};

/// A struct type: its OpenAPI name and the fields whose values are objects or arrays, sorted by
/// name. Primitive fields are not listed.
#[derive(Debug)]
pub struct TypeDef {
    pub name: &'static str,
    pub fields: &'static [(&'static str, Field)],
}

/// What a listed field holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// A nested struct (merged recursively unless the strategy is `Replace`).
    Obj(Ty, Strategy),
    /// A `map[string]X` (labels, annotations, resource lists...): merged key by key.
    Map,
    /// A list of items, merged or replaced per the strategy.
    List(Elem, Strategy),
}

/// A list's item type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    Obj(Ty),
    /// A primitive, with its Go kind (for messages).
    Prim(&'static str),
    /// A list of lists (no served kind has one today).
    #[allow(dead_code)]
    List,
}

/// `x-kubernetes-patch-strategy` and `x-kubernetes-patch-merge-key`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strategy {
    /// No strategy: objects merge, lists are replaced whole.
    None,
    /// `merge`, with the merge key ("" for lists of primitives, merged as sets).
    Merge(&'static str),
    /// `merge,retainKeys`.
    MergeRetainKeys(&'static str),
    /// `replace`: the value is replaced whole.
    Replace,
    /// `retainKeys` (the client sends `$retainKeys`; applying needs nothing more).
    RetainKeys,
}

impl Strategy {
    /// The strategy that applying acts on ("merge", "replace" or ""), as Kubernetes' patch
    /// engine sees it once `retainKeys` is set aside, and the merge key.
    pub fn apply_strategy(self) -> (&'static str, &'static str) {
        match self {
            Strategy::Merge(k) | Strategy::MergeRetainKeys(k) => ("merge", k),
            Strategy::Replace => ("replace", ""),
            Strategy::None | Strategy::RetainKeys => ("", ""),
        }
    }

    /// The `x-kubernetes-patch-strategy` value ("" for none).
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::None => "",
            Strategy::Merge(_) => "merge",
            Strategy::MergeRetainKeys(_) => "merge,retainKeys",
            Strategy::Replace => "replace",
            Strategy::RetainKeys => "retainKeys",
        }
    }

    /// The `x-kubernetes-patch-merge-key` value, if any.
    pub fn merge_key(self) -> Option<&'static str> {
        match self {
            Strategy::Merge(k) | Strategy::MergeRetainKeys(k) if !k.is_empty() => Some(k),
            _ => None,
        }
    }
}

/// What the engine knows about the value it is merging (Go's reflect type of it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Schema {
    Struct(Ty),
    Map,
    Prim(&'static str),
    /// A list (reached only through unusual documents).
    List,
}

impl Schema {
    /// Go's `reflect.Kind` name of the type.
    pub(crate) fn kind_name(self) -> &'static str {
        match self {
            Schema::Struct(_) => "struct",
            Schema::Map => "map",
            Schema::Prim(k) => k,
            Schema::List => "slice",
        }
    }

    fn from_elem(e: Elem) -> Schema {
        match e {
            Elem::Obj(t) => Schema::Struct(t),
            Elem::Prim(k) => Schema::Prim(k),
            Elem::List => Schema::List,
        }
    }
}

pub(crate) fn type_def(t: Ty) -> &'static TypeDef {
    &TYPES[t as usize]
}

/// The Go type name (`PodSpec`) of a table type.
pub(crate) fn go_name(t: Ty) -> &'static str {
    let name = type_def(t).name;
    name.rsplit('.').next().unwrap_or(name)
}

pub(crate) fn by_name(name: &str) -> Option<Ty> {
    BY_NAME
        .binary_search_by(|(n, _)| (*n).cmp(name))
        .ok()
        .map(|i| BY_NAME[i].1)
}

fn field(t: Ty, name: &str) -> Option<Field> {
    let fields = type_def(t).fields;
    fields
        .binary_search_by(|(n, _)| (*n).cmp(name))
        .ok()
        .map(|i| fields[i].1)
}

fn not_a_struct(schema: Schema) -> String {
    format!(
        "merging an object in json but data type is not struct, instead is: {}",
        schema.kind_name()
    )
}

fn unknown_field(t: Ty, key: &str) -> String {
    format!(
        "unable to find api field in struct {} for the json field {}",
        go_name(t),
        crate::selector::validation::go_quote(key)
    )
}

/// The schema and strategy of member `key` when both the object and the patch hold objects
/// there (Kubernetes' `LookupPatchMetadataForStruct`).
pub(crate) fn lookup_struct(schema: Schema, key: &str) -> Result<(Schema, Strategy), String> {
    let Schema::Struct(t) = schema else {
        return Err(not_a_struct(schema));
    };
    match field(t, key) {
        Some(Field::Obj(t, s)) => Ok((Schema::Struct(t), s)),
        Some(Field::Map) => Ok((Schema::Map, Strategy::None)),
        Some(Field::List(_, s)) => Ok((Schema::List, s)),
        None => Err(unknown_field(t, key)),
    }
}

/// The item schema and strategy of member `key` when both hold lists (Kubernetes'
/// `LookupPatchMetadataForSlice`).
pub(crate) fn lookup_slice(schema: Schema, key: &str) -> Result<(Schema, Strategy), String> {
    let Schema::Struct(t) = schema else {
        return Err(not_a_struct(schema));
    };
    match field(t, key) {
        Some(Field::List(Elem::List, _)) => Err("unexpected slice of slice".to_string()),
        Some(Field::List(e, s)) => Ok((Schema::from_elem(e), s)),
        Some(_) => Err("expected slice or array type, but got: struct".to_string()),
        None => Err(unknown_field(t, key)),
    }
}

/// The OpenAPI schema name of a served kind (`("apps", "v1", "Deployment")` →
/// `io.k8s.api.apps.v1.Deployment`).
pub fn schema_name(group: &str, version: &str, kind: &str) -> Option<&'static str> {
    KINDS
        .iter()
        .find(|(g, v, k, _)| *g == group && *v == version && *k == kind)
        .map(|(_, _, _, t)| type_def(*t).name)
}

/// The OpenAPI schema name of a kind at its group's preferred (first listed) version.
pub fn schema_name_for_group_kind(group: &str, kind: &str) -> Option<&'static str> {
    KINDS
        .iter()
        .find(|(g, _, k, _)| *g == group && *k == kind)
        .map(|(_, _, _, t)| type_def(*t).name)
}

/// The patch strategy of `field` in schema type `type_name` (e.g.
/// `("io.k8s.api.core.v1.PodSpec", "containers")` → `Merge("name")`), for fields whose values
/// are objects or lists; `None` for unknown types and primitive or unknown fields.
pub fn field_strategy(type_name: &str, field_name: &str) -> Option<Strategy> {
    match field(by_name(type_name)?, field_name)? {
        Field::Obj(_, s) | Field::List(_, s) => Some(s),
        Field::Map => Some(Strategy::None),
    }
}

/// The schema type name a field's values (or list items) have, when they are structs.
pub fn field_type(type_name: &str, field_name: &str) -> Option<&'static str> {
    match field(by_name(type_name)?, field_name)? {
        Field::Obj(t, _) | Field::List(Elem::Obj(t), _) => Some(type_def(t).name),
        _ => None,
    }
}
