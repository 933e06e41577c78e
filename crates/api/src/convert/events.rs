//! core/v1 Event ⇄ events.k8s.io/v1 Event (Kubernetes' `pkg/apis/events/v1` conversion).
//!
//! The two are the same fields under other names:
//!
//! | core/v1              | events.k8s.io/v1           |
//! |----------------------|----------------------------|
//! | `involvedObject`     | `regarding`                |
//! | `message`            | `note`                     |
//! | `source`             | `deprecatedSource`         |
//! | `firstTimestamp`     | `deprecatedFirstTimestamp` |
//! | `lastTimestamp`      | `deprecatedLastTimestamp`  |
//! | `count`              | `deprecatedCount`          |
//! | `reportingComponent` | `reportingController`      |
//!
//! and `eventTime`, `series`, `action`, `reason`, `type`, `related`, `reportingInstance` keep
//! their names. Nothing is derived from anything else: an event written through
//! events.k8s.io/v1 reads in core/v1 with an empty `source` (and a core/v1 event without
//! `reportingComponent` reads with no `reportingController`); only the `source` field selector
//! of core/v1 falls back to the reporting controller (see `crate::fields`).
//!
//! The output is shaped as Go encodes each type: fields without `omitempty` are always there
//! (`involvedObject`/`regarding` and `source`/`deprecatedSource` as `{}`, zero timestamps as
//! `null`, core/v1's `reportingComponent` and `reportingInstance` as `""`), empty strings and
//! zero counts of `omitempty` fields are left out, and fields neither type has are dropped.

use serde_json::{json, Map, Value};

use super::{non_empty, non_zero, present};

/// A stored core/v1 Event as events.k8s.io/v1 presents it.
pub fn core_to_events(obj: Value) -> Value {
    let Value::Object(mut m) = obj else {
        return obj;
    };
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("events.k8s.io/v1"));
    out.insert("kind".into(), json!("Event"));
    if let Some(md) = m.remove("metadata") {
        out.insert("metadata".into(), md);
    }
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            out.insert(k.to_string(), v);
        }
    };
    put(
        "eventTime",
        Some(present(m.remove("eventTime")).unwrap_or(Value::Null)),
    );
    put("series", present(m.remove("series")).map(events_series));
    put(
        "reportingController",
        non_empty(m.remove("reportingComponent")),
    );
    put(
        "reportingInstance",
        non_empty(m.remove("reportingInstance")),
    );
    put("action", non_empty(m.remove("action")));
    put("reason", non_empty(m.remove("reason")));
    put(
        "regarding",
        Some(present(m.remove("involvedObject")).unwrap_or_else(|| json!({}))),
    );
    put("related", present(m.remove("related")));
    put("note", non_empty(m.remove("message")));
    put("type", non_empty(m.remove("type")));
    put(
        "deprecatedSource",
        Some(present(m.remove("source")).unwrap_or_else(|| json!({}))),
    );
    put(
        "deprecatedFirstTimestamp",
        Some(present(m.remove("firstTimestamp")).unwrap_or(Value::Null)),
    );
    put(
        "deprecatedLastTimestamp",
        Some(present(m.remove("lastTimestamp")).unwrap_or(Value::Null)),
    );
    put("deprecatedCount", non_zero(m.remove("count")));
    Value::Object(out)
}

/// An events.k8s.io/v1 Event in its stored core/v1 form.
pub fn events_to_core(obj: Value) -> Value {
    let Value::Object(mut m) = obj else {
        return obj;
    };
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!("v1"));
    out.insert("kind".into(), json!("Event"));
    if let Some(md) = m.remove("metadata") {
        out.insert("metadata".into(), md);
    }
    let mut put = |k: &str, v: Option<Value>| {
        if let Some(v) = v {
            out.insert(k.to_string(), v);
        }
    };
    put(
        "involvedObject",
        Some(present(m.remove("regarding")).unwrap_or_else(|| json!({}))),
    );
    put("reason", non_empty(m.remove("reason")));
    put("message", non_empty(m.remove("note")));
    put(
        "source",
        Some(present(m.remove("deprecatedSource")).unwrap_or_else(|| json!({}))),
    );
    put(
        "firstTimestamp",
        Some(present(m.remove("deprecatedFirstTimestamp")).unwrap_or(Value::Null)),
    );
    put(
        "lastTimestamp",
        Some(present(m.remove("deprecatedLastTimestamp")).unwrap_or(Value::Null)),
    );
    put("count", non_zero(m.remove("deprecatedCount")));
    put("type", non_empty(m.remove("type")));
    put(
        "eventTime",
        Some(present(m.remove("eventTime")).unwrap_or(Value::Null)),
    );
    put("series", present(m.remove("series")).map(core_series));
    put("action", non_empty(m.remove("action")));
    put("related", present(m.remove("related")));
    put(
        "reportingComponent",
        Some(non_empty(m.remove("reportingController")).unwrap_or_else(|| json!(""))),
    );
    put(
        "reportingInstance",
        Some(non_empty(m.remove("reportingInstance")).unwrap_or_else(|| json!(""))),
    );
    Value::Object(out)
}

/// events.k8s.io/v1 EventSeries: `count` and `lastObservedTime` always.
fn events_series(series: Value) -> Value {
    let Value::Object(mut s) = series else {
        return series;
    };
    json!({
        "count": present(s.remove("count")).unwrap_or_else(|| json!(0)),
        "lastObservedTime": present(s.remove("lastObservedTime")).unwrap_or(Value::Null),
    })
}

/// core/v1 EventSeries: `count` only when not 0, `lastObservedTime` always.
fn core_series(series: Value) -> Value {
    let Value::Object(mut s) = series else {
        return series;
    };
    let mut out = Map::new();
    if let Some(c) = non_zero(s.remove("count")) {
        out.insert("count".into(), c);
    }
    out.insert(
        "lastObservedTime".into(),
        present(s.remove("lastObservedTime")).unwrap_or(Value::Null),
    );
    Value::Object(out)
}
