//! The update of the common write: a manager changes fields no other manager owns (a kubelet
//! writing its pod's status, a controller its object's status or replicas). Decoding every
//! entry's FieldsV1, taking nothing from them and encoding them again cost more than the rest
//! of the tracking; here the other entries are only checked, where the change reaches into
//! them, and kept as stored, while the writer's own entry is decoded, updated and encoded as
//! [`super::update`] does it. Anything out of the ordinary — the change touches another
//! manager's fields, entries not as this server writes them, a schema that may have changed
//! since they were recorded (a custom resource's), the cap on update entries — goes the
//! general way.

use serde_json::Value;

use super::fieldsv1::{self, parse_element};
use super::managed::{self, Managed, ManagerId, APPLY, UPDATE};
use super::ops::Comparison;
use super::set::FieldSet;
use super::typed::root_ty;
use super::updater::Updater;
use super::{
    manager_name, record_compared, update_identifier, ApplyError, Request, MAX_UPDATE_MANAGERS,
};
use crate::schema::SchemaRef;

/// One stored entry (at `index` of the list) and who wrote it.
struct Entry<'v> {
    index: usize,
    operation: &'v str,
    identifier: String,
    value: &'v Value,
}

impl<'v> Entry<'v> {
    /// Read a stored entry, if it is exactly as [`Managed::encode`] writes one: the known
    /// members only, no empty strings, a valid operation, apiVersion and fieldsType, a time in
    /// whole seconds (or none) and a non-empty FieldsV1 object.
    fn read(index: usize, value: &'v Value) -> Option<Entry<'v>> {
        let e = value.as_object()?;
        let text = |k: &str| -> Option<Option<&'v str>> {
            match e.get(k) {
                None => Some(None),
                Some(Value::String(s)) if !s.is_empty() => Some(Some(s.as_str())),
                Some(_) => None,
            }
        };
        let manager = text("manager")?.unwrap_or_default();
        let operation = text("operation")??;
        let api_version = text("apiVersion")??;
        let subresource = text("subresource")?.unwrap_or_default();
        let time = text("time")?;
        if (operation != APPLY && operation != UPDATE) || text("fieldsType")?? != "FieldsV1" {
            return None;
        }
        const KNOWN: [&str; 7] = [
            "manager",
            "operation",
            "apiVersion",
            "time",
            "fieldsType",
            "subresource",
            "fieldsV1",
        ];
        if e.keys().any(|k| !KNOWN.contains(&k.as_str())) {
            return None;
        }
        let fields = e.get("fieldsV1")?.as_object()?;
        // A set as written: some path at the top, and no "." there.
        if fields.is_empty()
            || fields
                .keys()
                .any(|k| !matches!(parse_element(k), Ok(Some(_))))
        {
            return None;
        }
        if time.is_some_and(|t| managed::normalize_time(t).as_deref() != Some(t)) {
            return None;
        }
        let identifier = ManagerId {
            manager: manager.to_string(),
            operation: operation.to_string(),
            api_version: if operation == APPLY {
                String::new()
            } else {
                api_version.to_string()
            },
            subresource: subresource.to_string(),
        }
        .identifier();
        Some(Entry {
            index,
            operation,
            identifier,
            value,
        })
    }

    /// Whether the entry owns any of `set`'s paths (an unreadable entry counts as owning).
    fn owns_any(&self, set: &FieldSet) -> bool {
        match self.value.get("fieldsV1").and_then(Value::as_object) {
            Some(fields) => fieldsv1::intersects(fields, set).unwrap_or(true),
            None => true,
        }
    }
}

/// [`super::update`] for a write whose managers come from the live object and whose change
/// reaches no other manager's fields. None (with nothing changed) when the general way must
/// decide.
pub(super) fn update(
    schema: Option<SchemaRef<'_>>,
    live: &Value,
    new: &mut Value,
    req: &Request<'_>,
    ignored: &FieldSet,
) -> Option<Result<(), ApplyError>> {
    // Built-in schemas do not change under stored entries; a custom resource's may have, and
    // the general way reconciles every entry with it.
    if !schema.is_some_and(|s| s.is_builtin()) {
        return None;
    }
    let stored = live.get("metadata")?.get("managedFields")?;
    let list = stored.as_array().filter(|a| !a.is_empty())?;
    // The live object's entries are the ones to update unless the main resource's write
    // brings others (a subresource's write always keeps the live ones).
    let sent = new.get("metadata").and_then(|m| m.get("managedFields"));
    let sent_same = sent.is_some_and(|s| s == stored);
    if req.subresource.is_empty() && !sent_same && sent.is_some_and(|s| !s.is_null()) {
        return None;
    }
    let entries: Vec<Entry<'_>> = list
        .iter()
        .enumerate()
        .map(|(i, v)| Entry::read(i, v))
        .collect::<Option<_>>()?;
    let writer = update_identifier(manager_name(req), req);
    let (own, others): (Vec<Entry<'_>>, Vec<Entry<'_>>) =
        entries.into_iter().partition(|e| e.identifier == writer);
    let mut ids: Vec<&str> = others.iter().map(|e| e.identifier.as_str()).collect();
    ids.sort_unstable();
    let updaters = others.iter().filter(|e| e.operation == UPDATE).count() + 1;
    if own.len() > 1 || ids.windows(2).any(|w| w[0] == w[1]) || updaters > MAX_UPDATE_MANAGERS {
        return None;
    }
    let u = Updater {
        ty: root_ty(schema),
        ignored,
    };
    let cmp: Comparison = u.compare(live, new);
    if others
        .iter()
        .any(|e| e.owns_any(&cmp.modified) || e.owns_any(&cmp.added) || e.owns_any(&cmp.removed))
    {
        return None;
    }
    // The writer's entry alone goes through the update; the others keep what they own.
    let mut mine = match own.first() {
        Some(e) => Managed::decode_list(std::slice::from_ref(e.value)).ok()?,
        None => Managed::new(),
    };
    let taken = new
        .get_mut("metadata")
        .and_then(Value::as_object_mut)
        .and_then(|m| m.remove("managedFields"));
    if let Err(e) = record_compared(&u, cmp, &mut mine, manager_name(req), req) {
        // As the general way: the write keeps the live entries.
        managed::put_entries(new, stored.clone());
        return Some(Err(e));
    }
    // The others' entries as they came: moved out of the write when it carried the same
    // list, copied from the live object otherwise.
    let mut taken = match taken {
        Some(Value::Array(a)) if sent_same => a,
        _ => Vec::new(),
    };
    let mut take = |e: &Entry<'_>| match taken.get_mut(e.index) {
        Some(v) => std::mem::take(v),
        None => e.value.clone(),
    };
    let mut out: Vec<Value> = others.iter().map(&mut take).collect();
    if let Value::Array(mine) = mine.encode() {
        out.extend(mine);
    }
    if out.is_empty() {
        return Some(Ok(()));
    }
    managed::sort_entries(&mut out);
    managed::put_entries(new, Value::Array(out));
    Some(Ok(()))
}

#[cfg(test)]
#[path = "kept_tests.rs"]
mod tests;
