//! ObjectMeta and TypeMeta inside custom resources: the root `metadata` decoded as
//! `metav1.ObjectMeta` (unknown fields dropped), and embedded resources
//! (`x-kubernetes-embedded-resource`), whose `apiVersion`, `kind` and `metadata` are checked
//! and coerced the same way (apiextensions' `schema/objectmeta`).

use serde_json::Value;

use super::gofmt::shown;
use crate::field::FieldError;
use crate::schema::{SchemaRef, Schemas, OBJECT_META};
use crate::validation::{child, idx, key, meta, names};

fn object_meta_schema() -> Option<SchemaRef<'static>> {
    Schemas::builtin().definition(OBJECT_META)
}

/// The error Go's JSON decoding of `metadata` into `metav1.ObjectMeta` gives, if any.
pub(crate) fn decode_error(metadata: &Value) -> Option<String> {
    let s = object_meta_schema()?;
    s.check_types(metadata)
        .into_iter()
        .next()
        .map(|e| e.message)
}

/// The ObjectMeta round trip: unknown fields are dropped (their paths returned, relative to
/// the metadata), nulls disappear (Go decodes them as zero values, which are omitted), and with
/// `drop_malformed` fields that do not decode are dropped too.
pub(crate) fn normalize(metadata: &mut Value, drop_malformed: bool) -> Vec<String> {
    let Some(s) = object_meta_schema() else {
        return Vec::new();
    };
    if !metadata.is_object() {
        return Vec::new();
    }
    if drop_malformed {
        for e in s.check_types(metadata) {
            let field = e.path.split(['.', '[']).next().unwrap_or("").to_string();
            if let Some(map) = metadata.as_object_mut() {
                map.remove(&field);
            }
        }
    }
    let unknown = s.prune(metadata);
    if let Some(map) = metadata.as_object_mut() {
        map.retain(|_, v| !v.is_null());
    }
    unknown
}

/// `objectmeta.Coerce` over the embedded resources below `x` (and `x` itself when
/// `resource`): `apiVersion` and `kind` must be strings, `metadata` must decode and is
/// normalized. Collects the unknown metadata fields' paths; the first problem is an error
/// unless `drop_invalid`.
pub(crate) fn coerce_embedded(
    x: &mut Value,
    s: Option<SchemaRef<'_>>,
    path: &str,
    resource: bool,
    drop_invalid: bool,
    unknown: &mut Vec<String>,
) -> Result<(), FieldError> {
    let Some(s) = s else { return Ok(()) };
    match x {
        Value::Object(map) => {
            let embedded = resource || s.schema().embedded_resource;
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                if embedded {
                    match k.as_str() {
                        "apiVersion" | "kind" => {
                            let is_string = map.get(&k).is_some_and(Value::is_string);
                            if !is_string && drop_invalid {
                                map.remove(&k);
                                continue;
                            } else if !is_string {
                                let v = map.get(&k).cloned().unwrap_or(Value::Null);
                                return Err(FieldError::invalid_shown(
                                    child(path, &k),
                                    &shown(&v),
                                    "must be a string",
                                ));
                            }
                        }
                        "metadata" => {
                            if let Some(md) = map.get_mut("metadata") {
                                coerce_embedded_meta(md, path, drop_invalid, unknown)?;
                            }
                        }
                        _ => {}
                    }
                }
                let Some(v) = map.get_mut(&k) else { continue };
                if let Some(p) = s.property(&k) {
                    coerce_embedded(v, Some(p), &child(path, &k), false, drop_invalid, unknown)?;
                } else if let Some(addl) = additional_schema(s) {
                    coerce_embedded(v, addl, &key(path, &k), false, drop_invalid, unknown)?;
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter_mut().enumerate() {
                coerce_embedded(item, s.items(), &idx(path, i), false, drop_invalid, unknown)?;
            }
        }
        _ => {}
    }
    Ok(())
}

/// `Some(schema)` for a map's values, `Some(None)` for `additionalProperties: true|false`.
fn additional_schema(s: SchemaRef<'_>) -> Option<Option<SchemaRef<'_>>> {
    use crate::schema::AdditionalProperties;
    match s.schema().additional_properties {
        AdditionalProperties::Unspecified => None,
        AdditionalProperties::Schema(_) => Some(s.additional_properties()),
        _ => Some(None),
    }
}

fn coerce_embedded_meta(
    md: &mut Value,
    path: &str,
    drop_invalid: bool,
    unknown: &mut Vec<String>,
) -> Result<(), FieldError> {
    let md_path = child(path, "metadata");
    if let Some(err) = decode_error(md) {
        if !drop_invalid {
            return Err(FieldError::invalid_shown(&md_path, &shown(md), &err));
        }
        if !md.is_object() {
            return Ok(());
        }
    }
    let prefix = if md_path.is_empty() {
        "metadata".to_string()
    } else {
        md_path
    };
    let mut found = normalize(md, drop_invalid);
    found.sort();
    unknown.extend(found.into_iter().map(|p| format!("{prefix}.{p}")));
    if let Some(map) = md.as_object_mut() {
        // A zero creationTimestamp is not written back (nulls are already gone).
        if map.get("creationTimestamp").and_then(Value::as_str) == Some("0001-01-01T00:00:00Z") {
            map.remove("creationTimestamp");
        }
    }
    Ok(())
}

/// `objectmeta.Validate`: the embedded resources below `x` (and `x` itself when `resource`).
pub(crate) fn validate_embedded(
    errs: &mut Vec<FieldError>,
    path: &str,
    x: &Value,
    s: Option<SchemaRef<'_>>,
    resource: bool,
) {
    let Some(s) = s else { return };
    match x {
        Value::Object(map) => {
            if resource || s.schema().embedded_resource {
                validate_embedded_resource(errs, path, map);
            }
            for (k, v) in map {
                if let Some(p) = s.property(k) {
                    validate_embedded(errs, &child(path, k), v, Some(p), false);
                } else if let Some(addl) = s.additional_properties() {
                    validate_embedded(errs, &key(path, k), v, Some(addl), false);
                }
            }
        }
        Value::Array(items) => {
            for (i, item) in items.iter().enumerate() {
                validate_embedded(errs, &idx(path, i), item, s.items(), false);
            }
        }
        _ => {}
    }
}

/// `schema.ParseGroupVersion`'s error for more than one `/`.
pub(crate) fn parse_group_version_error(gv: &str) -> Option<String> {
    (gv != "/" && gv.matches('/').count() > 1)
        .then(|| format!("unexpected GroupVersion string: {gv}"))
}

fn validate_embedded_resource(
    errs: &mut Vec<FieldError>,
    path: &str,
    x: &serde_json::Map<String, Value>,
) {
    if !x.contains_key("apiVersion") {
        errs.push(FieldError::required(
            child(path, "apiVersion"),
            "must not be empty",
        ));
    }
    if !x.contains_key("kind") {
        errs.push(FieldError::required(
            child(path, "kind"),
            "must not be empty",
        ));
    }
    for (k, v) in x {
        match k.as_str() {
            "apiVersion" => {
                let p = child(path, "apiVersion");
                match v.as_str() {
                    None => errs.push(FieldError::invalid_shown(p, &shown(v), "must be a string")),
                    Some("") => errs.push(FieldError::invalid(p, v, "must not be empty")),
                    Some(gv) => {
                        if let Some(e) = parse_group_version_error(gv) {
                            errs.push(FieldError::invalid(p, v, &e));
                        }
                    }
                }
            }
            "kind" => {
                let p = child(path, "kind");
                match v.as_str() {
                    None => errs.push(FieldError::invalid_shown(p, &shown(v), "must be a string")),
                    Some("") => errs.push(FieldError::invalid(p, v, "must not be empty")),
                    Some(kind) => {
                        let problems = names::dns1035_label(&kind.to_lowercase());
                        if !problems.is_empty() {
                            errs.push(FieldError::invalid(
                                p,
                                v,
                                &format!(
                                    "may have mixed case, but should otherwise match: {}",
                                    problems.join(",")
                                ),
                            ));
                        }
                    }
                }
            }
            "metadata" => {
                let p = child(path, "metadata");
                if let Some(e) = decode_error(v) {
                    errs.push(FieldError::invalid_shown(p, &shown(v), &e));
                    continue;
                }
                let mut md = v.clone();
                if let Some(m) = md.as_object_mut() {
                    if m.get("name")
                        .and_then(Value::as_str)
                        .unwrap_or("")
                        .is_empty()
                    {
                        // Embedded objects need no name; something must be there to validate.
                        m.insert("name".into(), Value::String("fakename".into()));
                    }
                }
                let namespaced = md
                    .get("namespace")
                    .and_then(Value::as_str)
                    .is_some_and(|n| !n.is_empty());
                meta::object_meta(errs, Some(&md), namespaced, names::name_is_path_segment, &p);
            }
            _ => {}
        }
    }
}
