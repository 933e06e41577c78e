//! Kubernetes' strategic merge patch for the built-in kinds, with kube-apiserver v1.32's
//! results and errors.
//!
//! Like a JSON merge patch, objects merge recursively and `null` deletes a member, but lists
//! follow the schema (`strategy_table`): lists with strategy `merge` and a merge key (e.g.
//! containers by `name`, ports by `containerPort`) merge item by item, lists of primitives with
//! strategy `merge` (finalizers) are merged as sets, and all other lists (tolerations, args...)
//! are replaced whole. Patches may carry directives:
//!
//! - `$patch: replace` (replace the map or list instead of merging), `$patch: delete` (in a
//!   map: clear it; in a list item: delete the item with that merge key);
//! - `$retainKeys: [..]` (drop members of the object not listed; patched members must be listed);
//! - `$deleteFromPrimitiveList/<field>: [..]` (remove values from a merged primitive list);
//! - `$setElementOrder/<field>: [..]` (the order of the merged list).
//!
//! Values that end up in the result are free of directives and `null` members, as they would be
//! after Kubernetes decodes the patched map into its typed object.

use serde_json::{Map, Value};

use super::gofmt::{self, GoType};
use super::schema::{by_name, lookup_slice, lookup_struct, Schema};
use super::{deeper_than, PatchError, MAX_DEPTH};

pub use super::schema::{
    field_strategy, field_type, schema_name, schema_name_for_group_kind, Strategy,
};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList";
const SET_ELEMENT_ORDER: &str = "$setElementOrder";

const ERR_BAD_PRIMITIVE_LIST: &str = "invalid patch format of primitive list";
const ERR_BAD_RETAIN_KEYS: &str = "invalid patch format of retainKeys";
const ERR_BAD_SET_ELEMENT_ORDER: &str = "invalid patch format of setElementOrder list";
const ERR_UNSUPPORTED: &str = "strategic merge patch format is not supported";
const ERR_NO_LIST_OF_LISTS: &str = "lists of lists are not supported";

type R<T> = Result<T, PatchError>;

/// Apply a strategic merge `patch` to a copy of `original`, an object of schema `kind_schema`
/// (e.g. `io.k8s.api.core.v1.Pod`; see [`schema_name`]). A `null` patch changes nothing.
pub fn apply(kind_schema: &str, original: &Value, patch: &Value) -> R<Value> {
    apply_owned(kind_schema, original.clone(), patch)
}

/// Like [`apply`], consuming `original` (no copy of the object is made).
pub fn apply_owned(kind_schema: &str, mut original: Value, patch: &Value) -> R<Value> {
    let ty = by_name(kind_schema).ok_or_else(|| PatchError::bad_request(ERR_UNSUPPORTED))?;
    let patch_map = match patch {
        Value::Null => return Ok(original),
        Value::Object(p) => p,
        other => {
            return Err(PatchError::bad_request(format!(
                "json: cannot unmarshal {} into Go value of type map[string]interface {{}}",
                json_kind(other)
            )))
        }
    };
    if deeper_than(patch, MAX_DEPTH) {
        return Err(PatchError::too_deep());
    }
    if original.is_null() {
        original = Value::Object(Map::new());
    }
    let Value::Object(orig) = &mut original else {
        return Err(PatchError::bad_request("invalid JSON document"));
    };
    merge_map(orig, patch_map, Schema::Struct(ty))?;
    Ok(original)
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

fn internal(msg: impl Into<String>) -> PatchError {
    PatchError::internal(msg)
}

fn bad_arg_type(expected: GoType, actual: &Value) -> PatchError {
    internal(format!(
        "expected a {}, but received a {}",
        expected.name(),
        GoType::of(actual).name()
    ))
}

fn no_merge_key(m: &Map<String, Value>, key: &str) -> PatchError {
    internal(format!(
        "map: {} does not contain declared merge key: {key}",
        gofmt::v_map(m)
    ))
}

fn bad_patch_type(directive: &Value, m: &Map<String, Value>) -> PatchError {
    internal(format!(
        "unknown patch type: {} in map: {}",
        gofmt::s(directive),
        gofmt::v_map(m)
    ))
}

fn is_directive_key(k: &str) -> bool {
    k.starts_with('$')
        && (k == DIRECTIVE
            || k == RETAIN_KEYS
            || k.starts_with(SET_ELEMENT_ORDER)
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST))
}

/// `prefix/rest` → `rest`; `None` when the key is not of that form.
fn extract_key<'k>(key: &'k str, prefix: &str) -> Option<&'k str> {
    let (head, rest) = key.split_once('/')?;
    (head == prefix).then_some(rest)
}

/// A patch value Kubernetes keeps as given (a replaced list or map, an appended item), as it
/// reads after decoding into the typed object: without `null` members or directive keys.
fn sanitize(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(sanitize_map(m)),
        Value::Array(a) => Value::Array(a.iter().map(sanitize).collect()),
        other => other.clone(),
    }
}

fn sanitize_map(m: &Map<String, Value>) -> Map<String, Value> {
    m.iter()
        .filter(|(k, x)| !x.is_null() && !is_directive_key(k))
        .map(|(k, x)| (k.clone(), sanitize(x)))
        .collect()
}

/// A patch value set where the object had nothing (or something of another type): Kubernetes
/// drops `null` members and any map carrying `$patch` (`None` when `v` itself is one).
fn insert_clean(v: &Value) -> Option<Value> {
    match v {
        Value::Object(m) => {
            if m.get(DIRECTIVE).is_some_and(|d| !d.is_null()) {
                return None;
            }
            Some(Value::Object(
                m.iter()
                    .filter(|(k, x)| !x.is_null() && !is_directive_key(k))
                    .filter_map(|(k, x)| insert_clean(x).map(|c| (k.clone(), c)))
                    .collect(),
            ))
        }
        Value::Array(a) => Some(Value::Array(a.iter().filter_map(insert_clean).collect())),
        other => Some(other.clone()),
    }
}

fn merge_map(orig: &mut Map<String, Value>, patch: &Map<String, Value>, schema: Schema) -> R<()> {
    if let Some(d) = patch.get(DIRECTIVE) {
        return match d.as_str() {
            Some("replace") => {
                *orig = sanitize_map(patch);
                Ok(())
            }
            Some("delete") => {
                orig.clear();
                Ok(())
            }
            _ => Err(bad_patch_type(d, patch)),
        };
    }
    apply_retain_keys(orig, patch)?;
    let ordered = merge_ordered_lists(orig, patch, schema)?;

    for (k, pv) in patch {
        if k == RETAIN_KEYS || k.starts_with(SET_ELEMENT_ORDER) || ordered.contains(&k.as_str()) {
            continue;
        }
        let (key, is_delete_list) = if k.starts_with(DELETE_FROM_PRIMITIVE_LIST) {
            let rest = extract_key(k, DELETE_FROM_PRIMITIVE_LIST)
                .ok_or_else(|| PatchError::bad_request(ERR_BAD_PRIMITIVE_LIST))?;
            (if rest.is_empty() { k.as_str() } else { rest }, true)
        } else {
            (k.as_str(), false)
        };
        if pv.is_null() {
            orig.remove(key);
            continue;
        }
        let Some(ov) = orig.get_mut(key) else {
            if !is_delete_list {
                if let Some(v) = insert_clean(pv) {
                    orig.insert(key.to_string(), v);
                }
            }
            continue;
        };
        if GoType::of(ov) != GoType::of(pv) {
            if !is_delete_list {
                match insert_clean(pv) {
                    Some(v) => *ov = v,
                    None => {
                        orig.remove(key);
                    }
                }
            }
            continue;
        }
        match (ov, pv) {
            (Value::Object(om), Value::Object(pm)) => {
                let (sub, strategy) = lookup_struct(schema, key).map_err(internal)?;
                if strategy.apply_strategy().0 == "replace" {
                    *om = sanitize_map(pm);
                } else {
                    merge_map(om, pm, sub)?;
                }
            }
            (Value::Array(oa), Value::Array(pa)) => {
                let (sub, strategy) = lookup_slice(schema, key).map_err(internal)?;
                let (strat, merge_key) = strategy.apply_strategy();
                let taken = std::mem::take(oa);
                *oa = merge_slice_handler(taken, pa, sub, strat, merge_key, is_delete_list)?;
            }
            (ov, pv) => *ov = pv.clone(),
        }
    }
    Ok(())
}

/// `$retainKeys`: drop the object's members that are not listed; every (non-null) member the
/// patch sets must be listed.
fn apply_retain_keys(orig: &mut Map<String, Value>, patch: &Map<String, Value>) -> R<()> {
    let Some(retain) = patch.get(RETAIN_KEYS) else {
        return Ok(());
    };
    let list = retain
        .as_array()
        .ok_or_else(|| PatchError::bad_request(ERR_BAD_RETAIN_KEYS))?;
    let listed = |k: &str| list.iter().any(|x| x.as_str() == Some(k));
    for (k, v) in patch {
        if k == RETAIN_KEYS
            || v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            || k.starts_with(SET_ELEMENT_ORDER)
        {
            continue;
        }
        if !listed(k) {
            return Err(PatchError::bad_request(ERR_BAD_RETAIN_KEYS));
        }
    }
    orig.retain(|k, _| listed(k));
    Ok(())
}

fn as_list(v: Option<&Value>) -> R<Option<&[Value]>> {
    match v {
        None => Ok(None),
        Some(Value::Array(a)) => Ok(Some(a)),
        Some(other) => Err(bad_arg_type(GoType::Slice, other)),
    }
}

/// Handle each `$setElementOrder/<field>`: merge that list (if the patch has it) and order the
/// result by the directive, then by the patch, then by the object. Returns the fields done.
fn merge_ordered_lists<'p>(
    orig: &mut Map<String, Value>,
    patch: &'p Map<String, Value>,
    schema: Schema,
) -> R<Vec<&'p str>> {
    let mut done = Vec::new();
    for (key, pv) in patch {
        if !key.starts_with(SET_ELEMENT_ORDER) {
            continue;
        }
        let order = pv
            .as_array()
            .ok_or_else(|| bad_arg_type(GoType::Slice, pv))?;
        let list_key = extract_key(key, SET_ELEMENT_ORDER)
            .ok_or_else(|| PatchError::bad_request(ERR_BAD_SET_ELEMENT_ORDER))?;
        let orig_list = as_list(orig.get(list_key))?;
        let patch_list = as_list(patch.get(list_key))?;
        let (sub, strategy) = lookup_slice(schema, list_key).map_err(internal)?;
        let (strat, merge_key) = strategy.apply_strategy();
        validate_patch_with_set_order_list(patch_list.unwrap_or(&[]), order, merge_key)?;
        if orig_list.is_none() && patch_list.is_none() {
            continue;
        }
        // Kubernetes works out the item kind from the lists as given, before merging, but
        // reports a problem with it only after the merge.
        let kind = slice_element_type(&[orig_list.unwrap_or(&[]), patch_list.unwrap_or(&[])]);
        let order_kind = *kind.as_ref().unwrap_or(&GoType::Map);
        let mut server_order = Order::new(orig_list.unwrap_or(&[]).iter(), merge_key, order_kind);
        if let (Some(o), Some(p)) = (orig_list, patch_list) {
            if strat == "merge" && order_kind == GoType::Map && !merge_key.is_empty() {
                server_order.keys = merged_in_place_view(o, p, merge_key);
            }
        }
        let merged = match (orig_list.is_some(), patch_list) {
            (_, None) => take_list(orig, list_key),
            (false, Some(p)) => p.iter().filter_map(insert_clean).collect(),
            (true, Some(p)) => {
                let taken = take_list(orig, list_key);
                merge_slice_handler(taken, p, sub, strat, merge_key, false)?
            }
        };
        let order_refs: Vec<&Value> = order.iter().collect();
        let (patch_items, server_only) = if merge_key.is_empty() {
            partition_primitives(merged, &order_refs)?
        } else {
            partition_maps(merged, &order_refs, merge_key)?
        };
        let kind = kind?;
        let patch_order = Order::new(order.iter(), merge_key, kind);
        let both = normalize_element_order(
            patch_items,
            server_only,
            &patch_order,
            &server_order,
            merge_key,
            kind,
        )?;
        orig.insert(list_key.to_string(), Value::Array(both));
        done.push(list_key);
    }
    Ok(done)
}

/// The merge keys of the object's list as Kubernetes sees them when it orders a
/// `$setElementOrder` list: its merge works in place on the list's storage, so deleting an
/// item shifts the later ones left (leaving the last slot as it was) and appended items fill the
/// slots freed at the end. The view keeps the original length.
fn merged_in_place_view(orig: &[Value], patch: &[Value], merge_key: &str) -> Vec<Value> {
    let full = orig.len();
    let mut slots: Vec<Value> = orig
        .iter()
        .map(|v| order_key(v, merge_key, GoType::Map).clone())
        .collect();
    let mut len = full;
    let mut replaced = false;
    for item in patch {
        match item.get(DIRECTIVE).map(Value::as_str) {
            Some(Some("delete")) => {
                let Some(key) = item.get(merge_key) else {
                    continue;
                };
                while let Some(i) = slots[..len].iter().position(|k| k == key) {
                    for j in i..len - 1 {
                        slots[j] = slots[j + 1].clone();
                    }
                    len -= 1;
                }
            }
            Some(Some("replace")) => replaced = true,
            _ => {}
        }
    }
    if !replaced {
        let mut present: Vec<&Value> = Vec::with_capacity(len + patch.len());
        present.extend(slots[..len].iter());
        let mut appended: Vec<Value> = Vec::new();
        for item in patch {
            if item.get(DIRECTIVE).is_some() {
                continue;
            }
            let Some(key) = item.get(merge_key) else {
                break;
            };
            if !present.contains(&key) {
                present.push(key);
                appended.push(key.clone());
            }
        }
        for key in appended {
            if len < full {
                slots[len] = key;
            }
            len += 1;
        }
    }
    slots
}

fn take_list(orig: &mut Map<String, Value>, key: &str) -> Vec<Value> {
    match orig.get_mut(key) {
        Some(Value::Array(a)) => std::mem::take(a),
        _ => Vec::new(),
    }
}

/// The patch list's items (deletions and directive items aside) must appear in the
/// `$setElementOrder` list, in the same relative order.
fn validate_patch_with_set_order_list(patch: &[Value], order: &[Value], merge_key: &str) -> R<()> {
    if order.is_empty() || patch.is_empty() {
        return Ok(());
    }
    let mut non_delete: Vec<&Value> = Vec::with_capacity(patch.len());
    if merge_key.is_empty() {
        non_delete.extend(patch.iter());
    } else {
        for v in patch {
            let m = v.as_object().ok_or_else(|| bad_arg_type(GoType::Map, v))?;
            if m.get(DIRECTIVE).and_then(Value::as_str) != Some("delete") {
                non_delete.push(v);
            }
        }
    }
    let (mut pi, mut si) = (0, 0);
    while pi < non_delete.len() && si < order.len() {
        if non_delete[pi]
            .as_object()
            .is_some_and(|m| m.contains_key(DIRECTIVE))
        {
            pi += 1;
            continue;
        }
        if merge_key_value_equal(non_delete[pi], &order[si], merge_key)? {
            pi += 1;
        }
        si += 1;
    }
    if pi < non_delete.len() && si >= order.len() {
        return Err(internal(format!(
            "The order in patch list:\n{}\n doesn't match {SET_ELEMENT_ORDER} list:\n{}\n",
            gofmt::v_slice(patch),
            gofmt::v_slice(order)
        )));
    }
    Ok(())
}

fn merge_key_value_equal(left: &Value, right: &Value, merge_key: &str) -> R<bool> {
    if merge_key.is_empty() {
        return Ok(left == right);
    }
    let l = left
        .as_object()
        .ok_or_else(|| bad_arg_type(GoType::Map, left))?;
    let r = right
        .as_object()
        .ok_or_else(|| bad_arg_type(GoType::Map, right))?;
    let lk = l.get(merge_key).ok_or_else(|| no_merge_key(l, merge_key))?;
    let rk = r.get(merge_key).ok_or_else(|| no_merge_key(r, merge_key))?;
    Ok(lk == rk)
}

fn merge_slice_handler(
    orig: Vec<Value>,
    patch: &[Value],
    elem: Schema,
    strategy: &str,
    merge_key: &str,
    is_delete_list: bool,
) -> R<Vec<Value>> {
    if strategy == "merge" || is_delete_list {
        merge_slice(orig, patch, elem, merge_key, is_delete_list)
    } else {
        Ok(patch.iter().map(sanitize).collect())
    }
}

/// The common Go type of every item of the lists (which must agree and not be lists).
fn slice_element_type(lists: &[&[Value]]) -> R<GoType> {
    let mut prev: Option<GoType> = None;
    for v in lists.iter().flat_map(|l| l.iter()) {
        let t = GoType::of(v);
        match prev {
            None if t == GoType::Slice => {
                return Err(PatchError::unprocessable(ERR_NO_LIST_OF_LISTS))
            }
            Some(p) if p != t => {
                return Err(internal(format!(
                    "list element types are not identical: {}",
                    gofmt::v_lists(lists)
                )))
            }
            None if t == GoType::Nil => {
                return Err(internal(format!(
                    "list element types are not identical: {}",
                    gofmt::v_lists(lists)
                )))
            }
            _ => prev = Some(t),
        }
    }
    prev.ok_or_else(|| internal("no elements in any of the given slices"))
}

fn merge_slice(
    orig: Vec<Value>,
    patch: &[Value],
    elem: Schema,
    merge_key: &str,
    is_delete_list: bool,
) -> R<Vec<Value>> {
    if orig.is_empty() && patch.is_empty() {
        return Ok(orig);
    }
    let kind = slice_element_type(&[&orig, patch])?;
    if kind != GoType::Map {
        if is_delete_list {
            return Ok(orig.into_iter().filter(|v| !patch.contains(v)).collect());
        }
        let server_order = Order::new(orig.iter(), "", kind);
        // Set union, duplicates (the object's own included) dropped.
        let mut merged: Vec<Value> = Vec::with_capacity(orig.len() + patch.len());
        for v in orig {
            if !merged.contains(&v) {
                merged.push(v);
            }
        }
        for v in patch {
            if !merged.contains(v) {
                merged.push(v.clone());
            }
        }
        let patch_refs: Vec<&Value> = patch.iter().collect();
        let (patch_items, server_only) = partition_primitives(merged, &patch_refs)?;
        let patch_order = Order::new(patch.iter(), "", kind);
        return normalize_element_order(
            patch_items,
            server_only,
            &patch_order,
            &server_order,
            "",
            kind,
        );
    }
    if merge_key.is_empty() {
        return Err(internal(format!(
            "cannot merge lists without merge key for {}",
            elem.kind_name()
        )));
    }
    let (orig, patch) = merge_slice_with_special_elements(orig, patch, merge_key)?;
    let server_order = Order::new(orig.iter(), merge_key, kind);
    let merged = merge_slice_without_special_elements(orig, &patch, merge_key, elem)?;
    let (patch_items, server_only) = partition_maps(merged, &patch, merge_key)?;
    let patch_order = Order::new(patch.iter().copied(), merge_key, kind);
    normalize_element_order(
        patch_items,
        server_only,
        &patch_order,
        &server_order,
        merge_key,
        kind,
    )
}

/// Apply the list items carrying `$patch`: `delete` removes the items with that merge key,
/// `replace` makes the other patch items the whole list. Returns the list to merge into and
/// the patch items left to merge.
fn merge_slice_with_special_elements<'p>(
    mut orig: Vec<Value>,
    patch: &'p [Value],
    merge_key: &str,
) -> R<(Vec<Value>, Vec<&'p Value>)> {
    let mut rest: Vec<&Value> = Vec::with_capacity(patch.len());
    let mut replace = false;
    for v in patch {
        let Some(m) = v.as_object() else {
            return Err(bad_arg_type(GoType::Map, v));
        };
        let Some(d) = m.get(DIRECTIVE) else {
            rest.push(v);
            continue;
        };
        match d.as_str() {
            Some("delete") => {
                let key = m.get(merge_key).ok_or_else(|| no_merge_key(m, merge_key))?;
                if let Some(i) = orig.iter().position(|x| !x.is_object()) {
                    return Err(internal(format!("value for key {i} is not a map")));
                }
                orig.retain(|x| x.get(merge_key) != Some(key));
            }
            Some("replace") => replace = true,
            Some("merge") => {
                return Err(internal(
                    "merging lists cannot yet be specified in the patch",
                ))
            }
            _ => return Err(bad_patch_type(d, m)),
        }
    }
    if replace {
        return Ok((rest.into_iter().map(sanitize).collect(), Vec::new()));
    }
    Ok((orig, rest))
}

fn find_by_key(list: &[Value], merge_key: &str, key: &Value) -> R<Option<usize>> {
    for (i, v) in list.iter().enumerate() {
        let Some(m) = v.as_object() else {
            return Err(internal(format!("value for key {i} is not a map")));
        };
        if m.get(merge_key) == Some(key) {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

fn find_ref_by_key(list: &[&Value], merge_key: &str, key: &Value) -> R<bool> {
    for (i, v) in list.iter().enumerate() {
        let Some(m) = v.as_object() else {
            return Err(internal(format!("value for key {i} is not a map")));
        };
        if m.get(merge_key) == Some(key) {
            return Ok(true);
        }
    }
    Ok(false)
}

/// Merge each patch item into the item with the same merge key, or append it.
fn merge_slice_without_special_elements(
    mut orig: Vec<Value>,
    patch: &[&Value],
    merge_key: &str,
    elem: Schema,
) -> R<Vec<Value>> {
    for pv in patch {
        let Some(pm) = pv.as_object() else {
            return Err(bad_arg_type(GoType::Map, pv));
        };
        let key = pm
            .get(merge_key)
            .ok_or_else(|| no_merge_key(pm, merge_key))?;
        match find_by_key(&orig, merge_key, key)? {
            Some(i) => {
                if let Value::Object(om) = &mut orig[i] {
                    merge_map(om, pm, elem)?;
                }
            }
            None => orig.push(sanitize(pv)),
        }
    }
    Ok(orig)
}

/// Split items into those present in `by` (by value) and the rest.
fn partition_primitives(items: Vec<Value>, by: &[&Value]) -> R<(Vec<Value>, Vec<Value>)> {
    let unhashable = |v: &Value| matches!(v, Value::Object(_) | Value::Array(_));
    if let Some(v) = by
        .iter()
        .copied()
        .chain(items.iter())
        .find(|v| unhashable(v))
    {
        return Err(internal(format!(
            "runtime error: hash of unhashable type {}",
            GoType::of(v).name()
        )));
    }
    Ok(items.into_iter().partition(|v| by.contains(&v)))
}

/// Split items of a list of maps into those whose merge key appears in `by` and the rest.
fn partition_maps(
    items: Vec<Value>,
    by: &[&Value],
    merge_key: &str,
) -> R<(Vec<Value>, Vec<Value>)> {
    let mut present = Vec::with_capacity(items.len());
    let mut other = Vec::with_capacity(items.len());
    for v in items {
        let Some(m) = v.as_object() else {
            return Err(bad_arg_type(GoType::Map, &v));
        };
        let Some(key) = m.get(merge_key) else {
            return Err(no_merge_key(m, merge_key));
        };
        if find_ref_by_key(by, merge_key, key)? {
            present.push(v);
        } else {
            other.push(v);
        }
    }
    Ok((present, other))
}

/// What list ordering compares: merge-key values for lists of maps, the items themselves for
/// primitives; plus the first problem Kubernetes would report about the list's items.
struct Order {
    keys: Vec<Value>,
    invalid: Option<PatchError>,
}

const NULL: Value = Value::Null;

fn order_key<'v>(item: &'v Value, merge_key: &str, kind: GoType) -> &'v Value {
    if kind == GoType::Map {
        item.get(merge_key).unwrap_or(&NULL)
    } else {
        item
    }
}

impl Order {
    fn new<'a>(items: impl Iterator<Item = &'a Value>, merge_key: &str, kind: GoType) -> Order {
        let mut invalid = None;
        let keys = items
            .map(|item| {
                if kind == GoType::Map && invalid.is_none() {
                    match item.as_object() {
                        None => invalid = Some(bad_arg_type(GoType::Map, item)),
                        Some(m) if !m.contains_key(merge_key) => {
                            invalid = Some(no_merge_key(m, merge_key))
                        }
                        Some(_) => {}
                    }
                }
                order_key(item, merge_key, kind).clone()
            })
            .collect();
        Order { keys, invalid }
    }

    fn index(&self, item: &Value, merge_key: &str, kind: GoType) -> Option<usize> {
        let key = order_key(item, merge_key, kind);
        self.keys.iter().position(|k| k == key)
    }
}

/// Sort the patch items by the patch's order and the object-only items by the object's, then
/// interleave them, keeping object-only items before patch items they preceded in the object.
fn normalize_element_order(
    patch_items: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &Order,
    server_order: &Order,
    merge_key: &str,
    kind: GoType,
) -> R<Vec<Value>> {
    let patch_items = normalize_slice_order(patch_items, patch_order, merge_key, kind)?;
    let server_only = normalize_slice_order(server_only, server_order, merge_key, kind)?;
    let li: Vec<Option<usize>> = server_only
        .iter()
        .map(|v| server_order.index(v, merge_key, kind))
        .collect();
    let ri: Vec<Option<usize>> = patch_items
        .iter()
        .map(|v| server_order.index(v, merge_key, kind))
        .collect();
    let mut out = Vec::with_capacity(server_only.len() + patch_items.len());
    let mut left = server_only.into_iter().zip(li).peekable();
    let mut right = patch_items.into_iter().zip(ri).peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((_, l)), Some((_, r))) => matches!((l, r), (Some(l), Some(r)) if l < r),
        };
        let next = if take_left { left.next() } else { right.next() };
        if let Some((v, _)) = next {
            out.push(v);
        }
    }
    Ok(out)
}

/// Stable-sort `items` by their position in `order`; for lists of maps, items to be deleted go
/// last and every item must carry the merge key.
fn normalize_slice_order(
    items: Vec<Value>,
    order: &Order,
    merge_key: &str,
    kind: GoType,
) -> R<Vec<Value>> {
    let mut to_delete = Vec::new();
    let mut items = items;
    if kind == GoType::Map {
        for v in &items {
            let m = v.as_object().ok_or_else(|| bad_arg_type(GoType::Map, v))?;
            if !m.contains_key(merge_key) {
                return Err(no_merge_key(m, merge_key));
            }
        }
        if let Some(e) = &order.invalid {
            return Err(e.clone());
        }
        let (keep, delete): (Vec<Value>, Vec<Value>) = items
            .into_iter()
            .partition(|v| v.get(DIRECTIVE).and_then(Value::as_str) != Some("delete"));
        items = keep;
        to_delete = delete;
    }
    let mut keyed: Vec<(usize, Value)> = items
        .into_iter()
        .map(|v| (order.index(&v, merge_key, kind).unwrap_or(usize::MAX), v))
        .collect();
    keyed.sort_by_key(|(i, _)| *i);
    let mut out: Vec<Value> = keyed.into_iter().map(|(_, v)| v).collect();
    out.extend(to_delete);
    Ok(out)
}

#[cfg(test)]
#[path = "strategic_tests.rs"]
mod tests;
