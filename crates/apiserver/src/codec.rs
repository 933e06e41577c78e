//! Bodies in and out: decoding JSON and YAML requests, the stored form of objects, and adding
//! `metadata.resourceVersion` to stored bytes without re-serializing them.
//!
//! Objects are stored as JSON with `metadata` as the first field and no `resourceVersion`
//! (the store revision is the resource version). Because the stored bytes always begin with
//! `{"metadata":{`, the wire form is made by splicing `"resourceVersion":"N"` in right there.

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Map, Value};

use crate::error::ApiError;

/// Largest request body accepted (Kubernetes' limit).
pub const MAX_BODY_BYTES: usize = 3 * 1024 * 1024;
/// Deepest nesting accepted in a body.
pub const MAX_DEPTH: usize = 100;

const STORED_PREFIX: &[u8] = b"{\"metadata\":{";

/// The media type of a request body.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyType {
    Json,
    Yaml,
    /// Kubernetes' protobuf envelope (typed Go clients and kubectl's generators send it).
    Protobuf,
}

/// Which body formats a Content-Type names.
pub fn body_type(content_type: &str) -> Result<BodyType, ApiError> {
    let base = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    match base.as_str() {
        "" | "application/json" | "*/*" => Ok(BodyType::Json),
        "application/yaml" | "application/x-yaml" | "text/yaml" => Ok(BodyType::Yaml),
        _ if capstan_api::protobuf::is_protobuf(&base) => Ok(BodyType::Protobuf),
        _ => Err(ApiError::unsupported_media_type(content_type)),
    }
}

/// Parse a request body into a JSON object.
pub fn decode_body(body: &[u8], kind: BodyType) -> Result<Value, ApiError> {
    if body.len() > MAX_BODY_BYTES {
        return Err(ApiError::too_large());
    }
    let value: Value = match kind {
        BodyType::Json => {
            check_depth(body)?;
            serde_json::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!(
                    "Object 'Kind' is missing in '{}': {e}",
                    String::from_utf8_lossy(&body[..body.len().min(200)])
                ))
            })?
        }
        BodyType::Yaml => {
            check_depth(body)?;
            let v: serde_yaml::Value = serde_yaml::from_slice(body).map_err(|e| {
                ApiError::bad_request(format!("error converting YAML to JSON: {e}"))
            })?;
            serde_json::to_value(v)
                .map_err(|e| ApiError::bad_request(format!("error converting YAML to JSON: {e}")))?
        }
        BodyType::Protobuf => capstan_api::protobuf::decode(body).map_err(|e| {
            if e.is_unsupported() {
                ApiError::new(
                    415,
                    "UnsupportedMediaType",
                    format!("the body of the request was in an unknown format - accepted media types include: application/json, application/yaml ({e})"),
                )
            } else {
                ApiError::bad_request(format!("failed to decode protobuf body: {e}"))
            }
        })?,
    };
    Ok(value)
}

/// Reject bodies nested deeper than [`MAX_DEPTH`] before parsing them (cheap byte scan that
/// ignores brackets inside strings).
fn check_depth(body: &[u8]) -> Result<(), ApiError> {
    let mut depth = 0usize;
    let mut in_string = false;
    let mut escaped = false;
    for &b in body {
        if in_string {
            match (escaped, b) {
                (true, _) => escaped = false,
                (false, b'\\') => escaped = true,
                (false, b'"') => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'{' | b'[' => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(ApiError::bad_request(format!(
                        "the object is nested more than {MAX_DEPTH} levels deep"
                    )));
                }
            }
            b'}' | b']' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// The stored form of an object: `metadata` first, without `resourceVersion`.
pub fn encode_for_store(obj: &Value) -> Bytes {
    let mut out = Vec::with_capacity(1024);
    out.extend_from_slice(b"{\"metadata\":");
    let empty = Map::new();
    let map = obj.as_object().unwrap_or(&empty);
    match map.get("metadata").and_then(Value::as_object) {
        // The members as serde writes a map, leaving resourceVersion out (rather than a copy
        // of the metadata, managedFields and all, without it).
        Some(md) => {
            out.push(b'{');
            let mut first = true;
            for (k, v) in md.iter().filter(|(k, _)| *k != "resourceVersion") {
                if !first {
                    out.push(b',');
                }
                first = false;
                serde_json::to_writer(&mut out, k).expect("strings serialize");
                out.push(b':');
                serde_json::to_writer(&mut out, v).expect("values serialize");
            }
            out.push(b'}');
        }
        None => out.extend_from_slice(b"{}"),
    }
    for (k, v) in map {
        if k == "metadata" {
            continue;
        }
        out.push(b',');
        serde_json::to_writer(&mut out, k).expect("strings serialize");
        out.push(b':');
        serde_json::to_writer(&mut out, v).expect("values serialize");
    }
    out.push(b'}');
    exact(out)
}

/// Stored bytes live as long as the object (the store, the watch cache and its events share
/// them), but the buffer they were written into grew by doubling: a 5.5 KB Pod sat in 8 KB.
/// Copy them into an allocation of their own size unless little would be saved (an
/// allocator's realloc does not shrink a block it would keep more than half of).
pub(crate) fn exact(out: Vec<u8>) -> Bytes {
    if out.capacity() - out.len() > out.len() / 16 {
        Bytes::copy_from_slice(&out)
    } else {
        out.into()
    }
}

/// Whether `stored` is in the stored form (so that [`write_with_resource_version`] can
/// splice a resourceVersion into it).
pub fn is_stored_form(stored: &[u8]) -> bool {
    stored.starts_with(STORED_PREFIX)
}

/// Append the wire form of `stored`, which must be in the stored form
/// ([`is_stored_form`]), at revision `rev` to `out`: the stored bytes with
/// `"resourceVersion":"REV"` spliced in after `{"metadata":{`.
pub fn write_with_resource_version(stored: &[u8], rev: i64, out: &mut BytesMut) {
    let rest = stored.strip_prefix(STORED_PREFIX).unwrap_or(stored);
    let mut buf = [0u8; 20];
    let digits = capstan_api::meta::decimal(rev.unsigned_abs(), &mut buf);
    out.reserve(stored.len() + 48);
    out.put_slice(STORED_PREFIX);
    out.put_slice(b"\"resourceVersion\":\"");
    if rev < 0 {
        out.put_u8(b'-');
    }
    out.put_slice(digits.as_bytes());
    out.put_u8(b'"');
    if rest.first() != Some(&b'}') {
        out.put_u8(b',');
    }
    out.put_slice(rest);
}

/// The wire form of a stored object at revision `rev`.
pub fn with_resource_version(stored: &[u8], rev: i64) -> Bytes {
    if is_stored_form(stored) {
        // The revision adds `"resourceVersion":"N",` (at most 41 bytes).
        let mut out = BytesMut::with_capacity(stored.len() + 41);
        write_with_resource_version(stored, rev, &mut out);
        return out.freeze();
    }
    // Not in our stored form (written by something else): re-serialize.
    match serde_json::from_slice::<Value>(stored) {
        Ok(mut v) if v.is_object() => {
            capstan_api::meta::set_meta_str(&mut v, "resourceVersion", &rev.to_string());
            serde_json::to_vec(&v).unwrap_or_default().into()
        }
        _ => Bytes::copy_from_slice(stored),
    }
}

/// Parse a stored object and set its resourceVersion.
pub fn decode_stored(stored: &[u8], rev: i64) -> Result<Value, ApiError> {
    let mut v = stored_object(serde_json::from_slice(stored))?;
    capstan_api::meta::set_meta_str(&mut v, "resourceVersion", &rev.to_string());
    Ok(v)
}

/// Parse only the parts of a stored object `keep` names ([`crate::sparse`]); no
/// resourceVersion is set.
pub fn decode_stored_sparse(stored: &[u8], keep: &crate::sparse::Keep) -> Result<Value, ApiError> {
    stored_object(crate::sparse::decode(stored, keep))
}

/// A parsed stored object, or the internal error of one that is not a JSON object.
fn stored_object(parsed: serde_json::Result<Value>) -> Result<Value, ApiError> {
    let v =
        parsed.map_err(|e| ApiError::internal(format!("stored object is not valid JSON: {e}")))?;
    if !v.is_object() {
        return Err(ApiError::internal("stored object is not a JSON object"));
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn stored_bytes_do_not_keep_the_slack_of_their_buffer() {
        let mut slack = Vec::with_capacity(8192);
        slack.extend_from_slice(&[b'x'; 5000]);
        let at = slack.as_ptr();
        let copied = exact(slack);
        assert_ne!(copied.as_ptr(), at, "a buffer with 3 KB of slack is copied");
        assert_eq!(&copied[..], &[b'x'; 5000][..]);
        let mut tight = Vec::with_capacity(5100);
        tight.extend_from_slice(&[b'y'; 5000]);
        let at = tight.as_ptr();
        assert_eq!(exact(tight).as_ptr(), at, "a nearly full one is kept");
    }

    #[test]
    fn stored_form_round_trips_with_resource_version() {
        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "a", "resourceVersion": "7"}, "data": {"k": "v"}});
        let stored = encode_for_store(&obj);
        assert!(stored.starts_with(STORED_PREFIX));
        assert!(!String::from_utf8_lossy(&stored).contains("\"7\""));
        let wire: Value = serde_json::from_slice(&with_resource_version(&stored, 42)).unwrap();
        assert_eq!(wire["metadata"]["resourceVersion"], "42");
        assert_eq!(wire["data"]["k"], "v");
        assert_eq!(wire["metadata"]["name"], "a");
    }

    #[test]
    fn the_stored_metadata_is_the_object_s_without_its_resource_version() {
        for md in [
            json!({"name": "a", "resourceVersion": "7", "uid": "u"}),
            json!({"resourceVersion": "7"}),
            json!({"annotations": {"resourceVersion": "x"}, "resourceVersion": "7"}),
            json!({"name": "a", "zz": [1, {"b": null}]}),
            json!({}),
        ] {
            let obj = json!({"kind": "X", "metadata": md.clone(), "spec": {"a": "\u{e9}\""}});
            let mut expected = md.clone();
            expected.as_object_mut().unwrap().remove("resourceVersion");
            let want = format!(
                "{{\"metadata\":{},\"kind\":\"X\",\"spec\":{}}}",
                serde_json::to_string(&expected).unwrap(),
                serde_json::to_string(&obj["spec"]).unwrap()
            );
            assert_eq!(String::from_utf8_lossy(&encode_for_store(&obj)), want);
        }
    }

    #[test]
    fn spliced_revisions_are_decimal() {
        let stored = encode_for_store(&json!({"metadata": {"name": "a"}}));
        for rev in [0, 7, 10, 99, 1_000_000_007, i64::MAX, -3] {
            let wire: Value = serde_json::from_slice(&with_resource_version(&stored, rev)).unwrap();
            assert_eq!(wire["metadata"]["resourceVersion"], rev.to_string());
        }
    }

    #[test]
    fn empty_metadata_splices_without_a_trailing_comma() {
        let stored = encode_for_store(&json!({"kind": "X"}));
        let wire: Value = serde_json::from_slice(&with_resource_version(&stored, 1)).unwrap();
        assert_eq!(wire["metadata"]["resourceVersion"], "1");
    }

    #[test]
    fn bodies_decode_and_bad_ones_are_400() {
        let v = decode_body(b"kind: Pod\nmetadata:\n  name: a\n", BodyType::Yaml).unwrap();
        assert_eq!(v["metadata"]["name"], "a");
        assert_eq!(decode_body(b"{bad", BodyType::Json).unwrap_err().code, 400);
        let deep = "[".repeat(200) + &"]".repeat(200);
        assert_eq!(
            decode_body(deep.as_bytes(), BodyType::Json)
                .unwrap_err()
                .code,
            400
        );
        let inside = format!("{{\"a\":\"{}\"}}", "[".repeat(500));
        assert!(decode_body(inside.as_bytes(), BodyType::Json).is_ok());
        assert_eq!(
            body_type("application/json; charset=utf-8").unwrap(),
            BodyType::Json
        );
        assert_eq!(body_type("text/plain").unwrap_err().code, 415);
        assert_eq!(
            body_type("application/vnd.kubernetes.protobuf").unwrap(),
            BodyType::Protobuf
        );
        assert_eq!(
            decode_body(b"not k8s", BodyType::Protobuf)
                .unwrap_err()
                .code,
            400
        );
    }
}
