//! Server-side apply and field ownership (`metadata.managedFields`), as Kubernetes v1.32's
//! field manager does it over structured-merge-diff.
//!
//! Two entry points, both pure:
//!
//! - [`update`] runs on every create, update and non-apply patch: the fields the write changed
//!   become the writer's (an `Update` entry for its manager and API version), taken from
//!   whoever owned them before;
//! - [`apply`] runs on `application/apply-patch+yaml` patches: the applied configuration is
//!   merged into the live object by the type's schema, conflicts with other managers are
//!   reported (or, forced, ownership moves), and fields the applier stopped applying are
//!   removed unless someone else owns them.
//!
//! Around the merge engine sit Kubernetes' layers, in its order: the version check, the
//! last-applied annotation (kept in sync for `kubectl`, and client-side-applied fields taken
//! over without conflict), the `before-first-apply` entry for objects that were never tracked,
//! the cap of ten update entries (older ones fold into `ancient-changes`), manager
//! identifiers, entry times, and the fields never tracked (apiVersion, kind, and the
//! server-set metadata). `ignored` (Kubernetes' reset fields, such as `status` on the main
//! resource) are neither owned nor conflicted on.
//!
//! Writes through `/scale` are tracked on the Scale object: [`ScaleHandler`] translates the
//! parent's managedFields to the Scale's and back.
//!
//! Every API version of a resource is read with the same schema (this server keeps one shape
//! per resource), so entries at other versions are compared without conversion.

mod created;
mod fieldsv1;
mod kept;
mod lastapplied;
mod managed;
mod ops;
mod path;
mod scale;
mod set;
mod typed;
mod updater;
mod value;
mod zero;

#[cfg(test)]
mod tests;

use serde_json::{Map, Value};

pub use fieldsv1::{decode as decode_fields, encode as encode_fields, FieldsError};
pub use managed::Managed;
pub use path::{path_string, PathElement};
pub use scale::ScaleHandler;
pub use set::FieldSet;

use crate::schema::SchemaRef;
use managed::{ManagerId, APPLY, UPDATE};
use typed::{root_ty, Ty};
use updater::{UpdateError, Updater};

/// The fields a manager owns when it applies `obj` (structured-merge-diff's `ToFieldSet`):
/// leaves, list items and map entries. Without a schema every value is read as deduced
/// (maps merge key by key, lists are atomic).
pub fn fields_of(schema: Option<SchemaRef<'_>>, obj: &Value) -> FieldSet {
    ops::to_field_set(root_ty(schema), obj)
}

/// What a write changed: the fields `new` modified or added relative to `old`, and the
/// fields it removed.
pub fn compare(schema: Option<SchemaRef<'_>>, old: &Value, new: &Value) -> (FieldSet, FieldSet) {
    let c = ops::compare(root_ty(schema), old, new);
    (c.modified.union(&c.added), c.removed)
}

/// Merge an applied configuration into a live object by the schema's merge rules, without
/// any ownership bookkeeping. Fails on configurations SMD cannot merge (duplicate keys).
pub fn merge(
    schema: Option<SchemaRef<'_>>,
    live: &Value,
    config: &Value,
) -> Result<Value, ApplyError> {
    ops::merge(root_ty(schema), live, config).map_err(|e| {
        ApplyError::Internal(format!(
            "failed to merge config: {}",
            ops::errors_string(&e)
        ))
    })
}

/// Remove the fields of `set` from an object (maps and lists the removal empties become
/// null, as in structured-merge-diff).
pub fn remove(schema: Option<SchemaRef<'_>>, obj: &Value, set: &FieldSet) -> Value {
    ops::remove_items(root_ty(schema), obj, set)
}

/// Keep only the fields of `set` (pass the leaves of a manager's set to extract what it
/// manages).
pub fn extract(schema: Option<SchemaRef<'_>>, obj: &Value, set: &FieldSet) -> Value {
    ops::extract_items(root_ty(schema), obj, set)
}

/// Who writes, and how: the request's field manager, the endpoint's group/version and kind,
/// the subresource (empty for the main resource), the time to record and `force`.
#[derive(Debug, Clone, Copy)]
pub struct Request<'a> {
    /// The `fieldManager` (Kubernetes records `unknown` for an empty one).
    pub manager: &'a str,
    /// The endpoint's group/version, e.g. `apps/v1`, or `v1` for the core group.
    pub api_version: &'a str,
    /// The endpoint's kind, e.g. `Deployment`.
    pub kind: &'a str,
    /// `status`, `scale`, ... or empty for the main resource.
    pub subresource: &'a str,
    /// The time of the write (RFC 3339; recorded in whole seconds, UTC).
    pub now: &'a str,
    /// Apply only: take fields other managers own instead of reporting conflicts.
    pub force: bool,
}

/// One field another manager owns, as Kubernetes reports it in a 409's causes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// The owner as the message shows it, e.g. `"kubectl-client-side-apply" using apps/v1`.
    pub manager: String,
    /// The field, e.g. `.spec.replicas`.
    pub field: String,
    /// The cause's message: `conflict with <manager>`.
    pub message: String,
    /// The owner's identifier, for grouping.
    identifier: String,
}

impl Conflict {
    /// The cause type Kubernetes gives apply conflicts.
    pub const CAUSE_TYPE: &'static str = "FieldManagerConflict";
}

/// Why a write failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ApplyError {
    /// 409 Conflict (reason `Conflict`): other managers own fields the configuration
    /// changes. [`ApplyError::message`] is the Status message, each conflict a cause.
    Conflicts(Vec<Conflict>),
    /// 400 Bad Request, with this message.
    BadRequest(String),
    /// A failure Kubernetes reports as a plain error: a 500 Status with this message and no
    /// reason (e.g. fields the schema does not declare in an apply configuration).
    Internal(String),
}

impl ApplyError {
    /// The Status message, exactly as Kubernetes words it.
    pub fn message(&self) -> String {
        match self {
            ApplyError::Conflicts(c) => conflict_message(c),
            ApplyError::BadRequest(m) | ApplyError::Internal(m) => m.clone(),
        }
    }

    /// The HTTP status code of the error.
    pub fn code(&self) -> u16 {
        match self {
            ApplyError::Conflicts(_) => 409,
            ApplyError::BadRequest(_) => 400,
            ApplyError::Internal(_) => 500,
        }
    }
}

impl std::fmt::Display for ApplyError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for ApplyError {}

/// `Apply failed with 1 conflict: conflict with "m" using apps/v1: .spec.replicas`, or, for
/// several, the conflicts grouped by manager (managers in identifier order).
fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [c] = conflicts {
        return format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            c.manager, c.field
        );
    }
    let mut ids: Vec<&str> = conflicts.iter().map(|c| c.identifier.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut lines = Vec::new();
    for id in ids {
        let mine: Vec<&Conflict> = conflicts.iter().filter(|c| c.identifier == id).collect();
        lines.push(format!("conflicts with {}:", mine[0].manager));
        lines.extend(mine.iter().map(|c| format!("- {}", c.field)));
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

/// Turn the updater's conflicts (manager identifier, fields) into reported conflicts.
fn conflicts_of(found: &[(String, FieldSet)]) -> Vec<Conflict> {
    let mut out = Vec::new();
    for (identifier, set) in found {
        let manager = ManagerId::parse(identifier).describe();
        set.each_path(&mut |p| {
            out.push(Conflict {
                manager: manager.clone(),
                field: path_string(p),
                message: format!("conflict with {manager}"),
                identifier: identifier.clone(),
            })
        });
    }
    out
}

/// The top-level fields Kubernetes never records as owned (`metadata` itself among them).
const STRIPPED_ROOT: &[&str] = &["apiVersion", "kind", "metadata"];

/// The metadata fields Kubernetes never records as owned.
const STRIPPED_METADATA: &[&str] = &[
    "name",
    "namespace",
    "creationTimestamp",
    "selfLink",
    "uid",
    "clusterName",
    "generation",
    "managedFields",
    "resourceVersion",
];

/// Remove the never-tracked fields from a manager's set, dropping the manager when nothing is
/// left.
fn strip(managed: &mut Managed, identifier: &str) {
    if let Some(vs) = managed.fields.get_mut(identifier) {
        vs.set.remove_fields_at(&[], STRIPPED_ROOT);
        vs.set
            .remove_fields_at(&[PathElement::field("metadata")], STRIPPED_METADATA);
        if vs.set.is_empty() {
            managed.fields.remove(identifier);
        }
    }
}

/// The most update entries kept; older ones fold into `ancient-changes` buckets.
const MAX_UPDATE_MANAGERS: usize = 10;

/// Fold the oldest update entries into one `ancient-changes` entry per API version until at
/// most [`MAX_UPDATE_MANAGERS`] update entries remain.
fn cap_update_managers(managed: &mut Managed) {
    let mut updaters: Vec<String> = managed
        .fields
        .iter()
        .filter(|(_, vs)| !vs.applied)
        .map(|(id, _)| id.clone())
        .collect();
    if updaters.len() <= MAX_UPDATE_MANAGERS {
        return;
    }
    let secs = |id: &String| {
        managed
            .times
            .get(id)
            .and_then(|t| managed::parse_time(t))
            .unwrap_or(0)
    };
    updaters.sort_by(|a, b| secs(a).cmp(&secs(b)).then_with(|| a.cmp(b)));
    let mut first_of_version: std::collections::BTreeMap<String, String> = Default::default();
    let mut length = updaters.len();
    for id in updaters {
        if length <= MAX_UPDATE_MANAGERS {
            break;
        }
        let Some(vs) = managed.fields.get(&id).cloned() else {
            continue;
        };
        let time = managed.times.get(&id).cloned();
        let version = vs.api_version.clone();
        let bucket = ManagerId {
            manager: "ancient-changes".into(),
            operation: UPDATE.into(),
            api_version: version.clone(),
            subresource: String::new(),
        }
        .identifier();
        let Some(first) = first_of_version.get(&version).cloned() else {
            first_of_version.insert(version, id);
            continue;
        };
        if !managed.fields.contains_key(&bucket) {
            if let Some(s) = managed.fields.remove(&first) {
                managed.fields.insert(bucket.clone(), s);
            }
        }
        if let Some(b) = managed.fields.get_mut(&bucket) {
            b.set = vs.set.union(&b.set);
            b.api_version = vs.api_version.clone();
            b.applied = vs.applied;
        }
        managed.fields.remove(&id);
        length -= 1;
        match time {
            Some(t) => managed.times.insert(bucket, t),
            None => managed.times.remove(&bucket),
        };
    }
}

/// The object a create (or a first apply) starts from: Kubernetes' empty object of the kind,
/// the Go zero value for built-in kinds and just apiVersion and kind for custom resources.
fn empty_object(req: &Request<'_>) -> Value {
    // Parsed once: every create starts from one.
    static PARSED: std::sync::OnceLock<Vec<Value>> = std::sync::OnceLock::new();
    let parsed = PARSED.get_or_init(|| {
        zero::ZERO_OBJECTS
            .iter()
            .map(|(_, _, json)| serde_json::from_str(json).unwrap_or(Value::Null))
            .collect()
    });
    let zero = zero::ZERO_OBJECTS
        .binary_search_by(|(v, k, _)| (*v, *k).cmp(&(req.api_version, req.kind)))
        .ok()
        .and_then(|i| parsed.get(i));
    let mut m = match zero {
        Some(Value::Object(m)) => m.clone(),
        _ => Map::new(),
    };
    m.insert("apiVersion".into(), Value::String(req.api_version.into()));
    m.insert("kind".into(), Value::String(req.kind.into()));
    Value::Object(m)
}

fn normalized_now(req: &Request<'_>) -> String {
    managed::normalize_time(req.now).unwrap_or_else(|| req.now.to_string())
}

fn manager_name<'a>(req: &Request<'a>) -> &'a str {
    if req.manager.is_empty() {
        "unknown"
    } else {
        req.manager
    }
}

/// Record an update by `manager` (Kubernetes' update path below the decoding: the cap, the
/// identifier, the per-operation bookkeeping, stripping, and the merge engine's update).
fn record_update(
    ty: Ty<'_>,
    live: &Value,
    new: &Value,
    managed: &mut Managed,
    manager: &str,
    req: &Request<'_>,
    ignored: &FieldSet,
) -> Result<(), ApplyError> {
    let u = Updater { ty, ignored };
    record_compared(&u, u.compare(live, new), managed, manager, req)
}

/// [`record_update`] of a comparison already made.
fn record_compared(
    u: &Updater<'_, '_>,
    cmp: ops::Comparison,
    managed: &mut Managed,
    manager: &str,
    req: &Request<'_>,
) -> Result<(), ApplyError> {
    const CURRENT: &str = "current-operation";
    let id = update_identifier(manager, req);
    u.update_compared(cmp, req.api_version, &mut managed.fields, CURRENT)
        .map_err(|e| ApplyError::Internal(format!("failed to update ManagedFields: {e:?}")))?;
    strip(managed, CURRENT);
    if let Some(vs) = managed.fields.remove(CURRENT) {
        let merged = match managed.fields.remove(&id) {
            Some(previous) => {
                let mut set = vs.set;
                set.absorb(previous.set);
                updater::VersionedSet { set, ..vs }
            }
            None => vs,
        };
        managed.fields.insert(id.clone(), merged);
        managed.times.insert(id, normalized_now(req));
    }
    cap_update_managers(managed);
    Ok(())
}

/// The identifier of `manager`'s `Update` entry for a write at the request's version and
/// subresource.
fn update_identifier(manager: &str, req: &Request<'_>) -> String {
    ManagerId {
        manager: manager.to_string(),
        operation: UPDATE.into(),
        api_version: req.api_version.into(),
        subresource: req.subresource.into(),
    }
    .identifier()
}

/// Kubernetes' choice of managedFields for a write: the request's own, unless it sent an
/// empty list (a reset) or none (or unreadable ones): then the live object's. A subresource
/// write always keeps the live object's.
fn decode_live_or_new(live: &Value, new: &Value, subresource: bool) -> Managed {
    let of = |o: &Value| Managed::decode(o).unwrap_or_default();
    if subresource {
        return of(live);
    }
    let sent = new.get("metadata").and_then(|m| m.get("managedFields"));
    if managed::is_reset(sent) {
        return Managed::new();
    }
    match Managed::decode(new) {
        Ok(m) if !m.is_empty() => m,
        _ => of(live),
    }
}

/// Record a non-apply write (create, update, patch): the fields `new` changed relative to
/// `old` (None for a create) become `req.manager`'s (an `Update` entry), taken from other
/// managers, and `new.metadata.managedFields` is written. `new` may carry managedFields of its
/// own: an empty list resets them, none keeps the live ones. An object whose live version
/// has no managedFields is not tracked from an update (only from its creation or its first
/// apply).
///
/// As Kubernetes' `UpdateNoErrors`, a failure leaves the old managedFields on `new`; the
/// error is returned only to be logged.
pub fn update(
    schema: Option<SchemaRef<'_>>,
    old: Option<&Value>,
    new: &mut Value,
    req: &Request<'_>,
    ignored: &FieldSet,
) -> Result<(), ApplyError> {
    if old.is_none() && req.subresource.is_empty() && !carries_managed_fields(new) {
        if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
            m.remove("managedFields");
        }
        let empty = empty_object(req);
        if let Ok(fields) = created::fields_v1(root_ty(schema), &empty, new, ignored) {
            write_created(new, fields, req);
            return Ok(());
        }
    }
    update_tracked(schema, old, new, req, ignored)
}

/// Whether a write brings managedFields of its own (an empty list or an empty entry, which
/// reset them, do not count).
fn carries_managed_fields(obj: &Value) -> bool {
    match obj.get("metadata").and_then(|m| m.get("managedFields")) {
        None | Some(Value::Null) => false,
        sent => !managed::is_reset(sent),
    }
}

/// Write the managedFields of a create by a manager with no entries: one `Update` entry with
/// the fields it set (none when it set nothing tracked), as [`Managed::write_to`] writes it.
fn write_created(obj: &mut Value, fields: Map<String, Value>, req: &Request<'_>) {
    if fields.is_empty() || !obj.is_object() {
        return;
    }
    let mut entry = Map::new();
    let now = normalized_now(req);
    for (k, v) in [
        ("manager", manager_name(req)),
        ("operation", UPDATE),
        ("apiVersion", req.api_version),
        ("time", now.as_str()),
        ("fieldsType", "FieldsV1"),
    ] {
        if !v.is_empty() {
            entry.insert(k.into(), Value::String(v.into()));
        }
    }
    entry.insert("fieldsV1".into(), Value::Object(fields));
    managed::put_entries(obj, Value::Array(vec![Value::Object(entry)]));
}

/// [`update`] in general: decode the managers, compare, take, strip, cap and encode.
fn update_tracked(
    schema: Option<SchemaRef<'_>>,
    old: Option<&Value>,
    new: &mut Value,
    req: &Request<'_>,
    ignored: &FieldSet,
) -> Result<(), ApplyError> {
    let empty;
    let live = match old {
        Some(o) => o,
        None => {
            empty = empty_object(req);
            &empty
        }
    };
    if let Some(done) = kept::update(schema, live, new, req, ignored) {
        return done;
    }
    update_decoded(schema, live, new, req, ignored)
}

/// [`update_tracked`] with every entry decoded, updated and encoded again.
fn update_decoded(
    schema: Option<SchemaRef<'_>>,
    live: &Value,
    new: &mut Value,
    req: &Request<'_>,
    ignored: &FieldSet,
) -> Result<(), ApplyError> {
    let mut managed = decode_live_or_new(live, new, !req.subresource.is_empty());
    if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
        m.remove("managedFields");
    }
    let live_uid = live
        .get("metadata")
        .and_then(|m| m.get("uid"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if managed.is_empty() && !live_uid.is_empty() {
        return Ok(());
    }
    let result = record_update(
        root_ty(schema),
        live,
        new,
        &mut managed,
        manager_name(req),
        req,
        ignored,
    );
    match result {
        Ok(()) => {
            managed.write_to(new);
            Ok(())
        }
        Err(e) => {
            if let Some(fields) = live.get("metadata").and_then(|m| m.get("managedFields")) {
                if let Some(m) = new.get_mut("metadata").and_then(Value::as_object_mut) {
                    m.insert("managedFields".into(), fields.clone());
                }
            }
            Err(e)
        }
    }
}

/// A group/version/kind as Kubernetes parses an apiVersion: `v1` is the core group; an
/// apiVersion with more than one `/` has neither group nor version.
fn gvk_string(api_version: &str, kind: &str) -> String {
    let (group, version) = match api_version.split_once('/') {
        None => ("", api_version),
        Some((g, v)) if !v.contains('/') => (g, v),
        Some(_) => ("", ""),
    };
    format!("{group}/{version}, Kind={kind}")
}

fn str_at<'v>(obj: &'v Value, path: &[&str]) -> &'v str {
    let mut at = obj;
    for p in path {
        match at.get(p) {
            Some(v) => at = v,
            None => return "",
        }
    }
    at.as_str().unwrap_or("")
}

/// An object nobody tracked yet gets what it holds recorded as one `before-first-apply`
/// update before the first apply.
fn track_before_first_apply(
    ty: Ty<'_>,
    live: &Value,
    managed: &mut Managed,
    req: &Request<'_>,
    ignored: &FieldSet,
) -> Result<(), ApplyError> {
    if !managed.is_empty() {
        return Ok(());
    }
    let start = empty_object(req);
    record_update(
        ty,
        &start,
        live,
        managed,
        "before-first-apply",
        req,
        ignored,
    )
}

/// What the applier's own pass produced.
struct Applied {
    object: Value,
    managed: Managed,
}

/// The apply path below the last-applied layers: the applier's identifier, the merge
/// engine's apply with its checks, stripping, and the entry time.
fn apply_once(
    ty: Ty<'_>,
    live: &Value,
    config: &Value,
    mut managed: Managed,
    req: &Request<'_>,
    ignored: &FieldSet,
    force: bool,
) -> Result<Applied, (ApplyError, Vec<(String, FieldSet)>)> {
    let plain = |e: ApplyError| (e, Vec::new());
    let id = ManagerId {
        manager: manager_name(req).to_string(),
        operation: APPLY.into(),
        api_version: String::new(),
        subresource: req.subresource.into(),
    }
    .identifier();
    let patch_version = str_at(config, &["apiVersion"]);
    let sent = config.get("metadata").and_then(|m| m.get("managedFields"));
    if let Some(Value::Array(entries)) = sent {
        if entries.iter().all(Value::is_object) {
            return Err(plain(ApplyError::BadRequest(
                "metadata.managedFields must be nil".into(),
            )));
        }
    }
    let errs = ops::validate(ty, config, false);
    if !errs.is_empty() {
        return Err(plain(ApplyError::Internal(format!(
            "failed to create typed patch object ({}/{}; {}): {}",
            str_at(config, &["metadata", "namespace"]),
            str_at(config, &["metadata", "name"]),
            gvk_string(patch_version, str_at(config, &["kind"])),
            ops::errors_string(&errs)
        ))));
    }
    let u = Updater { ty, ignored };
    let changed = match u.apply(
        live,
        config,
        req.api_version,
        &mut managed.fields,
        &id,
        force,
    ) {
        Ok(changed) => changed,
        Err(UpdateError::Conflicts(found)) => {
            return Err((ApplyError::Conflicts(conflicts_of(&found)), found))
        }
        Err(UpdateError::Merge(m)) => return Err(plain(ApplyError::Internal(m))),
    };
    strip(&mut managed, &id);
    let object = match changed {
        Some(new) => {
            managed.times.insert(id, normalized_now(req));
            new
        }
        None => live.clone(),
    };
    Ok(Applied { object, managed })
}

/// Server-side apply of `config` onto `live` (None when the apply creates the object): the
/// merged object, with its managedFields, ready for defaulting and validation. Conflicts
/// with other managers fail the apply unless `req.force`.
pub fn apply(
    schema: Option<SchemaRef<'_>>,
    live: Option<&Value>,
    config: &Value,
    req: &Request<'_>,
    ignored: &FieldSet,
) -> Result<Value, ApplyError> {
    let empty;
    let live = match live {
        Some(l) => l,
        None => {
            empty = empty_object(req);
            &empty
        }
    };
    let mut managed = Managed::decode(live).map_err(|e| {
        ApplyError::Internal(format!("failed to decode managed fields: {}", e.message()))
    })?;
    let (config_version, config_kind) =
        (str_at(config, &["apiVersion"]), str_at(config, &["kind"]));
    let expected = gvk_string(req.api_version, req.kind);
    if gvk_string(config_version, config_kind) != expected {
        return Err(ApplyError::BadRequest(format!(
            "invalid object type: {}",
            gvk_string(config_version, config_kind)
        )));
    }
    let ty = root_ty(schema);
    track_before_first_apply(ty, live, &mut managed, req, ignored)?;
    let applied = match apply_once(ty, live, config, managed, req, ignored, req.force) {
        Ok(a) => a,
        Err((err, found)) => {
            // kubectl may take over fields it applied client-side: retry forced when every
            // conflict is one of those.
            if req.manager != "kubectl" || found.is_empty() {
                return Err(err);
            }
            let Some(allowed) = lastapplied::allowed_conflicts(ty, live, req.api_version) else {
                return Err(err);
            };
            let remaining: Vec<(String, FieldSet)> = found
                .iter()
                .map(|(m, s)| (m.clone(), s.difference(&allowed)))
                .filter(|(_, s)| !s.is_empty())
                .collect();
            if !remaining.is_empty() {
                return Err(ApplyError::Conflicts(conflicts_of(&remaining)));
            }
            let mut managed = Managed::decode(live).map_err(|e| {
                ApplyError::Internal(format!("failed to decode managed fields: {}", e.message()))
            })?;
            track_before_first_apply(ty, live, &mut managed, req, ignored)?;
            apply_once(ty, live, config, managed, req, ignored, true).map_err(|(e, _)| e)?
        }
    };
    let Applied {
        mut object,
        managed,
    } = applied;
    if req.manager == "kubectl" {
        lastapplied::sync_annotation(&mut object, config);
    }
    managed.write_to(&mut object);
    Ok(object)
}
