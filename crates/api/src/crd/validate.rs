//! Validation of CustomResourceDefinition objects (apiextensions'
//! `ValidateCustomResourceDefinition` and friends) on their v1 JSON form.
//!
//! Kubernetes validates the internal version of a CRD, into which v1 is converted first: when
//! all versions share the same schema (or subresources, printer columns, selectable fields),
//! the conversion moves it to the top level, so errors in it are reported under
//! `spec.validation.openAPIV3Schema`, `spec.subresources`, `spec.additionalPrinterColumns`
//! and `spec.selectableFields`, and `spec.version` is the first version's name. [`Spec`] is
//! that internal view.

use serde_json::{Map, Value};

use super::fieldpath::valid_field_path;
use super::gofmt;
use super::json::{arr, flag, obj, present, semantic_eq, text, varr, vtext};
use super::schema_check::{self, SchemaOpts};
use super::structural;
use crate::field::{go_quote, FieldError};
use crate::meta::At as _;
use crate::validation::admissionregistration::webhook::{parse_url, webhook_service, webhook_url};
use crate::validation::{child, idx, key, meta, names};

/// The most selectable fields a version may have.
pub const MAX_SELECTABLE_FIELDS: usize = 8;

const PRINTER_COLUMN_TYPES: &[&str] = &["boolean", "date", "integer", "number", "string"];
const PRINTER_COLUMN_FORMATS: &[&str] = &[
    "byte",
    "date",
    "date-time",
    "double",
    "float",
    "int32",
    "int64",
    "password",
];
const ACCEPTED_REVIEW_VERSIONS: &[&str] = &["v1", "v1beta1"];
/// The annotation protected groups need.
pub const API_APPROVED_ANNOTATION: &str = "api-approved.kubernetes.io";

/// One version of the internal view: per-version fields are `None` when they were folded to
/// the top level.
struct Version<'a> {
    name: &'a str,
    storage: bool,
    served: bool,
    deprecated: bool,
    deprecation_warning: Option<&'a Value>,
    schema: Option<&'a Value>,
    subresources: Option<&'a Value>,
    columns: &'a [Value],
    selectable_fields: &'a [Value],
}

/// The internal CRD spec Kubernetes validates.
struct Spec<'a> {
    group: &'a str,
    scope: &'a str,
    names: Option<&'a Map<String, Value>>,
    version: &'a str,
    versions: Vec<Version<'a>>,
    validation: Option<&'a Value>,
    subresources: Option<&'a Value>,
    columns: &'a [Value],
    selectable_fields: &'a [Value],
    conversion: Option<&'a Value>,
    preserve_unknown_fields: bool,
}

fn non_null(v: Option<&Value>) -> Option<&Value> {
    v.filter(|v| !v.is_null())
}

impl<'a> Spec<'a> {
    fn of(crd: &'a Value) -> Spec<'a> {
        static NULL: Value = Value::Null;
        let spec = crd.get("spec").unwrap_or(&NULL);
        let raw_versions = varr(spec, "versions");
        let field = |v: &'a Value, k: &str| non_null(v.get(k));
        // Per-version fields identical across versions are folded to the top level.
        let fold = |k: &str| {
            let first = raw_versions.first().and_then(|v| field(v, k));
            let same = raw_versions.iter().all(|v| semantic_eq(field(v, k), first));
            (same, first)
        };
        let (schema_same, schema) = fold("schema");
        let (sub_same, subresources) = fold("subresources");
        let (cols_same, cols) = fold("additionalPrinterColumns");
        let (sel_same, sels) = fold("selectableFields");
        let list =
            |v: Option<&'a Value>| v.and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
        let versions = raw_versions
            .iter()
            .map(|v| Version {
                name: vtext(v, "name"),
                storage: v.get("storage").and_then(Value::as_bool) == Some(true),
                served: v.get("served").and_then(Value::as_bool) == Some(true),
                deprecated: v.get("deprecated").and_then(Value::as_bool) == Some(true),
                deprecation_warning: field(v, "deprecationWarning"),
                schema: if schema_same {
                    None
                } else {
                    field(v, "schema")
                },
                subresources: if sub_same {
                    None
                } else {
                    field(v, "subresources")
                },
                columns: if cols_same {
                    &[]
                } else {
                    list(field(v, "additionalPrinterColumns"))
                },
                selectable_fields: if sel_same {
                    &[]
                } else {
                    list(field(v, "selectableFields"))
                },
            })
            .collect();
        Spec {
            group: vtext(spec, "group"),
            scope: vtext(spec, "scope"),
            names: spec.get("names").and_then(Value::as_object),
            version: raw_versions.first().map_or("", |v| vtext(v, "name")),
            versions,
            validation: if schema_same { schema } else { None },
            subresources: if sub_same { subresources } else { None },
            columns: if cols_same { list(cols) } else { &[] },
            selectable_fields: if sel_same { list(sels) } else { &[] },
            conversion: non_null(spec.get("conversion")),
            preserve_unknown_fields: spec.get("preserveUnknownFields").and_then(Value::as_bool)
                == Some(true),
        }
    }

    fn name(&self, k: &str) -> &'a str {
        self.names.map_or("", |n| text(n, k))
    }

    fn has_per_version_subresources(&self) -> bool {
        self.versions.iter().any(|v| v.subresources.is_some())
    }

    /// `getSubresourcesForVersion`.
    fn subresources_for(&self, version: &Version<'a>) -> Option<&'a Value> {
        if self.has_per_version_subresources() {
            version.subresources
        } else {
            self.subresources
        }
    }

    /// Every `openAPIV3Schema` of the spec.
    fn schemas(&self) -> impl Iterator<Item = &'a Value> + '_ {
        self.validation
            .into_iter()
            .chain(self.versions.iter().filter_map(|v| v.schema))
            .filter_map(|v| non_null(v.get("openAPIV3Schema")))
    }

    fn has_schema_with(&self, pred: &dyn Fn(&Map<String, Value>) -> bool) -> bool {
        self.schemas().any(|s| structural::schema_has(s, pred))
    }

    fn all_versions_specify_schema(&self) -> bool {
        if self.validation.is_some_and(present_schema) {
            return true;
        }
        self.versions
            .iter()
            .all(|v| v.schema.is_some_and(present_schema))
    }

    fn review_versions(&self) -> Option<&'a Value> {
        self.conversion
            .and_then(|c| c.get("webhook"))
            .and_then(|w| non_null(w.get("conversionReviewVersions")))
    }
}

fn present_schema(validation: &Value) -> bool {
    non_null(validation.get("openAPIV3Schema")).is_some()
}

fn has_status(subresources: Option<&Value>) -> bool {
    subresources.is_some_and(|s| non_null(s.get("status")).is_some())
}

fn jstr(s: &str) -> Value {
    Value::String(s.to_string())
}

/// The options `validateCustomResourceDefinitionSpec` takes.
struct Opts {
    schema: SchemaOpts,
    require_recognized_review_version: bool,
    require_immutable_names: bool,
    require_openapi_schema: bool,
    allow_invalid_ca_bundle: bool,
}

impl Opts {
    fn create() -> Opts {
        Opts {
            schema: SchemaOpts::default(),
            require_recognized_review_version: true,
            require_immutable_names: false,
            require_openapi_schema: true,
            allow_invalid_ca_bundle: true,
        }
    }

    /// Updates keep accepting what the stored CRD already had.
    fn update(old: &Value) -> Opts {
        let spec = Spec::of(old);
        let review_ok = spec.conversion.is_none()
            || spec
                .review_versions()
                .and_then(Value::as_array)
                .is_none_or(|vs| {
                    vs.is_empty()
                        || vs.iter().any(|v| {
                            v.as_str()
                                .is_some_and(|v| ACCEPTED_REVIEW_VERSIONS.contains(&v))
                        })
                });
        let invalid_types = spec.has_schema_with(&|m| {
            let t = text(m, "type");
            !t.is_empty()
                && !["string", "number", "integer", "boolean", "array", "object"].contains(&t)
        });
        let non_structural = spec.schemas().any(structural::is_non_structural);
        let unpruned = spec.schemas().any(|s| {
            structural::schema_has(s, &|m| present(m, "default"))
                && structural::new_structural_error(s).is_none()
                && structural::validate_structural("", s).is_empty()
                && schema_check::validate_defaults("", s, true)
                    .iter()
                    .any(|e| e.message.ends_with("must not have unknown fields"))
        });
        let non_atomic_set = spec.has_schema_with(&has_non_atomic_set_type);
        let invalid_map_list = spec.has_schema_with(&|m| {
            let mut errs = Vec::new();
            schema_check::map_list_keys_map_set(&mut errs, m, "");
            !errs.is_empty()
        });
        let established = is_established(old);
        Opts {
            schema: SchemaOpts {
                allow_defaults: true,
                require_valid_property_type: !invalid_types,
                require_structural: !non_structural,
                require_pruned_defaults: !unpruned,
                require_atomic_set_type: !non_atomic_set,
                require_map_list_keys_map_set_validation: !invalid_map_list,
            },
            require_recognized_review_version: review_ok,
            require_immutable_names: established,
            require_openapi_schema: spec.all_versions_specify_schema(),
            allow_invalid_ca_bundle: allow_invalid_ca_bundle(old, established),
        }
    }
}

fn has_non_atomic_set_type(m: &Map<String, Value>) -> bool {
    if m.get("x-kubernetes-list-type").and_then(Value::as_str) != Some("set") {
        return false;
    }
    let Some(is) = obj(m, "items") else {
        return false;
    };
    match text(is, "type") {
        "array" => is
            .get("x-kubernetes-list-type")
            .and_then(Value::as_str)
            .is_some_and(|t| t != "atomic"),
        "object" => is.get("x-kubernetes-map-type").and_then(Value::as_str) != Some("atomic"),
        _ => false,
    }
}

/// Whether the CRD's `Established` condition is `True`.
pub(crate) fn is_established(crd: &Value) -> bool {
    crd.get("status")
        .map(|s| varr(s, "conditions"))
        .unwrap_or(&[])
        .iter()
        .any(|c| vtext(c, "type") == "Established" && vtext(c, "status") == "True")
}

fn allow_invalid_ca_bundle(old: &Value, established: bool) -> bool {
    if !established {
        return true;
    }
    let bundle = old
        .at("/spec/conversion/webhook/clientConfig/caBundle")
        .and_then(Value::as_str)
        .unwrap_or("");
    !bundle.is_empty() && ca_bundle_error(bundle).is_some()
}

/// Validate a new CRD (after defaulting and the registry's create preparation, which sets
/// `status.storedVersions`).
pub fn validate_crd(crd: &Value) -> Vec<FieldError> {
    let spec = Spec::of(crd);
    let mut errs = Vec::new();
    crd_object_meta(&mut errs, crd, &spec);
    validate_spec(&mut errs, &spec, &Opts::create());
    status_names(&mut errs, crd);
    stored_versions(&mut errs, crd, &spec);
    api_approval(&mut errs, crd, None);
    preserve_unknown_fields(&mut errs, crd, None);
    errs
}

/// Validate an update of a CRD from `old` to `new`: ObjectMeta update rules, the spec (with
/// the rules the stored object already met), the immutable fields, and the status.
pub fn validate_crd_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let spec = Spec::of(new);
    let old_spec = Spec::of(old);
    let opts = Opts::update(old);
    let mut errs = Vec::new();
    meta::object_meta_update(
        &mut errs,
        new.get("metadata"),
        old.get("metadata"),
        "metadata",
    );
    validate_spec(&mut errs, &spec, &opts);
    if opts.require_immutable_names {
        immutable(&mut errs, spec.scope, old_spec.scope, "spec.scope");
        immutable(
            &mut errs,
            spec.name("kind"),
            old_spec.name("kind"),
            "spec.names.kind",
        );
    }
    immutable(&mut errs, spec.group, old_spec.group, "spec.group");
    immutable(
        &mut errs,
        spec.name("plural"),
        old_spec.name("plural"),
        "spec.names.plural",
    );
    status_names(&mut errs, new);
    stored_versions(&mut errs, new, &spec);
    api_approval(&mut errs, new, Some(old));
    preserve_unknown_fields(&mut errs, new, Some(old));
    errs
}

/// Validate a write to the `status` subresource of a CRD.
pub fn validate_crd_status_update(new: &Value, old: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    meta::object_meta_update(
        &mut errs,
        new.get("metadata"),
        old.get("metadata"),
        "metadata",
    );
    status_names(&mut errs, new);
    errs
}

fn immutable(errs: &mut Vec<FieldError>, new: &str, old: &str, path: &str) {
    if new != old {
        errs.push(FieldError::immutable_shown(path, &go_quote(new)));
    }
}

/// ObjectMeta with the CRD name rule: a DNS subdomain equal to `<plural>.<group>`.
fn crd_object_meta(errs: &mut Vec<FieldError>, crd: &Value, spec: &Spec<'_>) {
    let required = format!("{}.{}", spec.name("plural"), spec.group);
    let name_errs = |name: &str, prefix: bool| {
        let mut out = names::name_is_dns_subdomain(name, prefix);
        if name != required {
            out.push("must be spec.names.plural+\".\"+spec.group".to_string());
        }
        out
    };
    let md = crd.get("metadata");
    let get = |k: &str| {
        md.and_then(|m| m.get(k))
            .and_then(Value::as_str)
            .unwrap_or("")
    };
    let generate = get("generateName");
    if !generate.is_empty() {
        for msg in name_errs(generate, true) {
            errs.push(FieldError::invalid(
                "metadata.generateName",
                &jstr(generate),
                &msg,
            ));
        }
    }
    let name = get("name");
    if !name.is_empty() {
        for msg in name_errs(name, false) {
            errs.push(FieldError::invalid("metadata.name", &jstr(name), &msg));
        }
    }
    // The rest of ObjectMeta (the name rule above is the CRD's own).
    meta::object_meta(errs, md, false, names::name_is_anything, "metadata");
}

fn validate_spec(errs: &mut Vec<FieldError>, spec: &Spec<'_>, opts: &Opts) {
    if spec.group.is_empty() {
        errs.push(FieldError::required("spec.group", ""));
    } else {
        let problems = names::dns1123_subdomain(spec.group);
        if !problems.is_empty() {
            errs.push(FieldError::invalid(
                "spec.group",
                &jstr(spec.group),
                &problems.join(","),
            ));
        } else if spec.group.split('.').count() < 2 {
            errs.push(FieldError::invalid(
                "spec.group",
                &jstr(spec.group),
                "should be a domain with at least one dot",
            ));
        }
    }
    enum_string(errs, "spec.scope", spec.scope, &["Cluster", "Namespaced"]);

    let mut schema_opts = opts.schema.clone();
    if !spec.preserve_unknown_fields {
        schema_opts.require_structural = true;
    }
    let top_schema = spec.validation.is_some_and(present_schema);
    if opts.require_openapi_schema {
        if !top_schema {
            for (i, v) in spec.versions.iter().enumerate() {
                if !v.schema.is_some_and(present_schema) {
                    errs.push(FieldError::required(
                        format!("spec.versions[{i}].schema.openAPIV3Schema"),
                        "schemas are required",
                    ));
                }
            }
        }
    } else if !spec.preserve_unknown_fields && !top_schema {
        for (i, v) in spec.versions.iter().enumerate() {
            if v.served && !v.schema.is_some_and(present_schema) {
                errs.push(FieldError::required(
                    format!("spec.versions[{i}].schema.openAPIV3Schema"),
                    "because otherwise all fields are pruned",
                ));
            }
        }
    }
    if schema_opts.allow_defaults && spec.has_schema_with(&|m| present(m, "default")) {
        schema_opts.require_structural = true;
        if spec.preserve_unknown_fields {
            errs.push(FieldError::invalid(
                "spec.preserveUnknownFields",
                &Value::Bool(true),
                "must be false in order to use defaults in the schema",
            ));
        }
    }
    if spec.has_schema_with(&has_kubernetes_extensions) {
        schema_opts.require_structural = true;
    }

    let mut storage = 0;
    let mut seen: Vec<&str> = Vec::new();
    let mut unique = true;
    for (i, v) in spec.versions.iter().enumerate() {
        if v.storage {
            storage += 1;
        }
        if seen.contains(&v.name) {
            unique = false;
        } else {
            seen.push(v.name);
        }
        let vp = format!("spec.versions[{i}]");
        let problems = names::dns1035_label(v.name);
        if !problems.is_empty() {
            errs.push(FieldError::invalid(
                child(&vp, "name"),
                &jstr(v.name),
                &problems.join(","),
            ));
        }
        let status = has_status(spec.subresources_for(v));
        validate_version(errs, v, &vp, status, &schema_opts);
    }
    let versions_shown = "[]apiextensions.CustomResourceDefinitionVersion{...}";
    if !unique {
        errs.push(FieldError::invalid_shown(
            "spec.versions",
            versions_shown,
            "must contain unique version names",
        ));
    }
    if storage != 1 {
        errs.push(FieldError::invalid_shown(
            "spec.versions",
            versions_shown,
            "must have exactly one version marked as storage version",
        ));
    }
    if !spec.version.is_empty() {
        let problems = names::dns1035_label(spec.version);
        if !problems.is_empty() {
            errs.push(FieldError::invalid(
                "spec.version",
                &jstr(spec.version),
                &problems.join(","),
            ));
        }
    }
    for k in ["plural", "singular", "kind", "listKind"] {
        if spec.name(k).is_empty() {
            errs.push(FieldError::required(format!("spec.names.{k}"), ""));
        }
    }
    validate_names(errs, spec.names, "spec.names");
    let any_status =
        has_status(spec.subresources) || spec.versions.iter().any(|v| has_status(v.subresources));
    errs.extend(schema_check::validate_validation(
        spec.validation,
        any_status,
        &schema_opts,
        "spec.validation",
    ));
    validate_subresources(errs, spec.subresources, "spec.subresources");
    for (i, col) in spec.columns.iter().enumerate() {
        validate_column(errs, col, &idx("spec.additionalPrinterColumns", i));
    }
    if !spec.selectable_fields.is_empty() {
        match spec.validation {
            None => errs.push(FieldError::invalid(
                "spec.selectableFields",
                &jstr(""),
                "selectableFields may only be set when validations.schema is included",
            )),
            Some(validation) => {
                let schema = non_null(validation.get("openAPIV3Schema"));
                if let Some(e) = schema.and_then(structural::new_structural_error) {
                    errs.push(FieldError::invalid(
                        "spec.schema.openAPIV3Schema",
                        &jstr(""),
                        &e,
                    ));
                }
                validate_selectable_fields(
                    errs,
                    spec.selectable_fields,
                    schema,
                    "spec.selectableFields",
                );
            }
        }
    }
    let strategy = spec.conversion.map_or("", |c| vtext(c, "strategy"));
    if spec.conversion.is_some() && strategy != "None" && spec.preserve_unknown_fields {
        errs.push(FieldError::invalid(
            "spec.conversion.strategy",
            &jstr(strategy),
            "must be None if spec.preserveUnknownFields is true",
        ));
    }
    validate_conversion(errs, spec, opts);
}

fn has_kubernetes_extensions(m: &Map<String, Value>) -> bool {
    flag(m, "x-kubernetes-embedded-resource")
        || present(m, "x-kubernetes-preserve-unknown-fields")
        || flag(m, "x-kubernetes-int-or-string")
        || !arr(m, "x-kubernetes-list-map-keys").is_empty()
        || present(m, "x-kubernetes-list-type")
        || !arr(m, "x-kubernetes-validations").is_empty()
}

/// `validateEnumStrings` with the value required.
fn enum_string(errs: &mut Vec<FieldError>, path: &str, value: &str, accepted: &[&str]) {
    if value.is_empty() {
        errs.push(FieldError::required(path, ""));
    } else if !accepted.contains(&value) {
        errs.push(FieldError::not_supported(path, &jstr(value), accepted));
    }
}

fn validate_version(
    errs: &mut Vec<FieldError>,
    v: &Version<'_>,
    path: &str,
    status: bool,
    opts: &SchemaOpts,
) {
    for msg in deprecation_warning_errors(v.deprecated, v.deprecation_warning) {
        let shown_value = match v.deprecation_warning {
            Some(Value::String(s)) => go_quote(s),
            _ => "\"null\"".to_string(),
        };
        errs.push(FieldError::invalid_shown(
            child(path, "deprecationWarning"),
            &shown_value,
            &msg,
        ));
    }
    errs.extend(schema_check::validate_validation(
        v.schema,
        status,
        opts,
        &child(path, "schema"),
    ));
    validate_subresources(errs, v.subresources, &child(path, "subresources"));
    for (i, col) in v.columns.iter().enumerate() {
        validate_column(errs, col, &idx(&child(path, "additionalPrinterColumns"), i));
    }
    if !v.selectable_fields.is_empty() {
        match v.schema.and_then(|s| non_null(s.get("openAPIV3Schema"))) {
            None => errs.push(FieldError::invalid(
                child(path, "selectableFields"),
                &jstr(""),
                "selectableFields may only be set when version.schema.openAPIV3Schema is not included",
            )),
            Some(schema) => {
                if let Some(e) = structural::new_structural_error(schema) {
                    errs.push(FieldError::invalid(child(path, "schema.openAPIV3Schema"), &jstr(""), &e));
                }
                validate_selectable_fields(errs, v.selectable_fields, Some(schema), &child(path, "selectableFields"));
            }
        }
    }
}

/// Go's `unicode.IsPrint`, approximately: no control, format or non-space separator characters.
fn is_print(c: char) -> bool {
    if c == ' ' {
        return true;
    }
    let format = matches!(c as u32, 0xAD | 0x600..=0x605 | 0x61C | 0x6DD | 0x70F | 0x180E | 0x200B..=0x200F | 0x202A..=0x202E | 0x2060..=0x2064 | 0x2066..=0x206F | 0xFEFF | 0xFFF9..=0xFFFB);
    let private = matches!(c as u32, 0xE000..=0xF8FF | 0xF0000..=0x10FFFF);
    !c.is_control() && !c.is_whitespace() && !format && !private
}

fn deprecation_warning_errors(deprecated: bool, warning: Option<&Value>) -> Vec<String> {
    if !deprecated && warning.is_some() {
        return vec!["can only be set for deprecated versions".into()];
    }
    let Some(w) = warning.and_then(Value::as_str) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    if w.len() > 256 {
        out.push("must be <= 256 characters long".into());
    }
    if w.is_empty() {
        out.push("must not be an empty string".into());
    }
    for (i, c) in w.char_indices() {
        if !is_print(c) {
            out.push(format!(
                "must only contain printable UTF-8 characters; non-printable character found at index {i}"
            ));
            break;
        }
    }
    out
}

/// `ValidateCustomResourceDefinitionNames`.
fn validate_names(errs: &mut Vec<FieldError>, n: Option<&Map<String, Value>>, path: &str) {
    let empty = Map::new();
    let n = n.unwrap_or(&empty);
    for k in ["plural", "singular"] {
        let v = text(n, k);
        let problems = names::dns1035_label(v);
        if !v.is_empty() && !problems.is_empty() {
            errs.push(FieldError::invalid(
                child(path, k),
                &jstr(v),
                &problems.join(","),
            ));
        }
    }
    for k in ["kind", "listKind"] {
        let v = text(n, k);
        let problems = names::dns1035_label(&v.to_lowercase());
        if !v.is_empty() && !problems.is_empty() {
            errs.push(FieldError::invalid(
                child(path, k),
                &jstr(v),
                &format!(
                    "may have mixed case, but should otherwise match: {}",
                    problems.join(",")
                ),
            ));
        }
    }
    for (i, s) in arr(n, "shortNames").iter().enumerate() {
        let s = s.as_str().unwrap_or("");
        let problems = names::dns1035_label(s);
        if !problems.is_empty() {
            errs.push(FieldError::invalid(
                idx(&child(path, "shortNames"), i),
                &jstr(s),
                &problems.join(","),
            ));
        }
    }
    let (kind, list_kind) = (text(n, "kind"), text(n, "listKind"));
    if !kind.is_empty() && kind == list_kind {
        errs.push(FieldError::invalid(
            child(path, "listKind"),
            &jstr(list_kind),
            "kind and listKind may not be the same",
        ));
    }
    for (i, c) in arr(n, "categories").iter().enumerate() {
        let c = c.as_str().unwrap_or("");
        let problems = names::dns1035_label(c);
        if !problems.is_empty() {
            errs.push(FieldError::invalid(
                idx(&child(path, "categories"), i),
                &jstr(c),
                &problems.join(","),
            ));
        }
    }
}

fn status_names(errs: &mut Vec<FieldError>, crd: &Value) {
    let accepted = crd
        .get("status")
        .and_then(|s| s.get("acceptedNames"))
        .and_then(Value::as_object);
    validate_names(errs, accepted, "status.acceptedNames");
}

/// `ValidateCustomResourceDefinitionStoredVersions`.
fn stored_versions(errs: &mut Vec<FieldError>, crd: &Value, spec: &Spec<'_>) {
    let path = "status.storedVersions";
    let raw = crd
        .get("status")
        .and_then(|s| non_null(s.get("storedVersions")));
    let stored: Vec<&str> = raw
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|v| v.as_str().unwrap_or("")).collect())
        .unwrap_or_default();
    let shown_stored = gofmt::string_slice(raw.map(|_| stored.iter().copied()));
    if stored.is_empty() {
        errs.push(FieldError::invalid_shown(
            path,
            &shown_stored,
            "must have at least one stored version",
        ));
        return;
    }
    for v in &spec.versions {
        if v.storage && !stored.contains(&v.name) {
            errs.push(FieldError::invalid_shown(
                path,
                &shown_stored,
                &format!("must have the storage version {}", v.name),
            ));
        }
    }
    // The last index of each stored version not in spec.versions, in index order.
    let mut missing: Vec<(usize, &str)> = Vec::new();
    for (i, s) in stored.iter().enumerate() {
        if spec.versions.iter().any(|v| v.name == *s) {
            continue;
        }
        missing.retain(|(_, m)| m != s);
        missing.push((i, s));
    }
    missing.sort_by_key(|(i, _)| *i);
    for (i, s) in missing {
        errs.push(FieldError::invalid(
            idx(path, i),
            &jstr(s),
            "must appear in spec.versions",
        ));
    }
}

/// Whether a group needs the API approval annotation (`*.k8s.io`, `*.kubernetes.io`).
pub fn is_protected_group(group: &str) -> bool {
    group == "k8s.io"
        || group.ends_with(".k8s.io")
        || group == "kubernetes.io"
        || group.ends_with(".kubernetes.io")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Approval {
    Missing,
    Bypassed,
    Approved,
    Invalid,
}

fn approval_state(crd: &Value) -> (Approval, String, String) {
    let annotation = crd
        .at("/metadata/annotations")
        .and_then(|a| a.get(API_APPROVED_ANNOTATION))
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_string();
    let (state, reason) = if annotation.is_empty() {
        (
            Approval::Missing,
            format!("protected groups must have approval annotation {}, see https://github.com/kubernetes/enhancements/pull/1111", go_quote(API_APPROVED_ANNOTATION)),
        )
    } else if annotation.starts_with("unapproved") {
        (
            Approval::Bypassed,
            format!("not approved: {}", go_quote(&annotation)),
        )
    } else if parse_url(&annotation, true).is_ok_and(|u| !u.host.is_empty() && !u.scheme.is_empty())
    {
        (Approval::Approved, format!("approved in {annotation}"))
    } else {
        (
            Approval::Invalid,
            format!("protected groups must have approval annotation {} with either a URL or a reason starting with \"unapproved\", see https://github.com/kubernetes/enhancements/pull/1111", go_quote(API_APPROVED_ANNOTATION)),
        )
    };
    (state, reason, annotation)
}

fn api_approval(errs: &mut Vec<FieldError>, crd: &Value, old: Option<&Value>) {
    let group = crd.at("/spec/group").and_then(Value::as_str).unwrap_or("");
    if !is_protected_group(group) {
        return;
    }
    let (state, reason, annotation) = approval_state(crd);
    if old.is_some_and(|o| approval_state(o).0 == state) {
        return;
    }
    let path = key("metadata.annotations", API_APPROVED_ANNOTATION);
    match state {
        Approval::Missing => errs.push(FieldError::required(path, &reason)),
        Approval::Invalid => errs.push(FieldError::invalid(path, &jstr(&annotation), &reason)),
        Approval::Approved | Approval::Bypassed => {}
    }
}

fn preserve_unknown_fields(errs: &mut Vec<FieldError>, crd: &Value, old: Option<&Value>) {
    let preserve =
        |o: &Value| o.at("/spec/preserveUnknownFields").and_then(Value::as_bool) == Some(true);
    if old.is_some_and(preserve) {
        return;
    }
    if preserve(crd) {
        errs.push(FieldError::invalid(
            "spec.preserveUnknownFields",
            &Value::Bool(true),
            "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
        ));
    }
}

/// `validateSimpleJSONPath`.
fn simple_json_path(errs: &mut Vec<FieldError>, s: &str, path: &str) -> bool {
    if s.is_empty() {
        errs.push(FieldError::invalid(path, &jstr(s), "must not be empty"));
        false
    } else if !s.starts_with('.') {
        errs.push(FieldError::invalid(
            path,
            &jstr(s),
            "must be a simple json path starting with .",
        ));
        false
    } else {
        true
    }
}

/// `ValidateCustomResourceDefinitionSubresources`.
fn validate_subresources(errs: &mut Vec<FieldError>, sub: Option<&Value>, path: &str) {
    let Some(scale) = sub.and_then(|s| non_null(s.get("scale"))) else {
        return;
    };
    for (field, prefix, where_) in [
        ("specReplicasPath", ".spec.", ".spec"),
        ("statusReplicasPath", ".status.", ".status"),
    ] {
        let p = format!("{path}.scale.{field}");
        let v = vtext(scale, field);
        if v.is_empty() {
            errs.push(FieldError::required(p, ""));
        } else if simple_json_path(errs, v, &p) && !v.starts_with(prefix) {
            errs.push(FieldError::invalid(
                p,
                &jstr(v),
                &format!("should be a json path under {where_}"),
            ));
        }
    }
    let selector = vtext(scale, "labelSelectorPath");
    if !selector.is_empty() {
        let p = format!("{path}.scale.labelSelectorPath");
        if simple_json_path(errs, selector, &p)
            && !selector.starts_with(".spec.")
            && !selector.starts_with(".status.")
        {
            errs.push(FieldError::invalid(
                p,
                &jstr(selector),
                "should be a json path under either .spec or .status",
            ));
        }
    }
}

/// `ValidateCustomResourceColumnDefinition`.
fn validate_column(errs: &mut Vec<FieldError>, col: &Value, path: &str) {
    if vtext(col, "name").is_empty() {
        errs.push(FieldError::required(child(path, "name"), ""));
    }
    let types = PRINTER_COLUMN_TYPES.join(",");
    let ty = vtext(col, "type");
    if ty.is_empty() {
        errs.push(FieldError::required(
            child(path, "type"),
            &format!("must be one of {types}"),
        ));
    } else if !PRINTER_COLUMN_TYPES.contains(&ty) {
        errs.push(FieldError::invalid(
            child(path, "type"),
            &jstr(ty),
            &format!("must be one of {types}"),
        ));
    }
    let format = vtext(col, "format");
    if !format.is_empty() && !PRINTER_COLUMN_FORMATS.contains(&format) {
        errs.push(FieldError::invalid(
            child(path, "format"),
            &jstr(format),
            &format!("must be one of {}", PRINTER_COLUMN_FORMATS.join(",")),
        ));
    }
    let json_path = vtext(col, "jsonPath");
    if json_path.is_empty() {
        errs.push(FieldError::required(child(path, "JSONPath"), ""));
    } else {
        simple_json_path(errs, json_path, &child(path, "JSONPath"));
    }
}

/// `ValidateCustomResourceSelectableFields`.
fn validate_selectable_fields(
    errs: &mut Vec<FieldError>,
    fields: &[Value],
    schema: Option<&Value>,
    path: &str,
) {
    let mut unique: Vec<String> = Vec::new();
    let null = Value::Null;
    for (i, f) in fields.iter().enumerate() {
        let p = child(&idx(path, i), "jsonPath");
        let jp = vtext(f, "jsonPath");
        if jp.is_empty() {
            errs.push(FieldError::required(p, ""));
            continue;
        }
        let resolved = match valid_field_path(jp, schema.unwrap_or(&null), false) {
            Ok(r) => r,
            Err(e) => {
                errs.push(FieldError::invalid(
                    p,
                    &jstr(jp),
                    &format!("is an invalid path: {e}"),
                ));
                continue;
            }
        };
        if resolved.root == "metadata" {
            errs.push(FieldError::invalid(
                &p,
                &jstr(jp),
                "must not point to fields in metadata",
            ));
        }
        let allowed = resolved
            .schema
            .is_some_and(|s| matches!(vtext(s, "type"), "string" | "boolean" | "integer"));
        if !allowed {
            errs.push(FieldError::invalid(
                &p,
                &jstr(jp),
                "must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed.",
            ));
        }
        if unique.contains(&resolved.path) {
            errs.push(FieldError::duplicate(&p, &jstr(jp)));
        } else {
            unique.push(resolved.path);
        }
    }
    if unique.len() > MAX_SELECTABLE_FIELDS {
        errs.push(FieldError::too_many(
            path,
            unique.len(),
            MAX_SELECTABLE_FIELDS,
        ));
    }
}

/// `validateCustomResourceConversion` on the v1 `spec.conversion` (reported with the internal
/// field names `webhookClientConfig` and `conversionReviewVersions`).
fn validate_conversion(errs: &mut Vec<FieldError>, spec: &Spec<'_>, opts: &Opts) {
    let Some(conversion) = spec.conversion else {
        return;
    };
    let strategy = vtext(conversion, "strategy");
    enum_string(
        errs,
        "spec.conversion.strategy",
        strategy,
        &["None", "Webhook"],
    );
    let client_config = conversion
        .get("webhook")
        .and_then(|w| non_null(w.get("clientConfig")));
    let review = spec.review_versions();
    if strategy == "Webhook" {
        match client_config {
            None => errs.push(FieldError::required(
                "spec.conversion.webhookClientConfig",
                "required when strategy is set to Webhook",
            )),
            Some(cc) => {
                let url = non_null(cc.get("url"));
                let service = non_null(cc.get("service"));
                match (url, service) {
                    (Some(_), Some(_)) | (None, None) => errs.push(FieldError::required(
                        "spec.conversion.webhookClientConfig",
                        "exactly one of url or service is required",
                    )),
                    (Some(u), None) => webhook_url(
                        errs,
                        u.as_str().unwrap_or(""),
                        "spec.conversion.webhookClientConfig.url",
                    ),
                    (None, Some(s)) => {
                        webhook_service(errs, s, "spec.conversion.webhookClientConfig.service")
                    }
                }
                let bundle = vtext(cc, "caBundle");
                if !bundle.is_empty() && !opts.allow_invalid_ca_bundle {
                    if let Some(e) = ca_bundle_error(bundle) {
                        errs.push(FieldError::invalid_shown(
                            "spec.conversion.webhookClientConfig.caBundle",
                            &go_bytes(&decode_base64(bundle).unwrap_or_default()),
                            &e,
                        ));
                    }
                }
            }
        }
        review_versions(
            errs,
            review,
            opts.require_recognized_review_version,
            "spec.conversion.conversionReviewVersions",
        );
    } else {
        if client_config.is_some() {
            errs.push(FieldError::forbidden(
                "spec.conversion.webhookClientConfig",
                "should not be set when strategy is not set to Webhook",
            ));
        }
        if review
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
        {
            errs.push(FieldError::forbidden(
                "spec.conversion.conversionReviewVersions",
                "should not be set when strategy is not set to Webhook",
            ));
        }
    }
}

fn review_versions(
    errs: &mut Vec<FieldError>,
    versions: Option<&Value>,
    require_recognized: bool,
    path: &str,
) {
    let list: Vec<&str> = versions
        .and_then(Value::as_array)
        .map(|a| a.iter().map(|v| v.as_str().unwrap_or("")).collect())
        .unwrap_or_default();
    if list.is_empty() {
        errs.push(FieldError::required(path, ""));
        return;
    }
    let mut seen: Vec<&str> = Vec::new();
    let mut accepted = false;
    for (i, v) in list.iter().enumerate() {
        if seen.contains(v) {
            errs.push(FieldError::invalid(
                idx(path, i),
                &jstr(v),
                "duplicate version",
            ));
            continue;
        }
        seen.push(v);
        for msg in names::dns1035_label(v) {
            errs.push(FieldError::invalid(idx(path, i), &jstr(v), &msg));
        }
        accepted |= ACCEPTED_REVIEW_VERSIONS.contains(v);
    }
    if require_recognized && !accepted {
        errs.push(FieldError::invalid_shown(
            path,
            &gofmt::string_slice(Some(list.iter().copied())),
            &format!(
                "must include at least one of {}",
                ACCEPTED_REVIEW_VERSIONS.join(", ")
            ),
        ));
    }
}

fn decode_base64(s: &str) -> Option<Vec<u8>> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.decode(s).ok()
}

/// `%#v` of a `[]byte`.
fn go_bytes(b: &[u8]) -> String {
    let body: Vec<String> = b.iter().map(|x| format!("0x{x:x}")).collect();
    format!("[]byte{{{}}}", body.join(", "))
}

/// Why client-go could not load a CA bundle (base64 of PEM data), if it could not. PEM blocks
/// are checked; certificates themselves are not parsed.
pub(crate) fn ca_bundle_error(bundle_b64: &str) -> Option<String> {
    let data = decode_base64(bundle_b64)?;
    let text = String::from_utf8_lossy(&data);
    let mut rest: &str = &text;
    let mut any_cert = false;
    let mut bad_block = false;
    while let Some(start) = rest.find("-----BEGIN ") {
        let after = &rest[start + 11..];
        let Some(label_end) = after.find("-----") else {
            bad_block = true;
            break;
        };
        let label = &after[..label_end];
        let end_marker = format!("-----END {label}-----");
        let Some(end) = after.find(&end_marker) else {
            bad_block = true;
            break;
        };
        if label == "CERTIFICATE" {
            any_cert = true;
        }
        rest = &after[end + end_marker.len()..];
    }
    if any_cert {
        return None;
    }
    let reason = if bad_block || !text.contains("-----BEGIN ") {
        "unable to parse bytes as PEM block"
    } else {
        "no valid certificate authority data seen"
    };
    Some(format!("unable to load root certificates: {reason}"))
}
