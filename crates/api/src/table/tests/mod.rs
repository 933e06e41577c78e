//! Rows of realistic objects, checked cell by cell against what kubectl shows.

mod core_kinds;
mod kinds;
mod pods;
mod tables;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::*;

/// 2024-05-01T12:00:00Z
pub(super) fn now() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_714_564_800)
}

/// The timestamp `secs` seconds before `now()`.
pub(super) fn ago(secs: i64) -> String {
    duration::format_rfc3339((1_714_564_800 - secs) as i128 * 1_000_000_000)
}

pub(super) fn cells(group: &str, kind: &str, obj: &Value) -> Vec<Value> {
    row(group, kind, obj, now())
}

pub(super) fn names(group: &str, kind: &str) -> Vec<&'static str> {
    columns(group, kind).iter().map(|c| c.name).collect()
}

pub(super) const DAY: i64 = 86_400;
