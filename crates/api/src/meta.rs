//! Object metadata on `serde_json::Value` objects: the fields every Kubernetes object shares.

use serde_json::{Map, Value};

/// `obj.metadata`, if present and an object.
pub fn metadata(obj: &Value) -> Option<&Map<String, Value>> {
    obj.get("metadata")?.as_object()
}

/// `obj.metadata`, created if missing (or replaced if not an object).
pub fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    let map = obj.as_object_mut().expect("objects are JSON objects");
    let md = map
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !md.is_object() {
        *md = Value::Object(Map::new());
    }
    md.as_object_mut().unwrap()
}

/// A string field of metadata ("" when missing).
pub fn meta_str<'a>(obj: &'a Value, field: &str) -> &'a str {
    metadata(obj)
        .and_then(|m| m.get(field))
        .and_then(Value::as_str)
        .unwrap_or("")
}

pub fn name(obj: &Value) -> &str {
    meta_str(obj, "name")
}

pub fn namespace(obj: &Value) -> &str {
    meta_str(obj, "namespace")
}

pub fn uid(obj: &Value) -> &str {
    meta_str(obj, "uid")
}

pub fn resource_version(obj: &Value) -> &str {
    meta_str(obj, "resourceVersion")
}

pub fn set_meta_str(obj: &mut Value, field: &str, value: &str) {
    metadata_mut(obj).insert(field.to_string(), Value::String(value.to_string()));
}

pub fn remove_meta(obj: &mut Value, field: &str) -> Option<Value> {
    obj.get_mut("metadata")?.as_object_mut()?.remove(field)
}

/// `metadata.labels` as a map (empty when missing).
pub fn labels(obj: &Value) -> Option<&Map<String, Value>> {
    metadata(obj)?.get("labels")?.as_object()
}

/// `metadata.finalizers` as strings.
pub fn finalizers(obj: &Value) -> Vec<String> {
    metadata(obj)
        .and_then(|m| m.get("finalizers"))
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

pub fn set_finalizers(obj: &mut Value, finalizers: &[String]) {
    let md = metadata_mut(obj);
    if finalizers.is_empty() {
        md.remove("finalizers");
    } else {
        md.insert(
            "finalizers".into(),
            Value::Array(
                finalizers
                    .iter()
                    .map(|f| Value::String(f.clone()))
                    .collect(),
            ),
        );
    }
}

pub fn deletion_timestamp(obj: &Value) -> Option<&str> {
    metadata(obj)?.get("deletionTimestamp")?.as_str()
}

pub fn generation(obj: &Value) -> i64 {
    metadata(obj)
        .and_then(|m| m.get("generation"))
        .and_then(Value::as_i64)
        .unwrap_or(0)
}

/// `apiVersion` and `kind` of an object ("" when missing).
pub fn type_meta(obj: &Value) -> (&str, &str) {
    let s = |f| obj.get(f).and_then(Value::as_str).unwrap_or("");
    (s("apiVersion"), s("kind"))
}

/// RFC 3339 time in UTC with second precision, as Kubernetes writes metav1.Time.
pub fn format_time(t: std::time::SystemTime) -> String {
    let secs = t
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        (rem / 60) % 60,
        rem % 60
    )
}

/// RFC 3339 time with microseconds, as Kubernetes writes metav1.MicroTime.
pub fn format_micro_time(t: std::time::SystemTime) -> String {
    let d = t.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let base = format_time(t);
    format!("{}.{:06}Z", &base[..base.len() - 1], d.subsec_micros())
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's method).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn times_format_like_kubernetes() {
        let t = UNIX_EPOCH + Duration::from_secs(1_714_557_600);
        assert_eq!(format_time(t), "2024-05-01T10:00:00Z");
        assert_eq!(format_time(UNIX_EPOCH), "1970-01-01T00:00:00Z");
        let t = UNIX_EPOCH + Duration::from_micros(951_782_400_000_123);
        assert_eq!(format_micro_time(t), "2000-02-29T00:00:00.000123Z");
    }

    #[test]
    fn metadata_accessors_tolerate_missing_fields() {
        let mut obj = json!({"kind": "Pod"});
        assert_eq!(name(&obj), "");
        set_meta_str(&mut obj, "name", "a");
        assert_eq!(name(&obj), "a");
        set_finalizers(&mut obj, &["x".into()]);
        assert_eq!(finalizers(&obj), vec!["x".to_string()]);
        set_finalizers(&mut obj, &[]);
        assert!(metadata(&obj).unwrap().get("finalizers").is_none());
    }
}
