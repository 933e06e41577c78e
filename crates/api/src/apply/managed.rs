//! `metadata.managedFields` decoded: each entry's field set keyed by its manager identifier
//! (Kubernetes' JSON of the entry without fields, time and, for appliers, API version), with
//! the entry times; and encoded back, sorted as Kubernetes sorts entries.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::fieldsv1;
use super::updater::{Managers, VersionedSet};
use super::value::write_go_json_string;
use super::value::Escaper;
use super::ApplyError;

/// The operations a managedFields entry records.
pub(crate) const APPLY: &str = "Apply";
pub(crate) const UPDATE: &str = "Update";

/// The decoded managedFields of an object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Managed {
    pub(crate) fields: Managers,
    /// Entry times (RFC 3339, UTC) by manager identifier; entries without time are absent.
    pub(crate) times: BTreeMap<String, String>,
}

/// Who wrote an entry: the parts of a managedFields entry that identify its manager.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct ManagerId {
    pub manager: String,
    pub operation: String,
    /// Empty for appliers, whose identity does not depend on the version they applied.
    pub api_version: String,
    pub subresource: String,
}

impl ManagerId {
    /// The identifier Kubernetes builds: the entry as Go's `encoding/json` writes it, with
    /// empty fields omitted.
    pub fn identifier(&self) -> String {
        let mut out = String::from("{");
        let mut first = true;
        for (name, value) in [
            ("manager", &self.manager),
            ("operation", &self.operation),
            ("apiVersion", &self.api_version),
            ("subresource", &self.subresource),
        ] {
            if value.is_empty() {
                continue;
            }
            if !first {
                out.push(',');
            }
            first = false;
            write_go_json_string(&mut out, name, Escaper::EncodingJson);
            out.push(':');
            write_go_json_string(&mut out, value, Escaper::EncodingJson);
        }
        out.push('}');
        out
    }

    /// Read an identifier back (the identifiers here are always well formed; a foreign one
    /// reads as empty parts).
    pub fn parse(identifier: &str) -> ManagerId {
        let v: Value = serde_json::from_str(identifier).unwrap_or(Value::Null);
        let s = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or("").to_string();
        ManagerId {
            manager: s("manager"),
            operation: s("operation"),
            api_version: s("apiVersion"),
            subresource: s("subresource"),
        }
    }

    /// Kubernetes' description of a manager in conflict messages: `"kubectl"`,
    /// `"kube-controller-manager" using apps/v1`, with ` with subresource "status"` when set.
    pub fn describe(&self) -> String {
        let mut s = super::value::go_quote(&self.manager);
        if !self.subresource.is_empty() {
            s.push_str(" with subresource ");
            s.push_str(&super::value::go_quote(&self.subresource));
        }
        if self.operation == UPDATE {
            s.push_str(" using ");
            s.push_str(&self.api_version);
        }
        s
    }
}

fn field_str<'v>(entry: &'v Map<String, Value>, name: &str, i: usize) -> Result<&'v str, String> {
    match entry.get(name) {
        None | Some(Value::Null) => Ok(""),
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(format!("managed fields entry {i}: {name} must be a string")),
    }
}

impl Managed {
    /// An empty set of managers.
    pub fn new() -> Managed {
        Managed::default()
    }

    /// Whether no manager owns anything.
    pub fn is_empty(&self) -> bool {
        self.fields.is_empty()
    }

    /// Decode `metadata.managedFields` of an object, with Kubernetes' checks: operation
    /// `Apply` or `Update`, a non-empty apiVersion, fieldsType `FieldsV1`, readable fields.
    pub fn decode(obj: &Value) -> Result<Managed, ApplyError> {
        let entries = obj
            .get("metadata")
            .and_then(|m| m.get("managedFields"))
            .unwrap_or(&Value::Null);
        Managed::decode_entries(entries).map_err(ApplyError::Internal)
    }

    /// Decode a managedFields array (null is no entries).
    pub(crate) fn decode_entries(entries: &Value) -> Result<Managed, String> {
        match entries {
            Value::Null => Ok(Managed::new()),
            Value::Array(a) => Managed::decode_list(a),
            _ => Err("managedFields must be a list".into()),
        }
    }

    /// Decode managedFields entries.
    pub(crate) fn decode_list(list: &[Value]) -> Result<Managed, String> {
        let mut managed = Managed::new();
        for (i, entry) in list.iter().enumerate() {
            let Some(entry) = entry.as_object() else {
                return Err(format!("managed fields entry {i} must be an object"));
            };
            let operation = field_str(entry, "operation", i)?;
            if operation != APPLY && operation != UPDATE {
                return Err("operation must be `Apply` or `Update`".into());
            }
            let api_version = field_str(entry, "apiVersion", i)?;
            if api_version.is_empty() {
                return Err("apiVersion must not be empty".into());
            }
            match field_str(entry, "fieldsType", i)? {
                "FieldsV1" => {}
                "" => return Err(format!("missing fieldsType in managed fields entry {i}")),
                other => {
                    return Err(format!(
                        "invalid fieldsType {} in managed fields entry {i}",
                        super::value::go_quote(other)
                    ))
                }
            }
            let id = ManagerId {
                manager: field_str(entry, "manager", i)?.to_string(),
                operation: operation.to_string(),
                api_version: if operation == APPLY {
                    String::new()
                } else {
                    api_version.to_string()
                },
                subresource: field_str(entry, "subresource", i)?.to_string(),
            };
            let set =
                fieldsv1::decode(entry.get("fieldsV1").unwrap_or(&Value::Null)).map_err(|e| {
                    format!("error decoding versioned set from entry {i}: error decoding set: {e}")
                })?;
            let identifier = id.identifier();
            match entry.get("time") {
                None | Some(Value::Null) => {
                    managed.times.remove(&identifier);
                }
                Some(Value::String(t)) => {
                    let t = normalize_time(t)
                        .ok_or_else(|| format!("managed fields entry {i}: invalid time {t:?}"))?;
                    managed.times.insert(identifier.clone(), t);
                }
                Some(_) => return Err(format!("managed fields entry {i}: time must be a string")),
            }
            managed.fields.insert(
                identifier,
                VersionedSet {
                    set,
                    api_version: api_version.to_string(),
                    applied: operation == APPLY,
                },
            );
        }
        Ok(managed)
    }

    /// The managedFields array, sorted by operation (Apply first), time (oldest first, none
    /// before any), manager, apiVersion and subresource.
    pub fn encode(&self) -> Value {
        let mut entries: Vec<Value> = self
            .fields
            .iter()
            .map(|(identifier, vs)| {
                let mut id = ManagerId::parse(identifier);
                id.api_version = vs.api_version.clone();
                if vs.applied {
                    id.operation = APPLY.into();
                }
                let mut e = Map::new();
                let mut put = |k: &str, v: &str| {
                    if !v.is_empty() {
                        e.insert(k.into(), Value::String(v.into()));
                    }
                };
                put("manager", &id.manager);
                put("operation", &id.operation);
                put("apiVersion", &id.api_version);
                if let Some(t) = self.times.get(identifier) {
                    put("time", t);
                }
                put("fieldsType", "FieldsV1");
                put("subresource", &id.subresource);
                e.insert("fieldsV1".into(), fieldsv1::encode(&vs.set));
                Value::Object(e)
            })
            .collect();
        sort_entries(&mut entries);
        Value::Array(entries)
    }

    /// Write the entries into `obj.metadata.managedFields`, or remove the field when there are
    /// none (Kubernetes omits an empty list).
    pub fn write_to(&self, obj: &mut Value) {
        if self.fields.is_empty() {
            if let Some(m) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
                m.remove("managedFields");
            }
            return;
        }
        put_entries(obj, self.encode());
    }
}

/// Sort managedFields entries as Kubernetes does: operation (Apply first), time (oldest first,
/// none before any), manager, apiVersion, subresource.
pub(crate) fn sort_entries(entries: &mut [Value]) {
    fn order(entry: &Value) -> (&str, i64, &str, &str, &str) {
        let text = |k: &str| entry.get(k).and_then(Value::as_str).unwrap_or("");
        let secs = entry
            .get("time")
            .and_then(Value::as_str)
            .and_then(parse_time)
            .unwrap_or(0);
        (
            text("operation"),
            secs,
            text("manager"),
            text("apiVersion"),
            text("subresource"),
        )
    }
    entries.sort_by(|a, b| order(a).cmp(&order(b)));
}

/// Put `entries` in `obj.metadata.managedFields` (making the metadata when missing).
pub(crate) fn put_entries(obj: &mut Value, entries: Value) {
    let Some(root) = obj.as_object_mut() else {
        return;
    };
    let meta = root
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Some(m) = meta.as_object_mut() {
        m.insert("managedFields".into(), entries);
    }
}

/// Whether a request's managedFields ask to reset them: an empty list, or a list of one
/// entry with nothing set.
pub(crate) fn is_reset(entries: Option<&Value>) -> bool {
    match entries {
        Some(Value::Array(a)) if a.is_empty() => true,
        Some(Value::Array(a)) if a.len() == 1 => match &a[0] {
            Value::Object(e) => e.iter().all(|(k, v)| match (k.as_str(), v) {
                (_, Value::Null) => true,
                ("fieldsV1", _) => false,
                (_, Value::String(s)) => s.is_empty(),
                _ => false,
            }),
            _ => false,
        },
        _ => false,
    }
}

/// Seconds since the epoch of an RFC 3339 time.
pub(crate) fn parse_time(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't') {
        return None;
    }
    if b[13] != b':' || b[16] != b':' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        if part.bytes().all(|c| c.is_ascii_digit()) {
            part.parse().ok()
        } else {
            None
        }
    };
    let (year, month, day) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (hour, min, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 60 {
        return None;
    }
    let mut rest = s.get(19..)?;
    if let Some(frac) = rest.strip_prefix('.') {
        let digits = frac.bytes().take_while(u8::is_ascii_digit).count();
        if digits == 0 {
            return None;
        }
        rest = &frac[digits..];
    }
    let offset = match rest {
        "Z" | "z" => 0,
        _ => {
            let sign = match rest.as_bytes().first() {
                Some(b'+') => 1,
                Some(b'-') => -1,
                _ => return None,
            };
            if rest.len() != 6 || rest.as_bytes()[3] != b':' {
                return None;
            }
            let h: i64 = rest.get(1..3)?.parse().ok()?;
            let m: i64 = rest.get(4..6)?.parse().ok()?;
            sign * (h * 3600 + m * 60)
        }
    };
    let days = days_from_civil(year, month, day);
    Some(days * 86400 + hour * 3600 + min * 60 + sec - offset)
}

/// An RFC 3339 time as Kubernetes writes `metav1.Time`: whole seconds, UTC, `Z`.
pub(crate) fn normalize_time(s: &str) -> Option<String> {
    parse_time(s).map(crate::meta::format_unix_seconds)
}

/// Days since 1970-01-01 of a proleptic Gregorian date.
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146097 + doe - 719468
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn roundtrip(entries: Value) {
        let obj = json!({"metadata": {"managedFields": entries}});
        let managed = Managed::decode(&obj).expect("decodes");
        assert_eq!(managed.encode(), entries);
    }

    #[test]
    fn roundtrips_kubernetes_entries() {
        roundtrip(json!([
            {"apiVersion": "v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"v:3": {"f:alsoPi": {}}, "v:3.1415": {"f:pi": {}}, "v:false": {"f:notTrue": {}}},
             "manager": "foo", "operation": "Update", "time": "2001-02-03T04:05:06Z"},
            {"apiVersion": "v1beta1", "fieldsType": "FieldsV1", "fieldsV1": {"i:5": {"f:i": {}}},
             "manager": "foo", "operation": "Update", "time": "2011-12-13T14:15:16Z"},
        ]));
        roundtrip(json!([
            {"apiVersion": "v1", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:containers": {"k:{\"name\":\"c\"}": {"f:image": {}, "f:name": {}}}}},
             "manager": "foo", "operation": "Apply"},
        ]));
        roundtrip(json!([
            {"apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}},
             "manager": "foo", "operation": "Update", "subresource": "scale"},
        ]));
    }

    #[test]
    fn identifiers_match_kubernetes() {
        let id = |m: &str, op: &str, v: &str, s: &str| {
            ManagerId {
                manager: m.into(),
                operation: op.into(),
                api_version: v.into(),
                subresource: s.into(),
            }
            .identifier()
        };
        assert_eq!(
            id("foo", "Update", "v1", ""),
            r#"{"manager":"foo","operation":"Update","apiVersion":"v1"}"#
        );
        assert_eq!(
            id("foo", "Apply", "", ""),
            r#"{"manager":"foo","operation":"Apply"}"#
        );
        assert_eq!(
            id("foo", "Apply", "", "scale"),
            r#"{"manager":"foo","operation":"Apply","subresource":"scale"}"#
        );
        assert_eq!(
            ManagerId::parse(&id("a<b", "Update", "v1", "")).manager,
            "a<b"
        );
        let obj = json!({"metadata": {"managedFields": [
            {"apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {}, "manager": "foo",
             "operation": "Apply", "time": "2001-02-03T04:05:06Z"}]}});
        let m = Managed::decode(&obj).unwrap();
        assert_eq!(
            m.fields.keys().collect::<Vec<_>>(),
            [r#"{"manager":"foo","operation":"Apply"}"#]
        );
    }

    #[test]
    fn entries_sort_like_kubernetes() {
        let e = |m: &str, op: &str, t: Option<&str>| {
            let mut v = json!({"apiVersion": "v1", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:x": {}}, "manager": m, "operation": op});
            if let Some(t) = t {
                v["time"] = json!(t);
            }
            v
        };
        let input = json!([
            e("c", "Update", Some("2001-01-01T01:00:00Z")),
            e("a", "Apply", None),
            e("d", "Update", Some("2001-01-01T01:00:00Z")),
            e("b", "Apply", None),
            e("e", "Update", Some("2000-01-01T01:00:00Z")),
            e("f", "Apply", Some("2001-01-01T01:00:00Z")),
        ]);
        let m = Managed::decode(&json!({"metadata": {"managedFields": input}})).unwrap();
        let encoded = m.encode();
        let order: Vec<&str> = encoded
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(order, ["a", "b", "f", "e", "c", "d"]);
    }

    #[test]
    fn decode_checks_like_kubernetes() {
        let dec = |e: Value| Managed::decode(&json!({"metadata": {"managedFields": [e]}}));
        let ok = json!({"apiVersion": "v1", "fieldsType": "FieldsV1", "fieldsV1": {"f:field": {}},
                        "manager": "foo", "operation": "Apply"});
        assert!(dec(ok.clone()).is_ok());
        let with = |k: &str, v: Value| {
            let mut e = ok.clone();
            e[k] = v;
            e
        };
        let without = |k: &str| {
            let mut e = ok.clone();
            e.as_object_mut().unwrap().remove(k);
            e
        };
        let msg = |r: Result<Managed, ApplyError>| match r {
            Err(ApplyError::Internal(m)) => m,
            other => panic!("expected an error, got {other:?}"),
        };
        assert_eq!(
            msg(dec(with("fieldsType", json!("FieldsV2")))),
            "invalid fieldsType \"FieldsV2\" in managed fields entry 0"
        );
        assert_eq!(
            msg(dec(without("fieldsType"))),
            "missing fieldsType in managed fields entry 0"
        );
        assert_eq!(
            msg(dec(without("apiVersion"))),
            "apiVersion must not be empty"
        );
        assert_eq!(
            msg(dec(with("operation", json!("Invalid")))),
            "operation must be `Apply` or `Update`"
        );
        assert_eq!(
            msg(dec(without("operation"))),
            "operation must be `Apply` or `Update`"
        );
        assert!(dec(with("fieldsV1", json!({"bad": {}}))).is_err());
        assert!(dec(with("time", json!("yesterday"))).is_err());
        assert!(Managed::decode(&json!({"metadata": {"managedFields": {}}})).is_err());
        assert!(Managed::decode(&json!({})).unwrap().is_empty());
    }

    #[test]
    fn reset_requests() {
        assert!(is_reset(Some(&json!([]))));
        assert!(is_reset(Some(&json!([{}]))));
        assert!(is_reset(Some(&json!([{"manager": "", "time": null}]))));
        assert!(!is_reset(Some(&json!([{"fieldsV1": {}}]))));
        assert!(!is_reset(Some(&json!([{"manager": "x"}]))));
        assert!(!is_reset(None));
        assert!(!is_reset(Some(&Value::Null)));
    }

    #[test]
    fn times_normalize_to_utc_seconds() {
        assert_eq!(parse_time("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(
            normalize_time("2024-02-29T23:59:59.123456Z").as_deref(),
            Some("2024-02-29T23:59:59Z")
        );
        assert_eq!(
            normalize_time("2024-03-01T01:00:00+02:00").as_deref(),
            Some("2024-02-29T23:00:00Z")
        );
        assert_eq!(
            normalize_time("2001-02-03T04:05:06Z").as_deref(),
            Some("2001-02-03T04:05:06Z")
        );
        for bad in [
            "",
            "2024-13-01T00:00:00Z",
            "2024-01-01 00:00:00Z",
            "2024-01-01T00:00:00",
            "2024-01-01T00:00:00+0100",
        ] {
            assert_eq!(parse_time(bad), None, "{bad}");
        }
    }
}
