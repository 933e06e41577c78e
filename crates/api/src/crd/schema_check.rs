//! Validation of a CRD's `openAPIV3Schema` (`validateCustomResourceDefinitionValidation` and
//! `ValidateCustomResourceDefinitionOpenAPISchema`): the restrictions at the root when the
//! status subresource is on, the structural-schema rules, defaults that must validate and be
//! pruned, and the per-node OpenAPI v3 rules (unsupported keywords, list and map types,
//! `x-kubernetes-validations` shape). CEL rules are not compiled (capstan does not run CEL).

use serde_json::{Map, Value};

use super::algorithms::Pruner;
use super::fieldpath::valid_field_path;
use super::gofmt::{self, shown};
use super::json::{arr, flag, non_empty_map, obj, present, sorted, text};
use super::objectmeta;
use super::structural;
use super::value::{Mode, Patterns, Validator};
use crate::field::FieldError;
use crate::schema::{SchemaRef, Schemas};
use crate::validation::{child, idx, key};

/// The rules that depend on what the stored CRD already allowed (creation uses all of them).
#[derive(Debug, Clone)]
pub(crate) struct SchemaOpts {
    pub allow_defaults: bool,
    pub require_valid_property_type: bool,
    pub require_structural: bool,
    pub require_pruned_defaults: bool,
    pub require_atomic_set_type: bool,
    pub require_map_list_keys_map_set_validation: bool,
}

impl Default for SchemaOpts {
    fn default() -> Self {
        SchemaOpts {
            allow_defaults: true,
            require_valid_property_type: true,
            require_structural: true,
            require_pruned_defaults: true,
            require_atomic_set_type: true,
            require_map_list_keys_map_set_validation: true,
        }
    }
}

const OPENAPI_V3_TYPES: &[&str] = &["array", "boolean", "integer", "number", "object", "string"];
const META_FIELDS: &[&str] = &["metadata", "kind", "apiVersion"];
const VALIDATION_REASONS: &[&str] = &[
    "FieldValueDuplicate",
    "FieldValueForbidden",
    "FieldValueInvalid",
    "FieldValueRequired",
];

/// JSONSchemaProps' fields in Go struct order, with their JSON names, for the root check when
/// the status subresource is on.
const ROOT_FIELDS: &[(&str, &str)] = &[
    ("ID", "id"),
    ("Schema", "$schema"),
    ("Ref", "$ref"),
    ("Description", "description"),
    ("Type", "type"),
    ("Nullable", "nullable"),
    ("Format", "format"),
    ("Title", "title"),
    ("Default", "default"),
    ("Maximum", "maximum"),
    ("ExclusiveMaximum", "exclusiveMaximum"),
    ("Minimum", "minimum"),
    ("ExclusiveMinimum", "exclusiveMinimum"),
    ("MaxLength", "maxLength"),
    ("MinLength", "minLength"),
    ("Pattern", "pattern"),
    ("MaxItems", "maxItems"),
    ("MinItems", "minItems"),
    ("UniqueItems", "uniqueItems"),
    ("MultipleOf", "multipleOf"),
    ("Enum", "enum"),
    ("MaxProperties", "maxProperties"),
    ("MinProperties", "minProperties"),
    ("Required", "required"),
    ("Items", "items"),
    ("AllOf", "allOf"),
    ("OneOf", "oneOf"),
    ("AnyOf", "anyOf"),
    ("Not", "not"),
    ("Properties", "properties"),
    ("AdditionalProperties", "additionalProperties"),
    ("PatternProperties", "patternProperties"),
    ("Dependencies", "dependencies"),
    ("AdditionalItems", "additionalItems"),
    ("Definitions", "definitions"),
    ("ExternalDocs", "externalDocs"),
    ("Example", "example"),
    (
        "XPreserveUnknownFields",
        "x-kubernetes-preserve-unknown-fields",
    ),
    ("XEmbeddedResource", "x-kubernetes-embedded-resource"),
    ("XIntOrString", "x-kubernetes-int-or-string"),
    ("XListMapKeys", "x-kubernetes-list-map-keys"),
    ("XListType", "x-kubernetes-list-type"),
    ("XMapType", "x-kubernetes-map-type"),
    ("XValidations", "x-kubernetes-validations"),
];

const ALLOWED_AT_ROOT: &[&str] = &[
    "Description",
    "Type",
    "Format",
    "Title",
    "Maximum",
    "ExclusiveMaximum",
    "Minimum",
    "ExclusiveMinimum",
    "MaxLength",
    "MinLength",
    "Pattern",
    "MaxItems",
    "MinItems",
    "UniqueItems",
    "MultipleOf",
    "Required",
    "Items",
    "Properties",
    "ExternalDocs",
    "Example",
    "XPreserveUnknownFields",
    "XValidations",
];

/// Whether a JSONSchemaProps field holds a non-zero Go value (pointers, slices and maps are
/// non-zero when present, strings when non-empty, booleans when true).
fn field_set(m: &Map<String, Value>, json: &str) -> bool {
    match m.get(json) {
        None | Some(Value::Null) => false,
        Some(Value::String(s)) => {
            !s.is_empty()
                || matches!(
                    json,
                    "$ref" | "x-kubernetes-list-type" | "x-kubernetes-map-type"
                )
        }
        Some(Value::Bool(b)) => *b || json == "x-kubernetes-preserve-unknown-fields",
        Some(_) => true,
    }
}

/// `validateCustomResourceDefinitionValidation` for one `{openAPIV3Schema: ...}` at `path`.
pub(crate) fn validate_validation(
    validation: Option<&Value>,
    status_enabled: bool,
    opts: &SchemaOpts,
    path: &str,
) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let Some(schema) = validation
        .and_then(|v| v.get("openAPIV3Schema"))
        .filter(|s| !s.is_null())
    else {
        return errs;
    };
    let empty = Map::new();
    let m = schema.as_object().unwrap_or(&empty);
    let schema_path = child(path, "openAPIV3Schema");
    if status_enabled {
        root_with_status(&mut errs, m, &schema_path);
    }
    if flag(m, "nullable") {
        errs.push(FieldError::forbidden(
            child(&schema_path, "nullable"),
            "nullable cannot be true at the root",
        ));
    }
    let mut init_errs = Vec::new();
    if opts.require_structural {
        if let Some(e) = structural::new_structural_error(schema) {
            init_errs.push(FieldError::invalid(
                &schema_path,
                &Value::String(String::new()),
                &e,
            ));
        } else {
            let structural_errs = structural::validate_structural(&schema_path, schema);
            if !structural_errs.is_empty() {
                errs.extend(structural_errs);
            } else {
                errs.extend(validate_defaults(
                    &schema_path,
                    schema,
                    opts.require_pruned_defaults,
                ));
            }
        }
    }
    let ssv = Ssv {
        allow_defaults: opts.allow_defaults,
        disallow_reason: String::new(),
        inside_meta: false,
        require_valid_type: opts.require_valid_property_type,
    };
    openapi_schema(&mut errs, Some(schema), &schema_path, &ssv, true, opts);
    if errs.is_empty() {
        errs.extend(init_errs);
    }
    errs
}

fn root_with_status(errs: &mut Vec<FieldError>, m: &Map<String, Value>, path: &str) {
    for (go, json) in ROOT_FIELDS {
        if !field_set(m, json) {
            continue;
        }
        if *go == "Type" {
            let ty = text(m, "type");
            if ty != "object" {
                errs.push(FieldError::invalid(
                    child(path, "type"),
                    &Value::String(ty.into()),
                    "only \"object\" is allowed as the type at the root of the schema if the status subresource is enabled",
                ));
                break;
            }
            continue;
        }
        if !ALLOWED_AT_ROOT.contains(go) {
            errs.push(FieldError::invalid_shown(
                path,
                "apiextensions.JSONSchemaProps{...}",
                &format!(
                    "only {} fields are allowed at the root of the schema if the status subresource is enabled",
                    gofmt::v_strings(ALLOWED_AT_ROOT)
                ),
            ));
            break;
        }
    }
}

/// `specStandardValidatorV3` and its context.
#[derive(Clone)]
struct Ssv {
    allow_defaults: bool,
    disallow_reason: String,
    inside_meta: bool,
    require_valid_type: bool,
}

impl Ssv {
    fn forbid_defaults(&self, reason: &str) -> Ssv {
        Ssv {
            allow_defaults: false,
            disallow_reason: reason.to_string(),
            ..self.clone()
        }
    }

    fn in_meta(&self) -> Ssv {
        Ssv {
            inside_meta: true,
            ..self.clone()
        }
    }

    fn validate(&self, errs: &mut Vec<FieldError>, m: &Map<String, Value>, path: &str) {
        let ty = text(m, "type");
        if self.require_valid_type && !ty.is_empty() && !OPENAPI_V3_TYPES.contains(&ty) {
            errs.push(FieldError::not_supported(
                child(path, "type"),
                &Value::String(ty.into()),
                OPENAPI_V3_TYPES,
            ));
        }
        if present(m, "default") && !self.allow_defaults {
            let mut detail = "must not be set".to_string();
            if !self.disallow_reason.is_empty() {
                detail.push(' ');
                detail.push_str(&self.disallow_reason);
            }
            errs.push(FieldError::forbidden(child(path, "default"), &detail));
        }
        if !text(m, "id").is_empty() {
            errs.push(FieldError::forbidden(
                child(path, "id"),
                "id is not supported",
            ));
        }
        if present(m, "additionalItems") {
            errs.push(FieldError::forbidden(
                child(path, "additionalItems"),
                "additionalItems is not supported",
            ));
        }
        if non_empty_map(m, "patternProperties").is_some() {
            errs.push(FieldError::forbidden(
                child(path, "patternProperties"),
                "patternProperties is not supported",
            ));
        }
        if non_empty_map(m, "definitions").is_some() {
            errs.push(FieldError::forbidden(
                child(path, "definitions"),
                "definitions is not supported",
            ));
        }
        if present(m, "dependencies") {
            errs.push(FieldError::forbidden(
                child(path, "dependencies"),
                "dependencies is not supported",
            ));
        }
        if present(m, "$ref") {
            errs.push(FieldError::forbidden(
                child(path, "$ref"),
                "$ref is not supported",
            ));
        }
        if ty == "null" {
            errs.push(FieldError::forbidden(
                child(path, "type"),
                "type cannot be set to null, use nullable as an alternative",
            ));
        }
        if m.get("items")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
        {
            errs.push(FieldError::forbidden(
                child(path, "items"),
                "items must be a schema object and not an array",
            ));
        }
        if self.inside_meta && flag(m, "x-kubernetes-embedded-resource") {
            errs.push(FieldError::forbidden(
                child(path, "x-kubernetes-embedded-resource"),
                "must not be used inside of resource meta",
            ));
        }
    }
}

/// `ValidateCustomResourceDefinitionOpenAPISchema` (the schema part; CEL is not compiled).
fn openapi_schema(
    errs: &mut Vec<FieldError>,
    schema: Option<&Value>,
    path: &str,
    ssv: &Ssv,
    is_root: bool,
    opts: &SchemaOpts,
) {
    let Some(m) = schema.and_then(Value::as_object) else {
        return;
    };
    ssv.validate(errs, m, path);
    if flag(m, "uniqueItems") {
        errs.push(FieldError::forbidden(
            child(path, "uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    let props = non_empty_map(m, "properties");
    if let Some(ap) = m.get("additionalProperties").filter(|v| !v.is_null()) {
        if props.is_some() && (ap == &Value::Bool(false) || ap.is_object()) {
            errs.push(FieldError::forbidden(
                child(path, "additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        let sub = if ssv.inside_meta {
            ssv.forbid_defaults("inside additionalProperties applying to object metadata")
        } else {
            ssv.clone()
        };
        if ap.is_object() {
            openapi_schema(
                errs,
                Some(ap),
                &child(path, "additionalProperties"),
                &sub,
                false,
                opts,
            );
        }
    }
    for (k, p) in sorted(props) {
        let mut sub = ssv.clone();
        if (is_root || flag(m, "x-kubernetes-embedded-resource"))
            && META_FIELDS.contains(&k.as_str())
        {
            sub = sub.in_meta();
            if is_root {
                sub = sub.forbid_defaults(&format!("in top-level {k}"));
            }
        }
        openapi_schema(
            errs,
            Some(p),
            &key(&child(path, "properties"), k),
            &sub,
            false,
            opts,
        );
    }
    if let Some(not) = m.get("not").filter(|v| v.is_object()) {
        openapi_schema(errs, Some(not), &child(path, "not"), ssv, false, opts);
    }
    for k in ["allOf", "oneOf", "anyOf"] {
        for (i, x) in arr(m, k).iter().enumerate() {
            openapi_schema(errs, Some(x), &idx(&child(path, k), i), ssv, false, opts);
        }
    }
    for (k, d) in sorted(obj(m, "definitions")) {
        openapi_schema(
            errs,
            Some(d),
            &key(&child(path, "definitions"), k),
            ssv,
            false,
            opts,
        );
    }
    match m.get("items") {
        Some(items @ Value::Object(_)) => {
            openapi_schema(errs, Some(items), &child(path, "items"), ssv, false, opts)
        }
        Some(Value::Array(list)) => {
            for (i, x) in list.iter().enumerate() {
                openapi_schema(
                    errs,
                    Some(x),
                    &idx(&child(path, "items"), i),
                    ssv,
                    false,
                    opts,
                );
            }
        }
        _ => {}
    }
    for (k, d) in sorted(obj(m, "dependencies")) {
        if d.is_object() {
            openapi_schema(
                errs,
                Some(d),
                &key(&child(path, "dependencies"), k),
                ssv,
                false,
                opts,
            );
        }
    }
    extensions(errs, m, path, opts);
    validation_rules(errs, m, schema.unwrap_or(&Value::Null), path);
}

/// The `x-kubernetes-*` list and map rules of one node.
fn extensions(errs: &mut Vec<FieldError>, m: &Map<String, Value>, path: &str, opts: &SchemaOpts) {
    let ty = text(m, "type");
    let ty_value = || Value::String(ty.to_string());
    if m.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        errs.push(FieldError::invalid(
            child(path, "x-kubernetes-preserve-unknown-fields"),
            &Value::Bool(false),
            "must be true or undefined",
        ));
    }
    let map_type = m.get("x-kubernetes-map-type").and_then(Value::as_str);
    if map_type.is_some() && ty != "object" {
        let detail = "must be object if x-kubernetes-map-type is specified";
        if ty.is_empty() {
            errs.push(FieldError::required(child(path, "type"), detail));
        } else {
            errs.push(FieldError::invalid(
                child(path, "type"),
                &ty_value(),
                detail,
            ));
        }
    }
    if let Some(mt) = map_type.filter(|mt| !matches!(*mt, "atomic" | "granular")) {
        errs.push(FieldError::not_supported(
            child(path, "x-kubernetes-map-type"),
            &Value::String(mt.into()),
            &["atomic", "granular"],
        ));
    }
    let list_type = m.get("x-kubernetes-list-type").and_then(Value::as_str);
    let items = m.get("items").filter(|v| !v.is_null());
    let item_obj = items.and_then(Value::as_object);
    if list_type.is_some() && ty != "array" {
        let detail = "must be array if x-kubernetes-list-type is specified";
        if ty.is_empty() {
            errs.push(FieldError::required(child(path, "type"), detail));
        } else {
            errs.push(FieldError::invalid(
                child(path, "type"),
                &ty_value(),
                detail,
            ));
        }
    } else if opts.require_atomic_set_type && list_type == Some("set") {
        if let Some(is) = item_obj {
            let is_list_type = is.get("x-kubernetes-list-type").and_then(Value::as_str);
            let detail = "must be atomic as item of a list with x-kubernetes-list-type=set";
            match text(is, "type") {
                "array" => {
                    if let Some(lt) = is_list_type.filter(|lt| *lt != "atomic") {
                        errs.push(FieldError::invalid(
                            child(&child(path, "items"), "x-kubernetes-list-type"),
                            &Value::String(lt.into()),
                            detail,
                        ));
                    }
                }
                "object"
                    if is.get("x-kubernetes-map-type").and_then(Value::as_str)
                        != Some("atomic") =>
                {
                    // Kubernetes shows the items' list type here.
                    let shown_value =
                        is_list_type.map_or("\"null\"".to_string(), crate::field::go_quote);
                    errs.push(FieldError::invalid_shown(
                        child(&child(path, "items"), "x-kubernetes-map-type"),
                        &shown_value,
                        detail,
                    ));
                }
                _ => {}
            }
        }
    }
    if let Some(lt) = list_type.filter(|lt| !matches!(*lt, "atomic" | "set" | "map")) {
        errs.push(FieldError::not_supported(
            child(path, "x-kubernetes-list-type"),
            &Value::String(lt.into()),
            &["atomic", "set", "map"],
        ));
    }
    let keys = arr(m, "x-kubernetes-list-map-keys");
    let key_names: Vec<&str> = keys.iter().map(|k| k.as_str().unwrap_or("")).collect();
    let keys_shown = || gofmt::string_slice(Some(key_names.iter().copied()));
    if !keys.is_empty() {
        let detail = "must be map if x-kubernetes-list-map-keys is non-empty";
        match list_type {
            None => errs.push(FieldError::required(
                child(path, "x-kubernetes-list-type"),
                detail,
            )),
            Some("map") => {}
            Some(lt) => errs.push(FieldError::invalid(
                child(path, "x-kubernetes-list-type"),
                &Value::String(lt.into()),
                detail,
            )),
        }
    }
    if list_type == Some("map") {
        if keys.is_empty() {
            errs.push(FieldError::required(
                child(path, "x-kubernetes-list-map-keys"),
                "must not be empty if x-kubernetes-list-type is map",
            ));
        }
        match items {
            None => errs.push(FieldError::required(
                child(path, "items"),
                "must have a schema if x-kubernetes-list-type is map",
            )),
            Some(Value::Array(_)) => errs.push(FieldError::invalid_shown(
                child(path, "items"),
                "apiextensions.JSONSchemaPropsOrArray{...}",
                "must only have a single schema if x-kubernetes-list-type is map",
            )),
            _ => {}
        }
        if let Some(is) = item_obj {
            let item_type = text(is, "type");
            if item_type != "object" {
                errs.push(FieldError::invalid(
                    child(&child(path, "items"), "type"),
                    &Value::String(item_type.into()),
                    "must be object if parent array's x-kubernetes-list-type is map",
                ));
            } else {
                let item_props = non_empty_map(is, "properties");
                let mut seen: Vec<&str> = Vec::new();
                for k in &key_names {
                    match item_props.and_then(|p| p.get(*k)) {
                        Some(p) => {
                            let pt = p.get("type").and_then(Value::as_str).unwrap_or("");
                            if pt == "array" || pt == "object" {
                                errs.push(FieldError::invalid(
                                    child(&key(&child(&child(path, "items"), "properties"), k), "type"),
                                    &Value::String(item_type.into()),
                                    "must be a scalar type if parent array's x-kubernetes-list-type is map",
                                ));
                            }
                        }
                        None => errs.push(FieldError::invalid_shown(
                            child(path, "x-kubernetes-list-map-keys"),
                            &keys_shown(),
                            "entries must all be names of item properties",
                        )),
                    }
                    if seen.contains(k) {
                        errs.push(FieldError::invalid_shown(
                            child(path, "x-kubernetes-list-map-keys"),
                            &keys_shown(),
                            "must not contain duplicate entries",
                        ));
                    }
                    seen.push(k);
                }
            }
        }
    }
    if opts.require_map_list_keys_map_set_validation {
        map_list_keys_map_set(errs, m, path);
    }
}

/// `validateMapListKeysMapSet`: set and map list items are not nullable; map keys are required
/// or defaulted, and not nullable.
pub(crate) fn map_list_keys_map_set(
    errs: &mut Vec<FieldError>,
    m: &Map<String, Value>,
    path: &str,
) {
    let Some(is) = obj(m, "items") else { return };
    let Some(lt) = m.get("x-kubernetes-list-type").and_then(Value::as_str) else {
        return;
    };
    if lt != "set" && lt != "map" {
        return;
    }
    let items_path = child(path, "items");
    if flag(is, "nullable") {
        errs.push(FieldError::forbidden(
            child(&items_path, "nullable"),
            &format!("cannot be nullable when x-kubernetes-list-type is {lt}"),
        ));
    }
    if lt != "map" {
        return;
    }
    let required: Vec<&str> = arr(is, "required")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let props = obj(is, "properties");
    for k in arr(m, "x-kubernetes-list-map-keys")
        .iter()
        .filter_map(Value::as_str)
    {
        let Some(p) = props.and_then(|p| p.get(k)).and_then(Value::as_object) else {
            continue;
        };
        let prop_path = key(&child(&items_path, "properties"), k);
        if !required.contains(&k) && !present(p, "default") {
            errs.push(FieldError::required(
                child(&prop_path, "default"),
                "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
            ));
        }
        if flag(p, "nullable") {
            errs.push(FieldError::forbidden(
                child(&prop_path, "nullable"),
                "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
            ));
        }
    }
}

fn has_newlines(s: &str) -> bool {
    s.contains(['\n', '\r'])
}

/// The static checks of `x-kubernetes-validations` (the rules themselves are not compiled).
fn validation_rules(
    errs: &mut Vec<FieldError>,
    m: &Map<String, Value>,
    schema: &Value,
    path: &str,
) {
    for (i, rule) in arr(m, "x-kubernetes-validations").iter().enumerate() {
        let rp = idx(&child(path, "x-kubernetes-validations"), i);
        let empty = Map::new();
        let r = rule.as_object().unwrap_or(&empty);
        let (rule_text, message, message_expr, field_path) = (
            text(r, "rule"),
            text(r, "message"),
            text(r, "messageExpression"),
            text(r, "fieldPath"),
        );
        let (trimmed_rule, trimmed_msg) = (rule_text.trim(), message.trim());
        let message_value = || Value::String(message.into());
        if trimmed_rule.is_empty() {
            errs.push(FieldError::required(
                child(&rp, "rule"),
                "rule is not specified",
            ));
        } else if !message.is_empty() && trimmed_msg.is_empty() {
            errs.push(FieldError::invalid(
                child(&rp, "message"),
                &message_value(),
                "message must be non-empty if specified",
            ));
        } else if has_newlines(trimmed_msg) {
            errs.push(FieldError::invalid(
                child(&rp, "message"),
                &message_value(),
                "message must not contain line breaks",
            ));
        } else if has_newlines(trimmed_rule) && trimmed_msg.is_empty() {
            errs.push(FieldError::required(
                child(&rp, "message"),
                "message must be specified if rule contains line breaks",
            ));
        }
        if !message_expr.is_empty() && message_expr.trim().is_empty() {
            errs.push(FieldError::required(
                child(&rp, "messageExpression"),
                "messageExpression must be non-empty if specified",
            ));
        }
        if let Some(reason) = r.get("reason").and_then(Value::as_str) {
            if !VALIDATION_REASONS.contains(&reason) {
                errs.push(FieldError::not_supported(
                    child(&rp, "reason"),
                    &Value::String(reason.into()),
                    VALIDATION_REASONS,
                ));
            }
        }
        let fp_value = || Value::String(field_path.into());
        if !field_path.is_empty() && field_path.trim().is_empty() {
            errs.push(FieldError::invalid(
                child(&rp, "fieldPath"),
                &fp_value(),
                "fieldPath must be non-empty if specified",
            ));
        }
        if has_newlines(field_path) {
            errs.push(FieldError::invalid(
                child(&rp, "fieldPath"),
                &fp_value(),
                "fieldPath must not contain line breaks",
            ));
        }
        if !field_path.is_empty() && !path_valid(schema, field_path) {
            errs.push(FieldError::invalid(
                child(&rp, "fieldPath"),
                &fp_value(),
                "fieldPath must be a valid path",
            ));
        }
    }
}

fn path_valid(schema: &Value, field_path: &str) -> bool {
    if structural::new_structural_error(schema).is_some() {
        return true;
    }
    valid_field_path(field_path, schema, true).is_ok()
}

/// `defaulting.ValidateDefaults`: every default must be pruned (no unknown fields), valid as
/// metadata where it sits in an embedded resource, and valid against its own schema.
pub(crate) fn validate_defaults(
    path: &str,
    schema: &Value,
    require_pruned: bool,
) -> Vec<FieldError> {
    let Ok(arena) = Schemas::from_json_schema(schema) else {
        return Vec::new();
    };
    let Some(root) = arena.root() else {
        return Vec::new();
    };
    let patterns = Patterns::new();
    let validator = Validator {
        patterns: &patterns,
        mode: Mode::Default,
    };
    let mut errs = Vec::new();
    defaults_walk(
        &mut errs,
        &validator,
        schema,
        root,
        path,
        true,
        false,
        require_pruned,
    );
    errs
}

#[allow(clippy::too_many_arguments)]
fn defaults_walk(
    errs: &mut Vec<FieldError>,
    validator: &Validator<'_>,
    json: &Value,
    s: SchemaRef<'_>,
    path: &str,
    resource_root: bool,
    inside_meta: bool,
    require_pruned: bool,
) {
    let Some(m) = json.as_object() else { return };
    let embedded = resource_root || s.schema().embedded_resource;
    let inside_meta = inside_meta && !embedded;
    if let Some(default) = m.get("default").filter(|d| !d.is_null()) {
        let default_path = child(path, "default");
        if inside_meta {
            // Metadata defaults are checked against their own schema only.
            errs.extend(
                validator
                    .validate_root(s, default, None)
                    .field_errors(Some(&default_path)),
            );
        } else {
            check_default(
                errs,
                validator,
                default,
                s,
                &default_path,
                embedded,
                require_pruned,
            );
        }
    }
    if let (Some(items_json), Some(items)) = (m.get("items").filter(|v| v.is_object()), s.items()) {
        defaults_walk(
            errs,
            validator,
            items_json,
            items,
            &child(path, "items"),
            false,
            inside_meta,
            require_pruned,
        );
    }
    for (k, p) in sorted(non_empty_map(m, "properties")) {
        let Some(ps) = s.property(k) else { continue };
        let sub_meta = inside_meta || (embedded && META_FIELDS.contains(&k.as_str()));
        defaults_walk(
            errs,
            validator,
            p,
            ps,
            &key(&child(path, "properties"), k),
            false,
            sub_meta,
            require_pruned,
        );
    }
}

fn check_default(
    errs: &mut Vec<FieldError>,
    validator: &Validator<'_>,
    default: &Value,
    s: SchemaRef<'_>,
    path: &str,
    embedded: bool,
    require_pruned: bool,
) {
    if require_pruned {
        let mut pruned = default.clone();
        let mut pruner = Pruner::new();
        if embedded {
            pruner.prune_resource(&mut pruned, Some(s));
        } else {
            pruner.prune_value(&mut pruned, Some(s));
        }
        if &pruned != default {
            errs.push(FieldError::invalid_shown(
                path,
                &shown(default),
                "must not have unknown fields",
            ));
        }
    }
    let mut coerced = default.clone();
    let mut unknown = Vec::new();
    if let Err(e) =
        objectmeta::coerce_embedded(&mut coerced, Some(s), path, embedded, false, &mut unknown)
    {
        errs.push(e);
        return;
    }
    let mut meta_errs = Vec::new();
    objectmeta::validate_embedded(&mut meta_errs, path, default, Some(s), embedded);
    if !meta_errs.is_empty() {
        errs.extend(meta_errs);
        return;
    }
    errs.extend(
        validator
            .validate_root(s, default, None)
            .field_errors(Some(path)),
    );
}
