//! Object metadata on `serde_json::Value` objects: the fields every Kubernetes object shares.

use serde_json::{Map, Value};

/// JSON pointer lookup without allocating: `serde_json::Value::pointer` unescapes every token
/// into a new string, and the request path looks fields up this way many times per write.
pub trait At {
    /// The value at the RFC 6901 pointer `pointer` ("" is the whole value), as
    /// [`Value::pointer`] finds it.
    fn at(&self, pointer: &str) -> Option<&Value>;
}

impl At for Value {
    fn at(&self, pointer: &str) -> Option<&Value> {
        if pointer.is_empty() {
            return Some(self);
        }
        let rest = pointer.strip_prefix('/')?;
        if rest.contains('~') {
            return self.pointer(pointer);
        }
        rest.split('/').try_fold(self, |v, token| match v {
            Value::Object(m) => m.get(token),
            Value::Array(a) => array_index(token).and_then(|i| a.get(i)),
            _ => None,
        })
    }
}

/// An array index token as RFC 6901 allows it: digits, no leading zero (but "0").
fn array_index(token: &str) -> Option<usize> {
    if token.is_empty()
        || token.starts_with('+')
        || (token.len() > 1 && token.starts_with('0'))
        || !token.bytes().all(|b| b.is_ascii_digit())
    {
        return None;
    }
    token.parse().ok()
}

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
    format_unix_seconds(secs)
}

/// The decimal digits of `n`, written into the end of `buf` (the 20 bytes any `u64` needs):
/// for building keys, paths and resourceVersions without `format!`'s machinery.
pub fn decimal(n: u64, buf: &mut [u8; 20]) -> &str {
    let mut at = buf.len();
    let mut n = n;
    loop {
        at -= 1;
        buf[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    std::str::from_utf8(&buf[at..]).unwrap_or_default()
}

/// [`format_time`] of a time given in seconds since the epoch (before it when negative).
pub fn format_unix_seconds(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    if !(0..=9999).contains(&y) {
        return format!(
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
            rem / 3600,
            (rem / 60) % 60,
            rem % 60
        );
    }
    // Every write stamps a time or two: written digit by digit, not through the formatter.
    let mut out = [0u8; 20];
    let two = |out: &mut [u8], at: usize, n: i64| {
        out[at] = b'0' + (n / 10) as u8;
        out[at + 1] = b'0' + (n % 10) as u8;
    };
    two(&mut out, 0, y / 100);
    two(&mut out, 2, y % 100);
    out[4] = b'-';
    two(&mut out, 5, m as i64);
    out[7] = b'-';
    two(&mut out, 8, d as i64);
    out[10] = b'T';
    two(&mut out, 11, rem / 3600);
    out[13] = b':';
    two(&mut out, 14, (rem / 60) % 60);
    out[16] = b':';
    two(&mut out, 17, rem % 60);
    out[19] = b'Z';
    out.iter().map(|&b| b as char).collect()
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

    #[test]
    fn decimals_read_as_formatted_numbers() {
        for n in [0, 7, 10, 99, 100, 1_000_000_007, u64::MAX] {
            assert_eq!(decimal(n, &mut [0; 20]), n.to_string());
        }
    }

    #[test]
    fn at_finds_what_pointer_finds() {
        let v = serde_json::json!({
            "spec": {"containers": [{"name": "a", "resources": {"requests": {"cpu": "1"}}},
                                    {"name": "b"}]},
            "": {"": 1, "x": 2},
            "a/b": {"c~d": 3},
            "list": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11],
            "n": null,
        });
        for p in [
            "",
            "/",
            "//",
            "/spec",
            "/spec/containers",
            "/spec/containers/0/name",
            "/spec/containers/1/name",
            "/spec/containers/2",
            "/spec/containers/01",
            "/spec/containers/+1",
            "/spec/containers/-",
            "/spec/containers/ 1",
            "/spec/containers/0/resources/requests/cpu",
            "/spec/missing/deeper",
            "spec",
            "/a~1b/c~0d",
            "/a~1b",
            "/a/b",
            "/list/10",
            "/list/11",
            "/list/12",
            "/list/1/x",
            "/n",
            "/n/x",
            "//x",
            "/spec/",
            "/spec/containers/0/",
            "/spec/containers/18446744073709551616",
        ] {
            assert_eq!(v.at(p), v.pointer(p), "{p:?}");
        }
    }

    #[test]
    fn times_format_as_rfc3339_seconds() {
        use std::time::{Duration, UNIX_EPOCH};
        for secs in [
            0u64,
            59,
            86_399,
            86_400,
            951_782_400,
            951_868_799,
            1_709_164_800,
            2_147_483_647,
            4_102_444_800,
            253_402_300_799,
        ] {
            let t = UNIX_EPOCH + Duration::from_secs(secs);
            let days = (secs / 86_400) as i64;
            let rem = (secs % 86_400) as i64;
            let (y, m, d) = civil_from_days(days);
            let want = format!(
                "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
                rem / 3600,
                (rem / 60) % 60,
                rem % 60
            );
            assert_eq!(format_time(t), want);
        }
        assert_eq!(
            format_time(UNIX_EPOCH + Duration::from_secs(951_825_600)),
            "2000-02-29T12:00:00Z"
        );
    }
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
