//! [`FieldSet`]: a set of field paths stored as a trie, as structured-merge-diff's
//! `fieldpath.Set`. A node has *members* (paths that end here) and *children* (subtrees); a path
//! can be both a member and a prefix of other paths, which FieldsV1 writes as the `"."` marker.

use std::cmp::Ordering;

use super::path::PathElement;

/// A set of field paths (see the module docs). Members and children are kept sorted.
#[derive(Debug, Clone, Default)]
pub struct FieldSet {
    members: Vec<PathElement>,
    children: Vec<(PathElement, FieldSet)>,
}

impl PartialEq for FieldSet {
    fn eq(&self, other: &Self) -> bool {
        self.members == other.members && self.children == other.children
    }
}

impl FieldSet {
    pub fn new() -> FieldSet {
        FieldSet::default()
    }

    /// A set of the given paths.
    pub fn from_paths<'p>(paths: impl IntoIterator<Item = &'p [PathElement]>) -> FieldSet {
        let mut s = FieldSet::new();
        for p in paths {
            s.insert(p);
        }
        s
    }

    /// The elements that end a path at this node.
    pub fn members(&self) -> &[PathElement] {
        &self.members
    }

    /// The subtrees below this node.
    pub fn children(&self) -> &[(PathElement, FieldSet)] {
        &self.children
    }

    /// Build a node from members and children already sorted and free of duplicates.
    pub(crate) fn from_sorted(
        members: Vec<PathElement>,
        children: Vec<(PathElement, FieldSet)>,
    ) -> FieldSet {
        FieldSet { members, children }
    }

    /// Add a path. The empty path is no path: nothing is added.
    pub fn insert(&mut self, path: &[PathElement]) {
        let Some((last, prefix)) = path.split_last() else {
            return;
        };
        let mut node = self;
        for pe in prefix {
            node = node.descend(pe);
        }
        node.insert_member(last);
    }

    fn insert_member(&mut self, pe: &PathElement) {
        if let Err(at) = self.members.binary_search(pe) {
            self.members.insert(at, pe.clone());
        }
    }

    /// The child node for `pe`, created when missing.
    pub(crate) fn descend(&mut self, pe: &PathElement) -> &mut FieldSet {
        let at = match self.children.binary_search_by(|(c, _)| c.cmp(pe)) {
            Ok(at) => at,
            Err(at) => {
                self.children.insert(at, (pe.clone(), FieldSet::new()));
                at
            }
        };
        &mut self.children[at].1
    }

    /// Whether the path is in the set (as a member, not merely as a prefix).
    pub fn has(&self, path: &[PathElement]) -> bool {
        let Some((last, prefix)) = path.split_last() else {
            return false;
        };
        let mut node = self;
        for pe in prefix {
            match node.child(pe) {
                Some(c) => node = c,
                None => return false,
            }
        }
        node.has_member(last)
    }

    pub(crate) fn has_member(&self, pe: &PathElement) -> bool {
        self.members.binary_search(pe).is_ok()
    }

    /// The subtree below `pe`, if any.
    pub fn child(&self, pe: &PathElement) -> Option<&FieldSet> {
        self.children
            .binary_search_by(|(c, _)| c.cmp(pe))
            .ok()
            .map(|i| &self.children[i].1)
    }

    /// Whether the set holds no path at all.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.iter().all(|(_, c)| c.is_empty())
    }

    /// How many paths the set holds.
    pub fn size(&self) -> usize {
        self.members.len() + self.children.iter().map(|(_, c)| c.size()).sum::<usize>()
    }

    /// Every path of the set, members of a node before the paths below it, in order.
    pub fn paths(&self) -> Vec<Vec<PathElement>> {
        let mut out = Vec::new();
        self.each_path(&mut |p| out.push(p.to_vec()));
        out
    }

    /// Visit every path (see [`FieldSet::paths`]) without collecting them.
    pub fn each_path(&self, f: &mut dyn FnMut(&[PathElement])) {
        let mut prefix = Vec::new();
        self.each_path_at(&mut prefix, f);
    }

    fn each_path_at(&self, prefix: &mut Vec<PathElement>, f: &mut dyn FnMut(&[PathElement])) {
        for m in &self.members {
            prefix.push(m.clone());
            f(prefix);
            prefix.pop();
        }
        for (pe, c) in &self.children {
            prefix.push(pe.clone());
            c.each_path_at(prefix, f);
            prefix.pop();
        }
    }

    /// Paths in either set.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        FieldSet {
            members: merge_sorted(&self.members, &other.members),
            children: zip_children(&self.children, &other.children, |a, b| match (a, b) {
                (Some(a), Some(b)) => Some(a.union(b)),
                (Some(a), None) => Some(a.clone()),
                (None, Some(b)) => Some(b.clone()),
                (None, None) => None,
            }),
        }
    }

    /// Paths in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let members = self
            .members
            .iter()
            .filter(|m| other.has_member(m))
            .cloned()
            .collect();
        FieldSet {
            members,
            children: zip_children(&self.children, &other.children, |a, b| match (a, b) {
                (Some(a), Some(b)) => Some(a.intersection(b)).filter(|s| !s.is_empty()),
                _ => None,
            }),
        }
    }

    /// Paths of this set that are not in `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let members = self
            .members
            .iter()
            .filter(|m| !other.has_member(m))
            .cloned()
            .collect();
        FieldSet {
            members,
            children: zip_children(&self.children, &other.children, |a, b| match (a, b) {
                (Some(a), Some(b)) => Some(a.difference(b)).filter(|s| !s.is_empty()),
                (Some(a), None) => Some(a.clone()),
                _ => None,
            }),
        }
    }

    /// Like [`FieldSet::difference`], but a member of `other` also removes every path below
    /// it (SMD's `RecursiveDifference`, the filter for reset fields).
    pub fn recursive_difference(&self, other: &FieldSet) -> FieldSet {
        let members = self
            .members
            .iter()
            .filter(|m| !other.has_member(m))
            .cloned()
            .collect();
        let mut children = Vec::new();
        for (pe, c) in &self.children {
            if other.has_member(pe) {
                continue;
            }
            match other.child(pe) {
                Some(o) => {
                    let d = c.recursive_difference(o);
                    if !d.is_empty() {
                        children.push((pe.clone(), d));
                    }
                }
                None => children.push((pe.clone(), c.clone())),
            }
        }
        FieldSet { members, children }
    }

    /// [`FieldSet::union`] in place, taking `other`'s elements instead of copying them.
    pub(crate) fn absorb(&mut self, other: FieldSet) {
        if other.members.is_empty() && other.children.is_empty() {
            return;
        }
        if self.members.is_empty() && self.children.is_empty() {
            *self = other;
            return;
        }
        if !other.members.is_empty() {
            let mine = std::mem::take(&mut self.members);
            self.members = merge_owned(mine, other.members, Ord::cmp, |x, _| x);
        }
        if !other.children.is_empty() {
            let mine = std::mem::take(&mut self.children);
            self.children = merge_owned(
                mine,
                other.children,
                |x, y| x.0.cmp(&y.0),
                |(pe, mut x), (_, y)| {
                    x.absorb(y);
                    (pe, x)
                },
            );
        }
    }

    /// [`FieldSet::difference`] in place.
    pub(crate) fn subtract(&mut self, other: &FieldSet) {
        if other.members.is_empty() && other.children.is_empty() {
            return;
        }
        if !other.members.is_empty() {
            self.members.retain(|m| !other.has_member(m));
        }
        if !other.children.is_empty() {
            self.children.retain_mut(|(pe, c)| match other.child(pe) {
                Some(o) => {
                    c.subtract(o);
                    !c.is_empty()
                }
                None => true,
            });
        }
    }

    /// [`FieldSet::recursive_difference`] in place.
    pub(crate) fn subtract_recursive(&mut self, other: &FieldSet) {
        if other.members.is_empty() && other.children.is_empty() {
            return;
        }
        if !other.members.is_empty() {
            self.members.retain(|m| !other.has_member(m));
        }
        self.children.retain_mut(|(pe, c)| {
            if other.has_member(pe) {
                return false;
            }
            match other.child(pe) {
                Some(o) => {
                    c.subtract_recursive(o);
                    !c.is_empty()
                }
                None => true,
            }
        });
    }

    /// Whether every path of this set is in one of `others` (without building their union).
    pub(crate) fn covered_by(&self, others: &[&FieldSet]) -> bool {
        let members_covered = self
            .members
            .iter()
            .all(|m| others.iter().any(|o| o.has_member(m)));
        members_covered
            && self.children.iter().all(|(pe, c)| {
                let below: Vec<&FieldSet> = others.iter().filter_map(|o| o.child(pe)).collect();
                c.is_empty() || (!below.is_empty() && c.covered_by(&below))
            })
    }

    /// Remove the members `names` (field names) of the node at `prefix`, in place, dropping
    /// the node when that empties it.
    pub(crate) fn remove_fields_at(&mut self, prefix: &[PathElement], names: &[&str]) {
        match prefix.split_first() {
            None => self
                .members
                .retain(|m| !m.as_field().is_some_and(|f| names.contains(&f))),
            Some((first, rest)) => {
                if let Ok(i) = self.children.binary_search_by(|(c, _)| c.cmp(first)) {
                    self.children[i].1.remove_fields_at(rest, names);
                    if self.children[i].1.is_empty() {
                        self.children.remove(i);
                    }
                }
            }
        }
    }

    /// The members that are not also prefixes of other paths, at every level.
    pub fn leaves(&self) -> FieldSet {
        let members = self
            .members
            .iter()
            .filter(|m| self.child(m).is_none())
            .cloned()
            .collect();
        let children = self
            .children
            .iter()
            .map(|(pe, c)| (pe.clone(), c.leaves()))
            .collect();
        FieldSet { members, children }
    }

    /// The paths below `pe`, relative to it (empty when there are none).
    pub fn with_prefix(&self, pe: &PathElement) -> FieldSet {
        self.child(pe).cloned().unwrap_or_default()
    }
}

/// Builds one node of a set from members and children given in any order (walkers produce
/// them in value order, which for list items is not element order).
#[derive(Debug, Default)]
pub(crate) struct NodeBuilder {
    members: Vec<PathElement>,
    children: Vec<(PathElement, FieldSet)>,
}

impl NodeBuilder {
    /// A builder expecting about `n` members.
    pub fn with_capacity(n: usize) -> NodeBuilder {
        NodeBuilder {
            members: Vec::with_capacity(n),
            children: Vec::new(),
        }
    }

    pub fn member(&mut self, pe: PathElement) {
        self.members.push(pe);
    }

    /// Add the paths below `pe` (nothing when `set` is empty).
    pub fn child(&mut self, pe: PathElement, set: FieldSet) {
        if !set.is_empty() {
            self.children.push((pe, set));
        }
    }

    /// Add `pe` as a member when `member`, and the paths below it.
    pub fn attach(&mut self, pe: &PathElement, below: FieldSet, member: bool) {
        if member {
            self.members.push(pe.clone());
        }
        if !below.is_empty() {
            self.children.push((pe.clone(), below));
        }
    }

    /// The node: members sorted and unique, children sorted with repeated elements merged.
    pub fn finish(mut self) -> FieldSet {
        if !self.members.is_sorted() {
            self.members.sort();
        }
        self.members.dedup();
        if !self.children.is_sorted_by(|a, b| a.0 <= b.0) {
            self.children.sort_by(|a, b| a.0.cmp(&b.0));
        }
        let mut children: Vec<(PathElement, FieldSet)> = Vec::with_capacity(self.children.len());
        for (pe, c) in self.children {
            match children.last_mut() {
                Some((last, set)) if *last == pe => *set = set.union(&c),
                _ => children.push((pe, c)),
            }
        }
        FieldSet {
            members: self.members,
            children,
        }
    }
}

/// The sorted union of two sorted lists.
fn merge_sorted(a: &[PathElement], b: &[PathElement]) -> Vec<PathElement> {
    let mut out = Vec::with_capacity(a.len() + b.len());
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        match a[i].cmp(&b[j]) {
            Ordering::Less => {
                out.push(a[i].clone());
                i += 1;
            }
            Ordering::Greater => {
                out.push(b[j].clone());
                j += 1;
            }
            Ordering::Equal => {
                out.push(a[i].clone());
                i += 1;
                j += 1;
            }
        }
    }
    out.extend_from_slice(&a[i..]);
    out.extend_from_slice(&b[j..]);
    out
}

/// The sorted union of two sorted lists, taken rather than copied; `both` makes one element
/// of two equal ones.
fn merge_owned<T>(
    a: Vec<T>,
    b: Vec<T>,
    cmp: impl Fn(&T, &T) -> Ordering,
    both: impl Fn(T, T) -> T,
) -> Vec<T> {
    if a.is_empty() {
        return b;
    }
    if b.is_empty() {
        return a;
    }
    let mut out = Vec::with_capacity(a.len() + b.len());
    let mut a = a.into_iter().peekable();
    let mut b = b.into_iter().peekable();
    loop {
        let order = match (a.peek(), b.peek()) {
            (Some(x), Some(y)) => cmp(x, y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => break,
        };
        match order {
            Ordering::Less => out.extend(a.next()),
            Ordering::Greater => out.extend(b.next()),
            Ordering::Equal => {
                if let (Some(x), Some(y)) = (a.next(), b.next()) {
                    out.push(both(x, y));
                }
            }
        }
    }
    out
}

/// Walk two sorted child lists together, keeping what `f` returns for each element.
fn zip_children(
    a: &[(PathElement, FieldSet)],
    b: &[(PathElement, FieldSet)],
    f: impl Fn(Option<&FieldSet>, Option<&FieldSet>) -> Option<FieldSet>,
) -> Vec<(PathElement, FieldSet)> {
    let mut out = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < a.len() || j < b.len() {
        let order = match (a.get(i), b.get(j)) {
            (Some(x), Some(y)) => x.0.cmp(&y.0),
            (Some(_), None) => Ordering::Less,
            _ => Ordering::Greater,
        };
        let (pe, got) = match order {
            Ordering::Less => {
                i += 1;
                (&a[i - 1].0, f(Some(&a[i - 1].1), None))
            }
            Ordering::Greater => {
                j += 1;
                (&b[j - 1].0, f(None, Some(&b[j - 1].1)))
            }
            Ordering::Equal => {
                i += 1;
                j += 1;
                (&a[i - 1].0, f(Some(&a[i - 1].1), Some(&b[j - 1].1)))
            }
        };
        if let Some(s) = got {
            out.push((pe.clone(), s));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn f(s: &str) -> PathElement {
        PathElement::field(s)
    }

    fn set(paths: &[&[PathElement]]) -> FieldSet {
        FieldSet::from_paths(paths.iter().copied())
    }

    #[test]
    fn insert_has_and_size() {
        let s = set(&[&[f("a"), f("b")], &[f("a")], &[f("c")]]);
        assert!(s.has(&[f("a")]));
        assert!(s.has(&[f("a"), f("b")]));
        assert!(!s.has(&[f("b")]));
        assert!(!s.has(&[]));
        assert_eq!(s.size(), 3);
        assert_eq!(
            s.paths(),
            vec![vec![f("a")], vec![f("c")], vec![f("a"), f("b")]]
        );
    }

    #[test]
    fn union_intersection_difference() {
        let a = set(&[&[f("a"), f("b")], &[f("a"), f("c")], &[f("d")]]);
        let b = set(&[&[f("a"), f("c")], &[f("e")]]);
        assert_eq!(
            a.union(&b),
            set(&[&[f("a"), f("b")], &[f("a"), f("c")], &[f("d")], &[f("e")]])
        );
        assert_eq!(a.intersection(&b), set(&[&[f("a"), f("c")]]));
        assert_eq!(a.difference(&b), set(&[&[f("a"), f("b")], &[f("d")]]));
        assert!(b.difference(&b).is_empty());
        // Difference prunes children it empties.
        assert!(b.difference(&b).children().is_empty());
    }

    #[test]
    fn recursive_difference_removes_below_members() {
        let a = set(&[&[f("status"), f("x")], &[f("spec"), f("y")], &[f("status")]]);
        let reset = set(&[&[f("status")]]);
        assert_eq!(
            a.difference(&reset),
            set(&[&[f("spec"), f("y")], &[f("status"), f("x")]])
        );
        assert_eq!(a.recursive_difference(&reset), set(&[&[f("spec"), f("y")]]));
    }

    #[test]
    fn in_place_operations_match_the_copying_ones() {
        let k = |n: i64| PathElement::key(vec![("port".into(), json!(n))]);
        let sets = [
            FieldSet::new(),
            set(&[&[f("a")]]),
            set(&[&[f("a"), f("b")], &[f("a"), f("c")], &[f("d")]]),
            set(&[&[f("a"), f("c")], &[f("e")], &[f("a")]]),
            set(&[&[f("status"), f("x")], &[f("spec"), f("y")], &[f("status")]]),
            set(&[&[f("p"), k(9)], &[f("p"), k(10), f("n")], &[f("p"), k(10)]]),
            set(&[&[f("p"), k(10), f("n")], &[f("p"), k(11)], &[f("spec")]]),
        ];
        for a in &sets {
            for b in &sets {
                let mut x = a.clone();
                x.absorb(b.clone());
                assert_eq!(x, a.union(b), "{a:?} ∪ {b:?}");
                let mut x = a.clone();
                x.subtract(b);
                assert_eq!(x.paths(), a.difference(b).paths(), "{a:?} − {b:?}");
                let mut x = a.clone();
                x.subtract_recursive(b);
                assert_eq!(x.paths(), a.recursive_difference(b).paths());
            }
        }
    }

    #[test]
    fn coverage_and_in_place_removal() {
        let a = set(&[&[f("a"), f("b")], &[f("c")]]);
        let b = set(&[&[f("a"), f("b")]]);
        let c = set(&[&[f("c")], &[f("d")]]);
        assert!(a.covered_by(&[&b, &c]));
        assert!(!a.covered_by(&[&b]));
        assert!(FieldSet::new().covered_by(&[]));
        let mut m = set(&[
            &[f("metadata"), f("name")],
            &[f("metadata"), f("labels"), f("x")],
            &[f("kind")],
        ]);
        m.remove_fields_at(&[], &["kind", "metadata"]);
        m.remove_fields_at(&[f("metadata")], &["name"]);
        assert_eq!(m, set(&[&[f("metadata"), f("labels"), f("x")]]));
        let mut only = set(&[&[f("metadata"), f("name")]]);
        only.remove_fields_at(&[f("metadata")], &["name"]);
        assert!(only.is_empty() && only.children().is_empty());
    }

    #[test]
    fn leaves_drop_members_with_children() {
        let k = PathElement::key(vec![("name".into(), json!("a"))]);
        let s = set(&[
            &[f("c"), k.clone()],
            &[f("c"), k.clone(), f("image")],
            &[f("x")],
        ]);
        assert_eq!(s.leaves(), set(&[&[f("c"), k, f("image")], &[f("x")]]));
    }
}
