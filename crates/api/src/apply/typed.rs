//! How server-side apply reads a schema: every node becomes structured-merge-diff's "atom" (a
//! scalar, a list, a map, or several of them when the schema leaves the type open), following
//! Kubernetes' OpenAPI-to-SMD conversion:
//!
//! - objects are maps, merged field by field unless `x-kubernetes-map-type: atomic`; keys not
//!   among the properties take `additionalProperties`' type, or the *deduced* type when the
//!   schema preserves unknown fields or declares no properties at all;
//! - arrays are atomic unless `x-kubernetes-list-type` is `set` (items by value) or `map` (items
//!   by their `x-kubernetes-list-map-keys`);
//! - the deduced type (no schema, preserve-unknown-fields) merges maps key by key and replaces
//!   lists whole; `RawExtension` is atomic through and through; quantities and int-or-strings
//!   are scalars;
//! - at the root of an object `apiVersion` and `kind` are strings and `metadata` is
//!   `ObjectMeta`, whatever a custom resource's schema says.

use serde_json::Value;

use super::path::PathElement;
use super::set::FieldSet;
use super::value::go_quote;
use crate::schema::{AdditionalProperties, SchemaRef, Schemas, Special, Type, OBJECT_META};

const RAW_EXTENSION: &str = "io.k8s.apimachinery.pkg.runtime.RawExtension";

/// The type of a value being walked.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Ty<'a> {
    /// A schema node; `preserve` says an enclosing inline node preserves unknown fields.
    Node {
        schema: SchemaRef<'a>,
        preserve: bool,
    },
    /// The root of an object of this schema.
    Root(SchemaRef<'a>),
    /// Anything: maps granular, lists atomic (SMD's `__untyped_deduced_`).
    Deduced,
    /// Anything, replaced whole (SMD's `__untyped_atomic_`).
    Atomic,
    /// A string (an object's `apiVersion` and `kind`).
    Str,
    /// A map key no schema declares: walks read it as deduced, validation rejects it.
    Undeclared,
}

/// The kinds of scalar a schema can ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Scalar {
    String,
    Numeric,
    Boolean,
    Untyped,
}

/// A list type.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ListTy<'a> {
    /// Items are merged by key (or by value for sets) rather than the list replaced whole.
    pub associative: bool,
    pub keys: &'a [Box<str>],
    pub elem: Ty<'a>,
}

/// Where a map type finds its declared fields.
#[derive(Clone, Copy, Debug)]
enum Fields<'a> {
    None,
    Node(SchemaRef<'a>, bool),
    Root(SchemaRef<'a>),
}

/// A map (or struct) type.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MapTy<'a> {
    /// Replaced whole rather than merged key by key.
    pub atomic: bool,
    fields: Fields<'a>,
    /// The type of keys that are not declared fields ([`Ty::Undeclared`] when there are none).
    elem: Ty<'a>,
}

/// What a node may be; several parts when the schema leaves the type open, and the value
/// decides (see [`deduce`]).
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Atom<'a> {
    pub scalar: Option<Scalar>,
    pub list: Option<ListTy<'a>>,
    pub map: Option<MapTy<'a>>,
}

impl Atom<'_> {
    /// Whether two atoms of one type kept the same parts (SMD compares resolved atoms).
    pub fn same_shape(&self, other: &Atom<'_>) -> bool {
        self.scalar == other.scalar
            && self.list.is_some() == other.list.is_some()
            && self.map.is_some() == other.map.is_some()
    }
}

/// The type of a node of `schema`, reached from a parent whose inline descendants preserve
/// unknown fields when `preserve`; named definitions start afresh, as Kubernetes converts
/// each definition on its own.
pub(crate) fn child_ty(schema: SchemaRef<'_>, preserve: bool) -> Ty<'_> {
    Ty::Node {
        schema,
        preserve: preserve && schema.name().is_none(),
    }
}

/// The type an object of `schema` has: the schema's root, or deduced without a schema.
pub(crate) fn root_ty(schema: Option<SchemaRef<'_>>) -> Ty<'_> {
    match schema {
        Some(s) => Ty::Root(s),
        None => Ty::Deduced,
    }
}

fn deduced<'a>() -> Atom<'a> {
    Atom {
        scalar: Some(Scalar::Untyped),
        list: Some(ListTy {
            associative: false,
            keys: &[],
            elem: Ty::Atomic,
        }),
        map: Some(MapTy {
            atomic: false,
            fields: Fields::None,
            elem: Ty::Deduced,
        }),
    }
}

fn atomic<'a>() -> Atom<'a> {
    Atom {
        scalar: Some(Scalar::Untyped),
        list: Some(ListTy {
            associative: false,
            keys: &[],
            elem: Ty::Atomic,
        }),
        map: Some(MapTy {
            atomic: true,
            fields: Fields::None,
            elem: Ty::Atomic,
        }),
    }
}

/// The atom of a type, before the value picks a part.
pub(crate) fn resolve(ty: Ty<'_>) -> Atom<'_> {
    match ty {
        Ty::Deduced | Ty::Undeclared => deduced(),
        Ty::Atomic => atomic(),
        Ty::Str => Atom {
            scalar: Some(Scalar::String),
            ..Atom::default()
        },
        Ty::Node { schema, preserve } => node_atom(schema, preserve),
        Ty::Root(schema) => {
            let preserve = schema.schema().preserve_unknown_fields;
            let mut map = map_ty(schema, preserve);
            map.fields = Fields::Root(schema);
            Atom {
                map: Some(map),
                ..Atom::default()
            }
        }
    }
}

fn node_atom(s: SchemaRef<'_>, inherited: bool) -> Atom<'_> {
    let n = s.schema();
    if n.ty.is_none()
        && n.properties.is_empty()
        && n.items.is_none()
        && n.additional_properties == AdditionalProperties::Unspecified
        && n.all_of.len() == 1
    {
        // A `$ref` wrapped in a single `allOf`, as OpenAPI v3 documents write them.
        return node_atom(s.schemas().get(n.all_of[0]), inherited);
    }
    if n.name.as_deref() == Some(RAW_EXTENSION) {
        return atomic();
    }
    if n.int_or_string || matches!(n.special, Special::Quantity | Special::IntOrString) {
        return Atom {
            scalar: Some(Scalar::Untyped),
            ..Atom::default()
        };
    }
    let preserve = inherited || n.preserve_unknown_fields;
    let scalar = |k| Atom {
        scalar: Some(k),
        ..Atom::default()
    };
    match n.ty {
        Some(Type::String) => match n.format.as_deref() {
            None | Some("") | Some("byte") => scalar(Scalar::String),
            Some(_) => scalar(Scalar::Untyped),
        },
        Some(Type::Integer) | Some(Type::Number) => scalar(Scalar::Numeric),
        Some(Type::Boolean) => scalar(Scalar::Boolean),
        Some(Type::Object) => Atom {
            map: Some(map_ty(s, preserve)),
            ..Atom::default()
        },
        Some(Type::Array) => Atom {
            list: Some(list_ty(s, preserve)),
            ..Atom::default()
        },
        None => Atom {
            scalar: Some(Scalar::Untyped),
            list: Some(list_ty(s, preserve)),
            map: Some(map_ty(s, preserve)),
        },
    }
}

fn map_ty(s: SchemaRef<'_>, preserve: bool) -> MapTy<'_> {
    let n = s.schema();
    let elem = match n.additional_properties {
        AdditionalProperties::Schema(id) => child_ty(s.schemas().get(id), preserve),
        AdditionalProperties::Any => Ty::Deduced,
        AdditionalProperties::Forbidden => Ty::Undeclared,
        AdditionalProperties::Unspecified => {
            if preserve || n.properties.is_empty() {
                Ty::Deduced
            } else {
                Ty::Undeclared
            }
        }
    };
    MapTy {
        atomic: n.map_type.as_deref() == Some("atomic"),
        fields: Fields::Node(s, preserve),
        elem,
    }
}

fn list_ty(s: SchemaRef<'_>, preserve: bool) -> ListTy<'_> {
    let n = s.schema();
    let (associative, keys): (bool, &[Box<str>]) = match n.list_type.as_deref() {
        Some("set") => (true, &[]),
        Some("map") => (true, &n.list_map_keys),
        _ => (false, &[]),
    };
    ListTy {
        associative,
        keys,
        elem: match s.items() {
            Some(items) => child_ty(items, preserve),
            None => Ty::Atomic,
        },
    }
}

fn object_meta() -> Ty<'static> {
    match Schemas::builtin().definition(OBJECT_META) {
        Some(schema) => Ty::Node {
            schema,
            preserve: false,
        },
        None => Ty::Deduced,
    }
}

impl<'a> MapTy<'a> {
    /// The type of a declared field.
    pub fn field(&self, name: &str) -> Option<Ty<'a>> {
        match self.fields {
            Fields::None => None,
            Fields::Node(s, preserve) => s.property(name).map(|p| child_ty(p, preserve)),
            Fields::Root(s) => match name {
                "apiVersion" | "kind" => Some(Ty::Str),
                "metadata" => Some(object_meta()),
                _ => {
                    let preserve = s.schema().preserve_unknown_fields;
                    s.property(name).map(|p| child_ty(p, preserve))
                }
            },
        }
    }

    /// The type under `name` and whether it is a declared field (one property lookup).
    pub fn lookup(&self, name: &str) -> (Ty<'a>, bool) {
        match self.field(name) {
            Some(t) => (t, true),
            None => (self.elem, false),
        }
    }

    /// Whether `name` is a declared field (rather than a map key).
    pub fn declares(&self, name: &str) -> bool {
        self.field(name).is_some()
    }

    /// The type of the value under `name`: the field's, else the map's element type.
    pub fn child(&self, name: &str) -> Ty<'a> {
        self.field(name).unwrap_or(self.elem)
    }

    /// A map with no declared fields whose values are deduced (SMD's untyped deduced map).
    pub fn is_untyped_deduced(&self) -> bool {
        let no_fields = match self.fields {
            Fields::None => true,
            Fields::Node(s, _) => s.schema().properties.is_empty(),
            Fields::Root(_) => false,
        };
        no_fields && matches!(self.elem, Ty::Deduced)
    }

    /// Whether keys that are not declared fields are allowed.
    pub fn allows_undeclared(&self) -> bool {
        !matches!(self.elem, Ty::Undeclared)
    }
}

/// Narrow an atom to the part the value has (SMD's `deduceAtom`); absent and null values
/// keep every part.
pub(crate) fn deduce<'a>(atom: Atom<'a>, v: Option<&Value>) -> Atom<'a> {
    match v {
        Some(Value::Number(_) | Value::String(_) | Value::Bool(_)) if atom.scalar.is_some() => {
            Atom {
                scalar: atom.scalar,
                ..Atom::default()
            }
        }
        Some(Value::Array(_)) if atom.list.is_some() => Atom {
            list: atom.list,
            ..Atom::default()
        },
        Some(Value::Object(_)) if atom.map.is_some() => Atom {
            map: atom.map,
            ..Atom::default()
        },
        _ => atom,
    }
}

/// The default of a list-map key field, from the item schema.
fn key_default(list: &ListTy<'_>, key: &str) -> Result<Option<Value>, String> {
    let Some(map) = resolve(list.elem).map else {
        return Err(format!(
            "couldn't find default value for {key}: associative list may not have non-map types"
        ));
    };
    Ok(match map.field(key) {
        Some(Ty::Node { schema, .. }) => schema.schema().default.clone(),
        _ => None,
    })
}

/// The path element naming an item of an associative list: its key fields (defaults filling
/// omitted ones) or, for a set, its value. Errors use SMD's words.
pub(crate) fn list_item_element(list: &ListTy<'_>, item: &Value) -> Result<PathElement, String> {
    if !list.associative {
        return Err("invalid indexing of non-associative list".into());
    }
    if list.keys.is_empty() {
        return match item {
            Value::Object(_) => {
                Err("associative list without keys has an element that's a map type".into())
            }
            Value::Array(_) => Err("not supported: associative list with lists as elements".into()),
            Value::Null => {
                Err("associative list without keys has an element that's an explicit null".into())
            }
            v => Ok(PathElement::Value(v.clone())),
        };
    }
    let obj = match item {
        Value::Object(o) => o,
        Value::Null => return Err("associative list with keys may not have a null element".into()),
        _ => return Err("associative list with keys may not have non-map elements".into()),
    };
    let mut fields = Vec::with_capacity(list.keys.len());
    for key in list.keys {
        let key: &str = key;
        if let Some(v) = obj.get(key) {
            fields.push((key.to_string(), v.clone()));
        } else if let Some(d) = key_default(list, key)? {
            fields.push((key.to_string(), d));
        } else {
            return Err(format!(
                "associative list with keys has an element that omits key field {} (and doesn't have default value)",
                go_quote(key)
            ));
        }
    }
    Ok(PathElement::key(fields))
}

/// Add to the members every declared struct field the set has paths below (SMD's
/// `EnsureNamedFieldsAreMembers`), so removing the set removes such fields whole.
pub(crate) fn ensure_named_fields_are_members(set: &FieldSet, ty: Option<Ty<'_>>) -> FieldSet {
    let atom = ty.map(resolve).unwrap_or_default();
    let mut members = set.members().to_vec();
    let mut children = Vec::with_capacity(set.children().len());
    for (pe, child) in set.children() {
        let child_ty = match (pe, &atom.map, &atom.list) {
            (PathElement::Field(name), Some(m), _) => {
                if m.declares(name) {
                    if let Err(at) = members.binary_search(pe) {
                        members.insert(at, pe.clone());
                    }
                }
                match m.field(name) {
                    Some(t) => Some(t),
                    None if m.allows_undeclared() => Some(m.elem),
                    None => None,
                }
            }
            (PathElement::Key(_), _, Some(l)) => Some(l.elem),
            _ => None,
        };
        children.push((pe.clone(), ensure_named_fields_are_members(child, child_ty)));
    }
    FieldSet::from_sorted(members, children)
}

/// Bring a manager's set in line with the current schema (SMD's
/// `ReconcileFieldSetWithSchema`): a map or list that became atomic since the set was recorded
/// is owned whole instead of field by field. None when nothing changes.
pub(crate) fn reconcile_with_schema(set: &FieldSet, ty: Ty<'_>) -> Option<FieldSet> {
    let mut to_remove = FieldSet::new();
    let mut to_add = FieldSet::new();
    let mut path = Vec::new();
    reconcile_at(Some(set), ty, false, &mut path, &mut to_remove, &mut to_add);
    if to_remove.is_empty() && to_add.is_empty() {
        return None;
    }
    Some(set.recursive_difference(&to_remove).union(&to_add))
}

fn reconcile_at(
    set: Option<&FieldSet>,
    ty: Ty<'_>,
    is_atomic: bool,
    path: &mut Vec<PathElement>,
    to_remove: &mut FieldSet,
    to_add: &mut FieldSet,
) {
    let atom = resolve(ty);
    let node = if let Some(m) = atom.map {
        // Maps of deduced values carry no atomic/granular tag to reconcile.
        if m.is_untyped_deduced() {
            return;
        }
        if !is_atomic && m.atomic {
            if set.is_some_and(|s| s.size() > 0) {
                to_remove.insert(path);
                to_add.insert(path);
            }
            return;
        }
        Elem::Map(m)
    } else if atom.scalar.is_some() {
        return;
    } else if let Some(l) = atom.list {
        if !is_atomic && !l.associative {
            to_remove.insert(path);
            to_add.insert(path);
            return;
        }
        Elem::List(l)
    } else {
        return;
    };
    let Some(set) = set else {
        return;
    };
    // Elements that are only prefixes first, then members (SMD's order).
    let visits: Vec<(&PathElement, bool)> = set
        .children()
        .iter()
        .map(|(pe, _)| pe)
        .filter(|pe| !set.has_member(pe))
        .map(|pe| (pe, false))
        .chain(set.members().iter().map(|pe| (pe, true)))
        .collect();
    for (pe, is_member) in visits {
        let child_ty = match (&node, pe) {
            (Elem::Map(m), PathElement::Field(name)) => m.field(name).unwrap_or(m.elem),
            (Elem::Map(m), _) => m.elem,
            (Elem::List(l), _) => l.elem,
        };
        if matches!(child_ty, Ty::Undeclared) {
            continue;
        }
        let child = set.child(pe);
        path.push(pe.clone());
        reconcile_at(
            child,
            child_ty,
            is_member && child.is_none(),
            path,
            to_remove,
            to_add,
        );
        path.pop();
    }
}

/// The container a reconciled node is.
enum Elem<'a> {
    Map(MapTy<'a>),
    List(ListTy<'a>),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod() -> Ty<'static> {
        root_ty(Schemas::builtin().for_kind("", "v1", "Pod"))
    }

    fn at<'a>(mut ty: Ty<'a>, path: &[&str]) -> Ty<'a> {
        for p in path {
            let atom = resolve(ty);
            ty = match (atom.map, atom.list) {
                (Some(m), _) => m.child(p),
                (None, Some(l)) => l.elem,
                _ => panic!("cannot descend into {p}"),
            };
        }
        ty
    }

    #[test]
    fn containers_are_keyed_and_ports_default_their_protocol() {
        let containers = resolve(at(pod(), &["spec", "containers"])).list.unwrap();
        assert!(containers.associative);
        let pe = list_item_element(&containers, &json!({"name": "nginx", "image": "x"})).unwrap();
        assert_eq!(pe.to_string(), "[name=\"nginx\"]");
        let ports = resolve(at(pod(), &["spec", "containers", "*", "ports"]))
            .list
            .unwrap();
        let pe = list_item_element(&ports, &json!({"containerPort": 80})).unwrap();
        assert_eq!(pe.to_string(), "[containerPort=80,protocol=\"TCP\"]");
        let err = list_item_element(&ports, &json!("80")).unwrap_err();
        assert_eq!(
            err,
            "associative list with keys may not have non-map elements"
        );
    }

    #[test]
    fn sets_atomic_lists_and_maps() {
        let finalizers = resolve(at(pod(), &["metadata", "finalizers"]))
            .list
            .unwrap();
        assert!(finalizers.associative && finalizers.keys.is_empty());
        assert_eq!(
            list_item_element(&finalizers, &json!("a"))
                .unwrap()
                .to_string(),
            "[=\"a\"]"
        );
        let tolerations = resolve(at(pod(), &["spec", "tolerations"])).list.unwrap();
        assert!(!tolerations.associative);
        let node_selector = resolve(at(pod(), &["spec", "nodeSelector"])).map.unwrap();
        assert!(node_selector.atomic);
        let labels = resolve(at(pod(), &["metadata", "labels"])).map.unwrap();
        assert!(!labels.atomic && !labels.declares("app") && labels.allows_undeclared());
        let spec = resolve(at(pod(), &["spec"])).map.unwrap();
        assert!(spec.declares("containers") && !spec.allows_undeclared());
    }

    #[test]
    fn custom_resources_get_object_meta_and_deduce_unknowns() {
        let schemas = Schemas::from_json_schema(&json!({
            "type": "object",
            "properties": {
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "x-kubernetes-preserve-unknown-fields": true,
                    "properties": {"inner": {"type": "object", "properties": {"a": {"type": "string"}}}}
                }
            }
        }))
        .unwrap();
        let root = root_ty(schemas.root());
        let finalizers = resolve(at(root, &["metadata", "finalizers"])).list.unwrap();
        assert!(finalizers.associative);
        // preserve-unknown-fields reaches inline descendants.
        let inner = resolve(at(root, &["spec", "inner"])).map.unwrap();
        assert!(inner.allows_undeclared());
        let root_map = resolve(root).map.unwrap();
        assert!(!root_map.allows_undeclared());
        let deduced = resolve(at(root, &["spec", "other"]));
        assert!(
            deduced.map.is_some_and(|m| !m.atomic) && deduced.list.is_some_and(|l| !l.associative)
        );
    }

    #[test]
    fn reconcile_collapses_fields_of_maps_and_lists_that_became_atomic() {
        let f = PathElement::field;
        let schemas = Schemas::from_json_schema(&json!({"type": "object", "properties": {
            "m": {"type": "object", "x-kubernetes-map-type": "atomic",
                  "properties": {"a": {"type": "string"}}},
            "l": {"type": "array", "items": {"type": "object", "properties": {"n": {"type": "string"}}}},
            "g": {"type": "object", "properties": {"a": {"type": "string"}}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
        }}))
        .unwrap();
        let ty = child_ty(schemas.root().unwrap(), false);
        let k = PathElement::key(vec![("n".into(), json!("x"))]);
        let recorded = FieldSet::from_paths([
            &[f("m"), f("a")][..],
            &[f("l"), k.clone()][..],
            &[f("l"), k, f("n")][..],
            &[f("g"), f("a")][..],
            &[f("free"), f("x"), f("y")][..],
        ]);
        let fixed = reconcile_with_schema(&recorded, ty).expect("changes");
        assert_eq!(
            fixed,
            FieldSet::from_paths([
                &[f("m")][..],
                &[f("l")][..],
                &[f("g"), f("a")][..],
                &[f("free"), f("x"), f("y")][..],
            ])
        );
        // An up-to-date set is left alone.
        assert!(reconcile_with_schema(&fixed, ty).is_none());
    }

    #[test]
    fn ensure_named_fields_adds_struct_fields_not_map_keys() {
        let f = PathElement::field;
        let set = FieldSet::from_paths([
            &[f("spec"), f("replicas")][..],
            &[f("metadata"), f("labels"), f("app")][..],
        ]);
        let ensured = ensure_named_fields_are_members(
            &set,
            Some(root_ty(Schemas::builtin().for_kind(
                "apps",
                "v1",
                "Deployment",
            ))),
        );
        assert!(ensured.has(&[f("spec")]));
        assert!(ensured.has(&[f("metadata")]));
        assert!(ensured.has(&[f("metadata"), f("labels")]));
        assert!(!ensured.has(&[f("metadata"), f("labels"), f("app"), f("x")]));
        assert_eq!(ensured.size(), 5);
    }
}
