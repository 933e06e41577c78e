//! The structural-schema algorithms apiextensions-apiserver runs on custom resources, walking
//! a schema's main chain (properties, additionalProperties, items; never `allOf` & co.):
//! pruning unknown fields, dropping nulls the schema does not allow, applying defaults, and the
//! uniqueness of `x-kubernetes-list-type` `set` and `map` lists.

use std::collections::HashMap;

use serde_json::{Map, Value};

use super::gofmt::shown;
use crate::field::FieldError;
use crate::schema::{AdditionalProperties, SchemaId, SchemaRef};
use crate::validation::{child, idx, key};

/// Keys a resource (the root, or an embedded resource) always knows.
const META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

fn is_meta(k: &str) -> bool {
    META_FIELDS.contains(&k)
}

/// The schema of a key that is not a property: `Some(Some(s))` for a map's value schema,
/// `Some(None)` for `additionalProperties: true|false` (values are pruned as unknown),
/// `None` when unspecified.
fn additional(s: SchemaRef<'_>) -> Option<Option<SchemaRef<'_>>> {
    match s.schema().additional_properties {
        AdditionalProperties::Unspecified => None,
        AdditionalProperties::Any | AdditionalProperties::Forbidden => Some(None),
        AdditionalProperties::Schema(id) => Some(Some(s.schemas().get(id))),
    }
}

/// Structural pruning (`pruning.PruneWithOptions`), recording the unknown fields' paths in
/// Kubernetes' strict-decoding form (`spec.foo`, `spec.items[0].bar`).
pub(crate) struct Pruner {
    path: String,
    pub unknown: Vec<String>,
}

impl Pruner {
    pub(crate) fn new() -> Pruner {
        Pruner {
            path: String::new(),
            unknown: Vec::new(),
        }
    }

    fn push_key(&mut self, k: &str) {
        if !self.path.is_empty() {
            self.path.push('.');
        }
        self.path.push_str(k);
    }

    fn push_index(&mut self, i: usize) {
        use std::fmt::Write;
        let _ = write!(self.path, "[{i}]");
    }

    fn record(&mut self, k: &str) {
        let len = self.path.len();
        self.push_key(k);
        self.unknown.push(self.path.clone());
        self.path.truncate(len);
    }

    /// Prune `x` as a resource root (apiVersion, kind and metadata are left alone).
    pub(crate) fn prune_resource(&mut self, x: &mut Value, s: Option<SchemaRef<'_>>) {
        self.prune(x, s, true);
        self.unknown.sort();
    }

    /// Prune `x` as a plain value (not a resource root).
    pub(crate) fn prune_value(&mut self, x: &mut Value, s: Option<SchemaRef<'_>>) {
        self.prune(x, s, false);
        self.unknown.sort();
    }

    /// Prune `x` (a value at the current path) with `s`; `resource` marks a resource root.
    fn prune(&mut self, x: &mut Value, s: Option<SchemaRef<'_>>, resource: bool) {
        if let Some(s) = s.filter(|s| s.schema().preserve_unknown_fields) {
            self.skip_prune(x, Some(s), resource);
            return;
        }
        let len = self.path.len();
        match x {
            Value::Object(map) => {
                let Some(s) = s else {
                    if !resource {
                        let keys: Vec<String> = map.keys().cloned().collect();
                        for k in keys {
                            self.record(&k);
                        }
                        map.clear();
                        return;
                    }
                    // A resource root without schema keeps only its meta fields.
                    let keys: Vec<String> = map.keys().filter(|k| !is_meta(k)).cloned().collect();
                    for k in keys {
                        self.record(&k);
                        map.remove(&k);
                    }
                    return;
                };
                let embedded = resource || s.schema().embedded_resource;
                let keys: Vec<String> = map.keys().cloned().collect();
                for k in keys {
                    if embedded && is_meta(&k) {
                        continue;
                    }
                    let child_schema = match s.property(&k) {
                        Some(p) => Some(Some(p)),
                        None => additional(s),
                    };
                    match child_schema {
                        Some(cs) => {
                            self.push_key(&k);
                            if let Some(v) = map.get_mut(&k) {
                                self.prune(v, cs, false);
                            }
                            self.path.truncate(len);
                        }
                        None => {
                            if !is_meta(&k) || !self.path.is_empty() {
                                self.record(&k);
                            }
                            map.remove(&k);
                        }
                    }
                }
            }
            Value::Array(items) => {
                let item_schema = s.and_then(|s| s.items());
                for (i, item) in items.iter_mut().enumerate() {
                    self.push_index(i);
                    self.prune(item, item_schema, false);
                    self.path.truncate(len);
                }
            }
            _ => {}
        }
    }

    /// Below `x-kubernetes-preserve-unknown-fields`: unknown keys stay, known ones are pruned.
    fn skip_prune(&mut self, x: &mut Value, s: Option<SchemaRef<'_>>, resource: bool) {
        let Some(s) = s else { return };
        let len = self.path.len();
        match x {
            Value::Object(map) => {
                let embedded = resource || s.schema().embedded_resource;
                for (k, v) in map.iter_mut() {
                    if embedded && is_meta(k) {
                        continue;
                    }
                    let child_schema = match s.property(k) {
                        Some(p) => Some(Some(p)),
                        None => additional(s),
                    };
                    if let Some(cs) = child_schema {
                        self.push_key(k);
                        self.prune(v, cs, false);
                        self.path.truncate(len);
                    }
                }
            }
            Value::Array(items) => {
                for (i, item) in items.iter_mut().enumerate() {
                    self.push_index(i);
                    self.skip_prune(item, s.items(), false);
                    self.path.truncate(len);
                }
            }
            _ => {}
        }
    }
}

/// The (pruned) default of each schema node that has one.
pub(crate) type Defaults = HashMap<SchemaId, Value>;

fn non_nullable_null(x: &Value, s: Option<SchemaRef<'_>>) -> bool {
    x.is_null() && s.is_some_and(|s| !s.schema().nullable)
}

/// `PruneNonNullableNullsWithoutDefaults`: nulls the schema does not allow and cannot default
/// are removed from objects.
pub(crate) fn prune_nulls(x: &mut Value, s: Option<SchemaRef<'_>>, defaults: &Defaults) {
    match x {
        Value::Object(map) => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                let schema = s.and_then(|s| s.property(&k).or_else(|| s.additional_properties()));
                let drop = map.get(&k).is_some_and(|v| {
                    non_nullable_null(v, schema)
                        && schema.is_some_and(|sc| !defaults.contains_key(&sc.id()))
                });
                if drop {
                    map.remove(&k);
                } else if let Some(v) = map.get_mut(&k) {
                    prune_nulls(v, schema, defaults);
                }
            }
        }
        Value::Array(items) => {
            let schema = s.and_then(|s| s.items());
            for item in items {
                prune_nulls(item, schema, defaults);
            }
        }
        _ => {}
    }
}

/// Structural defaulting (`defaulting.Default`): missing properties (and non-nullable nulls)
/// get their schema's default; defaults are applied inside defaulted values too.
pub(crate) fn apply_defaults(x: &mut Value, s: Option<SchemaRef<'_>>, defaults: &Defaults) {
    let Some(s) = s else { return };
    match x {
        Value::Object(map) => {
            for (k, id) in s.schema().properties.iter() {
                let Some(d) = defaults.get(&id) else { continue };
                let prop = s.schemas().get(id);
                let missing = match map.get(k) {
                    None => true,
                    Some(v) => non_nullable_null(v, Some(prop)),
                };
                if missing {
                    map.insert(k.to_string(), d.clone());
                }
            }
            for (k, v) in map.iter_mut() {
                if let Some(prop) = s.property(k) {
                    apply_defaults(v, Some(prop), defaults);
                } else if let Some(addl) = additional(s) {
                    if non_nullable_null(v, addl) {
                        if let Some(d) = addl.and_then(|a| defaults.get(&a.id())) {
                            *v = d.clone();
                        }
                    }
                    apply_defaults(v, addl, defaults);
                }
            }
        }
        Value::Array(items) => {
            let item_schema = s.items();
            for item in items {
                if non_nullable_null(item, item_schema) {
                    if let Some(d) = item_schema.and_then(|i| defaults.get(&i.id())) {
                        *item = d.clone();
                    }
                }
                apply_defaults(item, item_schema, defaults);
            }
        }
        _ => {}
    }
}

/// `ValidateListSetsAndMaps`: duplicate items of `set` lists and duplicate keys of `map`
/// lists, anywhere under the object `obj` at `path` ("" for the root).
pub(crate) fn validate_list_sets_and_maps(
    path: &str,
    s: SchemaRef<'_>,
    obj: &Map<String, Value>,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if let Some(addl) = s.additional_properties() {
        for (k, v) in obj {
            list_value(&mut errs, &key(path, k), addl, v);
        }
    }
    if !s.schema().properties.is_empty() {
        for (k, v) in obj {
            if let Some(p) = s.property(k) {
                list_value(&mut errs, &child(path, k), p, v);
            }
        }
    }
    errs
}

fn list_value(errs: &mut Vec<FieldError>, path: &str, s: SchemaRef<'_>, v: &Value) {
    match v {
        Value::Array(items) => list_array(errs, path, s, items),
        Value::Object(map) => errs.extend(validate_list_sets_and_maps(path, s, map)),
        _ => {}
    }
}

fn list_array(errs: &mut Vec<FieldError>, path: &str, s: SchemaRef<'_>, items: &[Value]) {
    match s.schema().list_type.as_deref() {
        Some("set") => {
            for i in non_unique(items.iter().map(identity_key)) {
                errs.push(FieldError::duplicate_shown(idx(path, i), &shown(&items[i])));
            }
        }
        Some("map") => list_map(errs, path, s, items),
        _ => {}
    }
    if let Some(item_schema) = s.items() {
        for (i, item) in items.iter().enumerate() {
            list_value(errs, &idx(path, i), item_schema, item);
        }
    }
}

/// A hashable identity of a JSON value (`1` and `1.0` differ, as Go's int64 and float64 do).
fn identity_key(v: &Value) -> String {
    v.to_string()
}

/// The index of the second occurrence of each repeated key, in order.
fn non_unique(keys: impl Iterator<Item = String>) -> Vec<usize> {
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out = Vec::new();
    for (i, k) in keys.enumerate() {
        let times = seen.entry(k).or_insert(0);
        *times += 1;
        if *times == 2 {
            out.push(i);
        }
    }
    out
}

/// The marker of an item without a value for its (single) key.
const UNSPECIFIED: &str = "\u{0}unspecified";

fn list_map(errs: &mut Vec<FieldError>, path: &str, s: SchemaRef<'_>, items: &[Value]) {
    if let Some((i, x)) = items
        .iter()
        .enumerate()
        .find(|(_, x)| !x.is_null() && !x.is_object())
    {
        errs.push(FieldError::invalid_shown(
            idx(path, i),
            &shown(x),
            "must be an object for an array of list-type map",
        ));
        return;
    }
    if items.len() <= 1 {
        return;
    }
    let key_fields = &s.schema().list_map_keys;
    if key_fields.len() == 1 {
        let field = &*key_fields[0];
        let keys: Vec<Option<&Value>> = items
            .iter()
            .map(|x| x.as_object().and_then(|m| m.get(field)))
            .collect();
        let ids = keys
            .iter()
            .map(|k| k.map_or(UNSPECIFIED.to_string(), identity_key));
        for i in non_unique(ids) {
            let mut shown_key = Map::new();
            if let Some(k) = keys[i] {
                shown_key.insert(field.to_string(), k.clone());
            }
            errs.push(FieldError::duplicate_shown(
                idx(path, i),
                &shown(&Value::Object(shown_key)),
            ));
        }
        return;
    }
    let keys: Vec<Value> = items
        .iter()
        .map(|x| {
            let mut key_map = Map::new();
            if let Some(obj) = x.as_object() {
                for f in key_fields {
                    if let Some(v) = obj.get(&**f) {
                        key_map.insert(f.to_string(), v.clone());
                    }
                }
            }
            Value::Object(key_map)
        })
        .collect();
    for i in non_unique(keys.iter().map(identity_key)) {
        errs.push(FieldError::duplicate_shown(idx(path, i), &shown(&keys[i])));
    }
}
