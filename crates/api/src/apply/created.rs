//! The managedFields of a create, written in one walk of the new object.
//!
//! A create by a manager with no entries owns what [`super::update`]'s general path would
//! give it: the fields the object adds or changes relative to the kind's empty object, minus
//! the reset fields and the never-tracked ones. That path compares the two objects into
//! field-set tries, unions, filters and strips them, then encodes the result; on a create
//! every step but the comparison is the identity or a fixed cut, so this walk follows the
//! comparison rule for rule (as [`super::ops`]'s `compare_at` does for the added and
//! modified sides) and writes FieldsV1 as it goes. Whatever it cannot mirror exactly (a value
//! read as two kinds, a non-empty list in the empty object, two path elements with one text)
//! makes it give up, and the general path runs instead.

use serde_json::{Map, Value};

use super::fieldsv1::element_key;
use super::path::PathElement;
use super::set::FieldSet;
use super::typed::{deduce, list_item_element, resolve, Atom, ListTy, Ty};
use super::value::equals;
use super::{STRIPPED_METADATA, STRIPPED_ROOT};

/// The walk met a case it does not mirror: the general path decides.
pub(super) struct GiveUp;

/// What a value contributes to the set: whether it is itself a field of it, and the FieldsV1
/// of what it holds below.
struct Added {
    member: bool,
    below: Map<String, Value>,
}

/// The FieldsV1 of the fields `new` adds or changes relative to `empty` (the kind's empty
/// object), without the `ignored` fields and the never-tracked ones; an empty map when the
/// create owns nothing.
pub(super) fn fields_v1(
    ty: Ty<'_>,
    empty: &Value,
    new: &Value,
    ignored: &FieldSet,
) -> Result<Map<String, Value>, GiveUp> {
    let mut root = added_at(ty, Some(empty), new, Some(ignored))?.below;
    for name in STRIPPED_ROOT {
        drop_member(&mut root, name);
    }
    if let Some(Value::Object(meta)) = root.get_mut("f:metadata") {
        for name in STRIPPED_METADATA {
            drop_member(meta, name);
        }
        if meta.is_empty() {
            root.remove("f:metadata");
        }
    }
    Ok(root)
}

/// Remove the member `f:<name>` of an encoded node, keeping what is below it.
fn drop_member(node: &mut Map<String, Value>, name: &str) {
    let key = field_key(name);
    let Some(Value::Object(child)) = node.get_mut(&key) else {
        return;
    };
    if child.is_empty() {
        node.remove(&key);
    } else {
        child.remove(".");
    }
}

/// `f:<key>`, the encoded set's name of a field (without the formatting machinery: this
/// runs once per field of every created object).
fn field_key(key: &str) -> String {
    let mut k = String::with_capacity(key.len() + 2);
    k.push_str("f:");
    k.push_str(key);
    k
}

/// Put a child's contribution under `key` (nothing when it has none). Two children with one
/// text would merge in the general path's set: give up.
fn attach(node: &mut Map<String, Value>, key: String, mut child: Added) -> Result<(), GiveUp> {
    if !child.member && child.below.is_empty() {
        return Ok(());
    }
    if child.member && !child.below.is_empty() {
        child.below.insert(".".into(), Value::Object(Map::new()));
    }
    match node.insert(key, Value::Object(child.below)) {
        Some(_) => Err(GiveUp),
        None => Ok(()),
    }
}

/// The ignored fields below `pe`, or None when `pe` is ignored whole.
fn ignored_below<'i>(
    ignored: Option<&'i FieldSet>,
    pe: &PathElement,
) -> Result<Option<&'i FieldSet>, ()> {
    match ignored {
        Some(set) if set.has_member(pe) => Err(()),
        Some(set) => Ok(set.child(pe)),
        None => Ok(None),
    }
}

/// `compare_at` with the new value present, keeping the added and modified sides.
fn added_at(
    ty: Ty<'_>,
    old: Option<&Value>,
    new: &Value,
    ignored: Option<&FieldSet>,
) -> Result<Added, GiveUp> {
    let atom = resolve(ty);
    let an = deduce(atom, Some(new));
    if let Some(old) = old {
        if !deduce(atom, Some(old)).same_shape(&an) {
            return Err(GiveUp);
        }
    }
    let mut out = Added {
        member: false,
        below: Map::new(),
    };
    let in_leaf = added_atom(an, old, new, ignored, &mut out)?;
    if !in_leaf && old.is_none() {
        out.member = true;
    }
    Ok(out)
}

/// `compare_leaf`: a leaf is owned when added or changed.
fn leaf(old: Option<&Value>, new: &Value) -> bool {
    old.is_none_or(|o| !equals(o, new))
}

/// `compare_atom`; returns whether the value was read as a leaf.
fn added_atom(
    atom: Atom<'_>,
    old: Option<&Value>,
    new: &Value,
    ignored: Option<&FieldSet>,
    out: &mut Added,
) -> Result<bool, GiveUp> {
    if let Some(m) = atom.map {
        let om = old.and_then(Value::as_object);
        let nm = new.as_object();
        let promote = om.is_none_or(Map::is_empty) && nm.is_none_or(Map::is_empty);
        if m.atomic || promote {
            out.member = leaf(old, new);
            return Ok(true);
        }
        // Keys only the old value has are removals, which a create's set does not hold.
        for (key, value) in nm.into_iter().flatten() {
            let ignored = match ignored {
                Some(set) => match ignored_below(Some(set), &PathElement::Field(key.clone())) {
                    Ok(below) => below,
                    Err(()) => continue,
                },
                None => None,
            };
            let child = added_at(m.child(key), om.and_then(|o| o.get(key)), value, ignored)?;
            attach(&mut out.below, field_key(key), child)?;
        }
        Ok(false)
    } else if atom.scalar.is_some() {
        out.member = leaf(old, new);
        Ok(true)
    } else if let Some(list) = atom.list {
        let ol = old.and_then(Value::as_array);
        let nl = new.as_array();
        let promote = ol.is_none_or(Vec::is_empty) && nl.is_none_or(Vec::is_empty);
        if !list.associative || promote {
            out.member = leaf(old, new);
            return Ok(true);
        }
        if ol.is_some_and(|o| !o.is_empty()) {
            return Err(GiveUp);
        }
        added_items(&list, nl.map_or(&[][..], Vec::as_slice), ignored, out)?;
        Ok(false)
    } else {
        Ok(false)
    }
}

/// `compare_items` with nothing on the old side: an item whose element occurs once is added
/// whole, an element that occurs more than once is owned as a whole, items without a valid
/// element are left out.
fn added_items(
    list: &ListTy<'_>,
    items: &[Value],
    ignored: Option<&FieldSet>,
    out: &mut Added,
) -> Result<(), GiveUp> {
    let pes: Vec<Option<PathElement>> = items
        .iter()
        .map(|i| list_item_element(list, i).ok())
        .collect();
    let mut sorted: Vec<(&PathElement, usize)> = pes
        .iter()
        .enumerate()
        .filter_map(|(i, pe)| pe.as_ref().map(|pe| (pe, i)))
        .collect();
    sorted.sort_by(|a, b| a.0.cmp(b.0).then(a.1.cmp(&b.1)));
    let mut at = 0;
    while at < sorted.len() {
        let (pe, first) = sorted[at];
        let count = sorted[at..].iter().take_while(|(p, _)| *p == pe).count();
        at += count;
        let Ok(ignored) = ignored_below(ignored, pe) else {
            continue;
        };
        let child = if count == 1 {
            added_at(list.elem, None, &items[first], ignored)?
        } else {
            Added {
                member: true,
                below: Map::new(),
            }
        };
        attach(&mut out.below, element_key(pe), child)?;
    }
    Ok(())
}

#[cfg(test)]
#[path = "created_tests.rs"]
mod tests;
