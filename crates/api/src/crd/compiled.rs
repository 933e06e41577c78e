//! One served version of a CRD, compiled once: the schemas, pruned defaults, compiled
//! patterns, printer columns, selectable fields and subresources, with what the API server
//! does to custom resources of that version (prune, default, validate, print, select).

use std::time::SystemTime;

use serde_json::{json, Map, Value};

use super::algorithms::{
    apply_defaults, prune_nulls, validate_list_sets_and_maps, Defaults, Pruner,
};
use super::gofmt;
use super::goregex;
use super::json::{varr, vtext};
use super::jsonpath::{print_value, JsonPath};
use super::objectmeta;
use super::value::{Mode, Patterns, Validator};
use crate::field::FieldError;
use crate::meta::At as _;
use crate::schema::{ref_name, SchemaId, SchemaRef, Schemas, OBJECT_META};
use crate::table::duration::{human_duration, parse_rfc3339, system_nanos, timestamp};
use crate::validation::{meta, names};

const ROOT: &str = "capstan.crd.Root";
const TYPED: &str = "capstan.crd.Typed";
const REF_PREFIX: &str = "#/$defs/";

/// A printer column of a version's Table (`TableColumnDefinition`), with its JSONPath.
#[derive(Debug, Clone, PartialEq)]
pub struct PrinterColumn {
    pub name: String,
    /// `integer`, `number`, `string`, `boolean` or `date`.
    pub type_: String,
    pub format: String,
    pub description: String,
    pub priority: i64,
    /// The column's JSONPath (`.metadata.name` for the Name column).
    pub json_path: String,
}

/// The scale subresource's paths.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScaleSpec {
    pub spec_replicas_path: String,
    pub status_replicas_path: String,
    pub label_selector_path: Option<String>,
}

/// One version of a CRD, ready to serve.
#[derive(Debug)]
pub struct CompiledVersion {
    group: String,
    version: String,
    kind: String,
    namespaced: bool,
    schemas: Schemas,
    /// The version's `openAPIV3Schema` as written (validation, pruning, defaulting).
    root: Option<SchemaId>,
    /// The same with `apiVersion`, `kind` and `metadata` (ObjectMeta) declared, at the root
    /// and in embedded resources (server-side apply).
    typed: SchemaId,
    defaults: Defaults,
    patterns: Patterns,
    preserve_unknown_fields: bool,
    columns: Vec<PrinterColumn>,
    /// The parsed path of each column after Name.
    column_paths: Vec<JsonPath>,
    /// Selectable field names (no leading dot) and their parsed paths.
    selectable_names: Vec<String>,
    selectable_paths: Vec<Option<JsonPath>>,
    scale: Option<ScaleSpec>,
    status: bool,
}

/// The description of an ObjectMeta field, from the built-in schema.
fn object_meta_description(field: &str) -> String {
    Schemas::builtin()
        .definition(OBJECT_META)
        .and_then(|m| m.property(field))
        .and_then(|p| p.schema().description.as_deref().map(str::to_string))
        .unwrap_or_default()
}

/// ObjectMeta's definition and every definition it refers to, from the built-in ones, with
/// opaque objects (FieldsV1) marked as holding any JSON.
fn object_meta_definitions() -> Map<String, Value> {
    let all = &crate::schema::builtin_definitions().definitions;
    let mut out = Map::new();
    let mut todo = vec![OBJECT_META.to_string()];
    while let Some(name) = todo.pop() {
        if out.contains_key(&name) {
            continue;
        }
        let Some(def) = all.get(&name) else { continue };
        let mut def = def.clone();
        collect_refs(&def, &mut todo);
        mark_opaque(&mut def);
        out.insert(name, def);
    }
    out
}

fn collect_refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str) {
                out.push(ref_name(r).to_string());
            }
            m.values().for_each(|x| collect_refs(x, out));
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, out)),
        _ => {}
    }
}

/// Objects without properties, additionalProperties or items take any JSON (RawExtension,
/// FieldsV1), as their Go decoders do.
fn mark_opaque(def: &mut Value) {
    let Some(m) = def.as_object_mut() else { return };
    let is_object = matches!(m.get("type").and_then(Value::as_str), None | Some("object"));
    if is_object
        && !m.contains_key("properties")
        && !m.contains_key("additionalProperties")
        && !m.contains_key("items")
        && !m.contains_key("$ref")
        && !m.contains_key("allOf")
        && !m.contains_key("oneOf")
        && !m.contains_key("anyOf")
    {
        m.insert(
            "x-kubernetes-preserve-unknown-fields".into(),
            Value::Bool(true),
        );
    }
}

/// The schema with the implicit TypeMeta and ObjectMeta declared at the root and in every
/// embedded resource.
fn typed_schema(schema: &Value, resource: bool) -> Value {
    let mut out = schema.clone();
    let Some(m) = out.as_object_mut() else {
        return out;
    };
    let embedded = resource
        || m.get("x-kubernetes-embedded-resource")
            .and_then(Value::as_bool)
            == Some(true);
    let rewrite = |v: &mut Value| *v = typed_schema(v, false);
    if let Some(Value::Object(props)) = m.get_mut("properties") {
        props.values_mut().for_each(rewrite);
    }
    for k in ["items", "additionalProperties"] {
        if let Some(v @ Value::Object(_)) = m.get_mut(k) {
            rewrite(v);
        }
    }
    if embedded {
        let props = m
            .entry("properties")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Some(props) = props.as_object_mut() {
            for k in ["apiVersion", "kind"] {
                props.entry(k).or_insert_with(|| json!({"type": "string"}));
            }
            props.insert(
                "metadata".into(),
                json!({"$ref": format!("{REF_PREFIX}{OBJECT_META}")}),
            );
        }
        m.entry("type")
            .or_insert_with(|| Value::String("object".into()));
    }
    out
}

/// The spec of the CRD's version `version`.
fn find_version<'a>(crd: &'a Value, version: &str) -> Option<&'a Value> {
    crd.get("spec")
        .map(|s| varr(s, "versions"))
        .unwrap_or(&[])
        .iter()
        .find(|v| vtext(v, "name") == version)
}

impl CompiledVersion {
    /// Compile version `version` of the CRD (v1 JSON). Fails when the version does not exist or
    /// its schema cannot be built (a CRD that passed validation always compiles).
    pub fn compile(crd: &Value, version: &str) -> Result<CompiledVersion, String> {
        let spec = crd
            .get("spec")
            .ok_or("the CustomResourceDefinition has no spec")?;
        let v = find_version(crd, version).ok_or_else(|| {
            format!("version {version} not found in the CustomResourceDefinition")
        })?;
        let names_of = |k: &str| {
            let accepted = crd
                .at(&format!("/status/acceptedNames/{k}"))
                .and_then(Value::as_str)
                .unwrap_or("");
            if accepted.is_empty() {
                spec.at(&format!("/names/{k}"))
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_string()
            } else {
                accepted.to_string()
            }
        };
        let schema = v.at("/schema/openAPIV3Schema").filter(|s| !s.is_null());
        let mut defs = object_meta_definitions();
        if let Some(s) = schema {
            defs.insert(ROOT.into(), s.clone());
        }
        defs.insert(
            TYPED.into(),
            typed_schema(
                schema.unwrap_or(
                    &json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
                ),
                true,
            ),
        );
        let schemas = Schemas::from_definitions(defs.iter().map(|(k, v)| (k.as_str(), v)))
            .map_err(|e| format!("the schema of version {version} cannot be built: {e}"))?;
        let root = schemas.definition(ROOT).map(|r| r.id());
        let typed = schemas
            .definition(TYPED)
            .map(|r| r.id())
            .ok_or("the typed schema is missing")?;
        let patterns = compile_patterns(&schemas);
        let defaults = root
            .map(|r| collect_defaults(schemas.get(r)))
            .unwrap_or_default();
        let sub = v.get("subresources").filter(|s| !s.is_null());
        let scale = sub
            .and_then(|s| s.get("scale"))
            .filter(|s| !s.is_null())
            .map(|s| ScaleSpec {
                spec_replicas_path: vtext(s, "specReplicasPath").to_string(),
                status_replicas_path: vtext(s, "statusReplicasPath").to_string(),
                label_selector_path: s
                    .get("labelSelectorPath")
                    .and_then(Value::as_str)
                    .map(str::to_string),
            });
        let status = sub
            .and_then(|s| s.get("status"))
            .is_some_and(|s| !s.is_null());
        let (columns, column_paths) = printer_columns(varr(v, "additionalPrinterColumns"));
        let selectable_fields = varr(v, "selectableFields");
        let selectable_names = selectable_fields
            .iter()
            .map(|f| vtext(f, "jsonPath").trim_start_matches('.').to_string())
            .collect();
        let selectable_paths = selectable_fields
            .iter()
            .map(|f| JsonPath::parse_field(vtext(f, "jsonPath")).ok())
            .collect();
        Ok(CompiledVersion {
            group: vtext(spec, "group").to_string(),
            version: version.to_string(),
            kind: names_of("kind"),
            namespaced: vtext(spec, "scope") == "Namespaced",
            schemas,
            root,
            typed,
            defaults,
            patterns,
            preserve_unknown_fields: spec.get("preserveUnknownFields").and_then(Value::as_bool)
                == Some(true),
            columns,
            column_paths,
            selectable_names,
            selectable_paths,
            scale,
            status,
        })
    }

    /// The structural schema with the implicit `apiVersion`, `kind` and `metadata` (ObjectMeta,
    /// with its own list types) at the root and in embedded resources: what server-side apply
    /// walks for list and map types.
    pub fn schema(&self) -> SchemaRef<'_> {
        self.schemas.get(self.typed)
    }

    /// The version's `openAPIV3Schema` exactly as written, if it has one.
    pub fn validation_schema(&self) -> Option<SchemaRef<'_>> {
        self.root.map(|r| self.schemas.get(r))
    }

    pub fn group(&self) -> &str {
        &self.group
    }

    pub fn version(&self) -> &str {
        &self.version
    }

    pub fn kind(&self) -> &str {
        &self.kind
    }

    pub fn namespaced(&self) -> bool {
        self.namespaced
    }

    /// Whether the `status` subresource is on.
    pub fn has_status(&self) -> bool {
        self.status
    }

    /// The scale subresource's paths, when it is on.
    pub fn scale(&self) -> Option<&ScaleSpec> {
        self.scale.as_ref()
    }

    /// The error Kubernetes' decoder gives for this body, if any: `metadata` (at the root or in
    /// an embedded resource) that does not decode as ObjectMeta, or an embedded resource's
    /// `apiVersion`/`kind` that is not a string. The API server answers 400 with it.
    pub fn decode_error(&self, obj: &Value) -> Option<String> {
        if let Some(md) = obj.get("metadata") {
            if let Some(e) = objectmeta::decode_error(md) {
                return Some(e);
            }
        }
        let mut copy = obj.clone();
        let mut unknown = Vec::new();
        objectmeta::coerce_embedded(
            &mut copy,
            self.validation_schema(),
            "",
            false,
            false,
            &mut unknown,
        )
        .err()
        .map(|e| e.message)
    }

    /// What decoding a custom resource does beyond JSON: unknown fields are pruned (not when
    /// the CRD preserves unknown fields), nulls the schema neither allows nor defaults are
    /// dropped, and ObjectMeta (the root's and embedded resources') keeps only known fields.
    /// Returns the unknown fields' paths for `fieldValidation=Strict|Warn` (`metadata.foo`,
    /// then `spec.bar` sorted, then embedded metadata). Fields of the wrong type in metadata
    /// are dropped (see [`CompiledVersion::decode_error`] to reject them instead).
    pub fn prune(&self, obj: &mut Value) -> Vec<String> {
        let mut unknown = Vec::new();
        if let Some(md) = obj.get_mut("metadata") {
            let mut found = objectmeta::normalize(md, true);
            found.sort();
            unknown.extend(found.into_iter().map(|p| format!("metadata.{p}")));
        }
        let root = self.validation_schema();
        if !self.preserve_unknown_fields {
            let mut pruner = Pruner::new();
            pruner.prune_resource(obj, root);
            unknown.extend(pruner.unknown);
            prune_nulls(obj, root, &self.defaults);
        }
        let mut embedded = Vec::new();
        let _ = objectmeta::coerce_embedded(obj, root, "", false, true, &mut embedded);
        embedded.sort();
        unknown.extend(embedded);
        unknown
    }

    /// Apply the schema's defaults (after pruning; on reads and writes).
    pub fn default(&self, obj: &mut Value) {
        apply_defaults(obj, self.validation_schema(), &self.defaults);
    }

    fn validator(&self) -> Validator<'_> {
        Validator {
            patterns: &self.patterns,
            mode: Mode::CustomResource,
        }
    }

    /// `ValidateTypeMeta`: kind and apiVersion must be this version's.
    fn type_meta(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let kind = vtext(obj, "kind");
        if kind != self.kind {
            errs.push(FieldError::invalid(
                "kind",
                &Value::String(kind.into()),
                &format!("must be {}", self.kind),
            ));
        }
        let api_version = vtext(obj, "apiVersion");
        let want = format!("{}/{}", self.group, self.version);
        if api_version != want {
            errs.push(FieldError::invalid(
                "apiVersion",
                &Value::String(api_version.into()),
                &format!("must be {want}"),
            ));
        }
        errs
    }

    /// Validate a custom resource on create (`old` = `None`) or update: TypeMeta, ObjectMeta,
    /// the schema (ratcheting unchanged parts on update), the scale paths, embedded resources
    /// and list-type uniqueness. `x-kubernetes-validations` (CEL) rules are not evaluated.
    pub fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<FieldError> {
        let mut errs = self.type_meta(obj);
        if errs.is_empty() {
            match old {
                None => meta::object_meta(
                    &mut errs,
                    obj.get("metadata"),
                    self.namespaced,
                    names::name_is_dns_subdomain,
                    "metadata",
                ),
                Some(o) => meta::object_meta_update(
                    &mut errs,
                    obj.get("metadata"),
                    o.get("metadata"),
                    "metadata",
                ),
            }
            if let Some(root) = self.validation_schema() {
                errs.extend(
                    self.validator()
                        .validate_root(root, obj, old)
                        .field_errors(None),
                );
            }
            self.scale_spec(&mut errs, obj);
            self.scale_status(&mut errs, obj);
        }
        let root = self.validation_schema();
        objectmeta::validate_embedded(&mut errs, "", obj, root, false);
        if let (Some(root), Some(map)) = (root, obj.as_object()) {
            let old_ok = old
                .and_then(Value::as_object)
                .is_none_or(|o| validate_list_sets_and_maps("", root, o).is_empty());
            if old_ok {
                errs.extend(validate_list_sets_and_maps("", root, map));
            }
        }
        errs
    }

    /// Validate a write to the `status` subresource: TypeMeta, ObjectMeta update rules, the
    /// status against the schema's `status` property (no ratcheting, paths under `status`),
    /// the scale status paths and list-type uniqueness (unless the old object broke it).
    pub fn validate_status(&self, obj: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = self.type_meta(obj);
        if errs.is_empty() {
            meta::object_meta_update(
                &mut errs,
                obj.get("metadata"),
                old.get("metadata"),
                "metadata",
            );
            let status_schema = self.validation_schema().and_then(|r| r.property("status"));
            if let (Some(status), Some(s)) = (obj.get("status"), status_schema) {
                errs.extend(
                    self.validator()
                        .validate_root(s, status, None)
                        .field_errors(Some("status")),
                );
            }
            self.scale_status(&mut errs, obj);
        }
        if let (Some(root), Some(map), Some(old_map)) =
            (self.validation_schema(), obj.as_object(), old.as_object())
        {
            let new_errs = validate_list_sets_and_maps("", root, map);
            if !new_errs.is_empty() && validate_list_sets_and_maps("", root, old_map).is_empty() {
                errs.extend(new_errs);
            }
        }
        errs
    }

    fn scale_spec(&self, errs: &mut Vec<FieldError>, obj: &Value) {
        let Some(scale) = &self.scale else { return };
        replicas_check(errs, obj, &scale.spec_replicas_path);
    }

    fn scale_status(&self, errs: &mut Vec<FieldError>, obj: &Value) {
        let Some(scale) = &self.scale else { return };
        replicas_check(errs, obj, &scale.status_replicas_path);
        if let Some(path) = &scale.label_selector_path {
            if let Err(e) = nested(obj, path, "string", Value::is_string) {
                errs.push(FieldError::invalid(path, &Value::String(String::new()), &e));
            }
        }
    }

    /// The Table's columns: Name, then the version's additional printer columns (or Age when
    /// it has none).
    pub fn columns(&self) -> &[PrinterColumn] {
        &self.columns
    }

    /// A Table row's cells for `obj` at `now`: the name, then each column's value (`null` when
    /// missing; `date` columns as the age Kubernetes prints, e.g. `5m`).
    pub fn cells(&self, obj: &Value, now: SystemTime) -> Vec<Value> {
        let mut cells = Vec::with_capacity(self.columns.len());
        cells.push(Value::String(crate::meta::name(obj).to_string()));
        let now = system_nanos(now);
        for (col, path) in self.columns[1..].iter().zip(&self.column_paths) {
            let value = path.first(obj);
            cells.push(match value {
                None => Value::Null,
                Some(v) if col.type_ == "string" => Value::String(print_value(&v)),
                Some(v) => cell(&col.type_, &v, now),
            });
        }
        cells
    }

    /// The selectable fields (without the leading dot), usable in field selectors besides
    /// `metadata.name` (and `metadata.namespace` for namespaced resources).
    pub fn selectable_fields(&self) -> &[String] {
        &self.selectable_names
    }

    /// The value of a field-selector field for `obj`, printed as Go's `fmt.Sprint` does
    /// (`""` when missing); `None` for a field that is not selectable.
    pub fn field_value(&self, obj: &Value, path: &str) -> Option<String> {
        match path {
            "metadata.name" => return Some(crate::meta::name(obj).to_string()),
            "metadata.namespace" if self.namespaced => {
                return Some(crate::meta::namespace(obj).to_string())
            }
            _ => {}
        }
        let i = self.selectable_names.iter().position(|n| n == path)?;
        let value = self.selectable_paths[i].as_ref().and_then(|p| p.first(obj));
        Some(match value.as_deref() {
            None | Some(Value::Null) => String::new(),
            Some(v) => gofmt::v(v),
        })
    }
}

/// The value at a scale path must be an int64 within 0..=MaxInt32.
fn replicas_check(errs: &mut Vec<FieldError>, obj: &Value, path: &str) {
    match nested(obj, path, "int64", |v| {
        v.as_i64().is_some() && v.as_number().is_some_and(gofmt::is_int)
    }) {
        Err(e) => errs.push(FieldError::invalid(path, &Value::from(0), &e)),
        Ok(Some(v)) => {
            let n = v.as_i64().unwrap_or(0);
            if n < 0 {
                errs.push(FieldError::invalid(
                    path,
                    &Value::from(n),
                    "should be a non-negative integer",
                ));
            } else if n > i64::from(i32::MAX) {
                errs.push(FieldError::invalid(
                    path,
                    &Value::from(n),
                    &format!("should be less than or equal to {}", i32::MAX),
                ));
            }
        }
        Ok(None) => {}
    }
}

/// `unstructured.NestedInt64`/`NestedString` at a `.a.b` path: `Ok(None)` when missing, an
/// accessor error when something on the way has the wrong type.
fn nested<'a>(
    obj: &'a Value,
    path: &str,
    want: &str,
    ok: impl Fn(&Value) -> bool,
) -> Result<Option<&'a Value>, String> {
    let fields: Vec<&str> = path.trim_start_matches('.').split('.').collect();
    let mut cur = obj;
    for (i, f) in fields.iter().enumerate() {
        match cur {
            Value::Null => return Ok(None),
            Value::Object(m) => match m.get(*f) {
                Some(v) => cur = v,
                None => return Ok(None),
            },
            other => {
                return Err(format!(
                    ".{} accessor error: {} is of the type {}, expected map[string]interface{{}}",
                    fields[..=i].join("."),
                    gofmt::v(other),
                    gofmt::type_name(other)
                ))
            }
        }
    }
    if ok(cur) {
        Ok(Some(cur))
    } else {
        Err(format!(
            ".{} accessor error: {} is of the type {}, expected {want}",
            fields.join("."),
            gofmt::v(cur),
            gofmt::type_name(cur)
        ))
    }
}

/// `cellForJSONValue` for a non-string column.
fn cell(type_: &str, v: &Value, now: i128) -> Value {
    match (type_, v) {
        ("integer", Value::Number(n)) => match n.as_i64().filter(|_| gofmt::is_int(n)) {
            Some(i) => Value::from(i),
            None => Value::from(n.as_f64().unwrap_or(0.0) as i64),
        },
        ("number", Value::Number(n)) => {
            let f = n.as_f64().unwrap_or(0.0);
            // Go writes float64(5) as 5.
            if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 {
                Value::from(f as i64)
            } else {
                Value::from(f)
            }
        }
        ("boolean", Value::Bool(b)) => Value::Bool(*b),
        ("date", Value::String(s)) => {
            if s.is_empty() {
                return Value::String("<unknown>".into());
            }
            if parse_rfc3339(s).is_none() {
                return Value::String("<invalid>".into());
            }
            match timestamp(Some(v)) {
                Some(t) => Value::String(human_duration(now - t)),
                None => Value::String("<unknown>".into()),
            }
        }
        _ => Value::Null,
    }
}

/// The Table columns of a version: Name, then its printer columns or the default Age.
fn printer_columns(defs: &[Value]) -> (Vec<PrinterColumn>, Vec<JsonPath>) {
    let mut columns = vec![PrinterColumn {
        name: "Name".into(),
        type_: "string".into(),
        format: "name".into(),
        description: object_meta_description("name"),
        priority: 0,
        json_path: ".metadata.name".into(),
    }];
    let age = [json!({
        "name": "Age",
        "type": "date",
        "description": object_meta_description("creationTimestamp"),
        "jsonPath": ".metadata.creationTimestamp",
    })];
    let defs = if defs.is_empty() { &age[..] } else { defs };
    let mut paths = Vec::with_capacity(defs.len());
    for d in defs {
        let jp = vtext(d, "jsonPath");
        // Kubernetes keeps the columns before one whose path does not parse, and no more.
        let Ok(path) = JsonPath::parse_field(jp) else {
            break;
        };
        let description = match vtext(d, "description") {
            "" => format!("Custom resource definition column (in JSONPath format): {jp}"),
            text => text.to_string(),
        };
        columns.push(PrinterColumn {
            name: vtext(d, "name").into(),
            type_: vtext(d, "type").into(),
            format: vtext(d, "format").into(),
            description,
            priority: d.get("priority").and_then(Value::as_i64).unwrap_or(0),
            json_path: jp.into(),
        });
        paths.push(path);
    }
    (columns, paths)
}

/// Compile every `pattern` in the arena once.
fn compile_patterns(schemas: &Schemas) -> Patterns {
    let mut out = Patterns::new();
    for id in 0..schemas.len() as SchemaId {
        let node = schemas.get(id);
        if let Some(p) = node
            .schema()
            .validation
            .as_deref()
            .and_then(|v| v.pattern.as_deref())
        {
            if !p.is_empty() {
                out.insert(id, goregex::compile(p));
            }
        }
    }
    out
}

/// The defaults of the main chain below `root`, pruned against their own schema
/// (`PruneDefaults`); nulls are no defaults.
fn collect_defaults(root: SchemaRef<'_>) -> Defaults {
    let mut out = Defaults::new();
    let mut stack = vec![root];
    let mut seen = std::collections::HashSet::new();
    while let Some(s) = stack.pop() {
        if !seen.insert(s.id()) {
            continue;
        }
        if let Some(d) = s.schema().default.as_ref().filter(|d| !d.is_null()) {
            let mut pruned = d.clone();
            let mut pruner = Pruner::new();
            let embedded = s.schema().embedded_resource;
            if embedded {
                pruner.prune_resource(&mut pruned, Some(s));
            } else {
                pruner.prune_value(&mut pruned, Some(s));
            }
            let mut unknown = Vec::new();
            let _ =
                objectmeta::coerce_embedded(&mut pruned, Some(s), "", embedded, true, &mut unknown);
            out.insert(s.id(), pruned);
        }
        stack.extend(
            s.schema()
                .properties
                .iter()
                .map(|(_, id)| s.schemas().get(id)),
        );
        stack.extend(s.items());
        stack.extend(s.additional_properties());
    }
    out
}
