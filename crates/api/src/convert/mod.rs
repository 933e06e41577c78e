//! Conversion between API versions that share storage.
//!
//! Two pairs of built-in resources are the same objects served in two versions, as in
//! Kubernetes v1.32:
//!
//! - core/v1 `events` and `events.k8s.io/v1` `events`, stored as core/v1 Events
//!   ([`events`]: a renaming of fields);
//! - `autoscaling/v2` and `autoscaling/v1` `horizontalpodautoscalers`, stored as v2
//!   ([`autoscaling`]: v1 has a single CPU target; whatever else a v2 object holds travels
//!   through v1 in the `autoscaling.alpha.kubernetes.io/*` annotations).
//!
//! Kubernetes converts through an internal version; capstan's storage version plays that part
//! (core/v1 Event is the internal Event with v1 field names; autoscaling/v2 is the internal
//! HorizontalPodAutoscaler). [`to_storage`] is what decoding a request body into the internal
//! version does, [`from_storage`] what encoding a stored object for a client of another version
//! does, including the zero values Go writes out for fields without `omitempty`.
//!
//! Every other group/version/kind is its own storage version: both functions hand the object
//! back untouched (they take and return it by value, so that costs nothing), with one
//! exception: an autoscaling/v2 object loses the round-trip annotations on its way into
//! storage, as Kubernetes' v2 conversion drops them.

pub mod autoscaling;
pub mod events;
mod gojson;

#[cfg(test)]
mod tests;

use serde_json::Value;

/// How one served version relates to its storage version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pair {
    /// events.k8s.io/v1 Event over core/v1 Event.
    EventsV1,
    /// autoscaling/v1 HorizontalPodAutoscaler over autoscaling/v2.
    AutoscalingV1,
    /// autoscaling/v2 HorizontalPodAutoscaler: the storage version itself, which still drops
    /// other versions' round-trip annotations on the way in.
    AutoscalingV2,
    /// Everything else.
    Identity,
}

fn pair(group: &str, version: &str, kind: &str) -> Pair {
    match (group, version, kind) {
        ("events.k8s.io", "v1", "Event") => Pair::EventsV1,
        ("autoscaling", "v1", "HorizontalPodAutoscaler") => Pair::AutoscalingV1,
        ("autoscaling", "v2", "HorizontalPodAutoscaler") => Pair::AutoscalingV2,
        _ => Pair::Identity,
    }
}

/// The group and version objects of `group`/`version`/`kind` are stored in.
pub fn storage_version<'a>(group: &'a str, version: &'a str, kind: &str) -> (&'a str, &'a str) {
    match pair(group, version, kind) {
        Pair::EventsV1 => ("", "v1"),
        Pair::AutoscalingV1 => ("autoscaling", "v2"),
        Pair::AutoscalingV2 | Pair::Identity => (group, version),
    }
}

/// Whether objects of `group`/`version`/`kind` read differently from their stored form (false
/// for every storage version: reads of those need no conversion at all).
pub fn converts(group: &str, version: &str, kind: &str) -> bool {
    matches!(
        pair(group, version, kind),
        Pair::EventsV1 | Pair::AutoscalingV1
    )
}

/// An object written in `group`/`version` (`kind`), in its storage version's form.
pub fn to_storage(group: &str, version: &str, kind: &str, obj: Value) -> Value {
    match pair(group, version, kind) {
        Pair::EventsV1 => events::events_to_core(obj),
        Pair::AutoscalingV1 => autoscaling::v1_to_v2(obj),
        Pair::AutoscalingV2 => autoscaling::drop_round_trip_annotations(obj),
        Pair::Identity => obj,
    }
}

/// A stored object as a client of `group`/`version` (`kind`) reads it.
pub fn from_storage(group: &str, version: &str, kind: &str, obj: Value) -> Value {
    match pair(group, version, kind) {
        Pair::EventsV1 => events::core_to_events(obj),
        Pair::AutoscalingV1 => autoscaling::v2_to_v1(obj),
        Pair::AutoscalingV2 | Pair::Identity => obj,
    }
}

// ---- small helpers shared by the converters ----

/// A field that is present and not null.
fn present(v: Option<Value>) -> Option<Value> {
    v.filter(|v| !v.is_null())
}

/// What Go's `omitempty` keeps of a string field: a non-empty string (other non-null values
/// are kept as they are, for validation to judge).
fn non_empty(v: Option<Value>) -> Option<Value> {
    present(v).filter(|v| v.as_str() != Some(""))
}

/// What Go's `omitempty` keeps of a number field: anything but 0.
fn non_zero(v: Option<Value>) -> Option<Value> {
    present(v).filter(|v| v.as_i64() != Some(0) && v.as_f64() != Some(0.0))
}
