//! The managers' bookkeeping of structured-merge-diff's `merge.Updater`: what an update takes
//! from other managers, what an apply merges, conflicts with, and prunes. All API versions are
//! read alike (the server keeps one shape per resource), so conversion is the identity.

use std::collections::BTreeMap;

use serde_json::Value;

use super::ops::{compare, errors_string, merge, remove_items, to_field_set, Comparison};
use super::set::FieldSet;
use super::typed::{ensure_named_fields_are_members, reconcile_with_schema, Ty};
use super::value::equals;

/// A manager's fields, with the API version it worked at and whether it applied them.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct VersionedSet {
    pub set: FieldSet,
    pub api_version: String,
    pub applied: bool,
}

/// Managers by identifier.
pub(crate) type Managers = BTreeMap<String, VersionedSet>;

/// Why an apply failed inside the updater.
#[derive(Debug)]
pub(crate) enum UpdateError {
    /// Fields other managers own, by manager (identifier order).
    Conflicts(Vec<(String, FieldSet)>),
    /// The configuration could not be merged.
    Merge(String),
}

/// The updater for one type, with the fields whose changes nobody owns (reset fields).
pub(crate) struct Updater<'a, 'i> {
    pub ty: Ty<'a>,
    pub ignored: &'i FieldSet,
}

impl Updater<'_, '_> {
    fn filter(&self, mut set: FieldSet) -> FieldSet {
        set.subtract_recursive(self.ignored);
        set
    }

    /// Compare old with new and take every changed field from the other managers (or report
    /// them as conflicts when not forced); removed fields leave everyone's sets.
    fn take(
        &self,
        old: &Value,
        new: &Value,
        managers: &mut Managers,
        workflow: &str,
        force: bool,
    ) -> Result<Comparison, UpdateError> {
        let cmp = self.compare(old, new);
        self.take_compared(cmp, managers, workflow, force)
    }

    /// What `new` changed relative to `old`, without the fields nobody owns.
    pub fn compare(&self, old: &Value, new: &Value) -> Comparison {
        let mut cmp = compare(self.ty, old, new);
        cmp.exclude(self.ignored);
        cmp
    }

    /// [`Updater::take`] of a comparison already made.
    fn take_compared(
        &self,
        cmp: Comparison,
        managers: &mut Managers,
        workflow: &str,
        force: bool,
    ) -> Result<Comparison, UpdateError> {
        let mut conflicts = Vec::new();
        if managers.keys().any(|m| m != workflow) {
            let changed = cmp.modified.union(&cmp.added);
            for (manager, vs) in managers.iter() {
                if manager == workflow {
                    continue;
                }
                let owned = vs.set.intersection(&changed);
                if !owned.is_empty() {
                    conflicts.push((manager.clone(), owned));
                }
            }
        }
        if !force && !conflicts.is_empty() {
            return Err(UpdateError::Conflicts(conflicts));
        }
        for (manager, owned) in &conflicts {
            if let Some(vs) = managers.get_mut(manager) {
                vs.set.subtract(owned);
            }
        }
        if !cmp.removed.is_empty() {
            for (manager, vs) in managers.iter_mut() {
                if manager != workflow {
                    vs.set.subtract(&cmp.removed);
                }
            }
        }
        managers.retain(|_, vs| !vs.set.is_empty());
        Ok(cmp)
    }

    /// Bring every manager's set in line with the current schema (SMD's
    /// `reconcileManagedFieldsWithSchemaChanges`): fields of maps and lists that became atomic
    /// since they were recorded are owned whole.
    fn reconcile(&self, managers: &mut Managers) {
        for vs in managers.values_mut() {
            if let Some(set) = reconcile_with_schema(&vs.set, self.ty) {
                vs.set = set;
            }
        }
    }

    /// A non-apply write: `manager` gets every field `new` changed relative to `live` (the
    /// field manager compares first and calls [`Updater::update_compared`]).
    #[cfg(test)]
    pub fn update(
        &self,
        live: &Value,
        new: &Value,
        version: &str,
        managers: &mut Managers,
        manager: &str,
    ) -> Result<(), UpdateError> {
        self.update_compared(self.compare(live, new), version, managers, manager)
    }

    /// [`Updater::update`] of a comparison already made ([`Updater::compare`]).
    pub fn update_compared(
        &self,
        cmp: Comparison,
        version: &str,
        managers: &mut Managers,
        manager: &str,
    ) -> Result<(), UpdateError> {
        self.reconcile(managers);
        let cmp = self.take_compared(cmp, managers, manager, true)?;
        let mut set = managers
            .remove(manager)
            .map(|vs| vs.set)
            .unwrap_or_default();
        set.subtract(&cmp.removed);
        set.absorb(cmp.modified);
        set.absorb(cmp.added);
        let set = self.filter(set);
        if !set.is_empty() {
            managers.insert(
                manager.to_string(),
                VersionedSet {
                    set,
                    api_version: version.to_string(),
                    applied: false,
                },
            );
        }
        Ok(())
    }

    /// Server-side apply: merge `config` into `live`, record the configuration's fields as
    /// `manager`'s, prune what it stopped applying, and check conflicts. Returns None when the
    /// object did not change.
    pub fn apply(
        &self,
        live: &Value,
        config: &Value,
        version: &str,
        managers: &mut Managers,
        manager: &str,
        force: bool,
    ) -> Result<Option<Value>, UpdateError> {
        self.reconcile(managers);
        let merged = merge(self.ty, live, config).map_err(|e| {
            UpdateError::Merge(format!("failed to merge config: {}", errors_string(&e)))
        })?;
        let set = self.filter(to_field_set(self.ty, config));
        let last = managers.insert(
            manager.to_string(),
            VersionedSet {
                set,
                api_version: version.to_string(),
                applied: true,
            },
        );
        let new = match &last {
            Some(last) if !last.set.is_empty() => {
                self.prune(merged, managers, &last.set, &last.api_version)
            }
            _ => merged,
        };
        if let Err(e) = self.take(live, &new, managers, manager, force) {
            // A failed apply leaves the managers as they were.
            match last {
                Some(last) => managers.insert(manager.to_string(), last),
                None => managers.remove(manager),
            };
            return Err(e);
        }
        Ok((!equals(live, &new)).then_some(new))
    }

    fn ensure(&self, set: &FieldSet) -> FieldSet {
        ensure_named_fields_are_members(set, Some(self.ty))
    }

    /// Remove what `manager` applied last time but not this time, unless someone else owns
    /// it: remove the whole last set, add back what any manager owns, then add back what the
    /// applier never owned (SMD's `prune`, `addBackOwnedItems`, `addBackDanglingItems`).
    fn prune(
        &self,
        merged: Value,
        managers: &Managers,
        last: &FieldSet,
        last_version: &str,
    ) -> Value {
        let owned: Vec<&FieldSet> = managers.values().map(|vs| &vs.set).collect();
        if last.covered_by(&owned) {
            // Everything applied last time is still owned: pruning removes nothing (SMD's
            // walk would only turn an empty object into null).
            return if merged.as_object().is_some_and(|o| o.is_empty()) {
                Value::Null
            } else {
                merged
            };
        }
        let merged_set = self.ensure(&to_field_set(self.ty, &merged));
        let pruned = remove_items(self.ty, &merged, &self.ensure(last));
        let pruned = self.add_back_owned(&merged, &merged_set, pruned, managers, last_version);
        self.add_back_dangling(&merged, &merged_set, &pruned, last)
    }

    fn add_back_owned(
        &self,
        merged: &Value,
        merged_set: &FieldSet,
        mut pruned: Value,
        managers: &Managers,
        pruned_version: &str,
    ) -> Value {
        let mut by_version: BTreeMap<&str, FieldSet> = BTreeMap::new();
        for vs in managers.values() {
            let e = by_version.entry(vs.api_version.as_str()).or_default();
            *e = e.union(&vs.set);
        }
        // The pruned version first, then the others (one object shape serves them all).
        let mut order: Vec<&str> = Vec::with_capacity(by_version.len());
        if by_version.contains_key(pruned_version) {
            order.push(pruned_version);
        }
        order.extend(by_version.keys().copied().filter(|v| *v != pruned_version));
        for version in order {
            let managed = &by_version[version];
            let pruned_set = self.ensure(&to_field_set(self.ty, &pruned));
            let keep = pruned_set.union(&self.ensure(managed));
            pruned = remove_items(self.ty, merged, &merged_set.difference(&keep));
        }
        pruned
    }

    fn add_back_dangling(
        &self,
        merged: &Value,
        merged_set: &FieldSet,
        pruned: &Value,
        last: &FieldSet,
    ) -> Value {
        let pruned_set = self.ensure(&to_field_set(self.ty, pruned));
        let last = self.ensure(last);
        let drop = merged_set.difference(&pruned_set).intersection(&last);
        remove_items(self.ty, merged, &drop)
    }
}

#[cfg(test)]
#[path = "updater_tests.rs"]
mod tests;
