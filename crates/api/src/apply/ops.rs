//! The typed operations of structured-merge-diff over JSON values: the field set a value
//! sets, the comparison of two values, the merge of an applied configuration into a live
//! object, removal and extraction of a set's fields, and validation of an applied
//! configuration. Each follows SMD's walker of the same name, rule for rule, so ownership
//! comes out as Kubernetes records it.

use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::path::PathElement;
use super::set::{FieldSet, NodeBuilder};
use super::typed::{deduce, list_item_element, resolve, Atom, ListTy, MapTy, Scalar, Ty};
use super::value::{equals, go_float_v};

/// Whether a value is an empty JSON object.
fn empty_map(v: &Value) -> bool {
    v.as_object().is_some_and(Map::is_empty)
}

/// The path elements of a list's items (None where an item has no valid element).
fn item_elements(list: &ListTy<'_>, items: &[Value]) -> Vec<Option<PathElement>> {
    items
        .iter()
        .map(|i| list_item_element(list, i).ok())
        .collect()
}

// ---------------------------------------------------------------------------------------------
// ToFieldSet

/// The fields a value sets (SMD's `ToFieldSet`): every scalar and atomic leaf, every list item
/// of an associative list, every map entry (but not declared struct fields, unless empty or
/// null).
pub(crate) fn to_field_set(ty: Ty<'_>, v: &Value) -> FieldSet {
    fields_below(ty, v).0
}

/// The fields below a value, relative to it, and whether the value is itself a field (a
/// scalar or an atomic). Sets are built bottom-up: each path element is made once.
fn fields_below(ty: Ty<'_>, v: &Value) -> (FieldSet, bool) {
    let atom = deduce(resolve(ty), Some(v));
    if let Some(m) = atom.map {
        map_fields(m, v)
    } else if atom.scalar.is_some() {
        (FieldSet::new(), true)
    } else if let Some(l) = atom.list {
        list_fields(l, v)
    } else {
        (FieldSet::new(), false)
    }
}

fn map_fields(m: MapTy<'_>, v: &Value) -> (FieldSet, bool) {
    if m.atomic {
        return (FieldSet::new(), true);
    }
    let Some(obj) = v.as_object() else {
        return (FieldSet::new(), false);
    };
    let mut b = NodeBuilder::with_capacity(obj.len());
    for (k, val) in obj {
        let (ty, declared) = m.lookup(k);
        let (below, is_field) = fields_below(ty, val);
        let member = is_field || val.is_null() || empty_map(val) || !declared;
        b.attach(&PathElement::Field(k.clone()), below, member);
    }
    (b.finish(), false)
}

fn list_fields(l: ListTy<'_>, v: &Value) -> (FieldSet, bool) {
    if !l.associative {
        return (FieldSet::new(), true);
    }
    let Some(items) = v.as_array() else {
        return (FieldSet::new(), false);
    };
    let pes = item_elements(&l, items);
    let dups = duplicates(&pes);
    let mut b = NodeBuilder::default();
    for d in &dups {
        b.member(d.clone());
    }
    for (item, pe) in items.iter().zip(pes) {
        let Some(pe) = pe else { continue };
        if dups.binary_search(&pe).is_ok() {
            continue;
        }
        let (below, _) = fields_below(l.elem, item);
        b.attach(&pe, below, true);
    }
    (b.finish(), false)
}

/// The elements that occur more than once, sorted.
fn duplicates(pes: &[Option<PathElement>]) -> Vec<PathElement> {
    let mut sorted: Vec<&PathElement> = pes.iter().flatten().collect();
    sorted.sort();
    let mut out: Vec<PathElement> = Vec::new();
    for w in sorted.windows(2) {
        if w[0] == w[1] && out.last() != Some(w[0]) {
            out.push(w[0].clone());
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Compare

/// What changed between two values (SMD's `Comparison`).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Comparison {
    pub removed: FieldSet,
    pub modified: FieldSet,
    pub added: FieldSet,
}

impl Comparison {
    /// Drop the fields a filter set excludes (SMD's `FilterFields` with an exclude filter).
    pub fn exclude(&mut self, ignored: &FieldSet) {
        if ignored.is_empty() {
            return;
        }
        self.removed.subtract_recursive(ignored);
        self.modified.subtract_recursive(ignored);
        self.added.subtract_recursive(ignored);
    }
}

/// Compare `lhs` (old) with `rhs` (new).
pub(crate) fn compare(ty: Ty<'_>, lhs: &Value, rhs: &Value) -> Comparison {
    let out = compare_at(ty, Some(lhs), Some(rhs));
    Comparison {
        removed: out.removed,
        modified: out.modified,
        added: out.added,
    }
}

/// The comparison below one value, and how the value itself changed.
#[derive(Default)]
struct CmpOut {
    removed: FieldSet,
    modified: FieldSet,
    added: FieldSet,
    self_removed: bool,
    self_modified: bool,
    self_added: bool,
}

impl CmpOut {
    fn is_empty(&self) -> bool {
        !(self.self_removed || self.self_modified || self.self_added)
            && self.removed.is_empty()
            && self.modified.is_empty()
            && self.added.is_empty()
    }
}

/// A comparison being built for one node.
#[derive(Default)]
struct CmpNode {
    removed: NodeBuilder,
    modified: NodeBuilder,
    added: NodeBuilder,
    self_removed: bool,
    self_modified: bool,
    self_added: bool,
}

impl CmpNode {
    fn attach(&mut self, pe: &PathElement, child: CmpOut) {
        self.removed.attach(pe, child.removed, child.self_removed);
        self.modified
            .attach(pe, child.modified, child.self_modified);
        self.added.attach(pe, child.added, child.self_added);
    }

    fn finish(self) -> CmpOut {
        CmpOut {
            removed: self.removed.finish(),
            modified: self.modified.finish(),
            added: self.added.finish(),
            self_removed: self.self_removed,
            self_modified: self.self_modified,
            self_added: self.self_added,
        }
    }
}

fn compare_at(ty: Ty<'_>, l: Option<&Value>, r: Option<&Value>) -> CmpOut {
    // Equal values differ nowhere below: one plain equality walk instead of building paths
    // through the whole subtree (a status write leaves spec and metadata as they were).
    if let (Some(a), Some(b)) = (l, r) {
        if a == b {
            return CmpOut::default();
        }
    }
    let atom = resolve(ty);
    let al = deduce(atom, l);
    let ar = deduce(atom, r);
    let mut node = CmpNode::default();
    let mut in_leaf = false;
    if r.is_none() {
        compare_atom(al, l, r, &mut node, &mut in_leaf);
    } else if l.is_none() || al.same_shape(&ar) {
        compare_atom(ar, l, r, &mut node, &mut in_leaf);
    } else {
        // The value changed kind: both readings run, as SMD does.
        let mut other_leaf = in_leaf;
        compare_atom(al, l, r, &mut node, &mut other_leaf);
        compare_atom(ar, l, r, &mut node, &mut in_leaf);
    }
    if !in_leaf {
        if l.is_none() {
            node.self_added = true;
        } else if r.is_none() {
            node.self_removed = true;
        }
    }
    node.finish()
}

fn compare_leaf(l: Option<&Value>, r: Option<&Value>, node: &mut CmpNode, in_leaf: &mut bool) {
    if *in_leaf {
        return;
    }
    *in_leaf = true;
    match (l, r) {
        (None, _) => node.self_added = true,
        (_, None) => node.self_removed = true,
        (Some(a), Some(b)) => {
            if !equals(a, b) {
                node.self_modified = true;
            }
        }
    }
}

fn compare_atom(
    atom: Atom<'_>,
    l: Option<&Value>,
    r: Option<&Value>,
    node: &mut CmpNode,
    in_leaf: &mut bool,
) {
    if let Some(m) = atom.map {
        let lm = l.and_then(Value::as_object);
        let rm = r.and_then(Value::as_object);
        let promote = lm.is_none_or(Map::is_empty) && rm.is_none_or(Map::is_empty);
        if m.atomic || promote {
            compare_leaf(l, r, node, in_leaf);
            return;
        }
        for key in union_keys(lm, rm) {
            let lv = lm.and_then(|o| o.get(key));
            let rv = rm.and_then(|o| o.get(key));
            let child = compare_at(m.child(key), lv, rv);
            if !child.is_empty() {
                node.attach(&PathElement::Field(key.clone()), child);
            }
        }
    } else if atom.scalar.is_some() {
        compare_leaf(l, r, node, in_leaf);
    } else if let Some(list) = atom.list {
        let la = l.and_then(Value::as_array);
        let ra = r.and_then(Value::as_array);
        let promote = la.is_none_or(Vec::is_empty) && ra.is_none_or(Vec::is_empty);
        if !list.associative || promote {
            compare_leaf(l, r, node, in_leaf);
            return;
        }
        compare_items(
            list,
            la.map_or(&[][..], Vec::as_slice),
            ra.map_or(&[][..], Vec::as_slice),
            node,
        );
    }
}

/// The keys of two maps, each once, sorted.
fn union_keys<'v>(
    a: Option<&'v Map<String, Value>>,
    b: Option<&'v Map<String, Value>>,
) -> Vec<&'v String> {
    let mut keys: Vec<&String> = Vec::new();
    let (mut ia, mut ib) = (
        a.into_iter().flat_map(|m| m.keys()).peekable(),
        b.into_iter().flat_map(|m| m.keys()).peekable(),
    );
    loop {
        let next = match (ia.peek(), ib.peek()) {
            (Some(x), Some(y)) => match x.cmp(y) {
                Ordering::Less => ia.next(),
                Ordering::Greater => ib.next(),
                Ordering::Equal => {
                    ib.next();
                    ia.next()
                }
            },
            (Some(_), None) => ia.next(),
            (None, Some(_)) => ib.next(),
            (None, None) => break,
        };
        keys.extend(next);
    }
    keys
}

/// The elements of a list's items sorted, each with its item's position (items without a
/// valid element left out), for grouping without copying elements.
fn sorted_elements(pes: &[Option<PathElement>]) -> Vec<(&PathElement, usize)> {
    let mut out: Vec<(&PathElement, usize)> = pes
        .iter()
        .enumerate()
        .filter_map(|(i, pe)| pe.as_ref().map(|pe| (pe, i)))
        .collect();
    out.sort_by(|a, b| a.0.cmp(b.0).then(a.1.cmp(&b.1)));
    out
}

/// The positions of the items with element `pe`, in list order.
fn positions<'s>(
    sorted: &'s [(&PathElement, usize)],
    pe: &PathElement,
) -> &'s [(&'s PathElement, usize)] {
    let start = sorted.partition_point(|(p, _)| *p < pe);
    let len = sorted[start..].partition_point(|(p, _)| *p == pe);
    &sorted[start..start + len]
}

fn compare_items(list: ListTy<'_>, lhs: &[Value], rhs: &[Value], node: &mut CmpNode) {
    let lpes = item_elements(&list, lhs);
    let rpes = item_elements(&list, rhs);
    let left = sorted_elements(&lpes);
    let right = sorted_elements(&rpes);
    // Every element once: the live side's in order of first appearance, then the new side's.
    let first_seen = |pes: &[Option<PathElement>], sorted: &[(&PathElement, usize)], i: usize| {
        pes[i]
            .as_ref()
            .is_some_and(|pe| positions(sorted, pe).first().is_some_and(|(_, j)| *j == i))
    };
    let mut all: Vec<&PathElement> = Vec::with_capacity(lpes.len() + rpes.len());
    for (i, pe) in lpes.iter().enumerate() {
        if let Some(pe) = pe {
            if first_seen(&lpes, &left, i) {
                all.push(pe);
            }
        }
    }
    for (i, pe) in rpes.iter().enumerate() {
        if let Some(pe) = pe {
            if first_seen(&rpes, &right, i) && positions(&left, pe).is_empty() {
                all.push(pe);
            }
        }
    }
    for pe in all {
        let ls = positions(&left, pe);
        let rs = positions(&right, pe);
        let l0 = ls.first().map(|(_, i)| &lhs[*i]);
        let r0 = rs.first().map(|(_, i)| &rhs[*i]);
        match (ls.len(), rs.len()) {
            (0..=1, 0..=1) => {
                let child = compare_at(list.elem, l0, r0);
                if !child.is_empty() {
                    node.attach(pe, child);
                }
            }
            (l, r) if l >= 2 && r >= 2 => {
                let same = l == r
                    && ls
                        .iter()
                        .zip(rs)
                        .all(|((_, a), (_, b))| equals(&lhs[*a], &rhs[*b]));
                if !same {
                    node.modified.member(pe.clone());
                }
            }
            (l, _) if l >= 2 => {
                if r0.is_some() {
                    let child = compare_at(list.elem, None, r0);
                    node.attach(pe, child);
                }
                node.removed.member(pe.clone());
            }
            _ => {
                if l0.is_some() {
                    let child = compare_at(list.elem, l0, None);
                    node.attach(pe, child);
                }
                node.added.member(pe.clone());
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Merge

/// An error found while walking a value, with the path it was found at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WalkError {
    pub path: String,
    pub message: String,
}

/// SMD's rendering of a list of errors: one as `path: message`, several as a list.
pub(crate) fn errors_string(errs: &[WalkError]) -> String {
    let one = |e: &WalkError| {
        if e.path.is_empty() {
            e.message.clone()
        } else {
            format!("{}: {}", e.path, e.message)
        }
    };
    match errs {
        [e] => one(e),
        _ => {
            let mut lines = vec!["errors:".to_string()];
            lines.extend(errs.iter().map(|e| format!("  {}", one(e))));
            lines.join("\n")
        }
    }
}

/// Prefix the errors found below a child (those from `from` on) with the child's path step;
/// paths are only built when something failed.
fn prefix_errors(errs: &mut [WalkError], from: usize, step: &dyn std::fmt::Display) {
    for e in &mut errs[from..] {
        e.path = format!("{step}{}", e.path);
    }
}

/// A map key as a path step (`.name`).
struct FieldStep<'k>(&'k str);

impl std::fmt::Display for FieldStep<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, ".{}", self.0)
    }
}

/// Merge `rhs` (an applied configuration) into `lhs` (the live object): maps and structs key by
/// key, associative lists item by item (keeping SMD's ordering rules), everything else
/// replaced by the configuration's value.
pub(crate) fn merge(ty: Ty<'_>, lhs: &Value, rhs: &Value) -> Result<Value, Vec<WalkError>> {
    let mut errs = Vec::new();
    let out = merge_at(ty, Some(lhs), Some(rhs), &mut errs);
    if errs.is_empty() {
        Ok(out.unwrap_or(Value::Null))
    } else {
        Err(errs)
    }
}

fn merge_at(
    ty: Ty<'_>,
    l: Option<&Value>,
    r: Option<&Value>,
    errs: &mut Vec<WalkError>,
) -> Option<Value> {
    if r.is_none() {
        // Nothing applied here: SMD's walk rebuilds the live value unchanged.
        return l.cloned();
    }
    let atom = resolve(ty);
    let al = deduce(atom, l);
    let ar = deduce(atom, r);
    if l.is_none() || al.same_shape(&ar) {
        merge_atom(ar, l, r, errs)
    } else {
        let _ = merge_atom(al, l, r, errs);
        merge_atom(ar, l, r, errs)
    }
}

/// The configuration's value when it has one, else the live one (SMD's `ruleKeepRHS`).
fn keep_rhs(l: Option<&Value>, r: Option<&Value>) -> Option<Value> {
    r.or(l).cloned()
}

fn merge_atom(
    atom: Atom<'_>,
    l: Option<&Value>,
    r: Option<&Value>,
    errs: &mut Vec<WalkError>,
) -> Option<Value> {
    if let Some(m) = atom.map {
        let lm = l.and_then(Value::as_object);
        let rm = r.and_then(Value::as_object);
        let promote = lm.is_none_or(Map::is_empty) && rm.is_none_or(Map::is_empty);
        if m.atomic || promote {
            return keep_rhs(l, r);
        }
        let mut out = Map::new();
        for key in union_keys(lm, rm) {
            let lv = lm.and_then(|o| o.get(key));
            let rv = rm.and_then(|o| o.get(key));
            let before = errs.len();
            let merged = merge_at(m.child(key), lv, rv, errs);
            if errs.len() > before {
                prefix_errors(errs, before, &FieldStep(key));
            }
            if let Some(v) = merged {
                out.insert(key.clone(), v);
            }
        }
        (!out.is_empty()).then_some(Value::Object(out))
    } else if atom.scalar.is_some() {
        keep_rhs(l, r)
    } else if let Some(list) = atom.list {
        let la = l.and_then(Value::as_array);
        let ra = r.and_then(Value::as_array);
        let promote = la.is_none_or(Vec::is_empty) && ra.is_none_or(Vec::is_empty);
        if !list.associative || promote {
            return keep_rhs(l, r);
        }
        let out = merge_items(
            list,
            la.map_or(&[][..], Vec::as_slice),
            ra.map_or(&[][..], Vec::as_slice),
            errs,
        );
        (!out.is_empty()).then_some(Value::Array(out))
    } else {
        None
    }
}

/// Index a list by element: the elements in order and a lookup of the item for each (`None`
/// for an element that occurs more than once on the live side). Duplicates on the
/// configuration side and items without a valid element are errors.
fn index_items<'v>(
    list: &ListTy<'_>,
    items: &'v [Value],
    allow_duplicates: bool,
    errs: &mut Vec<WalkError>,
) -> (Vec<PathElement>, Vec<(PathElement, Option<&'v Value>)>) {
    let mut pes = Vec::with_capacity(items.len());
    let mut observed: Vec<(PathElement, Option<&Value>)> = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let pe = match list_item_element(list, item) {
            Ok(pe) => pe,
            Err(e) => {
                errs.push(WalkError {
                    path: String::new(),
                    message: format!("element {i}: {e}"),
                });
                continue;
            }
        };
        match observed.binary_search_by(|(p, _)| p.cmp(&pe)) {
            Ok(at) => {
                if !allow_duplicates {
                    errs.push(WalkError {
                        path: String::new(),
                        message: format!("duplicate entries for key {pe}"),
                    });
                    continue;
                }
                observed[at].1 = None;
            }
            Err(at) => observed.insert(at, (pe.clone(), Some(item))),
        }
        pes.push(pe);
    }
    (pes, observed)
}

/// The item for an element: `None` when absent, `Some(None)` for a duplicated element (which
/// SMD merges as an explicit null), `Some(Some(v))` otherwise.
fn lookup<'v>(
    index: &[(PathElement, Option<&'v Value>)],
    pe: &PathElement,
) -> Option<Option<&'v Value>> {
    index
        .binary_search_by(|(p, _)| p.cmp(pe))
        .ok()
        .map(|i| index[i].1)
}

static NULL: Value = Value::Null;

/// A looked-up item as the merge sees it: absent, or present (a duplicate reads as null).
fn as_value(o: Option<Option<&Value>>) -> Option<&Value> {
    o.map(|v| v.unwrap_or(&NULL))
}

/// Merge one item, prefixing the errors found inside it with its element.
fn merge_item(
    list: &ListTy<'_>,
    pe: &PathElement,
    l: Option<&Value>,
    r: Option<&Value>,
    errs: &mut Vec<WalkError>,
) -> Option<Value> {
    let before = errs.len();
    let out = merge_at(list.elem, l, r, errs);
    if errs.len() > before {
        prefix_errors(errs, before, pe);
    }
    out
}

fn merge_items(
    list: ListTy<'_>,
    lhs: &[Value],
    rhs: &[Value],
    errs: &mut Vec<WalkError>,
) -> Vec<Value> {
    let mut out = Vec::with_capacity(lhs.len().max(rhs.len()));
    let before = errs.len();
    let (rhs_pes, observed_rhs) = index_items(&list, rhs, false, errs);
    let (lhs_pes, observed_lhs) = index_items(&list, lhs, true, errs);
    if errs.len() > before {
        return out;
    }
    let mut shared = rhs_pes
        .iter()
        .filter(|pe| lookup(&observed_lhs, pe).is_some());
    let mut next_shared = shared.next();
    let mut merged_rhs: Vec<PathElement> = Vec::new();
    let mark = |merged: &mut Vec<PathElement>, pe: &PathElement| {
        if let Err(at) = merged.binary_search(pe) {
            merged.insert(at, pe.clone());
        }
    };
    let (mut li, mut ri) = (0, 0);
    while li < lhs_pes.len() || ri < rhs_pes.len() {
        if li < lhs_pes.len() && ri < rhs_pes.len() {
            let pe = &lhs_pes[li];
            if *pe == rhs_pes[ri] {
                mark(&mut merged_rhs, pe);
                let lc = as_value(lookup(&observed_lhs, pe));
                let rc = as_value(lookup(&observed_rhs, pe));
                out.extend(merge_item(&list, pe, lc, rc, errs));
                li += 1;
                ri += 1;
                next_shared = shared.next();
                continue;
            }
            if lookup(&observed_rhs, pe).is_some() && next_shared.is_some_and(|n| n != pe) {
                li += 1;
                continue;
            }
        }
        if li < lhs_pes.len() {
            let pe = &lhs_pes[li];
            if lookup(&observed_rhs, pe).is_none() {
                out.extend(merge_item(&list, pe, lhs.get(li), None, errs));
                li += 1;
                continue;
            } else if merged_rhs.binary_search(pe).is_ok() {
                li += 1;
            }
        }
        if ri < rhs_pes.len() {
            let pe = &rhs_pes[ri];
            mark(&mut merged_rhs, pe);
            let lc = as_value(lookup(&observed_lhs, pe));
            let rc = as_value(lookup(&observed_rhs, pe));
            out.extend(merge_item(&list, pe, lc, rc, errs));
            ri += 1;
            if next_shared == Some(pe) {
                next_shared = shared.next();
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Remove / extract

/// Remove the fields of `set` from a value (SMD's `RemoveItems`). Maps and lists the walk
/// empties become null, as in SMD.
pub(crate) fn remove_items(ty: Ty<'_>, v: &Value, set: &FieldSet) -> Value {
    remove_or_extract(ty, v, set, false)
}

/// Keep only the fields of `set` (SMD's `ExtractItems`); pass a set of leaves.
pub(crate) fn extract_items(ty: Ty<'_>, v: &Value, set: &FieldSet) -> Value {
    remove_or_extract(ty, v, set, true)
}

fn remove_or_extract(ty: Ty<'_>, v: &Value, set: &FieldSet, extract: bool) -> Value {
    let atom = deduce(resolve(ty), Some(v));
    if let Some(m) = atom.map {
        remove_in_map(m, v, set, extract)
    } else if atom.scalar.is_some() {
        v.clone()
    } else if let Some(l) = atom.list {
        remove_in_list(l, v, set, extract)
    } else {
        Value::Null
    }
}

fn remove_in_map(m: MapTy<'_>, v: &Value, set: &FieldSet, extract: bool) -> Value {
    let Some(obj) = v.as_object().filter(|o| !o.is_empty()) else {
        return Value::Null;
    };
    if m.atomic {
        return if extract { v.clone() } else { Value::Null };
    }
    let mut out = Map::new();
    for (k, val) in obj {
        let pe = PathElement::Field(k.clone());
        if set.has_member(&pe) {
            if extract {
                out.insert(k.clone(), val.clone());
            }
            continue;
        }
        let kept = match set.child(&pe).filter(|s| !s.is_empty()) {
            Some(sub) => remove_or_extract(m.child(k), val, sub, extract),
            None if extract => continue,
            None => val.clone(),
        };
        out.insert(k.clone(), kept);
    }
    if out.is_empty() {
        Value::Null
    } else {
        Value::Object(out)
    }
}

fn remove_in_list(l: ListTy<'_>, v: &Value, set: &FieldSet, extract: bool) -> Value {
    let Some(items) = v.as_array().filter(|a| !a.is_empty()) else {
        return Value::Null;
    };
    if !l.associative {
        return if extract { v.clone() } else { Value::Null };
    }
    let mut out = Vec::new();
    for item in items {
        let pe = list_item_element(&l, item).ok();
        if let Some(pe) = &pe {
            if set.has_member(pe) {
                if extract {
                    out.push(item.clone());
                }
                continue;
            }
        }
        let sub = pe
            .as_ref()
            .and_then(|pe| set.child(pe))
            .filter(|s| !s.is_empty());
        let kept = match sub {
            Some(sub) => remove_or_extract(l.elem, item, sub, extract),
            None if extract => continue,
            None => item.clone(),
        };
        out.push(kept);
    }
    if out.is_empty() {
        Value::Null
    } else {
        Value::Array(out)
    }
}

// ---------------------------------------------------------------------------------------------
// Validate

/// Check a value against its type as Kubernetes' typed conversion does: fields no schema
/// declares, list items without valid keys, duplicate keys (unless allowed) and scalars of the
/// wrong kind.
pub(crate) fn validate(ty: Ty<'_>, v: &Value, allow_duplicates: bool) -> Vec<WalkError> {
    let mut errs = Vec::new();
    validate_at(ty, v, allow_duplicates, &mut errs);
    errs
}

fn validate_at(ty: Ty<'_>, v: &Value, allow_dups: bool, errs: &mut Vec<WalkError>) {
    let atom = deduce(resolve(ty), Some(v));
    let err = |errs: &mut Vec<WalkError>, message: String| {
        errs.push(WalkError {
            path: String::new(),
            message,
        })
    };
    if let Some(m) = atom.map {
        let obj = match v {
            Value::Object(o) => o,
            Value::Null => return,
            other => return err(errs, format!("expected map, got {}", go_value_ptr(other))),
        };
        for (k, val) in obj {
            let before = errs.len();
            let (ty, declared) = m.lookup(k);
            let stop = !declared && !m.allows_undeclared();
            if stop {
                err(errs, "field not declared in schema".into());
            } else {
                validate_at(ty, val, allow_dups, errs);
            }
            if errs.len() > before {
                prefix_errors(errs, before, &FieldStep(k));
            }
            if stop {
                return;
            }
        }
    } else if let Some(s) = atom.scalar {
        if let Some(message) = scalar_error(s, v) {
            err(errs, message);
        }
    } else if let Some(l) = atom.list {
        let items = match v {
            Value::Array(a) => a,
            Value::Null => return,
            other => return err(errs, format!("expected list, got {}", go_value_ptr(other))),
        };
        let mut seen: Vec<PathElement> = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let pe = if l.associative {
                match list_item_element(&l, item) {
                    Ok(pe) => pe,
                    Err(e) => return err(errs, format!("element {i}: {e}")),
                }
            } else {
                PathElement::Index(i as i64)
            };
            if l.associative {
                match seen.binary_search(&pe) {
                    Ok(_) if !allow_dups => {
                        err(errs, format!("duplicate entries for key {pe}"));
                    }
                    Ok(_) => {}
                    Err(at) => seen.insert(at, pe.clone()),
                }
            }
            let before = errs.len();
            validate_at(l.elem, item, allow_dups, errs);
            if errs.len() > before {
                prefix_errors(errs, before, &pe);
            }
        }
    }
}

/// SMD's scalar type errors, with values shown as Go shows them.
fn scalar_error(s: Scalar, v: &Value) -> Option<String> {
    if v.is_null() {
        return None;
    }
    match s {
        Scalar::Numeric if !v.is_number() => Some(format!(
            "expected numeric (int or float), got {}",
            go_type_name(v)
        )),
        Scalar::String if !v.is_string() => Some(format!(
            "expected string, got &value.valueUnstructured{{Value:{}}}",
            go_sharp_v(v)
        )),
        Scalar::Boolean if !v.is_boolean() => {
            Some(format!("expected boolean, got {}", go_value_ptr(v)))
        }
        Scalar::Untyped if v.is_array() || v.is_object() => {
            Some(format!("expected any scalar, got {}", go_value_ptr(v)))
        }
        _ => None,
    }
}

/// Go's `%T` of an unstructured value.
fn go_type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "<nil>",
        Value::Bool(_) => "bool",
        Value::Number(n) if n.is_f64() => "float64",
        Value::Number(_) => "int64",
        Value::String(_) => "string",
        Value::Array(_) => "[]interface {}",
        Value::Object(_) => "map[string]interface {}",
    }
}

/// Go's `%v` of an unstructured value (`[a b]`, `map[k:v]`).
fn go_v(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if n.is_f64() => go_float_v(f),
            _ => n.to_string(),
        },
        Value::String(s) => s.clone(),
        Value::Array(items) => {
            let parts: Vec<String> = items.iter().map(go_v).collect();
            format!("[{}]", parts.join(" "))
        }
        Value::Object(m) => {
            let parts: Vec<String> = m.iter().map(|(k, v)| format!("{k}:{}", go_v(v))).collect();
            format!("map[{}]", parts.join(" "))
        }
    }
}

/// Go's `%v` of SMD's boxed value: a pointer to a one-field struct.
fn go_value_ptr(v: &Value) -> String {
    format!("&{{{}}}", go_v(v))
}

/// Go's `%#v` of a scalar unstructured value.
fn go_sharp_v(v: &Value) -> String {
    match v {
        Value::String(s) => super::value::go_quote(s),
        Value::Array(_) => format!("[]interface {{}}{{{}}}", go_v(v).trim_matches(['[', ']'])),
        Value::Object(_) => format!("map[string]interface {{}}{{{}}}", go_v(v)),
        other => go_v(other),
    }
}

#[cfg(test)]
#[path = "ops_tests.rs"]
mod tests;
