//! Structural schemas (apiextensions' `apiserver/schema`): whether a CRD's `openAPIV3Schema`
//! can be converted (`NewStructural`) and the structural invariants (`ValidateStructural`),
//! with Kubernetes' field paths and messages, checked on the schema's JSON.

use serde_json::{Map, Value};

use super::goregex;
use super::json::{arr, flag, non_empty_map, obj, present, sorted, text};
use crate::field::FieldError;
use crate::validation::{child, idx, key};

/// The first reason `NewStructural` refuses the schema, in the order Go finds it.
pub(crate) fn new_structural_error(n: &Value) -> Option<String> {
    let m = n.as_object()?;
    if let Some(e) = unsupported_fields(m) {
        return Some(e);
    }
    // Value validations: not, allOf, anyOf, oneOf (as nested value validations).
    if let Some(e) = m
        .get("not")
        .filter(|x| x.is_object())
        .and_then(nested_error)
    {
        return Some(e);
    }
    for k in ["allOf", "anyOf", "oneOf"] {
        for x in arr(m, k) {
            if let Some(e) = nested_error(x) {
                return Some(e);
            }
        }
    }
    if m.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        return Some(
            "internal error: 'x-kubernetes-preserve-unknown-fields' must be true or undefined"
                .into(),
        );
    }
    match m.get("items") {
        Some(Value::Array(a)) if !a.is_empty() => {
            return Some("OpenAPIV3Schema 'items' must be a schema, but is an array".into())
        }
        Some(items @ Value::Object(_)) => {
            if let Some(e) = new_structural_error(items) {
                return Some(e);
            }
        }
        _ => {}
    }
    for (_, p) in sorted(non_empty_map(m, "properties")) {
        if let Some(e) = new_structural_error(p) {
            return Some(e);
        }
    }
    if let Some(ap @ Value::Object(_)) = m.get("additionalProperties") {
        return new_structural_error(ap);
    }
    None
}

/// `newNestedValueValidation`'s errors.
fn nested_error(n: &Value) -> Option<String> {
    let m = n.as_object()?;
    if let Some(e) = unsupported_fields(m) {
        return Some(e);
    }
    if let Some(e) = m
        .get("not")
        .filter(|x| x.is_object())
        .and_then(nested_error)
    {
        return Some(e);
    }
    for k in ["allOf", "anyOf", "oneOf"] {
        for x in arr(m, k) {
            if let Some(e) = nested_error(x) {
                return Some(e);
            }
        }
    }
    if m.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        return Some(
            "internal error: 'x-kubernetes-preserve-unknown-fields' must be true or undefined"
                .into(),
        );
    }
    match m.get("items") {
        Some(Value::Array(a)) if !a.is_empty() => {
            return Some("OpenAPIV3Schema 'items' must be a schema, but is an array".into())
        }
        Some(items @ Value::Object(_)) => {
            if let Some(e) = nested_error(items) {
                return Some(e);
            }
        }
        _ => {}
    }
    for (_, p) in sorted(obj(m, "properties")) {
        if let Some(e) = nested_error(p) {
            return Some(e);
        }
    }
    if let Some(ap @ Value::Object(_)) = m.get("additionalProperties") {
        return nested_error(ap);
    }
    None
}

fn unsupported_fields(m: &Map<String, Value>) -> Option<String> {
    let checks: [(&str, bool); 7] = [
        ("id", !text(m, "id").is_empty()),
        ("schema", !text(m, "$schema").is_empty()),
        ("$ref", !text(m, "$ref").is_empty()),
        (
            "patternProperties",
            non_empty_map(m, "patternProperties").is_some(),
        ),
        ("dependencies", non_empty_map(m, "dependencies").is_some()),
        ("additionalItems", present(m, "additionalItems")),
        ("definitions", non_empty_map(m, "definitions").is_some()),
    ];
    checks
        .iter()
        .find(|(_, bad)| *bad)
        .map(|(name, _)| format!("OpenAPIV3Schema '{name}' is not supported"))
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

/// `ValidateStructural`: invariants and completeness, sorted by message as Kubernetes does.
pub(crate) fn validate_structural(path: &str, n: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    invariants(&mut errs, n, Level::Root, path);
    completeness(&mut errs, Some(n), path, path);
    errs.sort_by(|a, b| a.message.cmp(&b.message));
    errs
}

/// The exact `anyOf: [{type: integer}, {type: string}]` of int-or-string.
fn is_int_or_string_any_of(any_of: &[Value]) -> bool {
    let only_type = |v: &Value, t: &str| {
        v.as_object().is_some_and(|m| {
            m.get("type").and_then(Value::as_str) == Some(t)
                && m.iter().all(|(k, v)| k == "type" || is_zero(k, v))
        })
    };
    any_of.len() == 2 && only_type(&any_of[0], "integer") && only_type(&any_of[1], "string")
}

/// Whether a JSONSchemaProps field holds its Go zero value after decoding.
pub(crate) fn is_zero(k: &str, v: &Value) -> bool {
    match v {
        Value::Null => true,
        Value::Bool(b) => !b && k != "x-kubernetes-preserve-unknown-fields",
        Value::String(s) => {
            s.is_empty()
                && !matches!(
                    k,
                    "$ref" | "x-kubernetes-list-type" | "x-kubernetes-map-type"
                )
        }
        Value::Array(a) => a.is_empty() && matches!(k, "allOf" | "anyOf" | "oneOf" | "enum"),
        _ => false,
    }
}

fn invariants(errs: &mut Vec<FieldError>, n: &Value, lvl: Level, path: &str) {
    let Some(m) = n.as_object() else { return };
    let ty = text(m, "type");
    let items = obj_value(m, "items");
    if ty == "array" && items.is_none() {
        errs.push(FieldError::required(
            child(path, "items"),
            "must be specified",
        ));
    }
    if let Some(items) = items {
        invariants(errs, items, Level::Item, &child(path, "items"));
    }
    for (k, p) in sorted(non_empty_map(m, "properties")) {
        invariants(errs, p, Level::Field, &key(&child(path, "properties"), k));
    }
    let additional = m.get("additionalProperties").filter(|v| !v.is_null());
    if let Some(ap) = additional {
        if lvl == Level::Root {
            errs.push(FieldError::forbidden(
                child(path, "additionalProperties"),
                "must not be used at the root",
            ));
        }
        if ap.is_object() {
            invariants(errs, ap, Level::Field, &child(path, "additionalProperties"));
        }
    }
    let int_or_string = flag(m, "x-kubernetes-int-or-string");
    let preserve = flag(m, "x-kubernetes-preserve-unknown-fields");
    let embedded = flag(m, "x-kubernetes-embedded-resource");
    if int_or_string && preserve {
        errs.push(FieldError::invalid(
            child(path, "x-kubernetes-preserve-unknown-fields"),
            &Value::Bool(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if int_or_string && embedded {
        errs.push(FieldError::invalid(
            child(path, "x-kubernetes-embedded-resource"),
            &Value::Bool(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    let skip_any_of = is_int_or_string_any_of(arr(m, "anyOf"));
    let skip_first_all_of_any_of = arr(m, "allOf")
        .first()
        .and_then(Value::as_object)
        .is_some_and(|first| is_int_or_string_any_of(arr(first, "anyOf")));
    value_validation(errs, m, skip_any_of, skip_first_all_of_any_of, lvl, path);

    let check_metadata = lvl == Level::Root || embedded;
    if embedded && ty != "object" {
        if ty.is_empty() {
            errs.push(FieldError::required(
                child(path, "type"),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        } else {
            errs.push(FieldError::invalid(
                child(path, "type"),
                &Value::String(ty.into()),
                "must be object if x-kubernetes-embedded-resource is true",
            ));
        }
    } else if ty.is_empty() && !int_or_string && !preserve {
        let detail = match lvl {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errs.push(FieldError::required(child(path, "type"), detail));
    }
    if embedded && additional.is_some() {
        errs.push(FieldError::forbidden(
            child(path, "additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if lvl == Level::Root && !ty.is_empty() && ty != "object" {
        errs.push(FieldError::invalid(
            child(path, "type"),
            &Value::String(ty.into()),
            "must be object at the root",
        ));
    }
    let props = non_empty_map(m, "properties");
    for name in ["kind", "apiVersion"] {
        if let Some(p) = props.and_then(|p| p.get(name)).filter(|_| check_metadata) {
            let pt = p.as_object().map_or("", |pm| text(pm, "type"));
            if pt != "string" {
                errs.push(FieldError::invalid(
                    child(&key(&child(path, "properties"), name), "type"),
                    &Value::String(pt.into()),
                    "must be string",
                ));
            }
        }
    }
    if let Some(md) = props.and_then(|p| p.get("metadata")) {
        metadata_invariants(
            errs,
            md,
            check_metadata,
            lvl,
            &key(&child(path, "properties"), "metadata"),
        );
    }
    if embedded && !preserve && props.is_none() {
        errs.push(FieldError::required(
            child(path, "properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
}

/// The JSONSchemaProps fields a structural schema keeps (besides type, default, properties).
const STRUCTURAL_FIELDS: &[&str] = &[
    "items",
    "additionalProperties",
    "description",
    "title",
    "nullable",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
    "format",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "enum",
    "maxProperties",
    "minProperties",
    "required",
    "allOf",
    "oneOf",
    "anyOf",
    "not",
];

/// A schema-valued field (`items`, `not`) when it is an object.
fn obj_value<'a>(m: &'a Map<String, Value>, k: &str) -> Option<&'a Value> {
    m.get(k).filter(|v| v.is_object())
}

fn metadata_invariants(
    errs: &mut Vec<FieldError>,
    md: &Value,
    check_metadata: bool,
    lvl: Level,
    path: &str,
) {
    let empty = Map::new();
    let m = md.as_object().unwrap_or(&empty);
    let ty = text(m, "type");
    if check_metadata && ty != "object" {
        errs.push(FieldError::invalid(
            child(path, "type"),
            &Value::String(ty.into()),
            "must be object",
        ));
    }
    if lvl != Level::Root {
        return;
    }
    // Only name and generateName may be restricted; type and default are ignored here.
    let props = non_empty_map(m, "properties");
    let only_names = props.is_none_or(|p| {
        let has_name = p.contains_key("name");
        let has_gen = p.contains_key("generateName");
        (has_name && has_gen && p.len() == 2) || ((has_name || has_gen) && p.len() == 1)
    });
    let other = m.iter().any(|(k, v)| match k.as_str() {
        "properties" => !only_names,
        k if STRUCTURAL_FIELDS.contains(&k) => !is_zero(k, v),
        // type and default are ignored here; other keys are not kept by NewStructural.
        _ => false,
    });
    if other {
        errs.push(FieldError::forbidden(
            path,
            "must not specify anything other than name and generateName, but metadata is implicitly specified",
        ));
    }
}

/// `validateValueValidation`: nested value validations and the pattern.
fn value_validation(
    errs: &mut Vec<FieldError>,
    m: &Map<String, Value>,
    skip_any_of: bool,
    skip_first_all_of_any_of: bool,
    lvl: Level,
    path: &str,
) {
    if !skip_any_of {
        for (i, x) in arr(m, "anyOf").iter().enumerate() {
            nested(errs, x, false, lvl, &idx(&child(path, "anyOf"), i));
        }
    }
    for (i, x) in arr(m, "allOf").iter().enumerate() {
        nested(
            errs,
            x,
            skip_first_all_of_any_of && i == 0,
            lvl,
            &idx(&child(path, "allOf"), i),
        );
    }
    for (i, x) in arr(m, "oneOf").iter().enumerate() {
        nested(errs, x, false, lvl, &idx(&child(path, "oneOf"), i));
    }
    if let Some(not) = obj_value(m, "not") {
        nested(errs, not, false, lvl, &child(path, "not"));
    }
    let pattern = text(m, "pattern");
    if !pattern.is_empty() {
        if let Err(e) = goregex::compile(pattern) {
            errs.push(FieldError::invalid(
                child(path, "pattern"),
                &Value::String(pattern.into()),
                &format!("must be a valid regular expression, but isn't: {e}"),
            ));
        }
    }
}

/// `validateNestedValueValidation`: what is forbidden under allOf/anyOf/oneOf/not.
fn nested(errs: &mut Vec<FieldError>, n: &Value, skip_any_of: bool, lvl: Level, path: &str) {
    let Some(m) = n.as_object() else { return };
    value_validation(errs, m, skip_any_of, false, lvl, path);
    if let Some(items) = obj_value(m, "items") {
        nested(errs, items, false, lvl, &child(path, "items"));
    }
    for (k, p) in sorted(obj(m, "properties")) {
        nested(
            errs,
            p,
            false,
            Level::Field,
            &key(&child(path, "properties"), k),
        );
    }
    let forbid = |errs: &mut Vec<FieldError>, field: &str, detail: &str| {
        errs.push(FieldError::forbidden(child(path, field), detail));
    };
    if !text(m, "type").is_empty() {
        forbid(errs, "type", "must be empty to be structural");
    }
    match m.get("additionalProperties") {
        Some(Value::Bool(true)) | Some(Value::Object(_)) => forbid(
            errs,
            "additionalProperties",
            "must be undefined to be structural",
        ),
        _ => {}
    }
    if present(m, "default") {
        forbid(errs, "default", "must be undefined to be structural");
    }
    if !text(m, "title").is_empty() {
        forbid(errs, "title", "must be empty to be structural");
    }
    if !text(m, "description").is_empty() {
        forbid(errs, "description", "must be empty to be structural");
    }
    if flag(m, "nullable") {
        forbid(errs, "nullable", "must be false to be structural");
    }
    if flag(m, "x-kubernetes-preserve-unknown-fields") {
        forbid(
            errs,
            "x-kubernetes-preserve-unknown-fields",
            "must be false to be structural",
        );
    }
    if flag(m, "x-kubernetes-embedded-resource") {
        forbid(
            errs,
            "x-kubernetes-embedded-resource",
            "must be false to be structural",
        );
    }
    if flag(m, "x-kubernetes-int-or-string") {
        forbid(
            errs,
            "x-kubernetes-int-or-string",
            "must be false to be structural",
        );
    }
    if !arr(m, "x-kubernetes-list-map-keys").is_empty() {
        forbid(
            errs,
            "x-kubernetes-list-map-keys",
            "must be empty to be structural",
        );
    }
    if present(m, "x-kubernetes-list-type") {
        forbid(
            errs,
            "x-kubernetes-list-type",
            "must be undefined to be structural",
        );
    }
    if present(m, "x-kubernetes-map-type") {
        forbid(
            errs,
            "x-kubernetes-map-type",
            "must be undefined to be structural",
        );
    }
    if !arr(m, "x-kubernetes-validations").is_empty() {
        forbid(
            errs,
            "x-kubernetes-validations",
            "must be empty to be structural",
        );
    }
    if obj(m, "properties").is_some_and(|p| p.contains_key("metadata")) {
        errs.push(FieldError::forbidden(
            key(&child(path, "properties"), "metadata"),
            "must not be specified in a nested context",
        ));
    }
}

/// `validateStructuralCompleteness`: every property or items a value validation mentions must
/// exist in the structural part of the schema.
fn completeness(errs: &mut Vec<FieldError>, s: Option<&Value>, s_path: &str, v_path: &str) {
    let Some(m) = s.and_then(Value::as_object) else {
        return;
    };
    value_completeness(errs, m, Some(m), s_path, v_path);
}

fn value_completeness(
    errs: &mut Vec<FieldError>,
    v: &Map<String, Value>,
    s: Option<&Map<String, Value>>,
    s_path: &str,
    v_path: &str,
) {
    if let Some(not) = obj(v, "not") {
        nested_completeness(errs, not, s, s_path, &child(v_path, "not"));
    }
    for k in ["allOf", "anyOf", "oneOf"] {
        for (i, x) in arr(v, k).iter().enumerate() {
            if let Some(x) = x.as_object() {
                nested_completeness(errs, x, s, s_path, &idx(&child(v_path, k), i));
            }
        }
    }
}

fn nested_completeness(
    errs: &mut Vec<FieldError>,
    v: &Map<String, Value>,
    s: Option<&Map<String, Value>>,
    s_path: &str,
    v_path: &str,
) {
    let Some(s) = s else {
        errs.push(FieldError::required(
            s_path,
            &format!("because it is defined in {v_path}"),
        ));
        return;
    };
    value_completeness(errs, v, Some(s), s_path, v_path);
    if let Some(items) = obj(v, "items") {
        nested_completeness(
            errs,
            items,
            obj(s, "items"),
            &child(s_path, "items"),
            &child(v_path, "items"),
        );
    }
    let s_props = non_empty_map(s, "properties");
    for (k, vp) in sorted(obj(v, "properties")) {
        let Some(vp) = vp.as_object() else { continue };
        let sp_path = key(&child(s_path, "properties"), k);
        let vp_path = key(&child(v_path, "properties"), k);
        match s_props.and_then(|p| p.get(k)).and_then(Value::as_object) {
            Some(sp) => nested_completeness(errs, vp, Some(sp), &sp_path, &vp_path),
            None => errs.push(FieldError::required(
                sp_path,
                &format!("because it is defined in {vp_path}"),
            )),
        }
    }
}

/// `SchemaHas`: whether `pred` holds for the schema or any schema below it.
pub(crate) fn schema_has(n: &Value, pred: &dyn Fn(&Map<String, Value>) -> bool) -> bool {
    let Some(m) = n.as_object() else { return false };
    if pred(m) {
        return true;
    }
    match m.get("items") {
        Some(items @ Value::Object(_)) if schema_has(items, pred) => return true,
        Some(Value::Array(list)) if list.iter().any(|x| schema_has(x, pred)) => return true,
        _ => {}
    }
    for k in ["allOf", "anyOf", "oneOf"] {
        if arr(m, k).iter().any(|x| schema_has(x, pred)) {
            return true;
        }
    }
    for k in ["not", "additionalProperties", "additionalItems"] {
        if m.get(k)
            .is_some_and(|x| x.is_object() && schema_has(x, pred))
        {
            return true;
        }
    }
    for k in [
        "properties",
        "patternProperties",
        "definitions",
        "dependencies",
    ] {
        if obj(m, k).is_some_and(|p| p.values().any(|x| x.is_object() && schema_has(x, pred))) {
            return true;
        }
    }
    false
}

/// Whether the schema is not structural (conversion fails or invariants are broken).
pub(crate) fn is_non_structural(n: &Value) -> bool {
    new_structural_error(n).is_some() || !validate_structural("", n).is_empty()
}
